// The AVX2 register blocks of the matmuls (kernels_avx2.h): chosen at run time on CPUs that have
// AVX2. A block of R output rows × 8·V columns stays in registers while the reduction index walks in
// increasing order, each product added with one separate multiply and add (no FMA: the target is
// "avx2" alone, so nothing can be contracted): every element receives exactly the scalar loop's
// operations in the scalar loop's order — the same bits (kernels_test compares them with a plain
// serial loop). Compiled with -O3 (ringpipe_hot_sources).
#include "runtime/model/kernels_avx2.h"

#if RP_KERNELS_AVX2
#include <immintrin.h>

#include <algorithm>

namespace rp::kernels_internal {
namespace {


// The one register block both matmuls use: out[R rows][8V cols] (+)= Σ_t a(j, t) · b[t][cols] for
// t = 0, 1, ..., T − 1, where a(j, t) = a[j·a_row + t·a_col]. Accumulate: onto out (the gradient);
// else from 0 + the first product (MatMul).
template <int R, int V, bool kAccumulate>
__attribute__((target("avx2"))) inline void BlockAvx2(const float* a, int64_t a_row, int64_t a_col,
                                                      const float* b, int64_t ldb, float* out,
                                                      int64_t ldo, int64_t T) {
  __m256 acc[R][V];
  for (int j = 0; j < R; ++j) {
    for (int v = 0; v < V; ++v) {
      acc[j][v] = kAccumulate ? _mm256_loadu_ps(out + j * ldo + 8 * v) : _mm256_setzero_ps();
    }
  }
  for (int64_t t = 0; t < T; ++t) {
    __m256 bv[V];
    for (int v = 0; v < V; ++v) bv[v] = _mm256_loadu_ps(b + t * ldb + 8 * v);
    for (int j = 0; j < R; ++j) {
      const __m256 s = _mm256_set1_ps(a[j * a_row + t * a_col]);
      for (int v = 0; v < V; ++v) acc[j][v] = _mm256_add_ps(acc[j][v], _mm256_mul_ps(s, bv[v]));
    }
  }
  for (int j = 0; j < R; ++j) {
    for (int v = 0; v < V; ++v) _mm256_storeu_ps(out + j * ldo + 8 * v, acc[j][v]);
  }
}

// R output rows over `width` columns (b's and out's rows `ld` apart): blocks of 16 and 8
// columns, then the scalar remainder (the same operations in the same order).
template <int R, bool kAccumulate>
__attribute__((target("avx2"))) void RowsAvx2(const float* a, int64_t a_row, int64_t a_col,
                                              const float* b, int64_t width, int64_t ld, float* out,
                                              int64_t T) {
  int64_t c = 0;
  for (; c + 16 <= width; c += 16) BlockAvx2<R, 2, kAccumulate>(a, a_row, a_col, b + c, ld, out + c, ld, T);
  for (; c + 8 <= width; c += 8) BlockAvx2<R, 1, kAccumulate>(a, a_row, a_col, b + c, ld, out + c, ld, T);
  for (; c < width; ++c) {
    for (int j = 0; j < R; ++j) {
      float acc = kAccumulate ? out[j * ld + c] : 0.0f;
      for (int64_t t = 0; t < T; ++t) acc += a[j * a_row + t * a_col] * b[t * ld + c];
      out[j * ld + c] = acc;
    }
  }
}

// out (rows × width, rows ld apart) (+)= Σ_t a(j, t) · b[t] over T terms: blocks of 4 rows, then
// single rows. Row j of `a` starts at a + j·a_row.
template <bool kAccumulate>
__attribute__((target("avx2"))) void RowBlocksAvx2(const float* a, int64_t rows, int64_t a_row,
                                                   int64_t a_col, const float* b, int64_t width,
                                                   int64_t ld, float* out, int64_t T) {
  int64_t j = 0;
  for (; j + 4 <= rows; j += 4) {
    RowsAvx2<4, kAccumulate>(a + j * a_row, a_row, a_col, b, width, ld, out + j * ld, T);
  }
  for (; j < rows; ++j) RowsAvx2<1, kAccumulate>(a + j * a_row, a_row, a_col, b, width, ld, out + j * ld, T);
}

// A panel of b: kPanelTerms rows × kPanelCols columns (256 KB), which stays in L2 while every
// block of 4 output rows walks it.
constexpr int64_t kPanelTerms = 256, kPanelCols = 256;
// Panels from a b of this many values (1 MB, past L2) when at least kPanelFromRows output rows
// walk it (a few row blocks stream a large b from memory no slower than they walk panels).
constexpr int64_t kPanelFromValues = int64_t{1} << 18;
constexpr int64_t kPanelFromRows = 16;

// out (rows × m) (+)= Σ_t a(j, t) · b[t] for t = 0..T−1. A large b is walked by panels (above):
// the panels of a column range in increasing t, each adding its terms onto the running sums that
// wait in out between panels (a float stored and reloaded is the same float), so every element
// still receives 0 (or its old value) + p0 + p1 + ... in increasing t — the same bits as without
// panels.
template <bool kAccumulate>
__attribute__((target("avx2"))) void MatMulsAvx2T(const float* a, int64_t rows, int64_t a_row,
                                                  int64_t a_col, const float* b, int64_t m, float* out,
                                                  int64_t T) {
  // No terms (an expert that got no tokens): b may be null, and an empty sum is 0.
  if (T == 0) {
    if (!kAccumulate) std::fill_n(out, rows * m, 0.0f);
    return;
  }
  if (rows < kPanelFromRows || T * m < kPanelFromValues) {
    RowBlocksAvx2<kAccumulate>(a, rows, a_row, a_col, b, m, m, out, T);
    return;
  }
  for (int64_t c0 = 0; c0 < m; c0 += kPanelCols) {
    const int64_t width = std::min(kPanelCols, m - c0);
    for (int64_t t0 = 0; t0 < T; t0 += kPanelTerms) {
      const int64_t terms = std::min(kPanelTerms, T - t0);
      const float* at = a + t0 * a_col;
      const float* bt = b + t0 * m + c0;
      if (kAccumulate || t0 > 0) {
        RowBlocksAvx2<true>(at, rows, a_row, a_col, bt, width, m, out + c0, terms);
      } else {
        RowBlocksAvx2<false>(at, rows, a_row, a_col, bt, width, m, out + c0, terms);
      }
    }
  }
}

// r[i][j] becomes r[j][i] (an 8 × 8 float tile, in registers).
__attribute__((target("avx2"))) inline void Transpose8x8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// strip[t][l] = w[i0 + l][t] for l < rows (8 or 16) and t < m: 8 × 8 tiles transposed in registers.
__attribute__((target("avx2"))) void FillStrip(const float* w, int64_t m, int64_t i0, int rows, float* strip) {
  int64_t t0 = 0;
  for (; t0 + 8 <= m; t0 += 8) {
    for (int h = 0; h < rows; h += 8) {
      __m256 tile[8];
      for (int l = 0; l < 8; ++l) tile[l] = _mm256_loadu_ps(w + (i0 + h + l) * m + t0);
      Transpose8x8(tile);
      for (int u = 0; u < 8; ++u) _mm256_storeu_ps(strip + (t0 + u) * rows + h, tile[u]);
    }
  }
  for (; t0 < m; ++t0) {
    for (int l = 0; l < rows; ++l) strip[t0 * rows + l] = w[(i0 + l) * m + t0];
  }
}

}  // namespace

// The CPU's AVX2, read once.
bool HaveAvx2() {
  static const bool have = __builtin_cpu_supports("avx2");
  return have;
}

void MatMulsAvx2(bool accumulate, const float* a, int64_t rows, int64_t a_row, int64_t a_col,
                 const float* b, int64_t m, float* out, int64_t T) {
  if (accumulate) {
    MatMulsAvx2T<true>(a, rows, a_row, a_col, b, m, out, T);
  } else {
    MatMulsAvx2T<false>(a, rows, a_row, a_col, b, m, out, T);
  }
}

// dx (n × k) = dy (n × m) · wᵀ (w: k × m) by strips of w: 16 of its rows (16 output columns of dx)
// are transposed into `strip` (m × 16, 8 × 8 tiles in registers), then every block of 4 rows of dy
// walks the strip with MatMul's register block — each dx element stays in a register over all m
// terms (0 + p0 + p1 + ... in increasing t, the serial loop's order). Then a strip of 8 rows, and
// the last k % 8 columns by the serial loop. `strip` holds 16·m floats.
__attribute__((target("avx2"))) void TransposedBByStrips(const float* dy, int64_t n, int64_t m, const float* w,
                                                         int64_t k, float* dx, float* strip) {
  int64_t i0 = 0;
  for (; i0 + 16 <= k; i0 += 16) {
    FillStrip(w, m, i0, 16, strip);
    int64_t r = 0;
    for (; r + 4 <= n; r += 4) BlockAvx2<4, 2, false>(dy + r * m, m, 1, strip, 16, dx + r * k + i0, k, m);
    for (; r < n; ++r) BlockAvx2<1, 2, false>(dy + r * m, m, 1, strip, 16, dx + r * k + i0, k, m);
  }
  if (i0 + 8 <= k) {
    FillStrip(w, m, i0, 8, strip);
    int64_t r = 0;
    for (; r + 4 <= n; r += 4) BlockAvx2<4, 1, false>(dy + r * m, m, 1, strip, 8, dx + r * k + i0, k, m);
    for (; r < n; ++r) BlockAvx2<1, 1, false>(dy + r * m, m, 1, strip, 8, dx + r * k + i0, k, m);
    i0 += 8;
  }
  for (; i0 < k; ++i0) {  // the last k % 8 columns: the serial loop
    for (int64_t r = 0; r < n; ++r) {
      float acc = 0.0f;
      for (int64_t t = 0; t < m; ++t) acc += dy[r * m + t] * w[i0 * m + t];
      dx[r * k + i0] = acc;
    }
  }
}

}  // namespace rp::kernels_internal
#endif  // RP_KERNELS_AVX2
