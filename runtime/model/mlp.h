// rp::MlpConfig, rp::PartitionMlp, rp::MlpStage: the training workload — a multi-layer perceptron
// cut into pipeline stages (PP) by layers and, inside a stage, into Megatron-style tensor-parallel
// (TP) shards.
//
// Model. Layer l (0 <= l < L = hidden.size() + 1) maps dims[l] -> dims[l+1], where
// dims = {input_dim, hidden..., classes}: z = x·W_l + b_l, followed by the activation on every layer
// but the last (whose output are the logits). W_l is dims[l] x dims[l+1] row-major. Initial weights:
// He-uniform, W_l[i][k] = U(-1, 1) * sqrt(6 / dims[l]) drawn from a counter-based hash of
// (seed, l, i, k) — a pure function of the element, so every shard and every replica computes exactly
// the bits of the unsharded model; biases start at 0.
//
// Partition. PartitionMlp cuts the L layers into contiguous stages (balanced by count — the first
// L % S stages take one extra layer — or as given). Inside each stage, layers are taken in pairs from
// the stage's first layer: (column-parallel, row-parallel); an odd last layer is replicated (every TP
// rank holds and computes all of it). With T = tp:
//   column-parallel layer: rank t holds W[:, cols_t] and b[cols_t], cols_t = [t·n/T, (t+1)·n/T);
//     it consumes the full input and produces its slice of the (activated) output.
//   row-parallel layer: rank t holds W[rows_t, :] (rows_t = the same slice) and the full bias; it
//     consumes its input slice, produces a PARTIAL output sum, which the TP group all-reduces (sum);
//     then the bias is added and the activation applied on every rank.
//   In backward the row-parallel input gradient is local; the column-parallel input gradient is a
//   partial sum that the TP group all-reduces (skipped for the model's first layer, whose input
//   gradient is not computed).
// Stage inputs and outputs (activations and their gradients) are therefore always full and identical
// on every TP rank of a stage. Replicated parameters (row-parallel biases, replicated layers) get
// identical gradients on every TP rank.
//
// Mixture of experts (moe.h, docs/model.md "Mixture of experts"). The layers listed in
// config.moe.layers are MoE blocks (kind kMoe). A MoE block is never TP-sharded: every TP rank
// holds the router and its experts and computes the block redundantly (its input is full: the TP
// pairs of a stage restart after each MoE block, so the layer before one is row-parallel or
// replicated). Its experts are sharded over the EP group of partition.ep ranks (EP rank q holds
// experts [q·E/ep, (q+1)·E/ep)); the EP group is made of ep DP replicas of the same stage and TP
// rank, and a pass exchanges tokens with it through an EpExchangeFn (dispatch and combine, two per
// MoE block per Forward/Infer/Backward/BackwardInput; with ep == 1 and no function the exchange is
// local). Gradient groups (param_ranges()): expert parameters are reduced over the expert-data-
// parallel group (the dp / ep replicas with the same EP rank, same stage and TP rank); everything
// else, the routers included, over the whole DP group as before.
//
// Reduction order (the contract the executor mirrors; docs/model.md): the TP all-reduce is a sum of
// the ranks' buffers; the serial emulation RunTpGroupSerial sums them in rank order 0..T-1. Weight
// gradients accumulate onto the stage's grad buffer in the order Backward/BackwardWeight are called
// (rows in order within a micro-batch; see kernels.h). The executor zeroes grads once per step.
//
// Thread safety: a stage object is NOT thread-safe; one thread (its device) calls it at a time.
// Stage objects share no mutable state, so different stages/shards run on different threads freely.
// params()/grads() point into buffers that live (and never move) as long as the stage; another thread
// (a comm stream) may read/write them only when the owning thread does not touch the stage
// (the executor orders this, e.g. the DP all-reduce of grads after the step's last backward).
//
// Example (one device's share of a pipeline step; `ar` runs the TP all-reduce with comm):
//   RP_ASSIGN_OR_RETURN(rp::ModelPartition part, rp::PartitionMlp(cfg, /*num_stages=*/3, /*tp=*/2));
//   RP_ASSIGN_OR_RETURN(auto stage, rp::MlpStage::Create(cfg, part, /*stage=*/1, /*tp_rank=*/0));
//   stage->ZeroGrads();
//   RP_ASSIGN_OR_RETURN(rp::Tensor y, stage->Forward(/*micro_batch=*/0, x, ar));  // send y on
//   ... stage->activation_bytes() ...                                           // memory accounting
//   RP_ASSIGN_OR_RETURN(rp::Tensor dx, stage->Backward(0, dy, ar));              // send dx back
//   ... all-reduce stage->grads() over DP, then optimizer.Step(stage->params(), stage->grads()) ...
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/model/kernels.h"
#include "runtime/model/moe.h"
#include "runtime/model/tensor.h"

