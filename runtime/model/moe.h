// rp::MoeBlock: a mixture-of-experts block (router, top-k gating, E expert MLPs, capacity, load-
// balancing loss) that replaces one d -> d layer of the MLP, with its experts sharded over an
// expert-parallel (EP) group and a computation order that makes EP training bit-identical to a
// single device (docs/model.md "Mixture of experts").
//
// Words (used the same way in moe.cc, mlp.h, docs/model.md and the tests):
//   token      one row of the block's input (T rows per micro-batch on a source rank).
//   slot       j in [0, k): a token's j-th choice of expert (k = top_k).
//   source     the EP rank a token lives on (its DP replica); EP rank q owns the experts
//              [q·E/ep, (q+1)·E/ep) ("local experts", indexed b = e − q·E/ep).
//   dispatch   the all-to-all that takes kept (token, slot) rows to their experts' owners (forward:
//              token rows; backward: output gradients); combine: the reverse all-to-all that brings
//              the experts' rows back (forward: expert outputs; backward: input gradients).
//   canonical  the order an expert visits its tokens: (expert, source, token).
//
// Math, per token x (width d), on its source rank:
//   z = x·Wr (Wr: d × E, no bias; minus the fixed router_skew · e / (E − 1), if any);
//   p = softmax(z) (double, rounded to float once per element)
//   top-k: the k largest p, ties to the lowest expert index; gate g_j = p_{e_j} (not renormalised)
//   capacity: c = ⌈C·k·T/E⌉ kept (token, slot)s per expert and source, taken in token order, slot
//             order within a token; the rest are dropped (C = 0: no limit). Each source decides its
//             own drops from its own tokens (as GShard/Switch do per device), so drops need no
//             communication and are the same wherever the experts live.
//   expert e: o = act(x·W1_e + b1_e)·W2_e + b2_e   (W1: d × h, W2: h × d)
//   output:   y = x + s,  s = ((0 + g_0·o_0) + g_1·o_1)   over kept slots in slot order (a residual
//             connection: a token whose slots are all dropped passes through unchanged)
//   aux loss (α = aux_loss > 0, Switch style): α·E·Σ_i f_i·P_i with f_i = (token-slot choices of i
//             before drops) / (k·T) and P_i = mean_t p_{t,i}; enters the objective with the weight
//             set by MoeBlock::set_aux_loss_weight (trainers use 1 / micro-batches per step).
//
// Reduction order (the contract that makes EP exact): every expert output row is an independent
// dot product (kernels.h), so it has the same bits on any rank; the only sums over tokens are the
// expert weight gradients, accumulated in canonical order by one kernel call per local expert, and
// the router's, accumulated in token order on the source. The combine and the input gradient
// dx = ((dy + dz·Wrᵀ) + dx_0) + dx_1 are per token, in slot order.
//
// Thread safety: a block is used by the thread of the stage that owns it (see mlp.h).
//
// Example (single device, ep = 1: the exchanges are local copies; MlpStage drives its blocks so):
//   RP_RETURN_IF_ERROR(block->BeginForward(key, x, /*store=*/true));
//   ExchangeLocally(block->exchange(key));                 // dispatch
//   RP_RETURN_IF_ERROR(block->ForwardExperts(key));
//   ExchangeLocally(block->exchange(key));                 // combine
//   RP_ASSIGN_OR_RETURN(Tensor y, block->EndForward(key));
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/model/kernels.h"
#include "runtime/model/tensor.h"

namespace rp {

// Bounds of MoeConfig's aux_loss and router_skew: past them the router's gradient (α·E·f_i / T per
// token) or its logit offsets leave the range fp32 holds them in (converting such a double to float
// is undefined behaviour). Switch Transformers use α = 0.01; a skew of ~100 already sends every
// token to the lowest experts.
inline constexpr double kMaxAuxLoss = 1e3;
inline constexpr double kMaxRouterSkew = 1e4;

// The init of the experts' output weights W2 (MoeConfig::init) and its config name ("he",
// "scaled").
enum class MoeInit { kHe, kScaled };
const char* MoeInitName(MoeInit init);

// Which layers are mixture-of-experts blocks and their shape (MlpConfig::moe).
struct MoeConfig {
  // Global indices of the layers that become MoE blocks (moe_layers), strictly increasing. A block
  // maps d -> d, so layer l qualifies when 0 < l < L − 1 and in_dim(l) == out_dim(l) (a hidden
  // layer between two hidden widths that are equal). Empty: no MoE (the other fields are ignored).
  std::vector<int> layers;
  int experts = 4;             // E >= 1
  int top_k = 1;               // k in {1, 2}, k <= E
  int expert_hidden = 64;      // h >= 1: each expert is d -> h -> d
  double capacity_factor = 0;  // C >= 0 (finite); 0 = dropless
  double aux_loss = 0;         // α in [0, kMaxAuxLoss]; 0 = no auxiliary loss
  // A fixed, untrained preference of the router for low expert indices: logit z_e gains
  // −router_skew · e / (E − 1) before the softmax (in [0, kMaxRouterSkew]; 0 = none). A
  // reproducible load imbalance (the busiest expert's owner becomes the EP group's straggler) for
  // studies and tests.
  double router_skew = 0;
  // The init of the experts' W2 (moe_init): kHe, He-uniform like every layer; kScaled, He-uniform
  // times 1/√B, B = layers.size() (GPT-2's scaling of the residual layers by 1/√N), so that a deep
  // stack of blocks y = x + Σ g·o does not grow its activations with every block at init.
  MoeInit init = MoeInit::kHe;

