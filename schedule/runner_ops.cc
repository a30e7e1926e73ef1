// DeviceRunner's op functions: compute passes (layer by layer, TP all-reduces, bucket launches),
// p2p sends and receives (buckets: runner_buckets.cc; the optimizer step: runner_optimizer.cc).
// See runner.h.
#include <algorithm>
#include <exception>

#include "absl/strings/str_cat.h"
#include "runtime/model/kernels.h"
#include "runtime/status_macros.h"
#include "runtime/timing.h"
#include "schedule/runner.h"
#include "schedule/runner_internal.h"

namespace rp::schedule {

using namespace runner_internal;  // NOLINT: this file's helpers

absl::StatusOr<DeviceRunner::Pending> DeviceRunner::TakeInput(int step, const Op& op, int k,
                                                              int mb) {
  Pending in;
  if (k == 0) {
    RP_ASSIGN_OR_RETURN(Batch b, ctx_->data->TrainMicroBatch(ctx_->layout, step, coord_.dp, mb));
    in.value = std::move(b.inputs);
    return in;
  }
  auto it = acts_.find({mb, k});
  if (it == acts_.end()) {
    return WithSite(absl::FailedPreconditionError("its input activation never arrived"), coord_,
                    rank_, step, op, -1);
  }
  in = std::move(it->second);
  acts_.erase(it);
  return in;
}

absl::StatusOr<DeviceRunner::Pending> DeviceRunner::TakeOutputGrad(int step, const Op& op, int k,
                                                                   int mb) {
  Pending dy;
  if (k == ctx_->options->program.num_model_stages() - 1) {
    auto it = dlogits_.find(mb);
    if (it == dlogits_.end()) {
      return WithSite(absl::FailedPreconditionError("backward before its forward"), coord_, rank_,
                      step, op, -1);
    }
    dy.value = std::move(it->second);
    dlogits_.erase(it);
    return dy;
  }
  auto it = grads_.find({mb, k});
  if (it == grads_.end()) {
    return WithSite(absl::FailedPreconditionError("its output gradient never arrived"), coord_,
                    rank_, step, op, -1);
  }
  dy = std::move(it->second);
  grads_.erase(it);
  return dy;
}

DeviceRunner::Part DeviceRunner::ForwardPart(int step, int op_index, const Op& op, int chunk,
                                             int mb, Pending* in, Tensor* out) {
  const ExecutionPlan& plan = *ctx_->plan;
  const int K = ctx_->options->program.num_model_stages();
  const int k = plan.Chunk(coord_.pp, chunk).model_stage;
  MlpStage* stage = stages_[static_cast<size_t>(chunk)].get();
  const OpFault* fault = ctx_->injector->OpFaultAt(rank_, step, op_index);
  return Part{
      .pass = 0, .chunk = chunk, .base = plan.Chunk(coord_.pp, chunk).op_cost[0],
      .kernel = [=, this](const TpAllReduceFn& tp, const LayerGradsDoneFn&,
                          const EpExchangeFn& ep) -> absl::Status {
        if (fault != nullptr && fault->kind == OpFaultKind::kThrow) {
          (void)InjectedFault(step, op_index, op, *fault);  // throws
        }
        RP_ASSIGN_OR_RETURN(*out, stage->Forward(mb, in->value, tp, ep));
        return k == K - 1 ? Loss(step, mb, stage, out) : absl::OkStatus();
      }};
}

DeviceRunner::Part DeviceRunner::BackwardPart(int step, int op_index, const Op& op, OpKind kind,
                                              int chunk, int mb, Pending* dy, Tensor* dx) {
  const ExecutionPlan& plan = *ctx_->plan;
  MlpStage* stage = stages_[static_cast<size_t>(chunk)].get();
  const OpFault* fault = ctx_->injector->OpFaultAt(rank_, step, op_index);
  const int pass = PassIndex(kind);
  return Part{
      .pass = pass, .chunk = chunk,
      .base = plan.Chunk(coord_.pp, chunk).op_cost[static_cast<size_t>(pass)],
      .kernel = [=, this](const TpAllReduceFn& tp, const LayerGradsDoneFn& done,
                          const EpExchangeFn& ep) -> absl::Status {
        if (fault != nullptr && fault->kind == OpFaultKind::kThrow) {
          (void)InjectedFault(step, op_index, op, *fault);  // throws
        }
        if (kind == OpKind::kWeightGrad) return stage->BackwardWeight(mb, done);
        if (kind == OpKind::kBackward) {
          RP_ASSIGN_OR_RETURN(*dx, stage->Backward(mb, dy->value, tp, done, ep));
        } else {
          RP_ASSIGN_OR_RETURN(*dx, stage->BackwardInput(mb, dy->value, tp, ep));
        }
        return absl::OkStatus();
      }};
}

absl::Status DeviceRunner::Compute(int step, int op_index, const Op& op) {
  const ExecutionPlan& plan = *ctx_->plan;
  const int K = ctx_->options->program.num_model_stages();
  const bool has_f = op.kind == OpKind::kForward || op.kind == OpKind::kForwardBackward;
  const bool has_b = op.kind != OpKind::kForward;
  const OpKind b_kind = op.kind == OpKind::kForwardBackward ? OpKind::kBackward : op.kind;
  const int f_chunk = op.chunk, f_mb = op.micro_batch;
  const int b_chunk = op.kind == OpKind::kForwardBackward ? op.backward_chunk : op.chunk;
  const int b_mb = op.kind == OpKind::kForwardBackward ? op.backward_micro_batch : op.micro_batch;
  const int kf = plan.Chunk(coord_.pp, f_chunk).model_stage;
  const int kb = plan.Chunk(coord_.pp, b_chunk).model_stage;
  Pending in, dy;
  Tensor out, dx;
  Nanos ready{0};
  absl::InlinedVector<Part, 2> parts;
  if (has_f) {
    RP_ASSIGN_OR_RETURN(in, TakeInput(step, op, kf, f_mb));
    ready = std::max(ready, in.ready);
    parts.push_back(ForwardPart(step, op_index, op, f_chunk, f_mb, &in, &out));
  }
  if (has_b) {
    if (b_kind != OpKind::kWeightGrad) {
      RP_ASSIGN_OR_RETURN(dy, TakeOutputGrad(step, op, kb, b_mb));
      ready = std::max(ready, dy.ready);
    }
    parts.push_back(BackwardPart(step, op_index, op, b_kind, b_chunk, b_mb, &dy, &dx));
    if (op.kind == OpKind::kForwardBackward) parts.back().detail = 1;
  }
  RP_RETURN_IF_ERROR(RunParts(step, op_index, op, ready, std::move(parts)));
  // The inputs were copied into the stages' passes: their storage backs the next activations.
  if (has_f) stages_[static_cast<size_t>(f_chunk)]->Donate(std::move(in.value));
  if (has_b) stages_[static_cast<size_t>(b_chunk)]->Donate(std::move(dy.value));
  if (has_f && kf < K - 1) acts_[{f_mb, kf + 1}] = Pending{std::move(out), dev_->cursor()};
  if (has_b && b_kind != OpKind::kWeightGrad && kb > 0) {
    grads_[{b_mb, kb - 1}] = Pending{std::move(dx), dev_->cursor()};
  }
  AccountActivations();
  return absl::OkStatus();
}

// One part of a compute op as it runs: the real kernel, with the modeled cursor stepped through
// the part's plan steps — layers (launching the DP buckets they complete), TP all-reduces and EP
// all-to-alls — and the compute segments between them recorded. The cursor and the kernel's
// measured time continue across an op's parts (RunParts).
class DeviceRunner::PassRun {
 public:
  PassRun(DeviceRunner& r, int step, int op_index, const Op& op, const Part& part,
          const std::vector<Nanos>& durations, Nanos* cursor, Nanos* kernel_time)
      : r_(r),
        o_(*r.ctx_->options),
        step_(step),
        op_index_(op_index),
        op_(op),
        part_(part),
        chunk_(r.ctx_->plan->Chunk(r.coord_.pp, part.chunk)),
        steps_(chunk_.steps[static_cast<size_t>(part.pass)]),
        durations_(durations),
        launches_(o_.overlap_grad_allreduce && op_index == chunk_.last_grad_op),
        cursor_(*cursor),
        kernel_time_(*kernel_time),
        segment_start_(*cursor),
        segment_wall_(r.WallNow()),
        kernel_clock_(ClockNow()),
        kernel_work_(&r.ctx_->host_work) {
    kernel_work_.Pause();
  }

