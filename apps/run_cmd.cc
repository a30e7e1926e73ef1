// `ringpipe run`: trains the configured model with DP x PP x TP on emulated devices (the Executor,
// schedule/executor.h) and prints the measured, emulated and predicted figures (apps/report.h), ASCII
// Gantts of the measured step (wall stamps) and of the predicted one, the host's figures (peak RSS,
// threads, device-ops per second), and optionally the JSON report and the Chrome trace.
//
// Exit codes (apps/cli.h): 0 ok; 2 bad input (nothing run, nothing written); 3 the run failed at run
// time (a device threw, stalled or stopped, a wait outlived the watchdog: the message names rank,
// step, op and missing peers; no partial step committed); 1 an output could not be written (a file
// or standard output: the report and the trace are committed together or not at all).
//
// Fault flags (--fault, --straggler, --jitter: command line only): apps/fault_flags.h.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "apps/cli.h"
#include "apps/clock_choice.h"
#include "apps/config.h"
#include "apps/fault_flags.h"
#include "apps/files.h"
#include "apps/host.h"
#include "apps/memory_estimate.h"
#include "apps/plan.h"
#include "apps/presets.h"
#include "apps/report.h"
#include "apps/subcommands.h"
#include "runtime/faults.h"
#include "runtime/tracer.h"
#include "schedule/executor.h"
#include "schedule/metrics.h"
#include "schedule/plan.h"
#include "schedule/predictor.h"

