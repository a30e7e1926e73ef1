// The ring collectives beyond the all-reduce grid (collectives_test.cc): run-to-run bits, reduce-
// scatter, all-gather, broadcast, failures named by rank, peer and step, lossy wire buffers, error
// feedback, and the Communicator's options and point-to-point messages.
#include "comm/collectives.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/ring_steps.h"
#include "gtest/gtest.h"
#include "runtime/mutex.h"
#include "tests/comm/collectives_helpers.h"

namespace rp::comm {
namespace {

using testing::IntegerInput;
using testing::RandomInput;
using testing::RankThreads;
using testing::RingOrderSum;
using ring::ChunkRange;

TEST(RingAllReduce, ArbitraryFloatsAreIdenticalRunToRun) {
  const int n = 5;
  const size_t count = 10007;
  auto run = [&]() {
    auto comm = RankThreads::MakeComm(n);
    std::vector<std::vector<float>> out(n);
    auto status = RankThreads::Run(n, [&](int r) -> absl::Status {
      out[static_cast<size_t>(r)] = RandomInput(count, r, 1e3f);
      auto& v = out[static_cast<size_t>(r)];
      return comm->rank(r).AllReduce(v, v, {.segment_bytes = 1024}).status();
    });
    RankThreads::ExpectAllOk(status);
    return out[0];
  };
  const std::vector<float> a = run(), b = run();
  EXPECT_EQ(std::memcmp(a.data(), b.data(), count * 4), 0);
}

TEST(RingReduceScatter, GivesEachRankItsChunkOfTheSum) {
  for (int n : {1, 3, 4}) {
    for (bool in_place : {false, true}) {
      const size_t count = 1001;
      auto comm = RankThreads::MakeComm(n);
      std::vector<std::vector<float>> in(n), out(n);
      for (int r = 0; r < n; ++r) in[static_cast<size_t>(r)] = IntegerInput(count, r);
      std::vector<float> ref(count, 0.0f);
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < count; ++i) ref[i] += in[static_cast<size_t>(r)][i];
      }
      auto status = RankThreads::Run(n, [&](int r) -> absl::Status {
        const size_t ur = static_cast<size_t>(r);
        const ring::Range own = ChunkRange(count, n, r);
        if (in_place) {
          std::span<float> buf(in[ur]);
          return comm->rank(r)
              .ReduceScatter(buf, buf.subspan(own.begin, own.size), {.segment_bytes = 64})
              .status();
        }
        out[ur].assign(own.size, NAN);
        return comm->rank(r).ReduceScatter(in[ur], out[ur], {.segment_bytes = 64}).status();
      });
      RankThreads::ExpectAllOk(status);
      for (int r = 0; r < n; ++r) {
        const ring::Range own = ChunkRange(count, n, r);
        for (size_t i = 0; i < own.size; ++i) {
          const float got = in_place ? in[static_cast<size_t>(r)][own.begin + i]
                                     : out[static_cast<size_t>(r)][i];
          ASSERT_EQ(got, ref[own.begin + i]) << "n=" << n << " rank " << r << " i " << i;
        }
      }
    }
  }
}

TEST(RingAllGather, ConcatenatesEveryRanksChunk) {
  for (Codec codec : {Codec::kFp32, Codec::kInt8}) {
    const int n = 4;
    const size_t count = 1003;
    auto comm = RankThreads::MakeComm(n);
    std::vector<std::vector<float>> out(n, std::vector<float>(count, NAN));
    const std::vector<float> full = RandomInput(count, 99);
    auto status = RankThreads::Run(n, [&](int r) -> absl::Status {
      const ring::Range own = ChunkRange(count, n, r);
      std::span<const float> mine(full.data() + own.begin, own.size);
      return comm->rank(r).AllGather(mine, out[static_cast<size_t>(r)],
                                     {.codec = codec, .segment_bytes = 128})
          .status();
    });
    RankThreads::ExpectAllOk(status);
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(std::memcmp(out[0].data(), out[static_cast<size_t>(r)].data(), count * 4), 0);
    }
    for (size_t i = 0; i < count; ++i) {
      const double tol = codec == Codec::kFp32 ? 0.0 : 1.0 / 127;
      ASSERT_LE(std::fabs(out[0][i] - full[i]), tol) << CodecName(codec) << " i " << i;
    }
  }
}

