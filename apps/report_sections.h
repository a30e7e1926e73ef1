// The parts of apps/report_reader.h's reader that its two inputs share — a report already in memory
// (a DOM) and a report's text, parsed as it is read — so both validate a value by the same code.
// Internal to apps/report_reader.cc and apps/report_sections.cc.
//
// Text is parsed by ParseSections into a DOM of the sections drawn ("schema", "layout", "schedule",
// and "timeline" but its emulated rows), except the op lists of the timeline's panels: each op there
// is turned into a Gantt bar as soon as it is parsed (OpBar), and the DOM keeps a marker in place of
// the list (IsStreamedOps). So a report costs about sizeof(svg::GanttBar) a drawn op (at most
// kMaxBars of them) plus at most kMaxParsedBytes of everything else, whatever its text holds.
//
// Thread safety: pure functions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "apps/report_reader.h"
#include "apps/svg.h"
#include "nlohmann/json.hpp"

namespace rp::apps::report_internal {

// The panels of a report's timeline, in the order they are drawn.
inline constexpr std::array<const char*, 2> kPanelKeys = {"measured", "predicted"};

// `j[key]`, or null when `j` is not an object or has no such key.
const nlohmann::json& Get(const nlohmann::json& j, const char* key);
// InvalidArgument "<path>: <why>".
absl::Status BadField(const std::string& path, const std::string& why);
// An integer in [lo, hi] at j[key]; absent: `fallback`.
absl::StatusOr<int64_t> Int(const nlohmann::json& j, const char* key, const std::string& path, int64_t lo,
                            int64_t hi, int64_t fallback);
// A string shown in the chart (printable UTF-8, cut to a readable length); absent: "".
absl::StatusOr<std::string> Str(const nlohmann::json& j, const char* key, const std::string& path);
// A time in ms, finite, in [0, 1e12]; absent: `fallback` if it is set, else an error.
absl::StatusOr<double> Ms(const nlohmann::json& j, const char* key, const std::string& path,
                          std::optional<double> fallback);

// One op of a panel's device (`where`: its path, "timeline.predicted.devices[3].ops[2]") as a bar on
// `row`: an object with start_ms <= end_ms and optional kind, op, mb, chunk of their types and ranges.
absl::StatusOr<svg::GanttBar> OpBar(const nlohmann::json& op, const std::string& where, int row);

// The ops ParseSections turned into bars for one panel: every streamed list's bars in document order
// (a bar's row is its device's index in "devices"), or the first error among them (its device index
// and the error naming the op) — ops after an error are parsed and dropped.
struct StreamedOps {
  std::deque<svg::GanttBar> bars;
  int error_device = -1;
  absl::Status error;
};

// Whether `v` is the marker ParseSections leaves in the DOM in place of an op list it streamed (a
// binary value: JSON text cannot hold one).
bool IsStreamedOps(const nlohmann::json& v);

struct ParsedSections {
  nlohmann::json root;
  std::array<StreamedOps, kPanelKeys.size()> panels;  // by kPanelKeys
};

// Parses the text `read` gives. InvalidArgument, one line, for text that is not JSON ("is not JSON:
// parse error at line L, column C: ...", the parser's words, cut to about 200 bytes), nested deeper
// than kMaxJsonDepth, or holding more than kMaxParsedBytes besides its ops; a read error is returned
// as it is. More than `max_bars` ops over the panels (devices past kMaxRows aside) is a panel's error
// (InvalidArgument, at the device where the count passed it).
absl::StatusOr<ParsedSections> ParseSections(const ReadChunk& read, size_t max_bars);

}  // namespace rp::apps::report_internal
