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
#include "runtime/model/tensor.h"

namespace rp {

// The model. Validate with ValidateMlpConfig (PartitionMlp and MlpStage::Create do).
struct MlpConfig {
  int input_dim = 16;  // matches DatasetConfig's default
  std::vector<int> hidden = {64, 64, 64, 64, 64};  // one entry per hidden layer (may be empty)
  int classes = 10;
  Activation activation = Activation::kRelu;
  uint64_t seed = 1;  // weight init

  int num_layers() const { return static_cast<int>(hidden.size()) + 1; }
  int in_dim(int layer) const { return layer == 0 ? input_dim : hidden[layer - 1]; }
  int out_dim(int layer) const {
    return layer == num_layers() - 1 ? classes : hidden[static_cast<size_t>(layer)];
  }
  // Parameters of the unsharded model.
  int64_t num_params() const;
  // Multiply-adds of one sample's forward through layers [first, last).
  int64_t ForwardMacsPerSample(int first, int last) const;
};

// InvalidArgument naming the field: input_dim, classes (>= 2), hidden[i] >= 1.
[[nodiscard]] absl::Status ValidateMlpConfig(const MlpConfig& config);

enum class ShardKind { kReplicated, kColumnParallel, kRowParallel };
std::string_view ShardKindName(ShardKind k);

// Where each layer lives. Plain data; cheap to copy; identical for every rank of a run.
struct ModelPartition {
  int tp = 1;
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
// output width is not divisible by tp (names the layer and stage).
[[nodiscard]] absl::StatusOr<ModelPartition> PartitionMlp(
    const MlpConfig& config, int num_stages, int tp, std::span<const int> layers_per_stage = {});

// The TP all-reduce: replace `buffer` in place by the element-wise sum of the same call's buffers
// over the stage's TP group. Called the same number of times, with the same sizes, on every TP rank
// of a stage (never when tp == 1). Its Status is returned by the stage method that called it.
using TpAllReduceFn = std::function<absl::Status(std::span<float> buffer)>;

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
  };

  // Errors: InvalidArgument for a bad config/partition, stage outside [0, num_stages) or tp_rank
  // outside [0, tp) (naming the field).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<MlpStage>> Create(
      const MlpConfig& config, const ModelPartition& partition, int stage, int tp_rank);
  ~MlpStage();
  MlpStage(const MlpStage&) = delete;
  MlpStage& operator=(const MlpStage&) = delete;

  int stage() const { return stage_; }
  int tp_rank() const { return tp_rank_; }
  int tp() const { return tp_; }
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

  // Bytes of activations currently stored for backward over all micro-batches in flight (layer
  // inputs and pre-activations after Forward; layer inputs and pre-activation gradients after
  // BackwardInput; nothing after Backward/BackwardWeight).
  int64_t activation_bytes() const { return activation_bytes_; }
  int micro_batches_in_flight() const { return static_cast<int>(states_.size()); }

  // --- The ops the executor calls ---

  // Runs the stage forward on `input` (rows x input_dim(), rows >= 1) for `micro_batch`, stores what
  // backward needs and returns the output (rows x output_dim(); the logits on the last stage).
  // Errors: FailedPrecondition if that micro-batch is already in flight; InvalidArgument on a shape
  // mismatch; the all-reduce's error.
  [[nodiscard]] absl::StatusOr<Tensor> Forward(int micro_batch, ConstMatrixView input,
                                               const TpAllReduceFn& tp_allreduce);

  // Forward without storing anything (held-out evaluation). Same bits as Forward's output.
  [[nodiscard]] absl::StatusOr<Tensor> Infer(ConstMatrixView input,
                                             const TpAllReduceFn& tp_allreduce);

  // Full backward for `micro_batch`: given the output gradient (rows x output_dim()), accumulates
  // weight/bias gradients into grads() and returns the input gradient (rows x input_dim(); a 0x0
  // tensor on the first stage). Frees the micro-batch's stored activations.
  // Errors: FailedPrecondition if the micro-batch has no finished Forward (or already had
  // BackwardInput); InvalidArgument on a shape mismatch; the all-reduce's error.
  [[nodiscard]] absl::StatusOr<Tensor> Backward(int micro_batch, ConstMatrixView output_grad,
                                                const TpAllReduceFn& tp_allreduce,
                                                const LayerGradsDoneFn& on_layer_grads = nullptr);

  // Zero-bubble split. BackwardInput (B) returns the input gradient like Backward but does not touch
  // grads(); it keeps the layer inputs and pre-activation gradients. BackwardWeight (W) then
  // accumulates the weight gradients — bit-identical to Backward's — and frees the micro-batch.
  [[nodiscard]] absl::StatusOr<Tensor> BackwardInput(int micro_batch, ConstMatrixView output_grad,
                                                     const TpAllReduceFn& tp_allreduce);
  [[nodiscard]] absl::Status BackwardWeight(int micro_batch,
                                            const LayerGradsDoneFn& on_layer_grads = nullptr);

  // Number of TP all-reduces one Forward / one Backward(Input) performs (0 when tp == 1).
  int forward_allreduces() const;
  int backward_allreduces() const;

  // --- Resumable passes: the same computation split at its TP all-reduce points, so a single thread
  // can drive all shards of a TP group in lockstep (RunTpGroupSerial, tests, the reference). ---
  enum class Pass { kForward, kInfer, kBackward, kBackwardInput };
  // Starts `pass` for `micro_batch` with `input` (the stage input, or the output gradient).
  [[nodiscard]] absl::Status BeginPass(Pass pass, int micro_batch, ConstMatrixView input);
  // Runs until the next TP all-reduce point and returns the buffer to reduce (the caller replaces
  // it by the group sum before calling again), or an empty span when the pass has no more.
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
  absl::StatusOr<Tensor> RunPass(Pass pass, int micro_batch, ConstMatrixView input,
                                 const TpAllReduceFn& tp_allreduce,
                                 const LayerGradsDoneFn& on_layer_grads);
  absl::Status AccumulateWeightGrads(int local, ConstMatrixView x, ConstMatrixView dpre);

  int stage_ = 0, tp_rank_ = 0, tp_ = 1, num_model_layers_ = 0;
  int input_dim_ = 0, output_dim_ = 0;
  Activation activation_ = Activation::kRelu;
  std::vector<LayerInfo> layers_;
  std::vector<float> params_, grads_;
  std::unordered_map<int, std::unique_ptr<MicroBatch>> states_;
  int64_t activation_bytes_ = 0;
  Tensor scratch_;  // wᵀ for MatMulTransposedB
};

