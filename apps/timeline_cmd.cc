// `ringpipe timeline`: an SVG Gantt chart of one training step — one row per device of the first
// replica (at most kMaxTimelineRows), compute ops coloured by kind with their micro-batch number, TP
// all-reduces, the gradient all-reduce on the comm stream (the row's lower strip), exposed
// communication waits, and idle time — measured (the median step of an emulated run) above predicted.
//
//   ringpipe timeline --preset=s1 --out=timeline.svg            # run (same flags as `run`), then draw
//   ringpipe timeline --preset=s1 --predict_only --out=t.svg    # the predictor's step only
//   ringpipe timeline --from_report=report.json --out=t.svg     # a saved `run`/`predict` report
//
// It draws the report's "timeline" section (docs/report.md), so a saved report gives the same chart.
// Exit codes: 0 ok; 2 bad input (nothing run, nothing written); 1 the run failed or the file could not
// be written.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "apps/cli.h"
#include "apps/config.h"
#include "apps/report.h"
#include "apps/subcommands.h"
#include "apps/svg.h"
#include "schedule/executor.h"
#include "schedule/predictor.h"

ABSL_DECLARE_FLAG(bool, predict_only);  // apps/sweep_cmd.cc
ABSL_DECLARE_FLAG(std::string, title);  // apps/sweep_cmd.cc
ABSL_FLAG(std::string, out, "", "timeline: the SVG file to write.");
ABSL_FLAG(std::string, from_report, "",
          "timeline: draw a saved `ringpipe run`/`predict` --report_json instead of running.");

