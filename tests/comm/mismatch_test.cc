// Mismatched collectives through the public comm API: two ranks of a group that disagree on the
// element count, the collective, the codec or the segment size, or a rank that skips a collective,
// get a clear error naming both sides (or the missing peer) within the timeout — never a hang.
// Every rank is a thread; each thread's Status is gathered and checked.
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rp::comm {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr std::chrono::milliseconds kTimeout{300};
// A hang guard, not a timing claim: a failed call must return within the timeout plus this.
constexpr std::chrono::seconds kHangGuard{5};

struct Outcome {
  std::vector<absl::Status> status;  // per rank
  std::chrono::steady_clock::duration elapsed;
  // Every message, joined: the two sides of a mismatch may be reported by either rank.
  std::string all() const {
    std::string s;
    for (const absl::Status& st : status) s += std::string(st.message()) + "\n";
    return s;
  }
};

// Runs body(rank) on one thread per rank of a fresh group of n.
Outcome RunGroup(int n, const std::function<absl::Status(RankComm&)>& body) {
  std::vector<int> devices;
  for (int r = 0; r < n; ++r) devices.push_back(r);
  absl::StatusOr<std::unique_ptr<Communicator>> comm = Communicator::Create({.devices = devices});
  EXPECT_TRUE(comm.ok()) << comm.status();
  Outcome out;
  out.status.resize(static_cast<size_t>(n));
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] { out.status[static_cast<size_t>(r)] = body((*comm)->rank(r)); });
  }
  for (std::thread& t : threads) t.join();
  out.elapsed = std::chrono::steady_clock::now() - t0;
  return out;
}

CollectiveOptions Opts(Codec codec = Codec::kFp32, size_t segment_bytes = 256) {
  return {.codec = codec, .segment_bytes = segment_bytes, .timeout = kTimeout};
}

int Failed(const Outcome& o) {
  int n = 0;
  for (const absl::Status& s : o.status) n += s.ok() ? 0 : 1;
  return n;
}

TEST(MismatchedCollectives, DifferentCountsNameBothSides) {
  const Outcome o = RunGroup(2, [](RankComm& rc) -> absl::Status {
    std::vector<float> buf(rc.rank() == 0 ? 100 : 200, 1.0f);
    return rc.AllReduce(buf, buf, Opts()).status();
  });
  EXPECT_EQ(Failed(o), 2) << o.all();
  EXPECT_THAT(o.all(), AllOf(HasSubstr("mismatched collectives"), HasSubstr("of 100 elements"),
                             HasSubstr("of 200 elements")));
  EXPECT_LT(o.elapsed, kTimeout + kHangGuard);
}

// The broadcast root may finish first (its messages need no reply), as with NCCL; the all-reduce
// side names both ops, and the root learns at its next call: the group is aborted.
TEST(MismatchedCollectives, AllReduceAgainstBroadcastNamesBothOps) {
  const Outcome o = RunGroup(2, [](RankComm& rc) -> absl::Status {
    std::vector<float> buf(64, 1.0f);
    if (rc.rank() == 1) return rc.AllReduce(buf, buf, Opts()).status();
    absl::Status s = rc.Broadcast(0, buf, buf, Opts()).status();
    if (!s.ok()) return s;
    return rc.AllReduce(buf, buf, Opts()).status();  // the next collective of the root
  });
  EXPECT_EQ(Failed(o), 2) << o.all();
  EXPECT_THAT(std::string(o.status[1].message()),
              AllOf(HasSubstr("mismatched collectives"), HasSubstr("this rank runs all-reduce"),
                    HasSubstr("the peer sent broadcast")));
  EXPECT_LT(o.elapsed, kTimeout + kHangGuard);
}

TEST(MismatchedCollectives, DifferentCodecsNameBoth) {
  const Outcome o = RunGroup(3, [](RankComm& rc) -> absl::Status {
    std::vector<float> buf(96, 0.5f);
    return rc.AllReduce(buf, buf, Opts(rc.rank() == 1 ? Codec::kInt8 : Codec::kFp32)).status();
  });
  EXPECT_GE(Failed(o), 2) << o.all();
  EXPECT_THAT(o.all(), AllOf(HasSubstr("mismatched collectives"), HasSubstr("with int8"),
                             HasSubstr("with fp32")));
}

