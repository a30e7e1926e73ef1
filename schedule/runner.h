// rp::schedule::DeviceRunner: plays one device's op list per training step on its rp::Device —
// one function per op kind — with every byte through the fabric (schedule/executor.h describes
// the whole run; this file the device's part).
//
// Modeled time of a device (its cursor) moves only by its own ops and the messages it receives:
//   compute op   start = max(cursor, inputs' readiness); its duration (the plan's cost × fault
//                factor) is cut into the pass's layer steps (schedule/plan.h StepDurations); the
//                real kernel runs, and at each of its TP all-reduce points the runner moves the
//                cursor over the layers before it and runs the real all-reduce on the TP group,
//                timed by its own messages; on a real clock the device waits until each step's
//                modeled end before going on, so wall time follows modeled time.
//   buckets      when the chunk's last backward passes a layer that completes a bucket, the
//                bucket is handed to the comm stream ready at that moment; the comm stream runs
//                the buckets in order, each a DP ring all-reduce of the real gradients starting
//                at max(ready, previous bucket's end), and signals its gate. On a real clock the
//                comm stream is the device's comm thread (rp::Fabric::AddWork, Device::PostComm);
//                on a virtual clock it is event-driven (comm::EventCommStream): the fabric runs
//                each bucket's ring as its messages commit, with no thread.
//   EP exchanges a MoE block's dispatch and combine (ep > 1) are timed all-to-all-v's on the EP
//                group at their kEpAllToAll steps, between the block's layer steps (runner_ep.cc).
//   send/recv    a send posts the real buffer with its modeled bytes; a receive takes the next
//                message of its pipeline channel: cursor = max(cursor, arrival); the wait splits
//                into transfer and peer wait (schedule/metrics.h).
//   optimizer    awaits each bucket's gate (a wait split by the comm stream's own spans), then
//                the update (a compute op).
// Every interval is recorded twice: emulated (modeled times) and measured (wall stamps ÷ time
// scale; on a virtual clock equal to emulated).
//
// Thread safety: one runner per device; Body runs on the device's compute thread, bucket tasks on
// its comm stream — a thread, or the fabric's handler under its lock (they touch only the bucket
// records and the bucket's gradients, handed over through the fabric's lock and gates).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "comm/alltoall_event.h"
#include "comm/comm_stream.h"
#include "comm/communicator.h"
#include "runtime/clock.h"
#include "runtime/device.h"
#include "runtime/fabric.h"
#include "runtime/model/dataset.h"
#include "runtime/model/mlp.h"
#include "runtime/model/optimizer.h"
#include "runtime/model/tensor.h"
#include "runtime/real_clock.h"
#include "schedule/executor.h"
#include "schedule/metrics.h"
#include "schedule/plan.h"

namespace rp::schedule {

// What a device thread was doing when it failed (RunFailure's candidates).
struct ErrorRecord {
  int rank = -1, step = -1, op = -1;
  std::string op_name;
  std::vector<int> waiting;  // ranks it waited for
  absl::Status status;
  // The stall monitor saw a stream of this rank running without progress: whatever its other
  // stream waited for when the abort released it, its wait chain ends here.
  bool running = false;
};

// One device's record of one step.
struct DeviceStep {
  std::vector<OpInterval> intervals;  // relative to the step start (both timelines)
  Nanos emulated_end{0};              // absolute modeled end of its last op
  Nanos measured_end{0};              // wall ÷ scale of its last op's end, relative to the start
};

// Counts its holder in an atomic (RunContext::host_work) while active: host work of ours that ends
// by itself, which the stall monitor takes for progress. Pause() around waits on peers, so a wait
// for a stalled device is never counted. Not thread-safe: one holder thread.
class HostWork {
 public:
  explicit HostWork(std::atomic<int>* count) : count_(count) { Resume(); }
  ~HostWork() { Pause(); }
  HostWork(const HostWork&) = delete;
  HostWork& operator=(const HostWork&) = delete;
  void Pause() {
    if (!active_) return;
    count_->fetch_sub(1, std::memory_order_relaxed);
    active_ = false;
  }
  void Resume() {
    if (active_) return;
    count_->fetch_add(1, std::memory_order_relaxed);
    active_ = true;
  }

