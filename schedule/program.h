// rp::schedule::Program: one training step of a pipeline schedule, as plain data.
//
// A Program is the ordered op list of every pipeline rank 0 .. p−1 (a "device" of one pipeline).
// Every DP replica and every TP shard of pipeline rank s plays the same list `ranks[s]`: the grid
// (schedule/grid.h) maps (dp, s, tp) to a global rank, and a peer named as pipeline rank q in an op
// means the rank at stage q of the same (dp, tp) pipeline (ParallelGrid::StageRank).
//
// Chunks and placement. Every rank holds v chunks (virtual stages, 0 .. v−1); each chunk holds one model
// stage of one direction (a StageId). The Program's StagePlacement says which:
//   loop           chunk c of rank r holds stage c·p + r (K = p·v stages; v = 1: stage r). Megatron.
//   V              v = 2: chunk 0 holds stage r, chunk 1 stage 2p − 1 − r (K = 2p). ZB-V, DualPipeV.
//   bidirectional  v = 2, two directions of K = p stages each: chunk 0 holds stage r of direction 0,
//                  chunk 1 stage p − 1 − r of direction 1 (the same stage's weights live on two ranks).
//                  DualPipe. Micro-batches [0, m/2) flow in direction 0 (entering at rank 0), [m/2, m)
//                  in direction 1 (entering at rank p − 1).
// A micro-batch goes through stages 0, 1, .., K − 1 of its direction. The holder of the next (previous)
// stage is NextHolder (PrevHolder); a hand-off between two chunks of the same rank is local: no
// send/receive ops, the consumer reads the producer's output.
//
// Op semantics (what an executor does with one op on the device's thread); "stage k" is the model stage
// (and direction) that the op's chunk holds:
//   kForward       F(mb, chunk): needs its input — the output of stage k−1 (local, or received by an
//                  earlier kRecvAct) — and stores its activations until the backward is done.
//   kBackward      B(mb, chunk): the whole backward (input and weight gradients). Needs F(mb, k) done and
//                  the gradient of stage k+1 (local or received by an earlier kRecvGrad); the last stage
//                  needs only its own F (the loss).
//   kBackwardInput zero-bubble B: input gradient only. Same needs as kBackward.
//   kWeightGrad    zero-bubble W(mb, chunk): weight gradient; needs B-input(mb, chunk). Frees activations.
//   kForwardBackward  DualPipe's overlapped pair "F&B" as one op: F(micro_batch, chunk) and the whole
//                  B(backward_micro_batch, backward_chunk). Starts when both parts' inputs are there,
//                  costs F + B, and both outputs exist when it ends (DeepSeek's code runs them as one
//                  fused call). Schedules that run the pair as two ops use kForward and kBackward.
//   kSendAct       sends F(mb, chunk)'s output to pipeline rank `peer` (stage k+1), `bytes` long.
//                  Never blocks (buffered channel); must follow the F it sends.
//   kRecvAct       blocks until the activation for F(mb, chunk) from `peer` has arrived.
//   kSendGrad      sends B(mb, chunk)'s input gradient to `peer` (stage k−1). Never blocks.
//   kRecvGrad      blocks until the gradient for B(mb, chunk) from `peer` has arrived.
//   kTpAllReduce   blocking all-reduce of `bytes` over the rank's TP group (Megatron's per-layer
//                  all-reduces of F(mb, chunk) or B(mb, chunk), aggregated); on the compute stream.
//   kAllReduce     gradient bucket `bucket` (`bytes` of fp32 gradients) all-reduced over the DP group.
//                  Asynchronous: enqueued on the device's comm stream (buckets run in order, each when
//                  every DP group member has enqueued it); the device goes on computing.
//   kOptimizerStep waits for every all-reduce the device enqueued, then updates the weights. Last op.
// Sends, receives and TP all-reduces of a kForwardBackward name one part: (micro_batch, chunk) of the
// forward for kSendAct/kRecvAct, of the backward for kSendGrad/kRecvGrad.
//
// Channels: one FIFO channel per (sender, receiver, kind ∈ {activation, gradient}); a receive takes the
// channel's oldest message, and the validator checks it is the one the receive names.
//
// Example (1F1B, p = 2, m = 2), rank 0:  F0 SendAct0 F1 SendAct1 RecvGrad0 B0 RecvGrad1 B1 Opt
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

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
  kForwardBackward,
};

