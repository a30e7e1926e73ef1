// rp::schedule::Executor: plays a schedule Program on emulated devices, training a real MLP with
// DP × PP × TP on real buffers, and reports measured figures next to the predictor's.
//
// One Run() trains `steps` steps. It starts one rp::Device per global rank of the grid
// (rp::Cluster); every device thread walks its pipeline rank's op list (Program::ranks[pp]) once
// per step:
//   F / B / Bi / W   the REAL kernel of the device's MLP stage shard (rp::MlpStage; one stage
//                    object per chunk with interleaved schedules) on real tensors, inside
//                    Device::Compute: it then waits until the modeled end
//                    max(previous modeled end, inputs' modeled arrival) + duration, mapped to
//                    wall time by the time scale. Durations come from `cost` (per pipeline rank,
//                    1/v per chunk op, Bi = B − W, as schedule::Predict uses them).
//                    The last model stage computes softmax cross-entropy (loss, grad scale
//                    1/global batch) inside its F.
//   SendAct/SendGrad the real output buffer goes over a comm::Communicator p2p channel of the
//                    (dp, tp) pipeline (one communicator for activations, one for gradients), its
//                    arrival stamped by the link model from the op's modeled `bytes`; wire bytes
//                    counted by comm are the real bytes.
//   RecvAct/RecvGrad waits for the data (dependencies are enforced by the data), then on the clock
//                    until its modeled arrival.
//   TpAllReduce      the Megatron all-reduces really run inside F/B (MlpStage's TP callback →
//                    comm AllReduce FP32 over the TP communicator); this op is their modeled time:
//                    a rendezvous of the TP group in modeled time plus the ring cost of `bytes`.
//   AllReduce        gradient bucket b (a contiguous slice of its chunk's real gradients) is posted
//                    to the device's comm stream (Device::PostComm): comm ring AllReduce (sum) over
//                    the DP group with `codec` / `segment_bytes`, overlapping the backward for
//                    real. Modeled: starts when the whole DP group enqueued it and bucket b−1 is
//                    done, lasts RingAllReduceCost of the op's `bytes` (exactly the predictor's
//                    rule); the comm stream waits on the clock until that end.
//   OptimizerStep    awaits every bucket, then runs rp::Optimizer::Step on each shard (a compute
//                    op of cost.optimizer).
// Between steps a barrier of all devices records the step (loss summed in (replica, micro-batch)
// order in double, replica divergence, held-out accuracy of replica 0's model) and starts the
// next step at a common modeled time, so every step is timed like the predictor's (from 0).
//
// Timing model agreement: the executor builds the predictor's PredictOptions from the same fields
// (links, dp ring: codec + segment bytes; tp ring: fp32 + segment bytes) and calls
// schedule::Predict on the same program and cost model; in both, a directed p2p link carries one
// message at a time (a message waits for the previous one on its link).
//
// Correctness (tests/schedule/executor_test.cc): with FP32 communication the loss curve follows
// rp::ReferenceTrainer (bit-identical to the partitioned serial emulation when dp <= 2 and
// tp <= 2); replicas are bit-identical after every step with every codec.
//
// Failure: any error (bad kernel shapes, codec overflow, a missing peer, a DeviceStop fault, an
// injected OpFault, an exception thrown inside a device thread) ends the run within
// watchdog_timeout + 1 s with a Status naming rank, op, peer, step; every thread is joined.
// Exceptions never escape a device thread: they become Internal errors naming the op.
// No partial step is committed: a step counts once every device passed the barrier that follows
// it (Executor::committed_steps()); after a failure, every device that applied its optimizer
// update for an uncommitted step is rolled back (parameters and optimizer state as before that
// step). Executor::failure() then tells which rank, step and op failed first and which peers it
// was waiting for; Executor::Parameters() reads the (committed) parameters.
//
// Thread safety: an Executor is used by one thread; Run() may be called once.
//
// Example:
//   PipelineOptions po{.num_ranks = 3, .num_micro_batches = 4};
//   RP_ASSIGN_OR_RETURN(Program prog, BuildOneFOneB(po));
//   ExecutorOptions o;
//   o.grid = {.dp = 2, .pp = 3, .tp = 2};
//   o.program = prog;
//   o.cost = CostModel::Uniform({.forward = FromMillis(50), .backward = FromMillis(80)});
//   o.virtual_time = true;   // deterministic, as fast as the host allows
//   o.steps = 20;
//   RP_ASSIGN_OR_RETURN(auto exec, Executor::Create(o));
//   RP_ASSIGN_OR_RETURN(RunResult r, exec->Run());
//   r.steps.back().loss; r.measured_step_ms; r.predicted_step_ms; r.fidelity;
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/codec.h"
#include "comm/communicator.h"
#include "runtime/model/dataset.h"
#include "runtime/faults.h"
#include "runtime/lateness.h"
#include "runtime/link.h"
#include "runtime/model/mlp.h"
#include "runtime/model/optimizer.h"
#include "runtime/tracer.h"
#include "schedule/cost_model.h"
#include "schedule/grid.h"
#include "schedule/metrics.h"
#include "schedule/predictor.h"
#include "schedule/program.h"

