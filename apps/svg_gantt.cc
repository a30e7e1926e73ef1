// Gantt charts of one step (apps/svg.h: RenderGantt, BarClassName), split from apps/svg.cc's line
// and bar charts; the elements both draw are apps/svg_primitives.h's.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "apps/svg.h"
#include "apps/svg_primitives.h"

namespace rp::apps::svg {

using primitives::Header;
using primitives::Line;
using primitives::Num;
using primitives::Text;
using primitives::Title;

namespace {

// Bytes of SVG text, about: a bar (its rect, tooltip and label; 172 on average for 2^22 bars whose
// tooltips read "forward (F) 123: 1234.000 .. 1235.000 ms"), a row (its label and background), and the
// rest (header, titles, axes, legend).
constexpr size_t kBarTextBytes = 192;
constexpr size_t kRowTextBytes = 256;
constexpr size_t kFixedTextBytes = 16384;

const char* FillOf(BarClass c) {
  switch (c) {
    case BarClass::kForward: return "#4e79a7";
    case BarClass::kBackward: return "#59a14f";
    case BarClass::kBackwardInput: return "#8cd17d";
    case BarClass::kWeightGrad: return "#b6992d";
    case BarClass::kOptimizer: return "#79706e";
    case BarClass::kTpComm: return "#f28e2b";
    case BarClass::kDpComm: return "#e15759";
    case BarClass::kWait: return "#ffd6d6";
    case BarClass::kEpComm: return "#b07aa1";
  }
  return "#000000";
}

}  // namespace

const char* BarClassName(BarClass c) {
  switch (c) {
    case BarClass::kForward: return "forward (F)";
    case BarClass::kBackward: return "backward (B)";
    case BarClass::kBackwardInput: return "input gradient (b)";
    case BarClass::kWeightGrad: return "weight gradient (W)";
    case BarClass::kOptimizer: return "optimizer (O)";
    case BarClass::kTpComm: return "TP all-reduce";
    case BarClass::kDpComm: return "gradient all-reduce (comm stream)";
    case BarClass::kWait: return "waiting on communication";
    case BarClass::kEpComm: return "EP all-to-all";
  }
  return "?";
}

namespace {

constexpr double kRowH = 26, kComputeH = 17;  // a device row; its compute bars (a DP strip below)

// The legend's entries (idle first, then the classes the panels use), laid out left to right and
// wrapped within the chart (every class in one line is about 1350 px wide); *lines: how many lines.
struct LegendEntry {
  std::string name;
  const char* fill;
  double x = 0;
  int line = 0;
};
constexpr double kLegendLine = 18, kLegendChar = 6.5;  // 11 px DejaVu Sans: at most 6.5 px a character

std::vector<LegendEntry> PlanLegend(const std::vector<GanttPanel>& panels, int width, int* lines) {
  bool used[kNumBarClasses] = {};
  for (const GanttPanel& p : panels) {
    for (const GanttBar& b : p.bars) used[static_cast<int>(b.cls)] = true;
  }
  std::vector<LegendEntry> legend = {{"idle", "#eeeeee"}};
  for (int c = 0; c < kNumBarClasses; ++c) {
    if (used[c]) legend.push_back({BarClassName(static_cast<BarClass>(c)), FillOf(static_cast<BarClass>(c))});
  }
  *lines = 1;
  for (double lx = 14; LegendEntry& e : legend) {
    const double w = 18 + kLegendChar * static_cast<double>(e.name.size());
    if (lx > 14 && lx + w > width - 8) {
      lx = 14;
      ++*lines;
    }
    e.x = lx;
    e.line = *lines - 1;
    lx += w + 16;
  }
  return legend;
}

// Bar `b` in its row at `ry`, from x0 to x1: its rect with a tooltip, and its label when it fits. A DP
// all-reduce is a strip under the compute bars.
void AppendBar(std::string& out, const GanttBar& b, double ry, double x0, double x1) {
  const bool comm_strip = b.cls == BarClass::kDpComm;
  const double top = comm_strip ? ry + 1 + kComputeH + 1 : ry + 1;
  const double h = comm_strip ? kRowH - 3 - kComputeH - 1 : kComputeH;
  absl::StrAppend(&out, "<rect x=\"", Num(x0), "\" y=\"", Num(top), "\" width=\"", Num(std::max(0.5, x1 - x0)),
                  "\" height=\"", Num(h), "\" fill=\"", FillOf(b.cls), "\" stroke=\"#ffffff\" stroke-width=\"0.5\">",
                  "<title>", Escape(absl::StrCat(BarClassName(b.cls), b.label.empty() ? "" : " ", b.label, ": ",
                                                 absl::StrFormat("%.3f", b.start_ms), " .. ",
                                                 absl::StrFormat("%.3f", b.end_ms), " ms")),
                  "</title></rect>\n");
  if (!b.label.empty() && !comm_strip && x1 - x0 >= 6.5 * static_cast<double>(b.label.size()) + 3) {
    absl::StrAppend(&out, Text((x0 + x1) / 2, top + 12.5, b.label, 10, "middle",
                               b.cls == BarClass::kWait ? "" : " fill=\"#ffffff\""));
  }
}

}  // namespace

std::string RenderGantt(const std::string& title, const std::vector<GanttPanel>& panels, int width) {
  constexpr double kPanelTitle = 26, kAxisH = 24;
  size_t label_chars = 8;
  double span = 0;
  for (const GanttPanel& p : panels) {
    span = std::max(span, p.span_ms);
    for (const std::string& r : p.rows) label_chars = std::max(label_chars, r.size());
  }
  if (!(span > 0)) span = 1;
  const double left = 14 + 6.6 * static_cast<double>(label_chars), right = width - 16;
  auto X = [&](double ms) { return left + ms / span * (right - left); };
  const std::vector<double> ticks = NiceTicks(0, span, 10);

  double height = 40;
  for (const GanttPanel& p : panels) {
    height += kPanelTitle + kAxisH + kRowH * static_cast<double>(p.rows.size()) + 12;
  }
  int legend_lines = 1;
  const std::vector<LegendEntry> legend = PlanLegend(panels, width, &legend_lines);
  height += 50 + kLegendLine * (legend_lines - 1);
  std::string out = Header(width, static_cast<int>(height));
  // The text's size, reserved: a chart of millions of bars (a 722 MB SVG of 2^22 ops: about 172 bytes
  // a bar, its rect and tooltip) would otherwise double its buffer as it grows, holding 1.5 times the
  // text at the last copy (1.7 GB peak RSS for that chart, 1.2 GB reserved).
  size_t bars = 0, rows = 0;
  for (const GanttPanel& p : panels) {
    bars += p.bars.size();
    rows += p.rows.size();
  }
  out.reserve(out.size() + kBarTextBytes * bars + kRowTextBytes * rows + kFixedTextBytes);
  absl::StrAppend(&out, Title(width / 2.0, 24, title, 16, width));
  double y = 40;
  for (const GanttPanel& p : panels) {
    absl::StrAppend(&out, Text(14, y + 18, p.title, 13, "start", " font-weight=\"bold\""));
    y += kPanelTitle;
    // Time axis.
    for (double t : ticks) {
      if (t > span * 1.0001) break;
      absl::StrAppend(&out, Line(X(t), y + kAxisH - 4, X(t), y + kAxisH + kRowH * p.rows.size(), "#d0d0d0", 0.8));
      absl::StrAppend(&out, Text(X(t), y + kAxisH - 8, absl::StrCat(FormatTick(t, false), " ms"), 10, "middle"));
    }
    y += kAxisH;
    for (size_t r = 0; r < p.rows.size(); ++r) {
      const double ry = y + kRowH * static_cast<double>(r);
      absl::StrAppend(&out, Text(left - 8, ry + 13, p.rows[r], 11, "end"));
      absl::StrAppend(&out, "<rect x=\"", Num(left), "\" y=\"", Num(ry + 1), "\" width=\"",
                      Num(X(p.span_ms) - left), "\" height=\"", Num(kRowH - 3), "\" fill=\"#eeeeee\"/>\n");
    }
    absl::StrAppend(&out, "<g class=\"bars\">\n");
    for (const GanttBar& b : p.bars) {
      if (b.row < 0 || static_cast<size_t>(b.row) >= p.rows.size() || !(b.end_ms > b.start_ms)) continue;
      const double ry = y + kRowH * static_cast<double>(b.row);
      AppendBar(out, b, ry, X(b.start_ms), X(b.end_ms));
    }
    absl::StrAppend(&out, "</g>\n");
    y += kRowH * static_cast<double>(p.rows.size()) + 12;
  }
  // Legend.
  for (const LegendEntry& e : legend) {
    const double ly = y + 18 + kLegendLine * e.line;
    absl::StrAppend(&out, "<rect x=\"", Num(e.x), "\" y=\"", Num(ly - 9), "\" width=\"14\" height=\"11\" fill=\"",
                    e.fill, "\"/>\n", Text(e.x + 18, ly, e.name, 11, "start"));
  }
  absl::StrAppend(&out, "</svg>\n");
  return out;
}

}  // namespace rp::apps::svg
