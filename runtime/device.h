// rp::Device and rp::Cluster: the emulated GPUs.
//
// A Device is one emulated GPU: its compute stream is a std::thread that runs the user's body
// (rp::Cluster::Run), and its comm stream is a Boost.Asio io_context served by a second thread, so
// a collective posted with PostComm() runs while the compute stream computes, as on a GPU's
// separate stream. A Cluster owns N devices, starts both threads of every device in Run(), and
// joins them all before Run() returns — after success and after failure. No detached threads.
//
// Time discipline (DESIGN.md): the device keeps a modeled cursor, the modeled end of its last
// compute op. Compute(op, duration, ready_at, kernel):
//     start = max(cursor, ready_at)           (ready_at: the inputs' modeled arrival)
//     end   = start + duration × faults        (straggler factor, seeded jitter)
//     runs kernel() for real, then waits on the clock until `end`;
//     if the real work itself took longer than `duration` (measured on the clock), it overran:
//     counted (overruns, overrun_time); the op still ends at `end` in modeled time and the next
//     wait absorbs the delay — never hidden. Starting late (an earlier wait woke late) is wait
//     lateness, reported apart, not an overrun.
// Wait lateness (clock WaitUntil's return) is recorded per device and stream (stats()).
// On an rp::VirtualClock the Cluster does not register device threads as participants, so every
// wait returns at once (as-fast-as-possible mode) while modeled timestamps stay exact and
// deterministic; overruns are not counted there (real work takes no virtual time).
//
// Failure and cancellation: a body that returns an error fails the run (the Cluster's watchdog);
// the clock is shut down (sleepers return), waiters in Watchdog::Wait return Cancelled within
// Watchdog::kPollInterval, queued comm tasks are skipped, and Run returns the first failure.
//
// Thread safety: a Device's compute-stream methods (Compute, WaitUntil, cursor) are called from its
// compute thread; PostComm from any thread; Trace/WaitUntil from either of the device's own
// threads (they find the stream from a thread-local set by the Cluster). stats() and memory
// peaks are read after Run() returns.
//
// Example:
//   rp::VirtualClock clock;
//   RP_ASSIGN_OR_RETURN(auto cluster, rp::Cluster::Create({.num_devices = 4, .clock = &clock}));
//   RP_RETURN_IF_ERROR(cluster->Run([&](rp::Device& dev) -> absl::Status {
//     RP_ASSIGN_OR_RETURN(rp::Nanos end,
//         dev.Compute({.name = "F", .micro_batch = 0}, rp::FromMillis(50), rp::kZeroTime,
//                     [&] { return RunForward(dev.rank()); }));
//     rp::CommTicket t = dev.PostComm([&] { return AllReduce(dev.rank()); });
//     return dev.AwaitComm(t, {.rank = dev.rank(), .op = "allreduce"});
//   }));
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/clock.h"
#include "runtime/faults.h"
#include "runtime/lateness.h"
#include "runtime/memory.h"
#include "runtime/mutex.h"
#include "runtime/thread.h"
#include "runtime/time.h"
#include "runtime/tracer.h"
#include "runtime/watchdog.h"

namespace boost::asio {
class io_context;
}

namespace rp {

// What an op is, for the trace and for error messages. Strings have static storage (literals).
struct OpInfo {
  const char* name = "op";
  OpKind kind = OpKind::kCompute;
  int micro_batch = -1;
  int step = -1;
  int peer = -1;
  uint64_t bytes = 0;
};

// Per-device statistics for the report. Read after Cluster::Run returned.
struct DeviceStats {
  LatenessStats lateness[Tracer::kStreams];  // modeled lateness of clock waits, per stream
  uint64_t compute_ops = 0;
  uint64_t overruns = 0;     // compute ops whose real work outlasted their modeled duration
  Nanos overrun_time{0};     // sum of (real work's time − modeled duration) over overruns
  // Compute ops whose modeled end had already passed when their real work finished (an overrun,
  // or a start delayed by an earlier late wake-up): they record no wait. Every compute op on a
  // real clock either waits (lateness recorded) or is counted here.
  uint64_t late_ends = 0;
  Nanos compute_time{0};     // sum of modeled compute durations (faults included)
};

// Completion of a task posted to a comm stream. Copyable handle; the state is shared.
class CommTicket {
 public:
  CommTicket() = default;
  bool valid() const { return state_ != nullptr; }

