#include "runtime/model/mlp.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "runtime/status_macros.h"

namespace rp {
namespace {

// Reserved micro-batch key for Infer (public ids are >= 0).
constexpr int kInferKey = std::numeric_limits<int>::min();

}  // namespace

// Per-micro-batch state: the pass in progress and what backward needs.
struct MlpStage::MicroBatch {
  Pass pass = Pass::kForward;
  bool active = false;           // a pass has begun and EndPass has not been called
  bool finished = false;         // RunToAllReduce reported the end of the pass
  bool awaiting = false;         // `cur` was handed out for a TP all-reduce
  bool forward_done = false;
  bool input_grad_done = false;
  int cursor = 0;                // next local layer
  int moe_phase = 0;             // at a MoE block: its next phase (0 begin, 1 experts, 2 end)
  int64_t rows = 0;
  Tensor cur;                    // the activation (or gradient) flowing through the pass
  std::vector<Tensor> x, pre, dpre;  // per local layer
  int64_t bytes = 0;
};

MlpStage::~MlpStage() = default;

absl::StatusOr<std::unique_ptr<MlpStage>> MlpStage::Create(const MlpConfig& config,
                                                           const ModelPartition& partition,
                                                           int stage, int tp_rank, int ep_rank,
                                                           Buffers buffers) {
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
  if (ep_rank < 0 || ep_rank >= partition.ep) {
    return absl::InvalidArgumentError(
        absl::StrFormat("ep_rank %d is outside [0, ep=%d)", ep_rank, partition.ep));
  }
  auto st = std::unique_ptr<MlpStage>(new MlpStage());
  st->stage_ = stage;
  st->tp_rank_ = tp_rank;
  st->tp_ = partition.tp;
  st->ep_rank_ = ep_rank;
  st->ep_ = partition.ep;
  st->num_model_layers_ = config.num_layers();
  st->activation_ = config.activation;
  st->params_only_ = buffers == Buffers::kParamsOnly;
  const int begin = partition.first_layer(stage), end = partition.end_layer(stage);
  if (begin >= end) {
    return absl::InvalidArgumentError(absl::StrFormat("stage %d has no layers", stage));
  }
  st->input_dim_ = config.in_dim(begin);
  st->output_dim_ = config.out_dim(end - 1);
  RP_RETURN_IF_ERROR(st->LayOut(config, partition));
  return st;
}

void MlpStage::ZeroGrads() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

int64_t MlpStage::activation_bytes() const {
  int64_t bytes = activation_bytes_;
  for (const auto& block : moe_) bytes += block ? block->activation_bytes() : 0;
  return bytes;
}

void MlpStage::SetAuxLossWeight(double weight) {
  for (auto& block : moe_) {
    if (block) block->set_aux_loss_weight(weight);
  }
}

double MlpStage::aux_loss_sum() const {
  double sum = 0;
  for (const auto& block : moe_) sum += block ? block->stats().aux_loss_sum : 0.0;
  return sum;
}

void MlpStage::ResetMoeStats() {
  for (auto& block : moe_) {
    if (block) block->ResetStats();
  }
}

int MlpStage::ep_exchanges() const {
  return 2 * static_cast<int>(std::count_if(moe_.begin(), moe_.end(),
                                            [](const auto& b) { return b != nullptr; }));
}

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
  pool_.Recycle(std::move(*slot));
  *slot = Tensor();
}

void MlpStage::Retire(std::unordered_map<int, std::unique_ptr<MicroBatch>>::iterator it) {
  std::unique_ptr<MicroBatch> mb = std::move(it->second);
  states_.erase(it);
  for (auto* vec : {&mb->x, &mb->pre, &mb->dpre}) {
    for (Tensor& t : *vec) Free(&t);
  }
  pool_.Recycle(std::move(mb->cur));  // not an activation (EndPass moved any result out)
  std::vector<Tensor> x = std::move(mb->x), pre = std::move(mb->pre), dpre = std::move(mb->dpre);
  *mb = MicroBatch();
  mb->x = std::move(x);  // one empty tensor per local layer, as a new record
  mb->pre = std::move(pre);
  mb->dpre = std::move(dpre);
  spare_states_.push_back(std::move(mb));
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
  if (params_only_ && pass != Pass::kInfer) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "stage %d (tp rank %d) micro-batch %d: a stage built without gradients "
        "(MlpStage::Buffers::kParamsOnly) runs inference passes only",
        stage_, tp_rank_, micro_batch));
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
    if (spare_states_.empty()) {
      it->second = std::make_unique<MicroBatch>();
      const size_t n = layers_.size();
      it->second->x.resize(n);
      it->second->pre.resize(n);
      it->second->dpre.resize(n);
    } else {
      it->second = std::move(spare_states_.back());
      spare_states_.pop_back();
    }
    mb = it->second.get();
    mb->rows = input.rows;
    mb->cursor = 0;
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
  mb->moe_phase = 0;
  mb->cur = pool_.Copy(input);
  return absl::OkStatus();
}

