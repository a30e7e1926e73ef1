// Executor tests: hybrid training vs the serial references, replica bit-identity per codec,
// modeled timing vs the predictor, metrics definitions, validation and stall errors.
#include "schedule/executor.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <cstdio>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/model/reference_trainer.h"
#include "schedule/generators.h"
#include "schedule/metrics.h"

namespace rp::schedule {
namespace {

using ::testing::HasSubstr;

struct RunSetup {
  ScheduleKind kind = ScheduleKind::kOneFOneB;
  int dp = 2, pp = 3, tp = 2, m = 4, v = 1;
};

// Creates an executor for `o` and runs it; the first error of either.
absl::StatusOr<RunResult> CreateAndRun(const ExecutorOptions& o) {
  absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
  if (!ex.ok()) return ex.status();
  return (*ex)->Run();
}

ExecutorOptions MakeOptions(const RunSetup& s, int steps) {
  PipelineOptions po{.num_ranks = s.pp, .num_micro_batches = s.m, .num_chunks = s.v,
                     .activation_bytes = 1 << 16, .tp_allreduce_bytes = s.tp > 1 ? 4096u : 0u,
                     .gradient_bytes = 1 << 20, .buckets_per_chunk = 2};
  absl::StatusOr<Program> prog = BuildSchedule(s.kind, po);
  EXPECT_TRUE(prog.ok()) << prog.status();
  ExecutorOptions o;
  o.grid = {.dp = s.dp, .pp = s.pp, .tp = s.tp};
  o.program = *prog;
  o.model.hidden = std::vector<int>(s.v > 1 ? 11 : 5, 32);  // 12 layers: 2 per model stage at K = 6
  o.microbatch_size = 8;
  o.cost = CostModel::Uniform({.forward = FromMillis(5), .backward = FromMillis(8),
                               .weight_grad = FromMillis(4), .optimizer = FromMillis(1)});
  o.links.intra_node = {.alpha = FromMicros(20), .bandwidth_gbps = 100};
  o.links.inter_node = {.alpha = FromMicros(50), .bandwidth_gbps = 25};
  o.placement.devices_per_node = 4;
  o.virtual_time = true;
  o.steps = steps;
  o.eval_every = 0;
  o.eval_samples = 512;
  return o;
}

std::string Name(const RunSetup& s) {
  std::string kind = ScheduleName(s.kind);
  for (char& ch : kind) {
    if (ch == '-') ch = '_';
  }
  return kind + "_dp" + std::to_string(s.dp) + "_pp" +
         std::to_string(s.pp) + "_tp" + std::to_string(s.tp) + "_m" + std::to_string(s.m) + "_v" +
         std::to_string(s.v);
}

class ExecutorLoss : public ::testing::TestWithParam<RunSetup> {};

// FP32 hybrid training: bit-identical to the partitioned serial emulation (dp, tp <= 2), and within
// 1e-5 relative of the single-device curve over 20 steps.
TEST_P(ExecutorLoss, FollowsReferenceCurves) {
  const RunSetup s = GetParam();
  constexpr int kSteps = 20;
  ExecutorOptions o = MakeOptions(s, kSteps);
  absl::StatusOr<RunResult> r = CreateAndRun(o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->steps.size(), static_cast<size_t>(kSteps));

  absl::StatusOr<Dataset> data = Dataset::Create(o.dataset);
  ASSERT_TRUE(data.ok());
  ReferenceOptions ro{.model = o.model,
                      .layout = {.dp = s.dp, .microbatches = s.m, .microbatch_size = 8},
                      .optimizer = o.optimizer,
                      .num_stages = s.pp * s.v,
                      .tp = s.tp,
                      .layers_per_stage = {}};
  absl::StatusOr<std::unique_ptr<ReferenceTrainer>> emu = ReferenceTrainer::Create(ro, &*data);
  ASSERT_TRUE(emu.ok()) << emu.status();
  double max_rel = 0;
  for (int i = 0; i < kSteps; ++i) {
    absl::StatusOr<StepResult> e = (*emu)->Step();
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(r->steps[i].loss, e->loss) << "step " << i << " vs partitioned emulation";
    EXPECT_EQ(r->steps[i].replica_divergence, 0.0) << "step " << i;
    max_rel = std::max(max_rel, r->steps[i].loss_rel_diff);
  }
  EXPECT_LE(max_rel, 1e-5);
  EXPECT_EQ(r->max_loss_rel_diff, max_rel);
  EXPECT_LT(r->steps.back().loss, r->steps.front().loss);
  EXPECT_GT(r->final_accuracy, r->chance_accuracy);
  // Modeled time equals the predictor's (same rules, virtual clock).
  EXPECT_DOUBLE_EQ(r->modeled_step_ms, r->predicted_step_ms);
  std::printf("[figures] %s: max rel loss diff vs single device %.3g, loss %.6f -> %.6f, "
              "step %.3f ms (predicted %.3f)\n",
              Name(s).c_str(), max_rel, r->steps.front().loss, r->steps.back().loss,
              r->modeled_step_ms, r->predicted_step_ms);
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, ExecutorLoss,
    ::testing::Values(RunSetup{.kind = ScheduleKind::kGPipe}, RunSetup{.kind = ScheduleKind::kOneFOneB},
                      RunSetup{.kind = ScheduleKind::kZeroBubbleH1},
                      RunSetup{.kind = ScheduleKind::kInterleaved, .m = 6, .v = 2}),
    [](const ::testing::TestParamInfo<RunSetup>& p) { return Name(p.param); });

class ExecutorCodec : public ::testing::TestWithParam<comm::Codec> {};

// DP = 4 (a ring of 4: reduction order differs per chunk): replicas stay bit-identical with every
// codec; the loss difference from FP32 is reported.
TEST_P(ExecutorCodec, ReplicasBitIdentical) {
  constexpr int kSteps = 8;
  ExecutorOptions o = MakeOptions({.kind = ScheduleKind::kOneFOneB, .dp = 4, .pp = 2, .tp = 1, .m = 2},
                                  kSteps);
  o.codec = GetParam();
  o.segment_bytes = 1024;  // several segments per chunk
  absl::StatusOr<RunResult> r = CreateAndRun(o);
  ASSERT_TRUE(r.ok()) << r.status();
  for (const StepRecord& st : r->steps) EXPECT_EQ(st.replica_divergence, 0.0) << "step " << st.step;
  EXPECT_EQ(r->max_replica_divergence, 0.0);
  if (GetParam() == comm::Codec::kFp32) {
    EXPECT_LE(r->max_loss_rel_diff, 1e-5);
  }
  // Wire bytes: DP bytes shrink with the codec.
  uint64_t dp_bytes = 0;
  for (const DeviceReport& d : r->devices) dp_bytes += d.dp_bytes;
  EXPECT_GT(dp_bytes, 0u);
  std::printf("[figures] codec %s: divergence %.3g, max rel loss diff vs FP32 reference %.3g, "
              "final loss %.6f, DP wire bytes %llu\n",
              comm::CodecName(GetParam()), r->max_replica_divergence, r->max_loss_rel_diff,
              r->final_loss, static_cast<unsigned long long>(dp_bytes));
}

INSTANTIATE_TEST_SUITE_P(Codecs, ExecutorCodec, ::testing::ValuesIn(comm::kAllCodecs),
                         [](const ::testing::TestParamInfo<comm::Codec>& p) {
                           return std::string(comm::CodecName(p.param));
                         });

// S1 in modeled time: 1210 ms, T1 4160 ms.
TEST(Executor, S1ModeledStepMatchesClosedForm) {
  absl::StatusOr<Program> prog = BuildOneFOneB({.num_ranks = 2, .num_micro_batches = 8,
                                                .activation_bytes = 4096, .gradient_bytes = 4096});
  ASSERT_TRUE(prog.ok());
  ExecutorOptions o;
  o.grid = {.dp = 2, .pp = 2, .tp = 1};
  o.placement.devices_per_node = 2;  // replicas on separate nodes
  o.program = *prog;
  o.cost = CostModel::Uniform({.forward = FromMillis(50), .backward = FromMillis(80)});
  o.links.inter_node = {.alpha = FromMillis(20), .bandwidth_gbps = 0};
  o.model_segment_bytes = 0;
  o.virtual_time = true;
  o.steps = 2;
  o.run_reference = false;
  absl::StatusOr<RunResult> r = CreateAndRun(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->predicted_step_ms, 1210.0);
  EXPECT_DOUBLE_EQ(r->modeled_step_ms, 1210.0);
  EXPECT_DOUBLE_EQ(r->t1_ms, 4160.0);
  EXPECT_NEAR(r->speedup, 4160.0 / 1210.0, 1e-9);
  // Rank 0 (stage 0): busy 8 × 130 ms; bubble (p − 1)(F + B) + all-reduce wait.
  EXPECT_DOUBLE_EQ(r->devices[0].busy_ms, 1040.0);
  EXPECT_DOUBLE_EQ(r->devices[0].exposed_comm_ms, 40.0);
}

// Link queueing is emulated and predicted alike: GPipe with transfers slower than compute, so
// activations and gradients wait for their link (see the predictor's golden test).
TEST(Executor, LinkQueueingIsEmulatedAndPredictedAlike) {
  const int m = 4;
  absl::StatusOr<Program> prog = BuildGPipe({.num_ranks = 2, .num_micro_batches = m,
                                             .activation_bytes = 4096, .gradient_bytes = 4096});
  ASSERT_TRUE(prog.ok());
  ExecutorOptions o;
  o.grid = {.dp = 1, .pp = 2, .tp = 1};
  o.program = *prog;
  o.cost = CostModel::Uniform({.forward = FromMillis(1), .backward = FromMillis(2)});
  o.links.intra_node = {.alpha = FromMillis(10), .bandwidth_gbps = 0};
  o.virtual_time = true;
  o.steps = 2;
  o.run_reference = false;
  absl::StatusOr<RunResult> r = CreateAndRun(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->predicted_step_ms, 2 * (1 + 2) + 2 * m * 10.0);
  EXPECT_DOUBLE_EQ(r->modeled_step_ms, r->predicted_step_ms);
  // Stage 1's received link time includes the queueing: sum over j of (j + 1) L − j F.
  EXPECT_DOUBLE_EQ(r->devices[1].comm_ms, 10 + 19 + 28 + 37.0);
}

// Seeded jitter is emulated and predicted alike: every step is predicted with the draws its devices
// made, so on the virtual clock each step's modeled time equals its prediction exactly.
TEST(Executor, JitterIsPredictedStepByStep) {
  absl::StatusOr<Program> prog = BuildOneFOneB({.num_ranks = 2, .num_micro_batches = 4,
                                                .activation_bytes = 4096, .gradient_bytes = 4096});
  ASSERT_TRUE(prog.ok());
  ExecutorOptions o;
  o.grid = {.dp = 2, .pp = 2, .tp = 1};
  o.program = *prog;
  o.cost = CostModel::Uniform({.forward = FromMillis(50), .backward = FromMillis(80),
                               .optimizer = FromMillis(3)});
  o.virtual_time = true;
  o.steps = 3;
  o.run_reference = false;
  o.faults.jitter = {.seed = 7, .max_fraction = 0.4};
  o.faults.stragglers.push_back({.rank = 1, .factor = 1.25});
  absl::StatusOr<RunResult> r = CreateAndRun(o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->steps.size(), 3u);
  std::set<double> distinct;
  for (const StepRecord& s : r->steps) {
    EXPECT_DOUBLE_EQ(s.modeled_ms, s.predicted_ms) << "step " << s.step;
    distinct.insert(s.predicted_ms);
  }
  EXPECT_EQ(distinct.size(), 3u) << "each step has its own draws";
  EXPECT_DOUBLE_EQ(r->modeled_step_ms, r->predicted_step_ms);
  // Jitter only slows: every step is longer than the jitter-free prediction.
  o.faults.jitter = {};
  absl::StatusOr<RunResult> c = CreateAndRun(o);
  ASSERT_TRUE(c.ok()) << c.status();
  for (const StepRecord& s : r->steps) EXPECT_GT(s.predicted_ms, c->predicted_step_ms);
}

// A straggler is emulated and predicted alike: on the virtual clock measured == predicted, and the
// step grows with the factor.
TEST(Executor, StragglerIsEmulatedAndPredictedAlike) {
  absl::StatusOr<Program> prog = BuildOneFOneB({.num_ranks = 2, .num_micro_batches = 4,
                                                .activation_bytes = 4096, .gradient_bytes = 4096});
  ASSERT_TRUE(prog.ok());
  ExecutorOptions o;
  o.grid = {.dp = 2, .pp = 2, .tp = 1};
  o.program = *prog;
  o.cost = CostModel::Uniform({.forward = FromMillis(50), .backward = FromMillis(80)});
  o.virtual_time = true;
  o.steps = 1;
  o.run_reference = false;
  absl::StatusOr<RunResult> base = CreateAndRun(o);
  ASSERT_TRUE(base.ok()) << base.status();
  o.faults.stragglers.push_back({.rank = 3, .factor = 1.5});
  absl::StatusOr<RunResult> r = CreateAndRun(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->modeled_step_ms, r->predicted_step_ms);
  EXPECT_GT(r->predicted_step_ms, base->predicted_step_ms);
  EXPECT_DOUBLE_EQ(r->t1_ms, base->t1_ms);
  // Stage 1 of replica 1 computes 4 x 130 x 1.5 = 780 ms.
  EXPECT_DOUBLE_EQ(r->devices[3].busy_ms, 780.0);
}

// The metric functions over the predictor's own timeline reproduce its DeviceStats.
TEST(Metrics, PredictedIntervalsReproducePredictorStats) {
  for (ScheduleKind kind : {ScheduleKind::kOneFOneB, ScheduleKind::kZeroBubbleH1,
                            ScheduleKind::kInterleaved}) {
    const RunSetup s{.kind = kind, .dp = 2, .pp = 2, .tp = 2, .m = 4, .v = kind == ScheduleKind::kInterleaved ? 2 : 1};
    ExecutorOptions o = MakeOptions(s, 1);
    absl::StatusOr<ParallelGrid> grid = ParallelGrid::Create(o.grid, o.placement);
    ASSERT_TRUE(grid.ok());
    const PredictOptions po = PredictOptionsFor(o);
    absl::StatusOr<Prediction> pred = Predict(o.program, *grid, o.cost, po);
    ASSERT_TRUE(pred.ok()) << pred.status();
    for (int r = 0; r < grid->world_size(); ++r) {
      absl::StatusOr<std::vector<OpInterval>> iv =
          PredictedIntervals(o.program, *grid, o.cost, po, *pred, r);
      ASSERT_TRUE(iv.ok()) << iv.status();
      const DeviceMetrics m = ComputeDeviceMetrics(*iv, pred->step_time);
      const auto& want = pred->devices[static_cast<size_t>(r)];
      EXPECT_EQ(m.busy, want.busy) << "rank " << r;
      EXPECT_EQ(m.comm, want.comm) << "rank " << r;
      EXPECT_EQ(m.exposed_comm, want.exposed_comm) << "rank " << r;
      EXPECT_DOUBLE_EQ(m.bubble_total, want.bubble_over_total);
      EXPECT_DOUBLE_EQ(m.overlap, want.overlap);
    }
    absl::StatusOr<Nanos> t1 = SingleDeviceTime(o.program, o.grid, o.cost);
    ASSERT_TRUE(t1.ok());
    EXPECT_EQ(*t1, pred->single_device_time);
  }
}

TEST(Metrics, ClosedForms) {
  const std::vector<OpInterval> ops = {
      {IntervalKind::kCompute, FromMillis(0), FromMillis(50)},
      {IntervalKind::kRecv, FromMillis(50), FromMillis(80), FromMillis(20)},  // 20 of 30 exposed
      {IntervalKind::kGradAllReduce, FromMillis(80), FromMillis(120), FromMillis(40)},
      {IntervalKind::kGradWait, FromMillis(80), FromMillis(90)},
  };
  const DeviceMetrics m = ComputeDeviceMetrics(ops, FromMillis(100));
  EXPECT_EQ(m.busy, FromMillis(50));
  EXPECT_DOUBLE_EQ(m.bubble_total, 0.5);
  EXPECT_DOUBLE_EQ(m.bubble_ideal, 1.0);
  EXPECT_EQ(m.comm, FromMillis(60));
  EXPECT_EQ(m.exposed_comm, FromMillis(30));
  EXPECT_DOUBLE_EQ(m.overlap, 0.5);
  EXPECT_NEAR(Fidelity(FromMillis(101), FromMillis(100)), 0.01, 1e-12);
}

TEST(Executor, RejectsBadOptionsNamingTheField) {
  ExecutorOptions good = MakeOptions({}, 1);
  struct Case {
    const char* field;
    std::function<void(ExecutorOptions&)> mutate;
  };
  const Case cases[] = {
      {"grid", [](ExecutorOptions& o) { o.grid.dp = 0; }},
      {"program", [](ExecutorOptions& o) { o.grid.pp = 2; }},
      {"microbatch_size", [](ExecutorOptions& o) { o.microbatch_size = 0; }},
      {"steps", [](ExecutorOptions& o) { o.steps = 0; }},
      {"time_scale", [](ExecutorOptions& o) { o.virtual_time = false; o.time_scale = 0; }},
      {"segment_bytes", [](ExecutorOptions& o) { o.segment_bytes = 6; }},
      {"cost", [](ExecutorOptions& o) { o.cost.stages.resize(2); }},
      {"model", [](ExecutorOptions& o) { o.model.hidden = {30, 30, 30, 30, 30}; o.grid.tp = 4; }},
      {"model", [](ExecutorOptions& o) { o.model.hidden = {32}; }},
      {"dataset", [](ExecutorOptions& o) { o.dataset.classes = 5; }},
      {"global_batch", [](ExecutorOptions& o) { o.global_batch = 7; }},
      {"faults", [](ExecutorOptions& o) { o.faults.stops.push_back({.rank = 99}); }},
  };
  for (const Case& c : cases) {
    ExecutorOptions o = good;
    c.mutate(o);
    absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
    ASSERT_FALSE(ex.ok()) << c.field;
    EXPECT_EQ(ex.status().code(), absl::StatusCode::kInvalidArgument) << ex.status();
    EXPECT_THAT(std::string(ex.status().message()), HasSubstr(c.field)) << ex.status();
  }
}

// A device that stops (dead GPU): its peer's receive fails the run with a Status naming rank, op,
// peer and step, instead of hanging.
TEST(Executor, StalledPeerFailsNamingRankOpPeerStep) {
  ExecutorOptions o = MakeOptions({.kind = ScheduleKind::kOneFOneB, .dp = 1, .pp = 2, .tp = 1, .m = 2}, 2);
  o.watchdog_timeout = std::chrono::milliseconds(300);
  o.faults.stops.push_back({.rank = 1, .op_index = 1});  // rank 1 dies before its first backward
  absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
  ASSERT_TRUE(ex.ok()) << ex.status();
  absl::StatusOr<RunResult> r = (*ex)->Run();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  const std::string msg(r.status().message());
  EXPECT_THAT(msg, HasSubstr("rank 0"));
  EXPECT_THAT(msg, HasSubstr("RecvGrad"));
  EXPECT_THAT(msg, HasSubstr("peer rank 1"));
  EXPECT_THAT(msg, HasSubstr("step 0"));
}

// On a real clock the run reports how many clock waits slept and how many of those ran crowded
// (plain sleeps); a virtual run has no clock waits.
TEST(Executor, RealClockRunCountsItsWaits) {
  ExecutorOptions o = MakeOptions({.kind = ScheduleKind::kOneFOneB, .dp = 1, .pp = 2, .tp = 1, .m = 2}, 1);
  o.run_reference = false;
  o.cost = CostModel::Uniform({.forward = FromMillis(2), .backward = FromMillis(4)});
  absl::StatusOr<RunResult> v = CreateAndRun(o);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->clock_waits, 0u);
  o.virtual_time = false;
  o.time_scale = 0.5;
  absl::StatusOr<RunResult> r = CreateAndRun(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->clock_waits, 0u);  // every compute op waits for its modeled end
  EXPECT_LE(r->clock_crowded_waits, r->clock_waits);
}

// The measured timeline (virtual clock) equals the predictor's interval by interval, and the tracer
// gets one compute event per F/B/optimizer of every rank and step.
TEST(Executor, TimelineMatchesPredictionAndIsTraced) {
  ExecutorOptions o = MakeOptions({.kind = ScheduleKind::kZeroBubbleH1, .dp = 2, .pp = 2, .tp = 2,
                                   .m = 4}, 2);
  o.run_reference = false;
  Tracer tracer(8, 4);
  o.tracer = &tracer;
  absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
  ASSERT_TRUE(ex.ok()) << ex.status();
  absl::StatusOr<RunResult> r = (*ex)->Run();
  ASSERT_TRUE(r.ok()) << r.status();
  const PredictOptions po = PredictOptionsFor(o);
  ASSERT_EQ(r->timelines.size(), 8u);
  for (int rank = 0; rank < 8; ++rank) {
    absl::StatusOr<std::vector<OpInterval>> want =
        PredictedIntervals(o.program, (*ex)->grid(), o.cost, po, r->prediction, rank);
    ASSERT_TRUE(want.ok());
    // Same multiset of (op, kind, start, end); order differs only for buckets.
    auto key = [](const OpInterval& a) {
      return std::make_tuple(a.op, static_cast<int>(a.kind), a.start.count(), a.end.count(),
                             a.comm.count());
    };
    std::vector<decltype(key(OpInterval{}))> got_k, want_k;
    for (const OpInterval& a : r->timelines[static_cast<size_t>(rank)]) {
      if (a.kind != IntervalKind::kSend) got_k.push_back(key(a));
    }
    for (const OpInterval& a : *want) {
      if (a.kind != IntervalKind::kSend) want_k.push_back(key(a));
    }
    std::sort(got_k.begin(), got_k.end());
    std::sort(want_k.begin(), want_k.end());
    EXPECT_EQ(got_k, want_k) << "rank " << rank;
  }
  int computes = 0;
  for (const TraceEvent& e : tracer.Events()) {
    if (e.kind == rp::OpKind::kCompute) ++computes;
  }
  // Per rank and step: m F + m Bi + m W + the optimizer.
  EXPECT_EQ(computes, 8 * 2 * (3 * 4 + 1));
}

// The default model learns: held-out accuracy far above chance (the prototypes reported chance).
TEST(Executor, DefaultModelLearnsFarAboveChance) {
  ExecutorOptions o = MakeOptions({.kind = ScheduleKind::kOneFOneB, .dp = 2, .pp = 2, .tp = 1,
                                   .m = 4}, 150);
  o.model = MlpConfig{};
  o.microbatch_size = 16;  // global batch 128
  o.eval_samples = 0;      // the whole held-out split
  o.run_reference = false;
  absl::StatusOr<RunResult> r = CreateAndRun(o);
  ASSERT_TRUE(r.ok()) << r.status();
  std::printf("[figures] default model, 150 steps: held-out accuracy %.3f (chance %.3f)\n",
              r->final_accuracy, r->chance_accuracy);
  EXPECT_GT(r->final_accuracy, 3.0 * r->chance_accuracy);
}

TEST(Executor, RunTwiceIsFailedPrecondition) {
  ExecutorOptions o = MakeOptions({.dp = 1, .pp = 2, .tp = 1, .m = 2}, 1);
  o.run_reference = false;
  absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
  ASSERT_TRUE(ex.ok());
  ASSERT_TRUE((*ex)->Run().ok());
  EXPECT_EQ((*ex)->Run().status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace rp::schedule
