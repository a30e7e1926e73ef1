// ASCII rendering of a pipeline program: one row per pipeline rank, one column per time slot.
//
// RenderSlots plays the program with unit costs (every F, Bi and W of a chunk takes one slot, a whole
// B one slot — two in split-backward programs, where it is Bi + W —, an F&B its F's and its B's slots)
// and free links, so a cell is filled only when its inputs exist — unlike the S2 prototype's table
// (SCENARIOS.md), the last stage's first backward can never appear before its forward.
// RenderTimeline draws predicted timings at any slot width (e.g. 10 ms per column).
//
// Cells: F<mb>, B<mb> (whole backward, or Bi), W<mb>; with v > 1 the chunk's letter follows (F3a, F3b,
// ...: in a V, a is the way down, b the way back; with two directions (DualPipe) a is direction 0 —
// micro-batches [0, m/2) entering at rank 0 — and b direction 1, entering at rank p − 1). An F&B shows
// its forward in its first cell and "&" + its backward in the rest (F3a &B1b &B1b). '.' is idle.
// Pure; thread-compatible.
//
// Example (1F1B, p = 2, m = 2): RenderSlots(*BuildOneFOneB({.num_ranks = 2, .num_micro_batches = 2}))
//   rank\slot  0  1  2  3  4  5
//   rank 0    F0 F1  . B0  . B1
//   rank 1     . F0 B0 F1 B1  .
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/time.h"
#include "schedule/metrics.h"
#include "schedule/program.h"

namespace rp::schedule {

// `timelines[s]` are the intervals of pipeline rank s (Prediction::Timeline, RunResult::timelines,
// emulated times). Compute intervals are drawn in the slots [start / slot, ⌈end / slot⌉) with the
// label of their op; a slot shared by two ops shows the later one. InvalidArgument if slot <= 0,
// the timelines are not one per rank or name an op the rank does not have.
[[nodiscard]] absl::StatusOr<std::string> RenderTimeline(
    const Program& prog, const std::vector<std::vector<OpInterval>>& timelines, Nanos slot);

// Unit-cost rendering (see above). Errors: Validate's.
[[nodiscard]] absl::StatusOr<std::string> RenderSlots(const Program& prog);

}  // namespace rp::schedule
