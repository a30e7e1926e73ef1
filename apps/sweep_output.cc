// `ringpipe sweep`: the outputs (apps/sweep.h).
#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "apps/config_fields.h"
#include "apps/sweep.h"

namespace rp::apps::sweep {

using json = nlohmann::json;

const std::vector<std::string>& CsvColumns() {
  static const std::vector<std::string>* cols = new std::vector<std::string>{
      "point", "label", "status", "error", "preset", "dp", "pp", "tp", "ep", "world", "microbatches", "schedule",
      "virtual_stages", "codec", "segment_bytes", "bucket_mb", "link", "time_scale",
      "step_ms_measured", "step_ms_emulated", "step_ms_predicted", "fidelity_host", "fidelity_model", "t1_ms",
      "speedup_measured", "speedup_predicted", "efficiency_measured", "efficiency_predicted",
      "bubble_measured", "bubble_predicted", "makespan_bubble_ms_measured", "makespan_bubble_ms_predicted",
      "span_bubble_ms_measured", "span_bubble_ms_predicted", "exposed_comm_ms_measured", "exposed_comm_ms_predicted",
      "peer_wait_ms_measured", "peer_wait_ms_predicted", "host_late_ms_measured",
      "modeled_peak_activation_bytes_measured", "modeled_peak_activation_bytes_predicted",
      "modeled_wire_bytes_measured", "modeled_wire_bytes_predicted",
      "real_peak_activation_bytes", "real_wire_bytes", "wall_seconds"};
  return *cols;
}

namespace {

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += (c == '\n' || c == '\r') ? ' ' : c;
  }
  return out + "\"";
}

std::string CsvNum(double x) { return std::isfinite(x) ? absl::StrFormat("%.10g", x) : ""; }

json JNum(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

json MetricsJson(const Metrics& m) {
  return {{"step_ms", JNum(m.step_ms)},
          {"speedup", JNum(m.speedup)},
          {"efficiency", JNum(m.efficiency)},
          {"bubble", JNum(m.bubble)},
          {"makespan_bubble_ms", JNum(m.makespan_bubble_ms)},
          {"span_bubble_ms", JNum(m.span_bubble_ms)},
          {"exposed_comm_ms", JNum(m.exposed_ms)},
          {"peer_wait_ms", JNum(m.peer_wait_ms)},
          {"host_late_ms", JNum(m.host_late_ms)},  // a run's only: null in `predicted`
          {"modeled_peak_activation_bytes", JNum(m.peak_bytes)},
          {"modeled_wire_bytes", JNum(m.wire_bytes)}};
}

// The time scale a point ran at (auto: the one it measured); "virtual" on the virtual clock (its
// measured columns are then the emulated times: no wall clock was read); else its config's when it
// did not run ("auto" if that was auto).
std::string TimeScaleText(const Point& p) {
  if (std::isfinite(p.time_scale)) return absl::StrFormat("%g", p.time_scale);
  if (p.cfg.virtual_time) return "virtual";
  return p.cfg.time_scale_auto() ? "auto" : absl::StrFormat("%g", p.cfg.time_scale);
}

// The config columns of a point (from the config if it was built, else empty).
std::vector<std::string> ConfigColumns(const Point& p) {
  if (p.status == "invalid") return std::vector<std::string>(14, "");
  const RunConfig& c = p.cfg;
  return {c.preset, absl::StrCat(c.dp), absl::StrCat(c.pp), absl::StrCat(c.tp), absl::StrCat(c.ep),
          absl::StrCat(c.world_size()),
          absl::StrCat(c.microbatches), schedule::ScheduleName(c.schedule), absl::StrCat(c.chunks()),
          comm::CodecName(c.codec), absl::StrCat(c.segment_bytes), absl::StrFormat("%g", c.bucket_mb), c.link,
          TimeScaleText(p)};
}

}  // namespace

