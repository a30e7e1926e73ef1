#include "apps/clock_choice.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/status_macros.h"

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

HostVerdict JudgeHostFidelity(const ClockChoice& clock, double fidelity_host) {
  HostVerdict v;
  if (clock.mode == ClockChoice::Mode::kVirtual) return v;
  v.suggested_scale = schedule::SuggestTimeScale(clock.scale, fidelity_host, kHostFidelityTarget);
  if (std::isfinite(fidelity_host) && std::abs(fidelity_host) <= kHostFidelityTarget) return v;
  v.trusted = false;
  v.warning = absl::StrFormat(
      "the host did not keep time scale %g: measured step differs from emulated by %+.1f %% (target "
      "within %g %%), so measured figures are the host's, not the model's; time scale %g would likely "
      "keep up%s",
      clock.scale, 100 * fidelity_host, 100 * kHostFidelityTarget, v.suggested_scale,
      clock.mode == ClockChoice::Mode::kForced ? " (or omit --time_scale: auto measures one)" : "");
  return v;
}

nlohmann::json ClockJson(const ClockChoice& clock, const HostVerdict& verdict) {
  nlohmann::json trials = nlohmann::json::array();
  for (const schedule::TimeScaleTrial& t : clock.trials) {
    trials.push_back({{"scale", t.scale}, {"fidelity_host", t.fidelity_host}, {"wall_seconds", t.wall_seconds}});
  }
  // The virtual clock has no time scale (no wall clock paces it): its scale and suggestion are null.
  const bool virtual_clock = clock.mode == ClockChoice::Mode::kVirtual;
  return {{"mode", ClockModeName(clock.mode)},
          {"scale", virtual_clock ? nlohmann::json(nullptr) : nlohmann::json(clock.scale)},
          {"sustained_in_calibration", clock.sustained},
          {"reason", clock.reason},
          {"calibration_trials", std::move(trials)},
          {"host_fidelity_trusted", verdict.trusted},
          {"suggested_scale", virtual_clock ? nlohmann::json(nullptr) : nlohmann::json(verdict.suggested_scale)}};
}

}  // namespace rp::apps
