// rp::RealClock: modeled time mapped onto the host's steady_clock, with precise deadline waits.
//
// Mapping: wall(t) = epoch + t × time_scale, so time_scale 0.1 runs the emulated cluster ten times
// faster than real time (a 50 ms modeled forward pass occupies 5 ms of wall time).
//
// WaitUntil(deadline) is built for a small, oversubscribed host (2 cores, up to 1024 device
// threads), where plain sleep_until wakes ~60-90 µs late (50 µs default timer slack + wake-up),
// a sleep with 1 ns slack still wakes 15-50 µs late (wake-up cost of this VM), and busy-spinning
// collapses once more threads spin than there are cores. Two regimes, chosen per call from the
// number of threads inside WaitUntil at that moment:
//
//   Precise (at most crowd_threshold waiters):
//     1. The thread's timer slack is set to timer_slack (prctl PR_SET_TIMERSLACK; a system call
//        only when it changes).
//     2. It sleeps (one absolute futex wait on CLOCK_MONOTONIC, which Shutdown() interrupts)
//        until `lead` before the deadline. `lead` is learned per clock: a running estimate of the
//        lead_quantile of how late such sleeps wake (stochastic quantile tracking, clamped to
//        [0, max_lead]). So a typical waiter wakes a little before its deadline. The sleep uses a
//        10 µs timer slack (not 1 ns): nearby timers then share an interrupt, which matters at
//        tens of thousands of wake-ups per second on 2 virtual cores; the lead absorbs it.
//     3. If it woke before the deadline it spins the rest (pause, sched_yield every few µs) —
//        but only if it wins one of max_spinners spin slots (2 by default: at most
//        two threads spin at once, whatever the number of devices); otherwise it sleeps again,
//        straight to the deadline.
//   Crowded (more than crowd_threshold waiters): one sleep straight to the deadline with the
//     thread's default 50 µs timer slack. The kernel then coalesces the timers of nearby
//     deadlines into one interrupt; with ~1000 sleepers on 2 cores, 1 ns slack or a second
//     wake-up per wait costs more CPU than there is (measured: p99 of 40-270 ms with 1 ns slack
//     vs < 1 ms with default slack, 1024 threads on 10 ms periods; see docs/runtime.md).
//
// Guarantees: WaitUntil never returns before wall(deadline) unless the clock is shut down (then
// it returns 0 at once, also for waits already sleeping: Shutdown wakes them). Lateness is
// measured after the wait and returned in modeled time: (now − wall(deadline)) / time_scale. A
// deadline already passed at the call returns 0 (that delay is the caller's overrun, not wait
// lateness: see rp::Device).
//
// Thread safety: all methods may be called from any thread concurrently, except ResetEpoch (call
// it before any thread uses the clock). The learned lead and the spinner/waiter counts are
// relaxed atomics (statistics and admission only; they order no other memory). Shutdown's flag is
// stored with release and read with acquire.
//
// Example:
//   RP_ASSIGN_OR_RETURN(auto clock, rp::RealClock::Create({.time_scale = 0.1}));
//   rp::Nanos late = clock->WaitUntil(rp::FromMillis(50));  // returns ~5 ms of wall time later
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "runtime/clock.h"
#include "runtime/time.h"

namespace rp {

struct RealClockOptions {
  // Wall time per unit of modeled time; > 0 and finite. 1 = real time, 0.1 = ten times faster.
  double time_scale = 1.0;
  // Upper bound of the learned lead (how early a precise waiter wakes to spin). >= 0; 0 disables
  // anticipation (a waiter then sleeps straight to its deadline, with timer_slack).
  Nanos max_lead = FromMicros(50);
  // Which quantile of the sleep's wake-up delay the lead tracks, in (0, 1). Higher: more waits
  // end by spinning (more precise, more CPU). At 0.4, about 60 % of the waits spin.
  double lead_quantile = 0.4;
  // Threads allowed to spin at once (per clock). 0 disables spinning. Measured on 2 cores with 64
  // devices on 1 ms periods: 1 spinner cannot serve ~40k spins/s (the losers sleep a second
  // time: median 9-23 µs, p99 above plain sleep_until's); 2 give a 5 µs median at ~1 µs of CPU per
  // wait. Spins are short (at most max_lead) and yield the core every few µs.
  int max_spinners = 2;
  // Timer slack (PR_SET_TIMERSLACK, Linux) of precise waiters' sleeps: the kernel may fire a
  // sleep's timer up to this late, to coalesce it with other timers. The learned lead absorbs it.
  // 0 leaves the thread's slack alone (default 50 µs). >= 0.
  Nanos timer_slack = FromMicros(10);
  // Crowded mode above this many threads inside WaitUntil at once (see the header comment).
  // 0 disables crowded mode.
  int crowd_threshold = 128;
};

class RealClock final : public Clock {
 public:
  // Validates `options` (time_scale > 0 and finite, max_lead >= 0, lead_quantile in (0, 1),
  // max_spinners >= 0, crowd_threshold >= 0).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<RealClock>> Create(
      const RealClockOptions& options);

  Nanos Now() const override;
  // See the header comment. Any thread.
  Nanos WaitUntil(Nanos deadline) override;
  // Releases every current and future WaitUntil at once (sleepers are woken, spinners stop).
  void Shutdown() override;
  bool is_shut_down() const override {
    return shut_down_.load(std::memory_order_acquire) != 0;  // pairs with release in Shutdown
  }

  // Restarts modeled time at 0 now. Not thread-safe: call before devices start.
  void ResetEpoch();
  double time_scale() const { return options_.time_scale; }
  // The steady_clock instant of modeled time `t`.
  std::chrono::steady_clock::time_point WallOf(Nanos t) const;
  // The currently learned lead, in wall time (diagnostics and benchmarks).
  Nanos learned_lead() const { return Nanos(lead_ns_.load(std::memory_order_relaxed)); }

  // Sets the calling thread's timer slack (Linux; no-op elsewhere); Nanos(0) restores the
  // thread's default (50 µs). Makes the system call only when the thread's slack changes.
  static void SetThreadTimerSlack(Nanos slack);

 private:
  explicit RealClock(const RealClockOptions& options);
  // Sleeps until steady_clock time `until_ns` or Shutdown(). Returns false if shut down.
  bool SleepUntil(int64_t until_ns) const;
  // Feeds one observed wake-up delay of a precise sleep into the learned lead.
  void LearnLead(int64_t delay_ns);
  Nanos ToModeledLateness(int64_t late_wall_ns) const;

  RealClockOptions options_;
  std::atomic<int64_t> epoch_ns_;  // steady_clock time since its epoch of modeled time 0
  // Futex word: 0 running, 1 shut down.
  alignas(64) std::atomic<uint32_t> shut_down_{0};
  alignas(64) std::atomic<int64_t> lead_ns_;
  alignas(64) std::atomic<int> spinners_{0};
  alignas(64) std::atomic<int> waiters_{0};
};

}  // namespace rp