std::string BuildCsv(const std::vector<Point>& points) {
  std::string out = absl::StrCat(absl::StrJoin(CsvColumns(), ","), "\n");
  for (const Point& p : points) {
    std::vector<std::string> row = {absl::StrCat(p.index), CsvField(p.label), p.status, CsvField(p.error)};
    for (const std::string& s : ConfigColumns(p)) row.push_back(CsvField(s));
    for (double x : {p.measured.step_ms, p.emulated_step_ms, p.predicted.step_ms, p.fidelity_host, p.fidelity_model,
                     p.t1_ms, p.measured.speedup, p.predicted.speedup, p.measured.efficiency, p.predicted.efficiency,
                     p.measured.bubble, p.predicted.bubble, p.measured.makespan_bubble_ms,
                     p.predicted.makespan_bubble_ms, p.measured.span_bubble_ms, p.predicted.span_bubble_ms,
                     p.measured.exposed_ms, p.predicted.exposed_ms,
                     p.measured.peer_wait_ms, p.predicted.peer_wait_ms, p.measured.host_late_ms,
                     p.measured.peak_bytes, p.predicted.peak_bytes,
                     p.measured.wire_bytes, p.predicted.wire_bytes, p.real_peak_bytes, p.real_wire_bytes,
                     p.wall_seconds}) {
      row.push_back(CsvNum(x));
    }
    absl::StrAppend(&out, absl::StrJoin(row, ","), "\n");
  }
  return out;
}

json BuildJson(const std::vector<Axis>& axes, const std::vector<Point>& points, bool predict_only) {
  json j;
  j["schema"] = "ringpipe-sweep/2";
  j["mode"] = predict_only ? "predict" : "run";
  j["columns"] = CsvColumns();
  json ax = json::array();
  for (const Axis& a : axes) {
    json vals = json::array();
    for (const auto& v : a.values) vals.push_back(v.size() == 1 ? json(v[0]) : json(v));
    ax.push_back({{"name", a.name()}, {"fields", a.fields}, {"values", vals}});
  }
  j["axes"] = ax;
  json pts = json::array();
  for (const Point& p : points) {
    json axes_j = json::object();
    for (const FieldOverride& o : p.overrides) axes_j[o.field] = o.value;
    json e = {{"point", p.index}, {"label", p.label}, {"axes", axes_j}, {"status", p.status},
              {"error", p.error}, {"t1_ms", JNum(p.t1_ms)},
              {"fidelity", {{"host", JNum(p.fidelity_host)}, {"model", JNum(p.fidelity_model)}}},
              {"wall_seconds", JNum(p.wall_seconds)}, {"predicted", MetricsJson(p.predicted)}};
    if (!predict_only) {
      e["measured"] = MetricsJson(p.measured);
      e["emulated_step_ms"] = JNum(p.emulated_step_ms);
      e["real"] = {{"peak_activation_bytes", JNum(p.real_peak_bytes)}, {"wire_bytes", JNum(p.real_wire_bytes)}};
    }
    // The CSV's world and time_scale (the scale the point ran at; the config echo keeps "auto").
    if (p.status != "invalid") {
      e["world"] = p.cfg.world_size();
      double scale = 0;
      const std::string ts = TimeScaleText(p);
      e["time_scale"] = absl::SimpleAtod(ts, &scale) ? json(scale) : json(ts);
      e["config"] = ConfigToJson(p.cfg);
    } else {
      e["world"] = nullptr;
      e["time_scale"] = nullptr;
    }
    pts.push_back(std::move(e));
  }
  j["points"] = pts;
  return j;
}

const ChartSpec kCharts[6] = {
    {"step_time.svg", "step time", "modeled ms per step", false, &Metrics::step_ms},
    {"speedup.svg", "speedup (T1 / step)", "x", false, &Metrics::speedup},
    {"bubble.svg", "bubble (mean over devices)", "idle fraction of the step", false, &Metrics::bubble},
    {"exposed_comm.svg", "exposed communication (mean over devices)", "ms per step", false, &Metrics::exposed_ms},
    {"peak_memory.svg", "modeled peak activation memory (max device)", "modeled bytes", true, &Metrics::peak_bytes},
    {"wire_bytes.svg", "modeled wire bytes per step (max device)", "modeled bytes", true, &Metrics::wire_bytes},
};