namespace rp {

// The model. Validate with ValidateMlpConfig (PartitionMlp and MlpStage::Create do).
struct MlpConfig {
  int input_dim = 16;  // matches DatasetConfig's default
  std::vector<int> hidden = {64, 64, 64, 64, 64};  // one entry per hidden layer (may be empty)
  int classes = 10;
  Activation activation = Activation::kRelu;
  uint64_t seed = 1;  // weight init
  MoeConfig moe;      // mixture-of-experts blocks (none by default)

  int num_layers() const { return static_cast<int>(hidden.size()) + 1; }
  bool is_moe_layer(int layer) const;
  int in_dim(int layer) const { return layer == 0 ? input_dim : hidden[layer - 1]; }
  int out_dim(int layer) const {
    return layer == num_layers() - 1 ? classes : hidden[static_cast<size_t>(layer)];
  }
  // Parameters of the unsharded model.
  int64_t num_params() const;
  // Multiply-adds of one sample's forward through layers [first, last).
  int64_t ForwardMacsPerSample(int first, int last) const;
};

// InvalidArgument naming the field: input_dim, classes (>= 2), hidden[i] >= 1; with MoE layers
// moe_layers (entries strictly increasing, each a layer 0 < l < L − 1 with in_dim == out_dim),
// experts (>= 1), top_k (1 or 2, <= experts), expert_hidden (>= 1), capacity_factor (finite,
// >= 0), aux_loss and router_skew (in [0, kMaxAuxLoss], [0, kMaxRouterSkew]).
[[nodiscard]] absl::Status ValidateMlpConfig(const MlpConfig& config);

enum class ShardKind { kReplicated, kColumnParallel, kRowParallel, kMoe };
std::string_view ShardKindName(ShardKind k);

// Where each layer lives. Plain data; cheap to copy; identical for every rank of a run.
struct ModelPartition {
  int tp = 1;
  int ep = 1;                           // expert-parallel degree (divides config.moe.experts)
  std::vector<int> stage_begin;         // stage s holds layers [stage_begin[s], stage_begin[s+1])
  std::vector<ShardKind> layer_kind;    // per global layer