absl::Status MlpStage::AccumulateWeightGrads(int local, ConstMatrixView x, ConstMatrixView dpre) {
  const LayerInfo& info = layers_[static_cast<size_t>(local)];
  MatrixView gw{grads_.data() + info.weight_offset, info.in, info.out};
  RP_RETURN_IF_ERROR(MatMulTransposedAAccumulate(x, dpre, gw));
  return AccumulateBiasGrad(
      dpre, std::span<float>(grads_.data() + info.bias_offset, static_cast<size_t>(info.bias_size)));
}

// One phase of the MoE block at local layer `local` in the pass of `mb`: true with *out set when
// the block waits for an exchange, false when the block is done (mb.cur holds its result).
absl::StatusOr<bool> MlpStage::StepMoe(int local, int micro_batch, MicroBatch& mb,
                                       StageExchange* out, const LayerGradsDoneFn& on_layer_grads) {
  MoeBlock& block = *moe_[static_cast<size_t>(local)];
  const bool forward = mb.pass == Pass::kForward || mb.pass == Pass::kInfer;
  switch (mb.moe_phase) {
    case 0:
      if (forward) {
        RP_RETURN_IF_ERROR(block.BeginForward(micro_batch, mb.cur, mb.pass == Pass::kForward));
      } else {
        RP_RETURN_IF_ERROR(block.BeginBackward(micro_batch, mb.cur, mb.pass == Pass::kBackward));
      }
      mb.cur = Tensor();
      break;
    case 1:
      RP_RETURN_IF_ERROR(forward ? block.ForwardExperts(micro_batch)
                                 : block.BackwardExperts(micro_batch));
      break;
    default:
      if (forward) {
        RP_ASSIGN_OR_RETURN(mb.cur, block.EndForward(micro_batch));
      } else {
        RP_ASSIGN_OR_RETURN(mb.cur, block.EndBackward(micro_batch));
        if (mb.pass == Pass::kBackward && on_layer_grads) on_layer_grads(local);
      }
      mb.moe_phase = 0;
      return false;
  }
  ++mb.moe_phase;
  *out = StageExchange{.kind = StageExchange::Kind::kEpAllToAll, .tp_buffer = {},
                       .ep = &block.exchange(micro_batch)};
  return true;
}

// Dense layer `l` forward: true with *out set when it waits for the TP all-reduce of its partial
// sum (call again with the sum in mb.cur), false when the layer is done.
absl::StatusOr<bool> MlpStage::DenseForward(int l, MicroBatch& mb, StageExchange* out) {
  const LayerInfo& info = layers_[static_cast<size_t>(l)];
  const bool store = mb.pass == Pass::kForward;
  if (!mb.awaiting) {
    Tensor y = pool_.ForOverwrite(mb.rows, info.out);  // MatMul writes it whole
    RP_RETURN_IF_ERROR(
        MatMul(mb.cur, ConstMatrixView(params_.data() + info.weight_offset, info.in, info.out), y));
    if (store) {
      Store(&mb.x[static_cast<size_t>(l)], std::move(mb.cur), mb);
    } else {
      pool_.Recycle(std::move(mb.cur));
    }
    mb.cur = std::move(y);
    if (info.kind == ShardKind::kRowParallel && tp_ > 1) {
      mb.awaiting = true;  // partial sum: the TP group reduces it, then we add the bias
      *out = StageExchange{.kind = StageExchange::Kind::kTpAllReduce, .tp_buffer = mb.cur.span()};
      return true;
    }
  }
  mb.awaiting = false;
  RP_RETURN_IF_ERROR(AddBias(
      mb.cur, std::span<const float>(params_.data() + info.bias_offset, info.bias_size)));
  if (info.activation) {
    if (store) Store(&mb.pre[static_cast<size_t>(l)], pool_.Copy(mb.cur), mb);
    RP_RETURN_IF_ERROR(ActivationForward(activation_, mb.cur, mb.cur));
  }
  return false;
}

