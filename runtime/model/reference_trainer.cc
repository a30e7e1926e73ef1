#include "runtime/model/reference_trainer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "runtime/model/kernels.h"
#include "runtime/model/stage_group.h"
#include "runtime/status_macros.h"

namespace rp {
namespace {
std::vector<ConstMatrixView> Views(const std::vector<Tensor>& v) {
  return std::vector<ConstMatrixView>(v.begin(), v.end());
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
  if (options.ep < 1 || options.layout.dp % options.ep != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "ep: %d must be >= 1 and divide dp (%d)", options.ep, options.layout.dp));
  }
  if (!options.ring_buckets.empty() && options.ep > 1 && !options.shard_experts) {
    return absl::InvalidArgumentError(
        "ring_buckets: with ep > 1 needs shard_experts (bucket offsets are the EP shards')");
  }
  if (options.ep_wire && options.ep > 1 && !options.shard_experts) {
    return absl::InvalidArgumentError(
        "ep_wire: with ep > 1 needs shard_experts (the wire acts on blocks between EP shards)");
  }
  auto t = std::unique_ptr<ReferenceTrainer>(new ReferenceTrainer());
  t->options_ = options;
  t->data_ = data;
  const int shard_ep = options.shard_experts ? options.ep : 1;
  RP_ASSIGN_OR_RETURN(t->partition_, PartitionMlp(options.model, options.num_stages, options.tp,
                                                  options.layers_per_stage, shard_ep));
  const size_t S = static_cast<size_t>(t->partition_.num_stages());
  if (!options.ring_buckets.empty() && options.ring_buckets.size() != S) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "ring_buckets: %d entries, expected one per stage (%d)", options.ring_buckets.size(), S));
  }
  const size_t G = static_cast<size_t>(options.ep), T = static_cast<size_t>(options.tp);
  const double aux_weight = 1.0 / (static_cast<double>(options.layout.dp) *
                                   static_cast<double>(options.layout.microbatches));
  t->stages_.resize(S);
  t->optimizers_.resize(S);
  t->grad_total_.resize(S);
  for (size_t s = 0; s < S; ++s) {
    t->stages_[s].resize(G);
    t->optimizers_[s].resize(G);
    t->grad_total_[s].resize(G);
    for (size_t q = 0; q < G; ++q) {
      for (size_t r = 0; r < T; ++r) {
        RP_ASSIGN_OR_RETURN(auto st, MlpStage::Create(options.model, t->partition_,
                                                      static_cast<int>(s), static_cast<int>(r),
                                                      options.shard_experts ? static_cast<int>(q)
                                                                            : 0));
        st->SetAuxLossWeight(aux_weight);
        RP_ASSIGN_OR_RETURN(auto opt, Optimizer::Create(options.optimizer, st->params().size()));
        t->grad_total_[s][q].emplace_back(st->grads().size(), 0.0f);
        t->stages_[s][q].push_back(std::move(st));
        t->optimizers_[s][q].push_back(std::move(opt));
      }
    }
  }
  return t;
}

std::vector<MlpStage*> ReferenceTrainer::Group(size_t stage) const {
  std::vector<MlpStage*> out;
  for (const auto& replica : stages_[stage]) {
    for (const auto& shard : replica) out.push_back(shard.get());
  }
  return out;
}

// Forward (the whole model, replica 0's shards; with shard_experts every EP rank's experts serve
// and the other ranks pass one zero row each).
absl::StatusOr<Tensor> ReferenceTrainer::InferAll(ConstMatrixView x) {
  const int G = options_.shard_experts ? options_.ep : 1;
  std::vector<Tensor> act(static_cast<size_t>(G), Tensor(1, x.cols));
  act[0] = Tensor(x.rows, x.cols, std::vector<float>(x.data, x.data + x.size()));
  for (size_t s = 0; s < stages_.size(); ++s) {
    std::vector<MlpStage*> shards = Group(s);
    shards.resize(static_cast<size_t>(G) * static_cast<size_t>(options_.tp));
    RP_ASSIGN_OR_RETURN(act, RunStageGroupSerial(shards, options_.tp, MlpStage::Pass::kInfer, 0,
                                                 Views(act)));
  }
  return std::move(act[0]);
}

