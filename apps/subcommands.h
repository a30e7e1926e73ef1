// The `ringpipe` subcommands. Each lives in its own apps/*_cmd.cc, defines its own flags (shared ones
// come from apps/config_fields.h and apps/shared_flags.h) and is listed in main.cc.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "apps/flags.h"

namespace rp::apps {

struct Subcommand {
  const char* name;
  const char* summary;                  // one line for `ringpipe --help`
  std::vector<FlagSpec> (*flags)();     // the flags it accepts, in help order, with effective defaults
  int (*run)(const ParsedArgs& args);   // returns the process exit code (apps/cli.h)
};

// `ringpipe allreduce`: nccl-tests-style all-reduce driver (apps/allreduce_cmd.cc).
Subcommand AllReduceSubcommand();
// `ringpipe alltoall`: nccl-tests-style all-to-all driver (apps/alltoall_cmd.cc).
Subcommand AllToAllSubcommand();
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

// Every subcommand, in `ringpipe --help` order.
std::vector<Subcommand> AllSubcommands();

// Parses `args` (the arguments after the subcommand's name) with `subcommand`'s flags, as the binary
// does. InvalidArgument for an unknown subcommand or bad flags.
absl::StatusOr<ParsedArgs> ParseSubcommandArgs(const std::string& subcommand, const std::vector<std::string>& args);

// The binary: argv in, exit code out (what main() does; tests and the flag fuzzer call it too).
// `argv[0]` is the program name.
int RunMain(const std::vector<std::string>& argv);

}  // namespace rp::apps
