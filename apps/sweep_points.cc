// `ringpipe sweep`: axes and points (apps/sweep.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "apps/clock_choice.h"
#include "apps/plan.h"
#include "apps/sweep.h"
#include "runtime/status_macros.h"
#include "schedule/executor.h"
#include "schedule/predictor.h"

namespace rp::apps::sweep {

using json = nlohmann::json;

// --- Axes ---

std::string Axis::name() const { return absl::StrJoin(fields, ":"); }

// An axis value as its field's JSON value, read by the field's grammar (as its flag would be).
absl::StatusOr<json> ValueJson(const std::string& axis, const std::string& field, const std::string& text) {
  if (field == "preset") return json(text);
  const ConfigField* f = FindField(field);
  if (f == nullptr) return absl::InvalidArgumentError(absl::StrCat("--axis=", axis, ": unknown field ", field));
  auto v = FlagTextToJson(*f, text);
  if (!v.ok()) return absl::InvalidArgumentError(absl::StrCat("--axis=", axis, ": ", v.status().message()));
  return *v;
}

namespace {

absl::StatusOr<std::vector<std::string>> ExpandValues(const std::string& axis, const std::string& text) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--axis=", axis, ": empty value in '", text, "'"));
    }
    if (size_t dots = part.find(".."); dots != absl::string_view::npos) {
      int64_t a, b;
      if (!absl::SimpleAtoi(part.substr(0, dots), &a) || !absl::SimpleAtoi(part.substr(dots + 2), &b) || b < a) {
        return absl::InvalidArgumentError(absl::StrCat("--axis=", axis, ": '", part,
                                                       "' is not an integer range A..B with A <= B"));
      }
      // In unsigned arithmetic: b - a of two int64 overflows for ranges wider than 2^63.
      if (static_cast<uint64_t>(b) - static_cast<uint64_t>(a) >= kMaxPoints) {
        return absl::InvalidArgumentError(absl::StrCat("--axis=", axis, ": range '", part, "' is too long"));
      }
      // Checked before listing: many ranges in one axis (`0..4095,0..4095,...`) made millions of
      // values, gigabytes, before ReadAxes counted the points.
      if (static_cast<uint64_t>(b) - static_cast<uint64_t>(a) + 1 > kMaxPoints - out.size()) {
        return absl::InvalidArgumentError(absl::StrCat("--axis=", axis, ": more than ", kMaxPoints, " values"));
      }
      for (int64_t x = a; x <= b; ++x) out.push_back(absl::StrCat(x));
    } else {
      if (out.size() >= kMaxPoints) {
        return absl::InvalidArgumentError(absl::StrCat("--axis=", axis, ": more than ", kMaxPoints, " values"));
      }
      out.emplace_back(part);
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<Axis> ParseAxis(const std::string& spec) {
  const size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
    return absl::InvalidArgumentError(absl::StrCat("--axis: '", spec, "' is not NAME=V1,V2,... or NAME=A..B"));
  }
  Axis axis;
  axis.fields = absl::StrSplit(spec.substr(0, eq), ':');
  const std::string name = axis.name();
  for (size_t i = 0; i < axis.fields.size(); ++i) {
    const std::string& f = axis.fields[i];
    if (std::find(axis.fields.begin(), axis.fields.begin() + static_cast<std::ptrdiff_t>(i), f) !=
        axis.fields.begin() + static_cast<std::ptrdiff_t>(i)) {
      return absl::InvalidArgumentError(absl::StrCat("--axis=", name, ": field '", f, "' is named twice"));
    }
    const auto& names = ConfigFieldNames();
    const bool known = std::find(names.begin(), names.end(), f) != names.end();
    if (!known || f == "config" || f == "report_json" || f == "trace") {
      return absl::InvalidArgumentError(absl::StrCat(
          "--axis=", name, ": '", f, "' is not a config field that can be swept (the config fields are the flags of "
          "`ringpipe run --help`)"));
    }
  }
  if (axis.fields.size() == 1) {
    RP_ASSIGN_OR_RETURN(std::vector<std::string> vals, ExpandValues(name, spec.substr(eq + 1)));
    for (std::string& v : vals) axis.values.push_back({std::move(v)});
  } else {
    for (absl::string_view tuple : absl::StrSplit(spec.substr(eq + 1), ',')) {
      std::vector<std::string> parts = absl::StrSplit(tuple, ':');
      if (parts.size() != axis.fields.size()) {
        return absl::InvalidArgumentError(absl::StrCat("--axis=", name, ": value '", tuple, "' has ", parts.size(),
                                                       " parts; expected ", axis.fields.size(), " (one per field)"));
      }
      for (std::string& p : parts) p = std::string(absl::StripAsciiWhitespace(p));
      axis.values.push_back(std::move(parts));
    }
  }
  return axis;
}

namespace {

Metrics FromPrediction(const Plan& plan, const schedule::Prediction& pred) {
  Metrics m;
  m.step_ms = ToMillis(pred.step_time);
  m.speedup = pred.speedup;
  m.efficiency = pred.efficiency;
  double bubble = 0, exposed = 0, peer = 0, peak = 0;
  for (size_t r = 0; r < pred.devices.size(); ++r) {
    const schedule::DeviceMetrics& d = pred.devices[r];
    bubble += d.bubble_total;
    exposed += ToMillis(d.exposed_comm);
    peer += ToMillis(d.peer_wait);
    if (r < pred.peak_activation_bytes.size()) peak = std::max(peak, static_cast<double>(pred.peak_activation_bytes[r]));
  }
  const double n = static_cast<double>(std::max<size_t>(1, pred.devices.size()));
  m.bubble = bubble / n;
  m.exposed_ms = exposed / n;
  m.peer_wait_ms = peer / n;
  m.makespan_bubble_ms = ToMillis(pred.makespan_bubble);
  m.span_bubble_ms = ToMillis(pred.span_bubble);
  m.peak_bytes = peak;
  double wire = 0;
  for (const schedule::PredictedWire& w : PredictWireBytes(plan)) wire = std::max(wire, static_cast<double>(w.total()));
  // EP all-to-alls: what the predictor's fabric timed (the closed form above has no EP share).
  if (plan.execution.has_ep_exchanges()) {
    for (uint64_t b : pred.modeled_wire_bytes) wire = std::max(wire, static_cast<double>(b));
  }
  m.wire_bytes = wire;
  return m;
}

// The measured figures of a run (modeled bytes: the run's fabric counts), and its real buffers.
Metrics FromRun(const schedule::RunResult& run, int steps, double& real_peak, double& real_wire) {
  Metrics m;
  m.step_ms = run.measured_step_ms;
  m.speedup = run.speedup;
  m.efficiency = run.efficiency;
  double bubble = 0, exposed = 0, peer = 0, late = 0, peak = 0, wire = 0;
  real_peak = real_wire = 0;
  const double per_step = std::max(1, steps);
  for (const schedule::DeviceReport& d : run.devices) {
    bubble += d.measured.bubble_total;
    exposed += d.measured.exposed_comm_ms;
    peer += d.measured.peer_wait_ms;
    late += d.measured.host_late_ms;
    peak = std::max(peak, static_cast<double>(d.modeled_peak_activation_bytes));
    // Per step, the EP all-to-alls' of the median step (they follow its routing), as the report.
    wire = std::max(wire, static_cast<double>(d.modeled_wire_bytes - d.modeled_ep_bytes) / per_step +
                              static_cast<double>(d.median_step_modeled_ep_bytes));
    real_peak = std::max(real_peak, static_cast<double>(d.peak_activation_bytes));
    real_wire = std::max(real_wire, static_cast<double>(d.wire_bytes - d.ep_bytes) / per_step +
                                        static_cast<double>(d.median_step_ep_bytes));
  }
  const double n = static_cast<double>(std::max<size_t>(1, run.devices.size()));
  m.bubble = bubble / n;
  m.exposed_ms = exposed / n;
  m.peer_wait_ms = peer / n;
  m.host_late_ms = late / n;
  m.makespan_bubble_ms = ToMillis(run.measured_pipeline.makespan_bubble);
  m.span_bubble_ms = ToMillis(run.measured_pipeline.span_bubble);
  m.peak_bytes = peak;
  m.wire_bytes = wire;
  return m;
}

}  // namespace

void RunPoint(Point& p, bool predict_only) {
  const auto start = std::chrono::steady_clock::now();
  auto plan = BuildPlan(p.cfg, /*for_run=*/!predict_only);
  if (!plan.ok()) {
    p.status = "invalid";
    p.error = std::string(plan.status().message());
    return;
  }
  if (absl::Status st = CheckPredictable(p.cfg, *plan); !st.ok()) {
    p.status = "invalid";
    p.error = std::string(st.message());
    return;
  }
  auto pred = schedule::Predict(plan->execution, plan->predict);
  if (!pred.ok()) {
    p.status = "failed";
    p.error = absl::StrCat("predict: ", pred.status().message());
    return;
  }
  p.predicted = FromPrediction(*plan, *pred);
  p.t1_ms = ToMillis(pred->single_device_time);
  if (!predict_only) {
    schedule::ExecutorOptions options = plan->executor;
    // As `run`: every op and every wait for one message within the watchdog on a real clock; a
    // point that cannot is invalid, not a run that fails as stalled.
    const WatchdogFit fit = WatchdogFitOf(options);
    schedule::CalibrationOptions calibration;
    calibration.target = kHostFidelityTarget;
    calibration.max_seconds = 20;
    if (absl::Status st = FitTheWatchdog(p.cfg, fit, calibration); !st.ok()) {
      p.status = "invalid";
      p.error = std::string(st.message());
      return;
    }
    // time_scale auto: each point measures its own (a shorter calibration budget than run's).
    absl::StatusOr<ClockChoice> clock = ChooseClock(p.cfg, &options, calibration);
    if (clock.ok() && clock->mode == ClockChoice::Mode::kAuto) {
      if (absl::Status st = CheckChosenScaleFitsTheWatchdog(p.cfg, fit, clock->scale); !st.ok()) {
        p.status = "invalid";
        p.error = std::string(st.message());
        return;
      }
    }
    if (clock.ok() && clock->mode != ClockChoice::Mode::kVirtual) p.time_scale = clock->scale;
    auto exec = clock.ok() ? schedule::Executor::Create(options)
                           : absl::StatusOr<std::unique_ptr<schedule::Executor>>(clock.status());
    absl::StatusOr<schedule::RunResult> run =
        exec.ok() ? (*exec)->Run() : absl::StatusOr<schedule::RunResult>(exec.status());
    if (!run.ok()) {
      p.status = "failed";
      p.error = absl::StrCat("run: ", run.status().message());
    } else {
      p.measured = FromRun(*run, p.cfg.steps, p.real_peak_bytes, p.real_wire_bytes);
      // The run's own prediction, as `run` reports it: with EP, its median step's routing instead
      // of the balanced routing a prediction alone assumes.
      p.predicted = FromPrediction(*plan, run->prediction);
      p.emulated_step_ms = run->emulated_step_ms;
      p.fidelity_host = run->fidelity_host;
      p.fidelity_model = run->fidelity_model;
    }
  }
  p.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace rp::apps::sweep
