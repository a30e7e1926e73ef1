#include "comm/communicator.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "comm/collectives.h"
#include "runtime/status_macros.h"

namespace rp::comm {

namespace internal {
const char* OpName(OpKind kind) {
  switch (kind) {
    case OpKind::kAllReduce: return "all-reduce";
    case OpKind::kReduceScatter: return "reduce-scatter";
    case OpKind::kAllGather: return "all-gather";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kAllToAll: return "all-to-all";
    case OpKind::kAllToAllV: return "all-to-all-v";
  }
  return "op";
}

std::string OpPrefix(int rank, int device, OpKind kind, uint64_t op_id) {
  return absl::StrCat("rank ", rank, " (device ", device, ") ", OpName(kind), " #", op_id);
}
}  // namespace internal

namespace {

// Every field of `options` in its range (InvalidArgument naming the field).
absl::Status ValidateOptions(const CommunicatorOptions& options) {
  if (options.devices.empty()) {
    return absl::InvalidArgumentError("devices: a communicator needs at least one rank");
  }
  absl::flat_hash_set<int> seen;
  for (size_t r = 0; r < options.devices.size(); ++r) {
    const int d = options.devices[r];
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("devices[", r, "]: device id ", d, " is negative"));
    }
    if (!seen.insert(d).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("devices[", r, "]: device id ", d, " appears twice"));
    }
  }
  if (options.channel_capacity < 2 || options.channel_capacity > kMaxChannelCapacity) {
    return absl::InvalidArgumentError(absl::StrCat("channel_capacity: ", options.channel_capacity,
                                                   " (must be in [2, ", kMaxChannelCapacity,
                                                   "])"));
  }
  if (options.spin_iterations < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("spin_iterations: ", options.spin_iterations, " (must be >= 0)"));
  }
  if (options.yield_iterations < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("yield_iterations: ", options.yield_iterations, " (must be >= 0)"));
  }
  if (options.max_held_segments > kMaxMaxHeldSegments) {
    return absl::InvalidArgumentError(absl::StrCat("max_held_segments: ",
                                                   options.max_held_segments, " (must be <= ",
                                                   kMaxMaxHeldSegments, ")"));
  }
  if (options.inline_bytes > kMaxInlineBytes) {
    return absl::InvalidArgumentError(absl::StrCat("inline_bytes: ", options.inline_bytes,
                                                   " (must be <= ", kMaxInlineBytes, ")"));
  }
  if (options.fabric != nullptr) {
    if (options.lps.size() != options.devices.size()) {
      return absl::InvalidArgumentError(absl::StrCat("lps: ", options.lps.size(),
                                                     " LPs for ", options.devices.size(),
                                                     " ranks (a timed communicator needs one each)"));
    }
    absl::flat_hash_set<LpId> lps;
    for (size_t r = 0; r < options.lps.size(); ++r) {
      const LpId lp = options.lps[r];
      if (lp < 0 || lp >= options.fabric->num_lps() || !lps.insert(lp).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("lps[", r, "]: LP ", lp, " is out of range or appears twice"));
      }
    }
    for (size_t r = 0; r < options.devices.size(); ++r) {
      if (options.devices[r] >= options.fabric->model().num_devices()) {
        return absl::InvalidArgumentError(absl::StrCat("devices[", r, "]: device ",
                                                       options.devices[r],
                                                       " is not on the fabric"));
      }
    }
  } else if (options.clock != nullptr) {
    return absl::InvalidArgumentError("clock: only a timed communicator (with a fabric) waits");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Create(
    const CommunicatorOptions& options) {
  RP_RETURN_IF_ERROR(ValidateOptions(options));
  const bool timed = options.fabric != nullptr;
  std::unique_ptr<Communicator> comm(new Communicator(options));
  // Inline slots: 64-byte aligned (codecs need 4), capacity + 1 per link (see RankComm). None
  // when timed (a slot ties the sender to its receiver's progress).
  const size_t slot_bytes = (options.inline_bytes + 63) / 64 * 64;
  const size_t slots = !timed && options.inline_bytes > 0 && options.devices.size() > 1
                           ? options.channel_capacity + 1
                           : 0;
  const int n = comm->size();
  for (int r = 0; r < n; ++r) {
    if (timed) {
      // Timed ring messages travel with their fabric messages (comm/ring_machine.h).
      if (n > 1) {
        comm->ring_fabric_.push_back(options.fabric->AddChannel(
            options.lps[static_cast<size_t>(r)], options.lps[static_cast<size_t>((r + 1) % n)]));
      }
      continue;
    }
    ChannelOptions co;
    co.src_device = options.devices[static_cast<size_t>(r)];
    co.dst_device = options.devices[static_cast<size_t>((r + 1) % n)];
    co.capacity = options.channel_capacity;
    co.spin_iterations = options.spin_iterations;
    co.yield_iterations = options.yield_iterations;
    comm->ring_data_.push_back(std::make_unique<Channel<internal::WireMsg>>(co));
    // Acks: a rank drains its acknowledgements before each send, when at most capacity (queued)
    // + 1 (being consumed) + held (forwarded, see collectives.cc) of its messages are
    // unacknowledged; it then sends one more. So pushes never find the queue full.
    comm->ring_acks_.push_back(std::make_unique<SpscQueue<internal::Ack>>(
        options.channel_capacity + options.max_held_segments + 4, options.spin_iterations,
        options.yield_iterations));
    // 64 bytes of slack so the first slot can be aligned.
    // Not zeroed: a page is touched only when a message is written into it.
    comm->ring_slots_.push_back(
        slots > 0 ? std::make_unique_for_overwrite<std::byte[]>(slots * slot_bytes + 64) : nullptr);
  }
  for (int r = 0; r < n; ++r) {
    auto rc = std::unique_ptr<RankComm>(new RankComm(comm.get(), r));
    const int prev = (r + n - 1) % n;
    if (timed) {
      comm->ranks_.push_back(std::move(rc));
      continue;
    }
    rc->to_next_ = comm->ring_data_[static_cast<size_t>(r)].get();
    rc->from_prev_ = comm->ring_data_[static_cast<size_t>(prev)].get();
    rc->acks_from_next_ = comm->ring_acks_[static_cast<size_t>(r)].get();
    rc->acks_to_prev_ = comm->ring_acks_[static_cast<size_t>(prev)].get();
    if (slots > 0) {
      std::byte* raw = comm->ring_slots_[static_cast<size_t>(r)].get();
      const auto misalign = reinterpret_cast<uintptr_t>(raw) % 64;
      rc->slots_to_next_ = raw + (misalign == 0 ? 0 : 64 - misalign);
      rc->slots_to_next_count_ = slots;
      rc->slot_bytes_ = slot_bytes;
    }
    comm->ranks_.push_back(std::move(rc));
  }
  return comm;
}

Communicator::~Communicator() = default;

void Communicator::Abort(const absl::Status& status) {
  {
    MutexLock lock(&mu_);
    if (abort_status_.ok()) abort_status_ = status;
    for (auto& [key, ch] : p2p_) ch->Cancel();
    for (auto& [key, link] : a2a_) {
      link->data.Cancel();
      link->acks.Cancel();
    }
  }
  aborted_.store(true, std::memory_order_seq_cst);  // paired with RankComm::in_op_
  for (auto& ch : ring_data_) ch->Cancel();
  for (auto& q : ring_acks_) q->Cancel();
  // Ranks of a timed group may wait in the fabric for messages that will never be posted; so may
  // every other LP on the fabric. The waits it releases are consequences of this failure (Aborted,
  // carrying it), whatever its code: a released wait of another group is not a second failure of
  // the same kind, which the report could take for the first (schedule/run_failure.cc).
  if (options_.fabric != nullptr) {
    options_.fabric->Abort(absl::IsAborted(status) || absl::IsCancelled(status)
                               ? status
                               : absl::AbortedError(absl::StrCat(
                                     "aborted because of an earlier failure: ", status.ToString())));
  }
}

absl::Status Communicator::abort_status() const {
  MutexLock lock(&mu_);
  return abort_status_;
}

bool Communicator::AnyRankInOpBesides(int r) const {
  for (int k = 0; k < size(); ++k) {
    if (k != r && ranks_[static_cast<size_t>(k)]->in_op_.load(std::memory_order_seq_cst)) {
      return true;
    }
  }
  return false;
}

absl::Status Communicator::AbortAt(const absl::Status& s, absl::string_view where) {
  absl::Status out(s.code(), absl::StrCat(where, ": ", s.message()));
  Abort(out);
  return out;
}

absl::Status Communicator::FailAt(const absl::Status& s, absl::string_view where) {
  if (s.code() == absl::StatusCode::kCancelled) {
    return absl::AbortedError(
        absl::StrCat(where, ": aborted because the group failed: ", abort_status().ToString()));
  }
  return AbortAt(s, where);
}

OwningChannel<Buffer>* Communicator::GetP2P(int src, int dst) {
  MutexLock lock(&mu_);
  const int64_t key = static_cast<int64_t>(src) * size() + dst;
  auto& slot = p2p_[key];
  if (slot == nullptr) {
    ChannelOptions co;
    co.src_device = device(src);
    co.dst_device = device(dst);
    co.capacity = options_.fabric != nullptr ? 0 : options_.channel_capacity;
    co.spin_iterations = options_.spin_iterations;
    co.yield_iterations = options_.yield_iterations;
    slot = std::make_unique<OwningChannel<Buffer>>(co);
    if (!abort_status_.ok()) slot->Cancel();
  }
  return slot.get();
}

ChannelId Communicator::P2PFabricChannel(int src, int dst) {
  MutexLock lock(&mu_);
  const int64_t key = static_cast<int64_t>(src) * size() + dst;
  auto [it, inserted] = p2p_fabric_.emplace(key, ChannelId{-1});
  if (inserted) {
    it->second = options_.fabric->AddChannel(options_.lps[static_cast<size_t>(src)],
                                             options_.lps[static_cast<size_t>(dst)]);
  }
  return it->second;
}

internal::A2aLink* Communicator::GetAllToAllLink(int src, int dst) {
  MutexLock lock(&mu_);
  const int64_t key = static_cast<int64_t>(src) * size() + dst;
  auto& slot = a2a_[key];
  if (slot == nullptr) {
    ChannelOptions co;
    co.src_device = device(src);
    co.dst_device = device(dst);
    co.capacity = options_.fabric != nullptr ? 0 : options_.channel_capacity;  // timed: unbounded
    co.spin_iterations = options_.spin_iterations;
    co.yield_iterations = options_.yield_iterations;
    // A sender drains a peer's acknowledgements before each message to it, so at most capacity
    // (queued) + 1 (being consumed) are pending when it stops sending to that peer.
    slot = std::make_unique<internal::A2aLink>(co, options_.channel_capacity + 4);
    if (options_.fabric != nullptr) {
      slot->fabric_channel = options_.fabric->AddChannel(options_.lps[static_cast<size_t>(src)],
                                                         options_.lps[static_cast<size_t>(dst)]);
    }
    if (!abort_status_.ok()) {
      slot->data.Cancel();
      slot->acks.Cancel();
    }
  }
  return slot.get();
}

int RankComm::size() const { return group_->size(); }
uint64_t RankComm::residual_bytes() const {
  uint64_t bytes = 0;
  for (const std::vector<float>& r : residuals_) bytes += r.size() * sizeof(float);
  return bytes;
}

uint64_t RankComm::wire_buffer_bytes() const {
  return static_cast<uint64_t>(pool_.size()) * pool_buffer_bytes_ + a2a_wire_.size();
}

std::span<float> RankComm::Residual(int slot, size_t count) {
  const size_t s = static_cast<size_t>(slot < 0 ? 0 : slot);
  if (residuals_.size() <= s) residuals_.resize(s + 1);
  if (residuals_[s].size() != count) residuals_[s].assign(count, 0.0f);
  return residuals_[s];
}

void RankComm::Account(const CollectiveResult& result, Codec codec) {
  stats_.collective_bytes[static_cast<int>(codec)] += result.wire_bytes;
  stats_.modeled_bytes += result.modeled_bytes;
  stats_.messages += result.messages;
  stats_.forwarded += result.forwarded;
}

bool RankComm::timed() const { return group_->options().fabric != nullptr; }
int RankComm::device() const { return group_->device(rank_); }

OwningChannel<Buffer>* RankComm::P2PChannel(int src, int dst) {
  const int64_t key = static_cast<int64_t>(src) * size() + dst;
  auto it = p2p_cache_.find(key);
  if (it != p2p_cache_.end()) return it->second;
  OwningChannel<Buffer>* ch = group_->GetP2P(src, dst);
  p2p_cache_.emplace(key, ch);
  return ch;
}

internal::A2aLink* RankComm::AllToAllLink(int src, int dst) {
  if (a2a_to_.empty()) {
    a2a_to_.assign(static_cast<size_t>(size()), nullptr);
    a2a_from_.assign(static_cast<size_t>(size()), nullptr);
    a2a_in_flight_.assign(static_cast<size_t>(size()), 0);
  }
  const bool out = src == rank_;
  internal::A2aLink*& cached = (out ? a2a_to_ : a2a_from_)[static_cast<size_t>(out ? dst : src)];
  if (cached == nullptr) cached = group_->GetAllToAllLink(src, dst);
  return cached;
}

absl::StatusOr<uint64_t> RankComm::Send(int peer, std::unique_ptr<Buffer> buffer,
                                        Nanos ready_at, const P2POptions& options) {
  if (peer < 0 || peer >= size() || peer == rank_) {
    return absl::InvalidArgumentError(absl::StrCat("peer: rank ", rank_, " cannot send to rank ",
                                                   peer, " (group of ", size(), ")"));
  }
  if (buffer == nullptr) return absl::InvalidArgumentError("buffer: null");
  if (group_->aborted()) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", rank_, ": communicator aborted earlier: ",
                     group_->abort_status().ToString()));
  }
  const uint64_t bytes = buffer->size() * sizeof(float);
  const uint64_t modeled = options.modeled_bytes == P2POptions::kRealBytes ? bytes : options.modeled_bytes;
  uint64_t ticket = 0;
  if (timed()) {
    // Posted before the data is pushed, so the fabric's FIFO and the channel's agree.
    const CommunicatorOptions& o = group_->options();
    absl::StatusOr<uint64_t> t = o.fabric->Post(
        o.lps[static_cast<size_t>(rank_)], group_->P2PFabricChannel(rank_, peer),
        {.src = device(), .dst = group_->device(peer), .bytes = modeled, .ready = ready_at,
         .step = options.step});
    if (!t.ok()) return t.status();
    ticket = *t;
    stats_.modeled_bytes += modeled;
  }
  absl::Status s = P2PChannel(rank_, peer)->Send(std::move(buffer), ready_at, ticket,
                                                 options.timeout);
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("rank ", rank_, " (device ", device(),
                                               ") send to rank ", peer, " (device ",
                                               group_->device(peer), "): ", s.message()));
  }
  stats_.p2p_bytes += bytes;
  ++stats_.messages;
  return ticket;
}

