#include "schedule/cost_model.h"

#include "gtest/gtest.h"

namespace rp::schedule {
namespace {

const LinkParams kLink{.alpha = FromMicros(10), .bandwidth_gbps = 1};  // 1 byte per ns

TEST(RingAllReduceCost, UnchunkedIsTwoNMinusOneTimesAlphaPlusSOverNBeta) {
  for (int n : {2, 3, 4, 8}) {
    const uint64_t elements = 840;  // divisible by every n above
    auto c = RingAllReduceCost(n, elements, kLink, {});
    ASSERT_TRUE(c.ok());
    const Nanos step = FromMicros(10) + Nanos(4 * elements / n);
    EXPECT_EQ(c->time, 2 * (n - 1) * step) << "n=" << n;
    // Every rank sends 2(n − 1)/n of the buffer.
    EXPECT_EQ(c->wire_bytes, 2u * (n - 1) * 4 * elements);
  }
}

TEST(RingAllReduceCost, NonDivisibleCountsPayForTheLargestChunk) {
  // 1001 elements over 4 ranks: chunks 251, 250, 250, 250.
  auto c = RingAllReduceCost(4, 1001, kLink, {});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->time, 6 * (FromMicros(10) + Nanos(4 * 251)));
  EXPECT_EQ(c->wire_bytes, 6u * 4 * 1001);
}

TEST(RingAllReduceCost, SegmentsPayAlphaEach) {
  // 1000 elements over 4: chunk 250 elements = 1000 bytes; 256-byte segments: 64, 64, 64, 58 elements.
  auto c = RingAllReduceCost(4, 1000, kLink, {.segment_bytes = 256});
  ASSERT_TRUE(c.ok());
  const Nanos step = 3 * (FromMicros(10) + Nanos(256)) + FromMicros(10) + Nanos(232);
  EXPECT_EQ(c->time, 6 * step);
}

TEST(RingAllReduceCost, CodecsShrinkTheWireAndInt8PaysAScalePerSegment) {
  auto bf16 = RingAllReduceCost(4, 1000, kLink, {.codec = Codec::kBf16});
  ASSERT_TRUE(bf16.ok());
  EXPECT_EQ(bf16->time, 6 * (FromMicros(10) + Nanos(500)));
  EXPECT_EQ(bf16->wire_bytes, 6u * 2 * 1000);
  // INT8, 400-byte (100-element) segments: chunk 250 elements = 100, 100, 50 (+4 bytes of scale each).
  auto i8 = RingAllReduceCost(4, 1000, kLink, {.segment_bytes = 400, .codec = Codec::kInt8});
  ASSERT_TRUE(i8.ok());
  EXPECT_EQ(i8->time, 6 * (3 * FromMicros(10) + Nanos(104 + 104 + 54)));
  EXPECT_EQ(i8->wire_bytes, 6u * 4 * (104 + 104 + 54));
}

TEST(RingAllReduceCost, ReductionPipelinesBehindTheNextSegment) {
  // 2 ranks, 1000 elements: chunk 500 elements = 2000 B in 4 segments of 500 B (125 elements, fp32).
  // Travel a = 10 µs + 500 ns per segment; reduce at 1 GB/s: 500 ns per segment (< a), so a
  // reduce-scatter step ends one reduction after the last segment arrives.
  const RingModel ring{.segment_bytes = 500, .reduce_gbps = 1};
  auto c = RingAllReduceCost(2, 1000, kLink, ring);
  ASSERT_TRUE(c.ok());
  const Nanos a = FromMicros(10) + Nanos(500);
  EXPECT_EQ(c->time, (4 * a + Nanos(500)) + 4 * a);
  // A slow reducer (1 MB/s: 500 µs per segment) becomes the bottleneck: a + 4 reductions.
  auto slow = RingAllReduceCost(2, 1000, kLink, {.segment_bytes = 500, .reduce_gbps = 0.001});
  ASSERT_TRUE(slow.ok());
  EXPECT_EQ(slow->time, (a + 4 * FromMicros(500)) + 4 * a);
}

TEST(RingAllReduceCost, TrivialAndInvalidInputs) {
  EXPECT_EQ(RingAllReduceCost(1, 1000, kLink, {})->time, Nanos(0));
  EXPECT_EQ(RingAllReduceCost(4, 0, kLink, {})->time, 6 * FromMicros(10));  // empty messages
  EXPECT_EQ(RingAllReduceCost(4, 0, kLink, {})->wire_bytes, 0u);
  EXPECT_EQ(RingAllReduceCost(0, 10, kLink, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RingAllReduceCost(2, 10, kLink, {.segment_bytes = 3}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // 3 elements over 4 ranks: one chunk is empty, the largest has 1 element.
  EXPECT_EQ(RingAllReduceCost(4, 3, kLink, {})->time, 6 * (FromMicros(10) + Nanos(4)));
}

TEST(CostModel, FromFlopsDividesByDeviceThroughput) {
  auto cm = CostModel::FromFlops({{.forward = 3.12e12, .backward = 6.24e12, .weight_grad = 3.12e12}}, 312);
  ASSERT_TRUE(cm.ok());
  EXPECT_EQ(cm->Of(5).forward, FromMillis(10));
  EXPECT_EQ(cm->Of(0).backward, FromMillis(20));
  EXPECT_EQ(cm->Of(0).weight_grad, FromMillis(10));
  EXPECT_EQ(CostModel::FromFlops({{}}, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CostModel::FromFlops({{.backward = 1, .weight_grad = 2}}, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rp::schedule
