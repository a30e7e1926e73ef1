// Executor tests: hybrid training vs the serial references, replica bit-identity per codec,
// modeled timing vs the predictor, metrics definitions, validation and stall errors.
#include "schedule/executor.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <cstdio>
#include <cstring>
#include <map>
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
  bool fused = true;
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
                     .gradient_bytes = 1 << 20, .buckets_per_chunk = 2, .fused_fb = s.fused};
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
         std::to_string(s.v) + (s.fused ? "" : "_apart");
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
                      .num_stages = o.program.num_model_stages(),
                      .tp = s.tp,
                      .layers_per_stage = {}};
  absl::StatusOr<std::unique_ptr<ReferenceTrainer>> emu = ReferenceTrainer::Create(ro, &*data);
  ASSERT_TRUE(emu.ok()) << emu.status();
  double max_rel = 0;
  for (int i = 0; i < kSteps; ++i) {
    absl::StatusOr<StepResult> e = (*emu)->Step();
    ASSERT_TRUE(e.ok());
    // Bit-identical to the partitioned emulation when every gradient is reduced over at most two
    // copies (dp <= 2); DualPipe sums each stage's two mirror copies over DP too (2·dp copies in
    // one ring), a different order of FP32 additions: equal to float tolerance below.
    if (o.program.num_directions() == 1) {
      EXPECT_EQ(r->steps[i].loss, e->loss) << "step " << i << " vs partitioned emulation";
    }
    EXPECT_EQ(r->steps[i].replica_divergence, 0.0) << "step " << i;
    max_rel = std::max(max_rel, r->steps[i].loss_rel_diff);
  }
  EXPECT_LE(max_rel, 1e-5);
  EXPECT_EQ(r->max_loss_rel_diff, max_rel);
  EXPECT_LT(r->steps.back().loss, r->steps.front().loss);
  EXPECT_GT(r->final_accuracy, r->chance_accuracy);
  // Modeled time equals the predictor's (same rules, virtual clock).
  EXPECT_DOUBLE_EQ(r->emulated_step_ms, r->predicted_step_ms);
  std::printf("[figures] %s: max rel loss diff vs single device %.3g, loss %.6f -> %.6f, "
              "step %.3f ms (predicted %.3f)\n",
              Name(s).c_str(), max_rel, r->steps.front().loss, r->steps.back().loss,
              r->emulated_step_ms, r->predicted_step_ms);
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, ExecutorLoss,
    ::testing::Values(RunSetup{.kind = ScheduleKind::kGPipe}, RunSetup{.kind = ScheduleKind::kOneFOneB},
                      RunSetup{.kind = ScheduleKind::kZeroBubbleH1},
                      RunSetup{.kind = ScheduleKind::kInterleaved, .m = 6, .v = 2},
                      RunSetup{.kind = ScheduleKind::kZeroBubbleH2, .m = 6},
                      RunSetup{.kind = ScheduleKind::kZeroBubbleV, .m = 6, .v = 2},
                      RunSetup{.kind = ScheduleKind::kDualPipeV, .m = 6, .v = 2},
                      RunSetup{.kind = ScheduleKind::kDualPipeV, .m = 6, .v = 2, .fused = false},
                      RunSetup{.kind = ScheduleKind::kDualPipe, .pp = 4, .m = 8, .v = 2},
                      RunSetup{.kind = ScheduleKind::kDualPipe, .pp = 4, .m = 8, .v = 2,
                               .fused = false}),
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
  o.segment_bytes = 0;  // one message per chunk: 2 (n − 1) ring steps of 20 ms
  o.virtual_time = true;
  o.steps = 2;
  o.run_reference = false;
  absl::StatusOr<RunResult> r = CreateAndRun(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->predicted_step_ms, 1210.0);
  EXPECT_DOUBLE_EQ(r->emulated_step_ms, 1210.0);
  EXPECT_DOUBLE_EQ(r->t1_ms, 4160.0);
  EXPECT_NEAR(r->speedup, 4160.0 / 1210.0, 1e-9);
  // Rank 0 (stage 0): busy 8 × 130 ms; bubble (p − 1)(F + B) + all-reduce wait.
  EXPECT_DOUBLE_EQ(r->devices[0].emulated.busy_ms, 1040.0);
  EXPECT_DOUBLE_EQ(r->devices[0].emulated.exposed_comm_ms, 40.0);
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
    EXPECT_DOUBLE_EQ(s.emulated_ms, s.predicted_ms) << "step " << s.step;
    distinct.insert(s.predicted_ms);
  }
  EXPECT_EQ(distinct.size(), 3u) << "each step has its own draws";
  EXPECT_DOUBLE_EQ(r->emulated_step_ms, r->predicted_step_ms);
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
  EXPECT_DOUBLE_EQ(r->emulated_step_ms, r->predicted_step_ms);
  EXPECT_GT(r->predicted_step_ms, base->predicted_step_ms);
  EXPECT_DOUBLE_EQ(r->t1_ms, base->t1_ms);
  // Stage 1 of replica 1 computes 4 x 130 x 1.5 = 780 ms.
  EXPECT_DOUBLE_EQ(r->devices[3].emulated.busy_ms, 780.0);
}

