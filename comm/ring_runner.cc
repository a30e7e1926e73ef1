// RingRunner: one call's lifecycle (begin, finish, failure), its phases and the timed driver.
#include "comm/ring_runner.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "runtime/status_macros.h"

namespace rp::comm::internal {

ring::TimedKind TimedKindOf(OpKind kind) {
  switch (kind) {
    case OpKind::kAllReduce: return ring::TimedKind::kAllReduce;
    case OpKind::kReduceScatter: return ring::TimedKind::kReduceScatter;
    case OpKind::kAllGather: return ring::TimedKind::kAllGather;
    case OpKind::kBroadcast: return ring::TimedKind::kBroadcast;
    case OpKind::kAllToAll:
    case OpKind::kAllToAllV: break;  // not ring collectives (comm/alltoall.cc)
  }
  return ring::TimedKind::kAllReduce;
}

RingRunner::~RingRunner() {
  if (!began_ || timed_) return;  // timed messages own their bytes: nothing is lent
  rc_.in_op_.store(false, std::memory_order_seq_cst);
  if (finished_) return;
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (true) {
    (void)DrainAcks();  // best effort: the group already failed
    if (rc_.in_flight_ == 0 || !group_.AnyRankInOpBesides(r_)) break;
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::yield();
  }
  // The group is dead; buffers still out, and views held, are abandoned with it.
  rc_.in_flight_ = 0;
  rc_.held_ = 0;
}

absl::Status RingRunner::Begin() {
  // Announce before checking the abort flag (seq_cst both sides): a failing predecessor then
  // either sees this rank in the op and waits for it, or this rank sees the abort.
  rc_.in_op_.store(true, std::memory_order_seq_cst);
  began_ = true;
  if (group_.aborted()) {
    return absl::FailedPreconditionError(
        absl::StrCat(Prefix(), ": communicator aborted earlier: ",
                     group_.abort_status().ToString()));
  }
  op_id_ = rc_.next_op_id_++;
  if (feedback_) residual_ = rc_.Residual(feedback_slot_, count_).data();
  if (timed_) return absl::OkStatus();  // RunTimed does the rest
  // Chunk 0 is the largest chunk; a broadcast's segments span the whole buffer.
  const size_t max_chunk =
      kind_ == OpKind::kBroadcast ? count_ : ring::ChunkRange(count_, n_, 0).size;
  const size_t max_segments = static_cast<size_t>(ring::NumSegments(max_chunk, seg_));
  if (rc_.ready_.size() < max_segments) {
    rc_.ready_.resize(max_segments);
    rc_.fwd_.resize(max_segments);
    rc_.fwd_hops_.resize(max_segments);
  }
  std::fill_n(rc_.ready_.begin(), max_segments, start_);
  forward_ = group_.options().forward_lends && codec_ == Codec::kFp32 && n_ > 2;
  stream_ = count_ * sizeof(float) * static_cast<size_t>(n_) >= group_.options().streaming_min_bytes;
  if (codec_ != Codec::kFp32 && n_ > 1) {
    // Sized for the largest segment this call sends (a segment is at most one chunk), not for
    // segment_bytes: a small all-reduce with 1 GiB segments must not allocate 1 GiB buffers.
    const size_t largest = std::min(seg_, max_chunk);
    const size_t bytes = (SegmentWireBytes(codec_, largest) + 63) / 64 * 64;
    const size_t buffers = group_.options().channel_capacity + 2;
    if (rc_.pool_buffer_bytes_ < bytes || rc_.pool_.size() < buffers) {
      RP_CHECK(rc_.in_flight_ == 0) << "wire buffers still in flight";
      rc_.pool_.clear();
      rc_.free_buffers_.clear();
      rc_.free_buffers_.reserve(buffers);
      for (size_t i = 0; i < buffers; ++i) {
        rc_.pool_.push_back(std::make_unique<std::byte[]>(bytes));
        rc_.free_buffers_.push_back(rc_.pool_.back().get());
      }
      rc_.pool_buffer_bytes_ = bytes;
    }
  }
  return absl::OkStatus();
}

absl::Status RingRunner::ReduceScatterPhase(const float* in, float* work, float* own_out) {
  return RunSteps(n_ - 1, [&](int t) { return ReduceScatterStep(t, in, work, own_out); });
}

absl::Status RingRunner::AllGatherPhase(float* out) {
  return RunSteps(n_ - 1, [&](int t) { return AllGatherStep(t, out); });
}

absl::Status RingRunner::AllReducePhases(const float* in, float* out, float* own_out) {
  return RunSteps(2 * (n_ - 1), [&](int t) {
    return t < n_ - 1 ? ReduceScatterStep(t, in, out, own_out) : AllGatherStep(t - (n_ - 1), out);
  });
}

absl::Status RingRunner::BroadcastChain(int root, const float* src, float* out) {
  const Range all{0, count_};
  const int segments = Segments(all);
  const bool lossy = codec_ != Codec::kFp32;
  const bool forward = next_ != root;
  for (int k = 0; k < segments; ++k) {
    const Range g = Segment(all, k);
    if (r_ == root) {
      RP_RETURN_IF_ERROR(SendSegment(src + g.begin, lossy ? out + g.begin : nullptr, g, 0, 0, k,
                                     start_, false, 0));
      if (!lossy && src != out && g.size > 0) {
        std::memcpy(out + g.begin, src + g.begin, g.size * sizeof(float));
      }
      continue;
    }
    Stamped<WireMsg> m;
    RP_RETURN_IF_ERROR(RecvSegment(0, 0, k, g.size, &m));
    Decode(codec_, m.body.payload, g.size, out + g.begin);
    RP_RETURN_IF_ERROR(Release(m, 0, k));
    if (forward) {
      RP_RETURN_IF_ERROR(
          SendSegment(out + g.begin, nullptr, g, 0, 0, k, rc_.ready_[static_cast<size_t>(k)],
                      false, 0));
    }
  }
  return absl::OkStatus();
}

absl::Status RingRunner::Finish() {
  while (rc_.in_flight_ > 0) {
    Ack a;
    absl::Status s = rc_.acks_from_next_->Pop(&a, timeout_);
    if (!s.ok()) return Fail(s, "waiting for the final acknowledgements of", next_, n_ - 2);
    RP_RETURN_IF_ERROR(OnAck(a));
  }
  finished_ = true;
  if (timed_) rc_.stats_.modeled_bytes += result_.modeled_bytes;
  rc_.stats_.collective_bytes[static_cast<int>(codec_)] += result_.wire_bytes;
  rc_.stats_.messages += result_.messages;
  rc_.stats_.forwarded += result_.forwarded;
  return absl::OkStatus();
}

absl::Status RingRunner::RunTimed(RingMachine::Buffers buffers) {
  const CommunicatorOptions& go = group_.options();
  if (feedback_) buffers.residual = residual_;
  SegmentPool pool;  // this call's received segments carry its next sends
  RingMachine machine({.kind = TimedKindOf(kind_), .n = n_, .rank = r_, .root = broadcast_root_,
                       .device = rc_.device(), .next_device = group_.device(next_),
                       .count = count_, .codec = codec_, .segment_elems = seg_, .model = model_,
                       .error_feedback = feedback_, .op_id = op_id_},
                      buffers, start_, &pool);
  std::vector<RingMachine::Send> sends;
  absl::Status s = machine.Begin(&sends);
  if (!s.ok()) return FailLocal(s, "encoding", 0);
  const LpId lp = go.lps[static_cast<size_t>(r_)];
  while (true) {
    for (RingMachine::Send& send : sends) {
      if (go.send_hook) go.send_hook(r_);
      absl::StatusOr<uint64_t> ticket =
          go.fabric->Post(lp, group_.RingChannel(r_), send.message, std::move(send.payload));
      if (!ticket.ok()) return FailLocal(ticket.status(), "posting to the fabric", machine.next_step());
    }
    sends.clear();
    if (machine.done()) break;
    const int step = machine.next_step();
    const WaitSite site{.rank = rc_.device(), .op = "collective receive",
                        .peer = group_.device(prev_), .step = model_.step};
    absl::StatusOr<Delivery> d = go.fabric->Await(lp, group_.RingChannel(prev_), site, timeout_);
    if (!d.ok()) return Fail(d.status(), "waiting for", prev_, step);
    if (go.clock != nullptr) go.clock->WaitUntil(d->timing.arrival);
    const SegmentPayload* payload = AsSegment(d->payload.get());
    if (payload == nullptr) {
      return Fail(absl::InternalError("a ring message without its data"), "receiving from",
                  prev_, step);
    }
    s = machine.OnReceive(d->timing, *payload, &sends);
    pool.Give(std::move(d->payload));
    if (!s.ok()) {
      return s.code() == absl::StatusCode::kFailedPrecondition
                 ? Fail(s, "receiving from", prev_, step)
                 : FailLocal(s, "reducing", step);
    }
  }
  result_ = machine.TakeResult();
  return absl::OkStatus();
}

float* RingRunner::Scratch(size_t elems) {
  if (rc_.scratch_.size() < elems) rc_.scratch_.resize(elems);
  return rc_.scratch_.data();
}

std::string RingRunner::Prefix() const { return OpPrefix(r_, rc_.device(), kind_, op_id_); }

absl::Status RingRunner::Fail(const absl::Status& s, const char* what, int peer, int step) {
  return group_.FailAt(s, absl::StrCat(Prefix(), " ", what, " rank ", peer, " (device ",
                                       group_.device(peer), ") at ring step ", step));
}

absl::Status RingRunner::FailLocal(const absl::Status& s, const char* what, int step) {
  return group_.AbortAt(s, absl::StrCat(Prefix(), " ", what, " at ring step ", step));
}

absl::Status RingRunner::OnAck(const Ack& a, bool count_in_flight) {
  if (count_in_flight) --rc_.in_flight_;
  if (a.pool_buffer != nullptr) rc_.free_buffers_.push_back(a.pool_buffer);
  if (a.hops > 0) {
    --rc_.held_;
    if (!rc_.acks_to_prev_->TryPush(Ack{nullptr, a.hops - 1})) {
      return FailLocal(absl::InternalError("acknowledgement queue full"),
                       "relaying an acknowledgement", n_ - 2);
    }
  }
  return absl::OkStatus();
}

absl::Status RingRunner::DrainAcks() {
  Ack a;
  while (rc_.acks_from_next_->TryPop(&a)) RP_RETURN_IF_ERROR(OnAck(a));
  return absl::OkStatus();
}

}  // namespace rp::comm::internal
