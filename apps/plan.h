// rp::apps::Plan: what the lower layers take, derived from a valid config (apps/config.h): the grid,
// the program of the chosen schedule, the cost model, the links, the workload and the predictor
// options. `run` and `predict` build the same plan, so `predict` reports exactly what `run` puts in
// its "predicted" column.
//
// Thread safety: pure functions.
//
// Modeled vs real sizes. With the fixed cost model the message and gradient sizes the fabric times
// are the real MLP's; with the FLOPs cost model they are the described transformer's while the small
// MLP is computed (schedule/workload_cost.h). `modeled_sizes` says which.
//
// Example:
//   RP_ASSIGN_OR_RETURN(RunConfig cfg, LoadConfig(args, /*for_run=*/false));
//   RP_ASSIGN_OR_RETURN(Plan plan, BuildPlan(cfg, /*for_run=*/false));
//   RP_ASSIGN_OR_RETURN(schedule::Prediction pred, schedule::Predict(plan.execution, plan.predict));
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "apps/config_fields.h"
#include "schedule/executor.h"
#include "schedule/grid.h"
#include "schedule/plan.h"
#include "schedule/predictor.h"
#include "schedule/workload_cost.h"

namespace rp::apps {

// `executor` holds the program, the cost model, the links and the workload (tracer unset);
// `execution` is the execution plan the executor and the predictor play (schedule::BuildPlan of
// schedule::PlanOptionsFor(executor)); `predict` the predictor options the executor itself uses
// (schedule::PredictOptionsFor).
struct Plan {
  schedule::ParallelGrid grid;
  schedule::ExecutorOptions executor;
  schedule::ExecutionPlan execution;
  schedule::PredictOptions predict;
  std::string cost_description;  // one line for the report, e.g. "fixed: F 50 ms, B 80 ms per ..."
  // What the fabric's sizes describe: "the real MLP" (fixed cost model) or "the described transformer".
  std::string modeled_sizes;
};

// `cfg` must have passed LoadConfig with the same `for_run` (errors otherwise are the lower layers').
// `for_run`: the plan of a run, whose real MLP is computed (the executor's warm-up sizes). Without it
// and under the FLOPs cost model nothing of the real MLP is built: `predict` neither needs nor
// validates it (LoadConfig(args, /*for_run=*/false)).
[[nodiscard]] absl::StatusOr<Plan> BuildPlan(const RunConfig& cfg, bool for_run);

// A prediction alone (predict, --predict_only) must stay within seconds: when the plan's replicas do
// not fold into one (schedule::ReplicasFold) the predictor plays every device's messages, which grow
// as dp² — at most kMaxPredictedMessages a step (InvalidArgument naming --dp and why the replicas do not
// fold, schedule::ReplicasFoldBlocker, beyond; with dp = 1, naming --microbatches). With EP the
// replicas fold into one EP group at best, whose messages grow as ep² (naming --ep beyond).
inline constexpr double kMaxPredictedMessages = 1e8;  // 2048 replicas of one device, ~1.7e7: 1.7 s here
[[nodiscard]] absl::Status CheckPredictable(const RunConfig& cfg, const Plan& plan);

// Modeled bytes each pipeline rank puts on the fabric in one step (schedule::PredictWireBytes).
std::vector<schedule::PredictedWire> PredictWireBytes(const Plan& plan);

// The executor's watchdog for a config's watchdog_timeout (seconds).
std::chrono::nanoseconds WatchdogTimeout(double seconds);

}  // namespace rp::apps