  int num_stages() const { return static_cast<int>(stage_begin.size()) - 1; }
  int first_layer(int stage) const { return stage_begin[static_cast<size_t>(stage)]; }
  int end_layer(int stage) const { return stage_begin[static_cast<size_t>(stage) + 1]; }
};

// Cuts the model into `num_stages` pipeline stages (PP × virtual stages for interleaved schedules)
// with tensor-parallel degree `tp`. `layers_per_stage`: empty = balanced by layer count, else one
// positive count per stage summing to the layer count. Errors (InvalidArgument, naming the field):
// a bad MlpConfig; num_stages < 1 or > number of layers; tp < 1; layers_per_stage of the wrong length,
// with a count < 1, or not summing to the layer count; with tp > 1, a column-parallel layer whose
// output width is not divisible by tp (names the layer and stage); ep < 1, or with MoE layers
// experts not divisible by ep. TP pairs are formed within each run of dense layers between MoE
// blocks of a stage.
[[nodiscard]] absl::StatusOr<ModelPartition> PartitionMlp(
    const MlpConfig& config, int num_stages, int tp, std::span<const int> layers_per_stage = {},
    int ep = 1);

// The TP all-reduce: replace `buffer` in place by the element-wise sum of the same call's buffers
// over the stage's TP group. Called the same number of times, with the same sizes, on every TP rank
// of a stage (never when tp == 1). Its Status is returned by the stage method that called it.
using TpAllReduceFn = std::function<absl::Status(std::span<float> buffer)>;

// Which group reduces a range of a stage's gradients (and keeps its parameters in sync).
enum class ReduceGroup {
  kDataParallel,        // all DP replicas of the stage and TP rank (dense layers, MoE routers)
  kExpertDataParallel,  // the dp / ep replicas with the same EP rank (MoE experts)
};
std::string_view ReduceGroupName(ReduceGroup g);

// A contiguous range [offset, offset + size) of params()/grads() and the group that reduces it.
struct ParamRange {
  int64_t offset = 0;
  int64_t size = 0;
  ReduceGroup group = ReduceGroup::kDataParallel;
};

// One exchange point of a resumable pass (RunToExchange).
struct StageExchange {
  enum class Kind { kDone, kTpAllReduce, kEpAllToAll };
  Kind kind = Kind::kDone;
  std::span<float> tp_buffer;   // kTpAllReduce: replace by the TP group's sum
  EpExchange* ep = nullptr;     // kEpAllToAll: fill its receive side (owned by the stage)
};

// Called by Backward after layer `local_layer`'s weight and bias gradients for this micro-batch are
// accumulated (local layers go from last to first), e.g. to start a DP gradient bucket.
using LayerGradsDoneFn = std::function<void(int local_layer)>;

// One TP shard of one pipeline stage: its parameters, gradients and the activations it stores for
// backward, keyed by micro-batch id (any int; several may be in flight, as in 1F1B).
class MlpStage {
 public:
  // Where one local layer's parameters sit in params()/grads().
  struct LayerInfo {
    int layer = 0;                     // global layer index
    ShardKind kind = ShardKind::kReplicated;
    int in = 0, out = 0;               // this shard's weight block: in x out
    int64_t weight_offset = 0;         // in params()/grads(); then `bias_size` bias values
    int64_t bias_offset = 0;
    int bias_size = 0;
    bool activation = false;           // applies config.activation after the bias
    // kMoe: weight_offset is the router (in x experts), bias_size 0; the local experts follow at
    // expert_offset, expert_size values each (MoeBlock::Layout), experts [first_expert,
    // first_expert + local_experts); end_offset is one past the layer's last value (every kind).
    int64_t expert_offset = 0;
    int64_t expert_size = 0;
    int first_expert = 0;
    int local_experts = 0;
    int64_t end_offset = 0;
  };

  // What a stage holds besides its parameters. kParamsOnly: no gradient buffer (grads() is
  // empty), so only kInfer passes run (others: FailedPrecondition) — an evaluation's copy of the
  // weights, half the memory of a trainable shard (a 2048-wide model's copies were 2 × 268 MB).
  enum class Buffers { kTrainable, kParamsOnly };

  // Errors: InvalidArgument for a bad config/partition, stage outside [0, num_stages), tp_rank
  // outside [0, tp) or ep_rank outside [0, ep) (naming the field).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<MlpStage>> Create(
      const MlpConfig& config, const ModelPartition& partition, int stage, int tp_rank,
      int ep_rank = 0, Buffers buffers = Buffers::kTrainable);
  ~MlpStage();
  MlpStage(const MlpStage&) = delete;
  MlpStage& operator=(const MlpStage&) = delete;

  int stage() const { return stage_; }
  int tp_rank() const { return tp_rank_; }
  int tp() const { return tp_; }
  int ep_rank() const { return ep_rank_; }
  int ep() const { return ep_; }
  bool is_first() const { return layers_.front().layer == 0; }
  bool is_last() const { return layers_.back().layer == num_model_layers_ - 1; }
  int input_dim() const { return input_dim_; }    // full width of the stage input
  int output_dim() const { return output_dim_; }  // full width of the stage output
  std::span<const LayerInfo> layers() const { return layers_; }

  // Flat parameters and gradients of this shard (layout: per local layer, weight block then bias).
  std::span<float> params() { return params_; }
  std::span<const float> params() const { return params_; }
  std::span<float> grads() { return grads_; }
  std::span<const float> grads() const { return grads_; }
  void ZeroGrads();
  // params()/grads() cut into maximal ranges by reduction group, in order, covering everything.
  std::span<const ParamRange> param_ranges() const { return param_ranges_; }

