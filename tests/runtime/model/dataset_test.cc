#include "runtime/model/dataset.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace rp {
namespace {

DatasetConfig Small() {
  DatasetConfig c;
  c.input_dim = 8;
  c.classes = 5;
  c.train_size = 1000;
  c.test_size = 300;
  c.teacher_hidden = 16;
  c.seed = 11;
  return c;
}

bool SameBits(ConstMatrixView a, ConstMatrixView b) {
  return a.size() == b.size() &&
         std::memcmp(a.data, b.data, static_cast<size_t>(a.size()) * sizeof(float)) == 0;
}

TEST(Dataset, IsDeterministicAndSeedDependent) {
  auto a = Dataset::Create(Small()), b = Dataset::Create(Small());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(SameBits(a->inputs(Split::kTrain), b->inputs(Split::kTrain)));
  EXPECT_TRUE(SameBits(a->inputs(Split::kTest), b->inputs(Split::kTest)));
  EXPECT_TRUE(std::equal(a->labels(Split::kTrain).begin(), a->labels(Split::kTrain).end(),
                         b->labels(Split::kTrain).begin()));
  DatasetConfig other = Small();
  other.seed = 12;
  auto c = Dataset::Create(other);
  EXPECT_FALSE(SameBits(a->inputs(Split::kTrain), c->inputs(Split::kTrain)));
  // Train and test are different samples.
  EXPECT_NE(a->inputs(Split::kTrain).at(0, 0), a->inputs(Split::kTest).at(0, 0));
  // A larger data set extends the smaller one: samples are pure functions of their index.
  DatasetConfig big = Small();
  big.train_size = 2000;
  auto d = Dataset::Create(big);
  EXPECT_TRUE(SameBits(a->inputs(Split::kTrain),
                       ConstMatrixView(d->inputs(Split::kTrain).data, 1000, 8)));
}

// Large splits are generated in row slices on several threads: the data set is bit for bit the one
// a single thread generates (inputs and labels of both splits).
TEST(Dataset, SlicedGenerationEqualsTheSerialOne) {
  DatasetConfig serial = Small();
  serial.train_size = 9000;
  serial.test_size = 5000;
  serial.generation_threads = 1;
  auto a = Dataset::Create(serial);
  ASSERT_TRUE(a.ok());
  for (int threads : {2, 3, 4}) {
    DatasetConfig sliced = serial;
    sliced.generation_threads = threads;
    auto b = Dataset::Create(sliced);
    ASSERT_TRUE(b.ok());
    for (Split split : {Split::kTrain, Split::kTest}) {
      EXPECT_TRUE(SameBits(a->inputs(split), b->inputs(split))) << threads << " threads";
      EXPECT_TRUE(std::equal(a->labels(split).begin(), a->labels(split).end(), b->labels(split).begin()))
          << threads << " threads";
    }
  }
}

TEST(Dataset, InputsAreStandardNormalAndClassesRoughlyBalanced) {
  auto d = *Dataset::Create(DatasetConfig{});  // the default: 32768 x 16 train samples
  const ConstMatrixView x = d.inputs(Split::kTrain);
  double sum = 0.0, sq = 0.0;
  for (float v : x.span()) {
    sum += v;
    sq += double(v) * v;
  }
  const double n = static_cast<double>(x.size());
  EXPECT_NEAR(sum / n, 0.0, 0.01);       // std error 1/sqrt(524288) ≈ 0.0014
  EXPECT_NEAR(sq / n, 1.0, 0.01);
  // Centered teacher logits: no class dominates; every class occurs.
  EXPECT_LT(d.MajorityFraction(Split::kTrain), 0.2);
  EXPECT_LT(d.MajorityFraction(Split::kTest), 0.2);
  std::vector<int> counts(10, 0);
  for (int32_t y : d.labels(Split::kTrain)) {
    ASSERT_GE(y, 0);
    ASSERT_LT(y, 10);
    ++counts[static_cast<size_t>(y)];
  }
  for (int c : counts) EXPECT_GT(c, 32768 / 40);
}

TEST(Dataset, MicroBatchesTileTheGlobalBatchInReplicaThenMicroBatchOrder) {
  auto d = *Dataset::Create(Small());
  const BatchLayout layout{.dp = 3, .microbatches = 2, .microbatch_size = 7};  // B = 42
  const int64_t step = 30;  // 30 * 42 = 1260: wraps around the 1000 train samples
  int64_t pos = 0;
  for (int r = 0; r < layout.dp; ++r) {
    for (int j = 0; j < layout.microbatches; ++j) {
      auto mb = d.TrainMicroBatch(layout, step, r, j);
      ASSERT_TRUE(mb.ok()) << mb.status();
      ASSERT_EQ(mb->inputs.rows(), 7);
      for (int row = 0; row < 7; ++row, ++pos) {
        const int64_t want = (step * 42 + pos) % 1000;
        EXPECT_EQ(Dataset::TrainIndex(layout, step, r, j, row, 1000), want);
        EXPECT_EQ(mb->labels[static_cast<size_t>(row)], d.labels(Split::kTrain)[want]);
        EXPECT_EQ(mb->inputs.at(row, 3), d.inputs(Split::kTrain).at(want, 3));
      }
    }
  }
}

TEST(Dataset, ErrorsNameTheField) {
  DatasetConfig c = Small();
  c.classes = 1;
  EXPECT_NE(Dataset::Create(c).status().message().find("classes"), std::string_view::npos);
  c = Small();
  c.train_size = 0;
  EXPECT_NE(Dataset::Create(c).status().message().find("train_size"), std::string_view::npos);
  auto d = *Dataset::Create(Small());
  const BatchLayout layout{.dp = 2, .microbatches = 2, .microbatch_size = 4};
  auto bad_replica = d.TrainMicroBatch(layout, 0, 2, 0);
  EXPECT_EQ(bad_replica.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_replica.status().message().find("replica 2"), std::string_view::npos);
  EXPECT_NE(d.TrainMicroBatch(layout, 0, 0, 2).status().message().find("micro_batch 2"),
            std::string_view::npos);
  EXPECT_NE(d.TrainMicroBatch({.dp = 0}, 0, 0, 0).status().message().find("dp"),
            std::string_view::npos);
  EXPECT_EQ(d.Slice(Split::kTest, 250, 51).status().code(), absl::StatusCode::kInvalidArgument);
  auto s = d.Slice(Split::kTest, 250, 50);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->inputs.at(49, 7), d.inputs(Split::kTest).at(299, 7));
}

}  // namespace
}  // namespace rp
