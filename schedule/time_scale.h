// Choosing a real-clock time scale the host can keep (DESIGN.md "The time engine": "the time
// scale defaults to one the host can sustain — measured, not guessed").
//
// On a real clock every modeled nanosecond takes time_scale wall nanoseconds; the host must do an
// op's real work (kernels, wake-ups, the fabric) within its scaled modeled time, or the run falls
// behind and measured drifts from emulated (fidelity.host = measured / emulated − 1). How much
// scale that takes depends on the host, its load and the layout, so ChooseTimeScale measures it:
// short trial runs of the same options (a fresh executor each, `trial_steps` steps, no reference
// trainer, no tracer) at growing scales, until the last trial step's |fidelity.host| is within
// `target`. The next scale after a trial that missed is estimated from it — host overhead is
// roughly a fixed wall time, so fidelity shrinks as 1 / scale: next = scale × |fidelity| / target
// × 1.25, at least ×2 (in the search also at most ×64 and max_step, 16) — and the search
// stops at max_scale or when the next trial would overrun max_seconds of wall time in all (its
// cost estimated as this trial's wall time, which bounds setup and host work, plus trial_steps ×
// next × the emulated step: the modeled part); then the best scale tried is returned, marked not
// sustained (the run's own fidelity then says whether its figures are trusted). That estimate
// overshoots on a host whose fidelity falls off a cliff rather than as 1 / scale (throughput-bound
// below some scale, nearly exact above it: 256 devices here missed by 57 % at scale 1 and kept
// 0.01 % at the estimated 80, while 10 kept 0.03 %), so after the first pass the search bisects
// down between the last miss and it (refine_trials, refine_margin) and the run uses the smallest
// scale that passed.
//
// SuggestTimeScale is the same estimate for a run whose scale was forced: the scale at which its
// measured host fidelity would have been within target (at least ×2, never capped: a warning names
// a scale the estimate says keeps up, not one step of a search).
//
// Example:
//   RP_ASSIGN_OR_RETURN(TimeScaleChoice c, ChooseTimeScale(options));
//   options.time_scale = c.scale;   // c.reason says why, c.trials what was measured
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "schedule/executor.h"

namespace rp::schedule {

struct TimeScaleTrial {
  double scale = 1;
  double fidelity_host = 0;  // the last trial step's measured / emulated − 1
  double wall_seconds = 0;
  double emulated_step_ms = 0;  // the last trial step's modeled time (0: unknown)
  // Not empty: the trial failed at run time (the executor's message; fidelity_host is NaN). The
  // search stops there: the run's own failure, not the calibration, is what the run reports.
  std::string failure;
};

struct TimeScaleChoice {
  double scale = 1;
  bool sustained = false;  // a trial at `scale` kept |fidelity.host| <= target
  std::vector<TimeScaleTrial> trials;
  std::string reason;  // one line: the chosen scale and the trials behind it
};

struct CalibrationOptions {
  double target = 0.01;  // |fidelity.host| to reach
  double start = 1;      // first scale tried, > 0
  double max_scale = 4096;
  // Why max_scale is what it is, for the reason when the search stops there (e.g. "the largest whose
  // longest op stays within watchdog_timeout"); empty: the calibration's own limit.
  std::string max_scale_why;
  int trial_steps = 2;   // per trial; the last step is judged (the first warms up)
  double max_seconds = 60;  // wall-time budget of all trials
  // After a miss the next scale is at most max_step × this one (rounded up to a readable scale):
  // the estimate trusts fidelity ∝ 1 / scale, which a cliff-like host does not follow, and a trial's
  // cost grows with its scale (256 devices here: 1 → +57 % estimated 80, a 10.9 s trial, where 8 keeps
  // +0.03 %).
  double max_step = 16;
  // Below the first scale that passed (see ChooseTimeScale): at most this many more trials, and a
  // lower scale is taken only if its trial kept |fidelity.host| <= refine_margin × target.
  int refine_trials = 3;
  double refine_margin = 0.25;
};

// Runs one trial at `scale` (tests replace it; the default runs the executor).
using TrialFn = std::function<absl::StatusOr<TimeScaleTrial>(double scale)>;

// Errors: InvalidArgument for bad calibration options; a trial's error (a bad layout: the default
// trial returns Executor::Create's). A trial that failed at run time (TimeScaleTrial::failure)
// ends the search instead: the scale of the best trial that ran before it, else its own, is
// returned, not sustained, and the reason says which trial failed.
[[nodiscard]] absl::StatusOr<TimeScaleChoice> ChooseTimeScale(const ExecutorOptions& options,
                                                              const CalibrationOptions& c = {});
[[nodiscard]] absl::StatusOr<TimeScaleChoice> ChooseTimeScale(const TrialFn& trial,
                                                              const CalibrationOptions& c);

// The scale at which a run measured `fidelity_host` at `scale` would have stayed within `target`
// (the estimate above; `scale` when it already did).
double SuggestTimeScale(double scale, double fidelity_host, double target = 0.01);

// On a real clock each step starts at least this much wall time after its step boundary, to leave
// every device thread time to wake: 1 ms plus 5 µs per device of the `world` (measured: below that,
// large layouts start their first ops late). Every device sleeps that long at a step's start, so a
// watchdog timeout not above it would report each step's start as a stall.
std::chrono::nanoseconds StepStartWallMargin(int world);

}  // namespace rp::schedule
