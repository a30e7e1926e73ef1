// Codec kernels. Built with -O3 (ringpipe_hot_sources); FP16 uses F16C/AVX2 when the CPU has them.
#include "comm/codec.h"

#include <cpuid.h>

#include <immintrin.h>

#include <cfloat>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rp::comm {
namespace {

inline uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

absl::Status EncodeError(Codec codec, uint64_t i, float v) {
  return absl::OutOfRangeError(absl::StrFormat(
      "element %d: value %g is %s", i, v,
      std::isfinite(v) ? absl::StrCat("outside the ", CodecName(codec), " range")
                       : std::string("not finite")));
}

// First index in [0, n) whose value is not finite (n if none).
size_t FirstNonFinite(const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) return i;
  }
  return n;
}

// ---- FP32 ----

// dst = a + b; returns true if every sum is finite.
bool AddChecked(const float* a, const float* b, size_t n, float* dst) {
  int bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const float s = a[i] + b[i];
    dst[i] = s;
    bad |= !(std::fabs(s) <= FLT_MAX);
  }
  return bad == 0;
}

// ---- FP16 (round to nearest even; F. Giesen's float_to_half_fast3_rtne) ----

inline uint16_t FloatToHalf(float value) {
  uint32_t f = Bits(value);
  const uint32_t sign = f & 0x80000000u;
  f ^= sign;
  uint32_t o;
  if (f >= (127u + 16u) << 23) {  // >= 65536, Inf or NaN
    o = f > (255u << 23) ? 0x7e00u : 0x7c00u;
  } else if (f < (113u << 23)) {  // half subnormal or zero
    const float denorm_magic = FromBits(((127u - 15u) + (23u - 10u) + 1u) << 23);
    o = Bits(FromBits(f) + denorm_magic) - Bits(denorm_magic);
  } else {
    const uint32_t mant_odd = (f >> 13) & 1u;
    f += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu;
    f += mant_odd;
    o = f >> 13;
  }
  return static_cast<uint16_t>(o | (sign >> 16));
}

inline float HalfToFloat(uint16_t h) {
  const uint32_t shifted_exp = 0x7c00u << 13;
  uint32_t o = (static_cast<uint32_t>(h) & 0x7fffu) << 13;
  const uint32_t exp = shifted_exp & o;
  o += (127u - 15u) << 23;
  float f;
  if (exp == shifted_exp) {
    o += (128u - 16u) << 23;
    f = FromBits(o);
  } else if (exp == 0) {
    o += 1u << 23;
    f = FromBits(o) - FromBits(113u << 23);
  } else {
    f = FromBits(o);
  }
  return FromBits(Bits(f) | ((static_cast<uint32_t>(h) & 0x8000u) << 16));
}

bool HasF16c() {
  // cpuid leaf 1, ECX bit 29 = F16C (clang 14's __builtin_cpu_supports does not know "f16c").
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
    return (ecx & (1u << 29)) != 0 && __builtin_cpu_supports("avx2");
  }();
  return has;
}

// AddChecked with AVX: the same IEEE sums (no FMA, same bits), 32 floats per iteration, and the
// finiteness check folded into one vector accumulator (s - s is 0 for finite s, NaN otherwise),
// so the loop stays as cheap as a plain dst[i] = a[i] + b[i] (SSE GCC code of AddChecked was
// ~15 % slower than the plain ring's loop in perf profiles).
__attribute__((target("avx2"))) bool AddCheckedAvx2(const float* a, const float* b, size_t n,
                                                    float* dst) {
  size_t i = 0;
  __m256 acc = _mm256_setzero_ps();
  for (; i + 32 <= n; i += 32) {
    const __m256 s0 = _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
    const __m256 s1 = _mm256_add_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8));
    const __m256 s2 = _mm256_add_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16));
    const __m256 s3 = _mm256_add_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24));
    _mm256_storeu_ps(dst + i, s0);
    _mm256_storeu_ps(dst + i + 8, s1);
    _mm256_storeu_ps(dst + i + 16, s2);
    _mm256_storeu_ps(dst + i + 24, s3);
    acc = _mm256_add_ps(acc, _mm256_add_ps(_mm256_add_ps(_mm256_sub_ps(s0, s0),
                                                         _mm256_sub_ps(s1, s1)),
                                           _mm256_add_ps(_mm256_sub_ps(s2, s2),
                                                         _mm256_sub_ps(s3, s3))));
  }
  // acc is all zeros iff every sum so far was finite (NaN is unordered: EQ_OQ is false).
  bool good = _mm256_movemask_ps(_mm256_cmp_ps(acc, _mm256_setzero_ps(), _CMP_EQ_OQ)) == 0xff;
  for (; i < n; ++i) {
    dst[i] = a[i] + b[i];
    good &= std::fabs(dst[i]) <= FLT_MAX;
  }
  return good;
}

