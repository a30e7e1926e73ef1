// Ring collectives. Words (chunk, segment, step) as defined in comm/ring_steps.h.
//
// Protocol on each ring link r -> r + 1: a data channel of WireMsg (one per segment, in step-major
// order on both sides) and an acknowledgement queue back r + 1 -> r. The receiver acknowledges a
// message once it has consumed its bytes (reduced, decoded or copied them); the acknowledgement
// returns the sender's pool buffer (lossy codecs) or ends the lend of the sender's FP32 buffer.
// A sender drains acknowledgements before every send, so at most capacity + 2 acknowledgements
// are ever queued (the ack queue holds 2 * capacity + 2).
//
// Timed communicators (a fabric): each segment's wire bytes are copied (encoded) into a buffer of
// its own that the receiver frees, so nothing is lent and nothing is acknowledged (a sender never
// waits for its receiver, see comm/communicator.h); the modeled message is posted to the fabric as
// soon as its ready time is known (step 0 at Begin, step s + 1 segment k when step s segment k was
// consumed), in send order, and the receiver awaits the fabric's timing before popping the data.
// Segments follow the modeled shape (comm/ring_timing.h): K per chunk, real chunks cut into K.
//
// Inline messages (at most CommunicatorOptions::inline_bytes wire bytes, the small-message path)
// are copied or encoded into one of the link's capacity + 1 slots and are not acknowledged: the
// sender rewrites a slot only after Channel::WaitWritable, when the receiver has popped the message
// after the one that used it and is therefore done reading it (acquire of the queue's read index,
// released by that pop). A small all-reduce then costs 2(n - 1) forward hand-offs and nothing else.
#include "comm/collectives.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "comm/ring_steps.h"
#include "comm/ring_machine.h"
#include "comm/ring_timing.h"
#include "runtime/status_macros.h"

namespace rp::comm {

absl::Status ValidateCollectiveOptions(const CollectiveOptions& options) {
  if (static_cast<int>(options.codec) > 3) {
    return absl::InvalidArgumentError("codec: unknown value");
  }
  if (options.segment_bytes < 4 || options.segment_bytes % 4 != 0 ||
      options.segment_bytes > (size_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat("segment_bytes: ", options.segment_bytes,
                                                   " (must be a multiple of 4 in [4, 1 GiB])"));
  }
  if (options.feedback_slot < 0 || options.feedback_slot > (1 << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("feedback_slot: ", options.feedback_slot, " (must be in [0, 2^20])"));
  }
  if (options.timeout.count() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeout: ", options.timeout.count(), " ns (must be > 0)"));
  }
  return absl::OkStatus();
}

namespace internal {

using ring::Range;

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

// Runs the phases of one collective on one rank. Lives for one Run().
class RingRunner {
 public:
  RingRunner(RankComm* rc, OpKind kind, const CollectiveOptions& options, size_t count,
             Nanos start)
      : rc_(*rc),
        group_(rc->group()),
        kind_(kind),
        codec_(options.codec),
        timeout_(options.timeout),
        count_(count),
        seg_(options.segment_bytes / sizeof(float)),
        n_(rc->size()),
        r_(rc->rank()),
        next_((r_ + 1) % n_),
        prev_((r_ + n_ - 1) % n_),
        start_(start),
        model_(options.model),
        timed_(rc->group().options().fabric != nullptr) {
    feedback_ = options.error_feedback && codec_ != Codec::kFp32;
    feedback_slot_ = options.feedback_slot;
    result_.start = start;
    result_.end = start;
  }

