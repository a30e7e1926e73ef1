// The compute cost model: modeled time per op of each pipeline rank.
//
// StageCost gives, for one micro-batch on one pipeline rank (all its layers, one TP shard): forward
// F, whole backward B (input + weight gradients), and W (the weight-gradient part of B, used by
// split-backward programs: Bi costs B − W, W costs W), plus the optimizer step and the bytes of
// stored activations. A chunk op costs 1 / (chunks per direction) of it (integer nanoseconds;
// schedule/plan.h) — unless the model's stages have their own costs (`model_stages`: a described
// model whose stages hold different numbers of layers), then a chunk op costs its stage's. Communication is not a cost here: it is timed by the fabric (runtime/fabric.h,
// docs/collectives.md for the closed forms that are its test oracles).
//
// Pure functions; thread-compatible.
//
// Example:
//   CostModel c = CostModel::Uniform({.forward = FromMillis(50), .backward = FromMillis(80)});
#pragma once

#include <array>
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

// Stored activations of one micro-batch of one model stage: what its F keeps for its backward, and
// what a split backward (Bi, then W) keeps from its Bi until its W — the layer inputs and the
// gradients of the layers' outputs, which W needs (the real MLP: its pre-activation gradients).
struct StageStored {
  uint64_t after_forward = 0;
  uint64_t after_input_grad = 0;
  friend bool operator==(const StageStored&, const StageStored&) = default;
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

  // Optional, one entry per model stage (Program::num_model_stages(); both directions of a
  // two-direction schedule run over the same stages): one micro-batch's F, B and W through that
  // stage (optimizer unused). When set, a chunk op costs its own stage's entry, not 1 / (chunks per
  // direction) of its rank's, and `stages` should hold each rank's sum over its chunks ÷ directions
  // (PlaceStageCosts in schedule/workload_cost.h does both for a program).
  std::vector<StageCost> model_stages;
  // Optional, one entry per model stage: the stored activations of one micro-batch of that stage.
  // When set, a rank's modeled activation peak is counted stage by stage over its program
  // (Validate), not as its peak in flight × its mean bytes per chunk.
  std::vector<StageStored> stage_stored;

  static CostModel Uniform(StageCost c) {
    CostModel m;
    m.stages = {c};
    return m;
  }
  // time = flops / (device_tflops · 1e12) s, rounded to the nanosecond. InvalidArgument if
  // device_tflops <= 0 or a FLOP count is negative.
  [[nodiscard]] static absl::StatusOr<CostModel> FromFlops(const std::vector<StageFlops>& stages,
                                                           double device_tflops);

  const StageCost& Of(int rank) const { return stages.size() == 1 ? stages[0] : stages[rank]; }
};

// One chunk op's modeled durations {F, B, Bi = B − W, W} on model stage `model_stage` of pipeline
// rank `rank`: the stage's own entry if `cost.model_stages` is set, else the rank's ÷
// `chunks_per_direction`. Preconditions: indices in range, chunks_per_direction >= 1.
std::array<Nanos, 4> ChunkOpCosts(const CostModel& cost, int rank, int model_stage, int chunks_per_direction);

}  // namespace rp::schedule