  // The MoE block of local layer `local` (nullptr for a dense layer): routing statistics.
  const MoeBlock* moe(int local) const { return moe_[static_cast<size_t>(local)].get(); }
  // Weight of each micro-batch's auxiliary loss in the objective, for every MoE block (moe.h).
  void SetAuxLossWeight(double weight);
  // Σ over the stage's MoE blocks of MoeStats::aux_loss_sum; ResetMoeStats zeroes all the stats.
  double aux_loss_sum() const;
  void ResetMoeStats();

  // Bytes of activations currently stored for backward over all micro-batches in flight (layer
  // inputs and pre-activations after Forward; layer inputs and pre-activation gradients after
  // BackwardInput; nothing after Backward/BackwardWeight).
  int64_t activation_bytes() const;
  int micro_batches_in_flight() const { return static_cast<int>(states_.size()); }
  // Hands the storage of a tensor the caller is done with (e.g. a received input, already copied
  // by BeginPass) to this stage, to back its next activations: a stage receives one buffer per
  // pass and sends one on, so in the steady state its passes allocate nothing.
  void Donate(Tensor t) { pool_.Recycle(std::move(t)); }

  // --- The ops the executor calls ---

  // Runs the stage forward on `input` (rows x input_dim(), rows >= 1) for `micro_batch`, stores what
  // backward needs and returns the output (rows x output_dim(); the logits on the last stage).
  // Errors: FailedPrecondition if that micro-batch is already in flight; InvalidArgument on a shape
  // mismatch; the all-reduce's error.
  [[nodiscard]] absl::StatusOr<Tensor> Forward(int micro_batch, ConstMatrixView input,
                                               const TpAllReduceFn& tp_allreduce,
                                               const EpExchangeFn& ep_exchange = nullptr);

  // Forward without storing anything (held-out evaluation). Same bits as Forward's output.
  [[nodiscard]] absl::StatusOr<Tensor> Infer(ConstMatrixView input,
                                             const TpAllReduceFn& tp_allreduce,
                                             const EpExchangeFn& ep_exchange = nullptr);

  // Full backward for `micro_batch`: given the output gradient (rows x output_dim()), accumulates
  // weight/bias gradients into grads() and returns the input gradient (rows x input_dim(); a 0x0
  // tensor on the first stage). Frees the micro-batch's stored activations.
  // Errors: FailedPrecondition if the micro-batch has no finished Forward (or already had
  // BackwardInput); InvalidArgument on a shape mismatch; the all-reduce's error.
  [[nodiscard]] absl::StatusOr<Tensor> Backward(int micro_batch, ConstMatrixView output_grad,
                                                const TpAllReduceFn& tp_allreduce,
                                                const LayerGradsDoneFn& on_layer_grads = nullptr,
                                                const EpExchangeFn& ep_exchange = nullptr);

  // Zero-bubble split. BackwardInput (B) returns the input gradient like Backward but does not touch
  // grads(); it keeps the layer inputs and pre-activation gradients. BackwardWeight (W) then
  // accumulates the weight gradients — bit-identical to Backward's — and frees the micro-batch.
  [[nodiscard]] absl::StatusOr<Tensor> BackwardInput(int micro_batch, ConstMatrixView output_grad,
                                                     const TpAllReduceFn& tp_allreduce,
                                                     const EpExchangeFn& ep_exchange = nullptr);
  [[nodiscard]] absl::Status BackwardWeight(int micro_batch,
                                            const LayerGradsDoneFn& on_layer_grads = nullptr);

  // Number of TP all-reduces one Forward / one Backward(Input) performs (0 when tp == 1).
  int forward_allreduces() const;
  int backward_allreduces() const;
  // EP exchanges one Forward / Infer / Backward(Input) performs: 2 per MoE block (also with
  // ep == 1).
  int ep_exchanges() const;