__attribute__((target("avx2,f16c"))) void EncodeFp16F16c(const float* src, size_t n,
                                                         uint16_t* dst) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(src + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < n; ++i) dst[i] = FloatToHalf(src[i]);
}

__attribute__((target("avx2,f16c"))) void DecodeFp16F16c(const uint16_t* src, size_t n,
                                                         float* dst) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = HalfToFloat(src[i]);
}

__attribute__((target("avx2,f16c"))) bool DecodeAddFp16F16c(const float* a, const uint16_t* src,
                                                            size_t n, float* dst) {
  size_t i = 0;
  const __m256 max = _mm256_set1_ps(FLT_MAX);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 ok = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m256 s = _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_cvtph_ps(h));
    _mm256_storeu_ps(dst + i, s);
    ok = _mm256_and_ps(ok, _mm256_cmp_ps(_mm256_and_ps(s, abs_mask), max, _CMP_LE_OQ));
  }
  bool good = _mm256_movemask_ps(ok) == 0xff;
  for (; i < n; ++i) {
    dst[i] = a[i] + HalfToFloat(src[i]);
    good &= std::fabs(dst[i]) <= FLT_MAX;
  }
  return good;
}

// Index of the first half whose exponent is all ones (Inf/NaN), n if none.
size_t FirstHalfInfNan(const uint16_t* h, size_t n) {
  int bad = 0;
  for (size_t i = 0; i < n; ++i) bad |= (h[i] & 0x7c00) == 0x7c00;
  if (bad == 0) return n;
  for (size_t i = 0; i < n; ++i) {
    if ((h[i] & 0x7c00) == 0x7c00) return i;
  }
  return n;
}

absl::Status EncodeFp16(const float* src, size_t n, uint16_t* dst) {
  if (HasF16c()) {
    EncodeFp16F16c(src, n, dst);
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = FloatToHalf(src[i]);
  }
  const size_t bad = FirstHalfInfNan(dst, n);
  if (bad != n) return EncodeError(Codec::kFp16, bad, src[bad]);
  return absl::OkStatus();
}

void DecodeFp16(const uint16_t* src, size_t n, float* dst) {
  if (HasF16c()) {
    DecodeFp16F16c(src, n, dst);
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = HalfToFloat(src[i]);
  }
}

// ---- BF16 ----

absl::Status EncodeBf16(const float* src, size_t n, uint16_t* dst) {
  int bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t u = Bits(src[i]);
    const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    bad |= (u & 0x7f800000u) == 0x7f800000u;  // non-finite input
    bad |= (r & 0x7f80u) == 0x7f80u;          // rounded to Inf
    dst[i] = static_cast<uint16_t>(r);
  }
  if (bad == 0) return absl::OkStatus();
  for (size_t i = 0; i < n; ++i) {
    if ((Bits(src[i]) & 0x7f800000u) == 0x7f800000u || (dst[i] & 0x7f80u) == 0x7f80u) {
      return EncodeError(Codec::kBf16, i, src[i]);
    }
  }
  return absl::OkStatus();
}

void DecodeBf16(const uint16_t* src, size_t n, float* dst) {
  for (size_t i = 0; i < n; ++i) dst[i] = FromBits(static_cast<uint32_t>(src[i]) << 16);
}

// ---- INT8 (power-of-two scale per segment) ----

// Rounds to nearest even for |x| < 2^22 without SSE4.1's roundps.
inline float RoundNearestEven(float x) {
  const float magic = 12582912.0f;  // 1.5 * 2^23
  return (x + magic) - magic;
}

// The power-of-two scale for a segment whose largest magnitude is `max_abs` (finite, >= 0).
float Int8Scale(float max_abs) {
  if (max_abs == 0.0f) return 0.0f;
  int e;
  std::frexp(max_abs / 127.0f, &e);  // max_abs/127 = m * 2^e, m in [0.5, 1): 2^e >= it
  // The smallest e with 127 * 2^e >= max_abs (frexp's e may be one too big when m == 0.5).
  if (127.0f * std::ldexp(1.0f, e - 1) >= max_abs) --e;
  if (e < -126) e = -126;
  return std::ldexp(1.0f, e);
}

