#include "runtime/model/dataset.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numbers>
#include <vector>

#include "absl/strings/str_format.h"

#include "runtime/hash.h"
#include "runtime/thread.h"

namespace rp {
namespace {

// A hash of a small tuple of integers.
uint64_t Hash(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
  return SplitMix64(SplitMix64(SplitMix64(SplitMix64(seed) ^ a) ^ b) ^ c);
}

// Uniform in (0, 1): 53 random bits, never 0.
double Unit(uint64_t h) { return (static_cast<double>(h >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

// N(0, 1) as a pure function of its key (Box–Muller on two hashes).
double Normal(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
  const double u1 = Unit(Hash(seed, a, b, 2 * c));
  const double u2 = Unit(Hash(seed, a, b, 2 * c + 1));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// Streams of the hash (the first key component).
constexpr uint64_t kTrainStream = 1, kTestStream = 2, kTeacherV = 3, kTeacherC = 4, kTeacherU = 5;

// Runs fn(begin, end) over [0, rows) in contiguous slices on up to c.generation_threads threads
// (the caller's one of them). Every row is a pure function of its index, so the result does not
// depend on the split.
void ForRowSlices(const DatasetConfig& c, int64_t rows,
                  const std::function<void(int64_t, int64_t)>& fn) {
  constexpr int64_t kMinRowsPerSlice = 2048;
  ForSlices(rows, c.generation_threads, kMinRowsPerSlice, fn);
}

void FillInputs(const DatasetConfig& c, uint64_t stream, Tensor* x) {
  ForRowSlices(c, x->rows(), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      for (int f = 0; f < c.input_dim; ++f) {
        x->at(i, f) = static_cast<float>(
            Normal(c.seed, stream, static_cast<uint64_t>(i), static_cast<uint64_t>(f)));
      }
    }
  });
}

// Teacher logits (double), one row per sample.
std::vector<double> TeacherLogits(const DatasetConfig& c, const Tensor& x) {
  const int in = c.input_dim, h = c.teacher_hidden, k = c.classes;
  std::vector<double> v(static_cast<size_t>(in) * h), cb(static_cast<size_t>(h)),
      u(static_cast<size_t>(h) * k);
  const double v_scale = 2.0 / std::sqrt(static_cast<double>(in));
  for (int i = 0; i < in; ++i) {
    for (int j = 0; j < h; ++j) {
      v[static_cast<size_t>(i) * h + j] =
          Normal(c.seed, kTeacherV, static_cast<uint64_t>(i), static_cast<uint64_t>(j)) * v_scale;
    }
  }
  for (int j = 0; j < h; ++j) cb[static_cast<size_t>(j)] = 0.5 * Normal(c.seed, kTeacherC, 0, j);
  for (int j = 0; j < h; ++j) {
    for (int q = 0; q < k; ++q) {
      u[static_cast<size_t>(j) * k + q] =
          Normal(c.seed, kTeacherU, static_cast<uint64_t>(j), static_cast<uint64_t>(q));
    }
  }
  std::vector<double> logits(static_cast<size_t>(x.rows()) * k, 0.0);
  ForRowSlices(c, x.rows(), [&](int64_t begin, int64_t end) {
    std::vector<double> hid(static_cast<size_t>(h));
    for (int64_t r = begin; r < end; ++r) {
      for (int j = 0; j < h; ++j) {
        double s = cb[static_cast<size_t>(j)];
        for (int i = 0; i < in; ++i) s += x.at(r, i) * v[static_cast<size_t>(i) * h + j];
        hid[static_cast<size_t>(j)] = std::tanh(s);
      }
      for (int q = 0; q < k; ++q) {
        double s = 0.0;
        for (int j = 0; j < h; ++j) s += hid[static_cast<size_t>(j)] * u[static_cast<size_t>(j) * k + q];
        logits[static_cast<size_t>(r) * k + q] = s;
      }
    }
  });
  return logits;
}

std::vector<int32_t> Labels(const std::vector<double>& logits, const std::vector<double>& mean,
                            int k) {
  const size_t n = logits.size() / static_cast<size_t>(k);
  std::vector<int32_t> y(n);
  for (size_t r = 0; r < n; ++r) {
    int best = 0;
    double best_v = logits[r * k] - mean[0];
    for (int q = 1; q < k; ++q) {
      const double v = logits[r * k + q] - mean[static_cast<size_t>(q)];
      if (v > best_v) {
        best_v = v;
        best = q;
      }
    }
    y[r] = best;
  }
  return y;
}

}  // namespace

absl::Status ValidateBatchLayout(const BatchLayout& layout) {
  if (layout.dp < 1) return absl::InvalidArgumentError(absl::StrFormat("dp must be >= 1, got %d", layout.dp));
  if (layout.microbatches < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("microbatches must be >= 1, got %d", layout.microbatches));
  }
  if (layout.microbatch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("microbatch_size must be >= 1, got %d", layout.microbatch_size));
  }
  return absl::OkStatus();
}

double DatasetPeakBytes(const DatasetConfig& c) {
  const double samples = static_cast<double>(c.train_size) + static_cast<double>(c.test_size);
  return samples * (4.0 * c.input_dim + sizeof(int32_t) + 8.0 * c.classes);
}

absl::StatusOr<Dataset> Dataset::Create(const DatasetConfig& config) {
  auto bad = [](const char* field, int64_t v, int64_t min) {
    return absl::InvalidArgumentError(absl::StrFormat("%s must be >= %d, got %d", field, min, v));
  };
  if (config.input_dim < 1) return bad("input_dim", config.input_dim, 1);
  if (config.classes < 2) return bad("classes", config.classes, 2);
  if (config.train_size < 1) return bad("train_size", config.train_size, 1);
  if (config.test_size < 1) return bad("test_size", config.test_size, 1);
  if (config.teacher_hidden < 1) return bad("teacher_hidden", config.teacher_hidden, 1);
  if (const double bytes = DatasetPeakBytes(config); bytes > kMaxDatasetBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "train_size: the data set would take %.3g GB (train_size %d + test_size %d samples); at most %.3g GB",
        bytes / 1e9, config.train_size, config.test_size, kMaxDatasetBytes / 1e9));
  }

  Dataset d;
  d.config_ = config;
  d.train_x_ = Tensor(config.train_size, config.input_dim);
  d.test_x_ = Tensor(config.test_size, config.input_dim);
  FillInputs(config, kTrainStream, &d.train_x_);
  FillInputs(config, kTestStream, &d.test_x_);
  const std::vector<double> train_logits = TeacherLogits(config, d.train_x_);
  const std::vector<double> test_logits = TeacherLogits(config, d.test_x_);
  const int k = config.classes;
  std::vector<double> mean(static_cast<size_t>(k), 0.0);
  for (int64_t r = 0; r < config.train_size; ++r) {
    for (int q = 0; q < k; ++q) mean[static_cast<size_t>(q)] += train_logits[static_cast<size_t>(r * k + q)];
  }
  for (double& m : mean) m /= static_cast<double>(config.train_size);
  d.train_y_ = Labels(train_logits, mean, k);
  d.test_y_ = Labels(test_logits, mean, k);
  return d;
}

