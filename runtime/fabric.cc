#include "runtime/fabric.h"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/fabric_internal.h"

namespace rp {

const char* LpStateName(LpWait::State s) {
  switch (s) {
    case LpWait::State::kRunning: return "running";
    case LpWait::State::kAwaitChannel: return "awaiting a message";
    case LpWait::State::kParked: return "parked";
    case LpWait::State::kAwaitGate: return "awaiting its comm stream";
    case LpWait::State::kRendezvous: return "at a rendezvous";
    case LpWait::State::kDone: return "done";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<Fabric>> Fabric::Create(const FabricOptions& options) {
  if (options.tie_rank.empty()) {
    return absl::InvalidArgumentError("fabric: tie_rank must name at least one LP");
  }
  {
    std::vector<uint64_t> sorted = options.tie_rank;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
      return absl::InvalidArgumentError("fabric: tie_rank values must be distinct");
    }
  }
  absl::StatusOr<FabricModel> model =
      FabricModel::Create(options.links, options.num_devices, options.faults);
  if (!model.ok()) return model.status();
  return std::unique_ptr<Fabric>(new Fabric(options, *std::move(model)));
}

Fabric::Fabric(const FabricOptions& options, FabricModel model)
    : options_(options), model_(std::move(model)) {
  const size_t n = options_.tie_rank.size();
  lps_.reserve(n);
  while (leaves_ < n) leaves_ *= 2;
  Unlocker lock(this);
  handlers_.resize(n);
  tree_.assign(2 * leaves_, Key{std::numeric_limits<int64_t>::max(), ~uint64_t{0}, ~uint64_t{0}});
  for (size_t i = 0; i < n; ++i) {
    lps_.push_back(std::make_unique<Lp>());
    lps_.back()->tie = options_.tie_rank[i];
    UpdateTree(static_cast<LpId>(i));
  }
}

Fabric::~Fabric() = default;

Fabric::Key Fabric::LpKey(LpId lp) const {
  const Lp& l = *lps_[static_cast<size_t>(lp)];
  if (l.state != LpWait::State::kRunning) {
    return Key{std::numeric_limits<int64_t>::max(), ~uint64_t{0}, ~uint64_t{0}};
  }
  return Key{l.bound.count(), l.tie, l.next_seq};
}

void Fabric::UpdateTree(LpId lp) {
  size_t i = leaves_ + static_cast<size_t>(lp);
  tree_[i] = LpKey(lp);
  for (i /= 2; i >= 1; i /= 2) {
    const Key& m = std::min(tree_[2 * i], tree_[2 * i + 1]);
    if (!(m < tree_[i]) && !(tree_[i] < m)) break;  // unchanged above
    tree_[i] = m;
  }
}

void Fabric::SetState(LpId lp, LpWait::State s) {
  lps_[static_cast<size_t>(lp)]->state = s;
  UpdateTree(lp);
}

void Fabric::RaiseBound(LpId lp, Nanos t) {
  Lp& l = *lps_[static_cast<size_t>(lp)];
  if (t <= l.bound) return;
  l.bound = t;
  Bump(progress_);
  if (l.state == LpWait::State::kRunning) UpdateTree(lp);
}

void Fabric::Resume(LpId lp, Nanos at_least) {
  Lp& l = *lps_[static_cast<size_t>(lp)];
  l.bound = std::max(l.bound, at_least);
  l.state = LpWait::State::kRunning;
  UpdateTree(lp);
  Bump(progress_);
  wake_.push_back(&l);  // signalled once the lock is released (Unlocker)
}

void Fabric::UnlockAndWake() {
  // Each thread keeps its own buffer: swapped in under the lock, drained after it.
  thread_local std::vector<Lp*> wake;
  wake.clear();
  wake.swap(wake_);
  mu_.Unlock();
  for (Lp* l : wake) l->parker.Unpark();
}

Fabric::TicketId Fabric::NewTicket() {
  if (free_tickets_.empty()) {
    const auto first = static_cast<TicketId>(tickets_.size() * kTicketBlock);
    tickets_.push_back(std::make_unique<TicketBlock>());
    free_tickets_.reserve(free_tickets_.size() + kTicketBlock);
    for (TicketId i = kTicketBlock; i-- > 0;) free_tickets_.push_back(first + i);
  }
  const TicketId id = free_tickets_.back();
  free_tickets_.pop_back();
  return id;
}

absl::Status Fabric::HandlerFailure(LpId receiver, ChannelId channel, int src_device,
                                    const char* what) const {
  const WaitSite& site = lps_[static_cast<size_t>(receiver)]->site;
  return absl::InternalError(absl::StrCat(
      site.rank >= 0 ? DescribeSite(site) : absl::StrCat("LP ", receiver),
      ": exception in the handler of a message on channel ", channel, " from device ", src_device,
      ": ", what));
}

void Fabric::AbortOnHandlerFailure(const absl::Status& failure, LpId receiver) {
  if (options_.on_handler_failure) {
    options_.on_handler_failure(receiver, lps_[static_cast<size_t>(receiver)]->site, failure);
  }
  AbortLocked(failure);
}

void Fabric::CommitReady() {
  while (!pending_.empty() && pending_.top().key < tree_[1] &&
         !aborted_.load(std::memory_order_relaxed)) {
    const Pending p = pending_.top();
    pending_.pop();
    if (!pending_.empty()) {
      // The next commit's ticket and channel are usually cold (posted long ago, at thousands of
      // channels): fetch them while this one is handled.
      const Pending& next = pending_.top();
      __builtin_prefetch(&TicketAt(next.ticket));
      __builtin_prefetch(&channels_[static_cast<size_t>(next.channel)]);
    }
    Channel& c = channels_[static_cast<size_t>(p.channel)];
    Ticket& t = TicketAt(p.ticket);
    if (c.handler && t.payload != nullptr && options_.prefetch_payload) {
      // The payload was written long ago by its sender: fetch its first lines now, while the
      // model and the handler's own state are read, not when the handler reaches its data.
      // (Integer arithmetic: the second line may lie past a small payload, where a pointer may
      // not point; a prefetch never faults.)
      const auto q = reinterpret_cast<uintptr_t>(t.payload.get());
      __builtin_prefetch(reinterpret_cast<const void*>(q));
      __builtin_prefetch(reinterpret_cast<const void*>(q + 64));
    }
    const MessageTiming timing = model_.Commit(t.message);
    t.committed = true;
    last_committed_ = p.key;
    Bump(committed_);
    Bump(progress_);
    if (options_.on_commit) options_.on_commit(t.message, timing);
    if (c.handler) {
      // Event-driven receiver: handed over now. A channel's keys increase along it, so what
      // commits is its front.
      if (t.index != c.consumed) {
        AbortLocked(absl::InternalError(
            absl::StrCat("fabric: channel ", p.channel, " committed out of order")));
        return;
      }
      Delivery d{.message = t.message, .timing = timing, .ticket = t.seq,
                 .payload = std::move(t.payload)};
      ++c.consumed;
      free_tickets_.push_back(p.ticket);  // reused first by what the handler posts
      Scope scope(*this);
      // The handler runs on whichever thread commits: an exception it throws is its receiver's
      // failure, reported here in commit order, not one of the committing thread (whose rank it
      // would name on its way out through that thread's own op).
      const int from = t.message.src;
      try {
        c.handler(scope, p.channel, std::move(d));  // may post, signal (the loop re-checks)
      } catch (const std::exception& e) {
        AbortOnHandlerFailure(HandlerFailure(c.dst, p.channel, from, e.what()), c.dst);
        return;
      } catch (...) {
        AbortOnHandlerFailure(HandlerFailure(c.dst, p.channel, from, "unknown exception"), c.dst);
        return;
      }
      continue;
    }
    TimingAt(p.ticket) = timing;
    Lp& receiver = *lps_[static_cast<size_t>(c.dst)];
    if (receiver.state == LpWait::State::kAwaitChannel && receiver.awaited_channel == p.channel &&
        t.index == c.consumed) {
      Resume(c.dst, timing.arrival);  // may lower the minimum: the loop re-checks
    }
  }
}

ChannelId Fabric::AddChannel(LpId src, LpId dst) {
  Unlocker lock(this);
  Channel& c = channels_.emplace_back();
  c.src = src;
  c.dst = dst;
  return static_cast<ChannelId>(channels_.size() - 1);
}

GateId Fabric::AddGate() {
  Unlocker lock(this);
  gates_.push_back(Gate{});
  return static_cast<GateId>(gates_.size() - 1);
}

RendezvousId Fabric::AddRendezvous(int members) {
  Unlocker lock(this);
  rendezvous_.push_back(Rendezvous{});
  rendezvous_.back().members = members;
  return static_cast<RendezvousId>(rendezvous_.size() - 1);
}

void Fabric::StartParked(LpId lp) {
  Unlocker lock(this);
  Lp& l = *lps_[static_cast<size_t>(lp)];
  if (l.work == 0) SetState(lp, LpWait::State::kParked);
  CommitReady();
}

void Fabric::SetHandler(LpId lp, Handler handler) {
  Unlocker lock(this);
  handlers_[static_cast<size_t>(lp)] = std::move(handler);
  Lp& l = *lps_[static_cast<size_t>(lp)];
  l.site = WaitSite{.op = "idle"};
  SetState(lp, LpWait::State::kParked);
  CommitReady();
}

void Fabric::SetChannelHandler(ChannelId channel, Handler handler) {
  Unlocker lock(this);
  channels_[static_cast<size_t>(channel)].handler = std::move(handler);
}

void Fabric::Run(absl::FunctionRef<void(Scope&)> fn) {
  Unlocker lock(this);
  Scope scope(*this);
  fn(scope);
  CommitReady();
}

absl::StatusOr<uint64_t> Fabric::Post(LpId lp, ChannelId channel, const FabricMessage& m,
                                      std::unique_ptr<FabricPayload> payload) {
  Unlocker lock(this);
  absl::StatusOr<uint64_t> seq = PostLocked(lp, channel, m, std::move(payload));
  if (seq.ok()) CommitReady();
  return seq;
}

absl::StatusOr<uint64_t> Fabric::PostLocked(LpId lp, ChannelId channel, const FabricMessage& m,
                                            std::unique_ptr<FabricPayload> payload) {
  if (channel < 0 || static_cast<size_t>(channel) >= channels_.size() ||
      channels_[static_cast<size_t>(channel)].src != lp) {
    return absl::InvalidArgumentError(
        absl::StrCat("fabric: LP ", lp, " posts on channel ", channel, " it does not send on"));
  }
  Lp& l = *lps_[static_cast<size_t>(lp)];
  if (m.ready < l.bound) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fabric: LP ", lp, " posts a message ready at ", m.ready.count(),
        " ns, before its bound ", l.bound.count(), " ns (a message out of modeled-time order)"));
  }
  const Key key{m.ready.count(), l.tie, l.next_seq};
  // Equal times are allowed: a message that arrives when it is ready (a free link) lets its
  // receiver post at that very time, with any tie rank; its order against equal-time messages
  // already committed is then causal, the same in every run.
  if (key.time < last_committed_.time) {
    return absl::InternalError(absl::StrCat(
        "fabric: LP ", lp, " (tie rank ", l.tie, ", post ", l.next_seq, ", state ",
        LpStateName(l.state), ") posts a message ready at ", m.ready.count(),
        " ns after one ready at ", last_committed_.time, " ns (tie rank ", last_committed_.tie,
        ", post ", last_committed_.seq, ") committed (the conservative rule was broken)"));
  }
  Channel& c = channels_[static_cast<size_t>(channel)];
  if (!c.resolved) {
    if (!c.handler) c.handler = handlers_[static_cast<size_t>(c.dst)];
    c.resolved = true;
  }
  const uint64_t seq = l.next_seq++;
  const TicketId id = NewTicket();
  Ticket& t = TicketAt(id);
  t.message = m;
  t.seq = seq;
  t.index = c.posted++;
  t.committed = false;
  t.payload = std::move(payload);
  if (!c.handler) {
    if (c.queue.full()) c.queue.set_capacity(std::max<size_t>(8, 2 * c.queue.capacity()));
    c.queue.push_back(id);
  }
  pending_.push(Pending{.key = key, .ticket = id, .channel = channel});
  l.bound = m.ready;
  if (l.state == LpWait::State::kRunning) UpdateTree(lp);
  Bump(progress_);
  return seq;
}

