// Step metrics (DESIGN.md "Metrics") as pure functions over per-device op intervals, so the
// Executor's measured timeline and the predictor's timeline go through one definition.
//
// Words. A device's step is a list of OpIntervals in modeled time, relative to the step start:
//   kCompute        F, B, Bi, W, the optimizer update: [start, end) is busy time.
//   kRecv           a receive: [start, end) = reached .. got the data; `comm` = the message's link
//                   time. Exposed: min(end − start, comm) (the wait the link time explains).
//   kTpAllReduce    the TP group all-reduce on the compute stream: [start, end) includes the
//                   rendezvous with the group; `comm` = the ring cost, all of it exposed.
//   kGradAllReduce  a DP gradient bucket on the comm stream: `comm` = its ring cost; not exposed
//                   by itself (it overlaps compute).
//   kGradWait       the optimizer's wait for the gradient buckets: all of it is exposed.
//   kSend           departure .. arrival; counts nothing (the receiver counts the link time).
// Definitions:
//   busy        Σ compute durations
//   bubble      step − busy; bubble_total = bubble / step; bubble_ideal = bubble / busy
//   comm        Σ comm over kRecv, kTpAllReduce, kGradAllReduce
//   exposed     Σ exposed parts above
//   overlap     1 − exposed / comm (1 when comm = 0)
//   T1          every compute op of the global batch on one device, no communication:
//               Σ over pipeline ranks of DP × TP × (all its F/B/W costs) + one replica's
//               optimizer steps (pp × tp × optimizer) — as schedule::Predict computes it
//   speedup     T1 / step; efficiency = speedup / world
//   fidelity    measured / predicted − 1
// These are exactly the predictor's definitions (schedule/predictor.h); PredictedIntervals turns a
// Prediction's timeline into intervals and the tests check both agree.
//
// Pure functions; thread-compatible.
//
// Example:
//   std::vector<OpInterval> ops = {{IntervalKind::kCompute, FromMillis(0), FromMillis(50)}};
//   DeviceMetrics m = ComputeDeviceMetrics(ops, FromMillis(100));  // bubble_total 0.5
#pragma once

#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/time.h"
#include "schedule/cost_model.h"
#include "schedule/grid.h"
#include "schedule/predictor.h"
#include "schedule/program.h"

namespace rp::schedule {

enum class IntervalKind : uint8_t { kCompute, kRecv, kSend, kTpAllReduce, kGradAllReduce, kGradWait };

struct OpInterval {
  IntervalKind kind = IntervalKind::kCompute;
  Nanos start{0};
  Nanos end{0};
  Nanos comm{0};  // link / ring time (kRecv, kTpAllReduce, kGradAllReduce)
  int32_t op = -1;  // index of the op in program.ranks[pp] (-1 if none); for timelines
};

struct DeviceMetrics {
  Nanos busy{0};
  Nanos bubble{0};
  double bubble_total = 0;
  double bubble_ideal = 0;
  Nanos comm{0};
  Nanos exposed_comm{0};
  double overlap = 1;
};

// The metrics of one device's step of length `step_time`.
DeviceMetrics ComputeDeviceMetrics(std::span<const OpInterval> ops, Nanos step_time);

// Step time of a set of devices: max end − min start over every interval (0 if none).
Nanos StepTime(std::span<const std::vector<OpInterval>> devices);

// T1 as defined above. InvalidArgument if the cost model has neither 1 nor pp entries.
[[nodiscard]] absl::StatusOr<Nanos> SingleDeviceTime(const Program& prog, const GridShape& grid,
                                                     const CostModel& cost);

struct Scaling {
  double speedup = 0;
  double efficiency = 0;
};
Scaling ComputeScaling(Nanos t1, Nanos step_time, int world);

// measured / predicted − 1 (0 when predicted is 0).
double Fidelity(Nanos measured, Nanos predicted);

// The ring all-reduce time of `bytes` (fp32) over `group` (global ranks, ring order) at its slowest
// link class, as schedule::Predict computes it (RingAllReduceCost). 0 for a group of one.
[[nodiscard]] absl::StatusOr<Nanos> RingCostOverGroup(const ParallelGrid& grid,
                                                      const std::vector<int>& group, uint64_t bytes,
                                                      const LinkSpec& links, const RingModel& ring);

// The intervals of global rank `rank` in `pred` (from Predict(prog, grid, cost, opts)).
[[nodiscard]] absl::StatusOr<std::vector<OpInterval>> PredictedIntervals(
    const Program& prog, const ParallelGrid& grid, const CostModel& cost,
    const PredictOptions& opts, const Prediction& pred, int rank);

}  // namespace rp::schedule
