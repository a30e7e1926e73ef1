// Predict: plays an ExecutionPlan in modeled time without threads — a discrete-event simulation of
// the same devices, ops, layer steps, ring collectives and fabric as the emulator, so on the
// virtual clock the emulated timeline equals the predicted one to the nanosecond (tests).
//
// How. Every device stream is a simulated LP with the emulator's rules (schedule/runner.h):
//   compute ops take the plan's cost × fault factor, cut into layer steps (StepDurations); a TP
//   all-reduce between layers is a ring::RingTimer over the TP group; a send posts its message; a
//   receive waits for its message's arrival; the chunk's last backward launches buckets on the comm
//   stream, each a RingTimer over the DP group starting at max(ready, previous bucket's end); the
//   optimizer waits for every bucket; a MoE block's EP dispatch and combine (ep > 1) are two
//   a2a::PairwiseTimer rounds each (counts, blocks) over the EP group, sized by the step's routing.
// Messages commit on a rp::FabricModel in key order (ready, tie rank, post count of the LP): the
// simulation runs every LP until it blocks, then commits the pending message of least key — the
// order rp::Fabric's conservative rule produces with threads. Ports, contention, NIC sharing,
// degraded and slow links all come from the same FabricModel.
//
// Replica folding. When every DP replica is identical — same link classes along every pipeline
// hop, TP ring and DP ring, no per-replica faults, no NIC shared by two replicas — every replica's
// timeline is the same (ties are broken by a replica-invariant rank first, schedule/plan.h), so the
// simulation plays one replica and stands each DP ring message to the next replica in for the
// message it receives from the previous one (same ports, same times). Exact, and what makes
// DP 1024 × PP 16 predict in well under a second. fold_replicas = false plays every device
// (tests check both agree).
// Replicas that share nodes (nodes of 8 devices, replicas of 4) are not all alike — the DP hop
// from the first replica of a node to the second stays on the node, the next one leaves it — but
// they repeat every node: the fold then plays the first P replicas, P the smallest period the
// layout repeats with, each replica d standing in for all d' ≡ d (mod P), the same way as below.
// With EP exchanges the all-to-alls couple the replicas of an EP group (ep consecutive replicas),
// so the fold is one EP group: when the layout, the factors and the routing repeat every ep
// replicas (balanced routing does; a run's routing rarely), replica d's timeline is replica
// d mod ep's. The simulation plays replicas 0 .. ep − 1; the DP ring message that leaves the group
// (ep − 1 → ep) stands in for the one that enters it (dp − 1 → 0), through replica 0's ingress,
// and an expert ring's message to the same EP rank of the next group for the one from the
// previous group, as above. At each port the messages meet in the same order as unfolded (their
// senders' replica order is kept), so this too is exact (tests: every device's timeline equal to
// the unfolded prediction's).
// Two directions (DualPipe) fold the same way: a stage's gradient ring visits each replica's two
// copies one after the other (ExecutionPlan::GradGroup), so the message from a replica's second
// copy to the next replica's first stands in for the one its own first copy receives.
//
// Metrics (schedule/metrics.h): per device on the predicted timeline; step time = the last op's
// end (the step starts at 0); T1 = SingleDeviceTime.
//
// Errors: InvalidArgument for bad factors; ResourceExhausted if a modeled time does not fit in
// int64 nanoseconds (naming the rank and op).
//
// Example:
//   RP_ASSIGN_OR_RETURN(ExecutionPlan plan, BuildPlan(options));
//   RP_ASSIGN_OR_RETURN(Prediction pred, Predict(plan, {}));
//   pred.step_time;  // 1F1B, p = 4, m = 8, F = 50, B = 80 ms, free links: 11 × 130 ms = 1430 ms
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/time.h"
#include "schedule/metrics.h"
#include "schedule/plan.h"
#include "schedule/routing.h"

