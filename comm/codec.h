// Wire codecs: how a segment of FP32 values is put on the wire (see docs/collectives.md).
//
//   kFp32  4 bytes per element, exact.
//   kFp16  2 bytes per element, IEEE binary16, round to nearest even. |x| >= 65520 is an overflow.
//   kBf16  2 bytes per element, bfloat16, round to nearest even. Rounding up past FLT_MAX overflows.
//   kInt8  1 byte per element + one 4-byte float scale per segment (a segment of 0 elements puts
//          nothing on the wire). The scale is a power of two, 2^e with e the smallest integer
//          >= -126 such that 127 * 2^e >= max|x|; q = round_to_nearest_even(x / 2^e) in [-127, 127].
//          |x| > 127 * 2^121 (kInt8MaxMagnitude, ~3.3748e38) is an overflow: its scale would be 2^122,
//          and 64 * 2^122 = 2^128 decodes to infinity.
//
// Guarantees (tested):
//   * Encode(Decode(Encode(x))) == Encode(x) byte for byte, for every codec (idempotence). A ring
//     that forwards a decoded value re-encodes exactly the bytes it received, which is how the
//     all-gather "forwards the encoded bytes unchanged" without holding them.
//   * Finite inputs never produce NaN/Inf: a value the codec cannot represent (FP16 beyond ±65504,
//     BF16 rounding to infinity, INT8 beyond ±kInt8MaxMagnitude) or a non-finite input is an
//     OutOfRange error naming the element;
//     the output is then unspecified. Sums in DecodeAdd that overflow FP32 are OutOfRange too.
//   * Per-quantization error bounds (|decode(encode(x)) - x|): FP32 0; FP16 <= 2^-11 |x| (normal
//     range) or 2^-25 (subnormal); BF16 <= 2^-8 |x| (or 2^-134 below 2^-126, where bfloat16 is
//     subnormal); INT8 <= 2^(e-1) < max|x| / 127 over the
//     segment (and <= 2^-127 absolutely when the segment's max is below 127 * 2^-126).
//
// Error feedback: EncodeWithFeedback adds a residual r to x before encoding and stores the new
// residual x + r - decode(encode(x + r)), so quantization error is carried to the next call instead
// of being lost.
//
// All functions are pure and thread-compatible. Kernels are built with -O3 (and F16C when the CPU
// has it, chosen at run time).
//
// Example:
//   std::vector<std::byte> wire(SegmentWireBytes(Codec::kInt8, n));
//   RP_RETURN_IF_ERROR(Encode(Codec::kInt8, x.data(), n, wire.data()));
//   Decode(Codec::kInt8, wire.data(), n, y.data());  // |y[i] - x[i]| < max|x| / 127
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace rp::comm {

enum class Codec : uint8_t { kFp32 = 0, kFp16 = 1, kBf16 = 2, kInt8 = 3 };

inline constexpr Codec kAllCodecs[] = {Codec::kFp32, Codec::kFp16, Codec::kBf16, Codec::kInt8};

// "fp32", "fp16", "bf16", "int8".
const char* CodecName(Codec codec);
// Inverse of CodecName; InvalidArgument naming the accepted values otherwise.
absl::StatusOr<Codec> ParseCodec(std::string_view name);

// Bytes of the INT8 per-segment scale.
inline constexpr uint64_t kInt8ScaleBytes = 4;
// The largest magnitude INT8 carries: q = 127 at the scale 2^121 (127 * 2^121). A segment whose max
// is above it would need the scale 2^122, where that max rounds to q = 64, which decodes to
// 64 * 2^122 = 2^128, infinity in FP32; Encode returns OutOfRange instead.
inline constexpr float kInt8MaxMagnitude = 0x1.fcp+127f;  // ~3.3748e38

// Bytes one segment of `elems` FP32 values occupies on the wire in `codec` (metadata included).
constexpr uint64_t SegmentWireBytes(Codec codec, uint64_t elems) {
  switch (codec) {
    case Codec::kFp32: return 4 * elems;
    case Codec::kFp16:
    case Codec::kBf16: return 2 * elems;
    case Codec::kInt8: return elems == 0 ? 0 : elems + kInt8ScaleBytes;
  }
  return 0;
}

// Encodes src[0, n) into wire[0, SegmentWireBytes(codec, n)). `wire` must be 4-byte aligned.
// OutOfRange("element i ...") on overflow or non-finite input (i relative to src).
// `first_index` is added to element indices in error messages (the segment's offset in its buffer).
[[nodiscard]] absl::Status Encode(Codec codec, const float* src, size_t n, std::byte* wire,
                                  uint64_t first_index = 0);

// As Encode, of src[i] + residual[i]; then residual[i] = src[i] + residual[i] - decoded[i].
[[nodiscard]] absl::Status EncodeWithFeedback(Codec codec, const float* src, size_t n,
                                              float* residual, std::byte* wire,
                                              uint64_t first_index = 0);

// dst[i] = decoded value i. Never fails on bytes produced by Encode.
void Decode(Codec codec, const std::byte* wire, size_t n, float* dst);

// dst[i] = src[i] with non-temporal (streaming) stores that bypass the caches: for large copies
// nobody reads soon, where a plain copy would also read every destination line first and evict
// data that is about to be read. Fenced (sfence) before returning. dst and src must not overlap.
void CopyStreaming(const float* src, size_t n, float* dst);

// dst[i] = a[i] + decoded value i (dst may alias a). OutOfRange("element i ...") when a sum is not
// finite.
[[nodiscard]] absl::Status DecodeAdd(Codec codec, const float* a, const std::byte* wire, size_t n,
                                     float* dst, uint64_t first_index = 0);

}  // namespace rp::comm
