// rp::schedule::StepRouting: how the MoE blocks of one training step routed their tokens — per
// block, DP replica (token source) and micro-batch, the (token, slot)s each expert kept. It sizes
// every EP all-to-all of the step: the dispatch from EP rank q to EP rank p of a block and
// micro-batch carries Σ over p's experts of q's kept slots (one token row each), the combine the
// same rows back, and backward the same as forward. The executor records it from the run
// (rp::MoeStats::kept_by_key) and reports it; the predictor takes it (emulated == predicted on the
// virtual clock with real, data-dependent routing), or assumes balanced routing and says so.
//
// Thread safety: plain data.
//
// Example:
//   StepRouting r = BalancedRouting(model, /*dp=*/4, /*microbatches=*/8, /*microbatch_size=*/32);
//   r.at(/*block=*/0, /*dp=*/1, /*mb=*/3, /*expert=*/2);  // 32 · top_k / experts (capped)
//   EpRows(r, 0, 3, {2, 3}, /*experts_per_rank=*/2, /*from=*/0, /*to=*/1);  // replica 2 → 3
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/model/mlp.h"

namespace rp::schedule {

struct StepRouting {
  int blocks = 0, dp = 0, microbatches = 0, experts = 0;
  std::vector<int64_t> kept;  // [block][dp][mb][expert]

  static StepRouting Zero(int blocks, int dp, int microbatches, int experts);
  bool empty() const { return kept.empty(); }
  int64_t& at(int block, int replica, int mb, int expert) { return kept[Index(block, replica, mb, expert)]; }
  int64_t at(int block, int replica, int mb, int expert) const {
    return kept[Index(block, replica, mb, expert)];
  }
  // Σ over replicas and micro-batches: the (token, slot)s expert e of `block` received.
  int64_t ExpertTokens(int block, int expert) const;

 private:
  size_t Index(int block, int replica, int mb, int expert) const {
    return ((static_cast<size_t>(block) * static_cast<size_t>(dp) + static_cast<size_t>(replica)) *
                static_cast<size_t>(microbatches) +
            static_cast<size_t>(mb)) *
               static_cast<size_t>(experts) +
           static_cast<size_t>(expert);
  }
};

// Balanced routing: each source's top_k · microbatch_size slots spread evenly over the experts
// (the remainder to the lowest ones), capped at the expert capacity (rp::ExpertCapacity) — what a
// prediction without a run assumes.
StepRouting BalancedRouting(const MlpConfig& model, int dp, int microbatches, int microbatch_size);

// The routing that makes every EP all-to-all block as large as any routing can: each source routes
// all its top_k · microbatch_size slots to every EP rank's experts at once, filling them in order
// up to min(microbatch_size, capacity) each (a token picks an expert once; rp::ExpertCapacity), so
// each block from EP rank q to EP rank p carries min(top_k · T, (experts / ep) · min(T, capacity))
// rows — the block of a router that sends every token of every sender to p. Not a routing one
// step can have (a source's slots are counted once per EP rank): a bound on each block whichever
// way a skewed router leans, and with Prediction::transit_bound on how long one message may take
// (apps::LongestMessageWait). ep divides experts.
StepRouting BusiestBlockRouting(const MlpConfig& model, int dp, int ep, int microbatches, int microbatch_size);

// Token rows that EP rank `from` dispatches to EP rank `to` for (block, mb): Σ of replica
// group[from]'s kept slots over `to`'s experts [to·experts_per_rank, (to+1)·experts_per_rank).
// `group` lists the EP group's DP replicas by EP rank.
int64_t EpRows(const StepRouting& routing, int block, int mb, std::span<const int> group,
               int experts_per_rank, int from, int to);

// The index of global layer `layer` in model.moe.layers (-1 if it is not a MoE block).
int MoeBlockIndex(const MlpConfig& model, int layer);

}  // namespace rp::schedule