// Forward and backward of every micro-batch of EP group `group`, its replicas in lockstep.
absl::Status ReferenceTrainer::TrainGroup(int group, std::vector<double>& loss_sums,
                                          int64_t& correct) {
  const BatchLayout& L = options_.layout;
  const int G = options_.ep;
  const float grad_scale = 1.0f / static_cast<float>(L.global_batch());
  for (int j = 0; j < L.microbatches; ++j) {
    std::vector<Batch> batches;
    std::vector<Tensor> act;
    for (int q = 0; q < G; ++q) {
      RP_ASSIGN_OR_RETURN(Batch b, data_->TrainMicroBatch(L, step_, group * G + q, j));
      act.push_back(b.inputs);
      batches.push_back(std::move(b));
    }
    for (size_t s = 0; s < stages_.size(); ++s) {
      RP_ASSIGN_OR_RETURN(act, RunStageGroupSerial(Group(s), options_.tp,
                                                   MlpStage::Pass::kForward, j, Views(act),
                                                   options_.ep_wire));
    }
    std::vector<Tensor> grad;
    for (int q = 0; q < G; ++q) {
      const Tensor& logits = act[static_cast<size_t>(q)];
      grad.emplace_back(logits.rows(), logits.cols());
      RP_ASSIGN_OR_RETURN(LossStats ls, SoftmaxCrossEntropy(logits, batches[q].labels,
                                                            grad_scale, grad.back()));
      loss_sums[static_cast<size_t>((group * G + q) * L.microbatches + j)] = ls.loss_sum;
      correct += ls.correct;
    }
    for (size_t s = stages_.size(); s-- > 0;) {
      RP_ASSIGN_OR_RETURN(grad, RunStageGroupSerial(Group(s), options_.tp,
                                                    MlpStage::Pass::kBackward, j, Views(grad),
                                                    options_.ep_wire));
    }
  }
  return absl::OkStatus();
}

// Adds group `group`'s gradients: non-expert ranges of every replica into total [s][0][t] in
// replica order, expert ranges of EP rank q into total [s][q][t] in group order.
absl::Status ReferenceTrainer::AddToTotals(int group) {
  for (size_t s = 0; s < stages_.size(); ++s) {
    for (size_t q = 0; q < stages_[s].size(); ++q) {
      for (size_t t = 0; t < stages_[s][q].size(); ++t) {
        const MlpStage& st = *stages_[s][q][t];
        for (const ParamRange& r : st.param_ranges()) {
          const bool expert = r.group == ReduceGroup::kExpertDataParallel;
          std::span<const float> g = st.grads().subspan(r.offset, r.size);
          std::span<float> total = std::span<float>(grad_total_[s][expert ? q : 0][t])
                                       .subspan(r.offset, r.size);
          if (group == 0 && (expert || q == 0)) {
            std::copy(g.begin(), g.end(), total.begin());
          } else {
            RP_RETURN_IF_ERROR(Accumulate(total, g));
          }
        }
      }
    }
  }
  return absl::OkStatus();
}

void ReferenceTrainer::KeepGroupGrads(int group) {
  if (group_grads_.size() <= static_cast<size_t>(group)) group_grads_.resize(group + 1);
  auto& kept = group_grads_[static_cast<size_t>(group)];
  kept.resize(stages_.size());
  for (size_t s = 0; s < stages_.size(); ++s) {
    kept[s].resize(stages_[s].size());
    for (size_t q = 0; q < stages_[s].size(); ++q) {
      kept[s][q].resize(stages_[s][q].size());
      for (size_t t = 0; t < stages_[s][q].size(); ++t) {
        const std::span<const float> g = std::as_const(*stages_[s][q][t]).grads();
        kept[s][q][t].assign(g.begin(), g.end());
      }
    }
  }
}

