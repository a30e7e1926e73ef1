// FabricModel: golden cases of DESIGN.md "The fabric" (ports, NICs, latency pipelining, faults).
#include "runtime/fabric_model.h"

#include "gtest/gtest.h"
#include "runtime/timing.h"

namespace rp {
namespace {

// A DGX-like spec with round numbers: intra 1 µs + 100 GB/s + o 200 ns, inter 5 µs + 10 GB/s + o 1 µs.
LinkSpec Spec(int nics_per_node = 0) {
  LinkSpec s;
  s.intra_node = {.alpha = Nanos(1000), .bandwidth_gbps = 100, .overhead = Nanos(200)};
  s.inter_node = {.alpha = Nanos(5000), .bandwidth_gbps = 10, .overhead = Nanos(1000)};
  s.devices_per_node = 8;
  s.nics_per_node = nics_per_node;
  return s;
}

constexpr uint64_t kBytes = 1'000'000;             // 100 µs at 10 GB/s, 10 µs at 100 GB/s
constexpr Nanos kInterHold = Nanos(1000 + 100000);  // o + S/β
constexpr Nanos kIntraHold = Nanos(200 + 10000);
constexpr Nanos kT = Nanos(7777);

TEST(FabricModel, OneMessageTakesOverheadTransferAndLatency) {
  auto f = FabricModel::Create(Spec(), 16);
  ASSERT_TRUE(f.ok()) << f.status();
  const MessageTiming t = f->Commit({.src = 0, .dst = 8, .bytes = kBytes, .ready = kT});
  EXPECT_EQ(t.link_class, LinkClass::kInterNode);
  EXPECT_EQ(t.start, kT);
  EXPECT_EQ(t.last_byte, kT + kInterHold);
  EXPECT_EQ(t.arrival, kT + kInterHold + Nanos(5000));
}

TEST(FabricModel, TwoMessagesIntoOneSharedNicSerialize) {
  auto f = FabricModel::Create(Spec(/*nics_per_node=*/1), 16);
  ASSERT_TRUE(f.ok());
  const MessageTiming a = f->Commit({.src = 0, .dst = 8, .bytes = kBytes, .ready = kT});
  const MessageTiming b = f->Commit({.src = 1, .dst = 9, .bytes = kBytes, .ready = kT});
  EXPECT_EQ(a.arrival, kT + kInterHold + Nanos(5000));
  // The golden case of issue 11: the second arrives 2(o + S/β) + α after both are ready.
  EXPECT_EQ(b.arrival, kT + 2 * kInterHold + Nanos(5000));
  EXPECT_EQ(b.queued(), kInterHold);
  EXPECT_EQ(a.egress_port, b.egress_port);
}

TEST(FabricModel, RailOptimizedNicsDoNotContend) {
  auto f = FabricModel::Create(Spec(/*nics_per_node=*/0), 16);
  ASSERT_TRUE(f.ok());
  const MessageTiming a = f->Commit({.src = 0, .dst = 8, .bytes = kBytes, .ready = kT});
  const MessageTiming b = f->Commit({.src = 1, .dst = 9, .bytes = kBytes, .ready = kT});
  EXPECT_EQ(a.arrival, b.arrival);
  EXPECT_NE(a.egress_port, b.egress_port);
}

TEST(FabricModel, TwoNicsPerNodeShareByHalves) {
  auto f = FabricModel::Create(Spec(/*nics_per_node=*/2), 16);
  ASSERT_TRUE(f.ok());
  // Devices 0-3 use NIC 0, devices 4-7 NIC 1.
  const MessageTiming a = f->Commit({.src = 3, .dst = 8, .bytes = kBytes, .ready = kT});
  const MessageTiming b = f->Commit({.src = 4, .dst = 12, .bytes = kBytes, .ready = kT});
  const MessageTiming c = f->Commit({.src = 0, .dst = 13, .bytes = kBytes, .ready = kT});
  EXPECT_EQ(a.arrival, b.arrival);
  EXPECT_EQ(c.start, kT + kInterHold);  // NIC 0 busy with a
}

TEST(FabricModel, BackToBackMessagesPipelineTheirLatency) {
  auto f = FabricModel::Create(Spec(), 16);
  ASSERT_TRUE(f.ok());
  const MessageTiming a = f->Commit({.src = 0, .dst = 8, .bytes = kBytes, .ready = kT});
  const MessageTiming b = f->Commit({.src = 0, .dst = 8, .bytes = kBytes, .ready = kT});
  EXPECT_EQ(b.arrival - a.arrival, kInterHold);  // not kInterHold + α
}

TEST(FabricModel, IntraNodePortsArePerDevice) {
  auto f = FabricModel::Create(Spec(), 8);
  ASSERT_TRUE(f.ok());
  const MessageTiming a = f->Commit({.src = 0, .dst = 1, .bytes = kBytes, .ready = kT});
  const MessageTiming b = f->Commit({.src = 2, .dst = 3, .bytes = kBytes, .ready = kT});
  const MessageTiming c = f->Commit({.src = 4, .dst = 1, .bytes = kBytes, .ready = kT});
  const MessageTiming d = f->Commit({.src = 0, .dst = 5, .bytes = kBytes, .ready = kT});
  EXPECT_EQ(a.arrival, kT + kIntraHold + Nanos(1000));
  EXPECT_EQ(b.arrival, a.arrival);                  // other ports: no contention
  EXPECT_EQ(c.start, kT + kIntraHold);              // device 1's ingress was busy
  EXPECT_EQ(d.start, kT + kIntraHold);              // device 0's egress was busy
}

TEST(FabricModel, LinkClassesHaveSeparatePorts) {
  auto f = FabricModel::Create(Spec(), 16);
  ASSERT_TRUE(f.ok());
  const MessageTiming a = f->Commit({.src = 0, .dst = 1, .bytes = kBytes, .ready = kT});
  const MessageTiming b = f->Commit({.src = 0, .dst = 8, .bytes = kBytes, .ready = kT});
  EXPECT_EQ(a.start, kT);
  EXPECT_EQ(b.start, kT);
}

TEST(FabricModel, PortsServeInCommitOrderEvenIfAlaterMessageWasReadyEarlier) {
  auto f = FabricModel::Create(Spec(), 16);
  ASSERT_TRUE(f.ok());
  const MessageTiming a = f->Commit({.src = 0, .dst = 8, .bytes = kBytes, .ready = Nanos(0)});
  // Ready before a's last byte: waits (FIFO), never slots in before a.
  const MessageTiming b = f->Commit({.src = 0, .dst = 9, .bytes = 0, .ready = Nanos(10)});
  EXPECT_EQ(b.start, a.last_byte);
  EXPECT_EQ(b.last_byte, a.last_byte + Nanos(1000));  // o alone
}

TEST(FabricModel, SelfMessagesAreFree) {
  auto f = FabricModel::Create(Spec(), 16);
  ASSERT_TRUE(f.ok());
  const MessageTiming t = f->Commit({.src = 3, .dst = 3, .bytes = kBytes, .ready = kT});
  EXPECT_EQ(t.arrival, kT);
  EXPECT_EQ(t.egress_port, -1);
}

TEST(FabricModel, FaultFactorsScaleOccupancyAndLatencyFromTheirStep) {
  auto f = FabricModel::Create(Spec(), 16,
                               {{.src = 0, .dst = 8, .factor = 2.0, .from_step = 0},
                                {.src = 1, .dst = 9, .factor = 3.0, .from_step = 2}});
  ASSERT_TRUE(f.ok());
  const MessageTiming a = f->Commit({.src = 0, .dst = 8, .bytes = kBytes, .ready = kT});
  EXPECT_EQ(a.arrival, kT + 2 * kInterHold + 2 * Nanos(5000));
  const MessageTiming before = f->Uncontended({.src = 1, .dst = 9, .bytes = kBytes, .ready = kT,
                                               .step = 1});
  const MessageTiming after = f->Uncontended({.src = 1, .dst = 9, .bytes = kBytes, .ready = kT,
                                              .step = 2});
  EXPECT_EQ(before.arrival, kT + kInterHold + Nanos(5000));
  EXPECT_EQ(after.arrival, kT + 3 * kInterHold + 3 * Nanos(5000));
  // The reverse direction is healthy.
  EXPECT_EQ(f->FactorOf(8, 0, 5), 1.0);
}

TEST(FabricModel, RejectsBadSpecsNamingTheField) {
  EXPECT_NE(FabricModel::Create(Spec(/*nics_per_node=*/3), 16).status().message().find(
                "nics_per_node"),
            std::string::npos);
  LinkSpec s = Spec();
  s.inter_node.overhead = Nanos(-1);
  EXPECT_FALSE(FabricModel::Create(s, 16).ok());
  EXPECT_FALSE(FabricModel::Create(Spec(), 16, {{.src = 0, .dst = 0, .factor = 2}}).ok());
  EXPECT_FALSE(FabricModel::Create(Spec(), 16, {{.src = 0, .dst = 1, .factor = 0.5}}).ok());
}

TEST(Timing, ShareEndCutsExactlyAndMonotonically) {
  const Nanos d(1'000'003);
  const uint64_t weights[] = {3, 5, 0, 7, 11};
  uint64_t total = 0;
  for (uint64_t w : weights) total += w;
  uint64_t done = 0;
  Nanos prev(0);
  for (uint64_t w : weights) {
    done += w;
    const Nanos e = ShareEnd(d, done, total);
    EXPECT_GE(e, prev);
    prev = e;
  }
  EXPECT_EQ(prev, d);
  EXPECT_EQ(ShareEnd(Nanos(10), 1, 3), Nanos(3));   // 3.33 -> 3
  EXPECT_EQ(ShareEnd(Nanos(10), 2, 3), Nanos(7));   // 6.67 -> 7
  EXPECT_EQ(ShareEnd(Nanos(10), 1, 4), Nanos(3));   // 2.5 -> 3 (halves up)
}

TEST(Timing, SaturatesInsteadOfWrapping) {
  EXPECT_TRUE(IsSaturated(RoundNanos(1e30)));
  EXPECT_TRUE(IsSaturated(SaturatingAdd(Nanos(kMaxModeledNs - 1), Nanos(kMaxModeledNs - 1))));
  EXPECT_EQ(SaturatingAdd(Nanos(5), Nanos(-7)), Nanos(-2));
  EXPECT_EQ(ScaleDuration(Nanos(3), 1.5), Nanos(5));  // 4.5 -> 5
  EXPECT_EQ(ScaleDuration(Nanos(3), 1.0), Nanos(3));
}

}  // namespace
}  // namespace rp
