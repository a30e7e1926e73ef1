// The `ringpipe` subcommands. Each lives in its own apps/*_cmd.cc and is listed in main.cc.
#pragma once

#include <string>
#include <vector>

#include "apps/cli.h"

namespace rp::apps {

struct Subcommand {
  const char* name;
  const char* summary;                   // one line for `ringpipe --help`
  std::vector<std::string> (*flags)();   // the flags it accepts, in help order
  int (*run)(const ParsedArgs& args);    // returns the process exit code
};

// `ringpipe allreduce`: nccl-tests-style all-reduce driver (apps/allreduce_cmd.cc).
Subcommand AllReduceSubcommand();
// `ringpipe run`: hybrid DP x PP x TP training on emulated devices (apps/run_cmd.cc).
Subcommand RunSubcommand();
// `ringpipe predict`: run's report from the predictor alone (apps/predict_cmd.cc).
Subcommand PredictSubcommand();
// `ringpipe sweep`: a grid of configurations, measured and predicted; CSV, JSON, SVG (apps/sweep_cmd.cc).
Subcommand SweepSubcommand();
// `ringpipe timeline`: SVG Gantt chart of one step, from a run or a report (apps/timeline_cmd.cc).
Subcommand TimelineSubcommand();
// `ringpipe stress`: seeded random configurations under every invariant, with faults (apps/stress_cmd.cc).
Subcommand StressSubcommand();

}  // namespace rp::apps
