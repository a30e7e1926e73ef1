// The modeled-time and traffic budgets of a config (apps/config_budget.h).
#include "apps/config_budget.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "apps/moe_config.h"
#include "runtime/status_macros.h"
#include "schedule/workload_cost.h"

namespace rp::apps {
namespace budget {

std::string Exact(double x) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), x);
  return std::string(buf, r.ptr);
}

absl::Status CheckOpTimesMs(const char* field, const std::vector<double>& list) {
  for (size_t i = 0; i < list.size(); ++i) {
    if (!(list[i] >= 0) || list[i] > kMaxOpNs / 1e6) {
      return FieldError(field, absl::StrCat("entry ", i + 1, " of ", list.size(), " is ", Exact(list[i]),
                                            "; must be in [0, 1e9] ms"));
    }
  }
  return absl::OkStatus();
}

namespace {

absl::Status CheckPerStage(const char* field, const std::vector<double>& v, int pp, bool allow_empty) {
  if (v.empty()) {
    if (allow_empty) return absl::OkStatus();
    return FieldError(field, "needs one value or one per pipeline stage");
  }
  if (v.size() != 1 && v.size() != static_cast<size_t>(pp)) {
    return FieldError(field, absl::StrCat("has ", v.size(), " values; expected 1 or one per pipeline stage (pp=",
                                          pp, ")"));
  }
  return CheckOpTimesMs(field, v);
}

double At(const std::vector<double>& list, int s) { return list.size() == 1 ? list[0] : list[static_cast<size_t>(s)]; }

ModeledSizes MlpSizes(const RunConfig& cfg) {
  const MlpConfig mlp = cfg.Mlp();
  ModeledSizes s;
  double widest = mlp.input_dim;
  for (int l = 0; l < mlp.num_layers(); ++l) {
    s.gradient_bytes += (static_cast<double>(mlp.in_dim(l)) * mlp.out_dim(l) + mlp.out_dim(l)) * 4;
    widest = std::max<double>(widest, mlp.out_dim(l));
  }
  s.tp_bytes = 2.0 * cfg.microbatch_size * widest * 4 * std::max(1, mlp.num_layers());
  s.activation_bytes = cfg.microbatch_size * widest * 4;
  s.layers = std::max(1, mlp.num_layers());
  return s;
}

}  // namespace

