// The AVX2 paths of the matmuls in kernels.cc (internal to runtime/model): register blocks that
// keep each output element's reduction order (kernels.h's contract), chosen at run time on CPUs
// that have AVX2. RP_KERNELS_AVX2 is 1 where they are compiled (x86-64); elsewhere nothing here is
// declared and kernels.cc runs its portable loops.
#pragma once

#include <cstdint>

#if defined(__x86_64__)
#define RP_KERNELS_AVX2 1
#else
#define RP_KERNELS_AVX2 0
#endif

#if RP_KERNELS_AVX2
namespace rp::kernels_internal {

// Whether this CPU has AVX2 (the functions below may run).
bool HaveAvx2();

// out (rows × m) (+)= Σ_t a(j, t) · b[t] over t = 0..T−1 in increasing order, where
// a(j, t) = a[j·a_row + t·a_col] and b[t] is b's row t (m values): with `accumulate`, onto out's
// values (a weight gradient); else from 0 (MatMul). A b past L2 that many rows walk is walked by
// panels of 256 × 256 values, the running sums waiting in out (the same bits).
void MatMulsAvx2(bool accumulate, const float* a, int64_t rows, int64_t a_row, int64_t a_col,
                 const float* b, int64_t m, float* out, int64_t T);

// dx (n × k) = dy (n × m) · wᵀ (w: k × m), each element 0 + Σ_t over t in increasing order, by
// strips of 16 rows of w transposed into `strip` (16·m floats).
void TransposedBByStrips(const float* dy, int64_t n, int64_t m, const float* w, int64_t k, float* dx,
                         float* strip);

}  // namespace rp::kernels_internal
#endif
