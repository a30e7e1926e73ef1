#include "runtime/model/reference_trainer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "runtime/model/kernels.h"
#include "runtime/status_macros.h"

namespace rp {
namespace {
std::vector<MlpStage*> Raw(const std::vector<std::unique_ptr<MlpStage>>& v) {
  std::vector<MlpStage*> out;
  for (const auto& p : v) out.push_back(p.get());
  return out;
}
}  // namespace

absl::StatusOr<std::unique_ptr<ReferenceTrainer>> ReferenceTrainer::Create(
    const ReferenceOptions& options, const Dataset* data) {
  if (data == nullptr) return absl::InvalidArgumentError("ReferenceTrainer: data is null");
  RP_RETURN_IF_ERROR(ValidateBatchLayout(options.layout));
  RP_RETURN_IF_ERROR(ValidateOptimizerConfig(options.optimizer));
  if (options.model.input_dim != data->input_dim()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("model input_dim %d differs from the data set's %d",
                        options.model.input_dim, data->input_dim()));
  }
  if (options.model.classes != data->classes()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model classes %d differ from the data set's %d", options.model.classes, data->classes()));
  }
  auto t = std::unique_ptr<ReferenceTrainer>(new ReferenceTrainer());
  t->options_ = options;
  t->data_ = data;
  RP_ASSIGN_OR_RETURN(t->partition_, PartitionMlp(options.model, options.num_stages, options.tp,
                                                  options.layers_per_stage));
  const int S = t->partition_.num_stages(), T = options.tp;
  t->stages_.resize(static_cast<size_t>(S));
  t->optimizers_.resize(static_cast<size_t>(S));
  t->grad_total_.resize(static_cast<size_t>(S));
  for (int s = 0; s < S; ++s) {
    for (int r = 0; r < T; ++r) {
      RP_ASSIGN_OR_RETURN(auto st, MlpStage::Create(options.model, t->partition_, s, r));
      RP_ASSIGN_OR_RETURN(auto opt, Optimizer::Create(options.optimizer, st->params().size()));
      t->grad_total_[static_cast<size_t>(s)].emplace_back(st->grads().size(), 0.0f);
      t->stages_[static_cast<size_t>(s)].push_back(std::move(st));
      t->optimizers_[static_cast<size_t>(s)].push_back(std::move(opt));
    }
  }
  return t;
}

absl::StatusOr<Tensor> ReferenceTrainer::ForwardAll(MlpStage::Pass pass, int micro_batch,
                                                    ConstMatrixView x) {
  Tensor act;
  for (size_t s = 0; s < stages_.size(); ++s) {
    const std::vector<MlpStage*> shards = Raw(stages_[s]);
    RP_ASSIGN_OR_RETURN(act, RunTpGroupSerial(shards, pass, micro_batch,
                                              s == 0 ? x : ConstMatrixView(act)));
  }
  return act;
}

absl::StatusOr<StepResult> ReferenceTrainer::Step() {
  const BatchLayout& L = options_.layout;
  const float grad_scale = 1.0f / static_cast<float>(L.global_batch());
  double loss_sum = 0.0;
  int64_t correct = 0;
  for (int d = 0; d < L.dp; ++d) {
    for (auto& row : stages_) {
      for (auto& st : row) st->ZeroGrads();
    }
    for (int j = 0; j < L.microbatches; ++j) {
      RP_ASSIGN_OR_RETURN(Batch batch, data_->TrainMicroBatch(L, step_, d, j));
      RP_ASSIGN_OR_RETURN(Tensor logits, ForwardAll(MlpStage::Pass::kForward, j, batch.inputs));
      Tensor grad(logits.rows(), logits.cols());
      RP_ASSIGN_OR_RETURN(LossStats ls,
                          SoftmaxCrossEntropy(logits, batch.labels, grad_scale, grad));
      loss_sum += ls.loss_sum;
      correct += ls.correct;
      for (size_t s = stages_.size(); s-- > 0;) {
        const std::vector<MlpStage*> shards = Raw(stages_[s]);
        RP_ASSIGN_OR_RETURN(grad, RunTpGroupSerial(shards, MlpStage::Pass::kBackward, j, grad));
      }
    }
    for (size_t s = 0; s < stages_.size(); ++s) {
      for (size_t r = 0; r < stages_[s].size(); ++r) {
        std::span<const float> g = stages_[s][r]->grads();
        std::vector<float>& total = grad_total_[s][r];
        if (d == 0) {
          std::copy(g.begin(), g.end(), total.begin());
        } else {
          RP_RETURN_IF_ERROR(Accumulate(total, g));
        }
      }
    }
  }
  for (size_t s = 0; s < stages_.size(); ++s) {
    for (size_t r = 0; r < stages_[s].size(); ++r) {
      MlpStage& st = *stages_[s][r];
      std::copy(grad_total_[s][r].begin(), grad_total_[s][r].end(), st.grads().begin());
      RP_RETURN_IF_ERROR(optimizers_[s][r]->Step(st.params(), st.grads()));
    }
  }
  StepResult result;
  result.step = step_;
  const double b = static_cast<double>(L.global_batch());
  result.loss = loss_sum / b;
  result.accuracy = static_cast<double>(correct) / b;
  ++step_;
  return result;
}

absl::StatusOr<EvalResult> ReferenceTrainer::Evaluate(Split split) {
  constexpr int64_t kChunk = 512;
  EvalResult r;
  double loss_sum = 0.0;
  int64_t correct = 0;
  const int64_t n = data_->size(split);
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t count = std::min(kChunk, n - begin);
    RP_ASSIGN_OR_RETURN(Batch batch, data_->Slice(split, begin, count));
    RP_ASSIGN_OR_RETURN(Tensor logits, ForwardAll(MlpStage::Pass::kInfer, 0, batch.inputs));
    RP_ASSIGN_OR_RETURN(LossStats ls, SoftmaxCrossEntropy(logits, batch.labels, 1.0f, {}));
    loss_sum += ls.loss_sum;
    correct += ls.correct;
  }
  r.samples = n;
  r.loss = loss_sum / static_cast<double>(n);
  r.accuracy = static_cast<double>(correct) / static_cast<double>(n);
  return r;
}

}  // namespace rp