  // Runs the kernel through the part's plan steps; the cursor ends at the part's end (the caller
  // sleeps until it and closes the last segment).
  absl::Status Run(bool several_parts) {
    r_.tp_calls_ = 0;
    const TpAllReduceFn tp = [this](std::span<float> buffer) { return Tp(buffer); };
    r_.ep_calls_ = 0;
    const EpExchangeFn ep = !r_.ctx_->plan->has_ep_exchanges()
                                ? EpExchangeFn()
                                : EpExchangeFn([this](EpExchange& x) { return Ep(x); });
    const LayerGradsDoneFn done = [this](int local_layer) { Advance(local_layer); };
    kernel_work_.Resume();
    const absl::Status kernel = part_.kernel(tp, done, ep);
    kernel_work_.Pause();
    RP_RETURN_IF_ERROR(WithSite(kernel, r_.coord_, r_.rank_, step_, op_, -1));
    // An F&B's F stores its activations before its B frees its own: both are live in between.
    if (several_parts) r_.AccountActivations();
    Advance(-1);
    RP_RETURN_IF_ERROR(launch_error_);
    if (chunk_.modeled_tp_tail[static_cast<size_t>(part_.pass)] && si_ + 1 == steps_.size()) {
      // The program's TP bytes of a pass whose real layers have no TP point (plan.h): zeros for
      // real values, the modeled elements timed as any TP all-reduce's.
      r_.tp_tail_.assign(static_cast<size_t>(o_.grid.tp), 0.0f);
      kernel_work_.Resume();  // Enter pauses it, Leave resumes it
      RP_RETURN_IF_ERROR(Tp(r_.tp_tail_));
      kernel_work_.Pause();
    }
    if (si_ != steps_.size()) {
      return absl::InternalError("the pass ended before the exchanges of its plan");
    }
    kernel_time_ += ClockNow() - kernel_clock_;
    return absl::OkStatus();
  }

