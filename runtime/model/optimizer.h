// rp::Optimizer: SGD with momentum and Adam on a flat parameter span (one stage shard's params()).
//
// Each update is element-wise and deterministic: replicas that hold the same parameters, state and
// gradients compute the same bits, and a shard's update equals the matching slice of the unsharded
// model's update. Updates (float arithmetic, in this order):
//   SGD:  g' = g + weight_decay·w;  v = momentum·v + g';  w = w − lr·v
//   Adam: g' = g + weight_decay·w;  m = β1·m + (1−β1)·g';  v = β2·v + (1−β2)·g'²;
//         w = w − lr_t · m / (sqrt(v) + ε),  lr_t = lr·sqrt(1−β2^t)/(1−β1^t) (t = step count, in
//         double, rounded to float once per step)
//
// Thread safety: none; one optimizer per stage shard, used by the thread that owns the shard.
//
// Example:
//   RP_ASSIGN_OR_RETURN(auto opt, rp::Optimizer::Create({.kind = rp::OptimizerKind::kAdam,
//                                                        .lr = 1e-3f}, stage->params().size()));
//   RP_RETURN_IF_ERROR(opt->Step(stage->params(), stage->grads()));
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace rp {

enum class OptimizerKind { kSgdMomentum, kAdam };
std::string_view OptimizerName(OptimizerKind k);

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kSgdMomentum;
  float lr = 0.05f;
  float momentum = 0.9f;  // SGD
  float beta1 = 0.9f;     // Adam
  float beta2 = 0.999f;   // Adam
  float epsilon = 1e-8f;  // Adam
  float weight_decay = 0.0f;
};

// InvalidArgument naming the field: lr > 0, momentum in [0, 1), beta1/beta2 in [0, 1),
// epsilon > 0, weight_decay >= 0.
[[nodiscard]] absl::Status ValidateOptimizerConfig(const OptimizerConfig& config);

class Optimizer {
 public:
  // State for `num_params` parameters (zeros). Errors: a bad config.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Optimizer>> Create(
      const OptimizerConfig& config, size_t num_params);

  // One update of `params` by `grads` (both num_params long; else InvalidArgument).
  [[nodiscard]] absl::Status Step(std::span<float> params, std::span<const float> grads);

  int64_t steps() const { return steps_; }
  const OptimizerConfig& config() const { return config_; }

 private:
  Optimizer(const OptimizerConfig& config, size_t n);
  OptimizerConfig config_;
  int64_t steps_ = 0;
  std::vector<float> m_, v_;  // SGD uses m_ as the velocity
};

}  // namespace rp
