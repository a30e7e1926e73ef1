#include "apps/clock_choice.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "apps/cli.h"
#include "apps/fault_flags.h"
#include "runtime/status_macros.h"
#include "runtime/time.h"
#include "schedule/metrics.h"
#include "schedule/plan.h"
#include "schedule/predictor.h"

namespace rp::apps {

const char* ClockModeName(ClockChoice::Mode mode) {
  switch (mode) {
    case ClockChoice::Mode::kVirtual: return "virtual";
    case ClockChoice::Mode::kAuto: return "auto";
    case ClockChoice::Mode::kForced: return "forced";
  }
  return "virtual";
}

absl::StatusOr<ClockChoice> ChooseClock(const RunConfig& cfg, schedule::ExecutorOptions* options,
                                        const schedule::CalibrationOptions& calibration) {
  ClockChoice out;
  if (cfg.virtual_time) {
    out.reason = "virtual clock: modeled time does not wait for the wall clock";
    return out;
  }
  if (!cfg.time_scale_auto()) {
    out.mode = ClockChoice::Mode::kForced;
    out.scale = cfg.time_scale;
    options->time_scale = cfg.time_scale;
    out.reason = absl::StrFormat("time scale %g given by --time_scale", cfg.time_scale);
    return out;
  }
  out.mode = ClockChoice::Mode::kAuto;
  RP_ASSIGN_OR_RETURN(schedule::TimeScaleChoice c, schedule::ChooseTimeScale(*options, calibration));
  out.scale = c.scale;
  out.sustained = c.sustained;
  out.reason = c.reason;
  out.trials = std::move(c.trials);
  options->time_scale = c.scale;
  return out;
}

HostVerdict JudgeHostFidelity(const ClockChoice& clock, double fidelity_host, double watchdog_timeout_s,
                              double watchdog_scale_limit) {
  HostVerdict v;
  if (clock.mode == ClockChoice::Mode::kVirtual) return v;
  v.suggested_scale = schedule::SuggestTimeScale(clock.scale, fidelity_host, kHostFidelityTarget);
  if (std::isfinite(fidelity_host) && std::abs(fidelity_host) <= kHostFidelityTarget) return v;
  v.trusted = false;
  // A scale whose longest op or message wait outlasts the watchdog is refused: say what it needs.
  if (v.suggested_scale >= watchdog_scale_limit) {
    v.suggested_watchdog_s = watchdog_timeout_s * v.suggested_scale / watchdog_scale_limit;
  }
  const std::string watchdog =
      v.suggested_watchdog_s > 0
          ? absl::StrFormat(" with watchdog_timeout raised above %g s (its longest op or wait for one message "
                            "takes that long at that scale)",
                            v.suggested_watchdog_s)
          : "";
  // Past the largest scale time_scale takes, naming the estimate would suggest a refused value.
  const std::string remedy =
      v.suggested_scale > kMaxTimeScale
          ? absl::StrFormat("no time scale up to %g (the largest time_scale takes) would likely keep up (the "
                            "estimate is %g); the virtual clock (--virtual_time) needs none",
                            kMaxTimeScale, v.suggested_scale)
          : absl::StrFormat("time scale %g would likely keep up%s%s", v.suggested_scale, watchdog,
                            clock.mode == ClockChoice::Mode::kForced ? " (or omit --time_scale: auto measures one)"
                                                                     : "");
  v.warning = absl::StrFormat(
      "the host did not keep time scale %g: measured step differs from emulated by %+.1f %% (target "
      "within %g %%), so measured figures are the host's, not the model's; %s",
      clock.scale, 100 * fidelity_host, 100 * kHostFidelityTarget, remedy);
  return v;
}

nlohmann::json ClockJson(const ClockChoice& clock, const HostVerdict& verdict) {
  nlohmann::json trials = nlohmann::json::array();
  for (const schedule::TimeScaleTrial& t : clock.trials) {
    nlohmann::json trial = {{"scale", t.scale},
                            {"fidelity_host", t.failure.empty() ? nlohmann::json(t.fidelity_host) : nlohmann::json(nullptr)},
                            {"wall_seconds", t.wall_seconds}};
    if (!t.failure.empty()) trial["failure"] = t.failure;  // the trial failed at run time
    trials.push_back(std::move(trial));
  }
  // The virtual clock has no time scale (no wall clock paces it): its scale and suggestion are null.
  const bool virtual_clock = clock.mode == ClockChoice::Mode::kVirtual;
  return {{"mode", ClockModeName(clock.mode)},
          {"scale", virtual_clock ? nlohmann::json(nullptr) : nlohmann::json(clock.scale)},
          // Only auto calibrates: a forced scale (or the virtual clock) has no calibration to have
          // sustained it (it said true).
          {"sustained_in_calibration",
           clock.mode == ClockChoice::Mode::kAuto ? nlohmann::json(clock.sustained) : nlohmann::json(nullptr)},
          {"reason", clock.reason},
          {"calibration_trials", std::move(trials)},
          {"host_fidelity_trusted", verdict.trusted},
          {"suggested_scale", virtual_clock ? nlohmann::json(nullptr) : nlohmann::json(verdict.suggested_scale)},
          {"suggested_watchdog_timeout", verdict.suggested_watchdog_s > 0
                                             ? nlohmann::json(verdict.suggested_watchdog_s)
                                             : nlohmann::json(nullptr)}};
}

namespace {

// The predicted longest transit of `options`' plan at its last step (every slow link acts by then).
// With EP all-to-alls, whose blocks follow the run's routing (unknown before the run), at least the
// transit bound of a prediction whose blocks are as large as a router can make them
// (schedule::BusiestBlockRouting; Prediction::transit_bound): a skewed router changes both the
// blocks and the order messages meet in at the ports, and its longest transit exceeded balanced
// routing's by 25 % and the busiest blocks' own longest transit by as much
// (tests/apps/message_wait_test.cc).
absl::StatusOr<MessageWait> PredictLongestTransit(const schedule::ExecutorOptions& options) {
  RP_ASSIGN_OR_RETURN(const schedule::ExecutionPlan plan,
                      schedule::BuildPlan(schedule::PlanOptionsFor(options)));
  schedule::PredictOptions popts = schedule::PredictOptionsFor(options);
  popts.step = std::max(0, options.steps - 1);
  const auto wait = [](const schedule::Prediction& q, Nanos transit, bool any_routing) {
    return MessageWait{.transit_ns = static_cast<double>(transit.count()),
                       .healthy_transit_ns = static_cast<double>(transit.count()),
                       .src = q.longest_transit_src,
                       .dst = q.longest_transit_dst,
                       .any_routing = any_routing};
  };
  RP_ASSIGN_OR_RETURN(const schedule::Prediction p, schedule::Predict(plan, popts));
  if (plan.has_ep_exchanges()) {
    const schedule::StepRouting busiest =
        schedule::BusiestBlockRouting(options.model, options.grid.dp, options.ep,
                                      options.program.num_micro_batches, options.microbatch_size);
    popts.routing = &busiest;
    RP_ASSIGN_OR_RETURN(const schedule::Prediction any, schedule::Predict(plan, popts));
    if (any.transit_bound > p.longest_transit) return wait(any, any.transit_bound, true);
  }
  return wait(p, p.longest_transit, false);
}

}  // namespace

absl::StatusOr<MessageWait> LongestMessageWait(const schedule::ExecutorOptions& options) {
  RP_ASSIGN_OR_RETURN(MessageWait w, PredictLongestTransit(options));
  schedule::ExecutorOptions healthy = options;
  std::erase_if(healthy.faults.op_faults, [](const OpFault& f) { return f.kind == OpFaultKind::kSlowLink; });
  if (healthy.faults.op_faults.size() != options.faults.op_faults.size()) {
    RP_ASSIGN_OR_RETURN(const MessageWait h, PredictLongestTransit(healthy));
    w.healthy_transit_ns = h.transit_ns;
  }
  return w;
}

absl::Status CheckMessagesFitTheWatchdog(const RunConfig& cfg, const MessageWait& wait, double time_scale,
                                         const std::string& field) {
  const double wall_s = wait.transit_ns * time_scale / 1e9;
  if (wall_s < cfg.watchdog_timeout) return absl::OkStatus();
  const bool slowed = wait.healthy_transit_ns * time_scale / 1e9 < cfg.watchdog_timeout;
  return absl::InvalidArgumentError(absl::StrFormat(
      "--%s: at time scale %g the longest wait for one message (rank %d -> rank %d, %s%g ms modeled from "
      "ready to arrival%s) takes %g s of wall time, not less than watchdog_timeout (%g s), which would "
      "report its receiver as stalled: %s",
      slowed ? "fault" : field, time_scale, wait.src, wait.dst,
      wait.any_routing ? "whichever way the router sends the EP all-to-alls' tokens, up to " : "",
      wait.transit_ns / 1e6,
      slowed ? absl::StrFormat(", %g ms without the slow links", wait.healthy_transit_ns / 1e6) : "", wall_s,
      cfg.watchdog_timeout,
      slowed ? "lower the slow link's factor or the time scale, or raise watchdog_timeout"
             : "lower the time scale or raise watchdog_timeout"));
}

double MessageWaitTimeScaleLimit(const RunConfig& cfg, const MessageWait& wait) {
  if (!(wait.transit_ns > 0)) return std::numeric_limits<double>::infinity();
  return cfg.watchdog_timeout * 1e9 / wait.transit_ns;
}

WatchdogFit WatchdogFitOf(const schedule::ExecutorOptions& options, double op_factor) {
  WatchdogFit fit;
  fit.op_factor = op_factor;
  if (options.virtual_time) return fit;
  if (absl::StatusOr<MessageWait> w = LongestMessageWait(options); w.ok()) fit.message_wait = *w;
  return fit;
}

absl::Status FitTheWatchdog(const RunConfig& cfg, const WatchdogFit& fit,
                            schedule::CalibrationOptions& calibration) {
  if (cfg.virtual_time) return absl::OkStatus();
  const double margin_s = static_cast<double>(schedule::StepStartWallMargin(cfg.world_size()).count()) / 1e9;
  if (margin_s >= cfg.watchdog_timeout) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--watchdog_timeout: on a real clock every step starts %g ms of wall time after its boundary (1 ms "
        "+ 5 us for each of the %d devices to wake), not less than watchdog_timeout (%g s), which would "
        "report each step's start as a stall: raise watchdog_timeout",
        margin_s * 1e3, cfg.world_size(), cfg.watchdog_timeout));
  }
  if (!cfg.time_scale_auto()) {
    return fit.message_wait ? CheckMessagesFitTheWatchdog(cfg, *fit.message_wait, cfg.time_scale, "time_scale")
                            : absl::OkStatus();
  }
  RP_ASSIGN_OR_RETURN(const double op_limit, WatchdogTimeScaleLimit(cfg, fit.op_factor));
  if (op_limit <= calibration.start) {
    RP_RETURN_IF_ERROR(CheckOpsFitTheWatchdog(cfg, calibration.start, "watchdog_timeout", fit.op_factor));
  }
  // The run's longest message wait too (the trials have no faults: theirs is no longer).
  const double message_limit = fit.message_wait ? MessageWaitTimeScaleLimit(cfg, *fit.message_wait)
                                                : std::numeric_limits<double>::infinity();
  if (message_limit <= calibration.start) {
    RP_RETURN_IF_ERROR(
        CheckMessagesFitTheWatchdog(cfg, *fit.message_wait, calibration.start, "watchdog_timeout"));
  }
  const double limit = 0.9 * std::min(op_limit, message_limit);
  if (limit < calibration.max_scale) {
    calibration.max_scale = std::max(limit, calibration.start);
    calibration.max_scale_why = absl::StrFormat(
        "at which the longest %s takes 90 %% of watchdog_timeout (%g s)",
        op_limit <= message_limit ? "op" : "wait for one message", cfg.watchdog_timeout);
  }
  return absl::OkStatus();
}