namespace rp::apps {
namespace {

int Fail(int code, const absl::Status& st) {
  std::fprintf(stderr, "ringpipe run: %s\n", std::string(st.message()).c_str());
  return code;
}

// The second line of a run that failed because a value left its number format's range (a sum past
// fp32's, a gradient past a lossy codec's: comm/codec.h's OutOfRange): the config values that
// drive the model's values there.
std::string DivergedHint(const RunConfig& cfg) {
  std::vector<std::string> knobs = {absl::StrCat("a smaller --lr (now ", cfg.optimizer.lr, ")")};
  if (!cfg.moe_layers.empty() && cfg.aux_loss > 0) {
    knobs.push_back(absl::StrCat("a smaller --aux_loss (now ", cfg.aux_loss, ")"));
  }
  if (!cfg.moe_layers.empty() && cfg.moe_init == MoeInit::kHe) {
    // A deep stack of blocks grows its activations at init (docs/model.md): no lr helps there.
    knobs.push_back("--moe_init=scaled (now he)");
  }
  if (cfg.codec != comm::Codec::kFp32) {
    knobs.push_back(absl::StrCat("--codec=fp32 (now ", comm::CodecName(cfg.codec), ")"));
  }
  if (cfg.ep > 1 && cfg.ep_codec != comm::Codec::kFp32) {
    knobs.push_back(absl::StrCat("--ep_codec=fp32 (now ", comm::CodecName(cfg.ep_codec), ")"));
  }
  return absl::StrCat("a value left the range of its number format: the training diverged; try ",
                      absl::StrJoin(knobs, ", or "));
}

// A run that failed at run time still writes its report (marked failed, with the failure and every
// step committed before it) and its trace, when they were asked for (issue 13 §5).
void WriteFailedRun(const RunConfig& cfg, const Plan& plan, const schedule::RunFailure* failure,
                    const HostUsage& host, const Tracer& tracer, OutputFiles& outputs) {
  if (failure == nullptr || (cfg.report_json.empty() && cfg.trace.empty())) return;
  if (!cfg.report_json.empty()) {
    // The executor's prediction: with the fault flags' stragglers and links (plan.predict has
    // only the config's).
    outputs.Set("report_json",
                DumpJson(BuildFailedRunReport(cfg, plan, failure->prediction, *failure, &host), 2) + "\n");
  }
  if (!cfg.trace.empty()) {
    outputs.SetStreamed("trace", [&tracer](TextSink sink) { return tracer.StreamChromeJson(sink); });
  }
  if (absl::Status st = outputs.Commit(); !st.ok()) {
    std::fprintf(stderr, "ringpipe run: %s\n", std::string(st.message()).c_str());
  } else {
    // Named as written: no trace without --trace, no report without --report_json.
    const char* written = cfg.trace.empty()         ? "report was"
                          : cfg.report_json.empty() ? "trace was"
                                                    : "report and trace were";
    std::fprintf(stderr, "ringpipe run: the failed run's %s written (status \"failed\")\n", written);
  }
}

// The text printed after a run: the report, the measured Gantt (wall stamps) and the predicted one.
std::string RunText(const RunConfig& cfg, const Plan& plan, const schedule::RunResult& result,
                    const LazyJson& report) {
  std::string text = RenderReport(report);
  const int rows = std::min(16, cfg.pp * cfg.tp);
  const std::string measured = RenderMeasuredGantt(plan, result, 96, rows);
  if (!measured.empty()) {
    // The median step's intervals, unless the run kept only the last step's (world x steps > 8192).
    const std::string which =
        result.timeline_step == result.median_step
            ? std::string("median")
            : absl::StrCat("the last step: the run kept only its intervals; the median step is ", result.median_step);
    absl::StrAppend(&text, "\nmeasured step ", result.timeline_step, " (", which, "), first replica: ",
                    result.virtual_time ? "the virtual clock's modeled times (measured = emulated)"
                                        : "wall clock on the device threads / time scale",
                    " (", kGanttLegend, ")\n", measured);
  }
  absl::StrAppend(&text, "\npredicted step, first replica: the predictor\n",
                  RenderPredictedGantt(plan, result.prediction, 96, rows));
  return text;
}

// The clock of the start line; on the real clock with the wall time the steps will take (the
// predicted steps of the run asked for — the fault flags' stragglers and slow links, each slow link
// from its step on — × time scale), so a run that a large scale or a fault makes long says so before
// it starts.
std::string ClockText(const RunConfig& cfg, const schedule::ExecutorOptions& options, const ClockChoice& clock) {
  if (cfg.virtual_time) return "virtual clock";
  std::string text = absl::StrFormat("time scale %g", clock.scale);
  absl::StatusOr<schedule::ExecutionPlan> plan = schedule::BuildPlan(schedule::PlanOptionsFor(options));
  if (!plan.ok()) return text;  // the run itself reports what is wrong with the plan
  // The steps at which the predicted step changes: 0 and each slow link's first step.
  std::vector<int> from = {0};
  for (const OpFault& f : options.faults.op_faults) {
    if (f.kind == OpFaultKind::kSlowLink && f.step > 0 && f.step < cfg.steps) from.push_back(f.step);
  }
  std::sort(from.begin(), from.end());
  from.erase(std::unique(from.begin(), from.end()), from.end());
  double modeled_ms = 0;
  for (size_t i = 0; i < from.size(); ++i) {
    schedule::PredictOptions popts = schedule::PredictOptionsFor(options);
    popts.step = from[i];
    absl::StatusOr<schedule::Prediction> pred = schedule::Predict(*plan, popts);
    if (!pred.ok()) return text;
    const int until = i + 1 < from.size() ? from[i + 1] : cfg.steps;
    modeled_ms += (until - from[i]) * ToMillis(pred->step_time);
  }
  const double seconds = modeled_ms * 1e-3 * clock.scale;
  absl::StrAppendFormat(&text, "; the steps take about %.3g s of wall time", seconds);
  if (seconds >= 120) absl::StrAppendFormat(&text, " (%.0f min)", seconds / 60);
  return text;
}

// The exit for an executor that refused its options (an op index past a rank's program is the one
// --fault range only the executor knows: FaultFlagStatus names it --fault).
int CreateFailed(const absl::Status& created) {
  const absl::Status st = FaultFlagStatus(created);
  return Fail(st.code() == absl::StatusCode::kInvalidArgument ? kExitBadInput : kExitFailed, st);
}

// The exit of a run that failed at run time: the failure (its message already names rank, step, op,
// missing peers and committed steps), the report and trace asked for, marked failed, and for a
// value out of its number format's range the knobs that might keep the training in it.
int FailedRunExit(const RunConfig& cfg, const Plan& plan, const schedule::RunFailure* f, const absl::Status& status,
                  const ClockChoice& clock, const WatchdogFit& fit, HostUsage& host, const Tracer& tracer,
                  OutputFiles& outputs) {
  if (f != nullptr && f->seconds_after_fault >= 0) {
    std::fprintf(stderr, "ringpipe run: injected fault detected %.3f s after it fired\n", f->seconds_after_fault);
  }
  if (f != nullptr) host.time_scale_choice = FailedRunClockJson(cfg, clock, fit, f->steps);
  WriteFailedRun(cfg, plan, f, host, tracer, outputs);
  const int code = Fail(kExitFault, status);
  if (absl::IsOutOfRange(status)) std::fprintf(stderr, "ringpipe run: %s\n", DivergedHint(cfg).c_str());
  return code;
}

int Run(const ParsedArgs& args) {
  auto cfg = LoadConfig(args, /*for_run=*/true);
  if (!cfg.ok()) return Fail(kExitBadInput, cfg.status());
  OutputFiles outputs;
  for (const auto& [flag, path] : {std::pair{"report_json", cfg->report_json}, {"trace", cfg->trace}}) {
    if (absl::Status st = outputs.Declare(flag, path); !st.ok()) return Fail(kExitBadInput, st);
  }
  if (absl::Status st = outputs.CheckAll({{"config", cfg->config_file}}); !st.ok()) return Fail(kExitBadInput, st);
  auto plan = BuildPlan(*cfg, /*for_run=*/true);
  if (!plan.ok()) return Fail(kExitBadInput, plan.status());

  schedule::ExecutorOptions options = plan->executor;
  double op_factor = 1;
  if (absl::Status st = ParseFaultFlags(args, cfg->world_size(), cfg->steps, options.faults); !st.ok()) {
    return Fail(kExitBadInput, st);
  } else if (st = CheckFaultFlagFactors(*cfg, args, options.faults, &op_factor); !st.ok()) {
    return Fail(kExitBadInput, st);
  }
  // On a real clock every op and every wait for one message must end within the watchdog timeout
  // (a longer planned wait would be reported as a stall): a forced scale is checked, auto's trials
  // stay below the scale that allows.
  const WatchdogFit fit = WatchdogFitOf(options, op_factor);
  HostUsage host;
  host.rss_before_bytes = ReadProcStatus().rss_bytes;
  host.model_buffer_bytes = ModelBufferBytes(*cfg);
  int clock_exit = kExitOk;
  absl::StatusOr<ClockChoice> clock = PrepareClock("run", *cfg, fit, &options, &clock_exit);
  if (!clock.ok()) return Fail(clock_exit, clock.status());
  // On the virtual clock the trace holds nothing of the host (no wall stamps; events in modeled
  // order): the same options write the same bytes (runtime/tracer.h, docs/runtime.md). On the real
  // clock its wall origin is when it is built: here, after --time_scale=auto's trial runs, so the
  // trace's wall times are the measured run's, not the calibration's as well.
  Tracer tracer(cfg->world_size(), cfg->devices_per_node, kMaxTraceEvents,
                cfg->virtual_time ? TraceClock::kVirtual : TraceClock::kWall);
  // Only a requested trace is recorded: recording every op and port message costs the device
  // threads a lock, an allocation and a copy each (a 512-device virtual run: 325 MB peak RSS
  // with the tracer attached, 192 MB without).
  options.tracer = cfg->trace.empty() ? nullptr : &tracer;
  auto exec = schedule::Executor::Create(options);
  if (!exec.ok()) return CreateFailed(exec.status());
  std::fprintf(stderr, "ringpipe run: %s, %s, %d steps on %d device threads (%s)...\n",
               plan->grid.ToString().c_str(), schedule::ScheduleName(cfg->schedule), cfg->steps,
               cfg->world_size(), ClockText(*cfg, options, *clock).c_str());
  ThreadSampler sampler;
  auto result = (*exec)->Run();
  host.threads = sampler.Stop();
  host.peak_rss_bytes = ReadProcStatus().peak_rss_bytes;
  if (!result.ok()) {
    return FailedRunExit(*cfg, *plan, (*exec)->failure(), result.status(), *clock, fit, host, tracer, outputs);
  }
  // The sampler's period can miss a run of a few ms; the executor's reading at the first step
  // boundary was taken while every device thread was alive (and the sampler's, not counted).
  host.threads = std::max(host.threads, result->threads_at_first_step - 1);
  const HostVerdict verdict = JudgeHostFidelity(*clock, result->fidelity_host, cfg->watchdog_timeout,
                                                WatchdogScaleLimit(*cfg, fit));
  if (!verdict.trusted) std::fprintf(stderr, "ringpipe run: warning: %s\n", verdict.warning.c_str());
  host.time_scale_choice = ClockJson(*clock, verdict);
  ReportSlowLinks("run", options.faults, *result);
  const LazyJson report =
      BuildLazyReport(*cfg, *plan, result->prediction, &*result, &host, /*with_timeline=*/!cfg->report_json.empty());
  const std::string text = RunText(*cfg, *plan, *result, report);
  if (tracer.capped() > 0) {
    std::fprintf(stderr, "ringpipe run: the trace keeps at most %zu events (ops and port events); %llu later ones were dropped\n",
                 kMaxTraceEvents, static_cast<unsigned long long>(tracer.capped()));
  }
  if (!cfg->report_json.empty()) {
    outputs.SetStreamed("report_json", [&report](TextSink sink) { return report.Stream(2, sink, ReportStreamThreads()); });
  }
  if (!cfg->trace.empty()) {
    outputs.SetStreamed("trace", [&tracer](TextSink sink) { return tracer.StreamChromeJson(sink); });
  }
  if (absl::Status st = outputs.Commit(); !st.ok()) return Fail(kExitFailed, st);
  WriteStdout(text);
  return kExitOk;
}

std::vector<FlagSpec> Flags() {
  auto defaults = PresetByName("default");
  std::vector<FlagSpec> flags = ConfigFlags(0, defaults.ok() ? *defaults : RunConfig{});
  for (FlagSpec& f : FaultFlags()) flags.push_back(std::move(f));
  return flags;
}

}  // namespace

Subcommand RunSubcommand() {
  return {"run", "train a model with DP x PP x TP on emulated devices; measured vs predicted report", Flags,
          Run};
}

}  // namespace rp::apps