namespace rp::schedule {

inline constexpr std::chrono::milliseconds kDefaultWatchdogTimeout{10000};

struct ExecutorOptions {
  // --- Parallel strategy ---
  GridShape grid;        // dp, pp, tp (>= 1); pp must equal program.num_ranks
  Placement placement;   // rank → device id → node (default: TP, PP, DP innermost first)
  Program program;       // validated (schedule::Validate) by Create

  // --- Workload ---
  MlpConfig model;                    // widths; model.seed seeds the weights
  std::vector<int> layers_per_stage;  // one count per MODEL stage (pp × v); empty = balanced
  OptimizerConfig optimizer;
  DatasetConfig dataset;              // dataset.seed seeds the data; dims must match `model`
  int microbatch_size = 32;           // samples per micro-batch (>= 1)
  // Expected global batch (dp × m × microbatch_size); 0 = derive. Else must match.
  int64_t global_batch = 0;

  // --- Modeled time ---
  CostModel cost;  // F/B/W/optimizer per pipeline rank (1 or pp entries)
  LinkSpec links;  // p2p and collective links (default: ideal — α 0, infinite bandwidth)

  // --- DP gradient all-reduce (kAllReduce ops) ---
  comm::Codec codec = comm::Codec::kFp32;
  size_t segment_bytes = comm::kDefaultSegmentBytes;  // FP32 bytes per ring message, multiple of 4
  // Segment size the modeled ring cost assumes (RingModel::segment_bytes; 0 = one message per
  // chunk, as SCENARIOS.md S1's "20 ms per ring step"). Used for executor and predictor alike.
  uint64_t model_segment_bytes = 0;
  bool error_feedback = false;  // lossy codecs: carry the quantization residual (comm option)
  // Modeled segment size of the TP all-reduce ring (fp32). 0 = one message per chunk.
  uint64_t tp_model_segment_bytes = 0;

  // --- Clock ---
  // true: rp::VirtualClock, as fast as the host allows, deterministic modeled times (tests).
  // false: rp::RealClock with `time_scale` (wall = modeled × time_scale).
  bool virtual_time = false;
  double time_scale = 1.0;

  // --- Robustness and observation ---
  std::chrono::nanoseconds watchdog_timeout = kDefaultWatchdogTimeout;
  FaultPlan faults;  // optional (stragglers, jitter, degraded links, device stops)
  // Optional; not owned, must outlive Run(); num_devices() >= world size.
  Tracer* tracer = nullptr;

