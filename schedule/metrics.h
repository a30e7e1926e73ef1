// Step metrics (DESIGN.md "Metrics", "Communication vs waiting") as pure functions over a device's
// op intervals, so the measured, emulated and predicted timelines go through one definition.
//
// Words. A device's step is a list of OpIntervals, relative to the step start, on two timelines:
// emulated (the run's modeled times; the predictor fills the same fields for its own timeline) and
// measured (wall stamps on the device's threads ÷ time scale; on a virtual clock equal to emulated).
//   kCompute        F, B, Bi, W, F&B (TP all-reduces inside them excluded): busy, the pipeline.
//   kOptimizer      the optimizer update: busy, not the pipeline.
//   kRecv           a p2p receive: the device waited from reaching it to the message's arrival.
//   kTpAllReduce    a TP all-reduce inside F/B, on the compute stream (the device waits it all).
//   kEpAllToAll     an EP all-to-all (a MoE block's dispatch or combine) inside F/B/Bi, on the
//                   compute stream, accounted as a TP all-reduce is.
//   kGradWait       the optimizer's wait for its gradient buckets (compute stream).
//   kGradAllReduce  a DP bucket all-reduce on the comm stream (overlaps compute; not a wait).
//   kSend           a p2p send (an instant on the sender: the receiver accounts the message).
// A wait splits into transfer (the data it waited for was in flight: sent and not yet arrived,
// or queued for a busy port) and peer wait (the peer had not sent it yet: a straggler, a
// dependency). `comm` is the communication time an interval accounts for: a receive's message
// flight (arrival − its ready time at the sender), a collective's transfer + reduce time.
// Definitions (per timeline):
//   busy         Σ compute and optimizer durations (measured: less their host lateness)
//   pipeline     the compute intervals alone: pipeline_busy = Σ their durations, span = the
//                device's first one's start to its last one's end (the per-rank span zero-bubble
//                papers quote); the makespan of a step is the last pipeline end over devices
//   bubble       step − busy; bubble_total = bubble / step; bubble_ideal = bubble / busy
//   exposed      Σ transfer parts of the compute stream's waits (receives, TP all-reduces, EP
//                all-to-alls, the optimizer's wait)
//   peer wait    Σ their peer-wait parts (part of the bubble, never communication)
//   host late    measured only: Σ their parts past the data's modeled arrival (a receive's message,
//                a collective's modeled end): on a real clock the device slept until that instant,
//                so the rest is the host waking it late — neither communication nor a peer's
//                delay; likewise the part of a compute or optimizer interval past both its modeled
//                end and its real work's return (the host waking it late at its end; an overrun's
//                extra work stays busy). Part of the bubble; 0 on the emulated and predicted
//                timelines and on a virtual clock. The compute op after a late wake-up still ends
//                at its deadline, so measured busy falls short of the modeled compute by about
//                as much.
//   comm         Σ comm over receives, TP and DP all-reduces, EP all-to-alls (emulated: the
//                measured figure uses the same — how long the fabric took to move the data is a
//                model quantity)
//   overlap      1 − exposed / comm, in [0, 1] (1 when comm = 0)
//   T1           every compute op of the global batch on one device, no communication
//   speedup      T1 / step; efficiency = speedup / world
// Pure functions; thread-compatible.
//
// Example:
//   std::vector<OpInterval> ops = {{.kind = IntervalKind::kCompute, .end = FromMillis(50)}};
//   DeviceMetrics m = ComputeDeviceMetrics(ops, FromMillis(100), Timeline::kEmulated);
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/time.h"
#include "schedule/cost_model.h"
#include "schedule/grid.h"
#include "schedule/program.h"

