// ValidateConfig: everything a run needs, checked before anything runs; the config is not changed.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "apps/config.h"
#include "apps/config_budget.h"
#include "apps/host.h"
#include "apps/memory_estimate.h"
#include "apps/moe_config.h"
#include "comm/collectives.h"
#include "runtime/link_models.h"
#include "runtime/real_clock.h"
#include "runtime/status_macros.h"

namespace rp::apps {
namespace {

using budget::CheckCostModel;
using budget::CheckMessages;
using budget::Exact;
using budget::CheckTimeBudget;
using budget::kMaxOpNs;
using budget::ModeledSizes;
using budget::OpsFitTheWatchdog;

// Sizes that bound what BuildPlan allocates (see there). A run allocates the real model (1 GiB of
// fp32 at most); a prediction only counts it (StageLayers, StageStoredBytes), bounded by the
// budgets' messages and times and, for the sizes' integer arithmetic, by 2^40 floats.
constexpr double kMaxModelFloats = double{1 << 28};
constexpr double kMaxPredictedFloats = double{int64_t{1} << 40};
constexpr int64_t kMaxProgramSlots = int64_t{1} << 22;
// Largest DDP bucket cap (1 TiB): one bucket per chunk for any model.
constexpr double kMaxBucketMb = double{1 << 20};
constexpr double kMaxWatchdogSeconds = 86400;

absl::Status CheckRanges(const RunConfig& cfg) {
  for (const ConfigField& f : Fields()) {
    if (f.grammar != Grammar::kInt || f.lo > f.hi) continue;
    const nlohmann::json v = f.get(cfg);
    // Compared as integers: as doubles, seed 2^63 equals the bound 2^63 - 1 and passed.
    const bool out = v.is_number_unsigned()
                         ? (f.lo > 0 && v.get<uint64_t>() < static_cast<uint64_t>(f.lo)) ||
                               (f.hi < 0 || v.get<uint64_t>() > static_cast<uint64_t>(f.hi))
                         : v.get<int64_t>() < f.lo || v.get<int64_t>() > f.hi;
    if (out) {
      return FieldError(f.name, absl::StrCat("must be in ", f.lo, "..", f.hi, ", got ", ShortDump(v)));
    }
  }
  return absl::OkStatus();
}

// The range of every field whether or not this config's cost model, workload or subcommand uses it
// (a value out of range is an error even where it is ignored, as it would be in a file or a report).
absl::Status CheckUnusedFieldRanges(const RunConfig& cfg) {
  if (auto peak = schedule::DevicePeakTflops(cfg.flops.device); !peak.ok()) {
    return FieldError("flops_device", std::string(peak.status().message()));
  }
  if (!(cfg.flops.efficiency > 0 && cfg.flops.efficiency <= 1)) {
    return FieldError("flops_efficiency", absl::StrCat("must be in (0, 1], got ", Exact(cfg.flops.efficiency)));
  }
  for (auto [field, list] : {std::pair{"forward_ms", &cfg.forward_ms}, {"backward_ms", &cfg.backward_ms},
                             {"weight_grad_ms", &cfg.weight_grad_ms}}) {
    RP_RETURN_IF_ERROR(budget::CheckOpTimesMs(field, *list));
  }
  if (absl::Status st = ValidateOptimizerConfig(cfg.optimizer); !st.ok()) {
    const std::string msg(st.message());
    for (const char* f : {"lr", "momentum", "weight_decay"}) {
      if (msg.rfind(f, 0) == 0) return FieldError(f, msg.substr(msg.find_first_of(": ") + 1));
    }
    return FieldError("optimizer", msg);
  }
  return absl::OkStatus();
}

absl::Status CheckWorld(const RunConfig& cfg, bool for_run) {
  const int64_t world = int64_t{cfg.dp} * cfg.pp * cfg.tp;
  if (!for_run) {
    if (world <= kMaxPredictDevices) return absl::OkStatus();
    return FieldError("dp", absl::StrCat("dp x pp x tp = ", world, " devices; `ringpipe predict` takes at most ",
                                         kMaxPredictDevices));
  }
  const int64_t max_world = MaxRunDevices(cfg.virtual_time);
  if (world <= max_world) return absl::OkStatus();
  const ThreadLimit limit = MachineThreadLimit();
  return FieldError("dp", absl::StrCat("dp x pp x tp = ", world, " devices; `ringpipe run` takes at most ", max_world,
                                       " on this machine (", ThreadsPerDevice(cfg.virtual_time), " thread(s) per device ",
                                       cfg.virtual_time ? "on the virtual clock" : "on the real clock",
                                       "; thread limit ", limit.threads, " from ", limit.source,
                                       "): use `ringpipe predict` for larger layouts"));
}

// The schedule's conditions (schedule/generators.h), each naming the config field it is about.
absl::Status CheckSchedule(const RunConfig& cfg) {
  using schedule::ScheduleKind;
  const ScheduleKind k = cfg.schedule;
  const char* name = schedule::ScheduleName(k);
  const int p = cfg.pp, m = cfg.microbatches;
  const bool two_chunks = k == ScheduleKind::kZeroBubbleV || k == ScheduleKind::kDualPipeV || k == ScheduleKind::kDualPipe;
  if (cfg.virtual_stages > 1 && k != ScheduleKind::kInterleaved && !(two_chunks && cfg.virtual_stages == 2)) {
    return FieldError("virtual_stages", absl::StrCat(cfg.virtual_stages, " needs --schedule=interleaved (schedule is ",
                                                     name, two_chunks ? ", which always holds 2 chunks per device" : "",
                                                     ")"));
  }
  if (k != ScheduleKind::kInterleaved && cfg.microbatch_group != 0) {
    return FieldError("microbatch_group", absl::StrCat("is for --schedule=interleaved (schedule is ", name, ")"));
  }
  if (k != ScheduleKind::kInterleaved && cfg.pytorch_rounds) {
    return FieldError("pytorch_rounds", absl::StrCat("is for --schedule=interleaved (schedule is ", name, ")"));
  }
  if (!cfg.fused_fb && k != ScheduleKind::kDualPipeV && k != ScheduleKind::kDualPipe) {
    return FieldError("fused_fb", absl::StrCat("false is for dualpipev and dualpipe, whose F&B pairs it splits "
                                               "(schedule is ", name, ")"));
  }
  if (k == ScheduleKind::kInterleaved) {
    // One chunk per device is 1F1B op for op: run under the interleaved name, the report would credit
    // interleaving with 1F1B's bubble.
    if (cfg.virtual_stages < 2) {
      return FieldError("virtual_stages", absl::StrCat(cfg.virtual_stages, " with --schedule=interleaved is plain 1F1B; "
                                                       "interleaving needs at least 2 chunks per device "
                                                       "(--virtual_stages=2), or use --schedule=1f1b"));
    }
    if (cfg.pytorch_rounds) {
      if (cfg.microbatch_group != 0) {
        return FieldError("microbatch_group", "must be 0 with pytorch_rounds (PyTorch derives the group size)");
      }
      const int rounds = std::max(1, m / p);
      if (m % rounds != 0) {
        return FieldError("microbatches", absl::StrCat(m, " is not a multiple of PyTorch's rounds max(1, microbatches / "
                                                       "pp) = ", rounds));
      }
      return absl::OkStatus();
    }
    const int n = cfg.microbatch_group == 0 ? p : cfg.microbatch_group;
    const char* field = cfg.microbatch_group == 0 ? "microbatches" : "microbatch_group";
    if (n < p || n > m) {
      return FieldError(field, absl::StrCat("the interleaved schedule's group size N = ", n, " must be in [pp, "
                                            "microbatches] = [", p, ", ", m, "] (Megatron)"));
    }
    if (const int rest = m % n; rest != 0 && rest < p) {
      if (cfg.microbatch_group == 0) {
        return FieldError("microbatches", absl::StrCat("the interleaved schedule needs a multiple of pp=", p,
                                                       " (Megatron's groups of N = pp micro-batches), got ", m));
      }
      return FieldError(field, absl::StrCat("microbatches mod N = ", m, " mod ", n, " = ", rest,
                                            "; it must be 0 or at least pp=", p, " (Megatron)"));
    }
  }
  if (k == ScheduleKind::kDualPipe && p % 2 != 0) {
    return FieldError("pp", absl::StrCat("dualpipe needs an even pp (its two directions meet in the middle), got ", p));
  }
  if (k == ScheduleKind::kDualPipe && m % 2 != 0) {
    return FieldError("microbatches", absl::StrCat("dualpipe needs an even number (half flow each way), got ", m));
  }
  if ((k == ScheduleKind::kZeroBubbleH2 || k == ScheduleKind::kDualPipeV || k == ScheduleKind::kDualPipe) && m < 2 * p) {
    return FieldError("microbatches", absl::StrCat(name, " needs at least 2 x pp = ", 2 * p, ", got ", m));
  }
  return absl::OkStatus();
}

absl::Status CheckLayout(const RunConfig& cfg, bool for_run) {
  RP_RETURN_IF_ERROR(CheckWorld(cfg, for_run));
  RP_RETURN_IF_ERROR(CheckSchedule(cfg));
  // The schedule program holds a few ops per (pipeline rank, model chunk, micro-batch).
  if (const int64_t slots = int64_t{cfg.pp} * cfg.chunks() * cfg.microbatches; slots > kMaxProgramSlots) {
    return FieldError("microbatches", absl::StrCat("pp x chunks x microbatches = ", slots, "; at most ",
                                                   kMaxProgramSlots, " (the schedule program must fit in memory)"));
  }
  if (cfg.straggler_rank >= cfg.world_size()) {
    return FieldError("straggler_rank", absl::StrCat("must be below the world size ", cfg.world_size()));
  }
  if (cfg.nics_per_node != 0 && (cfg.nics_per_node > cfg.devices_per_node || cfg.devices_per_node % cfg.nics_per_node != 0)) {
    return FieldError("nics_per_node", absl::StrCat(cfg.nics_per_node, " does not divide devices_per_node=",
                                                    cfg.devices_per_node, " (0: one NIC per device)"));
  }
  return absl::OkStatus();
}

absl::Status CheckLinkOverrides(const RunConfig& cfg) {
  for (auto [name, o, alpha] : {std::tuple{"alpha_us", cfg.alpha_us, true}, {"bandwidth_gbps", cfg.bandwidth_gbps, false},
                                {"overhead_us", cfg.overhead_us, true},
                                {"intra_alpha_us", cfg.intra_alpha_us, true},
                                {"intra_bandwidth_gbps", cfg.intra_bandwidth_gbps, false},
                                {"intra_overhead_us", cfg.intra_overhead_us, true},
                                {"inter_alpha_us", cfg.inter_alpha_us, true},
                                {"inter_bandwidth_gbps", cfg.inter_bandwidth_gbps, false},
                                {"inter_overhead_us", cfg.inter_overhead_us, true}}) {
    if (!o.has_value()) continue;  // unset: the preset's
    const double v = *o;
    if (!(v >= 0)) return FieldError(name, absl::StrCat("must be >= 0, got ", Exact(v)));
    // Each latency must fit the time base by itself; a tiny bandwidth makes every byte last long.
    if (alpha && v > kMaxOpNs / 1e3) return FieldError(name, absl::StrCat("must be at most 1e12 us, got ", Exact(v)));
    if (!alpha && v != 0 && v < 1e-6) {
      return FieldError(name, absl::StrCat("must be 0 (infinite) or at least 1e-6 GB/s (1 kB/s), got ", Exact(v)));
    }
  }
  return absl::OkStatus();
}

// DDP buckets, reduction, watchdog.
absl::Status CheckCollectives(const RunConfig& cfg) {
  if (!(cfg.bucket_mb > 0) || cfg.bucket_mb > kMaxBucketMb) {
    return FieldError("bucket_mb",
                      absl::StrCat("must be in (0, ", Exact(kMaxBucketMb), "] MiB, got ", Exact(cfg.bucket_mb)));
  }
  if (cfg.bucket_mb * 1048576.0 < 4) {
    return FieldError("bucket_mb", absl::StrCat(Exact(cfg.bucket_mb), " MiB is less than one fp32 gradient (4 bytes)"));
  }
  if (!(cfg.reduce_gbps >= 0)) return FieldError("reduce_gbps", absl::StrCat("must be >= 0, got ", Exact(cfg.reduce_gbps)));
  if (cfg.reduce_gbps != 0 && cfg.reduce_gbps < 1e-6) {
    return FieldError("reduce_gbps", absl::StrCat("must be 0 (free) or at least 1e-6 GB/s, got ", Exact(cfg.reduce_gbps)));
  }
  if (!(cfg.watchdog_timeout > 0) || cfg.watchdog_timeout > kMaxWatchdogSeconds) {
    return FieldError("watchdog_timeout", absl::StrCat("must be in (0, ", Exact(kMaxWatchdogSeconds),
                                                       "] seconds, got ", Exact(cfg.watchdog_timeout)));
  }
  // The executor's watchdog counts whole nanoseconds: under half of one it is 0, which Executor::Create
  // refused as "executor: watchdog_timeout: must be > 0" (naming neither the flag nor the config file).
  if (cfg.watchdog_timeout < 1e-9) {
    return FieldError("watchdog_timeout", absl::StrCat("must be at least 1 ns (1e-9 s), got ",
                                                       Exact(cfg.watchdog_timeout)));
  }
  return absl::OkStatus();
}

// The real MLP's partition over the model stages: the execution plan lays every schedule's passes,
// TP all-reduces and DDP buckets out over its layers, under either cost model (schedule/plan.h).
absl::Status CheckModelPartition(const RunConfig& cfg) {
  const MlpConfig mlp = cfg.Mlp();
  if (cfg.num_model_stages() > mlp.num_layers()) {
    return FieldError("pp", absl::StrCat(cfg.ModelStagesText(), " but the model has only ", mlp.num_layers(),
                                         " layers (--hidden has ", cfg.hidden.size(), " widths)"));
  }
  if (!cfg.layers_per_stage.empty() && cfg.layers_per_stage.size() != static_cast<size_t>(cfg.num_model_stages())) {
    return FieldError("layers_per_stage", absl::StrCat("has ", cfg.layers_per_stage.size(),
                                                       " entries; expected one per model stage: ",
                                                       cfg.ModelStagesText()));
  }
  // Without TP the partition can fail only on layers_per_stage; with it, on a width TP must divide.
  if (auto part = PartitionMlp(mlp, cfg.num_model_stages(), 1, cfg.layers_per_stage); !part.ok()) {
    return FieldError("layers_per_stage", std::string(part.status().message()));
  }
  if (auto part = PartitionMlp(mlp, cfg.num_model_stages(), cfg.tp, cfg.layers_per_stage); !part.ok()) {
    return FieldError("tp", std::string(part.status().message()));
  }
  return absl::OkStatus();
}

// The real MLP's sizes: `run` allocates its weights and a micro-batch's activations; `predict` under
// the fixed cost model sizes its messages from them.
absl::Status CheckRealModel(const RunConfig& cfg, bool for_run) {
  const MlpConfig mlp = cfg.Mlp();
  // Counted in double: the product of huge widths overflows int64.
  double weights = 0, widest = mlp.input_dim;
  for (int l = 0; l < mlp.num_layers(); ++l) {
    weights += static_cast<double>(mlp.in_dim(l)) * mlp.out_dim(l);
    widest = std::max<double>(widest, mlp.out_dim(l));
  }
  const double most = for_run ? kMaxModelFloats : kMaxPredictedFloats;
  const char* what = for_run ? "1 GiB of fp32" : "4 TiB of fp32";
  if (weights > most) {
    return FieldError("hidden", absl::StrFormat("the model has %.0f weights; at most %.0f (%s)", weights, most, what));
  }
  if (widest * cfg.microbatch_size > most) {
    return FieldError("microbatch_size",
                      absl::StrFormat("%d rows x the widest layer (%.0f) = %.0f activations; at most %.0f (%s)",
                                      cfg.microbatch_size, widest, widest * cfg.microbatch_size, most, what));
  }
  if (cfg.train_size < cfg.microbatch_size) {
    return FieldError("train_size", absl::StrCat(cfg.train_size, " is smaller than one micro-batch (",
                                                 cfg.microbatch_size, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status FieldError(const std::string& field, const std::string& why) {
  absl::Status st = absl::InvalidArgumentError(absl::StrCat(field, ": ", OneLine(why)));
  st.SetPayload(kFieldPayload, absl::Cord(field));
  return st;
}

absl::StatusOr<LinkSpec> ResolveLinks(const RunConfig& cfg) {
  auto spec = LinkSpecByName(cfg.link);
  if (!spec.ok()) return FieldError("link", std::string(spec.status().message()));
  RP_RETURN_IF_ERROR(CheckLinkOverrides(cfg));
  LinkSpec s = *spec;
  s.devices_per_node = cfg.devices_per_node;
  s.nics_per_node = cfg.nics_per_node;
  auto apply = [](std::optional<double> alpha_us, std::optional<double> gbps, std::optional<double> overhead_us,
                  LinkParams& p) {
    if (alpha_us) p.alpha = FromMicros(*alpha_us);
    if (gbps) p.bandwidth_gbps = *gbps;
    if (overhead_us) p.overhead = FromMicros(*overhead_us);
  };
  apply(cfg.alpha_us, cfg.bandwidth_gbps, cfg.overhead_us, s.intra_node);
  apply(cfg.alpha_us, cfg.bandwidth_gbps, cfg.overhead_us, s.inter_node);
  apply(cfg.intra_alpha_us, cfg.intra_bandwidth_gbps, cfg.intra_overhead_us, s.intra_node);
  apply(cfg.inter_alpha_us, cfg.inter_bandwidth_gbps, cfg.inter_overhead_us, s.inter_node);
  return s;
}

absl::Status ValidateConfig(const RunConfig& cfg, bool for_run) {
  RP_RETURN_IF_ERROR(CheckRanges(cfg));
  RP_RETURN_IF_ERROR(CheckUnusedFieldRanges(cfg));
  RP_RETURN_IF_ERROR(CheckLayout(cfg, for_run));
  RP_RETURN_IF_ERROR(CheckMoe(cfg, for_run));
  // Below kMinRealTimeScale the real clock's modeled time (wall ÷ scale) overflows within days.
  if (!cfg.time_scale_auto() && (!(cfg.time_scale >= kMinRealTimeScale) || cfg.time_scale > kMaxTimeScale)) {
    return FieldError("time_scale", absl::StrCat("must be in [", kMinRealTimeScale, ", ", kMaxTimeScale, "] or auto, got ",
                                                 Exact(cfg.time_scale)));
  }
  // Exactly the range comm's collectives take (0 here: one message per chunk).
  if (cfg.segment_bytes != 0 &&
      !comm::ValidateCollectiveOptions({.codec = cfg.codec, .segment_bytes = cfg.segment_bytes}).ok()) {
    return FieldError("segment_bytes", absl::StrCat("must be ", kSegmentBytesRange, ", got ", cfg.segment_bytes));
  }
  RP_RETURN_IF_ERROR(CheckCollectives(cfg));
  RP_ASSIGN_OR_RETURN(const LinkSpec links, ResolveLinks(cfg));
  std::string time_field;
  ModeledSizes sizes;
  double longest_op_ns = 0;
  RP_ASSIGN_OR_RETURN(const double op_ns, CheckCostModel(cfg, time_field, sizes, longest_op_ns));
  if (for_run && !cfg.virtual_time && !cfg.time_scale_auto()) {
    RP_RETURN_IF_ERROR(OpsFitTheWatchdog(cfg, longest_op_ns, cfg.time_scale, "time_scale"));
  }
  RP_RETURN_IF_ERROR(CheckTimeBudget(cfg, links, op_ns, time_field, sizes));
  // The real model: needed by `run`, and by `predict` in the fixed cost model (message sizes).
  RP_RETURN_IF_ERROR(CheckModelPartition(cfg));
  if (for_run || cfg.cost_model == CostModelKind::kFixed) RP_RETURN_IF_ERROR(CheckRealModel(cfg, for_run));
  for (const ConfigField& f : Fields()) {
    if (f.grammar != Grammar::kString) continue;
    const nlohmann::json v = f.get(cfg);
    RP_RETURN_IF_ERROR(CheckGrammar(f.name, Grammar::kString, v.get_ref<const std::string&>()));
  }
  RP_RETURN_IF_ERROR(CheckMessages(cfg, sizes));
  RP_RETURN_IF_ERROR(CheckMemory(for_run ? EstimateRunMemory(cfg) : EstimatePredictMemory(cfg)));
  return absl::OkStatus();
}

}  // namespace rp::apps