TEST(RingBroadcast, CopiesTheRootBufferToEveryRank) {
  for (Codec codec : {Codec::kFp32, Codec::kFp16}) {
    for (int root : {0, 2}) {
      const int n = 3;
      const size_t count = 5003;
      auto comm = RankThreads::MakeComm(n);
      const std::vector<float> src = RandomInput(count, 7);
      std::vector<std::vector<float>> out(n, std::vector<float>(count, NAN));
      auto status = RankThreads::Run(n, [&](int r) -> absl::Status {
        return comm->rank(r)
            .Broadcast(root, r == root ? std::span<const float>(src) : std::span<const float>(),
                       out[static_cast<size_t>(r)], {.codec = codec, .segment_bytes = 1024})
            .status();
      });
      RankThreads::ExpectAllOk(status);
      for (int r = 0; r < n; ++r) {
        ASSERT_EQ(std::memcmp(out[0].data(), out[static_cast<size_t>(r)].data(), count * 4), 0);
      }
      for (size_t i = 0; i < count; ++i) {
        ASSERT_LE(std::fabs(out[0][i] - src[i]), codec == Codec::kFp32 ? 0.0 : 1e-3);
      }
      for (int r = 0; r < n; ++r) {
        EXPECT_EQ(comm->rank(r).stats().collective_bytes[static_cast<int>(codec)],
                  ring::BroadcastWireBytes(codec, count, n, r, root, 256));
      }
    }
  }
}