const char* OpKindName(OpKind k);  // "F", "B", "Bi", "W", "F&B", "SendAct", ...
inline bool IsCompute(OpKind k) {
  return k == OpKind::kForward || k == OpKind::kBackward || k == OpKind::kBackwardInput ||
         k == OpKind::kWeightGrad || k == OpKind::kForwardBackward;
}
// The ops a device runs as compute ops (rp::Device::Compute): F, B, Bi, W, F&B and the optimizer step.
// Their running count is the op index of fault injection (jitter draws, device stops).
inline bool IsDeviceCompute(OpKind k) { return IsCompute(k) || k == OpKind::kOptimizerStep; }
inline bool IsSend(OpKind k) { return k == OpKind::kSendAct || k == OpKind::kSendGrad; }
inline bool IsRecv(OpKind k) { return k == OpKind::kRecvAct || k == OpKind::kRecvGrad; }

struct Op {
  OpKind kind = OpKind::kForward;
  int32_t micro_batch = -1;  // -1 for step-level ops (kAllReduce, kOptimizerStep)
  int32_t chunk = 0;         // this rank's chunk, 0 .. v−1 (kForwardBackward: of the forward part)
  int32_t peer = -1;         // pipeline rank of the other side of a send/recv, else −1
  int32_t bucket = -1;       // kAllReduce: bucket index on this device, 0, 1, ... in order
  uint64_t bytes = 0;        // payload: activation/gradient message, TP all-reduce, fp32 gradient bucket
  // kForwardBackward only: the backward part B(backward_micro_batch, backward_chunk); else −1.
  int32_t backward_micro_batch = -1;
  int32_t backward_chunk = -1;

  bool operator==(const Op&) const = default;
};

// "F3", "F3.1" (chunk 1 when v > 1), "F3.0&B1.1", "SendAct3->2", "RecvGrad0<-1", "AR#0(4096B)", "Opt".
std::string ToString(const Op& op, int num_chunks = 1);

enum class ScheduleKind : uint8_t {
  kGPipe,
  kOneFOneB,
  kInterleaved,
  kZeroBubbleH1,
  kZeroBubbleH2,
  kZeroBubbleV,
  kDualPipeV,
  kDualPipe,
  kCustom,
};
// "gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "dualpipev", "dualpipe", "custom".
const char* ScheduleName(ScheduleKind k);

// A model stage of one direction (single-direction programs use direction 0 only).
struct StageId {
  int32_t direction = 0;
  int32_t stage = 0;
  bool operator==(const StageId&) const = default;
};

// Where a model stage lives: a pipeline rank and its chunk.
struct ChunkRef {
  int32_t rank = 0;
  int32_t chunk = 0;
  bool operator==(const ChunkRef&) const = default;
};

// Which model stage each (rank, chunk) holds: a bijection between the p·v chunks and the
// directions × stages_per_direction model stages. Immutable; O(1) lookups both ways.
// A default-constructed placement is empty (Program then uses the loop placement).
class StagePlacement {
 public:
  StagePlacement() = default;
  // Chunk c of rank r holds stage c·p + r. Requires p, v >= 1.
  static StagePlacement Loop(int num_ranks, int num_chunks);
  // Two chunks in a V: chunk 0 of rank r holds stage r, chunk 1 stage 2p − 1 − r. Requires p >= 1.
  static StagePlacement V(int num_ranks);
  // Two directions of p stages: chunk 0 of rank r holds stage r of direction 0, chunk 1 stage p − 1 − r
  // of direction 1. Requires p >= 1.
  static StagePlacement Bidirectional(int num_ranks);
  // Any placement: stage_of_chunk[rank·v + chunk]. InvalidArgument (naming the chunk) unless every
  // (direction, stage) of num_directions × (p·v / num_directions) stages is held by exactly one chunk.
  [[nodiscard]] static absl::StatusOr<StagePlacement> FromTable(int num_ranks, int num_chunks,
                                                               int num_directions,
                                                               std::vector<StageId> stage_of_chunk);

