#include "runtime/real_clock.h"

#include <sched.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <cmath>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace rp {
namespace {

using SteadyClock = std::chrono::steady_clock;

int64_t SteadyNowNs() {
  return std::chrono::duration_cast<Nanos>(SteadyClock::now().time_since_epoch()).count();
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

absl::StatusOr<std::unique_ptr<RealClock>> RealClock::Create(const RealClockOptions& options) {
  if (!(options.time_scale > 0) || !std::isfinite(options.time_scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("RealClockOptions.time_scale must be > 0 and finite, got ",
                     options.time_scale));
  }
  if (options.spin_window < Nanos(0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RealClockOptions.spin_window must be >= 0, got ", options.spin_window.count(), " ns"));
  }
  if (options.crowd_threshold < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RealClockOptions.crowd_threshold must be >= 0, got ", options.crowd_threshold));
  }
  if (options.max_spinners < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RealClockOptions.max_spinners must be >= 0, got ", options.max_spinners));
  }
  return std::unique_ptr<RealClock>(new RealClock(options));
}

RealClock::RealClock(const RealClockOptions& options)
    : options_(options), epoch_ns_(SteadyNowNs()) {}

void RealClock::ResetEpoch() { epoch_ns_.store(SteadyNowNs(), std::memory_order_relaxed); }

Nanos RealClock::Now() const {
  const int64_t wall = SteadyNowNs() - epoch_ns_.load(std::memory_order_relaxed);
  return Nanos(static_cast<int64_t>(std::llround(static_cast<double>(wall) / options_.time_scale)));
}

SteadyClock::time_point RealClock::WallOf(Nanos t) const {
  const int64_t wall = epoch_ns_.load(std::memory_order_relaxed) +
                       static_cast<int64_t>(std::llround(static_cast<double>(t.count()) *
                                                         options_.time_scale));
  return SteadyClock::time_point(std::chrono::duration_cast<SteadyClock::duration>(Nanos(wall)));
}

void RealClock::UsePreciseTimerSlack(bool precise) {
#ifdef __linux__
  thread_local int current = -1;  // -1 unknown, 0 default, 1 precise
  if (current != static_cast<int>(precise)) {
    prctl(PR_SET_TIMERSLACK, precise ? 1UL : 0UL, 0UL, 0UL, 0UL);  // 0: the thread's default
    current = static_cast<int>(precise);
  }
#endif
}

void RealClock::Shutdown() { shut_down_.store(true, std::memory_order_release); }

Nanos RealClock::WaitUntil(Nanos deadline) {
  const SteadyClock::time_point target = WallOf(deadline);
  SteadyClock::time_point now = SteadyClock::now();
  if (now >= target || is_shut_down()) return Nanos(0);
  // Counts this thread among the waiters for the whole wait.
  struct WaiterCount {
    explicit WaiterCount(std::atomic<int>* c) : c_(c), n_(c->fetch_add(1, std::memory_order_relaxed) + 1) {}
    ~WaiterCount() { c_->fetch_sub(1, std::memory_order_relaxed); }
    std::atomic<int>* c_;
    int n_;
  } count(&waiters_);
  if (options_.crowd_threshold > 0 && count.n_ > options_.crowd_threshold) {
    if (options_.precise_timer_slack) UsePreciseTimerSlack(false);
    while (now < target) {
      std::this_thread::sleep_until(std::min(target, now + kMaxSleepSlice));
      if (is_shut_down()) return Nanos(0);
      now = SteadyClock::now();
    }
    const double late = static_cast<double>(std::chrono::duration_cast<Nanos>(now - target).count());
    return Nanos(static_cast<int64_t>(std::llround(late / options_.time_scale)));
  }
  if (options_.precise_timer_slack) UsePreciseTimerSlack(true);

  // Phase 1: sleep until the spin window, in slices so Shutdown() is noticed.
  const SteadyClock::time_point spin_from =
      target - std::chrono::duration_cast<SteadyClock::duration>(options_.spin_window);
  while (now < spin_from) {
    std::this_thread::sleep_until(std::min(spin_from, now + kMaxSleepSlice));
    if (is_shut_down()) return Nanos(0);
    now = SteadyClock::now();
  }
  // Phase 2: spin for the last stretch if a spin slot is free, else sleep to the deadline.
  if (now < target) {
    int spinners = spinners_.load(std::memory_order_relaxed);
    bool got_slot = false;
    while (spinners < options_.max_spinners) {
      if (spinners_.compare_exchange_weak(spinners, spinners + 1, std::memory_order_relaxed)) {
        got_slot = true;
        break;
      }
    }
    if (got_slot) {
      int polls = 0;
      while ((now = SteadyClock::now()) < target) {
        CpuRelax();
        // Let a freshly woken peer have the core now and then; a spinner never monopolises it.
        if (++polls % 64 == 0) sched_yield();
      }
      spinners_.fetch_sub(1, std::memory_order_relaxed);
    } else {
      while (now < target) {
        std::this_thread::sleep_until(std::min(target, now + kMaxSleepSlice));
        if (is_shut_down()) return Nanos(0);
        now = SteadyClock::now();
      }
    }
  }
  const double late_wall = static_cast<double>(std::chrono::duration_cast<Nanos>(now - target).count());
  return Nanos(static_cast<int64_t>(std::llround(late_wall / options_.time_scale)));
}

}  // namespace rp
