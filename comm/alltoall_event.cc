// EventAllToAll (alltoall_event.h): AllToAllV's timed protocol (comm/alltoall_timed.cc) with its
// receive loop turned inside out — the same posts, copies and checks, driven by the fabric's
// handler calls instead of the rank's awaits.
#include "comm/alltoall_event.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "comm/alltoall.h"
#include "comm/alltoall_runner.h"
#include "comm/alltoall_steps.h"
#include "comm/ring_timing.h"
#include "runtime/status_macros.h"

namespace rp::comm {
namespace {

using internal::A2aMsg;
using internal::kCountsSegment;
using internal::OpKind;
using ring::Range;

constexpr size_t kPoolSize = 64;

}  // namespace

// A message's header and its real bytes (a copy the receiver owns), carried by the fabric.
struct EventAllToAll::Payload final : FabricPayload {
  A2aMsg header{};
  std::unique_ptr<std::byte[]> bytes;
  uint64_t room = 0;  // bytes allocated
};

EventAllToAll::~EventAllToAll() = default;

std::unique_ptr<EventAllToAll::Payload> EventAllToAll::TakePayload(uint64_t bytes) {
  std::unique_ptr<Payload> p;
  if (pool_.empty()) {
    p = std::make_unique<Payload>();
  } else {
    p = std::move(pool_.back());
    pool_.pop_back();
  }
  if (p->room < bytes) {
    p->bytes = std::make_unique_for_overwrite<std::byte[]>(bytes);
    p->room = bytes;
  }
  return p;
}

EventAllToAll::EventAllToAll(RankComm* rc)
    : rc_(*rc),
      fabric_(*rc->group().options().fabric),
      n_(rc->size()),
      r_(rc->rank()),
      lp_(rc->group().options().lps[static_cast<size_t>(rc->rank())]),
      gate_(fabric_.AddGate()),
      to_(static_cast<size_t>(n_), -1) {
  for (int p = 0; p < n_; ++p) {
    if (p == r_) continue;
    to_[static_cast<size_t>(p)] = rc_.AllToAllLink(r_, p)->fabric_channel;
    fabric_.SetChannelHandler(
        rc_.AllToAllLink(p, r_)->fabric_channel,
        [this, p](Fabric::Scope& scope, ChannelId, Delivery d) {
          OnMessage(scope, p, std::move(d));
        });
  }
}

absl::StatusOr<CollectiveResult> EventAllToAll::Run(
    std::span<const float> send, std::span<const int64_t> send_counts, int bins,
    std::vector<float>* recv, std::vector<int64_t>* recv_counts, const CollectiveOptions& options,
    const a2a::AllToAllWireModel& wire, Nanos start, const WaitSite& site) {
  // AllToAllV's checks, word for word (the op itself is not run).
  RP_RETURN_IF_ERROR(
      AllToAllV::Create(&rc_, send, send_counts, bins, recv, recv_counts, options, wire).status());
  if (rc_.group().aborted()) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", r_, " (device ", rc_.device(), ") ",
                     internal::OpName(OpKind::kAllToAllV),
                     ": communicator aborted earlier: ", rc_.group().abort_status().ToString()));
  }
  Call c;
  c.send = send;
  c.send_counts = send_counts;
  c.bins = bins;
  c.recv = recv;
  c.recv_counts = recv_counts;
  c.codec = options.codec;
  c.seg = options.segment_bytes / sizeof(float);
  c.wire = wire;
  c.op_id = rc_.TakeOpId();
  c.result.start = start;
  c.result.end = start;
  c.site = site;
  const size_t ub = static_cast<size_t>(bins);
  recv_counts->assign(static_cast<size_t>(n_) * ub, 0);
  std::copy_n(send_counts.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(r_) * ub), ub,
              recv_counts->begin() + static_cast<ptrdiff_t>(static_cast<size_t>(r_) * ub));
  // The counts round: one message of bins · kCountBytes per step (metadata, modeled as sent).
  c.timer.emplace(start,
                  std::vector<std::vector<uint64_t>>(static_cast<size_t>(n_ - 1),
                                                     {a2a::kCountBytes * ub}),
                  std::vector<int>(static_cast<size_t>(n_ - 1), 1));
  bool refused = false;
  fabric_.Run([&](Fabric::Scope& scope) {
    if (failed_) {
      refused = true;
      return;
    }
    status_ = absl::OkStatus();
    call_.emplace(std::move(c));
    std::vector<a2a::PairwiseTimer::Post> posts = call_->timer->Begin();
    const absl::Status s = Post(scope, posts);
    if (!s.ok()) return End(scope, s);
    Pump(scope);
  });
  if (refused) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", r_, " (device ", rc_.device(), ") ", internal::OpName(OpKind::kAllToAllV),
        ": an earlier call of this rank failed"));
  }
  const absl::StatusOr<Nanos> end = fabric_.AwaitGate(lp_, gate_, site);
  fabric_.ResetGate(gate_);
  if (end.ok()) {  // End ran (under the lock, before the signal): status_ and done_ are settled
    if (!status_.ok()) return status_;
    rc_.Account(done_, options.codec);
    return std::move(done_);
  }
  // The fabric was aborted (by another rank's failure, or the run's): the call is dropped, so no
  // handler writes into the caller's buffers once this returns, and the error says it is a
  // consequence (as AllToAllV's "aborted because the group failed"), so the run's report names
  // the rank that failed first.
  absl::Status out;
  fabric_.Run([&](Fabric::Scope&) {
    if (!status_.ok() || !call_.has_value()) {
      out = status_;
      return;
    }
    const int peer = AwaitedPeer();
    out = Error(absl::AbortedError(absl::StrCat("aborted because the run failed: ",
                                                end.status().ToString())),
                "waiting for", peer, call_->blocks ? call_->timer->step() : 0);
    call_.reset();
  });
  return out.ok() ? end.status() : out;
}

