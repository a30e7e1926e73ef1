// Compute orders of the pipeline schedules: for every pipeline rank, its F / B / Bi / W / F&B ops in the
// order the schedule's source runs them, before wiring (generators.cc adds the messages, TP
// all-reduces, gradient buckets and the optimizer step, and checks the sizes first).
//
// Each function restates one source's rule (docs/schedules.md cites them); the preconditions are the
// generators' checks (p, m >= 1 and each schedule's own conditions), not re-checked here. Pure.
//
// Example: OneFOneBOrder(2, 2, OpKind::kBackward)[0] is F0 F1 B0 B1.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "schedule/program.h"

namespace rp::schedule {

// One compute op: kind, micro-batch, chunk; for kForwardBackward the forward part, and the backward
// part in backward_mb / backward_chunk.
struct ComputeOp {
  OpKind kind;
  int mb;
  int chunk;
  int backward_mb = -1;
  int backward_chunk = -1;
};
using ComputeOrder = std::vector<std::vector<ComputeOp>>;  // per pipeline rank

// All F's, then all B's, in micro-batch order (chunk 0).
ComputeOrder GPipeOrder(int p, int m);
// 1F1B: min(p − r − 1, m) warm-up F's, then (F, `backward`) pairs, then the remaining backwards.
ComputeOrder OneFOneBOrder(int p, int m, OpKind backward);
// ZB-H1: 1F1B's order with Bi, rank r's W(k − r) right after Bi(k), the rest after the last Bi.
ComputeOrder ZeroBubbleH1Order(int p, int m);
// sail-sg's get_hand_schedule with c warm-up forwards per rank distance (c = 2: ZB-H2; m >= 2(p − 1)).
ComputeOrder HandZeroBubbleOrder(int p, int m, int c);
// Megatron-LM interleaved 1F1B, v chunks, micro-batch groups of `group` (Megatron's conditions hold).
ComputeOrder InterleavedOrder(int p, int m, int v, int group);
// PyTorch's ScheduleZBVZeroBubble (V placement: chunk 0 stage r, chunk 1 stage 2p − 1 − r).
ComputeOrder ZeroBubbleVOrder(int p, int m);
// DeepSeek's DualPipeV (V placement; m >= 2p) and DualPipe (two directions; p, m even, m >= 2p), with
// the overlapped pairs as kForwardBackward ops (`fused`) or as F then B. Internal error if the steps
// leave a micro-batch out (they cannot under the preconditions).
absl::StatusOr<ComputeOrder> DualPipeVOrder(int p, int m, bool fused);
absl::StatusOr<ComputeOrder> DualPipeOrder(int p, int m, bool fused);

}  // namespace rp::schedule
