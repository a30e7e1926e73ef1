#include "apps/svg.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "apps/svg_primitives.h"

namespace rp::apps::svg {
namespace {

using primitives::Header;
using primitives::Line;
using primitives::Num;
using primitives::Text;
using primitives::Title;

bool Finite(double v) { return std::isfinite(v); }

// Characters of UTF-8 `text` (its bytes that do not continue a character).
size_t Glyphs(std::string_view text) {
  return static_cast<size_t>(
      std::count_if(text.begin(), text.end(), [](char ch) { return (static_cast<unsigned char>(ch) & 0xc0) != 0x80; }));
}
// An x tick label's width a character (11 px DejaVu Sans: digits 7 px, most letters less) and the
// room kept between two labels.
constexpr double kTickCharWidth = 7;
constexpr double kTickLabelGap = 4;

// A marker of shape `m` centred at (x, y); `r` is the circle's radius, the other shapes are drawn to
// look about as large.
std::string MarkerAt(Marker m, double x, double y, double r, const std::string& fill, const std::string& stroke) {
  const std::string paint = absl::StrCat("\" fill=\"", fill, "\" stroke=\"", stroke, "\" stroke-width=\"1.5\"/>\n");
  auto polygon = [&](std::initializer_list<std::pair<double, double>> pts) {
    std::string points;
    for (const auto& [px, py] : pts) absl::StrAppend(&points, points.empty() ? "" : " ", Num(px), ",", Num(py));
    return absl::StrCat("<polygon points=\"", points, paint);
  };
  switch (m) {
    case Marker::kCircle:
      return absl::StrCat("<circle cx=\"", Num(x), "\" cy=\"", Num(y), "\" r=\"", r, paint);
    case Marker::kSquare: {
      const double h = 0.9 * r;
      return absl::StrCat("<rect x=\"", Num(x - h), "\" y=\"", Num(y - h), "\" width=\"", Num(2 * h), "\" height=\"",
                          Num(2 * h), paint);
    }
    case Marker::kTriangle:
      return polygon({{x, y - 1.25 * r}, {x + 1.15 * r, y + 0.8 * r}, {x - 1.15 * r, y + 0.8 * r}});
    case Marker::kDiamond:
      return polygon({{x, y - 1.3 * r}, {x + 1.1 * r, y}, {x, y + 1.3 * r}, {x - 1.1 * r, y}});
    case Marker::kTriangleDown:
      return polygon({{x, y + 1.25 * r}, {x + 1.15 * r, y - 0.8 * r}, {x - 1.15 * r, y - 0.8 * r}});
  }
  return "";
}

// Where a chart's legend goes. Long names (several series groups), or more entries than the column on
// the right holds even 13 px apart, go in columns under the plot instead (as many as their names
// allow, 1 to 4).
struct LegendPlan {
  bool below = false;
  size_t cols = 1, rows = 0;  // under the plot
  double right_step = 18;     // on the right: baseline to baseline
  double width = 0;           // on the right: the column's width
};
constexpr double kChartTop = 34;         // the plot's top (under the title)
constexpr double kLegendRowHeight = 17;  // a row of legend entries under the plot
constexpr double kMinPlotHeight = 160;   // FittedHeight keeps at least this much plot above the legend

LegendPlan PlanLegend(const Chart& c, int width, int height) {
  size_t longest = 0;
  for (const Series& s : c.series) longest = std::max(longest, s.name.size());
  LegendPlan p;
  const size_t ns = c.series.size();
  const double right_room = height - 10 - (kChartTop + 8);  // from the first entry's baseline to the last's
  p.right_step = ns <= 1 ? 18.0 : std::min(18.0, right_room / static_cast<double>(ns - 1));
  p.below = longest > 22 || p.right_step < 13;
  p.cols = std::clamp<size_t>(static_cast<size_t>((width - 24) / (40.0 + 6.5 * static_cast<double>(longest))), 1, 4);
  p.rows = p.below ? (ns + p.cols - 1) / p.cols : 0;
  p.width = p.below ? 0 : std::min(220.0, 40.0 + 6.2 * static_cast<double>(longest));
  return p;
}

// `height`, or more where the legend under the plot would leave it less than kMinPlotHeight px (dozens
// of series: `sweep --axis=seed=1..40` has 80).
int FittedHeight(const Chart& c, int width, int height) {
  const LegendPlan p = PlanLegend(c, width, height);
  if (!p.below) return height;
  const double needed = kChartTop + kMinPlotHeight + 46 + kLegendRowHeight * static_cast<double>(p.rows);
  return std::max(height, static_cast<int>(std::ceil(needed)));
}

// Where a chart's plot sits and how it maps data to it.
struct Frame {
  double left = 0, right = 0, top = 0, bottom = 0;
  bool numeric = false;      // numeric x values (else categories)
  std::vector<double> pos;   // each x position in axis units (log2 on a log x axis)
  double xlo = 0, xhi = 1;
  double ylo = 0, yhi = 1;
  bool log_y = false;
  bool have_data = false;
  std::vector<double> ticks;  // y ticks
  double X(double p) const { return left + (p - xlo) / (xhi - xlo) * (right - left); }
  double Y(double v) const {
    if (log_y) return bottom - (std::log10(v) - std::log10(ylo)) / (std::log10(yhi) - std::log10(ylo)) * (bottom - top);
    return bottom - (v - ylo) / (yhi - ylo) * (bottom - top);
  }
  bool Drawn(double v) const { return Finite(v) && !(log_y && v <= 0); }
};

Frame PlanFrame(const Chart& c, int width, int height, const LegendPlan& legend) {
  Frame f;
  const size_t n = !c.x_values.empty() ? c.x_values.size() : c.x_labels.size();
  f.top = kChartTop;
  f.left = 68;
  f.right = width - legend.width - 12;
  f.bottom = height - 46 - kLegendRowHeight * static_cast<double>(legend.rows);
  // x positions
  f.numeric = !c.x_values.empty();
  const bool log_x = f.numeric && c.log_x &&
                     std::all_of(c.x_values.begin(), c.x_values.end(), [](double v) { return v > 0; });
  f.pos.resize(n);
  for (size_t i = 0; i < n; ++i) {
    f.pos[i] = f.numeric ? (log_x ? std::log2(c.x_values[i]) : c.x_values[i]) : static_cast<double>(i);
  }
  f.xlo = n > 0 ? *std::min_element(f.pos.begin(), f.pos.end()) : 0;
  f.xhi = n > 0 ? *std::max_element(f.pos.begin(), f.pos.end()) : 1;
  if (c.bars || !f.numeric) {
    f.xlo -= 0.5;
    f.xhi += 0.5;
  } else {
    const double pad = f.xhi > f.xlo ? (f.xhi - f.xlo) * 0.06 : 0.5;
    f.xlo -= pad;
    f.xhi += pad;
  }
  // y range
  double ylo = std::numeric_limits<double>::infinity(), yhi = -ylo;
  for (const Series& s : c.series) {
    for (double v : s.y) {
      if (!Finite(v) || (c.log_y && v <= 0)) continue;
      ylo = std::min(ylo, v);
      yhi = std::max(yhi, v);
    }
  }
  f.have_data = Finite(ylo);
  f.log_y = c.log_y;
  if (!f.have_data) {
    ylo = 0;
    yhi = 1;
    f.log_y = false;
  }
  if (f.log_y) {
    ylo = std::pow(10.0, std::floor(std::log10(ylo)));
    yhi = std::pow(10.0, std::ceil(std::log10(yhi)));
    if (yhi <= ylo) yhi = ylo * 10;
    for (double t = ylo; t <= yhi * 1.0001; t *= 10) f.ticks.push_back(t);
  } else {
    ylo = std::min(0.0, ylo);
    if (yhi <= ylo) yhi = ylo + 1;
    f.ticks = NiceTicks(ylo, yhi * 1.04, 6);
    yhi = std::max(yhi, f.ticks.back());
    ylo = std::min(ylo, f.ticks.front());
  }
  f.ylo = ylo;
  f.yhi = yhi;
  return f;
}

// Grid, axes, ticks and axis titles. Every x position gets its tick. On a numeric axis a label that
// would overlap one already placed is left out (its neighbours tell its value): first the labels that
// say no point ran there ("99 (invalid)"), then the two ends, then the others from left to right
// (`--axis=seed=1..60` on a log2 axis printed 60 labels on top of each other). A category's label is
// its only name: always drawn.
void DrawAxes(std::string& out, const Chart& c, const Frame& f) {
  const size_t n = f.pos.size();
  for (double t : f.ticks) {
    const double y = f.Y(t);
    absl::StrAppend(&out, Line(f.left, y, f.right, y, "#e3e3e3", 1));
    absl::StrAppend(&out, Text(f.left - 6, y + 4, FormatTick(t, c.y_bytes), 11, "end"));
  }
  absl::StrAppend(&out, Line(f.left, f.top, f.left, f.bottom, "#333333", 1.2));
  absl::StrAppend(&out, Line(f.left, f.bottom, f.right, f.bottom, "#333333", 1.2));
  std::vector<std::string> tick_labels(n);
  std::vector<size_t> by_x(n);
  for (size_t i = 0; i < n; ++i) {
    tick_labels[i] = i < c.x_labels.size() ? c.x_labels[i] : FormatTick(f.numeric ? c.x_values[i] : i, false);
    by_x[i] = i;
  }
  std::stable_sort(by_x.begin(), by_x.end(), [&](size_t a, size_t b) { return f.pos[a] < f.pos[b]; });
  std::vector<bool> labelled(n, false);
  std::vector<std::pair<double, double>> taken;  // [left, right] of the labels placed
  auto place = [&](size_t i) {
    if (labelled[i]) return;
    if (!f.numeric) {
      labelled[i] = true;
      return;
    }
    const double half = kTickCharWidth * static_cast<double>(Glyphs(tick_labels[i])) / 2, x = f.X(f.pos[i]);
    for (const auto& [l, r] : taken) {
      if (x - half < r + kTickLabelGap && l < x + half + kTickLabelGap) return;
    }
    taken.emplace_back(x - half, x + half);
    labelled[i] = true;
  };
  for (const size_t i : by_x) {
    if (tick_labels[i].find(" (") != std::string::npos) place(i);
  }
  if (n > 0) {
    place(by_x.front());
    place(by_x.back());
  }
  for (const size_t i : by_x) place(i);
  for (size_t i = 0; i < n; ++i) {
    const double x = f.X(f.pos[i]);
    absl::StrAppend(&out, Line(x, f.bottom, x, f.bottom + 5, "#333333", 1));
    if (labelled[i]) absl::StrAppend(&out, Text(x, f.bottom + 18, tick_labels[i], 11, "middle"));
  }
  absl::StrAppend(&out, Text((f.left + f.right) / 2, f.bottom + 36, c.x_label, 12, "middle"));
  absl::StrAppend(&out, absl::StrCat("<text x=\"16\" y=\"", Num((f.top + f.bottom) / 2),
                                     "\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 16 ",
                                     Num((f.top + f.bottom) / 2), ")\">", Escape(c.y_label), "</text>\n"));
  if (!f.have_data) absl::StrAppend(&out, Text((f.left + f.right) / 2, (f.top + f.bottom) / 2, "no data", 13, "middle"));
}

// Series k of a bar chart: a bar per drawn point, grouped around its x position.
void DrawBars(std::string& out, const Chart& c, const Frame& f, size_t k) {
  const Series& s = c.series[k];
  const char* dash = s.dashed ? " stroke-dasharray=\"6 4\"" : "";
  const size_t ns = c.series.size();
  const double group = (f.X(1) - f.X(0)) * 0.8;
  const double bw = group / static_cast<double>(std::max<size_t>(ns, 1));
  for (size_t i = 0; i < f.pos.size() && i < s.y.size(); ++i) {
    const double v = s.y[i];
    if (!f.Drawn(v)) continue;
    const double x0 = f.X(f.pos[i]) - group / 2 + bw * static_cast<double>(k);
    const double base = f.log_y ? f.bottom : f.Y(std::max(0.0, f.ylo));
    const double y = f.Y(v);
    absl::StrAppend(&out, "<rect x=\"", Num(x0 + 1), "\" y=\"", Num(std::min(y, base)), "\" width=\"",
                    Num(std::max(1.0, bw - 2)), "\" height=\"", Num(std::abs(base - y)), "\" fill=\"", s.color,
                    "\" fill-opacity=\"", s.dashed ? "0.22" : "0.9", "\" stroke=\"", s.color,
                    "\" stroke-width=\"1.5\"", dash, "/>\n");
    if (s.marker != Marker::kCircle) {  // a plain bar is the circle's; the other shapes sit on its top
      const double r = std::clamp(bw / 2 - 1.5, 1.5, 3.5);
      absl::StrAppend(&out, MarkerAt(s.marker, x0 + bw / 2, std::min(y, base) - 1.5 * r - 1, r,
                                     s.dashed ? "#ffffff" : s.color, s.color));
    }
  }
}

// A line series: polylines broken at missing points, joining the points left to right (an axis may
// list its values in any order: `--axis=microbatches=16,2,8,4`), and a marker per point.
void DrawLine(std::string& out, const Series& s, const Frame& f) {
  const char* dash = s.dashed ? " stroke-dasharray=\"6 4\"" : "";
  const size_t n = f.pos.size();
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return f.pos[a] < f.pos[b]; });
  std::string pts;
  auto flush = [&] {
    if (!pts.empty()) {
      absl::StrAppend(&out, "<polyline fill=\"none\" stroke=\"", s.color, "\" stroke-width=\"2\"", dash,
                      " points=\"", pts, "\"/>\n");
    }
    pts.clear();
  };
  for (const size_t i : order) {
    const double v = i < s.y.size() ? s.y[i] : std::numeric_limits<double>::quiet_NaN();
    if (!f.Drawn(v)) {
      flush();
      continue;
    }
    absl::StrAppend(&pts, pts.empty() ? "" : " ", Num(f.X(f.pos[i])), ",", Num(f.Y(v)));
  }
  flush();
  for (size_t i = 0; i < n && i < s.y.size(); ++i) {
    const double v = s.y[i];
    if (!f.Drawn(v)) continue;
    absl::StrAppend(&out, MarkerAt(s.marker, f.X(f.pos[i]), f.Y(v), s.dashed ? 3.5 : 4, s.dashed ? "#ffffff" : s.color,
                                   s.color));
  }
}