TEST(MismatchedCollectives, DifferentSegmentSizesAreReported) {
  const Outcome o = RunGroup(2, [](RankComm& rc) -> absl::Status {
    std::vector<float> buf(1000, 1.0f);
    return rc.AllReduce(buf, buf, Opts(Codec::kFp32, rc.rank() == 0 ? 256 : 1024)).status();
  });
  EXPECT_EQ(Failed(o), 2) << o.all();
  EXPECT_THAT(o.all(), HasSubstr("mismatched segments"));
}

// Different orders: rank 1 runs the two collectives of a sequence in the other order.
TEST(MismatchedCollectives, DifferentOrderIsReported) {
  const Outcome o = RunGroup(2, [](RankComm& rc) -> absl::Status {
    std::vector<float> a(40, 1.0f), b(72, 2.0f);
    auto first = [&] { return rc.AllReduce(a, a, Opts()).status(); };
    auto second = [&] { return rc.AllGather(std::span<const float>(b).subspan(0, 36), b, Opts()).status(); };
    absl::Status s = rc.rank() == 0 ? first() : second();
    if (!s.ok()) return s;
    return rc.rank() == 0 ? second() : first();
  });
  EXPECT_EQ(Failed(o), 2) << o.all();
  EXPECT_THAT(o.all(), AllOf(HasSubstr("mismatched collectives"), HasSubstr("all-reduce"),
                             HasSubstr("all-gather")));
}

// A rank that skips the collective: its peer's wait expires naming it (DeadlineExceeded), no hang.
TEST(MismatchedCollectives, SkippedCollectiveTimesOutNamingThePeer) {
  const Outcome o = RunGroup(2, [](RankComm& rc) -> absl::Status {
    if (rc.rank() == 1) return absl::OkStatus();  // skips it
    std::vector<float> buf(64, 1.0f);
    return rc.AllReduce(buf, buf, Opts()).status();
  });
  EXPECT_TRUE(o.status[1].ok());
  EXPECT_EQ(o.status[0].code(), absl::StatusCode::kDeadlineExceeded) << o.status[0];
  EXPECT_THAT(std::string(o.status[0].message()), HasSubstr("1"));
  EXPECT_LT(o.elapsed, kTimeout + kHangGuard);
}

// In a group of 4, rank 3 skips the first of two all-reduces. Collectives match by call order, so
// its only call pairs with the others' first (same shape: it completes); the others' second call
// then waits for rank 3, and the error names it. Nobody hangs.
TEST(MismatchedCollectives, SkippedCollectiveInASequenceNamesTheMissingRank) {
  const Outcome o = RunGroup(4, [](RankComm& rc) -> absl::Status {
    std::vector<float> buf(64, 1.0f);
    if (rc.rank() != 3) {
      if (absl::Status s = rc.AllReduce(buf, buf, Opts()).status(); !s.ok()) return s;
    }
    return rc.AllReduce(buf, buf, Opts()).status();
  });
  EXPECT_TRUE(o.status[3].ok());
  EXPECT_EQ(Failed(o), 3) << o.all();
  // Rank 0 waits for rank 3 and says so — whether its own wait expired first (DeadlineExceeded) or
  // a rank further along the ring, waiting for rank 0, expired first and aborted the group.
  EXPECT_TRUE(o.status[0].code() == absl::StatusCode::kDeadlineExceeded ||
              o.status[0].code() == absl::StatusCode::kAborted) << o.all();
  EXPECT_THAT(std::string(o.status[0].message()),
              AllOf(HasSubstr("all-reduce #1"), HasSubstr("waiting for rank 3")));
  EXPECT_THAT(o.all(), HasSubstr("no peer after 300 ms"));
  EXPECT_LT(o.elapsed, kTimeout + kHangGuard);
}

}  // namespace
}  // namespace rp::comm
