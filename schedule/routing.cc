#include "schedule/routing.h"

#include <algorithm>

#include "runtime/model/moe.h"

namespace rp::schedule {

StepRouting StepRouting::Zero(int blocks, int dp, int microbatches, int experts) {
  StepRouting r{.blocks = blocks, .dp = dp, .microbatches = microbatches, .experts = experts,
                .kept = {}};
  r.kept.assign(static_cast<size_t>(blocks) * static_cast<size_t>(dp) *
                    static_cast<size_t>(microbatches) * static_cast<size_t>(experts),
                0);
  return r;
}

int64_t StepRouting::ExpertTokens(int block, int expert) const {
  int64_t sum = 0;
  for (int d = 0; d < dp; ++d) {
    for (int mb = 0; mb < microbatches; ++mb) sum += at(block, d, mb, expert);
  }
  return sum;
}

StepRouting BalancedRouting(const MlpConfig& model, int dp, int microbatches,
                            int microbatch_size) {
  const MoeConfig& moe = model.moe;
  StepRouting r = StepRouting::Zero(static_cast<int>(moe.layers.size()), dp, microbatches,
                                    moe.experts);
  if (moe.layers.empty() || moe.experts < 1) return r;
  const int64_t slots = static_cast<int64_t>(moe.top_k) * microbatch_size;
  const int64_t cap = ExpertCapacity(moe.capacity_factor, moe.top_k, microbatch_size, moe.experts);
  for (int b = 0; b < r.blocks; ++b) {
    for (int d = 0; d < dp; ++d) {
      for (int mb = 0; mb < microbatches; ++mb) {
        for (int e = 0; e < moe.experts; ++e) {
          int64_t n = slots / moe.experts + (e < slots % moe.experts ? 1 : 0);
          if (cap >= 0) n = std::min(n, cap);
          r.at(b, d, mb, e) = n;
        }
      }
    }
  }
  return r;
}

StepRouting BusiestBlockRouting(const MlpConfig& model, int dp, int ep, int microbatches,
                                int microbatch_size) {
  const MoeConfig& moe = model.moe;
  StepRouting r = StepRouting::Zero(static_cast<int>(moe.layers.size()), dp, microbatches,
                                    moe.experts);
  if (moe.layers.empty() || moe.experts < 1 || ep < 1) return r;
  const int64_t slots = static_cast<int64_t>(moe.top_k) * microbatch_size;
  const int64_t cap = ExpertCapacity(moe.capacity_factor, moe.top_k, microbatch_size, moe.experts);
  const int64_t per_expert = cap < 0 ? microbatch_size : std::min<int64_t>(microbatch_size, cap);
  const int per_rank = moe.experts / ep;
  for (int b = 0; b < r.blocks; ++b) {
    for (int d = 0; d < dp; ++d) {
      for (int mb = 0; mb < microbatches; ++mb) {
        for (int e = 0; e < moe.experts; ++e) {
          const int64_t before = static_cast<int64_t>(e % per_rank) * per_expert;  // the rank's earlier experts
          r.at(b, d, mb, e) = std::clamp<int64_t>(slots - before, 0, per_expert);
        }
      }
    }
  }
  return r;
}

int64_t EpRows(const StepRouting& routing, int block, int mb, std::span<const int> group,
               int experts_per_rank, int from, int to) {
  int64_t rows = 0;
  for (int b = 0; b < experts_per_rank; ++b) {
    rows += routing.at(block, group[static_cast<size_t>(from)], mb, to * experts_per_rank + b);
  }
  return rows;
}

int MoeBlockIndex(const MlpConfig& model, int layer) {
  const auto& layers = model.moe.layers;
  const auto it = std::lower_bound(layers.begin(), layers.end(), layer);
  return it != layers.end() && *it == layer ? static_cast<int>(it - layers.begin()) : -1;
}

}  // namespace rp::schedule
