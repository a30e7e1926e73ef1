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
};

struct StepResult {
  int64_t step = 0;       // 0-based index of the step just trained
  double loss = 0.0;      // mean cross-entropy over the global batch, before the update
  double accuracy = 0.0;  // fraction of the global batch classified right, before the update
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
  // Shard `tp_rank` of stage `stage` (its params()/grads() after the last Step).
  const MlpStage& stage(int stage, int tp_rank) const {
    return *stages_[static_cast<size_t>(stage)][static_cast<size_t>(tp_rank)];
  }

 private:
  ReferenceTrainer() = default;
  absl::StatusOr<Tensor> ForwardAll(MlpStage::Pass pass, int micro_batch, ConstMatrixView x);

  ReferenceOptions options_;
  const Dataset* data_ = nullptr;  // not owned; the caller keeps it alive (see Create)
  ModelPartition partition_;
  std::vector<std::vector<std::unique_ptr<MlpStage>>> stages_;    // [stage][tp rank]
  std::vector<std::vector<std::unique_ptr<Optimizer>>> optimizers_;
  std::vector<std::vector<std::vector<float>>> grad_total_;       // [stage][tp rank]
  int64_t step_ = 0;
};

}  // namespace rp