absl::Status EncodeInt8(const float* src, size_t n, std::byte* wire) {
  if (n == 0) return absl::OkStatus();
  float max_abs = 0.0f;
  int bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const float a = std::fabs(src[i]);
    bad |= !(a <= FLT_MAX);
    max_abs = a > max_abs ? a : max_abs;
  }
  if (bad != 0) {
    const size_t i = FirstNonFinite(src, n);
    return EncodeError(Codec::kInt8, i, src[i]);
  }
  if (max_abs > kInt8MaxMagnitude) {
    size_t i = 0;
    while (!(std::fabs(src[i]) > kInt8MaxMagnitude)) ++i;
    return EncodeError(Codec::kInt8, i, src[i]);
  }
  const float scale = Int8Scale(max_abs);
  std::memcpy(wire, &scale, 4);
  auto* q = reinterpret_cast<int8_t*>(wire + kInt8ScaleBytes);
  if (scale == 0.0f) {
    std::memset(q, 0, n);
    return absl::OkStatus();
  }
  const float inv = 1.0f / scale;  // exact: a power of two
  int any = 0;
  for (size_t i = 0; i < n; ++i) {
    float r = RoundNearestEven(src[i] * inv);
    r = r > 127.0f ? 127.0f : (r < -127.0f ? -127.0f : r);
    q[i] = static_cast<int8_t>(r);
    any |= q[i];
  }
  // Everything rounded to 0 (a segment below 2^-127): send scale 0, as re-encoding zeros would.
  if (any == 0) std::memset(wire, 0, kInt8ScaleBytes);
  return absl::OkStatus();
}

void DecodeInt8(const std::byte* wire, size_t n, float* dst) {
  if (n == 0) return;
  float scale;
  std::memcpy(&scale, wire, 4);
  const auto* q = reinterpret_cast<const int8_t*>(wire + kInt8ScaleBytes);
  for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(q[i]) * scale;
}

bool DecodeAddInt8(const float* a, const std::byte* wire, size_t n, float* dst) {
  if (n == 0) return true;
  float scale;
  std::memcpy(&scale, wire, 4);
  const auto* q = reinterpret_cast<const int8_t*>(wire + kInt8ScaleBytes);
  int bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const float s = a[i] + static_cast<float>(q[i]) * scale;
    dst[i] = s;
    bad |= !(std::fabs(s) <= FLT_MAX);
  }
  return bad == 0;
}

absl::Status SumError(const float* dst, size_t n, uint64_t first_index) {
  const size_t i = FirstNonFinite(dst, n);
  return absl::OutOfRangeError(absl::StrFormat(
      "element %d: the sum %g overflows fp32 (or an input was not finite)", first_index + i,
      i < n ? dst[i] : 0.0f));
}

}  // namespace

const char* CodecName(Codec codec) {
  switch (codec) {
    case Codec::kFp32: return "fp32";
    case Codec::kFp16: return "fp16";
    case Codec::kBf16: return "bf16";
    case Codec::kInt8: return "int8";
  }
  return "unknown";
}

