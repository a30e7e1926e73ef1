// The report of `ringpipe run` and `ringpipe predict`: one JSON document (schema in docs/report.md)
// and its text rendering, plus ASCII Gantt charts of a step.
//
// The JSON is the source of truth: RenderReport draws the text from it, so a saved report renders the
// same text. `run` reports measured figures next to predicted ones; `predict` the same schema minus
// the measured fields ("mode": "predict"): no fidelity, steps, replica divergence, host figures, and
// devices[] carry only their coordinates and "predicted" object.
//
// Thread safety: pure functions.
//
// Example:
//   nlohmann::json report = BuildReport(cfg, plan, prediction, &run_result);
//   std::string text = RenderReport(report);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "apps/config_fields.h"
#include "apps/plan.h"
#include "nlohmann/json.hpp"
#include "runtime/tracer.h"
#include "schedule/executor.h"
#include "schedule/predictor.h"

namespace rp::apps {

inline constexpr const char* kReportSchema = "ringpipe-report/1";

// Devices of the first replica whose per-op step timelines the report's "timeline" section holds
// (docs/report.md; `ringpipe timeline --from_report` draws them).
inline constexpr int kMaxTimelineRows = 64;

// `json` as text (nlohmann's dump, indented by `indent`), never throwing: bytes that are not UTF-8
// (a path a user gave) become U+FFFD.
std::string DumpJson(const nlohmann::json& json, int indent = -1);

// `run` == nullptr: a predict-only report.
nlohmann::json BuildReport(const RunConfig& cfg, const Plan& plan, const schedule::Prediction& prediction,
                           const schedule::RunResult* run);

// The text report. At most `max_device_rows` rows of the per-device table (the rest summarised).
std::string RenderReport(const nlohmann::json& report, size_t max_device_rows = 32);

// ASCII Gantt of step `step`'s compute and comm streams from trace events, in modeled time, `width`
// columns, one row per device for at most `max_rows` devices (ranks in order). Cells: F forward,
// B backward, b input-gradient backward, W weight gradient, O optimizer, T TP all-reduce, = gradient
// all-reduce (comm row), '.' idle; a micro-batch number follows the letter where it fits.
std::string RenderMeasuredGantt(const std::vector<TraceEvent>& events, int step, int num_devices, int width,
                                int max_rows);

// The predicted step of the first replica (pipeline ranks, TP shard 0) in the same style
// (schedule::RenderTimeline at step / width per column).
std::string RenderPredictedGantt(const Plan& plan, const schedule::Prediction& prediction, int width);

}  // namespace rp::apps