  // Records the compute segment from the last exchange (or the part's start) to the cursor; `late`:
  // the host's lateness in waking it at its end (SleepAfterWork), idle rather than busy.
  void CloseSegment(Nanos wall_end, Nanos late) {
    r_.Record({.kind = IntervalKind::kCompute, .op = op_index_, .detail = part_.detail,
               .start = segment_start_ - r_.step_start_, .end = cursor_ - r_.step_start_,
               .wall_start = segment_wall_, .wall_end = wall_end, .wall_late = late});
  }

 private:
  Nanos ClockNow() const { return r_.ctx_->real_clock ? r_.ctx_->clock->Now() : Nanos(0); }

  // Moves the cursor over layer steps up to (excluding) the next exchange, or through the step of
  // local layer `through` if >= 0, launching the buckets the layers complete (a MoE block's expert
  // bucket first).
  void Advance(int through) {
    while (si_ < steps_.size() && steps_[si_].kind == PassStep::Kind::kLayer) {
      const PassStep& s = steps_[si_];
      cursor_ += durations_[si_];
      ++si_;
      if (launches_ && s.grads_final) {
        const size_t l = static_cast<size_t>(s.local_layer);
        for (const int b : {chunk_.expert_bucket_of_layer[l], chunk_.bucket_of_layer[l]}) {
          if (b >= 0 && launch_error_.ok()) {
            launch_error_ = r_.LaunchBucket(step_, part_.chunk, b, cursor_);
          }
        }
      }
      if (s.local_layer == through) return;
    }
  }

  // An exchange point of the pass (a TP all-reduce, an EP all-to-all): moves over the layers
  // before it, checks the plan has it next, waits (real clock) until the cursor and closes the
  // compute segment; returns the exchange's measured start. Leave moves past it.
  absl::StatusOr<Nanos> Enter(PassStep::Kind kind, const char* what) {
    Advance(-1);
    if (si_ >= steps_.size() || steps_[si_].kind != kind) {
      return absl::InternalError(absl::StrCat("the pass reached a ", what,
                                              " its plan does not have"));
    }
    kernel_time_ += ClockNow() - kernel_clock_;
    kernel_work_.Pause();  // a wait on peers
    RP_ASSIGN_OR_RETURN(const Nanos late,
                        r_.SleepAfterWork(cursor_, {.rank = r_.rank_, .op = what, .step = step_}));
    const Nanos wall0 = r_.WallNow();
    CloseSegment(wall0, late);
    return wall0;
  }

  void Leave(Nanos end, Nanos wall1) {
    kernel_work_.Resume();
    cursor_ = end;
    ++si_;
    segment_start_ = cursor_;
    segment_wall_ = wall1;
    kernel_clock_ = ClockNow();
  }

