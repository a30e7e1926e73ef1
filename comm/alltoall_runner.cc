// AllToAllRunner (alltoall_runner.h): what both protocols share, and the untimed protocol.
//
// Acknowledgements (untimed). Each link's acknowledgement queue holds channel_capacity + 4
// entries: a rank drains a peer's acknowledgements (without blocking) before each message it sends
// to that peer, when at most capacity (queued) + 1 (being consumed) of its messages to the peer
// are unacknowledged; so a receiver's push never finds the queue full.
#include "comm/alltoall_runner.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <thread>

#include "absl/strings/str_cat.h"
#include "comm/alltoall_steps.h"
#include "runtime/status_macros.h"

namespace rp::comm::internal {

using ring::Range;

AllToAllRunner::AllToAllRunner(RankComm* rc, OpKind kind, const CollectiveOptions& options,
                               const a2a::AllToAllWireModel& model, Nanos start)
    : rc_(*rc),
      group_(rc->group()),
      kind_(kind),
      codec_(options.codec),
      timeout_(options.timeout),
      seg_(options.segment_bytes / sizeof(float)),
      n_(rc->size()),
      r_(rc->rank()),
      start_(start),
      model_(model),
      timed_(rc->group().options().fabric != nullptr),
      round_start_(start) {
  result_.start = start;
  result_.end = start;
}

AllToAllRunner::~AllToAllRunner() {
  if (!began_) return;
  rc_.in_op_.store(false, std::memory_order_seq_cst);
  if (finished_) return;
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (true) {
    uint64_t pending = 0;
    for (int p = 0; p < n_; ++p) {
      if (p == r_ || rc_.a2a_in_flight_[static_cast<size_t>(p)] == 0) continue;
      DrainAcks(p);  // best effort: the group already failed
      pending += rc_.a2a_in_flight_[static_cast<size_t>(p)];
    }
    if (pending == 0 || !group_.AnyRankInOpBesides(r_)) break;
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::yield();
  }
  std::fill(rc_.a2a_in_flight_.begin(), rc_.a2a_in_flight_.end(), 0);
}

absl::Status AllToAllRunner::Begin() {
  // Announce before checking the abort flag (seq_cst both sides), as RingRunner::Begin.
  rc_.in_op_.store(true, std::memory_order_seq_cst);
  began_ = true;
  if (n_ > 1) (void)rc_.AllToAllLink(r_, (r_ + 1) % n_);  // sizes the per-peer state
  if (group_.aborted()) {
    return absl::FailedPreconditionError(absl::StrCat(
        Prefix(), ": communicator aborted earlier: ", group_.abort_status().ToString()));
  }
  op_id_ = rc_.next_op_id_++;
  return absl::OkStatus();
}

absl::Status AllToAllRunner::ExchangeCounts(std::span<const int64_t> counts, int bins,
                                            std::span<int64_t> recv_counts) {
  const size_t ub = static_cast<size_t>(bins);
  std::copy_n(counts.begin() + static_cast<ptrdiff_t>(r_ * ub), ub,
              recv_counts.begin() + static_cast<ptrdiff_t>(r_ * ub));
  if (timed_) return TimedCounts(counts, bins, recv_counts);
  for (int s = 1; s < n_; ++s) {
    const int dst = a2a::SendPeer(n_, r_, s);
    const int64_t* mine = counts.data() + static_cast<size_t>(dst) * ub;
    A2aMsg m{.payload = reinterpret_cast<const std::byte*>(mine),
             .owned = false,
             .op_id = op_id_,
             .block_elems = static_cast<uint64_t>(std::accumulate(mine, mine + bins, int64_t{0})),
             .elems = static_cast<uint32_t>(bins),
             .segment = kCountsSegment,
             .kind = kind_,
             .codec = codec_};
    RP_RETURN_IF_ERROR(Post(dst, m, a2a::kCountBytes * ub, 0));
  }
  for (int s = 1; s < n_; ++s) {
    const int src = a2a::RecvPeer(n_, r_, s);
    Stamped<A2aMsg> m;
    RP_RETURN_IF_ERROR(Receive(src, 0, kCountsSegment, static_cast<uint32_t>(bins), -1, &m));
    std::memcpy(recv_counts.data() + static_cast<size_t>(src) * ub, m.body.payload,
                ub * sizeof(int64_t));
    RP_RETURN_IF_ERROR(Acknowledge(src, 0));
  }
  return absl::OkStatus();
}

absl::Status AllToAllRunner::ExchangeBlocks(const float* send, std::span<const size_t> send_off,
                                            float* recv, std::span<const size_t> recv_off,
                                            bool empty_block_message) {
  const size_t own = static_cast<size_t>(r_);
  if (send_off[own + 1] > send_off[own]) {
    std::memcpy(recv + recv_off[own], send + send_off[own],
                (send_off[own + 1] - send_off[own]) * sizeof(float));
  }
  if (timed_) return TimedBlocks(send, send_off, recv, recv_off, empty_block_message);
  PrepareStaging(send_off, empty_block_message);
  for (int s = 1; s < n_; ++s) {
    const int dst = a2a::SendPeer(n_, r_, s), src = a2a::RecvPeer(n_, r_, s);
    const size_t ud = static_cast<size_t>(dst), us = static_cast<size_t>(src);
    const Range out{send_off[ud], send_off[ud + 1] - send_off[ud]};
    const Range in{recv_off[us], recv_off[us + 1] - recv_off[us]};
    const int ks = a2a::BlockMessages(out.size, seg_, empty_block_message);
    const int kr = a2a::BlockMessages(in.size, seg_, empty_block_message);
    for (int k = 0; k < std::max(ks, kr); ++k) {
      if (k < ks) RP_RETURN_IF_ERROR(SendSegment(dst, s, send, out, k));
      if (k >= kr) continue;
      const Range g = ring::SegmentRange(Range{0, in.size}, seg_, k);
      Stamped<A2aMsg> m;
      RP_RETURN_IF_ERROR(
          Receive(src, s, k, static_cast<uint32_t>(g.size), static_cast<int64_t>(in.size), &m));
      FromWire(codec_, m.body.payload, g.size, recv + in.begin + g.begin);
      RP_RETURN_IF_ERROR(Acknowledge(src, s));
    }
  }
  return absl::OkStatus();
}

absl::Status AllToAllRunner::Finish() {
  for (int p = 0; p < n_; ++p) {
    if (p == r_ || timed_) continue;  // timed messages are never acknowledged
    uint64_t& pending = rc_.a2a_in_flight_[static_cast<size_t>(p)];
    while (pending > 0) {
      uint32_t ack = 0;
      absl::Status s = rc_.AllToAllLink(r_, p)->acks.Pop(&ack, timeout_);
      if (!s.ok()) return Fail(s, "waiting for acknowledgements from", p, n_ - 1);
      --pending;
    }
  }
  rc_.stats_.collective_bytes[static_cast<int>(codec_)] += result_.wire_bytes;
  rc_.stats_.messages += result_.messages;
  rc_.stats_.modeled_bytes += result_.modeled_bytes;
  finished_ = true;
  return absl::OkStatus();
}

std::string AllToAllRunner::Prefix() const { return OpPrefix(r_, rc_.device(), kind_, op_id_); }

// Formats `s` with this rank, op, peer and step (0 = the counts exchange); aborts the group
// unless `s` is the echo of an earlier abort.
absl::Status AllToAllRunner::Fail(const absl::Status& s, const char* what, int peer, int step) {
  return group_.FailAt(s, absl::StrCat(Prefix(), " ", what, " rank ", peer, " (device ",
                                       group_.device(peer), ") at step ", step));
}

// A failure of this rank's own (encoding): named and aborts the group.
absl::Status AllToAllRunner::FailLocal(const absl::Status& s, const char* what, int peer,
                                       int step) {
  return group_.AbortAt(s, absl::StrCat(Prefix(), " ", what, " rank ", peer, " at step ", step));
}

absl::Status CheckHeader(const A2aMsg& w, uint64_t op_id, OpKind kind, Codec codec,
                         int32_t segment, uint32_t elems, int64_t block) {
  if (w.op_id != op_id || w.kind != kind || w.codec != codec) {
    return absl::FailedPreconditionError(
        absl::StrCat("mismatched collectives: this rank runs ", OpName(kind), " #", op_id, " with ",
                     CodecName(codec), ", the peer sent ", OpName(w.kind), " #", w.op_id,
                     " with ", CodecName(w.codec)));
  }
  if (block >= 0 && w.block_elems != static_cast<uint64_t>(block)) {
    return absl::FailedPreconditionError(
        absl::StrCat("mismatched counts: this rank expects a block of ", block,
                     " elements from the peer, which sends ", w.block_elems));
  }
  if (segment == kCountsSegment && (w.segment != kCountsSegment || w.elems != elems)) {
    return absl::FailedPreconditionError(
        absl::StrCat("mismatched counts: this rank has ", elems,
                     " count entries (bins) per peer, the peer sent ", w.elems));
  }
  if (w.segment != segment || w.elems != elems) {
    return absl::FailedPreconditionError(absl::StrCat(
        "mismatched segments (is segment_bytes equal on all ranks?): expected segment ", segment,
        " of ", elems, " elements, got segment ", w.segment, " of ", w.elems, " elements"));
  }
  return absl::OkStatus();
}

absl::Status ToWire(Codec codec, const float* src, size_t elems, size_t index, std::byte* wire) {
  if (elems == 0) return absl::OkStatus();
  if (codec == Codec::kFp32) {
    std::memcpy(wire, src, elems * sizeof(float));
    return absl::OkStatus();
  }
  return Encode(codec, src, elems, wire, index);
}

absl::StatusOr<std::unique_ptr<std::byte[]>> WireCopy(Codec codec, const float* src, size_t elems,
                                                      size_t index) {
  auto copy = std::make_unique_for_overwrite<std::byte[]>(
      std::max<uint64_t>(SegmentWireBytes(codec, elems), 1));
  RP_RETURN_IF_ERROR(ToWire(codec, src, elems, index, copy.get()));
  return copy;
}

void FromWire(Codec codec, const std::byte* wire, size_t elems, float* dst) {
  if (codec == Codec::kFp32) {
    if (elems > 0) std::memcpy(dst, wire, elems * sizeof(float));
  } else {
    Decode(codec, wire, elems, dst);
  }
}

absl::Status AllToAllRunner::Check(const A2aMsg& w, int peer, int step, int32_t segment,
                                   uint32_t elems, int64_t block) {
  const absl::Status s = CheckHeader(w, op_id_, kind_, codec_, segment, elems, block);
  if (!s.ok()) return Fail(s, "receiving from", peer, step);
  return absl::OkStatus();
}

// Lossy codecs: each block's segments get fixed-stride slots in the rank's staging buffer (the
// lent payload), sized once per call.
void AllToAllRunner::PrepareStaging(std::span<const size_t> send_off, bool empty_block_message) {
  stage_off_.assign(static_cast<size_t>(n_), 0);
  if (codec_ == Codec::kFp32) return;
  // A slot holds the largest segment this call sends (at most its largest block), not segment_bytes:
  // small blocks with 1 GiB segments must not stage 1 GiB per message.
  size_t largest_block = 0;
  for (int p = 0; p < n_; ++p) {
    const size_t up = static_cast<size_t>(p);
    if (p != r_) largest_block = std::max(largest_block, send_off[up + 1] - send_off[up]);
  }
  stride_ = (SegmentWireBytes(codec_, std::min(seg_, largest_block)) + 7) / 8 * 8;
  size_t bytes = 0;
  for (int p = 0; p < n_; ++p) {
    if (p == r_) continue;
    const size_t up = static_cast<size_t>(p);
    stage_off_[up] = bytes;
    bytes += stride_ * static_cast<size_t>(a2a::BlockMessages(send_off[up + 1] - send_off[up],
                                                              seg_, empty_block_message));
  }
  if (rc_.a2a_wire_.size() < bytes) rc_.a2a_wire_.resize(bytes);
}

// Sends segment k of block `out` (elements of `send`) to `dst`.
absl::Status AllToAllRunner::SendSegment(int dst, int step, const float* send, Range out, int k) {
  const Range g = ring::SegmentRange(Range{0, out.size}, seg_, k);
  const float* src = send + out.begin + g.begin;
  const std::byte* payload = reinterpret_cast<const std::byte*>(src);
  if (codec_ != Codec::kFp32) {
    std::byte* wire = rc_.a2a_wire_.data() + stage_off_[static_cast<size_t>(dst)] +
                      static_cast<size_t>(k) * stride_;
    absl::Status st = Encode(codec_, src, g.size, wire, out.begin + g.begin);
    if (!st.ok()) return FailLocal(st, "encoding for", dst, step);
    payload = wire;
  }
  A2aMsg m{.payload = payload,
           .owned = false,
           .op_id = op_id_,
           .block_elems = out.size,
           .elems = static_cast<uint32_t>(g.size),
           .segment = k,
           .kind = kind_,
           .codec = codec_};
  return Post(dst, m, SegmentWireBytes(codec_, g.size), step);
}

// Puts one lent message on the wire to `peer` (ready at the collective's start).
absl::Status AllToAllRunner::Post(int peer, const A2aMsg& m, uint64_t wire_bytes, int step) {
  DrainAcks(peer);
  absl::Status s = rc_.AllToAllLink(r_, peer)->data.Send(m, start_, /*ticket=*/0, timeout_);
  if (!s.ok()) return Fail(s, "sending to", peer, step);
  ++rc_.a2a_in_flight_[static_cast<size_t>(peer)];
  result_.wire_bytes += wire_bytes;
  ++result_.messages;
  return absl::OkStatus();
}

// Receives the next message from `peer` and checks it is the expected one of the same call.
absl::Status AllToAllRunner::Receive(int peer, int step, int32_t segment, uint32_t elems,
                                     int64_t block, Stamped<A2aMsg>* m) {
  absl::Status s = rc_.AllToAllLink(peer, r_)->data.Recv(m, timeout_);
  if (!s.ok()) return Fail(s, "waiting for", peer, step);
  RP_RETURN_IF_ERROR(Check(m->body, peer, step, segment, elems, block));
  result_.end = std::max(result_.end, m->arrival);
  return absl::OkStatus();
}

// Tells `peer` this rank is done with its message's bytes.
absl::Status AllToAllRunner::Acknowledge(int peer, int step) {
  absl::Status s = rc_.AllToAllLink(peer, r_)->acks.Push(1, timeout_);
  if (!s.ok()) return Fail(s, "acknowledging to", peer, step);
  return absl::OkStatus();
}

// Takes the acknowledgements `peer` has sent so far, without blocking.
void AllToAllRunner::DrainAcks(int peer) {
  uint32_t ack = 0;
  SpscQueue<uint32_t>& acks = rc_.AllToAllLink(r_, peer)->acks;
  uint64_t& pending = rc_.a2a_in_flight_[static_cast<size_t>(peer)];
  while (pending > 0 && acks.TryPop(&ack)) --pending;
}

}  // namespace rp::comm::internal