 private:
  friend class Device;
  struct State {
    Mutex mu;
    CondVar cv;
    bool done ABSL_GUARDED_BY(mu) = false;
    absl::Status status ABSL_GUARDED_BY(mu);
  };
  std::shared_ptr<State> state_;
};

class Cluster;

class Device {
 public:
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  ~Device();

  int rank() const { return rank_; }
  int node() const { return node_; }
  Clock& clock() const { return *clock_; }
  Watchdog& watchdog() const { return *watchdog_; }
  const FaultInjector& faults() const { return *faults_; }
  Tracer* tracer() const { return tracer_; }  // may be null (tracing off)
  MemoryTracker& memory() { return memory_; }
  const MemoryTracker& memory() const { return memory_; }
  const DeviceStats& stats() const { return stats_; }

  // The running index the next compute op gets (ComputeOp::index; FaultInjector::StopsAt).
  int64_t next_compute_index() const { return compute_index_; }

  // Modeled end of the last compute op (compute thread only). AdvanceCursor moves it forward.
  Nanos cursor() const { return cursor_; }
  void AdvanceCursor(Nanos t) { cursor_ = std::max(cursor_, t); }

  // Runs a compute op (compute thread only); see the header comment. Returns its modeled end.
  // Errors: the kernel's status; Cancelled if the run failed meanwhile; Aborted if a DeviceStop
  // fault stops this device here (after the run fails or 2 × watchdog timeout, whichever first).
  // Equivalent to BeginCompute, kernel(), EndCompute at start + duration.
  [[nodiscard]] absl::StatusOr<Nanos> Compute(const OpInfo& op, Nanos duration, Nanos ready_at,
                                              absl::FunctionRef<absl::Status()> kernel);

  // A compute op whose modeled time the caller advances piece by piece (e.g. layer by layer with
  // collectives in between).
  struct ComputeOp {
    Nanos start{0};     // max(cursor, ready_at)
    Nanos duration{0};  // the modeled duration with this device's fault factor applied
    int64_t index = 0;  // the device's running compute-op index (fault injection)
    double factor = 1.0;
    int64_t wall_start = 0;      // Tracer::WallNow at the start
    Nanos clock_start{0};        // clock Now() at the start (overrun accounting)
  };
  // Begins a compute op (compute thread only): its start, its faulted duration; a DeviceStop
  // fault stops the device here (as Compute).
  [[nodiscard]] absl::StatusOr<ComputeOp> BeginCompute(const OpInfo& op, Nanos duration,
                                                       Nanos ready_at);
  // Ends `c` at modeled `end` (>= c.start + c.duration): counts an overrun if its real work
  // (`kernel_time`, in modeled units; pass the clock time the kernel ran, excluding waits) took
  // longer than c.duration, waits on the clock until `end`, traces it, moves the cursor to `end`.
  [[nodiscard]] absl::Status EndCompute(const OpInfo& op, const ComputeOp& c, Nanos end,
                                        Nanos kernel_time);

  // Waits on the clock until modeled `deadline` (either of this device's threads). Records the
  // lateness. DeadlineExceeded (failing the run, message naming `site`) when the deadline lies
  // more than the watchdog timeout of wall time ahead on a real clock; Cancelled if the run failed.
  [[nodiscard]] absl::Status WaitUntil(Nanos deadline, const WaitSite& site);

  // Records one op on the calling thread's stream of this device (either of its threads; a call
  // from another thread is dropped). No-op without a tracer.
  void Trace(const OpInfo& op, int64_t wall_start_ns, int64_t wall_end_ns, Nanos model_start,
             Nanos model_end, uint64_t flow_id = 0, const char* detail = "") const;
  // Records one op on this device's comm-stream track from its compute thread — for a device
  // whose comm stream is event-driven (no comm thread writes that track). No-op without a tracer.
  void TraceComm(const OpInfo& op, int64_t wall_start_ns, int64_t wall_end_ns, Nanos model_start,
                 Nanos model_end) const;
  // Tracer::WallNow(), or 0 without a tracer.
  int64_t WallNow() const { return tracer_ ? tracer_->WallNow() : 0; }