int64_t Dataset::size(Split split) const {
  return split == Split::kTrain ? config_.train_size : config_.test_size;
}

ConstMatrixView Dataset::inputs(Split split) const {
  return split == Split::kTrain ? train_x_.view() : test_x_.view();
}

std::span<const int32_t> Dataset::labels(Split split) const {
  return split == Split::kTrain ? train_y_ : test_y_;
}

int64_t Dataset::TrainIndex(const BatchLayout& layout, int64_t step, int replica, int micro_batch,
                            int row, int64_t train_size) {
  const int64_t pos = static_cast<int64_t>(replica) * layout.microbatches * layout.microbatch_size +
                      static_cast<int64_t>(micro_batch) * layout.microbatch_size + row;
  return (step % train_size * (layout.global_batch() % train_size) + pos) % train_size;
}

absl::StatusOr<Batch> Dataset::TrainMicroBatch(const BatchLayout& layout, int64_t step,
                                               int replica, int micro_batch) const {
  if (auto s = ValidateBatchLayout(layout); !s.ok()) return s;
  if (step < 0) return absl::InvalidArgumentError(absl::StrFormat("step must be >= 0, got %d", step));
  if (replica < 0 || replica >= layout.dp) {
    return absl::InvalidArgumentError(
        absl::StrFormat("replica %d is outside [0, dp=%d)", replica, layout.dp));
  }
  if (micro_batch < 0 || micro_batch >= layout.microbatches) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "micro_batch %d is outside [0, microbatches=%d)", micro_batch, layout.microbatches));
  }
  Batch b;
  b.inputs = Tensor(layout.microbatch_size, config_.input_dim);
  b.labels.resize(static_cast<size_t>(layout.microbatch_size));
  for (int r = 0; r < layout.microbatch_size; ++r) {
    const int64_t i = TrainIndex(layout, step, replica, micro_batch, r, config_.train_size);
    std::copy_n(train_x_.row(i).data(), config_.input_dim, b.inputs.row(r).data());
    b.labels[static_cast<size_t>(r)] = train_y_[static_cast<size_t>(i)];
  }
  return b;
}

absl::StatusOr<Batch> Dataset::Slice(Split split, int64_t begin, int64_t count) const {
  const int64_t n = size(split);
  if (begin < 0 || count < 1 || begin + count > n) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "slice [%d, %d) is outside the %s split of %d samples", begin, begin + count,
        split == Split::kTrain ? "train" : "test", n));
  }
  const Tensor& x = split == Split::kTrain ? train_x_ : test_x_;
  const std::vector<int32_t>& y = split == Split::kTrain ? train_y_ : test_y_;
  Batch b;
  b.inputs = Tensor(count, config_.input_dim,
                    std::vector<float>(x.data() + begin * config_.input_dim,
                                       x.data() + (begin + count) * config_.input_dim));
  b.labels.assign(y.begin() + begin, y.begin() + begin + count);
  return b;
}

double Dataset::MajorityFraction(Split split) const {
  std::vector<int64_t> counts(static_cast<size_t>(config_.classes), 0);
  for (int32_t y : labels(split)) ++counts[static_cast<size_t>(y)];
  return static_cast<double>(*std::max_element(counts.begin(), counts.end())) /
         static_cast<double>(size(split));
}

}  // namespace rp