void Fabric::Advance(LpId lp, Nanos t) {
  Unlocker lock(this);
  const Key before = tree_[1];
  RaiseBound(lp, t);
  if (before < tree_[1]) CommitReady();
}

void Fabric::Finish(LpId lp) {
  Unlocker lock(this);
  SetState(lp, LpWait::State::kDone);
  CommitReady();
}

absl::Status Fabric::WaitWhile(LpId lp, const std::function<bool()>& blocked,
                               std::chrono::nanoseconds timeout) {
  Lp& l = *lps_[static_cast<size_t>(lp)];
  const bool bounded = timeout != std::chrono::nanoseconds::max();
  const auto deadline = bounded ? std::chrono::steady_clock::now() + timeout
                                : std::chrono::steady_clock::time_point::max();
  while (blocked()) {
    if (aborted_.load(std::memory_order_acquire)) return abort_status_;
    // Whoever changes what `blocked` reads does so under the lock and Unparks after it (or Abort
    // does), so a wake-up between the check and the Park leaves a token and is not lost.
    UnlockAndWake();
    const bool woken = l.parker.Park(deadline);
    mu_.Lock();
    if (!woken && blocked()) {
      return absl::DeadlineExceededError(absl::StrCat(
          DescribeSite(l.site), ": no message for ",
          std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count(), " ms"));
    }
  }
  if (aborted_.load(std::memory_order_acquire) && l.state != LpWait::State::kRunning) {
    return abort_status_;
  }
  return absl::OkStatus();
}

