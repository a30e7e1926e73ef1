// What a training workload costs, as data the schedule generators and the predictor take: compute
// time per pipeline rank, the sizes of its messages, and the bytes each device puts on the wire.
//
// Two workloads:
//   * a described transformer (TransformerModel), timed by its FLOPs on a device preset. Per layer
//     and micro-batch of b sequences of s tokens, hidden size h: forward FLOPs =
//     24·b·s·h²·(1 + s/(6h)) (Narayanan et al., 2021), backward = 2 × forward, of which the weight
//     gradient is half; the optimizer is free. Model stage k holds its balanced share of the layers
//     (layers / (pp·v), the first layers % (pp·v) stages one more) and is timed and sized by them —
//     a chunk op costs its own stage's FLOPs, a rank the sum of the stages its placement gives it —
//     a TP shard 1/tp of their FLOPs. Bytes: bf16 activations b·s·h·2 between stages; fp32 gradients of 12h² + 13h parameters
//     per layer / tp; two TP all-reduces of b·s·h bf16 values per layer each way; stored activations
//     s·b·h·(10 + 24/tp) bytes per layer (Korthikanti et al., 2022; no recomputation, flash attention).
//   * the real MLP (runtime/model/mlp.h): sizes measured by building each model stage's TP-rank-0
//     shard and running one forward on zeros.
//
// Pure functions (no threads, no clock); thread-compatible.
//
// Example:
//   TransformerModel t{.device = "h100", .layers = 32, .hidden = 4096, .seq_len = 4096};
//   RP_ASSIGN_OR_RETURN(TransformerCost c, CostOfTransformer(t, /*pp=*/4, /*virtual_stages=*/1, /*tp=*/2));
//   // c.cost.stages[r].forward, c.bytes.activation_message, ...
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/model/mlp.h"
#include "schedule/cost_model.h"
#include "schedule/predictor.h"
#include "schedule/program.h"

namespace rp::schedule {

struct TransformerModel {
  std::string device = "a100";  // a100 (312 TFLOPS dense bf16) | h100 (989 TFLOPS dense bf16)
  double efficiency = 0.5;      // fraction of the dense peak reached (model FLOPs utilisation)
  int layers = 24;
  int hidden = 2048;
  int seq_len = 2048;
  int microbatch_size = 1;      // sequences per micro-batch
};

// Dense bf16 peak TFLOPS of a device preset; InvalidArgument "unknown device 'x' (a100, h100)".
absl::StatusOr<double> DevicePeakTflops(const std::string& device);

// Forward FLOPs of one transformer layer for one micro-batch (the formula above), in double.
double TransformerLayerForwardFlops(const TransformerModel& model);

// Message and memory sizes of a workload on a layout.
struct WorkloadBytes {
  uint64_t activation_message = 0;  // largest activation sent between pipeline stages (one micro-batch)
  uint64_t tp_allreduce = 0;        // per F (or B) of one chunk, modeled as fp32 bytes; 0 without TP
  uint64_t gradient = 0;            // gradient bytes of the busiest device (fp32)
  // Per pipeline rank: stored activations of one micro-batch, with model stage k on rank k mod pp
  // (the loop placement; PlaceStageCosts gives any program's).
  std::vector<uint64_t> stored;
  // By model stage k (pp × virtual_stages): the message from k to k + 1, the
  // TP all-reduce bytes of k's F and of its B(-input), k's gradient bytes (one TP shard) — each
  // stage's own, as PipelineOptions' stage_* fields take them (the single values above are maxima).
  std::vector<uint64_t> stage_output;
  std::vector<std::array<uint64_t, 2>> stage_tp;
  std::vector<uint64_t> stage_gradient;
  std::vector<StageStored> stage_stored;  // stored activations of one micro-batch of stage k
};

// Places a cost model's per-model-stage entries (CostModel::model_stages, stage_stored) on
// `program`'s ranks: each rank's entry in `stages` becomes the sum over the chunks the program's
// placement gives it (a V: stages r and 2p − 1 − r; two directions: both, ÷ 2, per direction as a
// rank's cost counts) of the stage times (if model_stages is set) and stored bytes (if
// stage_stored is: after F); the optimizer time is kept. Nothing to do if neither is set.
// InvalidArgument if a per-stage list is not one entry per model stage or `stages` is not 1 or p.
absl::Status PlaceStageCosts(const Program& program, CostModel& cost);

struct TransformerCost {
  // One entry per pipeline rank (loop placement, optimizer 0), and per model stage (model_stages,
  // stage_stored): PlaceStageCosts places them on another program.
  CostModel cost;
  WorkloadBytes bytes;
  double peak_tflops = 0;
};

// InvalidArgument for an unknown device, efficiency outside (0, 1], sizes < 1, fewer layers than
// pp × virtual_stages, or FLOP counts that do not fit the time base (int64 nanoseconds).
absl::StatusOr<TransformerCost> CostOfTransformer(const TransformerModel& model, int pp, int virtual_stages,
                                                  int tp);

// The real MLP's sizes: model stage k = chunk · pp + rank (as the generators place chunks),
// `layers_per_stage` as in PartitionMlp. A stage's stored bytes (after a forward of zeros, and after
// a Bi of a zero gradient) are those of a whole micro-batch (StageStoredBytes, runtime/model/mlp.h).
// Builds no stage and allocates nothing proportional to the model. Errors: PartitionMlp's and
// StageLayers'.
absl::StatusOr<WorkloadBytes> MlpWorkloadBytes(const MlpConfig& model, int pp, int virtual_stages, int tp,
                                               const std::vector<int>& layers_per_stage, int microbatch_size);

// Modeled bytes one device puts on the fabric in one step: p2p messages, its TP ring all-reduces
// and its DP ring all-reduces of every bucket (over its gradient group, or for an expert bucket the
// expert-data-parallel group), in the modeled segments of
// comm/ring_timing.h (codec metadata included) — what the predictor's and the emulator's fabric
// time.
struct PredictedWire {
  uint64_t p2p = 0, tp = 0, dp = 0;
  uint64_t total() const { return p2p + tp + dp; }
};
// One entry per pipeline rank (every replica and TP shard of a pipeline rank sends the same).
std::vector<PredictedWire> PredictWireBytes(const ExecutionPlan& plan);

}  // namespace rp::schedule
