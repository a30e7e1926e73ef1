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

namespace rp::comm {
namespace {

using ring::ChunkRange;

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
std::vector<float> IntegerInput(size_t count, int r) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = static_cast<float>(static_cast<int>((i * 7 + r * 13) % 17) - 8);
  return v;
}
std::vector<float> RandomInput(size_t count, int r, float scale = 1.0f) {
  std::mt19937 gen(1234 + static_cast<uint32_t>(r));
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(count);
  for (float& x : v) x = d(gen);
  return v;
}

// The FP32 result the ring computes, bit for bit: chunk c is summed along the ring starting at
// rank c + 1, each rank adding its own value to what it received (own + received).
std::vector<float> RingOrderSum(const std::vector<std::vector<float>>& in) {
  const int n = static_cast<int>(in.size());
  const size_t count = in[0].size();
  std::vector<float> out(count);
  for (int c = 0; c < n; ++c) {
    const ring::Range ch = ChunkRange(count, n, c);
    for (size_t i = ch.begin; i < ch.end(); ++i) {
      float v = in[static_cast<size_t>((c + 1) % n)][i];
      for (int j = 2; j <= n; ++j) v = in[static_cast<size_t>((c + j) % n)][i] + v;
      out[i] = v;
    }
  }
  return out;
}

std::string Name(int n, size_t count, size_t seg, Codec codec, bool in_place) {
  return absl::StrCat("n", n, "_count", count, "_seg", seg, "_", CodecName(codec),
                      in_place ? "_inplace" : "_outofplace");
}

using GridParam = std::tuple<int, size_t, size_t, Codec, bool>;  // ranks, count, seg, codec, ip

class RingAllReduceGrid : public ::testing::TestWithParam<GridParam> {};

TEST_P(RingAllReduceGrid, AllRanksEndWithTheSameCorrectBits) {
  // (copied out of the structured binding: clang 14 cannot capture bindings in lambdas)
  const auto [n_, count_, seg_, codec_, in_place_] = GetParam();
  const int n = n_;
  const size_t count = count_;
  const size_t seg = seg_;
  const Codec codec = codec_;
  const bool in_place = in_place_;
  auto comm = RankThreads::MakeComm(n);
  const bool exact = codec == Codec::kFp32;
  std::vector<std::vector<float>> in(static_cast<size_t>(n)), out(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    in[static_cast<size_t>(r)] = exact && count % 2 == 0 ? IntegerInput(count, r)
                                                         : RandomInput(count, r);
    out[static_cast<size_t>(r)] = in_place ? in[static_cast<size_t>(r)]
                                           : std::vector<float>(count, NAN);
  }
  const CollectiveOptions options{.codec = codec, .segment_bytes = seg};
  std::vector<CollectiveResult> results(static_cast<size_t>(n));
  auto status = RankThreads::Run(n, [&](int r) -> absl::Status {
    const size_t ur = static_cast<size_t>(r);
    std::span<const float> src = in_place ? std::span<const float>(out[ur]) : in[ur];
    auto res = comm->rank(r).AllReduce(src, out[ur], options, Nanos(5000));
    if (!res.ok()) return res.status();
    results[ur] = *res;
    return absl::OkStatus();
  });
  RankThreads::ExpectAllOk(status);
  // Replicas: bit-identical.
  for (int r = 1; r < n; ++r) {
    ASSERT_EQ(std::memcmp(out[0].data(), out[static_cast<size_t>(r)].data(), count * 4), 0)
        << "rank " << r << " differs from rank 0";
  }
  if (exact) {
    // Bits equal the ring-order serial reference (for integer inputs also the exact sum).
    const std::vector<float> ref = RingOrderSum(in);
    size_t wrong = 0;
    for (size_t i = 0; i < count; ++i) wrong += std::memcmp(&ref[i], &out[0][i], 4) != 0;
    EXPECT_EQ(wrong, 0u);
  } else if (n > 1) {
    // Within the documented bound (docs/collectives.md) of the FP64 sum.
    const double u = codec == Codec::kFp16 ? std::ldexp(1.0, -11)
                     : codec == Codec::kBf16 ? std::ldexp(1.0, -8)
                                             : 1.0 / 127;
    const double a = 1.0;  // max |input|
    const double bound = 1.01 * u * a * n * (n + 1) / 2 + n * a * std::ldexp(1.0, -22);
    size_t bad = 0;
    for (size_t i = 0; i < count; ++i) {
      double ref = 0;
      for (int r = 0; r < n; ++r) ref += in[static_cast<size_t>(r)][i];
      bad += !(std::fabs(out[0][i] - ref) <= bound);
    }
    EXPECT_EQ(bad, 0u) << "bound " << bound;
  }
  // Wire bytes: the closed form, element by element (see docs/collectives.md).
  const size_t seg_elems = seg / 4;
  for (int r = 0; r < n; ++r) {
    uint64_t expect = 0;
    if (n > 1) {
      const size_t own = ChunkRange(count, n, r).size, next = ChunkRange(count, n, (r + 1) % n).size;
      const uint64_t elems = 2 * count - own - next;
      switch (codec) {
        case Codec::kFp32: expect = 4 * elems; break;
        case Codec::kFp16:
        case Codec::kBf16: expect = 2 * elems; break;
        case Codec::kInt8: {
          uint64_t scales = 0;
          for (int c = 0; c < n; ++c) {
            const size_t sz = ChunkRange(count, n, c).size;
            const uint64_t segs = (sz + seg_elems - 1) / seg_elems;
            scales += (c != r ? segs : 0) + (c != (r + 1) % n ? segs : 0);
          }
          expect = elems + 4 * scales;
        }
      }
    }
    EXPECT_EQ(results[static_cast<size_t>(r)].wire_bytes, expect) << "rank " << r;
    EXPECT_EQ(comm->rank(r).stats().collective_bytes[static_cast<int>(codec)], expect);
    EXPECT_EQ(results[static_cast<size_t>(r)].end, Nanos(5000)) << "ideal link: end == start";
  }
}

std::vector<GridParam> Grid() {
  std::vector<GridParam> grid;
  const size_t large = size_t{1} << 18, nondiv = 4099;
  for (int n = 1; n <= 8; ++n) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{1009}, nondiv, large}) {
      for (size_t seg : {size_t{8}, size_t{4096}, size_t{256} << 10}) {
        if (count == large && seg == 8) continue;  // 2^17 messages: covered by smaller counts
        for (bool ip : {false, true}) grid.emplace_back(n, count, seg, Codec::kFp32, ip);
      }
    }
  }
  // Lossy codecs: a thinned grid.
  for (Codec c : {Codec::kFp16, Codec::kBf16, Codec::kInt8}) {
    for (int n : {1, 2, 3, 5, 8}) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{1009}, large}) {
        grid.emplace_back(n, count, count == large ? size_t{64} << 10 : size_t{64}, c,
                          n % 2 == 1);
      }
    }
  }
  return grid;
}

