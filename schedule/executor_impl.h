// Executor internals (schedule/executor.h is the interface): the run's state, split by concern —
//   executor.cc     Create (validation, plan, fabric, runners) and Run (communicators, devices,
//                   the stall monitor)
//   step_book.cc    the step boundary: loss, divergence, accuracy, per-device step metrics
//   run_result.cc   RunResult: medians, per-step predictions, per-device reports on three
//                   timelines, the reference
//   run_failure.cc  RunFailure: the first failure, wait chains, rollback of uncommitted updates
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/device.h"
#include "runtime/fabric.h"
#include "runtime/model/dataset.h"
#include "runtime/real_clock.h"
#include "runtime/thread.h"
#include "runtime/virtual_clock.h"
#include "schedule/executor.h"
#include "schedule/plan.h"
#include "schedule/predictor.h"
#include "schedule/runner.h"

namespace rp::schedule {

// Per step and device: the metrics on the measured and emulated timelines.
struct StepMetrics {
  DeviceMetrics measured, emulated;
};

class Executor::Impl {
 public:
  ExecutorOptions o;
  std::optional<ExecutionPlan> plan;
  std::optional<Dataset> data;
  BatchLayout layout;
  FaultInjector injector;
  std::unique_ptr<Fabric> fabric;
  RunContext ctx;
  std::vector<std::unique_ptr<DeviceRunner>> runners;  // by global rank
  bool ran = false;
  int committed = 0;                  // steps every device passed the boundary after
  std::optional<RunFailure> failure;  // after a failed Run

  // Step bookkeeping (written by the boundary's last arriver; read after Run).
  std::vector<StepRecord> records;
  std::vector<std::vector<StepMetrics>> metrics;  // [step][rank]
  // Intervals of every device for steps kept (all when small, else the last; see run_result.cc).
  std::vector<std::vector<std::vector<OpInterval>>> kept;  // [step][rank]
  // With EP exchanges: each rank's EP communicator counters after each step, cumulative
  // {real bytes, modeled bytes} — a step's EP bytes follow its routing.
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> ep_bytes_after;  // [step][rank]
  int boundary_round = 0;
  Nanos step_start{0};
  // Per plan->link_faults entry: the first step, from its from_step on, in which a message crossed
  // its directed pair (-1: none). Written in the fabric's on_commit (under its lock); read after Run.
  std::vector<int> link_fault_seen;
  int threads_at_first_step = 0;  // /proc/self/status Threads at the first boundary

  absl::Status Build();
  absl::Status CheckFaults(int world);  // part of Build
  absl::Status MakeFabric(int world);   // part of Build
  absl::StatusOr<RunResult> Run();
  // Parts of Run: each device's heap warm-up size (ctx.warm_heap_bytes); a device thread's body,
  // its error noted with rank, step and op; a failed run's status and failure record (with each
  // step's prediction), and the trace's "run failed" event.
  absl::Status SizeFirstStepWarmUp(int world);
  absl::Status RunDevice(Device& dev);
  absl::Status FailedRun(const absl::Status& run, const Prediction& pred, const PredictOptions& popts);

  // step_book.cc
  absl::StatusOr<Nanos> OnStepBoundary(Nanos max_end);
  absl::Status Bookkeep(int step);
  void RecordLoss(StepRecord& rec) const;  // parts of Bookkeep
  double ReplicaDivergence() const;
  void RecordRouting(StepRecord& rec);
  // Rank r's EP communicator counters so far: {real bytes, modeled bytes}.
  std::pair<uint64_t, uint64_t> EpBytes(int r) const;
  // Held-out evaluation of replica 0's model, at the boundary (the last step's; every step's on
  // a real clock, where threads of its own would steal the deadlines' host time).
  absl::Status Evaluate(StepRecord& rec, bool last);
  // The same over the shards shard(worker, model stage, EP rank, TP rank) on `workers` threads
  // (the caller is worker 0; each worker reads only its own shards), the 512-row batches handed
  // out in turn and their sums added in batch order: the figures of one thread, bit for bit.
  // Reads only the shards, the data set and the plan.
  absl::Status EvaluateModel(absl::FunctionRef<MlpStage*(int, int, int, int)> shard, int workers,
                             int64_t samples, double* accuracy, double* test_loss) const;
  // Replica 0's shard as its device holds it.
  MlpStage* RunnerShard(int k, int q, int t) const;
  // Threads of a virtual-clock evaluation of `samples` (EvaluationThreads; 1 on a real clock).
  int EvaluationWorkers(int64_t samples) const;
  // Held-out samples an evaluation reads (eval_samples, at most the split; auto: the whole split
  // for the last step's, AutoEvalSamples for the others).
  int64_t EvaluationSamples(bool last) const;
  // Copy `set`'s shard of model stage k, EP rank q, TP rank t.
  MlpStage* EvalShard(int set, int k, int q, int t) const;
  // Makes eval_sets[0, count) copies of replica 0's current weights (building the missing sets).
  absl::Status CopyReplicaZero(int count);
  // Virtual clock: copies replica 0's weights into eval_sets and evaluates them on eval_thread
  // (and its helpers) while the next step trains, for records[record].
  absl::Status StartEvaluation(size_t record);
  // Waits for that evaluation (if one runs) and fills its record; its error, naming the step.
  // A step whose evaluation fails stays committed (its weights are fine): the run fails at the
  // boundary that joins it, the record's accuracy left NaN.
  absl::Status JoinEvaluation();
  // Copies of replica 0 for the evaluation: [set][model stage][q · tp + t].
  std::vector<std::vector<std::vector<std::unique_ptr<MlpStage>>>> eval_sets;
  size_t eval_record = 0;
  absl::Status eval_status;  // eval_thread's result; read after the join
  double eval_accuracy = 0, eval_loss = 0;
  int64_t eval_record_samples = 0;  // held-out samples that evaluation reads
  // Declared after what it writes: destroyed (joined) first.
  Thread eval_thread;  // rp::Thread: explicit stack size, as the device threads

