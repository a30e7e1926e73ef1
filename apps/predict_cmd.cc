// `ringpipe predict`: the report of `ringpipe run` from the predictor alone (schedule/predictor.h):
// no threads, no clock, seconds even for a million devices when the replicas fold into one; a layout
// whose replicas do not fold is played device by device, within a budget (apps/plan.h CheckPredictable). Same config (preset < file <
// flags), same JSON schema minus the measured fields (docs/report.md).
//
// Exit codes (apps/cli.h): 0 ok; 2 bad input (nothing written); 1 an output could not be written.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "apps/cli.h"
#include "apps/config.h"
#include "apps/files.h"
#include "apps/plan.h"
#include "apps/presets.h"
#include "apps/report.h"
#include "apps/subcommands.h"
#include "schedule/predictor.h"

namespace rp::apps {
namespace {

int Run(const ParsedArgs& args) {
  auto fail = [](int code, const absl::Status& st) {
    std::fprintf(stderr, "ringpipe predict: %s\n", std::string(st.message()).c_str());
    return code;
  };
  auto cfg = LoadConfig(args, /*for_run=*/false);
  if (!cfg.ok()) return fail(kExitBadInput, cfg.status());
  OutputFiles outputs;
  if (absl::Status st = outputs.Declare("report_json", cfg->report_json); !st.ok()) return fail(kExitBadInput, st);
  if (absl::Status st = outputs.CheckAll({{"config", cfg->config_file}}); !st.ok()) return fail(kExitBadInput, st);
  auto plan = BuildPlan(*cfg, /*for_run=*/false);
  if (!plan.ok()) return fail(kExitBadInput, plan.status());
  if (absl::Status st = CheckPredictable(*cfg, *plan); !st.ok()) return fail(kExitBadInput, st);
  auto pred = schedule::Predict(plan->execution, plan->predict);
  if (!pred.ok()) return fail(kExitBadInput, pred.status());
  // The timeline only for the file: the text report does not read it (half the peak memory at m = 2048).
  // Each device's object and timeline row is made when the text or the file reads it (apps/lazy_json.h).
  const LazyJson report = BuildLazyReport(*cfg, *plan, *pred, nullptr, nullptr, !cfg->report_json.empty());
  std::string text = RenderReport(report);
  absl::StrAppend(&text, "\npredicted step, first replica (", ScheduleName(cfg->schedule), "; ", kGanttLegend, ")\n",
                  RenderPredictedGantt(*plan, *pred, 96, std::min(16, cfg->pp * cfg->tp)));
  if (!cfg->report_json.empty()) {
    outputs.SetStreamed("report_json", [&report](TextSink sink) { return report.Stream(2, sink, ReportStreamThreads()); });
  }
  if (absl::Status st = outputs.Commit(); !st.ok()) return fail(kExitFailed, st);
  WriteStdout(text);
  return kExitOk;
}

std::vector<FlagSpec> Flags() {
  auto defaults = PresetByName("default");
  return ConfigFlags(kEmulationOnly, defaults.ok() ? *defaults : RunConfig{});
}

}  // namespace

Subcommand PredictSubcommand() {
  return {"predict", "the report of `run` from the predictor alone (seconds; up to 2^20 devices)", Flags, Run};
}

}  // namespace rp::apps
