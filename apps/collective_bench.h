// What `ringpipe allreduce` and `ringpipe alltoall` share: their nccl-tests-style flags, the loop
// over sizes (--min_bytes to --max_bytes, × --step_factor) and --segment_bytes, the table with its
// header, the fastest segment per size, the #wrong total and the --json rows. Each command brings
// its engine (apps/allreduce.h, apps/alltoall.h), its header notes and its extra flags.
//
// Exit codes: 2 for a bad flag or output path (one line naming it), sizes whose buffers would not
// fit in the memory available (MemAvailable, or RINGPIPE_MEMORY_LIMIT_BYTES; apps/memory_estimate.h),
// or a row of more than kMaxRankMessagesPerRow messages per rank (naming --segment_bytes, or --iters
// when even one message per chunk or block is too many); 1 if an engine fails or any element is
// wrong (apps/cli.h: a check failed), else 0.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "apps/allreduce.h"
#include "apps/cli.h"
#include "apps/flags.h"
#include "nlohmann/json.hpp"
#include "runtime/link.h"

namespace rp::apps::collective_bench {

using Settings = allreduce::Settings;
using Row = allreduce::Row;

// Messages one rank may hand off in one row (every call of --warmup and --iters): each is a hand-off
// between rank threads (untimed) or an event of the fabric (timed). Measured untimed with 4-byte
// segments, 256 KiB on 4 ranks (98304 messages per rank a call): 55 ms on this 2-core host when
// quiet (0.56 us a message), 23 s at load 8 (0.23 ms) — so a row at this bound takes about 10 s on
// a quiet host and can take far longer on a loaded one. `allreduce --segment_bytes=4` on 64 MiB
// (25165824 messages per rank per call, 23 calls) ran for minutes without printing a row.
// Per rank: with more ranks than cores a row's wall time also grows with --ranks, which this does
// not bound (`--ranks=1024 --max_bytes=4K`: 2.2 s a call).
inline constexpr double kMaxRankMessagesPerRow = double{1 << 24};

struct Command {
  const char* name = "";        // "allreduce": the header's and error lines' prefix
  const char* busbw_rule = "";  // busbw = algbw × this, e.g. "2(n-1)/n"
  const char* formula = "";     // what the timed header says of the formula column
  std::vector<std::string> notes;  // header lines after the first (without the "# ")
  nlohmann::json row_extra;        // fields added to every JSON row
  // Every measured size is a multiple of this (an FP32 element; all-to-all: one per rank).
  uint64_t unit_bytes = 4;
  // One row; spec is null for --link=ideal (the untimed path).
  std::function<absl::StatusOr<Row>(uint64_t bytes, uint64_t segment, const LinkSpec* spec)> run;
  // What one row allocates per rank at most (its buffers, lossy wire buffers, timed messages' copies),
  // in bytes: Run refuses sizes whose rows would not fit in memory (exit 2, naming --max_bytes)
  // instead of dying of std::bad_alloc or the OOM killer midway. Unset: not checked.
  std::function<double(uint64_t bytes, uint64_t segment, bool timed)> rank_bytes;
  // Messages one rank sends in one call of `bytes` cut into segments of `segment` bytes (ring: 2(n−1)
  // steps × segments per chunk; all-to-all: n − 1 blocks × segments per block), non-increasing in
  // `segment`: Run refuses rows beyond kMaxRankMessagesPerRow. Unset: not checked.
  std::function<double(uint64_t bytes, uint64_t segment)> rank_messages;
};

// The message budget of the rows of `sizes` × `s.segments` (InvalidArgument naming --segment_bytes
// and the smallest segment that fits, or --iters): see kMaxRankMessagesPerRow.
absl::Status CheckMessages(const Settings& s, const Command& c, const std::vector<uint64_t>& sizes);

// What a row of `ranks` ranks allocates: `rank_bytes` each, plus their threads' stacks.
double RowHostBytes(const Command& c, int ranks, uint64_t bytes, uint64_t segment, bool timed);

// The shared flags: ranks, sizes, segments, codec, iterations, link, json.
std::vector<FlagSpec> Flags(const std::string& min_bytes_help, const std::string& max_bytes_help,
                            const std::string& segment_help);
// Reads them into `s` (InvalidArgument naming the flag).
absl::Status ReadFlags(const ParsedArgs& args, Settings& s);
// Prints the error line of `c` and returns `code`.
int Fail(const Command& c, int code, const std::string& message);
// The whole command once its settings are read; returns the exit code.
int Run(const Settings& s, const Command& c);

}  // namespace rp::apps::collective_bench