// Ring order (file comment): each bucket element of shard (stage s, EP rank q, tp rank t) summed
// along its chunk's reduce-scatter over its group's members.
absl::Status ReferenceTrainer::RingSum(size_t s, size_t q, size_t t) {
  MlpStage& st = *stages_[s][q][t];
  const int ep = options_.ep, dp = options_.layout.dp;
  std::vector<bool> covered(st.grads().size(), false);
  for (const ReferenceOptions::RingBucket& b : options_.ring_buckets[s]) {
    const auto range = std::find_if(st.param_ranges().begin(), st.param_ranges().end(),
                                    [&](const ParamRange& r) {
                                      return r.offset <= b.offset &&
                                             b.offset + b.count <= r.offset + r.size;
                                    });
    // With ep == 1 both groups are the whole DP group: a bucket may span both kinds.
    if (b.count < 0 || b.offset < 0 ||
        static_cast<size_t>(b.offset + b.count) > st.grads().size() ||
        (ep > 1 && range == st.param_ranges().end())) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "ring_buckets[%d]: [%d, %d) is not inside one gradient group's range", s, b.offset,
          b.offset + b.count));
    }
    const bool expert = ep > 1 && range->group == ReduceGroup::kExpertDataParallel;
    const int n = expert ? dp / ep : dp;
    // Member at ring position `pos`: replica d = pos (DP), or EP group pos with EP rank q.
    auto value = [&](int pos, int64_t i) {
      const size_t g = static_cast<size_t>(expert ? pos : pos / ep);
      const size_t rank = expert ? q : static_cast<size_t>(pos % ep);
      return group_grads_[g][s][rank][t][static_cast<size_t>(i)];
    };
    const int64_t base = b.count / n, extra = b.count % n;
    for (int c = 0; c < n; ++c) {
      const int64_t begin = c * base + std::min<int64_t>(c, extra);
      const int64_t size = base + (c < extra ? 1 : 0);
      for (int64_t i = b.offset + begin; i < b.offset + begin + size; ++i) {
        float sum = value((c + 1) % n, i);
        for (int k = 2; k <= n; ++k) sum = sum + value((c + k) % n, i);
        st.grads()[static_cast<size_t>(i)] = sum;
        covered[static_cast<size_t>(i)] = true;
      }
    }
  }
  if (std::find(covered.begin(), covered.end(), false) != covered.end()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("ring_buckets[%d]: does not cover every gradient of the stage", s));
  }
  return absl::OkStatus();
}

absl::StatusOr<StepResult> ReferenceTrainer::Step() {
  const BatchLayout& L = options_.layout;
  std::vector<double> loss_sums(static_cast<size_t>(L.dp) * L.microbatches, 0.0);
  int64_t correct = 0;
  for (auto& stage : stages_) {
    for (auto& replica : stage) {
      for (auto& st : replica) st->ResetMoeStats();
    }
  }
  for (int g = 0; g < L.dp / options_.ep; ++g) {
    for (auto& stage : stages_) {
      for (auto& replica : stage) {
        for (auto& st : replica) st->ZeroGrads();
      }
    }
    RP_RETURN_IF_ERROR(TrainGroup(g, loss_sums, correct));
    if (options_.ring_buckets.empty()) {
      RP_RETURN_IF_ERROR(AddToTotals(g));
    } else {
      KeepGroupGrads(g);
    }
  }
  double aux_sum = 0.0;
  for (size_t s = 0; s < stages_.size(); ++s) {
    for (size_t q = 0; q < stages_[s].size(); ++q) {
      aux_sum += stages_[s][q][0]->aux_loss_sum();  // TP ranks repeat their source's MoE blocks
      for (size_t t = 0; t < stages_[s][q].size(); ++t) {
        MlpStage& st = *stages_[s][q][t];
        if (!options_.ring_buckets.empty()) {
          RP_RETURN_IF_ERROR(RingSum(s, q, t));
        } else {
          for (const ParamRange& r : st.param_ranges()) {
            const std::vector<float>& total =
                grad_total_[s][r.group == ReduceGroup::kExpertDataParallel ? q : 0][t];
            std::copy_n(total.begin() + r.offset, r.size, st.grads().begin() + r.offset);
          }
        }
        RP_RETURN_IF_ERROR(optimizers_[s][q][t]->Step(st.params(), st.grads()));
      }
    }
  }
  StepResult result;
  result.step = step_;
  double loss_sum = 0.0;
  for (double l : loss_sums) loss_sum += l;  // replica-major, micro-batch order
  const double b = static_cast<double>(L.global_batch());
  result.loss = loss_sum / b;
  result.accuracy = static_cast<double>(correct) / b;
  result.aux_loss = aux_sum / (static_cast<double>(L.dp) * L.microbatches);
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
    RP_ASSIGN_OR_RETURN(Tensor logits, InferAll(batch.inputs));
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
