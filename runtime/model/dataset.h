// rp::Dataset: the synthetic, seeded, deterministic classification data set the workload trains on,
// and rp::BatchLayout: how a step's global batch is cut into DP shards and micro-batches.
//
// Data. Sample i of a split has input_dim features drawn N(0, 1) from a counter-based hash of
// (seed, split, i, feature) (Box–Muller in double, rounded to float): a pure function of its
// coordinates. Its label is the argmax of a fixed random teacher network,
//   logits = tanh(x·V + c)·U − mean over the train split of those logits (per class),
// with V, c, U drawn from the same hash (in double). Centering the teacher's logits balances the
// classes, so chance accuracy is about 1/classes (MajorityFraction gives the exact figure).
// The train and held-out (test) splits are disjoint streams of the same distribution.
//
// Batch order (docs/model.md; the serial reference and the executor must agree on it). A step's
// global batch has B = dp × microbatches × microbatch_size samples. Position
//   p = replica · (microbatches · microbatch_size) + micro_batch · microbatch_size + row
// of step s holds train sample (s · B + p) mod train_size. So DP replica d gets a contiguous shard,
// micro-batch j is contiguous inside it, and the reference walks (d, j, row) in that order.
//
// Thread safety: immutable after Create; every method is const and may be called from any number of
// threads concurrently (the executor's devices share one Dataset).
//
// Example:
//   RP_ASSIGN_OR_RETURN(rp::Dataset data, rp::Dataset::Create({}));
//   rp::BatchLayout layout{.dp = 2, .microbatches = 4, .microbatch_size = 32};
//   RP_ASSIGN_OR_RETURN(rp::Batch mb, data.TrainMicroBatch(layout, /*step=*/0, /*replica=*/1,
//                                                          /*micro_batch=*/3));
//   // mb.inputs: 32 x input_dim, mb.labels: 32 class ids
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/model/tensor.h"

namespace rp {

struct DatasetConfig {
  int input_dim = 16;
  int classes = 10;
  int64_t train_size = 32768;
  int64_t test_size = 4096;
  int teacher_hidden = 64;
  uint64_t seed = 7;
  // Threads that generate the samples (row slices of at least 2048 rows; every sample is a pure
  // function of its index, so the data set is the same for any value). 0: up to 4, as the host has
  // cores.
  int generation_threads = 0;
};

enum class Split { kTrain, kTest };

// Bytes Dataset::Create holds at its peak for `config`: both splits' inputs (fp32) and labels, plus
// the teacher's logits (double) while labelling. In double: a caller compares it with the memory it
// has before asking for it.
double DatasetPeakBytes(const DatasetConfig& config);
// Largest data set Create builds (DatasetPeakBytes): 64 GiB, beyond any machine this runs on.
inline constexpr double kMaxDatasetBytes = 0x1p36;

// How one step's global batch is divided. Validate with ValidateBatchLayout.
struct BatchLayout {
  int dp = 1;               // data-parallel replicas
  int microbatches = 1;     // per replica per step
  int microbatch_size = 32; // samples per micro-batch
  int64_t global_batch() const {
    return static_cast<int64_t>(dp) * microbatches * microbatch_size;
  }
};

// InvalidArgument naming the field (dp, microbatches, microbatch_size must be >= 1).
[[nodiscard]] absl::Status ValidateBatchLayout(const BatchLayout& layout);

// A set of samples: inputs (n x input_dim) and their labels (n).
struct Batch {
  Tensor inputs;
  std::vector<int32_t> labels;
};

class Dataset {
 public:
  // Materialises both splits (train_size + test_size samples). Errors: InvalidArgument naming the
  // field (input_dim, classes >= 2, train_size, test_size >= 1, teacher_hidden >= 1; train_size when
  // DatasetPeakBytes is above kMaxDatasetBytes).
  [[nodiscard]] static absl::StatusOr<Dataset> Create(const DatasetConfig& config);

  const DatasetConfig& config() const { return config_; }
  int input_dim() const { return config_.input_dim; }
  int classes() const { return config_.classes; }
  int64_t size(Split split) const;
  ConstMatrixView inputs(Split split) const;
  std::span<const int32_t> labels(Split split) const;

  // The train sample at position (replica, micro_batch, row) of step `step` (see the batch order).
  static int64_t TrainIndex(const BatchLayout& layout, int64_t step, int replica, int micro_batch,
                            int row, int64_t train_size);

  // Micro-batch `micro_batch` of DP replica `replica` at step `step` (step >= 0).
  // Errors: bad layout, replica or micro_batch out of range (naming it).
  [[nodiscard]] absl::StatusOr<Batch> TrainMicroBatch(const BatchLayout& layout, int64_t step,
                                                      int replica, int micro_batch) const;

  // Samples [begin, begin + count) of `split`. Errors: a range outside the split.
  [[nodiscard]] absl::StatusOr<Batch> Slice(Split split, int64_t begin, int64_t count) const;

  // Fraction of the split's samples in its most frequent class (the accuracy of always guessing it).
  double MajorityFraction(Split split) const;

 private:
  Dataset() = default;
  DatasetConfig config_;
  Tensor train_x_, test_x_;
  std::vector<int32_t> train_y_, test_y_;
};

}  // namespace rp
