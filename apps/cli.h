// What the `ringpipe` binary promises every caller: its exit codes, and that what it prints reached
// standard output.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace rp::apps {

// Exit codes of the binary (README, docs/config.md).
inline constexpr int kExitOk = 0;
// A failure that is neither bad input nor a run-time fault of the emulated run: an output could not be
// written (a file or standard output), a check failed (`allreduce` #wrong, `stress`), an internal error.
inline constexpr int kExitFailed = 1;
// Bad flags, config, impossible layout, a run too big for the machine: one line naming the field,
// nothing written.
inline constexpr int kExitBadInput = 2;
// `ringpipe run`: the emulated run failed at run time — a device threw, stalled or stopped, or a wait
// outlived the watchdog (injected with --fault or not). The message names rank, step, op and the
// missing peers; no partial step was committed. (docs/reliability.md)
inline constexpr int kExitFault = 3;
// `ringpipe sweep`: some points were invalid or failed; every output was still written.
inline constexpr int kExitSomePointsFailed = 4;

// Writes `text` to standard output (through stdio). A write the system refuses keeps its reason for
// FinishStdout: stdio loses it, since a text longer than stdio's buffer is written at once and, when
// that write fails, nothing is left for the final flush to fail on. Main thread only.
void WriteStdout(absl::string_view text);

// Flushes standard output. If anything written to it was lost (a full disk, a closed pipe, /dev/full),
// prints "ringpipe SUBCOMMAND: standard output: <errno text>" to stderr and returns kExitFailed when
// `code` was kExitOk; otherwise returns `code`.
int FinishStdout(const std::string& subcommand, int code);

}  // namespace rp::apps