  // --- Run ---
  int steps = 1;  // >= 1
  // Held-out evaluation of replica 0's assembled model after every `eval_every` steps (and always
  // after the last). 0 = only after the last step.
  int eval_every = 1;
  int64_t eval_samples = 0;  // held-out samples evaluated (0 = the whole test split)
  // Also train rp::ReferenceTrainer (single device, FP32) on the same data and report its loss per
  // step and the executor's difference from it (after the cluster run; not timed).
  bool run_reference = true;
};

// One training step.
struct StepRecord {
  int step = 0;
  double loss = 0;            // mean cross-entropy over the global batch, before the update
  double train_accuracy = 0;  // fraction of the global batch classified right, before the update
  // Held-out accuracy / loss of replica 0's model after this step's update (NaN if not evaluated).
  double accuracy = std::numeric_limits<double>::quiet_NaN();
  double test_loss = std::numeric_limits<double>::quiet_NaN();
  double measured_ms = 0;  // first op start to last op end: wall / time_scale (virtual: modeled)
  double modeled_ms = 0;   // the same window in modeled time
  double predicted_ms = 0;  // schedule::Predict of this step (its own jitter draws, if any)
  double replica_divergence = 0;  // max |w_r − w_0| over replicas and shards, after the update
  // rp::ReferenceTrainer's loss at this step (NaN without run_reference) and |loss − it| / it.
  double reference_loss = std::numeric_limits<double>::quiet_NaN();
  double loss_rel_diff = std::numeric_limits<double>::quiet_NaN();
};

// One device (global rank), over the whole run (per-step figures are medians over steps unless
// said otherwise).
struct DeviceReport {
  int rank = 0;
  Coord coord;      // (dp, pp, tp)
  int device = 0;   // placement device id
  int node = 0;
  // Metrics (schedule/metrics.h definitions) of the median-time step, measured in modeled time.
  double busy_ms = 0;
  double bubble_total = 0;  // (step − busy) / step
  double bubble_ideal = 0;  // (step − busy) / busy
  double comm_ms = 0;
  double exposed_comm_ms = 0;
  double overlap = 1;
  uint64_t peak_activation_bytes = 0;  // real stored-activation bytes (MemoryTracker peak)
  uint64_t wire_bytes = 0;     // all bytes this device put on channels (p2p + TP + DP), whole run
  uint64_t p2p_bytes = 0;
  uint64_t tp_bytes = 0;
  uint64_t dp_bytes = 0;
  // Host figures (whole run).
  uint64_t compute_ops = 0;
  uint64_t overruns = 0;     // compute ops whose real work outlasted their modeled time
  double overrun_ms = 0;
  double lateness_p50_ms = 0;  // clock-wait lateness, both streams, modeled ms
  double lateness_p99_ms = 0;
  double lateness_max_ms = 0;
};

struct RunResult {
  std::vector<StepRecord> steps;
  std::vector<DeviceReport> devices;  // by global rank
  // Step time, modeled milliseconds: medians over steps.
  double measured_step_ms = 0;
  double modeled_step_ms = 0;
  double predicted_step_ms = 0;  // schedule::Predict on the same program / cost / links
  double fidelity = 0;           // measured / predicted − 1
  double t1_ms = 0;              // DESIGN.md: every compute op of the global batch on one device
  double speedup = 0;            // T1 / measured step
  double efficiency = 0;         // speedup / world
  double predicted_speedup = 0;
  double max_replica_divergence = 0;  // over all steps (must be 0)
  double final_loss = 0;
  double final_accuracy = std::numeric_limits<double>::quiet_NaN();
  double chance_accuracy = 0;  // MajorityFraction of the held-out split
  // Max over steps of |loss − reference FP32 loss| / reference (NaN without run_reference).
  double max_loss_rel_diff = std::numeric_limits<double>::quiet_NaN();
  Prediction prediction;  // the predictor's full answer (per-device stats, timelines)
  // The median step's measured timeline (modeled time relative to the step start), by rank:
  // compute, send, receive, TP and gradient all-reduce intervals with their program op index
  // (OpInterval::op), e.g. for a Gantt chart. Virtual clock: exact modeled times.
  int timeline_step = 0;
  std::vector<std::vector<OpInterval>> timelines;
  // Host figures.
  LatenessStats lateness;  // merged over devices and streams (modeled ns)
  uint64_t overruns = 0;
  // Real clock: waits that slept, and how many ran crowded (a busy host or > 128 waiters: plain
  // sleeps, less precise; see rp::RealClock). 0 on the virtual clock.
  uint64_t clock_waits = 0;
  uint64_t clock_crowded_waits = 0;
  double wall_seconds = 0;  // Cluster::Run wall time
  bool virtual_time = false;
  double time_scale = 1.0;
  std::vector<std::string> faults;  // FaultInjector::Describe()
  // Directed links (global ranks) whose p2p transfers took longer than their link class's time
  // (degraded links, kSlowLink faults): the first step it was seen and the factor observed then.
  struct SlowLink {
    int src = 0, dst = 0, first_step = 0;
    double factor = 1.0;
  };
  std::vector<SlowLink> slow_links;
};

// What a failed Run() knows about its failure (Executor::failure()).
struct RunFailure {
  absl::Status status;  // what Run() returned
  // The rank whose error failed the run first (-1 if unknown), the step and the op index in its
  // program op list it was at (-1: between ops, e.g. the step barrier), that op in words.
  int rank = -1;
  int step = -1;
  int op = -1;
  std::string op_name;
  // Ranks it was waiting for when it failed (a receive's peer, the members of a rendezvous or of
  // the step barrier that had not arrived, a collective's ring predecessor); empty when the
  // failing rank failed by itself (threw, stalled with nobody waiting on it).
  std::vector<int> missing_peers;
  // The end of each missing peer's wait chain: the rank it was itself waiting for, and so on, up to
  // a rank that waited for nobody (the likely culprit: a stalled, dead or failed device). Equal to
  // missing_peers when they were not waiting themselves.
  std::vector<int> stuck_ranks;
  int committed_steps = 0;  // parameters are as after this many steps on every device
  int rolled_back = 0;      // devices whose uncommitted optimizer update was undone
  // Wall seconds from the first injected OpFault firing (throw / stall) to Run() returning with
  // every thread joined; -1 if none fired.
  double seconds_after_fault = -1;
};

class Executor {
 public:
  // Validates every field (InvalidArgument naming it: grid sizes, program vs grid, program
  // validity, cost model entries, model / partition / TP divisibility, dataset dims vs model,
  // optimizer, batch sizes, codec segment bytes, time scale, watchdog, steps, faults, tracer
  // size) and builds the shards (replicas start bit-identical: init is a pure hash).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Executor>> Create(
      const ExecutorOptions& options);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Trains options.steps steps. Errors: the run's first failure (naming rank, op, peer, step);
  // FailedPrecondition if called twice.
  [[nodiscard]] absl::StatusOr<RunResult> Run();

  const ExecutorOptions& options() const;
  const ParallelGrid& grid() const;

  // After Run() returned: steps whose update every device applied (== steps after success).
  int committed_steps() const;
  // After a failed Run(): what failed first (see RunFailure); nullptr before Run or after success.
  const RunFailure* failure() const;
  // The parameters of global rank `rank`'s shard of its chunk `chunk` (a copy). Not during Run().
  // OutOfRange for a bad rank or chunk.
  [[nodiscard]] absl::StatusOr<std::vector<float>> Parameters(int rank, int chunk = 0) const;

  class Impl;

 private:
  explicit Executor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The predictor options the executor uses for `options` (links, dp/tp ring models, stragglers as
// per-device compute factors; jitter is not predicted).
PredictOptions PredictOptionsFor(const ExecutorOptions& options);

// Per global rank, the product of the straggler factors `faults` names (empty if none).
std::vector<double> StragglerFactors(const FaultPlan& faults, int world);

// schedule::Codec (cost model) for a comm::Codec.
Codec CostCodec(comm::Codec codec);

}  // namespace rp::schedule
