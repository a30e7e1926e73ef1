// rp::Clock: the time service. The only place that touches std::chrono wall clocks.
//
// A Clock maps modeled time (rp::Nanos since the run's epoch) to the host's time. Devices, links and
// collectives take a Clock, so the same code runs on a real scaled clock (ops really wait, threads
// really overlap) or on a virtual one (time advances only by events; deterministic).
//
// Thread safety: every method may be called from any thread concurrently.
#pragma once

#include "runtime/time.h"

namespace rp {

class Clock {
 public:
  virtual ~Clock() = default;

  // Current modeled time.
  virtual Nanos Now() const = 0;

  // Blocks the calling thread until modeled time `deadline` has been reached (returns at once if it
  // already has). Returns the lateness: modeled time at return minus `deadline` (>= 0; 0 when it
  // returned at once).
  virtual Nanos WaitUntil(Nanos deadline) = 0;

  // --- Optional hooks (no-ops by default; added for rp::VirtualClock and cancellation) ---

  // Code that blocks on something other than this clock (a message, a comm-stream completion)
  // brackets that wait with BeginExternalWait()/EndExternalWait() (or rp::ScopedExternalWait), so
  // a clock whose time advances only when every participant is blocked (rp::VirtualClock) counts
  // the thread as blocked. No-ops on a real clock.
  virtual void BeginExternalWait() {}
  virtual void EndExternalWait() {}

  // Releases every current and future WaitUntil at once (they return 0 without waiting). Used when
  // a run is cancelled so no thread stays asleep on a long modeled op. Final: a run that needs
  // time again builds a new clock.
  virtual void Shutdown() {}
  virtual bool is_shut_down() const { return false; }

  // True for clocks whose time advances only by events (rp::VirtualClock): real work takes no
  // modeled time there, so overruns are not counted.
  virtual bool is_virtual() const { return false; }
};

// RAII for Clock::BeginExternalWait/EndExternalWait. `clock` must outlive the scope.
class ScopedExternalWait {
 public:
  explicit ScopedExternalWait(Clock* clock) : clock_(clock) { clock_->BeginExternalWait(); }
  ~ScopedExternalWait() { clock_->EndExternalWait(); }
  ScopedExternalWait(const ScopedExternalWait&) = delete;
  ScopedExternalWait& operator=(const ScopedExternalWait&) = delete;

 private:
  Clock* const clock_;
};

}  // namespace rp
