#include "runtime/model/mlp.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "runtime/hash.h"
#include "runtime/status_macros.h"

namespace rp {
namespace {

// U(-1, 1) as a pure function of (seed, layer, index): 24 random bits, exact in float.
float InitUniform(uint64_t seed, int layer, int64_t index) {
  const uint64_t h = SplitMix64(SplitMix64(SplitMix64(seed) ^ static_cast<uint64_t>(layer)) ^
                                static_cast<uint64_t>(index));
  return static_cast<float>(static_cast<double>(h >> 40) * (2.0 / 16777216.0) - 1.0);
}

// Reserved micro-batch key for Infer (public ids are >= 0).
constexpr int kInferKey = std::numeric_limits<int>::min();

}  // namespace

int64_t MlpConfig::num_params() const {
  int64_t n = 0;
  for (int l = 0; l < num_layers(); ++l) {
    n += static_cast<int64_t>(in_dim(l)) * out_dim(l) + out_dim(l);
  }
  return n;
}

int64_t MlpConfig::ForwardMacsPerSample(int first, int last) const {
  int64_t n = 0;
  for (int l = first; l < last; ++l) n += static_cast<int64_t>(in_dim(l)) * out_dim(l);
  return n;
}

absl::Status ValidateMlpConfig(const MlpConfig& config) {
  if (config.input_dim < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("input_dim must be >= 1, got %d", config.input_dim));
  }
  if (config.classes < 2) {
    return absl::InvalidArgumentError(
        absl::StrFormat("classes must be >= 2, got %d", config.classes));
  }
  for (size_t i = 0; i < config.hidden.size(); ++i) {
    if (config.hidden[i] < 1) {
      return absl::InvalidArgumentError(
          absl::StrFormat("hidden[%d] (width of layer %d) must be >= 1, got %d", i, i,
                          config.hidden[i]));
    }
  }
  return absl::OkStatus();
}

std::string_view ShardKindName(ShardKind k) {
  switch (k) {
    case ShardKind::kReplicated: return "replicated";
    case ShardKind::kColumnParallel: return "column-parallel";
    case ShardKind::kRowParallel: return "row-parallel";
  }
  return "unknown";
}

absl::StatusOr<ModelPartition> PartitionMlp(const MlpConfig& config, int num_stages, int tp,
                                            std::span<const int> layers_per_stage) {
  RP_RETURN_IF_ERROR(ValidateMlpConfig(config));
  const int num_layers = config.num_layers();
  if (num_stages < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("num_stages (pp x virtual stages) must be >= 1, got %d", num_stages));
  }
  if (num_stages > num_layers) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "num_stages (pp x virtual stages) = %d is larger than the model's %d layers", num_stages,
        num_layers));
  }
  if (tp < 1) return absl::InvalidArgumentError(absl::StrFormat("tp must be >= 1, got %d", tp));

  ModelPartition part;
  part.tp = tp;
  part.stage_begin.assign(1, 0);
  if (layers_per_stage.empty()) {
    const int base = num_layers / num_stages, extra = num_layers % num_stages;
    for (int s = 0; s < num_stages; ++s) {
      part.stage_begin.push_back(part.stage_begin.back() + base + (s < extra ? 1 : 0));
    }
  } else {
    if (static_cast<int>(layers_per_stage.size()) != num_stages) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "layers_per_stage has %d entries, expected one per stage (%d)", layers_per_stage.size(),
          num_stages));
    }
    for (int s = 0; s < num_stages; ++s) {
      const int n = layers_per_stage[static_cast<size_t>(s)];
      if (n < 1) {
        return absl::InvalidArgumentError(
            absl::StrFormat("layers_per_stage[%d] must be >= 1, got %d", s, n));
      }
      part.stage_begin.push_back(part.stage_begin.back() + n);
    }
    if (part.stage_begin.back() != num_layers) {
      return absl::InvalidArgumentError(
          absl::StrFormat("layers_per_stage sums to %d, but the model has %d layers",
                          part.stage_begin.back(), num_layers));
    }
  }

  part.layer_kind.assign(static_cast<size_t>(num_layers), ShardKind::kReplicated);
  for (int s = 0; s < num_stages; ++s) {
    const int begin = part.first_layer(s), end = part.end_layer(s);
    for (int l = begin; l + 1 < end; l += 2) {
      part.layer_kind[static_cast<size_t>(l)] = ShardKind::kColumnParallel;
      part.layer_kind[static_cast<size_t>(l) + 1] = ShardKind::kRowParallel;
      if (config.out_dim(l) % tp != 0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "layer %d (output width %d) is not divisible by tp=%d (it is the column-parallel "
            "half of a tensor-parallel pair in stage %d)",
            l, config.out_dim(l), tp, s));
      }
    }
  }
  return part;
}

