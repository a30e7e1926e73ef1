// Executor under injected faults (runtime/faults.h): a kernel that throws becomes a Status; a
// stalled or dead device is reported — from the fabric's progress on a virtual clock, from wall
// time on a real one — within the watchdog timeout + 1 s, naming rank, op and the peer it waits
// for, with the wait chain followed to the culprit; no partial step is committed (parameters equal
// those of a run that stopped before the failing step) and the steps committed before the failure
// are returned; a slow or degraded link is emulated and predicted alike; a straggler in another
// replica is peer wait, not exposed communication; a healthy run whose ops outlast the watchdog
// timeout is not a stall; no thread outlives Run().
#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/faults.h"
#include "runtime/tracer.h"
#include "schedule/executor.h"
#include "schedule/generators.h"
#include "tests/schedule/executor_faults_helpers.h"

namespace rp::schedule {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;
using faults_testing::Healthy;
using faults_testing::RunHealthy;
using faults_testing::Small;


// Threads of this process (/proc/self/status "Threads:").
int ThreadCount() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}
// The count before a run: after one thread was created and joined, so that a sanitizer's lazily
// started background thread (TSan starts one with the first thread) is part of the baseline.
int BaselineThreads() {
  std::thread([] {}).join();
  return ThreadCount();
}

// The watchdog's reporting bound (DESIGN.md "The time engine"): timeout + 1 s.
double ReportLimitSeconds(const ExecutorOptions& o) {
  return std::chrono::duration<double>(o.watchdog_timeout).count() + 1.0;
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

std::vector<std::vector<float>> AllParams(const Executor& ex) {
  std::vector<std::vector<float>> out;
  for (int r = 0; r < ex.grid().world_size(); ++r) {
    absl::StatusOr<std::vector<float>> w = ex.Parameters(r);
    EXPECT_TRUE(w.ok()) << w.status();
    out.push_back(w.ok() ? *w : std::vector<float>{});
  }
  return out;
}

// The steps a failed run committed are those of a healthy run of as many steps, bit for bit in
// the loss and to the nanosecond in modeled time.
void ExpectCommittedStepsMatch(const RunFailure& f, const RunResult& healthy) {
  ASSERT_EQ(f.steps.size(), static_cast<size_t>(f.committed_steps));
  ASSERT_LE(f.steps.size(), healthy.steps.size());
  for (size_t k = 0; k < f.steps.size(); ++k) {
    EXPECT_EQ(f.steps[k].step, static_cast<int>(k));
    EXPECT_EQ(f.steps[k].loss, healthy.steps[k].loss) << "step " << k;
    EXPECT_EQ(f.steps[k].emulated_ms, healthy.steps[k].emulated_ms) << "step " << k;
    EXPECT_EQ(f.steps[k].predicted_ms, healthy.steps[k].predicted_ms) << "step " << k;
    EXPECT_EQ(f.steps[k].replica_divergence, 0.0) << "step " << k;
  }
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
  EXPECT_EQ(ex.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ex.status().message()), HasSubstr("step 2 >= steps 2"));
}

// A kernel that throws inside the device thread: an Internal Status naming rank, step and op,
// nothing committed for that step, the step before it returned as a healthy run has it, every
// thread joined.
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
  EXPECT_THAT(msg, HasSubstr("first failure: rank 3 (dp 1, pp 1, tp 0) step 1 op "));
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
  ExpectCommittedStepsMatch(*f, RunHealthy(Small(1)).result);
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
  const RunFailure* f = (*ex)->failure();
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->rank, 0);
  EXPECT_EQ(f->step, 0);
  EXPECT_EQ(f->op, send);
  EXPECT_EQ(f->committed_steps, 0);
  EXPECT_TRUE(f->steps.empty());
}

