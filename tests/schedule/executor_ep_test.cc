// Expert parallelism in the executor: MoE blocks exchange tokens with their EP group through timed
// all-to-alls inside the compute ops; expert parameters are reduced over the expert-data-parallel
// group. Emulated == predicted to the nanosecond on the virtual clock (with the run's own routing);
// a skewed router makes a straggler that shows as peer wait, predicted and emulated alike; FP32
// training is bit-identical to the single-device reference; bad EP options name their field.
#include <algorithm>
#include <cstdio>
#include <map>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/model/reference_trainer.h"
#include "schedule/executor.h"
#include "schedule/generators.h"
#include "schedule/metrics.h"
#include "tests/schedule/ep_helpers.h"

namespace rp::schedule {
namespace {

using ::testing::HasSubstr;

class ExecutorEpTiming : public ::testing::TestWithParam<EpSetup> {};

// Every step's emulated time equals its prediction with that step's routing, to the nanosecond;
// the routing is recorded (every token slot accounted for) and the EP bytes are on the wire.
TEST_P(ExecutorEpTiming, EmulatedEqualsPredictedWithTheRunsRouting) {
  const EpSetup s = GetParam();
  const ExecutorOptions o = MakeOptions(s, 3);
  absl::StatusOr<RunResult> r = CreateAndRun(o);
  ASSERT_TRUE(r.ok()) << r.status();
  for (const StepRecord& st : r->steps) {
    EXPECT_EQ(st.emulated_ms, st.predicted_ms) << "step " << st.step;
    ASSERT_EQ(st.moe.size(), 2u);
    for (const StepRecord::MoeBlockRecord& b : st.moe) {
      int64_t tokens = 0;
      for (int64_t t : b.expert_tokens) tokens += t;
      EXPECT_EQ(tokens + b.dropped, int64_t{s.top_k} * s.dp * s.m * 8) << "layer " << b.layer;
    }
    EXPECT_EQ(st.replica_divergence, 0.0) << "EP replicas hold different experts, same dense";
  }
  EXPECT_FALSE(r->prediction.balanced_routing_assumed);
  EXPECT_EQ(r->emulated_step_ms, r->predicted_step_ms);
  EXPECT_GT(r->final_accuracy, 0.0) << "held-out evaluation through the EP group";
  uint64_t ep_bytes = 0;
  for (const DeviceReport& d : r->devices) {
    ep_bytes += d.modeled_ep_bytes;
    EXPECT_EQ(d.emulated.exposed_comm_ms, d.predicted.exposed_comm_ms) << "rank " << d.rank;
    EXPECT_EQ(d.emulated.peer_wait_ms, d.predicted.peer_wait_ms) << "rank " << d.rank;
  }
  EXPECT_GT(ep_bytes, 0u);
  std::printf("[figures] %s: step %.6f ms (predicted %.6f), EP modeled bytes %llu\n",
              Name(s).c_str(), r->emulated_step_ms, r->predicted_step_ms,
              static_cast<unsigned long long>(ep_bytes));
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, ExecutorEpTiming,
    ::testing::Values(EpSetup{}, EpSetup{.dp = 4, .pp = 2, .tp = 2, .ep = 2, .top_k = 2},
                      EpSetup{.dp = 4, .pp = 1, .tp = 1, .ep = 4, .capacity = 1.0},
                      EpSetup{.dp = 4, .pp = 2, .tp = 1, .ep = 4, .top_k = 2,
                              .kind = ScheduleKind::kZeroBubbleH1},
                      EpSetup{.dp = 2, .pp = 2, .tp = 2, .ep = 2, .m = 6,
                              .kind = ScheduleKind::kInterleaved},
                      EpSetup{.dp = 2, .pp = 4, .tp = 1, .ep = 2, .m = 8, .top_k = 2,
                              .kind = ScheduleKind::kDualPipe}),
    [](const ::testing::TestParamInfo<EpSetup>& p) { return Name(p.param); });

// DualPipe with EP: every model stage is held twice (direction 0 on pipeline rank k, direction 1
// on rank p - 1 - k), so each EP shard of a stage's experts exists on two devices of the same EP
// rank, which sum their gradients with the replicas' (the expert buckets' mirror group). Both
// copies stay bit-identical, dense and expert weights alike, and the losses follow the run's own
// single-device reference (the mirror sums in a different order: float tolerance, as dense
// DualPipe's). Without the mirror group the copies drift apart after the first update (and the
// loss left the reference by 1e-2 in 20 steps when tried).
TEST(ExecutorEp, DualPipeKeepsBothCopiesOfEveryExpertShardIdentical) {
  const EpSetup s{.dp = 4, .pp = 4, .tp = 1, .ep = 2, .m = 8, .top_k = 2,
                  .kind = ScheduleKind::kDualPipe};
  ExecutorOptions o = MakeOptions(s, 6);
  o.run_reference = true;
  absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
  ASSERT_TRUE(ex.ok()) << ex.status();
  absl::StatusOr<RunResult> r = (*ex)->Run();
  ASSERT_TRUE(r.ok()) << r.status();
  for (const StepRecord& st : r->steps) {
    EXPECT_EQ(st.emulated_ms, st.predicted_ms) << "step " << st.step;
    EXPECT_EQ(st.replica_divergence, 0.0) << "step " << st.step;
    EXPECT_LE(st.loss_rel_diff, 1e-5) << "step " << st.step;
  }
  EXPECT_LT(r->steps.back().loss, r->steps.front().loss);
  const ParallelGrid& grid = (*ex)->grid();
  const Program& prog = o.program;
  size_t compared = 0;
  for (int k = 0; k < prog.num_model_stages(); ++k) {
    const ChunkRef a = prog.HolderOf({0, k}), b = prog.HolderOf({1, k});
    ASSERT_NE(a.rank, b.rank);
    for (int dp = 0; dp < s.dp; ++dp) {
      absl::StatusOr<std::vector<float>> wa = (*ex)->Parameters(grid.RankOf({dp, a.rank, 0}), a.chunk);
      absl::StatusOr<std::vector<float>> wb = (*ex)->Parameters(grid.RankOf({dp, b.rank, 0}), b.chunk);
      ASSERT_TRUE(wa.ok() && wb.ok());
      ASSERT_EQ(wa->size(), wb->size());
      EXPECT_EQ(std::memcmp(wa->data(), wb->data(), wa->size() * sizeof(float)), 0)
          << "stage " << k << " replica " << dp;
      compared += wa->size();
    }
  }
  EXPECT_GT(compared, 0u);
  std::printf("[figures] %s: loss %.6f -> %.6f, max rel diff vs reference %.3g, %zu parameters "
              "equal in both copies\n",
              Name(s).c_str(), r->steps.front().loss, r->steps.back().loss, r->max_loss_rel_diff,
              compared);
}

// Σ over devices of the EP all-to-alls' peer wait and transfer in the median step's timelines.
struct EpWaits {
  Nanos peer{0}, transfer{0};
};
EpWaits SumEpWaits(const std::vector<std::vector<OpInterval>>& timelines) {
  EpWaits w;
  for (const auto& tl : timelines) {
    for (const OpInterval& iv : tl) {
      if (iv.kind != IntervalKind::kEpAllToAll) continue;
      w.peer += iv.peer;
      w.transfer += iv.transfer;
    }
  }
  return w;
}

// A router skewed towards expert 0 (router_skew, reproducible): EP rank 0 owns the busiest expert,
// receives the most tokens and sends the most back, so its peers wait for its combine — the EP
// group's straggler, as peer wait (not communication), emulated and predicted alike. Balanced
// routing (what a prediction without a run assumes, and says so) predicts no such wait.
TEST(ExecutorEp, SkewedRouterMakesAStragglerSeenAsPeerWait) {
  EpSetup s{.dp = 2, .pp = 1, .tp = 1, .ep = 2, .m = 4};
  std::vector<EpWaits> waits;
  for (double skew : {0.0, 6.0}) {
    ExecutorOptions o = MakeOptions(s, 2);
    o.model.moe.router_skew = skew;
    o.ep_row_bytes = 64 << 10;  // a token row stands for 64 KiB: bandwidth-bound all-to-alls
    absl::StatusOr<RunResult> r = CreateAndRun(o);
    ASSERT_TRUE(r.ok()) << r.status();
    const StepRecord& st = r->steps[static_cast<size_t>(r->timeline_step)];
    EXPECT_EQ(st.emulated_ms, st.predicted_ms);
    const std::vector<int64_t>& tokens = st.moe[0].expert_tokens;
    const int64_t all = tokens[0] + tokens[1] + tokens[2] + tokens[3];
    if (skew > 0) {
      EXPECT_GT(tokens[0], all / 2) << "expert 0 takes most tokens";
    }
    // The predictor's intervals for the same step are the emulated ones.
    const EpWaits emulated = SumEpWaits(r->timelines);
    std::vector<std::vector<OpInterval>> predicted;
    for (int rank = 0; rank < 2; ++rank) {
      predicted.push_back(r->prediction.Timeline(ParallelGrid::Create(o.grid, o.placement).value(),
                                                 rank));
    }
    const EpWaits pred = SumEpWaits(predicted);
    EXPECT_EQ(emulated.peer, pred.peer);
    EXPECT_EQ(emulated.transfer, pred.transfer);
    waits.push_back(emulated);
    std::printf("[figures] router_skew %.1f: expert tokens %lld %lld %lld %lld, step %.3f ms, EP "
                "peer wait %.3f ms, EP transfer %.3f ms (sum over devices)\n",
                skew, static_cast<long long>(tokens[0]), static_cast<long long>(tokens[1]),
                static_cast<long long>(tokens[2]), static_cast<long long>(tokens[3]),
                st.emulated_ms, ToMillis(emulated.peer), ToMillis(emulated.transfer));
    // Balanced routing, assumed and said so by a prediction without the run's routing: the EP
    // group is symmetric, nobody waits for a peer.
    absl::StatusOr<ExecutionPlan> plan = BuildPlan(PlanOptionsFor(o));
    ASSERT_TRUE(plan.ok()) << plan.status();
    absl::StatusOr<Prediction> balanced = Predict(*plan, PredictOptionsFor(o));
    ASSERT_TRUE(balanced.ok()) << balanced.status();
    EXPECT_TRUE(balanced->balanced_routing_assumed);
    std::vector<std::vector<OpInterval>> even;
    for (int rank = 0; rank < 2; ++rank) even.push_back(balanced->Timeline(plan->grid, rank));
    EXPECT_EQ(SumEpWaits(even).peer, Nanos(0));
    if (skew > 0) {
      EXPECT_LT(balanced->step_time, FromMillis(st.emulated_ms));
      EXPECT_GT(emulated.peer, FromMillis(1)) << "the straggler's peers wait for it";
    }
  }
  EXPECT_GT(waits[1].peer, 2 * waits[0].peer) << "more skew, more peer wait";
}

struct ExactCase {
  EpSetup setup;
  double aux = 0;
};

std::string ExactName(const ExactCase& c) {
  return Name(c.setup) + (c.aux > 0 ? "_aux" : "");
}

class ExecutorEpExact : public ::testing::TestWithParam<ExactCase> {};

// FP32 EP training through the executor is bit-identical to the single-device reference in the
// run's partition (tp = 1: one device's model; the MoE experts visit tokens in the canonical
// order) — memcmp of the loss of every step and of every parameter of every device after the last
// — with the reference summing replicas in the ring order of the run's gradient buckets
// (ReferenceOptions::ring_buckets: a ring of more than two replicas sums in its own order).
TEST_P(ExecutorEpExact, TrainsBitIdenticallyToTheReference) {
  const ExactCase c = GetParam();
  const EpSetup& s = c.setup;
  constexpr int kSteps = 4;
  ExecutorOptions o = MakeOptions(s, kSteps);
  o.model.moe.aux_loss = c.aux;
  absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
  ASSERT_TRUE(ex.ok()) << ex.status();
  absl::StatusOr<RunResult> r = (*ex)->Run();
  ASSERT_TRUE(r.ok()) << r.status();

  absl::StatusOr<ExecutionPlan> plan = BuildPlan(PlanOptionsFor(o));
  ASSERT_TRUE(plan.ok()) << plan.status();
  const ReferenceOptions ro = ReferenceFor(o, *plan);
  absl::StatusOr<Dataset> data = Dataset::Create(o.dataset);
  ASSERT_TRUE(data.ok());
  absl::StatusOr<std::unique_ptr<ReferenceTrainer>> ref = ReferenceTrainer::Create(ro, &*data);
  ASSERT_TRUE(ref.ok()) << ref.status();
  for (int i = 0; i < kSteps; ++i) {
    absl::StatusOr<StepResult> e = (*ref)->Step();
    ASSERT_TRUE(e.ok()) << e.status();
    const double loss = r->steps[static_cast<size_t>(i)].loss;
    EXPECT_EQ(std::memcmp(&loss, &e->loss, sizeof(double)), 0)
        << "step " << i << ": " << loss << " vs " << e->loss;
    EXPECT_EQ(r->steps[static_cast<size_t>(i)].replica_divergence, 0.0) << "step " << i;
  }
  int64_t dropped = 0;
  for (const StepRecord& st : r->steps) {
    for (const auto& b : st.moe) dropped += b.dropped;
  }
  if (s.capacity > 0) {
    EXPECT_GT(dropped, 0) << "the capacity drops tokens";
  }
  const ParallelGrid& grid = (*ex)->grid();
  size_t compared = 0;
  for (int rank = 0; rank < grid.world_size(); ++rank) {
    const Coord co = grid.CoordOf(rank);
    for (int ch = 0; ch < o.program.num_chunks; ++ch) {
      absl::StatusOr<std::vector<float>> w = (*ex)->Parameters(rank, ch);
      ASSERT_TRUE(w.ok()) << w.status();
      const std::span<const float> want =
          (*ref)->stage(o.program.ModelStage(co.pp, ch), co.tp, co.dp % s.ep).params();
      ASSERT_EQ(w->size(), want.size()) << "rank " << rank;
      EXPECT_EQ(std::memcmp(w->data(), want.data(), want.size() * sizeof(float)), 0)
          << "rank " << rank << " (dp " << co.dp << ", pp " << co.pp << ", tp " << co.tp
          << ") chunk " << ch;
      compared += want.size();
    }
  }
  EXPECT_GT(compared, 0u);
  std::printf("[figures] %s: loss %.6f -> %.6f bit-identical over %d steps, %zu parameters, "
              "%lld tokens dropped\n",
              ExactName(c).c_str(), r->steps.front().loss, r->steps.back().loss, kSteps, compared,
              static_cast<long long>(dropped));
}

INSTANTIATE_TEST_SUITE_P(
    EpDegrees, ExecutorEpExact,
    ::testing::Values(
        ExactCase{{.dp = 2, .pp = 2, .tp = 2, .ep = 1, .top_k = 1}},
        ExactCase{{.dp = 4, .pp = 2, .tp = 1, .ep = 1, .top_k = 2, .capacity = 1.0}},
        ExactCase{{.dp = 2, .pp = 2, .tp = 2, .ep = 2, .top_k = 1, .capacity = 1.0}},
        ExactCase{{.dp = 4, .pp = 2, .tp = 2, .ep = 2, .top_k = 2}},
        ExactCase{{.dp = 4, .pp = 2, .tp = 1, .ep = 4, .top_k = 1}},
        ExactCase{{.dp = 4, .pp = 1, .tp = 2, .ep = 4, .top_k = 2, .capacity = 1.0}},
        ExactCase{{.dp = 8, .pp = 2, .tp = 1, .ep = 4, .top_k = 2, .capacity = 1.25}},
        ExactCase{{.dp = 2, .pp = 2, .tp = 1, .ep = 2, .top_k = 2, .capacity = 1.0,
                   .kind = ScheduleKind::kZeroBubbleH1}},
        ExactCase{{.dp = 4, .pp = 2, .tp = 1, .ep = 2, .m = 6, .top_k = 2,
                   .kind = ScheduleKind::kInterleaved},
                  0.01}),
    [](const ::testing::TestParamInfo<ExactCase>& p) { return ExactName(p.param); });

// On a real clock the EP exchanges wait for their modeled arrivals on the wall clock too; the run
// completes, records its routing and keeps replicas consistent.
TEST(ExecutorEp, RealClockRunCompletes) {
  ExecutorOptions o = MakeOptions({.dp = 4, .pp = 2, .tp = 1, .ep = 2, .top_k = 2}, 3);
  o.virtual_time = false;
  o.time_scale = 0.05;
  absl::StatusOr<RunResult> r = CreateAndRun(o);
  ASSERT_TRUE(r.ok()) << r.status();
  for (const StepRecord& st : r->steps) {
    EXPECT_EQ(st.replica_divergence, 0.0);
    EXPECT_FALSE(st.routing.empty());
    EXPECT_GT(st.measured_ms, 0.0);
  }
}

// On a real clock every measured wait of the compute stream (receives, TP all-reduces, EP
// all-to-alls, the optimizer's wait) splits into peer wait, transfer and the host's lateness, which
// is exactly its wall time past its data's modeled arrival (the interval's emulated end, on the same
// step-relative axis). A compute segment's or optimizer's lateness (its end woken late) is at most
// its wall time past its emulated end, and leaves its busy time. The device's measured host_late_ms
// is the sum of both kinds, its busy_ms the compute less their lateness; the modeled timelines have
// none, and the virtual clock has none either.
TEST(ExecutorEp, RealClockWaitsAndComputeEndsSplitOffTheHostsLateness) {
  for (const bool virtual_time : {false, true}) {
    ExecutorOptions o = MakeOptions({.dp = 2, .pp = 2, .tp = 2, .ep = 2, .top_k = 2}, 2);
    o.virtual_time = virtual_time;
    o.time_scale = 0.1;
    absl::StatusOr<RunResult> r = CreateAndRun(o);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->timeline_step, r->median_step);
    std::map<IntervalKind, int> waits;
    for (size_t rank = 0; rank < r->timelines.size(); ++rank) {
      Nanos late{0}, busy{0};
      for (const OpInterval& iv : r->timelines[rank]) {
        const std::string where = absl::StrCat("rank ", rank, " ", IntervalKindName(iv.kind), " op ", iv.op);
        const Nanos wall = std::max(Nanos(0), iv.wall_end - iv.wall_start);
        if (iv.kind == IntervalKind::kCompute || iv.kind == IntervalKind::kOptimizer) {
          EXPECT_GE(iv.wall_late, Nanos(0)) << where;
          EXPECT_LE(iv.wall_late, std::max(Nanos(0), iv.wall_end - std::max(iv.end, iv.wall_start))) << where;
          if (virtual_time) {
            EXPECT_EQ(iv.wall_late, Nanos(0)) << where;
          }
          late += iv.wall_late;
          busy += wall - iv.wall_late;
          continue;
        }
        if (iv.kind != IntervalKind::kRecv && iv.kind != IntervalKind::kTpAllReduce &&
            iv.kind != IntervalKind::kEpAllToAll && iv.kind != IntervalKind::kGradWait) {
          EXPECT_EQ(iv.wall_late, Nanos(0));
          continue;
        }
        ++waits[iv.kind];
        EXPECT_EQ(iv.wall_peer + iv.wall_transfer + iv.wall_late, wall) << where;
        EXPECT_EQ(iv.wall_late, iv.wall_end - std::clamp(iv.end, iv.wall_start, iv.wall_end)) << where;
        EXPECT_GE(iv.wall_late, Nanos(0)) << where;
        if (virtual_time) {
          EXPECT_EQ(iv.wall_late, Nanos(0)) << where;
        }
        late += iv.wall_late;
      }
      const DeviceReport& d = r->devices[rank];
      EXPECT_NEAR(d.measured.host_late_ms, ToMillis(late), 1e-9) << "rank " << rank;
      EXPECT_NEAR(d.measured.busy_ms, ToMillis(busy), 1e-9) << "rank " << rank;
      EXPECT_EQ(d.emulated.host_late_ms, 0.0);
      EXPECT_EQ(d.predicted.host_late_ms, 0.0);
    }
    for (const IntervalKind k : {IntervalKind::kRecv, IntervalKind::kTpAllReduce,
                                 IntervalKind::kEpAllToAll, IntervalKind::kGradWait}) {
      EXPECT_GT(waits[k], 0) << IntervalKindName(k);
    }
  }
}

// The run's own reference (the report's reference_loss) shards its experts over the EP group: with
// top-2 routing and drops, an EP group of 2 (every sum over at most two copies, so the run's ring
// order is the reference's rank order) and one TP rank it reproduces every step's loss bit for bit;
// over 4 EP ranks the first step's (no update yet: the sums of the updates differ in order later).
TEST(ExecutorEp, TheRunsOwnReferenceMatchesItsLosses) {
  for (const EpSetup s : {EpSetup{.dp = 2, .pp = 2, .tp = 1, .ep = 2, .top_k = 2, .capacity = 0.75},
                          EpSetup{.dp = 4, .pp = 1, .tp = 1, .ep = 4, .top_k = 2}}) {
    ExecutorOptions o = MakeOptions(s, 3);
    o.run_reference = true;
    absl::StatusOr<RunResult> r = CreateAndRun(o);
    ASSERT_TRUE(r.ok()) << r.status();
    for (const StepRecord& st : r->steps) {
      if (s.dp > 2 && st.step > 0) {
        EXPECT_LE(st.loss_rel_diff, 1e-5) << Name(s) << " step " << st.step;
        continue;
      }
      EXPECT_EQ(st.loss, st.reference_loss) << Name(s) << " step " << st.step;
      EXPECT_EQ(st.loss_rel_diff, 0.0) << Name(s) << " step " << st.step;
    }
  }
}

TEST(ExecutorEp, BadOptionsNameTheField) {
  ExecutorOptions o = MakeOptions({.dp = 4, .ep = 3}, 1);
  auto a = Executor::Create(o);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("ep: dp (4) must be a multiple of ep (3)"));
  o = MakeOptions({.dp = 4, .ep = 4}, 1);
  o.model.moe.experts = 6;
  auto b = Executor::Create(o);
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("ep: 4 does not divide experts (6)"));
  o = MakeOptions({}, 1);
  o.model.moe.layers.clear();
  auto c = Executor::Create(o);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("ep: 2 > 1 needs MoE layers"));
  o = MakeOptions({}, 1);
  o.ep = 0;
  EXPECT_THAT(std::string(Executor::Create(o).status().message()), HasSubstr("ep: 0"));
  o = MakeOptions({}, 1);
  o.ep_row_bytes = 6;
  EXPECT_THAT(std::string(Executor::Create(o).status().message()), HasSubstr("ep_row_bytes: 6"));
}

}  // namespace
}  // namespace rp::schedule
