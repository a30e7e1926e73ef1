// rp::RealClock: modeled time mapped onto the host's steady_clock, with precise deadline waits.
//
// Mapping: wall(t) = epoch + t × time_scale, so time_scale 0.1 runs the emulated cluster ten times
// faster than real time (a 50 ms modeled forward pass occupies 5 ms of wall time).
//
// WaitUntil(deadline) is a hybrid built for a small, oversubscribed host (2 cores, up to 1024
// sleeping device threads), where plain sleep_until wakes ~90 µs late (50 µs default timer slack +
// wake-up) and busy-spinning collapses once more threads spin than there are cores:
//   1. Each waiting thread sets its timer slack to 1 ns (prctl PR_SET_TIMERSLACK, once per thread),
//      so the kernel does not batch its wake-up 50 µs later.
//   2. It sleeps until `spin_window` before the wall deadline (in slices of at most
//      kMaxSleepSlice, so Shutdown() releases it quickly).
//   3. For the last stretch it spins only if it wins one of `max_spinners` spin slots (a global
//      atomic counter); otherwise it sleeps straight to the deadline. Spinning is therefore bounded
//      to a core's worth of threads no matter how many devices wait, and a spinner yields the core
//      (sched_yield) while it spins so a woken peer is never starved.
//   4. Crowded mode (more than crowd_threshold threads waiting at once): one sleep straight to
//      the deadline with the default timer slack, no spin phase (see RealClockOptions).
// Lateness is measured after the wait and returned in modeled time: (now − wall(deadline)) /
// time_scale. A deadline already passed at the call returns 0 (that delay is the caller's
// overrun, not wait lateness: see rp::Device).
//
// Thread safety: all methods may be called from any thread concurrently, except ResetEpoch (call
// it before any thread uses the clock).
//
// Example:
//   RP_ASSIGN_OR_RETURN(auto clock, rp::RealClock::Create({.time_scale = 0.1}));
//   rp::Nanos late = clock->WaitUntil(rp::FromMillis(50));  // returns ~5 ms of wall time later
#pragma once

#include <atomic>
#include <chrono>
#include <memory>

#include "absl/status/statusor.h"
#include "runtime/clock.h"
#include "runtime/time.h"

namespace rp {

struct RealClockOptions {
  // Wall time per unit of modeled time; > 0. 1 = real time, 0.1 = ten times faster.
  double time_scale = 1.0;
  // Wall time before the deadline at which a waiter stops sleeping and tries to spin. >= 0.
  Nanos spin_window = FromMicros(30);
  // Threads allowed to spin at once (process-wide per clock). 0 disables spinning.
  int max_spinners = 1;
  // Set PR_SET_TIMERSLACK to 1 ns on each waiting thread (Linux). Disable only to measure.
  bool precise_timer_slack = true;
  // Crowded mode: when more than this many threads are inside WaitUntil at once, a waiter sleeps
  // once, straight to its deadline, with the default 50 µs timer slack (the kernel then batches
  // wake-ups; a second wake-up per wait or 1 ns slack costs more CPU than 2 cores have for
  // ~1000 sleepers). 0 disables crowded mode.
  int crowd_threshold = 128;
};

class RealClock final : public Clock {
 public:
  static constexpr Nanos kMaxSleepSlice = std::chrono::milliseconds(20);

  // Validates `options` (time_scale > 0 and finite, spin_window >= 0, max_spinners >= 0).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<RealClock>> Create(
      const RealClockOptions& options);

  Nanos Now() const override;
  Nanos WaitUntil(Nanos deadline) override;
  void Shutdown() override;
  bool is_shut_down() const override { return shut_down_.load(std::memory_order_acquire); }

  // Restarts modeled time at 0 now. Not thread-safe: call before devices start.
  void ResetEpoch();
  double time_scale() const { return options_.time_scale; }
  // The steady_clock instant of modeled time `t`.
  std::chrono::steady_clock::time_point WallOf(Nanos t) const;

  // Sets the calling thread's timer slack to 1 ns, or back to the default 50 µs (Linux; no-op
  // elsewhere). Makes the system call only when the thread's slack changes.
  static void UsePreciseTimerSlack(bool precise = true);

 private:
  explicit RealClock(const RealClockOptions& options);

  RealClockOptions options_;
  std::atomic<int64_t> epoch_ns_;  // steady_clock time since its epoch of modeled time 0
  std::atomic<bool> shut_down_{false};
  alignas(64) std::atomic<int> spinners_{0};
  alignas(64) std::atomic<int> waiters_{0};
};

}  // namespace rp
