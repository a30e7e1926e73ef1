// ringpipe: a runtime emulator of hybrid-parallel deep-learning training.
// This file only dispatches to subcommands; see apps/subcommands.h.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "apps/cli.h"
#include "apps/subcommands.h"

namespace {

using rp::apps::Subcommand;

std::vector<Subcommand> AllSubcommands() {
  return {rp::apps::RunSubcommand(), rp::apps::PredictSubcommand(), rp::apps::SweepSubcommand(),
          rp::apps::TimelineSubcommand(), rp::apps::AllReduceSubcommand(),
          rp::apps::StressSubcommand()};
}

void PrintTopHelp(const std::vector<Subcommand>& subs) {
  std::string text =
      "ringpipe: emulates DP x PP x TP training on real threads, real buffers and modeled time.\n\n"
      "usage: ringpipe <subcommand> [flags]\n\nsubcommands:\n";
  for (const Subcommand& s : subs) absl::StrAppend(&text, "  ", s.name, "  ", s.summary, "\n");
  absl::StrAppend(&text, "\n`ringpipe <subcommand> --help` lists its flags.\n");
  std::fputs(text.c_str(), stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<Subcommand> subs = AllSubcommands();
  auto args = rp::apps::ParseArgs(argc, argv);
  if (!args.ok()) {
    std::fprintf(stderr, "ringpipe: %s\n", std::string(args.status().message()).c_str());
    return rp::apps::kExitBadInput;
  }
  if (args->subcommand.empty()) {
    PrintTopHelp(subs);
    return args->help ? rp::apps::kExitOk : rp::apps::kExitBadInput;
  }
  for (const Subcommand& s : subs) {
    if (args->subcommand != s.name) continue;
    if (args->help) {
      std::printf("ringpipe %s: %s\n\nflags:\n%s", s.name, s.summary,
                  rp::apps::FlagsHelp(s.flags()).c_str());
      return rp::apps::kExitOk;
    }
    if (absl::Status st = rp::apps::CheckAllowed(*args, s.flags()); !st.ok()) {
      std::fprintf(stderr, "ringpipe: %s\n", std::string(st.message()).c_str());
      return rp::apps::kExitBadInput;
    }
    return s.run(*args);
  }
  std::fprintf(stderr, "ringpipe: unknown subcommand '%s' (see `ringpipe --help`)\n",
               args->subcommand.c_str());
  return rp::apps::kExitBadInput;
}
