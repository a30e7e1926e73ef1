#include "runtime/model/kernels.h"
#include "runtime/model/tensor.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace rp {
namespace {

Tensor Random(int64_t rows, int64_t cols, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  Tensor t(rows, cols);
  for (float& v : t.span()) v = u(rng);
  return t;
}

bool SameBits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Naive double-precision references.
std::vector<double> RefMatMul(ConstMatrixView a, ConstMatrixView b, bool transpose_b) {
  const int64_t n = a.rows, k = a.cols, m = transpose_b ? b.rows : b.cols;
  std::vector<double> out(static_cast<size_t>(n * m), 0.0);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < m; ++c) {
      double s = 0.0;
      for (int64_t i = 0; i < k; ++i) s += double(a.at(r, i)) * (transpose_b ? b.at(c, i) : b.at(i, c));
      out[static_cast<size_t>(r * m + c)] = s;
    }
  }
  return out;
}

void ExpectNear(std::span<const float> got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], tol * (1.0 + std::abs(want[i]))) << "element " << i;
  }
}

struct Shape3 {
  int64_t n, k, m;
};
class MatMulShapes : public ::testing::TestWithParam<Shape3> {};

TEST_P(MatMulShapes, MatchesDoubleReference) {
  const auto [n, k, m] = GetParam();
  Tensor x = Random(n, k, 1), w = Random(k, m, 2), y(n, m);
  ASSERT_TRUE(MatMul(x, w, y).ok());
  ExpectNear(y.span(), RefMatMul(x, w, false), 1e-5);
}

TEST_P(MatMulShapes, TransposedBMatchesDoubleReference) {
  const auto [n, k, m] = GetParam();
  Tensor dy = Random(n, m, 3), w = Random(k, m, 4), dx(n, k), scratch;
  ASSERT_TRUE(MatMulTransposedB(dy, w, dx, &scratch).ok());
  ExpectNear(dx.span(), RefMatMul(dy, w, true), 1e-5);
}

TEST_P(MatMulShapes, TransposedAAccumulateMatchesDoubleReference) {
  const auto [n, k, m] = GetParam();
  Tensor x = Random(n, k, 5), dy = Random(n, m, 6), g = Random(k, m, 7);
  std::vector<double> want(static_cast<size_t>(k * m));
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t c = 0; c < m; ++c) {
      double s = g.at(i, c);
      for (int64_t r = 0; r < n; ++r) s += double(x.at(r, i)) * dy.at(r, c);
      want[static_cast<size_t>(i * m + c)] = s;
    }
  }
  ASSERT_TRUE(MatMulTransposedAAccumulate(x, dy, g).ok());
  ExpectNear(g.span(), want, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Kernels, MatMulShapes,
                         ::testing::Values(Shape3{1, 1, 1}, Shape3{7, 13, 5}, Shape3{4, 8, 16},
                                           Shape3{33, 17, 65}, Shape3{64, 128, 96}),
                         [](const ::testing::TestParamInfo<Shape3>& p) {
                           return absl::StrCat("n", p.param.n, "_k", p.param.k, "_m",
                                               p.param.m);
                         });

// An empty inner dimension (an expert that got no tokens): the product is zero, an accumulation
// leaves its target as it was, and the empty operands' null data is never offset (UBSan flagged
// `b + c` on a null pointer in the config fuzzer's wide-MoE seed).
TEST(MatMul, AnEmptyInnerDimensionGivesZerosAndAddsNothing) {
  Tensor y = Random(3, 40, 5);
  ASSERT_TRUE(MatMul(ConstMatrixView(nullptr, 3, 0), ConstMatrixView(nullptr, 0, 40), y).ok());
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 40; ++c) EXPECT_EQ(y.at(r, c), 0.0f) << r << "," << c;
  }
  Tensor g = Random(5, 40, 6);
  const Tensor before = g;
  ASSERT_TRUE(MatMulTransposedAAccumulate(ConstMatrixView(nullptr, 0, 5), ConstMatrixView(nullptr, 0, 40), g).ok());
  for (int r = 0; r < 5; ++r) {
    for (int c = 0; c < 40; ++c) EXPECT_EQ(g.at(r, c), before.at(r, c)) << r << "," << c;
  }
}

