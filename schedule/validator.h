// Validate: checks a Program without threads or time, and measures its activation footprint.
//
// Checks, in order (the first failure is returned):
//   1. Structure (InvalidArgument): sizes >= 1, one op list per rank, the placement (if set) sized
//      p × v, micro-batch/chunk/peer ids in range, every micro-batch on chunks of its own direction,
//      each send/recv names the rank holding the neighbouring stage — never its own rank (a local
//      hand-off needs no message) —, Bi/W only with split_backward, gradient buckets numbered 0, 1, ...
//      in order, exactly one kOptimizerStep and it is last.
//   2. Exactly once (InvalidArgument): every (direction, model stage, micro-batch of that direction)
//      has one F and one backward — a whole B (or the B of an F&B), or one Bi and then one W.
//   3. Dry run (the ops played in order over the channels, as an executor would):
//      - dependencies (InvalidArgument): F needs its input (earlier F of the previous stage on this
//        rank, or an earlier kRecvAct); B/Bi needs its own F and the next stage's gradient (local or
//        received); an F&B needs both parts' inputs before it starts; W needs its Bi; a send needs the
//        op it sends; a gradient bucket needs every gradient-final backward (B, W, F&B) of its chunk.
//      - channels (InvalidArgument): a receive must find the message it names at the head of its FIFO
//        channel (sender, receiver, kind).
//      - deadlock (FailedPrecondition): if ranks stop with ops left, the message lists each stuck rank
//        with the op it waits at and the peer it waits for.
//      Sends are buffered (never block) by default — the Executor's channels; `rendezvous_sends` makes a
//      send block until its receiver reaches the matching receive (NCCL-like p2p), a stricter check.
//
// Complexity O(total ops + p·m·v). Pure; thread-compatible.
//
// Example:
//   RP_ASSIGN_OR_RETURN(ValidationReport rep, Validate(prog));
//   rep.peak_in_flight[0];  // 1F1B: min(p, m)
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "schedule/cost_model.h"
#include "schedule/program.h"

namespace rp::schedule {

struct ValidateOptions {
  bool rendezvous_sends = false;
  // Optional, one entry per model stage (Program::num_model_stages()): the stored activations of
  // one micro-batch of that stage, after its F and (split backward) between its Bi and its W. When
  // set, the report's peak_stored_bytes counts them.
  std::vector<StageStored> stage_stored;
};

struct ValidationReport {
  // Per pipeline rank: the most micro-batch activations held at once, in chunk units, held from F until
  // the last backward op that reads them (B, or W after a Bi): the activation memory. An F&B holds its
  // F's activations before its B frees its own. GPipe m, 1F1B min(p − s, m); ZB-H1 min(p, m) on every
  // rank — 1F1B's peak (rank 0's) — since a rank keeps the activations of the weight gradients it
  // defers; ZB-H2 2p − 1; ZB-V 2p (m ≥ 2p − 1); DualPipeV 2p + 1; DualPipe p + 1.
  std::vector<int> peak_in_flight;
  // Per pipeline rank, with ValidateOptions::stage_stored (else empty): the most stored activation
  // bytes at once, held over the same intervals as peak_in_flight but each micro-batch counted with
  // its own stage's bytes — after_forward from F to its B or Bi, after_input_grad from Bi to W —
  // exact where a rank's chunks differ in size (a V) or a split backward keeps more than F did.
  std::vector<uint64_t> peak_stored_bytes;
  // Per pipeline rank: the most micro-batches whose F has run and whose B (or Bi) has not.
  // 1F1B and ZB-H1: min(p − s, m).
  std::vector<int> peak_awaiting_backward;
  std::vector<int> num_buckets;  // kAllReduce ops per rank
};

[[nodiscard]] absl::StatusOr<ValidationReport> Validate(const Program& prog,
                                                        const ValidateOptions& opts = {});

}  // namespace rp::schedule
