// Where everything sits (mlp.h): MlpConfig's derived figures and validation, PartitionMlp, and
// MlpStage::LayOut (each local layer's shard, offsets, initial weights, MoE blocks, gradient
// groups).
#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_format.h"
#include "runtime/model/init.h"
#include "runtime/model/mlp.h"
#include "runtime/status_macros.h"

namespace rp {

bool MlpConfig::is_moe_layer(int layer) const {
  return std::binary_search(moe.layers.begin(), moe.layers.end(), layer);
}

int64_t MlpConfig::num_params() const {
  int64_t n = 0;
  for (int l = 0; l < num_layers(); ++l) {
    if (is_moe_layer(l)) {
      n += MoeBlock::Layout{in_dim(l), moe.experts, moe.top_k, moe.expert_hidden, 1, 0}.params();
    } else {
      n += static_cast<int64_t>(in_dim(l)) * out_dim(l) + out_dim(l);
    }
  }
  return n;
}

int64_t MlpConfig::ForwardMacsPerSample(int first, int last) const {
  int64_t n = 0;
  for (int l = first; l < last; ++l) {
    if (is_moe_layer(l)) {  // the router and k experts (an upper bound when tokens are dropped)
      n += static_cast<int64_t>(in_dim(l)) *
           (moe.experts + 2 * static_cast<int64_t>(moe.top_k) * moe.expert_hidden);
    } else {
      n += static_cast<int64_t>(in_dim(l)) * out_dim(l);
    }
  }
  return n;
}

namespace {

absl::Status ValidateMoeConfig(const MlpConfig& config) {
  const MoeConfig& moe = config.moe;
  if (!moe.enabled()) return absl::OkStatus();
  for (size_t i = 0; i < moe.layers.size(); ++i) {
    const int l = moe.layers[i];
    if (i > 0 && l <= moe.layers[i - 1]) {
      return absl::InvalidArgumentError(
          absl::StrFormat("moe_layers: entries must be strictly increasing, got %d after %d", l,
                          moe.layers[i - 1]));
    }
    if (l <= 0 || l >= config.num_layers() - 1) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "moe_layers: layer %d is not a hidden-to-hidden layer (must be in [1, %d])", l,
          config.num_layers() - 2));
    }
    if (config.in_dim(l) != config.out_dim(l)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("moe_layers: layer %d maps %d -> %d; a MoE block needs equal widths", l,
                          config.in_dim(l), config.out_dim(l)));
    }
  }
  if (moe.experts < 1) {
    return absl::InvalidArgumentError(absl::StrFormat("experts must be >= 1, got %d", moe.experts));
  }
  if (moe.top_k < 1 || moe.top_k > 2 || moe.top_k > moe.experts) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "top_k must be 1 or 2 and at most experts (%d), got %d", moe.experts, moe.top_k));
  }
  if (moe.expert_hidden < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("expert_hidden must be >= 1, got %d", moe.expert_hidden));
  }
  if (!std::isfinite(moe.capacity_factor) || moe.capacity_factor < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "capacity_factor must be finite and >= 0 (0 = dropless), got %g", moe.capacity_factor));
  }
  if (!(moe.aux_loss >= 0 && moe.aux_loss <= kMaxAuxLoss)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("aux_loss must be in [0, %g], got %g", kMaxAuxLoss, moe.aux_loss));
  }
  if (!(moe.router_skew >= 0 && moe.router_skew <= kMaxRouterSkew)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("router_skew must be in [0, %g], got %g", kMaxRouterSkew, moe.router_skew));
  }
  return absl::OkStatus();
}

}  // namespace

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
      return absl::InvalidArgumentError(absl::StrFormat(
          "hidden[%d] (width of layer %d) must be >= 1, got %d", i, i, config.hidden[i]));
    }
  }
  return ValidateMoeConfig(config);
}

std::string_view ShardKindName(ShardKind k) {
  switch (k) {
    case ShardKind::kReplicated:
      return "replicated";
    case ShardKind::kColumnParallel:
      return "column-parallel";
    case ShardKind::kRowParallel:
      return "row-parallel";
    case ShardKind::kMoe:
      return "moe";
  }
  return "unknown";
}

