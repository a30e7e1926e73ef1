// rp::Fabric: work hand-off, gates, rendezvous, abort, observation and handler scopes (the rest is
// in runtime/fabric.cc).
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/fabric.h"
#include "runtime/fabric_internal.h"

namespace rp {

void Fabric::AddWork(LpId lp, Nanos ready) {
  Unlocker lock(this);
  Lp& l = *lps_[static_cast<size_t>(lp)];
  ++l.work;
  if (l.state == LpWait::State::kParked) {
    l.bound = std::max(l.bound, ready);
    SetState(lp, LpWait::State::kRunning);
  }
  Bump(progress_);
}

void Fabric::FinishWork(LpId lp) {
  Unlocker lock(this);
  Lp& l = *lps_[static_cast<size_t>(lp)];
  if (l.work > 0) --l.work;
  if (l.work == 0 && l.state == LpWait::State::kRunning) {
    SetState(lp, LpWait::State::kParked);
    CommitReady();
  }
  Bump(progress_);
}

void Fabric::Signal(GateId gate, Nanos t) {
  Unlocker lock(this);
  SignalLocked(gate, t);
}

void Fabric::SignalLocked(GateId gate, Nanos t) {
  Gate& g = gates_[static_cast<size_t>(gate)];
  g.signalled = true;
  g.time = t;
  Bump(progress_);
  if (g.waiter >= 0 && lps_[static_cast<size_t>(g.waiter)]->state == LpWait::State::kAwaitGate) {
    Resume(g.waiter, t);
  }
}

absl::StatusOr<Nanos> Fabric::AwaitGate(LpId lp, GateId gate, const WaitSite& site) {
  Unlocker lock(this);
  Gate& g = gates_[static_cast<size_t>(gate)];
  Lp& l = *lps_[static_cast<size_t>(lp)];
  l.site = g.has_site ? g.site : site;
  if (!g.signalled) {
    if (aborted_.load(std::memory_order_acquire)) return abort_status_;
    g.waiter = lp;
    SetState(lp, LpWait::State::kAwaitGate);
    CommitReady();
    absl::Status s = WaitWhile(lp, [&]() {
      mu_.AssertHeld();
      return !gates_[static_cast<size_t>(gate)].signalled;
    });
    gates_[static_cast<size_t>(gate)].waiter = -1;
    if (!s.ok()) {
      if (l.state != LpWait::State::kRunning) SetState(lp, LpWait::State::kRunning);
      return s;
    }
  }
  const Nanos t = gates_[static_cast<size_t>(gate)].time;
  if (l.state != LpWait::State::kRunning) SetState(lp, LpWait::State::kRunning);
  RaiseBound(lp, t);
  return t;
}

void Fabric::ResetGate(GateId gate) {
  Unlocker lock(this);
  gates_[static_cast<size_t>(gate)] = Gate{};
}

absl::StatusOr<Nanos> Fabric::Arrive(LpId lp, RendezvousId rv, Nanos t, const WaitSite& site,
                                     absl::FunctionRef<absl::StatusOr<Nanos>(Nanos)> on_last) {
  mu_.Lock();
  Lp& l = *lps_[static_cast<size_t>(lp)];
  l.site = site;
  if (aborted_.load(std::memory_order_acquire)) {
    const absl::Status s = abort_status_;
    UnlockAndWake();
    return s;
  }
  Rendezvous& r = rendezvous_[static_cast<size_t>(rv)];
  const uint64_t generation = r.generation;
  r.max = r.arrived == 0 ? t : std::max(r.max, t);
  ++r.arrived;
  SetState(lp, LpWait::State::kRendezvous);
  Bump(progress_);
  if (r.arrived < r.members) {
    r.waiting.push_back(lp);
    CommitReady();
    absl::Status s = WaitWhile(lp, [&]() {
      mu_.AssertHeld();
      return rendezvous_[static_cast<size_t>(rv)].generation == generation;
    });
    if (!s.ok()) {
      if (l.state != LpWait::State::kRunning) SetState(lp, LpWait::State::kRunning);
      UnlockAndWake();
      return s;
    }
    const Rendezvous& done = rendezvous_[static_cast<size_t>(rv)];
    absl::StatusOr<Nanos> out =
        done.status.ok() ? absl::StatusOr<Nanos>(done.release) : absl::StatusOr<Nanos>(done.status);
    UnlockAndWake();
    return out;
  }
  // The last arriver: everyone else waits (excluded), so what on_last reads is quiescent.
  const Nanos max = r.max;
  CommitReady();
  UnlockAndWake();
  absl::StatusOr<Nanos> release = on_last(max);
  mu_.Lock();
  Rendezvous& rr = rendezvous_[static_cast<size_t>(rv)];
  rr.status = release.status();
  rr.release = release.ok() ? *release : max;
  rr.arrived = 0;
  ++rr.generation;
  for (LpId w : rr.waiting) Resume(w, rr.release);
  rr.waiting.clear();
  Resume(lp, rr.release);
  UnlockAndWake();
  return release;
}

void Fabric::Abort(const absl::Status& status) {
  Unlocker lock(this);
  AbortLocked(status);
}

absl::Status Fabric::abort_status() const {
  MutexLock lock(&mu_);
  return abort_status_;
}

void Fabric::AbortLocked(const absl::Status& status) {
  if (aborted_.load(std::memory_order_acquire)) return;
  abort_status_ = status.ok() ? absl::CancelledError("fabric aborted") : status;
  aborted_.store(true, std::memory_order_release);
  for (auto& l : lps_) l->parker.Unpark();
}

Nanos Fabric::bound(LpId lp) const {
  MutexLock lock(&mu_);
  return lps_[static_cast<size_t>(lp)]->bound;
}

std::vector<LpWait> Fabric::Waits() const {
  MutexLock lock(&mu_);
  std::vector<LpWait> out;
  out.reserve(lps_.size());
  for (size_t i = 0; i < lps_.size(); ++i) {
    const Lp& l = *lps_[i];
    LpWait w;
    w.lp = static_cast<LpId>(i);
    w.state = l.state;
    w.site = l.site;
    w.bound = l.bound;
    if (l.state == LpWait::State::kAwaitChannel && l.awaited_channel >= 0) {
      w.peer = channels_[static_cast<size_t>(l.awaited_channel)].src;
    }
    out.push_back(w);
  }
  return out;
}

uint64_t Fabric::pending() const {
  MutexLock lock(&mu_);
  return pending_.size();
}

// ---- Scope ----

absl::StatusOr<uint64_t> Fabric::Scope::Post(LpId lp, ChannelId channel, const FabricMessage& m,
                                             std::unique_ptr<FabricPayload> payload) {
  fabric_.mu_.AssertHeld();
  return fabric_.PostLocked(lp, channel, m, std::move(payload));
}

void Fabric::Scope::Signal(GateId gate, Nanos t) {
  fabric_.mu_.AssertHeld();
  fabric_.SignalLocked(gate, t);
}

void Fabric::Scope::Abort(const absl::Status& status) {
  fabric_.mu_.AssertHeld();
  fabric_.AbortLocked(status);
}

void Fabric::Scope::Awaiting(LpId lp, ChannelId channel, const WaitSite& site) {
  fabric_.mu_.AssertHeld();
  Lp& l = *fabric_.lps_[static_cast<size_t>(lp)];
  l.site = site;
  l.awaited_channel = channel;
  l.state = LpWait::State::kAwaitChannel;  // excluded either way: the tree is unchanged
}

void Fabric::Scope::SetGateSite(GateId gate, const WaitSite& site) {
  fabric_.mu_.AssertHeld();
  Gate& g = fabric_.gates_[static_cast<size_t>(gate)];
  g.site = site;
  g.has_site = true;
  if (g.waiter >= 0) fabric_.lps_[static_cast<size_t>(g.waiter)]->site = site;
}

void Fabric::Scope::Idle(LpId lp) {
  fabric_.mu_.AssertHeld();
  Lp& l = *fabric_.lps_[static_cast<size_t>(lp)];
  l.site = WaitSite{.op = "idle"};
  l.awaited_channel = -1;
  l.state = LpWait::State::kParked;
}

}  // namespace rp
