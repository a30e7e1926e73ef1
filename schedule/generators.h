// Pipeline schedule generators: pure functions from sizes to a rp::schedule::Program.
//
// Every generator returns the full op list of each pipeline rank: compute ops in the schedule's order,
// a kRecvAct/kRecvGrad right before each compute op that needs a remote input, a kSendAct/kSendGrad right
// after each compute op whose output a remote stage needs (a hand-off between two chunks of one rank is
// local: no message), optional TP all-reduces after F and B, the gradient all-reduce buckets and the
// optimizer step (see program.h for op semantics). The compute order follows each schedule's source
// (docs/schedules.md and ../shared/SCHEDULES.md give the rules; the tests restate them independently).
//
//   BuildGPipe        all forwards, then all backwards (micro-batch order). Peak activations m.
//   BuildOneFOneB     PipeDream-Flush / 1F1B: rank s runs min(p−s−1, m) warm-up forwards, then
//                     alternates one forward and one backward, then drains. Peak min(p−s, m).
//   BuildInterleaved  Megatron-LM interleaved 1F1B, v chunks per device in the loop placement; the
//                     micro-batches pass through the chunks in groups of N = microbatch_group (default p;
//                     p ≤ N ≤ m and m mod N ∈ {0} ∪ [p, N)), or PyTorch's rounds (pytorch_rounds).
//   BuildZeroBubble   ZB-H1 (Qi et al., 2023): backward split into B (input gradient) and W (weight
//                     gradient); 1F1B's order of F and B, with W's deferred into what would be bubbles,
//                     under 1F1B's activation limit min(p−s, m) (an activation is held from F to its W).
//   BuildZeroBubbleH2 ZB-H2 (sail-sg, get_hand_schedule with 2 warm-up forwards per rank distance):
//                     zero bubble in the per-rank span, peak 2p − 1 micro-batches. Needs m >= 2p.
//   BuildZeroBubbleV  ZB-V (PyTorch ScheduleZBVZeroBubble): 2 chunks per rank in a V, split backward.
//   BuildDualPipeV    DeepSeek's DualPipeV: 2 chunks in a V, overlapped F&B pairs. Needs m >= 2p.
//   BuildDualPipe     DeepSeek's DualPipe: two directions, 2 chunks (one per direction). Needs p and m
//                     even and m >= 2p.
//
// Guarantees: the result passes Validate (validator.h) for every accepted (p, m).
// Errors: InvalidArgument naming the field and the rule.
//
// Example:
//   PipelineOptions o{.num_ranks = 4, .num_micro_batches = 8, .activation_bytes = 1 << 20};
//   RP_ASSIGN_OR_RETURN(Program prog, BuildOneFOneB(o));
#pragma once

#include <cstdint>

#include <array>
#include <vector>

#include "absl/status/statusor.h"
#include "schedule/program.h"

namespace rp::schedule {

struct PipelineOptions {
  int num_ranks = 1;           // p, pipeline ranks (>= 1)
  int num_micro_batches = 1;   // m (>= 1)
  // v, chunks per device: BuildInterleaved any v >= 1; BuildZeroBubbleV, BuildDualPipeV and
  // BuildDualPipe exactly 2 (a V, or one chunk per direction); BuildGPipe, BuildOneFOneB,
  // BuildZeroBubble and BuildZeroBubbleH2 1 (InvalidArgument naming num_chunks otherwise).
  int num_chunks = 1;
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
  // BuildInterleaved: Megatron's microbatch_group_size_per_vp_stage N; 0 means p.
  int microbatch_group = 0;
  // BuildInterleaved: PyTorch's ScheduleInterleaved1F1B rule instead: N = m / rounds with
  // rounds = max(1, m / p), which needs m mod rounds = 0 (m < p allowed). microbatch_group must be 0.
  bool pytorch_rounds = false;
  // BuildDualPipeV / BuildDualPipe: true runs each overlapped pair "F&B" as one kForwardBackward op
  // (DeepSeek's code: it starts when both inputs are there and lasts F + B); false as two independent
  // ops, F then B, each starting when its own input is there.
  bool fused_fb = true;
  // Optional, by model stage (stages_per_direction() of them; both directions of a two-direction
  // schedule run over the same stages): each stage's own sizes, replacing the three single values
  // above (which then apply to every stage) — an MLP's stages differ in width and parameters.
  // stage_activation_bytes[k]: the message from stage k to k + 1 (and its gradient back);
  // stage_tp_bytes[k]: per F and per B(-input) of stage k, {F, B}; stage_gradient_bytes[k]: fp32
  // gradient bytes of stage k (multiple of 4).
  std::vector<uint64_t> stage_activation_bytes = {};
  std::vector<std::array<uint64_t, 2>> stage_tp_bytes = {};
  std::vector<uint64_t> stage_gradient_bytes = {};
};

[[nodiscard]] absl::StatusOr<Program> BuildGPipe(const PipelineOptions& o);
[[nodiscard]] absl::StatusOr<Program> BuildOneFOneB(const PipelineOptions& o);
[[nodiscard]] absl::StatusOr<Program> BuildInterleaved(const PipelineOptions& o);
[[nodiscard]] absl::StatusOr<Program> BuildZeroBubble(const PipelineOptions& o);
[[nodiscard]] absl::StatusOr<Program> BuildZeroBubbleH2(const PipelineOptions& o);
[[nodiscard]] absl::StatusOr<Program> BuildZeroBubbleV(const PipelineOptions& o);
[[nodiscard]] absl::StatusOr<Program> BuildDualPipeV(const PipelineOptions& o);
[[nodiscard]] absl::StatusOr<Program> BuildDualPipe(const PipelineOptions& o);

// Dispatches on `kind` (kCustom is InvalidArgument).
[[nodiscard]] absl::StatusOr<Program> BuildSchedule(ScheduleKind kind, const PipelineOptions& o);

// The group size N that PyTorch's rule gives (see pytorch_rounds): m / max(1, m / p).
// InvalidArgument naming num_micro_batches when m mod rounds != 0.
[[nodiscard]] absl::StatusOr<int> PyTorchMicrobatchGroup(int num_ranks, int num_micro_batches);

}  // namespace rp::schedule