// Dense layer `l` backward: true with *out set when it waits for the TP all-reduce of its partial
// input gradient, false when the layer is done.
absl::StatusOr<bool> MlpStage::DenseBackward(int l, MicroBatch& mb, StageExchange* out,
                                             const LayerGradsDoneFn& on_layer_grads) {
  const LayerInfo& info = layers_[static_cast<size_t>(l)];
  const bool fused = mb.pass == Pass::kBackward;
  if (mb.awaiting) {
    mb.awaiting = false;
    return false;
  }
  Tensor dpre = std::move(mb.cur);
  Tensor& pre = mb.pre[static_cast<size_t>(l)];
  if (info.activation) {
    RP_RETURN_IF_ERROR(ActivationBackward(activation_, pre, dpre, dpre));
    Free(&pre);
  }
  Tensor& x = mb.x[static_cast<size_t>(l)];
  if (fused) {
    RP_RETURN_IF_ERROR(AccumulateWeightGrads(l, x, dpre));
    Free(&x);
    if (on_layer_grads) on_layer_grads(l);
  }
  Tensor dx;
  if (info.layer != 0) {
    dx = pool_.ForOverwrite(mb.rows, info.in);  // MatMulTransposedB writes it whole
    RP_RETURN_IF_ERROR(MatMulTransposedB(
        dpre, ConstMatrixView(params_.data() + info.weight_offset, info.in, info.out), dx,
        &scratch_));
  }
  if (fused) {
    pool_.Recycle(std::move(dpre));
  } else {
    Store(&mb.dpre[static_cast<size_t>(l)], std::move(dpre), mb);
  }
  mb.cur = std::move(dx);
  if (info.layer != 0 && info.kind == ShardKind::kColumnParallel && tp_ > 1) {
    mb.awaiting = true;  // partial input gradient: the TP group reduces it
    *out = StageExchange{.kind = StageExchange::Kind::kTpAllReduce, .tp_buffer = mb.cur.span()};
    return true;
  }
  return false;
}

absl::StatusOr<StageExchange> MlpStage::RunToExchange(int micro_batch,
                                                      const LayerGradsDoneFn& on_layer_grads) {
  RP_ASSIGN_OR_RETURN(MicroBatch * mb, Find(micro_batch, "RunToExchange"));
  if (!mb->active || mb->finished) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "RunToExchange: stage %d (tp rank %d) micro-batch %d has no pass in progress", stage_,
        tp_rank_, micro_batch));
  }
  StageExchange exchange;
  const int n = static_cast<int>(layers_.size());
  const bool forward = mb->pass == Pass::kForward || mb->pass == Pass::kInfer;
  while (forward ? mb->cursor < n : mb->cursor >= 0) {
    const int l = mb->cursor;
    bool waiting = false;
    if (layers_[static_cast<size_t>(l)].kind == ShardKind::kMoe) {
      RP_ASSIGN_OR_RETURN(waiting, StepMoe(l, micro_batch, *mb, &exchange, on_layer_grads));
    } else if (forward) {
      RP_ASSIGN_OR_RETURN(waiting, DenseForward(l, *mb, &exchange));
    } else {
      RP_ASSIGN_OR_RETURN(waiting, DenseBackward(l, *mb, &exchange, on_layer_grads));
    }
    if (waiting) return exchange;
    mb->cursor += forward ? 1 : -1;
  }
  mb->finished = true;
  return StageExchange{};
}

absl::StatusOr<std::span<float>> MlpStage::RunToAllReduce(int micro_batch,
                                                          const LayerGradsDoneFn& on_layer_grads) {
  while (true) {
    RP_ASSIGN_OR_RETURN(StageExchange ex, RunToExchange(micro_batch, on_layer_grads));
    switch (ex.kind) {
      case StageExchange::Kind::kDone: return std::span<float>();
      case StageExchange::Kind::kTpAllReduce: return ex.tp_buffer;
      case StageExchange::Kind::kEpAllToAll:
        if (ep_ != 1) {
          return absl::FailedPreconditionError(absl::StrFormat(
              "RunToAllReduce: stage %d (ep rank %d) has MoE blocks with ep=%d; drive it with "
              "RunToExchange",
              stage_, ep_rank_, ep_));
        }
        ExchangeLocally(*ex.ep);
        break;
    }
  }
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
      Retire(it);
      break;
  }
  return result;
}

