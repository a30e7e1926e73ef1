// Kernels: see kernels.h for the reduction-order contract. Compiled with -O3 (ringpipe_hot_sources):
// the inner loops are axpys over contiguous rows (y[0..m) += a * w[0..m)), which GCC vectorises
// without changing any element's summation order; on AVX2 CPUs the matmuls use the register blocks
// of kernels_avx2.cc instead, with the same order.
#include "runtime/model/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstddef>
#include <string>

#include "absl/strings/str_format.h"
#include "runtime/model/kernels_avx2.h"

namespace rp {
namespace {

std::string Shape(int64_t r, int64_t c) { return absl::StrFormat("%dx%d", r, c); }

// y[0..n) += a * x[0..n)
inline void Axpy(float a, const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t k = 0; k < n; ++k) y[k] += a * x[k];
}

constexpr int64_t kRowBlock = 4;    // rows that share one pass over a weight row (stays in L1)
constexpr int64_t kColTile = 128;   // output columns per tile (MatMul)

}  // namespace

absl::Status MatMul(ConstMatrixView x, ConstMatrixView w, MatrixView y) {
  if (x.cols != w.rows || y.rows != x.rows || y.cols != w.cols) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "MatMul: x %s · w %s does not give y %s", Shape(x.rows, x.cols), Shape(w.rows, w.cols),
        Shape(y.rows, y.cols)));
  }
#if RP_KERNELS_AVX2
  if (kernels_internal::HaveAvx2()) {
    // y[r] = Σ_i x[r][i] · w[i]: a(r, i) = x[r·k + i].
    kernels_internal::MatMulsAvx2(/*accumulate=*/false, x.data, x.rows, x.cols, 1, w.data, w.cols, y.data,
                                   x.cols);
    return absl::OkStatus();
  }
#endif
  const int64_t n = x.rows, k = x.cols, m = w.cols;
  // Tiles: kColTile columns of w (k x kColTile floats, reused from L2 by every row block) times
  // kRowBlock rows of y (kept in L1 across the whole i loop). Neither tiling changes the order in
  // which an element's products are added (i increasing).
  for (int64_t c0 = 0; c0 < m; c0 += kColTile) {
    const int64_t cw = std::min(m - c0, kColTile);
    for (int64_t r0 = 0; r0 < n; r0 += kRowBlock) {
      const int64_t r1 = std::min(n, r0 + kRowBlock);
      for (int64_t r = r0; r < r1; ++r) std::fill_n(y.data + r * m + c0, cw, 0.0f);
      for (int64_t i = 0; i < k; ++i) {
        const float* wi = w.data + i * m + c0;
        for (int64_t r = r0; r < r1; ++r) Axpy(x.data[r * k + i], wi, y.data + r * m + c0, cw);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status MatMulTransposedB(ConstMatrixView dy, ConstMatrixView w, MatrixView dx,
                               Tensor* scratch, TransposedBWay way) {
  if (dy.cols != w.cols || dx.rows != dy.rows || dx.cols != w.rows) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "MatMulTransposedB: dy %s · (w %s)ᵀ does not give dx %s", Shape(dy.rows, dy.cols),
        Shape(w.rows, w.cols), Shape(dx.rows, dx.cols)));
  }
  if (scratch == nullptr) return absl::InvalidArgumentError("MatMulTransposedB: scratch is null");
#if RP_KERNELS_AVX2
  if ((way == TransposedBWay::kAuto || way == TransposedBWay::kStrips) && kernels_internal::HaveAvx2()) {
    const size_t need = static_cast<size_t>(16 * w.cols);
    if (static_cast<size_t>(scratch->size()) < need) {
      std::vector<float> storage = std::move(*scratch).Release();
      storage.resize(need);
      *scratch = Tensor(w.cols, 16, std::move(storage));
    }
    kernels_internal::TransposedBByStrips(dy.data, dy.rows, dy.cols, w.data, w.rows, dx.data,
                                          scratch->data());
    return absl::OkStatus();
  }
#endif
  if (scratch->rows() != w.cols || scratch->cols() != w.rows) {
    // Reshaped in place: TP's column- and row-parallel layers alternate two shapes, and the
    // storage keeps the larger one's capacity (every element is written below).
    std::vector<float> storage = std::move(*scratch).Release();
    storage.resize(static_cast<size_t>(w.cols * w.rows));
    *scratch = Tensor(w.cols, w.rows, std::move(storage));
  }
  // wᵀ, blocked so both sides stay in cache.
  constexpr int64_t kTile = 32;
  float* t = scratch->data();
  for (int64_t i0 = 0; i0 < w.rows; i0 += kTile) {
    for (int64_t j0 = 0; j0 < w.cols; j0 += kTile) {
      const int64_t i1 = std::min(w.rows, i0 + kTile), j1 = std::min(w.cols, j0 + kTile);
      for (int64_t i = i0; i < i1; ++i) {
        for (int64_t j = j0; j < j1; ++j) t[j * w.rows + i] = w.data[i * w.cols + j];
      }
    }
  }
  return MatMul(dy, scratch->view(), dx);
}

