// rp::Fabric's waits besides channels (fabric_test.cc has the commit rule and the timings): a
// parked LP, gates, rendezvous, Abort releasing a deadlock with wait sites, channels added while an
// LP waits, and a post before the LP's bound.
#include "runtime/fabric.h"

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace rp {
namespace {

TEST(Fabric, ParkedLpDoesNotHoldBackCommitsUntilGivenWork) {
  LinkSpec spec;
  spec.intra_node = {.alpha = Nanos(10), .bandwidth_gbps = 0, .overhead = Nanos(5)};
  auto f = Fabric::Create({.links = spec, .num_devices = 2, .tie_rank = {0, 1, 2}});
  ASSERT_TRUE(f.ok());
  Fabric& fabric = **f;
  const ChannelId ch = fabric.AddChannel(0, 1);
  fabric.StartParked(2);  // LP 2: a comm stream with no work
  ASSERT_TRUE(fabric.Post(0, ch, {.src = 0, .dst = 1, .bytes = 8, .ready = Nanos(100)}).ok());
  // LP 0 and 1 (running, bound 0) hold the message back: LP 1 has not said it waits.
  EXPECT_EQ(fabric.pending(), 1u);
  auto d = fabric.Await(1, ch, {.rank = 1, .op = "recv"});  // LP 1 excluded; LP 0 bound 100
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->timing.arrival, Nanos(115));
  EXPECT_EQ(fabric.pending(), 0u);
  // LP 2 given work at 50: it now holds commits back from 50.
  fabric.AddWork(2, Nanos(50));
  fabric.Advance(0, Nanos(1000));
  fabric.Advance(1, Nanos(1000));
  ASSERT_TRUE(fabric.Post(0, ch, {.src = 0, .dst = 1, .bytes = 8, .ready = Nanos(1000)}).ok());
  EXPECT_EQ(fabric.pending(), 1u);
  fabric.FinishWork(2);  // parked again
  EXPECT_EQ(fabric.pending(), 0u);
}

TEST(Fabric, GateHandsTheSignallersTimeToItsWaiter) {
  auto f = Fabric::Create({.links = {}, .num_devices = 1, .tie_rank = {0, 1}});
  ASSERT_TRUE(f.ok());
  Fabric& fabric = **f;
  const GateId g = fabric.AddGate();
  std::thread waiter([&] {
    auto t = fabric.AwaitGate(0, g, {.rank = 0, .op = "await comm"});
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(*t, Nanos(4242));
  });
  fabric.Signal(g, Nanos(4242));
  waiter.join();
  auto again = fabric.AwaitGate(0, g, {.rank = 0, .op = "await comm"});  // already signalled
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, Nanos(4242));
}

TEST(Fabric, RendezvousReleasesEveryoneAtTheLastArriversTime) {
  constexpr int kMembers = 6;
  std::vector<uint64_t> tie(kMembers);
  for (int i = 0; i < kMembers; ++i) tie[static_cast<size_t>(i)] = static_cast<uint64_t>(i);
  auto f = Fabric::Create({.links = {}, .num_devices = 1, .tie_rank = tie});
  ASSERT_TRUE(f.ok());
  Fabric& fabric = **f;
  const RendezvousId rv = fabric.AddRendezvous(kMembers);
  std::atomic<int> last_calls{0};
  std::vector<std::thread> threads;
  std::vector<Nanos> released(kMembers);
  for (int round = 0; round < 3; ++round) {
    threads.clear();
    for (int i = 0; i < kMembers; ++i) {
      threads.emplace_back([&, i, round] {
        auto r = fabric.Arrive(i, rv, Nanos(100 * i + round), {.rank = i, .op = "barrier"},
                               [&](Nanos max) -> absl::StatusOr<Nanos> {
                                 ++last_calls;
                                 return max + Nanos(7);
                               });
        ASSERT_TRUE(r.ok());
        released[static_cast<size_t>(i)] = *r;
      });
    }
    for (auto& t : threads) t.join();
    for (Nanos r : released) EXPECT_EQ(r, Nanos(100 * (kMembers - 1) + round + 7));
  }
  EXPECT_EQ(last_calls.load(), 3);
}

TEST(Fabric, AbortReleasesADeadlockAndWaitsNameTheirPeers) {
  auto f = Fabric::Create({.links = {}, .num_devices = 2, .tie_rank = {0, 1}});
  ASSERT_TRUE(f.ok());
  Fabric& fabric = **f;
  const ChannelId ab = fabric.AddChannel(0, 1), ba = fabric.AddChannel(1, 0);
  std::vector<absl::Status> got(2);
  std::thread a([&] { got[0] = fabric.Await(0, ba, {.rank = 0, .op = "recv", .peer = 1}).status(); });
  std::thread b([&] { got[1] = fabric.Await(1, ab, {.rank = 1, .op = "recv", .peer = 0}).status(); });
  // Both end up awaiting each other: no LP running, nothing pending — a true stall.
  while (true) {
    const std::vector<LpWait> w = fabric.Waits();
    if (w[0].state == LpWait::State::kAwaitChannel && w[1].state == LpWait::State::kAwaitChannel) {
      EXPECT_EQ(w[0].peer, 1);
      EXPECT_EQ(w[1].peer, 0);
      break;
    }
    std::this_thread::yield();
  }
  const uint64_t progress = fabric.progress();
  fabric.Abort(absl::DeadlineExceededError("stall"));
  a.join();
  b.join();
  EXPECT_TRUE(absl::IsDeadlineExceeded(got[0])) << got[0];
  EXPECT_TRUE(absl::IsDeadlineExceeded(got[1])) << got[1];
  EXPECT_EQ(fabric.progress(), progress);
}

