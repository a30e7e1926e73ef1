// The report of `ringpipe run` and `ringpipe predict`: one JSON document (schema `ringpipe-report/2`,
// docs/report.md) and its text rendering, plus ASCII Gantt charts of a step.
//
// Three timelines, honestly named (DESIGN.md): measured = steady_clock stamps on the device threads ÷
// time scale; emulated = the run's modeled timeline; predicted = the predictor's. fidelity.host =
// measured / emulated − 1, fidelity.model = emulated / predicted − 1. Every timing figure exists on
// each timeline with the same keys; every byte and memory figure says whether it is modeled (what the
// fabric times: the real MLP's sizes with the fixed cost model, the described transformer's with the
// FLOPs one) or real (the small MLP's buffers) by its name (modeled_*, real_*).
//
// The JSON is the source of truth: RenderReport draws the text from it, so a saved report renders the
// same text. `predict` writes the same schema with only the predicted figures ("mode": "predict").
//
// Thread safety: pure functions.
//
// Example:
//   nlohmann::json report = BuildReport(cfg, plan, run_result.prediction, &run_result, &host);
//   std::string text = RenderReport(report);
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "apps/config_fields.h"
#include "apps/lazy_json.h"
#include "apps/plan.h"
#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "runtime/text_sink.h"
#include "schedule/executor.h"
#include "schedule/metrics.h"
#include "schedule/predictor.h"

namespace rp::apps {

inline constexpr const char* kReportSchema = "ringpipe-report/2";

// Devices of the first replica whose per-op step timelines the report's "timeline" section holds
// (docs/report.md; `ringpipe timeline --from_report` draws them).
inline constexpr int kMaxTimelineRows = 64;

// What the host spent on a run (the report's "host" section beside RunResult's own figures).
struct HostUsage {
  double rss_before_bytes = 0;    // VmRSS before the executor was created
  double peak_rss_bytes = 0;      // VmHWM after the run
  double model_buffer_bytes = 0;  // the run's known buffers: weights, gradients, optimizer state, data set
  int threads = 0;                // peak thread count sampled during the run (and at its first step)
  nlohmann::json time_scale_choice;  // apps/clock_choice.h ClockJson (null: not given)
};

// `json` as text (nlohmann's dump, indented by `indent`), never throwing: bytes that are not UTF-8
// (a path a user gave) become U+FFFD.
// (The same text followed by a newline, in pieces: StreamJson, apps/lazy_json.h.)
std::string DumpJson(const nlohmann::json& json, int indent = -1);

// `run` == nullptr: a predict-only report (`host` is then ignored; it may be null for a run too).
// `with_timeline` false leaves the "timeline" section out: the per-op intervals of the first replica,
// which the text report does not read.
//
// The report as the commands hold it: its "devices" (one object per device: 2^20 of them under
// `predict`) and its timeline rows are made one at a time when the text report or the file reads
// them (apps/lazy_json.h), from `plan`, `prediction` and `run`, which must outlive it.
LazyJson BuildLazyReport(const RunConfig& cfg, const Plan& plan, const schedule::Prediction& prediction,
                         const schedule::RunResult* run, const HostUsage* host = nullptr, bool with_timeline = true);
// Threads that may stream a lazy report (LazyJson::Stream's `threads`): its element functions only
// read `plan`, `prediction` and `run`, which no one changes by then. The host's CPUs, at most 4.
int ReportStreamThreads();
// The same as one document.
nlohmann::json BuildReport(const RunConfig& cfg, const Plan& plan, const schedule::Prediction& prediction,
                           const schedule::RunResult* run, const HostUsage* host = nullptr, bool with_timeline = true);

// The report of a run that failed at run time (mode "run", status "failed"): the predicted sections,
// the failure (rank, step, op, peers, committed steps) and the records of every committed step.
nlohmann::json BuildFailedRunReport(const RunConfig& cfg, const Plan& plan, const schedule::Prediction& prediction,
                                    const schedule::RunFailure& failure, const HostUsage* host = nullptr);

// The text report. At most `max_device_rows` rows of the per-device table (the rest summarised).
std::string RenderReport(const nlohmann::json& report, size_t max_device_rows = 32);
std::string RenderReport(const LazyJson& report, size_t max_device_rows = 32);

// ASCII Gantt of one step of the first replica's devices (at most `max_rows`), `width` columns over
// `span`: one row per device, a comm row under it when its gradient buckets ran. `timeline_of(rank)`
// gives a rank's intervals (nullptr: none); `wall` draws their measured wall stamps (wall_start,
// wall_end), else their emulated (or predicted) times. Cells: F forward, B backward, b input-gradient
// backward, W weight gradient, O optimizer, T TP all-reduce, A an EP all-to-all's transfer (its peer
// wait is idle), - exposed communication (the transfer
// part of a wait; peer wait is idle), = gradient all-reduce (comm row), '.' idle; the micro-batch
// follows the letter where it fits.
std::string RenderGantt(const schedule::Program& program, const schedule::ParallelGrid& grid,
                        const std::function<const std::vector<schedule::OpInterval>*(int rank)>& timeline_of,
                        bool wall, Nanos span, int width, int max_rows);

// The measured Gantt of a run's kept step (RunResult::timelines, wall stamps) and the predicted one.
std::string RenderMeasuredGantt(const Plan& plan, const schedule::RunResult& run, int width, int max_rows);
std::string RenderPredictedGantt(const Plan& plan, const schedule::Prediction& prediction, int width,
                                 int max_rows);

// The key legend printed under the Gantt charts.
inline constexpr const char* kGanttLegend =
    "F/B/b/W compute (3.1: micro-batch 3 of chunk 1), O optimizer, T TP all-reduce, A EP all-to-all, - exposed communication, = gradient all-reduce, "
    ". idle";

}  // namespace rp::apps