absl::StatusOr<Delivery> Fabric::Await(LpId lp, ChannelId channel, const WaitSite& site,
                                       std::chrono::nanoseconds timeout) {
  Unlocker lock(this);
  if (channel < 0 || static_cast<size_t>(channel) >= channels_.size() ||
      channels_[static_cast<size_t>(channel)].dst != lp) {
    return absl::InvalidArgumentError(
        absl::StrCat("fabric: LP ", lp, " awaits channel ", channel, " it does not receive on"));
  }
  Channel& c = channels_[static_cast<size_t>(channel)];
  Lp& l = *lps_[static_cast<size_t>(lp)];
  l.site = site;
  auto head_committed = [&]() {
    mu_.AssertHeld();
    return !c.queue.empty() && TicketAt(c.queue.front()).committed;
  };
  if (!head_committed()) {
    if (aborted_.load(std::memory_order_acquire)) return abort_status_;
    l.awaited_channel = channel;
    SetState(lp, LpWait::State::kAwaitChannel);
    CommitReady();
    absl::Status s = WaitWhile(
        lp,
        [&]() {
          mu_.AssertHeld();
          return !head_committed();
        },
        timeout);
    l.awaited_channel = -1;
    if (!s.ok()) {
      if (l.state != LpWait::State::kRunning) SetState(lp, LpWait::State::kRunning);
      return s;
    }
  }
  const TicketId id = c.queue.front();
  c.queue.pop_front();
  ++c.consumed;
  Ticket& t = TicketAt(id);
  Delivery d{.message = t.message, .timing = TimingAt(id), .ticket = t.seq,
             .payload = std::move(t.payload)};
  free_tickets_.push_back(id);
  if (l.state != LpWait::State::kRunning) SetState(lp, LpWait::State::kRunning);
  RaiseBound(lp, d.timing.arrival);
  Bump(progress_);
  return d;
}

}  // namespace rp
