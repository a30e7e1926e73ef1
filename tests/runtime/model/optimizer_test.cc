#include "runtime/model/optimizer.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace rp {
namespace {

TEST(Optimizer, SgdMomentumClosedForm) {
  // Constant gradient g: v_t = g (1 + mu + ... + mu^(t-1)); w_t = w_0 − lr Σ v.
  auto opt = *Optimizer::Create({.kind = OptimizerKind::kSgdMomentum, .lr = 0.5f, .momentum = 0.5f},
                                2);
  std::vector<float> w{1.0f, -2.0f};
  const std::vector<float> g{0.25f, -1.0f};
  for (int t = 0; t < 3; ++t) ASSERT_TRUE(opt->Step(w, g).ok());
  // v: g, 1.5 g, 1.75 g -> Σ = 4.25 g; w = w0 − 0.5 · 4.25 g (exact in binary).
  EXPECT_EQ(w[0], 1.0f - 0.5f * 4.25f * 0.25f);
  EXPECT_EQ(w[1], -2.0f + 0.5f * 4.25f);
  EXPECT_EQ(opt->steps(), 3);
}

TEST(Optimizer, AdamFirstStepMovesByLrTimesSign) {
  auto opt = *Optimizer::Create({.kind = OptimizerKind::kAdam, .lr = 0.01f}, 3);
  std::vector<float> w{0.0f, 1.0f, -1.0f};
  ASSERT_TRUE(opt->Step(w, std::vector<float>{3.0f, -0.002f, 50.0f}).ok());
  EXPECT_NEAR(w[0], -0.01f, 1e-6);
  EXPECT_NEAR(w[1], 1.01f, 1e-5);
  EXPECT_NEAR(w[2], -1.01f, 1e-6);
}

TEST(Optimizer, BothMinimiseAQuadratic) {
  for (OptimizerKind kind : {OptimizerKind::kSgdMomentum, OptimizerKind::kAdam}) {
    auto opt = *Optimizer::Create({.kind = kind, .lr = kind == OptimizerKind::kAdam ? 0.05f : 0.1f},
                                  2);
    std::vector<float> w{3.0f, -4.0f};
    for (int t = 0; t < 500; ++t) {
      const std::vector<float> g{2 * (w[0] - 1), 2 * (w[1] + 2)};  // min at (1, −2)
      ASSERT_TRUE(opt->Step(w, g).ok());
    }
    EXPECT_NEAR(w[0], 1.0f, 1e-2) << OptimizerName(kind);
    EXPECT_NEAR(w[1], -2.0f, 1e-2) << OptimizerName(kind);
  }
}

TEST(Optimizer, ShardsUpdateLikeTheWholeBitwise) {
  for (OptimizerKind kind : {OptimizerKind::kSgdMomentum, OptimizerKind::kAdam}) {
    const OptimizerConfig cfg{.kind = kind, .lr = 0.01f, .weight_decay = 1e-3f};
    std::vector<float> w(10), g(10);
    for (int i = 0; i < 10; ++i) {
      w[i] = std::sin(i + 1.0f);
      g[i] = std::cos(3.0f * i);
    }
    std::vector<float> a = w, b = w;
    auto whole = *Optimizer::Create(cfg, 10);
    auto lo = *Optimizer::Create(cfg, 4), hi = *Optimizer::Create(cfg, 6);
    for (int t = 0; t < 5; ++t) {
      ASSERT_TRUE(whole->Step(a, g).ok());
      ASSERT_TRUE(lo->Step(std::span(b).subspan(0, 4), std::span(g).subspan(0, 4)).ok());
      ASSERT_TRUE(hi->Step(std::span(b).subspan(4), std::span(g).subspan(4)).ok());
    }
    EXPECT_EQ(std::memcmp(a.data(), b.data(), 40), 0) << OptimizerName(kind);
  }
}

TEST(Optimizer, ErrorsNameTheField) {
  EXPECT_NE(Optimizer::Create({.lr = 0.0f}, 1).status().message().find("lr"),
            std::string_view::npos);
  EXPECT_NE(Optimizer::Create({.momentum = 1.0f}, 1).status().message().find("momentum"),
            std::string_view::npos);
  EXPECT_NE(Optimizer::Create({.kind = OptimizerKind::kAdam, .beta2 = -0.1f}, 1)
                .status()
                .message()
                .find("beta2"),
            std::string_view::npos);
  auto opt = *Optimizer::Create({}, 3);
  std::vector<float> w(3), g(2);
  EXPECT_EQ(opt->Step(w, g).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rp