// A device stalls at its optimizer step on a virtual clock. Its modeled time stops where it hung,
// so the fabric can commit nothing its peers still need past it (the conservative rule): nothing
// moves any more, and the stall monitor reports it after the timeout — from progress, not wall
// time — naming who waits in which op for whom and the stalled rank as the end of the wait chain.
// No partial step is committed: parameters equal a run that stopped before that step, and the
// steps before it are returned.
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
  const std::string msg(r.status().message());
  EXPECT_THAT(msg, HasSubstr("watchdog: no device made progress for "));
  EXPECT_THAT(msg, HasSubstr("waits in 'gradient bucket' at step 2 for rank 1"));
  EXPECT_THAT(msg, HasSubstr("running without progress: rank 1 (dp 0, pp 1, tp 0)"));
  EXPECT_THAT(msg, HasSubstr("the wait chain ends at rank 1"));
  const RunFailure* f = (*ex)->failure();
  ASSERT_NE(f, nullptr);
  // The first failure is a rank that waited for the stalled one.
  EXPECT_NE(f->rank, 1) << msg;
  EXPECT_EQ(f->step, kFailStep);
  EXPECT_EQ(f->missing_peers, std::vector<int>{1}) << msg;
  EXPECT_EQ(f->stuck_ranks, std::vector<int>{1}) << msg;
  EXPECT_EQ(f->committed_steps, kFailStep);
  EXPECT_GE(f->seconds_after_fault, 0);
  EXPECT_LT(f->seconds_after_fault, ReportLimitSeconds(o));

  Healthy before = RunHealthy(Small(kFailStep));
  ASSERT_NE(before.executor, nullptr);
  EXPECT_EQ(AllParams(**ex), AllParams(*before.executor));  // bit-identical
  ExpectCommittedStepsMatch(*f, before.result);
  EXPECT_EQ(ThreadCount(), baseline);
}

// A device dies at its optimizer update (compute op 14 = step 2's, 5 compute ops per step) after
// its gradient all-reduces ended: every other device applies its update and meets at the step
// barrier, the dead one runs without progress. The three updates are rolled back: parameters
// equal a run that stopped before that step.
TEST(ExecutorFaults, DeadDeviceAtItsUpdateIsRolledBackOnEveryPeer) {
  constexpr int kFailStep = 2;
  ExecutorOptions o = Small(3);
  int compute_ops = 0;
  for (const Op& op : o.program.ranks[0]) compute_ops += IsDeviceCompute(op.kind);
  ASSERT_EQ(compute_ops, 5);
  o.faults.stops.push_back({.rank = 0, .op_index = kFailStep * compute_ops + compute_ops - 1});
  absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
  ASSERT_TRUE(ex.ok()) << ex.status();
  absl::StatusOr<RunResult> r = (*ex)->Run();
  ASSERT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("no device waits on a message; running without progress: rank 0 "
                        "(dp 0, pp 0, tp 0) (compute stream"));
  const RunFailure* f = (*ex)->failure();
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->rank, 0);
  EXPECT_EQ(f->step, kFailStep);
  EXPECT_EQ(f->op, FirstOp(o, 0, OpKind::kOptimizerStep));
  EXPECT_EQ(f->committed_steps, kFailStep);
  EXPECT_EQ(f->rolled_back, 3);
  Healthy before = RunHealthy(Small(kFailStep));
  ASSERT_NE(before.executor, nullptr);
  EXPECT_EQ(AllParams(**ex), AllParams(*before.executor));
  ExpectCommittedStepsMatch(*f, before.result);
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
  Healthy before = RunHealthy(Small(kFailStep));
  ASSERT_NE(before.executor, nullptr);
  EXPECT_EQ(AllParams(**ex), AllParams(*before.executor));
}

