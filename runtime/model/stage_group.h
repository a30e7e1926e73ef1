// rp::RunStageGroupSerial: one thread plays every shard of one pipeline stage across an EP × TP
// group, replacing each exchange by its serial equivalent — the reference for what the executor's
// collectives must produce (docs/model.md "Mixture of experts").
//
// The group. shards[q * tp + t] is token source q (EP rank q: a DP replica of the EP group) and
// TP rank t of the same stage. Each source runs the pass on its own input. At each exchange
// point every shard stops at the same kind of exchange, and:
//   * TP all-reduce: for each source q, the sum of its TP ranks' buffers in rank order
//     ((b0 + b1) + b2 ...), copied to each (as RunTpGroupSerial).
//   * EP all-to-all, for each TP rank t separately (the all-to-all runs among the shards of one TP
//     rank): the block shard (q, t) addressed to destination p goes to shard (p, t); a receiver
//     gets its sources in rank order. With `wire` and sharded experts (ep == G > 1), a block
//     whose sender is not its receiver is passed through `wire` (what a lossy codec does to it
//     on the way); blocks a shard addresses to itself, and every block with ep == 1, stay exact.
// Expert placement: the shards' partition ep must equal the number of sources G (each shard owns
// its experts) or be 1. With ep == 1 every source's shard holds all experts, every source sends all
// its tokens to source 0, and source 0 runs every expert on the G sources' tokens in canonical
// order (expert, source, token): the single-device reference of an EP group (the experts of
// sources 1..G−1 receive nothing and stay idle).
//
// Thread safety: single thread; the shards must not be used by another thread meanwhile.
//
// Example (two sources of an EP group of 2, tp = 1, one stage):
//   std::vector<MlpStage*> shards = {ep_rank0.get(), ep_rank1.get()};
//   std::vector<ConstMatrixView> inputs = {x0, x1};
//   RP_ASSIGN_OR_RETURN(std::vector<Tensor> y, RunStageGroupSerial(shards, /*tp=*/1,
//                       MlpStage::Pass::kForward, /*micro_batch=*/0, inputs));
#pragma once

#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/model/mlp.h"
#include "runtime/model/moe.h"
#include "runtime/model/tensor.h"

namespace rp {

// Runs `pass` for `micro_batch` on the group and returns each source's result (TP rank 0's; all TP
// ranks of a source end with the same bits). Errors: InvalidArgument when the shards do not form
// such a group (names the shard) or inputs.size() != G; the passes' errors; Internal when the
// shards reach different exchange kinds.
[[nodiscard]] absl::StatusOr<std::vector<Tensor>> RunStageGroupSerial(
    std::span<MlpStage* const> shards, int tp, MlpStage::Pass pass, int micro_batch,
    std::span<const ConstMatrixView> inputs, const EpWireFn& wire = nullptr);

}  // namespace rp
