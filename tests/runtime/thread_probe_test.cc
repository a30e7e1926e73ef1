// rp::ReadHostThreadState against threads in known states (this one running, one parked, one
// spinning, one gone), and rp::QuietClock's rule: a look counts as quiet unless a thread the run
// waits for was runnable and got no CPU (the host's time, not the run's).
#include "runtime/thread_probe.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/thread.h"

namespace rp {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;

constexpr HostThreadState Blocked(int64_t cpu_ms) { return {.known = true, .runnable = false, .cpu = milliseconds(cpu_ms)}; }
constexpr HostThreadState Runnable(int64_t cpu_ms) { return {.known = true, .runnable = true, .cpu = milliseconds(cpu_ms)}; }

// Polls `state_of()` until `done(state)` or 30 s (a condition, not a sleep that orders threads).
template <typename F, typename D>
HostThreadState PollUntil(F state_of, D done) {
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  HostThreadState s = state_of();
  while (!done(s) && std::chrono::steady_clock::now() < limit) {
    std::this_thread::yield();
    s = state_of();
  }
  return s;
}

TEST(ThreadProbe, TheCallingThreadIsRunnableAndHasUsedCpu) {
  volatile uint64_t x = 0;
  for (int i = 0; i < 1000000; ++i) x = x + static_cast<uint64_t>(i);
  const HostThreadState s = ReadHostThreadState(CurrentThreadId());
  ASSERT_TRUE(s.known);
  EXPECT_TRUE(s.runnable);
  EXPECT_GT(s.cpu, nanoseconds(0));
}

TEST(ThreadProbe, AParkedThreadIsNotRunnableAndASpinningOneIsAndUsesCpu) {
  std::atomic<int> parked_tid{0}, spinning_tid{0};
  std::atomic<bool> stop{false};
  Parker parker;
  std::thread parked([&] {
    parked_tid.store(CurrentThreadId());
    while (!stop.load()) parker.Park();
  });
  std::thread spinning([&] {
    spinning_tid.store(CurrentThreadId());
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  while (parked_tid.load() == 0 || spinning_tid.load() == 0) std::this_thread::yield();
  const HostThreadState p = PollUntil([&] { return ReadHostThreadState(parked_tid.load()); },
                                      [](const HostThreadState& s) { return s.known && !s.runnable; });
  EXPECT_TRUE(p.known);
  EXPECT_FALSE(p.runnable);
  // The spinner: runnable whenever read (on a CPU or waiting for one), and its CPU time grows.
  const HostThreadState s0 = ReadHostThreadState(spinning_tid.load());
  ASSERT_TRUE(s0.known);
  const HostThreadState s1 = PollUntil([&] { return ReadHostThreadState(spinning_tid.load()); },
                                       [&](const HostThreadState& s) { return s.cpu - s0.cpu >= milliseconds(2); });
  EXPECT_TRUE(s1.runnable);
  EXPECT_GE(s1.cpu - s0.cpu, milliseconds(2));
  stop.store(true);
  parker.Unpark();
  parked.join();
  spinning.join();
  // Gone: its id reads as unknown (the monitor then counts its time as before).
  EXPECT_FALSE(ReadHostThreadState(spinning_tid.load()).known);
  EXPECT_FALSE(ReadHostThreadState(0).known);
}

TEST(QuietClock, ABlockedThreadsTimeCounts) {
  QuietClock q;
  const std::vector<std::pair<int, HostThreadState>> running = {{3, Blocked(5)}};
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(q.Look(milliseconds(20), running));
  EXPECT_EQ(q.quiet(), milliseconds(60));
  EXPECT_EQ(q.excused(), nanoseconds(0));
  q.Progress();
  EXPECT_EQ(q.quiet(), nanoseconds(0));
}

// Descheduled (or the process stopped): runnable, no CPU since the last look. Never quiet time, however
// long: the look after a 10 s gap is excused too.
TEST(QuietClock, ARunnableThreadTheHostDidNotRunIsExcused) {
  QuietClock q;
  const std::vector<std::pair<int, HostThreadState>> running = {{3, Blocked(5)}, {7, Runnable(9)}};
  EXPECT_FALSE(q.Look(milliseconds(20), running));
  EXPECT_FALSE(q.Look(std::chrono::seconds(10), running));
  EXPECT_EQ(q.quiet(), nanoseconds(0));
  EXPECT_EQ(q.excused(), milliseconds(10020));
  // It ran (1 ms of CPU) and made no progress: from then on the time counts.
  const std::vector<std::pair<int, HostThreadState>> ran = {{3, Blocked(5)}, {7, Runnable(10)}};
  EXPECT_TRUE(q.Look(milliseconds(20), ran));
  EXPECT_EQ(q.quiet(), milliseconds(20));
}

// A livelock: runnable and using CPU without progress. Excused on the first look only (nothing to
// compare its CPU time with), then counted.
TEST(QuietClock, AThreadSpinningWithoutProgressCounts) {
  QuietClock q;
  for (int i = 0; i < 4; ++i) {
    const std::vector<std::pair<int, HostThreadState>> running = {{2, Runnable(20 * i)}};
    EXPECT_EQ(q.Look(milliseconds(20), running), i > 0) << i;
  }
  EXPECT_EQ(q.quiet(), milliseconds(60));
  EXPECT_EQ(q.excused(), milliseconds(20));
}

// Two threads spinning without progress starve a third: the spinners' time counts (a livelock is
// found even though one of the threads it waits for got no CPU).
TEST(QuietClock, ALivelockStarvingAnotherThreadCounts) {
  QuietClock q;
  for (int i = 0; i < 4; ++i) {
    const std::vector<std::pair<int, HostThreadState>> running = {
        {1, Runnable(20 * i)}, {2, Runnable(20 * i)}, {3, Runnable(0)}};
    EXPECT_EQ(q.Look(milliseconds(20), running), i > 0) << i;
  }
  EXPECT_EQ(q.quiet(), milliseconds(60));
}

// Without /proc (or a thread gone) nothing is known: the time counts, as it did before the probe.
TEST(QuietClock, UnknownThreadsCount) {
  QuietClock q;
  const std::vector<std::pair<int, HostThreadState>> running = {{1, HostThreadState{}}};
  EXPECT_TRUE(q.Look(milliseconds(20), running));
  EXPECT_TRUE(q.Look(milliseconds(20), {}));
  EXPECT_EQ(q.quiet(), milliseconds(40));
}

}  // namespace
}  // namespace rp
