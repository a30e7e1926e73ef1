// DeviceRunner's gradient buckets: launched inside the last backward as their layers' gradients
// are final, run on the comm stream (a thread on the real clock, the fabric's event handler on the
// virtual clock), their all-reduce timed by its own messages. See runner.h.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "runtime/status_macros.h"
#include "runtime/timing.h"
#include "schedule/runner.h"
#include "schedule/runner_internal.h"

namespace rp::schedule {

using namespace runner_internal;  // NOLINT: this file's helpers

// The comm stream runs a rank's buckets in its bucket order, which every member of a group agrees
// on (with two directions: by model stage — devices k and p - 1 - k hold the same two stages, and
// in launch order they would wait for each other). A bucket final before one ahead of it waits,
// and starts at the modeled time the one ahead starts (the comm stream would not run it sooner).
// The predictor does the same (predictor_sim.cc LaunchBucket).
absl::Status DeviceRunner::LaunchBucket(int step, int chunk, int bucket, Nanos ready) {
  const auto& order = ctx_->plan->ranks[static_cast<size_t>(coord_.pp)].bucket_order;
  const auto it = std::find(order.begin(), order.end(), std::make_pair(chunk, bucket));
  final_[static_cast<size_t>(it - order.begin())] = true;
  for (; next_launch_ < order.size() && final_[next_launch_]; ++next_launch_) {
    RP_RETURN_IF_ERROR(StartBucket(step, static_cast<int>(next_launch_), ready));
  }
  return absl::OkStatus();
}

absl::Status DeviceRunner::StartBucket(int step, int o, Nanos ready) {
  // Not a structured binding: clang 14 cannot capture one in the comm stream's lambda below.
  const std::pair<int, int>& at = ctx_->plan->ranks[static_cast<size_t>(coord_.pp)].bucket_order[static_cast<size_t>(o)];
  const int chunk = at.first, bucket = at.second;
  launched_[static_cast<size_t>(o)] = true;
  const BucketPlan& b = ctx_->plan->Chunk(coord_.pp, chunk).buckets[static_cast<size_t>(bucket)];
  if (ctx_->plan->BucketGroup(rank_, chunk, b, nullptr).size() == 1) {  // nothing to reduce
    buckets_[static_cast<size_t>(o)] = BucketRecord{.ready = ready, .start = ready, .end = ready, .spans = {}};
    ctx_->fabric->Signal(gates_[static_cast<size_t>(o)], ready);
    return absl::OkStatus();
  }
  if (!ctx_->comm_streams.empty()) {
    EnqueueBucket(step, o, chunk, bucket, ready);
    return absl::OkStatus();
  }
  ctx_->fabric->AddWork(ExecutionPlan::CommLp(rank_), ready);
  dev_->PostComm([this, step, o, chunk, bucket, ready]() -> absl::Status {
    absl::Status s;
    try {
      s = RunBucket(step, o, chunk, bucket, ready);
    } catch (const std::exception& e) {
      s = absl::InternalError(absl::StrCat("rank ", rank_, " step ", step, " gradient bucket ", o,
                                           ": exception on the comm stream: ", e.what()));
    }
    if (!s.ok()) {
      ctx_->NoteError({.rank = rank_, .step = step, .op = -1,
                       .op_name = absl::StrCat("gradient bucket ", o, " (DP all-reduce)"),
                       .waiting = comm_waiting_, .status = s});
    }
    return s;
  });
  return absl::OkStatus();
}

absl::StatusOr<comm::CollectiveResult> DeviceRunner::TpAllReduce(
    int step, std::span<float> buffer, const comm::CollectiveOptions& co, Nanos start) {
  comm::Communicator& tp = ctx_->Tp(coord_);
  if (ctx_->tp_streams.empty() || tp.size() == 1) {
    return tp.rank(coord_.tp).AllReduce(buffer, buffer, co, start);
  }
  const int n = tp.size(), index = coord_.tp, prev = (index + n - 1) % n;
  const comm::ring::Range own = comm::ring::ChunkRange(buffer.size(), n, index);
  const WaitSite site{.rank = rank_, .op = "TP all-reduce", .peer = tp.device(prev), .step = step};
  comm::EventCommStream::Collective c{
      .spec = {.kind = comm::ring::TimedKind::kAllReduce, .n = n, .rank = index,
               .device = tp.device(index), .next_device = tp.device((index + 1) % n),
               .count = buffer.size(), .codec = co.codec,
               .segment_elems = co.segment_bytes / sizeof(float), .model = co.model,
               .op_id = tp.rank(index).TakeOpId()},
      .buffers = {.in = buffer.data(), .out = buffer.data(), .work = buffer.data(),
                  .own_out = buffer.data() + own.begin},
      .ready = start,
      .send_channel = tp.RingChannel(index),
      .recv_channel = tp.RingChannel(prev),
      .site = site,
      // Captures 16 bytes, which std::function keeps inline (no allocation per all-reduce).
      .done = [this, step](Fabric::Scope& scope, absl::StatusOr<comm::CollectiveResult>& r) {
        if (r.ok()) ctx_->Tp(coord_).rank(coord_.tp).Account(*r, tp_codec_);
        const absl::Status status = r.status();
        const Nanos end = r.ok() ? r->end : Nanos(0);
        tp_result_ = std::move(r);
        scope.Signal(tp_gate_, end);
        if (!status.ok()) {
          // Noted here, in commit order, before the abort releases anyone: among the records that
          // carry this status (every wait the abort releases), this one is first.
          ctx_->NoteError({.rank = rank_, .step = step, .op = -1, .op_name = "TP all-reduce",
                           .waiting = {}, .status = status});
          scope.Abort(status);
        }
      }};
  tp_codec_ = co.codec;
  ctx_->tp_streams[static_cast<size_t>(rank_)]->Enqueue(std::move(c));
  absl::StatusOr<Nanos> end = ctx_->fabric->AwaitGate(ExecutionPlan::ComputeLp(rank_), tp_gate_, site);
  ctx_->fabric->ResetGate(tp_gate_);
  if (!end.ok()) return end.status();
  return std::move(tp_result_);
}

comm::CollectiveOptions DeviceRunner::BucketOptions(int step, int order,
                                                    const BucketPlan& b) const {
  const ExecutorOptions& o = *ctx_->options;
  return {.codec = o.codec,
          .segment_bytes = ctx_->plan->ring_segment_bytes,
          .timeout = CommTimeout(o),
          .error_feedback = o.error_feedback,
          .feedback_slot = order,
          .model = {.elements = b.modeled_elements, .step = step, .reduce_gbps = o.reduce_gbps}};
}

void DeviceRunner::EnqueueBucket(int step, int order, int chunk, int bucket, Nanos ready) {
  const BucketPlan& b = ctx_->plan->Chunk(coord_.pp, chunk).buckets[static_cast<size_t>(bucket)];
  std::span<float> g = stages_[static_cast<size_t>(chunk)]->grads().subspan(b.grad_offset, b.grad_count);
  int index = 0;
  const std::vector<int> group = ctx_->plan->BucketGroup(rank_, chunk, b, &index);
  const int n = static_cast<int>(group.size());
  const int prev = (index + n - 1) % n;
  comm::Communicator& comm = ctx_->Grad(ctx_->plan->BucketGroupId(rank_, chunk, b));
  comm::RankComm& rc = comm.rank(index);
  const comm::CollectiveOptions co = BucketOptions(step, order, b);
  const comm::ring::Range own = comm::ring::ChunkRange(g.size(), n, index);
  float* residual = nullptr;
  if (co.error_feedback && co.codec != comm::Codec::kFp32) {
    residual = rc.Residual(co.feedback_slot, g.size()).data();
  }
  const Nanos step_start = step_start_;
  const int64_t wall_handed = dev_->WallNow();
  comm::EventCommStream::Collective c{
      .spec = {.kind = comm::ring::TimedKind::kAllReduce, .n = n, .rank = index,
               .device = comm.device(index), .next_device = comm.device((index + 1) % n),
               .count = g.size(), .codec = co.codec, .segment_elems = co.segment_bytes / sizeof(float),
               .model = co.model, .error_feedback = co.error_feedback, .op_id = rc.TakeOpId()},
      .buffers = {.in = g.data(), .out = g.data(), .work = g.data(),
                  .own_out = g.data() + own.begin, .residual = residual},
      .ready = ready,
      .send_channel = comm.RingChannel(index),
      .recv_channel = comm.RingChannel(prev),
      .site = {.rank = rank_, .op = "gradient bucket", .peer = group[static_cast<size_t>(prev)],
               .step = step},
      .done = [this, step, order, ready, step_start, wall_handed, &rc, codec = co.codec,
               waiting = group[static_cast<size_t>(prev)]](
                  Fabric::Scope& scope, absl::StatusOr<comm::CollectiveResult>& r) {
        if (!r.ok()) {
          const absl::Status s(r.status().code(),
                               absl::StrCat("rank ", rank_, " step ", step, " gradient bucket ",
                                            order, " (DP all-reduce): ", r.status().message()));
          ctx_->NoteError({.rank = rank_, .step = step, .op = -1,
                           .op_name = absl::StrCat("gradient bucket ", order, " (DP all-reduce)"),
                           // Only a wait that timed out (real clock) missed its peer; a data
                           // error (found at a commit) waited for nobody.
                           .waiting = absl::IsDeadlineExceeded(r.status()) ? std::vector<int>{waiting}
                                                                           : std::vector<int>{},
                           .status = s});
          scope.Abort(s);
          return;
        }
        rc.Account(*r, codec);
        buckets_[static_cast<size_t>(order)] =
            BucketRecord{.ready = ready, .start = r->start, .end = r->end,
                         .transfer = r->transfer, .reduce = r->reduce, .spans = std::move(r->spans),
                         .wall_start_m = r->start - step_start, .wall_end_m = r->end - step_start,
                         .modeled_bytes = r->modeled_bytes,
                         .trace_wall_start = wall_handed, .trace_wall_end = dev_->WallNow(),
                         .lane_seq = ctx_->lane != nullptr ? ctx_->lane->pushed() : 0};
        scope.Signal(gates_[static_cast<size_t>(order)], r->end);
      },
      .tag = order};
  ctx_->comm_streams[static_cast<size_t>(rank_)]->Enqueue(std::move(c));
}

// A data error the lane kept for one of this device's buckets (comm/data_lane.h). A root error
// (this device's own data overflowed or mismatched) is the device's failure, which the executor
// orders among the others in modeled time. A consequence (its data came from another device's
// failed bucket) waits for that device's failure to end the run — which device fails is decided
// by the data alone, while failing here would let whichever thread got here first name the run's
// failure. The wait does not hold back commits (a gate), so the failing device gets there.
absl::Status DeviceRunner::LaneDataError(int step, int bucket, const absl::Status& s) {
  if (ctx_->fabric->aborted()) return ctx_->fabric->abort_status();
  waiting_.clear();  // a data error waits for nobody
  const absl::Status named(s.code(), absl::StrCat("rank ", rank_, " step ", step, " gradient bucket ",
                                                  bucket, " (DP all-reduce): ", s.message()));
  if (!absl::IsAborted(s)) return named;
  const absl::StatusOr<Nanos> waited = ctx_->fabric->AwaitGate(
      ExecutionPlan::ComputeLp(rank_), abort_gate_,
      {.rank = rank_, .op = "Opt (awaits the failure its bucket's data came from)", .step = step});
  return waited.ok() ? named : waited.status();
}

absl::Status DeviceRunner::RunBucket(int step, int order, int chunk, int bucket, Nanos ready) {
  const BucketPlan& b = ctx_->plan->Chunk(coord_.pp, chunk).buckets[static_cast<size_t>(bucket)];
  const Nanos start = std::max(ready, comm_prev_end_);
  std::span<float> g = stages_[static_cast<size_t>(chunk)]->grads().subspan(b.grad_offset, b.grad_count);
  int index = 0;
  const std::vector<int> group = ctx_->plan->BucketGroup(rank_, chunk, b, &index);
  const int n = static_cast<int>(group.size());
  comm_waiting_ = {group[static_cast<size_t>((index + n - 1) % n)]};
  // The bucket is handed over while the backward's real kernel runs, ahead of the clock: on a real
  // clock this thread first waits for the bucket's modeled start (its ring posts nothing earlier,
  // as the promise to the fabric says), then stamps its measured start — read off the clock after
  // the wait, as a compute op's is (the pickup stamp drew the all-reduce over the backward that
  // launched it).
  if (ctx_->real_clock != nullptr) {
    ctx_->fabric->Advance(ExecutionPlan::CommLp(rank_), start);
    ctx_->clock_sleepers.fetch_add(1, std::memory_order_relaxed);
    const absl::Status waited =
        dev_->WaitUntil(start, {.rank = rank_, .op = "gradient bucket", .step = step});
    ctx_->clock_sleepers.fetch_sub(1, std::memory_order_relaxed);
    RP_RETURN_IF_ERROR(waited);
  }
  const int64_t w0 = dev_->WallNow();  // the trace's wall stamp, after the wait too
  const Nanos wall0 = WallNow();
  const comm::CollectiveOptions co = BucketOptions(step, order, b);
  absl::StatusOr<comm::CollectiveResult> r =
      ctx_->Grad(ctx_->plan->BucketGroupId(rank_, chunk, b)).rank(index).AllReduce(g, g, co, start);
  if (!r.ok()) {
    return absl::Status(r.status().code(),
                        absl::StrCat("rank ", rank_, " step ", step, " gradient bucket ", order,
                                     " (DP all-reduce): ", r.status().message()));
  }
  comm_waiting_.clear();
  comm_prev_end_ = r->end;
  buckets_[static_cast<size_t>(order)] =
      BucketRecord{.ready = ready, .start = start, .end = r->end, .transfer = r->transfer,
                   .reduce = r->reduce, .spans = std::move(r->spans), .wall_start_m = wall0,
                   .wall_end_m = WallNow()};
  dev_->Trace({.name = "AllReduce", .kind = rp::OpKind::kCollective, .step = step,
               .bytes = r->modeled_bytes},
              w0, dev_->WallNow(), start, r->end);
  // Publishes the record (the fabric's lock orders it before the waiter's read).
  ctx_->fabric->Signal(gates_[static_cast<size_t>(order)], r->end);
  ctx_->fabric->FinishWork(ExecutionPlan::CommLp(rank_));
  return absl::OkStatus();
}

}  // namespace rp::schedule
