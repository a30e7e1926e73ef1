// `ringpipe sweep`: runs a grid of configurations — every `run` flag plus one or more
// `--axis=NAME=V1,V2,...` — each point measured on the emulator and predicted by the predictor
// (`--predict_only`: predictor only), and writes into `--out_dir`:
//   sweep.csv   one row per point, the columns documented in docs/studies.md (stable order);
//   sweep.json  the same, with each point's axis values and config echo;
//   step_time.svg, speedup.svg, bubble.svg, exposed_comm.svg, peak_memory.svg, wire_bytes.svg and
//   overview.svg (all six): the metric against the first axis, measured solid and predicted dashed,
//   one pair of series per combination of the other axes (grouped bars for a categorical axis).
//
// Axes: NAME is any config field (its flag name, docs/config.md), or `preset`; values are a comma list
// or an integer range A..B. Linked axes move together: `--axis=pp:forward_ms=1:100,2:50` (values joined
// by ':' in the names' order). Several --axis flags make a grid (the last one varies fastest).
//
// Validation first: the flags, the config file and the output directory must be good, and every axis
// value must read by its field's grammar (an integer for `microbatches`, ...), else exit 2 with one
// line naming the field, nothing written. A point whose values read but whose config is impossible
// (ValidateConfig: a value out of its range such as microbatches=0, more pipeline stages than layers,
// a run too big for the machine's memory) is reported as "invalid" in the outputs and the sweep goes
// on, the same for every field; if every point is invalid, that is bad input (exit 2). A point whose
// run fails is "failed". The files of --out_dir are committed together at the end (apps/files.h).
//
// Exit codes: 0 every point ran; 4 some points invalid or failed (outputs written); 2 bad input; 1 the
// outputs could not be written.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "apps/cli.h"
#include "apps/config.h"
#include "apps/files.h"
#include "apps/plan.h"
#include "apps/presets.h"
#include "apps/shared_flags.h"
#include "apps/report.h"
#include "apps/subcommands.h"
#include "apps/svg.h"
#include "runtime/status_macros.h"
#include "schedule/executor.h"
#include "schedule/predictor.h"

namespace rp::apps {
namespace {

using json = nlohmann::json;
constexpr size_t kMaxPoints = 4096;
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// The CSV header (docs/studies.md lists exactly these, in this order).
const std::vector<std::string>& CsvColumns() {
  static const std::vector<std::string>* cols = new std::vector<std::string>{
      "point", "label", "status", "error", "preset", "dp", "pp", "tp", "world", "microbatches", "schedule",
      "virtual_stages", "codec", "segment_bytes", "link", "time_scale",
      "step_ms_measured", "step_ms_predicted", "fidelity", "t1_ms",
      "speedup_measured", "speedup_predicted", "efficiency_measured", "efficiency_predicted",
      "bubble_measured", "bubble_predicted", "exposed_comm_ms_measured", "exposed_comm_ms_predicted",
      "peak_activation_bytes_measured", "peak_activation_bytes_predicted",
      "wire_bytes_measured", "wire_bytes_predicted", "wall_seconds"};
  return *cols;
}

// --- Axes ---

struct Axis {
  std::vector<std::string> fields;               // one, or several linked
  std::vector<std::vector<std::string>> values;  // values[i][f]: the i-th value of field f
  std::string name() const { return absl::StrJoin(fields, ":"); }
};

// An axis value as its field's JSON value, read by the field's grammar (as its flag would be).
absl::StatusOr<json> ValueJson(const std::string& axis, const std::string& field, const std::string& text) {
  if (field == "preset") return json(text);
  const ConfigField* f = FindField(field);
  if (f == nullptr) return absl::InvalidArgumentError(absl::StrCat("--axis=", axis, ": unknown field ", field));
  auto v = FlagTextToJson(*f, text);
  if (!v.ok()) return absl::InvalidArgumentError(absl::StrCat("--axis=", axis, ": ", v.status().message()));
  return *v;
}

absl::StatusOr<std::vector<std::string>> ExpandValues(const std::string& axis, const std::string& text) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--axis=", axis, ": empty value in '", text, "'"));
    }
    if (size_t dots = part.find(".."); dots != absl::string_view::npos) {
      int64_t a, b;
      if (!absl::SimpleAtoi(part.substr(0, dots), &a) || !absl::SimpleAtoi(part.substr(dots + 2), &b) || b < a) {
        return absl::InvalidArgumentError(absl::StrCat("--axis=", axis, ": '", part,
                                                       "' is not an integer range A..B with A <= B"));
      }
      if (b - a >= static_cast<int64_t>(kMaxPoints)) {
        return absl::InvalidArgumentError(absl::StrCat("--axis=", axis, ": range '", part, "' is too long"));
      }
      for (int64_t x = a; x <= b; ++x) out.push_back(absl::StrCat(x));
    } else {
      out.emplace_back(part);
    }
  }
  return out;
}

