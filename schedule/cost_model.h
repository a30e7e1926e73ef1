// The compute cost model: modeled time per op of each pipeline rank.
//
// StageCost gives, for one micro-batch on one pipeline rank (all its layers, one TP shard): forward
// F, whole backward B (input + weight gradients), and W (the weight-gradient part of B, used by
// split-backward programs: Bi costs B − W, W costs W), plus the optimizer step and the bytes of
// stored activations. A chunk op costs 1 / (chunks per direction) of it (integer nanoseconds;
// schedule/plan.h). Communication is not a cost here: it is timed by the fabric (runtime/fabric.h,
// docs/collectives.md for the closed forms that are its test oracles).
//
// Pure functions; thread-compatible.
//
// Example:
//   CostModel c = CostModel::Uniform({.forward = FromMillis(50), .backward = FromMillis(80)});
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/link.h"
#include "runtime/time.h"

namespace rp::schedule {

struct StageCost {
  Nanos forward{0};
  Nanos backward{0};     // whole backward, input + weight gradients
  Nanos weight_grad{0};  // the weight-gradient part of `backward` (<= backward)
  Nanos optimizer{0};
  uint64_t activation_bytes = 0;  // stored activations of one micro-batch (whole device)
};

struct StageFlops {
  double forward = 0;  // FLOPs of one micro-batch's forward on this rank
  double backward = 0;
  double weight_grad = 0;
  double optimizer = 0;
  uint64_t activation_bytes = 0;
};

struct CostModel {
  // One entry per pipeline rank, or a single entry used for every rank.
  std::vector<StageCost> stages;

  static CostModel Uniform(StageCost c) { return CostModel{{c}}; }
  // time = flops / (device_tflops · 1e12) s, rounded to the nanosecond. InvalidArgument if
  // device_tflops <= 0 or a FLOP count is negative.
  [[nodiscard]] static absl::StatusOr<CostModel> FromFlops(const std::vector<StageFlops>& stages,
                                                           double device_tflops);

  const StageCost& Of(int rank) const { return stages.size() == 1 ? stages[0] : stages[rank]; }
};

}  // namespace rp::schedule
