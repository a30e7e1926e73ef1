// rp::FaultPlan and rp::FaultInjector: seeded, deterministic what-if faults.
//
// A FaultPlan names faults; a FaultInjector answers, for one op, what they do. Nothing random is
// drawn from shared state: jitter for (rank, op index) is a pure hash of (seed, rank, op index),
// so a run's faults do not depend on thread interleaving and repeat exactly with the same seed.
//   * Straggler{rank, factor}: every compute op of `rank` takes factor × its modeled duration.
//   * Jitter{seed, max_fraction}: every compute op takes (1 + u) × its duration, u uniform in
//     [0, max_fraction) from the hash above. 0 disables.
//   * DegradedLink{src, dst, factor}: the directed link src→dst takes factor × its time (a
//     rp::LinkFault of the fabric, runtime/fabric_model.h).
//   * DeviceStop{rank, op_index}: `rank` stops (hangs, as a dead GPU) when it reaches its
//     op_index-th compute op (0-based); its peers' waits then hit the watchdog.
//   * OpFault{kind, rank, step, op, ...}: a fault at a seeded point of a training run, addressed
//     the way an executor walks its program (step, index of the op in the rank's op list). The
//     injector only answers where; the executor (schedule/executor.h) acts:
//       kThrow     the op throws (a kernel that raises an exception inside the device thread);
//                  the run must turn it into a Status naming rank, step and op — never a crash.
//       kStall     the device stops making progress at that op (a hung GPU); peers' waits expire.
//       kSlowLink  from that step on, the directed link rank → dst takes factor × its time
//                  (its bandwidth and latency drop to 1/factor); `op` is ignored.
// rp::Device applies the compute faults and records each in the trace (OpKind::kFault instants,
// and the `detail` of each affected op); Describe() lists them for the report.
//
// Thread safety: immutable after Create; every method is const and may be called concurrently.
//
// Example:
//   rp::FaultPlan plan;
//   plan.stragglers.push_back({.rank = 2, .factor = 1.5});
//   RP_ASSIGN_OR_RETURN(rp::FaultInjector faults, rp::FaultInjector::Create(plan, 8));
//   faults.ComputeDuration(2, 0, rp::FromMillis(10));  // 15 ms
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/link_models.h"
#include "runtime/time.h"

namespace rp {

struct Straggler {
  int rank = 0;
  double factor = 1.0;  // >= 1
};
struct Jitter {
  uint64_t seed = 0;
  double max_fraction = 0.0;  // in [0, 10]
};
struct DeviceStop {
  int rank = 0;
  int64_t op_index = 0;  // >= 0: the compute op (0-based, per device) at which the device stops
};

enum class OpFaultKind { kThrow, kStall, kSlowLink };
// "throw", "stall", "slow_link".
const char* OpFaultKindName(OpFaultKind kind);

struct OpFault {
  OpFaultKind kind = OpFaultKind::kThrow;
  int rank = 0;         // global rank (kSlowLink: the link's source)
  int step = 0;         // >= 0: the training step
  int op = 0;           // >= 0: index in the rank's op list of that step (ignored by kSlowLink)
  int dst = -1;         // kSlowLink only: the link's destination rank (!= rank)
  double factor = 1.0;  // kSlowLink only: >= 1, finite
};

struct FaultPlan {
  std::vector<Straggler> stragglers;
  Jitter jitter;
  std::vector<DegradedLink> degraded_links;
  std::vector<DeviceStop> stops;
  std::vector<OpFault> op_faults;
  bool empty() const {
    return stragglers.empty() && jitter.max_fraction == 0 && degraded_links.empty() &&
           stops.empty() && op_faults.empty();
  }
};

class FaultInjector {
 public:
  FaultInjector() = default;  // no faults
  // Validates ranks (in [0, num_devices)), factors (>= 1, finite), jitter fraction ([0, 10]),
  // op indices (>= 0) and that no rank is named twice in one list; op faults: step, op >= 0,
  // kSlowLink dst in range and != rank, factor >= 1 and finite. (Whether `op` exists in the
  // program is the executor's check.)
  [[nodiscard]] static absl::StatusOr<FaultInjector> Create(const FaultPlan& plan, int num_devices);

  // The modeled duration of compute op `op_index` of `rank` whose fault-free duration is `base`.
  Nanos ComputeDuration(int rank, int64_t op_index, Nanos base) const;
  // The factor ComputeDuration applies (straggler × jitter).
  double ComputeFactor(int rank, int64_t op_index) const;
  double StragglerFactor(int rank) const;
  // True if `rank` stops at compute op `op_index`.
  bool StopsAt(int rank, int64_t op_index) const;
  // The kThrow / kStall fault at op `op` of `step` on `rank`, or nullptr (the first listed wins).
  const OpFault* OpFaultAt(int rank, int step, int op) const;
  // The time factor of the directed link src → dst (global ranks) during `step`: the product of
  // the kSlowLink faults on it whose step <= `step` (1 when healthy).
  double SlowLinkFactor(int src, int dst, int step) const;
  // The faults that concern `rank` in words ("straggler x1.5", "stops at op 7", ...), and all.
  std::vector<std::string> DescribeRank(int rank) const;
  std::vector<std::string> Describe() const;
  const FaultPlan& plan() const { return plan_; }

 private:
  FaultPlan plan_;
  std::vector<double> straggler_;  // per rank, 1 when healthy
  std::vector<int64_t> stop_at_;   // per rank, -1 when it never stops
};

}  // namespace rp