// A dead device at the end of a pipeline (virtual clock): its upstream neighbour waits for its
// gradient, and that one's upstream neighbour for it. The stall names who waits in which op for
// whom, the first failure is the dead device's direct waiter, and the wait chain ends at the dead
// device.
TEST(ExecutorFaults, DeadDeviceIsTheEndOfTheWaitChain) {
  const int baseline = BaselineThreads();
  ExecutorOptions o = Small(2, /*dp=*/1, /*pp=*/3);
  o.faults.stops.push_back({.rank = 2, .op_index = 1});  // rank 2 dies before its first backward
  absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
  ASSERT_TRUE(ex.ok()) << ex.status();
  absl::StatusOr<RunResult> r = (*ex)->Run();
  ASSERT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  const std::string msg(r.status().message());
  EXPECT_THAT(msg, HasSubstr("rank 0 (dp 0, pp 0, tp 0) waits in 'RecvGrad' at step 0 for rank 1"));
  EXPECT_THAT(msg, HasSubstr("rank 1 (dp 0, pp 1, tp 0) waits in 'RecvGrad' at step 0 for rank 2"));
  EXPECT_THAT(msg, HasSubstr("the wait chain ends at rank 2"));
  const RunFailure* f = (*ex)->failure();
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->rank, 1) << msg;
  EXPECT_EQ(f->step, 0);
  EXPECT_EQ(f->missing_peers, std::vector<int>{2});
  EXPECT_EQ(f->stuck_ranks, std::vector<int>{2});
  EXPECT_EQ(f->committed_steps, 0);
  EXPECT_EQ(ThreadCount(), baseline);
}

// A stall in a pipeline op on a real clock: reported within timeout + 1 s of the fault, the wait
// chain ending at the stalled rank, the step before it committed.
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
  ASSERT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  const std::string msg(r.status().message());
  EXPECT_THAT(msg, HasSubstr("waits in 'RecvAct' at step 1 for rank 0"));
  const RunFailure* f = (*ex)->failure();
  ASSERT_NE(f, nullptr);
  EXPECT_THAT(f->stuck_ranks, Contains(0)) << r.status();
  EXPECT_GE(f->seconds_after_fault, 0);
  EXPECT_LT(f->seconds_after_fault, ReportLimitSeconds(o));
  EXPECT_EQ(f->committed_steps, 1);
  ASSERT_EQ(f->steps.size(), 1u);
  EXPECT_GT(f->steps[0].measured_ms, 0);
}

// DP 2 × PP 2 × TP 2 on a real clock; the last device (dp 1, pp 1, tp 1) stalls just before its
// last backward of step 1. Its DP peer (rank 3) then waits on two streams: its comm stream in the
// bucket's ring for rank 7, its compute stream in a TP all-reduce for rank 2, whose message stands
// behind rank 7's bound. The wait chain went on through the compute stream's wait and ended at
// healthy rank 2 ("missing peers: 2"); it must end at rank 7, the rank running without progress.
TEST(ExecutorFaults, StallOnRealClockChainEndsAtTheStalledRankNotBehindItsBound) {
  ExecutorOptions o = Small(2, /*dp=*/2, /*pp=*/2);
  PipelineOptions po{.num_ranks = 2, .num_micro_batches = 4, .activation_bytes = 1 << 14,
                     .gradient_bytes = 1 << 16};
  absl::StatusOr<Program> prog = BuildOneFOneB(po);
  ASSERT_TRUE(prog.ok()) << prog.status();
  o.program = *prog;
  o.grid.tp = 2;
  o.placement.devices_per_node = 4;
  o.links.devices_per_node = 4;
  o.model.hidden = {16, 16, 16, 16};
  o.virtual_time = false;
  o.time_scale = 0.5;
  o.watchdog_timeout = std::chrono::milliseconds(300);
  o.overlap_grad_allreduce = true;  // rank 3's last backward starts its bucket's ring
  const auto& ops = o.program.ranks[1];
  int last_b = -1;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind == OpKind::kBackward) last_b = static_cast<int>(i);
  }
  ASSERT_GT(last_b, 0);
  const int stalled = 7;  // dp 1, pp 1, tp 1 (order tp, pp, dp)
  o.faults.op_faults = {{.kind = OpFaultKind::kStall, .rank = stalled, .step = 1, .op = last_b}};
  absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
  ASSERT_TRUE(ex.ok()) << ex.status();
  ASSERT_EQ((*ex)->grid().RankOf({1, 1, 1}), stalled);
  absl::StatusOr<RunResult> r = (*ex)->Run();
  ASSERT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  const std::string msg(r.status().message());
  EXPECT_THAT(msg, HasSubstr("running without progress: rank 7 ")) << msg;
  EXPECT_THAT(msg, HasSubstr("the wait chain ends at rank 7")) << msg;
  const RunFailure* f = (*ex)->failure();
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->stuck_ranks, std::vector<int>{stalled}) << msg;
  if (f->rank != stalled) {
    EXPECT_EQ(f->missing_peers, std::vector<int>{stalled}) << msg;
  }
  EXPECT_EQ(f->committed_steps, 1);
}