  bool empty() const { return stage_of_.empty(); }
  int num_ranks() const { return num_ranks_; }
  int num_chunks() const { return num_chunks_; }
  int num_directions() const { return num_directions_; }
  int stages_per_direction() const { return num_ranks_ * num_chunks_ / num_directions_; }
  // Preconditions: rank, chunk (stage) in range; the placement not empty.
  StageId StageOf(int rank, int chunk) const { return stage_of_[rank * num_chunks_ + chunk]; }
  ChunkRef HolderOf(StageId id) const {
    return holder_of_[id.direction * stages_per_direction() + id.stage];
  }
  bool operator==(const StagePlacement&) const = default;

 private:
  StagePlacement(int num_ranks, int num_chunks, int num_directions, std::vector<StageId> stage_of);

  int num_ranks_ = 0;
  int num_chunks_ = 0;
  int num_directions_ = 1;
  std::vector<StageId> stage_of_;    // [rank·v + chunk]
  std::vector<ChunkRef> holder_of_;  // [direction·K + stage]
};

struct Program {
  ScheduleKind kind = ScheduleKind::kCustom;
  int num_ranks = 1;          // p: pipeline ranks (devices of one pipeline)
  int num_chunks = 1;         // v: chunks (virtual stages) per device
  int num_micro_batches = 1;  // m
  // true: backwards may be split into kBackwardInput + kWeightGrad (zero-bubble); every (stage,
  // micro-batch) then has either one B (or F&B) or one Bi and one W. false: B's only.
  bool split_backward = false;
  // Which stage each chunk holds; empty: the loop placement of num_ranks × num_chunks.
  StagePlacement placement;
  std::vector<std::vector<Op>> ranks;  // ranks[s]: the ordered ops of pipeline rank s

  int num_directions() const { return placement.empty() ? 1 : placement.num_directions(); }
  // K: model stages of one direction (the model is cut into K stages; with two directions each stage's
  // weights live on two ranks).
  int num_model_stages() const { return num_ranks * num_chunks / num_directions(); }
  // Chunks of one rank per direction: a chunk op costs 1 / chunks_per_direction() of the rank's
  // per-micro-batch cost (StageCost), since the rank's chunks of one direction share it.
  int chunks_per_direction() const { return num_chunks / num_directions(); }

  StageId StageOf(int rank, int chunk) const {
    return placement.empty() ? StageId{0, chunk * num_ranks + rank} : placement.StageOf(rank, chunk);
  }
  ChunkRef HolderOf(StageId id) const {
    return placement.empty() ? ChunkRef{id.stage % num_ranks, id.stage / num_ranks}
                             : placement.HolderOf(id);
  }
  // The model stage (within its direction) that chunk `chunk` of `rank` holds.
  int ModelStage(int rank, int chunk) const { return StageOf(rank, chunk).stage; }
  int DirectionOf(int rank, int chunk) const { return StageOf(rank, chunk).direction; }
  int RankOfModelStage(int k, int direction = 0) const { return HolderOf({direction, k}).rank; }
  int ChunkOfModelStage(int k, int direction = 0) const { return HolderOf({direction, k}).chunk; }
  // The holder of the next (previous) stage of the same direction; nullopt on the last (first) stage.
  // The hand-off is local when the holder's rank is `rank`.
  std::optional<ChunkRef> NextHolder(int rank, int chunk) const;
  std::optional<ChunkRef> PrevHolder(int rank, int chunk) const;

  // Micro-batches by direction: all of them in direction 0, or [0, m/2) and [m/2, m) with two.
  int DirectionOfMicroBatch(int mb) const {
    return num_directions() == 2 && mb >= num_micro_batches / 2 ? 1 : 0;
  }
  int FirstMicroBatch(int direction) const { return direction == 0 ? 0 : num_micro_batches / 2; }
  int NumMicroBatches(int direction) const {
    return num_directions() == 1 ? num_micro_batches
                                 : (direction == 0 ? num_micro_batches / 2
                                                   : num_micro_batches - num_micro_batches / 2);
  }
  size_t num_ops() const;
};

}  // namespace rp::schedule