// A handler runs on whichever thread commits its message. What it throws is its receiver's
// failure: the fabric aborts at that commit with Internal naming the receiving LP (its wait site,
// else its id) and the exception, and the committing thread's call returns normally — it must
// not carry the exception out as its own (a report would then blame that thread's rank).
TEST(Fabric, AHandlerThatThrowsFailsItsReceiverNotTheCommittingThread) {
  for (const bool standard_exception : {true, false}) {
    // LP 2 (tie 0) holds back LP 0's messages until it advances: its Advance commits them.
    // on_handler_failure hears of it first, with the receiver, before anyone is released.
    struct Told {
      LpId receiver = -1;
      int site_rank = -1;
      absl::Status status;
      bool aborted_already = false;
      int calls = 0;
    } told;
    Fabric* fp = nullptr;
    auto f = Fabric::Create({.links = {}, .num_devices = 3, .tie_rank = {1, 2, 0},
                             .on_handler_failure = [&](LpId receiver, const WaitSite& site,
                                                       const absl::Status& status) {
                               told = {receiver, site.rank, status, fp->aborted(), told.calls + 1};
                             }});
    ASSERT_TRUE(f.ok());
    Fabric& fabric = **f;
    fp = &fabric;
    const ChannelId ch = fabric.AddChannel(0, 1);
    const ChannelId other = fabric.AddChannel(2, 0);
    int handled = 0;
    fabric.SetHandler(1, [&](Fabric::Scope& scope, ChannelId c, Delivery) {
      if (handled++ == 0) {  // the first message: the receiver now waits for the next one
        scope.Awaiting(1, c, {.rank = 7, .op = "dp all-reduce", .peer = 0, .step = 3});
        return;
      }
      if (standard_exception) throw std::runtime_error("segment 2 of 4: bad length");
      throw 42;
    });
    ASSERT_TRUE(fabric.Post(0, ch, {.src = 0, .dst = 1, .ready = Nanos(10)}).ok());
    ASSERT_TRUE(fabric.Post(0, ch, {.src = 0, .dst = 1, .ready = Nanos(20)}).ok());
    EXPECT_EQ(handled, 0);
    fabric.Advance(2, Nanos(100));  // commits both on this thread; must not throw
    EXPECT_EQ(handled, 2);
    ASSERT_TRUE(fabric.aborted());
    const absl::Status s = fabric.abort_status();
    EXPECT_TRUE(absl::IsInternal(s)) << s;
    EXPECT_EQ(s.message(),
              absl::StrCat("rank 7 in op 'dp all-reduce' waiting for peer 0 at step 3: exception in "
                           "the handler of a message on channel ", ch, " from device 0: ",
                           standard_exception ? "segment 2 of 4: bad length" : "unknown exception"));
    EXPECT_EQ(told.calls, 1);
    EXPECT_EQ(told.receiver, 1);
    EXPECT_EQ(told.site_rank, 7);
    EXPECT_EQ(told.status, s);
    EXPECT_FALSE(told.aborted_already);
    // Every wait is released with it (the run fails there).
    EXPECT_EQ(fabric.Await(0, other, {.rank = 0, .op = "recv", .peer = 2}).status(), s);
  }
  // A receiver that never named a wait site is named by its LP id.
  auto f = Fabric::Create({.links = {}, .num_devices = 2, .tie_rank = {0, 1}});
  ASSERT_TRUE(f.ok());
  const ChannelId ch = (*f)->AddChannel(0, 1);
  (*f)->SetHandler(1, [](Fabric::Scope&, ChannelId, Delivery) -> void {
    throw std::length_error("vector");
  });
  ASSERT_TRUE((*f)->Post(0, ch, {.src = 0, .dst = 1, .ready = Nanos(5)}).ok());
  (*f)->Finish(0);
  ASSERT_TRUE((*f)->aborted());
  EXPECT_EQ((*f)->abort_status().message(),
            absl::StrCat("LP 1: exception in the handler of a message on channel ", ch,
                         " from device 0: vector"));
}

// Regression: channels made while an LP waits on another (lazily created p2p channels) must not
// move the channel it waits on.
TEST(Fabric, ChannelsAddedWhileAnLpWaitsKeepItsChannel) {
  auto f = Fabric::Create({.links = {}, .num_devices = 2, .tie_rank = {0, 1}});
  ASSERT_TRUE(f.ok());
  Fabric& fabric = **f;
  const ChannelId ch = fabric.AddChannel(0, 1);
  absl::StatusOr<Delivery> got;
  std::thread receiver([&] { got = fabric.Await(1, ch, {.rank = 1, .op = "recv"}); });
  while (fabric.Waits()[1].state != LpWait::State::kAwaitChannel) std::this_thread::yield();
  for (int i = 0; i < 4096; ++i) fabric.AddChannel(0, 1);
  ASSERT_TRUE(fabric.Post(0, ch, {.src = 0, .dst = 1, .bytes = 8, .ready = Nanos(5)}).ok());
  fabric.Finish(0);
  receiver.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->timing.arrival, Nanos(5));
}

TEST(Fabric, PostBeforeTheBoundIsRefused) {
  auto f = Fabric::Create({.links = {}, .num_devices = 2, .tie_rank = {0, 1}});
  ASSERT_TRUE(f.ok());
  const ChannelId ch = (*f)->AddChannel(0, 1);
  (*f)->Advance(0, Nanos(100));
  EXPECT_TRUE(absl::IsInvalidArgument(
      (*f)->Post(0, ch, {.src = 0, .dst = 1, .ready = Nanos(99)}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      (*f)->Post(1, ch, {.src = 0, .dst = 1, .ready = Nanos(200)}).status()));  // not its channel
}

}  // namespace
}  // namespace rp
