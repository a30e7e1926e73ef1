// `ringpipe run`: trains the configured model with DP x PP x TP on emulated devices (the Executor,
// schedule/executor.h) and prints measured and predicted figures side by side (apps/report.h), an
// ASCII Gantt of the measured step, and optionally the JSON report and the Chrome trace.
//
// Exit codes (apps/cli.h): 0 ok; 2 bad input (nothing run, nothing written); 1 the run failed.
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "apps/cli.h"
#include "apps/config.h"
#include "apps/report.h"
#include "apps/subcommands.h"
#include "runtime/tracer.h"
#include "schedule/executor.h"

namespace rp::apps {
namespace {

int Run(const ParsedArgs& args) {
  auto fail = [](int code, const absl::Status& st) {
    std::fprintf(stderr, "ringpipe run: %s\n", std::string(st.message()).c_str());
    return code;
  };
  auto cfg = LoadConfig(args, /*for_run=*/true);
  if (!cfg.ok()) return fail(kExitBadInput, cfg.status());
  auto plan = BuildPlan(*cfg);
  if (!plan.ok()) return fail(kExitBadInput, plan.status());

  Tracer tracer(cfg->world_size(), cfg->devices_per_node);
  schedule::ExecutorOptions options = plan->executor;
  options.tracer = &tracer;
  auto exec = schedule::Executor::Create(options);
  if (!exec.ok()) {
    const bool bad_input = exec.status().code() == absl::StatusCode::kInvalidArgument;
    return fail(bad_input ? kExitBadInput : kExitRunFailed, exec.status());
  }
  std::fprintf(stderr, "ringpipe run: %s, %s, %d steps on %d device threads (%s)...\n",
               plan->grid.ToString().c_str(), schedule::ScheduleName(cfg->schedule), cfg->steps,
               cfg->world_size(),
               cfg->virtual_time ? "virtual clock" : absl::StrCat("time scale ", cfg->time_scale).c_str());
  auto result = (*exec)->Run();
  if (!result.ok()) return fail(kExitRunFailed, result.status());

  const nlohmann::json report = BuildReport(*cfg, *plan, result->prediction, &*result);
  std::string text = RenderReport(report);

  // The Gantt of the median-time step.
  std::vector<size_t> order(result->steps.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return result->steps[a].measured_ms < result->steps[b].measured_ms;
  });
  if (!order.empty()) {
    const int step = result->steps[order[order.size() / 2]].step;
    const std::string gantt = RenderMeasuredGantt(tracer.Events(), step, cfg->world_size(), 96,
                                                    std::min(16, cfg->pp * cfg->tp));
    if (!gantt.empty()) {
      absl::StrAppend(&text, "\nmeasured step ", step,
                      " (median), first replica, modeled time (F/B/b/W compute, O optimizer, T TP all-reduce, = gradient "
                      "all-reduce, . idle)\n",
                      gantt);
    }
  }
  absl::StrAppend(&text, "\npredicted step, first replica\n", RenderPredictedGantt(*plan, result->prediction, 96));

  if (!cfg->report_json.empty()) {
    if (absl::Status st = WriteFileAtomically(cfg->report_json, report.dump(2) + "\n"); !st.ok()) {
      return fail(kExitRunFailed, absl::InternalError(absl::StrCat("--report_json: ", st.message())));
    }
  }
  if (!cfg->trace.empty()) {
    if (absl::Status st = WriteFileAtomically(cfg->trace, tracer.ToChromeJson()); !st.ok()) {
      return fail(kExitRunFailed, absl::InternalError(absl::StrCat("--trace: ", st.message())));
    }
  }
  std::fputs(text.c_str(), stdout);
  return kExitOk;
}

std::vector<std::string> Flags() { return ConfigFieldNames(); }

}  // namespace

Subcommand RunSubcommand() {
  return {"run", "train a model with DP x PP x TP on emulated devices; measured vs predicted report", Flags,
          Run};
}

}  // namespace rp::apps
