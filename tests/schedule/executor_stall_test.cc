// Stall reports through collectives that the fabric's handlers run while the compute thread awaits
// one gate (a TP ring all-reduce, an EP all-to-all; comm/comm_stream.h, comm/alltoall_event.h): a
// device stalls inside a step on the virtual clock, and the watchdog's report names who waits in
// which collective for whom, the stalled rank as the end of the wait chain, and the first failure
// as a rank that waited for it (its missing peer) — as it does for a thread awaiting a channel.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedule/executor.h"
#include "tests/schedule/ep_helpers.h"

namespace rp::schedule {
namespace {

using ::testing::HasSubstr;

int FirstOp(const ExecutorOptions& o, OpKind kind) {
  const auto& ops = o.program.ranks[0];
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind == kind) return static_cast<int>(i);
  }
  ADD_FAILURE() << "no op of kind " << OpKindName(kind);
  return 0;
}

// Rank 2 (of 4 in a single-stage grid) stalls at the start of `kind` in step 1.
std::string StallMessage(ExecutorOptions o, OpKind kind, std::vector<int>* missing,
                         std::vector<int>* stuck) {
  o.watchdog_timeout = std::chrono::milliseconds(300);
  o.faults.op_faults = {{.kind = OpFaultKind::kStall, .rank = 2, .step = 1, .op = FirstOp(o, kind)}};
  absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
  EXPECT_TRUE(ex.ok()) << ex.status();
  if (!ex.ok()) return "";
  absl::StatusOr<RunResult> r = (*ex)->Run();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  const RunFailure* f = (*ex)->failure();
  EXPECT_NE(f, nullptr);
  if (f != nullptr) {
    *missing = f->missing_peers;
    *stuck = f->stuck_ranks;
  }
  return std::string(r.status().message());
}

// The EP group of 4 replicas: the backward's first all-to-all waits for rank 2's rows.
TEST(ExecutorStall, AnEpAllToAllWaiterNamesThePeerItAwaits) {
  std::vector<int> missing, stuck;
  const std::string msg = StallMessage(MakeOptions(EpSetup{.dp = 4, .pp = 1, .tp = 1, .ep = 4}, 3),
                                       OpKind::kBackward, &missing, &stuck);
  EXPECT_THAT(msg, HasSubstr("waits in 'EP all-to-all' at step 1 for rank 2"));
  EXPECT_THAT(msg, HasSubstr("running without progress: rank 2 (dp 2, pp 0, tp 0)"));
  EXPECT_THAT(msg, HasSubstr("the wait chain ends at rank 2"));
  EXPECT_EQ(missing, std::vector<int>{2}) << msg;
  EXPECT_EQ(stuck, std::vector<int>{2}) << msg;
}

// A TP group of 4: the forward's first all-reduce waits around the ring for rank 2's segment.
TEST(ExecutorStall, ATpAllReduceWaiterNamesThePeerItAwaits) {
  std::vector<int> missing, stuck;
  const std::string msg = StallMessage(MakeOptions(EpSetup{.dp = 1, .pp = 1, .tp = 4, .ep = 1}, 3),
                                       OpKind::kForward, &missing, &stuck);
  EXPECT_THAT(msg, HasSubstr("waits in 'TP all-reduce' at step 1 for rank 2"));
  EXPECT_THAT(msg, HasSubstr("running without progress: rank 2 (dp 0, pp 0, tp 2)"));
  EXPECT_THAT(msg, HasSubstr("the wait chain ends at rank 2"));
  EXPECT_EQ(missing, std::vector<int>{2}) << msg;
  EXPECT_EQ(stuck, std::vector<int>{2}) << msg;
}

}  // namespace
}  // namespace rp::schedule
