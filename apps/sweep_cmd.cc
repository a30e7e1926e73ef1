// `ringpipe sweep`: runs a grid of configurations — `run`'s config flags (not --report_json, --trace or
// the fault flags --fault, --straggler, --jitter) plus one or more
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
// value must read by its field's grammar (an integer for `microbatches`, ...) and appear once in its axis, else exit 2 with one
// line naming the field, nothing written. A point whose values read but whose config is impossible
// (ValidateConfig: a value out of its range such as microbatches=0, more pipeline stages than layers,
// a run too big for the machine's memory) is reported as "invalid" in the outputs and the sweep goes
// on, the same for every field; if every point is invalid, that is bad input (exit 2). A point whose
// run fails is "failed". The files of --out_dir are committed together at the end, all or none: a new
// directory is built beside it and renamed into place (apps/files.h).
//
// Exit codes: 0 every point ran; 4 some points invalid or failed (outputs written); 2 bad input; 1 the
// outputs could not be written.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "apps/cli.h"
#include "apps/clock_choice.h"
#include "apps/config.h"
#include "apps/files.h"
#include "apps/flags.h"
#include "apps/presets.h"
#include "apps/shared_flags.h"
#include "apps/subcommands.h"
#include "apps/sweep.h"
#include "runtime/status_macros.h"

namespace rp::apps {
namespace {

using json = nlohmann::json;
using sweep::Axis;
using sweep::Point;

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

// The --axis flags, in order; each field at most once, at most kMaxPoints points in all.
absl::StatusOr<std::vector<Axis>> ReadAxes(const ParsedArgs& args) {
  std::vector<Axis> axes;
  size_t total = 1;
  for (const auto& [name, value] : args.occurrences) {
    if (name != "axis") continue;
    RP_ASSIGN_OR_RETURN(Axis a, sweep::ParseAxis(value));
    // The axis's value wins over the flag's at every point: the flag was silently dropped.
    for (const std::string& f : a.fields) {
      if (args.Has(f)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", f, ": also the axis --axis=", a.name(), ", which sets it at every point (drop one)"));
      }
    }
    for (const Axis& other : axes) {
      for (const std::string& f : a.fields) {
        if (std::find(other.fields.begin(), other.fields.end(), f) != other.fields.end()) {
          return absl::InvalidArgumentError(absl::StrCat("--axis=", a.name(), ": field '", f, "' is already an axis"));
        }
      }
    }
    total *= a.values.size();
    if (total > sweep::kMaxPoints) {
      return absl::InvalidArgumentError(absl::StrCat("--axis: more than ", sweep::kMaxPoints, " points"));
    }
    axes.push_back(std::move(a));
  }
  if (axes.empty()) return absl::InvalidArgumentError("--axis: at least one axis is required (NAME=V1,V2,...)");
  return axes;
}

// An axis value as compared for repeats: a byte count by its number (`64K` is `65536`); other values
// are compared as read by their field's grammar (`08` is `8`, `yes` is `true`).
json RepeatKey(const std::string& field, const json& value) {
  const ConfigField* f = FindField(field);
  if (f == nullptr || !value.is_string()) return value;
  if (f->grammar == Grammar::kBytes) {
    if (auto b = ParseBytes(field, value.get<std::string>()); b.ok()) return json(*b);
  }
  if (f->grammar == Grammar::kByteList) {
    if (auto l = ParseByteList(field, value.get<std::string>()); l.ok()) return json(*l);
  }
  return value;
}

// Every point of the grid (the last axis varies fastest) with its config, before anything runs. An
// axis value that does not read by its field's grammar is bad input; a point whose values read but
// whose config is impossible is "invalid" (the base config was checked: the point's values fail).
absl::StatusOr<std::vector<Point>> BuildPoints(const ParsedArgs& args, const std::vector<Axis>& axes, bool for_run,
                                               const std::string& config_text) {
  std::vector<std::vector<std::vector<json>>> values(axes.size());  // [axis][value][field]
  size_t total = 1;
  for (size_t a = 0; a < axes.size(); ++a) {
    total *= axes[a].values.size();
    // Each value once (RepeatKey): a repeated one ran the same point twice and was drawn as two
    // categories of one name.
    std::map<std::vector<json>, size_t> seen;
    for (size_t i = 0; i < axes[a].values.size(); ++i) {
      const std::vector<std::string>& tuple = axes[a].values[i];
      std::vector<json> vals, key;
      for (size_t f = 0; f < tuple.size(); ++f) {
        RP_ASSIGN_OR_RETURN(json v, sweep::ValueJson(axes[a].name(), axes[a].fields[f], tuple[f]));
        key.push_back(RepeatKey(axes[a].fields[f], v));
        vals.push_back(std::move(v));
      }
      if (const auto [it, added] = seen.emplace(std::move(key), i); !added) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--axis=", axes[a].name(), ": '", absl::StrJoin(tuple, ":"), "' repeats the value '",
            absl::StrJoin(axes[a].values[it->second], ":"), "' (each point runs once; --steps measures one longer)"));
      }
      values[a].push_back(std::move(vals));
    }
  }
  std::vector<Point> points(total);
  for (size_t i = 0; i < total; ++i) {
    Point& p = points[i];
    p.index = static_cast<int>(i);
    p.coord.assign(axes.size(), 0);
    for (size_t a = axes.size(), rem = i; a-- > 0; rem /= axes[a].values.size()) {
      p.coord[a] = rem % axes[a].values.size();
    }
    std::vector<std::string> label;
    for (size_t a = 0; a < axes.size(); ++a) {
      for (size_t f = 0; f < axes[a].fields.size(); ++f) {
        p.overrides.push_back({axes[a].fields[f], values[a][p.coord[a]][f]});
        label.push_back(absl::StrCat(axes[a].fields[f], "=", axes[a].values[p.coord[a]][f]));
      }
    }
    p.label = absl::StrJoin(label, " ");
    auto cfg = LoadConfigWithOverrides(args, for_run, p.overrides, &config_text);
    if (cfg.ok()) {
      p.cfg = *std::move(cfg);
      p.cfg.report_json.clear();
      p.cfg.trace.clear();
    } else {
      p.status = "invalid";
      p.error = std::string(cfg.status().message());
    }
  }
  return points;
}

