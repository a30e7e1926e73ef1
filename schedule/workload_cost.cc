#include "schedule/workload_cost.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "comm/ring_timing.h"
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
  const uint64_t hidden = static_cast<uint64_t>(f.hidden);
  const uint64_t layer_params = 12ull * hidden * hidden + 13ull * hidden;
  const int K = pp * v;
  TransformerCost out;
  out.peak_tflops = peak;
  // Model stage k's own costs and sizes (its balanced share of the layers).
  std::vector<StageFlops> stage_flops(static_cast<size_t>(K));
  for (int k = 0; k < K; ++k) {
    const int layers = BalancedLayers(f.layers, K, k);
    StageFlops& sf = stage_flops[static_cast<size_t>(k)];
    sf.forward = layers * layer_fwd / t;
    sf.backward = 2 * sf.forward;
    sf.weight_grad = sf.forward;
    const double stored = layers * s * b * h * (10.0 + 24.0 / t);
    const double grad = static_cast<double>(layers) * static_cast<double>(layer_params) / t * 4;
    if (stored > 0x1p62 || grad > 0x1p62) {
      return absl::InvalidArgumentError("the described model's sizes do not fit 2^62 bytes");
    }
    sf.activation_bytes = static_cast<uint64_t>(stored);
    // Between Bi and W the same bytes (the zero-bubble paper's accounting: W needs the layer inputs
    // and output gradients, about what F stored).
    out.bytes.stage_stored.push_back({.after_forward = sf.activation_bytes, .after_input_grad = sf.activation_bytes});
    out.bytes.stage_gradient.push_back(static_cast<uint64_t>(layers) * layer_params / static_cast<uint64_t>(tp) * 4);
    out.bytes.stage_output.push_back(k + 1 < K ? tokens * hidden * 2 : 0);  // bf16
    // Two all-reduces of b·s·h bf16 values per layer each way, modeled in fp32 elements, so the
    // bf16 volume is passed as its byte count.
    const uint64_t tp_bytes = tp > 1 ? static_cast<uint64_t>(layers) * 2 * tokens * hidden * 2 : 0;
    out.bytes.stage_tp.push_back({tp_bytes, tp_bytes});
  }
  // Pipeline rank r: the sum of its chunks with the loop placement (stage c·pp + r on rank r);
  // PlaceStageCosts re-sums them for another program's placement.
  std::vector<StageFlops> rank_flops(static_cast<size_t>(pp));
  out.bytes.stored.assign(static_cast<size_t>(pp), 0);
  for (int r = 0; r < pp; ++r) {
    StageFlops& rf = rank_flops[static_cast<size_t>(r)];
    uint64_t gradient = 0;
    for (int c = 0; c < v; ++c) {
      const StageFlops& sf = stage_flops[static_cast<size_t>(c * pp + r)];
      rf.forward += sf.forward;
      rf.backward += sf.backward;
      rf.weight_grad += sf.weight_grad;
      rf.activation_bytes += sf.activation_bytes;
      gradient += out.bytes.stage_gradient[static_cast<size_t>(c * pp + r)];
    }
    out.bytes.gradient = std::max(out.bytes.gradient, gradient);
    if (rf.backward / flops_per_ns > kMaxOpNanos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the backward of pipeline rank ", r, " would take ", rf.backward / flops_per_ns / 1e6,
          " ms per micro-batch; at most 1e9 ms"));
    }
    out.bytes.stored[static_cast<size_t>(r)] = rf.activation_bytes;
  }
  RP_ASSIGN_OR_RETURN(out.cost, CostModel::FromFlops(rank_flops, peak * f.efficiency));
  RP_ASSIGN_OR_RETURN(const CostModel per_stage, CostModel::FromFlops(stage_flops, peak * f.efficiency));
  out.cost.model_stages = per_stage.stages;
  out.cost.stage_stored = out.bytes.stage_stored;
  out.bytes.activation_message = tokens * hidden * 2;  // bf16
  out.bytes.tp_allreduce = 0;
  for (const auto& [fwd, bwd] : out.bytes.stage_tp) out.bytes.tp_allreduce = std::max(out.bytes.tp_allreduce, fwd);
  return out;
}

absl::Status PlaceStageCosts(const Program& program, CostModel& cost) {
  const int p = program.num_ranks, K = program.num_model_stages();
  for (const auto& [name, size] : {std::pair{"model_stages", cost.model_stages.size()},
                                   std::pair{"stage_stored", cost.stage_stored.size()}}) {
    if (size != 0 && size != static_cast<size_t>(K)) {
      return absl::InvalidArgumentError(
          absl::StrCat("cost model: ", name, " has ", size, " entries, not one per model stage (", K, ")"));
    }
  }
  if (cost.stages.empty() || (cost.stages.size() != 1 && cost.stages.size() != static_cast<size_t>(p))) {
    return absl::InvalidArgumentError(
        absl::StrCat("cost model has ", cost.stages.size(), " stage entries, expected 1 or ", p));
  }
  if (cost.model_stages.empty() && cost.stage_stored.empty()) return absl::OkStatus();
  if (cost.stages.size() == 1) cost.stages.assign(static_cast<size_t>(p), cost.stages[0]);
  const int64_t dirs = program.num_directions();
  for (int r = 0; r < p; ++r) {
    StageCost& rc = cost.stages[static_cast<size_t>(r)];
    StageCost sum;
    uint64_t stored = 0;
    for (int c = 0; c < program.num_chunks; ++c) {
      const size_t k = static_cast<size_t>(program.ModelStage(r, c));
      if (!cost.model_stages.empty()) {
        sum.forward += cost.model_stages[k].forward;
        sum.backward += cost.model_stages[k].backward;
        sum.weight_grad += cost.model_stages[k].weight_grad;
      }
      if (!cost.stage_stored.empty()) stored += cost.stage_stored[k].after_forward;
    }
    if (!cost.model_stages.empty()) {
      rc.forward = sum.forward / dirs;
      rc.backward = sum.backward / dirs;
      rc.weight_grad = sum.weight_grad / dirs;
    }
    if (!cost.stage_stored.empty()) rc.activation_bytes = stored / static_cast<uint64_t>(dirs);
  }
  return absl::OkStatus();
}