// DP 4 × PP 3, interleaved (v 2, m 6), on a real clock; rank 2 (dp 0, pp 2) stalls in a backward of
// chunk 0 of step 2 (stress seed 5152157), while its comm stream waits in chunk 1's bucket ring for
// rank 11. The monitor saw rank 2 running without progress, but the abort released its comm
// stream with a record naming rank 11, and RunFailure followed it: "missing peers: 2 (their wait
// chains end at rank(s) 11)". A rank the monitor saw running ends its chain.
TEST(ExecutorFaults, AStalledRanksCommStreamDoesNotCarryItsWaitChainOn) {
  ExecutorOptions o = Small(3, /*dp=*/4, /*pp=*/3);
  absl::StatusOr<Program> prog = BuildInterleaved({.num_ranks = 3, .num_micro_batches = 6, .num_chunks = 2,
                                                   .activation_bytes = 1 << 14, .gradient_bytes = 1 << 16});
  ASSERT_TRUE(prog.ok()) << prog.status();
  o.program = *prog;
  o.model.input_dim = 8;
  o.model.classes = 4;
  o.model.hidden.assign(5, 8);
  o.dataset.input_dim = 8;
  o.dataset.classes = 4;
  o.dataset.teacher_hidden = 8;
  o.microbatch_size = 3;
  o.links.intra_node = {};
  o.links.inter_node = {};
  o.bucket_bytes = 123392;
  o.segment_bytes = 29096;
  o.overlap_grad_allreduce = true;
  o.virtual_time = false;
  o.time_scale = 0.02;
  int op = -1;
  const auto& ops = o.program.ranks[2];
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind == OpKind::kBackward && ops[i].micro_batch == 3 && ops[i].chunk == 0) op = static_cast<int>(i);
  }
  ASSERT_GE(op, 0);
  const int stalled = 2;
  o.faults.op_faults = {{.kind = OpFaultKind::kStall, .rank = stalled, .step = 2, .op = op}};
  for (int attempt = 0; attempt < 3; ++attempt) {
    absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
    ASSERT_TRUE(ex.ok()) << ex.status();
    absl::StatusOr<RunResult> r = (*ex)->Run();
    ASSERT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
    const std::string msg(r.status().message());
    EXPECT_THAT(msg, HasSubstr("running without progress: rank 2 ")) << msg;
    const RunFailure* f = (*ex)->failure();
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->stuck_ranks, std::vector<int>{stalled}) << msg;
    EXPECT_EQ(f->committed_steps, 2);
  }
}

