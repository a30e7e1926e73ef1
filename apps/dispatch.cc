// The binary's front door: picks the subcommand, parses its flags, prints help, runs it, and checks
// that standard output got everything.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "apps/cli.h"
#include "apps/subcommands.h"

namespace rp::apps {
namespace {

// The reason of the first write to standard output that failed (WriteStdout); 0: none failed.
int first_stdout_errno = 0;

// Help as the first argument: the help arguments of every subcommand, and the word `help`
// (`ringpipe help run`).
bool IsHelp(const std::string& arg) { return IsHelpArgument(arg) || arg == "help"; }

void PrintTopHelp(const std::vector<Subcommand>& subs, std::FILE* stream) {
  std::string text =
      "ringpipe: emulates DP x PP x TP training on real threads, real buffers and modeled time.\n\n"
      "usage: ringpipe <subcommand> [--flag=value]...\n\nsubcommands:\n";
  for (const Subcommand& s : subs) absl::StrAppend(&text, "  ", s.name, "  ", s.summary, "\n");
  absl::StrAppend(&text, "\n`ringpipe <subcommand> --help` lists its flags and their defaults (-h or --help anywhere among the "
                         "arguments wins over the others, valid or not).\n"
                         "Exit codes: 0 ok, 1 failed (an output could not be written, a check failed), 2 bad "
                         "input, 3 the emulated run failed at run time, 4 a sweep with failed points.\n");
  if (stream == stdout) {
    WriteStdout(text);
  } else {
    std::fputs(text.c_str(), stream);
  }
}

int Fail(const std::string& msg) {
  std::fprintf(stderr, "ringpipe: %s\n", msg.c_str());
  return kExitBadInput;
}

}  // namespace

void WriteStdout(absl::string_view text) {
  errno = 0;
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() && first_stdout_errno == 0) {
    first_stdout_errno = errno;
  }
}

int FinishStdout(const std::string& subcommand, int code) {
  errno = 0;
  const bool lost = std::fflush(stdout) != 0 || std::ferror(stdout) != 0;
  if (!lost) return code;
  // The flush's reason, else that of the write that failed before (an empty buffer flushes "fine").
  const int err = errno != 0 ? errno : first_stdout_errno;
  std::fprintf(stderr, "ringpipe%s%s: standard output: %s\n", subcommand.empty() ? "" : " ", subcommand.c_str(),
               err != 0 ? std::strerror(err) : "write error");
  return code == kExitOk ? kExitFailed : code;
}

std::vector<Subcommand> AllSubcommands() {
  return {RunSubcommand(), PredictSubcommand(), SweepSubcommand(), TimelineSubcommand(), AllReduceSubcommand(),
          AllToAllSubcommand(),
          StressSubcommand()};
}

absl::StatusOr<ParsedArgs> ParseSubcommandArgs(const std::string& subcommand, const std::vector<std::string>& args) {
  for (const Subcommand& s : AllSubcommands()) {
    if (subcommand == s.name) return ParseFlags(s.name, args, s.flags());
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown subcommand '", OneLine(subcommand), "'"));
}

int RunMain(const std::vector<std::string>& argv) {
  const std::vector<Subcommand> subs = AllSubcommands();
  if (argv.size() < 2) {  // usage on stderr: it is the message of exit code 2
    PrintTopHelp(subs, stderr);
    return kExitBadInput;
  }
  std::string name = argv[1];
  std::vector<std::string> rest(argv.begin() + 2, argv.end());
  bool help = false;
  if (IsHelp(name)) {
    if (rest.empty()) {
      PrintTopHelp(subs, stdout);
      return FinishStdout("", kExitOk);
    }
    help = true;
    name = rest.front();
    rest.erase(rest.begin());
  }
  // Help wins over the other arguments, valid or not (apps/flags.h): a help argument anywhere.
  help = help || std::any_of(rest.begin(), rest.end(), [](const std::string& a) { return IsHelpArgument(a); });
  for (const Subcommand& s : subs) {
    if (name != s.name) continue;
    const std::vector<FlagSpec> specs = s.flags();
    if (help) rest.clear();
    auto args = ParseFlags(s.name, rest, specs);
    if (!args.ok()) {
      std::fprintf(stderr, "ringpipe %s: %s\n", s.name, std::string(args.status().message()).c_str());
      return kExitBadInput;
    }
    if (help || args->help) {
      WriteStdout(absl::StrCat("ringpipe ", s.name, ": ", s.summary, "\n\nflags:\n", FlagsHelp(specs)));
      return FinishStdout(s.name, kExitOk);
    }
    return FinishStdout(s.name, s.run(*args));
  }
  if (!name.empty() && name[0] == '-') {
    if (help || IsHelpArgument(name)) {  // `ringpipe --bogus --help`, `ringpipe --help --help`: no subcommand named
      PrintTopHelp(subs, stdout);
      return FinishStdout("", kExitOk);
    }
    return Fail(absl::StrCat("'", OneLine(name), "': the subcommand comes first (see `ringpipe --help`)"));
  }
  return Fail(absl::StrCat("unknown subcommand '", OneLine(name), "' (see `ringpipe --help`)"));
}

}  // namespace rp::apps