absl::Status MatMulTransposedAAccumulate(ConstMatrixView x, ConstMatrixView dy, MatrixView g) {
  if (x.rows != dy.rows || g.rows != x.cols || g.cols != dy.cols) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "MatMulTransposedAAccumulate: (x %s)ᵀ · dy %s does not fit g %s", Shape(x.rows, x.cols),
        Shape(dy.rows, dy.cols), Shape(g.rows, g.cols)));
  }
#if RP_KERNELS_AVX2
  if (kernels_internal::HaveAvx2()) {
    // g[i] += Σ_r x[r][i] · dy[r]: a(i, r) = x[r·k + i].
    kernels_internal::MatMulsAvx2(/*accumulate=*/true, x.data, x.cols, 1, x.cols, dy.data, dy.cols, g.data,
                                   x.rows);
    return absl::OkStatus();
  }
#endif
  const int64_t n = x.rows, k = x.cols, m = dy.cols;
  // For a block of g's rows, walk the batch rows in increasing order: each g element receives its
  // products in row order (the contract), and the block of g rows stays in L1.
  for (int64_t i0 = 0; i0 < k; i0 += kRowBlock) {
    const int64_t i1 = std::min(k, i0 + kRowBlock);
    for (int64_t r = 0; r < n; ++r) {
      const float* dyr = dy.data + r * m;
      const float* xr = x.data + r * k;
      for (int64_t i = i0; i < i1; ++i) Axpy(xr[i], dyr, g.data + i * m, m);
    }
  }
  return absl::OkStatus();
}

absl::Status AddBias(MatrixView y, std::span<const float> b) {
  if (static_cast<int64_t>(b.size()) != y.cols) {
    return absl::InvalidArgumentError(
        absl::StrFormat("AddBias: bias of %d values for y %s", b.size(), Shape(y.rows, y.cols)));
  }
  for (int64_t r = 0; r < y.rows; ++r) {
    float* __restrict yr = y.data + r * y.cols;
    const float* __restrict bp = b.data();
    for (int64_t k = 0; k < y.cols; ++k) yr[k] += bp[k];
  }
  return absl::OkStatus();
}

absl::Status AccumulateBiasGrad(ConstMatrixView dy, std::span<float> db) {
  if (static_cast<int64_t>(db.size()) != dy.cols) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "AccumulateBiasGrad: bias grad of %d values for dy %s", db.size(), Shape(dy.rows, dy.cols)));
  }
  for (int64_t r = 0; r < dy.rows; ++r) {
    const float* __restrict dyr = dy.data + r * dy.cols;
    float* __restrict d = db.data();
    for (int64_t k = 0; k < dy.cols; ++k) d[k] += dyr[k];
  }
  return absl::OkStatus();
}

absl::Status Accumulate(std::span<float> dst, std::span<const float> src) {
  if (dst.size() != src.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Accumulate: dst has %d values, src %d", dst.size(), src.size()));
  }
  float* __restrict d = dst.data();
  const float* __restrict s = src.data();
  for (size_t i = 0; i < dst.size(); ++i) d[i] += s[i];
  return absl::OkStatus();
}

std::string_view ActivationName(Activation a) {
  switch (a) {
    case Activation::kIdentity: return "identity";
    case Activation::kRelu: return "relu";
    case Activation::kGelu: return "gelu";
  }
  return "unknown";
}

namespace {
constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluA = 0.044715f;

absl::Status CheckSameShape(const char* kernel, const char* a_name, ConstMatrixView a,
                            const char* b_name, ConstMatrixView b) {
  if (a.rows != b.rows || a.cols != b.cols) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: %s %s and %s %s differ", kernel,
                                                      a_name, Shape(a.rows, a.cols), b_name,
                                                      Shape(b.rows, b.cols)));
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status ActivationForward(Activation act, ConstMatrixView pre, MatrixView out) {
  if (auto s = CheckSameShape("ActivationForward", "pre", pre, "out", out); !s.ok()) return s;
  const int64_t n = pre.size();
  const float* p = pre.data;
  float* o = out.data;
  switch (act) {
    case Activation::kIdentity:
      if (o != p) std::copy_n(p, n, o);
      break;
    case Activation::kRelu:
      for (int64_t i = 0; i < n; ++i) o[i] = p[i] > 0.0f ? p[i] : 0.0f;
      break;
    case Activation::kGelu:
      for (int64_t i = 0; i < n; ++i) {
        const float x = p[i];
        const float t = std::tanh(kGeluC * (x + kGeluA * x * x * x));
        o[i] = 0.5f * x * (1.0f + t);
      }
      break;
  }
  return absl::OkStatus();
}

