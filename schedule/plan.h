// rp::schedule::ExecutionPlan: everything one training step of a Program needs besides threads,
// as plain data — the validated grid and program, each device's layers and passes, the gradient
// buckets, the op durations, the fabric's LPs and groups. The emulator (schedule/runner.h) and the
// predictor (schedule/predictor.h) both play a plan, so they run the same steps by construction.
//
// Words.
//   chunk plan   one (pipeline rank, chunk): the model stage it holds, its layers (one TP shard;
//                every shard of a stage has the same layout), and per pass (F, B, Bi, W) the steps
//                of rp::PassSteps: layers in pass order with the TP all-reduces between them.
//   weight       a layer's share of a pass's modeled duration: its parameter count (DESIGN.md
//                "Gradient buckets overlap backward"). Step j of a pass of duration D ends at
//                start + ShareEnd(D, weights of steps <= j, all weights) plus the TP all-reduces
//                before it (runtime/timing.h), so the layer pieces sum to D exactly.
//   bucket       contiguous layers of a chunk, formed in reverse layer order until their modeled
//                gradient bytes reach bucket_bytes (PyTorch DDP's bucket_cap_mb: a bucket closes
//                once it holds at least the cap; the last may be smaller). Its real elements are one
//                contiguous range of the stage's grads(). It starts its DP all-reduce on the comm
//                stream when its lowest layer's gradient of the step's last micro-batch is final:
//                during the chunk's last backward (B, or W when split) with overlap, else when the
//                device reaches its optimizer step — and not before the buckets ahead of it in the
//                rank's bucket order (RankPlan::bucket_order), which the comm stream runs in turn:
//                launch order, or with two directions (DualPipe's mirror groups) model-stage order,
//                the one order the two devices holding the same two stages share.
//                Expert parallelism (ep > 1): a MoE block's experts are reduced over the expert-
//                data-parallel group, everything else over DP (rp::ReduceGroup). A block's experts
//                are an expert bucket of their own (completing with the block), and a DP bucket
//                never spans them: the DP bucket above a MoE block closes at the block, and the
//                block's router starts the next one. Buckets are listed in launch order.
//   EP groups    ep consecutive DP replicas (replica dp is EP rank dp % ep of EP group dp / ep) of
//                one (pp, tp): their tokens meet at the experts through the EP all-to-alls inside
//                the passes (PassSteps' kEpAllToAll steps). The expert-data-parallel group of a
//                rank: the dp / ep replicas with its EP rank, in ring order by EP group — with two
//                directions (DualPipe) those of both copies of the chunk's model stage, each
//                replica's two copies in direction order (as the dense buckets' mirror group,
//                GradGroup).
//   modeled size the bytes the fabric times: p2p messages carry their op's bytes; a pass's TP
//                all-reduces share the program's kTpAllReduce bytes of that pass equally (a pass
//                with none in the real model gets one at its end: ChunkPlan::modeled_tp_tail); a chunk's
//                gradients weigh the program's kAllReduce bytes of that chunk (the described model's
//                sizes with the FLOPs cost model, the real ones otherwise), shared over its layers by
//                parameter count.
//   LP           runtime/fabric.h: global rank r's compute stream is LP 2r, its comm stream 2r + 1.
//                Tie ranks put the replica index last, ((pp·TP + tp)·2 + stream)·DP + dp, so every
//                DP replica orders its ties the same way (what lets the predictor fold replicas).
//
// Thread safety: immutable after Build; any thread may read it.
//
// Example:
//   RP_ASSIGN_OR_RETURN(ExecutionPlan plan, BuildPlan(options));
//   const ChunkPlan& c = plan.Chunk(/*pp=*/1, /*chunk=*/0);
//   for (const PassStep& s : c.steps[PassIndex(OpKind::kForward)]) ...
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/codec.h"
#include "runtime/fabric.h"
#include "runtime/faults.h"
#include "runtime/link.h"
#include "runtime/model/mlp.h"
#include "schedule/cost_model.h"
#include "schedule/grid.h"
#include "schedule/program.h"