TEST(Metrics, ClosedForms) {
  const std::vector<OpInterval> ops = {
      {.kind = IntervalKind::kCompute, .start = FromMillis(0), .end = FromMillis(50)},
      // A receive: 10 ms peer wait, then 20 ms in flight; the message flew 25 ms.
      {.kind = IntervalKind::kRecv, .start = FromMillis(50), .end = FromMillis(80),
       .transfer = FromMillis(20), .peer = FromMillis(10), .comm = FromMillis(25)},
      {.kind = IntervalKind::kGradAllReduce, .start = FromMillis(80), .end = FromMillis(120),
       .comm = FromMillis(35)},
      {.kind = IntervalKind::kGradWait, .start = FromMillis(80), .end = FromMillis(90),
       .transfer = FromMillis(10)},
  };
  const DeviceMetrics m = ComputeDeviceMetrics(ops, FromMillis(100), Timeline::kEmulated);
  EXPECT_EQ(m.busy, FromMillis(50));
  EXPECT_DOUBLE_EQ(m.bubble_total, 0.5);
  EXPECT_DOUBLE_EQ(m.bubble_ideal, 1.0);
  EXPECT_EQ(m.comm, FromMillis(60));
  EXPECT_EQ(m.exposed_comm, FromMillis(30));
  EXPECT_EQ(m.peer_wait, FromMillis(10));
  EXPECT_DOUBLE_EQ(m.overlap, 0.5);
  EXPECT_NEAR(Fidelity(FromMillis(101), FromMillis(100)), 0.01, 1e-12);
  const WaitSplit w = SplitWait(FromMillis(50), FromMillis(80), FromMillis(60));
  EXPECT_EQ(w.peer, FromMillis(10));
  EXPECT_EQ(w.transfer, FromMillis(20));
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
      {"reduce_gbps", [](ExecutorOptions& o) { o.reduce_gbps = -1; }},
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
  EXPECT_THAT(msg, HasSubstr("for rank 1"));
  EXPECT_THAT(msg, HasSubstr("step 0"));
  const RunFailure* f = (*ex)->failure();
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->rank, 0);
  EXPECT_EQ(f->missing_peers, std::vector<int>{1});
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
  ASSERT_EQ(r->timelines.size(), 8u);
  for (int rank = 0; rank < 8; ++rank) {
    const std::vector<OpInterval>& want = r->prediction.Timeline((*ex)->grid(), rank);
    const std::vector<OpInterval>& got = r->timelines[static_cast<size_t>(rank)];
    ASSERT_EQ(got.size(), want.size()) << "rank " << rank;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].kind, want[i].kind) << "rank " << rank << " interval " << i;
      EXPECT_EQ(got[i].op, want[i].op) << "rank " << rank << " interval " << i;
      EXPECT_EQ(got[i].start, want[i].start) << "rank " << rank << " interval " << i;
      EXPECT_EQ(got[i].end, want[i].end) << "rank " << rank << " interval " << i;
      EXPECT_EQ(got[i].transfer, want[i].transfer) << "rank " << rank << " interval " << i;
      EXPECT_EQ(got[i].peer, want[i].peer) << "rank " << rank << " interval " << i;
      EXPECT_EQ(got[i].comm, want[i].comm) << "rank " << rank << " interval " << i;
    }
  }
  int computes = 0;
  for (const TraceEvent& e : tracer.Events()) {
    if (e.kind == rp::OpKind::kCompute) ++computes;
  }
  // Per rank and step: m F + m Bi + m W + the optimizer.
  EXPECT_EQ(computes, 8 * 2 * (3 * 4 + 1));
  // Every send is joined to its receive by a flow id.
  std::map<uint64_t, int> flows;
  for (const TraceEvent& e : tracer.Events()) {
    if (e.kind == rp::OpKind::kSend || e.kind == rp::OpKind::kRecv) {
      ASSERT_NE(e.flow_id, 0u);
      flows[e.flow_id] += e.kind == rp::OpKind::kSend ? 1 : 10;
    }
  }
  ASSERT_FALSE(flows.empty());
  for (const auto& [id, n] : flows) EXPECT_EQ(n, 11) << "flow " << id;
  // Port tracks: every port serves one message at a time, in modeled time; the DP and TP rings and
  // the pipeline all appear.
  std::map<int, std::vector<PortEvent>> by_port;
  for (const PortEvent& e : tracer.port_events()) by_port[e.port].push_back(e);
  ASSERT_FALSE(by_port.empty());
  for (auto& [port, events] : by_port) {
    std::sort(events.begin(), events.end(),
              [](const PortEvent& a, const PortEvent& b) { return a.start_ns < b.start_ns; });
    for (size_t i = 1; i < events.size(); ++i) {
      EXPECT_GE(events[i].start_ns, events[i - 1].end_ns) << "port " << port;
    }
    for (const PortEvent& e : events) EXPECT_GE(e.start_ns, e.ready_ns);
  }
  const std::string json = tracer.ToChromeJson();
  EXPECT_THAT(json, HasSubstr("fabric ports (modeled)"));
  EXPECT_THAT(json, HasSubstr("nvlink out"));
}

