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
// start; ranks, pp and tp below the report's layout; at least one device per panel. Strings are
// shown as printable UTF-8, and the sizes are bounded
// (kMaxReportBytes of text, kMaxJsonDepth of nesting, kMaxParsedBytes of parsed sections, kMaxRows
// rows, kMaxBars bars). The text is parsed as it is read (ReadChunk: it is never held whole), and
// only the sections it draws are kept in memory (the per-device and per-step sections and the
// timeline's emulated rows are skipped while parsing), so memory stays within about kMaxParsedBytes
// whatever the file holds.
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
// The DOM the reader keeps of the sections it draws, at most (an upper estimate of its heap bytes):
// about 340000 ops of a timeline — a 64-row report of 5000 ops a row. A report of 33 million numbers
// in its timeline (66 MB of text) took over 600 MB of memory before a cap on the count of values
// refused it (about 1 GB at that cap), dying of std::bad_alloc under a tighter address-space limit.
inline constexpr size_t kMaxParsedBytes = size_t{256} << 20;
inline constexpr size_t kMaxBars = size_t{1} << 22;

struct TimelineReport {
  std::string title;                    // from the report's layout and schedule
  std::vector<svg::GanttPanel> panels;  // measured (if any), then predicted (if any)
  size_t rows = 0;                      // device rows of the first panel
  double measured_step_ms = -1;         // -1: no measured panel
  double predicted_step_ms = -1;        // -1: no predicted panel
};

// InvalidArgument (one line) for text that is not JSON, too large (kMaxParsedBytes: "holds more than
// the 256 MiB this reader keeps ...") or too deep, a report of another
// schema, or one with no timeline to draw: "is not JSON: ...", "has \"schema\": \"ringpipe-report/1\"; ...",
// "has no \"timeline\" section ...", "\"timeline\" holds neither measured nor predicted devices", or a bad
// value: "<path>: <reason>" with a path that starts with "timeline.", "layout." or "schedule.".
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