// The device running without progress is named with the op it runs. Stalled in op 0 of step 1, its
// last wait site was the step barrier, and the report said "running without progress: rank 1 (dp 1,
// pp 0, tp 0) (compute stream, last in 'step barrier', ...)": no op of the stall.
TEST(ExecutorFaults, StallNamesTheOpTheStalledDeviceRuns) {
  for (const bool virtual_time : {false, true}) {
    ExecutorOptions o = Small(2, /*dp=*/2, /*pp=*/1);
    o.virtual_time = virtual_time;
    o.time_scale = 0.5;
    o.faults.op_faults = {{.kind = OpFaultKind::kStall, .rank = 1, .step = 1, .op = 0}};
    absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
    ASSERT_TRUE(ex.ok()) << ex.status();
    absl::StatusOr<RunResult> r = (*ex)->Run();
    ASSERT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
    const std::string msg(r.status().message());
    const std::string op0 = ToString(o.program.ranks[0][0], 1);
    EXPECT_THAT(msg, HasSubstr("running without progress: rank 1 (dp 1, pp 0, tp 0) (compute stream, in op 0 '" +
                               op0 + "' at step 1, ")) << virtual_time << ": " << msg;
    EXPECT_THAT(msg, Not(HasSubstr("last in 'step barrier'"))) << virtual_time << ": " << msg;
  }
}

// A failed run's trace says so: an instant "run failed" event on the first failing rank at its step
// (the trace of a run that threw or stalled held the devices' ops and, for an injected fault, a
// "fault: ..." event, but nothing that marked the run as failed).
TEST(ExecutorFaults, AFailedRunsTraceMarksTheFailure) {
  for (const bool virtual_time : {true, false}) {
    ExecutorOptions o = Small(3, /*dp=*/2, /*pp=*/2);
    o.virtual_time = virtual_time;
    o.time_scale = 0.5;
    Tracer tracer(4, 2);
    o.tracer = &tracer;
    o.faults.op_faults = {{.kind = OpFaultKind::kThrow, .rank = 2, .step = 1, .op = 0}};
    absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
    ASSERT_TRUE(ex.ok()) << ex.status();
    ASSERT_FALSE((*ex)->Run().ok());
    const RunFailure* f = (*ex)->failure();
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(f->rank, 2);
    int marks = 0;
    for (const TraceEvent& e : tracer.Events()) {
      if (e.kind != rp::OpKind::kFault || std::string(e.name) != "run failed") continue;
      ++marks;
      EXPECT_EQ(e.rank, f->rank) << virtual_time;
      EXPECT_EQ(e.step, f->step) << virtual_time;
    }
    EXPECT_EQ(marks, 1) << virtual_time;
    EXPECT_NE(tracer.ToChromeJson().find("\"run failed\""), std::string::npos) << virtual_time;
  }
}


// Two kernels throw at the same modeled time in two replicas (the same op of the same stage in the
// same step). Which thread reaches its throw first is up to the host, but a failure goes through
// the fabric's commit order (Executor::Impl::AwaitFailureTurn): the report heads with the one of
// least key — at equal times the lower tie rank, replica 1's — in every run. (Without the ordering
// a 512-device run named either in 8 tries: 5 and 3.)
TEST(ExecutorFaults, FailuresAtTheSameModeledTimeHeadTheReportInKeyOrder) {
  ExecutorOptions o = Small(3, /*dp=*/4, /*pp=*/2);
  const int f_op = FirstOp(o, 0, OpKind::kForward);
  // Stage 0 of replicas 3 and 1: ranks 6 and 2 (tp 1: rank = dp · pp + stage).
  o.faults.op_faults = {{.kind = OpFaultKind::kThrow, .rank = 6, .step = 1, .op = f_op},
                        {.kind = OpFaultKind::kThrow, .rank = 2, .step = 1, .op = f_op}};
  for (int run = 0; run < 12; ++run) {
    absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
    ASSERT_TRUE(ex.ok()) << ex.status();
    absl::StatusOr<RunResult> r = (*ex)->Run();
    ASSERT_EQ(r.status().code(), absl::StatusCode::kInternal) << r.status();
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("rank 2 step 1: exception")) << run;
    const RunFailure* f = (*ex)->failure();
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->rank, 2) << "run " << run << ": " << r.status();
    EXPECT_EQ(f->step, 1);
    EXPECT_EQ(f->op, f_op);
  }
}