  bool enabled() const { return !layers.empty(); }
};

// Kept (token, slot)s per expert and source: ⌈C·k·T/E⌉ (computed in double, ignoring a relative
// excess below 1e-12 so that e.g. 1.1·10 gives 11), or -1 (no limit) when C == 0 or ⌈C·k·T/E⌉ >= 2^62
// (more than any source's slots; a huge C never converts out of int64's range).
int64_t ExpertCapacity(double capacity_factor, int top_k, int64_t tokens, int experts);

// How one source routes its T tokens (RouteTokens).
struct MoeRouting {
  int top_k = 1;
  std::vector<int32_t> expert;    // T·k: e_{t,j}, slot j of token t at t·k + j
  std::vector<float> gate;        // T·k: g_{t,j} = p_{t, e_{t,j}}
  std::vector<int64_t> position;  // T·k: row in the dispatch layout, (expert, token) order; -1 =
                                  // dropped
  std::vector<int64_t> kept;      // E: kept (token, slot)s per expert (the dispatch counts)
  std::vector<int64_t> chosen;    // E: choices before drops (f_i = chosen_i / (k·T))
  int64_t dropped = 0;
};

// Top-k and capacity over `probs` (T x E softmax rows): slot j of token t takes the j-th largest
// probability (ties to the lowest index); expert e keeps at most `capacity` (token, slot)s (-1 =
// no limit), first come first served in token order, slot order within a token.
MoeRouting RouteTokens(ConstMatrixView probs, int top_k, int64_t capacity);

// One EP all-to-all of a MoE block. The block fills the send side; whoever implements the
// exchange (the executor with comm's AllToAllV, RunStageGroupSerial, ExchangeLocally) fills the
// receive side. Rows have `row_width` floats.
struct EpExchange {
  enum class Kind { kDispatch, kCombine };
  Kind kind = Kind::kDispatch;
  int64_t row_width = 0;
  // Count entries per peer: dispatch E/ep (rows per local expert of the destination), combine 1.
  int bins = 1;
  // Send side, valid until the block's next call for this key: rows destination-major, then
  // bin-major, then token order; send_counts[p·bins + b] rows for bin b of destination p.
  // Dispatch: one destination per EP rank (ep·bins = E entries: the per-expert token counts).
  // Combine: one destination per source of the dispatch.
  std::span<const float> send;
  std::span<const int64_t> send_counts;
  // Receive side: rows source-major, then bin-major; recv_counts[s·bins + b] as above. Dispatch:
  // one source per rank that sent to this one (ep in an EP group). Combine: one source per dispatch
  // destination, each returning exactly the rows it was sent, in the order they were sent.
  std::vector<float> recv;
  std::vector<int64_t> recv_counts;
};

// Performs one exchange for the calling rank (blocking); its Status is returned by the stage
// method that called it. Called the same number of times, with the same kinds, on every rank of
// the EP group.
using EpExchangeFn = std::function<absl::Status(EpExchange& exchange)>;

// What the wire does to one block of an exchange that crosses EP ranks (sender != receiver; a
// rank's block to itself never travels), in place: `sent` is the sender's exchange (kind, row
// width), `block` the receiver's copy of the rows the sender addressed to it. For a serial
// reference of a run whose EP all-to-alls use a lossy codec (schedule::EpWireOracle); null = an
// exact (FP32) wire. Its error is returned by the pass.
using EpWireFn = std::function<absl::Status(const EpExchange& sent, int sender, int receiver,
                                            std::span<float> block)>;

// The exchange of a group of one rank: recv = send, recv_counts = send_counts.
void ExchangeLocally(EpExchange& exchange);

// Cumulative routing figures of one block on one source (reset with MoeBlock::ResetStats).
struct MoeStats {
  std::vector<int64_t> kept;  // per expert (all E): (token, slot)s sent to it by this source
  int64_t dropped = 0;        // (token, slot)s dropped by the capacity
  // Per micro-batch (key) of a Forward: its `kept` alone (the sizes of its exchanges).
  std::map<int, std::vector<int64_t>> kept_by_key;
  double aux_loss_sum = 0;  // Σ over forward passes (not Infer) of α·E·Σ f_i·P_i (unweighted)
};

class MoeBlock {
 public:
  // Shape of one EP shard's parameters (flat, in this order): the router Wr (width × experts),
  // then per local expert b: W1 (width × hidden), b1 (hidden), W2 (hidden × width), b2 (width).
  struct Layout {
    int width = 0, experts = 0, top_k = 1, hidden = 0, ep = 1, ep_rank = 0;
    int local_experts() const { return experts / ep; }
    int first_expert() const { return ep_rank * local_experts(); }
    int64_t router_params() const { return static_cast<int64_t>(width) * experts; }
    int64_t expert_params() const {
      return 2 * static_cast<int64_t>(width) * hidden + hidden + width;
    }
    int64_t params() const { return router_params() + local_experts() * expert_params(); }
  };

