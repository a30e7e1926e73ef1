// `ringpipe stress` and `ringpipe run --fault` end to end, through the binary: exit codes, the
// summary line, the replay line, and fault reports naming rank, step and op.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "apps/stress.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedule/generators.h"
#include "tests/apps/binary_runner.h"

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using Result = rp::apps::testing::BinaryResult;
inline Result RunBinary(const std::string& args) {
  return rp::apps::testing::RunBinaryMerged(args);
}

// Seeds 1..6 hold healthy configurations and, with --fault_every=2, faults (the seed decides).
TEST(StressCommand, RunsSeededConfigurationsAndSummarises) {
  const Result r = RunBinary("stress --seed=1 --configs=6 --fault_every=2 --max_devices=4 --list");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("stress: 6 configurations (seeds 1..6), 0 failed; comm checks 6"));
  EXPECT_THAT(r.out, HasSubstr("seed=3 ok: dp "));
  EXPECT_THAT(r.out, HasSubstr("faults injected"));
}

TEST(StressCommand, BadFlagsExitTwo) {
  EXPECT_EQ(RunBinary("stress --configs=0").exit_code, 2);
  EXPECT_EQ(RunBinary("stress --seed=abc").exit_code, 2);
  EXPECT_EQ(RunBinary("stress --max_devices=100").exit_code, 2);
}

// --help does not call a fixed report open (docs/reliability.md: Decode of 0 elements was fixed).
TEST(StressCommand, HelpDoesNotCallTheFixedCodecReportOpen) {
  const Result r = RunBinary("stress --help");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--comm_empty"));
  EXPECT_THAT(r.out, Not(HasSubstr("report is open")));
}

// Configuration i runs seed --seed + i, and a failure prints "replay: ringpipe stress --seed=S": every
// seed run must be one --seed accepts (0..2^63 - 1), so the last seed's configurations are refused.
TEST(StressCommand, EverySeedItRunsCanBeReplayed) {
  const Result past = RunBinary("stress --seed=9223372036854775807 --configs=2 --fault_every=0 --max_devices=1");
  EXPECT_EQ(past.exit_code, 2) << past.out;
  EXPECT_THAT(past.out, HasSubstr("at most 1 from this seed"));
  EXPECT_EQ(RunBinary("stress --seed=9223372036854775808 --configs=1").exit_code, 2);  // what it would replay
  const Result last = RunBinary("stress --seed=9223372036854775807 --configs=1 --fault_every=0 --max_devices=1");
  EXPECT_EQ(last.exit_code, 0) << last.out;
  EXPECT_THAT(last.out, HasSubstr("(seeds 9223372036854775807..9223372036854775807), 0 failed"));
}

// dp 2 x pp 1 (two replicas joined by the DP all-reduce), 2 steps on the virtual clock; `injected` is
// the fault the run gets, `claimed` the one the checker is told of (what a configuration drew).
rp::apps::stress::Drawn FaultConfig(const rp::OpFault& injected, const rp::OpFault& claimed) {
  rp::apps::stress::Drawn c;
  rp::schedule::ExecutorOptions& o = c.options;
  absl::StatusOr<rp::schedule::Program> prog =
      rp::schedule::BuildOneFOneB({.num_ranks = 1, .num_micro_batches = 2, .gradient_bytes = 1 << 12});
  EXPECT_TRUE(prog.ok()) << prog.status();
  o.grid = {.dp = 2, .pp = 1, .tp = 1};
  o.program = *prog;
  o.model.hidden = {16, 16};
  o.cost = rp::schedule::CostModel::Uniform({.forward = rp::FromMillis(1), .backward = rp::FromMillis(2)});
  o.microbatch_size = 4;
  o.dataset.train_size = 64;
  o.dataset.test_size = 16;
  o.eval_samples = 16;
  o.run_reference = false;
  o.virtual_time = true;
  o.steps = 2;
  o.watchdog_timeout = std::chrono::milliseconds(300);
  o.faults.op_faults = {injected};
  c.fault = claimed;
  return c;
}

// A stall whose report names neither the stalled rank nor the end of the wait chains is detected but
// not attributed, and that fails the configuration as a misattributed throw does (the summary line's
// counts alone would let `stress` exit 0). Here the run's failure names rank 1 alone (it threw) while
// the configuration stalled rank 0.
TEST(StressChecks, AStallBlamedOnAnotherRankFailsTheConfiguration) {
  const rp::OpFault thrown{.kind = rp::OpFaultKind::kThrow, .rank = 1, .step = 1, .op = 0};
  rp::OpFault claimed = thrown;
  claimed.kind = rp::OpFaultKind::kStall;
  claimed.rank = 0;
  rp::apps::stress::Checker ck;
  rp::apps::stress::FaultTally tally;
  rp::apps::stress::CheckFault(FaultConfig(thrown, claimed), ck, tally);
  EXPECT_EQ(tally.injected, 1);
  EXPECT_EQ(tally.detected, 1);
  EXPECT_EQ(tally.attributed, 0);
  ASSERT_EQ(ck.failures.size(), 1u);
  EXPECT_THAT(ck.failures[0], HasSubstr("stall fault at rank 0 step 1 op 0 reported as rank 1"));
  // The same stall where it was injected: detected, attributed, no failure.
  const rp::OpFault stall{.kind = rp::OpFaultKind::kStall, .rank = 1, .step = 1, .op = 0};
  rp::apps::stress::Checker ok;
  rp::apps::stress::CheckFault(FaultConfig(stall, stall), ok, tally);
  EXPECT_TRUE(ok.failures.empty()) << ok.failures[0];
  EXPECT_EQ(tally.attributed, 1);
}