// Per pipeline rank: the modeled F + B + optimizer of one micro-batch in ns (the busiest rank's).
// `longest_op` receives the longest single compute op in ns (an F, a B, or a fused F&B pair; the
// optimizer), stragglers included.
absl::StatusOr<double> CheckCostModel(const RunConfig& cfg, std::string& time_field, ModeledSizes& sizes,
                                      double& longest_op) {
  sizes = MlpSizes(cfg);
  double max_op = 0;
  const bool fused = cfg.fused_fb && (cfg.schedule == schedule::ScheduleKind::kDualPipeV || cfg.schedule == schedule::ScheduleKind::kDualPipe);
  longest_op = 0;
  auto op = [&](double f, double b) { longest_op = std::max(longest_op, fused ? f + b : std::max(f, b)); };
  if (cfg.cost_model == CostModelKind::kFixed) {
    RP_RETURN_IF_ERROR(CheckPerStage("forward_ms", cfg.forward_ms, cfg.pp, false));
    RP_RETURN_IF_ERROR(CheckPerStage("backward_ms", cfg.backward_ms, cfg.pp, false));
    RP_RETURN_IF_ERROR(CheckPerStage("weight_grad_ms", cfg.weight_grad_ms, cfg.pp, true));
    double max_f = 0, max_b = 0;
    for (int s = 0; s < cfg.pp; ++s) {
      const double b = At(cfg.backward_ms, s);
      if (!cfg.weight_grad_ms.empty() && At(cfg.weight_grad_ms, s) > b) {
        return FieldError("weight_grad_ms", absl::StrCat("stage ", s, ": ", Exact(At(cfg.weight_grad_ms, s)),
                                                         " ms is more than its whole backward (", Exact(b), " ms)"));
      }
      max_f = std::max(max_f, At(cfg.forward_ms, s) * 1e6);
      max_b = std::max(max_b, b * 1e6);
      max_op = std::max(max_op, (At(cfg.forward_ms, s) + b) * 1e6);
      op(At(cfg.forward_ms, s) * 1e6, b * 1e6);
    }
    time_field = max_b >= max_f ? "backward_ms" : "forward_ms";
  } else {
    if (auto peak = schedule::DevicePeakTflops(cfg.flops.device); !peak.ok()) {
      return FieldError("flops_device", std::string(peak.status().message()));
    }
    if (!(cfg.flops.efficiency > 0 && cfg.flops.efficiency <= 1)) {
      return FieldError("flops_efficiency", absl::StrCat("must be in (0, 1], got ", Exact(cfg.flops.efficiency)));
    }
    if (cfg.flops.layers < cfg.num_model_stages()) {
      return FieldError("pp", absl::StrCat(cfg.ModelStagesText(), " but the described model has flops_layers=",
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
    auto cost = schedule::CostOfTransformer(cfg.flops, cfg.pp, cfg.num_model_stages() / cfg.pp, cfg.tp);
    if (!cost.ok()) return FieldError(time_field, std::string(cost.status().message()));
    sizes = {.gradient_bytes = static_cast<double>(cost->bytes.gradient),
             .tp_bytes = static_cast<double>(cost->bytes.tp_allreduce),
             .activation_bytes = static_cast<double>(cost->bytes.activation_message),
             .layers = static_cast<double>(cfg.flops.layers)};
    for (const schedule::StageCost& c : cost->cost.stages) {
      max_op = std::max(max_op, static_cast<double>((c.forward + c.backward).count()));
      op(static_cast<double>(c.forward.count()), static_cast<double>(c.backward.count()));
    }
  }
  if (!(cfg.optimizer_ms >= 0) || cfg.optimizer_ms > kMaxOpNs / 1e6) {
    return FieldError("optimizer_ms", absl::StrCat("must be in [0, 1e9] ms, got ", Exact(cfg.optimizer_ms)));
  }
  if (!(cfg.straggler_factor >= 1)) return FieldError("straggler_factor", "must be a finite number >= 1");
  // The straggler's F + B of a stage (a fused F&B pair is one op) and its optimizer step, each given at
  // most 1e9 ms per op, may reach 2e9 ms together.
  if (cfg.straggler_factor * std::max(max_op, cfg.optimizer_ms * 1e6) > 2 * kMaxOpNs) {
    const bool optimizer = cfg.optimizer_ms * 1e6 > max_op;
    return FieldError("straggler_factor",
                      absl::StrCat(Exact(cfg.straggler_factor), " x ",
                                   optimizer ? "the optimizer step" : "the slowest stage's F + B", " (",
                                   Exact(optimizer ? cfg.optimizer_ms : max_op / 1e6), " ms) exceeds 2e9 ms"));
  }
  longest_op = std::max(longest_op, cfg.optimizer_ms * 1e6) * cfg.straggler_factor;
  return max_op * cfg.straggler_factor + cfg.optimizer_ms * 1e6 * cfg.straggler_factor;
}

namespace {
// Modeled messages and bytes one device puts on the fabric per step (upper bounds): ring segments
// of its DP buckets and TP all-reduces (comm/ring_timing.h: K segments per chunk), p2p messages.
struct Traffic {
  double messages = 0;
  double bytes = 0;
  double dp_messages = 0, tp_messages = 0;  // the DP and TP rings' parts of `messages` (the rest: p2p)
  // The EP all-to-alls' messages (not in `messages`: CheckMoe bounds them on their own); their
  // bytes are in `bytes`.
  double ep_messages = 0;
};

Traffic EstimateTraffic(const RunConfig& cfg, const ModeledSizes& sizes) {
  const double seg_elems = cfg.segment_bytes > 0 ? static_cast<double>(cfg.segment_bytes) / 4 : 0;
  // Segments of one chunk of a ring of n over `elements`, summed over `calls` calls of that total.
  auto segments = [&](double elements, double n, double calls) {
    return seg_elems > 0 ? std::ceil(elements / n / seg_elems) + calls : calls;
  };
  const double m = cfg.microbatches, chunks = cfg.chunks();
  Traffic t;
  const double n_dp = cfg.dp * (cfg.schedule == schedule::ScheduleKind::kDualPipe ? 2.0 : 1.0);
  if (n_dp > 1) {
    const double buckets = std::ceil(sizes.gradient_bytes / (cfg.bucket_mb * 1048576.0)) + chunks;
    t.dp_messages = 2 * (n_dp - 1) * segments(sizes.gradient_bytes / 4, n_dp, buckets);
    t.messages += t.dp_messages;
    t.bytes += 2 * sizes.gradient_bytes;
  }
  if (cfg.tp > 1) {
    const double passes = 2 * m * chunks;
    const double calls = std::ceil(sizes.layers / cfg.num_model_stages()) + 1;
    t.tp_messages = passes * 2 * (cfg.tp - 1) * segments(sizes.tp_bytes / 4, cfg.tp, calls);
    t.messages += t.tp_messages;
    t.bytes += passes * 2 * sizes.tp_bytes;
  }
  t.messages += 4 * m * chunks;
  t.bytes += 4 * m * chunks * sizes.activation_bytes;
  // A predict of 2^20-row micro-batches of 1 GiB EP rows at 1 MB/s passed the budget without them
  // and failed in the predictor without naming a field.
  if (absl::StatusOr<std::vector<int>> layers = ResolveMoeLayers(cfg); layers.ok()) {
    const EpTraffic ep = EpTrafficPerDeviceStep(cfg, static_cast<int>(layers->size()));
    t.ep_messages = ep.messages;
    t.bytes += ep.bytes;
  }
  return t;
}

}  // namespace

// The modeled step and T1 must fit the time base, and the step's messages the emulator: upper bounds.
absl::Status CheckTimeBudget(const RunConfig& cfg, const LinkSpec& links, double op_ns, const std::string& time_field,
                             const ModeledSizes& sizes, double link_factor) {
  const double m = cfg.microbatches, p = cfg.pp, v = cfg.chunks();
  const double world = static_cast<double>(cfg.world_size());
  const double compute = (m + p) * v * op_ns;  // every schedule's step <= its ops run one after another
  const double t1 = world * m * op_ns;
  double alpha = 0, min_bw = 0;
  for (const LinkParams& l : {links.intra_node, links.inter_node}) {
    alpha = std::max(alpha, static_cast<double>((l.alpha + l.overhead).count()));
    if (l.bandwidth_gbps > 0) min_bw = min_bw == 0 ? l.bandwidth_gbps : std::min(min_bw, l.bandwidth_gbps);
  }
  const Traffic traffic = EstimateTraffic(cfg, sizes);
  // GB/s = bytes per ns; every message may also wait for the others on its ports.
  const double messages = traffic.messages + traffic.ep_messages;
  const double comm = link_factor * (messages * alpha + (min_bw > 0 ? traffic.bytes * world / min_bw : 0));
  if (compute <= kMaxTotalNs && t1 <= kMaxTotalNs && comm <= kMaxTotalNs) return absl::OkStatus();
  std::string field = time_field;
  if (comm > std::max(compute, t1)) {
    const bool latency = alpha * messages > comm / 2;
    field = cfg.alpha_us || cfg.bandwidth_gbps || cfg.overhead_us
                ? (latency ? "alpha_us" : "bandwidth_gbps")
            : cfg.inter_alpha_us || cfg.inter_bandwidth_gbps || cfg.inter_overhead_us
                ? (latency ? "inter_alpha_us" : "inter_bandwidth_gbps")
            : cfg.intra_alpha_us || cfg.intra_bandwidth_gbps || cfg.intra_overhead_us
                ? (latency ? "intra_alpha_us" : "intra_bandwidth_gbps")
                : "link";
  }
  return FieldError(field, absl::StrFormat(
                               "the modeled times would not fit: up to %.3g ms per step (compute %.3g, "
                               "communication %.3g) and T1 %.3g ms with microbatches=%d, pp=%d, %d devices; at "
                               "most 1e12 ms",
                               std::max(compute, comm) / 1e6, compute / 1e6, comm / 1e6, t1 / 1e6, cfg.microbatches,
                               cfg.pp, cfg.world_size()));
}

// The step's modeled messages must stay within what the emulator and the predictor play in a
// reasonable time (kMaxMessagesPerDeviceStep).
absl::Status CheckMessages(const RunConfig& cfg, const ModeledSizes& sizes) {
  const Traffic traffic = EstimateTraffic(cfg, sizes);
  if (traffic.messages <= kMaxMessagesPerDeviceStep) return absl::OkStatus();
  // The field that makes them many: small segments, else the part that dominates (the DP ring's grows
  // with dp; the TP rings' with tp and microbatches; the p2p messages with microbatches). Where the TP
  // rings dominate, tp is named only if a single micro-batch would still be too many: `predict
  // --microbatches=1000000` named --tp, at its preset's 2, though 20 messages a micro-batch fit.
  const double p2p = traffic.messages - traffic.dp_messages - traffic.tp_messages;
  const double one_microbatch = traffic.dp_messages + (traffic.tp_messages + p2p) / cfg.microbatches;
  const char* field = cfg.segment_bytes > 0                                          ? "segment_bytes"
                      : traffic.dp_messages >= std::max(traffic.tp_messages, p2p) ? "dp"
                      : traffic.tp_messages >= p2p && one_microbatch > kMaxMessagesPerDeviceStep ? "tp"
                                                                                   : "microbatches";
  return FieldError(field, absl::StrFormat("about %.0f modeled messages per device per step (DP ring %.0f, TP "
                                           "rings %.0f, p2p %.0f; dp=%d, tp=%d, microbatches=%d, segment_bytes=%d "
                                           "on %.3g modeled gradient bytes); at most %.0f%s",
                                           traffic.messages, traffic.dp_messages, traffic.tp_messages, p2p, cfg.dp,
                                           cfg.tp, cfg.microbatches, cfg.segment_bytes, sizes.gradient_bytes,
                                           kMaxMessagesPerDeviceStep,
                                           cfg.segment_bytes > 0 ? ": use larger segments" : ""));
}

absl::Status OpsFitTheWatchdog(const RunConfig& cfg, double longest_op_ns, double time_scale,
                               const std::string& field, double op_factor) {
  const double op_ns = longest_op_ns * op_factor;
  const double wall_s = op_ns * time_scale / 1e9;
  if (wall_s >= cfg.watchdog_timeout) {
    return FieldError(field, absl::StrFormat(
        "at time scale %g the longest op (%g ms modeled%s) takes %g s of wall time, not less than "
        "watchdog_timeout (%g s), which would report it as a stall: lower the time scale or raise "
        "watchdog_timeout", time_scale, op_ns / 1e6,
        op_factor == 1 ? "" : absl::StrFormat(", with the fault flags' factor of %g", op_factor), wall_s,
        cfg.watchdog_timeout));
  }
  return absl::OkStatus();
}

}  // namespace budget

using budget::CheckCostModel;
using budget::CheckTimeBudget;
using budget::EstimateTraffic;
using budget::ModeledSizes;
using budget::OpsFitTheWatchdog;

absl::Status CheckFaultFactors(const RunConfig& cfg, double op_factor, double link_factor,
                               const std::string& op_field) {
  std::string time_field;
  ModeledSizes sizes;
  double longest_op_ns = 0;
  RP_ASSIGN_OR_RETURN(const double op_ns, CheckCostModel(cfg, time_field, sizes, longest_op_ns));
  RP_ASSIGN_OR_RETURN(const LinkSpec links, ResolveLinks(cfg));
  if (absl::Status st = CheckTimeBudget(cfg, links, op_ns * op_factor, time_field, sizes, link_factor); !st.ok()) {
    const std::string why(st.message());
    return absl::InvalidArgumentError(absl::StrFormat(
        "--%s: a factor of %g: %s", link_factor > 1 ? "fault" : op_field, std::max(op_factor, link_factor),
        why.substr(why.find(": ") + 2)));
  }
  if (!cfg.virtual_time && !cfg.time_scale_auto()) {
    return CheckOpsFitTheWatchdog(cfg, cfg.time_scale, op_factor > 1 ? op_field : "time_scale", op_factor);
  }
  return absl::OkStatus();
}

absl::StatusOr<double> ModeledMessagesPerReplicaStep(const RunConfig& cfg) {
  std::string time_field;
  ModeledSizes sizes;
  double longest_op_ns = 0;
  RP_RETURN_IF_ERROR(CheckCostModel(cfg, time_field, sizes, longest_op_ns).status());
  const budget::Traffic t = budget::EstimateTraffic(cfg, sizes);
  // The EP figure is a device's holding every MoE block; a replica holds each block once per TP shard.
  return t.messages * cfg.pp * cfg.tp + t.ep_messages * cfg.tp;
}

absl::Status CheckOpsFitTheWatchdog(const RunConfig& cfg, double time_scale, const std::string& field,
                                    double op_factor) {
  std::string time_field;
  ModeledSizes sizes;
  double longest_op_ns = 0;
  RP_RETURN_IF_ERROR(CheckCostModel(cfg, time_field, sizes, longest_op_ns).status());
  const absl::Status st = OpsFitTheWatchdog(cfg, longest_op_ns, time_scale, field, op_factor);
  return st.ok() ? st : absl::InvalidArgumentError(absl::StrCat("--", st.message()));
}

absl::StatusOr<double> WatchdogTimeScaleLimit(const RunConfig& cfg, double op_factor) {
  std::string time_field;
  ModeledSizes sizes;
  double longest_op_ns = 0;
  RP_RETURN_IF_ERROR(CheckCostModel(cfg, time_field, sizes, longest_op_ns).status());
  const double op_ns = longest_op_ns * op_factor;
  if (!(op_ns > 0)) return std::numeric_limits<double>::infinity();
  return cfg.watchdog_timeout * 1e9 / op_ns;
}

}  // namespace rp::apps