  absl::Status Tp(std::span<float> buffer) {
    RP_ASSIGN_OR_RETURN(const Nanos wall0, Enter(PassStep::Kind::kTpAllReduce, "TP all-reduce"));
    const int64_t trace_w0 = r_.dev_->WallNow();
    Coord prev = r_.coord_;  // the TP ring's previous rank: whom the ring waits for
    prev.tp = (prev.tp + o_.grid.tp - 1) % o_.grid.tp;
    r_.waiting_.assign(1, r_.ctx_->plan->grid.RankOf(prev));
    const comm::CollectiveOptions co{
        .segment_bytes = r_.ctx_->plan->ring_segment_bytes,
        .timeout = CommTimeout(o_),
        .model = {.elements = chunk_.tp_elements[static_cast<size_t>(part_.pass)]
                                               [static_cast<size_t>(r_.tp_calls_)],
                  .step = step_,
                  .reduce_gbps = o_.reduce_gbps}};
    RP_ASSIGN_OR_RETURN(comm::CollectiveResult res, r_.TpAllReduce(step_, buffer, co, cursor_));
    r_.waiting_.clear();
    const Nanos wall1 = r_.WallNow();
    const WaitSplit w = SplitWallBySpans(wall0, wall1, res.spans, r_.step_start_, res.end);
    r_.Record({.kind = IntervalKind::kTpAllReduce, .op = op_index_, .detail = r_.tp_calls_,
               .start = cursor_ - r_.step_start_, .end = res.end - r_.step_start_,
               .transfer = res.transfer + res.reduce, .peer = res.peer_wait,
               .comm = res.transfer + res.reduce, .wall_start = wall0, .wall_end = wall1,
               .wall_transfer = w.transfer, .wall_peer = w.peer, .wall_late = w.late});
    r_.dev_->Trace({.name = "TpAllReduce", .kind = rp::OpKind::kCollective,
                    .micro_batch = op_.micro_batch, .step = step_, .bytes = res.modeled_bytes},
                   trace_w0, r_.dev_->WallNow(), cursor_, res.end);
    Leave(res.end, wall1);
    ++r_.tp_calls_;
    return absl::OkStatus();
  }

  absl::Status Ep(EpExchange& x) {
    RP_ASSIGN_OR_RETURN(const Nanos wall0, Enter(PassStep::Kind::kEpAllToAll, "EP all-to-all"));
    RP_ASSIGN_OR_RETURN(const Nanos end, r_.EpAllToAll(step_, op_index_, op_, x, cursor_, wall0));
    Leave(end, r_.WallNow());
    return absl::OkStatus();
  }

