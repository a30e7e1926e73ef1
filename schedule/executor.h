// rp::schedule::Executor: plays a schedule Program on emulated devices, training a real MLP with
// DP × PP × TP on real buffers; every byte between devices crosses the modeled fabric, so the
// timing of the run emerges from its own messages (DESIGN.md "The fabric", "Three timelines").
//
// One Run() trains `steps` steps. It builds the execution plan (schedule/plan.h), the fabric
// (runtime/fabric.h: one LP per device stream), timed communicators (pipelines, TP groups, DP
// groups; comm/communicator.h) and one rp::Device per global rank (a compute thread and a comm
// stream), and every device plays its pipeline rank's op list per step (schedule/runner.h):
//   F / B / Bi / W   the real kernels of the device's MlpStage shard, layer by layer in modeled
//                    time (each layer its share of the op's cost), with the real TP all-reduces
//                    between layers as timed ring collectives on the TP group;
//   Send / Recv      the real activation or gradient buffer, timed by the fabric with the op's
//                    modeled bytes;
//   gradient buckets (plan buckets, bucket_bytes) start their DP all-reduce on the comm stream
//                    as soon as their lowest layer's gradient of the step's last micro-batch is
//                    final — inside the last backward — timed by their own ring messages;
//   Opt              awaits every bucket, then the optimizer (a compute op).
//   EP (ep > 1)      a MoE block's dispatch and combine are timed all-to-all-v's on the EP group
//                    inside F/B/Bi (between the block's layer steps, as TP all-reduces are); the
//                    step's routing (StepRecord::routing) sizes them, and the per-step prediction
//                    replays the same routing.
// The program's kTpAllReduce and kAllReduce ops carry the modeled sizes of those collectives (see
// schedule/plan.h); they take no time of their own.
// Between steps all devices meet at a rendezvous (runtime/fabric.h) whose last arriver records
// the step (loss, divergence, accuracy, per-device timelines) and starts the next step at a common
// modeled time.
//
// Three timelines (DESIGN.md): measured = wall stamps on the device threads ÷ time scale; emulated
// = the run's modeled timeline; predicted = schedule::Predict of the same plan. On the virtual
// clock measured = emulated. fidelity.host = measured / emulated − 1, fidelity.model = emulated /
// predicted − 1. Both the emulated and the predicted timelines come from the same plan and the same
// fabric rules: on the virtual clock they are equal to the nanosecond (tests).
//
// Correctness (tests/schedule/executor_test.cc): with FP32 communication the loss follows
// rp::ReferenceTrainer; replicas are bit-identical after every step with every codec.
//
// Failure: any error (bad kernel shapes, codec overflow, a stalled or dead device, an injected
// fault, an exception in a device thread) ends the run with a Status naming rank, op, peer and
// step; a stall (no progress anywhere for watchdog_timeout: wall time on a real clock, progress of
// the fabric on a virtual one) is reported, never a silent hang. No partial step is committed
// (Executor::committed_steps, rollback of uncommitted optimizer updates; RunFailure).
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
//   r.steps.back().loss; r.measured_step_ms; r.emulated_step_ms; r.predicted_step_ms;
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
#include "schedule/plan.h"
#include "runtime/model/mlp.h"
#include "runtime/model/optimizer.h"
#include "runtime/tracer.h"
#include "schedule/cost_model.h"
#include "schedule/grid.h"
#include "schedule/metrics.h"
#include "schedule/predictor.h"
#include "schedule/program.h"
#include "schedule/routing.h"

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
  // Expert parallelism (docs/executor.md "Expert parallelism"): the EP degree, carved out of DP
  // (grid.dp a multiple of ep; ep divides model.moe.experts; > 1 needs MoE layers). Replica dp is
  // EP rank dp % ep of EP group dp / ep; MoE blocks exchange tokens with their EP group through
  // timed all-to-alls inside F/B/Bi; expert parameters are reduced over the dp / ep replicas with
  // the same EP rank (with two directions, those of both copies of the stage, as DualPipe's dense
  // stages), the rest over DP.
  int ep = 1;
  // Modeled bytes one real token row stands for in the EP all-to-all (a multiple of 4; 0 = the
  // real row: 4 × the block's width).
  uint64_t ep_row_bytes = 0;
  // Wire format of the EP all-to-alls' token rows (dispatch and combine, forward and backward),
  // separate from `codec` (the DP gradients'): FP32 (default) is exact; a lossy codec encodes each
  // message of a block that crosses EP ranks (comm/alltoall.h), the counts stay 8-byte metadata.
  // error_feedback does not apply to it (nothing is summed). schedule/ep_wire.h.
  comm::Codec ep_codec = comm::Codec::kFp32;

  // --- Modeled time ---
  CostModel cost;  // F/B/W/optimizer per pipeline rank (1 or pp entries)
  LinkSpec links;  // p2p and collective links (default: ideal — α 0, infinite bandwidth)

  // --- Collectives ---
  comm::Codec codec = comm::Codec::kFp32;  // DP gradient all-reduce wire format (TP: FP32)
  // Modeled FP32 bytes per ring message (DP and TP rings), a multiple of 4; 0 = one message per
  // chunk (as SCENARIOS.md S1's "20 ms per ring step").
  uint64_t segment_bytes = 0;
  bool error_feedback = false;  // lossy codecs: carry the quantization residual (comm option)
  double reduce_gbps = 0;       // modeled reduction throughput over FP32 bytes (0 = free)
  // DDP bucket cap in modeled gradient bytes (PyTorch's bucket_cap_mb = 25); 0 = one bucket per
  // chunk. With overlap_grad_allreduce a bucket starts inside the last backward; without, at the
  // optimizer step.
  uint64_t bucket_bytes = uint64_t{25} << 20;
  bool overlap_grad_allreduce = true;

  // --- Clock ---
  // true: rp::VirtualClock, as fast as the host allows, deterministic modeled times (tests).
  // false: rp::RealClock with `time_scale` (wall = modeled × time_scale).
  bool virtual_time = false;
  double time_scale = 1.0;

  // --- Robustness and observation ---
  // A stall: no progress for this long (real clock: wall time; virtual clock: no message committed
  // and no op finished anywhere — a busy host cannot fake one).
  std::chrono::nanoseconds watchdog_timeout = kDefaultWatchdogTimeout;
  FaultPlan faults;  // optional (stragglers, jitter, degraded links, device stops)
  // Optional; not owned, must outlive Run(); num_devices() >= world size.
  Tracer* tracer = nullptr;
  // Each device thread makes about its first step's fresh memory resident in one system call
  // before that step and frees it once every device has (runtime/heap.h: where a page fault is
  // expensive, as in the PVM guests benchmarked here, that step then reuses resident pages).
  // Pays only if the process keeps freed heap memory (rp::KeepFreedHeapMemory; `ringpipe` does
  // both); changes no result.
  bool warm_first_step = false;
  // Virtual clock: the gradient all-reduces' data plane (each message's copy, sum and encode)
  // runs on a worker thread of its own, in commit order, off the fabric's lock, while the commit
  // loop keeps the timing (comm/data_lane.h). Changes no result of a healthy run; at thousands
  // of devices the sums and copies then run beside the commit loop instead of inside it. A
  // bucket's data error then takes its place among failures at its device's optimizer, not at
  // the overflowing message (docs/executor.md, "Failures in modeled-time order").
  bool data_lane = true;
  // With warm_first_step: the real model's stored activations of one micro-batch of each model
  // stage (Program::num_model_stages() entries) — the warm-up makes a rank's peak of them resident,
  // counted over its program as Validate's peak_stored_bytes. Empty: none. Not the cost model's
  // modeled sizes: under the FLOPs model those are the described transformer's, gigabytes the real
  // MLP never touches.
  std::vector<StageStored> warm_stage_stored;

  // --- Run ---
  int steps = 1;  // >= 1
  // Held-out evaluation of replica 0's assembled model after every `eval_every` steps (and always
  // after the last). 0 = only after the last step.
  int eval_every = 1;
  // Held-out samples an evaluation reads, the split's first ones (at most the split). 0 = auto:
  // the last step's evaluation (the run's final figure) reads the whole split, the others
  // AutoEvalSamples(global batch) — as many as a step trains on, at least 1024 — so a short run
  // with a small global batch does not spend most of its time evaluating (a 10-step run evaluates
  // every step; each evaluation of the whole 4096-sample split cost 5 steps of training at a
  // global batch of 256).
  int64_t eval_samples = 0;
  // Threads of a virtual-clock evaluation (0 = EvaluationThreads' choice; the figures do not
  // depend on it). A real-clock run evaluates on one.
  int eval_threads = 0;
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
  int64_t test_samples = 0;  // held-out samples that evaluation read (0 if not evaluated)
  double measured_ms = 0;   // first op start to last op end: wall / time_scale (virtual: emulated)
  double emulated_ms = 0;   // the same window in the run's modeled time
  // schedule::Predict of this step (its own jitter draws, if any; with EP exchanges, the step's
  // own routing).
  double predicted_ms = 0;
  double replica_divergence = 0;  // max |w_r − w_0| over replicas and shards, after the update
  // rp::ReferenceTrainer's loss at this step (NaN without run_reference) and |loss − it| / it.
  double reference_loss = std::numeric_limits<double>::quiet_NaN();
  double loss_rel_diff = std::numeric_limits<double>::quiet_NaN();
  // MoE blocks (model.moe.layers order): (token, slot)s each expert received over the global batch
  // and (token, slot)s the capacity dropped.
  struct MoeBlockRecord {
    int layer = 0;
    std::vector<int64_t> expert_tokens;
    int64_t dropped = 0;
  };
  std::vector<MoeBlockRecord> moe;
  // Per source replica and micro-batch (what sized the EP all-to-alls; the predictor's input).
  StepRouting routing;
};