 private:
  std::atomic<int>* count_;
  bool active_ = false;
};

// Shared by every runner of a run: the plan, the fabric, the communicators, the clock.
struct RunContext {
  const ExecutorOptions* options = nullptr;
  const ExecutionPlan* plan = nullptr;
  const Dataset* data = nullptr;
  BatchLayout layout;
  Fabric* fabric = nullptr;
  Clock* clock = nullptr;
  RealClock* real_clock = nullptr;  // null on a virtual clock
  const FaultInjector* injector = nullptr;
  // Pipelines, per (dp, tp) (index dp·TP + tp): activations and gradients on communicators of
  // their own, so each (sender, receiver, kind) is one FIFO channel (program.h).
  std::vector<std::unique_ptr<comm::Communicator>> pipes_act, pipes_grad;
  std::vector<std::unique_ptr<comm::Communicator>> tps;    // per (dp, pp): index dp·PP + pp
  // Gradient groups (ExecutionPlan::BucketGroupId): the DP groups, or with two directions the
  // mirror + DP groups of each model stage; then the expert-data-parallel groups (ep > 1).
  std::vector<std::unique_ptr<comm::Communicator>> grads;
  // Per device, on a virtual clock: the comm stream as an event-driven LP of the fabric (no comm
  // thread; see comm/comm_stream.h). Empty: each device's comm stream is a thread.
  std::vector<std::unique_ptr<comm::EventCommStream>> comm_streams;
  // With comm_streams: the worker that runs their gradient all-reduces' data plane off the
  // fabric's lock (comm/data_lane.h). The optimizer waits for it before reading the gradients.
  std::unique_ptr<comm::DataLane> lane;
  // Per device, on a virtual clock with TP > 1: the TP ring all-reduces of its compute stream as
  // state machines fed by the fabric while the compute thread awaits their end on a gate.
  std::vector<std::unique_ptr<comm::EventCommStream>> tp_streams;
  // EP groups (ExecutionPlan::EpGroupId; ep > 1 with MoE layers): compute streams.
  std::vector<std::unique_ptr<comm::Communicator>> eps;
  // Per device, on a virtual clock with EP groups: its EP all-to-alls as handlers fed by the
  // fabric while the compute thread awaits their end on a gate (comm/alltoall_event.h). Empty:
  // the compute thread awaits each message (AllToAllV::Run).
  std::vector<std::unique_ptr<comm::EventAllToAll>> ep_streams;
  RendezvousId barrier = -1;
  // Per device: bytes of heap its thread makes resident in bulk before the first step and frees
  // at once, for that step's first touches to reuse (runtime/heap.h). Empty: none.
  std::vector<size_t> warm_heap_bytes;
  std::atomic<int64_t> ops_done{0};  // progress for the stall monitor
  // Device threads whose body has returned: once all have, nothing is left to stall (the monitor
  // stops counting while the cluster tears down).
  std::atomic<int> devices_done{0};
  std::atomic<int> clock_sleepers{0};  // device threads waiting on a real clock right now
  // Host work of ours that runs right now and ends by itself: a step boundary's bookkeeping and
  // held-out evaluation (every device waits at the rendezvous for it) and the devices' compute
  // kernels (between their exchanges). No stall while it runs, however long the host takes.
  std::atomic<int> host_work{0};
  std::atomic<int64_t> fault_fired_ns{-1};  // steady_clock ns of the first injected OpFault
  Mutex errors_mu;
  std::vector<ErrorRecord> errors ABSL_GUARDED_BY(errors_mu);
  void NoteError(ErrorRecord e);
  comm::Communicator& Pipe(const Coord& c, bool grad) const;
  comm::Communicator& Tp(const Coord& c) const;
  comm::Communicator& Grad(int group) const { return *grads[static_cast<size_t>(group)]; }
  comm::Communicator& Ep(int rank) const {
    return *eps[static_cast<size_t>(plan->EpGroupId(rank))];
  }
};

class DeviceRunner {
 public:
  // Builds the device's model shards (one per chunk) and optimizers. Reads `ctx` only, so runners
  // of different ranks may be created concurrently; then AddGates, one runner at a time.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<DeviceRunner>> Create(RunContext* ctx,
                                                                             int rank);
  // Registers the device's gates (a DP bucket's, the TP all-reduce's) with the fabric. Gate ids
  // follow the order of the calls: call it for ranks in order, from one thread.
  void AddGates();
  ~DeviceRunner();

