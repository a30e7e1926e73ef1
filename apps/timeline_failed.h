// `ringpipe timeline`'s outputs of a run that failed at run time (apps/timeline_cmd.cc): a fault the
// fault flags injected (apps/fault_flags.h), a stall or a device that threw; as `run` does, the
// outputs asked for are then written,
// marked failed: the report of BuildFailedRunReport (status "failed", the failure, the committed
// steps) and the chart of the failed run's predicted step (nothing was measured) under a title that
// says the run failed.
//
// Thread safety: pure function.
#pragma once

#include <string>

#include "apps/config.h"
#include "apps/plan.h"
#include "apps/report.h"
#include "schedule/executor.h"

namespace rp::apps {

struct FailedTimeline {
  std::string report_json;  // the failed report's text (DumpJson, indented), ending in a newline
  std::string svg;          // the chart; empty if the failed report has no timeline to draw
};

// `title`: the chart's title as given (--title), "" for the report's.
FailedTimeline FailedTimelineOutputs(const RunConfig& cfg, const Plan& plan, const schedule::RunFailure& failure,
                                     const HostUsage& host, const std::string& title);

}  // namespace rp::apps