// Per-micro-batch state: the pass in progress and what backward needs.
struct MlpStage::MicroBatch {
  Pass pass = Pass::kForward;
  bool active = false;           // a pass has begun and EndPass has not been called
  bool finished = false;         // RunToAllReduce reported the end of the pass
  bool awaiting = false;         // `cur` was handed out for a TP all-reduce
  bool forward_done = false;
  bool input_grad_done = false;
  int cursor = 0;                // next local layer
  int64_t rows = 0;
  Tensor cur;                    // the activation (or gradient) flowing through the pass
  std::vector<Tensor> x, pre, dpre;  // per local layer
  int64_t bytes = 0;
};

MlpStage::~MlpStage() = default;

absl::StatusOr<std::vector<MlpStage::LayerInfo>> StageLayers(const MlpConfig& config,
                                                             const ModelPartition& partition,
                                                             int stage) {
  const int begin = partition.first_layer(stage), end = partition.end_layer(stage);
  if (begin >= end) {
    return absl::InvalidArgumentError(absl::StrFormat("stage %d has no layers", stage));
  }
  const int T = partition.tp;
  std::vector<MlpStage::LayerInfo> layers;
  int64_t offset = 0;
  for (int l = begin; l < end; ++l) {
    MlpStage::LayerInfo info;
    info.layer = l;
    info.kind = partition.layer_kind[static_cast<size_t>(l)];
    const int in = config.in_dim(l), out = config.out_dim(l);
    info.in = in;
    info.out = out;
    if (info.kind == ShardKind::kColumnParallel) {
      if (out % T != 0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "layer %d (output width %d) is not divisible by tp=%d", l, out, T));
      }
      info.out = out / T;
    } else if (info.kind == ShardKind::kRowParallel) {
      if (in % T != 0) {
        return absl::InvalidArgumentError(
            absl::StrFormat("layer %d (input width %d) is not divisible by tp=%d", l, in, T));
      }
      info.in = in / T;
    }
    info.weight_offset = offset;
    offset += static_cast<int64_t>(info.in) * info.out;
    info.bias_offset = offset;
    info.bias_size = info.out;
    offset += info.bias_size;
    info.activation = l != config.num_layers() - 1;
    layers.push_back(info);
  }
  return layers;
}

std::vector<PassStep> PassSteps(std::span<const MlpStage::LayerInfo> layers, int tp, PassKind pass) {
  std::vector<PassStep> steps;
  const int n = static_cast<int>(layers.size());
  using Kind = PassStep::Kind;
  if (pass == PassKind::kForward) {
    for (int l = 0; l < n; ++l) {
      steps.push_back({Kind::kLayer, l, false});
      if (tp > 1 && layers[static_cast<size_t>(l)].kind == ShardKind::kRowParallel) {
        steps.push_back({Kind::kTpAllReduce, l, false});
      }
    }
    return steps;
  }
  for (int l = n - 1; l >= 0; --l) {
    const MlpStage::LayerInfo& info = layers[static_cast<size_t>(l)];
    steps.push_back({Kind::kLayer, l, pass == PassKind::kBackward || pass == PassKind::kWeight});
    if (pass != PassKind::kWeight && tp > 1 && info.kind == ShardKind::kColumnParallel &&
        info.layer != 0) {
      steps.push_back({Kind::kTpAllReduce, l, false});
    }
  }
  return steps;
}