void EventAllToAll::OnMessage(Fabric::Scope& scope, int peer, Delivery delivery) {
  if (failed_) return;
  // The common case: the call awaits exactly this message (nothing from `peer` is buffered then:
  // Pump handles every buffered message of the awaited peer before it waits).
  if (call_.has_value() && !call_->timer->done() && AwaitedPeer() == peer) {
    const absl::Status s = Handle(scope, peer, delivery);
    if (!s.ok()) return End(scope, s);
  } else {
    inbox_.push_back({peer, std::move(delivery)});
  }
  Pump(scope);
}

int EventAllToAll::AwaitedPeer() const { return a2a::RecvPeer(n_, r_, call_->timer->step()); }

void EventAllToAll::Pump(Fabric::Scope& scope) {
  while (call_.has_value() && !scope.aborted()) {
    Call& c = *call_;
    if (c.timer->done()) {
      AddRound();
      if (c.blocks) return End(scope, absl::OkStatus());
      const absl::Status s = StartBlocks(scope);
      if (!s.ok()) return End(scope, s);
      continue;
    }
    const int peer = AwaitedPeer();
    auto it = std::find_if(inbox_.begin(), inbox_.end(),
                           [peer](const Buffered& b) { return b.peer == peer; });
    if (it == inbox_.end()) {
      WaitSite site = c.site;
      site.peer = rc_.group().device(peer);
      scope.SetGateSite(gate_, site);
      return;
    }
    Delivery d = std::move(it->delivery);
    inbox_.erase(it);
    const absl::Status s = Handle(scope, peer, d);
    if (!s.ok()) return End(scope, s);
  }
}

absl::Status EventAllToAll::Handle(Fabric::Scope& scope, int peer, Delivery& d) {
  Call& c = *call_;
  const int step = c.timer->step();
  auto* pl = dynamic_cast<Payload*>(d.payload.get());
  if (pl == nullptr) {
    return Error(absl::InternalError("an all-to-all message without its data"), "receiving from",
                 peer, c.blocks ? step : 0);
  }
  const size_t up = static_cast<size_t>(peer);
  if (!c.blocks) {
    const size_t ub = static_cast<size_t>(c.bins);
    RP_RETURN_IF_ERROR(
        Check(pl->header, peer, 0, kCountsSegment, static_cast<uint32_t>(c.bins), -1));
    std::memcpy(c.recv_counts->data() + up * ub, pl->bytes.get(), ub * sizeof(int64_t));
  } else {
    const Range in{c.recv_off[up], c.recv_off[up + 1] - c.recv_off[up]};
    const int kr = c.recv_messages[static_cast<size_t>(step - 1)];
    const Range g = ring::SplitSegment(Range{0, in.size}, kr, c.received);
    RP_RETURN_IF_ERROR(Check(pl->header, peer, step, c.received, static_cast<uint32_t>(g.size),
                             static_cast<int64_t>(in.size)));
    internal::FromWire(c.codec, pl->bytes.get(), g.size, c.recv->data() + in.begin + g.begin);
  }
  if (pool_.size() < kPoolSize) {
    d.payload.release();
    pool_.emplace_back(pl);
  }
  ++c.received;
  std::vector<a2a::PairwiseTimer::Post> posts;
  c.timer->OnReceive(d.timing.arrival, d.timing.ready, &posts);
  if (c.timer->step() != step) c.received = 0;
  return Post(scope, posts);
}