  // The device thread's whole run: every step, each preceded by the step rendezvous
  // (`on_step_boundary` runs on its last arriver; see Fabric::Arrive).
  [[nodiscard]] absl::Status Body(Device& dev,
                                  absl::FunctionRef<absl::StatusOr<Nanos>(Nanos)> on_step_boundary);

  int rank() const { return rank_; }
  const Coord& coord() const { return coord_; }
  // The step the device ran last. Read after the compute thread stopped or at the step boundary
  // (by its last arriver): the next step reuses its storage, unless TakeIntervals took it.
  const DeviceStep& last_step() const { return step_; }
  // Moves the last step's intervals out, for a record kept past the step (at the step boundary,
  // by its last arriver, after their metrics): the next step records into fresh storage, which
  // this device reserves and touches itself rather than the boundary copying every device's.
  std::vector<OpInterval> TakeIntervals() {
    reserve_intervals_ = step_.intervals.size();
    return std::exchange(step_.intervals, {});
  }
  std::vector<std::unique_ptr<MlpStage>>& stages() { return stages_; }
  const std::vector<std::unique_ptr<MlpStage>>& stages() const { return stages_; }
  std::vector<std::unique_ptr<Optimizer>>& optimizers() { return optimizers_; }
  // Loss and correct predictions of each micro-batch of the last step (last model stage only).
  const std::vector<double>& loss_sum() const { return loss_sum_; }
  const std::vector<int64_t>& correct() const { return correct_; }
  // Where the compute thread is: step, op index (-1 between ops), whom it waits for.
  int cur_step() const { return cur_step_; }
  int cur_op() const { return cur_op_; }
  const std::vector<int>& waiting() const { return waiting_; }
  // The same step and op, readable from any thread while the run goes on (the stall monitor names
  // the op a device runs without progress): a relaxed snapshot, for words only.
  struct Position {
    int step = -1;
    int op = -1;  // -1: between ops (the step barrier, the step's start)
  };
  Position position() const;
  // The kernel id of the thread running Body (0 before it starts), for the stall monitor's look at
  // what the host does with it (runtime/thread_probe.h). Any thread.
  int host_thread_id() const { return host_tid_.load(std::memory_order_relaxed); }
  // Commit protocol: the state before this device's last optimizer update and its step.
  int backup_step() const { return backup_step_; }
  // Bytes of its first-step block the kernel made resident (RunContext::warm_heap_bytes).
  uint64_t populated_bytes() const { return populated_bytes_; }
  void Rollback();

 private:
  DeviceRunner(RunContext* ctx, int rank);
  struct Pending {
    Tensor value;
    Nanos ready{0};
  };
  struct BucketRecord {
    Nanos ready{0}, start{0}, end{0};
    Nanos transfer{0}, reduce{0};
    std::vector<WaitSpan> spans;
    Nanos wall_start_m{0}, wall_end_m{0};  // measured, relative to the step start
    uint64_t modeled_bytes = 0;
    int64_t trace_wall_start = 0, trace_wall_end = 0;  // event-driven: hand-over .. end (tracer ns)
    uint64_t lane_seq = 0;  // the data lane's items to wait for (DataLane::WaitFor)
  };