absl::StatusOr<std::unique_ptr<MlpStage>> MlpStage::Create(const MlpConfig& config,
                                                           const ModelPartition& partition,
                                                           int stage, int tp_rank) {
  RP_RETURN_IF_ERROR(ValidateMlpConfig(config));
  if (partition.num_stages() < 1 ||
      static_cast<int>(partition.layer_kind.size()) != config.num_layers() ||
      partition.stage_begin.back() != config.num_layers()) {
    return absl::InvalidArgumentError("partition does not match the model config");
  }
  if (stage < 0 || stage >= partition.num_stages()) {
    return absl::InvalidArgumentError(absl::StrFormat("stage %d is outside [0, %d)", stage,
                                                      partition.num_stages()));
  }
  if (tp_rank < 0 || tp_rank >= partition.tp) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tp_rank %d is outside [0, tp=%d)", tp_rank, partition.tp));
  }
  RP_ASSIGN_OR_RETURN(std::vector<LayerInfo> layers, StageLayers(config, partition, stage));
  auto st = std::unique_ptr<MlpStage>(new MlpStage());
  st->stage_ = stage;
  st->tp_rank_ = tp_rank;
  st->tp_ = partition.tp;
  st->num_model_layers_ = config.num_layers();
  st->activation_ = config.activation;
  st->input_dim_ = config.in_dim(layers.front().layer);
  st->output_dim_ = config.out_dim(layers.back().layer);
  const int t = tp_rank;
  st->layers_ = std::move(layers);
  const int64_t offset = st->layers_.back().bias_offset + st->layers_.back().bias_size;
  st->params_.assign(static_cast<size_t>(offset), 0.0f);
  st->grads_.assign(static_cast<size_t>(offset), 0.0f);

  // Weights: each element is a pure function of (seed, layer, global row, global column).
  for (const LayerInfo& info : st->layers_) {
    const int full_out = config.out_dim(info.layer);
    const int row0 = info.kind == ShardKind::kRowParallel ? t * info.in : 0;
    const int col0 = info.kind == ShardKind::kColumnParallel ? t * info.out : 0;
    const float limit =
        static_cast<float>(std::sqrt(6.0 / static_cast<double>(config.in_dim(info.layer))));
    float* w = st->params_.data() + info.weight_offset;
    for (int i = 0; i < info.in; ++i) {
      for (int k = 0; k < info.out; ++k) {
        const int64_t index = static_cast<int64_t>(row0 + i) * full_out + (col0 + k);
        w[static_cast<int64_t>(i) * info.out + k] =
            InitUniform(config.seed, info.layer, index) * limit;
      }
    }
  }
  return st;
}

void MlpStage::ZeroGrads() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

int MlpStage::forward_allreduces() const {
  if (tp_ == 1) return 0;
  return static_cast<int>(std::count_if(layers_.begin(), layers_.end(), [](const LayerInfo& i) {
    return i.kind == ShardKind::kRowParallel;
  }));
}

int MlpStage::backward_allreduces() const {
  if (tp_ == 1) return 0;
  return static_cast<int>(std::count_if(layers_.begin(), layers_.end(), [](const LayerInfo& i) {
    return i.kind == ShardKind::kColumnParallel && i.layer != 0;
  }));
}

void MlpStage::Store(Tensor* slot, Tensor value, MicroBatch& mb) {
  Free(slot);
  activation_bytes_ += value.bytes();
  mb.bytes += value.bytes();
  *slot = std::move(value);
}

void MlpStage::Free(Tensor* slot) {
  activation_bytes_ -= slot->bytes();
  *slot = Tensor();
}

absl::StatusOr<MlpStage::MicroBatch*> MlpStage::Find(int micro_batch, const char* op) {
  auto it = states_.find(micro_batch);
  if (it == states_.end()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: stage %d (tp rank %d) has no micro-batch %d in flight", op, stage_, tp_rank_,
        micro_batch));
  }
  return it->second.get();
}

