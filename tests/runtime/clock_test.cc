// Tests of rp::RealClock, rp::VirtualClock and rp::LatenessStats.
#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
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

TEST(RealClock, RejectsBadOptions) {
  EXPECT_EQ(RealClock::Create({.time_scale = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RealClock::Create({.time_scale = -1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RealClock::Create({.spin_window = Nanos(-1)}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RealClock::Create({.max_spinners = -1}).status().code(),
            absl::StatusCode::kInvalidArgument);
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