absl::Status EventAllToAll::StartBlocks(Fabric::Scope& scope) {
  Call& c = *call_;
  const size_t n = static_cast<size_t>(n_), ub = static_cast<size_t>(c.bins);
  c.send_off.assign(n + 1, 0);
  c.recv_off.assign(n + 1, 0);
  for (size_t p = 0; p < n; ++p) {
    size_t out = 0, in = 0;
    for (size_t b = 0; b < ub; ++b) {
      out += static_cast<size_t>(c.send_counts[p * ub + b]);
      in += static_cast<size_t>((*c.recv_counts)[p * ub + b]);
    }
    c.send_off[p + 1] = c.send_off[p] + out;
    c.recv_off[p + 1] = c.recv_off[p] + in;
  }
  c.recv->resize(c.recv_off[n]);
  const size_t own = static_cast<size_t>(r_);
  if (c.send_off[own + 1] > c.send_off[own]) {
    std::memcpy(c.recv->data() + c.recv_off[own], c.send.data() + c.send_off[own],
                (c.send_off[own + 1] - c.send_off[own]) * sizeof(float));
  }
  auto shape = [&](size_t real) {
    return a2a::BlockShape{.modeled_elems = c.wire.ModeledElements(real),
                           .segment_elems = c.seg,
                           .codec = c.codec,
                           .empty_block_message = false};
  };
  c.send_bytes.clear();
  c.recv_messages.clear();
  for (int s = 1; s < n_; ++s) {
    const size_t dst = static_cast<size_t>(a2a::SendPeer(n_, r_, s));
    const size_t src = static_cast<size_t>(a2a::RecvPeer(n_, r_, s));
    c.send_bytes.push_back(shape(c.send_off[dst + 1] - c.send_off[dst]).AllBytes());
    c.recv_messages.push_back(shape(c.recv_off[src + 1] - c.recv_off[src]).messages());
  }
  c.blocks = true;
  c.received = 0;
  c.timer.emplace(c.timer->end(), c.send_bytes, c.recv_messages);
  std::vector<a2a::PairwiseTimer::Post> posts = c.timer->Begin();
  return Post(scope, posts);
}

absl::Status EventAllToAll::Post(Fabric::Scope& scope,
                                 std::vector<a2a::PairwiseTimer::Post>& posts) {
  for (const a2a::PairwiseTimer::Post& p : posts) {
    RP_RETURN_IF_ERROR(call_->blocks ? PostBlock(scope, p) : PostCounts(scope, p));
  }
  posts.clear();
  return absl::OkStatus();
}

absl::Status EventAllToAll::PostCounts(Fabric::Scope& scope, const a2a::PairwiseTimer::Post& p) {
  Call& c = *call_;
  const int dst = a2a::SendPeer(n_, r_, p.step);
  const size_t ub = static_cast<size_t>(c.bins);
  const int64_t* mine = c.send_counts.data() + static_cast<size_t>(dst) * ub;
  const uint64_t bytes = a2a::kCountBytes * ub;
  std::unique_ptr<Payload> pl = TakePayload(bytes);
  std::memcpy(pl->bytes.get(), mine, bytes);
  pl->header = A2aMsg{.payload = nullptr,
                      .owned = true,
                      .op_id = c.op_id,
                      .block_elems = static_cast<uint64_t>(
                          std::accumulate(mine, mine + ub, int64_t{0})),
                      .elems = static_cast<uint32_t>(c.bins),
                      .segment = kCountsSegment,
                      .kind = OpKind::kAllToAllV,
                      .codec = c.codec};
  absl::StatusOr<uint64_t> ticket = scope.Post(
      lp_, to_[static_cast<size_t>(dst)],
      {.src = rc_.device(), .dst = rc_.group().device(dst), .bytes = p.bytes, .ready = p.ready,
       .step = c.wire.step},
      std::move(pl));
  if (!ticket.ok()) return Error(ticket.status(), "posting to the fabric for", dst, 0);
  c.result.wire_bytes += bytes;
  c.result.modeled_bytes += p.bytes;
  ++c.result.messages;
  return absl::OkStatus();
}