  // Queues `task` on the comm stream (FIFO, one at a time, concurrent with compute). Any thread,
  // while Run() is active. If the run has failed when the task's turn comes, it is skipped and
  // the ticket completes with Cancelled. A task must bound its own waits (rp::Watchdog).
  CommTicket PostComm(std::function<absl::Status()> task);
  // Waits for the ticket's task (watchdog-bounded, naming `site`); returns the task's status.
  [[nodiscard]] absl::Status AwaitComm(const CommTicket& ticket, const WaitSite& site);

  // The stream the calling thread runs for this device, or -1 if it is not one of its threads.
  int CurrentStream() const;

 private:
  friend class Cluster;
  Device(int rank, int node, Clock* clock, Tracer* tracer, Watchdog* watchdog,
         const FaultInjector* faults);
  [[nodiscard]] absl::Status StartCommStream(SchedPolicy policy = SchedPolicy::kInherit);
  void StopCommStream();
  void RecordFaultsAtStart();
  // Records `op` on `stream`'s track (the tracer is set).
  void RecordOn(Stream stream, const OpInfo& op, int64_t wall_start_ns, int64_t wall_end_ns,
                Nanos model_start, Nanos model_end, uint64_t flow_id, const char* detail) const;

  const int rank_;
  const int node_;
  Clock* const clock_;               // owned by the caller of Cluster::Create; outlives the cluster
  Tracer* const tracer_;             // same (nullable)
  Watchdog* const watchdog_;         // owned by the Cluster
  const FaultInjector* const faults_;  // owned by the Cluster
  MemoryTracker memory_;
  DeviceStats stats_;  // lateness[s] written only by stream s's thread; the rest by compute
  Nanos cursor_{0};
  int64_t compute_index_ = 0;
  bool faults_recorded_ = false;
  std::unique_ptr<boost::asio::io_context> io_;
  Thread comm_thread_;
};

struct ClusterOptions {
  int num_devices = 1;
  int devices_per_node = 8;
  // Required. Not owned: must outlive the Cluster (shared by every device).
  Clock* clock = nullptr;
  // Optional. Not owned: must outlive the Cluster. Its num_devices must be >= num_devices.
  Tracer* tracer = nullptr;
  FaultPlan faults = {};
  std::chrono::nanoseconds watchdog_timeout = std::chrono::seconds(30);
  // Start a comm-stream thread per device (PostComm needs it).
  bool comm_streams = true;
  // The device threads' scheduling policy (rp::SchedPolicy): kBatch for virtual-clock runs, where
  // a thread that wakes another should run on until it blocks (see runtime/thread.h).
  SchedPolicy thread_policy = SchedPolicy::kInherit;
};

class Cluster {
 public:
  // Validates options (num_devices >= 1, devices_per_node >= 1, clock set, tracer large enough,
  // faults valid for num_devices, timeout > 0).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Cluster>> Create(
      const ClusterOptions& options);
  ~Cluster();

  // Starts every device (compute thread running body(device), plus its comm stream), joins all,
  // and returns OK or the run's first failure. May be called again after a successful run (device
  // cursors, stats and memory carry over); after a failed run returns FailedPrecondition.
  [[nodiscard]] absl::Status Run(absl::FunctionRef<absl::Status(Device&)> body);

  int size() const { return static_cast<int>(devices_.size()); }
  Device& device(int rank) { return *devices_[static_cast<size_t>(rank)]; }
  const Device& device(int rank) const { return *devices_[static_cast<size_t>(rank)]; }
  Watchdog& watchdog() { return *watchdog_; }
  const FaultInjector& faults() const { return faults_; }
  // Lateness merged over devices (both streams).
  LatenessStats MergedLateness() const;
  // The scheduling policy the device threads of the last Run had (CurrentSchedPolicyName();
  // empty before a Run). Only after Run returned.
  const std::string& thread_policy_name() const { return thread_policy_name_; }

 private:
  Cluster(const ClusterOptions& options, FaultInjector faults);
  ClusterOptions options_;
  FaultInjector faults_;
  std::unique_ptr<Watchdog> watchdog_;
  std::vector<std::unique_ptr<Device>> devices_;
  std::string thread_policy_name_;  // written by rank 0's compute thread, read after the joins
};

}  // namespace rp
