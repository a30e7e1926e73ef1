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
// Fault flags (command line only, not config-file keys; docs/reliability.md):
//   --fault="KIND:key=value,...[;KIND:...]"  throw:rank=R,step=S,op=I   stall:rank=R,step=S,op=I
//                                           slow_link:src=A,dst=B,factor=F[,step=S]
//   --straggler=RANK:FACTOR[,RANK:FACTOR]     --jitter=FRACTION[:SEED]
// Ranks are global ranks; op is the index in the rank's op list (as `ringpipe predict` prints it).
#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/ascii.h"
#include "apps/cli.h"
#include "apps/clock_choice.h"
#include "apps/config.h"
#include "apps/files.h"
#include "apps/host.h"
#include "apps/memory_estimate.h"
#include "apps/plan.h"
#include "apps/presets.h"
#include "apps/report.h"
#include "apps/subcommands.h"
#include "runtime/faults.h"
#include "runtime/status_macros.h"
#include "runtime/tracer.h"
#include "schedule/executor.h"
#include "schedule/metrics.h"
#include "schedule/plan.h"
#include "schedule/predictor.h"

namespace rp::apps {
namespace {

absl::Status BadFault(const std::string& flag, const std::string& text, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", text, "': ", why));
}

// A factor or fraction of the fault flags: decimal text, or inf / nan (their ranges are checked
// later, naming them) — never a hexadecimal float, which absl::SimpleAtod alone reads
// (--straggler=1:0x2 was a factor of 2).
bool ReadReal(absl::string_view text, double* out) {
  const std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  const bool word = t == "inf" || t == "+inf" || t == "-inf" || t == "infinity" || t == "nan";
  return (word || IsDecimalText(t)) && absl::SimpleAtod(t, out);
}

// One item of --fault ("KIND:KEY=VALUE,..."): its kind, keys and ranges checked.
absl::StatusOr<OpFault> ParseOpFault(absl::string_view item, int world_size, int steps) {
  // Spaces around items, kinds, keys and values are the writer's layout ("a; b", "rank = 1").
  const std::string text(absl::StripAsciiWhitespace(item));
  std::vector<std::string> kind_args = absl::StrSplit(text, absl::MaxSplits(':', 1));
  absl::StripAsciiWhitespace(&kind_args[0]);
  OpFault f;
  if (kind_args[0] == "throw") {
    f.kind = OpFaultKind::kThrow;
  } else if (kind_args[0] == "stall") {
    f.kind = OpFaultKind::kStall;
  } else if (kind_args[0] == "slow_link") {
    f.kind = OpFaultKind::kSlowLink;
  } else {
    return BadFault("fault", text, "kind must be throw, stall or slow_link");
  }
  std::map<std::string, std::string> kv;
  if (kind_args.size() > 1) {
    for (absl::string_view p : absl::StrSplit(kind_args[1], ',', absl::SkipWhitespace())) {
      std::vector<std::string> pair = absl::StrSplit(p, absl::MaxSplits('=', 1));
      if (pair.size() != 2) return BadFault("fault", text, absl::StrCat("'", p, "' is not key=value"));
      for (std::string& part : pair) absl::StripAsciiWhitespace(&part);
      if (!kv.emplace(pair[0], pair[1]).second) {
        return BadFault("fault", text, absl::StrCat(pair[0], " given twice"));
      }
    }
  }
  const bool link = f.kind == OpFaultKind::kSlowLink;
  const std::vector<std::string> keys =
      link ? std::vector<std::string>{"src", "dst", "factor", "step"}
           : std::vector<std::string>{"rank", "step", "op"};
  for (const auto& [k, v] : kv) {
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) {
      return BadFault("fault", text, absl::StrCat("unknown key '", k, "' (", absl::StrJoin(keys, ", "), ")"));
    }
  }
  auto get_int = [&](const std::string& k, int& out, bool required) -> absl::Status {
    auto it = kv.find(k);
    if (it == kv.end()) {
      return required ? BadFault("fault", text, absl::StrCat("needs ", k, "=")) : absl::OkStatus();
    }
    if (!absl::SimpleAtoi(it->second, &out)) {
      return BadFault("fault", text, absl::StrCat(k, " must be an integer"));
    }
    return absl::OkStatus();
  };
  auto check_rank = [&](const char* k, int r) -> absl::Status {
    if (r >= 0 && r < world_size) return absl::OkStatus();
    return BadFault("fault", text, absl::StrCat(k, "=", r, " is not a rank of the ", world_size, " devices"));
  };
  if (link) {
    RP_RETURN_IF_ERROR(get_int("src", f.rank, true));
    RP_RETURN_IF_ERROR(get_int("dst", f.dst, true));
    RP_RETURN_IF_ERROR(get_int("step", f.step, false));
    auto it = kv.find("factor");
    if (it == kv.end() || !ReadReal(it->second, &f.factor)) {
      return BadFault("fault", text, "needs factor=F (a number >= 1)");
    }
    // +inf is left to CheckFaultFactors, which says what it does to the modeled times.
    if (!(f.factor >= 1)) return BadFault("fault", text, "factor must be a number >= 1");
    RP_RETURN_IF_ERROR(check_rank("src", f.rank));
    RP_RETURN_IF_ERROR(check_rank("dst", f.dst));
    if (f.dst == f.rank) return BadFault("fault", text, "src and dst must differ (a link joins two devices)");
  } else {
    RP_RETURN_IF_ERROR(get_int("rank", f.rank, true));
    RP_RETURN_IF_ERROR(get_int("step", f.step, true));
    RP_RETURN_IF_ERROR(get_int("op", f.op, true));
    RP_RETURN_IF_ERROR(check_rank("rank", f.rank));
    if (f.op < 0) return BadFault("fault", text, absl::StrCat("op=", f.op, " is not an op index (>= 0)"));
  }
  if (f.step < 0 || f.step >= steps) {
    return BadFault("fault", text, absl::StrCat("step=", f.step, " is not a step of the ", steps, " (--steps)"));
  }
  return f;
}

// Parses --fault / --straggler / --jitter into `plan` (InvalidArgument naming the flag).
absl::Status ParseFaultFlags(const ParsedArgs& args, int world_size, int steps, FaultPlan& plan) {
  const std::string fault = args.Text("fault");
  for (absl::string_view item : absl::StrSplit(fault, ';', absl::SkipWhitespace())) {
    RP_ASSIGN_OR_RETURN(OpFault f, ParseOpFault(item, world_size, steps));
    plan.op_faults.push_back(f);
  }
  const std::string straggler = args.Text("straggler");
  for (absl::string_view item : absl::StrSplit(straggler, ',', absl::SkipWhitespace())) {
    const std::vector<std::string> rf = absl::StrSplit(item, ':');
    Straggler s;
    if (rf.size() != 2 || !absl::SimpleAtoi(rf[0], &s.rank) || !ReadReal(rf[1], &s.factor)) {
      return BadFault("straggler", std::string(item), "expected RANK:FACTOR");
    }
    if (s.rank < 0 || s.rank >= world_size) {
      return BadFault("straggler", std::string(item),
                      absl::StrCat("rank ", s.rank, " is not a rank of the ", world_size, " devices"));
    }
    // +inf is left to CheckFaultFactors, which says what it does to the modeled times.
    if (!(s.factor >= 1)) return BadFault("straggler", std::string(item), "FACTOR must be a number >= 1");
    plan.stragglers.push_back(s);
  }
  const std::string jitter = args.Text("jitter");
  if (!jitter.empty()) {
    const std::vector<std::string> fs = absl::StrSplit(jitter, ':');
    if (fs.size() > 2 || !ReadReal(fs[0], &plan.jitter.max_fraction) ||
        (fs.size() == 2 && !absl::SimpleAtoi(fs[1], &plan.jitter.seed))) {
      return BadFault("jitter", jitter, "expected FRACTION[:SEED]");
    }
    if (!(plan.jitter.max_fraction >= 0 && plan.jitter.max_fraction <= 10)) {
      return BadFault("jitter", jitter, "FRACTION must be in [0, 10]");
    }
  }
  // Every range is checked here, naming the flag, but whether an op index exists in the rank's
  // program: Executor::Create's "executor: faults: op fault ...", which Run names --fault.
  return absl::OkStatus();
}

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
    std::fprintf(stderr, "ringpipe run: the failed run's report and trace were written (status \"failed\")\n");
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

// What the fault flags add to the slowest op beyond the config's own straggler (which the config's
// checks count already), checked against the config's limits: the slowest rank's straggler factors
// (the config's and --straggler's, multiplied as the executor does) over the config's, times the
// largest --jitter draw (*op_factor). Values out of range are left to the executor's validation.
absl::Status CheckFaultFlagFactors(const RunConfig& cfg, const ParsedArgs& args, const FaultPlan& faults,
                                   double* op_factor) {
  const char* op_field = "straggler";
  double slowest = 1;
  for (double f : schedule::StragglerFactors(faults, cfg.world_size())) {
    if (f > slowest) slowest = f;  // NaN never is
  }
  *op_factor = std::max(1.0, slowest / cfg.straggler_factor);
  const double jitter = faults.jitter.max_fraction;
  if (jitter > 0 && jitter <= 10) {
    *op_factor *= 1 + jitter;
    if (args.Text("straggler").empty()) op_field = "jitter";
  }
  double link_factor = 1;
  for (const OpFault& f : faults.op_faults) {
    if (f.kind == OpFaultKind::kSlowLink) link_factor = std::max(link_factor, f.factor);
  }
  return CheckFaultFactors(cfg, *op_factor, link_factor, op_field);
}

// The exit for an executor that refused its options: an op index past the rank's program is the one
// --fault range only the executor knows (bad input, named --fault).
int CreateFailed(const absl::Status& st) {
  constexpr absl::string_view kFaults = "executor: faults: ";
  if (st.code() == absl::StatusCode::kInvalidArgument && absl::StartsWith(st.message(), kFaults) &&
      absl::StartsWith(st.message().substr(kFaults.size()), "op fault ")) {
    return Fail(kExitBadInput,
                absl::InvalidArgumentError(absl::StrCat("--fault: ", st.message().substr(kFaults.size()))));
  }
  return Fail(st.code() == absl::StatusCode::kInvalidArgument ? kExitBadInput : kExitFailed, st);
}

// The slow links the run saw, and a --fault slow link that no message crossed: it slowed nothing (the
// layout sends nothing that way).
void ReportSlowLinks(const FaultPlan& faults, const schedule::RunResult& result) {
  for (const schedule::RunResult::SlowLink& l : result.slow_links) {
    std::fprintf(stderr, "ringpipe run: slow link: rank %d -> rank %d took %gx its link class's time from step %d\n",
                 l.src, l.dst, l.factor, l.first_step);
  }
  for (const OpFault& f : faults.op_faults) {
    if (f.kind != OpFaultKind::kSlowLink) continue;
    const bool crossed = std::any_of(result.slow_links.begin(), result.slow_links.end(),
                                     [&](const schedule::RunResult::SlowLink& l) {
                                       return l.src == f.rank && l.dst == f.dst && l.factor == f.factor;
                                     });
    if (!crossed) {
      std::fprintf(stderr, "ringpipe run: slow link: rank %d -> rank %d (x%g from step %d) carried no message: this "
                   "layout sends nothing from rank %d to rank %d\n", f.rank, f.dst, f.factor, f.step, f.rank, f.dst);
    }
  }
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
  // (a longer planned wait would be reported as a stall): a forced scale is checked here, auto's
  // trials stay below the scale that allows.
  const WatchdogFit fit = WatchdogFitOf(options, op_factor);
  schedule::CalibrationOptions calibration;
  if (absl::Status st = FitTheWatchdog(*cfg, fit, calibration); !st.ok()) return Fail(kExitBadInput, st);
  HostUsage host;
  host.rss_before_bytes = ReadProcStatus().rss_bytes;
  host.model_buffer_bytes = ModelBufferBytes(*cfg);
  if (!cfg->virtual_time && cfg->time_scale_auto()) {
    // Validate before calibrating: a layout the executor refuses is bad input, whatever the clock.
    if (auto check = schedule::Executor::Create(options); !check.ok()) return CreateFailed(check.status());
    std::fprintf(stderr, "ringpipe run: time scale auto: measuring what this host keeps (short trial runs)...\n");
  }
  absl::StatusOr<ClockChoice> clock = ChooseClock(*cfg, &options, calibration);
  if (!clock.ok()) return Fail(kExitFailed, clock.status());
  if (clock->mode == ClockChoice::Mode::kAuto) {
    std::fprintf(stderr, "ringpipe run: %s\n", clock->reason.c_str());
    if (absl::Status st = CheckChosenScaleFitsTheWatchdog(*cfg, fit, clock->scale); !st.ok()) {
      return Fail(kExitBadInput, st);
    }
  }
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
  ReportSlowLinks(options.faults, *result);
  const LazyJson report =
      BuildLazyReport(*cfg, *plan, result->prediction, &*result, &host, /*with_timeline=*/!cfg->report_json.empty());
  const std::string text = RunText(*cfg, *plan, *result, report);
  if (tracer.capped() > 0) {
    std::fprintf(stderr, "ringpipe run: the trace keeps at most %zu events (ops and port events); %llu later ones were dropped\n",
                 kMaxTraceEvents, static_cast<unsigned long long>(tracer.capped()));
  }
  if (!cfg->report_json.empty()) {
    outputs.SetStreamed("report_json", [&report](TextSink sink) { return report.Stream(2, sink); });
  }
  if (!cfg->trace.empty()) {
    outputs.SetStreamed("trace", [&tracer](TextSink sink) { return tracer.StreamChromeJson(sink); });
  }
  if (absl::Status st = outputs.Commit(); !st.ok()) return Fail(kExitFailed, st);
  std::fputs(text.c_str(), stdout);
  return kExitOk;
}

std::vector<FlagSpec> Flags() {
  auto defaults = PresetByName("default");
  std::vector<FlagSpec> flags = ConfigFlags(0, defaults.ok() ? *defaults : RunConfig{});
  flags.push_back({"fault", Grammar::kString, "",
                   "Inject faults: 'throw:rank=R,step=S,op=I', 'stall:rank=R,step=S,op=I' or "
                   "'slow_link:src=A,dst=B,factor=F[,step=S]', several separated by ';'."});
  flags.push_back({"straggler", Grammar::kString, "",
                   "Slow devices: RANK:FACTOR[,RANK:FACTOR] multiplies their compute time."});
  flags.push_back({"jitter", Grammar::kString, "",
                   "Compute jitter: FRACTION[:SEED], each compute op takes (1 + u) x, u in [0, FRACTION) drawn from SEED "
                   "(default 0, independent of --seed)."});
  return flags;
}

}  // namespace

Subcommand RunSubcommand() {
  return {"run", "train a model with DP x PP x TP on emulated devices; measured vs predicted report", Flags,
          Run};
}

}  // namespace rp::apps
