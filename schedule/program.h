// rp::schedule::Program: one training step of a pipeline schedule, as plain data.
//
// A Program is the ordered op list of every pipeline rank 0 .. p−1 (a "device" of one pipeline).
// Every DP replica and every TP shard of pipeline rank s plays the same list `ranks[s]`: the grid
// (schedule/grid.h) maps (dp, s, tp) to a global rank, and a peer named as pipeline rank q in an op
// means the rank at stage q of the same (dp, tp) pipeline (ParallelGrid::StageRank).
//
// Virtual stages. With v virtual stages per device (interleaved schedules) the model is cut into
// K = p·v model stages; model stage k lives on pipeline rank k mod p as its chunk k / p. Every op carries
// its micro-batch id and its chunk (virtual-stage id, 0 .. v−1); ModelStage(rank, chunk) = chunk·p + rank.
//
// Op semantics (what an executor does with one op on the device's thread):
//   kForward       F(mb, chunk): needs its input — the output of model stage k−1 (local, or received by
//                  an earlier kRecvAct) — and stores its activations until the backward is done.
//   kBackward      B(mb, chunk): the whole backward (input and weight gradients). Needs F(mb, k) done and
//                  the gradient of model stage k+1 (local or received by an earlier kRecvGrad); the last
//                  model stage needs only its own F (the loss).
//   kBackwardInput zero-bubble B: input gradient only. Same needs as kBackward.
//   kWeightGrad    zero-bubble W(mb, chunk): weight gradient; needs B-input(mb, chunk). Frees activations.
//   kSendAct       sends F(mb, chunk)'s output to pipeline rank `peer` (model stage k+1), `bytes` long.
//                  Never blocks (buffered channel); must follow the F it sends.
//   kRecvAct       blocks until the activation for F(mb, chunk) from `peer` has arrived.
//   kSendGrad      sends B(mb, chunk)'s input gradient to `peer` (model stage k−1). Never blocks.
//   kRecvGrad      blocks until the gradient for B(mb, chunk) from `peer` has arrived.
//   kTpAllReduce   blocking all-reduce of `bytes` over the rank's TP group (Megatron's per-layer
//                  all-reduces of F(mb, chunk) or B(mb, chunk), aggregated); on the compute stream.
//   kAllReduce     gradient bucket `bucket` (`bytes` of fp32 gradients) all-reduced over the DP group.
//                  Asynchronous: enqueued on the device's comm stream (buckets run in order, each when
//                  every DP group member has enqueued it); the device goes on computing.
//   kOptimizerStep waits for every all-reduce the device enqueued, then updates the weights. Last op.
//
// Channels: one FIFO channel per (sender, receiver, kind ∈ {activation, gradient}); a receive takes the
// channel's oldest message, and the validator checks it is the one the receive names.
//
// Example (1F1B, p = 2, m = 2), rank 0:  F0 SendAct0 F1 SendAct1 RecvGrad0 B0 RecvGrad1 B1 Opt
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rp::schedule {

enum class OpKind : uint8_t {
  kForward,
  kBackward,
  kBackwardInput,
  kWeightGrad,
  kSendAct,
  kRecvAct,
  kSendGrad,
  kRecvGrad,
  kTpAllReduce,
  kAllReduce,
  kOptimizerStep,
};

const char* OpKindName(OpKind k);  // "F", "B", "Bi", "W", "SendAct", ...
inline bool IsCompute(OpKind k) {
  return k == OpKind::kForward || k == OpKind::kBackward || k == OpKind::kBackwardInput ||
         k == OpKind::kWeightGrad;
}
// The ops a device runs as compute ops (rp::Device::Compute): F, B, Bi, W and the optimizer step.
// Their running count is the op index of fault injection (jitter draws, device stops).
inline bool IsDeviceCompute(OpKind k) { return IsCompute(k) || k == OpKind::kOptimizerStep; }
inline bool IsSend(OpKind k) { return k == OpKind::kSendAct || k == OpKind::kSendGrad; }
inline bool IsRecv(OpKind k) { return k == OpKind::kRecvAct || k == OpKind::kRecvGrad; }

struct Op {
  OpKind kind = OpKind::kForward;
  int32_t micro_batch = -1;  // -1 for step-level ops (kAllReduce, kOptimizerStep)
  int32_t chunk = 0;         // virtual stage on this device, 0 .. v−1
  int32_t peer = -1;         // pipeline rank of the other side of a send/recv, else −1
  int32_t bucket = -1;       // kAllReduce: bucket index on this device, 0, 1, ... in order
  uint64_t bytes = 0;        // payload: activation/gradient message, TP all-reduce, fp32 gradient bucket

  bool operator==(const Op&) const = default;
};

// "F3", "F3.1" (chunk 1 when v > 1), "SendAct3->2", "RecvGrad0<-1", "AR#0(4096B)", "Opt".
std::string ToString(const Op& op, int num_chunks = 1);

enum class ScheduleKind : uint8_t { kGPipe, kOneFOneB, kInterleaved, kZeroBubbleH1, kCustom };
const char* ScheduleName(ScheduleKind k);

struct Program {
  ScheduleKind kind = ScheduleKind::kCustom;
  int num_ranks = 1;          // p: pipeline ranks (devices of one pipeline)
  int num_chunks = 1;         // v: virtual stages per device
  int num_micro_batches = 1;  // m
  bool split_backward = false;  // true: backward is kBackwardInput + kWeightGrad (zero-bubble)
  std::vector<std::vector<Op>> ranks;  // ranks[s]: the ordered ops of pipeline rank s

  int num_model_stages() const { return num_ranks * num_chunks; }
  int ModelStage(int rank, int chunk) const { return chunk * num_ranks + rank; }
  int RankOfModelStage(int k) const { return k % num_ranks; }
  int ChunkOfModelStage(int k) const { return k / num_ranks; }
  size_t num_ops() const;
};

}  // namespace rp::schedule