// A device's figures of one step on one timeline (schedule/metrics.h definitions).
struct TimelineFigures {
  double busy_ms = 0;
  double bubble_total = 0;  // (step − busy) / step
  double bubble_ideal = 0;  // (step − busy) / busy
  double comm_ms = 0;
  double exposed_comm_ms = 0;
  double peer_wait_ms = 0;
  double overlap = 1;
  double ep_exposed_comm_ms = 0;  // the EP all-to-alls' share of exposed_comm_ms
  double ep_peer_wait_ms = 0;     // and of peer_wait_ms
  // Measured only: waits' wall time past their data's modeled arrival, the host waking the device
  // late (schedule/metrics.h "host late"); in neither exposed_comm_ms nor peer_wait_ms.
  double host_late_ms = 0;
};
TimelineFigures FiguresOf(const DeviceMetrics& m);

// One device (global rank). Timeline figures are of the median-time step.
struct DeviceReport {
  int rank = 0;
  Coord coord;      // (dp, pp, tp)
  int device = 0;   // placement device id
  int node = 0;
  TimelineFigures measured, emulated, predicted;
  // Memory: real bytes of stored activations (MemoryTracker peak over the run) and the modeled
  // peak (the predictor's closed form over the described model's activation sizes).
  uint64_t peak_activation_bytes = 0;
  uint64_t modeled_peak_activation_bytes = 0;
  // Bytes put on the wire over the whole run: real buffers (codec metadata included) and the
  // modeled bytes the fabric timed, split by kind.
  // dp_bytes: gradient all-reduces (DP and expert-DP groups); ep_bytes: EP all-to-alls.
  uint64_t wire_bytes = 0, p2p_bytes = 0, tp_bytes = 0, dp_bytes = 0, ep_bytes = 0;
  uint64_t modeled_wire_bytes = 0, modeled_p2p_bytes = 0, modeled_tp_bytes = 0,
           modeled_dp_bytes = 0, modeled_ep_bytes = 0;
  // The EP all-to-alls' bytes of the median step alone (they follow that step's routing, as its
  // prediction does; the other kinds are the same every step): real and modeled.
  uint64_t median_step_ep_bytes = 0, median_step_modeled_ep_bytes = 0;
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
  // Step time, modeled milliseconds: the median step's (median_step; see run_result.cc).
  int median_step = 0;  // the median step by measured time: per-device figures, headline times
  double measured_step_ms = 0;
  double emulated_step_ms = 0;
  double predicted_step_ms = 0;  // schedule::Predict on the same plan
  double fidelity_host = 0;      // measured / emulated − 1 (host noise)
  double fidelity_model = 0;     // emulated / predicted − 1 (what the predictor misses)
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
  // The median step's timelines by rank: each interval carries its emulated times (start, end)
  // and its measured wall stamps (wall_start, wall_end), relative to the step start, with its
  // program op index (OpInterval::op) — e.g. for Gantt charts of both.
  // The step they are of: median_step when its intervals were kept (a run keeps every step's while
  // world × steps <= 8192), else the last step.
  int timeline_step = 0;
  std::vector<std::vector<OpInterval>> timelines;
  // The pipeline figures (makespan, largest per-rank span, their bubbles) of the median step on the
  // measured and emulated timelines — from its per-device metrics, whichever step `timelines` holds.
  PipelineFigures measured_pipeline, emulated_pipeline;
  // Host figures.
  LatenessStats lateness;  // merged over devices and streams (modeled ns)
  uint64_t overruns = 0;
  // Real clock: waits that slept, and how many ran crowded (a busy host or > 128 waiters: plain
  // sleeps, less precise; see rp::RealClock). 0 on the virtual clock.
  uint64_t clock_waits = 0;
  uint64_t clock_crowded_waits = 0;
  double wall_seconds = 0;  // Cluster::Run wall time
  // The process's thread count (/proc/self/status "Threads:") read at the first step boundary,
  // while every device thread waits there; 0 if unreadable.
  int threads_at_first_step = 0;
  // Messages the fabric timed (every p2p, TP, DP and EP message of the run): with device ops, what
  // the host emulated per wall second.
  uint64_t fabric_messages = 0;
  bool virtual_time = false;
  double time_scale = 1.0;
  // The device threads' scheduling policy ("SCHED_BATCH" on the virtual clock where the host
  // allows it, else the process's, e.g. "SCHED_OTHER"; see rp::SchedPolicy).
  std::string thread_policy;
  // ExecutorOptions::warm_first_step: bytes the kernel made resident in bulk before the first step
  // (all devices; 0 if off or the kernel has no MADV_POPULATE_WRITE).
  uint64_t first_step_populated_bytes = 0;
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
  // The records of those steps (as RunResult::steps would hold them), in step order.
  std::vector<StepRecord> steps;
  int rolled_back = 0;      // devices whose uncommitted optimizer update was undone
  // Wall seconds from the first injected OpFault firing (throw / stall) to Run() returning with
  // every thread joined; -1 if none fired.
  double seconds_after_fault = -1;
  // The prediction of the run's plan with its faults (stragglers, degraded and slow links as of
  // step 0): what a report of the failed run shows as predicted.
  Prediction prediction;
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