namespace rp::schedule {

enum class IntervalKind : uint8_t {
  kCompute, kRecv, kSend, kTpAllReduce, kGradAllReduce, kGradWait, kOptimizer, kEpAllToAll
};
const char* IntervalKindName(IntervalKind k);  // "compute", "recv", ...

enum class Timeline : uint8_t { kMeasured, kEmulated };

struct OpInterval {
  IntervalKind kind = IntervalKind::kCompute;
  int32_t op = -1;      // index of the op in program.ranks[pp] (-1 if none)
  // kGradAllReduce: the bucket (launch order); kTpAllReduce, kEpAllToAll: its index in the op (of
  // its kind); kCompute: 1 for
  // the backward part of an F&B.
  int32_t detail = -1;
  // Emulated (or predicted) timeline.
  Nanos start{0};
  Nanos end{0};
  Nanos transfer{0};
  Nanos peer{0};
  Nanos comm{0};
  // Measured timeline (wall ÷ time scale, relative to the step's measured start).
  Nanos wall_start{0};
  Nanos wall_end{0};
  Nanos wall_transfer{0};
  Nanos wall_peer{0};
  // "host late": a wait's wall time past its data's modeled arrival; a compute or optimizer
  // interval's past both its modeled end and its real work's return.
  Nanos wall_late{0};
};

struct DeviceMetrics {
  Nanos busy{0};
  Nanos pipeline_busy{0};
  Nanos pipeline_start{0};  // the first compute interval's start (0 if none)
  Nanos pipeline_end{0};    // the last one's end
  Nanos span{0};            // pipeline_end − pipeline_start
  // With the step's makespan (the last pipeline end over devices, see PipelineFigures):
  Nanos makespan_bubble{0};  // makespan − pipeline_busy: idle time with the flush
  Nanos span_bubble{0};      // span − pipeline_busy: what zero-bubble papers quote
  Nanos bubble{0};
  double bubble_total = 0;
  double bubble_ideal = 0;
  Nanos comm{0};
  Nanos exposed_comm{0};
  Nanos peer_wait{0};
  double overlap = 1;
  // The EP all-to-alls' share of exposed_comm and peer_wait (kEpAllToAll intervals).
  Nanos ep_exposed_comm{0};
  Nanos ep_peer_wait{0};
  // Measured only (see "host late"): waits past their data's modeled arrival, compute ends
  // woken late.
  Nanos host_late{0};
};

// The metrics of one device's step of length `step_time` on `timeline`.
DeviceMetrics ComputeDeviceMetrics(std::span<const OpInterval> ops, Nanos step_time,
                                   Timeline timeline);

// The pipeline figures of a step over its devices: the makespan (last pipeline end), the largest
// per-rank span, and the largest bubbles of each kind; fills each device's makespan_bubble and
// span_bubble.
struct PipelineFigures {
  Nanos makespan{0};
  Nanos max_span{0};
  Nanos makespan_bubble{0};
  Nanos span_bubble{0};
};
PipelineFigures ComputePipelineFigures(std::span<DeviceMetrics> devices);

// Splits a wait [start, end) for data that was ready at its sender at `ready`: the part before
// `ready` is peer wait, the rest transfer. Returns {transfer, peer} (late stays 0).
struct WaitSplit {
  Nanos transfer{0};
  Nanos peer{0};
  Nanos late{0};  // measured splits: the part past the data's modeled arrival
};
WaitSplit SplitWait(Nanos start, Nanos end, Nanos ready);
// A measured wait [start, end) whose data was ready at `ready` and modeled to arrive at `arrival`
// (both on the wait's axis): peer wait before `ready`, transfer up to `arrival`, late after it.
// transfer + peer + late = end − start.
WaitSplit SplitMeasuredWait(Nanos start, Nanos end, Nanos ready, Nanos arrival);

// WaitSpan (runtime/time.h): a stretch of a collective's wait.
// Splits the wait [start, end) against a comm stream's spans (absolute times): the overlap with
// peer spans is peer wait, the rest (transfer spans, reduction tails) transfer.
WaitSplit SplitBySpans(Nanos start, Nanos end, std::span<const WaitSpan> spans);
// The same for a measured wait whose collective's modeled end is `done`: the part past `done` is
// late, the rest split by the spans.
WaitSplit SplitBySpans(Nanos start, Nanos end, std::span<const WaitSpan> spans, Nanos done);

// T1 as defined above. InvalidArgument if the cost model has neither 1 nor pp entries.
[[nodiscard]] absl::StatusOr<Nanos> SingleDeviceTime(const Program& prog, const GridShape& grid,
                                                     const CostModel& cost);

struct Scaling {
  double speedup = 0;
  double efficiency = 0;
};
Scaling ComputeScaling(Nanos t1, Nanos step_time, int world);

// a / b − 1 (0 when b is 0): fidelity.host = measured / emulated − 1, fidelity.model = emulated /
// predicted − 1.
double Fidelity(Nanos a, Nanos b);

}  // namespace rp::schedule
