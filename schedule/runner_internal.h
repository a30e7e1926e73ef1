// Internal to the device runner (runner_ops.cc, runner_ep.cc): small helpers both use.
#pragma once

#include <chrono>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "comm/communicator.h"
#include "schedule/executor.h"
#include "schedule/grid.h"
#include "schedule/metrics.h"
#include "schedule/program.h"

namespace rp::schedule::runner_internal {

// A communication wait's wall-time limit: a day on the virtual clock (stalls are the monitor's),
// ten watchdog periods on a real one.
inline std::chrono::nanoseconds CommTimeout(const ExecutorOptions& o) {
  return o.virtual_time ? std::chrono::nanoseconds(std::chrono::hours(24))
                        : 10 * o.watchdog_timeout;
}

inline uint64_t FlowId(int src_rank, uint64_t ticket) {
  return (static_cast<uint64_t>(src_rank) + 1) << 40 | (ticket & ((uint64_t{1} << 40) - 1));
}

inline absl::Status WithSite(const absl::Status& s, const Coord& c, int rank, int step,
                             const Op& op, int peer_rank) {
  if (s.ok()) return s;
  return absl::Status(
      s.code(), absl::StrCat("rank ", rank, " (dp ", c.dp, ", pp ", c.pp, ", tp ", c.tp,
                             ") step ", step, " op ", ToString(op),
                             peer_rank >= 0 ? absl::StrCat(" peer rank ", peer_rank) : "", ": ",
                             s.message()));
}

// The measured split of a wait [wall_start, wall_end) on the step's measured axis against modeled
// spans mapped onto it (modeled t sits at t − step_start): the wait is moved onto the modeled
// axis instead of the spans onto the measured one (the same integer overlaps, no copy). The part
// past the collective's modeled end `done` is the host's lateness (WaitSplit::late).
inline WaitSplit SplitWallBySpans(Nanos wall_start, Nanos wall_end,
                                  std::span<const WaitSpan> spans, Nanos step_start, Nanos done) {
  return SplitBySpans(wall_start + step_start, wall_end + step_start, spans, done);
}

}  // namespace rp::schedule::runner_internal