absl::StatusOr<Axis> ParseAxis(const std::string& spec) {
  const size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
    return absl::InvalidArgumentError(absl::StrCat("--axis: '", spec, "' is not NAME=V1,V2,... or NAME=A..B"));
  }
  Axis axis;
  axis.fields = absl::StrSplit(spec.substr(0, eq), ':');
  const std::string name = axis.name();
  for (const std::string& f : axis.fields) {
    const auto& names = ConfigFieldNames();
    const bool known = std::find(names.begin(), names.end(), f) != names.end();
    if (!known || f == "config" || f == "report_json" || f == "trace") {
      return absl::InvalidArgumentError(absl::StrCat(
          "--axis=", name, ": '", f, "' is not a config field that can be swept (the config fields are the flags of "
          "`ringpipe run --help`)"));
    }
  }
  if (axis.fields.size() == 1) {
    RP_ASSIGN_OR_RETURN(std::vector<std::string> vals, ExpandValues(name, spec.substr(eq + 1)));
    for (std::string& v : vals) axis.values.push_back({std::move(v)});
  } else {
    for (absl::string_view tuple : absl::StrSplit(spec.substr(eq + 1), ',')) {
      std::vector<std::string> parts = absl::StrSplit(tuple, ':');
      if (parts.size() != axis.fields.size()) {
        return absl::InvalidArgumentError(absl::StrCat("--axis=", name, ": value '", tuple, "' has ", parts.size(),
                                                       " parts; expected ", axis.fields.size(), " (one per field)"));
      }
      for (std::string& p : parts) p = std::string(absl::StripAsciiWhitespace(p));
      axis.values.push_back(std::move(parts));
    }
  }
  return axis;
}

// --- Points ---

struct Metrics {
  double step_ms = kNaN, speedup = kNaN, efficiency = kNaN, bubble = kNaN, exposed_ms = kNaN;
  double peak_bytes = kNaN, wire_bytes = kNaN;
};

struct Point {
  int index = 0;
  std::vector<size_t> coord;  // value index per axis
  std::vector<FieldOverride> overrides;
  std::string label;          // "pp=2 microbatches=8"
  std::string status = "ok";  // ok | invalid | failed
  std::string error;
  RunConfig cfg;              // valid when status != invalid
  Metrics measured, predicted;
  double t1_ms = kNaN, fidelity = kNaN, wall_seconds = kNaN;
};

Metrics FromPrediction(const Plan& plan, const schedule::Prediction& pred) {
  Metrics m;
  m.step_ms = ToMillis(pred.step_time);
  m.speedup = pred.speedup;
  m.efficiency = pred.efficiency;
  double bubble = 0, exposed = 0, peak = 0;
  for (const schedule::DeviceStats& d : pred.devices) {
    bubble += d.bubble_over_total;
    exposed += ToMillis(d.exposed_comm);
    peak = std::max(peak, static_cast<double>(d.peak_activation_bytes));
  }
  const double n = static_cast<double>(std::max<size_t>(1, pred.devices.size()));
  m.bubble = bubble / n;
  m.exposed_ms = exposed / n;
  m.peak_bytes = peak;
  double wire = 0;
  for (const schedule::PredictedWire& w : PredictWireBytes(plan)) wire = std::max(wire, static_cast<double>(w.total()));
  m.wire_bytes = wire;
  return m;
}