// A configuration whose training leaves its lossy wire format's range (FP16 gradients and a
// learning rate of 1e4: the DP all-reduce overflows in step 1) fails on its own, before a fault of
// step 2 fires: not a failed check (seed 7770055 drew one, an FP16 EP all-to-all at step 2), as long
// as its FP32 twin trains to the end. Healthy or with a fault, it is counted apart.
TEST(StressChecks, AConfigurationLeavingItsWireFormatsRangeIsNotAFailedCheck) {
  const rp::OpFault stall{.kind = rp::OpFaultKind::kStall, .rank = 1, .step = 2, .op = 0};
  rp::apps::stress::Drawn c = FaultConfig(stall, stall);
  c.options.codec = rp::comm::Codec::kFp16;
  c.options.optimizer.lr = 1e4f;
  c.options.steps = 3;
  rp::apps::stress::Checker ck;
  rp::apps::stress::FaultTally tally;
  rp::apps::stress::CheckFault(c, ck, tally);
  EXPECT_TRUE(ck.failures.empty()) << ck.failures[0];
  EXPECT_TRUE(ck.out_of_range);
  EXPECT_EQ(tally.detected, 0);
  c.options.faults.op_faults.clear();
  c.fault.reset();
  rp::apps::stress::Checker healthy;
  rp::apps::stress::CheckHealthy(c, healthy);
  EXPECT_TRUE(healthy.failures.empty()) << healthy.failures[0];
  EXPECT_TRUE(healthy.out_of_range);
  // With FP32 gradients the same run trains to the end: nothing to set apart.
  c.options.codec = rp::comm::Codec::kFp32;
  rp::apps::stress::Checker fp32;
  rp::apps::stress::CheckHealthy(c, fp32);
  EXPECT_FALSE(fp32.out_of_range);
}

// Stress seed 7770055 without its fault: DP 4 × PP 4 DualPipeV with MoE blocks and EP 2 in FP16 on
// a real clock, whose training overflows FP16 in rank 3's EP all-to-all in step 2. The failing
// collective aborts its group and the fabric at once, before rank 3's thread reports; the waits
// that releases elsewhere (a pipeline receive of rank 12, rank 7's all-to-all) returned the same
// OUT_OF_RANGE wrapped, or Aborted with the all-to-all's own message, and whichever reached the
// watchdog first headed the report: 3 runs in 12 named ranks 1 or 8, and "missing peers: 7" for
// an encode that waited for nobody. Now the report names rank 3's op every run.
TEST(RealClockFailures, ADataErrorHeadsTheReportNotTheWaitsItsAbortReleased) {
  absl::StatusOr<rp::apps::stress::Drawn> c = rp::apps::stress::DrawConfig(7770055, 3, 32, true);
  ASSERT_TRUE(c.ok()) << c.status();
  rp::schedule::ExecutorOptions o = c->options;
  ASSERT_FALSE(o.virtual_time);
  ASSERT_EQ(o.ep_codec, rp::comm::Codec::kFp16);
  o.faults.op_faults.clear();
  for (int run = 0; run < 8; ++run) {
    absl::StatusOr<std::unique_ptr<rp::schedule::Executor>> ex = rp::schedule::Executor::Create(o);
    ASSERT_TRUE(ex.ok()) << ex.status();
    absl::StatusOr<rp::schedule::RunResult> r = (*ex)->Run();
    ASSERT_EQ(r.status().code(), absl::StatusCode::kOutOfRange) << r.status();
    const rp::schedule::RunFailure* f = (*ex)->failure();
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->rank, 3) << "run " << run << ": " << r.status();
    EXPECT_EQ(f->step, 2) << r.status();
    EXPECT_TRUE(f->missing_peers.empty()) << r.status();
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("all-to-all-v")) << r.status();
  }
}

constexpr const char* kSmallRun =
    "run --virtual_time=true --steps=3 --dp=2 --pp=2 --tp=1 --microbatches=2 --hidden=16x3 "
    "--microbatch_size=4 --train_size=256 --test_size=32 --reference=false";

TEST(RunFaults, ThrowExitsThreeNamingRankStepOp) {
  const Result r = RunBinary(absl::StrCat(kSmallRun, " --fault=throw:rank=3,step=1,op=2"));
  EXPECT_EQ(r.exit_code, 3) << r.out;
  EXPECT_THAT(r.out, HasSubstr("first failure: rank 3 (dp 1, pp 1, tp 0) step 1 op 2"));
  EXPECT_THAT(r.out, HasSubstr("committed steps: 1"));
  EXPECT_THAT(r.out, HasSubstr("injected fault detected"));
}

TEST(RunFaults, SlowLinkRunsToTheEndAndIsReported) {
  const Result r = RunBinary(absl::StrCat(kSmallRun, " --fault=slow_link:src=0,dst=1,factor=10,step=1"));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("slow link: rank 0 -> rank 1 took 10x its link class's time from step 1"));
}

TEST(RunFaults, MalformedFaultFlagsExitTwo) {
  for (const char* f : {"--fault=boom", "--fault=throw:rank=1", "--fault=throw:rank=x,step=0,op=0",
                        "--fault=slow_link:src=0,dst=1", "--fault=stall:rank=0,step=0,op=0,extra=1",
                        "--fault=throw:rank=9,step=0,op=0", "--fault=throw:rank=0,step=0,op=999",
                        "--straggler=1", "--jitter=a:b"}) {
    const Result r = RunBinary(absl::StrCat(kSmallRun, " ", f));
    EXPECT_EQ(r.exit_code, 2) << f << "\n" << r.out;
  }
}

}  // namespace
