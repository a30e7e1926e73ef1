// Executor under injected faults (runtime/faults.h OpFault): a kernel that throws becomes a Status,
// a stalled device is reported with rank, step, op and the missing peers within the watchdog
// timeout + 1 s, a slow link shows in the report, no partial step is committed (parameters equal
// those of a run that stopped before the failing step), and no thread outlives Run().
#include <algorithm>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/faults.h"
#include "schedule/executor.h"
#include "schedule/generators.h"

namespace rp::schedule {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

// Threads of this process (/proc/self/status "Threads:").
int ThreadCount();
// The count before a run: after one thread was created and joined, so that a sanitizer's lazily
// started background thread (TSan starts one with the first thread) is part of the baseline.
int BaselineThreads() {
  std::thread([] {}).join();
  return ThreadCount();
}
int ThreadCount() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

// DP 2 x PP 2, 1F1B, m = 2, a tiny MLP, α-β links, virtual clock.
ExecutorOptions Small(int steps) {
  PipelineOptions po{.num_ranks = 2, .num_micro_batches = 2, .activation_bytes = 1 << 14,
                     .gradient_bytes = 1 << 16, .buckets_per_chunk = 1};
  absl::StatusOr<Program> prog = BuildOneFOneB(po);
  EXPECT_TRUE(prog.ok()) << prog.status();
  ExecutorOptions o;
  o.grid = {.dp = 2, .pp = 2, .tp = 1};
  o.program = *prog;
  o.model.hidden = {16, 16, 16};
  o.microbatch_size = 4;
  o.dataset.train_size = 256;
  o.dataset.test_size = 64;
  o.cost = CostModel::Uniform({.forward = FromMillis(2), .backward = FromMillis(3)});
  o.links.intra_node = {.alpha = FromMicros(20), .bandwidth_gbps = 10};
  o.links.inter_node = {.alpha = FromMicros(50), .bandwidth_gbps = 5};
  o.virtual_time = true;
  o.steps = steps;
  o.eval_every = 0;
  o.eval_samples = 64;
  o.run_reference = false;
  o.watchdog_timeout = std::chrono::milliseconds(300);
  return o;
}

// Index of the first op of `kind` in pipeline rank `pp`'s list.
int FirstOp(const ExecutorOptions& o, int pp, OpKind kind) {
  const auto& ops = o.program.ranks[static_cast<size_t>(pp)];
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind == kind) return static_cast<int>(i);
  }
  ADD_FAILURE() << "no op of kind " << OpKindName(kind);
  return 0;
}

std::vector<std::vector<float>> AllParams(const Executor& ex, int world) {
  std::vector<std::vector<float>> out;
  for (int r = 0; r < world; ++r) {
    absl::StatusOr<std::vector<float>> w = ex.Parameters(r);
    EXPECT_TRUE(w.ok()) << w.status();
    out.push_back(w.ok() ? *w : std::vector<float>{});
  }
  return out;
}

TEST(FaultInjectorOpFaults, AnswersWhereAndValidates) {
  FaultPlan plan;
  plan.op_faults = {{.kind = OpFaultKind::kThrow, .rank = 1, .step = 2, .op = 3},
                    {.kind = OpFaultKind::kStall, .rank = 0, .step = 0, .op = 0},
                    {.kind = OpFaultKind::kSlowLink, .rank = 2, .step = 1, .dst = 3, .factor = 4}};
  absl::StatusOr<FaultInjector> f = FaultInjector::Create(plan, 4);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_NE(f->OpFaultAt(1, 2, 3), nullptr);
  EXPECT_EQ(f->OpFaultAt(1, 2, 3)->kind, OpFaultKind::kThrow);
  EXPECT_EQ(f->OpFaultAt(1, 2, 4), nullptr);
  EXPECT_EQ(f->OpFaultAt(1, 1, 3), nullptr);
  EXPECT_EQ(f->OpFaultAt(0, 0, 0)->kind, OpFaultKind::kStall);
  EXPECT_EQ(f->OpFaultAt(2, 1, 0), nullptr);  // slow links are not op faults
  EXPECT_EQ(f->SlowLinkFactor(2, 3, 0), 1.0);
  EXPECT_EQ(f->SlowLinkFactor(2, 3, 1), 4.0);
  EXPECT_EQ(f->SlowLinkFactor(2, 3, 7), 4.0);
  EXPECT_EQ(f->SlowLinkFactor(3, 2, 7), 1.0);
  EXPECT_THAT(f->DescribeRank(2), Contains(HasSubstr("slow x4 from step 1")));

  const std::vector<OpFault> bad = {
      {.kind = OpFaultKind::kThrow, .rank = 4},
      {.kind = OpFaultKind::kStall, .rank = 0, .step = -1},
      {.kind = OpFaultKind::kThrow, .rank = 0, .op = -2},
      {.kind = OpFaultKind::kSlowLink, .rank = 0, .dst = 0, .factor = 2},
      {.kind = OpFaultKind::kSlowLink, .rank = 0, .dst = 1, .factor = 0.5},
      {.kind = OpFaultKind::kSlowLink, .rank = 0, .dst = 9, .factor = 2}};
  for (const OpFault& b : bad) {
    FaultPlan p;
    p.op_faults = {b};
    absl::StatusOr<FaultInjector> g = FaultInjector::Create(p, 4);
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << OpFaultKindName(b.kind);
    EXPECT_THAT(std::string(g.status().message()), HasSubstr(OpFaultKindName(b.kind)));
  }
}

