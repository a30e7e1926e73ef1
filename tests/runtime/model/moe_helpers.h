// Helpers of the MoE tests (moe_test.cc, moe_routing_test.cc): random tensors, bitwise equality, a
// small model with two MoE blocks, and a stage of it.
#pragma once

#include <cstring>
#include <memory>
#include <random>
#include <span>

#include "gtest/gtest.h"
#include "runtime/model/mlp.h"
#include "runtime/model/moe.h"

namespace rp {

inline Tensor Random(int64_t rows, int64_t cols, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  Tensor t(rows, cols);
  for (float& v : t.span()) v = u(rng);
  return t;
}

inline bool SameBits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// 5 -> 6 -> 6 -> 6 -> 3: layers 1 and 2 are MoE blocks (6 -> 6).
inline MlpConfig MoeModel(int top_k, double capacity, double aux) {
  MlpConfig c;
  c.input_dim = 5;
  c.hidden = {6, 6, 6};
  c.classes = 3;
  c.activation = Activation::kGelu;  // smooth: finite differences need no kinks
  c.moe.layers = {1, 2};
  c.moe.experts = 4;
  c.moe.top_k = top_k;
  c.moe.expert_hidden = 5;
  c.moe.capacity_factor = capacity;
  c.moe.aux_loss = aux;
  return c;
}

inline std::unique_ptr<MlpStage> Make(const MlpConfig& c, const ModelPartition& p, int stage,
                               int tp_rank = 0, int ep_rank = 0) {
  auto s = MlpStage::Create(c, p, stage, tp_rank, ep_rank);
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(s).value();
}

}  // namespace rp
