// DeviceRunner's optimizer step: the wait for its gradient buckets (launched inside the backward,
// or here), then the update under the commit protocol (a backup kept until the step commits), and
// Rollback. See runner.h.
#include <algorithm>
#include <utility>

#include "runtime/status_macros.h"
#include "schedule/runner.h"
#include "schedule/runner_internal.h"

namespace rp::schedule {

using namespace runner_internal;  // NOLINT: this file's helpers

absl::StatusOr<Nanos> DeviceRunner::AwaitGradientBuckets(int step, int op_index) {
  const ExecutionPlan& plan = *ctx_->plan;
  const RankPlan& rp = plan.ranks[static_cast<size_t>(coord_.pp)];
  const LpId lp = ExecutionPlan::ComputeLp(rank_);
  // Buckets not launched inside the backward (without overlap: all of them) start now.
  for (size_t o = 0; o < rp.bucket_order.size(); ++o) {
    if (!launched_[o]) {
      RP_RETURN_IF_ERROR(LaunchBucket(step, rp.bucket_order[o].first, rp.bucket_order[o].second,
                                      dev_->cursor()));
    }
  }
  const Nanos reached = dev_->cursor();
  const Nanos wall0 = WallNow();
  Nanos ar_end = reached;
  std::vector<WaitSpan> spans;
  for (size_t o = 0; o < gates_.size(); ++o) {
    RP_ASSIGN_OR_RETURN(const Nanos end,
                        ctx_->fabric->AwaitGate(lp, gates_[o],
                                                {.rank = rank_, .op = "Opt (awaits its gradient buckets)",
                                                 .step = step}));
    ctx_->fabric->ResetGate(gates_[o]);
    ar_end = std::max(ar_end, end);
    BucketRecord& b = buckets_[o];
    spans.insert(spans.end(), b.spans.begin(), b.spans.end());
    if (!ctx_->comm_streams.empty() && b.end > b.start) {  // no comm thread traced it
      dev_->TraceComm({.name = "AllReduce", .kind = rp::OpKind::kCollective, .step = step,
                       .bytes = b.modeled_bytes},
                      b.trace_wall_start, b.trace_wall_end, b.start, b.end);
    }
    Record({.kind = IntervalKind::kGradAllReduce, .op = op_index, .detail = static_cast<int32_t>(o),
            .start = b.start - step_start_, .end = b.end - step_start_,
            .comm = b.transfer + b.reduce, .wall_start = b.wall_start_m, .wall_end = b.wall_end_m});
  }
  if (ctx_->lane != nullptr) {  // the buckets' data, reduced off the fabric's lock
    uint64_t seq = 0;
    for (const BucketRecord& b : buckets_) seq = std::max(seq, b.lane_seq);
    int bucket = -1;
    if (const absl::Status s = ctx_->lane->WaitFor(seq, ctx_->plan->grid.DeviceOf(rank_), &bucket);
        !s.ok()) {
      return LaneDataError(step, bucket, s);
    }
  }
  dev_->AdvanceCursor(ar_end);
  RP_RETURN_IF_ERROR(Sleep(ar_end, {.rank = rank_, .op = "Opt (awaits its gradient buckets)",
                                    .step = step}));
  const Nanos wall1 = WallNow();
  const WaitSplit e = SplitBySpans(reached, ar_end, spans);
  const WaitSplit w = SplitWallBySpans(wall0, wall1, spans, step_start_, ar_end);
  Record({.kind = IntervalKind::kGradWait, .op = op_index, .start = reached - step_start_,
          .end = ar_end - step_start_, .transfer = e.transfer, .peer = e.peer,
          .wall_start = wall0, .wall_end = wall1, .wall_transfer = w.transfer, .wall_peer = w.peer,
          .wall_late = w.late});
  return ar_end;
}

absl::Status DeviceRunner::UpdateWithBackup(int step, int op_index, const Op& op) {
  const HostWork work(&ctx_->host_work);  // the update: host work of ours, not a stall
  // Commit protocol: keep the state before the update until the step is committed.
  backup_params_.resize(stages_.size());
  backup_opt_.resize(stages_.size());
  for (size_t ch = 0; ch < stages_.size(); ++ch) {
    const std::span<const float> params = std::as_const(*stages_[ch]).params();
    backup_params_[ch].assign(params.begin(), params.end());
    if (backup_opt_[ch]) {
      *backup_opt_[ch] = *optimizers_[ch];
    } else {
      backup_opt_[ch] = std::make_unique<Optimizer>(*optimizers_[ch]);
    }
  }
  backup_step_ = step;
  const OpFault* fault = ctx_->injector->OpFaultAt(rank_, step, op_index);
  if (fault != nullptr && fault->kind == OpFaultKind::kThrow) {
    (void)InjectedFault(step, op_index, op, *fault);  // throws
  }
  for (size_t ch = 0; ch < stages_.size(); ++ch) {
    RP_RETURN_IF_ERROR(optimizers_[ch]->Step(stages_[ch]->params(), stages_[ch]->grads()));
  }
  return absl::OkStatus();
}

absl::Status DeviceRunner::OptimizerStep(int step, int op_index, const Op& op) {
  RP_ASSIGN_OR_RETURN(const Nanos ar_end, AwaitGradientBuckets(step, op_index));
  const OpInfo info{.name = "Opt", .step = step};
  const Nanos start = dev_->cursor();
  const Nanos opt_wall0 = WallNow();
  BeforeComputeOp(ar_end);
  // Device::Compute's steps, with the wake-up at the end's lateness split off (SleepAfterWork).
  const absl::StatusOr<Device::ComputeOp> c =
      dev_->BeginCompute(info, ctx_->plan->OptimizerCost(coord_.pp), ar_end);
  if (!c.ok()) return WithSite(c.status(), coord_, rank_, step, op, -1);
  const absl::Status update = UpdateWithBackup(step, op_index, op);
  if (!update.ok()) return WithSite(update, coord_, rank_, step, op, -1);
  const Nanos end = c->start + c->duration;
  const Nanos kernel_time = ctx_->real_clock ? ctx_->clock->Now() - c->clock_start : Nanos(0);
  const absl::StatusOr<Nanos> late =
      SleepAfterWork(end, {.rank = rank_, .op = info.name, .step = step});
  if (!late.ok()) return WithSite(late.status(), coord_, rank_, step, op, -1);
  if (const absl::Status s = dev_->EndCompute(info, *c, end, kernel_time); !s.ok()) {
    return WithSite(s, coord_, rank_, step, op, -1);
  }
  Record({.kind = IntervalKind::kOptimizer, .op = op_index, .start = start - step_start_,
          .end = end - step_start_, .wall_start = opt_wall0, .wall_end = WallNow(),
          .wall_late = *late});
  return absl::OkStatus();
}

void DeviceRunner::Rollback() {
  for (size_t ch = 0; ch < stages_.size(); ++ch) {
    const std::span<float> w = stages_[ch]->params();
    std::copy(backup_params_[ch].begin(), backup_params_[ch].end(), w.begin());
    *optimizers_[ch] = *backup_opt_[ch];
  }
  backup_step_ = -1;
}

}  // namespace rp::schedule
