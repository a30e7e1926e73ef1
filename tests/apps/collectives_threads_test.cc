// The rank threads of `ringpipe allreduce` and `ringpipe alltoall` (apps/allreduce_run.cc,
// apps/alltoall_run.cc), in-process so the tsan preset runs them under ThreadSanitizer: every rank's
// result equals the serial reference, and on a modeled fabric the emulated time equals the closed
// form of docs/collectives.md.
#include <cmath>

#include "apps/allreduce.h"
#include "apps/alltoall.h"
#include "gtest/gtest.h"
#include "runtime/link_models.h"

namespace rp::apps {
namespace {

allreduce::Settings Small(int ranks) {
  allreduce::Settings s;
  s.ranks = ranks;
  s.iters = 2;
  s.warmup = 1;
  return s;
}

TEST(CollectiveThreads, AllReduceUntimedAndTimedAreExact) {
  for (const bool in_place : {false, true}) {
    allreduce::Settings s = Small(4);
    s.in_place = in_place;
    auto untimed = allreduce::RunUntimed(s, /*bytes=*/64 << 10, /*segment=*/16 << 10);
    ASSERT_TRUE(untimed.ok()) << untimed.status();
    EXPECT_EQ(untimed->wrong, 0u);
    auto spec = LinkSpecByName("dgx-a100");
    ASSERT_TRUE(spec.ok());
    auto timed = allreduce::RunTimed(s, 64 << 10, 16 << 10, *spec);
    ASSERT_TRUE(timed.ok()) << timed.status();
    EXPECT_EQ(timed->wrong, 0u);
    ASSERT_TRUE(std::isfinite(timed->formula_us));
    EXPECT_NEAR(timed->time_us, timed->formula_us, 1e-3);
  }
}

TEST(CollectiveThreads, AllToAllUntimedAndTimedAreExact) {
  for (const int ranks : {2, 5}) {
    const allreduce::Settings s = Small(ranks);
    auto untimed = alltoall::RunUntimed(s, /*bytes=*/40 << 10, /*segment=*/4 << 10);
    ASSERT_TRUE(untimed.ok()) << untimed.status();
    EXPECT_EQ(untimed->wrong, 0u);
    auto spec = LinkSpecByName("dgx-a100");
    ASSERT_TRUE(spec.ok());
    auto timed = alltoall::RunTimed(s, 40 << 10, 4 << 10, *spec);
    ASSERT_TRUE(timed.ok()) << timed.status();
    EXPECT_EQ(timed->wrong, 0u);
    ASSERT_TRUE(std::isfinite(timed->formula_us));
    EXPECT_NEAR(timed->time_us, timed->formula_us, 1e-3);
  }
}

}  // namespace
}  // namespace rp::apps
