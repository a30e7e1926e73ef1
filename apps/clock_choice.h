// Which clock a run uses and whether its host figures can be trusted (issue 13 §4; DESIGN.md "The
// time engine": "the time scale defaults to one the host can sustain — measured, not guessed").
//
// A run on the virtual clock needs no scale. On the real clock every modeled nanosecond takes
// time_scale wall nanoseconds; `time_scale = auto` (the default) measures the smallest scale this
// host keeps within kHostFidelityTarget before the run, with short trial runs of the same layout
// (schedule::ChooseTimeScale: a fresh executor per trial, no faults, no tracer). A forced scale is
// used as given; after the run, JudgeHostFidelity says whether the host kept it and, if not, which
// scale would have (schedule::SuggestTimeScale), so `run` can warn and the report can mark its
// measured figures as not trustworthy.
//
// Thread safety: ChooseClock runs executors (threads of its own) and returns when they are done.
//
// Example:
//   RP_ASSIGN_OR_RETURN(ClockChoice clock, ChooseClock(cfg, options));   // sets options.time_scale
//   ... run ...
//   const HostVerdict v = JudgeHostFidelity(clock, result.fidelity_host);
//   if (!v.trusted) warn(v.warning);
#pragma once

#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "apps/config.h"
#include "nlohmann/json.hpp"
#include "schedule/executor.h"
#include "schedule/time_scale.h"