absl::Status MlpStage::BeginPass(Pass pass, int micro_batch, ConstMatrixView input) {
  const bool forward = pass == Pass::kForward || pass == Pass::kInfer;
  const int want_cols = forward ? input_dim_ : output_dim_;
  if (input.rows < 1 || input.cols != want_cols) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "stage %d (tp rank %d) micro-batch %d: %s input is %dx%d, expected rows >= 1 and %d "
        "columns",
        stage_, tp_rank_, micro_batch, forward ? "forward" : "backward", input.rows, input.cols,
        want_cols));
  }
  if (micro_batch < 0 && micro_batch != kInferKey) {
    return absl::InvalidArgumentError(
        absl::StrFormat("micro_batch must be >= 0, got %d", micro_batch));
  }
  MicroBatch* mb = nullptr;
  if (forward) {
    auto [it, inserted] = states_.try_emplace(micro_batch, nullptr);
    if (!inserted) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "forward: stage %d (tp rank %d) already holds micro-batch %d", stage_, tp_rank_,
          micro_batch));
    }
    it->second = std::make_unique<MicroBatch>();
    mb = it->second.get();
    mb->rows = input.rows;
    mb->cursor = 0;
    const size_t n = layers_.size();
    mb->x.resize(n);
    mb->pre.resize(n);
    mb->dpre.resize(n);
  } else {
    RP_ASSIGN_OR_RETURN(mb, Find(micro_batch, "backward"));
    if (mb->active || !mb->forward_done || mb->input_grad_done) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "backward: stage %d (tp rank %d) micro-batch %d is not waiting for a backward (%s)",
          stage_, tp_rank_, micro_batch,
          mb->active ? "a pass is in progress"
                     : (mb->input_grad_done ? "BackwardInput already ran" : "forward not done")));
    }
    if (input.rows != mb->rows) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "stage %d (tp rank %d) micro-batch %d: output gradient has %d rows, forward had %d",
          stage_, tp_rank_, micro_batch, input.rows, mb->rows));
    }
    mb->cursor = static_cast<int>(layers_.size()) - 1;
  }
  mb->pass = pass;
  mb->active = true;
  mb->finished = false;
  mb->awaiting = false;
  mb->cur = Tensor(input.rows, input.cols,
                   std::vector<float>(input.data, input.data + input.size()));
  return absl::OkStatus();
}

absl::Status MlpStage::AccumulateWeightGrads(int local, ConstMatrixView x, ConstMatrixView dpre) {
  const LayerInfo& info = layers_[static_cast<size_t>(local)];
  MatrixView gw{grads_.data() + info.weight_offset, info.in, info.out};
  RP_RETURN_IF_ERROR(MatMulTransposedAAccumulate(x, dpre, gw));
  return AccumulateBiasGrad(
      dpre, std::span<float>(grads_.data() + info.bias_offset, static_cast<size_t>(info.bias_size)));
}

