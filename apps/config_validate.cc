// ValidateConfig: everything a run needs, checked before anything runs; the config is not changed.
#include <algorithm>
#include <cmath>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "apps/config.h"
#include "apps/memory_estimate.h"
#include "comm/collectives.h"
#include "runtime/link_models.h"
#include "runtime/status_macros.h"

namespace rp::apps {
namespace {

// Sizes that bound what BuildPlan allocates (see there).
constexpr double kMaxModelFloats = double{1 << 28};
constexpr int64_t kMaxProgramSlots = int64_t{1} << 22;
// Every modeled time is int64 nanoseconds: a single op may last at most 1e9 ms (1e15 ns), a whole
// step, and T1 (every compute op of the global batch on one device), at most 1e18 ns (~32 years),
// well inside 2^63 ≈ 9.2e18 so that sums of a few of them still fit.
constexpr double kMaxOpNs = 1e15;
constexpr double kMaxTotalNs = 1e18;

absl::Status CheckRanges(const RunConfig& cfg) {
  for (const ConfigField& f : Fields()) {
    if (f.grammar != Grammar::kInt || f.lo > f.hi) continue;
    const nlohmann::json v = f.get(cfg);
    const double x = v.get<double>();
    if (x < static_cast<double>(f.lo) || x > static_cast<double>(f.hi)) {
      return FieldError(f.name, absl::StrCat("must be in ", f.lo, "..", f.hi, ", got ", ShortDump(v)));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckPerStage(const char* field, const std::vector<double>& v, int pp, bool allow_empty) {
  if (v.empty()) {
    if (allow_empty) return absl::OkStatus();
    return FieldError(field, "needs one value or one per pipeline stage");
  }
  if (v.size() != 1 && v.size() != static_cast<size_t>(pp)) {
    return FieldError(field, absl::StrCat("has ", v.size(), " values; expected 1 or one per pipeline stage (pp=",
                                          pp, ")"));
  }
  for (size_t i = 0; i < v.size(); ++i) {
    if (!(v[i] >= 0) || v[i] > kMaxOpNs / 1e6) {
      return FieldError(field, absl::StrCat("value ", i, " (", v[i], ") must be in [0, 1e9] ms"));
    }
  }
  return absl::OkStatus();
}

double At(const std::vector<double>& list, int s) { return list.size() == 1 ? list[0] : list[static_cast<size_t>(s)]; }

absl::Status CheckLayout(const RunConfig& cfg, bool for_run) {
  const int64_t world = int64_t{cfg.dp} * cfg.pp * cfg.tp;
  const int64_t max_world = for_run ? kMaxRunDevices : kMaxPredictDevices;
  if (world > max_world) {
    return FieldError("dp", absl::StrCat("dp x pp x tp = ", world, " devices; `ringpipe ", for_run ? "run" : "predict",
                                         "` takes at most ", max_world,
                                         for_run ? " (use `ringpipe predict` for larger layouts)" : ""));
  }
  if (cfg.virtual_stages > 1 && cfg.schedule != schedule::ScheduleKind::kInterleaved) {
    return FieldError("virtual_stages", absl::StrCat(cfg.virtual_stages, " needs --schedule=interleaved (schedule is ",
                                                     schedule::ScheduleName(cfg.schedule), ")"));
  }
  if (cfg.schedule == schedule::ScheduleKind::kInterleaved && cfg.microbatches % cfg.pp != 0) {
    return FieldError("microbatches", absl::StrCat("the interleaved schedule needs a multiple of pp=", cfg.pp,
                                                   ", got ", cfg.microbatches));
  }
  // The schedule program holds a few ops per (pipeline rank, model chunk, micro-batch).
  if (const int64_t slots = int64_t{cfg.pp} * cfg.virtual_stages * cfg.microbatches; slots > kMaxProgramSlots) {
    return FieldError("microbatches", absl::StrCat("pp x virtual_stages x microbatches = ", slots, "; at most ",
                                                   kMaxProgramSlots, " (the schedule program must fit in memory)"));
  }
  if (cfg.straggler_rank >= cfg.world_size()) {
    return FieldError("straggler_rank", absl::StrCat("must be below the world size ", cfg.world_size()));
  }
  return absl::OkStatus();
}

// Per pipeline rank: the modeled F + B + optimizer of one micro-batch in ns (the busiest rank's).
absl::StatusOr<double> CheckCostModel(const RunConfig& cfg, std::string& time_field) {
  double max_op = 0;
  if (cfg.cost_model == CostModelKind::kFixed) {
    RP_RETURN_IF_ERROR(CheckPerStage("forward_ms", cfg.forward_ms, cfg.pp, false));
    RP_RETURN_IF_ERROR(CheckPerStage("backward_ms", cfg.backward_ms, cfg.pp, false));
    RP_RETURN_IF_ERROR(CheckPerStage("weight_grad_ms", cfg.weight_grad_ms, cfg.pp, true));
    double max_f = 0, max_b = 0;
    for (int s = 0; s < cfg.pp; ++s) {
      const double b = At(cfg.backward_ms, s);
      if (!cfg.weight_grad_ms.empty() && At(cfg.weight_grad_ms, s) > b) {
        return FieldError("weight_grad_ms", absl::StrCat("stage ", s, ": ", At(cfg.weight_grad_ms, s),
                                                         " ms is more than its whole backward (", b, " ms)"));
      }
      max_f = std::max(max_f, At(cfg.forward_ms, s) * 1e6);
      max_b = std::max(max_b, b * 1e6);
      max_op = std::max(max_op, (At(cfg.forward_ms, s) + b) * 1e6);
    }
    time_field = max_b >= max_f ? "backward_ms" : "forward_ms";
  } else {
    if (auto peak = schedule::DevicePeakTflops(cfg.flops.device); !peak.ok()) {
      return FieldError("flops_device", std::string(peak.status().message()));
    }
    if (!(cfg.flops.efficiency > 0 && cfg.flops.efficiency <= 1)) {
      return FieldError("flops_efficiency", absl::StrCat("must be in (0, 1], got ", cfg.flops.efficiency));
    }
    if (cfg.flops.layers < cfg.num_model_stages()) {
      return FieldError("pp", absl::StrCat(cfg.num_model_stages(), " model stages (pp=", cfg.pp, " x virtual_stages=",
                                           cfg.virtual_stages, ") but the described model has flops_layers=",
                                           cfg.flops.layers));
    }
    if (cfg.flops.hidden % cfg.tp != 0) {
      return FieldError("tp", absl::StrCat("flops_hidden=", cfg.flops.hidden, " is not divisible by tp=", cfg.tp));
    }
    // The field that makes the described model big: the largest ratio to the preset's value.
    const double ratios[] = {cfg.flops.layers / 24.0, cfg.flops.hidden / 2048.0, cfg.flops.seq_len / 2048.0,
                             static_cast<double>(cfg.flops.microbatch_size)};
    const char* names[] = {"flops_layers", "flops_hidden", "flops_seq_len", "flops_microbatch_size"};
    time_field = names[std::max_element(std::begin(ratios), std::end(ratios)) - std::begin(ratios)];
    auto cost = schedule::CostOfTransformer(cfg.flops, cfg.pp, cfg.virtual_stages, cfg.tp);
    if (!cost.ok()) return FieldError(time_field, std::string(cost.status().message()));
    for (const schedule::StageCost& c : cost->cost.stages) {
      max_op = std::max(max_op, static_cast<double>((c.forward + c.backward).count()));
    }
  }
  if (!(cfg.optimizer_ms >= 0) || cfg.optimizer_ms > kMaxOpNs / 1e6) {
    return FieldError("optimizer_ms", absl::StrCat("must be in [0, 1e9] ms, got ", cfg.optimizer_ms));
  }
  if (!(cfg.straggler_factor >= 1)) return FieldError("straggler_factor", "must be a finite number >= 1");
  if (cfg.straggler_factor * std::max(max_op, cfg.optimizer_ms * 1e6) > 2 * kMaxOpNs) {
    return FieldError("straggler_factor",
                      absl::StrFormat("%g x the slowest op (%g ms) exceeds 2e9 ms", cfg.straggler_factor, max_op / 1e6));
  }
  return max_op * cfg.straggler_factor + cfg.optimizer_ms * 1e6 * cfg.straggler_factor;
}

absl::Status CheckLinkOverrides(const RunConfig& cfg) {
  for (auto [name, v, alpha] : {std::tuple{"alpha_us", cfg.alpha_us, true}, {"bandwidth_gbps", cfg.bandwidth_gbps, false},
                                {"intra_alpha_us", cfg.intra_alpha_us, true},
                                {"intra_bandwidth_gbps", cfg.intra_bandwidth_gbps, false},
                                {"inter_alpha_us", cfg.inter_alpha_us, true},
                                {"inter_bandwidth_gbps", cfg.inter_bandwidth_gbps, false}}) {
    if (v == -1) continue;  // unset: the preset's
    if (!(v >= 0)) return FieldError(name, absl::StrCat("must be >= 0, got ", v));
    // Each latency must fit the time base by itself; a tiny bandwidth makes every byte last long.
    if (alpha && v > kMaxOpNs / 1e3) return FieldError(name, absl::StrCat("must be at most 1e12 us, got ", v));
    if (!alpha && v != 0 && v < 1e-6) {
      return FieldError(name, absl::StrCat("must be 0 (infinite) or at least 1e-6 GB/s (1 kB/s), got ", v));
    }
  }
  return absl::OkStatus();
}

// The modeled step and T1 must fit the time base: an upper bound of each, in double.
absl::Status CheckTimeBudget(const RunConfig& cfg, const LinkSpec& links, double op_ns, const std::string& time_field) {
  const double m = cfg.microbatches, p = cfg.pp, v = cfg.virtual_stages;
  const double world = static_cast<double>(cfg.world_size());
  const double compute = (m + p) * v * op_ns;  // every schedule's step <= its ops run one after another
  const double t1 = world * m * op_ns;
  double alpha = 0, min_bw = 0;
  for (const LinkParams& l : {links.intra_node, links.inter_node}) {
    alpha = std::max(alpha, static_cast<double>((l.alpha + l.overhead).count()));
    if (l.bandwidth_gbps > 0) min_bw = min_bw == 0 ? l.bandwidth_gbps : std::min(min_bw, l.bandwidth_gbps);
  }
  // Messages per step on one device: p2p (2 per op pair), TP rings, DP ring steps of each bucket.
  const double messages = 4 * m * v * (1 + 2 * (cfg.tp - 1)) + 2.0 * (cfg.dp - 1) * cfg.buckets * v * 64;
  const double bytes_per_ns = min_bw;  // GB/s = bytes per ns
  const double largest = std::ldexp(1.0, 34);  // 16 GiB: above any message the validated sizes allow
  const double comm = messages * (alpha + (bytes_per_ns > 0 ? largest / bytes_per_ns : 0));
  if (compute <= kMaxTotalNs && t1 <= kMaxTotalNs && comm <= kMaxTotalNs) return absl::OkStatus();
  std::string field = time_field;
  if (comm > std::max(compute, t1)) {
    field = cfg.alpha_us >= 0 || cfg.bandwidth_gbps >= 0 ? (alpha * messages > comm / 2 ? "alpha_us" : "bandwidth_gbps")
            : cfg.inter_alpha_us >= 0 || cfg.inter_bandwidth_gbps >= 0
                ? (alpha * messages > comm / 2 ? "inter_alpha_us" : "inter_bandwidth_gbps")
            : cfg.intra_alpha_us >= 0 || cfg.intra_bandwidth_gbps >= 0
                ? (alpha * messages > comm / 2 ? "intra_alpha_us" : "intra_bandwidth_gbps")
                : "link";
  }
  return FieldError(field, absl::StrFormat(
                               "the modeled times would not fit: up to %.3g ms per step (compute %.3g, "
                               "communication %.3g) and T1 %.3g ms with microbatches=%d, pp=%d, %d devices; at "
                               "most 1e12 ms",
                               std::max(compute, comm) / 1e6, compute / 1e6, comm / 1e6, t1 / 1e6, cfg.microbatches,
                               cfg.pp, cfg.world_size()));
}

absl::Status CheckRealModel(const RunConfig& cfg) {
  const MlpConfig mlp = cfg.Mlp();
  // BuildPlan allocates the model's weights and one micro-batch's activations to size the messages:
  // bound both (counted in double: the product of huge widths overflows int64).
  double weights = 0, widest = mlp.input_dim;
  for (int l = 0; l < mlp.num_layers(); ++l) {
    weights += static_cast<double>(mlp.in_dim(l)) * mlp.out_dim(l);
    widest = std::max<double>(widest, mlp.out_dim(l));
  }
  if (weights > kMaxModelFloats) {
    return FieldError("hidden", absl::StrFormat("the model has %.0f weights; at most %.0f (1 GiB of fp32)", weights,
                                                kMaxModelFloats));
  }
  if (widest * cfg.microbatch_size > kMaxModelFloats) {
    return FieldError("microbatch_size",
                      absl::StrFormat("%d rows x the widest layer (%.0f) = %.0f activations; at most %.0f (1 GiB of fp32)",
                                      cfg.microbatch_size, widest, widest * cfg.microbatch_size, kMaxModelFloats));
  }
  if (cfg.num_model_stages() > mlp.num_layers()) {
    return FieldError("pp", absl::StrCat(cfg.num_model_stages(), " model stages (pp=", cfg.pp, " x virtual_stages=",
                                         cfg.virtual_stages, ") but the model has only ", mlp.num_layers(),
                                         " layers (--hidden has ", cfg.hidden.size(), " widths)"));
  }
  if (!cfg.layers_per_stage.empty() && cfg.layers_per_stage.size() != static_cast<size_t>(cfg.num_model_stages())) {
    return FieldError("layers_per_stage", absl::StrCat("has ", cfg.layers_per_stage.size(),
                                                       " entries; expected one per model stage (pp x virtual_stages = ",
                                                       cfg.num_model_stages(), ")"));
  }
  // Without TP the partition can fail only on layers_per_stage; with it, on a width TP must divide.
  if (auto part = PartitionMlp(mlp, cfg.num_model_stages(), 1, cfg.layers_per_stage); !part.ok()) {
    return FieldError("layers_per_stage", std::string(part.status().message()));
  }
  if (auto part = PartitionMlp(mlp, cfg.num_model_stages(), cfg.tp, cfg.layers_per_stage); !part.ok()) {
    return FieldError("tp", std::string(part.status().message()));
  }
  if (absl::Status st = ValidateOptimizerConfig(cfg.optimizer); !st.ok()) {
    const std::string msg(st.message());
    for (const char* f : {"lr", "momentum", "weight_decay"}) {
      if (msg.rfind(f, 0) == 0) return FieldError(f, msg.substr(msg.find_first_of(": ") + 1));
    }
    return FieldError("optimizer", msg);
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
  auto apply = [](double alpha_us, double gbps, LinkParams& p) {
    if (alpha_us >= 0) p.alpha = FromMicros(alpha_us);
    if (gbps >= 0) p.bandwidth_gbps = gbps;
  };
  apply(cfg.alpha_us, cfg.bandwidth_gbps, s.intra_node);
  apply(cfg.alpha_us, cfg.bandwidth_gbps, s.inter_node);
  apply(cfg.intra_alpha_us, cfg.intra_bandwidth_gbps, s.intra_node);
  apply(cfg.inter_alpha_us, cfg.inter_bandwidth_gbps, s.inter_node);
  return s;
}

absl::Status ValidateConfig(const RunConfig& cfg, bool for_run) {
  RP_RETURN_IF_ERROR(CheckRanges(cfg));
  RP_RETURN_IF_ERROR(CheckLayout(cfg, for_run));
  if (!(cfg.time_scale > 0) || cfg.time_scale > 1000) {
    return FieldError("time_scale", absl::StrCat("must be in (0, 1000], got ", cfg.time_scale));
  }
  // Exactly the range comm's collectives take (0 here: one message per chunk).
  if (cfg.segment_bytes != 0 &&
      !comm::ValidateCollectiveOptions({.codec = cfg.codec, .segment_bytes = cfg.segment_bytes}).ok()) {
    return FieldError("segment_bytes", absl::StrCat("must be 0 (one message per chunk) or a multiple of 4 in "
                                                    "[4, 1G], got ", cfg.segment_bytes));
  }
  RP_ASSIGN_OR_RETURN(const LinkSpec links, ResolveLinks(cfg));
  std::string time_field;
  RP_ASSIGN_OR_RETURN(const double op_ns, CheckCostModel(cfg, time_field));
  RP_RETURN_IF_ERROR(CheckTimeBudget(cfg, links, op_ns, time_field));
  // The real model: needed by `run`, and by `predict` in the fixed cost model (message sizes).
  if (for_run || cfg.cost_model == CostModelKind::kFixed) RP_RETURN_IF_ERROR(CheckRealModel(cfg));
  for (const ConfigField& f : Fields()) {
    if (f.grammar != Grammar::kString) continue;
    const nlohmann::json v = f.get(cfg);
    RP_RETURN_IF_ERROR(CheckGrammar(f.name, Grammar::kString, v.get_ref<const std::string&>()));
  }
  RP_RETURN_IF_ERROR(CheckMemory(for_run ? EstimateRunMemory(cfg) : EstimatePredictMemory(cfg)));
  return absl::OkStatus();
}

}  // namespace rp::apps