absl::Status EventAllToAll::PostBlock(Fabric::Scope& scope, const a2a::PairwiseTimer::Post& p) {
  Call& c = *call_;
  const int dst = a2a::SendPeer(n_, r_, p.step);
  const size_t ud = static_cast<size_t>(dst);
  const Range out{c.send_off[ud], c.send_off[ud + 1] - c.send_off[ud]};
  const int pieces = static_cast<int>(c.send_bytes[static_cast<size_t>(p.step - 1)].size());
  const Range g = ring::SplitSegment(Range{0, out.size}, pieces, p.message);
  const float* src = c.send.data() + out.begin + g.begin;
  const uint64_t wire = SegmentWireBytes(c.codec, g.size);
  std::unique_ptr<Payload> pl = TakePayload(std::max<uint64_t>(wire, 1));
  const absl::Status encoded =
      internal::ToWire(c.codec, src, g.size, out.begin + g.begin, pl->bytes.get());
  if (!encoded.ok()) return Error(encoded, "encoding for", dst, p.step);
  pl->header = A2aMsg{.payload = nullptr,
                      .owned = true,
                      .op_id = c.op_id,
                      .block_elems = out.size,
                      .elems = static_cast<uint32_t>(g.size),
                      .segment = p.message,
                      .kind = OpKind::kAllToAllV,
                      .codec = c.codec};
  absl::StatusOr<uint64_t> ticket = scope.Post(
      lp_, to_[ud],
      {.src = rc_.device(), .dst = rc_.group().device(dst), .bytes = p.bytes, .ready = p.ready,
       .step = c.wire.step},
      std::move(pl));
  if (!ticket.ok()) return Error(ticket.status(), "posting to the fabric for", dst, p.step);
  c.result.wire_bytes += wire;
  c.result.modeled_bytes += p.bytes;
  ++c.result.messages;
  return absl::OkStatus();
}

void EventAllToAll::AddRound() {
  Call& c = *call_;
  const a2a::PairwiseTimer& t = *c.timer;
  c.result.end = std::max(c.result.end, t.end());
  c.result.transfer += t.transfer();
  c.result.peer_wait += t.peer_wait();
  for (const a2a::PairwiseTimer::Span& sp : t.spans()) {
    c.result.spans.push_back({sp.start, sp.end, sp.peer});
  }
}

void EventAllToAll::End(Fabric::Scope& scope, absl::Status status) {
  const Nanos end = call_->result.end;
  if (status.ok()) done_ = std::move(call_->result);
  status_ = status;
  call_.reset();
  scope.Signal(gate_, end);
  if (!status.ok()) {
    failed_ = true;
    inbox_.clear();
  }
}

// As AllToAllRunner::Fail: "rank R (device D) all-to-all-v #op <what> rank P (device Q) at step S".
absl::Status EventAllToAll::Error(absl::Status s, const char* what, int peer, int step) const {
  return absl::Status(
      s.code(),
      absl::StrCat(internal::OpPrefix(r_, rc_.device(), OpKind::kAllToAllV, call_->op_id), " ",
                   what, " rank ", peer, " (device ", rc_.group().device(peer), ") at step ",
                   step, ": ", s.message()));
}

absl::Status EventAllToAll::Check(const internal::A2aMsg& w, int peer, int step, int32_t segment,
                                  uint32_t elems, int64_t block) const {
  const absl::Status s = internal::CheckHeader(w, call_->op_id, OpKind::kAllToAllV, call_->codec,
                                               segment, elems, block);
  if (!s.ok()) return Error(s, "receiving from", peer, step);
  return absl::OkStatus();
}

}  // namespace rp::comm
