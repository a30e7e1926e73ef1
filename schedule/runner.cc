// DeviceRunner: one function per op kind (see runner.h). Words: "rank" is the global rank; device
// ids are placement ids (the fabric's); modeled times are absolute, intervals relative to the
// step's modeled start.
#include "schedule/runner.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "runtime/heap.h"
#include "runtime/model/kernels.h"
#include "runtime/status_macros.h"
#include "runtime/thread_probe.h"
#include "runtime/timing.h"

namespace rp::schedule {

void RunContext::NoteError(ErrorRecord e) {
  MutexLock lock(&errors_mu);
  errors.push_back(std::move(e));
}

comm::Communicator& RunContext::Pipe(const Coord& c, bool grad) const {
  return *(grad ? pipes_grad : pipes_act)[static_cast<size_t>(c.dp * options->grid.tp + c.tp)];
}
comm::Communicator& RunContext::Tp(const Coord& c) const {
  return *tps[static_cast<size_t>(c.dp * options->grid.pp + c.pp)];
}


DeviceRunner::DeviceRunner(RunContext* ctx, int rank)
    : ctx_(ctx), rank_(rank), coord_(ctx->plan->grid.CoordOf(rank)) {}
DeviceRunner::~DeviceRunner() = default;

absl::StatusOr<std::unique_ptr<DeviceRunner>> DeviceRunner::Create(RunContext* ctx, int rank) {
  auto r = std::unique_ptr<DeviceRunner>(new DeviceRunner(ctx, rank));
  const ExecutionPlan& plan = *ctx->plan;
  // MoE: replica dp is EP rank dp % ep; each micro-batch's auxiliary loss weighs 1 / (dp · m),
  // as in rp::ReferenceTrainer.
  const double aux_weight = 1.0 / (static_cast<double>(ctx->layout.dp) *
                                   static_cast<double>(ctx->layout.microbatches));
  for (int c = 0; c < plan.v; ++c) {
    RP_ASSIGN_OR_RETURN(auto st, MlpStage::Create(ctx->options->model, plan.partition,
                                                  plan.Chunk(r->coord_.pp, c).model_stage,
                                                  r->coord_.tp, r->coord_.dp % plan.ep()));
    st->SetAuxLossWeight(aux_weight);
    RP_ASSIGN_OR_RETURN(auto opt, Optimizer::Create(ctx->options->optimizer, st->params().size()));
    r->stages_.push_back(std::move(st));
    r->optimizers_.push_back(std::move(opt));
  }
  const size_t buckets = plan.ranks[static_cast<size_t>(r->coord_.pp)].bucket_order.size();
  r->buckets_.resize(buckets);
  r->final_.assign(buckets, false);
  r->launched_.assign(buckets, false);
  return r;
}

void DeviceRunner::AddGates() {
  for (size_t b = 0; b < buckets_.size(); ++b) gates_.push_back(ctx_->fabric->AddGate());
  tp_gate_ = ctx_->fabric->AddGate();
  abort_gate_ = ctx_->fabric->AddGate();
}

Nanos DeviceRunner::WallNow() const {
  if (ctx_->real_clock == nullptr) return Nanos(0);  // virtual: Record copies emulated times
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  return RoundNanos(static_cast<double>(now - step_wall_origin_ns_) /
                    ctx_->real_clock->time_scale());
}

void DeviceRunner::SetPosition(int step, int op) {
  position_.store(static_cast<uint64_t>(static_cast<uint32_t>(step + 1)) << 32 |
                      static_cast<uint32_t>(op + 1),
                  std::memory_order_relaxed);
}

DeviceRunner::Position DeviceRunner::position() const {
  const uint64_t p = position_.load(std::memory_order_relaxed);
  return {.step = static_cast<int>(p >> 32) - 1, .op = static_cast<int>(p & 0xffffffffu) - 1};
}

Nanos DeviceRunner::WallOf(Nanos modeled) const { return modeled - step_start_; }

absl::Status DeviceRunner::Sleep(Nanos until, const WaitSite& site) {
  if (ctx_->real_clock == nullptr) return absl::OkStatus();
  // Nothing this device posts can be ready before `until`: let the fabric commit up to it.
  ctx_->fabric->Advance(ExecutionPlan::ComputeLp(rank_), until);
  ctx_->clock_sleepers.fetch_add(1, std::memory_order_relaxed);
  absl::Status s = dev_->WaitUntil(until, site);
  ctx_->clock_sleepers.fetch_sub(1, std::memory_order_relaxed);
  return s;
}

absl::StatusOr<Nanos> DeviceRunner::SleepAfterWork(Nanos until, const WaitSite& site) {
  if (ctx_->real_clock == nullptr) return Nanos(0);
  const Nanos begin = WallNow();
  RP_RETURN_IF_ERROR(Sleep(until, site));
  return std::max(Nanos(0), WallNow() - std::max(begin, WallOf(until)));
}

void DeviceRunner::Record(OpInterval iv) {
  if (ctx_->real_clock == nullptr) {  // virtual clock: measured = emulated
    iv.wall_start = iv.start;
    iv.wall_end = iv.end;
    iv.wall_transfer = iv.transfer;
    iv.wall_peer = iv.peer;
    iv.wall_late = Nanos(0);
  }
  step_.intervals.push_back(iv);
}

void DeviceRunner::AccountActivations() {
  int64_t now = 0;
  for (const auto& st : stages_) now += st->activation_bytes();
  if (now > act_accounted_) {
    dev_->memory().Allocate(MemoryKind::kActivations, static_cast<uint64_t>(now - act_accounted_));
  } else if (now < act_accounted_) {
    dev_->memory()
        .Free(MemoryKind::kActivations, static_cast<uint64_t>(act_accounted_ - now))
        .IgnoreError();  // counts only what it allocated: cannot underflow
  }
  act_accounted_ = now;
}

absl::Status DeviceRunner::Loss(int step, int mb, MlpStage* stage, Tensor* out) {
  const float grad_scale = 1.0f / static_cast<float>(ctx_->layout.global_batch());
  RP_ASSIGN_OR_RETURN(Batch b, ctx_->data->TrainMicroBatch(ctx_->layout, step, coord_.dp, mb));
  Tensor dl(out->rows(), out->cols());
  RP_ASSIGN_OR_RETURN(LossStats ls, SoftmaxCrossEntropy(*out, b.labels, grad_scale, dl));
  // Without a collective on the way (dp 1, tp 1) nothing else sees a diverged model: its values
  // left fp32's range, as the collectives' codecs report it (OutOfRange).
  if (!std::isfinite(ls.loss_sum)) {
    return absl::OutOfRangeError(absl::StrCat("the loss of micro-batch ", mb, " is ", ls.loss_sum,
                                              ": its logits left fp32's range"));
  }
  loss_sum_[static_cast<size_t>(mb)] += ls.loss_sum;
  correct_[static_cast<size_t>(mb)] += ls.correct;
  dlogits_[mb] = std::move(dl);
  stage->Donate(std::move(*out));  // the logits go no further
  return absl::OkStatus();
}

absl::Status DeviceRunner::Body(Device& dev,
                                absl::FunctionRef<absl::StatusOr<Nanos>(Nanos)> on_step_boundary) {
  dev_ = &dev;
  host_tid_.store(CurrentThreadId(), std::memory_order_relaxed);
  const ExecutorOptions& o = *ctx_->options;
  const LpId lp = ExecutionPlan::ComputeLp(rank_);
  for (int step = 0; step <= o.steps; ++step) {
    cur_step_ = step;
    cur_op_ = -1;
    SetPosition(step, -1);
    waiting_.clear();
    const WaitSite site{.rank = rank_, .op = "step barrier", .step = step};
    // Before the first step (every device at once): resident heap for that step's first touches,
    // populated in bulk and freed once everyone has populated theirs.
    PopulatedBlock warm;
    if (step == 0 && !ctx_->warm_heap_bytes.empty()) {
      // Host work of ours that ends (the stall monitor's progress): where the host is slow to
      // hand out fresh pages (a KVM guest zeroing huge pages), 256 devices populating at once
      // outlasted a 50 ms watchdog timeout before any of them reached the first barrier.
      const HostWork work(&ctx_->host_work);
      warm = PopulatedBlock::Allocate(ctx_->warm_heap_bytes[static_cast<size_t>(rank_)]);
      if (warm.populated()) populated_bytes_ = warm.size();
    }
    RP_ASSIGN_OR_RETURN(const Nanos t0,
                        ctx_->fabric->Arrive(lp, ctx_->barrier, dev.cursor(), site, on_step_boundary));
    warm = PopulatedBlock();
    if (step == o.steps) break;
    dev.AdvanceCursor(t0);
    step_start_ = t0;
    if (ctx_->real_clock != nullptr) {
      step_wall_origin_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 ctx_->real_clock->WallOf(t0).time_since_epoch())
                                 .count();
    }
    RP_RETURN_IF_ERROR(Sleep(t0, {.rank = rank_, .op = "step start", .step = step}));
    step_.intervals.clear();  // keeps its capacity (unless TakeIntervals took it): steps record alike
    step_.intervals.reserve(reserve_intervals_);
    step_.emulated_end = step_.measured_end = Nanos{0};
    RP_RETURN_IF_ERROR(RunStep(step));
    step_.emulated_end = dev.cursor();
    step_.measured_end = WallNow();
  }
  cur_step_ = o.steps;
  ctx_->fabric->Finish(lp);
  return absl::OkStatus();
}