std::string_view ReduceGroupName(ReduceGroup g) {
  switch (g) {
    case ReduceGroup::kDataParallel:
      return "data-parallel";
    case ReduceGroup::kExpertDataParallel:
      return "expert-data-parallel";
  }
  return "unknown";
}

namespace {

// Pairs dense layers [begin, end) of stage `stage` as (column, row), ...; an odd last one stays
// replicated.
absl::Status PairDenseRun(const MlpConfig& config, int tp, int stage, int begin, int end,
                          ModelPartition& part) {
  for (int l = begin; l + 1 < end; l += 2) {
    part.layer_kind[static_cast<size_t>(l)] = ShardKind::kColumnParallel;
    part.layer_kind[static_cast<size_t>(l) + 1] = ShardKind::kRowParallel;
    if (config.out_dim(l) % tp != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "layer %d (output width %d) is not divisible by tp=%d (it is the column-parallel "
          "half of a tensor-parallel pair in stage %d)",
          l, config.out_dim(l), tp, stage));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelPartition> PartitionMlp(const MlpConfig& config, int num_stages, int tp,
                                            std::span<const int> layers_per_stage, int ep) {
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
  if (ep < 1) return absl::InvalidArgumentError(absl::StrFormat("ep must be >= 1, got %d", ep));
  if (config.moe.enabled() && config.moe.experts % ep != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("ep: %d does not divide experts (%d)", ep, config.moe.experts));
  }

  ModelPartition part;
  part.tp = tp;
  part.ep = ep;
  part.stage_begin.assign(1, 0);
  if (layers_per_stage.empty()) {
    const int base = num_layers / num_stages, extra = num_layers % num_stages;
    for (int s = 0; s < num_stages; ++s) {
      part.stage_begin.push_back(part.stage_begin.back() + base + (s < extra ? 1 : 0));
    }
  } else {
    if (static_cast<int>(layers_per_stage.size()) != num_stages) {
      return absl::InvalidArgumentError(
          absl::StrFormat("layers_per_stage has %d entries, expected one per stage (%d)",
                          layers_per_stage.size(), num_stages));
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
  for (int l : config.moe.layers) part.layer_kind[static_cast<size_t>(l)] = ShardKind::kMoe;
  for (int s = 0; s < num_stages; ++s) {
    // TP pairs within each run [begin, end) of dense layers (cut at the stage's MoE blocks).
    for (int begin = part.first_layer(s); begin < part.end_layer(s);) {
      int end = begin;
      while (end < part.end_layer(s) && !config.is_moe_layer(end)) ++end;
      RP_RETURN_IF_ERROR(PairDenseRun(config, tp, s, begin, end, part));
      begin = end + 1;
    }
  }
  return part;
}
namespace {

// A dense layer's weights: each element a pure function of (seed, layer, global row, global
// column).
void InitDenseWeights(const MlpConfig& config, const MlpStage::LayerInfo& info, int tp_rank,
                      std::span<float> w) {
  const int full_out = config.out_dim(info.layer);
  const int row0 = info.kind == ShardKind::kRowParallel ? tp_rank * info.in : 0;
  const int col0 = info.kind == ShardKind::kColumnParallel ? tp_rank * info.out : 0;
  const float limit =
      static_cast<float>(std::sqrt(6.0 / static_cast<double>(config.in_dim(info.layer))));
  for (int i = 0; i < info.in; ++i) {
    for (int k = 0; k < info.out; ++k) {
      const int64_t index = static_cast<int64_t>(row0 + i) * full_out + (col0 + k);
      w[static_cast<size_t>(i) * info.out + k] =
          InitUniform(config.seed, info.layer, index) * limit;
    }
  }
}

// Merges neighbouring ranges of one group and drops empty ones.
std::vector<ParamRange> MergeRanges(const std::vector<ParamRange>& ranges) {
  std::vector<ParamRange> merged;
  for (const ParamRange& r : ranges) {
    if (r.size == 0) continue;
    if (!merged.empty() && merged.back().group == r.group) {
      merged.back().size += r.size;
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

}  // namespace

absl::StatusOr<std::vector<MlpStage::LayerInfo>> StageLayers(const MlpConfig& config,
                                                             const ModelPartition& partition,
                                                             int stage, int ep_rank) {
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
        return absl::InvalidArgumentError(
            absl::StrFormat("layer %d (output width %d) is not divisible by tp=%d", l, out, T));
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
    if (info.kind == ShardKind::kMoe) {
      const MoeBlock::Layout lay{in,          config.moe.experts, config.moe.top_k,
                                 config.moe.expert_hidden, partition.ep, ep_rank};
      info.bias_offset = info.expert_offset = offset + lay.router_params();
      info.expert_size = lay.expert_params();
      info.first_expert = lay.first_expert();
      info.local_experts = lay.local_experts();
      offset += lay.params();
    } else {
      offset += static_cast<int64_t>(info.in) * info.out;
      info.bias_offset = offset;
      info.bias_size = info.out;
      offset += info.bias_size;
      info.activation = l != config.num_layers() - 1;
    }
    info.end_offset = offset;
    layers.push_back(info);
  }
  return layers;
}

StoredActivationBytes StageStoredBytes(std::span<const MlpStage::LayerInfo> layers, const MlpConfig& config,
                                       int64_t rows) {
  constexpr int64_t kFloat = sizeof(float);
  StoredActivationBytes b;
  for (const MlpStage::LayerInfo& info : layers) {
    if (info.kind == ShardKind::kMoe) {
      const MoeConfig& moe = config.moe;
      const int64_t cap = ExpertCapacity(moe.capacity_factor, moe.top_k, rows, moe.experts);
      const int64_t kept = int64_t{moe.top_k} * (cap < 0 ? rows : std::min(rows, cap));
      const int64_t d = info.in, h = moe.expert_hidden;
      const int64_t both = kFloat * (rows * (d + moe.experts) + kept * (2 * d + 2 * h));
      b.after_forward += both;
      b.after_input_grad += both;
      continue;
    }
    const int64_t in = info.in, out = info.out;  // each up to 2^31 − 1: summed in int64
    b.after_forward += kFloat * rows * (in + (info.activation ? out : 0));
    b.after_input_grad += kFloat * rows * (in + out);
  }
  return b;
}

// Shards, offsets, initial weights, MoE blocks and gradient groups of the stage's layers.
absl::Status MlpStage::LayOut(const MlpConfig& config, const ModelPartition& partition) {
  RP_ASSIGN_OR_RETURN(layers_, StageLayers(config, partition, stage_, ep_rank_));
  const int64_t offset = layers_.back().end_offset;
  params_.assign(static_cast<size_t>(offset), 0.0f);
  if (!params_only_) grads_.assign(static_cast<size_t>(offset), 0.0f);

  // Weights, MoE blocks, gradient groups.
  for (const LayerInfo& info : layers_) {
    std::span<float> p(params_.data() + info.weight_offset,
                       static_cast<size_t>(info.end_offset - info.weight_offset));
    if (info.kind == ShardKind::kMoe) {
      std::span<float> g = params_only_ ? std::span<float>()
                                        : std::span<float>(grads_.data() + info.weight_offset, p.size());
      RP_ASSIGN_OR_RETURN(std::unique_ptr<MoeBlock> block,
                          MoeBlock::Create(config.moe, info.layer, info.in, config.activation, ep_,
                                           ep_rank_, config.seed, p, g));
      moe_.push_back(std::move(block));
      param_ranges_.push_back(
          {info.weight_offset, info.expert_offset - info.weight_offset, ReduceGroup::kDataParallel});
      param_ranges_.push_back({info.expert_offset, info.end_offset - info.expert_offset,
                               ReduceGroup::kExpertDataParallel});
      continue;
    }
    moe_.push_back(nullptr);
    param_ranges_.push_back(
        {info.weight_offset, info.end_offset - info.weight_offset, ReduceGroup::kDataParallel});
    InitDenseWeights(config, info, tp_rank_, p);
  }
  param_ranges_ = MergeRanges(param_ranges_);
  return absl::OkStatus();
}

}  // namespace rp
