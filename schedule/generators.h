// Pipeline schedule generators: pure functions from sizes to a rp::schedule::Program.
//
// Every generator returns the full op list of each pipeline rank: compute ops in the schedule's order,
// a kRecvAct/kRecvGrad right before each compute op that needs a remote input, a kSendAct/kSendGrad right
// after each compute op whose output a remote stage needs, optional TP all-reduces after F and B, the
// gradient all-reduce buckets and the optimizer step (see program.h for op semantics).
//
//   BuildGPipe        all forwards, then all backwards (micro-batch order). Peak activations m.
//   BuildOneFOneB     PipeDream-Flush / 1F1B: rank s runs min(p−s−1, m) warm-up forwards, then
//                     alternates one forward and one backward, then drains. Peak min(p−s, m).
//   BuildInterleaved  Megatron-LM interleaved 1F1B with v virtual stages (chunks) per device. Requires
//                     m % p == 0 (Megatron's condition: micro-batches go through the chunks in groups of p).
//   BuildZeroBubble   ZB-H1 (Qi et al., 2023): backward split into B (input gradient) and W (weight
//                     gradient); 1F1B's order of F and B, with W's deferred into what would be bubbles,
//                     under 1F1B's activation limit min(p−s, m) (an activation is held from F to its W).
//
// Guarantees: any p >= 1 and m >= 1 (m < p included); the result passes Validate (validator.h).
// Errors: InvalidArgument naming the field and the condition.
//
// Example:
//   PipelineOptions o{.num_ranks = 4, .num_micro_batches = 8, .activation_bytes = 1 << 20};
//   RP_ASSIGN_OR_RETURN(Program prog, BuildOneFOneB(o));
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "schedule/program.h"

namespace rp::schedule {

struct PipelineOptions {
  int num_ranks = 1;           // p, pipeline ranks (>= 1)
  int num_micro_batches = 1;   // m (>= 1)
  int num_chunks = 1;          // v, virtual stages per device: BuildInterleaved only (>= 1)
  uint64_t activation_bytes = 0;    // one micro-batch's activation (and its gradient) between stages
  uint64_t tp_allreduce_bytes = 0;  // per F and per B(-input) of one chunk; 0: no kTpAllReduce ops
  // Gradient all-reduce: fp32 gradient bytes of one device (all its chunks; multiple of 4). 0: no
  // kAllReduce ops. Each chunk's gradients are split into `buckets_per_chunk` buckets (element counts
  // differing by at most one).
  uint64_t gradient_bytes = 0;
  int buckets_per_chunk = 1;
  // true: a chunk's buckets are enqueued right after its last backward (B, or W when split), so they
  // overlap the rest of the backward pass; false: all buckets after the last compute op.
  bool overlap_grad_allreduce = true;
};

[[nodiscard]] absl::StatusOr<Program> BuildGPipe(const PipelineOptions& o);
[[nodiscard]] absl::StatusOr<Program> BuildOneFOneB(const PipelineOptions& o);
[[nodiscard]] absl::StatusOr<Program> BuildInterleaved(const PipelineOptions& o);
[[nodiscard]] absl::StatusOr<Program> BuildZeroBubble(const PipelineOptions& o);

// Dispatches on `kind` (kCustom is InvalidArgument).
[[nodiscard]] absl::StatusOr<Program> BuildSchedule(ScheduleKind kind, const PipelineOptions& o);

}  // namespace rp::schedule