// One entry per series: right of the plot, or in rows below it.
void DrawLegend(std::string& out, const Chart& c, const Frame& f, const LegendPlan& legend, int width) {
  for (size_t k = 0; k < c.series.size(); ++k) {
    const Series& s = c.series[k];
    const double lx = legend.below ? 24 + static_cast<double>(k % legend.cols) * (width - 24) /
                                              static_cast<double>(legend.cols)
                                   : width - legend.width;
    const double ly = legend.below ? f.bottom + 52 + kLegendRowHeight * static_cast<double>(k / legend.cols)
                                   : f.top + 8 + legend.right_step * static_cast<double>(k);
    if (c.bars) {
      absl::StrAppend(&out, "<rect x=\"", Num(lx), "\" y=\"", Num(ly - 6), "\" width=\"22\" height=\"11\" fill=\"",
                      s.color, "\" fill-opacity=\"", s.dashed ? "0.22" : "0.9", "\" stroke=\"", s.color,
                      "\" stroke-width=\"1.5\"", s.dashed ? " stroke-dasharray=\"4 3\"" : "", "/>\n");
      if (s.marker != Marker::kCircle) {
        absl::StrAppend(&out, MarkerAt(s.marker, lx + 11, ly - 0.5, 3, s.dashed ? "#ffffff" : s.color, s.color));
      }
    } else {
      absl::StrAppend(&out, Line(lx, ly, lx + 24, ly, s.color.c_str(), 2, s.dashed ? " stroke-dasharray=\"6 4\"" : ""));
      absl::StrAppend(&out, MarkerAt(s.marker, lx + 12, ly, s.dashed ? 3.5 : 4, s.dashed ? "#ffffff" : s.color, s.color));
    }
    absl::StrAppend(&out, Text(lx + 30, ly + 4, s.name, 11, "start"));
  }
}