absl::StatusOr<std::span<float>> MlpStage::RunToAllReduce(int micro_batch,
                                                          const LayerGradsDoneFn& on_layer_grads) {
  RP_ASSIGN_OR_RETURN(MicroBatch * mb, Find(micro_batch, "RunToAllReduce"));
  if (!mb->active || mb->finished) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "RunToAllReduce: stage %d (tp rank %d) micro-batch %d has no pass in progress", stage_,
        tp_rank_, micro_batch));
  }
  const int n = static_cast<int>(layers_.size());
  const int64_t rows = mb->rows;
  if (mb->pass == Pass::kForward || mb->pass == Pass::kInfer) {
    const bool store = mb->pass == Pass::kForward;
    while (mb->cursor < n) {
      const int l = mb->cursor;
      const LayerInfo& info = layers_[static_cast<size_t>(l)];
      if (!mb->awaiting) {
        Tensor out(rows, info.out);
        RP_RETURN_IF_ERROR(
            MatMul(mb->cur, ConstMatrixView(params_.data() + info.weight_offset, info.in, info.out),
                   out));
        if (store) Store(&mb->x[static_cast<size_t>(l)], std::move(mb->cur), *mb);
        mb->cur = std::move(out);
        if (info.kind == ShardKind::kRowParallel && tp_ > 1) {
          mb->awaiting = true;  // partial sum: the TP group reduces it, then we add the bias
          return mb->cur.span();
        }
      }
      mb->awaiting = false;
      RP_RETURN_IF_ERROR(AddBias(mb->cur, std::span<const float>(params_.data() + info.bias_offset,
                                                                  info.bias_size)));
      if (info.activation) {
        if (store) Store(&mb->pre[static_cast<size_t>(l)], mb->cur, *mb);
        RP_RETURN_IF_ERROR(ActivationForward(activation_, mb->cur, mb->cur));
      }
      ++mb->cursor;
    }
  } else {
    const bool fused = mb->pass == Pass::kBackward;
    while (mb->cursor >= 0) {
      const int l = mb->cursor;
      const LayerInfo& info = layers_[static_cast<size_t>(l)];
      if (!mb->awaiting) {
        Tensor dpre = std::move(mb->cur);
        Tensor& pre = mb->pre[static_cast<size_t>(l)];
        if (info.activation) {
          RP_RETURN_IF_ERROR(ActivationBackward(activation_, pre, dpre, dpre));
          Free(&pre);
        }
        Tensor& x = mb->x[static_cast<size_t>(l)];
        if (fused) {
          RP_RETURN_IF_ERROR(AccumulateWeightGrads(l, x, dpre));
          Free(&x);
          if (on_layer_grads) on_layer_grads(l);
        }
        Tensor dx;
        if (info.layer != 0) {
          dx = Tensor(rows, info.in);
          RP_RETURN_IF_ERROR(MatMulTransposedB(
              dpre, ConstMatrixView(params_.data() + info.weight_offset, info.in, info.out), dx,
              &scratch_));
        }
        if (!fused) Store(&mb->dpre[static_cast<size_t>(l)], std::move(dpre), *mb);
        mb->cur = std::move(dx);
        if (info.layer != 0 && info.kind == ShardKind::kColumnParallel && tp_ > 1) {
          mb->awaiting = true;  // partial input gradient: the TP group reduces it
          return mb->cur.span();
        }
      }
      mb->awaiting = false;
      --mb->cursor;
    }
  }
  mb->finished = true;
  return std::span<float>();
}

absl::StatusOr<Tensor> MlpStage::EndPass(int micro_batch) {
  auto it = states_.find(micro_batch);
  if (it == states_.end() || !it->second->active || !it->second->finished) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "EndPass: stage %d (tp rank %d) micro-batch %d has no finished pass", stage_, tp_rank_,
        micro_batch));
  }
  MicroBatch& mb = *it->second;
  Tensor result = std::move(mb.cur);
  mb.active = false;
  switch (mb.pass) {
    case Pass::kForward:
      mb.forward_done = true;
      break;
    case Pass::kBackwardInput:
      mb.input_grad_done = true;
      break;
    case Pass::kInfer:
    case Pass::kBackward:
      for (auto* vec : {&mb.x, &mb.pre, &mb.dpre}) {
        for (Tensor& t : *vec) Free(&t);
      }
      states_.erase(it);
      break;
  }
  return result;
}

absl::StatusOr<Tensor> MlpStage::RunPass(Pass pass, int micro_batch, ConstMatrixView input,
                                         const TpAllReduceFn& tp_allreduce,
                                         const LayerGradsDoneFn& on_layer_grads) {
  RP_RETURN_IF_ERROR(BeginPass(pass, micro_batch, input));
  while (true) {
    RP_ASSIGN_OR_RETURN(std::span<float> buffer, RunToAllReduce(micro_batch, on_layer_grads));
    if (buffer.empty()) break;
    if (!tp_allreduce) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "stage %d (tp rank %d): tp=%d needs a tp_allreduce function", stage_, tp_rank_, tp_));
    }
    RP_RETURN_IF_ERROR(tp_allreduce(buffer));
  }
  return EndPass(micro_batch);
}

absl::StatusOr<Tensor> MlpStage::Forward(int micro_batch, ConstMatrixView input,
                                         const TpAllReduceFn& tp_allreduce) {
  if (micro_batch < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("micro_batch must be >= 0, got %d", micro_batch));
  }
  return RunPass(Pass::kForward, micro_batch, input, tp_allreduce, nullptr);
}

