#include "comm/codec.h"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace rp::comm {
namespace {

std::vector<float> RandomFloats(size_t n, float scale, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

// Per-quantization bound of comm/codec.h for one value, given the segment's max |x|.
double Bound(Codec c, double x, double seg_max) {
  switch (c) {
    case Codec::kFp32: return 0;
    case Codec::kFp16: return std::max(std::fabs(x) * std::ldexp(1.0, -11), std::ldexp(1.0, -25));
    case Codec::kBf16: return std::fabs(x) * std::ldexp(1.0, -8);
    case Codec::kInt8: return std::max(seg_max / 127.0, std::ldexp(1.0, -127));
  }
  return 0;
}

class CodecTest : public ::testing::TestWithParam<Codec> {};

TEST_P(CodecTest, RoundTripIsWithinTheDocumentedBound) {
  const Codec c = GetParam();
  for (float scale : {1e-30f, 1e-3f, 1.0f, 1000.0f}) {
    const size_t n = 1003;
    const std::vector<float> x = RandomFloats(n, scale, 7);
    std::vector<std::byte> wire(SegmentWireBytes(c, n) + 8);
    ASSERT_TRUE(Encode(c, x.data(), n, wire.data()).ok());
    std::vector<float> y(n);
    Decode(c, wire.data(), n, y.data());
    double seg_max = 0;
    for (float v : x) seg_max = std::max(seg_max, std::fabs(double{v}));
    for (size_t i = 0; i < n; ++i) {
      ASSERT_TRUE(std::isfinite(y[i]));
      ASSERT_LE(std::fabs(double{y[i]} - x[i]), Bound(c, x[i], seg_max))
          << CodecName(c) << " scale " << scale << " element " << i;
    }
  }
}

TEST_P(CodecTest, ReEncodingADecodedValueGivesTheSameBytes) {
  const Codec c = GetParam();
  for (float scale : {1e-40f, 1e-3f, 1.0f, 60000.0f}) {
    const size_t n = 517;
    const std::vector<float> x = RandomFloats(n, scale, 11);
    const size_t bytes = SegmentWireBytes(c, n);
    std::vector<std::byte> w1(bytes), w2(bytes);
    ASSERT_TRUE(Encode(c, x.data(), n, w1.data()).ok());
    std::vector<float> y(n);
    Decode(c, w1.data(), n, y.data());
    ASSERT_TRUE(Encode(c, y.data(), n, w2.data()).ok());
    EXPECT_EQ(std::memcmp(w1.data(), w2.data(), bytes), 0) << CodecName(c) << " scale " << scale;
  }
}

TEST_P(CodecTest, DecodeAddEqualsDecodeThenAdd) {
  const Codec c = GetParam();
  const size_t n = 333;
  const std::vector<float> x = RandomFloats(n, 2.0f, 3), a = RandomFloats(n, 5.0f, 4);
  std::vector<std::byte> wire(SegmentWireBytes(c, n));
  ASSERT_TRUE(Encode(c, x.data(), n, wire.data()).ok());
  std::vector<float> y(n), sum(n);
  Decode(c, wire.data(), n, y.data());
  ASSERT_TRUE(DecodeAdd(c, a.data(), wire.data(), n, sum.data()).ok());
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(sum[i], a[i] + y[i]);
}

TEST_P(CodecTest, NonFiniteInputIsOutOfRangeNamingTheElement) {
  const Codec c = GetParam();
  std::vector<float> x(10, 1.0f);
  x[6] = INFINITY;
  std::vector<std::byte> wire(SegmentWireBytes(c, 10));
  const absl::Status s = Encode(c, x.data(), 10, wire.data(), 100);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("element 106"), std::string::npos) << s;
}

TEST_P(CodecTest, FeedbackResidualCarriesTheQuantizationError) {
  const Codec c = GetParam();
  const size_t n = 257;
  const std::vector<float> x = RandomFloats(n, 1.0f, 5);
  std::vector<float> residual(n, 0.0f), y(n);
  std::vector<std::byte> wire(SegmentWireBytes(c, n));
  ASSERT_TRUE(EncodeWithFeedback(c, x.data(), n, residual.data(), wire.data()).ok());
  Decode(c, wire.data(), n, y.data());
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(residual[i], x[i] - y[i]);
}

INSTANTIATE_TEST_SUITE_P(AllCodecs, CodecTest, ::testing::ValuesIn(kAllCodecs),
                         [](const auto& p) { return std::string(CodecName(p.param)); });

TEST(Codec, Fp16OverflowIsOutOfRange) {
  const float x[3] = {1.0f, 65504.0f, 65520.0f};
  std::byte wire[6];
  const absl::Status s = Encode(Codec::kFp16, x, 3, wire);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("element 2"), std::string::npos) << s;
  EXPECT_TRUE(Encode(Codec::kFp16, x, 2, wire).ok()) << "65504 is the largest fp16";
}

