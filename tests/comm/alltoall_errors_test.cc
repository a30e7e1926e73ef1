// All-to-all(-v) errors through the public comm API, one thread per rank: mismatched calls name both
// sides, a missing peer is DeadlineExceeded naming rank, peer and step (and fails every rank of a
// larger group), FP16 overflow is OutOfRange and aborts the group, bad arguments name the field —
// each a Status, never a hang.
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/alltoall.h"
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

constexpr std::chrono::milliseconds kTimeout{200};
// A hang guard, not a timing claim: a failed call returns within the timeout plus this.
constexpr std::chrono::seconds kHangGuard{5};

std::string AllMessages(const std::vector<absl::Status>& status) {
  std::string s;
  for (const absl::Status& st : status) absl::StrAppend(&s, st.message(), "\n");
  return s;
}

// Runs body(rank comm) on every rank of a fresh group of n; checks every rank failed in time.
std::vector<absl::Status> RunFailing(int n, const std::function<absl::Status(RankComm&)>& body) {
  auto comm = RankThreads::MakeComm(n);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<absl::Status> status = RankThreads::Run(n, [&](int r) { return body(comm->rank(r)); });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, kTimeout + kHangGuard);
  for (size_t r = 0; r < status.size(); ++r) EXPECT_FALSE(status[r].ok()) << "rank " << r;
  EXPECT_TRUE(comm->aborted());
  return status;
}

absl::Status RunV(RankComm& rc, std::vector<int64_t> counts, int bins,
                  CollectiveOptions options = {}) {
  options.timeout = kTimeout;
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  std::vector<float> send(static_cast<size_t>(total), 1.0f), recv;
  std::vector<int64_t> recv_counts;
  RP_ASSIGN_OR_RETURN(auto op,
                      AllToAllV::Create(&rc, send, counts, bins, &recv, &recv_counts, options));
  return op.Run();
}

absl::Status RunFixed(RankComm& rc, size_t block, CollectiveOptions options = {}) {
  options.timeout = kTimeout;
  std::vector<float> send(block * static_cast<size_t>(rc.size()), 2.0f), recv(send.size());
  RP_ASSIGN_OR_RETURN(auto op, AllToAll::Create(&rc, send, recv, options));
  return op.Run();
}

TEST(AllToAllErrors, DifferentBlockSizesNameBothSides) {
  const auto status =
      RunFailing(2, [](RankComm& rc) { return RunFixed(rc, rc.rank() == 0 ? 10 : 12); });
  EXPECT_THAT(AllMessages(status),
              AllOf(HasSubstr("mismatched counts"), HasSubstr("expects a block of 10 elements"),
                    HasSubstr("which sends 12")));
  EXPECT_EQ(status[0].code(), absl::StatusCode::kFailedPrecondition) << status[0];
}

TEST(AllToAllErrors, AnotherCollectiveOrCodecNamesBothSides) {
  auto status = RunFailing(2, [](RankComm& rc) {
    return rc.rank() == 0 ? RunFixed(rc, 4) : RunV(rc, {4, 4}, 1);
  });
  EXPECT_THAT(AllMessages(status), AllOf(HasSubstr("mismatched collectives"),
                                         HasSubstr("all-to-all #0"), HasSubstr("all-to-all-v #0")));
  status = RunFailing(3, [](RankComm& rc) {
    return RunV(rc, {1, 2, 3}, 1, {.codec = rc.rank() == 2 ? Codec::kFp16 : Codec::kFp32});
  });
  EXPECT_THAT(AllMessages(status), AllOf(HasSubstr("with fp16"), HasSubstr("with fp32")));
}

TEST(AllToAllErrors, DifferentBinsOrSegmentSizesAreNamed) {
  auto status = RunFailing(2, [](RankComm& rc) {
    return rc.rank() == 0 ? RunV(rc, {1, 2}, 1) : RunV(rc, {1, 2, 3, 4}, 2);
  });
  EXPECT_THAT(AllMessages(status), HasSubstr("count entries (bins) per peer"));
  status = RunFailing(2, [](RankComm& rc) {
    return RunV(rc, {50, 50}, 1, {.segment_bytes = rc.rank() == 0 ? 64u : 128u});
  });
  EXPECT_THAT(AllMessages(status), HasSubstr("is segment_bytes equal on all ranks?"));
}

