// rp::ReferenceTrainer: serial, single-thread training of the workload — the loss curve a hybrid
// DP × PP × TP run must reproduce.
//
// One Step() trains on the global batch of the current step (rp::BatchLayout, data order in
// dataset.h):
//   for replica d = 0..dp−1:
//     zero every shard's grads
//     for micro-batch j = 0..m−1: forward through stages 0..S−1, softmax cross-entropy with
//       grad_scale = 1 / global_batch, backward through stages S−1..0 (fused Backward)
//     total_d = grads (d = 0: a copy; d > 0: total += grads, element-wise)
//   grads = total; every shard: optimizer.Step(params, grads)
//   loss = (Σ_d Σ_j loss_sum(d, j)) / global_batch  (double, in (d, j) order)
// i.e. the mean loss and mean gradient over the global batch, with each replica's gradient summed
// over its micro-batches in order and the replicas' gradients summed in rank order.
//
// By default (num_stages = 1, tp = 1) this is the plain single-device model. With the hybrid run's
// num_stages / layers_per_stage / tp it emulates the partitioned math serially: the same shards,
// each TP all-reduce replaced by a rank-order sum (RunTpGroupSerial). The executor reproduces that
// emulation bit for bit when dp <= 2 and tp <= 2 and it (a) zeroes grads once per step, (b) runs each
// stage's backward (or W) ops in micro-batch order, (c) sums DP gradients with an FP32 all-reduce
// — a sum of two floats does not depend on order. With more ranks a ring sums in another order and
// agrees only to float tolerance; the partitioned and single-device curves differ by the row-/column-
// parallel partial sums (measured in reference_trainer_test: docs/model.md quotes the figures).
//
// Mixture of experts (docs/model.md "Mixture of experts"). With MoE layers and ep > 1, the
// replicas form EP groups of ep consecutive replicas (d = g·ep + q: group g, EP rank q): their
// tokens meet at the experts. The step then runs each group's replicas in lockstep, micro-batch by
// micro-batch (RunStageGroupSerial), so that every expert visits its tokens in the canonical order
// (expert, source replica, token) of the EP run, and keeps each replica's non-expert gradients
// apart:
//   for group g: zero grads; for j: forward all q, losses, backward all q
//     non-expert ranges: total += replica (g, q)'s gradient, in replica order d
//     expert ranges:     total_q += EP rank q's expert gradient, in group order g
// Default (shard_experts = false): one device's model per replica, all experts on each; every
// source sends its tokens to replica 0's experts (the single-device reference of an EP run).
// shard_experts = true emulates the EP shards themselves (replica q holds experts
// [q·E/ep, (q+1)·E/ep)); both must give the same bits (moe_test checks it). With ep == 1 the step
// is the one above. The reported `loss` is the cross-entropy; `aux_loss` is the mean over the
// step's micro-batches of the MoE auxiliary losses (their gradient weight is 1 / (dp·m)).
//
// Ring order. An FP32 sum of more than two replicas depends on its order; a ring all-reduce of a
// bucket of `count` elements over n members sums chunk c (elements ChunkRange(count, n, c), as
// comm/ring_steps.h cuts them: the first count % n chunks one element longer) along the ring's
// reduce-scatter, starting at member c + 1: ((x[c+1] + x[c+2]) + ...) + x[c] (positions mod n).
// With ring_buckets the step sums every bucket element that way instead of in rank order —
// members and positions as the executor's groups: non-expert ranges over all dp replicas (position
// d), expert ranges over the replicas with the same EP rank (position = EP group) — and then
// reproduces a hybrid run bit for bit for any dp (tested in tests/schedule/executor_ep_test.cc).
// The per-replica gradients are kept until the step's sums (dp copies of the model's gradients).
//
// Thread safety: none (single thread). The Dataset must outlive the trainer.
//
// Example:
//   RP_ASSIGN_OR_RETURN(rp::Dataset data, rp::Dataset::Create({}));
//   rp::ReferenceOptions opt;  // default model, one device, dp = 1, 1 micro-batch of 32
//   RP_ASSIGN_OR_RETURN(auto trainer, rp::ReferenceTrainer::Create(opt, &data));
//   for (int i = 0; i < 20; ++i) { RP_ASSIGN_OR_RETURN(rp::StepResult r, trainer->Step()); }
//   RP_ASSIGN_OR_RETURN(rp::EvalResult held_out, trainer->Evaluate(rp::Split::kTest));
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/model/dataset.h"
#include "runtime/model/mlp.h"
#include "runtime/model/optimizer.h"