// INT8's largest scale that decodes finitely is 2^121 (q = 127 gives 127 * 2^121). A larger max
// needs 2^122, where the max rounds to q = 64 and 64 * 2^122 = 2^128 is infinity: an overflow.
TEST(Codec, Int8BeyondItsLargestMagnitudeIsOutOfRangeNotInfinity) {
  ASSERT_EQ(double{kInt8MaxMagnitude}, 127.0 * std::ldexp(1.0, 121));
  std::byte wire[8 + kInt8ScaleBytes];
  float y[8];
  // The largest magnitude itself round-trips exactly, with either sign.
  const float edge[2] = {kInt8MaxMagnitude, -kInt8MaxMagnitude};
  ASSERT_TRUE(Encode(Codec::kInt8, edge, 2, wire).ok());
  Decode(Codec::kInt8, wire, 2, y);
  EXPECT_EQ(y[0], kInt8MaxMagnitude);
  EXPECT_EQ(y[1], -kInt8MaxMagnitude);
  // Anything above it, up to FLT_MAX, used to encode "OK" and decode to +-inf.
  for (const float big : {std::nextafter(kInt8MaxMagnitude, INFINITY), 3.39e38f, -3.39e38f, FLT_MAX,
                          -FLT_MAX}) {
    const float x[4] = {1.0f, kInt8MaxMagnitude, big, 2.0f};
    absl::Status s = Encode(Codec::kInt8, x, 4, wire);
    EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << big << ": " << s;
    EXPECT_NE(s.message().find("element 2"), std::string::npos) << s;
    EXPECT_NE(s.message().find("outside the int8 range"), std::string::npos) << s;
    s = Encode(Codec::kInt8, x, 4, wire, 100);  // named by its index in the whole buffer
    EXPECT_NE(s.message().find("element 102"), std::string::npos) << s;
    std::vector<float> residual(4, 0.0f);
    s = EncodeWithFeedback(Codec::kInt8, x, 4, residual.data(), wire, 40);
    EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
    EXPECT_NE(s.message().find("element 42"), std::string::npos) << s;
  }
}

TEST(Codec, Fp32SumOverflowIsOutOfRange) {
  const float a[2] = {1.0f, 3e38f}, b[2] = {1.0f, 3e38f};
  float out[2];
  const absl::Status s =
      DecodeAdd(Codec::kFp32, a, reinterpret_cast<const std::byte*>(b), 2, out, 10);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("element 11"), std::string::npos) << s;
}

// The vectorised FP32 path (32 floats per iteration) and its scalar tail: an overflow, an Inf and a
// NaN anywhere are reported with the index of the first bad sum; finite sums give the scalar bits.
TEST(Codec, Fp32DecodeAddFindsEveryNonFiniteSumInVectorBodyAndTail) {
  const size_t n = 1000;  // 31 vector iterations + a tail of 8
  const std::vector<float> a = RandomFloats(n, 5.0f, 11), b = RandomFloats(n, 5.0f, 12);
  std::vector<float> out(n);
  ASSERT_TRUE(DecodeAdd(Codec::kFp32, a.data(), reinterpret_cast<const std::byte*>(b.data()), n,
                        out.data())
                  .ok());
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] + b[i]) << "element " << i;
  for (size_t bad : {size_t{0}, size_t{517}, size_t{991}, size_t{999}}) {
    for (float v : {3e38f, INFINITY, NAN}) {
      std::vector<float> x = a, y = b;
      x[bad] = v;
      y[bad] = v == 3e38f ? 3e38f : 1.0f;
      const absl::Status s = DecodeAdd(Codec::kFp32, x.data(),
                                       reinterpret_cast<const std::byte*>(y.data()), n,
                                       out.data(), 100);
      EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << "bad " << bad << " value " << v;
      EXPECT_NE(s.message().find(absl::StrCat("element ", 100 + bad)), std::string::npos) << s;
    }
  }
}

TEST(Codec, CopyStreamingCopiesEveryAlignmentAndLength) {
  std::vector<float> src(10000 + 8), dst(10000 + 8);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) * 0.5f - 7.0f;
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{15}, size_t{16}, size_t{17},
                     size_t{63}, size_t{1000}, size_t{10000}}) {
      std::fill(dst.begin(), dst.end(), -1.0f);
      CopyStreaming(src.data() + (7 - offset), n, dst.data() + offset);
      for (size_t i = 0; i < dst.size(); ++i) {
        const bool inside = i >= offset && i < offset + n;
        const float want = inside ? src[7 - offset + (i - offset)] : -1.0f;
        ASSERT_EQ(dst[i], want) << "offset " << offset << " n " << n << " index " << i;
      }
    }
  }
}

TEST(Codec, WireBytesCountTheInt8Scale) {
  EXPECT_EQ(SegmentWireBytes(Codec::kFp32, 10), 40u);
  EXPECT_EQ(SegmentWireBytes(Codec::kFp16, 10), 20u);
  EXPECT_EQ(SegmentWireBytes(Codec::kBf16, 10), 20u);
  EXPECT_EQ(SegmentWireBytes(Codec::kInt8, 10), 14u);
  EXPECT_EQ(SegmentWireBytes(Codec::kInt8, 0), 0u);
}

TEST(Codec, ParseCodecRejectsUnknownNames) {
  EXPECT_EQ(*ParseCodec("bf16"), Codec::kBf16);
  EXPECT_EQ(ParseCodec("fp8").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rp::comm

namespace rp::comm {
namespace {

// Empty spans of empty vectors hold null pointers; a 0-element segment must not hand them to
// memcpy/memmove (undefined behaviour that UBSan reports, found by `ringpipe stress` under ASan).
TEST(Codec, ZeroElementsWithNullPointersIsANoOp) {
  for (Codec c : kAllCodecs) {
    EXPECT_TRUE(Encode(c, nullptr, 0, nullptr).ok()) << CodecName(c);
    Decode(c, nullptr, 0, nullptr);
    EXPECT_EQ(SegmentWireBytes(c, 0), 0u);
  }
}

}  // namespace
}  // namespace rp::comm
