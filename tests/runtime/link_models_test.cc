// Tests of rp::AlphaBetaLinkModel: closed-form α–β times and exact contention.
#include "gtest/gtest.h"
#include "runtime/link_models.h"

namespace rp {
namespace {

// α = 1 µs, β = 1 GB/s (1 byte per ns) inside a node; α = 10 µs, β = 0.5 GB/s between nodes.
LinkSpec TestSpec() {
  return LinkSpec{LinkParams{FromMicros(1), 1.0}, LinkParams{FromMicros(10), 0.5}, 2};
}

TEST(AlphaBetaLinkModel, SingleMessageIsAlphaPlusBytesOverBeta) {
  auto links = AlphaBetaLinkModel::Create(TestSpec(), 4).value();
  EXPECT_EQ(links->Transmit(0, 1, Nanos(100), 1000), Nanos(100 + 1000 + 1000));
  EXPECT_EQ(links->Transmit(0, 2, Nanos(0), 1000), Nanos(10000 + 2000));  // inter-node
  EXPECT_EQ(links->Transmit(3, 3, Nanos(42), 1 << 20), Nanos(42));        // self: free
}

TEST(AlphaBetaLinkModel, TwoTransfersOnOneLinkSerialize) {
  auto links = AlphaBetaLinkModel::Create(TestSpec(), 4).value();
  // Both ready at t = 0 on 0→1: the second starts when the first's bytes are on the wire.
  EXPECT_EQ(links->Transmit(0, 1, Nanos(0), 5000), Nanos(1000 + 5000));
  EXPECT_EQ(links->Transmit(0, 1, Nanos(0), 5000), Nanos(1000 + 10000));
  // The reverse direction and another pair are separate links.
  EXPECT_EQ(links->Transmit(1, 0, Nanos(0), 5000), Nanos(6000));
  // A transfer ready after the link freed is not delayed.
  EXPECT_EQ(links->Transmit(0, 1, Nanos(20000), 100), Nanos(20000 + 1000 + 100));
}

TEST(AlphaBetaLinkModel, InterNodeTransfersShareTheDeviceNic) {
  auto links = AlphaBetaLinkModel::Create(TestSpec(), 4).value();
  // 0→2 and 0→3 leave through device 0's NIC: serialized (2000 ns of wire each).
  EXPECT_EQ(links->Transmit(0, 2, Nanos(0), 1000), Nanos(12000));
  EXPECT_EQ(links->Transmit(0, 3, Nanos(0), 1000), Nanos(14000));
  // 1→2 enters device 2's NIC, busy until 2000: starts then.
  EXPECT_EQ(links->Transmit(1, 2, Nanos(0), 1000), Nanos(14000));
  // 1→3: device 1 egress free since 4000 (used 2000..4000), device 3 ingress busy until 4000.
  EXPECT_EQ(links->Transmit(1, 3, Nanos(0), 1000), Nanos(16000));
}

TEST(AlphaBetaLinkModel, DegradedLinkMultipliesOnlyThatLink) {
  auto links = AlphaBetaLinkModel::Create(TestSpec(), 4, {{.src = 0, .dst = 1, .factor = 3}})
                   .value();
  EXPECT_EQ(links->Transmit(0, 1, Nanos(0), 1000), Nanos(3 * 2000));
  EXPECT_EQ(links->Transmit(1, 0, Nanos(0), 1000), Nanos(2000));
  EXPECT_EQ(links->UncontendedTime(0, 1, 1000), Nanos(6000));
  EXPECT_DOUBLE_EQ(links->FactorOf(0, 1), 3.0);
  EXPECT_DOUBLE_EQ(links->FactorOf(2, 3), 1.0);
}

TEST(AlphaBetaLinkModel, RejectsBadSpecAndFaults) {
  LinkSpec bad = TestSpec();
  bad.devices_per_node = 0;
  EXPECT_EQ(AlphaBetaLinkModel::Create(bad, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  bad = TestSpec();
  bad.inter_node.bandwidth_gbps = -1;
  EXPECT_EQ(AlphaBetaLinkModel::Create(bad, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AlphaBetaLinkModel::Create(TestSpec(), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AlphaBetaLinkModel::Create(TestSpec(), 4, {{.src = 0, .dst = 9, .factor = 2}})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AlphaBetaLinkModel::Create(TestSpec(), 4, {{.src = 0, .dst = 1, .factor = 0.5}})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LinkPresets, DocumentedValues) {
  EXPECT_EQ(DgxA100().devices_per_node, 8);
  EXPECT_DOUBLE_EQ(DgxA100().intra_node.bandwidth_gbps, 300.0);
  EXPECT_DOUBLE_EQ(DgxA100().inter_node.bandwidth_gbps, 25.0);
  EXPECT_DOUBLE_EQ(DgxH100().intra_node.bandwidth_gbps, 450.0);
  EXPECT_DOUBLE_EQ(DgxH100().inter_node.bandwidth_gbps, 50.0);
  // 1 MB over HDR: 5 µs + 1e6 B / 25 GB/s = 5 µs + 40 µs.
  EXPECT_EQ(InfinibandHdr().Duration(1000000), FromMicros(45));
  EXPECT_TRUE(LinkSpecByName("dgx-h100").ok());
  EXPECT_EQ(LinkSpecByName("dgx-z").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rp
