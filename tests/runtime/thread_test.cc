// rp::Thread: the stack is the size asked for (rounded to pages), the function runs exactly once,
// Join and the destructor join, moves transfer ownership.
#include "runtime/thread.h"

#include <pthread.h>

#include <atomic>

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

}  // namespace
}  // namespace rp
