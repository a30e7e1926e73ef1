// Predict: closed forms on free links, the DDP bucket closed form, the fabric's contention,
// replica folding equal to the full simulation, stragglers, errors. (The schedules' golden values
// are in schedules_golden_test.cc; emulated == predicted in executor_test.cc.)
#include "schedule/predictor.h"

#include <algorithm>

#include "gtest/gtest.h"
#include "runtime/faults.h"
#include "runtime/timing.h"
#include "schedule/generators.h"
#include "tests/schedule/predict_helpers.h"

namespace rp::schedule {
namespace {

constexpr Nanos kF = FromMillis(50), kB = FromMillis(80);

ParallelGrid Grid(GridShape s, Placement p = {}) { return ParallelGrid::Create(s, p).value(); }

Prediction MustPredict(const Program& prog, const ParallelGrid& grid, const CostModel& cost,
                       const PredictOptions& opts = {}, LinkSpec links = {}) {
  auto pred = PredictProgram(prog, grid, cost, opts, links);
  EXPECT_TRUE(pred.ok()) << pred.status();
  return pred.ok() ? *pred : Prediction{};
}

TEST(Predict, OneFOneBAndGPipeOnFreeLinksAreTheClosedForm) {
  const CostModel cost = CostModel::Uniform({.forward = kF, .backward = kB});
  for (int p : {1, 2, 4}) {
    for (int m : {1, 3, 8}) {
      auto one = BuildOneFOneB({.num_ranks = p, .num_micro_batches = m});
      auto gpipe = BuildGPipe({.num_ranks = p, .num_micro_batches = m});
      ASSERT_TRUE(one.ok() && gpipe.ok());
      const Prediction a = MustPredict(*one, Grid({.pp = p}), cost);
      const Prediction b = MustPredict(*gpipe, Grid({.pp = p}), cost);
      EXPECT_EQ(a.step_time, (m + p - 1) * (kF + kB)) << "p=" << p << " m=" << m;
      EXPECT_EQ(b.step_time, (m + p - 1) * (kF + kB)) << "p=" << p << " m=" << m;
      EXPECT_EQ(a.single_device_time, p * m * (kF + kB));
      for (const DeviceMetrics& d : a.devices) EXPECT_EQ(d.busy, m * (kF + kB));
      EXPECT_EQ(a.peak_in_flight[0], std::min(p, m));
      EXPECT_EQ(b.peak_in_flight[0], m);
    }
  }
}

// S1 (SCENARIOS.md): DP = 2 × PP = 2, m = 8, F = 50, B = 80 ms, a ring step of 20 ms between the
// replicas: (m + p − 1)(F + B) + 2 (DP − 1) × 20 = 1210 ms; the stage-0 devices wait the whole
// all-reduce (their bucket is ready last), all of it transfer, after waiting (p − 1)(F + B) for
// their first gradient (peer wait: the pipeline's bubble, not communication).
TEST(Predict, S1IsTheWriteUpsClosedForm) {
  auto prog = BuildOneFOneB({.num_ranks = 2, .num_micro_batches = 8, .activation_bytes = 4096,
                             .gradient_bytes = 4096});
  ASSERT_TRUE(prog.ok());
  LinkSpec links;
  links.inter_node = {.alpha = FromMillis(20)};
  const ParallelGrid grid = Grid({.dp = 2, .pp = 2}, {.devices_per_node = 2});
  const Prediction pred =
      MustPredict(*prog, grid, CostModel::Uniform({.forward = kF, .backward = kB}), {}, links);
  EXPECT_EQ(pred.step_time, FromMillis(1210));
  EXPECT_EQ(pred.single_device_time, FromMillis(4160));
  for (int r : {0, 2}) {  // stage 0 of each replica
    EXPECT_EQ(pred.devices[static_cast<size_t>(r)].exposed_comm, FromMillis(40)) << r;
    EXPECT_EQ(pred.devices[static_cast<size_t>(r)].peer_wait, kF + kB) << r;
    EXPECT_EQ(pred.devices[static_cast<size_t>(r)].comm, FromMillis(40)) << r;
  }
}

// DDP buckets overlap the last backward (DESIGN.md "Gradient buckets overlap backward"): DP = 4,
// one stage of L equal layers, one micro-batch, a bucket per layer. Bucket i (layer L − 1 − i) is
// ready at F + (i + 1) B / L; the comm stream runs them in order, each taking A (the ring's closed
// form). The optimizer waits from F + B to the last bucket's end:
//   exposed = max(A, L·A − (L − 1)·B / L)      (all transfer: every replica is on time).
TEST(Predict, DdpBucketsInsideBackwardHaveTheClosedFormExposure) {
  constexpr int kLayers = 4, kWidth = 16;
  const MlpConfig model{.input_dim = kWidth, .hidden = std::vector<int>(kLayers - 1, kWidth),
                        .classes = kWidth};
  const uint64_t layer_params = kWidth * kWidth + kWidth;
  auto prog = BuildOneFOneB({.num_ranks = 1, .num_micro_batches = 1,
                             .gradient_bytes = 4 * layer_params * kLayers});
  ASSERT_TRUE(prog.ok());
  LinkSpec links;
  links.inter_node = {.alpha = FromMicros(5), .bandwidth_gbps = 1, .overhead = FromMicros(2)};
  links.devices_per_node = 1;
  for (Nanos backward : {FromMillis(1), FromMicros(100)}) {
    SCOPED_TRACE(::testing::Message() << "B = " << ToMillis(backward) << " ms");
    absl::StatusOr<ExecutionPlan> plan = BuildPlan({
        .grid = {.dp = 4, .pp = 1, .tp = 1},
        .placement = {.devices_per_node = 1},
        .program = *prog,
        .model = model,
        .cost = CostModel::Uniform({.forward = kF, .backward = backward}),
        .links = links,
        .bucket_bytes = 4 * layer_params});  // one layer per bucket
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_EQ(plan->Chunk(0, 0).buckets.size(), static_cast<size_t>(kLayers));
    absl::StatusOr<Prediction> pred = Predict(*plan, {});
    ASSERT_TRUE(pred.ok()) << pred.status();
    // A: an all-reduce of one layer's gradient, one segment per chunk of ceil(params / 4) floats.
    const uint64_t chunk_bytes = 4 * ((layer_params + 3) / 4);
    const Nanos hold = PortOccupancy(links.inter_node, chunk_bytes, 1.0);
    const Nanos A = 6 * (hold + links.inter_node.alpha);
    const Nanos per_layer = backward / kLayers;
    const Nanos exposed = std::max(A, kLayers * A - (kLayers - 1) * per_layer);
    for (const DeviceMetrics& d : pred->devices) {
      EXPECT_EQ(d.exposed_comm, exposed);
      EXPECT_EQ(d.peer_wait, Nanos(0));
      EXPECT_EQ(d.comm, kLayers * A);
      EXPECT_GE(d.overlap, 0.0);
      EXPECT_LE(d.overlap, 1.0);
    }
    EXPECT_EQ(pred->step_time, kF + backward + exposed);
  }
}

TEST(Predict, WithoutOverlapTheBucketsStartAtTheOptimizer) {
  auto prog = BuildOneFOneB({.num_ranks = 1, .num_micro_batches = 2, .gradient_bytes = 4096});
  ASSERT_TRUE(prog.ok());
  LinkSpec links;
  links.inter_node = {.alpha = FromMillis(1)};
  links.devices_per_node = 1;
  auto plan = [&](bool overlap) {
    return BuildPlan({.grid = {.dp = 2, .pp = 1, .tp = 1},
                      .placement = {.devices_per_node = 1},
                      .program = *prog,
                      .model = {.input_dim = 8, .hidden = {8, 8}, .classes = 8},
                      .cost = CostModel::Uniform({.forward = kF, .backward = kB}),
                      .links = links,
                      .bucket_bytes = 1,  // a bucket per layer
                      .overlap_grad_allreduce = overlap});
  };
  auto with = Predict(*plan(true)), without = Predict(*plan(false));
  ASSERT_TRUE(with.ok() && without.ok());
  // Three buckets of 2 ms each (2 ring steps of 1 ms): without overlap all after the backward.
  EXPECT_EQ(without->step_time, 2 * (kF + kB) + FromMillis(6));
  EXPECT_EQ(with->step_time, 2 * (kF + kB) + FromMillis(2));
  EXPECT_EQ(without->devices[0].exposed_comm, FromMillis(6));
  EXPECT_EQ(with->devices[0].exposed_comm, FromMillis(2));
}

// DualPipe's mirror groups (both copies of a stage, on ranks k and p - 1 - k, plus their replicas)
// start their all-reduces inside the backward too, in the model-stage order both holders share, a
// bucket final before the one ahead of it waiting for it: p = 2 (each rank holds stages 0 and 1,
// their last gradient ops in opposite orders on the two ranks), one bucket per layer, slow links.
// On every rank the buckets start in that order, the first before the rank's last compute op ends,
// and the step is shorter than with every bucket at the optimizer (as before: then no bucket
// started before the backward's end). (Emulated == predicted
// for DualPipe: executor_test.cc, executor_ep_test.cc.)
TEST(Predict, DualPipesMirrorBucketsStartInsideTheBackwardInModelStageOrder) {
  auto prog = BuildSchedule(ScheduleKind::kDualPipe, {.num_ranks = 2, .num_micro_batches = 4, .num_chunks = 2,
                                                      .gradient_bytes = 1 << 16});
  ASSERT_TRUE(prog.ok()) << prog.status();
  LinkSpec links;
  links.inter_node = {.alpha = FromMicros(200), .bandwidth_gbps = 1};
  links.devices_per_node = 1;
  auto plan = [&](bool overlap) {
    return BuildPlan({.grid = {.dp = 2, .pp = 2, .tp = 1},
                      .placement = {.devices_per_node = 1},
                      .program = *prog,
                      .model = {.input_dim = 8, .hidden = {64, 64, 64}, .classes = 8},
                      .cost = CostModel::Uniform({.forward = kF, .backward = kB, .weight_grad = kB / 2}),
                      .links = links,
                      .bucket_bytes = 1,  // a bucket per layer
                      .overlap_grad_allreduce = overlap});
  };
  absl::StatusOr<ExecutionPlan> with_plan = plan(true);
  ASSERT_TRUE(with_plan.ok()) << with_plan.status();
  auto with = Predict(*with_plan), without = Predict(*plan(false));
  ASSERT_TRUE(with.ok() && without.ok());
  EXPECT_LT(with->step_time, without->step_time);
  int deferred = 0;
  for (int rank = 0; rank < with_plan->grid.world_size(); ++rank) {
    const RankPlan& rp = with_plan->ranks[static_cast<size_t>(with_plan->grid.CoordOf(rank).pp)];
    // Bucket order: model stage 0's buckets first.
    ASSERT_EQ(with_plan->Chunk(with_plan->grid.CoordOf(rank).pp, rp.bucket_order.front().first).model_stage, 0);
    std::vector<Nanos> start(rp.bucket_order.size(), Nanos(-1));
    Nanos compute_end{-1};
    for (const OpInterval& iv : with->Timeline(with_plan->grid, rank)) {
      if (iv.kind == IntervalKind::kGradAllReduce) start[static_cast<size_t>(iv.detail)] = iv.start;
      if (iv.kind == IntervalKind::kCompute) compute_end = std::max(compute_end, iv.end);
    }
    EXPECT_LT(start.front(), compute_end) << "rank " << rank << ": the first bucket starts inside the backward";
    for (size_t o = 1; o < start.size(); ++o) {
      EXPECT_GE(start[o], start[o - 1]) << "rank " << rank << " bucket " << o;
    }
    // A chunk whose gradients are final before the chunk ahead of it in the order waits for it:
    // its first bucket starts after its own last gradient op.
    const int first_chunk = rp.bucket_order.front().first, second_chunk = rp.bucket_order.back().first;
    const ChunkPlan& a = with_plan->Chunk(with_plan->grid.CoordOf(rank).pp, first_chunk);
    const ChunkPlan& b = with_plan->Chunk(with_plan->grid.CoordOf(rank).pp, second_chunk);
    deferred += b.last_grad_op < a.last_grad_op;
  }
  EXPECT_GT(deferred, 0) << "some rank finishes its later stage's gradients first";
}

// PP traffic and a DP ring through one NIC: on a shared NIC the same step takes longer than with a
// NIC per device; folding is off (replicas share the NIC) and the full simulation still agrees
// with itself run to run.
TEST(Predict, PipelineAndDataParallelTrafficContendOnASharedNic) {
  auto prog = BuildOneFOneB({.num_ranks = 2, .num_micro_batches = 4,
                             .activation_bytes = 8 << 20, .gradient_bytes = 16 << 20});
  ASSERT_TRUE(prog.ok());
  const CostModel cost = CostModel::Uniform({.forward = FromMillis(1), .backward = FromMillis(2)});
  // Node n holds stage n of both replicas: every PP hop and every DP ring message is inter-node.
  const Placement placement{.order = {Dim::kDp, Dim::kPp, Dim::kTp}, .devices_per_node = 2};
  const ParallelGrid grid = Grid({.dp = 2, .pp = 2}, placement);
  LinkSpec links;
  links.inter_node = {.alpha = FromMicros(5), .bandwidth_gbps = 25, .overhead = FromMicros(3)};
  links.nics_per_node = 0;
  const Prediction rail = MustPredict(*prog, grid, cost, {}, links);
  links.nics_per_node = 1;
  const Prediction shared = MustPredict(*prog, grid, cost, {}, links);
  EXPECT_GT(shared.step_time, rail.step_time);
  EXPECT_FALSE(shared.folded);
  const Prediction again = MustPredict(*prog, grid, cost, {}, links);
  EXPECT_EQ(again.step_time, shared.step_time);
  for (size_t r = 0; r < 4; ++r) EXPECT_EQ(again.devices[r].exposed_comm, shared.devices[r].exposed_comm);
}

// The longest arrival − ready of any message, and its ranks (what a receiver on a real clock may
// sleep for one message): p = 2, m = 2, α = 1 ms, no port time. A slow link 1 → 0 (the gradients)
// with factor 5 from step 1 takes f·α = 5 ms from that step on; before it every message takes α
// and the first of equals (the first activation, 0 → 1) is named.
TEST(Predict, LongestTransitIsTheSlowestMessageFromReadyToArrival) {
  auto prog = BuildOneFOneB({.num_ranks = 2, .num_micro_batches = 2, .activation_bytes = 4096,
                             .gradient_bytes = 4096});
  ASSERT_TRUE(prog.ok());
  LinkSpec links;
  links.intra_node = {.alpha = FromMillis(1)};
  absl::StatusOr<ExecutionPlan> plan = PlanOf(*prog, CostModel::Uniform({.forward = kF, .backward = kB}),
                                              {.pp = 2}, {}, links);
  ASSERT_TRUE(plan.ok()) << plan.status();
  PlanOptions po = plan->options;
  po.faults.op_faults = {{.kind = OpFaultKind::kSlowLink, .rank = 1, .step = 1, .dst = 0, .factor = 5}};
  absl::StatusOr<ExecutionPlan> slowed = BuildPlan(po);
  ASSERT_TRUE(slowed.ok()) << slowed.status();
  for (int step : {0, 1}) {
    absl::StatusOr<Prediction> pred = Predict(*slowed, {.step = step});
    ASSERT_TRUE(pred.ok()) << pred.status();
    EXPECT_EQ(pred->longest_transit, FromMillis(step == 0 ? 1 : 5)) << step;
    EXPECT_EQ(pred->longest_transit_src, step == 0 ? 0 : 1) << step;
    EXPECT_EQ(pred->longest_transit_dst, step == 0 ? 1 : 0) << step;
  }
  // No messages: one device.
  auto alone = BuildOneFOneB({.num_ranks = 1, .num_micro_batches = 2});
  ASSERT_TRUE(alone.ok());
  const Prediction one = MustPredict(*alone, Grid({}), CostModel::Uniform({.forward = kF, .backward = kB}));
  EXPECT_EQ(one.longest_transit, Nanos(0));
  EXPECT_EQ(one.longest_transit_src, -1);
}

TEST(Predict, FoldedReplicasEqualTheFullSimulation) {
  auto prog = BuildZeroBubble({.num_ranks = 2, .num_micro_batches = 4, .activation_bytes = 1 << 16,
                               .tp_allreduce_bytes = 1 << 14, .gradient_bytes = 1 << 18});
  ASSERT_TRUE(prog.ok());
  const CostModel cost = CostModel::Uniform(
      {.forward = FromMillis(1), .backward = FromMillis(2), .weight_grad = FromMillis(1)});
  for (int dp : {2, 3, 5}) {
    const ParallelGrid grid = Grid({.dp = dp, .pp = 2, .tp = 2}, {.devices_per_node = 4});
    LinkSpec links = {.intra_node = {.alpha = FromMicros(3), .bandwidth_gbps = 300,
                                     .overhead = FromMicros(0.4)},
                      .inter_node = {.alpha = FromMicros(5), .bandwidth_gbps = 25,
                                     .overhead = FromMicros(3)}};
    const Prediction folded = MustPredict(*prog, grid, cost, {}, links);
    const Prediction full = MustPredict(*prog, grid, cost, {.fold_replicas = false}, links);
    EXPECT_TRUE(folded.folded) << "dp " << dp;
    EXPECT_FALSE(full.folded);
    EXPECT_EQ(folded.step_time, full.step_time) << "dp " << dp;
    for (int r = 0; r < grid.world_size(); ++r) {
      const auto& a = folded.Timeline(grid, r);
      const auto& b = full.Timeline(grid, r);
      ASSERT_EQ(a.size(), b.size()) << "rank " << r;
      for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].start, b[i].start) << "rank " << r << " interval " << i;
        EXPECT_EQ(a[i].end, b[i].end) << "rank " << r << " interval " << i;
        EXPECT_EQ(a[i].transfer, b[i].transfer) << "rank " << r << " interval " << i;
      }
      EXPECT_EQ(folded.modeled_wire_bytes[static_cast<size_t>(r)],
                full.modeled_wire_bytes[static_cast<size_t>(r)]);
    }
  }
}

