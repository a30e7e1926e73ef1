// AllToAllRunner's timed protocol (alltoall_runner.h): every message is a copy the receiver frees
// (encoded for lossy codecs), posted to the fabric with its modeled size the moment
// a2a::PairwiseTimer makes it ready, and pushed behind its ticket at once (the data exists from the
// start), so a sender never waits for its receiver (comm/communicator.h "Timed communicators").
// A receiver awaits each message's timing on the fabric (and, with a clock, its arrival), then
// pops the data and checks its ticket.
#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "comm/alltoall_runner.h"
#include "comm/alltoall_steps.h"
#include "comm/ring_timing.h"
#include "runtime/status_macros.h"

namespace rp::comm::internal {

using ring::Range;

A2aLink::~A2aLink() {
  Stamped<A2aMsg> m;
  while (data.TryRecvNoWait(&m)) {
    if (m.body.owned) std::unique_ptr<std::byte[]> done(const_cast<std::byte*>(m.body.payload));
  }
}

a2a::BlockShape AllToAllRunner::ShapeOf(size_t real_elems, bool empty_block_message) const {
  return a2a::BlockShape{.modeled_elems = model_.ModeledElements(real_elems),
                         .segment_elems = seg_,
                         .codec = codec_,
                         .empty_block_message = empty_block_message};
}

void AllToAllRunner::AddRound(const a2a::PairwiseTimer& t) {
  result_.end = std::max(result_.end, t.end());
  result_.transfer += t.transfer();
  result_.peer_wait += t.peer_wait();
  for (const a2a::PairwiseTimer::Span& sp : t.spans()) {
    result_.spans.push_back({sp.start, sp.end, sp.peer});
  }
  round_start_ = t.end();
}

absl::Status AllToAllRunner::PostOwned(int peer, A2aMsg m, std::unique_ptr<std::byte[]> payload,
                                       uint64_t payload_bytes, uint64_t bytes, Nanos ready,
                                       int step) {
  A2aLink& link = *rc_.AllToAllLink(r_, peer);
  const CommunicatorOptions& o = group_.options();
  absl::StatusOr<uint64_t> ticket = o.fabric->Post(
      o.lps[static_cast<size_t>(r_)], link.fabric_channel,
      {.src = rc_.device(), .dst = group_.device(peer), .bytes = bytes, .ready = ready,
       .step = model_.step});
  if (!ticket.ok()) return FailLocal(ticket.status(), "posting to the fabric for", peer, step);
  m.payload = payload.get();
  m.owned = true;
  absl::Status s = link.data.Send(m, ready, *ticket, timeout_);
  if (!s.ok()) return Fail(s, "sending to", peer, step);
  payload.release();  // the receiver (or the link, if never received) frees it
  result_.wire_bytes += payload_bytes;
  result_.modeled_bytes += bytes;
  ++result_.messages;
  return absl::OkStatus();
}

absl::Status AllToAllRunner::ReceiveTimed(int peer, int step, int32_t segment, uint32_t elems,
                                          int64_t block, Stamped<A2aMsg>* m,
                                          MessageTiming* timing) {
  A2aLink& link = *rc_.AllToAllLink(peer, r_);
  const CommunicatorOptions& o = group_.options();
  const WaitSite site{.rank = rc_.device(), .op = "all-to-all receive",
                      .peer = group_.device(peer), .step = model_.step};
  absl::StatusOr<Delivery> d =
      o.fabric->Await(o.lps[static_cast<size_t>(r_)], link.fabric_channel, site, timeout_);
  if (!d.ok()) return Fail(d.status(), "waiting for", peer, step);
  absl::Status s = link.data.Recv(m, timeout_);
  if (!s.ok()) return Fail(s, "waiting for", peer, step);
  std::unique_ptr<std::byte[]> owned(const_cast<std::byte*>(m->body.payload));  // freed on return
  if (m->ticket != d->ticket) {
    return Fail(absl::InternalError(absl::StrCat("data of ticket ", m->ticket,
                                                 " arrived for the fabric's ticket ", d->ticket)),
                "receiving from", peer, step);
  }
  RP_RETURN_IF_ERROR(Check(m->body, peer, step, segment, elems, block));
  owned.release();  // the caller copies the payload, then frees it
  *timing = d->timing;
  m->arrival = d->timing.arrival;
  if (Clock* clock = o.clock; clock != nullptr) clock->WaitUntil(m->arrival);
  return absl::OkStatus();
}

// The counts round: one message of bins · kCountBytes per step (metadata, modeled as sent).
absl::Status AllToAllRunner::TimedCounts(std::span<const int64_t> counts, int bins,
                                         std::span<int64_t> recv_counts) {
  const size_t ub = static_cast<size_t>(bins);
  const uint64_t bytes = a2a::kCountBytes * ub;
  a2a::PairwiseTimer timer(round_start_,
                           std::vector<std::vector<uint64_t>>(static_cast<size_t>(n_ - 1), {bytes}),
                           std::vector<int>(static_cast<size_t>(n_ - 1), 1));
  auto post = [&](const a2a::PairwiseTimer::Post& p) -> absl::Status {
    const int dst = a2a::SendPeer(n_, r_, p.step);
    const int64_t* mine = counts.data() + static_cast<size_t>(dst) * ub;
    auto copy = std::make_unique_for_overwrite<std::byte[]>(bytes);
    std::memcpy(copy.get(), mine, bytes);
    const A2aMsg m{.payload = nullptr,
                   .owned = true,
                   .op_id = op_id_,
                   .block_elems =
                       static_cast<uint64_t>(std::accumulate(mine, mine + bins, int64_t{0})),
                   .elems = static_cast<uint32_t>(bins),
                   .segment = kCountsSegment,
                   .kind = kind_,
                   .codec = codec_};
    return PostOwned(dst, m, std::move(copy), bytes, p.bytes, p.ready, 0);
  };
  std::vector<a2a::PairwiseTimer::Post> posts = timer.Begin();
  auto flush = [&]() -> absl::Status {  // everything released is posted before any wait
    for (const auto& p : posts) RP_RETURN_IF_ERROR(post(p));
    posts.clear();
    return absl::OkStatus();
  };
  for (int s = 1; s < n_; ++s) {
    RP_RETURN_IF_ERROR(flush());
    const int src = a2a::RecvPeer(n_, r_, s);
    Stamped<A2aMsg> m;
    MessageTiming t;
    RP_RETURN_IF_ERROR(
        ReceiveTimed(src, 0, kCountsSegment, static_cast<uint32_t>(bins), -1, &m, &t));
    std::unique_ptr<std::byte[]> owned(const_cast<std::byte*>(m.body.payload));
    std::memcpy(recv_counts.data() + static_cast<size_t>(src) * ub, owned.get(), bytes);
    timer.OnReceive(t.arrival, t.ready, &posts);
  }
  RP_RETURN_IF_ERROR(flush());
  AddRound(timer);
  return absl::OkStatus();
}

// The blocks round, starting when the previous round (the counts) ended.
absl::Status AllToAllRunner::TimedBlocks(const float* send, std::span<const size_t> send_off,
                                         float* recv, std::span<const size_t> recv_off,
                                         bool empty_block_message) {
  std::vector<std::vector<uint64_t>> send_bytes;
  std::vector<int> recv_messages;
  for (int s = 1; s < n_; ++s) {
    const size_t dst = static_cast<size_t>(a2a::SendPeer(n_, r_, s));
    const size_t src = static_cast<size_t>(a2a::RecvPeer(n_, r_, s));
    send_bytes.push_back(ShapeOf(send_off[dst + 1] - send_off[dst], empty_block_message).AllBytes());
    recv_messages.push_back(ShapeOf(recv_off[src + 1] - recv_off[src], empty_block_message).messages());
  }
  a2a::PairwiseTimer timer(round_start_, send_bytes, recv_messages);
  auto post = [&](const a2a::PairwiseTimer::Post& p) -> absl::Status {
    const int dst = a2a::SendPeer(n_, r_, p.step);
    const size_t ud = static_cast<size_t>(dst);
    const Range out{send_off[ud], send_off[ud + 1] - send_off[ud]};
    const int pieces = static_cast<int>(send_bytes[static_cast<size_t>(p.step - 1)].size());
    const Range g = ring::SplitSegment(Range{0, out.size}, pieces, p.message);
    const float* src = send + out.begin + g.begin;
    const uint64_t wire = SegmentWireBytes(codec_, g.size);
    absl::StatusOr<std::unique_ptr<std::byte[]>> copy =
        WireCopy(codec_, src, g.size, out.begin + g.begin);
    if (!copy.ok()) return FailLocal(copy.status(), "encoding for", dst, p.step);
    const A2aMsg m{.payload = nullptr,
                   .owned = true,
                   .op_id = op_id_,
                   .block_elems = out.size,
                   .elems = static_cast<uint32_t>(g.size),
                   .segment = p.message,
                   .kind = kind_,
                   .codec = codec_};
    return PostOwned(dst, m, std::move(*copy), wire, p.bytes, p.ready, p.step);
  };
  std::vector<a2a::PairwiseTimer::Post> posts = timer.Begin();
  auto flush = [&]() -> absl::Status {  // everything released is posted before any wait
    for (const auto& p : posts) RP_RETURN_IF_ERROR(post(p));
    posts.clear();
    return absl::OkStatus();
  };
  for (int s = 1; s < n_; ++s) {
    const size_t us = static_cast<size_t>(a2a::RecvPeer(n_, r_, s));
    const Range in{recv_off[us], recv_off[us + 1] - recv_off[us]};
    const int kr = recv_messages[static_cast<size_t>(s - 1)];
    for (int k = 0; k < kr; ++k) {
      RP_RETURN_IF_ERROR(flush());
      const Range g = ring::SplitSegment(Range{0, in.size}, kr, k);
      Stamped<A2aMsg> m;
      MessageTiming t;
      RP_RETURN_IF_ERROR(ReceiveTimed(static_cast<int>(us), s, k, static_cast<uint32_t>(g.size),
                                      static_cast<int64_t>(in.size), &m, &t));
      std::unique_ptr<std::byte[]> owned(const_cast<std::byte*>(m.body.payload));
      FromWire(codec_, owned.get(), g.size, recv + in.begin + g.begin);
      timer.OnReceive(t.arrival, t.ready, &posts);
    }
  }
  RP_RETURN_IF_ERROR(flush());
  AddRound(timer);
  return absl::OkStatus();
}

}  // namespace rp::comm::internal
