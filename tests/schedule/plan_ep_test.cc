// The execution plan with expert parallelism (pure): groups, buckets split by reduction group,
// MoE blocks cut at their exchanges with their weights, balanced routing and EP row counts.
#include <numeric>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "schedule/generators.h"
#include "schedule/plan.h"
#include "runtime/model/moe.h"
#include "schedule/routing.h"

namespace rp::schedule {
namespace {

// 16 -> 32 x 5 -> 10; layers 2 and 4 are MoE blocks of 4 experts (32 -> 16 -> 32).
PlanOptions Options(int dp, int pp, int tp, int ep, uint64_t bucket_bytes) {
  PlanOptions o;
  o.grid = {.dp = dp, .pp = pp, .tp = tp};
  o.program = *BuildOneFOneB({.num_ranks = pp, .num_micro_batches = 4, .activation_bytes = 4096,
                              .gradient_bytes = 1 << 20});
  o.model.hidden = {32, 32, 32, 32, 32};
  o.model.moe.layers = {2, 4};
  o.model.moe.experts = 4;
  o.model.moe.top_k = 2;
  o.model.moe.expert_hidden = 16;
  o.cost = CostModel::Uniform({.forward = FromMillis(5), .backward = FromMillis(8)});
  o.placement.devices_per_node = 4;
  o.bucket_bytes = bucket_bytes;
  o.ep = ep;
  return o;
}

TEST(PlanEp, GroupsAreCarvedOutOfDataParallelism) {
  absl::StatusOr<ExecutionPlan> plan = BuildPlan(Options(8, 1, 2, 4, 0));
  ASSERT_TRUE(plan.ok()) << plan.status();
  const ParallelGrid& g = plan->grid;
  const int rank = g.RankOf({.dp = 6, .pp = 0, .tp = 1});
  int index = -1;
  const std::vector<int> ep = plan->EpGroup(rank, &index);
  EXPECT_EQ(index, 2);  // replica 6 is EP rank 2 of EP group 1 (replicas 4..7)
  ASSERT_EQ(ep.size(), 4u);
  for (int q = 0; q < 4; ++q) EXPECT_EQ(g.CoordOf(ep[static_cast<size_t>(q)]).dp, 4 + q);
  for (int r : ep) EXPECT_EQ(g.CoordOf(r).tp, 1);
  const ChunkPlan& chunk = plan->Chunk(0, 0);
  const BucketPlan* expert = nullptr;
  for (const BucketPlan& b : chunk.buckets) {
    if (b.expert) expert = &b;
  }
  ASSERT_NE(expert, nullptr);
  const std::vector<int> edp = plan->BucketGroup(rank, 0, *expert, &index);
  EXPECT_EQ(index, 1);  // EP group 1
  ASSERT_EQ(edp.size(), 2u);
  EXPECT_EQ(g.CoordOf(edp[0]).dp, 2);
  EXPECT_EQ(g.CoordOf(edp[1]).dp, 6);
  // Ids: DP groups first, then one expert group per (pp, tp, EP rank); EP groups per (g, pp, tp).
  EXPECT_EQ(plan->num_bucket_groups(), plan->num_grad_groups() + 1 * 2 * 4);
  EXPECT_EQ(plan->BucketGroupId(rank, 0, *expert), plan->num_grad_groups() + 1 * 4 + 2);
  EXPECT_EQ(plan->num_ep_groups(), 2 * 1 * 2);
  std::set<int> ids;
  for (int r = 0; r < g.world_size(); ++r) ids.insert(plan->EpGroupId(r));
  EXPECT_EQ(ids.size(), 4u);
}

// DualPipe holds every model stage twice (stage k on pipeline rank k in direction 0 and on rank
// p - 1 - k in direction 1): an expert bucket's group is the replicas with its EP rank on both
// holders (direction 0's first, as the dense buckets' mirror group), every member finds itself at
// its index, and one id per (model stage, tp, EP rank) names the same members from each of them.
TEST(PlanEp, DualPipesExpertGroupsHoldBothCopiesOfAStage) {
  PlanOptions o = Options(4, 4, 1, 2, 0);
  absl::StatusOr<Program> prog = BuildSchedule(
      ScheduleKind::kDualPipe, {.num_ranks = 4, .num_micro_batches = 8, .num_chunks = 2,
                                .activation_bytes = 4096, .gradient_bytes = 1 << 20});
  ASSERT_TRUE(prog.ok()) << prog.status();
  o.program = *prog;
  absl::StatusOr<ExecutionPlan> plan = BuildPlan(o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const ParallelGrid& g = plan->grid;
  ASSERT_EQ(prog->num_directions(), 2);
  std::set<int> ids;
  int expert_buckets = 0;
  for (int rank = 0; rank < g.world_size(); ++rank) {
    const Coord c = g.CoordOf(rank);
    for (int ch = 0; ch < prog->num_chunks; ++ch) {
      const int stage = prog->ModelStage(c.pp, ch);
      for (const BucketPlan& b : plan->Chunk(c.pp, ch).buckets) {
        if (!b.expert) continue;
        ++expert_buckets;
        int index = -1;
        const std::vector<int> group = plan->BucketGroup(rank, ch, b, &index);
        ASSERT_EQ(group.size(), 4u) << "2 replicas with this EP rank x 2 copies";
        ASSERT_GE(index, 0);
        EXPECT_EQ(group[static_cast<size_t>(index)], rank);
        for (size_t i = 0; i < group.size(); ++i) {
          const Coord m = g.CoordOf(group[i]);
          EXPECT_EQ(m.dp % 2, c.dp % 2) << "the same EP rank: the same experts";
          EXPECT_EQ(m.tp, c.tp);
          EXPECT_EQ(m.dp / 2, static_cast<int>(i / 2)) << "replica by replica (by EP group)";
          EXPECT_EQ(m.pp, prog->HolderOf({static_cast<int>(i % 2), stage}).rank) << "each replica's direction 0 first";
          int other = -1;
          const int member_chunk = prog->HolderOf({static_cast<int>(i % 2), stage}).chunk;
          EXPECT_EQ(plan->BucketGroup(group[i], member_chunk, b, &other), group);
          EXPECT_EQ(other, static_cast<int>(i));
          EXPECT_EQ(plan->BucketGroupId(group[i], member_chunk, b), plan->BucketGroupId(rank, ch, b));
        }
        ids.insert(plan->BucketGroupId(rank, ch, b));
        EXPECT_GE(plan->BucketGroupId(rank, ch, b), plan->num_grad_groups());
        EXPECT_LT(plan->BucketGroupId(rank, ch, b), plan->num_bucket_groups());
      }
    }
  }
  EXPECT_GT(expert_buckets, 0);
  // One id per (model stage holding a MoE block, EP rank), tp being 1.
  std::set<int> stages;
  for (int k = 0; k < prog->num_model_stages(); ++k) {
    const ChunkRef h = prog->HolderOf({0, k});
    for (const BucketPlan& b : plan->Chunk(h.rank, h.chunk).buckets) {
      if (b.expert) stages.insert(k);
    }
  }
  EXPECT_EQ(ids.size(), stages.size() * 2);
}

// Buckets in reverse layer order: each MoE block's experts alone (expert = true), DP buckets never
// spanning experts; together they cover every gradient exactly once, and the layers that complete
// them are recorded.
TEST(PlanEp, ExpertBucketsAndDataParallelBucketsTileTheGradients) {
  for (uint64_t cap : {uint64_t{0}, uint64_t{1} << 20, uint64_t{4096}}) {
    absl::StatusOr<ExecutionPlan> plan = BuildPlan(Options(4, 1, 1, 2, cap));
    ASSERT_TRUE(plan.ok()) << plan.status();
    const ChunkPlan& c = plan->Chunk(0, 0);
    size_t total = 0;
    for (const LayerPlan& l : c.layers) total += l.grad_count;
    std::vector<int> owner(total, -1);
    int experts = 0;
    for (size_t b = 0; b < c.buckets.size(); ++b) {
      const BucketPlan& bk = c.buckets[b];
      experts += bk.expert;
      for (size_t i = bk.grad_offset; i < bk.grad_offset + bk.grad_count; ++i) {
        ASSERT_EQ(owner[i], -1) << "cap " << cap << " bucket " << b;
        owner[i] = static_cast<int>(b);
      }
      const int completes = bk.expert ? c.expert_bucket_of_layer[static_cast<size_t>(bk.first_layer)]
                                      : c.bucket_of_layer[static_cast<size_t>(bk.first_layer)];
      EXPECT_EQ(completes, static_cast<int>(b)) << "cap " << cap;
      for (int l = bk.first_layer; l < bk.end_layer; ++l) {
        const LayerPlan& lp = c.layers[static_cast<size_t>(l)];
        if (lp.expert_count == 0) continue;
        const bool in_experts = bk.grad_offset >= lp.expert_offset &&
                                bk.grad_offset < lp.expert_offset + lp.expert_count;
        EXPECT_EQ(bk.expert, in_experts) << "cap " << cap << ": a DP bucket spans experts";
      }
    }
    EXPECT_EQ(experts, 2) << "cap " << cap;
    for (size_t i = 0; i < total; ++i) ASSERT_GE(owner[i], 0) << "cap " << cap << " element " << i;
    // Launch order: bucket indices grow along the backward (reverse layers; experts first).
    for (size_t b = 1; b < c.buckets.size(); ++b) {
      EXPECT_LE(c.buckets[b].first_layer, c.buckets[b - 1].first_layer) << "cap " << cap;
    }
  }
}

// A MoE block with ep > 1 is five steps in F/B/Bi (router, dispatch, experts, combine, combine
// math) weighted router | top_k experts | 0; one step in W and with ep = 1, of the same weight.
TEST(PlanEp, MoeBlocksAreCutAtTheirExchangesWithTheirWeights) {
  const uint64_t router = 32 * 4, experts = 2 * (2 * 32 * 16 + 16 + 32);
  for (int ep : {1, 2}) {
    absl::StatusOr<ExecutionPlan> plan = BuildPlan(Options(2, 1, 1, ep, 0));
    ASSERT_TRUE(plan.ok()) << plan.status();
    const ChunkPlan& c = plan->Chunk(0, 0);
    EXPECT_EQ(c.layers[2].weight, router + experts);
    for (int pass : {0, 1, 2, 3}) {
      const auto& steps = c.steps[static_cast<size_t>(pass)];
      const auto& w = c.step_weight[static_cast<size_t>(pass)];
      int exchanges = 0;
      uint64_t moe = 0;
      for (size_t i = 0; i < steps.size(); ++i) {
        exchanges += steps[i].kind == PassStep::Kind::kEpAllToAll;
        if (steps[i].local_layer == 2 && steps[i].kind == PassStep::Kind::kLayer) moe += w[i];
      }
      EXPECT_EQ(exchanges, ep > 1 && pass != 3 ? 4 : 0) << "ep " << ep << " pass " << pass;
      EXPECT_EQ(moe, router + experts) << "ep " << ep << " pass " << pass;
      EXPECT_EQ(c.total_weight[static_cast<size_t>(pass)], std::accumulate(w.begin(), w.end(), 0ull));
    }
    const std::vector<Nanos> d = StepDurations(c, 1, FromMillis(8));
    EXPECT_EQ(std::accumulate(d.begin(), d.end(), Nanos(0)), FromMillis(8));
  }
}

TEST(PlanEp, BadEpNamesTheField) {
  auto message = [](PlanOptions o) { return std::string(BuildPlan(o).status().message()); };
  EXPECT_EQ(message(Options(4, 1, 1, 3, 0)), "ep: dp (4) must be a multiple of ep (3)");
  PlanOptions o = Options(4, 1, 1, 4, 0);
  o.model.moe.experts = 2;
  EXPECT_EQ(message(o), "ep: 4 does not divide experts (2)");
  o = Options(2, 1, 1, 2, 0);
  o.model.moe.layers.clear();
  EXPECT_EQ(message(o), "ep: 2 > 1 needs MoE layers (model.moe.layers)");
  o = Options(2, 1, 1, 2, 0);
  o.ep_row_bytes = 10;
  EXPECT_EQ(message(o), "ep_row_bytes: 10 (must be a multiple of 4)");
}

TEST(Routing, BalancedSpreadsSlotsEvenlyUnderTheCapacity) {
  MlpConfig m;
  m.hidden = {8, 8, 8};
  m.moe.layers = {1};
  m.moe.experts = 3;
  m.moe.top_k = 2;
  StepRouting r = BalancedRouting(m, /*dp=*/2, /*microbatches=*/2, /*microbatch_size=*/8);
  EXPECT_EQ(r.at(0, 1, 1, 0), 6);  // 16 slots over 3 experts: 6, 5, 5
  EXPECT_EQ(r.at(0, 1, 1, 1), 5);
  EXPECT_EQ(r.at(0, 1, 1, 2), 5);
  EXPECT_EQ(r.ExpertTokens(0, 0), 24);
  m.moe.capacity_factor = 1.0;  // ⌈1·2·8/3⌉ = 6: no cut
  EXPECT_EQ(BalancedRouting(m, 1, 1, 8).at(0, 0, 0, 0), 6);
  m.moe.capacity_factor = 0.5;  // ⌈0.5·2·8/3⌉ = 3
  EXPECT_EQ(BalancedRouting(m, 1, 1, 8).at(0, 0, 0, 1), 3);
  // EP rows: replica 1 (EP rank 1 of group {0, 1}) sends EP rank 0 its slots for experts 0..1.
  StepRouting k = StepRouting::Zero(1, 2, 1, 4);
  for (int e = 0; e < 4; ++e) k.at(0, 1, 0, e) = 10 + e;
  const std::vector<int> group = {0, 1};
  EXPECT_EQ(EpRows(k, 0, 0, group, 2, /*from=*/1, /*to=*/0), 10 + 11);
  EXPECT_EQ(EpRows(k, 0, 0, group, 2, 1, 1), 12 + 13);
  EXPECT_EQ(EpRows(k, 0, 0, group, 2, 0, 1), 0);
  EXPECT_EQ(MoeBlockIndex(m, 1), 0);
  EXPECT_EQ(MoeBlockIndex(m, 2), -1);
}

// The busiest-block routing bounds what the real-clock watchdog lets one message take: each block
// from one EP rank to another must be what the MoE layer's own routing (RouteTokens with its
// ExpertCapacity) keeps for that rank when every token prefers its experts, spread over them — the
// largest block any router addresses to one rank — over top-1/2, dropless and dropping
// capacities, 1 and 2 experts per rank.
TEST(Routing, TheBusiestBlockIsWhatAllTokensPreferringOneRankKeep) {
  struct Case {
    int experts, ep, top_k;
    double capacity;
  };
  constexpr int kTokens = 8;
  for (const Case c : {Case{4, 2, 1, 0}, Case{4, 2, 2, 0}, Case{4, 2, 2, 1.0}, Case{4, 2, 1, 0.5},
                       Case{4, 4, 2, 0}, Case{4, 4, 1, 1.25}, Case{2, 2, 2, 3.0}}) {
    MlpConfig m;
    m.hidden = {8, 8, 8};
    m.moe.layers = {1};
    m.moe.experts = c.experts;
    m.moe.top_k = c.top_k;
    m.moe.capacity_factor = c.capacity;
    const int per = c.experts / c.ep;
    std::vector<int> group(static_cast<size_t>(c.ep));
    std::iota(group.begin(), group.end(), 0);
    const StepRouting busiest = BusiestBlockRouting(m, c.ep, c.ep, /*microbatches=*/1, kTokens);
    for (int to = 0; to < c.ep; ++to) {
      // Every token's probabilities favour rank `to`'s experts, token t its (t + j) mod per-th
      // j-th: the tokens spread over them, so each keeps up to its capacity.
      std::vector<float> probs(static_cast<size_t>(kTokens * c.experts), 0.01f);
      for (int t = 0; t < kTokens; ++t) {
        for (int j = 0; j < per; ++j) {
          probs[static_cast<size_t>(t * c.experts + to * per + (t + j) % per)] = 0.5f - 0.01f * static_cast<float>(j);
        }
      }
      const MoeRouting real = RouteTokens(ConstMatrixView(probs.data(), kTokens, c.experts), c.top_k,
                                          ExpertCapacity(c.capacity, c.top_k, kTokens, c.experts));
      int64_t kept = 0;
      for (int b = 0; b < per; ++b) kept += real.kept[static_cast<size_t>(to * per + b)];
      for (int from = 0; from < c.ep; ++from) {
        EXPECT_EQ(EpRows(busiest, 0, 0, group, per, from, to), kept)
            << "experts " << c.experts << " ep " << c.ep << " top_k " << c.top_k << " capacity "
            << c.capacity << " to " << to;
      }
    }
  }
}

}  // namespace
}  // namespace rp::schedule