TEST(MatMul, ColumnSliceOfWeightsGivesTheSameBits) {
  // What makes a column-parallel shard exact: its output columns equal the full product's.
  Tensor x = Random(9, 12, 8), w = Random(12, 10, 9), full(9, 10);
  ASSERT_TRUE(MatMul(x, w, full).ok());
  Tensor w_right(12, 4), part(9, 4);
  for (int i = 0; i < 12; ++i) {
    for (int c = 0; c < 4; ++c) w_right.at(i, c) = w.at(i, 6 + c);
  }
  ASSERT_TRUE(MatMul(x, w_right, part).ok());
  for (int r = 0; r < 9; ++r) {
    for (int c = 0; c < 4; ++c) EXPECT_EQ(part.at(r, c), full.at(r, 6 + c));
  }
}

TEST(MatMul, RowsAreIndependentOfTheBatchSplit) {
  Tensor x = Random(10, 7, 10), w = Random(7, 6, 11), full(10, 6);
  ASSERT_TRUE(MatMul(x, w, full).ok());
  Tensor tail(3, 6);
  ASSERT_TRUE(MatMul(ConstMatrixView(x.data() + 7 * 7, 3, 7), w, tail).ok());
  EXPECT_TRUE(SameBits(tail.span(), full.span().subspan(7 * 6)));
}

TEST(MatMulTransposedAAccumulate, MicroBatchAccumulationEqualsOneBigBatchBitwise) {
  Tensor x = Random(12, 5, 12), dy = Random(12, 3, 13);
  Tensor whole(5, 3), pieces(5, 3);
  ASSERT_TRUE(MatMulTransposedAAccumulate(x, dy, whole).ok());
  for (int start : {0, 5, 9}) {  // uneven pieces: rows [0,5), [5,9), [9,12)
    const int len = start == 0 ? 5 : (start == 5 ? 4 : 3);
    ASSERT_TRUE(MatMulTransposedAAccumulate(ConstMatrixView(x.data() + start * 5, len, 5),
                                            ConstMatrixView(dy.data() + start * 3, len, 3), pieces)
                    .ok());
  }
  EXPECT_TRUE(SameBits(whole.span(), pieces.span()));
  Tensor db_whole(1, 3), db_pieces(1, 3);
  ASSERT_TRUE(AccumulateBiasGrad(dy, db_whole.span()).ok());
  ASSERT_TRUE(AccumulateBiasGrad(ConstMatrixView(dy.data(), 7, 3), db_pieces.span()).ok());
  ASSERT_TRUE(AccumulateBiasGrad(ConstMatrixView(dy.data() + 21, 5, 3), db_pieces.span()).ok());
  EXPECT_TRUE(SameBits(db_whole.span(), db_pieces.span()));
}

// The reduction-order contract, bit for bit: each output element is exactly the plain serial float
// loop (whichever code path the CPU takes: the AVX2 register blocks or the portable tiles), for
// shapes that exercise every block size and remainder (rows % 4, columns % 16 and % 8).
// The plain serial loops of the reduction-order contract (kernels.h), a separate multiply and add
// per product (volatile: no contraction into an FMA).
Tensor SerialMatMul(const Tensor& x, const Tensor& w) {  // x · w
  Tensor y(x.rows(), w.cols());
  for (int64_t r = 0; r < x.rows(); ++r) {
    for (int64_t c = 0; c < w.cols(); ++c) {
      float acc = 0.0f;
      for (int64_t i = 0; i < x.cols(); ++i) {
        const volatile float p = x.at(r, i) * w.at(i, c);
        acc += p;
      }
      y.at(r, c) = acc;
    }
  }
  return y;
}
Tensor SerialTransposedB(const Tensor& dy, const Tensor& w) {  // dy · wᵀ
  Tensor dx(dy.rows(), w.rows());
  for (int64_t r = 0; r < dy.rows(); ++r) {
    for (int64_t i = 0; i < w.rows(); ++i) {
      float acc = 0.0f;
      for (int64_t t = 0; t < dy.cols(); ++t) {
        const volatile float p = dy.at(r, t) * w.at(i, t);
        acc += p;
      }
      dx.at(r, i) = acc;
    }
  }
  return dx;
}
void SerialTransposedAAccumulate(const Tensor& x, const Tensor& dy, Tensor& g) {  // g += xᵀ · dy
  for (int64_t i = 0; i < x.cols(); ++i) {
    for (int64_t c = 0; c < dy.cols(); ++c) {
      float acc = g.at(i, c);
      for (int64_t r = 0; r < x.rows(); ++r) {
        const volatile float p = x.at(r, i) * dy.at(r, c);
        acc += p;
      }
      g.at(i, c) = acc;
    }
  }
}

