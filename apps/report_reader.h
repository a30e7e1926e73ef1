// Reads a saved `ringpipe run` / `predict` report (docs/report.md) back for `ringpipe timeline
// --from_report`: its "timeline" section as Gantt panels — measured (drawn from the wall stamps of the
// device threads) above predicted — and a default title. Only schema kReportSchemaRead is read; any
// other "schema" is refused with one line naming it.
//
// The reader trusts nothing in the file: any JSON is either read or refused with one line, never a
// crash. Optional keys (a device's rank, pp, tp; an op's mb, chunk, kind, op; the title's parts) may be
// absent, but every value given must be of its type and within bounds, else the report is refused
// naming the value by its path ("timeline.predicted.devices[3].ops[2].end_ms: must be in [0, 1e+12]
// ms, got -5"): times finite, in [0, 1e12] ms (the largest modeled time), an op's end not before its
// start; ranks, pp and tp below the report's layout; at least one device and at most kMaxRows per
// panel (more are refused, never drawn cut short). Strings are
// shown as printable UTF-8, and the sizes are bounded
// (kMaxReportBytes of text, kMaxJsonDepth of nesting, kMaxRows rows, kMaxBars bars, kMaxParsedBytes of
// the rest). The text is parsed as it is read (ReadChunk: it is never held whole), each op of a drawn
// panel becomes a bar as soon as it is parsed (apps/report_sections.h: about sizeof(svg::GanttBar),
// 64 bytes, an op), and of the rest only the sections drawn are kept (the per-device and per-step
// sections and the timeline's emulated rows are skipped while parsing), so memory stays within about
// kMaxBars bars plus kMaxParsedBytes whatever the file holds — and any report within the chart's cap
// (kMaxBars ops over its panels, what `ringpipe timeline` itself draws) is read.
//
// Thread safety: pure functions.
//
// Example:
//   RP_ASSIGN_OR_RETURN(TimelineReport t, ReadTimelineReport(text));
//   std::string svg_text = svg::RenderGantt(t.title, t.panels);
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "apps/svg.h"
#include "nlohmann/json.hpp"

namespace rp::apps {

inline constexpr size_t kMaxReportBytes = size_t{1} << 30;
// The schema this reader reads (apps/report.h writes it).
inline constexpr const char* kReportSchemaRead = "ringpipe-report/2";
inline constexpr size_t kMaxRows = 4096;
// The DOM the reader keeps of the sections it draws besides their ops, at most (an upper estimate of
// its heap bytes). A report of 33 million numbers in its timeline (66 MB of text) took over 600 MB of
// memory before a cap on the count of values refused it (about 1 GB at that cap), dying of
// std::bad_alloc under a tighter address-space limit. The ops were kept in it too (about 340000 of
// them fitted), so reports `ringpipe timeline` had written were refused: they are now bars at once.
inline constexpr size_t kMaxParsedBytes = size_t{256} << 20;
// The most ops a chart draws over its panels (ReadTimelineReport refuses more, never draws a step cut
// short; `ringpipe timeline` refuses a step of more before predicting it).
inline constexpr size_t kMaxBars = size_t{1} << 22;

struct TimelineReport {
  std::string title;                    // from the report's layout and schedule
  std::vector<svg::GanttPanel> panels;  // measured (if any), then predicted (if any)
  size_t rows = 0;                      // device rows of the first panel
  double measured_step_ms = -1;         // -1: no measured panel
  double predicted_step_ms = -1;        // -1: no predicted panel
};

// InvalidArgument (one line) for text that is not JSON, too large (kMaxParsedBytes: "holds more than
// the 256 MiB this reader keeps ..."; more than kMaxBars ops: "timeline.predicted.devices[1].ops: more
// than 4194304 ops to draw ...") or too deep, a report of another
// schema, or one with no timeline to draw: "is not JSON: ...", "has \"schema\": \"ringpipe-report/1\"; ...",
// "has no \"timeline\" section ...", "\"timeline\" holds neither measured nor predicted devices", or a bad
// value: "<path>: <reason>" with a path that starts with "timeline.", "layout." or "schedule.", or a key
// given twice in any object: "<path>: duplicate key" ("timeline.measured.clock: duplicate key").
// Reads up to `size` bytes of the text into `buf`: how many, 0 at its end; an error ends the read and
// is returned by ReadTimelineReport as it is (e.g. InputFile::Read's "--from_report: 'r.json': larger
// than N bytes").
using ReadChunk = std::function<absl::StatusOr<size_t>(char* buf, size_t size)>;
absl::StatusOr<TimelineReport> ReadTimelineReport(const ReadChunk& read);
// The same from text in memory (at most kMaxReportBytes).
absl::StatusOr<TimelineReport> ReadTimelineReport(const std::string& text);
// The same from a report already in memory (`ringpipe timeline` after a run). A step of more than
// `max_bars` ops over the panels is refused (ResourceExhausted, "timeline.predicted.devices[1].ops:
// more than N ops to draw ..."), never drawn cut short.
absl::StatusOr<TimelineReport> ReadTimelineReport(const nlohmann::json& report, size_t max_bars = kMaxBars);

}  // namespace rp::apps
