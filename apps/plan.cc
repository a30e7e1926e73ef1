#include "apps/plan.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "apps/config.h"
#include "runtime/status_macros.h"
#include "schedule/generators.h"
#include "schedule/workload_cost.h"

namespace rp::apps {
namespace {

schedule::Codec ToCostCodec(comm::Codec c) {
  switch (c) {
    case comm::Codec::kFp32: return schedule::Codec::kFp32;
    case comm::Codec::kFp16: return schedule::Codec::kFp16;
    case comm::Codec::kBf16: return schedule::Codec::kBf16;
    case comm::Codec::kInt8: return schedule::Codec::kInt8;
  }
  return schedule::Codec::kFp32;
}

// The fixed cost model: the given times, message sizes from the real model.
absl::Status FixedCosts(const RunConfig& cfg, schedule::ExecutorOptions& ex, schedule::PipelineOptions& po,
                        std::string& description) {
  RP_ASSIGN_OR_RETURN(schedule::WorkloadBytes bytes,
                      schedule::MlpWorkloadBytes(cfg.Mlp(), cfg.pp, cfg.virtual_stages, cfg.tp,
                                                 cfg.layers_per_stage, cfg.microbatch_size));
  po.activation_bytes = bytes.activation_message;
  po.tp_allreduce_bytes = bytes.tp_allreduce;
  po.gradient_bytes = bytes.gradient;
  auto at = [](const std::vector<double>& list, int s) { return list.size() == 1 ? list[0] : list[s]; };
  for (int s = 0; s < cfg.pp; ++s) {
    schedule::StageCost c;
    c.forward = FromMillis(at(cfg.forward_ms, s));
    c.backward = FromMillis(at(cfg.backward_ms, s));
    c.weight_grad = cfg.weight_grad_ms.empty() ? c.backward / 2 : FromMillis(at(cfg.weight_grad_ms, s));
    c.optimizer = FromMillis(cfg.optimizer_ms);
    c.activation_bytes = bytes.stored[static_cast<size_t>(s)];
    ex.cost.stages.push_back(c);
  }
  auto list = [](const std::vector<double>& l) {
    return l.size() == 1 ? absl::StrCat(l[0]) : absl::StrCat("[", absl::StrJoin(l, ", "), "]");
  };
  description = absl::StrCat(
      "fixed: F ", list(cfg.forward_ms), " ms, B ", list(cfg.backward_ms), " ms",
      cfg.schedule == schedule::ScheduleKind::kZeroBubbleH1
          ? absl::StrCat(" (W ", cfg.weight_grad_ms.empty() ? std::string("B/2") : list(cfg.weight_grad_ms), " ms)")
          : "",
      " per micro-batch per device");
  return absl::OkStatus();
}

// The FLOPs cost model: times and sizes of the described transformer (schedule/workload_cost.h).
absl::Status FlopsCosts(const RunConfig& cfg, schedule::ExecutorOptions& ex, schedule::PipelineOptions& po,
                        std::string& description) {
  const FlopsModel& f = cfg.flops;
  RP_ASSIGN_OR_RETURN(schedule::TransformerCost t, schedule::CostOfTransformer(f, cfg.pp, cfg.virtual_stages, cfg.tp));
  ex.cost = std::move(t.cost);
  for (schedule::StageCost& c : ex.cost.stages) c.optimizer = FromMillis(cfg.optimizer_ms);
  po.activation_bytes = t.bytes.activation_message;
  po.gradient_bytes = t.bytes.gradient;
  po.tp_allreduce_bytes = t.bytes.tp_allreduce;
  description = absl::StrFormat(
      "flops: %d-layer transformer, hidden %d, seq %d, %d seq/micro-batch on %s (%.0f TFLOPS x %.2f): "
      "stage 0 F %.3f ms, B %.3f ms per micro-batch",
      f.layers, f.hidden, f.seq_len, f.microbatch_size, absl::AsciiStrToUpper(f.device), t.peak_tflops,
      f.efficiency, ToMillis(ex.cost.stages[0].forward), ToMillis(ex.cost.stages[0].backward));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Plan> BuildPlan(const RunConfig& cfg) {
  schedule::Placement placement;
  placement.devices_per_node = cfg.devices_per_node;
  RP_ASSIGN_OR_RETURN(schedule::ParallelGrid grid,
                      schedule::ParallelGrid::Create({.dp = cfg.dp, .pp = cfg.pp, .tp = cfg.tp}, placement));
  RP_ASSIGN_OR_RETURN(const LinkSpec links, ResolveLinks(cfg));
  Plan plan{.grid = std::move(grid), .executor = {}, .predict = {}, .cost_description = {}};
  schedule::ExecutorOptions& ex = plan.executor;
  ex.grid = {.dp = cfg.dp, .pp = cfg.pp, .tp = cfg.tp};
  ex.placement = placement;
  ex.model = cfg.Mlp();
  ex.layers_per_stage = cfg.layers_per_stage;
  ex.optimizer = cfg.optimizer;
  ex.dataset.input_dim = cfg.input_dim;
  ex.dataset.classes = cfg.classes;
  ex.dataset.train_size = cfg.train_size;
  ex.dataset.test_size = cfg.test_size;
  ex.dataset.seed = cfg.seed + 6;  // DatasetConfig's default seed (7) at the default --seed=1
  ex.microbatch_size = cfg.microbatch_size;
  ex.links = links;
  ex.codec = cfg.codec;
  ex.segment_bytes = cfg.segment_bytes > 0 ? cfg.segment_bytes : comm::kDefaultSegmentBytes;
  ex.model_segment_bytes = cfg.segment_bytes;
  ex.tp_model_segment_bytes = 0;
  ex.virtual_time = cfg.virtual_time;
  ex.time_scale = cfg.time_scale;
  ex.steps = cfg.steps;
  ex.eval_every = cfg.eval_every > 0 ? cfg.eval_every : std::max(1, (cfg.steps + 9) / 10);
  ex.eval_samples = cfg.eval_samples;
  ex.run_reference = cfg.reference;

  schedule::PipelineOptions po;
  po.num_ranks = cfg.pp;
  po.num_micro_batches = cfg.microbatches;
  po.num_chunks = cfg.virtual_stages;
  po.buckets_per_chunk = cfg.buckets;
  po.overlap_grad_allreduce = cfg.overlap_allreduce;
  if (cfg.cost_model == CostModelKind::kFixed) {
    RP_RETURN_IF_ERROR(FixedCosts(cfg, ex, po, plan.cost_description));
  } else {
    RP_RETURN_IF_ERROR(FlopsCosts(cfg, ex, po, plan.cost_description));
  }
  RP_ASSIGN_OR_RETURN(ex.program, schedule::BuildSchedule(cfg.schedule, po));
  // schedule::PredictOptionsFor(ex)'s rule (schedule/executor.h), spelled out so `predict` does not
  // need the executor.
  plan.predict.links = ex.links;
  plan.predict.dp_ring = {.segment_bytes = ex.model_segment_bytes, .codec = ToCostCodec(ex.codec)};
  plan.predict.tp_ring = {.segment_bytes = ex.tp_model_segment_bytes, .codec = schedule::Codec::kFp32};
  if (cfg.straggler_factor != 1) {
    ex.faults.stragglers.push_back({.rank = cfg.straggler_rank, .factor = cfg.straggler_factor});
  }
  plan.predict.compute_factor = schedule::StragglerFactors(ex.faults, cfg.world_size());
  return plan;
}

std::vector<schedule::PredictedWire> PredictWireBytes(const Plan& plan) {
  return schedule::PredictWireBytes(plan.executor.program, plan.executor.grid.dp, plan.executor.grid.tp,
                                    plan.predict);
}

}  // namespace rp::apps