absl::StatusOr<WorkloadBytes> MlpWorkloadBytes(const MlpConfig& mlp, int pp, int v, int tp,
                                               const std::vector<int>& layers_per_stage, int microbatch_size) {
  const int k_stages = pp * v;
  RP_ASSIGN_OR_RETURN(ModelPartition part, PartitionMlp(mlp, k_stages, tp, layers_per_stage));
  WorkloadBytes b;
  b.stored.assign(static_cast<size_t>(pp), 0);
  std::vector<uint64_t> grads(static_cast<size_t>(pp), 0);
  const uint64_t rows = static_cast<uint64_t>(microbatch_size);
  for (int k = 0; k < k_stages; ++k) {
    RP_ASSIGN_OR_RETURN(const std::vector<MlpStage::LayerInfo> layers, StageLayers(mlp, part, k));
    const int rank = k % pp;
    const auto gradient = static_cast<uint64_t>(layers.back().end_offset) * sizeof(float);
    grads[static_cast<size_t>(rank)] += gradient;
    b.stage_gradient.push_back(gradient);
    const StoredActivationBytes kept = StageStoredBytes(layers, mlp, microbatch_size);
    const auto after_forward = static_cast<uint64_t>(kept.after_forward);
    b.stored[static_cast<size_t>(rank)] += after_forward;
    b.stage_stored.push_back({.after_forward = after_forward,
                              .after_input_grad = static_cast<uint64_t>(kept.after_input_grad)});
    const uint64_t out =
        k + 1 < k_stages ? rows * static_cast<uint64_t>(mlp.out_dim(part.end_layer(k) - 1)) * sizeof(float) : 0;
    b.stage_output.push_back(out);
    b.activation_message = std::max(b.activation_message, out);
    uint64_t fwd = 0, bwd = 0;
    for (const MlpStage::LayerInfo& l : layers) {
      if (l.kind == ShardKind::kRowParallel) fwd += rows * static_cast<uint64_t>(l.out) * sizeof(float);
      if (l.kind == ShardKind::kColumnParallel && l.layer > 0) {
        bwd += rows * static_cast<uint64_t>(l.in) * sizeof(float);
      }
    }
    if (tp == 1) fwd = bwd = 0;
    b.stage_tp.push_back({fwd, bwd});
    b.tp_allreduce = std::max({b.tp_allreduce, fwd, bwd});
  }
  b.gradient = *std::max_element(grads.begin(), grads.end());
  return b;
}

namespace {

// Bytes one rank of an n-rank ring all-reduce of `elements` modeled FP32 elements sends: 2(n − 1)
// steps of one modeled chunk in K segments (comm/ring_timing.h), codec metadata included.
uint64_t RingAllReduceWireBytes(int n, uint64_t elements, size_t segment_bytes, comm::Codec codec) {
  if (n <= 1) return 0;
  const comm::ring::TimedShape shape = comm::ring::TimedShape::Ring(
      n, elements, segment_bytes == 0 ? ~size_t{0} / 8 : segment_bytes / 4, codec, 0);
  uint64_t chunk = 0;
  for (int k = 0; k < shape.segments(); ++k) chunk += shape.segment_bytes(k);
  return 2 * static_cast<uint64_t>(n - 1) * chunk;
}

}  // namespace

std::vector<PredictedWire> PredictWireBytes(const ExecutionPlan& plan) {
  const int pp = static_cast<int>(plan.ranks.size());
  const int tp = plan.grid.shape().tp;
  std::vector<PredictedWire> out(static_cast<size_t>(pp));
  for (int s = 0; s < pp; ++s) {
    PredictedWire& w = out[static_cast<size_t>(s)];
    const size_t seg = plan.ring_segment_bytes;
    for (const Op& op : plan.options.program.ranks[static_cast<size_t>(s)]) {
      if (IsSend(op.kind)) w.p2p += op.bytes;
      if (!IsCompute(op.kind) || tp <= 1) continue;
      auto add_pass = [&](int chunk, int pass) {
        for (uint64_t e : plan.Chunk(s, chunk).tp_elements[static_cast<size_t>(pass)]) {
          w.tp += RingAllReduceWireBytes(tp, e, seg, comm::Codec::kFp32);
        }
      };
      if (op.kind == OpKind::kForwardBackward) {
        add_pass(op.chunk, 0);
        add_pass(op.backward_chunk, PassIndex(OpKind::kBackward));
      } else {
        add_pass(op.chunk, PassIndex(op.kind));
      }
    }
    const int rank = plan.grid.RankOf({0, s, 0});
    for (int c = 0; c < plan.v; ++c) {
      for (const BucketPlan& b : plan.Chunk(s, c).buckets) {
        // An expert bucket (EP) is reduced over the expert-data-parallel group, not DP.
        const int n = static_cast<int>(plan.BucketGroup(rank, c, b, nullptr).size());
        w.dp += RingAllReduceWireBytes(n, b.modeled_elements, seg, plan.options.codec);
      }
    }
  }
  return out;
}

}  // namespace rp::schedule
