#include "runtime/model/optimizer.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace rp {

std::string_view OptimizerName(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::kSgdMomentum: return "sgd";
    case OptimizerKind::kAdam: return "adam";
  }
  return "unknown";
}

absl::Status ValidateOptimizerConfig(const OptimizerConfig& c) {
  auto bad = [](const char* field, float v, const char* want) {
    return absl::InvalidArgumentError(absl::StrFormat("%s must be %s, got %g", field, want, v));
  };
  if (!(c.lr > 0.0f) || !std::isfinite(c.lr)) return bad("lr", c.lr, "> 0");
  if (!(c.momentum >= 0.0f && c.momentum < 1.0f)) return bad("momentum", c.momentum, "in [0, 1)");
  if (!(c.beta1 >= 0.0f && c.beta1 < 1.0f)) return bad("beta1", c.beta1, "in [0, 1)");
  if (!(c.beta2 >= 0.0f && c.beta2 < 1.0f)) return bad("beta2", c.beta2, "in [0, 1)");
  if (!(c.epsilon > 0.0f)) return bad("epsilon", c.epsilon, "> 0");
  if (!(c.weight_decay >= 0.0f)) return bad("weight_decay", c.weight_decay, ">= 0");
  return absl::OkStatus();
}

Optimizer::Optimizer(const OptimizerConfig& config, size_t n)
    : config_(config), m_(n, 0.0f), v_(config.kind == OptimizerKind::kAdam ? n : 0, 0.0f) {}

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(const OptimizerConfig& config,
                                                             size_t num_params) {
  if (auto s = ValidateOptimizerConfig(config); !s.ok()) return s;
  return std::unique_ptr<Optimizer>(new Optimizer(config, num_params));
}

absl::Status Optimizer::Step(std::span<float> params, std::span<const float> grads) {
  if (params.size() != m_.size() || grads.size() != m_.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "optimizer holds state for %d parameters, got %d params and %d grads", m_.size(),
        params.size(), grads.size()));
  }
  ++steps_;
  const size_t n = params.size();
  float* __restrict w = params.data();
  const float* __restrict g = grads.data();
  float* __restrict m = m_.data();
  const float lr = config_.lr, wd = config_.weight_decay;
  if (config_.kind == OptimizerKind::kSgdMomentum) {
    const float mu = config_.momentum;
    for (size_t i = 0; i < n; ++i) {
      const float gi = g[i] + wd * w[i];
      m[i] = mu * m[i] + gi;
      w[i] = w[i] - lr * m[i];
    }
  } else {
    float* __restrict v = v_.data();
    const float b1 = config_.beta1, b2 = config_.beta2, eps = config_.epsilon;
    const double t = static_cast<double>(steps_);
    const float lr_t = static_cast<float>(static_cast<double>(lr) *
                                          std::sqrt(1.0 - std::pow(static_cast<double>(b2), t)) /
                                          (1.0 - std::pow(static_cast<double>(b1), t)));
    for (size_t i = 0; i < n; ++i) {
      const float gi = g[i] + wd * w[i];
      m[i] = b1 * m[i] + (1.0f - b1) * gi;
      v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
      w[i] = w[i] - lr_t * m[i] / (std::sqrt(v[i]) + eps);
    }
  }
  return absl::OkStatus();
}

}  // namespace rp