  // run_result.cc
  // Per-step predictions after the run: each step's predicted time (empty when one prediction
  // fits every step) and the whole prediction of step `keep` alone, if any (the median step's:
  // the report's predicted timelines) — a prediction holds every device's figures and timelines,
  // so keeping one per step grew a run's memory with its steps.
  struct StepPredictions {
    std::vector<Nanos> step_time;
    std::optional<Prediction> kept;
  };
  absl::StatusOr<StepPredictions> PredictEachStep(const PredictOptions& popts,
                                                  std::optional<size_t> keep);
  // The median step by measured time (of an even count, the upper median); records not empty.
  size_t MedianStep() const;
  // The single-device FP32 reference's loss per step (with EP: each EP group's replicas in
  // lockstep; reference_trainer.h), o.steps of them; stops early (Cancelled) once *cancel is set.
  absl::StatusOr<std::vector<double>> ReferenceLosses(const std::atomic<bool>& cancel) const;
  // `reference`: ReferenceLosses' result when o.run_reference (else ignored).
  DeviceReport DeviceReportOf(const Cluster& cluster, const Prediction& prediction, size_t med, int r,
                              const LatenessStats& lat);
  absl::StatusOr<RunResult> Assemble(const Cluster& cluster, const Prediction& pred,
                                     StepPredictions step_pred, double wall_seconds,
                                     const absl::StatusOr<std::vector<double>>& reference);

  // run_failure.cc
  absl::Status Fail(const absl::Status& run);
  // Failures in modeled-time order (virtual clock): a device thread's own failure goes through the
  // fabric's commit order as a message of its compute LP to itself, ready at the device's modeled
  // time, whose handler fails the run (the watchdog keeps the first). So the failure that heads
  // the report is the one earliest in modeled time (key order: time, then tie rank), whichever
  // thread reaches its failure first on the host. OrderFailures sets up a channel and a gate per
  // rank before the device threads start; AwaitFailureTurn posts a failure and waits (not holding
  // back commits) until it committed or the run was aborted. Consequences of another failure
  // (Cancelled, Aborted) are not ordered. A fabric aborted by a handler (a collective's data
  // error, at its commit) makes the abort status the run's failure.
  void OrderFailures(Watchdog& watchdog);
  void AwaitFailureTurn(int rank, Nanos at, const absl::Status& status);
  std::vector<ChannelId> failure_channels;  // by rank; empty: failures not ordered (real clock)
  std::vector<GateId> failure_gates;
  Watchdog* failure_watchdog = nullptr;  // the run's (OrderFailures)
  void Monitor(Cluster& cluster, const std::atomic<bool>& done);  // the stall monitor thread
  // The stall the monitor found: a DeadlineExceeded naming who waits for whom, after `quiet`
  // without progress (and `excused` more the host did not run a thread it waited for: QuietClock).
  absl::Status StallStatus(std::chrono::nanoseconds quiet, std::chrono::nanoseconds excused);
  // The ranks with a stream running without progress (StallStatus), and in *detail what the first runs.
  std::vector<int> RunningRanks(const std::vector<LpWait>& waits, std::string* detail) const;
  void NoteStallRecords(const absl::Status& stall, int first, const std::vector<int>& running,
                        const std::vector<LpWait>& waits, const std::map<int, int>& waits_for);
  // A fabric handler threw (FabricOptions::on_handler_failure, under the fabric's lock): its
  // receiver's failure, noted before the abort releases anyone.
  void NoteHandlerFailure(LpId receiver, const WaitSite& site, const absl::Status& status);

 private:
  absl::Status MakeCommunicators();
  std::unique_ptr<RealClock> real_clock_;
  std::unique_ptr<VirtualClock> virtual_clock_;
};

}  // namespace rp::schedule