// A stall and a throw at the same modeled time in two replicas: the stall has the lower key (its
// replica's tie rank), so in modeled time it came first, and the throw — which its host thread
// reaches at once — waits for it: the run reports the stall (from the stall monitor, after the
// timeout), not the throw. (Without the ordering the throw was reported, in every run.) The same
// two faults with the ranks swapped report the throw.
TEST(ExecutorFaults, AThrowAfterAStallInKeyOrderReportsTheStall) {
  ExecutorOptions o = Small(3, /*dp=*/4, /*pp=*/2);
  const int f_op = FirstOp(o, 0, OpKind::kForward);
  for (const bool stall_first : {true, false}) {
    const int stalled = stall_first ? 2 : 6, thrower = stall_first ? 6 : 2;
    o.faults.op_faults = {{.kind = OpFaultKind::kStall, .rank = stalled, .step = 1, .op = f_op},
                          {.kind = OpFaultKind::kThrow, .rank = thrower, .step = 1, .op = f_op}};
    absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
    ASSERT_TRUE(ex.ok()) << ex.status();
    absl::StatusOr<RunResult> r = (*ex)->Run();
    const RunFailure* f = (*ex)->failure();
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->committed_steps, 1);
    if (stall_first) {
      ASSERT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
      EXPECT_TRUE(f->rank == stalled || std::find(f->stuck_ranks.begin(), f->stuck_ranks.end(), stalled) !=
                                            f->stuck_ranks.end())
          << r.status();
    } else {
      ASSERT_EQ(r.status().code(), absl::StatusCode::kInternal) << r.status();
      EXPECT_EQ(f->rank, thrower) << r.status();
    }
  }
}

// A stall later in modeled time than a throw: the throw is the run's failure. A stalled device's
// place in key order is where it stopped (its cursor), not the last time it posted or received:
// with pp 1 a compute thread posts nothing between the step's start and its buckets, and before,
// the throw's failure waited behind the stalled thread's bound (the step's start) until the
// stall monitor reported the stall instead (found by review). Both ways a device hangs: an
// injected stall (OpFault) and a dead GPU (the runtime's DeviceStop).
TEST(ExecutorFaults, AStallLaterInModeledTimeThanAThrowReportsTheThrow) {
  for (const bool device_stop : {false, true}) {
    ExecutorOptions o = Small(3, /*dp=*/2, /*pp=*/1);
    const auto& ops = o.program.ranks[0];
    int last_b = -1, compute_ops = 0, compute_before_last_b = 0;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].kind == OpKind::kBackward) {
        last_b = static_cast<int>(i);
        compute_before_last_b = compute_ops;
      }
      compute_ops += IsDeviceCompute(ops[i].kind);
    }
    ASSERT_GT(last_b, 0);
    const int first_f = FirstOp(o, 0, OpKind::kForward);
    ASSERT_LT(first_f, last_b);
    // Rank 0 (replica 0, the lower tie rank) hangs at step 1's last backward; rank 1 throws at
    // its first forward, modeled milliseconds earlier.
    o.faults.op_faults = {{.kind = OpFaultKind::kThrow, .rank = 1, .step = 1, .op = first_f}};
    if (device_stop) {
      o.faults.stops.push_back({.rank = 0, .op_index = compute_ops + compute_before_last_b});
    } else {
      o.faults.op_faults.push_back({.kind = OpFaultKind::kStall, .rank = 0, .step = 1, .op = last_b});
    }
    absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
    ASSERT_TRUE(ex.ok()) << ex.status();
    absl::StatusOr<RunResult> r = (*ex)->Run();
    ASSERT_EQ(r.status().code(), absl::StatusCode::kInternal) << device_stop << " " << r.status();
    const RunFailure* f = (*ex)->failure();
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->rank, 1) << r.status();
    EXPECT_EQ(f->op, first_f);
    EXPECT_EQ(f->committed_steps, 1);
  }
}

