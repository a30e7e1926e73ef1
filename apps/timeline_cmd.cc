// `ringpipe timeline`: an SVG Gantt chart of one training step — one row per device of the first
// replica (at most kMaxTimelineRows), compute ops coloured by kind with their micro-batch number, TP
// all-reduces, the gradient all-reduce on the comm stream (the row's lower strip), exposed
// communication waits (their transfer part), and idle time — measured (the median step of an emulated
// run, drawn from the wall stamps of the device threads ÷ time scale) above predicted.
//
//   ringpipe timeline --preset=s1 --out=timeline.svg            # run (`run`'s flags but --trace and
//                                                               # --fault, --straggler, --jitter), then draw
//   ringpipe timeline --preset=s1 --predict_only --out=t.svg    # the predictor's step only
//   ringpipe timeline --from_report=report.json --out=t.svg     # a saved `run`/`predict` report
//
// It draws the report's "timeline" section (docs/report.md; apps/report_reader.h reads it), so a saved
// report gives the same chart. A step of more ops than a chart draws (kMaxBars) is refused before it
// is predicted or run, from the plan's count (schedule/step_intervals.h). Exit codes: 0 ok; 2 bad input
// (nothing run, nothing written); 3 the run failed at run time (without fault flags: a stall — the host
// kept the run from progressing for the watchdog timeout — or a device's exception; as `run`, the
// outputs are still written, marked failed: the report's status and the chart's title, the chart of
// the predicted step); 1 the file could not be written.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "apps/clock_choice.h"
#include "apps/cli.h"
#include "apps/config.h"
#include "apps/fault_flags.h"
#include "apps/files.h"
#include "apps/host.h"
#include "apps/memory_estimate.h"
#include "apps/plan.h"
#include "apps/presets.h"
#include "apps/report.h"
#include "apps/report_reader.h"
#include "apps/shared_flags.h"
#include "apps/subcommands.h"
#include "apps/svg.h"
#include "apps/timeline_failed.h"
#include "schedule/executor.h"
#include "schedule/predictor.h"
#include "schedule/step_intervals.h"