  // Trains options.steps steps. Errors: the run's first failure (naming rank, op, peer, step) —
  // on a virtual clock the first in modeled time (the fabric's key order), whichever device
  // thread the host ran to its failure first; FailedPrecondition if called twice.
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

// The plan options of `options` (what the predictor and the runner play).
PlanOptions PlanOptionsFor(const ExecutorOptions& options);
// The predictor options the executor uses for `options` (stragglers as per-device compute factors;
// per-step jitter draws are added per step).
PredictOptions PredictOptionsFor(const ExecutorOptions& options);

// Each step's loss beside the single-device reference's (`reference`: one loss a step, or the
// reference's failure): its |loss − reference| / reference, and their maximum — a NaN (one side
// diverged alone) is the maximum, not dropped — into `res`.
absl::Status CompareWithReference(const absl::StatusOr<std::vector<double>>& reference,
                                  RunResult& res);

// Per global rank, the product of the straggler factors `faults` names (empty if none).
std::vector<double> StragglerFactors(const FaultPlan& faults, int world);

// Threads a virtual-clock run's held-out evaluation uses: one per host core (at most 4), no more
// than its 512-row batches of `samples`, and only as many as keep the extra copies of replica 0
// (weights only, MlpStage::Buffers::kParamsOnly: `replica_weight_bytes` each, one per thread but
// the first) within kMaxExtraEvaluationBytes. The batches are independent and their sums are taken in batch order,
// so the figures do not depend on the count. A real-clock run evaluates on one thread (a thread
// of its own would take host time from the deadlines).
inline constexpr double kMaxExtraEvaluationBytes = 256.0 * (1 << 20);
int EvaluationThreads(double replica_weight_bytes, int64_t samples);
// Held-out samples of an evaluation other than the last one under eval_samples = 0 (auto), capped
// by the split: max(global_batch, 1024).
int64_t AutoEvalSamples(int64_t global_batch);

}  // namespace rp::schedule
