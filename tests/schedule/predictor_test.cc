// Predictor golden tests: closed forms from the papers, exact in integer nanoseconds.
#include "schedule/predictor.h"

#include <algorithm>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedule/generators.h"

namespace rp::schedule {
namespace {

using ::testing::HasSubstr;

const Nanos kF = FromMillis(50), kB = FromMillis(80), kW = FromMillis(40);

ParallelGrid Grid(GridShape s, Placement pl = {}) {
  auto g = ParallelGrid::Create(s, pl);
  EXPECT_TRUE(g.ok()) << g.status();
  return *g;
}

Prediction MustPredict(const Program& prog, const ParallelGrid& grid, const CostModel& cost,
                       const PredictOptions& opts = {}) {
  auto pred = Predict(prog, grid, cost, opts);
  EXPECT_TRUE(pred.ok()) << pred.status();
  return pred.ok() ? *pred : Prediction{};
}

Nanos MaxBubble(const Prediction& pred) {
  Nanos b{0};
  for (const auto& d : pred.devices) b = std::max(b, d.bubble);
  return b;
}

TEST(Predictor, OneFOneBStepAndBubbleMatchTheClosedFormForAnyPAndM) {
  const CostModel cost = CostModel::Uniform({.forward = kF, .backward = kB});
  for (int p = 1; p <= 6; ++p) {
    for (int m = 1; m <= 9; ++m) {
      SCOPED_TRACE(::testing::Message() << "p=" << p << " m=" << m);
      auto prog = BuildOneFOneB({.num_ranks = p, .num_micro_batches = m, .activation_bytes = 1024});
      ASSERT_TRUE(prog.ok());
      const Prediction pred = MustPredict(*prog, Grid({.pp = p}), cost);
      EXPECT_EQ(pred.step_time, (m + p - 1) * (kF + kB));
      for (const auto& d : pred.devices) {
        EXPECT_EQ(d.bubble, (p - 1) * (kF + kB));
        EXPECT_DOUBLE_EQ(d.bubble_over_total, static_cast<double>(p - 1) / (m + p - 1));
        EXPECT_DOUBLE_EQ(d.bubble_over_ideal, static_cast<double>(p - 1) / m);
      }
      auto gpipe = BuildGPipe({.num_ranks = p, .num_micro_batches = m});
      ASSERT_TRUE(gpipe.ok());
      const Prediction g = MustPredict(*gpipe, Grid({.pp = p}), cost);
      EXPECT_EQ(g.step_time, pred.step_time);
      for (int s = 0; s < p; ++s) {
        EXPECT_EQ(g.devices[s].peak_in_flight, m);
        EXPECT_EQ(pred.devices[s].peak_in_flight, std::min(p - s, m));
      }
    }
  }
}

TEST(Predictor, PublishedNumbersForP4M8) {
  const CostModel cost = CostModel::Uniform({.forward = kF, .backward = kB, .weight_grad = kW,
                                             .activation_bytes = 1000});
  const ParallelGrid grid = Grid({.pp = 4});
  auto one = BuildOneFOneB({.num_ranks = 4, .num_micro_batches = 8});
  auto zb = BuildZeroBubble({.num_ranks = 4, .num_micro_batches = 8});
  auto il = BuildInterleaved({.num_ranks = 4, .num_micro_batches = 8, .num_chunks = 2});
  ASSERT_TRUE(one.ok() && zb.ok() && il.ok());
  const Prediction p1 = MustPredict(*one, grid, cost);
  const Prediction pz = MustPredict(*zb, grid, cost);
  const Prediction pi = MustPredict(*il, grid, cost);
  EXPECT_EQ(MaxBubble(p1), FromMillis(390));
  EXPECT_EQ(MaxBubble(pz), FromMillis(150));
  EXPECT_EQ(MaxBubble(pi), FromMillis(195));
  EXPECT_EQ(pz.step_time, 8 * (kF + kB) + FromMillis(150));
  EXPECT_EQ(pi.step_time, 8 * (kF + kB) + FromMillis(195));
  EXPECT_EQ(p1.devices[0].peak_activation_bytes, 4000u);
  EXPECT_EQ(pz.devices[0].peak_activation_bytes, 4000u);
  EXPECT_EQ(pz.devices[3].peak_activation_bytes, 4000u);  // deferred W's keep activations
  EXPECT_EQ(p1.devices[3].peak_activation_bytes, 1000u);
}

TEST(Predictor, InterleavedBubbleOverIdealIsPMinusOneOverVM) {
  const CostModel cost = CostModel::Uniform({.forward = FromMillis(60), .backward = FromMillis(120)});
  for (int p = 1; p <= 5; ++p) {
    for (int v = 1; v <= 3; ++v) {
      for (int m = p; m <= 3 * p; m += p) {
        SCOPED_TRACE(::testing::Message() << "p=" << p << " v=" << v << " m=" << m);
        auto prog = BuildInterleaved({.num_ranks = p, .num_micro_batches = m, .num_chunks = v});
        ASSERT_TRUE(prog.ok());
        const Prediction pred = MustPredict(*prog, Grid({.pp = p}), cost);
        EXPECT_EQ(MaxBubble(pred), (p - 1) * FromMillis(180) / v);
        EXPECT_DOUBLE_EQ(pred.devices[0].bubble_over_ideal, static_cast<double>(p - 1) / (v * m));
      }
    }
  }
}

TEST(Predictor, ZeroBubbleH1BubbleIsPMinusOneTimesFPlusBMinusTwoW) {
  for (int p = 1; p <= 6; ++p) {
    for (int m = p; m <= p + 6; ++m) {
      SCOPED_TRACE(::testing::Message() << "p=" << p << " m=" << m);
      auto prog = BuildZeroBubble({.num_ranks = p, .num_micro_batches = m});
      ASSERT_TRUE(prog.ok());
      // F = B-input = W (a third of 1F1B's bubble), and the F = 50, B = 80, W = 40.
      for (auto [f, b, w] : {std::tuple{30, 60, 30}, std::tuple{50, 80, 40}}) {
        const CostModel cost = CostModel::Uniform(
            {.forward = FromMillis(f), .backward = FromMillis(b), .weight_grad = FromMillis(w)});
        const Prediction pred = MustPredict(*prog, Grid({.pp = p}), cost);
        EXPECT_EQ(MaxBubble(pred), (p - 1) * FromMillis(f + b - 2 * w)) << "F=" << f;
        EXPECT_EQ(pred.step_time, m * FromMillis(f + b) + (p - 1) * FromMillis(f + b - 2 * w));
      }
    }
  }
}

TEST(Predictor, ScenarioS1HybridOneFOneB) {
  // PP = 2, DP = 2, m = 8, F = 50, B = 80, every ring step 20 ms, free p2p: replicas on their own node.
  auto prog = BuildOneFOneB({.num_ranks = 2, .num_micro_batches = 8, .activation_bytes = 1 << 20,
                             .gradient_bytes = 1 << 20});
  ASSERT_TRUE(prog.ok());
  const ParallelGrid grid = Grid({.dp = 2, .pp = 2}, {.devices_per_node = 2});
  PredictOptions opts;
  opts.links.inter_node = {.alpha = FromMillis(20)};  // bandwidth 0: infinite
  const Prediction pred = MustPredict(*prog, grid, CostModel::Uniform({.forward = kF, .backward = kB}), opts);
  EXPECT_EQ(pred.step_time, FromMillis(1210));
  EXPECT_EQ(pred.single_device_time, FromMillis(4160));
  EXPECT_NEAR(pred.speedup, 4160.0 / 1210.0, 1e-12);
  EXPECT_NEAR(pred.efficiency, 4160.0 / 1210.0 / 4, 1e-12);
  EXPECT_EQ(pred.num_replica_classes(), 1);
  // v = 1: a device's single bucket starts after its last B, so every device waits on it computing
  // nothing: all of it is exposed. Stage 1's runs during stage 0's last B (timeline), stage 0's after.
  const int s0 = grid.RankOf({1, 0, 0}), s1 = grid.RankOf({1, 1, 0});
  for (int r : {s0, s1}) {
    EXPECT_EQ(pred.devices[r].comm, FromMillis(40));
    EXPECT_EQ(pred.devices[r].exposed_comm, FromMillis(40));
    EXPECT_DOUBLE_EQ(pred.devices[r].overlap, 0.0);
  }
  const auto& tl1 = pred.Timeline(grid, s1);
  EXPECT_EQ(tl1[tl1.size() - 2].start, FromMillis(1090));  // the bucket, on the comm stream
  EXPECT_EQ(tl1[tl1.size() - 2].end, FromMillis(1130));
  EXPECT_EQ(pred.Timeline(grid, s0).back().end, FromMillis(1210));
}

TEST(Predictor, AStragglerSlowsItsReplicaAndTheAllReduceWaitsForIt) {
  // PP = 1, DP = 2, m = 4, F = 50, B = 80, free links: each replica computes 4 x 130 = 520 ms. Rank 1
  // at factor 2 computes 1040 ms; the gradient all-reduce (free) waits for it, so the step is 1040
  // and the healthy rank idles 520 of it. T1 is the healthy single device's: 2 x 520.
  auto prog = BuildOneFOneB({.num_ranks = 1, .num_micro_batches = 4, .gradient_bytes = 1 << 10});
  ASSERT_TRUE(prog.ok());
  const ParallelGrid grid = Grid({.dp = 2, .pp = 1}, {});
  PredictOptions opts;
  opts.compute_factor = {1.0, 2.0};
  const CostModel cost = CostModel::Uniform({.forward = kF, .backward = kB});
  const Prediction pred = MustPredict(*prog, grid, cost, opts);
  EXPECT_EQ(pred.step_time, FromMillis(1040));
  EXPECT_EQ(pred.single_device_time, FromMillis(1040));
  EXPECT_EQ(pred.devices[0].busy, FromMillis(520));
  EXPECT_EQ(pred.devices[1].busy, FromMillis(1040));
  EXPECT_EQ(pred.num_replica_classes(), 2);  // the straggler's replica is its own class
  // Same answer without replica classes; a 1.5 factor rounds like FaultInjector (780 ms).
  opts.dedupe_replicas = false;
  EXPECT_EQ(MustPredict(*prog, grid, cost, opts).step_time, FromMillis(1040));
  opts.compute_factor = {1.5, 1.0};
  EXPECT_EQ(MustPredict(*prog, grid, cost, opts).step_time, FromMillis(780));
  opts.compute_factor = {1.0};  // wrong size
  EXPECT_FALSE(Predict(*prog, grid, cost, opts).ok());
  opts.compute_factor = {1.0, 0.5};  // a factor below 1
  EXPECT_FALSE(Predict(*prog, grid, cost, opts).ok());
}

TEST(Predictor, PerOpFactorsSlowExactlyTheOpsTheyName) {
  // PP = 1, DP = 2, m = 2 (ops F0 F1 B0 B1 or 1F1B order, then the optimizer): doubling rank 1's
  // compute op 0 (its first F) adds F to its replica; the all-reduce waits for it.
  auto prog = BuildOneFOneB({.num_ranks = 1, .num_micro_batches = 2, .gradient_bytes = 1 << 10});
  ASSERT_TRUE(prog.ok());
  const ParallelGrid grid = Grid({.dp = 2, .pp = 1}, {});
  const CostModel cost = CostModel::Uniform({.forward = kF, .backward = kB, .optimizer = FromMillis(3)});
  PredictOptions opts;
  opts.compute_op_factor = [](int rank, int op) { return rank == 1 && op == 0 ? 2.0 : 1.0; };
  const Prediction pred = MustPredict(*prog, grid, cost, opts);
  EXPECT_EQ(pred.step_time, 2 * (kF + kB) + kF + FromMillis(3));
  EXPECT_EQ(pred.devices[1].busy, 2 * (kF + kB) + kF + FromMillis(3));
  EXPECT_EQ(pred.num_replica_classes(), 2);
  // The optimizer is the last compute op: index 4 here.
  opts.compute_op_factor = [](int rank, int op) { return rank == 0 && op == 4 ? 3.0 : 1.0; };
  EXPECT_EQ(MustPredict(*prog, grid, cost, opts).step_time, 2 * (kF + kB) + FromMillis(9));
  // A constant factor per rank is the straggler model.
  opts.compute_op_factor = [](int rank, int) { return rank == 1 ? 1.5 : 1.0; };
  PredictOptions straggler;
  straggler.compute_factor = {1.0, 1.5};
  EXPECT_EQ(MustPredict(*prog, grid, cost, opts).step_time,
            MustPredict(*prog, grid, cost, straggler).step_time);
  opts.compute_op_factor = [](int, int) { return 0.5; };
  auto bad = Predict(*prog, grid, cost, opts);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("compute_op_factor"));
}

TEST(Predictor, PointToPointLatencyIsExposedOnTheCriticalPath) {
  auto prog = BuildOneFOneB({.num_ranks = 2, .num_micro_batches = 1, .activation_bytes = 4000});
  ASSERT_TRUE(prog.ok());
  PredictOptions opts;
  opts.links.intra_node = {.alpha = FromMillis(5), .bandwidth_gbps = 1};  // 4000 B: +4 µs
  const Prediction pred =
      MustPredict(*prog, Grid({.pp = 2}), CostModel::Uniform({.forward = kF, .backward = kB}), opts);
  const Nanos hop = FromMillis(5) + FromMicros(4);
  EXPECT_EQ(pred.step_time, 2 * (kF + kB) + 2 * hop);
  for (const auto& d : pred.devices) {
    EXPECT_EQ(d.comm, hop);
    EXPECT_EQ(d.exposed_comm, hop);
  }
  // Timeline: rank 1's RecvAct ends when the activation arrives.
  const auto& tl = pred.Timeline(Grid({.pp = 2}), 1);
  EXPECT_EQ(tl[0].start, Nanos(0));
  EXPECT_EQ(tl[0].end, kF + hop);
}

// A directed link carries one message at a time. GPipe on 2 stages with transfers (L) slower than
// F and B: activation j leaves stage 0 when activation j − 1 has arrived, so it arrives at
// F + (j + 1) L; stage 1's last forward ends at 2F + mL, its gradients queue the same way, and the
// step is 2(F + B) + 2mL (free links would give about (m + 1)(F + B) + 2L).
TEST(Predictor, MessagesOnOneLinkQueueBehindEachOther) {
  const int m = 4;
  const Nanos F = FromMillis(1), B = FromMillis(2), L = FromMillis(10);
  auto prog = BuildGPipe({.num_ranks = 2, .num_micro_batches = m, .activation_bytes = 4096,
                          .gradient_bytes = 4096});
  ASSERT_TRUE(prog.ok()) << prog.status();
  PredictOptions opts;
  opts.links.intra_node = {.alpha = L, .bandwidth_gbps = 0};  // every message takes L
  const ParallelGrid grid = Grid({.pp = 2});
  const Prediction pred =
      MustPredict(*prog, grid, CostModel::Uniform({.forward = F, .backward = B}), opts);
  EXPECT_EQ(pred.step_time, 2 * (F + B) + 2 * m * L);
  // Stage 0's sends: posted after each forward, arriving one L after the previous arrival.
  int j = 0;
  const auto& tl0 = pred.Timeline(grid, 0);
  for (size_t i = 0; i < prog->ranks[0].size(); ++i) {
    if (prog->ranks[0][i].kind != OpKind::kSendAct) continue;
    EXPECT_EQ(tl0[i].start, (j + 1) * F) << "send " << j;
    EXPECT_EQ(tl0[i].end, F + (j + 1) * L) << "send " << j;
    ++j;
  }
  EXPECT_EQ(j, m);
  // Stage 1 receives m activations; each one's link time includes its wait for the link, so the
  // whole receive wait counts as communication: F + jL − jF of waiting for activation j.
  Nanos comm{0};
  for (int k = 0; k < m; ++k) comm += (k + 1) * L - k * F;
  EXPECT_EQ(pred.devices[1].comm, comm);
}

TEST(Predictor, TensorParallelAllReduceAddsToEveryForwardAndBackward) {
  const int p = 3, m = 5;
  auto prog = BuildOneFOneB({.num_ranks = p, .num_micro_batches = m, .tp_allreduce_bytes = 4096});
  ASSERT_TRUE(prog.ok());
  // TP shards on different nodes (α = 100 µs), pipeline hops inside a node (free).
  PredictOptions opts;
  opts.links.inter_node = {.alpha = FromMicros(100)};
  const Prediction pred = MustPredict(*prog, Grid({.pp = p, .tp = 2}, {.order = {Dim::kPp, Dim::kTp, Dim::kDp},
                                                                      .devices_per_node = p}),
                                      CostModel::Uniform({.forward = kF, .backward = kB}), opts);
  const Nanos tp_ar = 2 * FromMicros(100);  // 2(n − 1) steps of α with n = 2
  EXPECT_EQ(pred.step_time, (m + p - 1) * (kF + kB + 2 * tp_ar));
  EXPECT_EQ(pred.devices[0].exposed_comm, 2 * m * tp_ar);
}

TEST(Predictor, ReplicaClassesGiveTheSameAnswerAsSimulatingEveryReplica) {
  // PP = 3 on nodes of 4: replicas straddle node boundaries differently, so classes differ.
  auto prog = BuildInterleaved({.num_ranks = 3, .num_micro_batches = 6, .num_chunks = 2,
                                .activation_bytes = 1 << 20, .gradient_bytes = 1 << 22,
                                .buckets_per_chunk = 3});
  ASSERT_TRUE(prog.ok());
  const ParallelGrid grid = Grid({.dp = 4, .pp = 3, .tp = 1}, {.devices_per_node = 4});
  PredictOptions opts;
  opts.links.intra_node = {.alpha = FromMicros(5), .bandwidth_gbps = 100};
  opts.links.inter_node = {.alpha = FromMicros(20), .bandwidth_gbps = 10};
  opts.dp_ring = {.segment_bytes = 1 << 18, .codec = Codec::kBf16};
  const CostModel cost = CostModel::Uniform({.forward = FromMillis(10), .backward = FromMillis(20)});
  const Prediction fast = MustPredict(*prog, grid, cost, opts);
  opts.dedupe_replicas = false;
  const Prediction full = MustPredict(*prog, grid, cost, opts);
  EXPECT_GT(fast.num_replica_classes(), 1);
  EXPECT_LT(fast.num_replica_classes(), 4);
  EXPECT_EQ(full.num_replica_classes(), 4);
  EXPECT_EQ(fast.step_time, full.step_time);
  for (int r = 0; r < grid.world_size(); ++r) {
    EXPECT_EQ(fast.devices[r].busy, full.devices[r].busy);
    EXPECT_EQ(fast.devices[r].exposed_comm, full.devices[r].exposed_comm);
    EXPECT_EQ(fast.devices[r].comm, full.devices[r].comm);
    const auto& a = fast.Timeline(grid, r);
    const auto& b = full.Timeline(grid, r);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].end, b[i].end) << "rank " << r << " op " << i;
  }
}