absl::Status ActivationBackward(Activation act, ConstMatrixView pre, ConstMatrixView dout,
                                MatrixView dpre) {
  if (auto s = CheckSameShape("ActivationBackward", "pre", pre, "dout", dout); !s.ok()) return s;
  if (auto s = CheckSameShape("ActivationBackward", "pre", pre, "dpre", dpre); !s.ok()) return s;
  const int64_t n = pre.size();
  const float* p = pre.data;
  const float* g = dout.data;
  float* d = dpre.data;
  switch (act) {
    case Activation::kIdentity:
      if (d != g) std::copy_n(g, n, d);
      break;
    case Activation::kRelu:
      // g[i] where pre > 0, else +0.0f — as a bit mask, not a branch: the sign of pre is a coin
      // toss, and a branch per element mispredicted about half the time (ActivationBackward was
      // 5-9 % of a virtual run's samples).
      for (int64_t i = 0; i < n; ++i) {
        uint32_t bits;
        std::memcpy(&bits, g + i, sizeof bits);
        bits &= p[i] > 0.0f ? ~uint32_t{0} : uint32_t{0};
        std::memcpy(d + i, &bits, sizeof bits);
      }
      break;
    case Activation::kGelu:
      for (int64_t i = 0; i < n; ++i) {
        const float x = p[i];
        const float t = std::tanh(kGeluC * (x + kGeluA * x * x * x));
        const float dt = (1.0f - t * t) * kGeluC * (1.0f + 3.0f * kGeluA * x * x);
        d[i] = g[i] * (0.5f * (1.0f + t) + 0.5f * x * dt);
      }
      break;
  }
  return absl::OkStatus();
}

namespace {
absl::Status CheckLabels(const char* kernel, ConstMatrixView logits,
                         std::span<const int32_t> labels) {
  if (static_cast<int64_t>(labels.size()) != logits.rows) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: %d labels for logits %s", kernel,
                                                      labels.size(),
                                                      Shape(logits.rows, logits.cols)));
  }
  if (logits.cols <= 0 && logits.rows > 0) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: logits have no classes", kernel));
  }
  for (size_t r = 0; r < labels.size(); ++r) {
    if (labels[r] < 0 || labels[r] >= logits.cols) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: label %d of row %d is outside [0, %d)", kernel, labels[r], r, logits.cols));
    }
  }
  return absl::OkStatus();
}

int64_t ArgMax(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t c = 1; c < n; ++c) {
    if (row[c] > row[best]) best = c;
  }
  return best;
}
}  // namespace

absl::StatusOr<LossStats> SoftmaxCrossEntropy(ConstMatrixView logits,
                                              std::span<const int32_t> labels, float grad_scale,
                                              MatrixView dlogits) {
  if (auto s = CheckLabels("SoftmaxCrossEntropy", logits, labels); !s.ok()) return s;
  const bool want_grad = dlogits.data != nullptr;
  if (want_grad) {
    if (auto s = CheckSameShape("SoftmaxCrossEntropy", "logits", logits, "dlogits", dlogits);
        !s.ok()) {
      return s;
    }
  }
  LossStats stats;
  stats.count = logits.rows;
  const int64_t c = logits.cols;
  for (int64_t r = 0; r < logits.rows; ++r) {
    const float* l = logits.data + r * c;
    const int64_t best = ArgMax(l, c);
    const double mx = l[best];
    double sum = 0.0;
    for (int64_t j = 0; j < c; ++j) sum += std::exp(static_cast<double>(l[j]) - mx);
    const int32_t y = labels[static_cast<size_t>(r)];
    stats.loss_sum += std::log(sum) - (static_cast<double>(l[y]) - mx);
    if (best == y) ++stats.correct;
    if (want_grad) {
      float* d = dlogits.data + r * c;  // may alias l: read l[j] before writing d[j]
      for (int64_t j = 0; j < c; ++j) {
        const double p = std::exp(static_cast<double>(l[j]) - mx) / sum;
        d[j] = static_cast<float>((p - (j == y ? 1.0 : 0.0)) * grad_scale);
      }
    }
  }
  return stats;
}

absl::StatusOr<int64_t> CountCorrect(ConstMatrixView logits, std::span<const int32_t> labels) {
  if (auto s = CheckLabels("CountCorrect", logits, labels); !s.ok()) return s;
  int64_t correct = 0;
  for (int64_t r = 0; r < logits.rows; ++r) {
    if (ArgMax(logits.data + r * logits.cols, logits.cols) == labels[static_cast<size_t>(r)]) {
      ++correct;
    }
  }
  return correct;
}

}  // namespace rp