TEST(RingAllReduce, MissingPeerIsDeadlineExceededNamingRankPeerAndStep) {
  auto comm = RankThreads::MakeComm(2);
  std::vector<float> v(100, 1.0f);
  auto res = comm->rank(0).AllReduce(v, v, {.timeout = std::chrono::milliseconds(50)});
  ASSERT_EQ(res.status().code(), absl::StatusCode::kDeadlineExceeded) << res.status();
  EXPECT_NE(res.status().message().find(
                "rank 0 (device 10) all-reduce #0 waiting for rank 1 (device 11) at ring step 0"),
            std::string::npos)
      << res.status();
  // The group is aborted: later calls fail at once.
  EXPECT_EQ(comm->rank(1).AllReduce(v, v, {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(RingAllReduce, MissingPeerInALargerGroupFailsEveryRank) {
  const int n = 4;
  auto comm = RankThreads::MakeComm(n);
  auto status = RankThreads::Run(n, [&](int r) -> absl::Status {
    if (r == 2) return absl::OkStatus();  // never arrives
    std::vector<float> v(1000, 1.0f);
    return comm->rank(r)
        .AllReduce(v, v, {.segment_bytes = 64, .timeout = std::chrono::milliseconds(100)})
        .status();
  });
  for (int r : {0, 1, 3}) {
    const auto code = status[static_cast<size_t>(r)].code();
    EXPECT_TRUE(code == absl::StatusCode::kDeadlineExceeded || code == absl::StatusCode::kAborted)
        << status[static_cast<size_t>(r)];
  }
  EXPECT_EQ(comm->abort_status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(comm->abort_status().message().find("at ring step"), std::string::npos);
}

TEST(RingAllReduce, MismatchedCountsAreReportedWithBothSides) {
  auto comm = RankThreads::MakeComm(2);
  auto status = RankThreads::Run(2, [&](int r) -> absl::Status {
    std::vector<float> v(r == 0 ? 10 : 11, 1.0f);
    return comm->rank(r).AllReduce(v, v, {.timeout = std::chrono::seconds(20)}).status();
  });
  const absl::Status& first = comm->abort_status();
  EXPECT_EQ(first.code(), absl::StatusCode::kFailedPrecondition) << first;
  EXPECT_NE(first.message().find("of 10 elements"), std::string::npos) << first;
  EXPECT_NE(first.message().find("of 11 elements"), std::string::npos) << first;
  for (const auto& s : status) EXPECT_FALSE(s.ok());
}

TEST(RingAllReduce, Fp32OverflowIsOutOfRangeNamingRankAndElement) {
  auto comm = RankThreads::MakeComm(2);
  auto status = RankThreads::Run(2, [&](int r) -> absl::Status {
    std::vector<float> v(8, 1.0f);
    v[5] = 3e38f;
    return comm->rank(r).AllReduce(v, v, {}).status();
  });
  const absl::Status first = comm->abort_status();
  EXPECT_EQ(first.code(), absl::StatusCode::kOutOfRange) << first;
  EXPECT_NE(first.message().find("element 5"), std::string::npos) << first;
  EXPECT_NE(first.message().find("rank 1 (device 11)"), std::string::npos) << first;
}

TEST(RingAllReduce, Fp16OverflowIsOutOfRange) {
  auto comm = RankThreads::MakeComm(3);
  auto status = RankThreads::Run(3, [&](int r) -> absl::Status {
    std::vector<float> v(30, 1.0f);
    v[17] = 40000.0f;  // two ranks' partial sum exceeds 65504
    return comm->rank(r).AllReduce(v, v, {.codec = Codec::kFp16}).status();
  });
  EXPECT_EQ(comm->abort_status().code(), absl::StatusCode::kOutOfRange) << comm->abort_status();
  EXPECT_NE(comm->abort_status().message().find("element 17"), std::string::npos);
  for (const auto& s : status) EXPECT_FALSE(s.ok());
}

// A finite value beyond INT8's largest magnitude (127 * 2^121) on the rank that owns its chunk:
// the owner encodes it only for the all-gather, where it used to decode to infinity on every rank
// with an OK status. Now the owner's encode fails, naming the element, and the group fails.
TEST(RingAllReduce, Int8ValueBeyondItsRangeIsOutOfRangeNotASilentInfinity) {
  auto comm = RankThreads::MakeComm(2);
  std::vector<std::vector<float>> out(2, std::vector<float>(4, 0.0f));
  auto status = RankThreads::Run(2, [&](int r) -> absl::Status {
    std::vector<float> in = {1.0f, 2.0f, 3.0f, 4.0f};
    if (r == 0) in[1] = 3.39e38f;  // chunk 0 = elements 0..1, owned by rank 0
    return comm->rank(r).AllReduce(in, out[static_cast<size_t>(r)], {.codec = Codec::kInt8}).status();
  });
  const absl::Status first = comm->abort_status();
  EXPECT_EQ(first.code(), absl::StatusCode::kOutOfRange) << first;
  EXPECT_NE(first.message().find("element 1"), std::string::npos) << first;
  EXPECT_NE(first.message().find("rank 0 (device 10)"), std::string::npos) << first;
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_FALSE(status[r].ok()) << "rank " << r;
    for (float v : out[r]) EXPECT_FALSE(std::isinf(v)) << "rank " << r;
  }
}

// Lossy codecs encode into channel_capacity + 2 pool buffers per rank. They were sized for
// segment_bytes whatever the count: a 1000-element FP16 all-reduce with 16 MiB segments held 10 x
// 8 MiB per rank (with 1 GiB segments, 5 GiB per rank: std::bad_alloc or the OOM killer). They are
// sized for the largest segment a call sends, and grow when a later call sends larger ones.
TEST(RingAllReduce, LossyWireBuffersAreSizedByTheLargestSegmentNotSegmentBytes) {
  const int n = 2;
  for (const Codec codec : {Codec::kFp16, Codec::kInt8}) {
    auto comm = RankThreads::MakeComm(n);  // buffers are kept across calls: one group per codec
    const size_t capacity = comm->options().channel_capacity;
    for (const size_t count : {size_t{1000}, size_t{9000}}) {
      std::vector<std::vector<float>> out(n, std::vector<float>(count));
      RankThreads::ExpectAllOk(RankThreads::Run(n, [&](int r) -> absl::Status {
        const std::vector<float> in = IntegerInput(count, r);
        return comm->rank(r)
            .AllReduce(in, out[static_cast<size_t>(r)],
                       {.codec = codec, .segment_bytes = size_t{16} << 20})
            .status();
      }));
      // The largest segment is one chunk (count / 2 elements); buffers are 64-byte aligned sizes.
      const uint64_t buffer = (SegmentWireBytes(codec, count / 2) + 63) / 64 * 64;
      for (int r = 0; r < n; ++r) {
        EXPECT_LE(comm->rank(r).wire_buffer_bytes(), (capacity + 2) * buffer)
            << CodecName(codec) << " count " << count << " rank " << r;
        EXPECT_GT(comm->rank(r).wire_buffer_bytes(), 0u) << CodecName(codec) << " rank " << r;
        const std::vector<float> sum = [&] {
          std::vector<float> s(count, 0.0f);
          for (int q = 0; q < n; ++q) {
            const std::vector<float> x = IntegerInput(count, q);
            for (size_t i = 0; i < count; ++i) s[i] += x[i];
          }
          return s;
        }();
        if (codec == Codec::kFp16) {  // small integers: exact in FP16
          EXPECT_EQ(out[static_cast<size_t>(r)], sum) << "rank " << r;
        }
      }
    }
  }
}

TEST(RingAllReduce, ErrorFeedbackKeepsReplicasIdenticalAndCarriesTheError) {
  const int n = 3;
  const size_t count = 2000;
  auto comm = RankThreads::MakeComm(n);
  constexpr int kIters = 16;
  std::vector<std::vector<double>> mean(n, std::vector<double>(count, 0.0));
  std::vector<std::vector<float>> last(n);
  auto status = RankThreads::Run(n, [&](int r) -> absl::Status {
    const std::vector<float> x = RandomInput(count, r);
    std::vector<float> out(count);
    for (int it = 0; it < kIters; ++it) {
      auto res = comm->rank(r).AllReduce(
          x, out, {.codec = Codec::kInt8, .segment_bytes = 4096, .error_feedback = true});
      if (!res.ok()) return res.status();
      for (size_t i = 0; i < count; ++i) mean[static_cast<size_t>(r)][i] += out[i] / kIters;
    }
    last[static_cast<size_t>(r)] = out;
    return absl::OkStatus();
  });
  RankThreads::ExpectAllOk(status);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(comm->rank(r).residual_bytes(), count * 4);
    ASSERT_EQ(std::memcmp(last[0].data(), last[static_cast<size_t>(r)].data(), count * 4), 0);
  }
  // Averaged over iterations, the error shrinks well below one call's bound (n(n+1)/2 / 127).
  double worst = 0;
  for (size_t i = 0; i < count; ++i) {
    double ref = 0;
    for (int r = 0; r < n; ++r) ref += RandomInput(count, r)[i];
    worst = std::max(worst, std::fabs(mean[0][i] - ref));
    if (i > 50) break;  // RandomInput is O(count): sample the first elements
  }
  EXPECT_LT(worst, 6.0 / 127 / 4);
}

TEST(Communicator, BadOptionsAreInvalidArgumentNamingTheField) {
  EXPECT_NE(Communicator::Create({}).status().message().find("devices"), std::string::npos);
  EXPECT_NE(Communicator::Create({.devices = {1, 1}}).status().message().find("devices[1]"),
            std::string::npos);
  EXPECT_NE(Communicator::Create({.devices = {0, 1}, .channel_capacity = 1})
                .status()
                .message()
                .find("channel_capacity"),
            std::string::npos);
  EXPECT_NE(Communicator::Create({.devices = {0, 1}, .inline_bytes = kMaxInlineBytes + 1})
                .status()
                .message()
                .find("inline_bytes"),
            std::string::npos);
  EXPECT_NE(Communicator::Create({.devices = {0, 1}, .channel_capacity = kMaxChannelCapacity + 1})
                .status()
                .message()
                .find("channel_capacity"),
            std::string::npos);
  EXPECT_NE(Communicator::Create({.devices = {0, 1}, .max_held_segments = kMaxMaxHeldSegments + 1})
                .status()
                .message()
                .find("max_held_segments"),
            std::string::npos);
  EXPECT_NE(Communicator::Create({.devices = {0, 1}, .yield_iterations = -1})
                .status()
                .message()
                .find("yield_iterations"),
            std::string::npos);
  auto comm = RankThreads::MakeComm(2);
  std::vector<float> v(4), w(5);
  auto bad = [&](const CollectiveOptions& o) { return comm->rank(0).AllReduce(v, v, o).status(); };
  EXPECT_EQ(bad({.segment_bytes = 6}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad({.segment_bytes = 6}).message().find("segment_bytes"), std::string::npos);
  EXPECT_NE(bad({.timeout = std::chrono::nanoseconds(0)}).message().find("timeout"),
            std::string::npos);
  // A NaN or negative modeled reduction throughput (it made modeled times hit their maximum).
  for (const double gbps : {std::nan(""), -1.0, std::numeric_limits<double>::infinity()}) {
    EXPECT_NE(bad({.model = {.reduce_gbps = gbps}}).message().find("model.reduce_gbps"), std::string::npos) << gbps;
  }
  EXPECT_NE(comm->rank(0).AllReduce(v, w, {}).status().message().find("out"), std::string::npos);
  EXPECT_EQ(comm->rank(0).Broadcast(5, v, v, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(comm->aborted()) << "validation errors do not abort the group";
}

TEST(Communicator, SendRecvMovesTheBufferItselfInOrder) {
  auto comm = RankThreads::MakeComm(3);
  std::vector<const float*> sent, received;
  auto status = RankThreads::Run(3, [&](int r) -> absl::Status {
    if (r == 0) {
      for (int i = 0; i < 100; ++i) {
        auto buf = std::make_unique<Buffer>(64, static_cast<float>(i));
        sent.push_back(buf->data());
        auto a = comm->rank(0).Send(2, std::move(buf), Nanos(i));
        if (!a.ok()) return a.status();
      }
    } else if (r == 2) {
      std::vector<std::unique_ptr<Buffer>> keep;
      for (int i = 0; i < 100; ++i) {
        auto got = comm->rank(2).Recv(0);
        if (!got.ok()) return got.status();
        if ((*got->buffer)[0] != static_cast<float>(i) || got->arrival != Nanos(i)) {
          return absl::InternalError("out of order");
        }
        received.push_back(got->buffer->data());
        keep.push_back(std::move(got->buffer));
      }
    }
    return absl::OkStatus();
  });
  RankThreads::ExpectAllOk(status);
  EXPECT_EQ(sent, received);
  EXPECT_EQ(comm->rank(0).stats().p2p_bytes, 100u * 64 * 4);
}

TEST(Communicator, RecvFromAMissingPeerTimesOut) {
  auto comm = RankThreads::MakeComm(2);
  auto got = comm->rank(1).Recv(0, {.timeout = std::chrono::milliseconds(20)});
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(got.status().message().find("rank 1 (device 11) waiting for rank 0 (device 10)"),
            std::string::npos)
      << got.status();
}

}  // namespace
}  // namespace rp::comm