  absl::Status RunStep(int step);
  absl::Status RunOp(int step, int op_index);
  absl::Status Compute(int step, int op_index, const Op& op);
  absl::Status Send(int step, int op_index, const Op& op);
  absl::Status Recv(int step, int op_index, const Op& op);
  absl::Status OptimizerStep(int step, int op_index, const Op& op);
  // The optimizer's wait for its gradient buckets (those not launched inside the backward start
  // here); returns the modeled time their all-reduces ended.
  absl::StatusOr<Nanos> AwaitGradientBuckets(int step, int op_index);
  // The update under the commit protocol: the state before it kept until the step commits.
  absl::Status UpdateWithBackup(int step, int op_index, const Op& op);
  absl::Status LaneDataError(int step, int bucket, const absl::Status& s);
  absl::Status InjectedFault(int step, int op_index, const Op& op, const OpFault& fault);
  // Before a compute op that starts when its inputs are `ready`: raises the compute LP's bound to
  // the op's start if a DeviceStop fault stops the device there.
  void BeforeComputeOp(Nanos ready);
  // One pass of a compute op (an F&B has two): the chunk whose plan steps it follows, its
  // fault-free cost, and the real kernel, which receives the TP, layer and EP callbacks.
  using Kernel = std::function<absl::Status(const TpAllReduceFn&, const LayerGradsDoneFn&,
                                            const EpExchangeFn&)>;
  struct Part {
    int pass = 0;
    int chunk = 0;
    Nanos base{0};
    int32_t detail = -1;  // recorded on its compute intervals (1: an F&B's backward part)
    Kernel kernel;
  };
  // Runs a compute op's parts back to back as ONE compute op (one fault draw): the real kernels
  // with the runner stepping modeled time through each part's plan steps (TP all-reduces, bucket
  // launches), one PassRun a part (runner_ops.cc).
  class PassRun;
  absl::Status RunParts(int step, int op_index, const Op& op, Nanos ready,
                        absl::InlinedVector<Part, 2> parts);
  // The stage input of F(mb) of model stage k (data, a received or a local activation), and the
  // output gradient of B(mb) of stage k; kernels for them.
  absl::StatusOr<Pending> TakeInput(int step, const Op& op, int k, int mb);
  absl::StatusOr<Pending> TakeOutputGrad(int step, const Op& op, int k, int mb);
  Part ForwardPart(int step, int op_index, const Op& op, int chunk, int mb, Pending* in, Tensor* out);
  // The last model stage's loss on micro-batch `mb`'s logits `out` (runner.cc): its gradient kept
  // for the backward, its sums for the step's record, the logits back to the stage's pool.
  absl::Status Loss(int step, int mb, MlpStage* stage, Tensor* out);
  Part BackwardPart(int step, int op_index, const Op& op, OpKind kind, int chunk, int mb,
                    Pending* dy, Tensor* dx);
  // The EP all-to-all of exchange `x` starting at modeled `start` (wall0: its measured start):
  // records it and returns its end (runner_ep.cc).
  absl::StatusOr<Nanos> EpAllToAll(int step, int op_index, const Op& op, EpExchange& x,
                                   Nanos start, Nanos wall0);
  // A bucket's gradients are final at `ready`: it starts (StartBucket) once every bucket before it
  // in the rank's bucket order has, and so do the final ones after it (runner_buckets.cc).
  absl::Status LaunchBucket(int step, int chunk, int bucket, Nanos ready);
  absl::Status StartBucket(int step, int order, Nanos ready);
  // One TP all-reduce of `buffer` from modeled `start` (on the TP group's ring; event-driven on a
  // virtual clock).
  absl::StatusOr<comm::CollectiveResult> TpAllReduce(int step, std::span<float> buffer,
                                                     const comm::CollectiveOptions& co, Nanos start);
  absl::Status RunBucket(int step, int order, int chunk, int bucket, Nanos ready);
  // The same bucket handed to the device's event-driven comm stream.
  void EnqueueBucket(int step, int order, int chunk, int bucket, Nanos ready);
  comm::CollectiveOptions BucketOptions(int step, int order, const BucketPlan& b) const;
  // Measured time (modeled units) relative to the current step's start.
  Nanos WallNow() const;
  Nanos WallOf(Nanos modeled) const;  // a modeled instant on the measured axis of the step
  absl::Status Sleep(Nanos until, const WaitSite& site);
  // Sleep at the end of a compute op or segment whose real work just returned: also returns the
  // host's lateness in waking it (measured axis), the wall time past both `until` and the sleep's
  // start (a kernel that overran was working, not late); 0 on the virtual clock.
  absl::StatusOr<Nanos> SleepAfterWork(Nanos until, const WaitSite& site);
  void Record(OpInterval iv);
  void AccountActivations();

