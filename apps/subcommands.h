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

}  // namespace rp::apps
