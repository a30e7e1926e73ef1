// Test helpers: plan and predict a bare Program (free links unless given; a stand-in model with
// one layer per model stage, so each compute op is one interval, or two for an F&B).
#pragma once

#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "schedule/plan.h"
#include "schedule/predictor.h"

namespace rp::schedule {

inline absl::StatusOr<ExecutionPlan> PlanOf(const Program& prog, const CostModel& cost,
                                            GridShape grid = {}, Placement placement = {},
                                            LinkSpec links = {}) {
  if (grid.pp == 1) grid.pp = prog.num_ranks;
  MlpConfig model{.input_dim = 8,
                  .hidden = std::vector<int>(static_cast<size_t>(prog.num_model_stages() - 1), 8),
                  .classes = 8};
  return BuildPlan({.grid = grid, .placement = placement, .program = prog, .model = model,
                    .cost = cost, .links = links});
}

inline absl::StatusOr<Prediction> PredictProgram(const Program& prog, const ParallelGrid& grid,
                                                 const CostModel& cost,
                                                 const PredictOptions& opts = {},
                                                 LinkSpec links = {}) {
  absl::StatusOr<ExecutionPlan> plan = PlanOf(prog, cost, grid.shape(), grid.placement(), links);
  if (!plan.ok()) return plan.status();
  return Predict(*plan, opts);
}

// The (start, end) of each compute op of `rank`, in program order: its first compute interval's
// start and its last one's end.
inline std::vector<std::pair<Nanos, Nanos>> ComputeSpans(const Prediction& pred,
                                                         const ParallelGrid& grid, int rank) {
  std::vector<std::pair<Nanos, Nanos>> out;
  int last_op = -1;
  for (const OpInterval& iv : pred.Timeline(grid, rank)) {
    if (iv.kind != IntervalKind::kCompute) continue;
    if (iv.op != last_op) {
      out.push_back({iv.start, iv.end});
      last_op = iv.op;
    } else {
      out.back().second = iv.end;
    }
  }
  return out;
}

}  // namespace rp::schedule
