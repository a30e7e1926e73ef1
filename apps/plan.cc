#include "apps/plan.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "apps/config.h"
#include "apps/moe_config.h"
#include "runtime/heap.h"
#include "runtime/status_macros.h"
#include "schedule/generators.h"
#include "schedule/predictor.h"
#include "schedule/workload_cost.h"

namespace rp::apps {
namespace {

// Model stages of one rank's chunks as the workload sizes count them (DualPipe: its two directions
// run over the same pp stages).
int StageChunks(const RunConfig& cfg) { return cfg.num_model_stages() / cfg.pp; }

// DualPipe: every rank holds two stages' weights (stage r of one direction, pp - 1 - r of the other),
// while the sizes above count one stage per rank.
// Schedules whose backward is split into B (input gradient) and W (weight gradient).
bool SplitBackward(schedule::ScheduleKind k) {
  using schedule::ScheduleKind;
  return k == ScheduleKind::kZeroBubbleH1 || k == ScheduleKind::kZeroBubbleH2 || k == ScheduleKind::kZeroBubbleV ||
         k == ScheduleKind::kDualPipeV || k == ScheduleKind::kDualPipe;
}

uint64_t GradientBytesPerRank(const RunConfig& cfg, uint64_t per_stage_chunk) {
  return cfg.schedule == schedule::ScheduleKind::kDualPipe ? 2 * per_stage_chunk : per_stage_chunk;
}

// The fixed cost model: the given times, message sizes from the real model.
absl::Status FixedCosts(const RunConfig& cfg, schedule::ExecutorOptions& ex, schedule::PipelineOptions& po,
                        std::string& description) {
  RP_ASSIGN_OR_RETURN(schedule::WorkloadBytes bytes,
                      schedule::MlpWorkloadBytes(cfg.Mlp(), cfg.pp, StageChunks(cfg), cfg.tp,
                                                 cfg.layers_per_stage, cfg.microbatch_size));
  po.activation_bytes = bytes.activation_message;
  po.tp_allreduce_bytes = bytes.tp_allreduce;
  po.gradient_bytes = GradientBytesPerRank(cfg, bytes.gradient);
  // Each stage's own sizes: an MLP's stages differ in width and parameters.
  po.stage_activation_bytes = bytes.stage_output;
  if (cfg.tp > 1) po.stage_tp_bytes = bytes.stage_tp;
  po.stage_gradient_bytes = bytes.stage_gradient;
  // The modeled stored activations are the real MLP's, stage by stage.
  ex.cost.stage_stored = bytes.stage_stored;
  ex.warm_stage_stored = bytes.stage_stored;
  auto at = [](const std::vector<double>& list, int s) { return list.size() == 1 ? list[0] : list[s]; };
  for (int s = 0; s < cfg.pp; ++s) {
    schedule::StageCost c;
    c.forward = FromMillis(at(cfg.forward_ms, s));
    c.backward = FromMillis(at(cfg.backward_ms, s));
    c.weight_grad = cfg.weight_grad_ms.empty() ? c.backward / 2 : FromMillis(at(cfg.weight_grad_ms, s));
    c.optimizer = FromMillis(cfg.optimizer_ms);
    c.activation_bytes = bytes.stored[static_cast<size_t>(s)];  // the loop placement's (PlaceStageCosts)
    ex.cost.stages.push_back(c);
  }
  auto list = [](const std::vector<double>& l) {
    return l.size() == 1 ? absl::StrCat(l[0]) : absl::StrCat("[", absl::StrJoin(l, ", "), "]");
  };
  description = absl::StrCat(
      "fixed: F ", list(cfg.forward_ms), " ms, B ", list(cfg.backward_ms), " ms",
      SplitBackward(cfg.schedule)
          ? absl::StrCat(" (W ", cfg.weight_grad_ms.empty() ? std::string("B/2") : list(cfg.weight_grad_ms), " ms)")
          : "",
      " per micro-batch per device");
  return absl::OkStatus();
}

// The FLOPs cost model: times and sizes of the described transformer (schedule/workload_cost.h).
absl::Status FlopsCosts(const RunConfig& cfg, bool for_run, schedule::ExecutorOptions& ex,
                        schedule::PipelineOptions& po, std::string& description) {
  const FlopsModel& f = cfg.flops;
  RP_ASSIGN_OR_RETURN(schedule::TransformerCost t, schedule::CostOfTransformer(f, cfg.pp, StageChunks(cfg), cfg.tp));
  ex.cost = std::move(t.cost);
  for (schedule::StageCost& c : ex.cost.stages) c.optimizer = FromMillis(cfg.optimizer_ms);
  po.activation_bytes = t.bytes.activation_message;
  po.gradient_bytes = GradientBytesPerRank(cfg, t.bytes.gradient);
  po.tp_allreduce_bytes = t.bytes.tp_allreduce;
  // Each stage's own sizes: stages with a layer more than others send, reduce and store more.
  po.stage_activation_bytes = t.bytes.stage_output;
  if (cfg.tp > 1) po.stage_tp_bytes = t.bytes.stage_tp;
  po.stage_gradient_bytes = t.bytes.stage_gradient;
  // A run's warm-up makes the real MLP's activations resident, not the described transformer's.
  // A prediction never builds the real MLP: LoadConfig did not validate it (apps/config_validate.cc).
  if (for_run) {
    RP_ASSIGN_OR_RETURN(schedule::WorkloadBytes real,
                        schedule::MlpWorkloadBytes(cfg.Mlp(), cfg.pp, StageChunks(cfg), cfg.tp,
                                                   cfg.layers_per_stage, cfg.microbatch_size));
    ex.warm_stage_stored = real.stage_stored;
  }
  description = absl::StrFormat(
      "flops: %d-layer transformer, hidden %d, seq %d, %d seq/micro-batch on %s (%.0f TFLOPS x %.2f): "
      "model stage 0 F %.3f ms, B %.3f ms per micro-batch",
      f.layers, f.hidden, f.seq_len, f.microbatch_size, absl::AsciiStrToUpper(f.device), t.peak_tflops,
      f.efficiency, ToMillis(ex.cost.model_stages[0].forward), ToMillis(ex.cost.model_stages[0].backward));
  return absl::OkStatus();
}


// The executor's options for a config: layout, workload, links, collectives, clock, the program.
absl::StatusOr<schedule::ExecutorOptions> ExecutorOptionsFor(const RunConfig& cfg, bool for_run,
                                                            const LinkSpec& links, std::string& cost_description) {
  schedule::ExecutorOptions ex;
  ex.grid = {.dp = cfg.dp, .pp = cfg.pp, .tp = cfg.tp};
  ex.placement.devices_per_node = cfg.devices_per_node;
  ex.model = cfg.Mlp();
  ex.layers_per_stage = cfg.layers_per_stage;
  ex.optimizer = cfg.optimizer;
  ex.dataset.input_dim = cfg.input_dim;
  ex.dataset.classes = cfg.classes;
  ex.dataset.train_size = cfg.train_size;
  ex.dataset.test_size = cfg.test_size;
  ex.dataset.seed = cfg.seed + 6;  // DatasetConfig's default seed (7) at the default --seed=1
  ex.microbatch_size = cfg.microbatch_size;
  ex.ep = cfg.ep;
  ex.ep_row_bytes = EpRowBytes(cfg);
  ex.ep_codec = cfg.ep_codec;
  ex.links = links;
  ex.codec = cfg.codec;
  ex.segment_bytes = cfg.segment_bytes;
  ex.reduce_gbps = cfg.reduce_gbps;
  ex.bucket_bytes = static_cast<uint64_t>(std::llround(cfg.bucket_mb * 1048576.0));
  ex.overlap_grad_allreduce = cfg.overlap;
  ex.virtual_time = cfg.virtual_time;
  ex.time_scale = cfg.time_scale_auto() ? 1.0 : cfg.time_scale;  // auto: apps/clock_choice.h
  ex.watchdog_timeout = WatchdogTimeout(cfg.watchdog_timeout);
  ex.steps = cfg.steps;
  ex.eval_every = cfg.eval_every > 0 ? cfg.eval_every : std::max(1, (cfg.steps + 9) / 10);
  ex.eval_samples = cfg.eval_samples;
  ex.run_reference = cfg.reference;
  ex.warm_first_step = HeapKeepsFreedMemory();  // apps/main.cc keeps freed heap memory

  schedule::PipelineOptions po;
  po.num_ranks = cfg.pp;
  po.num_micro_batches = cfg.microbatches;
  po.num_chunks = cfg.chunks();
  po.overlap_grad_allreduce = cfg.overlap;
  po.microbatch_group = cfg.microbatch_group;
  po.pytorch_rounds = cfg.pytorch_rounds;
  po.fused_fb = cfg.fused_fb;
  if (cfg.cost_model == CostModelKind::kFixed) {
    RP_RETURN_IF_ERROR(FixedCosts(cfg, ex, po, cost_description));
  } else {
    RP_RETURN_IF_ERROR(FlopsCosts(cfg, for_run, ex, po, cost_description));
  }
  auto program = schedule::BuildSchedule(cfg.schedule, po);
  if (!program.ok()) return FieldError("schedule", std::string(program.status().message()));
  ex.program = *std::move(program);
  // Each rank's costs and stored activations are those of the stages the program's placement gives
  // it (a V or two directions: not stage k on rank k mod pp).
  RP_RETURN_IF_ERROR(schedule::PlaceStageCosts(ex.program, ex.cost));
  if (cfg.straggler_factor != 1) {
    ex.faults.stragglers.push_back({.rank = cfg.straggler_rank, .factor = cfg.straggler_factor});
  }
  return ex;
}

}  // namespace

std::chrono::nanoseconds WatchdogTimeout(double seconds) {
  return std::chrono::nanoseconds(static_cast<int64_t>(std::llround(seconds * 1e9)));
}

absl::StatusOr<Plan> BuildPlan(const RunConfig& cfg, bool for_run) {
  RP_ASSIGN_OR_RETURN(const LinkSpec links, ResolveLinks(cfg));
  std::string description;
  RP_ASSIGN_OR_RETURN(schedule::ExecutorOptions ex, ExecutorOptionsFor(cfg, for_run, links, description));
  RP_ASSIGN_OR_RETURN(schedule::ParallelGrid grid, schedule::ParallelGrid::Create(ex.grid, ex.placement));
  RP_ASSIGN_OR_RETURN(schedule::ExecutionPlan execution, schedule::BuildPlan(schedule::PlanOptionsFor(ex)));
  schedule::PredictOptions predict = schedule::PredictOptionsFor(ex);
  return Plan{.grid = std::move(grid),
              .executor = std::move(ex),
              .execution = std::move(execution),
              .predict = std::move(predict),
              .cost_description = std::move(description),
              .modeled_sizes = cfg.cost_model == CostModelKind::kFixed ? "the real MLP" : "the described transformer"};
}

std::vector<schedule::PredictedWire> PredictWireBytes(const Plan& plan) {
  return schedule::PredictWireBytes(plan.execution);
}

absl::Status CheckPredictable(const RunConfig& cfg, const Plan& plan) {
  using schedule::FoldBlocker;
  const auto [blocker, played] = schedule::ReplicaFold(plan.execution, plan.predict);
  // The balanced routing the predictor builds for the EP all-to-alls of the replicas it plays.
  if (plan.execution.has_ep_exchanges() && plan.predict.routing == nullptr) {
    if (absl::Status st = CheckRoutingCounts(cfg, played); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--", st.message()));
    }
  }
  if (blocker == FoldBlocker::kNone && played == 1) return absl::OkStatus();
  RP_ASSIGN_OR_RETURN(const double per_replica, ModeledMessagesPerReplicaStep(cfg));
  const double total = per_replica * played;
  if (total <= kMaxPredictedMessages) return absl::OkStatus();
  if (blocker == FoldBlocker::kNone && played > cfg.ep) {  // nodes out of step with the EP groups
    return absl::InvalidArgumentError(absl::StrFormat(
        "--ep: the predictor plays %d replicas whole: the all-to-alls exchange tokens between the %d "
        "replicas of an EP group, and on nodes of %d devices the layout repeats only every %d replicas "
        "(pp x tp x %d = %d devices): about %.3g messages a step; at most %.3g. Use a smaller --ep, fewer "
        "micro-batches, or a --devices_per_node that divides pp x tp = %d (then one EP group is played)",
        played, cfg.ep, cfg.devices_per_node, played, played, cfg.pp * cfg.tp * played, total,
        kMaxPredictedMessages, cfg.pp * cfg.tp));
  }
  if (blocker == FoldBlocker::kNone) {  // folded into one EP group, still too large
    return absl::InvalidArgumentError(absl::StrFormat(
        "--ep: the predictor plays one EP group whole (the all-to-alls exchange tokens between its %d "
        "replicas; pp x tp x ep = %d devices): about %.3g messages a step; at most %.3g. Use a smaller "
        "--ep, or fewer micro-batches",
        cfg.ep, cfg.pp * cfg.tp * cfg.ep, total, kMaxPredictedMessages));
  }
  if (blocker == FoldBlocker::kOneReplica) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--microbatches: this layout's one replica (pp x tp = %d devices, %d micro-batches) has about %.3g "
        "messages a step for the predictor to play; at most %.3g. Use fewer micro-batches or devices",
        cfg.pp * cfg.tp, cfg.microbatches, total, kMaxPredictedMessages));
  }
  // Why the replicas are played one by one, and what folds them again besides fewer replicas.
  std::string why, advice;
  switch (blocker) {
    case FoldBlocker::kExpertParallel:
      why = "expert parallelism with one EP group of every replica: the EP all-to-alls exchange tokens "
            "between all of them";
      advice = "Use fewer replicas, or a smaller --ep (then the predictor plays one EP group)";
      break;
    case FoldBlocker::kStraggler:
      why = absl::StrFormat("the straggler (rank %d, factor %g) slows one replica only", cfg.straggler_rank,
                            cfg.straggler_factor);
      advice = "Use fewer replicas, or no straggler (--straggler_factor=1)";
      break;
    case FoldBlocker::kPerOpFactors:
      why = "seeded jitter gives every op of every replica its own factor";
      advice = "Use fewer replicas, or no jitter";
      break;
    case FoldBlocker::kLinkFaults:
      why = "a slow_link fault slows one replica's messages only";
      advice = "Use fewer replicas, or no slow_link fault";
      break;
    default:  // kLayout (kDisabled: no flag sets it)
      return absl::InvalidArgumentError(absl::StrFormat(
          "--dp: the %d replicas of this layout are not identical (a NIC shared by replicas, or nodes out of "
          "step with them: no few replicas have the link classes of the next few), so the predictor plays every "
          "device's messages: about %.3g a step; at most %.3g. Make pp x tp a multiple or a divisor of "
          "devices_per_node (%d) with a NIC per device, or use fewer replicas",
          cfg.dp, total, kMaxPredictedMessages, cfg.devices_per_node));
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "--dp: the %d replicas of this layout are played one by one, not folded into one (%s), so the "
      "predictor plays every device's messages: about %.3g a step; at most %.3g. %s",
      cfg.dp, why, total, kMaxPredictedMessages, advice));
}

}  // namespace rp::apps
