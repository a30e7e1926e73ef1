// Helpers of the ring collectives' tests (collectives_test.cc, collectives_ops_test.cc): a thread
// per rank over one Communicator, inputs, and the FP32 sum in the ring's own order.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "comm/collectives.h"
#include "comm/ring_steps.h"
#include "gtest/gtest.h"

namespace rp::comm::testing {

// Spawns one thread per rank, runs `body(rank)` on each, gathers each rank's Status.
class RankThreads {
 public:
  static std::unique_ptr<Communicator> MakeComm(int n, CommunicatorOptions options = {}) {
    options.devices.clear();
    for (int r = 0; r < n; ++r) options.devices.push_back(10 + r);  // group rank != device id
    auto comm = Communicator::Create(options);
    EXPECT_TRUE(comm.ok()) << comm.status();
    return std::move(comm).value();
  }
  static std::vector<absl::Status> Run(int n, const std::function<absl::Status(int)>& body) {
    std::vector<absl::Status> status(static_cast<size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] { status[static_cast<size_t>(r)] = body(r); });
    }
    for (auto& t : threads) t.join();
    return status;
  }
  static void ExpectAllOk(const std::vector<absl::Status>& status) {
    for (size_t r = 0; r < status.size(); ++r) {
      EXPECT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
    }
  }
};

// Small integers: every partial sum is exact in FP32.
inline std::vector<float> IntegerInput(size_t count, int r) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = static_cast<float>(static_cast<int>((i * 7 + r * 13) % 17) - 8);
  return v;
}
inline std::vector<float> RandomInput(size_t count, int r, float scale = 1.0f) {
  std::mt19937 gen(1234 + static_cast<uint32_t>(r));
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(count);
  for (float& x : v) x = d(gen);
  return v;
}

// The FP32 result the ring computes, bit for bit: chunk c is summed along the ring starting at
// rank c + 1, each rank adding its own value to what it received (own + received).
inline std::vector<float> RingOrderSum(const std::vector<std::vector<float>>& in) {
  const int n = static_cast<int>(in.size());
  const size_t count = in[0].size();
  std::vector<float> out(count);
  for (int c = 0; c < n; ++c) {
    const ring::Range ch = ring::ChunkRange(count, n, c);
    for (size_t i = ch.begin; i < ch.end(); ++i) {
      float v = in[static_cast<size_t>((c + 1) % n)][i];
      for (int j = 2; j <= n; ++j) v = in[static_cast<size_t>((c + j) % n)][i] + v;
      out[i] = v;
    }
  }
  return out;
}

}  // namespace rp::comm::testing