namespace rp::apps {
namespace {

using json = nlohmann::json;

// At most how many ops the chart of `plan`'s step would draw over `panels` panels: the intervals of
// the report's timeline rows (the first replica's first kMaxTimelineRows devices) but sends, counted
// from the plan (a chart also leaves out the zero-length ones). A step over kMaxBars is refused with
// this before it is predicted or run, which may take long and much memory.
uint64_t OpsToDraw(const Plan& plan, int panels) {
  const int rows = std::min(plan.grid.shape().pp * plan.grid.shape().tp, kMaxTimelineRows);  // TimelineJson's
  uint64_t ops = 0;
  for (int rank = 0; rank < rows; ++rank) {
    ops += schedule::CountStepIntervals(plan.execution, plan.grid.CoordOf(rank).pp).others;
  }
  return ops * static_cast<uint64_t>(panels);
}

int Fail(int code, const std::string& msg) {
  std::fprintf(stderr, "ringpipe timeline: %s\n", msg.c_str());
  return code;
}

// --from_report: the saved report's timeline, read as it is parsed. kExitOk, or the exit code of the
// error it printed.
int ReadFromReport(const ParsedArgs& args, const std::string& out, OutputFiles& outputs,
                   absl::StatusOr<TimelineReport>& timeline) {
  const std::string from = args.Text("from_report");
  // In command-line order: the first flag given is named (a hash set's order changes run to run).
  for (const auto& [name, value] : args.occurrences) {
    if (name != "from_report" && name != "out" && name != "title") {
      return Fail(kExitBadInput, absl::StrCat("--", name, ": cannot be combined with --from_report (the report "
                                                          "holds its own config)"));
    }
  }
  if (absl::Status st = outputs.Declare("out", out); !st.ok()) return Fail(kExitBadInput, std::string(st.message()));
  if (absl::Status st = outputs.CheckAll({{"from_report", from}}); !st.ok()) {
    return Fail(kExitBadInput, std::string(st.message()));
  }
  auto file = InputFile::Open("from_report", from, kMaxReportBytes);
  if (!file.ok()) return Fail(kExitBadInput, std::string(file.status().message()));
  // Parsed as it is read: the text is never held whole (apps/report_reader.h).
  absl::Status read_status;
  timeline = ReadTimelineReport([&](char* buf, size_t size) -> absl::StatusOr<size_t> {
    absl::StatusOr<size_t> n = file->Read(buf, size);
    if (!n.ok()) read_status = n.status();
    return n;
  });
  if (!read_status.ok()) return Fail(kExitBadInput, std::string(read_status.message()));
  if (!timeline.ok()) {
    // A bad value is named by its path in the report ("timeline.predicted.devices[3].ops[2].end_ms: ..."),
    // as is a key given twice ("schema: duplicate key").
    const absl::string_view why = timeline.status().message();
    const bool field = absl::StartsWith(why, "timeline.") || absl::StartsWith(why, "layout.") ||
                       absl::StartsWith(why, "schedule.") || absl::StartsWith(why, "host.") ||
                       absl::EndsWith(why, ": duplicate key");
    return Fail(kExitBadInput, absl::StrCat("--from_report: '", OneLine(from), field ? "': " : "' ", why));
  }
  return kExitOk;
}

// A chart drawn from flags and config, and its report: the report reads the plan, the prediction and
// the run when it is written (at the commit, apps/lazy_json.h), so they live here until then.
struct Drawn {
  std::optional<Plan> plan;
  std::optional<schedule::Prediction> prediction;
  std::optional<schedule::RunResult> run;
  LazyJson report;
};

// The run `timeline` draws, and its report in drawn.report (the host section as `run` writes it: its
// clock choice and whether the host kept the scale). A run that fails still writes the outputs asked
// for, marked failed. kExitOk, or the exit code of the error it printed.
int RunReport(const ParsedArgs& args, const RunConfig& cfg, const Plan& plan, OutputFiles& outputs, Drawn& drawn) {
  schedule::ExecutorOptions options = plan.executor;
  double op_factor = 1;  // what --straggler and --jitter add to the slowest op (the watchdog's fit)
  if (absl::Status st = ParseFaultFlags(args, cfg.world_size(), cfg.steps, options.faults); !st.ok()) {
    return Fail(kExitBadInput, std::string(st.message()));
  } else if (st = CheckFaultFlagFactors(cfg, args, options.faults, &op_factor); !st.ok()) {
    return Fail(kExitBadInput, std::string(st.message()));
  }
  // The host section as `run` writes it (its clock choice and whether the host kept the scale).
  HostUsage host;
  host.rss_before_bytes = ReadProcStatus().rss_bytes;
  host.model_buffer_bytes = ModelBufferBytes(cfg);
  const auto create_failed = [&](const absl::Status& created) {
    const absl::Status st = FaultFlagStatus(created);  // an op index past a rank's program: --fault
    return Fail(st.code() == absl::StatusCode::kInvalidArgument ? kExitBadInput : kExitFailed,
                std::string(st.message()));
  };
  // As `run`: every op and every wait for one message within the watchdog on a real clock.
  const WatchdogFit fit = WatchdogFitOf(options, op_factor);
  int clock_exit = kExitOk;
  absl::StatusOr<ClockChoice> clock = PrepareClock("timeline", cfg, fit, &options, &clock_exit);
  if (!clock.ok()) return Fail(clock_exit, std::string(clock.status().message()));
  auto exec = schedule::Executor::Create(options);
  if (!exec.ok()) return create_failed(exec.status());
  std::fprintf(stderr, "ringpipe timeline: running %s, %s, %d steps...\n", plan.grid.ToString().c_str(),
               schedule::ScheduleName(cfg.schedule), cfg.steps);
  ThreadSampler sampler;
  auto run = (*exec)->Run();
  host.threads = sampler.Stop();
  host.peak_rss_bytes = ReadProcStatus().peak_rss_bytes;
  if (!run.ok()) {
    // As `run`: the outputs asked for are still written, marked failed (the report's status, the
    // chart's title), the chart drawing the failed run's predicted step (nothing was measured).
    if (const schedule::RunFailure* f = (*exec)->failure(); f != nullptr) {
      if (f->seconds_after_fault >= 0) {
        std::fprintf(stderr, "ringpipe timeline: injected fault detected %.3f s after it fired\n", f->seconds_after_fault);
      }
      host.time_scale_choice = FailedRunClockJson(cfg, *clock, fit, f->steps);
      FailedTimeline failed =
          FailedTimelineOutputs(cfg, plan, *f, host, args.Has("title") ? args.Text("title") : "");
      const bool chart = !failed.svg.empty(), report = !cfg.report_json.empty();
      if (report) outputs.Set("report_json", std::move(failed.report_json));
      if (chart) outputs.Set("out", std::move(failed.svg));
      if (absl::Status st = outputs.Commit(); !st.ok()) {
        std::fprintf(stderr, "ringpipe timeline: %s\n", std::string(st.message()).c_str());
      } else if (chart || report) {  // named as written: no report without --report_json
        std::fprintf(stderr, "ringpipe timeline: the failed run's %s written (status \"failed\")\n",
                     chart && report ? "chart and report were" : chart ? "chart was" : "report was");
      }
    }
    return Fail(kExitFault, std::string(run.status().message()));
  }
  host.threads = std::max(host.threads, run->threads_at_first_step - 1);
  ReportSlowLinks("timeline", options.faults, *run);
  // As `run`: a real-clock scale the host did not keep makes the measured rows the host's.
  const HostVerdict verdict = JudgeHostFidelity(*clock, run->fidelity_host, cfg.watchdog_timeout,
                                                WatchdogScaleLimit(cfg, fit));
  if (!verdict.trusted) std::fprintf(stderr, "ringpipe timeline: warning: %s\n", verdict.warning.c_str());
  host.time_scale_choice = ClockJson(*clock, verdict);
  drawn.run = std::move(*run);
  drawn.report = BuildLazyReport(cfg, plan, drawn.run->prediction, &*drawn.run, &host);
  return kExitOk;
}

// A layout from flags and config: predicted only, or run (its failure still writes the outputs asked
// for, marked failed); its report in drawn.report, which must live until the commit. kExitOk, or the exit
// code of the error it printed.
int DrawFromConfig(const ParsedArgs& args, const std::string& out, bool predict_only, OutputFiles& outputs,
                   Drawn& drawn, absl::StatusOr<TimelineReport>& timeline) {
  if (predict_only) {
    // The fault flags change a run; the prediction alone has none to change.
    for (const char* flag : {"fault", "straggler", "jitter"}) {
      if (args.Has(flag)) {
        return Fail(kExitBadInput, absl::StrCat("--", flag, ": injects faults into a run; --predict_only runs nothing "
                                                "(drop one of the two)"));
      }
    }
  }
  auto cfg = LoadConfig(args, /*for_run=*/!predict_only);
  if (!cfg.ok()) return Fail(kExitBadInput, std::string(cfg.status().message()));
  for (const auto& [flag, path] : {std::pair{"out", out}, {"report_json", cfg->report_json}}) {
    if (absl::Status st = outputs.Declare(flag, path); !st.ok()) return Fail(kExitBadInput, std::string(st.message()));
  }
  if (absl::Status st = outputs.CheckAll({{"config", cfg->config_file}}); !st.ok()) {
    return Fail(kExitBadInput, std::string(st.message()));
  }
  auto built = BuildPlan(*cfg, /*for_run=*/!predict_only);
  if (!built.ok()) return Fail(kExitBadInput, std::string(built.status().message()));
  const Plan* plan = &drawn.plan.emplace(std::move(*built));
  // A run draws its measured step above the predicted one.
  const int panels = predict_only ? 1 : 2;
  if (const uint64_t ops = OpsToDraw(*plan, panels); ops > kMaxBars) {
    return Fail(kExitBadInput, absl::StrCat("--microbatches: the step has ", ops, " ops to draw (",
                                            std::min(plan->grid.shape().pp * plan->grid.shape().tp, kMaxTimelineRows),
                                            " device rows, ", predict_only ? "predicted" : "measured and predicted",
                                            "); a chart draws at most ", kMaxBars,
                                            ": draw a step with fewer micro-batches"));
  }
  if (predict_only) {
    if (absl::Status st = CheckPredictable(*cfg, *plan); !st.ok()) return Fail(kExitBadInput, std::string(st.message()));
    auto pred = schedule::Predict(plan->execution, plan->predict);
    if (!pred.ok()) return Fail(kExitBadInput, std::string(pred.status().message()));
    drawn.prediction = std::move(*pred);
    drawn.report = BuildLazyReport(*cfg, *plan, *drawn.prediction, nullptr);
  } else if (const int code = RunReport(args, *cfg, *plan, outputs, drawn); code != kExitOk) {
    return code;
  }
  if (!cfg->report_json.empty()) {
    // `drawn` lives in Run until the commit: written into the file in pieces, not held as text.
    outputs.SetStreamed("report_json", [&drawn](TextSink sink) { return drawn.report.Stream(2, sink, ReportStreamThreads()); });
  }
  // The chart reads the report's small sections and its timeline rows, not its device objects.
  json sections = drawn.report.members();
  if (const LazyJson* rows = drawn.report.lazy("timeline"); rows != nullptr) sections["timeline"] = rows->ToJson();
  timeline = ReadTimelineReport(sections);
  if (timeline.status().code() == absl::StatusCode::kResourceExhausted) {
    return Fail(kExitBadInput, absl::StrCat("--microbatches: the step has too many ops to draw: ",
                                            timeline.status().message(), "; draw a step with fewer micro-batches"));
  }
  if (!timeline.ok()) return Fail(kExitFailed, absl::StrCat("report ", timeline.status().message()));
  return kExitOk;
}

int Run(const ParsedArgs& args) {
  const std::string out = args.Text("out");
  const bool predict_only = args.Bool("predict_only", false);
  if (out.empty()) return Fail(kExitBadInput, "--out: required (the SVG file to write)");

  OutputFiles outputs;
  absl::StatusOr<TimelineReport> timeline;
  Drawn drawn;  // from flags and config: its report is written at the commit
  const int code = args.Has("from_report") ? ReadFromReport(args, out, outputs, timeline)
                                            : DrawFromConfig(args, out, predict_only, outputs, drawn, timeline);
  if (code != kExitOk) return code;
  const std::string title = args.Has("title") ? args.Text("title") : timeline->title;
  outputs.Set("out", svg::RenderGantt(title, timeline->panels));
  if (absl::Status st = outputs.Commit(); !st.ok()) return Fail(kExitFailed, std::string(st.message()));
  std::printf("wrote %s: %zu device row%s", OneLine(out).c_str(), timeline->rows, timeline->rows == 1 ? "" : "s");
  if (timeline->measured_step_ms >= 0) std::printf(", measured step %.3f ms", timeline->measured_step_ms);
  if (timeline->predicted_step_ms >= 0) std::printf(", predicted step %.3f ms", timeline->predicted_step_ms);
  std::printf("\n");
  return kExitOk;
}

std::vector<FlagSpec> Flags() {
  std::vector<FlagSpec> out = {
      {"out", Grammar::kString, "", "The SVG file to write (required).", false, /*path=*/true},
      {"from_report", Grammar::kString, "",
       "Draw a saved `ringpipe run`/`predict` --report_json (or - for standard input) instead of running.", false,
       /*path=*/true},
      PredictOnlyFlag(),
      TitleFlag("from the layout and the schedule"),
  };
  for (FlagSpec& f : FaultFlags()) out.push_back(std::move(f));
  auto defaults = PresetByName("default");
  for (FlagSpec& f : ConfigFlags(0, defaults.ok() ? *defaults : RunConfig{})) {
    if (f.name != "trace") out.push_back(std::move(f));
  }
  return out;
}

}  // namespace

FailedTimeline FailedTimelineOutputs(const RunConfig& cfg, const Plan& plan, const schedule::RunFailure& failure,
                                     const HostUsage& host, const std::string& title) {
  const json report = BuildFailedRunReport(cfg, plan, failure.prediction, failure, &host);
  FailedTimeline out{.report_json = DumpJson(report, 2) + "\n", .svg = ""};
  if (absl::StatusOr<TimelineReport> timeline = ReadTimelineReport(report); timeline.ok()) {
    out.svg = svg::RenderGantt(absl::StrCat(title.empty() ? timeline->title : title, " — the run FAILED at step ",
                                            failure.step, " (nothing measured): the predicted step"),
                               timeline->panels);
  }
  return out;
}

Subcommand TimelineSubcommand() {
  return {"timeline", "SVG Gantt chart of one step (device rows, measured and predicted), from a run or a report",
          Flags, Run};
}

}  // namespace rp::apps