  // Initialises `params` (layout.params() values; He-uniform from a hash of (seed, layer, index
  // in the unsharded block), biases 0: every shard holds exactly its slice of the full block).
  // `params` and `grads` must outlive the block and never move; `grads` empty for a block that
  // runs forward only (its stage's MlpStage::Buffers::kParamsOnly). Errors: InvalidArgument naming the
  // field (experts not divisible by ep, ep_rank out of range, sizes).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<MoeBlock>> Create(
      const MoeConfig& config, int layer, int width, Activation activation, int ep, int ep_rank,
      uint64_t seed, std::span<float> params, std::span<float> grads);

  ~MoeBlock();
  MoeBlock(const MoeBlock&) = delete;
  MoeBlock& operator=(const MoeBlock&) = delete;

  const Layout& layout() const { return layout_; }
  // Weight of each micro-batch's auxiliary loss in the objective (default 1).
  void set_aux_loss_weight(double weight) { aux_weight_ = weight; }
  const MoeStats& stats() const { return stats_; }
  void ResetStats();
  int64_t activation_bytes() const { return activation_bytes_; }

  // --- Passes, one key (micro-batch) at a time per phase; each phase but the last leaves an
  // exchange in exchange(key) whose receive side the caller fills before the next phase. ---
  // Forward: route (fills the dispatch), run the local experts on what arrived in canonical order
  // (fills the combine), combine. `store`: keep what backward needs (Forward) or not (Infer).
  [[nodiscard]] absl::Status BeginForward(int key, ConstMatrixView x, bool store);
  [[nodiscard]] absl::Status ForwardExperts(int key);
  [[nodiscard]] absl::StatusOr<Tensor> EndForward(int key);
  // Backward: dispatch the output gradient's share of each kept slot, expert backward (fused:
  // accumulates the expert weight gradients in canonical order), combine the input gradients.
  [[nodiscard]] absl::Status BeginBackward(int key, ConstMatrixView dy, bool fused);
  [[nodiscard]] absl::Status BackwardExperts(int key);
  [[nodiscard]] absl::StatusOr<Tensor> EndBackward(int key);
  // After a non-fused backward: accumulates every weight gradient (same bits as fused).
  [[nodiscard]] absl::Status BackwardWeight(int key);
  // The pending exchange of `key` (valid between a phase that filled it and the next phase).
  EpExchange& exchange(int key);

 private:
  struct KeyState;
  MoeBlock() = default;
  absl::StatusOr<KeyState*> Find(int key, int phase, const char* op);
  absl::Status CheckRecv(const KeyState& st, const char* op) const;
  absl::Status CheckCombine(const KeyState& st, const char* op) const;
  void Keep(Tensor* slot, Tensor value);
  void Free(Tensor* slot);
  void Release(int key);
  float* router() { return params_.data(); }
  float* expert(int local) {
    return params_.data() + layout_.router_params() + local * layout_.expert_params();
  }
  float* expert_grad(int local) {
    return grads_.data() + layout_.router_params() + local * layout_.expert_params();
  }
  absl::Status AccumulateExpertGrads(int local, KeyState& st);

  Layout layout_;
  int layer_ = 0;
  Activation activation_ = Activation::kRelu;
  double capacity_factor_ = 0, aux_loss_ = 0, aux_weight_ = 1, router_skew_ = 0;
  std::span<float> params_, grads_;  // the owning stage's buffers (they outlive the block)
  std::unordered_map<int, std::unique_ptr<KeyState>> states_;
  int64_t activation_bytes_ = 0;
  MoeStats stats_;
  Tensor scratch_;  // transposes for MatMulTransposedB
};

}  // namespace rp
