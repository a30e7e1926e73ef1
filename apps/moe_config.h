// The mixture-of-experts and expert-parallel fields of a RunConfig (moe_layers, experts, top_k,
// expert_hidden, capacity_factor, aux_loss, router_skew, ep, ep_row_bytes): how `moe_layers` names
// layers, their checks (one FieldError naming the field, as ValidateConfig's), and the modeled size
// of a token row in the EP all-to-all.
//
// moe_layers (docs/config.md "Mixture of experts"), over the real MLP's global layer indices (layer 0
// maps input_dim -> hidden[0], layer l maps hidden[l-1] -> hidden[l], the last one -> classes). A
// MoE block maps d -> d, so only a hidden layer between two equal widths qualifies ("eligible"):
//   ""        (or "none") no MoE block; the other MoE fields are then unused and ep must be 1
//   "all"     every eligible layer
//   "every:N" the eligible layers whose index is a multiple of N (every:2 with hidden 64x5: 2, 4)
//   "2,4"     exactly these layers, strictly increasing, each eligible
// A config file may also give a JSON list of integers ([2, 4]) or one integer.
//
// Thread safety: pure functions.
//
// Example:
//   cfg.hidden = {64, 64, 64, 64, 64};  cfg.moe_layers = "every:2";
//   ResolveMoeLayers(cfg);  // {2, 4}
//   RP_RETURN_IF_ERROR(CheckMoe(cfg, /*for_run=*/true));
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "apps/config_fields.h"

namespace rp::apps {

// The layers moe_layers names (empty: none). InvalidArgument "moe_layers: <reason>" for text that is
// not the grammar above, "all"/"every:N" selecting no layer, or an index list out of order; whether a
// listed layer is eligible is CheckMoe's.
absl::StatusOr<std::vector<int>> ResolveMoeLayers(const RunConfig& cfg);

// Every MoE and EP condition, each error naming its field: the layers (ResolveMoeLayers, then the
// model's own checks, runtime/model/mlp.h ValidateMlpConfig); experts >= 1; top_k 1 or 2 and at most
// experts; capacity_factor finite and >= 0, aux_loss in [0, 1e3], router_skew in [0, 1e4]; ep: > 1
// only with MoE layers, dividing experts, dp a multiple of it;
// ep_row_bytes a multiple of 4 up to 1 GiB; ep_codec lossy (ep > 1) not on the FLOPs model's derived row (already bf16);
// the expert weights and the EP messages within the budgets of a run; the routing's kept-slot counts
// (CheckRoutingCounts) of every replica for a run (`for_run`), of one EP group for a prediction.
[[nodiscard]] absl::Status CheckMoe(const RunConfig& cfg, bool for_run);

// A step's routing of `replicas` replicas (MoE blocks × replicas × micro-batches × experts counts) must
// stay within 2^24 counts (128 MiB): InvalidArgument naming experts, microbatches, dp (replicas = dp)
// or ep otherwise.
[[nodiscard]] absl::Status CheckRoutingCounts(const RunConfig& cfg, int replicas);

// Upper bounds of the modeled messages and bytes one device puts on the fabric per step for the EP
// all-to-alls of `blocks` MoE blocks (none when ep == 1): per block, micro-batch and pass (F, B, and a
// split backward's Bi), a dispatch and a combine to each of ep − 1 peers, two rounds (counts, rows),
// a block of at most top_k × microbatch_size rows of EpRowBytes (4 × the widest layer when 0).
struct EpTraffic {
  double messages = 0;
  double bytes = 0;
};
EpTraffic EpTrafficPerDeviceStep(const RunConfig& cfg, int blocks);

// The modeled bytes one real token row stands for in the EP all-to-all (ExecutorOptions::
// ep_row_bytes): ep_row_bytes if set; else with the fixed cost model 0 (the real row, 4 x its width);
// with the FLOPs cost model the described model's tokens one real row stands for, in bf16 as its
// activations: flops_microbatch_size x flops_seq_len / microbatch_size tokens of flops_hidden x 2
// bytes, rounded up to a multiple of 4.
uint64_t EpRowBytes(const RunConfig& cfg);

}  // namespace rp::apps