// Runs `o` 8 times; each must fail OutOfRange with the same message, naming no missing peer.
// Returns the message.
std::string TheSameDataErrorEveryRun(const ExecutorOptions& o) {
  std::string first;
  for (int run = 0; run < 8; ++run) {
    absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
    EXPECT_TRUE(ex.ok()) << ex.status();
    if (!ex.ok()) return "";
    absl::StatusOr<RunResult> r = (*ex)->Run();
    EXPECT_EQ(r.status().code(), absl::StatusCode::kOutOfRange) << r.status();
    const std::string msg(r.status().message());
    EXPECT_THAT(msg, HasSubstr("missing peers: none")) << msg;
    if (run == 0) first = msg;
    EXPECT_EQ(msg, first) << "run " << run;
  }
  return first;
}

// A data error inside a TP all-reduce (a learning rate that sends the weights to infinity: every
// TP group's sum overflows at the same modeled time in step 1) is found by the ring's handler at a
// commit, in key order, and that commit's error is the run's failure — not the status of whichever
// released device thread reached the watchdog first (which wraps it). Before, 8 runs of the CLI's
// `--lr=1e30` named 5 different ranks and "missing peers" that nobody missed.
TEST(ExecutorFaults, ADataErrorInATpAllReduceIsTheSameFailureEveryRun) {
  ExecutorOptions o = Small(3, /*dp=*/2, /*pp=*/2);
  o.grid.tp = 2;
  o.placement.devices_per_node = 4;
  o.links.devices_per_node = 4;
  o.optimizer.lr = 1e30f;
  EXPECT_THAT(TheSameDataErrorEveryRun(o), HasSubstr("all-reduce"));
}

// A gradient bucket's data error found on the data lane is decided by the data alone — each
// device learns its own buckets' verdict at its optimizer, a device whose data only came from a
// failed bucket waits for that failure — and the devices' failures take effect in modeled-time
// order: the same failure every run. Before, the lane reported the first error to reach it, in
// host order, and aborted the run at once: the CLI's `--codec=fp16 --lr=1e4` named 3 different
// ranks in 6 runs. Two cases: an FP16 overflow in every replica's first sends (lr 1e4), and one
// in a ring's sum part-way round (lr 300: the ranks after it get poisoned data and wait).
TEST(ExecutorFaults, ADataErrorOnTheDataLaneIsTheSameFailureEveryRun) {
  ExecutorOptions o = Small(6, /*dp=*/8, /*pp=*/2);
  o.codec = comm::Codec::kFp16;
  ASSERT_TRUE(o.data_lane);
  o.optimizer.lr = 1e4f;
  const std::string start = TheSameDataErrorEveryRun(o);
  EXPECT_THAT(start, HasSubstr("gradient bucket"));
  EXPECT_THAT(start, HasSubstr("starting, next"));
  EXPECT_THAT(start, HasSubstr("fp16 range"));
  o.optimizer.lr = 300;
  const std::string sum = TheSameDataErrorEveryRun(o);
  EXPECT_THAT(sum, HasSubstr("gradient bucket"));
  EXPECT_THAT(sum, HasSubstr("reducing data of"));
}

// Without the data lane (ExecutorOptions::data_lane = false; not a CLI option) a bucket's data
// error part-way round a ring (lr 300: a sum overflows) is found by the ring's handler at a
// commit, in key order, as a TP ring's: the same failure every run, naming no missing peer
// (before, its record named the ring's previous rank as one it waited for; found by review). An
// error in a ring's first sends is found instead by the device thread that starts the bucket,
// in host order (docs/executor.md): with the lane, the default, both are ordered.
TEST(ExecutorFaults, ADataErrorInABucketWithoutTheLaneIsTheSameFailureEveryRun) {
  ExecutorOptions o = Small(6, /*dp=*/8, /*pp=*/2);
  o.codec = comm::Codec::kFp16;
  o.data_lane = false;
  o.optimizer.lr = 300;
  const std::string msg = TheSameDataErrorEveryRun(o);
  EXPECT_THAT(msg, HasSubstr("gradient bucket"));
  EXPECT_THAT(msg, HasSubstr("reducing data of"));
}

}  // namespace
}  // namespace rp::schedule
