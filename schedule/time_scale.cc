#include "schedule/time_scale.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/status_macros.h"

namespace rp::schedule {
namespace {

// The most one step of the search may grow the scale after a miss, whatever max_step says: the
// estimate trusts fidelity ∝ 1 / scale, which a cliff-like host does not follow.
constexpr double kMaxSearchStep = 64;

// Rounds up to a readable scale: 1, 1.5, 2, 3, 4, 5, 6, 8 × 10^k.
double NiceUp(double x) {
  if (!(x > 0)) return 1;
  const double decade = std::pow(10.0, std::floor(std::log10(x)));
  for (double m : {1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0}) {
    if (m * decade >= x * (1 - 1e-12)) return m * decade;
  }
  return 10 * decade;
}

std::string Describe(const std::vector<TimeScaleTrial>& trials) {
  std::string out;
  for (const TimeScaleTrial& t : trials) {
    absl::StrAppend(&out, out.empty() ? "" : ", ",
                    t.failure.empty() ? absl::StrFormat("%g → %+.2f %%", t.scale, 100 * t.fidelity_host)
                                      : absl::StrFormat("%g → failed", t.scale));
  }
  return out;
}

absl::StatusOr<TimeScaleTrial> RunTrial(const ExecutorOptions& base, int steps, double scale) {
  ExecutorOptions o = base;
  o.virtual_time = false;
  o.time_scale = scale;
  o.steps = steps;
  o.run_reference = false;
  o.eval_every = 0;
  o.eval_samples = 1;
  o.tracer = nullptr;
  o.faults.op_faults.clear();  // a trial measures the host, not the run's failure
  o.faults.stops.clear();
  const auto t0 = std::chrono::steady_clock::now();
  RP_ASSIGN_OR_RETURN(auto exec, Executor::Create(o));
  absl::StatusOr<RunResult> r = exec->Run();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!r.ok()) {
    // The run itself fails (e.g. a codec overflow): the run is then what reports it — its exit code,
    // its failed report and trace — not the calibration in its place.
    return TimeScaleTrial{.scale = scale, .fidelity_host = std::numeric_limits<double>::quiet_NaN(),
                          .wall_seconds = wall, .failure = std::string(r.status().message())};
  }
  const StepRecord& last = r->steps.back();
  return TimeScaleTrial{
      .scale = scale,
      .fidelity_host = last.emulated_ms > 0 ? last.measured_ms / last.emulated_ms - 1 : 0,
      .wall_seconds = wall,
      .emulated_step_ms = last.emulated_ms,
      .failure = {}};
}

// Below the first scale that passed: a geometric bisection between the last scale that missed and
// the smallest that passed, on readable scales, for at most refine_trials trials within the budget.
// A lower scale is accepted only with |fidelity.host| <= refine_margin × target (the run is longer
// than its trial). Host overhead does not shrink with the modeled time, so fidelity at best grows
// as 1 / scale: scales below passed × |its fidelity| / (margin × target) cannot pass and are not
// tried — on a host whose overhead is a fixed wall time per step (the estimate's own model) the
// search then ends at once, while a host that keeps up once it is not throughput-bound (fidelity
// falling off a cliff, e.g. +1.2 % at scale 5 and +0.03 % at 10 for 256 devices here) gets its
// run at a scale several times smaller than the estimate's.
absl::Status Refine(const TrialFn& trial, const CalibrationOptions& c, double missed,
                    TimeScaleTrial passed, double* spent, TimeScaleChoice* out) {
  double lo = missed;
  for (int i = 0; i < c.refine_trials; ++i) {
    const double cannot_pass_below =
        passed.scale * std::abs(passed.fidelity_host) / (c.refine_margin * c.target);
    const double mid = NiceUp(std::sqrt(std::max(lo, cannot_pass_below) * passed.scale));
    if (!(mid > lo && mid < passed.scale)) break;
    // At most the passing trial's cost: a smaller scale's modeled part is shorter.
    if (*spent + passed.wall_seconds > c.max_seconds) break;
    RP_ASSIGN_OR_RETURN(TimeScaleTrial t, trial(mid));
    out->trials.push_back(t);
    *spent += t.wall_seconds;
    if (!t.failure.empty()) break;  // keeps the scale that passed
    if (std::abs(t.fidelity_host) <= c.refine_margin * c.target) {
      passed = t;
      out->scale = mid;
    } else {
      lo = mid;
    }
  }
  return absl::OkStatus();
}

}  // namespace

double SuggestTimeScale(double scale, double fidelity_host, double target) {
  const double f = std::abs(fidelity_host);
  if (f <= target) return scale;
  // No upper bound here: a forced scale's warning names the scale the estimate says keeps up (it
  // was capped at x64, so --time_scale=0.01 missing by +8292 % "would likely keep up" at 0.8, where
  // scale 1 missed by +16 to +90 %). The search bounds its own steps (kMaxSearchStep, max_step).
  const double factor = std::max(f / target * 1.25, 2.0);
  return NiceUp(scale * factor);
}