namespace rp::schedule {

// The four compute passes of a chunk, in the order of ChunkPlan::steps.
inline constexpr int kNumPasses = 4;
// F → 0, B → 1, Bi → 2, W → 3; -1 for other ops (an F&B is an F pass then a B pass).
int PassIndex(OpKind kind);

struct LayerPlan {
  int layer = 0;                 // global model layer
  // Its share of a pass: its parameter count (one shard); a MoE block's is its router's plus
  // top_k experts' (the parameters a token meets), whatever its EP rank holds.
  uint64_t weight = 0;
  size_t grad_offset = 0;        // its real gradient elements in the stage's grads()
  size_t grad_count = 0;
  uint64_t modeled_grad_bytes = 0;
  // A MoE block with ep > 1: its experts' elements (inside the range above) and their share of
  // the modeled bytes (reduced over the expert-data-parallel group); 0 otherwise.
  size_t expert_offset = 0;
  size_t expert_count = 0;
  uint64_t modeled_expert_bytes = 0;
  int width = 0;                 // input width (a MoE block's token rows)
};

struct BucketPlan {
  int first_layer = 0;           // local layers [first_layer, end_layer)
  int end_layer = 0;
  size_t grad_offset = 0;        // real elements [grad_offset, grad_offset + grad_count)
  size_t grad_count = 0;
  uint64_t modeled_elements = 0;  // FP32 elements the fabric times (modeled bytes / 4, rounded up)
  bool expert = false;            // a MoE block's experts: reduced over the expert-DP group
};

struct ChunkPlan {
  int model_stage = 0;
  // Modeled duration of one op of this chunk (fault-free), F, B, Bi, W: its rank's stage cost ÷
  // chunks per direction, or its model stage's own (CostModel::model_stages).
  std::array<Nanos, kNumPasses> op_cost{};
  std::vector<LayerPlan> layers;
  std::array<std::vector<PassStep>, kNumPasses> steps;  // per pass
  std::array<uint64_t, kNumPasses> total_weight{};      // Σ layer weights over a pass's kLayer steps
  // Per step of a pass: its weight (a layer's, or a MoE block phase's share; 0 for exchanges).
  std::array<std::vector<uint64_t>, kNumPasses> step_weight;
  // Modeled FP32 elements of each TP all-reduce of a pass (its kTpAllReduce steps in order).
  std::array<std::vector<uint64_t>, kNumPasses> tp_elements;
  // The pass ends with a TP all-reduce the real model does not have: the program gives the pass
  // TP bytes (the FLOPs cost model's described transformer: 2 all-reduces per layer each way)
  // but the real stage's pass has no TP point (every layer replicated, as around MoE blocks, or
  // only the model's first column-parallel layer in a backward). Its one kTpAllReduce step, last
  // in `steps`, carries all those bytes (its real values: one zero per TP rank), so they are not dropped.
  std::array<bool, kNumPasses> modeled_tp_tail{};
  std::vector<BucketPlan> buckets;  // in launch order (reverse layer order)
  // Op index (in the rank's list) after which its gradients are final: its last B, W, or F&B whose
  // backward part is this chunk.
  int last_grad_op = -1;
  // For each local layer: the bucket it completes (its lowest layer), else -1; and the expert
  // bucket it completes (a MoE block with ep > 1), else -1 — launched first.
  std::vector<int> bucket_of_layer;
  std::vector<int> expert_bucket_of_layer;
};

struct RankPlan {
  std::vector<ChunkPlan> chunks;  // per chunk (v)
  Nanos optimizer_cost{0};        // modeled duration of the optimizer step (fault-free)
  // Buckets of every chunk in launch order: (chunk, bucket index in the chunk).
  std::vector<std::pair<int, int>> bucket_order;
};

struct PlanOptions {
  GridShape grid;
  Placement placement;
  Program program;
  MlpConfig model;
  std::vector<int> layers_per_stage;  // per MODEL stage (pp × v); empty = balanced
  CostModel cost;
  LinkSpec links;
  comm::Codec codec = comm::Codec::kFp32;
  // Modeled bytes per ring message (TP and DP); 0 = one message per chunk, up to comm's largest
  // segment (1 GiB: a larger modeled chunk is cut into 1 GiB messages).
  uint64_t segment_bytes = 0;
  double reduce_gbps = 0;          // modeled reduction throughput (0 = free)
  uint64_t bucket_bytes = 25ull << 20;  // DDP bucket cap (modeled bytes); 0 = one bucket per chunk
  bool overlap_grad_allreduce = true;
  FaultPlan faults;                 // degraded links and slow-link faults become fabric faults
  // Expert parallelism: the EP degree (>= 1, dividing grid.dp and model.moe.experts; > 1 needs
  // MoE layers), and the modeled bytes one real token row stands for in the EP
  // all-to-all (a multiple of 4 counted as FP32 elements; 0 = the real row, 4 × its width).
  int ep = 1;
  uint64_t ep_row_bytes = 0;
  // Wire format of the EP all-to-alls' token rows (dispatch and combine, forward and backward;
  // the counts are metadata). FP32 = exact (schedule/ep_wire.h).
  comm::Codec ep_codec = comm::Codec::kFp32;
  int microbatch_size = 32;  // tokens (rows) per micro-batch: balanced routing (predictor)
};

struct ExecutionPlan {
  PlanOptions options;
  ParallelGrid grid;
  ModelPartition partition;
  int v = 1;  // chunks per rank
  std::vector<RankPlan> ranks;  // per pipeline rank
  // Fabric: devices, LPs (2 per global rank), tie ranks, link faults in device ids.
  int num_lps = 0;
  std::vector<uint64_t> tie_rank;
  std::vector<LinkFault> link_faults;
  // Modeled bytes of one ring message: CollectiveOptions::segment_bytes for every collective.
  size_t ring_segment_bytes = 0;

