// rp::apps::Plan: what the lower layers take, derived from a valid config (apps/config.h): the grid,
// the program of the chosen schedule, the cost model, the links, the workload and the predictor
// options. `run` and `predict` build the same plan, so `predict` reports exactly what `run` puts in
// its "predicted" column.
//
// Thread safety: pure functions.
//
// Example:
//   RP_ASSIGN_OR_RETURN(RunConfig cfg, LoadConfig(args, /*for_run=*/false));
//   RP_ASSIGN_OR_RETURN(Plan plan, BuildPlan(cfg));
//   RP_ASSIGN_OR_RETURN(schedule::Prediction pred,
//                       schedule::Predict(plan.executor.program, plan.grid, plan.executor.cost, plan.predict));
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "apps/config_fields.h"
#include "schedule/executor.h"
#include "schedule/grid.h"
#include "schedule/predictor.h"

namespace rp::apps {

// `executor` holds the program, the cost model, the links and the workload (tracer unset); `predict`
// are the predictor options the executor itself uses for the same options (schedule::PredictOptionsFor's
// rule: links; DP ring = codec and segment_bytes; TP ring = fp32, one message per chunk).
struct Plan {
  schedule::ParallelGrid grid;
  schedule::ExecutorOptions executor;
  schedule::PredictOptions predict;
  std::string cost_description;  // one line for the report, e.g. "fixed: F 50 ms, B 80 ms per ..."
};

// `cfg` must have passed ValidateConfig (errors otherwise are the lower layers').
[[nodiscard]] absl::StatusOr<Plan> BuildPlan(const RunConfig& cfg);

// Bytes each pipeline rank puts on the wire in one step (schedule::PredictWireBytes of the plan).
std::vector<schedule::PredictedWire> PredictWireBytes(const Plan& plan);

}  // namespace rp::apps
