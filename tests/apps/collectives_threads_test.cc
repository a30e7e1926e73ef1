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

using UntimedFn = absl::StatusOr<allreduce::Row> (*)(const allreduce::Settings&, uint64_t, uint64_t);
using TimedFn = absl::StatusOr<allreduce::Row> (*)(const allreduce::Settings&, uint64_t, uint64_t,
                                                   const LinkSpec&);

// Both paths of one command: 0 wrong; on the fabric, the emulated time is the closed form.
void ExpectExact(UntimedFn untimed_fn, TimedFn timed_fn, const allreduce::Settings& s, uint64_t bytes,
                 uint64_t segment) {
  auto untimed = untimed_fn(s, bytes, segment);
  ASSERT_TRUE(untimed.ok()) << untimed.status();
  EXPECT_EQ(untimed->wrong, 0u);
  auto spec = LinkSpecByName("dgx-a100");
  ASSERT_TRUE(spec.ok());
  auto timed = timed_fn(s, bytes, segment, *spec);
  ASSERT_TRUE(timed.ok()) << timed.status();
  EXPECT_EQ(timed->wrong, 0u);
  ASSERT_TRUE(std::isfinite(timed->formula_us));
  EXPECT_NEAR(timed->time_us, timed->formula_us, 1e-3);
}

TEST(CollectiveThreads, AllReduceUntimedAndTimedAreExact) {
  for (const bool in_place : {false, true}) {
    SCOPED_TRACE(in_place ? "in place" : "out of place");
    allreduce::Settings s = Small(4);
    s.in_place = in_place;
    ExpectExact(allreduce::RunUntimed, allreduce::RunTimed, s, /*bytes=*/64 << 10, /*segment=*/16 << 10);
  }
}

TEST(CollectiveThreads, AllToAllUntimedAndTimedAreExact) {
  for (const int ranks : {2, 5}) {
    SCOPED_TRACE(ranks);
    ExpectExact(alltoall::RunUntimed, alltoall::RunTimed, Small(ranks), /*bytes=*/40 << 10,
                /*segment=*/4 << 10);
  }
}

}  // namespace
}  // namespace rp::apps
