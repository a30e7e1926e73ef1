// Link presets: the documented α, β and o of each (docs/runtime.md "Link presets").
#include "runtime/link_models.h"

#include "gtest/gtest.h"

namespace rp {
namespace {

TEST(LinkPresets, DgxA100IsNvlink3InsideAndHdrBetweenNodes) {
  auto spec = LinkSpecByName("dgx-a100");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->devices_per_node, 8);
  EXPECT_EQ(spec->nics_per_node, 0);  // one NIC per GPU (rail-optimized)
  EXPECT_EQ(spec->intra_node, (LinkParams{FromMicros(3), 300, FromMicros(0.4)}));
  EXPECT_EQ(spec->inter_node, (LinkParams{FromMicros(5), 25, FromMicros(3)}));
}

TEST(LinkPresets, DgxH100IsNvlink4InsideAndNdrBetweenNodes) {
  auto spec = LinkSpecByName("dgx-h100");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->intra_node, (LinkParams{FromMicros(3), 450, FromMicros(0.4)}));
  EXPECT_EQ(spec->inter_node, (LinkParams{FromMicros(5), 50, FromMicros(3)}));
}

TEST(LinkPresets, IdealIsFreeAndUnknownNamesAreRefused) {
  auto ideal = LinkSpecByName("ideal");
  ASSERT_TRUE(ideal.ok());
  EXPECT_EQ(ideal->intra_node.Duration(1 << 30), Nanos(0));
  EXPECT_EQ(ideal->inter_node.Duration(1 << 30), Nanos(0));
  const absl::Status s = LinkSpecByName("dgx-b200").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("dgx-a100"), std::string::npos);
}

TEST(LinkParams, DurationIsOverheadTransferAndLatency) {
  const LinkParams p{.alpha = Nanos(1000), .bandwidth_gbps = 2, .overhead = Nanos(300)};
  EXPECT_EQ(p.Duration(1000), Nanos(300 + 500 + 1000));
}

}  // namespace
}  // namespace rp