absl::StatusOr<Tensor> MlpStage::Infer(ConstMatrixView input, const TpAllReduceFn& tp_allreduce) {
  return RunPass(Pass::kInfer, kInferKey, input, tp_allreduce, nullptr);
}

absl::StatusOr<Tensor> MlpStage::Backward(int micro_batch, ConstMatrixView output_grad,
                                          const TpAllReduceFn& tp_allreduce,
                                          const LayerGradsDoneFn& on_layer_grads) {
  return RunPass(Pass::kBackward, micro_batch, output_grad, tp_allreduce, on_layer_grads);
}

absl::StatusOr<Tensor> MlpStage::BackwardInput(int micro_batch, ConstMatrixView output_grad,
                                               const TpAllReduceFn& tp_allreduce) {
  return RunPass(Pass::kBackwardInput, micro_batch, output_grad, tp_allreduce, nullptr);
}

absl::Status MlpStage::BackwardWeight(int micro_batch, const LayerGradsDoneFn& on_layer_grads) {
  RP_ASSIGN_OR_RETURN(MicroBatch * mb, Find(micro_batch, "BackwardWeight"));
  if (!mb->input_grad_done || mb->active) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "BackwardWeight: stage %d (tp rank %d) micro-batch %d has not finished BackwardInput",
        stage_, tp_rank_, micro_batch));
  }
  for (int l = static_cast<int>(layers_.size()) - 1; l >= 0; --l) {
    Tensor& x = mb->x[static_cast<size_t>(l)];
    Tensor& dpre = mb->dpre[static_cast<size_t>(l)];
    RP_RETURN_IF_ERROR(AccumulateWeightGrads(l, x, dpre));
    Free(&x);
    Free(&dpre);
    if (on_layer_grads) on_layer_grads(l);
  }
  for (auto* vec : {&mb->x, &mb->pre, &mb->dpre}) {
    for (Tensor& t : *vec) Free(&t);
  }
  states_.erase(micro_batch);
  return absl::OkStatus();
}

absl::StatusOr<Tensor> RunTpGroupSerial(std::span<MlpStage* const> shards, MlpStage::Pass pass,
                                        int micro_batch, ConstMatrixView input) {
  const int T = static_cast<int>(shards.size());
  if (T < 1) return absl::InvalidArgumentError("RunTpGroupSerial: no shards");
  for (int t = 0; t < T; ++t) {
    const MlpStage* s = shards[static_cast<size_t>(t)];
    if (s == nullptr || s->tp_rank() != t || s->tp() != T || s->stage() != shards[0]->stage()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "RunTpGroupSerial: shards[%d] is not tp rank %d of stage %d with tp=%d", t, t,
          shards[0] ? shards[0]->stage() : -1, T));
    }
  }
  for (MlpStage* s : shards) RP_RETURN_IF_ERROR(s->BeginPass(pass, micro_batch, input));
  std::vector<std::span<float>> buffers(static_cast<size_t>(T));
  std::vector<float> sum;
  while (true) {
    for (int t = 0; t < T; ++t) {
      RP_ASSIGN_OR_RETURN(buffers[static_cast<size_t>(t)],
                          shards[static_cast<size_t>(t)]->RunToAllReduce(micro_batch));
    }
    const size_t n = buffers[0].size();
    for (int t = 1; t < T; ++t) {
      RP_CHECK(buffers[static_cast<size_t>(t)].size() == n)
          << "tp rank " << t << " reached an all-reduce of " << buffers[static_cast<size_t>(t)].size()
          << " values, rank 0 one of " << n;
    }
    if (n == 0) break;
    sum.assign(buffers[0].begin(), buffers[0].end());
    for (int t = 1; t < T; ++t) RP_RETURN_IF_ERROR(Accumulate(sum, buffers[static_cast<size_t>(t)]));
    for (std::span<float> b : buffers) std::copy(sum.begin(), sum.end(), b.begin());
  }
  Tensor result;
  for (int t = 0; t < T; ++t) {
    RP_ASSIGN_OR_RETURN(Tensor r, shards[static_cast<size_t>(t)]->EndPass(micro_batch));
    if (t == 0) result = std::move(r);
  }
  return result;
}

}  // namespace rp