  // On any exit without Finish (an error), waits until no peer can still read this rank's lent
  // buffers: every lend acknowledged (forwarded views included), or every other rank out of its
  // collective (they leave promptly: the group is aborted). A forwarded view of this rank's buffer
  // may be read by any rank, so all are checked; each rank leaves the op (in_op_ = false) before it
  // waits, as it reads nothing more, so no two failing ranks wait for each other. Bounded by the
  // timeout.
  ~RingRunner() {
    if (!began_ || timed_) return;  // timed messages own their bytes: nothing is lent
    rc_.in_op_.store(false, std::memory_order_seq_cst);
    if (finished_) return;
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    while (true) {
      (void)DrainAcks();  // best effort: the group already failed
      if (rc_.in_flight_ == 0 || !AnyOtherRankInOp()) break;
      if (std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::yield();
    }
    // The group is dead; buffers still out, and views held, are abandoned with it.
    rc_.in_flight_ = 0;
    rc_.held_ = 0;
  }

  // Checks the group, takes an op id, sizes the reusable state.
  absl::Status Begin() {
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
    const size_t max_segments = static_cast<size_t>(
        ring::NumSegments(
                     kind_ == OpKind::kBroadcast ? count_ : ring::ChunkRange(count_, n_, 0).size,
                     seg_));
    if (rc_.ready_.size() < max_segments) {
      rc_.ready_.resize(max_segments);
      rc_.fwd_.resize(max_segments);
      rc_.fwd_hops_.resize(max_segments);
    }
    std::fill_n(rc_.ready_.begin(), max_segments, start_);
    forward_ = group_.options().forward_lends && codec_ == Codec::kFp32 && n_ > 2;
    stream_ = count_ * sizeof(float) * static_cast<size_t>(n_) >= group_.options().streaming_min_bytes;
    if (codec_ != Codec::kFp32 && n_ > 1) {
      const size_t bytes = (SegmentWireBytes(codec_, seg_) + 63) / 64 * 64;
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
  void set_broadcast_root(int root) { broadcast_root_ = root; }

  // Reduce-scatter over the ring. `in` is this rank's contribution (count elements), `work`
  // receives partial sums (count elements; may equal `in`), `own_out` receives the reduced chunk
  // r (chunk-sized; may point into `work`).
  absl::Status ReduceScatterPhase(const float* in, float* work, float* own_out) {
    return RunSteps(n_ - 1, [&](int t) { return ReduceScatterStep(t, in, work, own_out); });
  }

  // All-gather over the ring; `out` (count elements) holds the reduced chunk r on entry. With a
  // lossy codec this rank adopts the decoded value of its own chunk, as its receivers will.
  absl::Status AllGatherPhase(float* out) {
    return RunSteps(n_ - 1, [&](int t) { return AllGatherStep(t, out); });
  }

  // Reduce-scatter then all-gather as one sequence of 2(n - 1) steps, so the all-gather's first
  // segments leave while the reduce-scatter's last ones are still being reduced.
  absl::Status AllReducePhases(const float* in, float* out, float* own_out) {
    return RunSteps(2 * (n_ - 1), [&](int t) {
      return t < n_ - 1 ? ReduceScatterStep(t, in, out, own_out) : AllGatherStep(t - (n_ - 1), out);
    });
  }

  // A pipelined chain root -> root + 1 -> ... -> root - 1 over the whole buffer.
  absl::Status BroadcastChain(int root, const float* src, float* out) {
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

  // Waits until the next rank acknowledged every message (every lend ended, every wire buffer
  // home), so the caller may touch its buffers again.
  absl::Status Finish() {
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

  // Timed (a fabric): runs the collective as a RingMachine driven by this thread — posts its
  // sends, awaits the next ring message (and, with a clock, its arrival), feeds it, repeats.
  // Nothing is lent and nothing acknowledged: each message owns its bytes.
  absl::Status RunTimed(RingMachine::Buffers buffers) {
    const CommunicatorOptions& go = group_.options();
    if (feedback_) buffers.residual = residual_;
    RingMachine machine({.kind = TimedKindOf(kind_), .n = n_, .rank = r_, .root = broadcast_root_,
                         .device = rc_.device(), .next_device = group_.device(next_),
                         .count = count_, .codec = codec_, .segment_elems = seg_, .model = model_,
                         .error_feedback = feedback_, .op_id = op_id_},
                        buffers, start_);
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
      const auto* payload = dynamic_cast<const SegmentPayload*>(d->payload.get());
      if (payload == nullptr) {
        return Fail(absl::InternalError("a ring message without its data"), "receiving from",
                    prev_, step);
      }
      s = machine.OnReceive(d->timing, *payload, &sends);
      if (!s.ok()) {
        return s.code() == absl::StatusCode::kFailedPrecondition
                   ? Fail(s, "receiving from", prev_, step)
                   : FailLocal(s, "reducing", step);
      }
    }
    result_ = machine.result();
    return absl::OkStatus();
  }

  const CollectiveResult& result() const { return result_; }
  bool timed() const { return timed_; }

  // The rank's reusable scratch buffer, at least `elems` long.
  float* Scratch(size_t elems) {
    if (rc_.scratch_.size() < elems) rc_.scratch_.resize(elems);
    return rc_.scratch_.data();
  }

 private:
  // Segments of `chunk` and the real range of its segment k: the modeled K when timed, else
  // segment_bytes-sized pieces (comm/ring_steps.h).
  int Segments(Range chunk) const { return ring::NumSegments(chunk.size, seg_); }
  Range Segment(Range chunk, int k) const { return ring::SegmentRange(chunk, seg_, k); }

  std::string Prefix() const {
    return absl::StrCat("rank ", r_, " (device ", rc_.device(), ") ", OpName(kind_), " #", op_id_);
  }

  bool AnyOtherRankInOp() {
    for (int k = 0; k < n_; ++k) {
      if (k != r_ && group_.rank(k).in_op_.load(std::memory_order_seq_cst)) return true;
    }
    return false;
  }

  // Formats `s` with this rank, op, peer and step; aborts the group unless `s` is the echo of an
  // earlier abort.
  absl::Status Fail(const absl::Status& s, const char* what, int peer, int step) {
    const std::string where = absl::StrCat(Prefix(), " ", what, " rank ", peer, " (device ",
                                           group_.device(peer), ") at ring step ", step);
    if (s.code() == absl::StatusCode::kCancelled) {
      return absl::AbortedError(absl::StrCat(where, ": aborted because the group failed: ",
                                             group_.abort_status().ToString()));
    }
    absl::Status out(s.code(), absl::StrCat(where, ": ", s.message()));
    group_.Abort(out);
    return out;
  }
  absl::Status FailLocal(const absl::Status& s, const char* what, int step) {
    absl::Status out(s.code(),
                     absl::StrCat(Prefix(), " ", what, " at ring step ", step, ": ", s.message()));
    group_.Abort(out);
    return out;
  }

  // An acknowledgement from the next rank. One of a forwarded view (hops > 0) ends this rank's
  // hold of the view, which it now acknowledges to the previous rank. The push cannot find the
  // queue full (see the ack queue's capacity in communicator.cc); if it did, that is a bug, not a
  // reason to block.
  absl::Status OnAck(const Ack& a, bool count_in_flight = true) {
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
  absl::Status DrainAcks() {
    Ack a;
    while (rc_.acks_from_next_->TryPop(&a)) RP_RETURN_IF_ERROR(OnAck(a));
    return absl::OkStatus();
  }

  // One ring step as this rank runs it: what it sends and what it does with what it receives.
  struct StepPlan {
    int step;  // the step within its phase (as carried by messages and named in errors)
    int send_chunk, recv_chunk;
    Range send, recv;
    int ks, kr;               // segments sent / received (>= 1 each)
    const float* send_src;    // sent segment g is send_src[g.begin, g.end())
    float* adopt;             // lossy own chunk: decoded wire bytes go to adopt + g.begin
    bool forward_out;         // a segment whose received view is held is sent as that view
    bool forward_in;          // received lent segments may be held to be forwarded next step
    bool feedback;            // encode with the error-feedback residual
    bool reduce;              // received segment g: dst[g - dst_offset] = add[g] + decoded
    const float* add;         //   (reduce) or out[g] = decoded (!reduce, dst = out, offset 0)
    float* dst;
    size_t dst_offset;
  };

  StepPlan ReduceScatterStep(int s, const float* in, float* work, float* own_out) const {
    StepPlan p;
    p.step = s;
    p.send_chunk = ring::ReduceScatterSendChunk(n_, r_, s);
    p.recv_chunk = ring::ReduceScatterRecvChunk(n_, r_, s);
    p.send = ring::ChunkRange(count_, n_, p.send_chunk);
    p.recv = ring::ChunkRange(count_, n_, p.recv_chunk);
    p.ks = Segments(p.send);
    p.kr = Segments(p.recv);
    p.send_src = s == 0 ? in : work;  // step 0 sends this rank's own data
    p.adopt = nullptr;
    p.forward_out = false;
    p.forward_in = false;
    p.feedback = feedback_;
    p.reduce = true;
    p.add = in;
    const bool last = s == n_ - 2;  // the reduced chunk r goes to own_out
    p.dst = last ? own_out : work;
    p.dst_offset = last ? p.recv.begin : 0;
    return p;
  }

  StepPlan AllGatherStep(int s, float* out) const {
    StepPlan p;
    p.step = s;
    p.send_chunk = ring::AllGatherSendChunk(n_, r_, s);
    p.recv_chunk = ring::AllGatherRecvChunk(n_, r_, s);
    p.send = ring::ChunkRange(count_, n_, p.send_chunk);
    p.recv = ring::ChunkRange(count_, n_, p.recv_chunk);
    p.ks = Segments(p.send);
    p.kr = Segments(p.recv);
    p.send_src = out;
    const bool own = s == 0;
    p.adopt = own && codec_ != Codec::kFp32 ? out : nullptr;
    p.forward_out = forward_ && s > 0;
    p.forward_in = forward_ && s < n_ - 2;
    p.feedback = own && feedback_;
    p.reduce = false;
    p.add = nullptr;
    p.dst = out;
    p.dst_offset = 0;
    return p;
  }

  // Runs steps 0 .. num_steps - 1 (plan(t) describes step t; the chunk sent at step t + 1 is the
  // chunk received at step t). Messages leave in step-major order, as the receiver expects them,
  // but as early as possible: segment k of step t + 1 is ready once segment k of step t has been
  // received, and a ready segment is sent, without blocking, whenever the link has room. So the
  // next rank may work up to channel_capacity segments ahead, across step boundaries, instead of
  // waiting for this rank's whole step. Progress: before blocking on segment k of step t this rank
  // has sent (blocking if need be) every segment up to k of step t, which is the order of the
  // first protocol and cannot deadlock (a rank blocked on a full link has a successor that holds
  // unread messages).
  template <typename PlanFn>
  absl::Status RunSteps(int num_steps, const PlanFn& plan) {
    if (num_steps <= 0) return absl::OkStatus();
    int st = 0, sk = 0;  // the next message to send: segment sk of step st
    StepPlan sp = plan(0);
    auto send_next = [&](bool* sent) -> absl::Status {
      const Range g = Segment(sp.send, sk);
      const float* src = sp.send_src + g.begin;
      int32_t hops = 0;
      const size_t ks = static_cast<size_t>(sk);
      if (sp.forward_out && rc_.fwd_[ks] != nullptr) {
        src = reinterpret_cast<const float*>(rc_.fwd_[ks]);
        hops = rc_.fwd_hops_[ks] + 1;
      }
      RP_RETURN_IF_ERROR(SendSegment(src, sp.adopt != nullptr ? sp.adopt + g.begin : nullptr, g,
                                     sp.step, sp.send_chunk, sk, rc_.ready_[ks], sp.feedback, hops,
                                     sent));
      if (sent != nullptr && !*sent) return absl::OkStatus();
      if (++sk == sp.ks) {
        sk = 0;
        if (++st < num_steps) sp = plan(st);
      }
      return absl::OkStatus();
    };
    for (int rt = 0; rt < num_steps; ++rt) {
      const StepPlan rp = rt == st ? sp : plan(rt);
      for (int rk = 0; rk < rp.kr; ++rk) {
        // Sends through segment min(rk, ks - 1) of step rt (blocking).
        while (st < rt || (st == rt && sk <= rk)) RP_RETURN_IF_ERROR(send_next(nullptr));
        // Sends ahead what is ready (segment sk of step st needs segment sk of step st - 1).
        while (st < num_steps && (st - 1 < rt || (st - 1 == rt && sk < rk))) {
          bool sent = false;
          RP_RETURN_IF_ERROR(send_next(&sent));
          if (!sent) break;
        }
        const Range g = Segment(rp.recv, rk);
        Stamped<WireMsg> m;
        RP_RETURN_IF_ERROR(RecvSegment(rp.step, rp.recv_chunk, rk, g.size, &m));
        if (rp.reduce) {
          absl::Status st_add = DecodeAdd(codec_, rp.add + g.begin, m.body.payload, g.size,
                                          rp.dst + (g.begin - rp.dst_offset), g.begin);
          if (!st_add.ok()) return FailLocal(st_add, "reducing", rp.step);
        } else if (rp.forward_in) {
          // A lent view of the chunk (its owner's buffer, possibly forwarded already) is held and
          // passed on next step; this rank's copy is then read by nobody during the collective.
          const bool hold = m.body.needs_ack && m.body.pool_buffer == nullptr && g.size > 0 &&
                            rc_.held_ < group_.options().max_held_segments;
          const size_t k = static_cast<size_t>(rk);
          if (hold) {
            const float* view = reinterpret_cast<const float*>(m.body.payload);
            if (stream_) {
              CopyStreaming(view, g.size, rp.dst + g.begin);
            } else {
              std::memcpy(rp.dst + g.begin, view, g.size * sizeof(float));
            }
            rc_.fwd_[k] = m.body.payload;
            rc_.fwd_hops_[k] = m.body.hops;
            ++rc_.held_;
            continue;  // acknowledged once the next rank acknowledges the forward (OnAck)
          }
          rc_.fwd_[k] = nullptr;
          Decode(codec_, m.body.payload, g.size, rp.dst + g.begin);
        } else {
          Decode(codec_, m.body.payload, g.size, rp.dst + g.begin);
        }
        RP_RETURN_IF_ERROR(Release(m, rp.step, rk));
      }
    }
    while (st < num_steps) RP_RETURN_IF_ERROR(send_next(nullptr));  // tails when ks > kr
    return absl::OkStatus();
  }

  // Sends segment `g` (data at `src`, g.size elements). A message of at most inline_bytes wire
  // bytes is copied (encoded) into the link's next inline slot and not acknowledged; otherwise
  // FP32 lends `src` and lossy codecs encode into a pool buffer. Lossy codecs apply error feedback
  // if `feedback`, and, if `adopt` is set, decode the wire bytes back into `adopt` (the owner
  // adopting the value its receivers will see). With `sent` non-null the call never blocks:
  // *sent = false (and nothing happens) when the link or the wire-buffer pool is full.
  absl::Status SendSegment(const float* src, float* adopt, Range g, int step, int chunk, int k,
                           Nanos ready, bool feedback, int32_t hops, bool* sent = nullptr) {
    RP_RETURN_IF_ERROR(DrainAcks());
    const uint64_t bytes = SegmentWireBytes(codec_, g.size);
    const bool inline_msg = rc_.slots_to_next_ != nullptr && bytes <= rc_.slot_bytes_ &&
                            bytes <= group_.options().inline_bytes;
    if (sent != nullptr) {
      const bool needs_pool = !inline_msg && codec_ != Codec::kFp32 && g.size > 0;
      *sent = rc_.to_next_->writable() && !(needs_pool && rc_.free_buffers_.empty());
      if (!*sent) return absl::OkStatus();
    }
    WireMsg m;
    m.pool_buffer = nullptr;
    m.payload = reinterpret_cast<const std::byte*>(src);
    m.needs_ack = true;
    std::byte* wire = nullptr;  // where to encode (lossy codecs and inline messages)
    if (inline_msg) {
      // The slot is free once the next rank popped the message after the one that used it.
      absl::Status s = rc_.to_next_->WaitWritable(timeout_);
      if (!s.ok()) return Fail(s, "sending to", next_, step);
      wire = rc_.slots_to_next_ + rc_.next_slot_ * rc_.slot_bytes_;
      m.needs_ack = false;
    } else if (codec_ != Codec::kFp32 && g.size > 0) {
      while (rc_.free_buffers_.empty()) {
        Ack a;
        absl::Status s = rc_.acks_from_next_->Pop(&a, timeout_);
        if (!s.ok()) return Fail(s, "waiting for a wire buffer back from", next_, step);
        RP_RETURN_IF_ERROR(OnAck(a));
      }
      wire = rc_.free_buffers_.back();
      rc_.free_buffers_.pop_back();
      m.pool_buffer = wire;
    }
    if (wire != nullptr) {
      absl::Status st;
      if (codec_ == Codec::kFp32) {
        if (g.size > 0) std::memcpy(wire, src, bytes);  // as lent: the receiver checks sums
      } else if (feedback) {
        st = EncodeWithFeedback(codec_, src, g.size, residual_ + g.begin, wire,
                                g.begin);
      } else {
        st = Encode(codec_, src, g.size, wire, g.begin);
      }
      if (!st.ok()) {
        if (m.pool_buffer != nullptr) rc_.free_buffers_.push_back(m.pool_buffer);
        return FailLocal(st, "encoding", step);
      }
      if (adopt != nullptr) Decode(codec_, wire, g.size, adopt);
      m.payload = wire;
    }
    m.op_id = op_id_;
    m.count = count_;
    m.elems = static_cast<uint32_t>(g.size);
    m.step = step;
    m.chunk = chunk;
    m.segment = k;
    m.hops = wire == nullptr ? hops : 0;
    m.kind = kind_;
    m.codec = codec_;
    if (group_.options().send_hook) group_.options().send_hook(r_);
    absl::Status s = rc_.to_next_->Send(m, ready, /*ticket=*/0, timeout_);
    if (!s.ok()) {
      if (m.pool_buffer != nullptr) rc_.free_buffers_.push_back(m.pool_buffer);
      return Fail(s, "sending to", next_, step);
    }
    if (m.needs_ack) {
      ++rc_.in_flight_;
      if (m.hops > 0) ++result_.forwarded;
    } else {
      rc_.next_slot_ = (rc_.next_slot_ + 1) % rc_.slots_to_next_count_;
      // A held view copied into a slot is done with (the same sizes travel inline on every link,
      // so this does not happen today; it keeps the hold count exact if that ever changes).
      if (hops > 0) RP_RETURN_IF_ERROR(OnAck(Ack{nullptr, hops}, /*count_in_flight=*/false));
    }
    result_.wire_bytes += bytes;
    ++result_.messages;
    result_.end = std::max(result_.end, ready);
    return absl::OkStatus();
  }

  // Receives the next message and checks it is the expected segment of the same collective.
  // Timed: first awaits its modeled timing (and, with a clock, its arrival), then lets the ring
  // timer account it and post the segment that depends on it.
  absl::Status RecvSegment(int step, int chunk, int k, size_t elems, Stamped<WireMsg>* m) {
    absl::Status s = rc_.from_prev_->Recv(m, timeout_);
    if (!s.ok()) return Fail(s, "waiting for", prev_, step);
    const WireMsg& w = m->body;
    if (w.op_id != op_id_ || w.kind != kind_ || w.count != count_ || w.codec != codec_) {
      return Fail(absl::FailedPreconditionError(absl::StrCat(
                      "mismatched collectives: this rank runs ", OpName(kind_), " #", op_id_,
                      " of ", count_, " elements with ", CodecName(codec_), ", the peer sent ",
                      OpName(w.kind), " #", w.op_id, " of ", w.count, " elements with ",
                      CodecName(w.codec))),
                  "receiving from", prev_, step);
    }
    if (w.step != step || w.chunk != chunk || w.segment != k || w.elems != elems) {
      return Fail(absl::FailedPreconditionError(absl::StrCat(
                      "mismatched segments (is segment_bytes equal on all ranks?): expected step ",
                      step, " chunk ", chunk, " segment ", k, " of ", elems,
                      " elements, got step ", w.step, " chunk ", w.chunk, " segment ", w.segment,
                      " of ", w.elems, " elements")),
                  "receiving from", prev_, step);
    }
    result_.end = std::max(result_.end, m->arrival);
    rc_.ready_[static_cast<size_t>(k)] = std::max(start_, m->arrival);
    return absl::OkStatus();
  }

  // Tells the previous rank this rank is done with the message's bytes (inline messages need no
  // acknowledgement: popping the next message frees their slot).
  absl::Status Release(const Stamped<WireMsg>& m, int step, int k) {
    if (!m.body.needs_ack) return absl::OkStatus();
    absl::Status s = rc_.acks_to_prev_->Push(Ack{m.body.pool_buffer, m.body.hops}, timeout_);
    if (!s.ok()) return Fail(s, "acknowledging to", prev_, step);
    return absl::OkStatus();
  }

  RankComm& rc_;
  Communicator& group_;
  const OpKind kind_;
  const Codec codec_;
  const std::chrono::nanoseconds timeout_;
  const size_t count_;
  const size_t seg_;  // segment_elems
  const int n_, r_, next_, prev_;
  const Nanos start_;
  const WireModel model_;
  const bool timed_;  // a fabric times the messages
  int broadcast_root_ = 0;
  bool feedback_ = false;
  int feedback_slot_ = 0;
  float* residual_ = nullptr;  // error feedback: count_ elements
  bool forward_ = false;  // all-gather forwarding of lent views (FP32, n > 2)
  bool stream_ = false;   // held views are copied with streaming stores
  bool began_ = false;
  bool finished_ = false;
  uint64_t op_id_ = 0;
  CollectiveResult result_;
};

}  // namespace internal

namespace {

using internal::OpKind;
using internal::RingRunner;

absl::Status CheckComm(const RankComm* comm) {
  if (comm == nullptr) return absl::InvalidArgumentError("comm: null");
  return absl::OkStatus();
}

void CopyIfDistinct(const float* src, float* dst, size_t n) {
  if (src != dst && n > 0) std::memcpy(dst, src, n * sizeof(float));
}

}  // namespace

// ---- RingAllReduce ----

absl::StatusOr<RingAllReduce> RingAllReduce::Create(RankComm* comm, std::span<const float> in,
                                                    std::span<float> out,
                                                    const CollectiveOptions& options) {
  RP_RETURN_IF_ERROR(CheckComm(comm));
  RP_RETURN_IF_ERROR(ValidateCollectiveOptions(options));
  if (in.size() != out.size()) {
    return absl::InvalidArgumentError(absl::StrCat("out: all-reduce on rank ", comm->rank(),
                                                   " has ", in.size(), " input elements but ",
                                                   out.size(), " output elements"));
  }
  return RingAllReduce(comm, in, out, options);
}

absl::Status RingAllReduce::Run(Nanos start) {
  RingRunner run(comm_, OpKind::kAllReduce, options_, in_.size(), start);
  RP_RETURN_IF_ERROR(run.Begin());
  const int n = comm_->size();
  if (n == 1) {
    CopyIfDistinct(in_.data(), out_.data(), in_.size());
  } else {
    const ring::Range own = ring::ChunkRange(in_.size(), n, comm_->rank());
    if (run.timed()) {
      RP_RETURN_IF_ERROR(run.RunTimed({.in = in_.data(), .out = out_.data(), .work = out_.data(),
                                       .own_out = out_.data() + own.begin}));
    } else {
      RP_RETURN_IF_ERROR(run.AllReducePhases(in_.data(), out_.data(), out_.data() + own.begin));
    }
  }
  RP_RETURN_IF_ERROR(run.Finish());
  result_ = run.result();
  return absl::OkStatus();
}

// ---- RingReduceScatter ----

absl::StatusOr<RingReduceScatter> RingReduceScatter::Create(RankComm* comm,
                                                            std::span<const float> in,
                                                            std::span<float> out,
                                                            const CollectiveOptions& options) {
  RP_RETURN_IF_ERROR(CheckComm(comm));
  RP_RETURN_IF_ERROR(ValidateCollectiveOptions(options));
  const ring::Range own = ring::ChunkRange(in.size(), comm->size(), comm->rank());
  if (out.size() != own.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "out: reduce-scatter of ", in.size(), " elements gives rank ", comm->rank(), " ",
        own.size, " elements, but out has ", out.size()));
  }
  return RingReduceScatter(comm, in, out, options);
}

absl::Status RingReduceScatter::Run(Nanos start) {
  RingRunner run(comm_, OpKind::kReduceScatter, options_, in_.size(), start);
  RP_RETURN_IF_ERROR(run.Begin());
  const int n = comm_->size();
  const ring::Range own = ring::ChunkRange(in_.size(), n, comm_->rank());
  if (n == 1) {
    CopyIfDistinct(in_.data(), out_.data(), in_.size());
  } else {
    const bool in_place = out_.data() == in_.data() + own.begin;
    float* work;
    if (in_place) {
      work = const_cast<float*>(in_.data());  // the caller's buffer: out aliases it
    } else {
      work = run.Scratch(in_.size());
    }
    if (run.timed()) {
      RP_RETURN_IF_ERROR(run.RunTimed({.in = in_.data(), .work = work, .own_out = out_.data()}));
    } else {
      RP_RETURN_IF_ERROR(run.ReduceScatterPhase(in_.data(), work, out_.data()));
    }
  }
  RP_RETURN_IF_ERROR(run.Finish());
  result_ = run.result();
  return absl::OkStatus();
}

// ---- RingAllGather ----

absl::StatusOr<RingAllGather> RingAllGather::Create(RankComm* comm, std::span<const float> in,
                                                    std::span<float> out,
                                                    const CollectiveOptions& options) {
  RP_RETURN_IF_ERROR(CheckComm(comm));
  RP_RETURN_IF_ERROR(ValidateCollectiveOptions(options));
  const ring::Range own = ring::ChunkRange(out.size(), comm->size(), comm->rank());
  if (in.size() != own.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "in: all-gather of ", out.size(), " elements takes ", own.size, " elements from rank ",
        comm->rank(), ", but in has ", in.size()));
  }
  return RingAllGather(comm, in, out, options);
}

absl::Status RingAllGather::Run(Nanos start) {
  RingRunner run(comm_, OpKind::kAllGather, options_, out_.size(), start);
  RP_RETURN_IF_ERROR(run.Begin());
  const int n = comm_->size();
  const ring::Range own = ring::ChunkRange(out_.size(), n, comm_->rank());
  CopyIfDistinct(in_.data(), out_.data() + own.begin, own.size);
  if (n > 1 && run.timed()) {
    RP_RETURN_IF_ERROR(run.RunTimed({.out = out_.data()}));
  } else if (n > 1) {
    RP_RETURN_IF_ERROR(run.AllGatherPhase(out_.data()));
  }
  RP_RETURN_IF_ERROR(run.Finish());
  result_ = run.result();
  return absl::OkStatus();
}

// ---- RingBroadcast ----

absl::StatusOr<RingBroadcast> RingBroadcast::Create(RankComm* comm, int root,
                                                    std::span<const float> in,
                                                    std::span<float> out,
                                                    const CollectiveOptions& options) {
  RP_RETURN_IF_ERROR(CheckComm(comm));
  RP_RETURN_IF_ERROR(ValidateCollectiveOptions(options));
  if (root < 0 || root >= comm->size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("root: ", root, " is not a rank of a group of ", comm->size()));
  }
  if (comm->rank() == root && !in.empty() && in.size() != out.size()) {
    return absl::InvalidArgumentError(absl::StrCat("in: broadcast root ", root, " has ",
                                                   in.size(), " input elements but ", out.size(),
                                                   " output elements"));
  }
  return RingBroadcast(comm, root, in, out, options);
}

absl::Status RingBroadcast::Run(Nanos start) {
  RingRunner run(comm_, OpKind::kBroadcast, options_, out_.size(), start);
  run.set_broadcast_root(root_);
  RP_RETURN_IF_ERROR(run.Begin());
  const bool root = comm_->rank() == root_;
  const float* src = root && !in_.empty() ? in_.data() : out_.data();
  if (comm_->size() == 1) {
    CopyIfDistinct(src, out_.data(), out_.size());
  } else {
    if (run.timed()) {
      RP_RETURN_IF_ERROR(run.RunTimed({.in = src, .out = out_.data()}));
    } else {
      RP_RETURN_IF_ERROR(run.BroadcastChain(root_, src, out_.data()));
    }
  }
  RP_RETURN_IF_ERROR(run.Finish());
  result_ = run.result();
  return absl::OkStatus();
}

}  // namespace rp::comm