Metrics FromRun(const schedule::RunResult& run, int steps) {
  Metrics m;
  m.step_ms = run.measured_step_ms;
  m.speedup = run.speedup;
  m.efficiency = run.efficiency;
  double bubble = 0, exposed = 0, peak = 0, wire = 0;
  for (const schedule::DeviceReport& d : run.devices) {
    bubble += d.bubble_total;
    exposed += d.exposed_comm_ms;
    peak = std::max(peak, static_cast<double>(d.peak_activation_bytes));
    wire = std::max(wire, static_cast<double>(d.wire_bytes) / std::max(1, steps));
  }
  const double n = static_cast<double>(std::max<size_t>(1, run.devices.size()));
  m.bubble = bubble / n;
  m.exposed_ms = exposed / n;
  m.peak_bytes = peak;
  m.wire_bytes = wire;
  return m;
}

// Runs one valid point: predict, then (unless predict_only) emulate.
void RunPoint(Point& p, bool predict_only) {
  const auto start = std::chrono::steady_clock::now();
  auto plan = BuildPlan(p.cfg);
  if (!plan.ok()) {
    p.status = "invalid";
    p.error = std::string(plan.status().message());
    return;
  }
  auto pred = schedule::Predict(plan->executor.program, plan->grid, plan->executor.cost, plan->predict);
  if (!pred.ok()) {
    p.status = "failed";
    p.error = absl::StrCat("predict: ", pred.status().message());
    return;
  }
  p.predicted = FromPrediction(*plan, *pred);
  p.t1_ms = ToMillis(pred->single_device_time);
  if (!predict_only) {
    auto exec = schedule::Executor::Create(plan->executor);
    absl::StatusOr<schedule::RunResult> run =
        exec.ok() ? (*exec)->Run() : absl::StatusOr<schedule::RunResult>(exec.status());
    if (!run.ok()) {
      p.status = "failed";
      p.error = absl::StrCat("run: ", run.status().message());
    } else {
      p.measured = FromRun(*run, p.cfg.steps);
      p.fidelity = run->fidelity;
    }
  }
  p.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// --- Output ---

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
          {"exposed_comm_ms", JNum(m.exposed_ms)},
          {"peak_activation_bytes", JNum(m.peak_bytes)},
          {"wire_bytes", JNum(m.wire_bytes)}};
}

// The config columns of a point (from the config if it was built, else empty).
std::vector<std::string> ConfigColumns(const Point& p) {
  if (p.status == "invalid") return std::vector<std::string>(12, "");
  const RunConfig& c = p.cfg;
  return {c.preset, absl::StrCat(c.dp), absl::StrCat(c.pp), absl::StrCat(c.tp), absl::StrCat(c.world_size()),
          absl::StrCat(c.microbatches), schedule::ScheduleName(c.schedule), absl::StrCat(c.virtual_stages),
          comm::CodecName(c.codec), absl::StrCat(c.segment_bytes), c.link, absl::StrFormat("%g", c.time_scale)};
}

std::string BuildCsv(const std::vector<Point>& points) {
  std::string out = absl::StrCat(absl::StrJoin(CsvColumns(), ","), "\n");
  for (const Point& p : points) {
    std::vector<std::string> row = {absl::StrCat(p.index), CsvField(p.label), p.status, CsvField(p.error)};
    for (const std::string& s : ConfigColumns(p)) row.push_back(CsvField(s));
    for (double x : {p.measured.step_ms, p.predicted.step_ms, p.fidelity, p.t1_ms, p.measured.speedup,
                     p.predicted.speedup, p.measured.efficiency, p.predicted.efficiency, p.measured.bubble,
                     p.predicted.bubble, p.measured.exposed_ms, p.predicted.exposed_ms, p.measured.peak_bytes,
                     p.predicted.peak_bytes, p.measured.wire_bytes, p.predicted.wire_bytes, p.wall_seconds}) {
      row.push_back(CsvNum(x));
    }
    absl::StrAppend(&out, absl::StrJoin(row, ","), "\n");
  }
  return out;
}

json BuildJson(const std::vector<Axis>& axes, const std::vector<Point>& points, bool predict_only) {
  json j;
  j["schema"] = "ringpipe-sweep/1";
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
              {"error", p.error}, {"t1_ms", JNum(p.t1_ms)}, {"fidelity", JNum(p.fidelity)},
              {"wall_seconds", JNum(p.wall_seconds)}, {"predicted", MetricsJson(p.predicted)}};
    if (!predict_only) e["measured"] = MetricsJson(p.measured);
    if (p.status != "invalid") e["config"] = ConfigToJson(p.cfg);
    pts.push_back(std::move(e));
  }
  j["points"] = pts;
  return j;
}

