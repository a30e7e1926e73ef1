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
};

}  // namespace rp
