// rp::Tensor: a dense, row-major, owning float matrix; rp::MatrixView / rp::ConstMatrixView: spans
// over one.
//
// The workload's data type. A Tensor owns `rows * cols` floats in one std::vector (row r starts at
// r * cols); a view is a (pointer, rows, cols) triple that does not own. Every model activation,
// gradient and weight block is one of these; a vector of samples is a matrix with one row per sample.
//
// Guarantees: elements are value-initialised (0.0f) on construction; Tensor is a regular value type
// (copy = deep copy; move leaves the source empty 0x0). `storage()` / `Release()` hand the bytes to a
// message buffer without copying.
//
// Thread safety: none of its own. Distinct tensors may be used from distinct threads; one tensor is
// shared only read-only (const).
//
// Example:
//   rp::Tensor x(/*rows=*/32, /*cols=*/64);
//   x.at(0, 3) = 1.0f;
//   rp::ConstMatrixView v = x;              // implicit view
//   std::span<const float> row0 = v.row(0);
//   std::vector<float> bytes = std::move(x).Release();  // x is now 0x0
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace rp {

// Mutable non-owning view of a row-major rows x cols float matrix. The viewed memory must outlive it.
struct MatrixView {
  float* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;

  int64_t size() const { return rows * cols; }
  std::span<float> span() const { return {data, static_cast<size_t>(size())}; }
  std::span<float> row(int64_t r) const { return {data + r * cols, static_cast<size_t>(cols)}; }
  float& at(int64_t r, int64_t c) const { return data[r * cols + c]; }
};

// Read-only non-owning view; implicitly made from a MatrixView or a Tensor.
struct ConstMatrixView {
  const float* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;

  ConstMatrixView() = default;
  ConstMatrixView(const float* d, int64_t r, int64_t c) : data(d), rows(r), cols(c) {}
  ConstMatrixView(MatrixView v) : data(v.data), rows(v.rows), cols(v.cols) {}  // NOLINT

  int64_t size() const { return rows * cols; }
  std::span<const float> span() const { return {data, static_cast<size_t>(size())}; }
  std::span<const float> row(int64_t r) const {
    return {data + r * cols, static_cast<size_t>(cols)};
  }
  float at(int64_t r, int64_t c) const { return data[r * cols + c]; }
};

// Owning row-major float matrix. Dimensions are non-negative; callers validate them (the library
// code that builds tensors from user input checks sizes first and returns a Status).
class Tensor {
 public:
  Tensor() = default;
  Tensor(int64_t rows, int64_t cols)
      : rows_(rows), cols_(cols), data_(static_cast<size_t>(rows * cols), 0.0f) {}
  // Adopts `data` (size must be rows * cols; the caller guarantees it).
  Tensor(int64_t rows, int64_t cols, std::vector<float> data)
      : rows_(rows), cols_(cols), data_(std::move(data)) {}

  Tensor(const Tensor&) = default;
  Tensor& operator=(const Tensor&) = default;
  Tensor(Tensor&& o) noexcept
      : rows_(std::exchange(o.rows_, 0)), cols_(std::exchange(o.cols_, 0)),
        data_(std::move(o.data_)) {
    o.data_.clear();
  }
  Tensor& operator=(Tensor&& o) noexcept {
    rows_ = std::exchange(o.rows_, 0);
    cols_ = std::exchange(o.cols_, 0);
    data_ = std::move(o.data_);
    o.data_.clear();
    return *this;
  }

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t size() const { return rows_ * cols_; }
  bool empty() const { return size() == 0; }
  // Bytes of float payload (what memory accounting counts).
  int64_t bytes() const { return size() * static_cast<int64_t>(sizeof(float)); }

  float* data() { return data_.data(); }
  const float* data() const { return data_.data(); }
  std::span<float> span() { return data_; }
  std::span<const float> span() const { return data_; }
  std::span<float> row(int64_t r) { return {data_.data() + r * cols_, static_cast<size_t>(cols_)}; }
  std::span<const float> row(int64_t r) const {
    return {data_.data() + r * cols_, static_cast<size_t>(cols_)};
  }
  float& at(int64_t r, int64_t c) { return data_[static_cast<size_t>(r * cols_ + c)]; }
  float at(int64_t r, int64_t c) const { return data_[static_cast<size_t>(r * cols_ + c)]; }

  MatrixView view() { return {data_.data(), rows_, cols_}; }
  ConstMatrixView view() const { return {data_.data(), rows_, cols_}; }
  operator MatrixView() { return view(); }             // NOLINT
  operator ConstMatrixView() const { return view(); }  // NOLINT

  // Sets every element to 0 (keeps the shape).
  void SetZero() { std::fill(data_.begin(), data_.end(), 0.0f); }

  // The storage, e.g. to put on a channel without a copy. Leaves this tensor 0x0.
  std::vector<float> Release() && {
    rows_ = cols_ = 0;
    return std::move(data_);
  }

 private:
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  std::vector<float> data_;
};

// Storage of freed tensors, for new ones of the same sizes: a pipeline stage's activations come
// and go every pass with the same few shapes, so in the steady state a new tensor costs neither an
// allocation nor a fresh page. It keeps what was freed, up to kKeep buffers: since it only creates
// a buffer when it has none that fits, the buffers alive and kept together stay about the peak of
// those alive at once. One owner, one thread at a time.
class TensorPool {
 public:
  // rows × cols zeros (as Tensor(rows, cols)), on recycled storage when some is large enough.
  Tensor Zeros(int64_t rows, int64_t cols) {
    Tensor t = ForOverwrite(rows, cols);
    t.SetZero();
    return t;
  }
  // rows × cols of unspecified values (recycled data or zeros), for an output that is written
  // whole (e.g. MatMul's y).
  Tensor ForOverwrite(int64_t rows, int64_t cols) {
    const size_t n = static_cast<size_t>(rows * cols);
    // Best fit, the most recently kept among equals: a first fit would hand a large buffer to a
    // small tensor, and the next large one would find only small buffers (a fresh allocation per
    // pass where a stage's layers alternate two shapes, e.g. TP shards and full activations).
    size_t best = spare_.size();
    for (size_t i = spare_.size(); i-- > 0;) {
      const size_t cap = spare_[i].capacity();
      if (cap < n || (best != spare_.size() && cap >= spare_[best].capacity())) continue;
      best = i;
      if (cap == n) break;
    }
    if (best == spare_.size()) return Tensor(rows, cols);
    std::vector<float> v = std::move(spare_[best]);
    spare_[best] = std::move(spare_.back());
    spare_.pop_back();
    v.resize(n);  // writes only elements beyond the old size
    return Tensor(rows, cols, std::move(v));
  }
  // A copy of `src`.
  Tensor Copy(ConstMatrixView src) {
    Tensor t = ForOverwrite(src.rows, src.cols);
    std::copy(src.data, src.data + src.size(), t.data());
    return t;
  }
  // Keeps t's storage for a later Zeros, ForOverwrite or Copy.
  void Recycle(Tensor t) {
    if (t.empty() || spare_.size() >= kKeep) return;
    spare_.push_back(std::move(t).Release());
  }
  size_t spare() const { return spare_.size(); }
  static constexpr size_t kKeep = 64;

 private:
  std::vector<std::vector<float>> spare_;
};

}  // namespace rp
