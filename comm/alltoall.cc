// All-to-all collectives. Words (block, bins, step, segment) as defined in comm/alltoall_steps.h;
// the protocol is described in comm/alltoall.h.
//
// Acknowledgements. Each link's acknowledgement queue holds channel_capacity + 4 entries: a rank
// drains a peer's acknowledgements (without blocking) before each message it sends to that peer,
// when at most capacity (queued) + 1 (being consumed) of its messages to the peer are
// unacknowledged; so a receiver's push never finds the queue full.
#include "comm/alltoall.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "comm/alltoall_steps.h"
#include "comm/collectives.h"
#include "runtime/status_macros.h"

namespace rp::comm {

namespace a2a {
uint64_t AllToAllVWireBytes(Codec codec, std::span<const int64_t> send_counts, int bins, int r,
                            size_t segment_elems) {
  const int n = static_cast<int>(send_counts.size()) / bins;
  uint64_t bytes = 0;
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    const auto first = send_counts.begin() + static_cast<ptrdiff_t>(p) * bins;
    const int64_t block = std::accumulate(first, first + bins, int64_t{0});
    bytes += kCountBytes * static_cast<uint64_t>(bins) +
             ring::ChunkWireBytes(codec, static_cast<size_t>(block), segment_elems);
  }
  return bytes;
}
}  // namespace a2a

namespace internal {

using ring::Range;

// Runs one all-to-all on one rank. Lives for one Run().
class AllToAllRunner {
 public:
  AllToAllRunner(RankComm* rc, OpKind kind, const CollectiveOptions& options, Nanos start)
      : rc_(*rc),
        group_(rc->group()),
        kind_(kind),
        codec_(options.codec),
        timeout_(options.timeout),
        seg_(options.segment_bytes / sizeof(float)),
        n_(rc->size()),
        r_(rc->rank()),
        start_(start) {
    result_.start = start;
    result_.end = start;
  }

  // On an exit without Finish (an error): leaves the op, then waits until no peer can still read
  // this rank's lent buffers (every message acknowledged) or no other rank is in a collective (the
  // group is aborted: they leave promptly). Bounded by the timeout. As RingRunner.
  ~AllToAllRunner() {
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
      if (pending == 0 || !AnyOtherRankInOp()) break;
      if (std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::yield();
    }
    std::fill(rc_.a2a_in_flight_.begin(), rc_.a2a_in_flight_.end(), 0);
  }