absl::StatusOr<Received> RankComm::Recv(int peer, const P2POptions& options) {
  if (peer < 0 || peer >= size() || peer == rank_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "peer: rank ", rank_, " cannot receive from rank ", peer, " (group of ", size(), ")"));
  }
  auto where = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("rank ", rank_, " (device ", device(),
                                               ") waiting for rank ", peer, " (device ",
                                               group_->device(peer), "): ", s.message()));
  };
  Received r;
  Delivery d;
  if (timed()) {
    const CommunicatorOptions& o = group_->options();
    absl::StatusOr<Delivery> got = o.fabric->Await(
        o.lps[static_cast<size_t>(rank_)], group_->P2PFabricChannel(peer, rank_),
        {.rank = device(), .op = options.what, .peer = group_->device(peer), .step = options.step},
        options.timeout);
    if (!got.ok()) return where(got.status());
    d = *std::move(got);
  }
  Nanos ready{0};
  uint64_t ticket = 0;
  absl::Status s = P2PChannel(peer, rank_)->Recv(&r.buffer, &ready, &ticket, options.timeout);
  if (!s.ok()) return where(s);
  if (timed()) {
    if (ticket != d.ticket) {
      return where(absl::InternalError(absl::StrCat("data of ticket ", ticket,
                                                    " arrived for the fabric's ticket ", d.ticket)));
    }
    r.timing = d.timing;
    r.ticket = d.ticket;
    if (Clock* clock = group_->options().clock; clock != nullptr) clock->WaitUntil(r.timing.arrival);
  } else {
    r.timing.ready = r.timing.start = r.timing.last_byte = r.timing.arrival = ready;
  }
  r.arrival = r.timing.arrival;
  return r;
}

