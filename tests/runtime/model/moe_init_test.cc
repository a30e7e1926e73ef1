// The experts' W2 init (MoeConfig::init, config moe_init): "scaled" divides exactly the experts'
// output weights by √(MoE blocks), and keeps a deep stack of blocks trainable where the plain He
// init overflows at the first forward pass (docs/model.md "Why the first loss is higher").
#include <cmath>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/model/dataset.h"
#include "runtime/model/moe.h"
#include "runtime/model/reference_trainer.h"

namespace rp {
namespace {

TEST(MoeInit, ScaledDividesOnlyTheExpertsW2ByTheRootOfTheBlockCount) {
  MoeConfig c;
  c.layers = {1, 2, 3, 4};  // 4 blocks: W2's limit halves, exactly (a power of two)
  c.experts = 4;
  c.expert_hidden = 8;
  const int width = 6;
  const MoeBlock::Layout lay{width, c.experts, c.top_k, c.expert_hidden, 1, 0};
  std::vector<float> he(static_cast<size_t>(lay.params())), scaled(he.size()), g(he.size());
  ASSERT_TRUE(MoeBlock::Create(c, 2, width, Activation::kRelu, 1, 0, 7, he, g).ok());
  c.init = MoeInit::kScaled;
  ASSERT_TRUE(MoeBlock::Create(c, 2, width, Activation::kRelu, 1, 0, 7, scaled, g).ok());
  const int64_t d = width, h = c.expert_hidden;
  for (int64_t i = 0; i < lay.params(); ++i) {
    const int64_t in_expert = i < lay.router_params() ? -1 : (i - lay.router_params()) % lay.expert_params();
    const bool w2 = in_expert >= d * h + h && in_expert < d * h + h + h * d;
    const float want = w2 ? he[static_cast<size_t>(i)] * 0.5f : he[static_cast<size_t>(i)];
    ASSERT_EQ(scaled[static_cast<size_t>(i)], want) << "parameter " << i << (w2 ? " (W2)" : "");
  }
  EXPECT_NE(std::accumulate(he.begin(), he.end(), 0.0), 0.0);
}

double FirstLoss(const MlpConfig& model, int steps, double* last5) {
  static const Dataset* data = new Dataset(*Dataset::Create(DatasetConfig{}));
  ReferenceOptions o;
  o.model = model;
  o.layout = {.dp = 1, .microbatches = 2, .microbatch_size = 32};
  auto t = ReferenceTrainer::Create(o, data);
  EXPECT_TRUE(t.ok()) << t.status();
  double first = 0;
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) {
    auto r = (*t)->Step();
    if (!r.ok()) return std::nan("");  // a value left fp32's range
    losses.push_back(r->loss);
  }
  first = losses.front();
  if (last5 != nullptr) *last5 = std::accumulate(losses.end() - 5, losses.end(), 0.0) / 5;
  return first;
}

TEST(MoeInit, ScaledKeepsADeepStacksFirstLossNearTheDenseModels) {
  MlpConfig dense;
  dense.hidden = std::vector<int>(16, 64);  // --hidden=64x16
  const double dense_loss = FirstLoss(dense, 1, nullptr);
  MlpConfig moe = dense;
  for (int l = 1; l < 16; ++l) moe.moe.layers.push_back(l);  // --moe_layers=all: 15 blocks
  const double he_loss = FirstLoss(moe, 1, nullptr);
  // Each He block adds an expert output of about twice its input's second moment (docs/model.md):
  // 15 of them take the logits out of range (nan) or far above the dense model's.
  EXPECT_FALSE(he_loss < 10 * dense_loss) << "he " << he_loss << ", dense " << dense_loss;
  moe.moe.init = MoeInit::kScaled;
  double last5 = 0;
  const double scaled_loss = FirstLoss(moe, 40, &last5);
  EXPECT_TRUE(std::isfinite(scaled_loss));
  EXPECT_LT(scaled_loss, 2.5 * dense_loss) << "dense " << dense_loss;
  EXPECT_LT(last5, 0.6 * scaled_loss) << "it trains";
}

}  // namespace
}  // namespace rp