  absl::Status Begin() {
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

  // AllToAllV's counts: sends counts[p·bins, (p+1)·bins) to every peer p, then receives each
  // peer's into recv_counts[s·bins, (s+1)·bins) (its own are copied).
  absl::Status ExchangeCounts(std::span<const int64_t> counts, int bins,
                              std::span<int64_t> recv_counts) {
    const size_t ub = static_cast<size_t>(bins);
    std::copy_n(counts.begin() + static_cast<ptrdiff_t>(r_ * ub), ub,
                recv_counts.begin() + static_cast<ptrdiff_t>(r_ * ub));
    for (int s = 1; s < n_; ++s) {
      const int dst = a2a::SendPeer(n_, r_, s);
      const int64_t* mine = counts.data() + static_cast<size_t>(dst) * ub;
      A2aMsg m{.payload = reinterpret_cast<const std::byte*>(mine),
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

  // The payload: block p of `send` (elements [send_off[p], send_off[p + 1])) goes to rank p, and
  // block s of `recv` (recv_off likewise) comes from rank s. `empty_block_message`: AllToAll's
  // rule (alltoall_steps.h).
  absl::Status ExchangeBlocks(const float* send, std::span<const size_t> send_off, float* recv,
                              std::span<const size_t> recv_off, bool empty_block_message) {
    const size_t own = static_cast<size_t>(r_);
    if (send_off[own + 1] > send_off[own]) {
      std::memcpy(recv + recv_off[own], send + send_off[own],
                  (send_off[own + 1] - send_off[own]) * sizeof(float));
    }
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
        float* dst_elems = recv + in.begin + g.begin;
        if (codec_ == Codec::kFp32) {
          if (g.size > 0) std::memcpy(dst_elems, m.body.payload, g.size * sizeof(float));
        } else {
          Decode(codec_, m.body.payload, g.size, dst_elems);
        }
        RP_RETURN_IF_ERROR(Acknowledge(src, s));
      }
    }
    return absl::OkStatus();
  }

  // Waits until every message this rank sent was acknowledged, then counts the call.
  absl::Status Finish() {
    for (int p = 0; p < n_; ++p) {
      if (p == r_) continue;
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
    finished_ = true;
    return absl::OkStatus();
  }

  const CollectiveResult& result() const { return result_; }

 private:
  std::string Prefix() const {
    return absl::StrCat("rank ", r_, " (device ", rc_.device(), ") ", OpName(kind_), " #", op_id_);
  }

  bool AnyOtherRankInOp() {
    for (int k = 0; k < n_; ++k) {
      if (k != r_ && group_.rank(k).in_op_.load(std::memory_order_seq_cst)) return true;
    }
    return false;
  }

  // Formats `s` with this rank, op, peer and step (0 = the counts exchange); aborts the group
  // unless `s` is the echo of an earlier abort.
  absl::Status Fail(const absl::Status& s, const char* what, int peer, int step) {
    const std::string where = absl::StrCat(Prefix(), " ", what, " rank ", peer, " (device ",
                                           group_.device(peer), ") at step ", step);
    if (s.code() == absl::StatusCode::kCancelled) {
      return absl::AbortedError(absl::StrCat(
          where, ": aborted because the group failed: ", group_.abort_status().ToString()));
    }
    absl::Status out(s.code(), absl::StrCat(where, ": ", s.message()));
    group_.Abort(out);
    return out;
  }

  // Lossy codecs: each block's segments get fixed-stride slots in the rank's staging buffer (the
  // lent payload), sized once per call.
  void PrepareStaging(std::span<const size_t> send_off, bool empty_block_message) {
    stage_off_.assign(static_cast<size_t>(n_), 0);
    if (codec_ == Codec::kFp32) return;
    stride_ = (SegmentWireBytes(codec_, seg_) + 7) / 8 * 8;
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
  absl::Status SendSegment(int dst, int step, const float* send, Range out, int k) {
    const Range g = ring::SegmentRange(Range{0, out.size}, seg_, k);
    const float* src = send + out.begin + g.begin;
    const std::byte* payload = reinterpret_cast<const std::byte*>(src);
    if (codec_ != Codec::kFp32) {
      std::byte* wire = rc_.a2a_wire_.data() + stage_off_[static_cast<size_t>(dst)] +
                        static_cast<size_t>(k) * stride_;
      absl::Status st = Encode(codec_, src, g.size, wire, out.begin + g.begin);
      if (!st.ok()) {
        absl::Status out_st(st.code(), absl::StrCat(Prefix(), " encoding for rank ", dst,
                                                    " at step ", step, ": ", st.message()));
        group_.Abort(out_st);
        return out_st;
      }
      payload = wire;
    }
    A2aMsg m{.payload = payload,
             .op_id = op_id_,
             .block_elems = out.size,
             .elems = static_cast<uint32_t>(g.size),
             .segment = k,
             .kind = kind_,
             .codec = codec_};
    return Post(dst, m, SegmentWireBytes(codec_, g.size), step);
  }

  // Puts one message on the wire to `peer`: the one place where a message's modeled arrival is
  // stamped (through the channel's link model), ready at the collective's start.
  absl::Status Post(int peer, const A2aMsg& m, uint64_t wire_bytes, int step) {
    DrainAcks(peer);
    absl::Status s = rc_.AllToAllLink(r_, peer)->data.Send(m, start_, /*ticket=*/0, timeout_);
    if (!s.ok()) return Fail(s, "sending to", peer, step);
    ++rc_.a2a_in_flight_[static_cast<size_t>(peer)];
    result_.wire_bytes += wire_bytes;
    ++result_.messages;
    return absl::OkStatus();
  }

  // Receives the next message from `peer` and checks it is the expected one of the same call
  // (`block`: the expected block size, -1 = not known yet).
  absl::Status Receive(int peer, int step, int32_t segment, uint32_t elems, int64_t block,
                       Stamped<A2aMsg>* m) {
    absl::Status s = rc_.AllToAllLink(peer, r_)->data.Recv(m, timeout_);
    if (!s.ok()) return Fail(s, "waiting for", peer, step);
    const A2aMsg& w = m->body;
    if (w.op_id != op_id_ || w.kind != kind_ || w.codec != codec_) {
      return Fail(absl::FailedPreconditionError(
                      absl::StrCat("mismatched collectives: this rank runs ", OpName(kind_), " #",
                                   op_id_, " with ", CodecName(codec_), ", the peer sent ",
                                   OpName(w.kind), " #", w.op_id, " with ", CodecName(w.codec))),
                  "receiving from", peer, step);
    }
    if (block >= 0 && w.block_elems != static_cast<uint64_t>(block)) {
      return Fail(absl::FailedPreconditionError(
                      absl::StrCat("mismatched counts: this rank expects a block of ", block,
                                   " elements from the peer, which sends ", w.block_elems)),
                  "receiving from", peer, step);
    }
    if (segment == kCountsSegment && (w.segment != kCountsSegment || w.elems != elems)) {
      return Fail(absl::FailedPreconditionError(
                      absl::StrCat("mismatched counts: this rank has ", elems,
                                   " count entries (bins) per peer, the peer sent ", w.elems)),
                  "receiving from", peer, step);
    }
    if (w.segment != segment || w.elems != elems) {
      return Fail(absl::FailedPreconditionError(absl::StrCat(
                      "mismatched segments (is segment_bytes equal on all ranks?): expected "
                      "segment ",
                      segment, " of ", elems, " elements, got segment ", w.segment, " of ", w.elems,
                      " elements")),
                  "receiving from", peer, step);
    }
    result_.end = std::max(result_.end, m->arrival);
    return absl::OkStatus();
  }

  // Tells `peer` this rank is done with its message's bytes.
  absl::Status Acknowledge(int peer, int step) {
    absl::Status s = rc_.AllToAllLink(peer, r_)->acks.Push(1, timeout_);
    if (!s.ok()) return Fail(s, "acknowledging to", peer, step);
    return absl::OkStatus();
  }

  // Takes the acknowledgements `peer` has sent so far, without blocking.
  void DrainAcks(int peer) {
    uint32_t ack = 0;
    SpscQueue<uint32_t>& acks = rc_.AllToAllLink(r_, peer)->acks;
    uint64_t& pending = rc_.a2a_in_flight_[static_cast<size_t>(peer)];
    while (pending > 0 && acks.TryPop(&ack)) --pending;
  }

  RankComm& rc_;
  Communicator& group_;
  const OpKind kind_;
  const Codec codec_;
  const std::chrono::nanoseconds timeout_;
  const size_t seg_;  // segment_elems
  const int n_, r_;
  const Nanos start_;
  bool began_ = false;
  bool finished_ = false;
  uint64_t op_id_ = 0;
  std::vector<size_t> stage_off_;  // per peer: byte offset of its block's slots in a2a_wire_
  size_t stride_ = 0;              // bytes per slot (a full segment's wire bytes, 8-aligned)
  CollectiveResult result_;
};

}  // namespace internal

namespace {

using internal::AllToAllRunner;
using internal::OpKind;

absl::Status CheckCommon(const RankComm* comm, const CollectiveOptions& options) {
  if (comm == nullptr) return absl::InvalidArgumentError("comm: null");
  RP_RETURN_IF_ERROR(ValidateCollectiveOptions(options));
  if (options.error_feedback) {
    return absl::InvalidArgumentError(
        "error_feedback: not supported by the all-to-all (it moves data, it does not sum it)");
  }
  return absl::OkStatus();
}

bool Overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto* pa = static_cast<const std::byte*>(a);
  const auto* pb = static_cast<const std::byte*>(b);
  return a_bytes > 0 && b_bytes > 0 && pa < pb + b_bytes && pb < pa + a_bytes;
}

}  // namespace

// ---- AllToAll ----

absl::StatusOr<AllToAll> AllToAll::Create(RankComm* comm, std::span<const float> send,
                                          std::span<float> recv, const CollectiveOptions& options) {
  RP_RETURN_IF_ERROR(CheckCommon(comm, options));
  const size_t n = static_cast<size_t>(comm->size());
  if (send.size() != recv.size() || send.size() % n != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "recv: all-to-all on rank ", comm->rank(), " of ", n, " ranks has ", send.size(),
        " send and ", recv.size(), " recv elements (must be equal and a multiple of ", n, ")"));
  }
  if (Overlap(send.data(), send.size_bytes(), recv.data(), recv.size_bytes())) {
    return absl::InvalidArgumentError("recv: overlaps send");
  }
  return AllToAll(comm, send, recv, options);
}

absl::Status AllToAll::Run(Nanos start) {
  AllToAllRunner run(comm_, OpKind::kAllToAll, options_, start);
  RP_RETURN_IF_ERROR(run.Begin());
  const size_t n = static_cast<size_t>(comm_->size()), block = send_.size() / n;
  std::vector<size_t> offsets(n + 1);
  for (size_t p = 0; p <= n; ++p) offsets[p] = p * block;
  RP_RETURN_IF_ERROR(run.ExchangeBlocks(send_.data(), offsets, recv_.data(), offsets,
                                        /*empty_block_message=*/true));
  RP_RETURN_IF_ERROR(run.Finish());
  result_ = run.result();
  return absl::OkStatus();
}

// ---- AllToAllV ----

absl::StatusOr<AllToAllV> AllToAllV::Create(RankComm* comm, std::span<const float> send,
                                            std::span<const int64_t> send_counts, int bins,
                                            std::vector<float>* recv,
                                            std::vector<int64_t>* recv_counts,
                                            const CollectiveOptions& options) {
  RP_RETURN_IF_ERROR(CheckCommon(comm, options));
  const int n = comm->size();
  if (bins < 1) return absl::InvalidArgumentError(absl::StrCat("bins: ", bins, " (must be >= 1)"));
  if (send_counts.size() != static_cast<size_t>(n) * static_cast<size_t>(bins)) {
    return absl::InvalidArgumentError(absl::StrCat("send_counts: ", send_counts.size(),
                                                   " entries, expected ranks (", n, ") x bins (",
                                                   bins, ")"));
  }
  int64_t total = 0;
  for (size_t i = 0; i < send_counts.size(); ++i) {
    if (send_counts[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("send_counts[", i, "]: ", send_counts[i], " is negative"));
    }
    total += send_counts[i];
  }
  if (total != static_cast<int64_t>(send.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("send_counts: sum to ", total, ", but send has ", send.size(), " elements"));
  }
  if (recv == nullptr || recv_counts == nullptr) {
    return absl::InvalidArgumentError("recv: recv and recv_counts must not be null");
  }
  if (!send.empty() && recv->data() == send.data()) {
    return absl::InvalidArgumentError("recv: is the send buffer");
  }
  if (!send_counts.empty() && recv_counts->data() == send_counts.data()) {
    return absl::InvalidArgumentError("recv_counts: is send_counts");
  }
  return AllToAllV(comm, send, send_counts, bins, recv, recv_counts, options);
}

absl::Status AllToAllV::Run(Nanos start) {
  AllToAllRunner run(comm_, OpKind::kAllToAllV, options_, start);
  RP_RETURN_IF_ERROR(run.Begin());
  const size_t n = static_cast<size_t>(comm_->size()), bins = static_cast<size_t>(bins_);
  recv_counts_->assign(n * bins, 0);
  RP_RETURN_IF_ERROR(run.ExchangeCounts(send_counts_, bins_, *recv_counts_));
  std::vector<size_t> send_off(n + 1, 0), recv_off(n + 1, 0);
  for (size_t p = 0; p < n; ++p) {
    size_t out = 0, in = 0;
    for (size_t b = 0; b < bins; ++b) {
      out += static_cast<size_t>(send_counts_[p * bins + b]);
      in += static_cast<size_t>((*recv_counts_)[p * bins + b]);
    }
    send_off[p + 1] = send_off[p] + out;
    recv_off[p + 1] = recv_off[p] + in;
  }
  recv_->resize(recv_off[n]);
  RP_RETURN_IF_ERROR(run.ExchangeBlocks(send_.data(), send_off, recv_->data(), recv_off,
                                        /*empty_block_message=*/false));
  RP_RETURN_IF_ERROR(run.Finish());
  result_ = run.result();
  return absl::OkStatus();
}

}  // namespace rp::comm
