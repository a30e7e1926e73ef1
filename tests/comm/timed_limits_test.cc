// A timed ring's failures and size limits: a missing peer times out naming it, a value beyond INT8's
// range is OutOfRange (not a silent infinity), and modeled sizes past an int's segments are refused.
#include <cmath>
#include <cstdint>
#include <vector>

#include "comm/collectives.h"
#include "comm/ring_timing.h"
#include "gtest/gtest.h"
#include "tests/comm/timed_helpers.h"

namespace rp::comm {
namespace {

TEST(TimedRing, AMissingPeerTimesOutNamingIt) {
  auto fabric = MakeFabric(2, 8, Spec());
  auto comm = MakeTimed(fabric.get(), {0, 1}, {0, 1});
  std::vector<float> v(100, 1.0f);
  auto res = comm->rank(0).AllReduce(v, v, {.timeout = std::chrono::milliseconds(50)});
  ASSERT_EQ(res.status().code(), absl::StatusCode::kDeadlineExceeded) << res.status();
  EXPECT_NE(res.status().message().find("waiting for rank 1"), std::string::npos) << res.status();
  EXPECT_TRUE(fabric->aborted()) << "a failed timed group aborts its fabric";
}

// The timed ring (RingMachine) encodes through the same codec: a finite value beyond INT8's largest
// magnitude on the rank that owns its chunk used to reach every rank as infinity with an OK status.
TEST(TimedRing, Int8ValueBeyondItsRangeIsOutOfRangeNotASilentInfinity) {
  auto fabric = MakeFabric(2, 8, Spec());
  auto comm = MakeTimed(fabric.get(), {0, 1}, {0, 1});
  std::vector<std::vector<float>> out(2, std::vector<float>(4, 0.0f));
  auto st = RunThreads(2, [&](int r) -> absl::Status {
    std::vector<float> in = {1.0f, 2.0f, 3.0f, 4.0f};
    if (r == 0) in[1] = 3.39e38f;  // chunk 0 = elements 0..1, owned by rank 0
    auto res = comm->rank(r).AllReduce(in, out[static_cast<size_t>(r)], {.codec = Codec::kInt8},
                                       kStart);
    fabric->Finish(r);
    return res.status();
  });
  const absl::Status first = comm->abort_status();
  EXPECT_EQ(first.code(), absl::StatusCode::kOutOfRange) << first;
  EXPECT_NE(first.message().find("element 1"), std::string::npos) << first;
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_FALSE(st[r].ok()) << "rank " << r;
    for (float v : out[r]) EXPECT_FALSE(std::isinf(v)) << "rank " << r;
  }
}

// Segments are ints: a modeled chunk of 2^32 segments (2^33 elements in 4-byte segments on 2 ranks)
// wrapped to 0 segments, and the all-reduce returned OK having sent nothing, its output untouched;
// 2^31 + 3 segments wrapped negative (std::length_error). Create refuses both, naming the field.
TEST(TimedRing, ModeledChunksOfMoreThanIntMaxSegmentsAreInvalidArgument) {
  for (const uint64_t elements : {uint64_t{1} << 33, (uint64_t{1} << 32) + 6}) {
    auto fabric = MakeFabric(2, 8, Spec());
    auto comm = MakeTimed(fabric.get(), {0, 1}, {0, 1});
    auto st = RunThreads(2, [&](int r) -> absl::Status {
      std::vector<float> in(4, 1.0f), out(4, -7.0f);
      auto res = comm->rank(r).AllReduce(in, out, {.segment_bytes = 4, .model = {.elements = elements}},
                                         kStart);
      fabric->Finish(r);
      return res.status();
    });
    for (const absl::Status& s : st) {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << elements << ": " << s;
      EXPECT_NE(s.message().find("model.elements"), std::string::npos) << s;
    }
  }
  // Just below the limit is accepted by Create (not run: 2^31 - 1 messages).
  auto fabric = MakeFabric(2, 8, Spec());
  auto comm = MakeTimed(fabric.get(), {0, 1}, {0, 1});
  std::vector<float> v(4, 1.0f);
  EXPECT_TRUE(RingAllReduce::Create(&comm->rank(0), v, v,
                                    {.segment_bytes = 4, .model = {.elements = (uint64_t{1} << 32) - 2}})
                  .ok());
}

// The modeled chunk is ceil(M / n) without overflow for any M (it wrapped to 0 near 2^64).
TEST(TimedShape, RingChunkOfAHugeModeledCountDoesNotWrap) {
  const uint64_t m = ~uint64_t{0} - 1;
  const ring::TimedShape s = ring::TimedShape::Ring(3, m, 1 << 20, Codec::kFp32, 0);
  EXPECT_EQ(s.chunk_elems, m / 3 + 1);
}

}  // namespace
}  // namespace rp::comm