absl::StatusOr<CollectiveResult> RankComm::AllReduce(std::span<const float> in,
                                                     std::span<float> out,
                                                     const CollectiveOptions& options,
                                                     Nanos start) {
  RP_ASSIGN_OR_RETURN(auto op, RingAllReduce::Create(this, in, out, options));
  RP_RETURN_IF_ERROR(op.Run(start));
  return op.result();
}

absl::StatusOr<CollectiveResult> RankComm::ReduceScatter(std::span<const float> in,
                                                         std::span<float> out,
                                                         const CollectiveOptions& options,
                                                         Nanos start) {
  RP_ASSIGN_OR_RETURN(auto op, RingReduceScatter::Create(this, in, out, options));
  RP_RETURN_IF_ERROR(op.Run(start));
  return op.result();
}

absl::StatusOr<CollectiveResult> RankComm::AllGather(std::span<const float> in,
                                                     std::span<float> out,
                                                     const CollectiveOptions& options,
                                                     Nanos start) {
  RP_ASSIGN_OR_RETURN(auto op, RingAllGather::Create(this, in, out, options));
  RP_RETURN_IF_ERROR(op.Run(start));
  return op.result();
}

absl::StatusOr<CollectiveResult> RankComm::Broadcast(int root, std::span<const float> in,
                                                     std::span<float> out,
                                                     const CollectiveOptions& options,
                                                     Nanos start) {
  RP_ASSIGN_OR_RETURN(auto op, RingBroadcast::Create(this, root, in, out, options));
  RP_RETURN_IF_ERROR(op.Run(start));
  return op.result();
}

}  // namespace rp::comm
