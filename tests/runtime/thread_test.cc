// rp::Thread: the stack is the size asked for (rounded to pages), the function runs exactly once,
// Join and the destructor join, moves transfer ownership. rp::Parker: a token left before the Park
// is kept, a deadline with no token returns false, and no wake-up is lost between threads.
#include "runtime/thread.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "runtime/mutex.h"

#include "gtest/gtest.h"

namespace rp {
namespace {

size_t OwnStackSize() {
  pthread_attr_t attr;
  EXPECT_EQ(pthread_getattr_np(pthread_self(), &attr), 0);
  size_t size = 0;
  EXPECT_EQ(pthread_attr_getstacksize(&attr, &size), 0);
  pthread_attr_destroy(&attr);
  return size;
}

TEST(Thread, RunsOnAStackOfTheRequestedSize) {
  for (size_t want : {size_t{256} << 10, size_t{1} << 20, size_t{3} << 20}) {
    size_t got = 0;
    absl::StatusOr<Thread> t = Thread::Start(want, [&] { got = OwnStackSize(); });
    ASSERT_TRUE(t.ok()) << t.status();
    t->Join();
    if (kSanitizerBuild) {
      EXPECT_GE(got, want);  // TSan's pthread_create interceptor may enlarge small stacks
    } else {
      EXPECT_EQ(got, want);
    }
  }
  // Below the minimum: the minimum.
  size_t got = 0;
  absl::StatusOr<Thread> t = Thread::Start(1, [&] { got = OwnStackSize(); });
  ASSERT_TRUE(t.ok()) << t.status();
  t->Join();
  EXPECT_GE(got, static_cast<size_t>(PTHREAD_STACK_MIN));
}

// The private futex hash grows to 4 slots per thread (a power of two) and never shrinks; on a
// kernel without PR_FUTEX_HASH the call says so and changes nothing.
TEST(StackRegion, EachThreadRunsOnItsOwnStackAboveAGuardPage) {
  if (kSanitizerBuild) GTEST_SKIP() << "TSan's pthread_create resizes a given stack (EINVAL); ringpipe uses glibc's there";
  constexpr size_t kThreads = 6, kStack = size_t{256} << 10;
  absl::StatusOr<StackRegion> region = StackRegion::Map(kThreads, kStack);
  ASSERT_TRUE(region.ok()) << region.status();
  ASSERT_EQ(region->count(), kThreads);
  std::vector<uintptr_t> local(kThreads, 0);
  std::vector<Thread> threads;
  for (size_t i = 0; i < kThreads; ++i) {
    absl::StatusOr<Thread> t = Thread::StartOn(region->stack(i), [&local, i] {
      int on_stack = 0;
      local[i] = reinterpret_cast<uintptr_t>(&on_stack);
    });
    ASSERT_TRUE(t.ok()) << t.status();
    threads.push_back(*std::move(t));
  }
  for (Thread& t : threads) t.Join();
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  for (size_t i = 0; i < kThreads; ++i) {
    const std::span<std::byte> s = region->stack(i);
    EXPECT_EQ(s.size(), kStack);
    const uintptr_t lo = reinterpret_cast<uintptr_t>(s.data()), hi = lo + s.size();
    EXPECT_TRUE(local[i] >= lo && local[i] < hi) << "thread " << i << " ran off its stack";
    if (i + 1 < kThreads) {  // stacks do not overlap: a guard page lies between neighbours
      EXPECT_EQ(reinterpret_cast<uintptr_t>(region->stack(i + 1).data()), hi + page);
    }
  }
  // The page below a stack faults when written (probed in a death-test child).
  EXPECT_DEATH(*reinterpret_cast<volatile char*>(region->stack(2).data() - 1) = 1, "");
  EXPECT_TRUE(StackRegion::Map(0, kStack).ok());
  EXPECT_EQ(StackRegion::Map(std::numeric_limits<size_t>::max() / 4096, kStack).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(Thread, ReserveFutexHashSizesThePrivateHash) {
  absl::StatusOr<int> slots = ReserveFutexHash(1000);
  if (absl::IsUnimplemented(slots.status())) GTEST_SKIP() << slots.status();
  ASSERT_TRUE(slots.ok()) << slots.status();
  EXPECT_GE(*slots, 4000);
  EXPECT_EQ(*slots & (*slots - 1), 0) << *slots << " is not a power of two";
  absl::StatusOr<int> again = ReserveFutexHash(10);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *slots);
}

TEST(Thread, JoinsOnceAndMovesOwnership) {
  std::atomic<int> runs{0};
  {
    absl::StatusOr<Thread> t = Thread::Start(kDeviceStackBytes, [&] { runs.fetch_add(1); });
    ASSERT_TRUE(t.ok());
    Thread moved = *std::move(t);
    EXPECT_TRUE(moved.joinable());
    Thread other;
    other = std::move(moved);
    EXPECT_FALSE(moved.joinable());  // NOLINT(bugprone-use-after-move): the contract under test
    EXPECT_TRUE(other.joinable());
  }  // the destructor joined
  EXPECT_EQ(runs.load(), 1);
}

// kBatch starts the thread under SCHED_BATCH (no privilege needed on Linux); kInherit keeps the
// creator's policy, and a batch thread's own children inherit batch.
TEST(Thread, StartsUnderTheRequestedSchedulingPolicy) {
  const std::string parent = CurrentSchedPolicyName();
  std::string batch, inherited, grandchild;
  absl::StatusOr<Thread> b = Thread::Start(kDeviceStackBytes, [&] {
    batch = CurrentSchedPolicyName();
    absl::StatusOr<Thread> c = Thread::Start(kDeviceStackBytes, [&] { grandchild = CurrentSchedPolicyName(); });
    ASSERT_TRUE(c.ok()) << c.status();
  }, SchedPolicy::kBatch);
  ASSERT_TRUE(b.ok()) << b.status();
  b->Join();
  absl::StatusOr<Thread> i = Thread::Start(kDeviceStackBytes, [&] { inherited = CurrentSchedPolicyName(); });
  ASSERT_TRUE(i.ok()) << i.status();
  i->Join();
  EXPECT_EQ(batch, "SCHED_BATCH");
  EXPECT_EQ(grandchild, "SCHED_BATCH");
  EXPECT_EQ(inherited, parent);
  EXPECT_NE(parent, "SCHED_BATCH");
}

TEST(Parker, AnUnparkBeforeTheParkLeavesOneToken) {
  Parker p;
  p.Unpark();
  p.Unpark();  // tokens do not add up
  EXPECT_TRUE(p.Park(std::chrono::steady_clock::now() + std::chrono::hours(1)));
  EXPECT_FALSE(p.Park(std::chrono::steady_clock::now() + std::chrono::milliseconds(5)));
}

TEST(Parker, ADeadlineWithNoTokenReturnsFalse) {
  Parker p;
  EXPECT_FALSE(p.Park(std::chrono::steady_clock::now() - std::chrono::seconds(1)));
  EXPECT_FALSE(p.Park(std::chrono::steady_clock::now() + std::chrono::milliseconds(2)));
}

// Two threads hand a counter back and forth 20000 times, each waiting the way the fabric does
// (check under the lock, unlock, Park; the other changes it under the lock and Unparks after): a
// lost wake-up would hang the test (ctest's timeout), a wrong order would break the count.
TEST(Parker, PingPongLosesNoWakeUp) {
  constexpr int kRounds = 20000;
  Mutex mu;
  int turn = 0;  // guarded by mu: even = thread A's turn, odd = B's
  Parker parkers[2];
  auto player = [&](int me) {
    for (int i = 0; i < kRounds; ++i) {
      mu.Lock();
      while (turn % 2 != me) {
        mu.Unlock();
        parkers[me].Park();
        mu.Lock();
      }
      ++turn;
      mu.Unlock();
      parkers[1 - me].Unpark();
    }
  };
  std::thread b(player, 1);
  player(0);
  b.join();
  MutexLock lock(&mu);
  EXPECT_EQ(turn, 2 * kRounds);
}


// The fabric's mutex spins before it sleeps (MutexWait::kSpinThenSleep, glibc's adaptive mutex
// set up on std::mutex's handle): it still excludes — a plain counter under it comes out exact
// from 4 threads (and TSan sees the lock), TryLock fails while it is held — and a CondVar waits
// on it.
TEST(Mutex, TheSpinningKindExcludesAndWorksWithACondVar) {
  Mutex mu(MutexWait::kSpinThenSleep);
  int64_t counter = 0;
  constexpr int kThreads = 4, kEach = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        MutexLock lock(&mu);
        counter = counter + 1;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  {
    MutexLock lock(&mu);
    EXPECT_EQ(counter, int64_t{kThreads} * kEach);
  }
  mu.Lock();
  std::thread other([&] { EXPECT_FALSE(mu.TryLock()); });
  other.join();
  mu.Unlock();

  CondVar cv;
  bool ready = false;
  std::thread waker([&] {
    MutexLock lock(&mu);
    ready = true;
    cv.SignalAll();
  });
  {
    MutexLock lock(&mu);
    while (!ready) cv.Wait(&mu);
  }
  waker.join();
  EXPECT_TRUE(ready);
}

}  // namespace
}  // namespace rp