// ReplicasFoldBlocker names the reason a plan's replicas are played one by one (the apps quote it when a
// layout is too large to predict), and kNone exactly when Predict folds them.
TEST(Predict, FoldBlockerNamesWhyReplicasAreNotFolded) {
  const CostModel cost = CostModel::Uniform(
      {.forward = FromMillis(1), .backward = FromMillis(2), .weight_grad = FromMillis(1)});
  auto blocker = [&](const Program& prog, GridShape shape, Placement placement, const PredictOptions& opts,
                     LinkSpec links = {}) {
    absl::StatusOr<ExecutionPlan> plan = PlanOf(prog, cost, shape, placement, links);
    EXPECT_TRUE(plan.ok()) << plan.status();
    if (!plan.ok()) return FoldBlocker::kNone;
    EXPECT_EQ(ReplicasFold(*plan, opts), ReplicasFoldBlocker(*plan, opts) == FoldBlocker::kNone);
    return ReplicasFoldBlocker(*plan, opts);
  };
  auto one = BuildOneFOneB({.num_ranks = 2, .num_micro_batches = 4, .gradient_bytes = 1 << 12});
  auto dual = BuildDualPipe({.num_ranks = 2, .num_micro_batches = 4, .num_chunks = 2, .gradient_bytes = 1 << 12});
  ASSERT_TRUE(one.ok() && dual.ok());
  const GridShape two{.dp = 2, .pp = 2, .tp = 2};
  const Placement whole_nodes{.devices_per_node = 4};  // each replica fills one node
  EXPECT_EQ(blocker(*one, two, whole_nodes, {}), FoldBlocker::kNone);
  EXPECT_EQ(blocker(*one, {.dp = 1, .pp = 2, .tp = 2}, whole_nodes, {}), FoldBlocker::kOneReplica);
  EXPECT_EQ(blocker(*one, two, whole_nodes, {.fold_replicas = false}), FoldBlocker::kDisabled);
  EXPECT_EQ(blocker(*dual, two, whole_nodes, {}), FoldBlocker::kNone);  // DualPipe folds too
  // Nodes of 3 with a pipeline of 2: replica 0's pipeline hop stays on a node, replica 1's does not.
  EXPECT_EQ(blocker(*dual, {.dp = 3, .pp = 2}, {.devices_per_node = 3}, {}), FoldBlocker::kLayout);
  std::vector<double> straggler(8, 1.0);
  straggler[5] = 2.0;
  EXPECT_EQ(blocker(*one, two, whole_nodes, {.compute_factor = straggler}), FoldBlocker::kStraggler);
  // Link classes that differ between replicas (a NIC per device, so only the classes differ): the
  // DP hop 0 -> 1 stays on node 0 while 1 -> 2 leaves it; replica 1's pipeline hop crosses nodes
  // where replica 0's does not.
  EXPECT_EQ(blocker(*one, {.dp = 3, .pp = 2}, whole_nodes, {}), FoldBlocker::kLayout);
  auto three = BuildOneFOneB({.num_ranks = 3, .num_micro_batches = 4, .gradient_bytes = 1 << 12});
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(blocker(*three, {.dp = 2, .pp = 3}, whole_nodes, {}), FoldBlocker::kLayout);
  EXPECT_EQ(blocker(*three, {.dp = 2, .pp = 3}, {.devices_per_node = 3}, {}), FoldBlocker::kNone);
  // Replicas split across nodes of 2 with one NIC per node: they share it.
  LinkSpec shared;
  shared.nics_per_node = 1;
  EXPECT_EQ(blocker(*one, {.dp = 2, .pp = 2}, {.order = {Dim::kDp, Dim::kPp, Dim::kTp}, .devices_per_node = 2}, {},
                    shared),
            FoldBlocker::kLayout);
}

