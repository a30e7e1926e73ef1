#include "runtime/virtual_clock.h"

namespace rp {

void VirtualClock::AdvanceLocked(Nanos t) {
  if (t.count() > now_.load(std::memory_order_relaxed)) {
    now_.store(t.count(), std::memory_order_release);  // pairs with the acquire in Now()
  }
  bool released_any = false;
  while (!waiters_.empty() && waiters_.begin()->first <= t.count()) {
    Waiter* w = waiters_.begin()->second;
    waiters_.erase(waiters_.begin());
    w->released = true;
    --blocked_;  // the released waiter runs from now on
    released_any = true;
  }
  if (released_any) cv_.SignalAll();
}

void VirtualClock::MaybeAdvanceLocked() {
  if (blocked_ >= participants_ && !waiters_.empty()) {
    AdvanceLocked(Nanos(waiters_.begin()->first));
  }
}

Nanos VirtualClock::WaitUntil(Nanos deadline) {
  MutexLock lock(&mu_);
  if (shut_down_ || deadline.count() <= now_.load(std::memory_order_relaxed)) return Nanos(0);
  Waiter w{deadline};
  waiters_.insert({deadline.count(), &w});
  ++blocked_;
  MaybeAdvanceLocked();
  while (!w.released && !shut_down_) cv_.Wait(&mu_);
  if (!w.released) {  // shut down while waiting
    waiters_.erase({deadline.count(), &w});
    --blocked_;
    return Nanos(0);
  }
  return Nanos(now_.load(std::memory_order_relaxed)) - deadline;
}

void VirtualClock::BeginExternalWait() {
  MutexLock lock(&mu_);
  ++blocked_;
  MaybeAdvanceLocked();
}

void VirtualClock::EndExternalWait() {
  MutexLock lock(&mu_);
  --blocked_;
}

void VirtualClock::AdvanceTo(Nanos t) {
  MutexLock lock(&mu_);
  AdvanceLocked(t);
}

void VirtualClock::Register() {
  MutexLock lock(&mu_);
  ++participants_;
}

void VirtualClock::Unregister() {
  MutexLock lock(&mu_);
  --participants_;
  MaybeAdvanceLocked();
}

int VirtualClock::blocked_participants() const {
  MutexLock lock(&mu_);
  return blocked_;
}

uint64_t VirtualClock::ExternalWaiter::PrepareWait() {
  MutexLock lock(&clock_->mu_);
  return wakes_;
}

void VirtualClock::ExternalWaiter::BeginWait(uint64_t ticket) {
  MutexLock lock(&clock_->mu_);
  if (blocked_ || wakes_ != ticket) return;  // woken since PrepareWait: the consumer runs on
  blocked_ = true;
  ++clock_->blocked_;
  clock_->MaybeAdvanceLocked();
}

void VirtualClock::ExternalWaiter::EndWait() {
  MutexLock lock(&clock_->mu_);
  if (!blocked_) return;
  blocked_ = false;
  --clock_->blocked_;
}

void VirtualClock::ExternalWaiter::Wake() {
  MutexLock lock(&clock_->mu_);
  ++wakes_;
  if (!blocked_) return;
  blocked_ = false;
  --clock_->blocked_;  // runnable from now on: time waits for it
}

void VirtualClock::Shutdown() {
  MutexLock lock(&mu_);
  shut_down_ = true;
  cv_.SignalAll();
}

bool VirtualClock::is_shut_down() const {
  MutexLock lock(&mu_);
  return shut_down_;
}

}  // namespace rp