std::string GridName(const ::testing::TestParamInfo<GridParam>& info) {
  return Name(std::get<0>(info.param), std::get<1>(info.param), std::get<2>(info.param),
              std::get<3>(info.param), std::get<4>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Grid, RingAllReduceGrid, ::testing::ValuesIn(Grid()), GridName);

// The message protocols: every segment lent/pooled and acknowledged (inline_bytes 0), a mix
// (inline_bytes 128 with 256-byte FP32 segments: full segments lent, short tails inline; lossy
// codecs all inline) and everything inline (default), with the smallest channel so slots wrap.
// Three calls back to back on the same communicator: slots and pool buffers are reused across
// operations.
using ProtocolParam = std::tuple<int, size_t, size_t, Codec>;  // ranks, inline_bytes, capacity
class RingAllReduceProtocols : public ::testing::TestWithParam<ProtocolParam> {};

TEST_P(RingAllReduceProtocols, BackToBackCallsGiveTheRingOrderBits) {
  const auto [n, inline_bytes, capacity, codec] = GetParam();
  const size_t count = 4099;
  CommunicatorOptions co;
  co.channel_capacity = capacity;
  co.inline_bytes = inline_bytes;
  auto comm = RankThreads::MakeComm(n, co);
  const CollectiveOptions options{.codec = codec, .segment_bytes = 256};
  for (int call = 0; call < 3; ++call) {
    std::vector<std::vector<float>> in(static_cast<size_t>(n)), out(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      in[static_cast<size_t>(r)] = RandomInput(count, r + 7 * call);
      out[static_cast<size_t>(r)] = in[static_cast<size_t>(r)];
    }
    auto status = RankThreads::Run(n, [&](int r) -> absl::Status {
      auto& v = out[static_cast<size_t>(r)];
      return comm->rank(r).AllReduce(v, v, options).status();
    });
    RankThreads::ExpectAllOk(status);
    for (int r = 1; r < n; ++r) {
      ASSERT_EQ(std::memcmp(out[0].data(), out[static_cast<size_t>(r)].data(), count * 4), 0)
          << "call " << call << ": rank " << r << " differs from rank 0";
    }
    if (codec == Codec::kFp32) {
      const std::vector<float> ref = RingOrderSum(in);
      size_t wrong = 0;
      for (size_t i = 0; i < count; ++i) wrong += std::memcmp(&ref[i], &out[0][i], 4) != 0;
      EXPECT_EQ(wrong, 0u) << "call " << call;
    } else {
      const double bound = 1.01 / 127 * n * (n + 1) / 2 + n * std::ldexp(1.0, -22);  // INT8
      size_t bad = 0;
      for (size_t i = 0; i < count; ++i) {
        double ref = 0;
        for (int r = 0; r < n; ++r) ref += in[static_cast<size_t>(r)][i];
        bad += !(std::fabs(out[0][i] - ref) <= bound);
      }
      EXPECT_EQ(bad, 0u) << "call " << call;
    }
  }
  if (codec == Codec::kFp32) {
    for (int r = 0; r < n; ++r) {
      const size_t own = ChunkRange(count, n, r).size, next = ChunkRange(count, n, (r + 1) % n).size;
      EXPECT_EQ(comm->rank(r).stats().collective_bytes[0], 3 * 4 * (2 * count - own - next));
    }
  }
}

std::string ProtocolName(const ::testing::TestParamInfo<ProtocolParam>& info) {
  return absl::StrCat("n", std::get<0>(info.param), "_inline", std::get<1>(info.param), "_cap",
                      std::get<2>(info.param), "_", CodecName(std::get<3>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(
    Protocols, RingAllReduceProtocols,
    ::testing::Combine(::testing::Values(2, 3, 8),
                       ::testing::Values(size_t{0}, size_t{128}, kDefaultInlineBytes),
                       ::testing::Values(size_t{2}, size_t{8}),
                       ::testing::Values(Codec::kFp32, Codec::kInt8)),
    ProtocolName);

// All-gather forwarding (CommunicatorOptions::forward_lends): every lent FP32 segment of the
// all-gather is forwarded as its owner's view through the n - 2 further hops. Results, bytes and
// message counts are those of the ring without forwarding; only the `forwarded` counter differs.
enum class Forwarding { kOff, kPlainStores, kStreamingStores };
using ForwardParam = std::tuple<int, size_t, Forwarding>;  // ranks, capacity, mode
class RingForwarding : public ::testing::TestWithParam<ForwardParam> {};

CommunicatorOptions ForwardingOptions(size_t capacity, Forwarding mode) {
  CommunicatorOptions co;
  co.channel_capacity = capacity;
  co.inline_bytes = 0;  // every segment lent
  co.forward_lends = mode != Forwarding::kOff;
  co.streaming_min_bytes = mode == Forwarding::kStreamingStores ? 0 : kDefaultStreamingMinBytes;
  return co;
}

// Views rank r forwards in one all-gather phase when every lent segment is forwarded.
uint64_t ExpectedForwards(size_t count, int n, int r, size_t seg_elems) {
  uint64_t total = 0;
  for (int s = 1; s <= n - 2; ++s) {
    total += static_cast<uint64_t>(ring::NumSegments(
        ChunkRange(count, n, ring::AllGatherSendChunk(n, r, s)).size, seg_elems));
  }
  return total;
}

TEST_P(RingForwarding, AllReduceGivesTheRingOrderBitsAndForwardsEveryLentSegment) {
  const auto [n, capacity, mode] = GetParam();
  const size_t count = 10007, seg_elems = 64;
  auto comm = RankThreads::MakeComm(n, ForwardingOptions(capacity, mode));
  const CollectiveOptions options{.segment_bytes = seg_elems * 4};
  std::vector<CollectiveResult> res(static_cast<size_t>(n));
  for (int call = 0; call < 3; ++call) {
    std::vector<std::vector<float>> in(static_cast<size_t>(n)), out(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      in[static_cast<size_t>(r)] = RandomInput(count, r + 5 * call);
      out[static_cast<size_t>(r)] = in[static_cast<size_t>(r)];
    }
    auto status = RankThreads::Run(n, [&](int r) -> absl::Status {
      auto& v = out[static_cast<size_t>(r)];
      auto got = comm->rank(r).AllReduce(v, v, options);
      if (got.ok()) res[static_cast<size_t>(r)] = *got;
      return got.status();
    });
    RankThreads::ExpectAllOk(status);
    const std::vector<float> ref = RingOrderSum(in);
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(std::memcmp(ref.data(), out[static_cast<size_t>(r)].data(), count * 4), 0)
          << "call " << call << ": rank " << r << " differs from the ring-order sum";
      const uint64_t expected =
          mode == Forwarding::kOff ? 0 : ExpectedForwards(count, n, r, seg_elems);
      EXPECT_EQ(res[static_cast<size_t>(r)].forwarded, expected) << "call " << call << " rank " << r;
    }
  }
  for (int r = 0; r < n; ++r) {
    const size_t own = ChunkRange(count, n, r).size, next = ChunkRange(count, n, (r + 1) % n).size;
    EXPECT_EQ(comm->rank(r).stats().collective_bytes[0], 3 * 4 * (2 * count - own - next));
  }
}

TEST_P(RingForwarding, AllGatherConcatenatesAndForwardsEveryLentSegment) {
  const auto [n, capacity, mode] = GetParam();
  const size_t count = 5003, seg_elems = 32;
  auto comm = RankThreads::MakeComm(n, ForwardingOptions(capacity, mode));
  std::vector<std::vector<float>> out(static_cast<size_t>(n), std::vector<float>(count, -1.0f));
  std::vector<CollectiveResult> res(static_cast<size_t>(n));
  const std::vector<float> full = RandomInput(count, 99);
  auto status = RankThreads::Run(n, [&](int r) -> absl::Status {
    const ring::Range own = ChunkRange(count, n, r);
    std::vector<float> in(full.begin() + static_cast<std::ptrdiff_t>(own.begin),
                          full.begin() + static_cast<std::ptrdiff_t>(own.end()));
    auto got = comm->rank(r).AllGather(in, out[static_cast<size_t>(r)],
                                       {.segment_bytes = seg_elems * 4});
    if (got.ok()) res[static_cast<size_t>(r)] = *got;
    return got.status();
  });
  RankThreads::ExpectAllOk(status);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(std::memcmp(full.data(), out[static_cast<size_t>(r)].data(), count * 4), 0)
        << "rank " << r;
    EXPECT_EQ(res[static_cast<size_t>(r)].forwarded,
              mode == Forwarding::kOff ? 0 : ExpectedForwards(count, n, r, seg_elems))
        << "rank " << r;
  }
}

std::string ForwardName(const ::testing::TestParamInfo<ForwardParam>& info) {
  static const char* const kModes[] = {"off", "plain", "stream"};
  return absl::StrCat("n", std::get<0>(info.param), "_cap", std::get<1>(info.param), "_",
                      kModes[static_cast<int>(std::get<2>(info.param))]);
}

INSTANTIATE_TEST_SUITE_P(Modes, RingForwarding,
                         ::testing::Combine(::testing::Values(3, 4, 8),
                                            ::testing::Values(size_t{2}, size_t{8}),
                                            ::testing::Values(Forwarding::kOff,
                                                              Forwarding::kPlainStores,
                                                              Forwarding::kStreamingStores)),
                         ForwardName);

TEST(RingForwarding, HoldLimitFallsBackToForwardingOwnCopies) {
  // max_held_segments 0 never forwards; 1 forwards at most one view at a time per rank and
  // forwards its own copy otherwise. Both give the ring-order bits.
  const int n = 8;
  const size_t count = 20011, seg_elems = 16;
  for (size_t limit : {size_t{0}, size_t{1}, size_t{3}}) {
    CommunicatorOptions co = ForwardingOptions(2, Forwarding::kPlainStores);
    co.max_held_segments = limit;
    auto comm = RankThreads::MakeComm(n, co);
    std::vector<std::vector<float>> in(n), out(n);
    for (int r = 0; r < n; ++r) out[static_cast<size_t>(r)] = in[static_cast<size_t>(r)] =
        RandomInput(count, r);
    std::vector<uint64_t> forwarded(n);
    auto status = RankThreads::Run(n, [&](int r) -> absl::Status {
      auto& v = out[static_cast<size_t>(r)];
      auto got = comm->rank(r).AllReduce(v, v, {.segment_bytes = seg_elems * 4});
      if (got.ok()) forwarded[static_cast<size_t>(r)] = got->forwarded;
      return got.status();
    });
    RankThreads::ExpectAllOk(status);
    const std::vector<float> ref = RingOrderSum(in);
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(std::memcmp(ref.data(), out[static_cast<size_t>(r)].data(), count * 4), 0)
          << "limit " << limit << " rank " << r;
      if (limit == 0) {
        EXPECT_EQ(forwarded[static_cast<size_t>(r)], 0u);
      }
      EXPECT_LE(forwarded[static_cast<size_t>(r)], ExpectedForwards(count, n, r, seg_elems));
    }
  }
}

// Stalls group rank `stalled`'s sends from its `after`-th message on until the group is aborted:
// a device that stops mid-collective (CommunicatorOptions::send_hook). Sets *stalled_first when the
// stall began before the group was aborted (else another rank failed first and nothing stalled).
std::function<void(int)> StallingHook(int stalled, uint64_t after, Communicator** comm,
                                      std::atomic<bool>* stalled_first) {
  auto sent = std::make_shared<uint64_t>(0);  // only the stalled rank's thread touches it
  return [=](int rank) {
    if (rank == stalled && ++*sent >= after) {
      if (*sent == after && !(*comm)->aborted()) stalled_first->store(true);
      while (!(*comm)->aborted()) std::this_thread::yield();
    }
  };
}

TEST(RingForwarding, StallDuringTheAllGatherReleasesEveryRankWithoutWaitingForTimeouts) {
  // Rank 2 stops during the all-gather while its peers hold forwarded views. Rank 3 notices after
  // its 100 ms timeout and fails the group; the other ranks wait with a 10 min timeout. Every rank
  // must then return at once: a failing rank leaves the op before it waits for the readers of its
  // buffers, so no two ranks wait for each other until their timeouts. The 2 min bound is a
  // liveness check far above scheduling noise, not a timing claim.
  // On a loaded host a rank's thread can start more than 100 ms late: rank 3 then times out at ring
  // step 0, before anything stalled, and the late rank's call finds the group aborted
  // (FailedPrecondition, as documented). Such an attempt tests nothing here and is run again.
  const int n = 6;
  const size_t seg_elems = 64, count = n * seg_elems * 40;  // 40 segments per chunk
  constexpr int kAttempts = 20;
  for (uint64_t after : {uint64_t{5 * 40 + 3}, uint64_t{5 * 40 + 41}, uint64_t{5 * 40 + 150}}) {
    bool stalled_first = false;
    std::vector<absl::Status> status;
    for (int attempt = 0; !stalled_first && attempt < kAttempts; ++attempt) {
      Communicator* raw = nullptr;
      std::atomic<bool> stalled{false};
      CommunicatorOptions co = ForwardingOptions(4, Forwarding::kPlainStores);
      co.send_hook = StallingHook(/*stalled=*/2, after, &raw, &stalled);
      auto comm = RankThreads::MakeComm(n, co);
      raw = comm.get();
      const auto t0 = std::chrono::steady_clock::now();
      status = RankThreads::Run(n, [&](int r) -> absl::Status {
        std::vector<float> v = IntegerInput(count, r);
        const auto timeout = r == 3 ? std::chrono::milliseconds(100) : std::chrono::minutes(10);
        return comm->rank(r)
            .AllReduce(v, v, {.segment_bytes = seg_elems * 4, .timeout = timeout})
            .status();
      });
      EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::minutes(2))
          << "ranks waited for each other's timeouts";
      stalled_first = stalled.load();
    }
    ASSERT_TRUE(stalled_first) << "rank 3 timed out before rank 2 stalled in all " << kAttempts
                               << " attempts (after " << after << ")";
    EXPECT_EQ(status[3].code(), absl::StatusCode::kDeadlineExceeded) << status[3];
    EXPECT_NE(status[3].message().find("waiting for rank 2"), std::string::npos) << status[3];
    for (int r = 0; r < n; ++r) {
      if (r == 3) continue;
      const absl::Status& st = status[static_cast<size_t>(r)];
      EXPECT_TRUE(st.ok() || st.code() == absl::StatusCode::kAborted) << "rank " << r << ": " << st;
    }
    EXPECT_FALSE(status[2].ok()) << "the stalled rank cannot finish";
  }
}

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
