// MoE routing on one device: top-k with ties, capacity and its drops, config errors naming the field,
// and where tensor-parallel pairs restart around MoE blocks.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/model/mlp.h"
#include "runtime/model/moe.h"
#include "tests/runtime/model/moe_helpers.h"

namespace rp {
namespace {

TEST(ExpertCapacity, IsTheCeilingOfCkTOverE) {
  EXPECT_EQ(ExpertCapacity(0.0, 1, 16, 4), -1);
  EXPECT_EQ(ExpertCapacity(1.25, 1, 16, 4), 5);
  EXPECT_EQ(ExpertCapacity(1.0, 2, 10, 4), 5);
  EXPECT_EQ(ExpertCapacity(1.1, 1, 10, 1), 11);  // 1.1·10 is 11.000000000000002 in double
  EXPECT_EQ(ExpertCapacity(0.5, 1, 3, 4), 1);
}

// Any finite C >= 0 is valid input (--capacity_factor=1e30 is accepted): a capacity beyond int64 is no
// limit, not an out-of-range double -> int64 conversion (undefined; INT64_MIN on x86).
TEST(ExpertCapacity, AHugeFactorIsNoLimit) {
  EXPECT_EQ(ExpertCapacity(1e30, 2, 32, 4), -1);
  EXPECT_EQ(ExpertCapacity(1.7e308, 2, 1 << 20, 1), -1);
  EXPECT_EQ(ExpertCapacity(1e6, 1, 32, 4), 8000000);  // large but representable: kept
  Tensor p(3, 2, {0.9f, 0.1f, 0.8f, 0.2f, 0.7f, 0.3f});
  const MoeRouting r = RouteTokens(p, 1, ExpertCapacity(1e30, 1, 3, 2));
  EXPECT_EQ(r.dropped, 0);
  EXPECT_EQ(r.kept, (std::vector<int64_t>{3, 0}));
}

TEST(RouteTokens, TiesGoToTheLowestIndexAndSlotsAreDistinct) {
  // Token 0: all equal -> experts 0, 1. Token 1: 2 and 3 tie for first -> 2, then 3.
  Tensor p(2, 4, {0.25f, 0.25f, 0.25f, 0.25f, 0.1f, 0.1f, 0.4f, 0.4f});
  MoeRouting r = RouteTokens(p, 2, -1);
  EXPECT_EQ(r.expert, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(r.gate, (std::vector<float>{0.25f, 0.25f, 0.4f, 0.4f}));
  EXPECT_EQ(r.kept, (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(r.position, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(r.dropped, 0);
}

TEST(RouteTokens, CapacityDropsByTokenOrderAndPositionsFollowExpertThenToken) {
  // Four tokens all prefer expert 1, then expert 0 (top-2), capacity 3 per expert.
  Tensor p(4, 3);
  for (int t = 0; t < 4; ++t) {
    p.at(t, 0) = 0.3f;
    p.at(t, 1) = 0.6f;
    p.at(t, 2) = 0.1f;
  }
  MoeRouting r = RouteTokens(p, 2, 3);
  EXPECT_EQ(r.chosen, (std::vector<int64_t>{4, 4, 0}));
  EXPECT_EQ(r.kept, (std::vector<int64_t>{3, 3, 0}));
  EXPECT_EQ(r.dropped, 2);
  // Expert 0's rows come first (tokens 0, 1, 2), then expert 1's (tokens 0, 1, 2); token 3 is
  // dropped in both slots.
  EXPECT_EQ(r.position, (std::vector<int64_t>{3, 0, 4, 1, 5, 2, -1, -1}));
}

TEST(MoeConfig, ErrorsNameTheField) {
  auto expect = [](MlpConfig c, const char* field) {
    absl::Status s = ValidateMlpConfig(c);
    ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_EQ(s.message().find(field), 0u) << s;
  };
  MlpConfig c = MoeModel(1, 0, 0);
  c.moe.layers = {2, 1};
  expect(c, "moe_layers");
  c.moe.layers = {0};  // 5 -> 6: not hidden-to-hidden
  expect(c, "moe_layers");
  c.moe.layers = {3};  // the logits layer
  expect(c, "moe_layers");
  c = MoeModel(1, 0, 0);
  c.hidden = {6, 7, 6};
  expect(c, "moe_layers");  // layer 1 maps 6 -> 7
  c = MoeModel(1, 0, 0);
  c.moe.experts = 0;
  expect(c, "experts");
  c = MoeModel(3, 0, 0);
  expect(c, "top_k");
  c = MoeModel(2, 0, 0);
  c.moe.experts = 1;
  expect(c, "top_k");
  c = MoeModel(1, -0.5, 0);
  expect(c, "capacity_factor");
  c = MoeModel(1, 0, -1);
  expect(c, "aux_loss");
  c = MoeModel(1, 0, 0);
  c.moe.expert_hidden = 0;
  expect(c, "expert_hidden");
  c = MoeModel(1, 0, 0);
  c.moe.router_skew = -1;
  expect(c, "router_skew");
  // Past these bounds the router's gradient or logits leave fp32 (a float conversion of such a
  // double is undefined behaviour); at them the config is valid.
  c = MoeModel(1, 0, kMaxAuxLoss * 1.001);
  expect(c, "aux_loss");
  c = MoeModel(1, 0, 0);
  c.moe.router_skew = 1e300;
  expect(c, "router_skew");
  c = MoeModel(1, 0, kMaxAuxLoss);
  c.moe.router_skew = kMaxRouterSkew;
  EXPECT_TRUE(ValidateMlpConfig(c).ok()) << ValidateMlpConfig(c);
  EXPECT_EQ(PartitionMlp(MoeModel(1, 0, 0), 1, 1, {}, 3).status().message().find("ep"), 0u);
}

TEST(PartitionMlp, TensorParallelPairsRestartAfterMoeBlocks) {
  MlpConfig c;
  c.input_dim = 4;
  c.hidden = {8, 8, 8, 8, 8};  // layers 0..5
  c.classes = 2;
  c.moe.layers = {2};
  auto p = PartitionMlp(c, 1, 2);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->layer_kind,
            (std::vector<ShardKind>{ShardKind::kColumnParallel, ShardKind::kRowParallel,
                                    ShardKind::kMoe, ShardKind::kColumnParallel,
                                    ShardKind::kRowParallel, ShardKind::kReplicated}));
}

// The objective f = Σ R ⊙ stage output + weight · aux losses, from a fresh forward.

}  // namespace
}  // namespace rp