absl::StatusOr<Codec> ParseCodec(std::string_view name) {
  for (Codec c : kAllCodecs) {
    if (name == CodecName(c)) return c;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown codec '", std::string(name), "' (expected fp32, fp16, bf16 or int8)"));
}

absl::Status EncodeImpl(Codec codec, const float* src, size_t n, std::byte* wire) {
  if (n == 0) return absl::OkStatus();  // empty spans may hold null pointers (memcpy(null, ..., 0) is UB)
  switch (codec) {
    case Codec::kFp32: {
      const size_t bad = FirstNonFinite(src, n);
      if (bad != n) return EncodeError(codec, bad, src[bad]);
      std::memcpy(wire, src, 4 * n);
      return absl::OkStatus();
    }
    case Codec::kFp16: return EncodeFp16(src, n, reinterpret_cast<uint16_t*>(wire));
    case Codec::kBf16: return EncodeBf16(src, n, reinterpret_cast<uint16_t*>(wire));
    case Codec::kInt8: return EncodeInt8(src, n, wire);
  }
  return absl::InvalidArgumentError("codec: unknown");
}

void Decode(Codec codec, const std::byte* wire, size_t n, float* dst) {
  if (n == 0) return;  // empty spans may hold null pointers (memmove(null, ..., 0) is UB)
  switch (codec) {
    case Codec::kFp32: std::memmove(dst, wire, 4 * n); return;
    case Codec::kFp16: DecodeFp16(reinterpret_cast<const uint16_t*>(wire), n, dst); return;
    case Codec::kBf16: DecodeBf16(reinterpret_cast<const uint16_t*>(wire), n, dst); return;
    case Codec::kInt8: DecodeInt8(wire, n, dst); return;
  }
}

void CopyStreaming(const float* src, size_t n, float* dst) {
#if defined(__x86_64__)
  size_t i = 0;
  // Scalar head up to 16-byte alignment of dst (floats are 4-byte aligned).
  for (; i < n && (reinterpret_cast<uintptr_t>(dst + i) & 15) != 0; ++i) dst[i] = src[i];
  for (; i + 16 <= n; i += 16) {
    const __m128 a = _mm_loadu_ps(src + i), b = _mm_loadu_ps(src + i + 4);
    const __m128 c = _mm_loadu_ps(src + i + 8), d = _mm_loadu_ps(src + i + 12);
    _mm_stream_ps(dst + i, a);
    _mm_stream_ps(dst + i + 4, b);
    _mm_stream_ps(dst + i + 8, c);
    _mm_stream_ps(dst + i + 12, d);
  }
  for (; i < n; ++i) dst[i] = src[i];
  // Streaming stores are weakly ordered: fence them before the caller publishes (release) dst.
  _mm_sfence();
#else
  if (n > 0) std::memcpy(dst, src, n * sizeof(float));
#endif
}

absl::Status EncodeWithFeedback(Codec codec, const float* src, size_t n, float* residual,
                                std::byte* wire, uint64_t first_index) {
  // residual <- src + residual (the value to send), encode it, residual <- value - decoded.
  for (size_t i = 0; i < n; ++i) residual[i] += src[i];
  absl::Status s = Encode(codec, residual, n, wire, first_index);
  if (!s.ok()) return s;
  // Decode into a small stack tile to avoid allocation; subtract in place.
  constexpr size_t kTile = 1024;
  float tile[kTile];
  size_t done = 0;
  while (done < n) {
    const size_t m = n - done < kTile ? n - done : kTile;
    switch (codec) {
      case Codec::kFp32: std::memcpy(tile, wire + 4 * done, 4 * m); break;
      case Codec::kFp16:
        DecodeFp16(reinterpret_cast<const uint16_t*>(wire) + done, m, tile);
        break;
      case Codec::kBf16:
        DecodeBf16(reinterpret_cast<const uint16_t*>(wire) + done, m, tile);
        break;
      case Codec::kInt8: {
        float scale;
        std::memcpy(&scale, wire, 4);
        const auto* q = reinterpret_cast<const int8_t*>(wire + kInt8ScaleBytes) + done;
        for (size_t i = 0; i < m; ++i) tile[i] = static_cast<float>(q[i]) * scale;
        break;
      }
    }
    for (size_t i = 0; i < m; ++i) residual[done + i] -= tile[i];
    done += m;
  }
  return absl::OkStatus();
}

absl::Status DecodeAdd(Codec codec, const float* a, const std::byte* wire, size_t n, float* dst,
                       uint64_t first_index) {
  bool ok = true;
  switch (codec) {
    case Codec::kFp32:
      ok = HasF16c() ? AddCheckedAvx2(a, reinterpret_cast<const float*>(wire), n, dst)
                     : AddChecked(a, reinterpret_cast<const float*>(wire), n, dst);
      break;
    case Codec::kFp16:
      if (HasF16c()) {
        ok = DecodeAddFp16F16c(a, reinterpret_cast<const uint16_t*>(wire), n, dst);
      } else {
        const auto* h = reinterpret_cast<const uint16_t*>(wire);
        for (size_t i = 0; i < n; ++i) dst[i] = a[i] + HalfToFloat(h[i]);
        ok = FirstNonFinite(dst, n) == n;
      }
      break;
    case Codec::kBf16: {
      const auto* h = reinterpret_cast<const uint16_t*>(wire);
      int bad = 0;
      for (size_t i = 0; i < n; ++i) {
        const float s = a[i] + FromBits(static_cast<uint32_t>(h[i]) << 16);
        dst[i] = s;
        bad |= !(std::fabs(s) <= FLT_MAX);
      }
      ok = bad == 0;
      break;
    }
    case Codec::kInt8: ok = DecodeAddInt8(a, wire, n, dst); break;
  }
  if (ok) return absl::OkStatus();
  return SumError(dst, n, first_index);
}

absl::Status Encode(Codec codec, const float* src, size_t n, std::byte* wire,
                    uint64_t first_index) {
  absl::Status s = EncodeImpl(codec, src, n, wire);
  if (s.ok() || first_index == 0) return s;
  // Re-find the element to name it by its index in the whole buffer.
  for (size_t i = 0; i < n; ++i) {
    const float v = src[i];
    const float a = std::fabs(v);
    const bool bad = !std::isfinite(v) || (codec == Codec::kFp16 && a >= 65520.0f) ||
                     (codec == Codec::kBf16 && Bits(a) >= 0x7f7f8000u) ||
                     (codec == Codec::kInt8 && a > kInt8MaxMagnitude);
    if (bad) return EncodeError(codec, first_index + i, v);
  }
  return s;
}

}  // namespace rp::comm
