// Replica folding with expert parallelism: the predictor plays one EP group (ep replicas) and
// stands the ring messages that leave it in for those that enter it. Every device's timeline, wire
// bytes and the transit figures must equal those of the unfolded simulation (every device played),
// across schedules, TP, node shapes and routings; and folding is refused, naming why, where the
// replicas do not repeat every EP group.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "schedule/generators.h"
#include "schedule/plan.h"
#include "schedule/predictor.h"
#include "schedule/routing.h"

namespace rp::schedule {
namespace {

struct Layout {
  int dp = 4, pp = 2, tp = 1, ep = 2;
  int devices_per_node = 2, nics_per_node = 0;
  ScheduleKind kind = ScheduleKind::kOneFOneB;
  int top_k = 2;
  double capacity = 0;
  bool dp_innermost = false;  // placement order dp, pp, tp (default: tp, pp, dp)
  std::string Name() const {
    return absl::StrCat(ScheduleName(kind), " dp", dp, " pp", pp, " tp", tp, " ep", ep, " node", devices_per_node,
                        " nics", nics_per_node, " top", top_k, " cap", capacity, dp_innermost ? " dp-inner" : "");
  }
};

// 16 -> 32 x 5 -> 10; layers 2 and 4 are MoE blocks of 4 experts (32 -> 16 -> 32), distinct intra-
// and inter-node links with per-message overheads, buckets small enough that each stage has several.
absl::StatusOr<ExecutionPlan> PlanFor(const Layout& l) {
  const bool v = l.kind == ScheduleKind::kZeroBubbleV || l.kind == ScheduleKind::kDualPipeV ||
                 l.kind == ScheduleKind::kDualPipe || l.kind == ScheduleKind::kInterleaved;
  absl::StatusOr<Program> prog =
      BuildSchedule(l.kind, {.num_ranks = l.pp, .num_micro_batches = 4, .num_chunks = v ? 2 : 1,
                             .activation_bytes = 1 << 14, .tp_allreduce_bytes = l.tp > 1 ? 4096u : 0u,
                             .gradient_bytes = 1 << 18});
  if (!prog.ok()) return prog.status();
  PlanOptions o;
  o.grid = {.dp = l.dp, .pp = l.pp, .tp = l.tp};
  o.program = *prog;
  o.model.hidden = {32, 32, 32, 32, 32};
  o.model.moe.layers = {2, 4};
  o.model.moe.experts = 4;
  o.model.moe.top_k = l.top_k;
  o.model.moe.expert_hidden = 16;
  o.model.moe.capacity_factor = l.capacity;
  o.ep = l.ep;
  o.microbatch_size = 8;
  o.cost = CostModel::Uniform({.forward = FromMillis(1), .backward = FromMillis(2), .weight_grad = FromMillis(1),
                               .optimizer = FromMicros(300)});
  o.links.intra_node = {.alpha = FromMicros(3), .bandwidth_gbps = 300, .overhead = FromMicros(0.4)};
  o.links.inter_node = {.alpha = FromMicros(5), .bandwidth_gbps = 25, .overhead = FromMicros(3)};
  o.links.devices_per_node = l.devices_per_node;
  o.links.nics_per_node = l.nics_per_node;
  o.placement.devices_per_node = l.devices_per_node;
  if (l.dp_innermost) o.placement.order = {Dim::kDp, Dim::kPp, Dim::kTp};
  o.bucket_bytes = 16 << 10;
  return BuildPlan(o);
}

void ExpectSamePrediction(const ExecutionPlan& plan, const Prediction& folded, const Prediction& full,
                          const std::string& name) {
  EXPECT_EQ(folded.step_time, full.step_time) << name;
  EXPECT_EQ(folded.makespan, full.makespan) << name;
  EXPECT_EQ(folded.longest_transit, full.longest_transit) << name;
  EXPECT_EQ(folded.balanced_routing_assumed, full.balanced_routing_assumed) << name;
  for (int r = 0; r < plan.grid.world_size(); ++r) {
    const std::vector<OpInterval>& a = folded.Timeline(plan.grid, r);
    const std::vector<OpInterval>& b = full.Timeline(plan.grid, r);
    ASSERT_EQ(a.size(), b.size()) << name << " rank " << r;
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(a[i].kind, b[i].kind) << name << " rank " << r << " interval " << i;
      ASSERT_EQ(a[i].start, b[i].start) << name << " rank " << r << " interval " << i;
      ASSERT_EQ(a[i].end, b[i].end) << name << " rank " << r << " interval " << i;
      ASSERT_EQ(a[i].transfer, b[i].transfer) << name << " rank " << r << " interval " << i;
    }
    EXPECT_EQ(folded.modeled_wire_bytes[static_cast<size_t>(r)], full.modeled_wire_bytes[static_cast<size_t>(r)])
        << name << " rank " << r;
    EXPECT_EQ(folded.devices[static_cast<size_t>(r)].busy, full.devices[static_cast<size_t>(r)].busy)
        << name << " rank " << r;
  }
}

TEST(PredictFold, OneEpGroupPlayedEqualsEveryDevicePlayed) {
  const std::vector<Layout> layouts = {
      {.dp = 4, .pp = 2, .tp = 1, .ep = 2, .devices_per_node = 2},  // a replica a node
      {.dp = 8, .pp = 2, .tp = 1, .ep = 2, .devices_per_node = 4},  // two replicas a node: hops alternate
      {.dp = 8, .pp = 1, .tp = 1, .ep = 4, .devices_per_node = 2},  // the EP group spans two nodes
      {.dp = 8, .pp = 1, .tp = 1, .ep = 4, .devices_per_node = 4, .top_k = 1, .capacity = 1.0},
      {.dp = 6, .pp = 1, .tp = 2, .ep = 2, .devices_per_node = 4},  // TP rings, two replicas a node
      {.dp = 8, .pp = 2, .tp = 2, .ep = 4, .devices_per_node = 8, .kind = ScheduleKind::kZeroBubbleH1},
      {.dp = 8, .pp = 2, .tp = 1, .ep = 2, .devices_per_node = 2, .kind = ScheduleKind::kInterleaved},
      {.dp = 6, .pp = 2, .tp = 1, .ep = 2, .devices_per_node = 4, .nics_per_node = 2,
       .kind = ScheduleKind::kZeroBubbleV},  // a NIC per replica
      {.dp = 16, .pp = 1, .tp = 1, .ep = 4, .devices_per_node = 1, .top_k = 1},
      {.dp = 4, .pp = 2, .tp = 1, .ep = 2, .devices_per_node = 2, .kind = ScheduleKind::kDualPipeV},
      // DualPipe (two directions): each stage's gradient ring visits both copies of every replica.
      {.dp = 4, .pp = 2, .tp = 1, .ep = 2, .devices_per_node = 2, .kind = ScheduleKind::kDualPipe},
      {.dp = 8, .pp = 2, .tp = 1, .ep = 4, .devices_per_node = 2, .kind = ScheduleKind::kDualPipe},
      {.dp = 6, .pp = 2, .tp = 2, .ep = 2, .devices_per_node = 8, .kind = ScheduleKind::kDualPipe},
  };
  for (const Layout& l : layouts) {
    absl::StatusOr<ExecutionPlan> plan = PlanFor(l);
    ASSERT_TRUE(plan.ok()) << l.Name() << ": " << plan.status();
    ASSERT_TRUE(plan->has_ep_exchanges());
    EXPECT_EQ(ReplicasFoldBlocker(*plan, {}), FoldBlocker::kNone) << l.Name();
    EXPECT_EQ(ReplicasPlayed(*plan, {}), l.ep) << l.Name();
    absl::StatusOr<Prediction> folded = Predict(*plan, {});
    absl::StatusOr<Prediction> full = Predict(*plan, {.fold_replicas = false});
    ASSERT_TRUE(folded.ok() && full.ok()) << l.Name();
    EXPECT_TRUE(folded->folded) << l.Name();
    EXPECT_EQ(folded->replicas_played, l.ep) << l.Name();
    EXPECT_FALSE(full->folded) << l.Name();
    EXPECT_EQ(full->replicas_played, l.dp) << l.Name();
    ExpectSamePrediction(*plan, *folded, *full, l.Name());
    // The replicas of an EP group are not all alike (their ports meet in a different order), so the
    // fold keeps one class per EP rank.
    EXPECT_EQ(folded->timelines.size(), static_cast<size_t>(l.ep)) << l.Name();
  }
}

// Wherever ReplicasFold says the replicas fold, the folded prediction is the full one: every small
// MoE layout (dp, ep < dp — ep 1: no EP exchanges —, pp, tp, node size, NICs a node; one direction
// and DualPipe's two), folded or not, the fold playing one replica, one EP group, or a few of either
// when nodes hold several replicas.
TEST(PredictFold, EverySmallEpLayoutThatFoldsEqualsTheFullPrediction) {
  int folds = 0, not_folds = 0, multiples = 0;
  for (ScheduleKind kind : {ScheduleKind::kOneFOneB, ScheduleKind::kDualPipe}) {
    for (int dp : {4, 6, 8}) {
      for (int ep : {1, 2, 4}) {
        if (dp % ep != 0 || ep == dp) continue;
        for (int pp : {1, 2}) {
          if (kind == ScheduleKind::kDualPipe && pp == 1) continue;
          for (int tp : {1, 2}) {
            for (int node : {1, 2, 3, 4, 8}) {
              for (int nics : {0, 1}) {
                const Layout l{.dp = dp, .pp = pp, .tp = tp, .ep = ep, .devices_per_node = node,
                               .nics_per_node = nics, .kind = kind, .top_k = 1 + (dp + pp + node) % 2,
                               .dp_innermost = (dp + tp + nics) % 3 == 0};
                if ((dp * pp * tp) % node != 0) continue;
                absl::StatusOr<ExecutionPlan> plan = PlanFor(l);
                ASSERT_TRUE(plan.ok()) << l.Name() << ": " << plan.status();
                if (!ReplicasFold(*plan, {})) {
                  ++not_folds;
                  continue;
                }
                ++folds;
                absl::StatusOr<Prediction> folded = Predict(*plan, {});
                absl::StatusOr<Prediction> full = Predict(*plan, {.fold_replicas = false});
                ASSERT_TRUE(folded.ok() && full.ok()) << l.Name();
                EXPECT_EQ(folded->replicas_played % ep, 0) << l.Name();
                EXPECT_LT(folded->replicas_played, dp) << l.Name();
                if (folded->replicas_played > ep) ++multiples;
                ExpectSamePrediction(*plan, *folded, *full, l.Name());
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(folds, 60);
  EXPECT_GT(multiples, 10);  // replicas sharing nodes: the layout repeats every few EP groups or replicas
  EXPECT_GT(not_folds, 5);  // node shapes out of step with the EP groups, shared NICs
}

// A run's routing folds only when it repeats every EP group; else every device is played (and the
// answer is the same as playing them all, trivially).
TEST(PredictFold, ARoutingThatDiffersBetweenEpGroupsIsPlayedWhole) {
  const Layout l{.dp = 8, .pp = 2, .tp = 1, .ep = 2, .devices_per_node = 2};
  absl::StatusOr<ExecutionPlan> plan = PlanFor(l);
  ASSERT_TRUE(plan.ok()) << plan.status();
  StepRouting routing = BalancedRouting(plan->options.model, l.dp, 4, 8);
  absl::StatusOr<Prediction> balanced = Predict(*plan, {.routing = &routing});
  {
    absl::StatusOr<Prediction> full = Predict(*plan, {.fold_replicas = false, .routing = &routing});
    ASSERT_TRUE(balanced.ok() && full.ok());
    EXPECT_EQ(balanced->replicas_played, 2);
    ExpectSamePrediction(*plan, *balanced, *full, "balanced routing given");
  }
  // Replica 5 (EP rank 1 of the third group) sends everything to expert 0: its group differs.
  for (int block = 0; block < routing.blocks; ++block) {
    for (int mb = 0; mb < routing.microbatches; ++mb) {
      int64_t total = 0;
      for (int e = 0; e < routing.experts; ++e) total += routing.at(block, 5, mb, e);
      for (int e = 0; e < routing.experts; ++e) routing.at(block, 5, mb, e) = e == 0 ? total : 0;
    }
  }
  EXPECT_EQ(ReplicasFoldBlocker(*plan, {.routing = &routing}), FoldBlocker::kExpertParallel);
  EXPECT_EQ(ReplicasPlayed(*plan, {.routing = &routing}), l.dp);
  absl::StatusOr<Prediction> skewed = Predict(*plan, {.routing = &routing});
  ASSERT_TRUE(skewed.ok());
  EXPECT_FALSE(skewed->folded);
  // The same skew in every group (replicas 1, 3, 5, 7) repeats again: folded, and equal.
  for (int d : {1, 3, 7}) {
    for (int block = 0; block < routing.blocks; ++block) {
      for (int mb = 0; mb < routing.microbatches; ++mb) {
        for (int e = 0; e < routing.experts; ++e) routing.at(block, d, mb, e) = routing.at(block, 5, mb, e);
      }
    }
  }
  absl::StatusOr<Prediction> folded = Predict(*plan, {.routing = &routing});
  absl::StatusOr<Prediction> full = Predict(*plan, {.fold_replicas = false, .routing = &routing});
  ASSERT_TRUE(folded.ok() && full.ok());
  EXPECT_EQ(folded->replicas_played, 2);
  ExpectSamePrediction(*plan, *folded, *full, "skewed alike in every group");
  // The skew is seen: replica 1 sends all its rows to EP rank 0's experts, twice balanced routing's.
  const size_t rank = static_cast<size_t>(plan->grid.RankOf({.dp = 1, .pp = 0, .tp = 0}));
  EXPECT_GT(folded->modeled_wire_bytes[rank], balanced->modeled_wire_bytes[rank]);
}

TEST(PredictFold, EpLayoutsThatDoNotRepeatEveryGroupAreNotFolded) {
  // One EP group of every replica: nothing repeats.
  absl::StatusOr<ExecutionPlan> whole = PlanFor({.dp = 4, .pp = 1, .ep = 4, .devices_per_node = 2});
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(ReplicasFoldBlocker(*whole, {}), FoldBlocker::kExpertParallel);
  EXPECT_EQ(ReplicasPlayed(*whole, {}), 4);
  // Nodes of 3 replicas, EP groups of 2: the DP hop 2 -> 3 leaves a node, 0 -> 1 does not.
  absl::StatusOr<ExecutionPlan> odd = PlanFor({.dp = 6, .pp = 1, .ep = 2, .devices_per_node = 3});
  ASSERT_TRUE(odd.ok()) << odd.status();
  EXPECT_EQ(ReplicasFoldBlocker(*odd, {}), FoldBlocker::kLayout);
  absl::StatusOr<Prediction> pred = Predict(*odd, {});
  ASSERT_TRUE(pred.ok()) << pred.status();
  EXPECT_FALSE(pred->folded);
  EXPECT_EQ(pred->replicas_played, 6);
  // Two replicas on one NIC.
  absl::StatusOr<ExecutionPlan> nic =
      PlanFor({.dp = 4, .pp = 1, .ep = 2, .devices_per_node = 2, .nics_per_node = 1});
  ASSERT_TRUE(nic.ok()) << nic.status();
  EXPECT_EQ(ReplicasFoldBlocker(*nic, {}), FoldBlocker::kLayout);
}

}  // namespace
}  // namespace rp::schedule