namespace rp::apps {

// |fidelity.host| a real-clock run must stay within for its measured figures to stand for the
// emulated ones (1 %).
inline constexpr double kHostFidelityTarget = 0.01;

struct ClockChoice {
  enum class Mode { kVirtual, kAuto, kForced };
  Mode mode = Mode::kVirtual;
  double scale = 1;        // the scale the run uses (1 on the virtual clock: unused)
  bool sustained = true;   // auto: a trial kept |fidelity.host| within the target
  std::string reason;      // one line: why this scale
  std::vector<schedule::TimeScaleTrial> trials;  // auto: the calibration's trials
};
const char* ClockModeName(ClockChoice::Mode mode);  // "virtual", "auto", "forced"

// Resolves cfg.time_scale for a run of `options` (built from cfg) and sets options->time_scale.
// `calibration` bounds auto's trials. Errors: a trial's (a layout the executor refuses); a trial
// that failed at run time ends the calibration instead (schedule::ChooseTimeScale).
absl::StatusOr<ClockChoice> ChooseClock(const RunConfig& cfg, schedule::ExecutorOptions* options,
                                        const schedule::CalibrationOptions& calibration = {
                                            .target = kHostFidelityTarget});

struct HostVerdict {
  bool trusted = true;         // |fidelity.host| within the target (always on the virtual clock)
  double suggested_scale = 0;  // a scale that would have been kept (the run's when trusted)
  std::string warning;         // empty when trusted: one line naming a sustainable scale
  // When suggested_scale would make the longest op or message wait outlast the watchdog (the run
  // refuses such a scale): the watchdog_timeout it needs, s; else 0.
  double suggested_watchdog_s = 0;
};
// `watchdog_scale_limit` (WatchdogScaleLimit): a suggested scale at or above it would have its
// longest op or message wait outlast `watchdog_timeout_s`, and the warning says how long a watchdog
// it needs.
HostVerdict JudgeHostFidelity(const ClockChoice& clock, double fidelity_host, double watchdog_timeout_s = 0,
                              double watchdog_scale_limit = std::numeric_limits<double>::infinity());

// The report's host.time_scale_choice object (docs/report.md).
nlohmann::json ClockJson(const ClockChoice& clock, const HostVerdict& verdict);

// The longest a real-clock run of `options` may sleep for one message already sent: the predicted
// arrival − ready of its slowest message (schedule::Prediction::longest_transit: its transfer and
// latency, slowed by link faults, and the time it queued for busy ports), with the faults of
// `options` (slow links from their step on) and without --fault's slow links. The EP all-to-alls'
// blocks follow the run's routing, unknown before it: they are bounded by the largest a router can
// make them (schedule::BusiestBlockRouting; balanced routing, what a prediction assumes, is below a
// skewed router's busiest expert owner's traffic). A receiver's wait
// longer than the watchdog timeout is reported as a stall, as an op longer than it would be
// (CheckOpsFitTheWatchdog), so such a run is bad input too.
struct MessageWait {
  double transit_ns = 0;          // with every fault of `options`
  double healthy_transit_ns = 0;  // without the slow links of options.faults.op_faults
  int src = -1, dst = -1;         // the slowest message's global ranks (-1: no messages)
  // The EP all-to-alls' bound for any routing (Prediction::transit_bound of the busiest blocks)
  // is the longest: src, dst name the busiest blocks' slowest message.
  bool any_routing = false;
};
[[nodiscard]] absl::StatusOr<MessageWait> LongestMessageWait(const schedule::ExecutorOptions& options);
// InvalidArgument "--FIELD: ..." when the longest message wait takes watchdog_timeout or more of wall
// time at `time_scale`; FIELD is `field` when the run's messages take that long without the slow
// links, else "fault".
[[nodiscard]] absl::Status CheckMessagesFitTheWatchdog(const RunConfig& cfg, const MessageWait& wait,
                                                       double time_scale, const std::string& field);
// The time scale at which that wait takes exactly watchdog_timeout (+inf without messages).
double MessageWaitTimeScaleLimit(const RunConfig& cfg, const MessageWait& wait);

// What a real-clock run of `options` (built from cfg, with the fault flags) must fit in the watchdog
// timeout: its longest op × `op_factor` (what the fault flags add to it; ValidateConfig and
// CheckFaultFactors check a forced scale's) and its longest wait for one message.
struct WatchdogFit {
  double op_factor = 1;
  std::optional<MessageWait> message_wait;  // none: the predictor refused the plan (Create names why)
};
WatchdogFit WatchdogFitOf(const schedule::ExecutorOptions& options, double op_factor = 1);
// Before choosing the clock of a real-clock run (nothing to do on the virtual clock): the watchdog
// must outlast the wake-up margin each step starts with (schedule::StepStartWallMargin; else
// "--watchdog_timeout: ..."); a forced
// scale's message waits must fit (InvalidArgument "--time_scale: ..." or "--fault: ..."); with auto,
// `calibration`'s trials stay below the scale the ops and the messages allow (with a margin for the
// host), and a layout that outlasts the watchdog at the first trial's scale is refused naming
// --watchdog_timeout (or --fault) — a trial would fail as stalled.
[[nodiscard]] absl::Status FitTheWatchdog(const RunConfig& cfg, const WatchdogFit& fit,
                                          schedule::CalibrationOptions& calibration);
// The largest time scale at which the longest op and the longest wait for one message of `fit` stay
// within cfg.watchdog_timeout (+inf when nothing bounds it).
double WatchdogScaleLimit(const RunConfig& cfg, const WatchdogFit& fit);
// After auto chose `scale`: the same checks at it.
[[nodiscard]] absl::Status CheckChosenScaleFitsTheWatchdog(const RunConfig& cfg, const WatchdogFit& fit,
                                                           double scale);

// Everything above before a run of `options` (`run`, `timeline`): the watchdog fitted (FitTheWatchdog),
// the clock chosen (ChooseClock: with --time_scale=auto, after checking that the executor takes the
// options, trial runs announced on stderr as "ringpipe <command>: ..."; sets options->time_scale), and
// auto's scale checked (CheckChosenScaleFitsTheWatchdog). On an error, the status is the message to
// print and *exit_code its exit (apps/cli.h: bad input, or failed when the calibration failed).
absl::StatusOr<ClockChoice> PrepareClock(const char* command, const RunConfig& cfg, const WatchdogFit& fit,
                                         schedule::ExecutorOptions* options, int* exit_code);

// A run that failed at run time (`run`, `timeline`): its host.time_scale_choice — its clock and why,
// and whether the host kept the scale over the steps committed before the failure (their upper median
// by measured time, as a run's headline step; null when none was committed). The failed report had no
// host section: nothing said which clock or scale its steps' measured times were taken at.
nlohmann::json FailedRunClockJson(const RunConfig& cfg, const ClockChoice& clock, const WatchdogFit& fit,
                                  const std::vector<schedule::StepRecord>& steps);

}  // namespace rp::apps
