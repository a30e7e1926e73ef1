// The real clock's bound on one message wait (apps::LongestMessageWait): a receiver that sleeps
// longer than watchdog_timeout for a message already sent is reported as stalled, so a run whose
// longest wait at its time scale reaches the watchdog is refused before it starts. The bound is a
// prediction made before the run, when the EP all-to-alls' routing is not known yet.
#include "apps/clock_choice.h"
#include "gtest/gtest.h"
#include "schedule/predictor.h"
#include "tests/schedule/ep_helpers.h"

namespace rp::apps {
namespace {

using schedule::EpSetup;
using schedule::ExecutorOptions;
using schedule::MakeOptions;

// It predicted the EP all-to-alls with balanced routing: a router skewed towards expert 0 sends
// EP rank 0 most tokens, so its blocks (here rows of 64 KiB, one message a block) take longer than
// balanced ones and meet other messages at the ports in another order, and a healthy run at a time
// scale just inside the bound could be reported as a stall (the run's longest transit beat the
// bound in all three skewed layouts, by up to 25 % — also with every block as large as a router
// can make it, which alone does not bound the queueing). The bound now covers any routing: the
// run's own longest transit (its routing, on the virtual clock: emulated == predicted) is within
// it, skewed or not, dropless or with a capacity, over 2 and 4 EP ranks.
TEST(LongestMessageWait, CoversTheEpTrafficOfASkewedRouter) {
  for (const EpSetup& s : {EpSetup{.dp = 2, .pp = 1, .tp = 1, .ep = 2, .m = 4},
                           EpSetup{.dp = 4, .pp = 2, .tp = 1, .ep = 4, .m = 4, .top_k = 2},
                           EpSetup{.dp = 2, .pp = 1, .tp = 1, .ep = 2, .m = 4, .capacity = 1.5}}) {
    for (double skew : {0.0, 6.0}) {
      ExecutorOptions o = MakeOptions(s, 1);
      o.model.moe.router_skew = skew;
      o.ep_row_bytes = 64 << 10;
      o.segment_bytes = 0;  // one message per block: its size is the routing's
      const std::string where = schedule::Name(s) + " router_skew " + std::to_string(skew);
      absl::StatusOr<schedule::RunResult> run = schedule::CreateAndRun(o);
      ASSERT_TRUE(run.ok()) << where << ": " << run.status();
      ASSERT_FALSE(run->prediction.balanced_routing_assumed) << where;
      const double real = static_cast<double>(run->prediction.longest_transit.count());
      absl::StatusOr<MessageWait> bound = LongestMessageWait(o);
      ASSERT_TRUE(bound.ok()) << where << ": " << bound.status();
      EXPECT_GT(real, 0) << where;
      EXPECT_GE(bound->transit_ns, real) << where;
      EXPECT_TRUE(bound->any_routing) << where;
      EXPECT_EQ(bound->healthy_transit_ns, bound->transit_ns) << where << " (no slow link)";
    }
  }
}

}  // namespace
}  // namespace rp::apps