TEST(ExecutorFaults, RejectsOpFaultsOutsideTheProgram) {
  ExecutorOptions o = Small(2);
  o.faults.op_faults = {{.kind = OpFaultKind::kThrow, .rank = 1, .step = 0, .op = 999}};
  absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
  EXPECT_EQ(ex.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ex.status().message()), HasSubstr("faults: op fault throw rank 1: op 999"));
  o.faults.op_faults = {{.kind = OpFaultKind::kStall, .rank = 1, .step = 2, .op = 0}};
  ex = Executor::Create(o);
  EXPECT_THAT(std::string(ex.status().message()), HasSubstr("step 2 >= steps 2"));
}

// A kernel that throws inside the device thread: an Internal Status naming rank, step and op,
// nothing committed for that step, every thread joined.
TEST(ExecutorFaults, ThrowingKernelBecomesStatusNamingRankStepOp) {
  const int baseline = BaselineThreads();
  ExecutorOptions o = Small(3);
  const int f_op = FirstOp(o, 1, OpKind::kForward);
  o.faults.op_faults = {{.kind = OpFaultKind::kThrow, .rank = 3, .step = 1, .op = f_op}};
  absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
  ASSERT_TRUE(ex.ok()) << ex.status();
  absl::StatusOr<RunResult> r = (*ex)->Run();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal) << r.status();
  const std::string msg(r.status().message());
  EXPECT_THAT(msg, HasSubstr("rank 3 step 1 op "));
  EXPECT_THAT(msg, HasSubstr("exception in the device thread: injected fault: throw at step 1"));
  const RunFailure* f = (*ex)->failure();
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->rank, 3);
  EXPECT_EQ(f->step, 1);
  EXPECT_EQ(f->op, f_op);
  EXPECT_TRUE(f->missing_peers.empty());
  EXPECT_EQ(f->committed_steps, 1);
  EXPECT_EQ((*ex)->committed_steps(), 1);
  EXPECT_GE(f->seconds_after_fault, 0);
  EXPECT_EQ(ThreadCount(), baseline);
}

// A throw in a non-compute op (a send) too.
TEST(ExecutorFaults, ThrowInSendBecomesStatus) {
  ExecutorOptions o = Small(2);
  const int send = FirstOp(o, 0, OpKind::kSendAct);
  o.faults.op_faults = {{.kind = OpFaultKind::kThrow, .rank = 0, .step = 0, .op = send}};
  absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
  ASSERT_TRUE(ex.ok()) << ex.status();
  absl::StatusOr<RunResult> r = (*ex)->Run();
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInternal) << r.status();
  ASSERT_NE((*ex)->failure(), nullptr);
  EXPECT_EQ((*ex)->failure()->rank, 0);
  EXPECT_EQ((*ex)->failure()->op, send);
  EXPECT_EQ((*ex)->failure()->committed_steps, 0);
}

// A device stalls at its optimizer step: every other device applies its update and waits at the
// barrier. The failure names the stalled rank as missing, arrives within timeout + 1 s, and the
// other devices' updates are rolled back: parameters equal a run that stopped before that step.
TEST(ExecutorFaults, StallIsReportedAndNoPartialStepIsCommitted) {
  const int baseline = BaselineThreads();
  constexpr int kFailStep = 2;
  ExecutorOptions o = Small(4);
  const int opt_op = FirstOp(o, 1, OpKind::kOptimizerStep);
  o.faults.op_faults = {{.kind = OpFaultKind::kStall, .rank = 1, .step = kFailStep, .op = opt_op}};
  absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
  ASSERT_TRUE(ex.ok()) << ex.status();
  absl::StatusOr<RunResult> r = (*ex)->Run();
  ASSERT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  const RunFailure* f = (*ex)->failure();
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->committed_steps, kFailStep);
  EXPECT_EQ(f->rolled_back, 3);  // the three healthy devices had applied their update
  // Either a peer's barrier wait expired first (rank 1 missing) or rank 1 reported itself.
  if (f->rank != 1) {
    EXPECT_THAT(f->missing_peers, Contains(1)) << r.status();
    EXPECT_THAT(f->stuck_ranks, Contains(1)) << r.status();
    EXPECT_EQ(f->op, -1);  // the step barrier
  } else {
    EXPECT_EQ(f->op, opt_op);
  }
  EXPECT_EQ(f->step, f->rank == 1 ? kFailStep : kFailStep + 1);
  const double limit_s = std::chrono::duration<double>(o.watchdog_timeout).count() + 1.0;
  EXPECT_GE(f->seconds_after_fault, 0);
  EXPECT_LT(f->seconds_after_fault, limit_s);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("missing peers"));

  ExecutorOptions before = Small(kFailStep);
  absl::StatusOr<std::unique_ptr<Executor>> ref = Executor::Create(before);
  ASSERT_TRUE(ref.ok()) << ref.status();
  ASSERT_TRUE((*ref)->Run().ok());
  EXPECT_EQ(AllParams(**ex, 4), AllParams(**ref, 4));  // bit-identical
  EXPECT_EQ(ThreadCount(), baseline);
}