double WatchdogScaleLimit(const RunConfig& cfg, const WatchdogFit& fit) {
  absl::StatusOr<double> ops = WatchdogTimeScaleLimit(cfg, fit.op_factor);
  const double op_limit = ops.ok() ? *ops : std::numeric_limits<double>::infinity();
  return fit.message_wait ? std::min(op_limit, MessageWaitTimeScaleLimit(cfg, *fit.message_wait)) : op_limit;
}

absl::Status CheckChosenScaleFitsTheWatchdog(const RunConfig& cfg, const WatchdogFit& fit, double scale) {
  RP_RETURN_IF_ERROR(CheckOpsFitTheWatchdog(cfg, scale, "watchdog_timeout", fit.op_factor));
  return fit.message_wait ? CheckMessagesFitTheWatchdog(cfg, *fit.message_wait, scale, "watchdog_timeout")
                          : absl::OkStatus();
}

nlohmann::json FailedRunClockJson(const RunConfig& cfg, const ClockChoice& clock, const WatchdogFit& fit,
                                  const std::vector<schedule::StepRecord>& steps) {
  if (steps.empty()) {
    nlohmann::json j = ClockJson(clock, HostVerdict{});
    if (clock.mode != ClockChoice::Mode::kVirtual) j["host_fidelity_trusted"] = j["suggested_scale"] = nullptr;
    return j;
  }
  std::vector<const schedule::StepRecord*> by_measured;
  for (const schedule::StepRecord& s : steps) by_measured.push_back(&s);
  std::stable_sort(by_measured.begin(), by_measured.end(),
                   [](const auto* a, const auto* b) { return a->measured_ms < b->measured_ms; });
  const schedule::StepRecord& median = *by_measured[by_measured.size() / 2];
  const double fidelity = schedule::Fidelity(FromMillis(median.measured_ms), FromMillis(median.emulated_ms));
  return ClockJson(clock, JudgeHostFidelity(clock, fidelity, cfg.watchdog_timeout, WatchdogScaleLimit(cfg, fit)));
}