// The body of one chart (no <svg> wrapper), drawn in [0, width] × [0, height].
std::string ChartBody(const Chart& c, int width, int height) {
  std::string out;
  const LegendPlan legend = PlanLegend(c, width, height);
  const Frame f = PlanFrame(c, width, height, legend);
  absl::StrAppend(&out, Title(width / 2.0, 20, c.title, 15, width));
  DrawAxes(out, c, f);
  for (size_t k = 0; k < c.series.size(); ++k) {
    absl::StrAppend(&out, "<g class=\"series\" data-name=\"", Escape(c.series[k].name), "\">\n");
    if (c.bars) {
      DrawBars(out, c, f, k);
    } else {
      DrawLine(out, c.series[k], f);
    }
    absl::StrAppend(&out, "</g>\n");
  }
  DrawLegend(out, c, f, legend, width);
  return out;
}

}  // namespace

std::string Escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    // U+FFFE and U+FFFF are UTF-8 but not XML 1.0 characters: U+FFFD stands for them.
    if (ch == '\xef' && i + 2 < text.size() && text[i + 1] == '\xbf' &&
        (text[i + 2] == '\xbe' || text[i + 2] == '\xbf')) {
      out += "\xef\xbf\xbd";
      i += 2;
      continue;
    }
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // Control characters are not allowed in XML 1.0 (except tab, newline, carriage return).
        if (static_cast<unsigned char>(ch) < 0x20 && ch != '\t' && ch != '\n' && ch != '\r') {
          out += ' ';
        } else {
          out += ch;
        }
    }
  }
  return out;
}