  RunContext* const ctx_;
  const int rank_;
  const Coord coord_;
  Device* dev_ = nullptr;
  std::vector<std::unique_ptr<MlpStage>> stages_;
  std::vector<std::unique_ptr<Optimizer>> optimizers_;
  // Hash maps: a few entries each, inserted and erased every op (a tree allocated a node each).
  absl::flat_hash_map<std::pair<int, int>, Pending> acts_;   // (mb, model stage) → stage input
  absl::flat_hash_map<std::pair<int, int>, Pending> grads_;  // (mb, model stage) → output gradient
  absl::flat_hash_map<int, Tensor> dlogits_;
  std::vector<double> loss_sum_;
  std::vector<int64_t> correct_;
  int64_t act_accounted_ = 0;
  // The current step.
  Nanos step_start_{0};
  int64_t step_wall_origin_ns_ = 0;  // steady_clock ns of the step's modeled start
  DeviceStep step_;
  std::vector<Nanos> durations_;  // RunParts' scratch: the running part's plan-step durations
  size_t reserve_intervals_ = 0;  // the count TakeIntervals took: the next step's likely count
  uint64_t populated_bytes_ = 0;
  int tp_calls_ = 0;  // TP all-reduces so far in the current op
  // What a pass's modeled-only TP all-reduce reduces (ChunkPlan::modeled_tp_tail): one zero per TP
  // rank, so no rank's chunk of the ring is empty.
  std::vector<float> tp_tail_;
  // Event-driven TP all-reduces: the gate the compute thread awaits, the result handed over.
  GateId tp_gate_ = -1;
  GateId abort_gate_ = -1;  // never signalled: a wait on it ends with the run's abort
  absl::StatusOr<comm::CollectiveResult> tp_result_;
  comm::Codec tp_codec_ = comm::Codec::kFp32;  // the running TP all-reduce's (its handler's)
  int ep_calls_ = 0;  // EP all-to-alls so far in the current op
  // Buckets: per launch order, a gate and the comm stream's record.
  std::vector<GateId> gates_;
  std::vector<BucketRecord> buckets_;  // written by the comm stream before its gate's Signal
  std::vector<bool> final_, launched_;  // per bucket order: gradients final, all-reduce started
  size_t next_launch_ = 0;               // the first bucket of the order not started
  Nanos comm_prev_end_{0};             // comm stream only
  std::vector<int> comm_waiting_;      // comm stream only: whom its current bucket waits for
  // Failure bookkeeping.
  int cur_step_ = -1, cur_op_ = -1;
  // (cur_step_ + 1) << 32 | (cur_op_ + 1), stored relaxed by the compute thread (SetPosition).
  std::atomic<uint64_t> position_{0};
  std::atomic<int> host_tid_{0};
  void SetPosition(int step, int op);
  std::vector<int> waiting_;
  int backup_step_ = -1;
  std::vector<std::vector<float>> backup_params_;
  std::vector<std::unique_ptr<Optimizer>> backup_opt_;
};

}  // namespace rp::schedule
