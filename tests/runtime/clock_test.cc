// Tests of rp::RealClock, rp::VirtualClock and rp::LatenessStats.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/cpu_load.h"
#include "runtime/lateness.h"
#include "runtime/real_clock.h"
#include "runtime/virtual_clock.h"

namespace rp {
namespace {

TEST(LatenessStats, QuantilesWithinBucketPrecision) {
  LatenessStats s;
  for (int i = 1; i <= 1000; ++i) s.Record(Nanos(i * 1000));
  EXPECT_EQ(s.count(), 1000u);
  EXPECT_EQ(s.min(), Nanos(1000));
  EXPECT_EQ(s.max(), Nanos(1000000));
  EXPECT_EQ(s.sum(), Nanos(int64_t{500500} * 1000));
  EXPECT_NEAR(static_cast<double>(s.Quantile(0.5).count()), 500000, 500000 / 16.0);
  EXPECT_NEAR(static_cast<double>(s.Quantile(0.99).count()), 990000, 990000 / 16.0);
  LatenessStats t;
  t.Record(Nanos(-5));  // negative counts as 0
  s.Merge(t);
  EXPECT_EQ(s.count(), 1001u);
  EXPECT_EQ(s.min(), Nanos(0));
}

TEST(LatenessStats, SmallValuesAreExact) {
  LatenessStats s;
  for (int v : {3, 7, 7, 9}) s.Record(Nanos(v));
  EXPECT_EQ(s.Quantile(0.5), Nanos(7));
  EXPECT_EQ(s.Quantile(1.0), Nanos(9));
  EXPECT_EQ(LatenessStats().Quantile(0.5), Nanos(0));
}

// The histogram is allocated at the first value: merging into an empty one (the way a report
// merges devices) and merging empty ones must give the same figures as recording directly.
TEST(LatenessStats, MergeIntoEmptyEqualsRecording) {
  LatenessStats direct, part;
  for (int v : {5, 40, 900, 70000, 70001}) {
    direct.Record(Nanos(v));
    part.Record(Nanos(v));
  }
  LatenessStats merged;
  merged.Merge(LatenessStats());  // empty into empty: still empty
  EXPECT_EQ(merged.count(), 0u);
  EXPECT_EQ(merged.Quantile(0.9), Nanos(0));
  merged.Merge(part);
  merged.Merge(LatenessStats());
  EXPECT_EQ(merged.count(), direct.count());
  EXPECT_EQ(merged.sum(), direct.sum());
  EXPECT_EQ(merged.min(), direct.min());
  EXPECT_EQ(merged.max(), direct.max());
  for (double q : {0.0, 0.2, 0.5, 0.8, 1.0}) EXPECT_EQ(merged.Quantile(q), direct.Quantile(q)) << q;
  LatenessStats copy = merged;  // a copy owns its histogram
  copy.Record(Nanos(3));
  EXPECT_EQ(merged.count(), 5u);
  EXPECT_EQ(copy.Quantile(0.0), Nanos(3));
}

TEST(RealClock, RejectsBadOptions) {
  EXPECT_EQ(RealClock::Create({.time_scale = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RealClock::Create({.time_scale = -1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Below kMinRealTimeScale modeled time (wall ÷ scale) overflows int64 ns within days of wall
  // time (at 1e-12, at once: Now() wrapped negative).
  EXPECT_EQ(RealClock::Create({.time_scale = 1e-12}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(RealClock::Create({.time_scale = kMinRealTimeScale}).ok());
  EXPECT_EQ(RealClock::Create({.max_lead = Nanos(-1)}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RealClock::Create({.max_spinners = -1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RealClock::Create({.lead_quantile = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RealClock::Create({.lead_quantile = 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RealClock::Create({.timer_slack = Nanos(-1)}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RealClock::Create({.crowd_threshold = -1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  for (double bad : {0.0, -0.5, 1.5}) {
    auto ext = RealClock::Create({.external_load_threshold = bad});
    EXPECT_NE(ext.status().message().find("external_load_threshold"), std::string::npos) << bad;
    auto busy = RealClock::Create({.busy_threshold = bad});
    EXPECT_NE(busy.status().message().find("busy_threshold"), std::string::npos) << bad;
  }
  EXPECT_NE(RealClock::Create({.load_window = Nanos(0)}).status().message().find("load_window"),
            std::string::npos);
}

// ---- Load adaptation ----

TEST(CpuLoad, ParsesTheAggregateCpuLine) {
  // user nice system idle iowait irq softirq steal guest guest_nice
  auto t = ParseProcStatCpu("cpu  100 2 30 500 7 1 4 6 50 0\ncpu0 50 1 15 250 3 0 2 3 25 0\n");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->busy, 100u + 2 + 30 + 1 + 4 + 6);  // guest is already inside user
  EXPECT_EQ(t->total, t->busy + 500 + 7);
  auto old_kernel = ParseProcStatCpu("cpu 1 2 3 4");  // four fields: the rest count as 0
  ASSERT_TRUE(old_kernel.ok()) << old_kernel.status();
  EXPECT_EQ(old_kernel->busy, 6u);
  EXPECT_EQ(old_kernel->total, 10u);
}

TEST(CpuLoad, RejectsMalformedInput) {
  EXPECT_NE(ParseProcStatCpu("intr 1 2 3").status().message().find("cpu"), std::string::npos);
  EXPECT_NE(ParseProcStatCpu("cpu 1 2 x 4").status().message().find("field 3"),
            std::string::npos);
  EXPECT_NE(ParseProcStatCpu("cpu 1 2 3").status().message().find("3 fields"),
            std::string::npos);
  EXPECT_EQ(ParseProcStatCpu("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CpuLoad, SharesSplitBusyTimeIntoThisProcessAndOthers) {
  // 2 CPUs × 1 s = 200 ticks of 10 ms; 120 busy; this process used 0.4 s.
  const LoadSample a{.cpu = {.busy = 1000, .total = 5000}, .process_cpu_ns = 7'000'000'000};
  const LoadSample b{.cpu = {.busy = 1120, .total = 5200}, .process_cpu_ns = 7'400'000'000};
  const LoadShares s = MeasureShares(a, b, 10'000'000);
  EXPECT_DOUBLE_EQ(s.own, 0.2);
  EXPECT_DOUBLE_EQ(s.external, 0.4);
  // No tick elapsed: nothing to say.
  const LoadShares none = MeasureShares(a, a, 10'000'000);
  EXPECT_EQ(none.own, 0);
  EXPECT_EQ(none.external, 0);
  // The process clock (ns) outran the tick count: own is capped at busy, external is 0.
  const LoadSample c{.cpu = {.busy = 1010, .total = 5200}, .process_cpu_ns = 8'000'000'000};
  const LoadShares capped = MeasureShares(a, c, 10'000'000);
  EXPECT_DOUBLE_EQ(capped.own, 0.05);
  EXPECT_EQ(capped.external, 0);
}

TEST(CpuLoad, ReadsThisHost) {
  auto a = ReadLoadSample();
#ifdef __linux__
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_GT(a->cpu.total, 0u);
  EXPECT_GE(a->cpu.total, a->cpu.busy);
  auto b = ReadLoadSample();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_GE(b->cpu.total, a->cpu.total);
  EXPECT_GE(b->process_cpu_ns, a->process_cpu_ns);
#else
  EXPECT_EQ(a.status().code(), absl::StatusCode::kUnimplemented);
#endif
}

WaitWindow Window(double external, double own, uint64_t waits = 0, uint64_t late = 0) {
  return WaitWindow{.load = {.external = external, .own = own},
                    .precise_waits = waits,
                    .precise_late = late};
}

TEST(WaitModeController, ExternalOrTotalLoadSwitchesToCrowdedAndRoomSwitchesBack) {
  WaitModeController m(RealClockOptions{});  // thresholds 0.25 external, 0.85 busy
  EXPECT_FALSE(m.Next(Window(0.2, 0.6, 1000, 0)));
  EXPECT_TRUE(m.Next(Window(0.3, 0.1)));  // another process took 30 % of the CPUs
  EXPECT_TRUE(m.Next(Window(0.2, 0.1)));  // not below half the threshold yet
  EXPECT_TRUE(m.Next(Window(0.1, 0.3)));  // 0.1 + 2 × 0.3 = 0.7 >= 0.8 × 0.85
  EXPECT_FALSE(m.Next(Window(0.1, 0.2)));  // 0.1 + 0.4 < 0.68: room for precise waits
  EXPECT_TRUE(m.Next(Window(0.0, 0.9)));   // this process alone saturates the host
  EXPECT_EQ(m.hold(), 0);
}

TEST(WaitModeController, LateWaitsSwitchWithAHoldThatDoublesUntilAGoodWindow) {
  WaitModeController m(RealClockOptions{});
  // Too few waits to judge: no switch, however late.
  EXPECT_FALSE(m.Next(Window(0, 0.1, WaitModeController::kMinPreciseWaits - 1, 60)));
  // 26 % late: crowded for 1 window of hold, then back (plenty of room).
  EXPECT_TRUE(m.Next(Window(0, 0.1, 100, 26)));
  EXPECT_EQ(m.hold(), 1);
  EXPECT_TRUE(m.Next(Window(0, 0.05)));
  EXPECT_FALSE(m.Next(Window(0, 0.05)));
  // Late again: the hold doubles (2), then 4.
  EXPECT_TRUE(m.Next(Window(0, 0.1, 100, 50)));
  EXPECT_EQ(m.hold(), 2);
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(m.Next(Window(0, 0.05)));
  EXPECT_FALSE(m.Next(Window(0, 0.05)));
  EXPECT_TRUE(m.Next(Window(0, 0.1, 100, 50)));
  EXPECT_EQ(m.hold(), 4);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(m.Next(Window(0, 0.05)));
  EXPECT_FALSE(m.Next(Window(0, 0.05)));
  // A good precise window (25 % late is not more than 25 %) resets the hold to 1.
  EXPECT_FALSE(m.Next(Window(0, 0.1, 100, 25)));
  EXPECT_TRUE(m.Next(Window(0, 0.1, 100, 50)));
  EXPECT_EQ(m.hold(), 1);
}

TEST(WaitModeController, HoldIsCapped) {
  WaitModeController m(RealClockOptions{});
  int hold = 0;
  for (int round = 0; round < 12; ++round) {
    ASSERT_TRUE(m.Next(Window(0, 0.1, 1000, 1000)));
    hold = m.hold();
    for (int i = 0; i < hold; ++i) ASSERT_TRUE(m.Next(Window(0, 0.05)));
    ASSERT_FALSE(m.Next(Window(0, 0.05)));
  }
  EXPECT_EQ(hold, WaitModeController::kMaxHoldWindows);
}

#ifdef __linux__
TEST(RealClock, BusyHostSwitchesToCrowdedWaitsThatAreNeverEarly) {
  // busy_threshold 1e-6: any CPU time at all in a window counts as a busy host. Each round burns
  // 30 ms of CPU (three 10 ms ticks) and then waits; the sampler runs after waits, every 1 ms.
  auto clock = RealClock::Create({.busy_threshold = 1e-6, .load_window = FromMillis(1)}).value();
  bool adapted = false;
  for (int round = 0; round < 20 && !adapted; ++round) {
    const auto burn_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(30);
    volatile uint64_t x = 0;
    while (std::chrono::steady_clock::now() < burn_until) x = x + 1;
    const Nanos deadline = clock->Now() + FromMillis(2);
    const Nanos late = clock->WaitUntil(deadline);
    EXPECT_GE(std::chrono::steady_clock::now(), clock->WallOf(deadline));
    EXPECT_GE(late, Nanos(0));
    adapted = clock->load_adapted();
  }
  EXPECT_TRUE(adapted) << "own share " << clock->own_load();
  EXPECT_GE(clock->own_load(), 0.0);
  // Crowded waits keep the contract.
  for (int k = 0; k < 5; ++k) {
    const Nanos deadline = clock->Now() + FromMicros(700);
    clock->WaitUntil(deadline);
    EXPECT_GE(std::chrono::steady_clock::now(), clock->WallOf(deadline));
  }
  // Without adaptation the mode never changes.
  auto fixed = RealClock::Create({.adapt_to_load = false, .busy_threshold = 1e-6,
                                  .load_window = FromMillis(1)})
                   .value();
  for (int k = 0; k < 5; ++k) fixed->WaitUntil(fixed->Now() + FromMillis(12));
  EXPECT_FALSE(fixed->load_adapted());
  EXPECT_EQ(fixed->external_load(), -1.0);
}
#endif

// Many threads on staggered periodic deadlines, in the precise regime (crowd_threshold above the
// thread count) and the crowded one (threshold 2): no wait ever returns before its deadline's
// wall time, every lateness is recorded and >= 0, and the learned lead stays within max_lead.
void ExpectNeverEarly(const RealClockOptions& options) {
  auto clock = RealClock::Create(options).value();
  constexpr int kThreads = 6;
  constexpr int kWaits = 40;
  std::vector<LatenessStats> stats(kThreads);
  std::atomic<int> early{0};
  std::vector<std::thread> threads;
  const Nanos start = clock->Now() + FromMillis(1);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < kWaits; ++k) {
        const Nanos deadline = start + FromMicros(37.0 * t) + FromMicros(250.0 * k);
        const Nanos late = clock->WaitUntil(deadline);
        if (std::chrono::steady_clock::now() < clock->WallOf(deadline)) early.fetch_add(1);
        stats[static_cast<size_t>(t)].Record(late);
        if (late < Nanos(0)) early.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(early.load(), 0);
  LatenessStats all;
  for (const auto& s : stats) all.Merge(s);
  EXPECT_EQ(all.count(), static_cast<uint64_t>(kThreads * kWaits));
  EXPECT_GE(clock->learned_lead(), Nanos(0));
  EXPECT_LE(clock->learned_lead(), options.max_lead);
}

TEST(RealClock, NeverEarlyWithManyWaitersPreciseRegime) {
  ExpectNeverEarly({.time_scale = 0.5, .crowd_threshold = 64});
}

TEST(RealClock, NeverEarlyWithManyWaitersCrowdedRegime) {
  ExpectNeverEarly({.time_scale = 0.5, .crowd_threshold = 2});
}

TEST(RealClock, NeverEarlyWithoutAnticipationOrSpinning) {
  ExpectNeverEarly({.max_lead = Nanos(0), .max_spinners = 0});
}

TEST(RealClock, ShutdownReleasesManySleepersInBothRegimes) {
  for (int crowd : {0, 2}) {
    auto clock = RealClock::Create({.crowd_threshold = crowd}).value();
    std::atomic<int> returned{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < 4; ++i) {
      threads.emplace_back([&] {
        EXPECT_EQ(clock->WaitUntil(std::chrono::hours(1)), Nanos(0));
        returned.fetch_add(1);
      });
    }
    clock->Shutdown();
    for (auto& th : threads) th.join();
    EXPECT_EQ(returned.load(), 4) << "crowd_threshold " << crowd;
  }
}

TEST(RealClock, WaitUntilReachesDeadlineAndRecordsLateness) {
  auto clock = RealClock::Create({.time_scale = 0.5}).value();
  LatenessStats stats;
  Nanos deadline = clock->Now();
  for (int i = 0; i < 20; ++i) {
    deadline += FromMicros(200);
    const Nanos late = clock->WaitUntil(deadline);
    EXPECT_GE(late, Nanos(0));
    EXPECT_GE(clock->Now(), deadline);  // never early
    stats.Record(late);
  }
  EXPECT_EQ(stats.count(), 20u);
  EXPECT_GE(stats.min(), Nanos(0));
  // A deadline in the past returns at once with 0 lateness (that delay is an overrun).
  EXPECT_EQ(clock->WaitUntil(Nanos(0)), Nanos(0));
}

TEST(RealClock, ShutdownReleasesWaiters) {
  auto clock = RealClock::Create({}).value();
  std::atomic<bool> returned{false};
  std::thread t([&] {
    clock->WaitUntil(std::chrono::hours(1));
    returned.store(true);
  });
  clock->Shutdown();
  t.join();
  EXPECT_TRUE(returned.load());
  EXPECT_TRUE(clock->is_shut_down());
  EXPECT_EQ(clock->WaitUntil(std::chrono::hours(2)), Nanos(0));
}

TEST(VirtualClock, SingleThreadAdvancesAtOnce) {
  VirtualClock clock;
  EXPECT_EQ(clock.Now(), Nanos(0));
  EXPECT_EQ(clock.WaitUntil(FromMillis(50)), Nanos(0));
  EXPECT_EQ(clock.Now(), FromMillis(50));
  EXPECT_EQ(clock.WaitUntil(FromMillis(10)), Nanos(0));  // past: no change
  EXPECT_EQ(clock.Now(), FromMillis(50));
  clock.AdvanceTo(FromMillis(70));
  EXPECT_EQ(clock.Now(), FromMillis(70));
}

// Three participants wait on interleaved deadlines; time advances only when all are blocked, so
// every waiter wakes exactly at its deadline and the global order of wake-ups is the deadline
// order — the same on every run.
std::vector<std::pair<int64_t, int>> RunVirtualScenario() {
  VirtualClock clock;
  constexpr int kThreads = 3;
  Mutex mu;
  std::vector<std::pair<int64_t, int>> log;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) clock.Register();
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      Nanos t{0};
      for (int k = 0; k < 20; ++k) {
        t += Nanos(100 * (i + 1) + 7 * k);
        const Nanos late = clock.WaitUntil(t);
        EXPECT_EQ(late, Nanos(0));
        EXPECT_EQ(clock.Now(), t);
        MutexLock lock(&mu);
        log.push_back({t.count(), i});
      }
      clock.Unregister();
    });
  }
  for (auto& th : threads) th.join();
  std::sort(log.begin(), log.end());
  return log;
}

TEST(VirtualClock, ParticipantsWakeExactlyAtDeadlinesDeterministically) {
  const auto a = RunVirtualScenario();
  const auto b = RunVirtualScenario();
  ASSERT_EQ(a.size(), 60u);
  EXPECT_EQ(a, b);
}

TEST(VirtualClock, ExternalWaitLetsTimeAdvance) {
  VirtualClock clock;
  clock.Register();
  clock.Register();
  std::atomic<bool> flag{false};
  std::thread waiter([&] {
    {
      ScopedExternalWait external(&clock);  // blocked on something other than the clock
      flag.wait(false);
    }
    clock.Unregister();
  });
  // The other participant's WaitUntil can advance because the first counts as blocked.
  EXPECT_EQ(clock.WaitUntil(FromMillis(5)), Nanos(0));
  EXPECT_EQ(clock.Now(), FromMillis(5));
  flag.store(true);
  flag.notify_all();
  waiter.join();
  clock.Unregister();
}

TEST(VirtualClockExternalWaiter, WakeBetweenPrepareAndBeginKeepsConsumerRunning) {
  VirtualClock clock;
  VirtualClock::ExternalWaiter waiter(&clock);
  const uint64_t ticket = waiter.PrepareWait();
  waiter.Wake();  // the producer published after the consumer checked
  waiter.BeginWait(ticket);
  EXPECT_EQ(clock.blocked_participants(), 0);
  waiter.EndWait();
  EXPECT_EQ(clock.blocked_participants(), 0);
  // A wake before PrepareWait is stale: the next wait blocks normally.
  const uint64_t fresh = waiter.PrepareWait();
  waiter.BeginWait(fresh);
  EXPECT_EQ(clock.blocked_participants(), 1);
  waiter.EndWait();
  EXPECT_EQ(clock.blocked_participants(), 0);
}

TEST(VirtualClockExternalWaiter, WakeCountsConsumerRunning) {
  VirtualClock clock;
  VirtualClock::ExternalWaiter waiter(&clock);
  waiter.BeginWait(waiter.PrepareWait());
  EXPECT_EQ(clock.blocked_participants(), 1);
  waiter.Wake();
  EXPECT_EQ(clock.blocked_participants(), 0);
  waiter.EndWait();  // no double decrement
  EXPECT_EQ(clock.blocked_participants(), 0);
}

// Producer P posts a message stamped t = 5 ms, wakes consumer C, then waits until 10 ms. C does
// not get to run until P is blocked in WaitUntil(10 ms). Time must not pass C: C sees 0, its
// WaitUntil(5 ms) returns with lateness 0 at exactly 5 ms, and only then does P reach 10 ms.
// (With a plain ScopedExternalWait in C, time would jump to 10 ms before C wakes.)
TEST(VirtualClockExternalWaiter, TimeDoesNotRunAheadOfAWokenConsumer) {
  for (int run = 0; run < 5; ++run) {
    VirtualClock clock;
    clock.Register();  // P
    clock.Register();  // C
    VirtualClock::ExternalWaiter waiter(&clock);
    std::atomic<int64_t> message{-1};  // arrival stamp; -1: none yet
    Nanos c_saw_now{-1};
    Nanos c_late{-1};
    Nanos c_after{-1};
    std::thread consumer([&] {
      const uint64_t ticket = waiter.PrepareWait();
      if (message.load(std::memory_order_acquire) < 0) {
        waiter.BeginWait(ticket);
        message.wait(-1, std::memory_order_acquire);
        waiter.EndWait();
      }
      // Hold C back until P is blocked in WaitUntil (the only blocked participant).
      while (clock.blocked_participants() != 1) std::this_thread::yield();
      c_saw_now = clock.Now();
      c_late = clock.WaitUntil(Nanos(message.load(std::memory_order_acquire)));
      c_after = clock.Now();
      clock.Unregister();
    });
    message.store(FromMillis(5).count(), std::memory_order_release);  // pairs with C's acquire
    waiter.Wake();
    message.notify_all();
    EXPECT_EQ(clock.WaitUntil(FromMillis(10)), Nanos(0));
    EXPECT_EQ(clock.Now(), FromMillis(10));
    clock.Unregister();
    consumer.join();
    EXPECT_EQ(c_saw_now, Nanos(0));
    EXPECT_EQ(c_late, Nanos(0));
    EXPECT_EQ(c_after, FromMillis(5));
  }
}

TEST(VirtualClock, ShutdownReleasesBlockedWaiters) {
  VirtualClock clock;
  clock.Register();
  clock.Register();  // a second participant that never blocks: time cannot advance
  std::thread t([&] { EXPECT_EQ(clock.WaitUntil(FromMillis(1)), Nanos(0)); });
  clock.Shutdown();
  t.join();
  EXPECT_EQ(clock.Now(), Nanos(0));
}

}  // namespace
}  // namespace rp