  const ChunkPlan& Chunk(int pp, int chunk) const {
    return ranks[static_cast<size_t>(pp)].chunks[static_cast<size_t>(chunk)];
  }
  static LpId ComputeLp(int rank) { return 2 * rank; }
  static LpId CommLp(int rank) { return 2 * rank + 1; }
  // The rank whose compute or comm stream `lp` is (the inverse of ComputeLp and CommLp).
  static int RankOfLp(LpId lp) { return lp / 2; }
  // Members of the three kinds of groups of a global rank, in ring order (global ranks).
  std::vector<int> PipelineGroup(int rank) const { return grid.PpGroup(rank); }
  std::vector<int> TpGroup(int rank) const { return grid.TpGroup(rank); }
  std::vector<int> DpGroup(int rank) const { return grid.DpGroup(rank); }
  // The gradient group of (global rank, chunk): every copy of that chunk's model stage, in ring
  // order — its DP group, or with two directions (DualPipe) the DP groups of both copies (the
  // mirror all-reduce on top of DP's), replica by replica and each replica's two copies in
  // direction order: (0, dir 0), (0, dir 1), (1, dir 0), … `index` receives this copy's position.
  std::vector<int> GradGroup(int rank, int chunk, int* index) const;
  // One gradient group per (model stage, tp) for two-direction programs, else per (pp, tp):
  // GradGroupId(rank, chunk) numbers them (the executor's communicators).
  int num_grad_groups() const;
  int GradGroupId(int rank, int chunk) const;
  // The fault-free modeled duration of pipeline rank pp's optimizer step (a chunk op's: Chunk's
  // op_cost).
  Nanos OptimizerCost(int pp) const { return ranks[static_cast<size_t>(pp)].optimizer_cost; }

  // --- Expert parallelism (see "EP groups") ---
  int ep() const { return options.ep; }
  // Whether passes exchange tokens (ep > 1 with MoE layers).
  bool has_ep_exchanges() const { return options.ep > 1 && options.model.moe.enabled(); }
  // The EP group of a rank (global ranks by EP rank); `index` receives its EP rank.
  std::vector<int> EpGroup(int rank, int* index) const;
  int num_ep_groups() const;
  int EpGroupId(int rank) const;  // the executor's EP communicators
  // Modeled FP32 elements one real token row of `width` stands for (options.ep_row_bytes).
  uint64_t EpRowElements(int width) const;
  // The group that reduces `bucket` of (rank, chunk): GradGroup, or for an expert bucket the
  // expert-data-parallel group (`index` receives the rank's position), and ids over both kinds
  // (GradGroupId first, then one expert group per (pp, tp, EP rank); with two directions per
  // (model stage, tp, EP rank)).
  std::vector<int> BucketGroup(int rank, int chunk, const BucketPlan& bucket, int* index) const;
  int BucketGroupId(int rank, int chunk, const BucketPlan& bucket) const;
  int num_bucket_groups() const;
};

// Validates (InvalidArgument naming the field) and builds the plan: grid and placement, program vs
// grid (Validate), cost entries, model partition (PP × v stages, TP divisibility), faults.
[[nodiscard]] absl::StatusOr<ExecutionPlan> BuildPlan(const PlanOptions& options);

// The durations of the kLayer steps of one pass of `duration` on `chunk`, in step order (0 for
// the exchange steps): consecutive ShareEnd differences of the step weights, summing to `duration`.
std::vector<Nanos> StepDurations(const ChunkPlan& chunk, int pass, Nanos duration);
// The same into *durations (replacing its contents, reusing its storage).
void StepDurations(const ChunkPlan& chunk, int pass, Nanos duration, std::vector<Nanos>* durations);

}  // namespace rp::schedule
