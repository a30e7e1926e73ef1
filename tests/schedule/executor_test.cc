// Executor tests: hybrid training vs the serial references, replica bit-identity per codec,
// validation and stall errors (timing: executor_timing_test.cc).
#include "schedule/executor.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/heap.h"
#include "runtime/model/reference_trainer.h"
#include "schedule/generators.h"
#include "schedule/metrics.h"
#include "tests/schedule/executor_helpers.h"

namespace rp::schedule {
namespace {

using ::testing::HasSubstr;

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

// The reference comparison's maximum keeps a NaN (the reference, or the run, diverged alone):
// std::max(0, NaN) is 0, so a diverged reference read as a perfect match.
TEST(Executor, ReferenceComparisonKeepsANonFiniteDifference) {
  RunResult res;
  res.steps.resize(3);
  for (size_t k = 0; k < 3; ++k) res.steps[k].loss = 1.0 + static_cast<double>(k);
  ASSERT_TRUE(CompareWithReference(std::vector<double>{1.0, 1.0, 3.0}, res).ok());
  EXPECT_EQ(res.steps[1].loss_rel_diff, 1.0);
  EXPECT_EQ(res.max_loss_rel_diff, 1.0);
  for (const std::vector<double>& ref :
       {std::vector<double>{1.0, std::nan(""), 3.0}, std::vector<double>{std::nan(""), 4.0, 3.0},
        std::vector<double>{1.0, 2.0, std::numeric_limits<double>::infinity()}}) {
    ASSERT_TRUE(CompareWithReference(ref, res).ok());
    EXPECT_TRUE(std::isnan(res.max_loss_rel_diff)) << ref[0] << " " << ref[1] << " " << ref[2];
  }
  EXPECT_EQ(CompareWithReference(std::vector<double>{1.0}, res).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(CompareWithReference(absl::CancelledError("reference: run failed"), res).code(),
            absl::StatusCode::kCancelled);
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

// On the virtual clock every step's held-out evaluation but the last runs on a thread of its own,
// over a copy of replica 0's weights, while the next step trains; the last step's runs at its
// boundary on the devices' own shards. Training does not depend on the number of steps, so a run
// of k + 1 steps evaluates step k at its boundary: the figures must be the same bits.
TEST(Executor, HeldOutEvaluationOffTheBoundaryEqualsTheBoundarys) {
  constexpr int kSteps = 4;
  // Interleaved (2 chunks per device): model stages map to (pp, chunk) non-trivially; TP 2.
  const RunSetup setup{.kind = ScheduleKind::kInterleaved, .dp = 2, .pp = 2, .tp = 2, .m = 4,
                       .v = 2};
  auto options = [&](int steps) {
    ExecutorOptions o = MakeOptions(setup, steps);
    o.eval_every = 1;
    o.eval_samples = 1200;  // three batches, the last one partial
    o.run_reference = false;
    return o;
  };
  absl::StatusOr<RunResult> all = CreateAndRun(options(kSteps));
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->steps.size(), static_cast<size_t>(kSteps));
  for (int k = 0; k < kSteps; ++k) {
    SCOPED_TRACE(k);
    ASSERT_FALSE(std::isnan(all->steps[k].accuracy));
    ASSERT_FALSE(std::isnan(all->steps[k].test_loss));
    absl::StatusOr<RunResult> upto = CreateAndRun(options(k + 1));
    ASSERT_TRUE(upto.ok()) << upto.status();
    EXPECT_EQ(upto->steps.back().loss, all->steps[k].loss);  // the same training
    EXPECT_EQ(upto->steps.back().accuracy, all->steps[k].accuracy);
    EXPECT_EQ(upto->steps.back().test_loss, all->steps[k].test_loss);
  }
  // The weights change every step: an evaluation of stale weights would repeat a figure.
  EXPECT_NE(all->steps[0].test_loss, all->steps[kSteps - 1].test_loss);
}

// A virtual-clock evaluation hands its 512-row batches to one thread per core, each over its own
// copy of replica 0, and adds their sums in batch order: every step's figures — the ones computed
// while the next step trains and the last step's, at its boundary on the devices' own shards and
// copies — are the bits of one thread, whatever the count (3 with a partial batch; 4 with more
// threads than some evaluations' batches).
TEST(Executor, HeldOutEvaluationOnSeveralThreadsEqualsOneThreads) {
  const RunSetup setup{.kind = ScheduleKind::kInterleaved, .dp = 2, .pp = 2, .tp = 2, .m = 4,
                       .v = 2};
  auto run = [&](int threads, int64_t samples) {
    ExecutorOptions o = MakeOptions(setup, 3);
    o.eval_every = 1;
    o.eval_samples = samples;
    o.eval_threads = threads;
    o.run_reference = false;
    return CreateAndRun(o);
  };
  for (const int64_t samples : {int64_t{1200}, int64_t{2600}}) {
    SCOPED_TRACE(samples);
    absl::StatusOr<RunResult> one = run(1, samples);
    ASSERT_TRUE(one.ok()) << one.status();
    for (const int threads : {3, 4}) {
      SCOPED_TRACE(threads);
      absl::StatusOr<RunResult> many = run(threads, samples);
      ASSERT_TRUE(many.ok()) << many.status();
      ASSERT_EQ(many->steps.size(), one->steps.size());
      for (size_t k = 0; k < one->steps.size(); ++k) {
        ASSERT_FALSE(std::isnan(one->steps[k].test_loss));
        EXPECT_EQ(many->steps[k].loss, one->steps[k].loss);
        EXPECT_EQ(many->steps[k].accuracy, one->steps[k].accuracy);
        EXPECT_EQ(many->steps[k].test_loss, one->steps[k].test_loss);
      }
    }
  }
}

// eval_samples 0 (the default): every evaluation but the last reads the held-out split's first
// max(global batch, 1024) samples, the last the whole split — the same figures, bit for bit, as
// runs that ask for those counts; and each record says how many it read.
TEST(Executor, AutoHeldOutEvaluationReadsAStepsWorthThenTheSplit) {
  constexpr int kSteps = 3;
  constexpr int64_t kSplit = 3000;
  for (const int mb : {8, 160}) {  // global batch 2 · 4 · mb: 64 (→ 1024 samples), 1280
    SCOPED_TRACE(mb);
    const int64_t step_worth = std::max<int64_t>(2 * 4 * mb, 1024);
    ASSERT_EQ(AutoEvalSamples(2 * 4 * mb), step_worth);
    auto run = [&](int64_t samples, bool virtual_time = true) {
      ExecutorOptions o = MakeOptions({.kind = ScheduleKind::kOneFOneB, .dp = 2, .pp = 2, .tp = 1,
                                       .m = 4}, kSteps);
      o.virtual_time = virtual_time;
      o.time_scale = 0.05;  // real clock: every evaluation at its boundary, on one thread
      o.microbatch_size = mb;
      o.dataset.train_size = 2 * 4 * mb * kSteps;
      o.dataset.test_size = kSplit;
      o.eval_every = 1;
      o.eval_samples = samples;
      o.run_reference = false;
      return CreateAndRun(o);
    };
    absl::StatusOr<RunResult> autoc = run(0), worth = run(step_worth), split = run(kSplit);
    ASSERT_TRUE(autoc.ok()) << autoc.status();
    ASSERT_TRUE(worth.ok()) << worth.status();
    ASSERT_TRUE(split.ok()) << split.status();
    ASSERT_EQ(autoc->steps.size(), static_cast<size_t>(kSteps));
    for (int k = 0; k < kSteps; ++k) {
      SCOPED_TRACE(k);
      const RunResult& same = k + 1 < kSteps ? *worth : *split;
      EXPECT_EQ(autoc->steps[k].test_samples, k + 1 < kSteps ? step_worth : kSplit);
      EXPECT_EQ(same.steps[k].test_samples, autoc->steps[k].test_samples);
      ASSERT_FALSE(std::isnan(autoc->steps[k].test_loss));
      EXPECT_EQ(autoc->steps[k].accuracy, same.steps[k].accuracy);
      EXPECT_EQ(autoc->steps[k].test_loss, same.steps[k].test_loss);
    }
    // The counts matter: the split's figure of step 0 is not the step's worth's.
    EXPECT_NE(split->steps[0].test_loss, worth->steps[0].test_loss);
    EXPECT_EQ(autoc->final_accuracy, split->final_accuracy);
    // On a real clock, where every evaluation runs at its boundary: the same counts and figures.
    absl::StatusOr<RunResult> real = run(0, /*virtual_time=*/false);
    ASSERT_TRUE(real.ok()) << real.status();
    ASSERT_EQ(real->steps.size(), static_cast<size_t>(kSteps));
    for (int k = 0; k < kSteps; ++k) {
      SCOPED_TRACE(k);
      EXPECT_EQ(real->steps[k].test_samples, autoc->steps[k].test_samples);
      EXPECT_EQ(real->steps[k].test_loss, autoc->steps[k].test_loss);
    }
  }
}

TEST(Executor, EvaluationThreadsFollowCoresBatchesAndMemory) {
  const int cores = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
  EXPECT_EQ(EvaluationThreads(1e6, 512), 1);  // one batch
  EXPECT_EQ(EvaluationThreads(1e6, 513), std::min(cores, 2));
  EXPECT_EQ(EvaluationThreads(1e6, 4096), cores);
  EXPECT_EQ(EvaluationThreads(1e6, 0), 1);
  // Each extra thread copies the weights: 100 MiB fits 256 MiB twice, 200 MiB once, 300 never.
  EXPECT_EQ(EvaluationThreads(100.0 * (1 << 20), 4096), std::min(cores, 3));
  EXPECT_EQ(EvaluationThreads(200.0 * (1 << 20), 4096), std::min(cores, 2));
  EXPECT_EQ(EvaluationThreads(300.0 * (1 << 20), 4096), 1);
  ExecutorOptions o = MakeOptions({.kind = ScheduleKind::kOneFOneB, .dp = 1, .pp = 2, .tp = 1, .m = 2}, 1);
  o.eval_threads = -1;
  absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
  ASSERT_FALSE(ex.ok());
  EXPECT_NE(ex.status().message().find("eval_threads"), std::string_view::npos) << ex.status();
}

// Warming the first step's memory (each device thread populates a block before step 0 and frees
// it at the rendezvous) touches memory only: the same losses, weights and timeline.
TEST(Executor, WarmFirstStepChangesNoResult) {
  const RunSetup setup{.kind = ScheduleKind::kInterleaved, .dp = 2, .pp = 2, .tp = 2, .m = 4,
                       .v = 2};
  ExecutorOptions o = MakeOptions(setup, 2);
  o.run_reference = false;
  absl::StatusOr<RunResult> cold = CreateAndRun(o);
  ASSERT_TRUE(cold.ok()) << cold.status();
  o.warm_first_step = true;
  absl::StatusOr<RunResult> warm = CreateAndRun(o);
  ASSERT_TRUE(warm.ok()) << warm.status();
  ASSERT_EQ(warm->steps.size(), cold->steps.size());
  for (size_t k = 0; k < cold->steps.size(); ++k) {
    EXPECT_EQ(warm->steps[k].loss, cold->steps[k].loss);
    EXPECT_EQ(warm->steps[k].replica_divergence, cold->steps[k].replica_divergence);
    EXPECT_EQ(warm->steps[k].emulated_ms, cold->steps[k].emulated_ms);
  }
  EXPECT_FALSE(std::isnan(cold->steps.back().test_loss));  // the last step is evaluated
  EXPECT_EQ(warm->steps.back().test_loss, cold->steps.back().test_loss);
  EXPECT_EQ(cold->first_step_populated_bytes, 0u);
  // Each of the 8 devices populated at least its 16 KiB of slack (where the kernel can).
  if (PopulatedBlock::Allocate(1 << 16).populated()) {
    EXPECT_GE(warm->first_step_populated_bytes, 8u * (16u << 10));
  }
}

// The data lane (the gradient all-reduces' copies and sums on a thread of their own, off the
// fabric's lock) changes no result: the same losses, weights (every rank's, bit for bit) and
// timeline, with FP32 and with a lossy codec and error feedback, with DP rings and with
// DualPipe's mirror rings.
TEST(Executor, DataLaneChangesNoResult) {
  struct Case {
    RunSetup setup;
    comm::Codec codec;
  };
  const std::vector<Case> cases = {
      {{.kind = ScheduleKind::kInterleaved, .dp = 4, .pp = 2, .tp = 2, .m = 4, .v = 2}, comm::Codec::kFp32},
      {{.kind = ScheduleKind::kOneFOneB, .dp = 3, .pp = 2, .tp = 1, .m = 4}, comm::Codec::kBf16},
      {{.kind = ScheduleKind::kDualPipeV, .dp = 2, .pp = 2, .tp = 1, .m = 4, .v = 2}, comm::Codec::kFp32},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(ScheduleName(c.setup.kind));
    ExecutorOptions o = MakeOptions(c.setup, 3);
    o.run_reference = false;
    o.codec = c.codec;
    o.error_feedback = c.codec != comm::Codec::kFp32;
    o.segment_bytes = 16 << 10;  // a few segments a chunk, each of tens of real elements
    auto run = [&](bool lane) -> std::pair<RunResult, std::vector<std::vector<float>>> {
      o.data_lane = lane;
      absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
      EXPECT_TRUE(ex.ok()) << ex.status();
      absl::StatusOr<RunResult> r = (*ex)->Run();
      EXPECT_TRUE(r.ok()) << r.status();
      std::vector<std::vector<float>> params;
      for (int rank = 0; rank < o.grid.dp * o.grid.pp * o.grid.tp; ++rank) {
        for (int chunk = 0; chunk < c.setup.v; ++chunk) {
          absl::StatusOr<std::vector<float>> p = (*ex)->Parameters(rank, chunk);
          EXPECT_TRUE(p.ok()) << p.status();
          params.push_back(*p);
        }
      }
      return {*std::move(r), params};
    };
    const auto [inline_run, inline_params] = run(false);
    const auto [lane_run, lane_params] = run(true);
    ASSERT_EQ(lane_run.steps.size(), inline_run.steps.size());
    for (size_t k = 0; k < inline_run.steps.size(); ++k) {
      EXPECT_EQ(lane_run.steps[k].loss, inline_run.steps[k].loss);
      EXPECT_EQ(lane_run.steps[k].replica_divergence, inline_run.steps[k].replica_divergence);
      EXPECT_EQ(lane_run.steps[k].emulated_ms, inline_run.steps[k].emulated_ms);
    }
    ASSERT_EQ(lane_params.size(), inline_params.size());
    for (size_t i = 0; i < inline_params.size(); ++i) {
      ASSERT_EQ(lane_params[i].size(), inline_params[i].size());
      EXPECT_EQ(0, std::memcmp(lane_params[i].data(), inline_params[i].data(),
                               inline_params[i].size() * sizeof(float)))
          << "parameters " << i;
    }
    // The training moved the weights (a lane that dropped the sums would not be caught otherwise
    // only if both runs dropped them: the inline run is the reference).
    EXPECT_NE(inline_run.steps.front().loss, inline_run.steps.back().loss);
  }
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
