// The compute cost model: FLOPs to modeled time, validation.
#include "schedule/cost_model.h"

#include "gtest/gtest.h"

namespace rp::schedule {
namespace {

TEST(CostModel, FromFlopsDividesByThePeakAndRoundsToTheNanosecond) {
  auto c = CostModel::FromFlops({{.forward = 1e12, .backward = 2e12, .weight_grad = 1e12,
                                  .optimizer = 0, .activation_bytes = 64},
                                 {.forward = 2.5e9, .backward = 5e9}},
                                /*device_tflops=*/100);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->stages.size(), 2u);
  EXPECT_EQ(c->stages[0].forward, FromMillis(10));
  EXPECT_EQ(c->stages[0].backward, FromMillis(20));
  EXPECT_EQ(c->stages[0].weight_grad, FromMillis(10));
  EXPECT_EQ(c->stages[0].activation_bytes, 64u);
  EXPECT_EQ(c->stages[1].forward, Nanos(25000));
  EXPECT_EQ(&c->Of(1), &c->stages[1]);
}

TEST(CostModel, UniformAppliesToEveryRank) {
  const CostModel c = CostModel::Uniform({.forward = FromMillis(3)});
  EXPECT_EQ(c.Of(0).forward, FromMillis(3));
  EXPECT_EQ(c.Of(7).forward, FromMillis(3));
}

TEST(CostModel, FromFlopsRejectsBadInput) {
  EXPECT_FALSE(CostModel::FromFlops({{.forward = 1}}, 0).ok());
  EXPECT_FALSE(CostModel::FromFlops({}, 100).ok());
  EXPECT_FALSE(CostModel::FromFlops({{.forward = -1}}, 100).ok());
  EXPECT_FALSE(CostModel::FromFlops({{.backward = 1, .weight_grad = 2}}, 100).ok());
}

}  // namespace
}  // namespace rp::schedule