  // --- Resumable passes: the same computation split at its TP all-reduce points, so a single thread
  // can drive all shards of a TP group in lockstep (RunTpGroupSerial, tests, the reference). ---
  enum class Pass { kForward, kInfer, kBackward, kBackwardInput };
  // Starts `pass` for `micro_batch` with `input` (the stage input, or the output gradient).
  [[nodiscard]] absl::Status BeginPass(Pass pass, int micro_batch, ConstMatrixView input);
  // Runs until the next exchange point: a TP all-reduce (the caller replaces the buffer by the
  // group sum) or an EP all-to-all (the caller fills its receive side), then call again; kDone
  // when the pass has no more.
  [[nodiscard]] absl::StatusOr<StageExchange> RunToExchange(
      int micro_batch, const LayerGradsDoneFn& on_layer_grads = nullptr);
  // RunToExchange for TP-only drivers: performs EP exchanges locally (ep == 1; FailedPrecondition
  // when ep > 1) and returns the next TP all-reduce buffer, or an empty span at the end.
  [[nodiscard]] absl::StatusOr<std::span<float>> RunToAllReduce(
      int micro_batch, const LayerGradsDoneFn& on_layer_grads = nullptr);
  // Returns the pass result after RunToAllReduce returned an empty span.
  [[nodiscard]] absl::StatusOr<Tensor> EndPass(int micro_batch);

 private:
  struct MicroBatch;
  MlpStage() = default;
  absl::StatusOr<MicroBatch*> Find(int micro_batch, const char* op);
  void Store(Tensor* slot, Tensor value, MicroBatch& mb);
  void Free(Tensor* slot);
  // Frees every tensor of the micro-batch at `it` and removes it from states_ (its record kept).
  void Retire(std::unordered_map<int, std::unique_ptr<MicroBatch>>::iterator it);
  absl::StatusOr<Tensor> RunPass(Pass pass, int micro_batch, ConstMatrixView input,
                                 const TpAllReduceFn& tp_allreduce,
                                 const LayerGradsDoneFn& on_layer_grads,
                                 const EpExchangeFn& ep_exchange);
  absl::Status AccumulateWeightGrads(int local, ConstMatrixView x, ConstMatrixView dpre);
  absl::StatusOr<bool> StepMoe(int local, int micro_batch, MicroBatch& mb, StageExchange* out,
                               const LayerGradsDoneFn& on_layer_grads);
  absl::StatusOr<bool> DenseForward(int local, MicroBatch& mb, StageExchange* out);
  absl::StatusOr<bool> DenseBackward(int local, MicroBatch& mb, StageExchange* out,
                                     const LayerGradsDoneFn& on_layer_grads);
  absl::Status LayOut(const MlpConfig& config, const ModelPartition& partition);

  int stage_ = 0, tp_rank_ = 0, tp_ = 1, ep_rank_ = 0, ep_ = 1, num_model_layers_ = 0;
  int input_dim_ = 0, output_dim_ = 0;
  Activation activation_ = Activation::kRelu;
  std::vector<LayerInfo> layers_;
  std::vector<float> params_, grads_;  // grads_ empty for Buffers::kParamsOnly
  bool params_only_ = false;
  std::vector<ParamRange> param_ranges_;
  std::vector<std::unique_ptr<MoeBlock>> moe_;  // per local layer; null for dense layers
  std::unordered_map<int, std::unique_ptr<MicroBatch>> states_;
  // Finished micro-batch records (tensors freed, vectors' capacity kept) for the next forwards:
  // a stage begins a pass a few times per step, each would allocate the record and its 3 vectors.
  std::vector<std::unique_ptr<MicroBatch>> spare_states_;
  int64_t activation_bytes_ = 0;
  Tensor scratch_;  // wᵀ for MatMulTransposedB
  TensorPool pool_;  // storage of freed activations, for the next ones
};

// The layers of one TP shard of `stage` (every TP shard has the same layout; EP shards differ only
// in their MoE blocks' first_expert), as MlpStage holds them (pure; what MlpStage::Create builds
// its buffers from). Errors as MlpStage::Create.
[[nodiscard]] absl::StatusOr<std::vector<MlpStage::LayerInfo>> StageLayers(
    const MlpConfig& config, const ModelPartition& partition, int stage, int ep_rank = 0);