// y = x · w, g += xᵀ · dy onto a non-zero g, and dx = dy · wᵀ each way MatMulTransposedB can take
// (strips of w, or w transposed whole), for x n × k and w k × m: the serial loops' bits. Mixed
// magnitudes, so a different summation order would change the low bits.
void ExpectSerialBits(int64_t n, int64_t k, int64_t m, uint32_t& seed) {
  SCOPED_TRACE(absl::StrCat("n ", n, " k ", k, " m ", m));
  Tensor x = Random(n, k, ++seed, 100.0f), w = Random(k, m, ++seed, 0.01f);
  Tensor y(n, m);
  ASSERT_TRUE(MatMul(x, w, y).ok());
  EXPECT_TRUE(SameBits(y.span(), SerialMatMul(x, w).span()));
  Tensor dy = Random(n, m, ++seed, 0.01f);
  Tensor g = Random(k, m, ++seed, 1.0f), gwant = g;
  ASSERT_TRUE(MatMulTransposedAAccumulate(x, dy, g).ok());
  SerialTransposedAAccumulate(x, dy, gwant);
  EXPECT_TRUE(SameBits(g.span(), gwant.span()));
  Tensor dy100 = Random(n, m, ++seed, 100.0f);
  const Tensor dxwant = SerialTransposedB(dy100, w);
  for (TransposedBWay way : {TransposedBWay::kAuto, TransposedBWay::kStrips, TransposedBWay::kTransposeW}) {
    Tensor dx(n, k), scratch;
    ASSERT_TRUE(MatMulTransposedB(dy100, w, dx, &scratch, way).ok());
    EXPECT_TRUE(SameBits(dx.span(), dxwant.span())) << "way " << static_cast<int>(way);
  }
}

// Every register block size and remainder of the AVX2 paths (4- and 1-row blocks, 16-, 8- and
// 1-column blocks; strips of 16 and 8 rows of w and the last k % 8 columns).
TEST(Kernels, MatMulsEqualThePlainSerialLoopBitwise) {
  uint32_t seed = 100;
  for (int64_t n : {1, 3, 4, 5, 9, 32, 70}) {
    for (int64_t k : {1, 7, 8, 33, 64}) {
      for (int64_t m : {1, 7, 8, 9, 16, 17, 40, 64}) ExpectSerialBits(n, k, m, seed);
    }
  }
}

// Shapes whose right operand is walked by panels (kernels.cc: 16 rows or more, an operand of 2^18
// values or more, in panels of 256 terms × 256 columns): several panels each way, a last panel
// part-filled both ways (600 = 2·256 + 88 terms; 523 = 2·256 + 11 columns: 16-, 8- and 1-column
// blocks), row counts with and without a remainder of 4; for dx = dy · wᵀ, k = 600 is 37 strips
// of 16 rows of w and one of 8, and m = 523 leaves each strip 3 terms copied one by one.
TEST(Kernels, PanelledMatMulsEqualThePlainSerialLoopBitwise) {
  uint32_t seed = 900;
  for (const auto& [n, k, m] : {Shape3{16, 600, 523}, Shape3{37, 600, 523}, Shape3{18, 1024, 256},
                                Shape3{21, 256, 1031}}) {
    ExpectSerialBits(n, k, m, seed);
  }
  // The gradient's panels across the batch: 700 rows of x (three panels of terms) onto 300 × 523.
  Tensor x = Random(700, 300, ++seed, 100.0f), dy = Random(700, 523, ++seed, 0.01f);
  Tensor g = Random(300, 523, ++seed, 1.0f), gwant = g;
  ASSERT_TRUE(MatMulTransposedAAccumulate(x, dy, g).ok());
  SerialTransposedAAccumulate(x, dy, gwant);
  EXPECT_TRUE(SameBits(g.span(), gwant.span()));
}