TEST(Predict, StragglersSlowTheirDeviceAndPerOpFactorsReplaceThem) {
  auto prog = BuildOneFOneB({.num_ranks = 2, .num_micro_batches = 4});
  ASSERT_TRUE(prog.ok());
  const ParallelGrid grid = Grid({.pp = 2});
  const CostModel cost = CostModel::Uniform({.forward = kF, .backward = kB});
  PredictOptions opts;
  opts.compute_factor = {1.0, 1.5};
  const Prediction pred = MustPredict(*prog, grid, cost, opts);
  EXPECT_EQ(pred.devices[1].busy, 4 * ScaleDuration(kF, 1.5) + 4 * ScaleDuration(kB, 1.5));
  EXPECT_EQ(pred.single_device_time, 8 * (kF + kB));  // T1: the healthy device
  opts.compute_op_factor = [](int rank, int op) { return rank == 0 && op == 0 ? 2.0 : 1.0; };
  const Prediction one_op = MustPredict(*prog, grid, cost, opts);
  EXPECT_EQ(one_op.devices[0].busy, 4 * (kF + kB) + kF);
  opts.compute_op_factor = nullptr;
  opts.compute_factor = {1.0};
  EXPECT_FALSE(PredictProgram(*prog, grid, cost, opts).ok());
  opts.compute_factor = {1.0, 0.5};
  EXPECT_FALSE(PredictProgram(*prog, grid, cost, opts).ok());
}

TEST(Predict, ModeledTimesThatDoNotFitAreRefused) {
  auto prog = BuildOneFOneB({.num_ranks = 2, .num_micro_batches = 4});
  ASSERT_TRUE(prog.ok());
  const Nanos huge(int64_t{1} << 61);
  auto pred = PredictProgram(*prog, Grid({.pp = 2}),
                             CostModel::Uniform({.forward = huge, .backward = huge}));
  ASSERT_FALSE(pred.ok());
  EXPECT_EQ(pred.status().code(), absl::StatusCode::kResourceExhausted) << pred.status();
}

}  // namespace
}  // namespace rp::schedule