// The activation bytes one micro-batch of `rows` equal rows (a forward of zeros, a BackwardInput of
// a zero gradient) keeps on a stage of `layers` (StageLayers; one shard, ep == 1): what
// MlpStage::activation_bytes() grows by after its forward, and after its BackwardInput (pure; the
// predictor's memory model — tests check it against real stages, every layer kind, TP shards and
// capacities that drop). Equal rows take the same top-k experts of a MoE block, and each of those
// keeps min(rows, ExpertCapacity(rows)) of them: K kept (token, slot)s.
//   dense layer (this shard's in x out):  forward  rows·(in + out if it has an activation)
//                                          (its input, and the pre-activation)
//                                          after Bi rows·(in + out) (its input, the output gradient)
//   MoE block (width d, E experts, expert hidden h): both rows·(d + E) + K·(2d + 2h)
//     (forward: the input and router probabilities, each kept slot's input, pre-activation,
//      activation and output; after Bi: the input and router logits' gradient, each kept slot's
//      input, activation, output gradient and pre-activation gradient)
// Computing it builds no stage: MlpWorkloadBytes prices layouts of a 1 GiB model without
// allocating one.
struct StoredActivationBytes {
  int64_t after_forward = 0;
  int64_t after_input_grad = 0;
};
StoredActivationBytes StageStoredBytes(std::span<const MlpStage::LayerInfo> layers, const MlpConfig& config,
                                       int64_t rows);

// A pass of a stage as modeled time sees it: the layers it computes, in order, and the exchanges
// between them (TP all-reduces, EP all-to-alls) — the order in which MlpStage's passes reach their
// exchange points and call LayerGradsDoneFn (tests check it). The executor and the predictor give
// each kLayer step its share of the op's modeled duration.
//   forward:        layers first to last; a TP all-reduce after each row-parallel layer (tp > 1).
//   backward / backward-input: layers last to first; a TP all-reduce after each column-parallel
//                   layer but the model's first (tp > 1); in backward a layer's gradients are final
//                   at the end of its (last) kLayer step (LayerGradsDoneFn right after).
//   weight:         layers last to first (BackwardWeight), gradients final at the end of each.
// A MoE block with ep > 1 is cut at its two EP exchanges (forward, backward, backward-input):
//   kLayer phase 0 (router, or the output gradient's dispatch rows), kEpAllToAll phase 0
//   (dispatch), kLayer phase 1 (the local experts), kEpAllToAll phase 1 (combine), kLayer phase 2
//   (combine; the block's gradients are final after it in backward). With ep == 1 (exchanges are
//   local) and in the weight pass a MoE block is one kLayer step.
enum class PassKind : uint8_t { kForward, kBackward, kBackwardInput, kWeight };
struct PassStep {
  enum class Kind : uint8_t { kLayer, kTpAllReduce, kEpAllToAll };
  Kind kind = Kind::kLayer;
  int local_layer = 0;       // index into the stage's layers (the layer before an exchange)
  bool grads_final = false;  // kLayer: the layer's weight gradients are final after it
  // kLayer of a MoE block cut at its exchanges: 0, 1, 2 as above (-1: the whole layer);
  // kEpAllToAll: 0 dispatch, 1 combine.
  int moe_phase = -1;
};
std::vector<PassStep> PassSteps(std::span<const MlpStage::LayerInfo> layers, int tp, PassKind pass,
                                int ep = 1);

// Serial emulation of one stage's TP group (single thread): runs `pass` on every shard in lockstep
// and replaces each TP all-reduce by the sum of the shards' buffers in rank order 0..T-1
// ((b0 + b1) + b2 ...), copied to every shard. Returns rank 0's result (all ranks' are identical).
// `shards[t]` must be TP rank t of one stage. For T <= 2 this is bit-identical to any correct FP32
// all-reduce (a sum of two floats does not depend on order).
[[nodiscard]] absl::StatusOr<Tensor> RunTpGroupSerial(std::span<MlpStage* const> shards,
                                                      MlpStage::Pass pass, int micro_batch,
                                                      ConstMatrixView input);

}  // namespace rp