struct ChartSpec {
  const char* file;
  const char* title;
  const char* y_label;
  bool bytes;
  double Metrics::*field;
};

constexpr ChartSpec kCharts[] = {
    {"step_time.svg", "step time", "modeled ms per step", false, &Metrics::step_ms},
    {"speedup.svg", "speedup (T1 / step)", "x", false, &Metrics::speedup},
    {"bubble.svg", "bubble (mean over devices)", "idle fraction of the step", false, &Metrics::bubble},
    {"exposed_comm.svg", "exposed communication (mean over devices)", "ms per step", false, &Metrics::exposed_ms},
    {"peak_memory.svg", "peak activation memory (max device)", "bytes", true, &Metrics::peak_bytes},
    {"wire_bytes.svg", "wire bytes per step (max device)", "bytes", true, &Metrics::wire_bytes},
};

std::vector<svg::Chart> BuildCharts(const std::vector<Axis>& axes, const std::vector<Point>& points,
                                    bool predict_only) {
  const Axis& x = axes[0];
  const size_t nx = x.values.size();
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
  const bool log_x = numeric && xmin > 0 && xmax / xmin >= 8;

  // One series pair per combination of the other axes' values.
  std::map<std::vector<size_t>, std::vector<const Point*>> groups;
  for (const Point& p : points) {
    std::vector<size_t> rest(p.coord.begin() + 1, p.coord.end());
    auto& g = groups[rest];
    if (g.empty()) g.assign(nx, nullptr);
    g[p.coord[0]] = &p;
  }
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
      svg::Series meas{.name = absl::StrCat("measured", suffix), .y = {}, .color = svg::Color(gi)};
      svg::Series pred{.name = absl::StrCat("predicted", suffix), .y = {}, .color = svg::Color(gi), .dashed = true};
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

// --- Progress ---

class Progress {
 public:
  explicit Progress(size_t total) : total_(total), tty_(::isatty(::fileno(stderr)) == 1) {}
  void Done(size_t done, const Point& p) {
    const std::string what =
        p.status == "ok"
            ? (std::isfinite(p.measured.step_ms)
                   ? absl::StrFormat("ok, step %.3f ms (predicted %.3f)", p.measured.step_ms, p.predicted.step_ms)
                   : absl::StrFormat("ok, predicted step %.3f ms", p.predicted.step_ms))
            : absl::StrCat(p.status, ": ", p.error);
    if (tty_) {
      constexpr size_t kWidth = 30;
      const size_t filled = total_ == 0 ? kWidth : done * kWidth / total_;
      std::string line = absl::StrCat("\r[", std::string(filled, '#'), std::string(kWidth - filled, '.'), "] ", done,
                                      "/", total_, "  ", p.label, ": ", what);
      if (line.size() > 150) line = line.substr(0, 147) + "...";
      std::fprintf(stderr, "%s\033[K%s", line.c_str(), done == total_ ? "\n" : "");
    } else {
      std::fprintf(stderr, "ringpipe sweep: [%zu/%zu] %s: %s\n", done, total_, p.label.c_str(), what.c_str());
    }
    std::fflush(stderr);
  }

 private:
  size_t total_;
  bool tty_;
};

std::string Table(const std::vector<Axis>& axes, const std::vector<Point>& points, bool predict_only) {
  std::string out = "#";
  for (const Axis& a : axes) absl::StrAppendFormat(&out, " %12s", a.name());
  absl::StrAppendFormat(&out, " %8s %23s %17s %15s %21s %21s %21s\n", "status", "step ms (meas / pred)",
                        "speedup", "bubble", "exposed comm ms", "peak act bytes", "wire B/device");
  auto pair = [&](double m, double p) {
    auto f = [&](double v) {
      if (!std::isfinite(v)) return std::string("-");
      return absl::StrFormat("%.4g", v);
    };
    return predict_only ? f(p) : absl::StrCat(f(m), " / ", f(p));
  };
  for (const Point& p : points) {
    std::string row = " ";
    for (size_t a = 0; a < axes.size(); ++a) {
      absl::StrAppendFormat(&row, " %12s", absl::StrJoin(axes[a].values[p.coord[a]], ":"));
    }
    absl::StrAppendFormat(&row, " %8s %23s %17s %15s %21s %21s %21s", p.status,
                          pair(p.measured.step_ms, p.predicted.step_ms),
                          pair(p.measured.speedup, p.predicted.speedup),
                          pair(p.measured.bubble, p.predicted.bubble),
                          pair(p.measured.exposed_ms, p.predicted.exposed_ms),
                          pair(p.measured.peak_bytes, p.predicted.peak_bytes),
                          pair(p.measured.wire_bytes, p.predicted.wire_bytes));
    if (p.status != "ok") absl::StrAppend(&row, "  ", p.error);
    absl::StrAppend(&out, row, "\n");
  }
  return out;
}

int Run(const ParsedArgs& args) {
  auto bad = [](const absl::Status& st) {
    std::fprintf(stderr, "ringpipe sweep: %s\n", std::string(st.message()).c_str());
    return kExitBadInput;
  };
  const bool predict_only = args.Bool("predict_only", false);
  const std::string out_dir = args.Text("out_dir");

  // 1. Axes.
  std::vector<Axis> axes;
  for (const auto& [name, value] : args.occurrences) {
    if (name != "axis") continue;
    auto a = ParseAxis(value);
    if (!a.ok()) return bad(a.status());
    for (const Axis& other : axes) {
      for (const std::string& f : a->fields) {
        if (std::find(other.fields.begin(), other.fields.end(), f) != other.fields.end()) {
          return bad(absl::InvalidArgumentError(absl::StrCat("--axis=", a->name(), ": field '", f,
                                                             "' is already an axis")));
        }
      }
    }
    axes.push_back(*std::move(a));
  }
  if (axes.empty()) return bad(absl::InvalidArgumentError("--axis: at least one axis is required (NAME=V1,V2,...)"));
  if (out_dir.empty()) return bad(absl::InvalidArgumentError("--out_dir: required (where the CSV, JSON and charts go)"));
  OutputFiles outputs;
  if (absl::Status st = outputs.Declare("out_dir", out_dir, /*is_dir=*/true); !st.ok()) return bad(st);
  if (absl::Status st = outputs.CheckAll({{"config", args.Text("config")}}); !st.ok()) return bad(st);
  size_t total = 1;
  for (const Axis& a : axes) {
    total *= a.values.size();
    if (total > kMaxPoints) {
      return bad(absl::InvalidArgumentError(absl::StrCat("--axis: more than ", kMaxPoints, " points")));
    }
  }

  // 2. The base flags and file must parse (a config that is only invalid without the axes is fine),
  // and every axis value must read by its field's grammar.
  const bool for_run = !predict_only;
  if (auto base = LoadConfigWithOverrides(args, for_run, {});
      !base.ok() && base.status().code() != absl::StatusCode::kFailedPrecondition) {
    return bad(base.status());
  }
  std::vector<std::vector<std::vector<json>>> axis_values(axes.size());  // [axis][value][field]
  for (size_t a = 0; a < axes.size(); ++a) {
    for (const auto& tuple : axes[a].values) {
      std::vector<json> vals;
      for (size_t f = 0; f < tuple.size(); ++f) {
        auto v = ValueJson(axes[a].name(), axes[a].fields[f], tuple[f]);
        if (!v.ok()) return bad(v.status());
        vals.push_back(*std::move(v));
      }
      axis_values[a].push_back(std::move(vals));
    }
  }

  // 3. Every point's config, before anything runs.
  std::vector<Point> points(total);
  size_t valid = 0;
  for (size_t i = 0; i < total; ++i) {
    Point& p = points[i];
    p.index = static_cast<int>(i);
    p.coord.assign(axes.size(), 0);
    size_t rem = i;
    for (size_t a = axes.size(); a-- > 0;) {
      p.coord[a] = rem % axes[a].values.size();
      rem /= axes[a].values.size();
    }
    std::vector<std::string> label;
    for (size_t a = 0; a < axes.size(); ++a) {
      const auto& vals = axes[a].values[p.coord[a]];
      for (size_t f = 0; f < axes[a].fields.size(); ++f) {
        p.overrides.push_back({axes[a].fields[f], axis_values[a][p.coord[a]][f]});
        label.push_back(absl::StrCat(axes[a].fields[f], "=", vals[f]));
      }
    }
    p.label = absl::StrJoin(label, " ");
    auto cfg = LoadConfigWithOverrides(args, for_run, p.overrides);
    if (cfg.ok()) {
      p.cfg = *std::move(cfg);
      p.cfg.report_json.clear();
      p.cfg.trace.clear();
      ++valid;
    } else {  // the base config read: what fails is this point's values
      p.status = "invalid";
      p.error = std::string(cfg.status().message());
    }
  }
  if (valid == 0) {
    return bad(absl::InvalidArgumentError(
        absl::StrCat("--axis: no point has a valid config; point 0 (", points[0].label, "): ", points[0].error)));
  }

  // 4. Run.
  std::fprintf(stderr, "ringpipe sweep: %zu points (%zu valid), %s\n", total, valid,
               predict_only ? "predicted only" : "each emulated and predicted");
  Progress progress(total);
  size_t failed = 0;
  for (size_t i = 0; i < total; ++i) {
    Point& p = points[i];
    if (p.status == "ok") RunPoint(p, predict_only);
    if (p.status != "ok") ++failed;
    progress.Done(i + 1, p);
  }

  // 5. Outputs, committed together.
  outputs.SetInDir("out_dir", "sweep.csv", BuildCsv(points));
  outputs.SetInDir("out_dir", "sweep.json", BuildJson(axes, points, predict_only).dump(2, ' ', false, json::error_handler_t::replace) + "\n");
  const std::vector<svg::Chart> charts = BuildCharts(axes, points, predict_only);
  std::string title = args.Text("title");
  if (title.empty()) {
    std::vector<std::string> names;
    for (const Axis& a : axes) names.push_back(a.name());
    title = absl::StrCat("ringpipe sweep over ", absl::StrJoin(names, " x "));
  }
  for (size_t i = 0; i < charts.size(); ++i) {
    svg::Chart c = charts[i];
    c.title = absl::StrCat(title, ": ", c.title);
    outputs.SetInDir("out_dir", kCharts[i].file, svg::RenderChart(c));
  }
  outputs.SetInDir("out_dir", "overview.svg", svg::RenderFigure(title, charts, 3, 540, 360));
  if (absl::Status st = outputs.Commit(); !st.ok()) {
    std::fprintf(stderr, "ringpipe sweep: %s\n", std::string(st.message()).c_str());
    return kExitFailed;
  }
  std::fputs(Table(axes, points, predict_only).c_str(), stdout);
  std::printf("# wrote %s/{sweep.csv, sweep.json, overview.svg, step_time.svg, speedup.svg, bubble.svg, "
              "exposed_comm.svg, peak_memory.svg, wire_bytes.svg}\n",
              out_dir.c_str());
  if (failed > 0) {
    std::fprintf(stderr, "ringpipe sweep: %zu of %zu points invalid or failed (see the status and error columns)\n",
                 failed, total);
    return kExitSomePointsFailed;
  }
  return kExitOk;
}

std::vector<FlagSpec> Flags() {
  std::vector<FlagSpec> out = {
      {"axis", Grammar::kString, "",
       "Sweep axis NAME=V1,V2,... or NAME=A..B (integers); repeat for a grid. NAME is a config field (a flag of "
       "`ringpipe run`) or preset; linked fields move together: pp:forward_ms=1:100,2:50.",
       /*repeatable=*/true},
      {"out_dir", Grammar::kString, "", "Directory for sweep.csv, sweep.json and the SVG charts (created)."},
      PredictOnlyFlag(),
      TitleFlag("ringpipe sweep over the axis names"),
  };
  auto defaults = PresetByName("default");
  for (FlagSpec& f : ConfigFlags(kOutputFile, defaults.ok() ? *defaults : RunConfig{})) out.push_back(std::move(f));
  return out;
}

}  // namespace

Subcommand SweepSubcommand() {
  return {"sweep",
          "run a grid of configurations (--axis=NAME=V1,V2,...), measured and predicted; CSV, JSON and SVG charts",
          Flags, Run};
}

}  // namespace rp::apps
