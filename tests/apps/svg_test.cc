// apps/svg.h: the charts are well-formed XML (checked by a small parser), escape their text, and draw
// what they are given: one polyline per unbroken run of a series, one marker or bar per finite value,
// decade ticks on a log axis, a legend entry per series, Gantt bars with their labels.
#include "apps/svg.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <regex>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "apps/report_reader.h"
#include "apps/sweep.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/apps/xml_check.h"

namespace rp::apps::svg {
namespace {

using testing::AttributeValues;
using testing::ParseXml;
using testing::XmlDoc;

using json = nlohmann::json;
const double kNaN = std::numeric_limits<double>::quiet_NaN();

bool HasText(const XmlDoc& doc, const std::string& text) {
  for (const std::string& t : doc.texts) {
    if (t == text) return true;
  }
  return false;
}

TEST(XmlCheck, RejectsWhatIsNotWellFormed) {
  EXPECT_TRUE(ParseXml("<a x=\"1\"><b/>t &amp; u</a>").ok);
  for (const char* bad : {"<a><b></a></b>", "<a>x < y</a>", "<a x=1/>", "<a>&nbsp;</a>", "<a></a><b/>",
                          "<a x=\"<\"/>", "<a x=\"1\" x=\"2\"/>", "<a>", "text"}) {
    EXPECT_FALSE(ParseXml(bad).ok) << bad;
  }
}

TEST(Svg, EscapeReplacesTheFiveXmlSpecialCharacters) {
  EXPECT_EQ(Escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&apos;");
  EXPECT_EQ(Escape("tab\there\x01"), "tab\there ");
}

TEST(SvgChart, IsWellFormedWithEscapedNamesAndOneLegendEntryPerSeries) {
  Chart c{.title = "step <time> & \"more\"", .x_label = "m", .y_label = "ms", .x_values = {2, 4, 8, 16},
          .x_labels = {"2", "4", "8", "16"}, .log_x = true};
  c.series.push_back({.name = "measured (codec=<fp16>)", .y = {430, 690, 1210, 2250}, .color = Color(0)});
  c.series.push_back({.name = "predicted (codec=<fp16>)", .y = {430, 690, 1210, 2250}, .color = Color(0),
                      .dashed = true});
  const XmlDoc doc = ParseXml(RenderChart(c));
  ASSERT_TRUE(doc.ok) << doc.error;
  EXPECT_EQ(doc.root, "svg");
  EXPECT_TRUE(HasText(doc, "step <time> & \"more\""));
  EXPECT_TRUE(HasText(doc, "measured (codec=<fp16>)"));
  EXPECT_TRUE(HasText(doc, "predicted (codec=<fp16>)"));
  EXPECT_EQ(doc.elements.at("polyline"), 2);
  EXPECT_EQ(doc.elements.at("circle"), 8 + 2);  // a marker per point, and one on each legend swatch
  const auto names = AttributeValues(doc, "data-name");
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[1], "predicted (codec=<fp16>)");
  // The predicted line is dashed, the measured one is not.
  int dashed = 0;
  for (const std::string& v : AttributeValues(doc, "stroke-dasharray")) dashed += !v.empty();
  EXPECT_EQ(dashed, 2);  // the predicted polyline and its legend swatch
  for (const char* tick : {"2", "4", "8", "16"}) EXPECT_TRUE(HasText(doc, tick)) << tick;
}

TEST(SvgChart, AMissingPointBreaksTheLineAndDrawsNoMarker) {
  Chart c{.title = "t", .x_values = {1, 2, 3, 4, 5}};
  c.series.push_back({.name = "measured", .y = {1, 2, kNaN, 4, 5}});
  const XmlDoc doc = ParseXml(RenderChart(c));
  ASSERT_TRUE(doc.ok) << doc.error;
  EXPECT_EQ(doc.elements.at("polyline"), 2);
  EXPECT_EQ(doc.elements.at("circle"), 4 + 1);  // and the legend swatch's
}

// An axis given out of order (`--axis=microbatches=16,2,8,4`) is drawn left to right: the line joins
// the points in the order of their x, not of the axis values — it zig-zagged 16 -> 2 -> 8 -> 4.
TEST(SvgChart, ALineJoinsItsPointsInTheOrderOfTheirX) {
  Chart c{.title = "t", .x_values = {16, 2, 8, 4}, .x_labels = {"16", "2", "8", "4"}, .log_x = true};
  c.series.push_back({.name = "predicted", .y = {2290, 470, 1370, 770}, .dashed = true});
  const XmlDoc doc = ParseXml(RenderChart(c));
  ASSERT_TRUE(doc.ok) << doc.error;
  const std::vector<std::string> lines = AttributeValues(doc, "points");
  ASSERT_EQ(lines.size(), 1u);
  std::vector<double> xs;
  for (absl::string_view pt : absl::StrSplit(lines[0], ' ')) {
    double x = 0;
    ASSERT_TRUE(absl::SimpleAtod(pt.substr(0, pt.find(',')), &x)) << pt;
    xs.push_back(x);
  }
  ASSERT_EQ(xs.size(), 4u);
  EXPECT_TRUE(std::is_sorted(xs.begin(), xs.end())) << lines[0];
}

// A chart's title fits its width: a sweep's chart title is "<sweep title>: <metric>", and `sweep
// --axis=microbatches=... --axis=dp=...`'s exposed_comm.svg title (80 characters at 15 px bold, about
// 790 px) was cut at both edges of its 640 px chart. The title's font shrinks to fit.
TEST(SvgChart, ALongTitleFitsTheChartsWidth) {
  const std::string title =
      "ringpipe sweep over microbatches x dp: exposed communication (mean over devices)";
  Chart c{.title = title, .x_values = {1, 2}};
  c.series.push_back({.name = "predicted", .y = {1, 2}, .dashed = true});
  const int width = 640;
  const std::string svg = RenderChart(c, width, 380);
  ASSERT_TRUE(ParseXml(svg).ok);
  const size_t at = svg.find(">" + title + "</text>");
  ASSERT_NE(at, std::string::npos);
  const size_t size_at = svg.rfind("font-size=\"", at) + 11;
  double size = 0;
  ASSERT_TRUE(absl::SimpleAtod(svg.substr(size_at, svg.find('"', size_at) - size_at), &size));
  // DejaVu Sans Bold: at most 0.66 em a character on average.
  EXPECT_LE(0.66 * size * static_cast<double>(title.size()), width) << size;
  EXPECT_GE(size, 8);
}

// Every legend entry is inside the chart, however many series a grid gives: `sweep --axis=microbatches=2,4
// --axis=dp=1..10` has 20 series (measured and predicted per dp) and 40 with dp=1..20; the legend column
// on the right ran 18 px an entry past the chart's bottom (the last entries at y = 388 and 730 of 380).
// A legend under the plot leaves it at least 160 px: the chart grows (with dp=1..40, 80 series, the
// legend left the plot 10 px at 380 — less than nothing with 27 rows of entries).
TEST(SvgChart, EveryLegendEntryOfAManySeriesGridIsInsideTheChart) {
  for (int groups : {10, 20, 40}) {
    Chart c{.title = "t", .x_values = {2, 4}};
    for (int g = 1; g <= groups; ++g) {
      for (bool dashed : {false, true}) {
        c.series.push_back({.name = (dashed ? "predicted (dp=" : "measured (dp=") + std::to_string(g) + ")",
                            .y = {1.0 * g, 2.0 * g}, .color = Color(static_cast<size_t>(g)), .dashed = dashed});
      }
    }
    const int width = 640;
    const std::string svg = RenderChart(c, width, 380);
    ASSERT_TRUE(ParseXml(svg).ok);
    // The chart's own height: at least the one asked for, more when the legend needs it.
    const size_t h_at = svg.find("height=\"") + 8;
    int height = 0;
    ASSERT_TRUE(absl::SimpleAtoi(svg.substr(h_at, svg.find('"', h_at) - h_at), &height));
    EXPECT_GE(height, 380);
    double first_legend_y = height;
    for (const Series& s : c.series) {
      const size_t at = svg.find(">" + s.name + "</text>");
      ASSERT_NE(at, std::string::npos) << s.name;
      const size_t tag = svg.rfind("<text x=\"", at);
      double x = 0, y = 0;
      ASSERT_TRUE(absl::SimpleAtod(svg.substr(tag + 9, svg.find('"', tag + 9) - tag - 9), &x)) << s.name;
      const size_t ya = svg.find("y=\"", tag) + 3;
      ASSERT_TRUE(absl::SimpleAtod(svg.substr(ya, svg.find('"', ya) - ya), &y)) << s.name;
      EXPECT_LE(x + 6.5 * static_cast<double>(s.name.size()), width) << groups << " " << s.name;
      EXPECT_LE(y, height - 2) << groups << " " << s.name;
      first_legend_y = std::min(first_legend_y, y);
    }
    // The plot (from y = 34 to its x axis, 46 px above the legend's first row) keeps 160 px.
    if (groups >= 20) {
      EXPECT_GE(first_legend_y - 52 - 34, 160) << groups;
    }
  }
}

// Legend entries under the plot do not overlap: long names (a series that names its points that did not
// run, "measured (microbatches=0) — invalid at pp=1,2") went in two columns whatever their length, each
// running into the next in a 540 px panel of overview.svg.
TEST(SvgChart, LongLegendNamesUnderThePlotDoNotOverlap) {
  Chart c{.title = "t", .x_values = {1, 2}};
  for (const char* name : {"measured (microbatches=4)", "predicted (microbatches=4)",
                           "measured (microbatches=0) — invalid at pp=1,2", "predicted (microbatches=0) — invalid at pp=1,2"}) {
    c.series.push_back({.name = name, .y = {1, 2}});
  }
  const int width = 540;
  const std::string svg = RenderChart(c, width, 360);
  ASSERT_TRUE(ParseXml(svg).ok);
  std::map<std::string, std::vector<std::pair<double, size_t>>> rows;  // y -> (x, chars) of its entries
  for (const Series& s : c.series) {
    const size_t at = svg.find(">" + s.name + "</text>");
    ASSERT_NE(at, std::string::npos) << s.name;
    const size_t tag = svg.rfind("<text x=\"", at);
    double x = 0;
    ASSERT_TRUE(absl::SimpleAtod(svg.substr(tag + 9, svg.find('"', tag + 9) - tag - 9), &x)) << s.name;
    const size_t ya = svg.find("y=\"", tag) + 3;
    rows[svg.substr(ya, svg.find('"', ya) - ya)].push_back({x, s.name.size()});
  }
  for (auto& [y, entries] : rows) {
    std::sort(entries.begin(), entries.end());
    for (size_t k = 0; k < entries.size(); ++k) {
      const double end = entries[k].first + 6.2 * static_cast<double>(entries[k].second);
      const double next = k + 1 < entries.size() ? entries[k + 1].first - 30 : width;  // the next swatch
      EXPECT_LE(end, next) << "row at y " << y << ", entry " << k;
    }
  }
}

// An element's drawing without its place: the tag and its attributes but the positions (x, y, cx,
// cy, x1..y2, a bar's height); a polygon's points relative to its first.
std::string Shape(const std::string& element) {
  static const std::regex attr("([a-z-]+)=\"([^\"]*)\"");
  std::string out = element.substr(0, element.find_first_of(" />"));
  for (std::sregex_iterator it(element.begin(), element.end(), attr), end; it != end; ++it) {
    const std::string name = (*it)[1], value = (*it)[2];
    if (name == "x" || name == "y" || name == "cx" || name == "cy" || name == "x1" || name == "y1" || name == "x2" ||
        name == "y2" || name == "height" || name == "data-name") {
      continue;
    }
    if (name == "points") {
      std::string rel;
      double x0 = 0, y0 = 0;
      bool first = true;
      for (absl::string_view pt : absl::StrSplit(value, ' ', absl::SkipEmpty())) {
        const std::vector<std::string> xy = absl::StrSplit(pt, ',');
        double x = 0, y = 0;
        if (xy.size() != 2 || !absl::SimpleAtod(xy[0], &x) || !absl::SimpleAtod(xy[1], &y)) return "bad points";
        if (first) x0 = x, y0 = y, first = false;
        rel += absl::StrFormat(" %.0f,%.0f", x - x0, y - y0);  // whole pixels: coordinates are rounded to 0.01
      }
      out += " points=" + rel;
      continue;
    }
    out += " " + name + "=" + value;
  }
  return out;
}

// The elements of `text` ("<a .../><b .../>"), each as Shape.
std::vector<std::string> Shapes(const std::string& text) {
  std::vector<std::string> out;
  for (size_t at = text.find('<'); at != std::string::npos; at = text.find('<', at + 1)) {
    out.push_back(Shape(text.substr(at, text.find('>', at) - at + 1)));
  }
  return out;
}

// What a reader tells series apart by: each series' legend swatch (what is drawn before its name), and
// the markers it draws on its points. 40 series groups (measured and predicted each: 80 series) give
// pairwise different swatches, on lines and on bars; a line's markers are its swatch's. Before, the
// groups 10 apart were drawn alike (the palette has 10 colours): `sweep --axis=microbatches=2,4
// --axis=seed=1..40` had four series for every legend entry.
TEST(SweepCharts, FortySeriesGroupsAreDrawnPairwiseDistinct) {
  for (const bool bars : {false, true}) {
    std::vector<sweep::Axis> axes(2);
    axes[0].fields = {bars ? "schedule" : "microbatches"};
    axes[0].values = bars ? std::vector<std::vector<std::string>>{{"gpipe"}, {"1f1b"}}
                          : std::vector<std::vector<std::string>>{{"2"}, {"4"}};
    axes[1].fields = {"seed"};
    for (int g = 1; g <= 40; ++g) axes[1].values.push_back({std::to_string(g)});
    std::vector<sweep::Point> points;
    for (size_t x = 0; x < 2; ++x) {
      for (size_t g = 0; g < 40; ++g) {
        sweep::Point p;
        p.coord = {x, g};
        for (sweep::Metrics* m : {&p.measured, &p.predicted}) {
          m->step_ms = m->speedup = m->bubble = m->exposed_ms = m->peak_bytes = m->wire_bytes =
              1.0 + static_cast<double>(x + g);
        }
        points.push_back(p);
      }
    }
    const std::vector<Chart> charts = sweep::BuildCharts(axes, points, false);
    ASSERT_EQ(charts.size(), 6u);
    const Chart& c = charts[0];
    ASSERT_EQ(c.bars, bars);
    ASSERT_EQ(c.series.size(), 80u);
    const std::string svg = RenderChart(c);
    ASSERT_TRUE(ParseXml(svg).ok);
    std::map<std::string, std::string> swatch_of;  // swatch -> the series it stands for
    for (const Series& s : c.series) {
      const size_t name_at = svg.find(">" + s.name + "</text>");
      ASSERT_NE(name_at, std::string::npos) << s.name;
      const size_t text_at = svg.rfind("<text", name_at);
      const size_t from = std::max(svg.rfind("</text>", text_at), svg.rfind("</g>", text_at));
      const std::vector<std::string> swatch = Shapes(svg.substr(from + 1, text_at - from - 1).substr(
          svg.substr(from + 1, text_at - from - 1).find('>') + 1));
      ASSERT_FALSE(swatch.empty()) << s.name;
      std::string key;
      for (const std::string& e : swatch) key += e + "\n";
      const auto [it, inserted] = swatch_of.emplace(key, s.name);
      EXPECT_TRUE(inserted) << (bars ? "bars: " : "lines: ") << s.name << " is drawn as " << it->second << ":\n"
                            << key;
      if (bars) continue;
      // The series' own markers (its points) have the swatch's marker shape.
      const size_t g_at = svg.find("<g class=\"series\" data-name=\"" + s.name + "\">");
      ASSERT_NE(g_at, std::string::npos) << s.name;
      const size_t g_end = svg.find("</g>", g_at);
      const std::vector<std::string> drawn = Shapes(svg.substr(svg.find('>', g_at) + 1, g_end - svg.find('>', g_at) - 1));
      size_t markers = 0;
      for (const std::string& e : drawn) {
        if (e.rfind("<polyline", 0) == 0) continue;
        ++markers;
        EXPECT_EQ(e, swatch.back()) << s.name;
      }
      EXPECT_EQ(markers, 2u) << s.name;
    }
  }
}

// The x tick labels of a numeric axis do not overlap: `sweep --axis=seed=1..60` (log2 spacing) printed
// all 60 labels, the right half on top of each other. Every position keeps its tick; the first end and a
// label saying no point ran there are drawn (the latter first: here it takes the place of "60"); a
// category's label is always drawn.
TEST(SvgChart, NumericTickLabelsDoNotOverlap) {
  Chart c{.title = "t", .x_label = "seed", .log_x = true};
  for (int v = 1; v <= 60; ++v) {
    c.x_values.push_back(v);
    c.x_labels.push_back(v == 45 ? "45 (invalid)" : std::to_string(v));
  }
  c.series.push_back({.name = "predicted", .y = std::vector<double>(60, 1.0), .dashed = true});
  const std::string svg = RenderChart(c);
  ASSERT_TRUE(ParseXml(svg).ok);
  // The labels drawn under the axis: their centre and width (7 px a character at 11 px).
  std::vector<std::pair<double, double>> spans;
  std::vector<std::string> drawn;
  for (int v = 1; v <= 60; ++v) {
    const std::string label = v == 45 ? "45 (invalid)" : std::to_string(v);
    const size_t at = svg.find("text-anchor=\"middle\">" + label + "</text>");
    if (at == std::string::npos) continue;
    const size_t tag = svg.rfind("<text x=\"", at);
    double x = 0;
    ASSERT_TRUE(absl::SimpleAtod(svg.substr(tag + 9, svg.find('"', tag + 9) - tag - 9), &x)) << label;
    spans.push_back({x - 3.5 * static_cast<double>(label.size()), x + 3.5 * static_cast<double>(label.size())});
    drawn.push_back(label);
  }
  for (const char* must : {"1", "45 (invalid)", "2", "4", "8"}) {
    EXPECT_NE(std::find(drawn.begin(), drawn.end(), must), drawn.end()) << must;
  }
  std::sort(spans.begin(), spans.end());
  for (size_t k = 1; k < spans.size(); ++k) EXPECT_LE(spans[k - 1].second, spans[k].first) << drawn.size() << " " << k;
  // One tick per position all the same: 60 short vertical lines from the axis down.
  size_t ticks = 0;
  for (size_t at = svg.find("<line "); at != std::string::npos; at = svg.find("<line ", at + 1)) {
    const std::string line = svg.substr(at, svg.find("/>", at) - at);
    double y1 = 0, y2 = 0;
    const size_t a = line.find("y1=\"") + 4, b = line.find("y2=\"") + 4;
    ASSERT_TRUE(absl::SimpleAtod(line.substr(a, line.find('"', a) - a), &y1));
    ASSERT_TRUE(absl::SimpleAtod(line.substr(b, line.find('"', b) - b), &y2));
    ticks += std::abs(y2 - y1 - 5) < 1e-9;
  }
  EXPECT_EQ(ticks, 60u);
  // Categories keep every label, however tight.
  Chart bars{.title = "t", .bars = true};
  for (int v = 0; v < 12; ++v) bars.x_labels.push_back("interleaved-" + std::to_string(v));
  bars.series.push_back({.name = "predicted", .y = std::vector<double>(12, 1.0), .dashed = true});
  const std::string bar_svg = RenderChart(bars);
  for (const std::string& label : bars.x_labels) EXPECT_NE(bar_svg.find(">" + label + "</text>"), std::string::npos);
}

TEST(SvgChart, CategoricalBarsDrawOneBarPerFiniteValue) {
  Chart c{.title = "schedules", .x_labels = {"gpipe", "1f1b", "interleaved", "zb-h1"}, .bars = true};
  c.series.push_back({.name = "measured", .y = {10, 8, kNaN, 7}});
  c.series.push_back({.name = "predicted", .y = {10, 8, 7.5, 7}, .dashed = true});
  const XmlDoc doc = ParseXml(RenderChart(c));
  ASSERT_TRUE(doc.ok) << doc.error;
  // Background + 7 bars + 2 legend swatches.
  EXPECT_EQ(doc.elements.at("rect"), 1 + 7 + 2);
  EXPECT_EQ(doc.elements.count("polyline"), 0u);
  for (const char* label : {"gpipe", "1f1b", "interleaved", "zb-h1"}) EXPECT_TRUE(HasText(doc, label)) << label;
}

TEST(SvgChart, LogScaleOfBytesHasDecadeTicks) {
  Chart c{.title = "wire", .x_values = {1, 2, 4}, .log_y = true, .y_bytes = true};
  c.series.push_back({.name = "predicted", .y = {2e3, 5e4, 3e5}, .dashed = true});
  const XmlDoc doc = ParseXml(RenderChart(c));
  ASSERT_TRUE(doc.ok) << doc.error;
  for (const char* tick : {"1 kB", "10 kB", "100 kB", "1 MB"}) EXPECT_TRUE(HasText(doc, tick)) << tick;
}

TEST(SvgChart, NoDataStillRendersAWellFormedChart) {
  Chart c{.title = "empty", .x_values = {1, 2}};
  c.series.push_back({.name = "measured", .y = {kNaN, kNaN}});
  const XmlDoc doc = ParseXml(RenderChart(c));
  ASSERT_TRUE(doc.ok) << doc.error;
  EXPECT_TRUE(HasText(doc, "no data"));
}

TEST(SvgFigure, HoldsEveryPanelInOneDocument) {
  std::vector<Chart> charts(6);
  for (size_t i = 0; i < charts.size(); ++i) {
    charts[i].title = "panel " + std::to_string(i);
    charts[i].x_values = {1, 2};
    charts[i].series.push_back({.name = "predicted", .y = {1, 2}, .dashed = true});
  }
  const XmlDoc doc = ParseXml(RenderFigure("six", charts, 3));
  ASSERT_TRUE(doc.ok) << doc.error;
  EXPECT_EQ(doc.elements.at("svg"), 1);
  EXPECT_EQ(doc.elements.at("g"), 6 + 6);  // a panel group and a series group each
  for (size_t i = 0; i < charts.size(); ++i) EXPECT_TRUE(HasText(doc, "panel " + std::to_string(i)));
}

TEST(SvgTicks, NiceTicksCoverTheRangeInOneTwoFiveSteps) {
  const std::vector<double> t = NiceTicks(0, 1370, 6);
  ASSERT_GE(t.size(), 3u);
  EXPECT_EQ(t.front(), 0);
  EXPECT_GE(t.back(), 1370);
  const double step = t[1] - t[0];
  EXPECT_DOUBLE_EQ(step, 250);
  EXPECT_EQ(FormatTick(1500, false), "1500");
  EXPECT_EQ(FormatTick(25000, false), "25k");
  EXPECT_EQ(FormatTick(2.5e6, true), "2.5 MB");
  EXPECT_EQ(FormatTick(0.25, false), "0.25");
}

TEST(SvgGantt, DrawsEveryBarWithItsLabelAndALegendOfTheClassesUsed) {
  GanttPanel p{.title = "predicted", .rows = {"rank 0", "rank 1"}, .span_ms = 100};
  p.bars = {{.row = 0, .start_ms = 0, .end_ms = 40, .cls = BarClass::kForward, .label = "0"},
            {.row = 1, .start_ms = 40, .end_ms = 80, .cls = BarClass::kBackward, .label = "0"},
            {.row = 1, .start_ms = 80, .end_ms = 100, .cls = BarClass::kDpComm, .label = ""},
            {.row = 5, .start_ms = 0, .end_ms = 1, .cls = BarClass::kForward, .label = "x"}};  // no such row
  const XmlDoc doc = ParseXml(RenderGantt("a <step>", {p}));
  ASSERT_TRUE(doc.ok) << doc.error;
  EXPECT_EQ(doc.elements.at("title"), 3);  // one tooltip per drawn bar
  EXPECT_TRUE(HasText(doc, "a <step>"));
  EXPECT_TRUE(HasText(doc, "rank 1"));
  EXPECT_TRUE(HasText(doc, "forward (F)"));
  EXPECT_TRUE(HasText(doc, "gradient all-reduce (comm stream)"));
  EXPECT_FALSE(HasText(doc, "TP all-reduce"));  // not used: not in the legend
  EXPECT_TRUE(HasText(doc, "idle"));
}

// The legend wraps within the chart: with every class used (a zero-bubble schedule with TP, EP and an
// optimizer) its one line was about 1350 px wide in a 1100 px chart, cutting "EP all-to-all" off.
TEST(SvgGantt, TheLegendOfEveryClassStaysInsideTheChart) {
  GanttPanel p{.title = "predicted", .rows = {"rank 0"}, .span_ms = 90};
  for (int c = 0; c < kNumBarClasses; ++c) {
    p.bars.push_back({.row = 0, .start_ms = 10.0 * c, .end_ms = 10.0 * c + 9, .cls = static_cast<BarClass>(c)});
  }
  const int width = 1100;
  const std::string svg = RenderGantt("every class", {p}, width);
  const XmlDoc doc = ParseXml(svg);
  ASSERT_TRUE(doc.ok) << doc.error;
  int height = 0;
  ASSERT_TRUE(absl::SimpleAtoi(AttributeValues(doc, "height")[0], &height));
  for (int c = 0; c < kNumBarClasses; ++c) {
    const std::string name = BarClassName(static_cast<BarClass>(c));
    const size_t at = svg.find("\">" + name + "</text>");
    ASSERT_NE(at, std::string::npos) << name;
    const size_t tag = svg.rfind("<text x=\"", at);
    double x = 0, y = 0;
    ASSERT_TRUE(absl::SimpleAtod(svg.substr(tag + 9, svg.find('"', tag + 9) - tag - 9), &x)) << name;
    const size_t ya = svg.find("y=\"", tag) + 3;
    ASSERT_TRUE(absl::SimpleAtod(svg.substr(ya, svg.find('"', ya) - ya), &y)) << name;
    // 11 px DejaVu Sans: at most 6.5 px a character.
    EXPECT_LE(x + 6.5 * static_cast<double>(name.size()), width) << name;
    EXPECT_LE(y, height - 4) << name;
  }
}

// A replica of more than 64 devices is drawn in part, and the title says so: `timeline --predict_only
// --dp=2 --pp=16 --tp=8` drew ranks 0..63 (stages 0..7) under a title ending "(first replica)", as if the
// pipeline had 8 stages.
TEST(SvgGantt, ATitleSaysWhenOnlyPartOfTheReplicaIsDrawn) {
  json ranks = json::array();
  for (int r = 0; r < 64; ++r) ranks.push_back(r);
  json report = {{"schema", "ringpipe-report/2"},
                 {"layout", {{"world", 256}, {"pp", 16}, {"tp", 8}, {"description", "DP=2 x PP=16 x TP=8"}}},
                 {"schedule", {{"name", "1f1b"}, {"microbatches", 16}}},
                 {"timeline",
                  {{"ranks", ranks},
                   {"predicted",
                    {{"step_ms", 1.0},
                     {"devices", json::array({{{"rank", 0}, {"ops", json::array({{{"start_ms", 0.0}, {"end_ms", 1.0}}})}}})}}}}}};
  absl::StatusOr<apps::TimelineReport> t = apps::ReadTimelineReport(report.dump());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_NE(t->title.find("(the first 64 of the first replica's 128 devices)"), std::string::npos) << t->title;
  report["layout"]["pp"] = 8;  // the whole replica: 64 devices
  t = apps::ReadTimelineReport(report.dump());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_NE(t->title.find("(first replica)"), std::string::npos) << t->title;
}

// A report's EP all-to-alls (timeline kind "ep_alltoall") are their own class, named so in the tooltips
// and the legend: they were drawn as "TP all-reduce" bars, also in layouts without TP.
TEST(SvgGantt, DrawsEpAllToAllsAsTheirOwnClassNotAsTpAllReduces) {
  const std::string report = R"({"schema": "ringpipe-report/2",
    "layout": {"world": 2, "pp": 1, "tp": 1, "description": "DP=2 x PP=1 x TP=1"},
    "schedule": {"name": "1f1b", "microbatches": 1},
    "timeline": {"ranks": [0], "predicted": {"step_ms": 3, "devices": [{"rank": 0, "pp": 0, "tp": 0, "ops": [
      {"kind": "compute", "op": "F", "start_ms": 0, "end_ms": 1, "mb": 0},
      {"kind": "ep_alltoall", "op": "F", "start_ms": 1, "end_ms": 1.5, "mb": 0},
      {"kind": "compute", "op": "F", "start_ms": 1.5, "end_ms": 3, "mb": 0}]}]}}})";
  absl::StatusOr<apps::TimelineReport> t = apps::ReadTimelineReport(report);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->panels.size(), 1u);
  ASSERT_EQ(t->panels[0].bars.size(), 3u);
  EXPECT_EQ(t->panels[0].bars[1].cls, BarClass::kEpComm);
  EXPECT_EQ(std::string(BarClassName(BarClass::kEpComm)), "EP all-to-all");
  const std::string svg = RenderGantt(t->title, t->panels);
  const XmlDoc doc = ParseXml(svg);
  ASSERT_TRUE(doc.ok) << doc.error;
  EXPECT_TRUE(HasText(doc, "EP all-to-all"));    // the legend
  EXPECT_FALSE(HasText(doc, "TP all-reduce"));   // no TP in this layout
  EXPECT_NE(svg.find("<title>EP all-to-all 0: 1.000 .. 1.500 ms</title>"), std::string::npos);
}

}  // namespace
}  // namespace rp::apps::svg
