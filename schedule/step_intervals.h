// CountStepIntervals: how many intervals (schedule/metrics.h OpInterval) one training step of a device
// records — in Predict's timeline and in the emulator's alike — counted from the ExecutionPlan without
// playing it, so that a caller can refuse a step too large to draw or keep before predicting or running
// it (`ringpipe timeline`: apps/timeline_cmd.cc).
//
// Both players record, per op of the device's program (schedule/predictor_sim.cc, runner_ops.cc):
//   send            one kSend interval;
//   receive         one kRecv;
//   compute op      per part (an F&B has two: its F pass and its B pass) one kCompute segment, plus
//                   per TP all-reduce or EP all-to-all step of the part's pass (ChunkPlan::steps) the
//                   segment before it and the exchange itself: 1 + 2 × exchanges;
//   optimizer step  one kGradAllReduce per bucket of the rank (RankPlan::bucket_order), one kGradWait
//                   and one kOptimizer;
//   kTpAllReduce / kAllReduce ops  none (sizes only).
// tests/apps/timeline_test.cc (StepIntervals.*) holds the count to the predictor's and the emulator's
// timelines over the schedules, TP, EP, DP buckets and chunked layouts.
//
// Thread safety: pure function.
//
// Example:
//   const StepIntervals n = CountStepIntervals(plan, /*pp=*/0);
//   n.sends + n.others == pred.Timeline(plan.grid, /*rank=*/0).size();
#pragma once

#include <cstdint>

#include "schedule/plan.h"

namespace rp::schedule {

struct StepIntervals {
  uint64_t sends = 0;   // kSend intervals (no device time: a chart leaves them out)
  uint64_t others = 0;  // every other kind
};

// The intervals of one step of any device of pipeline rank `pp` (0 <= pp < plan.grid's pp).
StepIntervals CountStepIntervals(const ExecutionPlan& plan, int pp);

}  // namespace rp::schedule
