#include "schedule/workload_cost.h"

#include <algorithm>
#include <span>

#include "absl/strings/str_cat.h"
#include "runtime/status_macros.h"

namespace rp::schedule {
namespace {

// Largest FLOP-derived op time accepted: 1e9 ms, the bound the fixed cost model puts on its times.
constexpr double kMaxOpNanos = 1e15;

// Layers of model stage k when `layers` are balanced over `stages` (the first layers % stages get one more).
int BalancedLayers(int layers, int stages, int k) { return layers / stages + (k < layers % stages ? 1 : 0); }

}  // namespace

absl::StatusOr<double> DevicePeakTflops(const std::string& device) {
  if (device == "a100") return 312.0;
  if (device == "h100") return 989.0;
  return absl::InvalidArgumentError(absl::StrCat("unknown device '", device, "' (a100, h100)"));
}

double TransformerLayerForwardFlops(const TransformerModel& m) {
  const double b = m.microbatch_size, s = m.seq_len, h = m.hidden;
  return 24.0 * b * s * h * h * (1.0 + s / (6.0 * h));
}

absl::StatusOr<TransformerCost> CostOfTransformer(const TransformerModel& f, int pp, int v, int tp) {
  RP_ASSIGN_OR_RETURN(const double peak, DevicePeakTflops(f.device));
  if (!(f.efficiency > 0 && f.efficiency <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("efficiency must be in (0, 1], got ", f.efficiency));
  }
  if (f.layers < 1 || f.hidden < 1 || f.seq_len < 1 || f.microbatch_size < 1 || pp < 1 || v < 1 || tp < 1) {
    return absl::InvalidArgumentError("layers, hidden, seq_len, microbatch_size, pp, v and tp must be >= 1");
  }
  if (f.layers < pp * v) {
    return absl::InvalidArgumentError(
        absl::StrCat(pp * v, " model stages but the described model has ", f.layers, " layers"));
  }
  const double b = f.microbatch_size, s = f.seq_len, h = f.hidden, t = tp;
  const double layer_fwd = TransformerLayerForwardFlops(f);
  const double flops_per_ns = peak * f.efficiency * 1e3;
  const uint64_t tokens = static_cast<uint64_t>(f.microbatch_size) * static_cast<uint64_t>(f.seq_len);
  const uint64_t layer_params =
      12ull * static_cast<uint64_t>(f.hidden) * static_cast<uint64_t>(f.hidden) + 13ull * static_cast<uint64_t>(f.hidden);
  std::vector<StageFlops> stages(static_cast<size_t>(pp));
  TransformerCost out;
  out.peak_tflops = peak;
  out.bytes.stored.assign(static_cast<size_t>(pp), 0);
  int max_chunk_layers = 0;
  for (int r = 0; r < pp; ++r) {
    int layers = 0;
    for (int c = 0; c < v; ++c) {
      const int n = BalancedLayers(f.layers, pp * v, c * pp + r);
      layers += n;
      max_chunk_layers = std::max(max_chunk_layers, n);
    }
    StageFlops& sf = stages[static_cast<size_t>(r)];
    sf.forward = layers * layer_fwd / t;
    sf.backward = 2 * sf.forward;
    sf.weight_grad = sf.forward;
    if (sf.backward / flops_per_ns > kMaxOpNanos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the backward of pipeline rank ", r, " would take ", sf.backward / flops_per_ns / 1e6,
          " ms per micro-batch; at most 1e9 ms"));
    }
    const double stored = layers * s * b * h * (10.0 + 24.0 / t);
    const double grad = static_cast<double>(layers) * static_cast<double>(layer_params) / t * 4;
    if (stored > 0x1p62 || grad > 0x1p62) {
      return absl::InvalidArgumentError("the described model's sizes do not fit 2^62 bytes");
    }
    sf.activation_bytes = static_cast<uint64_t>(stored);
    out.bytes.stored[static_cast<size_t>(r)] = sf.activation_bytes;
    out.bytes.gradient = std::max(out.bytes.gradient,
                                  static_cast<uint64_t>(layers) * layer_params / static_cast<uint64_t>(tp) * 4);
  }
  RP_ASSIGN_OR_RETURN(out.cost, CostModel::FromFlops(stages, peak * f.efficiency));
  out.bytes.activation_message = tokens * static_cast<uint64_t>(f.hidden) * 2;  // bf16
  // Two all-reduces of b·s·h bf16 values per layer each way. The TP ring is modeled in fp32
  // elements, so the bf16 volume is passed as its byte count.
  out.bytes.tp_allreduce =
      tp > 1 ? static_cast<uint64_t>(max_chunk_layers) * 2 * tokens * static_cast<uint64_t>(f.hidden) * 2 : 0;
  return out;
}