namespace rp::schedule {

struct PredictOptions {
  // Per global rank: every compute op of that device takes factor × its cost (rounded as
  // rp::ScaleDuration) — a straggler. Empty = 1 everywhere; else world-size entries, each >= 1.
  std::vector<double> compute_factor;
  // Per compute op, replacing compute_factor when set: the factor of the i-th compute op (F, B,
  // Bi, W or the optimizer, counted from 0 in the rank's program order) of global rank `rank`, >= 1
  // and finite (seeded jitter, rp::FaultInjector::ComputeFactor).
  std::function<double(int rank, int compute_op)> compute_op_factor;
  int step = 0;               // training step (slow-link faults act from their step on)
  bool fold_replicas = true;  // see "Replica folding"
  // The step's MoE routing (sizes the EP all-to-alls; see schedule/routing.h); not owned, read
  // during Predict. Null with EP exchanges: balanced routing is assumed (Prediction says so).
  const StepRouting* routing = nullptr;
};

// Why Predict does not fold the DP replicas of a plan (kNone: it folds them), the first reason found
// in this order, so that a caller can say which setting makes it play every device.
enum class FoldBlocker {
  kNone,
  kOneReplica,      // dp = 1: there is only one replica to play
  kDisabled,        // PredictOptions::fold_replicas is false
  kPerOpFactors,    // compute_op_factor (seeded jitter) gives every op of every replica its own factor
  kLinkFaults,      // a slow link slows the messages of one replica only
  kExpertParallel,  // EP all-to-alls: one EP group of every replica, or a routing (a run's) that
                    // differs between EP groups
  kStraggler,       // compute_factor differs between replicas (a straggler)
  kLayout,          // replicas on hops of different link classes, or sharing a node's NIC
};

struct Prediction {
  Nanos step_time{0};
  Nanos single_device_time{0};  // T1
  double speedup = 0;
  double efficiency = 0;
  std::vector<DeviceMetrics> devices;          // by global rank (predicted timeline)
  // The pipeline alone (F, B, Bi, W, F&B; no all-reduce, no optimizer): makespan (the last
  // pipeline end over devices: what a user waits for before the optimizer, with the flush), the
  // largest per-rank span, and the largest bubbles of each kind (schedule/metrics.h).
  Nanos makespan{0};
  Nanos max_span{0};
  Nanos makespan_bubble{0};
  Nanos span_bubble{0};
  std::vector<uint64_t> modeled_wire_bytes;    // by global rank: bytes the fabric timed
  std::vector<int> peak_in_flight;             // by global rank (chunk activations)
  std::vector<uint64_t> peak_activation_bytes;  // by global rank (modeled)
  // Timelines (emulated fields of OpInterval), stored once per replica class.
  std::vector<int> class_of_replica;                          // by dp index
  std::vector<std::vector<std::vector<OpInterval>>> timelines;  // [class][pp·TP + tp]
  int tp = 1;
  bool folded = false;     // replicas_played < dp
  int replicas_played = 0;  // folded: the period (1, ep, or a multiple: ReplicasPlayed); else dp
  FoldBlocker fold_blocker = FoldBlocker::kNone;  // why not folded (kNone when folded)
  // EP exchanges were sized by balanced routing (no StepRouting given): an assumption, not the
  // routing of a run.
  bool balanced_routing_assumed = false;
  // The longest a message took from ready to arrival — its transfer and latency, slowed by link
  // faults, and the time it queued for busy ports — and its sender and receiver (global ranks; -1
  // without messages). On a real clock a receiver may sleep that long for a message already sent.
  Nanos longest_transit{0};
  int longest_transit_src = -1;
  int longest_transit_dst = -1;
  // A bound on any message's transit in a step whose message sizes are at most this prediction's
  // (and whose other messages are the same): a port serves its messages one at a time, FIFO, so a
  // message waits for its ports at most as long as the busiest port is busy over the whole step,
  // then takes at most the longest service (first byte to arrival) — whatever the order the
  // messages meet in, which a different routing of the EP all-to-alls changes.
  Nanos transit_bound{0};

  const std::vector<OpInterval>& Timeline(const ParallelGrid& grid, int rank) const {
    const Coord c = grid.CoordOf(rank);
    return timelines[static_cast<size_t>(class_of_replica[static_cast<size_t>(c.dp)])]
                    [static_cast<size_t>(c.pp * tp + c.tp)];
  }
};

// Whether Predict folds the DP replicas (every replica provably has the timeline of one it plays:
// same link classes around it, no NIC shared between replicas, no per-rank factors or faults, EP
// routing that repeats every EP group; see "Replica folding"). When it does not, it plays every
// device's messages.
bool ReplicasFold(const ExecutionPlan& plan, const PredictOptions& opts);
// Why not (kNone: they fold), the first reason in FoldBlocker's order.
FoldBlocker ReplicasFoldBlocker(const ExecutionPlan& plan, const PredictOptions& opts);
// Why, in a few words ("" for kNone), e.g. "a straggler slows one replica only".
const char* FoldBlockerText(FoldBlocker blocker);
// How many replicas Predict plays: 1 when they fold into one, ep when they fold into one EP group,
// a multiple of those when the layout repeats only every few replicas or EP groups (replicas
// sharing nodes), else dp.
int ReplicasPlayed(const ExecutionPlan& plan, const PredictOptions& opts);
// Both at once (each of the three reads every rank's links: a caller wanting two asks once).
struct ReplicaFoldResult {
  FoldBlocker blocker = FoldBlocker::kNone;
  int replicas_played = 0;
};
ReplicaFoldResult ReplicaFold(const ExecutionPlan& plan, const PredictOptions& opts);

[[nodiscard]] absl::StatusOr<Prediction> Predict(const ExecutionPlan& plan,
                                                 const PredictOptions& opts = {});

}  // namespace rp::schedule
