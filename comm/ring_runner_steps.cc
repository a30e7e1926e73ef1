// RingRunner: the ring steps of the untimed lending protocol (send, receive, acknowledge).
#include "comm/ring_runner.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "runtime/status_macros.h"

namespace rp::comm::internal {

RingRunner::StepPlan RingRunner::ReduceScatterStep(int s, const float* in, float* work, float* own_out) const {
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

RingRunner::StepPlan RingRunner::AllGatherStep(int s, float* out) const {
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

absl::Status RingRunner::RunSteps(int num_steps, absl::FunctionRef<StepPlan(int)> plan) {
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

absl::Status RingRunner::SendSegment(const float* src, float* adopt, Range g, int step, int chunk, int k, Nanos ready, bool feedback, int32_t hops, bool* sent) {
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

absl::Status RingRunner::RecvSegment(int step, int chunk, int k, size_t elems, Stamped<WireMsg>* m) {
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

absl::Status RingRunner::Release(const Stamped<WireMsg>& m, int step, int k) {
  if (!m.body.needs_ack) return absl::OkStatus();
  absl::Status s = rc_.acks_to_prev_->Push(Ack{m.body.pool_buffer, m.body.hops}, timeout_);
  if (!s.ok()) return Fail(s, "acknowledging to", prev_, step);
  return absl::OkStatus();
}

}  // namespace rp::comm::internal