TEST(Predictor, InterleavedBucketsOverlapTheRemainingBackward) {
  auto prog = BuildInterleaved({.num_ranks = 2, .num_micro_batches = 4, .num_chunks = 2,
                                .gradient_bytes = 4000});
  ASSERT_TRUE(prog.ok());
  PredictOptions opts;
  opts.links.inter_node = {.alpha = FromMillis(10)};  // DP ring between nodes, pipeline hops free
  const Prediction pred = MustPredict(*prog, Grid({.dp = 2, .pp = 2}, {.devices_per_node = 2}), CostModel::Uniform({.forward = kF, .backward = kB}), opts);
  // Two buckets per device of 2(n − 1)α = 20 ms each; chunk 1's bucket runs during chunk 0's backward.
  for (const auto& d : pred.devices) {
    EXPECT_EQ(d.comm, FromMillis(40));
    EXPECT_GT(d.overlap, 0.0);
  }
}

TEST(Predictor, RejectsMismatchedGridAndCostModel) {
  auto prog = BuildOneFOneB({.num_ranks = 2, .num_micro_batches = 2});
  ASSERT_TRUE(prog.ok());
  auto st = Predict(*prog, Grid({.pp = 3}), CostModel::Uniform({})).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("pp=3"));
  CostModel three{{StageCost{}, StageCost{}, StageCost{}}};
  st = Predict(*prog, Grid({.pp = 2}), three).status();
  EXPECT_THAT(std::string(st.message()), HasSubstr("expected 1 or 2"));
}

}  // namespace
}  // namespace rp::schedule