namespace {

// A failed trial measured nothing: the choice is the best trial that ran before it, else its scale.
void ChooseAfterAFailedTrial(double scale, const TimeScaleTrial& t, TimeScaleChoice& out) {
  out.scale = scale;
  double best = std::numeric_limits<double>::infinity();
  for (const TimeScaleTrial& ran : out.trials) {
    if (ran.failure.empty() && std::abs(ran.fidelity_host) < best) {
      best = std::abs(ran.fidelity_host);
      out.scale = ran.scale;
    }
  }
  out.sustained = false;
  out.reason = absl::StrFormat(
      "time scale %g: the calibration stopped when its trial at %g failed at run time (%s); the run uses "
      "%s (trials: %s)",
      out.scale, scale, t.failure,
      out.trials.size() > 1 ? "the best scale tried before it" : "that scale", Describe(out.trials));
}

// Trial t at `scale` kept the target: refined below it (if a smaller scale was missed before), and said
// why.
absl::Status ChooseTheKeptScale(const TrialFn& trial, const CalibrationOptions& c, double scale,
                                const TimeScaleTrial& t, double* spent, TimeScaleChoice& out) {
  out.scale = scale;
  out.sustained = true;
  const double first = scale;
  if (out.trials.size() > 1) {
    const double missed = out.trials[out.trials.size() - 2].scale;
    RP_RETURN_IF_ERROR(Refine(trial, c, missed, t, spent, &out));
  }
  // Say what the choice rests on: a scale below the first pass must keep refine_margin × target,
  // so a refinement trial may have kept the target and still not be taken (the reason said "the
  // smallest tried whose trial kept |fidelity.host| <= 1 %" of 20 beside "6 → +0.95 %").
  const bool refined = out.trials.size() > 1 && out.trials.back().scale < first;
  const std::string margin = absl::StrFormat("%g %%", 100 * c.refine_margin * c.target);
  out.reason =
      out.scale < first
          ? absl::StrFormat(
                "time scale %g: below %g, the first that did keep |fidelity.host| <= %g %%, the smallest "
                "whose trial kept %s, what a smaller scale needs (a run is longer than its trial) (trials: %s)",
                out.scale, first, 100 * c.target, margin, Describe(out.trials))
          : absl::StrFormat("time scale %g: the first of the growing scales tried whose trial kept "
                            "|fidelity.host| <= %g %%%s (trials: %s)",
                            out.scale, 100 * c.target,
                            refined ? absl::StrCat("; no smaller scale tried kept ", margin,
                                                   ", what a smaller scale needs (a run is longer than its trial)")
                                    : "",
                            Describe(out.trials));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TimeScaleChoice> ChooseTimeScale(const TrialFn& trial, const CalibrationOptions& c) {
  if (!(c.target > 0) || !(c.start > 0) || !(c.max_scale >= c.start) || c.trial_steps < 1 ||
      !(c.max_seconds > 0) || !(c.max_step >= 2) || c.refine_trials < 0 ||
      !(c.refine_margin > 0 && c.refine_margin <= 1)) {
    return absl::InvalidArgumentError(
        "calibration: target, start, max_seconds must be > 0, max_scale >= start, trial_steps >= 1, "
        "max_step >= 2, refine_trials >= 0, refine_margin in (0, 1]");
  }
  TimeScaleChoice out;
  double spent = 0;
  double scale = c.start;
  bool at_max_scale = false;  // the search stopped at max_scale (not for the budget)
  while (true) {
    RP_ASSIGN_OR_RETURN(TimeScaleTrial t, trial(scale));
    out.trials.push_back(t);
    spent += t.wall_seconds;
    if (!t.failure.empty()) {
      ChooseAfterAFailedTrial(scale, t, out);
      return out;
    }
    if (std::abs(t.fidelity_host) <= c.target) {
      RP_RETURN_IF_ERROR(ChooseTheKeptScale(trial, c, scale, t, &spent, out));
      return out;
    }
    const double next = std::min({SuggestTimeScale(scale, t.fidelity_host, c.target),
                                  NiceUp(scale * std::min(c.max_step, kMaxSearchStep)), c.max_scale});
    // The next trial: at most this one's wall time (setup, host-limited steps) plus its steps at
    // the next scale (the modeled part grows with the scale).
    const double next_cost = t.wall_seconds + c.trial_steps * next * t.emulated_step_ms * 1e-3;
    at_max_scale = next <= scale;
    if (at_max_scale || spent + next_cost > c.max_seconds) break;
    scale = next;
  }
  const auto best = std::min_element(out.trials.begin(), out.trials.end(),
                                     [](const TimeScaleTrial& a, const TimeScaleTrial& b) {
                                       return std::abs(a.fidelity_host) < std::abs(b.fidelity_host);
                                     });
  out.scale = best->scale;
  out.sustained = false;
  // Where the search stopped: at the largest scale it may try (and why that is the largest), or at
  // the wall-time budget — the remedies differ.
  const std::string limit =
      at_max_scale ? absl::StrFormat("up to %g, the largest %s,", scale,
                                     c.max_scale_why.empty() ? "the calibration tries" : c.max_scale_why)
                   : absl::StrFormat("up to %g within the %g s calibration budget", scale, c.max_seconds);
  out.reason = absl::StrFormat(
      "time scale %g: no scale %s kept |fidelity.host| <= %g %%; the best trial is used, and the run's "
      "own |fidelity.host| says whether its host figures are trusted (trials: %s)",
      out.scale, limit, 100 * c.target, Describe(out.trials));
  return out;
}

absl::StatusOr<TimeScaleChoice> ChooseTimeScale(const ExecutorOptions& options,
                                                const CalibrationOptions& c) {
  return ChooseTimeScale(
      [&](double scale) { return RunTrial(options, c.trial_steps, scale); }, c);
}

std::chrono::nanoseconds StepStartWallMargin(int world) {
  return std::chrono::nanoseconds(1000000 + int64_t{5000} * world);
}

}  // namespace rp::schedule