namespace rp::apps {
namespace {

using json = nlohmann::json;

svg::BarClass ClassOf(const std::string& kind, const std::string& op) {
  if (kind == "tp_allreduce") return svg::BarClass::kTpComm;
  if (kind == "grad_allreduce") return svg::BarClass::kDpComm;
  if (kind == "wait") return svg::BarClass::kWait;
  if (op == "B") return svg::BarClass::kBackward;
  if (op == "Bi") return svg::BarClass::kBackwardInput;
  if (op == "W") return svg::BarClass::kWeightGrad;
  if (op == "F") return svg::BarClass::kForward;
  return svg::BarClass::kOptimizer;
}

svg::GanttPanel Panel(const std::string& title, const json& section) {
  svg::GanttPanel p;
  p.title = title;
  p.span_ms = section.value("step_ms", 0.0);
  for (const json& d : section.value("devices", json::array())) {
    const int row = static_cast<int>(p.rows.size());
    p.rows.push_back(absl::StrFormat("rank %d  (pp %d, tp %d)", d.value("rank", 0), d.value("pp", 0), d.value("tp", 0)));
    for (const json& op : d.value("ops", json::array())) {
      svg::GanttBar b;
      b.row = row;
      b.start_ms = op.value("start_ms", 0.0);
      b.end_ms = op.value("end_ms", 0.0);
      b.cls = ClassOf(op.value("kind", ""), op.value("op", ""));
      if (op.contains("mb") && b.cls != svg::BarClass::kWait) {
        b.label = absl::StrCat(op["mb"].get<int>());
        if (op.contains("chunk")) absl::StrAppend(&b.label, ".", op["chunk"].get<int>());
      }
      p.span_ms = std::max(p.span_ms, b.end_ms);
      p.bars.push_back(std::move(b));
    }
  }
  return p;
}

absl::StatusOr<std::string> Render(const json& report, const std::string& title_flag) {
  if (!report.is_object() || !report.contains("timeline") || !report["timeline"].is_object()) {
    return absl::InvalidArgumentError(
        "has no \"timeline\" section (written by an older ringpipe? write it again with --report_json)");
  }
  const json& t = report["timeline"];
  std::vector<svg::GanttPanel> panels;
  if (t.contains("measured")) {
    const json& m = t["measured"];
    panels.push_back(Panel(absl::StrFormat("measured — emulated step %d (the median step), modeled time",
                                           m.value("step", 0)),
                           m));
  }
  if (t.contains("predicted")) panels.push_back(Panel("predicted — the predictor's step", t["predicted"]));
  if (panels.empty()) return absl::InvalidArgumentError("\"timeline\" holds neither measured nor predicted devices");
  std::string title = title_flag;
  if (title.empty()) {
    const json& lay = report.value("layout", json::object());
    const json& sch = report.value("schedule", json::object());
    title = absl::StrCat("ringpipe timeline — ", lay.value("description", ""), ", ", sch.value("name", ""), ", ",
                         sch.value("microbatches", 0), " micro-batches");
    if (t.contains("ranks") && lay.value("world", 0) > static_cast<int>(t["ranks"].size())) {
      absl::StrAppend(&title, " (first replica)");
    }
  }
  return svg::RenderGantt(title, panels);
}

int Run(const ParsedArgs& args) {
  auto fail = [](int code, const std::string& msg) {
    std::fprintf(stderr, "ringpipe timeline: %s\n", msg.c_str());
    return code;
  };
  const std::string out = absl::GetFlag(FLAGS_out);
  const std::string from = absl::GetFlag(FLAGS_from_report);
  const bool predict_only = absl::GetFlag(FLAGS_predict_only);
  if (out.empty()) return fail(kExitBadInput, "--out: required (the SVG file to write)");
  {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path parent = fs::path(out).parent_path();
    if (parent.empty()) parent = ".";
    if (!fs::is_directory(parent, ec)) {
      return fail(kExitBadInput, absl::StrCat("--out: directory '", parent.string(), "' does not exist"));
    }
    if (fs::is_directory(out, ec)) return fail(kExitBadInput, absl::StrCat("--out: '", out, "' is a directory"));
  }

  json report;
  if (!from.empty()) {
    for (const std::string& name : args.specified) {
      if (name != "from_report" && name != "out" && name != "title") {
        return fail(kExitBadInput, absl::StrCat("--", name, ": cannot be combined with --from_report (the report "
                                                            "holds its own config)"));
      }
    }
    std::ifstream in(from, std::ios::binary);
    if (!in) return fail(kExitBadInput, absl::StrCat("--from_report: cannot read '", from, "'"));
    std::stringstream ss;
    ss << in.rdbuf();
    report = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
    if (report.is_discarded()) return fail(kExitBadInput, absl::StrCat("--from_report: '", from, "' is not JSON"));
  } else {
    auto cfg = LoadConfig(args, /*for_run=*/!predict_only);
    if (!cfg.ok()) return fail(kExitBadInput, std::string(cfg.status().message()));
    auto plan = BuildPlan(*cfg);
    if (!plan.ok()) return fail(kExitBadInput, std::string(plan.status().message()));
    if (predict_only) {
      auto pred = schedule::Predict(plan->executor.program, plan->grid, plan->executor.cost, plan->predict);
      if (!pred.ok()) return fail(kExitBadInput, std::string(pred.status().message()));
      report = BuildReport(*cfg, *plan, *pred, nullptr);
    } else {
      auto exec = schedule::Executor::Create(plan->executor);
      if (!exec.ok()) {
        const bool bad = exec.status().code() == absl::StatusCode::kInvalidArgument;
        return fail(bad ? kExitBadInput : kExitRunFailed, std::string(exec.status().message()));
      }
      std::fprintf(stderr, "ringpipe timeline: running %s, %s, %d steps...\n", plan->grid.ToString().c_str(),
                   schedule::ScheduleName(cfg->schedule), cfg->steps);
      auto run = (*exec)->Run();
      if (!run.ok()) return fail(kExitRunFailed, std::string(run.status().message()));
      report = BuildReport(*cfg, *plan, run->prediction, &*run);
    }
    if (!cfg->report_json.empty()) {
      if (absl::Status st = WriteFileAtomically(cfg->report_json, report.dump(2) + "\n"); !st.ok()) {
        return fail(kExitRunFailed, absl::StrCat("--report_json: ", st.message()));
      }
    }
  }
  auto svg_text = Render(report, absl::GetFlag(FLAGS_title));
  if (!svg_text.ok()) {
    return fail(kExitBadInput, absl::StrCat(from.empty() ? "report" : "--from_report: '" + from + "'", " ",
                                            svg_text.status().message()));
  }
  if (absl::Status st = WriteFileAtomically(out, *svg_text); !st.ok()) {
    return fail(kExitRunFailed, absl::StrCat("--out: ", st.message()));
  }
  const json& t = report["timeline"];
  std::printf("wrote %s: %zu device rows", out.c_str(), t.value("ranks", json::array()).size());
  if (t.contains("measured")) std::printf(", measured step %.3f ms", t["measured"].value("step_ms", 0.0));
  std::printf(", predicted step %.3f ms\n", t["predicted"].value("step_ms", 0.0));
  return kExitOk;
}

std::vector<std::string> Flags() {
  std::vector<std::string> out = {"out", "from_report", "predict_only", "title"};
  for (const std::string& name : ConfigFieldNames()) {
    if (name != "trace") out.push_back(name);
  }
  return out;
}

}  // namespace

Subcommand TimelineSubcommand() {
  return {"timeline", "SVG Gantt chart of one step (device rows, measured and predicted), from a run or a report",
          Flags, Run};
}

}  // namespace rp::apps