namespace {

// The charts' x axis: the first field of the first axis, numeric if every value is a number that
// tells the points apart (then log-scaled over a range of 8 or more), else categories.
struct XAxis {
  std::vector<double> xs;           // empty for categories
  std::vector<std::string> labels;  // one per value
  bool numeric = true;
  bool log_x = false;
};
XAxis XAxisOf(const Axis& x) {
  // x: the first field of the first axis; numeric if every value is a number.
  std::vector<double> xs;
  std::vector<std::string> labels;
  bool numeric = true;
  for (const auto& v : x.values) {
    labels.push_back(absl::StrJoin(v, ":"));
    double d;
    if (absl::SimpleAtod(v[0], &d) && std::isfinite(d)) {
      xs.push_back(d);
    } else {
      numeric = false;
    }
  }
  // Numbers place points only when they tell them apart: a linked axis may repeat its first field's
  // value (`pp:forward_ms=2:50,2:25`), whose points are then categories.
  if (numeric) {
    std::vector<double> sorted = xs;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) numeric = false;
  }
  if (!numeric) xs.clear();
  if (x.fields.size() > 1) {  // linked: label by the first field when its values tell the points apart
    std::vector<std::string> firsts;
    for (const auto& v : x.values) firsts.push_back(v[0]);
    std::vector<std::string> sorted = firsts;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end()) labels = firsts;
  }
  const double xmin = numeric ? *std::min_element(xs.begin(), xs.end()) : 0;
  const double xmax = numeric ? *std::max_element(xs.begin(), xs.end()) : 0;
  return {.xs = std::move(xs), .labels = std::move(labels), .numeric = numeric,
          .log_x = numeric && xmin > 0 && xmax / xmin >= 8};
}

// Points that did not run, marked: an x position where none ran gets its status in `labels`, and each
// series (a group of the other axes' values) a note naming its points that did not. By group.
std::map<std::vector<size_t>, std::string> NotesOfPointsThatDidNotRun(
    const Axis& x, const std::map<std::vector<size_t>, std::vector<const Point*>>& groups,
    std::vector<std::string>& labels) {
  // Points that did not run are marked, not only left out: an x position where no point ran says so in
  // its tick label ("99 (invalid)"), and a series whose other points ran names the ones that did not in
  // its legend entry. Their errors are in the CSV, the JSON and the table.
  const std::vector<std::string> value_labels = labels;
  const size_t nx = labels.size();
  auto not_ok = [](const Point* p) { return p == nullptr || p->status != "ok"; };
  std::vector<bool> none_ran(nx, true);
  for (size_t i = 0; i < nx; ++i) {
    std::string word;
    for (const auto& [rest, pts] : groups) {
      if (!not_ok(pts[i])) none_ran[i] = false;
      const std::string status = pts[i] == nullptr ? "missing" : pts[i]->status;
      word = word.empty() || word == status ? status : "invalid or failed";
    }
    if (none_ran[i]) labels[i] = absl::StrCat(labels[i], " (", word, ")");
  }
  std::map<std::vector<size_t>, std::string> group_notes;
  for (const auto& [rest, pts] : groups) {
    std::map<std::string, std::vector<std::string>> by_status;
    for (size_t i = 0; i < nx; ++i) {
      if (!none_ran[i] && not_ok(pts[i])) by_status[pts[i] == nullptr ? "missing" : pts[i]->status].push_back(value_labels[i]);
    }
    std::string note;
    for (const auto& [status, at] : by_status) {
      absl::StrAppend(&note, note.empty() ? " — " : "; ", status, " at ", x.fields[0], "=", absl::StrJoin(at, ","));
    }
    group_notes[rest] = note;
  }
  return group_notes;
}

}  // namespace