absl::StatusOr<ClockChoice> PrepareClock(const char* command, const RunConfig& cfg, const WatchdogFit& fit,
                                         schedule::ExecutorOptions* options, int* exit_code) {
  *exit_code = kExitBadInput;
  schedule::CalibrationOptions calibration;
  calibration.target = kHostFidelityTarget;
  RP_RETURN_IF_ERROR(FitTheWatchdog(cfg, fit, calibration));
  if (!cfg.virtual_time && cfg.time_scale_auto()) {
    // Validate before calibrating: a layout the executor refuses is bad input, whatever the clock.
    if (auto check = schedule::Executor::Create(*options); !check.ok()) {
      const absl::Status st = FaultFlagStatus(check.status());  // an op index past a program: --fault
      if (st.code() != absl::StatusCode::kInvalidArgument) *exit_code = kExitFailed;
      return st;
    }
    std::fprintf(stderr, "ringpipe %s: time scale auto: measuring what this host keeps (short trial runs)...\n",
                 command);
  }
  absl::StatusOr<ClockChoice> clock = ChooseClock(cfg, options, calibration);
  if (!clock.ok()) {
    *exit_code = kExitFailed;
    return clock.status();
  }
  if (clock->mode == ClockChoice::Mode::kAuto) {
    std::fprintf(stderr, "ringpipe %s: %s\n", command, clock->reason.c_str());
    RP_RETURN_IF_ERROR(CheckChosenScaleFitsTheWatchdog(cfg, fit, clock->scale));
  }
  *exit_code = kExitOk;
  return clock;
}

}  // namespace rp::apps