const char* Color(size_t i) {
  static constexpr const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                             "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  return kPalette[i % (sizeof(kPalette) / sizeof(kPalette[0]))];
}

Marker SeriesMarker(size_t i) { return static_cast<Marker>((i / 10) % kNumMarkers); }

std::vector<double> NiceTicks(double lo, double hi, int target) {
  if (!(hi > lo)) hi = lo + 1;
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  std::vector<double> out;
  const double first = std::floor(lo / step) * step;
  for (double t = first; t <= hi + step * 0.999 && out.size() < 64; t += step) {
    out.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
    if (t >= hi) break;
  }
  return out;
}

std::string FormatTick(double v, bool bytes) {
  if (!std::isfinite(v)) return "n/a";
  auto trim = [](double x) {
    if (std::abs(x) < 1e6 && x == std::floor(x)) return absl::StrFormat("%.0f", x);
    return absl::StrFormat("%.3g", x);
  };
  const double a = std::abs(v);
  if (bytes) {
    if (a >= 1e9) return absl::StrCat(trim(v / 1e9), " GB");
    if (a >= 1e6) return absl::StrCat(trim(v / 1e6), " MB");
    if (a >= 1e3) return absl::StrCat(trim(v / 1e3), " kB");
    return absl::StrCat(trim(v), " B");
  }
  if (a >= 1e9) return absl::StrCat(trim(v / 1e9), "G");
  if (a >= 1e6) return absl::StrCat(trim(v / 1e6), "M");
  if (a >= 1e4) return absl::StrCat(trim(v / 1e3), "k");
  return trim(v);
}

