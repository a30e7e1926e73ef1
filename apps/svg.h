// rp::apps::svg: a small self-contained SVG writer for ringpipe's charts — line and grouped-bar charts
// of sweep results (measured vs predicted) and Gantt charts of one step. No library: the output is a
// plain string of well-formed SVG 1.1 (every text and attribute value escaped with Escape), viewable
// in any browser and convertible with rsvg-convert.
//
// Conventions the charts follow:
//   * measured series are solid (lines with filled markers, filled bars), predicted series dashed
//     (dashed lines with hollow markers, outlined bars with a light fill) — Series::dashed;
//   * series groups beyond the 10 colours differ by marker shape (Series::marker, SeriesMarker): on
//     the points of a line, on top of each bar, and on the legend swatch;
//   * a series value of NaN is "no point" (a failed sweep point): lines break there, no bar is drawn;
//   * x positions are the chart's x_values (numeric, optionally log2-spaced; in any order: a line
//     joins its points left to right) or, if none are given, evenly spaced categories; ticks sit at
//     the data positions and carry x_labels (on a numeric axis, a label that would overlap another
//     is left out: the labels that say a point did not run, then the ends, are placed first);
//   * titles fit their width: the font shrinks (down to 8 px; a longer title is cut with "...");
//   * legends stay inside the chart: a chart's column on the right spaces its entries to fit the
//     height, else the entries go in 1 to 4 columns under the plot (as many as their names fit); a Gantt legend wraps its lines;
//   * y axis: "nice" 1-2-5 ticks from 0 (linear), or decades (log_y; non-positive values are skipped);
//     y_bytes formats tick labels as B / kB / MB / GB.
//
// Thread safety: pure functions.
//
// Example:
//   svg::Chart c{.title = "step time", .x_label = "micro-batches", .y_label = "ms",
//                .x_values = {2, 4, 8, 16}, .x_labels = {"2", "4", "8", "16"}, .log_x = true};
//   c.series.push_back({.name = "measured", .y = {430, 690, 1210, 2250}, .color = "#1f77b4"});
//   c.series.push_back({.name = "predicted", .y = {430, 690, 1210, 2250}, .color = "#1f77b4",
//                       .dashed = true});
//   std::string svg_text = svg::RenderChart(c);
#pragma once

#include <deque>
#include <string>
#include <string_view>
#include <vector>

namespace rp::apps::svg {

// `text` with & < > " ' replaced by XML entities (safe in text nodes and attribute values), control
// characters but tab, newline and carriage return by spaces, and U+FFFE / U+FFFF (UTF-8, not XML 1.0
// characters) by U+FFFD. `text` must be UTF-8 (OneLine makes it so).
std::string Escape(std::string_view text);

// A qualitative palette (Tableau 10); Color(i) cycles through it.
const char* Color(size_t i);

// The shape of a series' markers: on its points (lines), on its bars (all but kCircle, which is a
// plain bar) and on its legend swatch.
enum class Marker { kCircle, kSquare, kTriangle, kDiamond, kTriangleDown };
inline constexpr size_t kNumMarkers = 5;
// Series group i's marker: circles for the first 10 groups (one per colour), then squares, triangles,
// diamonds, downward triangles — so (Color(i), SeriesMarker(i)) differ for every i < kDistinctStyles
// and groups beyond the palette stay apart. Beyond kDistinctStyles the pairs repeat.
Marker SeriesMarker(size_t i);
inline constexpr size_t kDistinctStyles = 10 * kNumMarkers;

struct Series {
  std::string name;       // legend entry
  std::vector<double> y;  // one value per x position; NaN = no point
  std::string color = "#1f77b4";
  bool dashed = false;    // predicted: dashed line / outlined bar, hollow markers
  Marker marker = Marker::kCircle;
};

struct Chart {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<double> x_values;       // numeric x; empty: categories 0 .. n−1
  std::vector<std::string> x_labels;  // tick label of each x position (defines n when categorical)
  bool log_x = false;                 // numeric x > 0 only: log2 spacing
  bool log_y = false;                 // log10 y (for sizes spanning decades)
  bool y_bytes = false;               // tick labels as bytes (kB, MB, GB)
  bool bars = false;                  // grouped bars (one group per x position) instead of lines
  std::vector<Series> series;
};

// One chart as a complete SVG document of `width` × `height` pixels — taller when its legend goes
// under the plot and would leave the plot less than 160 px (dozens of series).
std::string RenderChart(const Chart& chart, int width = 640, int height = 380);

// Several charts in a grid of `columns` panels, each `width` × `height` (taller as RenderChart's, all
// alike), under a figure title.
std::string RenderFigure(const std::string& title, const std::vector<Chart>& charts, int columns,
                         int width = 520, int height = 340);

// --- Gantt charts of one step ---

enum class BarClass {
  kForward,        // F
  kBackward,       // B (whole backward)
  kBackwardInput,  // b (zero-bubble input gradient)
  kWeightGrad,     // W
  kOptimizer,      // O
  kTpComm,         // TP all-reduce (compute stream, blocking)
  kDpComm,         // gradient all-reduce (comm stream: drawn in the row's lower strip)
  kWait,           // waiting on a message / the gradients with nothing to compute (exposed comm)
  kEpComm,         // EP all-to-all's transfer (a MoE dispatch or combine; compute stream, blocking)
};
inline constexpr int kNumBarClasses = 9;
const char* BarClassName(BarClass c);  // legend text, e.g. "forward (F)"

struct GanttBar {
  int row = 0;
  double start_ms = 0;
  double end_ms = 0;
  BarClass cls = BarClass::kForward;
  std::string label;  // e.g. the micro-batch number; drawn inside the bar when it fits
};

struct GanttPanel {
  std::string title;              // e.g. "measured (step 2, median)"
  std::vector<std::string> rows;  // row labels, top to bottom, e.g. "rank 0 (0/0/0)"
  // A deque: a report's reader appends up to millions of bars without copying them as it grows.
  std::deque<GanttBar> bars;
  double span_ms = 0;             // the step time: the time axis runs 0 .. span_ms
};

// Panels stacked vertically (sharing the time scale of the longest span), a legend at the bottom
// (wrapped to the width: as many lines as the classes used need); the
// background of each row is the idle colour. `width` in pixels.
std::string RenderGantt(const std::string& title, const std::vector<GanttPanel>& panels, int width = 1100);

// --- Axis helpers (exposed for tests) ---

// About `target` "nice" (1, 2, 5 × 10^k) tick values covering [lo, hi].
std::vector<double> NiceTicks(double lo, double hi, int target);
// Short tick text: "0", "1.5", "250", "12k", "3.5M"; with bytes: "512 B", "1.5 kB", "2 MB", "1 GB".
std::string FormatTick(double value, bool bytes);

}  // namespace rp::apps::svg