// Determinism (issue 13): the same options give the same emulated timeline and the same bits run
// after run — with event-driven comm streams, TP handlers, a shared NIC (contention), jitter,
// buckets and a lossy codec with error feedback, on a layout large enough for many interleavings.
TEST(Executor, RepeatedVirtualRunsAreIdentical) {
  ExecutorOptions o = MakeOptions({.kind = ScheduleKind::kOneFOneB, .dp = 4, .pp = 2, .tp = 2,
                                   .m = 4}, 3);
  o.run_reference = false;
  o.placement.devices_per_node = 4;
  o.links = DgxA100();
  o.links.devices_per_node = 4;
  o.links.nics_per_node = 1;
  o.codec = comm::Codec::kInt8;
  o.error_feedback = true;
  o.segment_bytes = 4096;
  o.bucket_bytes = 1 << 12;
  o.faults.jitter = {.seed = 7, .max_fraction = 0.2};
  struct Outcome {
    std::vector<std::vector<OpInterval>> timelines;
    std::vector<std::vector<float>> params;
    std::vector<double> loss;
  };
  auto run = [&]() {
    Outcome out;
    absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
    EXPECT_TRUE(ex.ok()) << ex.status();
    absl::StatusOr<RunResult> r = (*ex)->Run();
    EXPECT_TRUE(r.ok()) << r.status();
    out.timelines = r->timelines;
    for (const StepRecord& s : r->steps) out.loss.push_back(s.loss);
    for (int rank = 0; rank < 16; ++rank) out.params.push_back(*(*ex)->Parameters(rank));
    return out;
  };
  const Outcome first = run();
  for (int again = 0; again < 3; ++again) {
    const Outcome next = run();
    ASSERT_EQ(next.timelines.size(), first.timelines.size());
    for (size_t rank = 0; rank < first.timelines.size(); ++rank) {
      ASSERT_EQ(next.timelines[rank].size(), first.timelines[rank].size());
      for (size_t i = 0; i < first.timelines[rank].size(); ++i) {
        EXPECT_EQ(next.timelines[rank][i].start, first.timelines[rank][i].start) << rank << " " << i;
        EXPECT_EQ(next.timelines[rank][i].end, first.timelines[rank][i].end) << rank << " " << i;
        EXPECT_EQ(next.timelines[rank][i].transfer, first.timelines[rank][i].transfer);
        EXPECT_EQ(next.timelines[rank][i].peer, first.timelines[rank][i].peer);
      }
    }
    EXPECT_EQ(next.loss, first.loss);
    for (size_t rank = 0; rank < first.params.size(); ++rank) {
      ASSERT_EQ(0, std::memcmp(next.params[rank].data(), first.params[rank].data(),
                               first.params[rank].size() * sizeof(float)))
          << "rank " << rank;
    }
  }
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
