#include "schedule/cost_model.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "runtime/timing.h"

namespace rp::schedule {

absl::StatusOr<CostModel> CostModel::FromFlops(const std::vector<StageFlops>& stages,
                                               double device_tflops) {
  if (!(device_tflops > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("CostModel::FromFlops: device_tflops must be > 0, got ", device_tflops));
  }
  if (stages.empty()) {
    return absl::InvalidArgumentError("CostModel::FromFlops: no stages");
  }
  CostModel cm;
  auto t = [&](double flops) { return RoundNanos(flops / (device_tflops * 1e3)); };
  for (size_t i = 0; i < stages.size(); ++i) {
    const StageFlops& f = stages[i];
    if (f.forward < 0 || f.backward < 0 || f.weight_grad < 0 || f.optimizer < 0 ||
        f.weight_grad > f.backward) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CostModel::FromFlops: stage ", i, ": FLOPs must be >= 0 and weight_grad <= backward"));
    }
    cm.stages.push_back(StageCost{t(f.forward), t(f.backward), t(f.weight_grad), t(f.optimizer),
                                  f.activation_bytes});
  }
  return cm;
}

std::array<Nanos, 4> ChunkOpCosts(const CostModel& cost, int rank, int model_stage, int chunks_per_direction) {
  if (!cost.model_stages.empty()) {
    const StageCost& c = cost.model_stages[static_cast<size_t>(model_stage)];
    return {c.forward, c.backward, c.backward - c.weight_grad, c.weight_grad};
  }
  const StageCost& c = cost.Of(rank);
  const int v = chunks_per_direction;
  return {c.forward / v, c.backward / v, (c.backward - c.weight_grad) / v, c.weight_grad / v};
}

}  // namespace rp::schedule