namespace rp {

struct ReferenceOptions {
  MlpConfig model;
  BatchLayout layout;
  OptimizerConfig optimizer;
  // Emulated partition (default: the whole model on one device).
  int num_stages = 1;
  int tp = 1;
  std::vector<int> layers_per_stage;  // empty = balanced
  // EP degree of the run to reproduce (>= 1, divides layout.dp and, with MoE layers, experts).
  int ep = 1;
  // Emulate the EP shards (see the file comment) instead of one device's experts per replica.
  bool shard_experts = false;
  // Ring order (see "Ring order" in the file comment): per stage, the ranges of grads() that the
  // run all-reduces one ring at a time (its gradient buckets); empty = rank order. Set, every
  // element must be in exactly one bucket and (ep > 1) each bucket within one ReduceGroup range; needs
  // shard_experts when ep > 1 (bucket offsets are the EP shards').
  struct RingBucket {
    int64_t offset = 0;
    int64_t count = 0;
  };
  std::vector<std::vector<RingBucket>> ring_buckets;
  // The EP wire (needs shard_experts when set): what the run's EP all-to-alls do to every block
  // that crosses EP ranks in the training passes (RunStageGroupSerial's `wire`; e.g. a lossy
  // codec's round trip, schedule::EpWireOracle). Null: exact. Evaluate stays exact, as the
  // executor's held-out evaluation (serial, no wire).
  EpWireFn ep_wire;
};

struct StepResult {
  int64_t step = 0;       // 0-based index of the step just trained
  double loss = 0.0;      // mean cross-entropy over the global batch, before the update
  double accuracy = 0.0;  // fraction of the global batch classified right, before the update
  double aux_loss = 0.0;  // mean MoE auxiliary loss per micro-batch (0 without MoE/aux_loss)
};

struct EvalResult {
  double loss = 0.0;
  double accuracy = 0.0;
  int64_t samples = 0;
};

class ReferenceTrainer {
 public:
  // Errors: bad model / layout / optimizer / partition (InvalidArgument naming the field), a model
  // whose input_dim or classes differ from the data set's.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ReferenceTrainer>> Create(
      const ReferenceOptions& options, const Dataset* data);

  // Trains one step on the next global batch.
  [[nodiscard]] absl::StatusOr<StepResult> Step();

  // Loss and accuracy of the current parameters on a whole split (forward only, in chunks).
  [[nodiscard]] absl::StatusOr<EvalResult> Evaluate(Split split);

  int64_t steps_done() const { return step_; }
  const ModelPartition& partition() const { return partition_; }
  // Shard `tp_rank` of stage `stage` (its params()/grads() after the last Step) of replica 0 (with
  // shard_experts, EP rank `ep_rank`'s shard).
  const MlpStage& stage(int stage, int tp_rank, int ep_rank = 0) const {
    return *stages_[static_cast<size_t>(stage)][static_cast<size_t>(ep_rank)]
                   [static_cast<size_t>(tp_rank)];
  }

 private:
  ReferenceTrainer() = default;
  absl::StatusOr<Tensor> InferAll(ConstMatrixView x);
  absl::Status TrainGroup(int group, std::vector<double>& loss_sums, int64_t& correct);
  absl::Status AddToTotals(int group);
  // Ring order: keeps group `group`'s gradients; sums bucket elements of (s, q, t) into its grads.
  void KeepGroupGrads(int group);
  absl::Status RingSum(size_t s, size_t q, size_t t);
  std::vector<MlpStage*> Group(size_t stage) const;

  ReferenceOptions options_;
  const Dataset* data_ = nullptr;  // not owned; the caller keeps it alive (see Create)
  ModelPartition partition_;
  // [stage][EP rank / replica of the group][tp rank]
  std::vector<std::vector<std::vector<std::unique_ptr<MlpStage>>>> stages_;
  std::vector<std::vector<std::vector<std::unique_ptr<Optimizer>>>> optimizers_;
  std::vector<std::vector<std::vector<std::vector<float>>>> grad_total_;
  // Ring order: [group][stage][EP rank][tp rank] gradients of the step.
  std::vector<std::vector<std::vector<std::vector<std::vector<float>>>>> group_grads_;
  int64_t step_ = 0;
};

}  // namespace rp