// The CSV, the JSON and the charts into `outputs` (committed by the caller).
void SetOutputs(const ParsedArgs& args, const std::vector<Axis>& axes, const std::vector<Point>& points,
                bool predict_only, OutputFiles& outputs) {
  outputs.SetInDir("out_dir", "sweep.csv", sweep::BuildCsv(points));
  outputs.SetInDir("out_dir", "sweep.json",
                   sweep::BuildJson(axes, points, predict_only).dump(2, ' ', false, json::error_handler_t::replace) +
                       "\n");
  const std::vector<svg::Chart> charts = sweep::BuildCharts(axes, points, predict_only);
  std::string title = args.Text("title");
  if (title.empty()) {
    std::vector<std::string> names;
    for (const Axis& a : axes) names.push_back(a.name());
    title = absl::StrCat("ringpipe sweep over ", absl::StrJoin(names, " x "));
  }
  for (size_t i = 0; i < charts.size(); ++i) {
    svg::Chart c = charts[i];
    c.title = absl::StrCat(title, ": ", c.title);
    outputs.SetInDir("out_dir", sweep::kCharts[i].file, svg::RenderChart(c));
  }
  outputs.SetInDir("out_dir", "overview.svg", svg::RenderFigure(title, charts, 3, 540, 360));
}

// As `run` warns for its one run: the points whose real clock the host did not keep, each with a scale
// it would likely keep (stderr).
void WarnUnkeptScales(const std::vector<Point>& points) {
  std::vector<std::string> unkept;
  size_t ran = 0;
  bool forced = false;  // a scale the user gave, rather than one auto measured
  for (const Point& p : points) {
    if (!std::isfinite(p.fidelity_host)) continue;
    ++ran;
    if (std::abs(p.fidelity_host) > kHostFidelityTarget) {
      forced = forced || !p.cfg.time_scale_auto();
      // A scale it would likely keep, as `run`'s warning names one (this said only "a larger --time_scale").
      const double keeps = schedule::SuggestTimeScale(p.time_scale, p.fidelity_host, kHostFidelityTarget);
      unkept.push_back(keeps > kMaxTimeScale
                           ? absl::StrFormat("%s (time scale %g: %+.1f %%; no scale up to %g would likely keep up)",
                                             p.label, p.time_scale, 100 * p.fidelity_host, kMaxTimeScale)
                           : absl::StrFormat("%s (time scale %g: %+.1f %%; %g would likely keep up)", p.label,
                                             p.time_scale, 100 * p.fidelity_host, keeps));
    }
  }
  if (!unkept.empty()) {
    std::fprintf(stderr,
                 "ringpipe sweep: warning: the host did not keep the time scale at %zu of %zu points that ran "
                 "(|fidelity.host| > %g %%): %s; their measured columns are the host's, not the model's %s\n",
                 unkept.size(), ran, 100 * kHostFidelityTarget, absl::StrJoin(unkept, ", ").c_str(),
                 // Auto's scale came from a short trial: the host got busier during the point.
                 forced ? "(or omit --time_scale: auto measures one)"
                        : "(auto measured each scale in a short trial before its point; the host was busier during "
                          "the point: rerun on a quieter host, or force a larger --time_scale)");
  }
}