absl::StatusOr<Tensor> MlpStage::RunPass(Pass pass, int micro_batch, ConstMatrixView input,
                                         const TpAllReduceFn& tp_allreduce,
                                         const LayerGradsDoneFn& on_layer_grads,
                                         const EpExchangeFn& ep_exchange) {
  RP_RETURN_IF_ERROR(BeginPass(pass, micro_batch, input));
  while (true) {
    RP_ASSIGN_OR_RETURN(StageExchange ex, RunToExchange(micro_batch, on_layer_grads));
    if (ex.kind == StageExchange::Kind::kDone) break;
    if (ex.kind == StageExchange::Kind::kTpAllReduce) {
      if (!tp_allreduce) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "stage %d (tp rank %d): tp=%d needs a tp_allreduce function", stage_, tp_rank_, tp_));
      }
      RP_RETURN_IF_ERROR(tp_allreduce(ex.tp_buffer));
    } else if (ep_exchange) {
      RP_RETURN_IF_ERROR(ep_exchange(*ex.ep));
    } else if (ep_ == 1) {
      ExchangeLocally(*ex.ep);
    } else {
      return absl::InvalidArgumentError(absl::StrFormat(
          "stage %d (ep rank %d): ep=%d needs an ep_exchange function", stage_, ep_rank_, ep_));
    }
  }
  return EndPass(micro_batch);
}

absl::StatusOr<Tensor> MlpStage::Forward(int micro_batch, ConstMatrixView input,
                                         const TpAllReduceFn& tp_allreduce,
                                         const EpExchangeFn& ep_exchange) {
  if (micro_batch < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("micro_batch must be >= 0, got %d", micro_batch));
  }
  return RunPass(Pass::kForward, micro_batch, input, tp_allreduce, nullptr, ep_exchange);
}

absl::StatusOr<Tensor> MlpStage::Infer(ConstMatrixView input, const TpAllReduceFn& tp_allreduce,
                                       const EpExchangeFn& ep_exchange) {
  return RunPass(Pass::kInfer, kInferKey, input, tp_allreduce, nullptr, ep_exchange);
}

absl::StatusOr<Tensor> MlpStage::Backward(int micro_batch, ConstMatrixView output_grad,
                                          const TpAllReduceFn& tp_allreduce,
                                          const LayerGradsDoneFn& on_layer_grads,
                                          const EpExchangeFn& ep_exchange) {
  return RunPass(Pass::kBackward, micro_batch, output_grad, tp_allreduce, on_layer_grads,
                 ep_exchange);
}

absl::StatusOr<Tensor> MlpStage::BackwardInput(int micro_batch, ConstMatrixView output_grad,
                                               const TpAllReduceFn& tp_allreduce,
                                               const EpExchangeFn& ep_exchange) {
  return RunPass(Pass::kBackwardInput, micro_batch, output_grad, tp_allreduce, nullptr,
                 ep_exchange);
}

absl::Status MlpStage::BackwardWeight(int micro_batch, const LayerGradsDoneFn& on_layer_grads) {
  RP_ASSIGN_OR_RETURN(MicroBatch * mb, Find(micro_batch, "BackwardWeight"));
  if (!mb->input_grad_done || mb->active) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "BackwardWeight: stage %d (tp rank %d) micro-batch %d has not finished BackwardInput",
        stage_, tp_rank_, micro_batch));
  }
  for (int l = static_cast<int>(layers_.size()) - 1; l >= 0; --l) {
    if (MoeBlock* block = moe_[static_cast<size_t>(l)].get()) {
      RP_RETURN_IF_ERROR(block->BackwardWeight(micro_batch));
      if (on_layer_grads) on_layer_grads(l);
      continue;
    }
    Tensor& x = mb->x[static_cast<size_t>(l)];
    Tensor& dpre = mb->dpre[static_cast<size_t>(l)];
    RP_RETURN_IF_ERROR(AccumulateWeightGrads(l, x, dpre));
    Free(&x);
    Free(&dpre);
    if (on_layer_grads) on_layer_grads(l);
  }
  Retire(states_.find(micro_batch));
  return absl::OkStatus();
}

}  // namespace rp
