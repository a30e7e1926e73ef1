// All-to-all(-v) through the public comm API, one thread per rank: every element against a serial
// reference (bit for bit; lossy codecs as Decode(Encode(segment)) of the sender's segment), exact
// wire bytes and message counts against the closed forms (modeled time: timed_alltoall_test.cc;
// errors — mismatched calls, a missing peer, overflow, bad arguments — as Status, never a hang:
// alltoall_errors_test.cc).
#include "comm/alltoall.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/alltoall_steps.h"
#include "comm/collectives.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/mutex.h"
#include "runtime/status_macros.h"
#include "tests/comm/collectives_helpers.h"

namespace rp::comm {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::RankThreads;

std::vector<float> RandomValues(size_t count, int seed) {
  std::mt19937 gen(77 + static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> d(-3.0f, 3.0f);
  std::vector<float> v(count);
  for (float& x : v) x = d(gen);
  return v;
}

// What a block looks like after the wire: exact for FP32 and for a rank's own block, else each
// segment encoded and decoded.
std::vector<float> OverTheWire(std::span<const float> block, Codec codec, size_t seg_elems,
                               bool own) {
  std::vector<float> out(block.begin(), block.end());
  if (own || codec == Codec::kFp32) return out;
  std::vector<std::byte> wire(SegmentWireBytes(codec, seg_elems) + 8);
  for (size_t b = 0; b < block.size(); b += seg_elems) {
    const size_t m = std::min(seg_elems, block.size() - b);
    EXPECT_TRUE(Encode(codec, block.data() + b, m, wire.data()).ok());
    Decode(codec, wire.data(), m, out.data() + b);
  }
  return out;
}

uint64_t BlockWireBytes(Codec codec, size_t elems, size_t seg) {
  return elems / seg * SegmentWireBytes(codec, seg) + SegmentWireBytes(codec, elems % seg);
}

size_t Wrong(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  size_t wrong = 0;
  for (size_t i = 0; i < a.size(); ++i) wrong += std::memcmp(&a[i], &b[i], 4) != 0;
  return wrong;
}

// ---- AllToAllV: ranks 1..8 x count patterns x codecs x bins x segment sizes ----

enum class Pattern { kUneven, kZeroRanks, kLarge };
const char* PatternName(Pattern p) {
  switch (p) {
    case Pattern::kUneven:
      return "uneven";
    case Pattern::kZeroRanks:
      return "zeroranks";
    case Pattern::kLarge:
      return "large";
  }
  return "?";
}

// Elements rank r sends to peer p in bin b.
int64_t CountOf(Pattern pattern, int n, int r, int p, int b) {
  switch (pattern) {
    case Pattern::kUneven:
      return (r * 7 + p * 13 + b * 5) % 23;  // includes zeros
    case Pattern::kZeroRanks:                // rank 0 sends nothing; nobody sends to rank n - 1
      return r == 0 || p == n - 1 ? 0 : (r * 3 + p + b) % 9 + 1;
    case Pattern::kLarge:
      return 3000 + 17 * ((r + 2 * p + b) % 5);
  }
  return 0;
}

using VParam = std::tuple<int, Pattern, Codec, int, size_t>;  // ranks, pattern, codec, bins, seg

class AllToAllVGrid : public ::testing::TestWithParam<VParam> {};

TEST_P(AllToAllVGrid, DeliversEveryBlockExactlyWithClosedFormWireBytes) {
  const auto [n_, pattern_, codec_, bins_, seg_] = GetParam();
  const int n = n_, bins = bins_;
  const Pattern pattern = pattern_;
  const Codec codec = codec_;
  const size_t seg_bytes = seg_, seg = seg_bytes / 4;
  auto comm = RankThreads::MakeComm(n);
  std::vector<std::vector<int64_t>> counts(static_cast<size_t>(n));
  std::vector<std::vector<float>> send(static_cast<size_t>(n)), recv(static_cast<size_t>(n));
  std::vector<std::vector<int64_t>> recv_counts(static_cast<size_t>(n));
  std::vector<CollectiveResult> results(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    for (int p = 0; p < n; ++p) {
      for (int b = 0; b < bins; ++b) counts[r].push_back(CountOf(pattern, n, r, p, b));
    }
    const int64_t total = std::accumulate(counts[r].begin(), counts[r].end(), int64_t{0});
    send[r] = RandomValues(static_cast<size_t>(total), r);
    recv[r].assign(5, NAN);  // resized by the call
  }
  const CollectiveOptions options{.codec = codec, .segment_bytes = seg_bytes};
  RankThreads::ExpectAllOk(RankThreads::Run(n, [&](int r) -> absl::Status {
    RP_ASSIGN_OR_RETURN(auto op, AllToAllV::Create(&comm->rank(r), send[r], counts[r], bins,
                                                   &recv[r], &recv_counts[r], options));
    RP_RETURN_IF_ERROR(op.Run(Nanos(700)));
    results[r] = op.result();
    return absl::OkStatus();
  }));
  // Serial reference: block s of rank r's recv is block r of rank s's send.
  auto block_of = [&](int s, int p) {
    int64_t begin = 0;
    for (int i = 0; i < p * bins; ++i) begin += counts[s][i];
    int64_t size = 0;
    for (int b = 0; b < bins; ++b) size += counts[s][p * bins + b];
    return std::span<const float>(send[s]).subspan(static_cast<size_t>(begin),
                                                   static_cast<size_t>(size));
  };
  for (int r = 0; r < n; ++r) {
    std::vector<float> expect;
    std::vector<int64_t> expect_counts;
    uint64_t bytes = 0, messages = 0;
    for (int s = 0; s < n; ++s) {
      const std::vector<float> b = OverTheWire(block_of(s, r), codec, seg, s == r);
      expect.insert(expect.end(), b.begin(), b.end());
      for (int k = 0; k < bins; ++k) expect_counts.push_back(counts[s][r * bins + k]);
      if (s == r) continue;
      const size_t out = block_of(r, s).size();
      bytes += 8 * static_cast<uint64_t>(bins) + BlockWireBytes(codec, out, seg);
      messages += 1 + (out + seg - 1) / seg;
    }
    EXPECT_EQ(recv_counts[r], expect_counts) << "rank " << r;
    EXPECT_EQ(Wrong(recv[r], expect), 0u) << "rank " << r;
    EXPECT_EQ(results[r].wire_bytes, bytes) << "rank " << r;
    EXPECT_EQ(results[r].wire_bytes, a2a::AllToAllVWireBytes(codec, counts[r], bins, r, seg));
    EXPECT_EQ(comm->rank(r).stats().collective_bytes[static_cast<int>(codec)], bytes);
    EXPECT_EQ(results[r].messages, messages) << "rank " << r;
    EXPECT_EQ(results[r].end, Nanos(700)) << "ideal link: end == start";
  }
}

std::vector<VParam> VGrid() {
  std::vector<VParam> grid;
  for (int n = 1; n <= 8; ++n) {
    for (Pattern p : {Pattern::kUneven, Pattern::kZeroRanks, Pattern::kLarge}) {
      for (int bins : {1, 3}) {
        grid.emplace_back(n, p, Codec::kFp32, bins, p == Pattern::kLarge ? 4096 : 40);
      }
      for (Codec c : {Codec::kFp16, Codec::kBf16, Codec::kInt8}) {
        if (n % 2 == 0 && n != 8) continue;  // lossy codecs: a thinned grid
        grid.emplace_back(n, p, c, 2, p == Pattern::kLarge ? 4096 : 40);
      }
    }
  }
  return grid;
}

INSTANTIATE_TEST_SUITE_P(Grid, AllToAllVGrid, ::testing::ValuesIn(VGrid()),
                         [](const ::testing::TestParamInfo<VParam>& p) {
                           return absl::StrCat("n", std::get<0>(p.param), "_",
                                               PatternName(std::get<1>(p.param)), "_",
                                               CodecName(std::get<2>(p.param)), "_bins",
                                               std::get<3>(p.param), "_seg", std::get<4>(p.param));
                         });

// ---- AllToAll: equal blocks ----

using FixedParam = std::tuple<int, size_t, Codec>;  // ranks, block, codec
class AllToAllGrid : public ::testing::TestWithParam<FixedParam> {};

TEST_P(AllToAllGrid, TransposesTheBlocksWithClosedFormWireBytes) {
  const auto [n_, block_, codec_] = GetParam();
  const int n = n_;
  const size_t block = block_, seg = 64;
  const Codec codec = codec_;
  auto comm = RankThreads::MakeComm(n);
  std::vector<std::vector<float>> send(static_cast<size_t>(n)), recv(static_cast<size_t>(n));
  std::vector<CollectiveResult> results(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    send[r] = RandomValues(block * static_cast<size_t>(n), 100 + r);
    recv[r].assign(send[r].size(), NAN);
  }
  RankThreads::ExpectAllOk(RankThreads::Run(n, [&](int r) -> absl::Status {
    RP_ASSIGN_OR_RETURN(auto op, AllToAll::Create(&comm->rank(r), send[r], recv[r],
                                                  {.codec = codec, .segment_bytes = seg * 4}));
    RP_RETURN_IF_ERROR(op.Run());
    results[r] = op.result();
    return absl::OkStatus();
  }));
  for (int r = 0; r < n; ++r) {
    std::vector<float> expect;
    for (int s = 0; s < n; ++s) {
      const auto b = OverTheWire(std::span<const float>(send[s]).subspan(r * block, block), codec,
                                 seg, s == r);
      expect.insert(expect.end(), b.begin(), b.end());
    }
    EXPECT_EQ(Wrong(recv[r], expect), 0u) << "rank " << r;
    const uint64_t bytes = static_cast<uint64_t>(n - 1) * BlockWireBytes(codec, block, seg);
    EXPECT_EQ(results[r].wire_bytes, bytes);
    EXPECT_EQ(results[r].wire_bytes, a2a::AllToAllWireBytes(codec, block, n, seg));
    // An empty block still sends one (empty) message per peer.
    EXPECT_EQ(results[r].messages,
              static_cast<uint64_t>(n - 1) * std::max<size_t>(1, (block + seg - 1) / seg));
  }
}

INSTANTIATE_TEST_SUITE_P(Grid, AllToAllGrid,
                         ::testing::Combine(::testing::Values(1, 2, 3, 5, 8),
                                            ::testing::Values(0, 1, 7, 1000),
                                            ::testing::ValuesIn(kAllCodecs)),
                         [](const ::testing::TestParamInfo<FixedParam>& p) {
                           return absl::StrCat("n", std::get<0>(p.param), "_block",
                                               std::get<1>(p.param), "_",
                                               CodecName(std::get<2>(p.param)));
                         });

// Lossy codecs stage each message in a slot of the rank's staging buffer. Slots were sized for
// segment_bytes whatever the blocks: 8-element BF16 blocks with 16 MiB segments staged 8 MiB per peer
// (with 1 GiB segments, 512 MiB per peer and rank). A slot holds the largest segment a call sends.
TEST(AllToAll, LossyStagingIsSizedByTheLargestBlockNotSegmentBytes) {
  const int n = 4;
  const size_t block = 8;
  auto comm = RankThreads::MakeComm(n);
  std::vector<std::vector<float>> send(n), recv(n);
  for (int r = 0; r < n; ++r) {
    send[r] = RandomValues(block * n, 300 + r);
    recv[r].assign(send[r].size(), NAN);
  }
  RankThreads::ExpectAllOk(RankThreads::Run(n, [&](int r) -> absl::Status {
    RP_ASSIGN_OR_RETURN(auto op, AllToAll::Create(&comm->rank(r), send[r], recv[r],
                                                  {.codec = Codec::kBf16,
                                                   .segment_bytes = size_t{16} << 20}));
    return op.Run();
  }));
  for (int r = 0; r < n; ++r) {
    // One message per peer, each a slot of 2 x 8 bytes.
    EXPECT_LE(comm->rank(r).wire_buffer_bytes(), static_cast<uint64_t>(n - 1) * 2 * block)
        << "rank " << r;
    std::vector<float> expect;
    for (int s = 0; s < n; ++s) {
      const auto b = OverTheWire(std::span<const float>(send[s]).subspan(r * block, block),
                                 Codec::kBf16, block, s == r);
      expect.insert(expect.end(), b.begin(), b.end());
    }
    EXPECT_EQ(Wrong(recv[r], expect), 0u) << "rank " << r;
  }
}

// send_counts are summed without overflow: 4 x 2^62 wrapped around to 0 = an empty send's size, and
// Create accepted counts with which the exchange would read far outside `send`.
TEST(AllToAllV, CountsThatOverflowTheirSumAreInvalidArgument) {
  auto comm = RankThreads::MakeComm(4);
  std::vector<float> send, recv;
  std::vector<int64_t> recv_counts;
  const std::vector<int64_t> counts(4, int64_t{1} << 62);
  auto op = AllToAllV::Create(&comm->rank(0), send, counts, 1, &recv, &recv_counts, {});
  EXPECT_EQ(op.status().code(), absl::StatusCode::kInvalidArgument) << op.status();
  EXPECT_THAT(std::string(op.status().message()), HasSubstr("send_counts: sum to more than"));
  std::vector<float> two(2, 1.0f);
  op = AllToAllV::Create(&comm->rank(0), two, std::vector<int64_t>{1, 0, 0, 1}, 1, &recv, &recv_counts, {});
  EXPECT_TRUE(op.ok()) << op.status();
}

// ---- Protocol under pressure ----

// One-element segments through links of capacity 2 with every rank sending to every rank: the
// pairwise steps cannot deadlock, and calls interleave with ring collectives on the same group.
TEST(AllToAllV, TinySegmentsAndBackToBackCallsWithRingCollectives) {
  const int n = 8;
  CommunicatorOptions small;
  small.channel_capacity = 2;
  auto comm = RankThreads::MakeComm(n, small);
  RankThreads::ExpectAllOk(RankThreads::Run(n, [&](int r) -> absl::Status {
    for (int round = 0; round < 3; ++round) {
      std::vector<int64_t> counts;
      for (int q = 0; q < n; ++q) counts.push_back((r + q + round) % 5 * 7);
      const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
      std::vector<float> send(static_cast<size_t>(total));
      for (size_t i = 0; i < send.size(); ++i) send[i] = static_cast<float>(r * 100000 + i);
      std::vector<float> recv;
      std::vector<int64_t> recv_counts;
      const Codec codec = round == 1 ? Codec::kBf16 : Codec::kFp32;
      RP_ASSIGN_OR_RETURN(auto op,
                          AllToAllV::Create(&comm->rank(r), send, counts, 1, &recv, &recv_counts,
                                            {.codec = codec, .segment_bytes = 4}));
      RP_RETURN_IF_ERROR(op.Run());
      // Block s: rank s's elements for r, i.e. s * 100000 + (its offset of block r) + i.
      size_t at = 0;
      for (int s = 0; s < n; ++s) {
        int64_t offset = 0;
        for (int q = 0; q < r; ++q) offset += (s + q + round) % 5 * 7;
        const int64_t size = (s + r + round) % 5 * 7;
        RP_CHECK(recv_counts[static_cast<size_t>(s)] == size);
        for (int64_t i = 0; i < size; ++i, ++at) {
          const float want = static_cast<float>(s * 100000 + offset + i);
          const float got = recv[at];
          // BF16 keeps 8 bits: compare what the codec makes of the value.
          RP_CHECK(codec == Codec::kFp32 ? got == want
                                         : std::fabs(got - want) <= std::fabs(want) / 128)
              << "rank " << r << " round " << round << " from " << s << " element " << i;
        }
      }
      std::vector<float> sum(33, static_cast<float>(r));
      RP_RETURN_IF_ERROR(comm->rank(r).AllReduce(sum, sum, {.segment_bytes = 16}).status());
      RP_CHECK(sum[0] == static_cast<float>(n * (n - 1) / 2));
    }
    return absl::OkStatus();
  }));
}

// ---- Errors ----

}  // namespace
}  // namespace rp::comm