int Run(const ParsedArgs& args) {
  auto bad = [](const absl::Status& st) {
    std::fprintf(stderr, "ringpipe sweep: %s\n", std::string(st.message()).c_str());
    return kExitBadInput;
  };
  const bool predict_only = args.Bool("predict_only", false);
  const std::string out_dir = args.Text("out_dir");
  auto axes = ReadAxes(args);
  if (!axes.ok()) return bad(axes.status());
  if (out_dir.empty()) return bad(absl::InvalidArgumentError("--out_dir: required (where the CSV, JSON and charts go)"));
  OutputFiles outputs;
  std::vector<std::string> entries = {"sweep.csv", "sweep.json", "overview.svg"};
  for (const sweep::ChartSpec& c : sweep::kCharts) entries.emplace_back(c.file);
  if (absl::Status st = outputs.Declare("out_dir", out_dir, /*is_dir=*/true, std::move(entries)); !st.ok()) {
    return bad(st);
  }
  if (absl::Status st = outputs.CheckAll({{"config", args.Text("config")}}); !st.ok()) return bad(st);
  // The base flags and file must read (a config that is only invalid without the axes is fine). The
  // file is read once (it may be standard input).
  auto config_text = ReadConfigText(args);
  if (!config_text.ok()) return bad(config_text.status());
  if (auto base = LoadConfigWithOverrides(args, !predict_only, {}, &*config_text);
      !base.ok() && base.status().code() != absl::StatusCode::kFailedPrecondition) {
    return bad(base.status());
  }
  auto points = BuildPoints(args, *axes, !predict_only, *config_text);
  if (!points.ok()) return bad(points.status());
  const size_t total = points->size();
  const size_t valid = static_cast<size_t>(
      std::count_if(points->begin(), points->end(), [](const Point& p) { return p.status == "ok"; }));
  if (valid == 0) {
    return bad(absl::InvalidArgumentError(absl::StrCat("--axis: no point has a valid config; point 0 (",
                                                       (*points)[0].label, "): ", (*points)[0].error)));
  }
  std::fprintf(stderr, "ringpipe sweep: %zu points (%zu valid), %s\n", total, valid,
               predict_only ? "predicted only" : "each emulated and predicted");
  Progress progress(total);
  size_t failed = 0;
  for (size_t i = 0; i < total; ++i) {
    Point& p = (*points)[i];
    if (p.status == "ok") sweep::RunPoint(p, predict_only);
    if (p.status != "ok") ++failed;
    progress.Done(i + 1, p);
  }
  SetOutputs(args, *axes, *points, predict_only, outputs);
  if (absl::Status st = outputs.Commit(); !st.ok()) {
    std::fprintf(stderr, "ringpipe sweep: %s\n", std::string(st.message()).c_str());
    return kExitFailed;
  }
  WriteStdout(sweep::Table(*axes, *points, predict_only));
  std::printf("# wrote %s/{sweep.csv, sweep.json, overview.svg, step_time.svg, speedup.svg, bubble.svg, "
              "exposed_comm.svg, peak_memory.svg, wire_bytes.svg}\n",
              OneLine(out_dir).c_str());
  WarnUnkeptScales(*points);
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
      {"out_dir", Grammar::kString, "", "Directory for sweep.csv, sweep.json and the SVG charts: created whole with its parents if missing; an "
       "existing one keeps its other files. Written all or none.", false,
       /*path=*/true},
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
