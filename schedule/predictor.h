// Predict: plays a Program on a ParallelGrid in virtual time (discrete events, no threads, no clock).
//
// Model (the same rules the Executor follows in real time):
//   - each device has one compute stream: compute ops (F, B, Bi, W, optimizer) run back to back, each
//     for its CostModel time; a kTpAllReduce blocks the stream until every TP-group member has reached
//     it, then takes the ring cost over the TP group;
//   - a send is posted when the device reaches it (after the op it sends) and never blocks the
//     device; each directed device-to-device link carries one message at a time, so the message
//     departs when the link is free (the previous message on it has arrived) and arrives
//     LinkParams::Duration(bytes) later (link class from the grid's placement); a receive waits for
//     its message's arrival;
//   - gradient buckets (kAllReduce) go on the device's comm stream: bucket b of the DP group starts when
//     every member has enqueued it and bucket b−1 is done, and lasts RingAllReduceCost over the DP group
//     (ring in DP order, at its slowest link class); kOptimizerStep waits for the device's last bucket.
//
// Replica classes. Costs depend on the pipeline rank only, and before the optimizer step the only
// cross-replica op is the asynchronous DP all-reduce, which no compute op waits for. So two DP replicas
// whose links have the same classes (every PP hop, every TP ring) have identical timelines up to the
// optimizer step. The predictor groups replicas by that signature, simulates one replica per class, then
// computes the all-reduces per DP group and the optimizer step per device. (dedupe_replicas = false
// simulates every replica: same result, slower; the tests check they agree.)
//
// Metrics (DESIGN.md): step time = 0 to the last op end; per device busy = compute time, bubble = step −
// busy, bubble_over_total = bubble / step, bubble_over_ideal = bubble / busy; comm = link time of the
// messages it receives (arrival − the send's start: wire time plus any wait for a busy link) + its TP
// and DP all-reduce time; exposed = the part of receive waits covered by the message's link time + TP all-reduce time + the optimizer's wait for the all-reduce; overlap =
// 1 − exposed / comm (1 when comm = 0); T1 = all F/B/W time of all devices + one replica's optimizer time.
//
// Errors: Validate's, plus InvalidArgument when the grid's pp differs from the program's ranks, the cost
// model has neither 1 nor p entries, or W > B in a split program.
//
// Example:
//   RP_ASSIGN_OR_RETURN(Program prog, BuildOneFOneB({.num_ranks = 4, .num_micro_batches = 8}));
//   RP_ASSIGN_OR_RETURN(ParallelGrid grid, ParallelGrid::Create({.dp = 2, .pp = 4}));
//   CostModel cost = CostModel::Uniform({.forward = FromMillis(50), .backward = FromMillis(80)});
//   RP_ASSIGN_OR_RETURN(Prediction pred, Predict(prog, grid, cost, {}));
//   pred.step_time;  // 11 × 130 ms = 1430 ms with free links
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/link.h"
#include "runtime/time.h"
#include "schedule/cost_model.h"
#include "schedule/grid.h"
#include "schedule/program.h"

namespace rp::schedule {

struct PredictOptions {
  // Default: free links (alpha 0, infinite bandwidth). links.devices_per_node is not used: the grid's
  // placement decides which class a pair of ranks uses.
  LinkSpec links;
  RingModel dp_ring;   // gradient all-reduce over the DP group
  RingModel tp_ring;   // kTpAllReduce over the TP group
  bool dedupe_replicas = true;
  // Per global rank: every compute op of that device (F, B, Bi, W, optimizer) takes factor × its
  // cost, rounded to the nearest ns — a straggler (runtime/faults.h Straggler, the same rounding as
  // FaultInjector::ComputeDuration). Empty = 1 everywhere; else world size entries, each >= 1. T1
  // stays the healthy single device's time.
  std::vector<double> compute_factor;
  // Per compute op, replacing compute_factor when set: the factor of the `compute_op`-th compute op
  // (F, B, Bi, W or the optimizer step, counted from 0 in the rank's program order) of global rank
  // `rank`, >= 1 and finite — seeded per-op jitter (rp::FaultInjector::ComputeFactor, which
  // includes the straggler factor). Every replica is then simulated on its own (no replica
  // classes: each has its own draws).
  std::function<double(int rank, int compute_op)> compute_op_factor;
};

// One op's predicted interval. Compute: [start, end). Send: start = departure, end = arrival at the peer.
// Receive: start = when the device reached it, end = when it got the message. kAllReduce: the bucket's
// interval on the comm stream. kTpAllReduce / kOptimizerStep: including the wait for the group /
// all-reduces (the op itself occupies its last `cost` ns).
struct OpTiming {
  Nanos start{0};
  Nanos end{0};
};

struct DeviceStats {
  Nanos busy{0};
  Nanos bubble{0};
  double bubble_over_total = 0;
  double bubble_over_ideal = 0;
  Nanos comm{0};
  Nanos exposed_comm{0};
  double overlap = 1;
  int peak_in_flight = 0;             // chunk activations (ValidationReport)
  uint64_t peak_activation_bytes = 0;  // peak_in_flight × activation_bytes / chunks_per_direction
  // [J] The pipeline alone: its compute ops F, B, Bi, W and F&B (no all-reduce, no optimizer).
  Nanos pipeline_busy{0};    // their time
  Nanos span{0};             // per-rank span: this device's first such op's start to its last one's end
  Nanos makespan_bubble{0};  // Prediction::makespan − pipeline_busy: idle time with the flush
  Nanos span_bubble{0};      // span − pipeline_busy: what zero-bubble papers quote
};

struct Prediction {
  Nanos step_time{0};
  Nanos single_device_time{0};  // T1
  double speedup = 0;           // T1 / step_time
  double efficiency = 0;        // speedup / world size
  std::vector<DeviceStats> devices;  // by global rank
  // [J] Pipeline makespan and per-rank span (DeviceStats): the makespan is the last F/B/Bi/W/F&B end
  // over all devices (the step's pipeline part, with its flush: what a user waits for before the
  // optimizer); the spans are per device. Bubbles: the largest over devices.
  Nanos makespan{0};
  Nanos max_span{0};
  Nanos makespan_bubble{0};
  Nanos span_bubble{0};

  // Timelines are stored once per replica class.
  std::vector<int> class_of_replica;                        // by dp index
  std::vector<std::vector<std::vector<OpTiming>>> timelines;  // [class][pp·TP + tp][op index]
  int tp = 1;

  int num_replica_classes() const { return static_cast<int>(timelines.size()); }
  // The op timings of a global rank, parallel to program.ranks[pp] (rank must be valid).
  const std::vector<OpTiming>& Timeline(const ParallelGrid& grid, int rank) const {
    const Coord c = grid.CoordOf(rank);
    return timelines[class_of_replica[c.dp]][c.pp * tp + c.tp];
  }
};

[[nodiscard]] absl::StatusOr<Prediction> Predict(const Program& prog, const ParallelGrid& grid,
                                                 const CostModel& cost, const PredictOptions& opts = {});

}  // namespace rp::schedule