std::string RenderChart(const Chart& chart, int width, int height) {
  height = FittedHeight(chart, width, height);
  return absl::StrCat(Header(width, height), ChartBody(chart, width, height), "</svg>\n");
}

std::string RenderFigure(const std::string& title, const std::vector<Chart>& charts, int columns, int width,
                         int height) {
  columns = std::max(1, std::min(columns, static_cast<int>(std::max<size_t>(charts.size(), 1))));
  const int rows = (static_cast<int>(charts.size()) + columns - 1) / columns;
  for (const Chart& c : charts) height = std::max(height, FittedHeight(c, width, height));
  const int title_h = title.empty() ? 0 : 34;
  const int W = columns * width, H = title_h + std::max(rows, 1) * height;
  std::string out = Header(W, H);
  if (!title.empty()) absl::StrAppend(&out, Title(W / 2.0, 24, title, 17, W));
  for (size_t i = 0; i < charts.size(); ++i) {
    const int cx = static_cast<int>(i) % columns, cy = static_cast<int>(i) / columns;
    absl::StrAppend(&out, "<g transform=\"translate(", cx * width, ",", title_h + cy * height, ")\">\n",
                    ChartBody(charts[i], width, height), "</g>\n");
  }
  absl::StrAppend(&out, "</svg>\n");
  return out;
}
}  // namespace rp::apps::svg