std::vector<svg::Chart> BuildCharts(const std::vector<Axis>& axes, const std::vector<Point>& points,
                                    bool predict_only) {
  const Axis& x = axes[0];
  const size_t nx = x.values.size();
  const XAxis ax = XAxisOf(x);
  const std::vector<double>& xs = ax.xs;
  std::vector<std::string> labels = ax.labels;
  const bool numeric = ax.numeric, log_x = ax.log_x;
  // One series pair per combination of the other axes' values.
  std::map<std::vector<size_t>, std::vector<const Point*>> groups;
  for (const Point& p : points) {
    std::vector<size_t> rest(p.coord.begin() + 1, p.coord.end());
    auto& g = groups[rest];
    if (g.empty()) g.assign(nx, nullptr);
    g[p.coord[0]] = &p;
  }
  std::map<std::vector<size_t>, std::string> group_notes = NotesOfPointsThatDidNotRun(x, groups, labels);
  std::vector<svg::Chart> charts;
  for (const ChartSpec& spec : kCharts) {
    svg::Chart c;
    c.title = spec.title;
    c.x_label = x.fields.size() > 1 ? absl::StrCat(x.fields[0], " (with ", absl::StrJoin(x.fields.begin() + 1, x.fields.end(), ", "), ")") : x.name();
    c.y_label = spec.y_label;
    c.x_values = xs;
    c.x_labels = labels;
    c.log_x = log_x;
    c.bars = !numeric;
    c.y_bytes = spec.bytes;
    double lo = std::numeric_limits<double>::infinity(), hi = 0;
    size_t gi = 0;
    for (const auto& [rest, pts] : groups) {
      std::string suffix;
      for (size_t a = 1; a < axes.size(); ++a) {
        absl::StrAppend(&suffix, suffix.empty() ? " (" : ", ", axes[a].name(), "=",
                        absl::StrJoin(axes[a].values[rest[a - 1]], ":"));
      }
      if (!suffix.empty()) suffix += ")";
      suffix += group_notes[rest];
      svg::Series meas{.name = absl::StrCat("measured", suffix), .y = {}, .color = svg::Color(gi),
                       .marker = svg::SeriesMarker(gi)};
      svg::Series pred{.name = absl::StrCat("predicted", suffix), .y = {}, .color = svg::Color(gi), .dashed = true,
                       .marker = svg::SeriesMarker(gi)};
      for (size_t i = 0; i < nx; ++i) {
        const Point* p = pts[i];
        const double mv = p != nullptr && p->status == "ok" ? p->measured.*spec.field : kNaN;
        const double pv = p != nullptr && p->status != "invalid" ? p->predicted.*spec.field : kNaN;
        meas.y.push_back(mv);
        pred.y.push_back(pv);
        for (double v : {mv, pv}) {
          if (std::isfinite(v) && v > 0) {
            lo = std::min(lo, v);
            hi = std::max(hi, v);
          }
        }
      }
      if (!predict_only) c.series.push_back(std::move(meas));
      c.series.push_back(std::move(pred));
      ++gi;
    }
    c.log_y = spec.bytes && std::isfinite(lo) && hi / lo >= 20;
    charts.push_back(std::move(c));
  }
  return charts;
}

std::string Table(const std::vector<Axis>& axes, const std::vector<Point>& points, bool predict_only) {
  // Cells first, then each column as wide as its widest cell (axis names such as
  // "pp:forward_ms:backward_ms" and pairs such as "0.07898 / 0.07556" outgrow any fixed width).
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header;
  for (const Axis& a : axes) header.push_back(a.name());
  // Each metric column holds "measured / predicted", or the predicted value alone with --predict_only.
  for (const char* h : {"status", predict_only ? "step ms (predicted)" : "step ms (meas / pred)", "speedup", "bubble",
                        "exposed comm ms", "modeled peak act", "modeled wire B"}) {
    header.emplace_back(h);
  }
  rows.push_back(std::move(header));
  auto pair = [&](double m, double p) {
    auto f = [&](double v) {
      if (!std::isfinite(v)) return std::string("-");
      return absl::StrFormat("%.4g", v);
    };
    return predict_only ? f(p) : absl::StrCat(f(m), " / ", f(p));
  };
  for (const Point& p : points) {
    std::vector<std::string> row;
    for (size_t a = 0; a < axes.size(); ++a) row.push_back(absl::StrJoin(axes[a].values[p.coord[a]], ":"));
    for (std::string cell : {p.status, pair(p.measured.step_ms, p.predicted.step_ms),
                             pair(p.measured.speedup, p.predicted.speedup), pair(p.measured.bubble, p.predicted.bubble),
                             pair(p.measured.exposed_ms, p.predicted.exposed_ms),
                             pair(p.measured.peak_bytes, p.predicted.peak_bytes),
                             pair(p.measured.wire_bytes, p.predicted.wire_bytes)}) {
      row.push_back(std::move(cell));
    }
    rows.push_back(std::move(row));
  }
  const size_t min_width[] = {12, 8, 23, 17, 15, 21, 21, 21};  // the axes', then the metrics'
  std::vector<size_t> width(rows[0].size(), 0);
  for (size_t c = 0; c < width.size(); ++c) {
    width[c] = c < axes.size() ? min_width[0] : min_width[1 + c - axes.size()];
    for (const auto& row : rows) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (size_t r = 0; r < rows.size(); ++r) {
    std::string line = r == 0 ? "#" : " ";
    for (size_t c = 0; c < width.size(); ++c) {
      absl::StrAppend(&line, " ", std::string(width[c] - rows[r][c].size(), ' '), rows[r][c]);
    }
    if (r > 0 && points[r - 1].status != "ok") absl::StrAppend(&line, "  ", points[r - 1].error);
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

}  // namespace rp::apps::sweep