// A throw at the optimizer step of one replica: whatever the others applied is undone.
TEST(ExecutorFaults, ThrowAtOptimizerStepCommitsNothing) {
  constexpr int kFailStep = 1;
  ExecutorOptions o = Small(3);
  const int opt_op = FirstOp(o, 0, OpKind::kOptimizerStep);
  o.faults.op_faults = {{.kind = OpFaultKind::kThrow, .rank = 2, .step = kFailStep, .op = opt_op}};
  absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
  ASSERT_TRUE(ex.ok()) << ex.status();
  ASSERT_FALSE((*ex)->Run().ok());
  EXPECT_EQ((*ex)->committed_steps(), kFailStep);
  absl::StatusOr<std::unique_ptr<Executor>> ref = Executor::Create(Small(kFailStep));
  ASSERT_TRUE(ref.ok());
  ASSERT_TRUE((*ref)->Run().ok());
  EXPECT_EQ(AllParams(**ex, 4), AllParams(**ref, 4));
}

// A stall in a pipeline receive on a real clock: a peer's receive expires naming the stalled rank.
TEST(ExecutorFaults, StallOnRealClockNamesTheMissingPeer) {
  ExecutorOptions o = Small(2);
  o.virtual_time = false;
  o.time_scale = 0.01;
  o.watchdog_timeout = std::chrono::milliseconds(200);
  const int f_op = FirstOp(o, 0, OpKind::kForward);
  o.faults.op_faults = {{.kind = OpFaultKind::kStall, .rank = 0, .step = 1, .op = f_op}};
  absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
  ASSERT_TRUE(ex.ok()) << ex.status();
  absl::StatusOr<RunResult> r = (*ex)->Run();
  ASSERT_FALSE(r.ok());
  const RunFailure* f = (*ex)->failure();
  ASSERT_NE(f, nullptr);
  // The first failure may come from a rank that waited for a rank that waited for rank 0 (e.g. a
  // DP peer of rank 0's pipeline successor): the wait chain still ends at rank 0.
  if (f->rank != 0) {
    EXPECT_THAT(f->stuck_ranks, Contains(0)) << r.status();
  }
  EXPECT_LT(f->seconds_after_fault, 1.2);
  EXPECT_EQ(f->committed_steps, 1);
}

// A link that drops to a tenth of its speed from step 1: the report lists it with its factor, and
// the modeled step grows.
TEST(ExecutorFaults, SlowLinkShowsInTheReport) {
  ExecutorOptions o = Small(3);
  o.faults.op_faults = {{.kind = OpFaultKind::kSlowLink, .rank = 0, .step = 1, .dst = 1,
                         .factor = 10}};
  absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
  ASSERT_TRUE(ex.ok()) << ex.status();
  absl::StatusOr<RunResult> r = (*ex)->Run();
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->slow_links.size(), 1u);
  EXPECT_EQ(r->slow_links[0].src, 0);
  EXPECT_EQ(r->slow_links[0].dst, 1);
  EXPECT_EQ(r->slow_links[0].first_step, 1);
  EXPECT_EQ(r->slow_links[0].factor, 10.0);
  EXPECT_GT(r->steps[1].modeled_ms, r->steps[0].modeled_ms);
  EXPECT_EQ(r->steps[1].modeled_ms, r->steps[2].modeled_ms);
  EXPECT_EQ(r->max_replica_divergence, 0.0);
}

TEST(ExecutorFaults, ParametersRejectsBadRankAndChunk) {
  absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(Small(1));
  ASSERT_TRUE(ex.ok());
  EXPECT_EQ((*ex)->Parameters(4).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*ex)->Parameters(0, 1).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE((*ex)->Parameters(3).ok());
  EXPECT_EQ((*ex)->failure(), nullptr);
}

}  // namespace
}  // namespace rp::schedule
