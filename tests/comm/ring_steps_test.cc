#include "comm/ring_steps.h"

#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace rp::comm::ring {
namespace {

TEST(RingSteps, ChunksTileTheBufferAndDifferByAtMostOne) {
  for (int n = 1; n <= 9; ++n) {
    for (size_t count : {0u, 1u, 7u, 8u, 9u, 1009u}) {
      size_t next = 0, lo = count, hi = 0;
      for (int c = 0; c < n; ++c) {
        const Range r = ChunkRange(count, n, c);
        EXPECT_EQ(r.begin, next) << "n=" << n << " count=" << count << " c=" << c;
        next = r.end();
        lo = std::min(lo, r.size);
        hi = std::max(hi, r.size);
      }
      EXPECT_EQ(next, count);
      EXPECT_LE(hi - lo, 1u);
    }
  }
  EXPECT_EQ(ChunkRange(10, 4, 0), (Range{0, 3}));
  EXPECT_EQ(ChunkRange(10, 4, 1), (Range{3, 3}));
  EXPECT_EQ(ChunkRange(10, 4, 2), (Range{6, 2}));
  EXPECT_EQ(ChunkRange(10, 4, 3), (Range{8, 2}));
}

TEST(RingSteps, ReduceScatterVisitsEveryChunkOnceAndEndsAtItsOwner) {
  for (int n = 2; n <= 8; ++n) {
    for (int r = 0; r < n; ++r) {
      std::set<int> sent, received;
      for (int s = 0; s <= n - 2; ++s) {
        // What rank r receives at step s is what rank r - 1 sends at step s.
        EXPECT_EQ(ReduceScatterRecvChunk(n, r, s), ReduceScatterSendChunk(n, Mod(r - 1, n), s));
        // What rank r sends at step s + 1 is what it received (and reduced) at step s.
        if (s + 1 <= n - 2) {
          EXPECT_EQ(ReduceScatterSendChunk(n, r, s + 1), ReduceScatterRecvChunk(n, r, s));
        }
        sent.insert(ReduceScatterSendChunk(n, r, s));
        received.insert(ReduceScatterRecvChunk(n, r, s));
      }
      EXPECT_EQ(ReduceScatterRecvChunk(n, r, n - 2), r) << "rank r ends owning chunk r";
      EXPECT_EQ(sent.size(), static_cast<size_t>(n - 1));
      EXPECT_EQ(sent.count(r), 0u);
      EXPECT_EQ(received.count(Mod(r - 1, n)), 0u);
    }
  }
}

TEST(RingSteps, AllGatherStartsWithOwnChunkAndForwardsWhatItReceived) {
  for (int n = 2; n <= 8; ++n) {
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(AllGatherSendChunk(n, r, 0), r);
      std::set<int> received;
      for (int s = 0; s <= n - 2; ++s) {
        EXPECT_EQ(AllGatherRecvChunk(n, r, s), AllGatherSendChunk(n, Mod(r - 1, n), s));
        if (s + 1 <= n - 2) {
          EXPECT_EQ(AllGatherSendChunk(n, r, s + 1), AllGatherRecvChunk(n, r, s));
        }
        received.insert(AllGatherRecvChunk(n, r, s));
      }
      EXPECT_EQ(received.size(), static_cast<size_t>(n - 1));
      EXPECT_EQ(received.count(r), 0u);
    }
  }
}

TEST(RingSteps, SegmentsCoverAChunkAndEmptyChunksHaveOneEmptySegment) {
  EXPECT_EQ(NumSegments(0, 4), 1);
  EXPECT_EQ(NumSegments(1, 4), 1);
  EXPECT_EQ(NumSegments(8, 4), 2);
  EXPECT_EQ(NumSegments(9, 4), 3);
  const Range chunk{100, 9};
  EXPECT_EQ(SegmentRange(chunk, 4, 0), (Range{100, 4}));
  EXPECT_EQ(SegmentRange(chunk, 4, 1), (Range{104, 4}));
  EXPECT_EQ(SegmentRange(chunk, 4, 2), (Range{108, 1}));
  EXPECT_EQ(SegmentRange(Range{5, 0}, 4, 0).size, 0u);
}

TEST(RingSteps, AllReduceWireBytesIsTwoNMinusOneOverNOfTheBuffer) {
  for (int n = 1; n <= 8; ++n) {
    const size_t count = 840 * 16;  // divisible by 1..8
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(AllReduceWireBytes(Codec::kFp32, count, n, r, 1024),
                2 * static_cast<uint64_t>(n - 1) * count * 4 / n);
      EXPECT_EQ(AllReduceWireBytes(Codec::kFp16, count, n, r, 1024),
                2 * static_cast<uint64_t>(n - 1) * count * 2 / n);
    }
  }
  // Non-divisible: 10 elements over 4 ranks, chunks 3,3,2,2; rank 1 skips chunk 1 then chunk 2.
  EXPECT_EQ(AllReduceWireBytes(Codec::kFp32, 10, 4, 1, 1024), 4u * ((10 - 3) + (10 - 2)));
  // INT8: one 4-byte scale per non-empty segment. Chunks of 3,3,2,2 elements, segments of 2.
  // Rank 1 sends chunks {0,2,3} in the reduce-scatter: (3+8)+(2+4)+(2+4) = 23 bytes; chunks
  // {0,1,3} in the all-gather: 11+11+6 = 28 bytes.
  EXPECT_EQ(AllReduceWireBytes(Codec::kInt8, 10, 4, 1, 2), 23u + 28u);
  EXPECT_EQ(BroadcastWireBytes(Codec::kFp32, 10, 4, 3, 0, 4), 0u);
  EXPECT_EQ(BroadcastWireBytes(Codec::kFp32, 10, 4, 0, 0, 4), 40u);
}

}  // namespace
}  // namespace rp::comm::ring
