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
#include "tests/comm/collectives_helpers.h"
#include "gtest/gtest.h"
#include "runtime/mutex.h"

namespace rp::comm {
namespace {

using testing::IntegerInput;
using testing::RandomInput;
using testing::RankThreads;
using testing::RingOrderSum;
using ring::ChunkRange;

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

}  // namespace
}  // namespace rp::comm