TEST(Kernels, ShapeMismatchesAreInvalidArgument) {
  Tensor a(3, 4), b(5, 6), c(3, 6), scratch;
  EXPECT_EQ(MatMul(a, b, c).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MatMulTransposedB(a, b, c, &scratch).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MatMulTransposedAAccumulate(a, b, c).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AddBias(c, std::vector<float>(5)).code(), absl::StatusCode::kInvalidArgument);
  std::vector<float> db(5);
  EXPECT_EQ(AccumulateBiasGrad(c, db).code(), absl::StatusCode::kInvalidArgument);
  std::vector<float> d(3);
  EXPECT_EQ(Accumulate(d, std::vector<float>(4)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ActivationForward(Activation::kRelu, a, c).code(), absl::StatusCode::kInvalidArgument);
  const absl::Status s = MatMul(a, b, c);
  EXPECT_NE(s.message().find("3x4"), std::string_view::npos) << s;
}

TEST(Kernels, BiasAndAccumulate) {
  Tensor y(2, 3);
  y.span()[4] = 1.0f;
  ASSERT_TRUE(AddBias(y, std::vector<float>{1, 2, 3}).ok());
  EXPECT_EQ(std::vector<float>(y.span().begin(), y.span().end()),
            (std::vector<float>{1, 2, 3, 1, 3, 3}));
  std::vector<float> db{10, 20, 30};
  ASSERT_TRUE(AccumulateBiasGrad(y, db).ok());
  EXPECT_EQ(db, (std::vector<float>{12, 25, 36}));
  std::vector<float> dst{1, 2};
  ASSERT_TRUE(Accumulate(dst, std::vector<float>{0.5f, -2}).ok());
  EXPECT_EQ(dst, (std::vector<float>{1.5f, 0}));
}

TEST(Activation, ForwardValues) {
  Tensor pre(1, 4, {-2.0f, -0.0f, 0.5f, 3.0f}), out(1, 4);
  ASSERT_TRUE(ActivationForward(Activation::kRelu, pre, out).ok());
  EXPECT_EQ(std::vector<float>(out.span().begin(), out.span().end()),
            (std::vector<float>{0, 0, 0.5f, 3}));
  ASSERT_TRUE(ActivationForward(Activation::kGelu, pre, out).ok());
  // GELU(x) ≈ x Φ(x): closed-form values of the tanh approximation.
  for (int i = 0; i < 4; ++i) {
    const double x = pre.at(0, i);
    const double want =
        0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    EXPECT_NEAR(out.at(0, i), want, 1e-6);
  }
  EXPECT_NEAR(out.at(0, 3), 3.0 * 0.99865, 2e-3);  // ≈ x Φ(x)
}

class ActivationGrad : public ::testing::TestWithParam<Activation> {};

TEST_P(ActivationGrad, MatchesFiniteDifferences) {
  // Points away from ReLU's kink.
  Tensor pre(1, 6, {-2.1f, -0.7f, -0.05f, 0.05f, 0.9f, 2.4f});
  Tensor dout(1, 6, {0.3f, -1.1f, 0.7f, 1.3f, -0.4f, 0.9f}), dpre(1, 6);
  ASSERT_TRUE(ActivationBackward(GetParam(), pre, dout, dpre).ok());
  for (int i = 0; i < 6; ++i) {
    const float h = 1e-3f;
    Tensor p(1, 1, {pre.at(0, i) + h}), m(1, 1, {pre.at(0, i) - h}), op(1, 1), om(1, 1);
    ASSERT_TRUE(ActivationForward(GetParam(), p, op).ok());
    ASSERT_TRUE(ActivationForward(GetParam(), m, om).ok());
    const double fd = (double(op.at(0, 0)) - om.at(0, 0)) / (2.0 * h) * dout.at(0, i);
    EXPECT_NEAR(dpre.at(0, i), fd, 2e-3) << ActivationName(GetParam()) << " at " << pre.at(0, i);
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, ActivationGrad,
                         ::testing::Values(Activation::kIdentity, Activation::kRelu,
                                           Activation::kGelu),
                         [](const ::testing::TestParamInfo<Activation>& p) {
                           return std::string(ActivationName(p.param));
                         });

TEST(SoftmaxCrossEntropy, MatchesDoubleReferenceAndCountsCorrect) {
  Tensor logits = Random(5, 4, 14, 3.0f);
  std::vector<int32_t> labels{0, 3, 2, 1, 3};
  double want_loss = 0.0;
  int64_t want_correct = 0;
  for (int r = 0; r < 5; ++r) {
    double z = 0.0;
    int best = 0;
    for (int c = 0; c < 4; ++c) {
      z += std::exp(double(logits.at(r, c)));
      if (logits.at(r, c) > logits.at(r, best)) best = c;
    }
    want_loss += std::log(z) - logits.at(r, labels[r]);
    want_correct += best == labels[r];
  }
  Tensor grad(5, 4);
  auto stats = SoftmaxCrossEntropy(logits, labels, 0.2f, grad);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_NEAR(stats->loss_sum, want_loss, 1e-9);
  EXPECT_EQ(stats->correct, want_correct);
  EXPECT_EQ(stats->count, 5);
  EXPECT_EQ(*CountCorrect(logits, labels), want_correct);
  // Gradient rows of (softmax − onehot) sum to zero.
  for (int r = 0; r < 5; ++r) {
    double s = 0.0;
    for (int c = 0; c < 4; ++c) s += grad.at(r, c);
    EXPECT_NEAR(s, 0.0, 1e-7);
  }
}

TEST(SoftmaxCrossEntropy, GradientMatchesFiniteDifferences) {
  Tensor logits = Random(3, 5, 15, 2.0f);
  std::vector<int32_t> labels{4, 0, 2};
  Tensor grad(3, 5);
  ASSERT_TRUE(SoftmaxCrossEntropy(logits, labels, 1.0f, grad).ok());
  for (int i = 0; i < 15; ++i) {
    const float h = 1e-2f;
    Tensor p = logits, m = logits;
    p.span()[i] += h;
    m.span()[i] -= h;
    const double fd = (SoftmaxCrossEntropy(p, labels, 1.0f, {})->loss_sum -
                       SoftmaxCrossEntropy(m, labels, 1.0f, {})->loss_sum) /
                      (2.0 * h);
    EXPECT_NEAR(grad.span()[i], fd, 1e-4) << "logit " << i;
  }
}

TEST(SoftmaxCrossEntropy, StableForHugeLogits) {
  Tensor logits(2, 3, {1e4f, -1e4f, 0.0f, 5e3f, 5e3f + 1.0f, -3e4f});
  std::vector<int32_t> labels{0, 0};
  Tensor grad(2, 3);
  auto stats = SoftmaxCrossEntropy(logits, labels, 1.0f, grad);
  ASSERT_TRUE(stats.ok());
  // Row 0: loss ≈ 0; row 1: loss = log(1 + e) − 0 ≈ 1.3133.
  EXPECT_NEAR(stats->loss_sum, std::log(1.0 + std::exp(1.0)), 1e-6);
  for (float g : grad.span()) EXPECT_TRUE(std::isfinite(g));
}

TEST(SoftmaxCrossEntropy, RejectsBadLabels) {
  Tensor logits(2, 3);
  const absl::Status s = SoftmaxCrossEntropy(logits, std::vector<int32_t>{0, 3}, 1.0f, {}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("row 1"), std::string_view::npos) << s;
  EXPECT_EQ(CountCorrect(logits, std::vector<int32_t>{0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A whole linear layer + GELU + loss: gradients w.r.t. weights, bias and input by finite
// differences, through the kernels exactly as a stage chains them.
TEST(LinearLayer, GradientsMatchFiniteDifferences) {
  const int n = 4, k = 6, m = 5;
  Tensor x = Random(n, k, 16), w = Random(k, m, 17, 0.7f);
  std::vector<float> b{0.1f, -0.2f, 0.3f, 0.0f, 0.05f};
  std::vector<int32_t> labels{1, 4, 0, 2};
  auto loss = [&](const Tensor& xx, const Tensor& ww, const std::vector<float>& bb) {
    Tensor pre(n, m), out(n, m);
    EXPECT_TRUE(MatMul(xx, ww, pre).ok());
    EXPECT_TRUE(AddBias(pre, bb).ok());
    EXPECT_TRUE(ActivationForward(Activation::kGelu, pre, out).ok());
    return SoftmaxCrossEntropy(out, labels, 1.0f, {})->loss_sum;
  };
  Tensor pre(n, m), out(n, m), dout(n, m), dw(k, m), dx(n, k), scratch;
  std::vector<float> db(m, 0.0f);
  ASSERT_TRUE(MatMul(x, w, pre).ok());
  ASSERT_TRUE(AddBias(pre, b).ok());
  ASSERT_TRUE(ActivationForward(Activation::kGelu, pre, out).ok());
  ASSERT_TRUE(SoftmaxCrossEntropy(out, labels, 1.0f, dout).ok());
  ASSERT_TRUE(ActivationBackward(Activation::kGelu, pre, dout, dout).ok());
  ASSERT_TRUE(MatMulTransposedAAccumulate(x, dout, dw).ok());
  ASSERT_TRUE(AccumulateBiasGrad(dout, db).ok());
  ASSERT_TRUE(MatMulTransposedB(dout, w, dx, &scratch).ok());
  const float h = 1e-2f;
  for (int i = 0; i < k * m; ++i) {
    Tensor wp = w, wm = w;
    wp.span()[i] += h;
    wm.span()[i] -= h;
    EXPECT_NEAR(dw.span()[i], (loss(x, wp, b) - loss(x, wm, b)) / (2 * h), 2e-3) << "w " << i;
  }
  for (int i = 0; i < m; ++i) {
    auto bp = b, bm = b;
    bp[i] += h;
    bm[i] -= h;
    EXPECT_NEAR(db[i], (loss(x, w, bp) - loss(x, w, bm)) / (2 * h), 2e-3) << "b " << i;
  }
  for (int i = 0; i < n * k; ++i) {
    Tensor xp = x, xm = x;
    xp.span()[i] += h;
    xm.span()[i] -= h;
    EXPECT_NEAR(dx.span()[i], (loss(xp, w, b) - loss(xm, w, b)) / (2 * h), 2e-3) << "x " << i;
  }
}


// TensorPool: a recycled buffer backs the next tensor that fits (same storage, no allocation), Zeros
// come back zeroed whatever the buffer held, a larger request does not take a smaller buffer, and the
// pool keeps a bounded number of buffers.
TEST(TensorPool, ReusesStorageZeroedAndBounded) {
  TensorPool pool;
  Tensor a = pool.Zeros(4, 8);
  for (float& v : a.span()) v = 7.0f;
  const float* storage = a.data();
  pool.Recycle(std::move(a));
  EXPECT_EQ(pool.spare(), 1u);

  Tensor big = pool.Zeros(8, 8);  // 64 > 32 elements: not the recycled buffer
  EXPECT_NE(big.data(), storage);
  EXPECT_EQ(pool.spare(), 1u);

  Tensor b = pool.Zeros(2, 16);  // 32 elements: fits
  EXPECT_EQ(b.data(), storage);
  EXPECT_EQ(b.rows(), 2);
  EXPECT_EQ(b.cols(), 16);
  for (float v : b.span()) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(pool.spare(), 0u);

  const std::vector<float> src = {1, 2, 3, 4, 5, 6};
  Tensor c = pool.Copy(ConstMatrixView(src.data(), 2, 3));
  EXPECT_EQ(std::vector<float>(c.span().begin(), c.span().end()), src);

  pool.Recycle(Tensor());  // nothing to keep
  EXPECT_EQ(pool.spare(), 0u);
  const float* big_storage = big.data();
  pool.Recycle(std::move(big));
  Tensor d = pool.ForOverwrite(3, 5);  // 15 elements: the big buffer (64) backs it
  EXPECT_EQ(d.data(), big_storage);
  EXPECT_EQ(d.size(), 15);
  pool.Recycle(std::move(d));
  for (size_t i = 0; i < TensorPool::kKeep + 5; ++i) pool.Recycle(Tensor(1, 1));
  EXPECT_EQ(pool.spare(), TensorPool::kKeep);
}

// Best fit: of the buffers that fit, the smallest backs the tensor (a stage whose layers alternate
// a TP shard and a full activation keeps reusing both sizes instead of handing the large buffer to
// the small tensor and allocating the next large one), the most recently kept among equals.
TEST(TensorPool, TheSmallestBufferThatFitsBacksTheTensor) {
  TensorPool pool;
  Tensor large = pool.ForOverwrite(32, 64);
  Tensor small = pool.ForOverwrite(32, 32);
  Tensor small2 = pool.ForOverwrite(32, 32);
  const float* large_storage = large.data();
  const float* small_storage = small.data();
  const float* small2_storage = small2.data();
  pool.Recycle(std::move(small));
  pool.Recycle(std::move(large));  // kept last: a first fit from the back would take it
  pool.Recycle(std::move(small2));

  Tensor s = pool.ForOverwrite(16, 64);  // 1024 elements: both small buffers fit exactly
  EXPECT_EQ(s.data(), small2_storage);   // the most recently kept of the equals
  Tensor t = pool.ForOverwrite(32, 16);  // 512: the other small buffer, not the large one
  EXPECT_EQ(t.data(), small_storage);
  Tensor u = pool.ForOverwrite(32, 64);  // 2048: only the large buffer fits
  EXPECT_EQ(u.data(), large_storage);
  EXPECT_EQ(pool.spare(), 0u);
}

}  // namespace
}  // namespace rp