absl::StatusOr<WorkloadBytes> MlpWorkloadBytes(const MlpConfig& mlp, int pp, int v, int tp,
                                               const std::vector<int>& layers_per_stage, int microbatch_size) {
  const int k_stages = pp * v;
  RP_ASSIGN_OR_RETURN(ModelPartition part, PartitionMlp(mlp, k_stages, tp, layers_per_stage));
  WorkloadBytes b;
  b.stored.assign(static_cast<size_t>(pp), 0);
  std::vector<uint64_t> grads(static_cast<size_t>(pp), 0);
  const uint64_t rows = static_cast<uint64_t>(microbatch_size);
  const TpAllReduceFn identity = [](std::span<float>) { return absl::OkStatus(); };
  for (int k = 0; k < k_stages; ++k) {
    RP_ASSIGN_OR_RETURN(auto stage, MlpStage::Create(mlp, part, k, /*tp_rank=*/0));
    const int rank = k % pp;
    grads[static_cast<size_t>(rank)] += stage->params().size() * sizeof(float);
    Tensor x(microbatch_size, stage->input_dim());
    RP_RETURN_IF_ERROR(stage->Forward(0, x, identity).status());
    b.stored[static_cast<size_t>(rank)] += static_cast<uint64_t>(stage->activation_bytes());
    if (k + 1 < k_stages) {
      b.activation_message = std::max(b.activation_message, rows * stage->output_dim() * sizeof(float));
    }
    uint64_t fwd = 0, bwd = 0;
    for (const MlpStage::LayerInfo& l : stage->layers()) {
      if (l.kind == ShardKind::kRowParallel) fwd += rows * static_cast<uint64_t>(l.out) * sizeof(float);
      if (l.kind == ShardKind::kColumnParallel && l.layer > 0) {
        bwd += rows * static_cast<uint64_t>(l.in) * sizeof(float);
      }
    }
    if (tp > 1) b.tp_allreduce = std::max({b.tp_allreduce, fwd, bwd});
  }
  b.gradient = *std::max_element(grads.begin(), grads.end());
  return b;
}

std::vector<PredictedWire> PredictWireBytes(const Program& prog, int dp, int tp, const PredictOptions& options) {
  std::vector<PredictedWire> out(static_cast<size_t>(prog.num_ranks));
  for (int s = 0; s < prog.num_ranks; ++s) {
    PredictedWire& w = out[static_cast<size_t>(s)];
    for (const Op& op : prog.ranks[static_cast<size_t>(s)]) {
      if (IsSend(op.kind)) w.p2p += op.bytes;
      if (op.kind == OpKind::kTpAllReduce && tp > 1) {
        auto c = RingAllReduceCost(tp, op.bytes / 4, LinkParams{}, options.tp_ring);
        if (c.ok()) w.tp += c->wire_bytes / static_cast<uint64_t>(tp);
      }
      if (op.kind == OpKind::kAllReduce && dp > 1) {
        auto c = RingAllReduceCost(dp, op.bytes / 4, LinkParams{}, options.dp_ring);
        if (c.ok()) w.dp += c->wire_bytes / static_cast<uint64_t>(dp);
      }
    }
  }
  return out;
}

}  // namespace rp::schedule
