// Internals of rp::Fabric shared by its two source files (runtime/fabric.cc: LPs, commits,
// posts, awaits; runtime/fabric_sync.cc: work hand-off, gates, rendezvous, abort, scopes).
// Not part of the interface.
#pragma once

#include <vector>

#include "runtime/fabric.h"
#include "runtime/thread.h"

namespace rp {

// One LP. Its fields are guarded by the fabric's mutex (annotated through Fabric::mu_ uses).
struct Fabric::Lp {
  Nanos bound{0};
  uint64_t next_seq = 0;
  uint64_t tie = 0;
  LpWait::State state = LpWait::State::kRunning;
  ChannelId awaited_channel = -1;
  int work = 0;
  WaitSite site;
  Parker parker;  // its thread sleeps here while it waits (WaitWhile)
};

// Unlocks the fabric, then wakes the LPs resumed meanwhile: a woken thread does not find the lock
// still held by its waker.
class ABSL_SCOPED_LOCKABLE Fabric::Unlocker {
 public:
  explicit Unlocker(Fabric* f) ABSL_EXCLUSIVE_LOCK_FUNCTION(f->mu_) : f_(f) {
    f_->mu_.Lock();
  }
  ~Unlocker() ABSL_UNLOCK_FUNCTION() { f_->UnlockAndWake(); }
  Unlocker(const Unlocker&) = delete;
  Unlocker& operator=(const Unlocker&) = delete;

 private:
  Fabric* const f_;
};

}  // namespace rp
