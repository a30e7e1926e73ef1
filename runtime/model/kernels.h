// Math kernels on rp::Tensor views: the matmuls of a linear layer's forward and backward, bias,
// activations (ReLU, GELU) with their backward, softmax cross-entropy with its gradient, accuracy.
//
// Plain, single-threaded, deterministic code (compiled at -O3 so the inner loops vectorise).
//
// Reduction-order contract (what makes runs reproducible bit for bit and lets the executor mirror the
// serial reference; docs/model.md builds on it):
//   * MatMul / MatMulTransposedB: every output element is a left-to-right float sum over the
//     reduction index in increasing order, starting from the first product (0 + p0 + p1 + ...).
//     An output element depends only on its own row of the left operand, so splitting a batch into
//     micro-batches never changes a sample's bits; a column slice of the right operand gives exactly
//     the same bits as the corresponding columns of the full product.
//   * MatMulTransposedAAccumulate / AccumulateBiasGrad: g[i][k] += x[r][i] * dy[r][k] for r in
//     increasing order, added directly onto g. So accumulating micro-batch 0, then 1, ... onto a
//     zeroed buffer gives exactly the bits of one call on the concatenated batch.
//   * Elementwise kernels (bias, activations, Accumulate) are independent per element.
//   * SoftmaxCrossEntropy works per row in double and rounds the gradient to float once; the loss
//     sum is accumulated in double in row order.
// No kernel uses FMA contraction or reassociation (the build uses neither -ffast-math nor -march;
// the AVX2 paths of the matmuls, chosen at run time, are compiled for "avx2" without "fma" and keep
// each element's order: the same bits as the portable loops). Where the right operand is past L2
// and many rows walk it (a wide layer's evaluation batch or gradient), those paths walk it by
// panels of 256 × 256 values, the running sums waiting in the output between panels: each element's
// order is unchanged (bench/runtime_bench.cc BM_MatMul; a 256-row batch through a 2048 × 2048 layer
// about 2.4x faster than one pass over the whole operand per block of rows).
//
// Errors: shape mismatches return InvalidArgument naming the kernel, the operand and both shapes;
// the output is then unspecified. Views must not alias unless a kernel says so.
//
// Thread safety: pure functions; concurrent calls on disjoint outputs are safe.
//
// Example (a linear layer y = relu(x·w + b) and its backward):
//   RP_RETURN_IF_ERROR(rp::MatMul(x, w, pre));
//   RP_RETURN_IF_ERROR(rp::AddBias(pre, b));
//   RP_RETURN_IF_ERROR(rp::ActivationForward(rp::Activation::kRelu, pre, y));
//   ...
//   RP_RETURN_IF_ERROR(rp::ActivationBackward(rp::Activation::kRelu, pre, dy, dpre));
//   RP_RETURN_IF_ERROR(rp::MatMulTransposedAAccumulate(x, dpre, dw));
//   RP_RETURN_IF_ERROR(rp::AccumulateBiasGrad(dpre, db));
//   RP_RETURN_IF_ERROR(rp::MatMulTransposedB(dpre, w, dx, &scratch));
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/model/tensor.h"

namespace rp {

// y = x · w.  x: n×k, w: k×m, y: n×m (overwritten).
[[nodiscard]] absl::Status MatMul(ConstMatrixView x, ConstMatrixView w, MatrixView y);

// dx = dy · wᵀ.  dy: n×m, w: k×m, dx: n×k (overwritten). Same reduction order as MatMul over m, and
// the same bits whichever way it takes (`scratch`: resized as needed; reuse it across calls to
// avoid allocations):
//   kStrips      (AVX2 CPUs; elsewhere kTransposeW) 16 rows of w at a time transposed into
//                `scratch` (16·m values, 8 × 8 tiles in registers), which every 4 rows of dy then
//                walk with MatMul's register block: each dx element stays in a register over its m
//                terms, and no transpose of w as a whole (k·m copies through the cache, a miss each
//                past L2) is made;
//   kTransposeW  w transposed whole into `scratch`, then MatMul;
//   kAuto        kStrips where it runs, else kTransposeW. bench/runtime_bench.cc
//                BM_MatMulTransposedB, one run: kStrips 26–37 G products/s from 16 rows of dy on
//                (16–256 rows, w 256–2048 square), kTransposeW 0.9–34 (worst for few rows and a
//                large w, best for many rows and a small w), the 8 × 8 tiles it replaced 4.6–24.
enum class TransposedBWay : uint8_t { kAuto, kStrips, kTransposeW };
[[nodiscard]] absl::Status MatMulTransposedB(ConstMatrixView dy, ConstMatrixView w, MatrixView dx,
                                             Tensor* scratch, TransposedBWay way = TransposedBWay::kAuto);

// g += xᵀ · dy.  x: n×k, dy: n×m, g: k×m (accumulated; rows of x/dy in increasing order).
[[nodiscard]] absl::Status MatMulTransposedAAccumulate(ConstMatrixView x, ConstMatrixView dy,
                                                       MatrixView g);

// y[r][:] += b for every row r.  b.size() == y.cols.
[[nodiscard]] absl::Status AddBias(MatrixView y, std::span<const float> b);

// db[k] += sum over rows r (increasing) of dy[r][k].  db.size() == dy.cols.
[[nodiscard]] absl::Status AccumulateBiasGrad(ConstMatrixView dy, std::span<float> db);

// dst[i] += src[i].  Sizes must match. dst and src must not overlap.
[[nodiscard]] absl::Status Accumulate(std::span<float> dst, std::span<const float> src);

enum class Activation {
  kIdentity,  // y = x
  kRelu,      // y = max(x, 0); derivative 0 at x == 0
  kGelu,      // tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
};
std::string_view ActivationName(Activation a);

// out = act(pre), elementwise. out may alias pre (same data pointer) for in-place use.
[[nodiscard]] absl::Status ActivationForward(Activation act, ConstMatrixView pre, MatrixView out);

// dpre = dout ⊙ act'(pre), elementwise. dpre may alias dout.
[[nodiscard]] absl::Status ActivationBackward(Activation act, ConstMatrixView pre,
                                              ConstMatrixView dout, MatrixView dpre);

// Per-batch figures from SoftmaxCrossEntropy.
struct LossStats {
  double loss_sum = 0.0;  // sum over rows of -log softmax(logits)[label]
  int64_t correct = 0;    // rows whose argmax (lowest index on ties) equals the label
  int64_t count = 0;      // rows
};

// Numerically stable softmax cross-entropy over each row of `logits` (n×C) with integer labels in
// [0, C). If `dlogits` has data, writes dlogits = (softmax(logits) − onehot(label)) · grad_scale
// (n×C; it may alias logits). grad_scale is typically 1 / global batch size (docs/model.md).
// Errors: shape mismatch, or a label outside [0, C) (names the row).
[[nodiscard]] absl::StatusOr<LossStats> SoftmaxCrossEntropy(ConstMatrixView logits,
                                                            std::span<const int32_t> labels,
                                                            float grad_scale, MatrixView dlogits);

// Rows of `logits` whose argmax (lowest index on ties) equals the label.
[[nodiscard]] absl::StatusOr<int64_t> CountCorrect(ConstMatrixView logits,
                                                   std::span<const int32_t> labels);

}  // namespace rp
