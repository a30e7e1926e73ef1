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
//   Busy host (adapt_to_load, Linux): after a wait, once per load_window, one waiter samples the
//     host's CPU time (rp::CpuLoad: the share of all CPUs other processes used, and this
//     process's share). Precise waiting costs CPU — a 10 µs slack means more timer interrupts, a
//     spin burns its lead; about twice a plain sleep's CPU per wait (measured, 64 devices × 1 ms)
//     — and on a host with none to spare that CPU is taken from the threads being woken: with one
//     external busy process on 2 cores, precise mode's p99 was 2-7× plain sleep_until's; with 64
//     devices × 100 µs waits (more wake-ups than 2 cores serve one by one) its median was 5×
//     worse. The rules (rp::WaitModeController) switch waits to crowded mode while the host is
//     busy or precise waits keep ending late, and back once there is room again.
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
#include "runtime/cpu_load.h"
#include "runtime/time.h"

namespace rp {

// The smallest time scale a real clock takes. Modeled time is wall time ÷ scale in int64 ns
// (saturating at kMaxModeledNs = 2^62, runtime/timing.h), so a scale s overflows it after
// 2^62 × s ns of wall time: 5.3 days at 1e-4, but 4.6 s at 1e-9 — `run --time_scale=1e-12` reported a
// measured step of 4611686018427.388 ms (2^62 ns, the saturation) with 0 lateness and 0 overruns
// (Now() wrapped negative). No host keeps a scale that small anyway (1e-4 leaves 100 ns of wall
// time to a 1 ms op).
inline constexpr double kMinRealTimeScale = 1e-4;

struct RealClockOptions {
  // Wall time per unit of modeled time; in [kMinRealTimeScale, +inf). 1 = real time, 0.1 = ten
  // times faster.
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
  // Load adaptation (see the header comment). No effect off Linux.
  bool adapt_to_load = true;
  // Share of all CPUs' time used by other processes above which waits run crowded, in (0, 1].
  double external_load_threshold = 0.25;
  // Share of all CPUs' time busy (others + this process) above which waits run crowded, (0, 1].
  double busy_threshold = 0.85;
  // How often the load is sampled, > 0. Each decision uses the shares over the last two windows:
  // the kernel counts CPU time in ticks of 10 ms (USER_HZ 100), and 200 ms on 2 CPUs resolves a
  // share to 1/40.
  Nanos load_window = FromMillis(100);
};

// What one load window saw (RealClock's load adaptation).
struct WaitWindow {
  LoadShares load;            // CPU shares over the window
  uint64_t precise_waits = 0;  // waits that ran precise
  uint64_t precise_late = 0;   // of which ended more than kPreciseLateNs late
};

// The load adaptation's state machine (see the header comment), separate from the clock so it
// can be driven with made-up windows. Not thread-safe (the clock's sampler owns it).
//   precise -> crowded: external > external_load_threshold, or external + own > busy_threshold,
//     or (at least kMinPreciseWaits precise waits and) more than kMaxLateFraction (25 %) of them
//     late:
//     precise waiting is failing whatever the CPU figures say (e.g. 64 devices × 100 µs: timer
//     coalescing is all that keeps up). A lateness switch holds crowded mode for `hold` windows,
//     doubling (up to kMaxHoldWindows) at each lateness switch and reset by a good precise window,
//     so a host where precise waiting keeps failing spends ever less time trying it.
//   crowded -> precise: hold over, external < external_load_threshold / 2 and external + 2 × own
//     < 0.8 × busy_threshold (crowded waits cost about half a precise one's CPU).
class WaitModeController {
 public:
  static constexpr int64_t kPreciseLateNs = 250'000;
  // A quarter: precise waiting that fails this often is failing for most waits (64 devices ×
  // 100 µs: median 300 µs late); an emulation on 2 cores sees ~5 % at its step boundaries, where
  // every device wakes at once whatever the method.
  static constexpr double kMaxLateFraction = 0.25;
  static constexpr uint64_t kMinPreciseWaits = 64;
  static constexpr int kMaxHoldWindows = 64;

  explicit WaitModeController(const RealClockOptions& options) : options_(options) {}
  // Feeds one window; returns whether the next window runs crowded.
  bool Next(const WaitWindow& w);
  bool crowded() const { return crowded_; }
  int hold() const { return hold_; }

 private:
  const RealClockOptions options_;
  bool crowded_ = false;
  int hold_ = 0;     // crowded windows left before the exit rule is checked
  int backoff_ = 1;  // hold of the next lateness switch
};

class RealClock final : public Clock {
 public:
  // Validates `options` (time_scale > 0 and finite, max_lead >= 0, lead_quantile in (0, 1),
  // max_spinners >= 0, crowd_threshold >= 0, external_load_threshold and busy_threshold in
  // (0, 1], load_window > 0).
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
  // Other processes' and this process's shares of the CPUs in the last completed load window,
  // or -1 before the first (diagnostics).
  double external_load() const {
    const int p = external_load_permille_.load(std::memory_order_relaxed);
    return p < 0 ? -1.0 : p / 1000.0;
  }
  double own_load() const {
    const int p = own_load_permille_.load(std::memory_order_relaxed);
    return p < 0 ? -1.0 : p / 1000.0;
  }
  // True while waits run crowded because the host is busy.
  bool load_adapted() const { return load_adapted_.load(std::memory_order_relaxed); }
  // Waits so far that slept (deadline not yet passed), and how many of them ran crowded (more
  // than crowd_threshold waiters, or a busy host). Approximate while waits run.
  uint64_t waits() const { return waits_.load(std::memory_order_relaxed); }
  uint64_t crowded_waits() const { return crowded_waits_.load(std::memory_order_relaxed); }

  // Sets the calling thread's timer slack (Linux; no-op elsewhere); Nanos(0) restores the
  // thread's default (50 µs). Makes the system call only when the thread's slack changes.
  static void SetThreadTimerSlack(Nanos slack);

 private:
  explicit RealClock(const RealClockOptions& options);
  Nanos WaitUntilImpl(Nanos deadline);
  // Samples the host's load if a window has passed (one thread at a time; see the header).
  void MaybeSampleLoad();
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
  // Load adaptation. The thread that wins sampling_ (exchange, acquire) owns the samples and
  // mode_ until it releases the flag (store, release); the mode and the load figures are
  // relaxed hints read by every waiter.
  alignas(64) std::atomic<int64_t> next_sample_ns_{0};
  std::atomic<bool> sampling_{false};
  LoadSample older_sample_;  // two windows ago
  LoadSample last_sample_;   // one window ago
  uint64_t samples_ = 0;
  WaitModeController mode_;
  // Precise waits of the current window, and how many ended late (relaxed counters, swapped to
  // zero by the sampler).
  alignas(64) std::atomic<uint64_t> window_precise_{0};
  std::atomic<uint64_t> window_late_{0};
  std::atomic<uint64_t> waits_{0};
  std::atomic<uint64_t> crowded_waits_{0};
  std::atomic<bool> load_adapted_{false};
  std::atomic<int> external_load_permille_{-1};
  std::atomic<int> own_load_permille_{-1};
};

}  // namespace rp