  DeviceRunner& r_;
  const ExecutorOptions& o_;
  const int step_, op_index_;
  const Op& op_;
  const Part& part_;
  const ChunkPlan& chunk_;
  const std::vector<PassStep>& steps_;
  const std::vector<Nanos>& durations_;  // of each plan step of the part (the runner's scratch)
  const bool launches_;                 // the op completes the chunk's gradients: launch buckets
  Nanos& cursor_;
  Nanos& kernel_time_;
  size_t si_ = 0;  // the next plan step
  Nanos segment_start_, segment_wall_;
  Nanos kernel_clock_;
  // The kernel is host work of ours between its exchanges (the stall monitor's progress).
  HostWork kernel_work_;
  absl::Status launch_error_;
};

absl::Status DeviceRunner::RunParts(int step, int op_index, const Op& op, Nanos ready,
                                    absl::InlinedVector<Part, 2> parts) {
  const ExecutionPlan& plan = *ctx_->plan;
  const OpInfo info{.name = OpKindName(op.kind), .micro_batch = op.micro_batch, .step = step};
  Nanos base{0};
  for (const Part& p : parts) base += p.base;
  BeforeComputeOp(ready);
  RP_ASSIGN_OR_RETURN(const Device::ComputeOp c, dev_->BeginCompute(info, base, ready));
  Nanos cursor = c.start, kernel_time{0};
  uint64_t done_base = 0;
  Nanos prev_share{0};
  for (const Part& part : parts) {
    // This part's share of the op's (faulted) duration: the parts cut it by their costs.
    done_base += static_cast<uint64_t>(part.base.count());
    const Nanos share = ShareEnd(c.duration, done_base, static_cast<uint64_t>(base.count()));
    StepDurations(plan.Chunk(coord_.pp, part.chunk), part.pass, share - prev_share, &durations_);
    prev_share = share;
    PassRun run(*this, step, op_index, op, part, durations_, &cursor, &kernel_time);
    RP_RETURN_IF_ERROR(run.Run(parts.size() > 1));
    RP_ASSIGN_OR_RETURN(const Nanos late,
                        SleepAfterWork(cursor, {.rank = rank_, .op = info.name, .step = step}));
    if (&part == &parts.back()) RP_RETURN_IF_ERROR(dev_->EndCompute(info, c, cursor, kernel_time));
    run.CloseSegment(WallNow(), late);
  }
  return absl::OkStatus();
}

absl::Status DeviceRunner::Send(int step, int op_index, const Op& op) {
  const int k = ctx_->plan->Chunk(coord_.pp, op.chunk).model_stage;
  const bool grad = op.kind == OpKind::kSendGrad;
  const int peer_rank = ctx_->plan->grid.StageRank(rank_, op.peer);
  auto& store = grad ? grads_ : acts_;
  auto it = store.find({op.micro_batch, grad ? k - 1 : k + 1});
  if (it == store.end()) {
    return WithSite(absl::FailedPreconditionError("nothing to send (op before its compute)"),
                    coord_, rank_, step, op, peer_rank);
  }
  auto buf = std::make_unique<comm::Buffer>(std::move(it->second.value).Release());
  store.erase(it);
  const Nanos ready = dev_->cursor();
  const int64_t w0 = dev_->WallNow();
  absl::StatusOr<uint64_t> ticket = ctx_->Pipe(coord_, grad).rank(coord_.pp).Send(
      op.peer, std::move(buf), ready,
      {.modeled_bytes = op.bytes, .step = step, .timeout = CommTimeout(*ctx_->options)});
  if (!ticket.ok()) return WithSite(ticket.status(), coord_, rank_, step, op, peer_rank);
  const Nanos wall = WallNow();
  Record({.kind = IntervalKind::kSend, .op = op_index, .start = ready - step_start_,
          .end = ready - step_start_, .wall_start = wall, .wall_end = wall});
  dev_->Trace({.name = OpKindName(op.kind), .kind = rp::OpKind::kSend, .micro_batch = op.micro_batch,
               .step = step, .peer = peer_rank, .bytes = op.bytes},
              w0, dev_->WallNow(), ready, ready, FlowId(rank_, *ticket));
  return absl::OkStatus();
}

absl::Status DeviceRunner::Recv(int step, int op_index, const Op& op) {
  const int k = ctx_->plan->Chunk(coord_.pp, op.chunk).model_stage;
  const bool grad = op.kind == OpKind::kRecvGrad;
  const int peer_rank = ctx_->plan->grid.StageRank(rank_, op.peer);
  const Nanos reached = dev_->cursor();
  const Nanos wall0 = WallNow();
  const int64_t w0 = dev_->WallNow();
  waiting_ = {peer_rank};
  absl::StatusOr<comm::Received> r = ctx_->Pipe(coord_, grad).rank(coord_.pp).Recv(
      op.peer, {.step = step, .timeout = CommTimeout(*ctx_->options), .what = OpKindName(op.kind)});
  if (!r.ok()) return WithSite(r.status(), coord_, rank_, step, op, peer_rank);
  const Nanos arrival = r->timing.arrival;
  const Nanos end = std::max(reached, arrival);
  dev_->AdvanceCursor(end);
  RP_RETURN_IF_ERROR(WithSite(Sleep(end, {.rank = rank_, .op = OpKindName(op.kind),
                                          .peer = peer_rank, .step = step,
                                          .micro_batch = op.micro_batch}),
                              coord_, rank_, step, op, peer_rank));
  waiting_.clear();
  const int rows = ctx_->layout.microbatch_size;
  const int64_t n = static_cast<int64_t>(r->buffer->size());
  Tensor t(rows, rows > 0 ? n / rows : 0, std::move(*r->buffer));
  (grad ? grads_ : acts_)[{op.micro_batch, k}] = Pending{std::move(t), arrival};
  const Nanos wall1 = WallNow();
  const WaitSplit e = SplitWait(reached, end, r->timing.ready);
  const WaitSplit w = SplitMeasuredWait(wall0, wall1, WallOf(r->timing.ready), WallOf(end));
  Record({.kind = IntervalKind::kRecv, .op = op_index, .start = reached - step_start_,
          .end = end - step_start_, .transfer = e.transfer, .peer = e.peer,
          .comm = arrival - r->timing.ready, .wall_start = wall0, .wall_end = wall1,
          .wall_transfer = w.transfer, .wall_peer = w.peer, .wall_late = w.late});
  dev_->Trace({.name = OpKindName(op.kind), .kind = rp::OpKind::kRecv, .micro_batch = op.micro_batch,
               .step = step, .peer = peer_rank, .bytes = op.bytes},
              w0, dev_->WallNow(), reached, end, FlowId(peer_rank, r->ticket));
  return absl::OkStatus();
}

}  // namespace rp::schedule