// The layers of one TP shard of `stage` (every shard has the same layout), as MlpStage holds them
// (pure; what MlpStage::Create builds its buffers from). Errors as MlpStage::Create.
[[nodiscard]] absl::StatusOr<std::vector<MlpStage::LayerInfo>> StageLayers(
    const MlpConfig& config, const ModelPartition& partition, int stage);

// A pass of a stage as modeled time sees it: the layers it computes, in order, and the TP
// all-reduces between them — the order in which MlpStage's passes reach their TP all-reduce points
// and call LayerGradsDoneFn (tests check it). The executor and the predictor give each kLayer step
// its share of the op's modeled duration.
//   forward:        layers first to last; a TP all-reduce after each row-parallel layer (tp > 1).
//   backward / backward-input: layers last to first; a TP all-reduce after each column-parallel
//                   layer but the model's first (tp > 1); with `weights`, a layer's gradients are
//                   final at the end of its kLayer step (LayerGradsDoneFn right after).
//   weight:         layers last to first (BackwardWeight), gradients final at the end of each.
enum class PassKind : uint8_t { kForward, kBackward, kBackwardInput, kWeight };
struct PassStep {
  enum class Kind : uint8_t { kLayer, kTpAllReduce };
  Kind kind = Kind::kLayer;
  int local_layer = 0;       // index into the stage's layers (the layer before a TP all-reduce)
  bool grads_final = false;  // kLayer: the layer's weight gradients are final after it
};
std::vector<PassStep> PassSteps(std::span<const MlpStage::LayerInfo> layers, int tp, PassKind pass);

// Serial emulation of one stage's TP group (single thread): runs `pass` on every shard in lockstep
// and replaces each TP all-reduce by the sum of the shards' buffers in rank order 0..T-1
// ((b0 + b1) + b2 ...), copied to every shard. Returns rank 0's result (all ranks' are identical).
// `shards[t]` must be TP rank t of one stage. For T <= 2 this is bit-identical to any correct FP32
// all-reduce (a sum of two floats does not depend on order).
[[nodiscard]] absl::StatusOr<Tensor> RunTpGroupSerial(std::span<MlpStage* const> shards,
                                                      MlpStage::Pass pass, int micro_batch,
                                                      ConstMatrixView input);

}  // namespace rp
