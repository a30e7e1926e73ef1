#include "runtime/real_clock.h"

#include <sched.h>
#include <time.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace rp {
namespace {

using SteadyClock = std::chrono::steady_clock;

// steady_clock is CLOCK_MONOTONIC in libstdc++ on Linux; the futex timeout below relies on it.
int64_t SteadyNowNs() {
  return std::chrono::duration_cast<Nanos>(SteadyClock::now().time_since_epoch()).count();
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Initial learned lead, before any sleep has been observed.
constexpr int64_t kInitialLeadNs = 20'000;
// Step of the quantile tracker: the lead moves by up to this much per observed sleep.
constexpr double kLeadStepNs = 2'000;
// A spinner calls sched_yield every this many polls (~2-5 µs), so a thread woken on its core is
// never kept waiting behind it for long.
constexpr int kPollsPerYield = 64;

}  // namespace

absl::StatusOr<std::unique_ptr<RealClock>> RealClock::Create(const RealClockOptions& options) {
  if (!(options.time_scale >= kMinRealTimeScale) || !std::isfinite(options.time_scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("RealClockOptions.time_scale must be finite and >= ", kMinRealTimeScale,
                     ", got ", options.time_scale));
  }
  if (options.max_lead < Nanos(0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RealClockOptions.max_lead must be >= 0, got ", options.max_lead.count(), " ns"));
  }
  if (!(options.lead_quantile > 0 && options.lead_quantile < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RealClockOptions.lead_quantile must be in (0, 1), got ", options.lead_quantile));
  }
  if (options.timer_slack < Nanos(0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RealClockOptions.timer_slack must be >= 0, got ", options.timer_slack.count(), " ns"));
  }
  if (options.crowd_threshold < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RealClockOptions.crowd_threshold must be >= 0, got ", options.crowd_threshold));
  }
  if (!(options.external_load_threshold > 0 && options.external_load_threshold <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("RealClockOptions.external_load_threshold must be in (0, 1], got ",
                     options.external_load_threshold));
  }
  if (!(options.busy_threshold > 0 && options.busy_threshold <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RealClockOptions.busy_threshold must be in (0, 1], got ", options.busy_threshold));
  }
  if (options.load_window <= Nanos(0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RealClockOptions.load_window must be > 0, got ", options.load_window.count(), " ns"));
  }
  if (options.max_spinners < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RealClockOptions.max_spinners must be >= 0, got ", options.max_spinners));
  }
  return std::unique_ptr<RealClock>(new RealClock(options));
}

RealClock::RealClock(const RealClockOptions& options)
    : options_(options),
      epoch_ns_(SteadyNowNs()),
      lead_ns_(std::min<int64_t>(kInitialLeadNs, options.max_lead.count())),
      mode_(options) {}

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

Nanos RealClock::ToModeledLateness(int64_t late_wall_ns) const {
  if (late_wall_ns <= 0) return Nanos(0);
  return Nanos(static_cast<int64_t>(
      std::llround(static_cast<double>(late_wall_ns) / options_.time_scale)));
}

void RealClock::SetThreadTimerSlack(Nanos slack) {
#ifdef __linux__
  thread_local int64_t current = -1;  // -1: unknown
  if (current != slack.count()) {
    // 0 restores the thread's default slack.
    prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(slack.count()), 0UL, 0UL, 0UL);
    current = slack.count();
  }
#else
  (void)slack;
#endif
}

void RealClock::Shutdown() {
  shut_down_.store(1, std::memory_order_release);  // pairs with the acquire in is_shut_down()
#ifdef __linux__
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&shut_down_), FUTEX_WAKE_PRIVATE, INT_MAX,
          nullptr, nullptr, 0);
#endif
}

bool RealClock::SleepUntil(int64_t until_ns) const {
  while (!is_shut_down()) {
    if (SteadyNowNs() >= until_ns) return true;
#ifdef __linux__
    // One absolute CLOCK_MONOTONIC wait on the shutdown word: returns at the deadline (subject to
    // the thread's timer slack), on Shutdown's wake, or at once if the word is already 1.
    const timespec ts{static_cast<time_t>(until_ns / 1'000'000'000),
                      static_cast<long>(until_ns % 1'000'000'000)};
    syscall(SYS_futex, reinterpret_cast<const uint32_t*>(&shut_down_),
            FUTEX_WAIT_BITSET_PRIVATE, 0u, &ts, nullptr, FUTEX_BITSET_MATCH_ANY);
#else
    const int64_t slice = std::min<int64_t>(until_ns - SteadyNowNs(), 20'000'000);
    std::this_thread::sleep_for(Nanos(std::max<int64_t>(slice, 0)));
#endif
  }
  return false;
}

void RealClock::LearnLead(int64_t delay_ns) {
  // Stochastic quantile tracking: up by step·q when the delay exceeds the estimate, down by
  // step·(1 − q) otherwise; the estimate settles where P(delay > lead) = 1 − q. Concurrent updates
  // may lose one another's step, which only slows the tracking.
  const int64_t lead = lead_ns_.load(std::memory_order_relaxed);
  const double q = options_.lead_quantile;
  const int64_t next =
      delay_ns > lead ? lead + static_cast<int64_t>(kLeadStepNs * q + 0.5)
                      : lead - static_cast<int64_t>(kLeadStepNs * (1 - q) + 0.5);
  lead_ns_.store(std::clamp<int64_t>(next, 0, options_.max_lead.count()),
                 std::memory_order_relaxed);
}

Nanos RealClock::WaitUntil(Nanos deadline) {
  const Nanos late = WaitUntilImpl(deadline);
  // After the wait, so the sampling (~10 µs, once per window) never adds to a wait's lateness.
  MaybeSampleLoad();
  return late;
}

bool WaitModeController::Next(const WaitWindow& w) {
  const LoadShares& load = w.load;
  if (!crowded_) {
    if (load.external > options_.external_load_threshold ||
        load.external + load.own > options_.busy_threshold) {
      crowded_ = true;
      hold_ = 0;
    } else if (w.precise_waits >= kMinPreciseWaits &&
               static_cast<double>(w.precise_late) >
                   kMaxLateFraction * static_cast<double>(w.precise_waits)) {
      crowded_ = true;
      hold_ = backoff_;
      backoff_ = std::min(2 * backoff_, kMaxHoldWindows);
    } else if (w.precise_waits >= kMinPreciseWaits) {
      backoff_ = 1;  // precise waiting works here
    }
    return crowded_;
  }
  if (hold_ > 0) {
    --hold_;
    return crowded_;
  }
  const bool room = load.external < options_.external_load_threshold / 2 &&
                    load.external + 2 * load.own < 0.8 * options_.busy_threshold;
  crowded_ = !room;
  return crowded_;
}

void RealClock::MaybeSampleLoad() {
#ifdef __linux__
  if (!options_.adapt_to_load) return;
  const int64_t now = SteadyNowNs();
  if (now < next_sample_ns_.load(std::memory_order_relaxed)) return;
  if (sampling_.exchange(true, std::memory_order_acquire)) return;  // another thread samples
  if (now >= next_sample_ns_.load(std::memory_order_relaxed)) {
    absl::StatusOr<LoadSample> sample = ReadLoadSample();
    if (!sample.ok()) {
      // No /proc/stat (a sandbox without procfs): stay precise, stop trying.
      next_sample_ns_.store(INT64_MAX, std::memory_order_relaxed);
    } else {
      next_sample_ns_.store(now + options_.load_window.count(), std::memory_order_relaxed);
      if (samples_ > 0) {
        // CPU shares over the last two windows: the kernel counts busy time in 10 ms ticks, and
        // 100 ms on 2 CPUs (20 ticks) would make a share jitter by ±5-10 %.
        const LoadShares load = MeasureShares(samples_ > 1 ? older_sample_ : last_sample_, *sample);
        external_load_permille_.store(static_cast<int>(std::lround(load.external * 1000)),
                                      std::memory_order_relaxed);
        own_load_permille_.store(static_cast<int>(std::lround(load.own * 1000)),
                                 std::memory_order_relaxed);
        WaitWindow w;
        w.load = load;
        w.precise_waits = window_precise_.exchange(0, std::memory_order_relaxed);
        w.precise_late = window_late_.exchange(0, std::memory_order_relaxed);
        load_adapted_.store(mode_.Next(w), std::memory_order_relaxed);
      }
      older_sample_ = last_sample_;
      last_sample_ = *sample;
      ++samples_;
    }
  }
  sampling_.store(false, std::memory_order_release);  // pairs with the exchange above
#endif
}

Nanos RealClock::WaitUntilImpl(Nanos deadline) {
  const int64_t target = WallOf(deadline).time_since_epoch().count();
  static_assert(std::is_same_v<SteadyClock::duration, Nanos>);
  int64_t now = SteadyNowNs();
  if (now >= target || is_shut_down()) return Nanos(0);
  waits_.fetch_add(1, std::memory_order_relaxed);
  // Counts this thread among the waiters for the whole wait.
  struct WaiterCount {
    explicit WaiterCount(std::atomic<int>* c)
        : c_(c), n_(c->fetch_add(1, std::memory_order_relaxed) + 1) {}
    ~WaiterCount() { c_->fetch_sub(1, std::memory_order_relaxed); }
    std::atomic<int>* c_;
    int n_;
  } count(&waiters_);

  if ((options_.crowd_threshold > 0 && count.n_ > options_.crowd_threshold) ||
      load_adapted_.load(std::memory_order_relaxed)) {
    crowded_waits_.fetch_add(1, std::memory_order_relaxed);
    if (options_.timer_slack > Nanos(0)) SetThreadTimerSlack(Nanos(0));
    if (!SleepUntil(target)) return Nanos(0);
    return ToModeledLateness(SteadyNowNs() - target);
  }
  if (options_.timer_slack > Nanos(0)) SetThreadTimerSlack(options_.timer_slack);

  // Sleep until `lead` before the deadline, and learn from how late that sleep woke.
  const int64_t wake_at = target - lead_ns_.load(std::memory_order_relaxed);
  if (now < wake_at) {
    if (!SleepUntil(wake_at)) return Nanos(0);
    now = SteadyNowNs();
    if (options_.max_lead > Nanos(0)) LearnLead(now - wake_at);
  }
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
      while ((now = SteadyNowNs()) < target) {
        CpuRelax();
        if (++polls % kPollsPerYield == 0) {
          if (is_shut_down()) break;
          sched_yield();
        }
      }
      spinners_.fetch_sub(1, std::memory_order_relaxed);
      if (now < target) return Nanos(0);  // shut down while spinning
    } else {
      if (!SleepUntil(target)) return Nanos(0);
      now = SteadyNowNs();
    }
  }
  if (options_.adapt_to_load) {
    window_precise_.fetch_add(1, std::memory_order_relaxed);
    if (now - target > WaitModeController::kPreciseLateNs) {
      window_late_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  return ToModeledLateness(now - target);
}

}  // namespace rp