absl::Status DeviceRunner::RunStep(int step) {
  for (auto& st : stages_) {
    st->ZeroGrads();
    st->ResetMoeStats();  // routing figures per step (read at the step boundary)
  }
  const int m = ctx_->layout.microbatches;
  loss_sum_.assign(static_cast<size_t>(m), 0.0);
  correct_.assign(static_cast<size_t>(m), 0);
  final_.assign(final_.size(), false);
  launched_.assign(launched_.size(), false);
  next_launch_ = 0;
  const auto& ops = ctx_->options->program.ranks[static_cast<size_t>(coord_.pp)];
  for (size_t i = 0; i < ops.size(); ++i) {
    RP_RETURN_IF_ERROR(RunOp(step, static_cast<int>(i)));
    ctx_->ops_done.fetch_add(1, std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

absl::Status DeviceRunner::RunOp(int step, int op_index) {
  const Op& op = ctx_->options->program.ranks[static_cast<size_t>(coord_.pp)]
                                            [static_cast<size_t>(op_index)];
  cur_op_ = op_index;
  SetPosition(step, op_index);
  waiting_.clear();
  const OpFault* fault = ctx_->injector->OpFaultAt(rank_, step, op_index);
  // A throw fires inside the kernel of a compute op (as a failing kernel would), else here.
  if (fault != nullptr && !(fault->kind == OpFaultKind::kThrow && IsDeviceCompute(op.kind))) {
    RP_RETURN_IF_ERROR(InjectedFault(step, op_index, op, *fault));
  }
  switch (op.kind) {
    case OpKind::kForward:
    case OpKind::kBackward:
    case OpKind::kBackwardInput:
    case OpKind::kWeightGrad:
    case OpKind::kForwardBackward: return Compute(step, op_index, op);
    case OpKind::kSendAct:
    case OpKind::kSendGrad: return Send(step, op_index, op);
    case OpKind::kRecvAct:
    case OpKind::kRecvGrad: return Recv(step, op_index, op);
    case OpKind::kOptimizerStep: return OptimizerStep(step, op_index, op);
    case OpKind::kTpAllReduce:  // sizes only: the TP all-reduces run inside F/B
    case OpKind::kAllReduce:    // sizes only: buckets start inside the last backward
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

void DeviceRunner::BeforeComputeOp(Nanos ready) {
  // A DeviceStop fault hangs the device inside Device::BeginCompute, at the op's start: its place
  // in modeled-time order (its bound) is there, as an injected stall's (InjectedFault).
  if (dev_->faults().StopsAt(rank_, dev_->next_compute_index())) {
    ctx_->fabric->Advance(ExecutionPlan::ComputeLp(rank_), std::max(dev_->cursor(), ready));
  }
}

absl::Status DeviceRunner::InjectedFault(int step, int op_index, const Op& op,
                                         const OpFault& f) {
  int64_t none = -1;
  ctx_->fault_fired_ns.compare_exchange_strong(
      none, std::chrono::duration_cast<std::chrono::nanoseconds>(
                std::chrono::steady_clock::now().time_since_epoch())
                .count());
  const int64_t w = dev_->WallNow();
  dev_->Trace({.name = f.kind == OpFaultKind::kThrow ? "fault: throw" : "fault: stall",
               .kind = rp::OpKind::kFault, .micro_batch = op.micro_batch, .step = step},
              w, w, dev_->cursor(), dev_->cursor());
  const std::string what =
      absl::StrCat("injected fault: ", OpFaultKindName(f.kind), " at step ", step, " op ",
                   op_index, " (", ToString(op, ctx_->plan->v), ")");
  if (f.kind == OpFaultKind::kThrow) throw std::runtime_error(what);
  // A hung device: no progress. The stall monitor reports it (its peers wait on it); if nobody
  // waits on it, it fails the run itself a little later: after twice the monitor's deadline
  // (timeout + min(timeout / 2, 250 ms)), so that the monitor, which names every wait, speaks first.
  const std::chrono::nanoseconds limit =
      2 * (ctx_->options->watchdog_timeout +
           std::min<std::chrono::nanoseconds>(ctx_->options->watchdog_timeout / 2,
                                              std::chrono::milliseconds(250)));
  waiting_.clear();
  // In modeled time the device stopped here: nothing it could post is earlier than its cursor.
  // Its bound (the key a failure elsewhere waits behind, docs/executor.md "Failures in
  // modeled-time order") may still be its last post or receive — with pp 1, the step's start —
  // so raise it, or a throw earlier than this stall in modeled time would wait behind it and the
  // stall be reported instead.
  ctx_->fabric->Advance(ExecutionPlan::ComputeLp(rank_), dev_->cursor());
  if (dev_->watchdog().WaitForFailure(limit)) {
    return dev_->watchdog().Cancelled({.rank = rank_, .op = "stalled by injected fault", .step = step});
  }
  return absl::DeadlineExceededError(absl::StrCat(
      what, ": no progress for ", std::chrono::duration<double, std::milli>(limit).count(), " ms"));
}

}  // namespace rp::schedule