TEST(AllToAllErrors, MissingPeerIsDeadlineExceededNamingRankPeerAndStep) {
  auto comm = RankThreads::MakeComm(2);
  absl::Status s = RunV(comm->rank(0), {3, 3}, 1);
  ASSERT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("rank 0 (device 10) all-to-all-v #0 waiting for rank 1 (device 11) at "
                        "step 0"));
  // The group is aborted: later calls fail at once.
  EXPECT_EQ(RunV(comm->rank(1), {3, 3}, 1).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(AllToAllErrors, MissingPeerInALargerGroupFailsEveryRank) {
  const int n = 4;
  auto comm = RankThreads::MakeComm(n);
  const auto t0 = std::chrono::steady_clock::now();
  auto status = RankThreads::Run(n, [&](int r) -> absl::Status {
    if (r == 2) return absl::OkStatus();  // never arrives
    return RunFixed(comm->rank(r), 300, {.segment_bytes = 64});
  });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, kTimeout + kHangGuard);
  for (int r : {0, 1, 3}) {
    const auto code = status[static_cast<size_t>(r)].code();
    EXPECT_TRUE(code == absl::StatusCode::kDeadlineExceeded || code == absl::StatusCode::kAborted)
        << status[static_cast<size_t>(r)];
  }
  EXPECT_EQ(comm->abort_status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(comm->abort_status().message()), HasSubstr(" waiting for rank "));
}

TEST(AllToAllErrors, Fp16OverflowIsOutOfRangeAndAbortsTheGroup) {
  const auto status = RunFailing(3, [](RankComm& rc) -> absl::Status {
    std::vector<float> send(30, 1.0f), recv(30);
    if (rc.rank() == 1) send[25] = 1e6f;  // block 2, element 5
    RP_ASSIGN_OR_RETURN(
        auto op, AllToAll::Create(&rc, send, recv, {.codec = Codec::kFp16, .timeout = kTimeout}));
    return op.Run();
  });
  EXPECT_EQ(status[1].code(), absl::StatusCode::kOutOfRange) << status[1];
  EXPECT_THAT(std::string(status[1].message()),
              AllOf(HasSubstr("rank 1 (device 11) all-to-all #0 encoding for rank 2"),
                    HasSubstr("element 25")));
}

TEST(AllToAllErrors, BadArgumentsAreInvalidArgumentNamingTheField) {
  auto comm = RankThreads::MakeComm(2);
  RankComm& rc = comm->rank(0);
  std::vector<float> send(6, 0.0f), recv;
  std::vector<int64_t> recv_counts;
  auto field = [](const absl::Status& s) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    return std::string(s.message().substr(0, s.message().find(':')));
  };
  const std::vector<int64_t> ok{2, 4}, negative{-1, 7}, short_counts{6}, wrong_sum{2, 3};
  EXPECT_EQ(field(AllToAllV::Create(&rc, send, negative, 1, &recv, &recv_counts, {}).status()),
            "send_counts[0]");
  EXPECT_EQ(field(AllToAllV::Create(&rc, send, short_counts, 1, &recv, &recv_counts, {}).status()),
            "send_counts");
  EXPECT_EQ(field(AllToAllV::Create(&rc, send, wrong_sum, 1, &recv, &recv_counts, {}).status()),
            "send_counts");
  EXPECT_EQ(field(AllToAllV::Create(&rc, send, ok, 0, &recv, &recv_counts, {}).status()), "bins");
  EXPECT_EQ(field(AllToAllV::Create(&rc, send, ok, 1, nullptr, &recv_counts, {}).status()), "recv");
  EXPECT_EQ(field(AllToAllV::Create(&rc, send, ok, 1, &recv, &recv_counts, {.error_feedback = true})
                      .status()),
            "error_feedback");
  EXPECT_EQ(
      field(
          AllToAllV::Create(&rc, send, ok, 1, &recv, &recv_counts, {.segment_bytes = 6}).status()),
      "segment_bytes");
  std::vector<float> fixed(7);
  EXPECT_EQ(field(AllToAll::Create(&rc, fixed, fixed, {}).status()), "recv");
  std::vector<float> overlap(8);
  EXPECT_EQ(field(AllToAll::Create(&rc, std::span<const float>(overlap).first(4),
                                   std::span<float>(overlap).subspan(2, 4), {})
                      .status()),
            "recv");
}

}  // namespace
}  // namespace rp::comm
