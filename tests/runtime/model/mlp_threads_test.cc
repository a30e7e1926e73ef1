// MlpStage objects used from several threads at once, the way the executor uses them: one shard
// per thread, the TP all-reduce through a callback. Must be TSan-clean (labelled CONCURRENCY) and
// give the bits of the serial emulation.
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/model/mlp.h"
#include "runtime/mutex.h"

namespace rp {
namespace {

// A blocking in-memory all-reduce for `n` ranks: the last rank to arrive sums the buffers in rank
// order 0..n-1 (like RunTpGroupSerial) and writes the sum into every rank's buffer.
class RendezvousAllReduce {
 public:
  explicit RendezvousAllReduce(int n) : n_(n), buffers_(static_cast<size_t>(n)) {}

  absl::Status Run(int rank, std::span<float> buffer) {
    MutexLock lock(&mu_);
    const int64_t generation = generation_;
    buffers_[static_cast<size_t>(rank)] = buffer;
    if (++arrived_ == n_) {
      std::vector<float> sum(buffers_[0].begin(), buffers_[0].end());
      bool sizes_agree = true;
      for (int r = 1; r < n_; ++r) sizes_agree &= buffers_[static_cast<size_t>(r)].size() == sum.size();
      if (sizes_agree) {
        for (int r = 1; r < n_; ++r) {
          for (size_t i = 0; i < sum.size(); ++i) sum[i] += buffers_[static_cast<size_t>(r)][i];
        }
        for (std::span<float> b : buffers_) std::copy(sum.begin(), sum.end(), b.begin());
      }
      failed_ = !sizes_agree;
      arrived_ = 0;
      ++generation_;
      cv_.SignalAll();
    } else {
      while (generation_ == generation) cv_.Wait(&mu_);
    }
    return failed_ ? absl::InternalError("ranks disagree on the all-reduce size")
                   : absl::OkStatus();
  }

 private:
  const int n_;
  Mutex mu_;
  CondVar cv_;
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::span<float>> buffers_ ABSL_GUARDED_BY(mu_);
};

Tensor Random(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Tensor t(rows, cols);
  for (float& v : t.span()) v = u(rng);
  return t;
}

bool SameBits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class MlpStageThreads : public ::testing::TestWithParam<int> {};

TEST_P(MlpStageThreads, TpShardsOnThreadsGiveTheSerialBits) {
  const int T = GetParam();
  MlpConfig c;
  c.input_dim = 12;
  c.hidden = {24, 12, 24, 12, 12};
  c.classes = 12;
  auto p = *PartitionMlp(c, 1, T);
  const Tensor x = Random(6, 12, 1), dout = Random(6, 12, 2);
  constexpr int kMicroBatches = 3;

  // Serial reference.
  std::vector<std::unique_ptr<MlpStage>> ref;
  std::vector<MlpStage*> ref_ptrs;
  for (int t = 0; t < T; ++t) {
    ref.push_back(std::move(MlpStage::Create(c, p, 0, t)).value());
    ref_ptrs.push_back(ref.back().get());
  }
  std::vector<Tensor> ref_out;
  for (int mb = 0; mb < kMicroBatches; ++mb) {
    ref_out.push_back(*RunTpGroupSerial(ref_ptrs, MlpStage::Pass::kForward, mb, x));
  }
  for (int mb = 0; mb < kMicroBatches; ++mb) {
    ASSERT_TRUE(RunTpGroupSerial(ref_ptrs, MlpStage::Pass::kBackward, mb, dout).ok());
  }

  // One thread per shard, 1F1B-ish order: all forwards, then the backwards (split B/W on odd ids).
  RendezvousAllReduce ar(T);
  std::vector<std::unique_ptr<MlpStage>> shards;
  for (int t = 0; t < T; ++t) shards.push_back(std::move(MlpStage::Create(c, p, 0, t)).value());
  std::vector<absl::Status> status(static_cast<size_t>(T));
  std::vector<std::vector<Tensor>> outs(static_cast<size_t>(T));
  std::vector<std::thread> threads;
  for (int t = 0; t < T; ++t) {
    threads.emplace_back([&, t] {
      MlpStage& s = *shards[static_cast<size_t>(t)];
      TpAllReduceFn fn = [&ar, t](std::span<float> b) { return ar.Run(t, b); };
      absl::Status st;
      for (int mb = 0; mb < kMicroBatches && st.ok(); ++mb) {
        auto y = s.Forward(mb, x, fn);
        if (!y.ok()) st = y.status();
        else outs[static_cast<size_t>(t)].push_back(*std::move(y));
      }
      for (int mb = 0; mb < kMicroBatches && st.ok(); ++mb) {
        if (mb % 2 == 0) {
          st = s.Backward(mb, dout, fn).status();
        } else {
          st = s.BackwardInput(mb, dout, fn).status();
          if (st.ok()) st = s.BackwardWeight(mb);
        }
      }
      status[static_cast<size_t>(t)] = st;
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < T; ++t) {
    ASSERT_TRUE(status[static_cast<size_t>(t)].ok()) << "rank " << t << ": "
                                                     << status[static_cast<size_t>(t)];
    for (int mb = 0; mb < kMicroBatches; ++mb) {
      EXPECT_TRUE(SameBits(outs[static_cast<size_t>(t)][static_cast<size_t>(mb)].span(),
                           ref_out[static_cast<size_t>(mb)].span()))
          << "rank " << t << " micro-batch " << mb;
    }
    EXPECT_TRUE(SameBits(shards[static_cast<size_t>(t)]->grads(),
                         ref[static_cast<size_t>(t)]->grads()))
        << "rank " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(Mlp, MlpStageThreads, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return "tp" + std::to_string(p.param);
                         });

}  // namespace
}  // namespace rp
