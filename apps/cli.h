// Command-line front end shared by the `ringpipe` subcommands.
//
// Flags are ordinary ABSL_FLAGs (so `--help` text lives next to each flag), but parsing goes through
// absl's flag reflection instead of absl::ParseCommandLine, for two reasons: absl exits with code 1
// on a bad flag, while ringpipe's contract is "one line naming the field, exit 2"; and `run`/`sweep`
// need to know which flags the user set explicitly (flags override a config file).
//
//   ringpipe <subcommand> [--flag=value | --flag value | --bool_flag | --nobool_flag]...
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"

namespace rp::apps {

// Exit codes of the binary.
inline constexpr int kExitOk = 0;
inline constexpr int kExitRunFailed = 1;  // the emulated run failed (watchdog, fault, internal)
inline constexpr int kExitBadInput = 2;   // bad flags, config, impossible layout: nothing written
// `ringpipe run`: the emulated run failed at run time — a device threw, stalled or stopped, or a wait
// outlived the watchdog (injected with --fault or not). The message names rank, step, op and the
// missing peers; no partial step was committed. (docs/reliability.md)
inline constexpr int kExitFault = 3;
// `ringpipe sweep`: some points were invalid or failed; every output was still written.
inline constexpr int kExitSomePointsFailed = 4;

struct ParsedArgs {
  std::string subcommand;                       // first positional argument ("" if none)
  std::vector<std::string> positional;          // the rest
  absl::flat_hash_set<std::string> specified;   // flag names set on the command line
  // Every flag occurrence in command-line order (name, value text), for repeatable flags such as
  // `sweep --axis` (absl keeps only the last value of a flag).
  std::vector<std::pair<std::string, std::string>> occurrences;
  bool help = false;                            // --help / -h / help subcommand
};

// Parses argv, setting each flag it names. Errors (InvalidArgument) name the flag and the reason:
// unknown flags, unparsable values, a flag without its value. `allowed` (if non-empty) restricts
// which flags the subcommand accepts.
absl::StatusOr<ParsedArgs> ParseArgs(int argc, char** argv);

// Checks that every flag in `args.specified` is one of `allowed`.
absl::Status CheckAllowed(const ParsedArgs& args, const std::vector<std::string>& allowed);

// Help text for the given flags: name, default and help string of each, wrapped.
std::string FlagsHelp(const std::vector<std::string>& flag_names);

// Writes `contents` to `path` atomically: a temporary file beside it, then rename. On failure
// nothing is left at `path` (and no temporary file remains).
absl::Status WriteFileAtomically(const std::string& path, const std::string& contents);

}  // namespace rp::apps
