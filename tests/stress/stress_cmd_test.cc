// `ringpipe stress` and `ringpipe run --fault` end to end, through the binary: exit codes, the
// summary line, the replay line, and fault reports naming rank, step and op.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/apps/binary_runner.h"

namespace {

using ::testing::HasSubstr;

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

constexpr const char* kSmallRun =
    "run --virtual_time=true --steps=3 --dp=2 --pp=2 --tp=1 --microbatches=2 --hidden=16x3 "
    "--microbatch_size=4 --train_size=256 --test_size=32 --reference=false";

TEST(RunFaults, ThrowExitsThreeNamingRankStepOp) {
  const Result r = RunBinary(std::string(kSmallRun) + " --fault=throw:rank=3,step=1,op=2");
  EXPECT_EQ(r.exit_code, 3) << r.out;
  EXPECT_THAT(r.out, HasSubstr("first failure: rank 3 (dp 1, pp 1, tp 0) step 1 op 2"));
  EXPECT_THAT(r.out, HasSubstr("committed steps: 1"));
  EXPECT_THAT(r.out, HasSubstr("injected fault detected"));
}

TEST(RunFaults, SlowLinkRunsToTheEndAndIsReported) {
  const Result r = RunBinary(std::string(kSmallRun) + " --fault=slow_link:src=0,dst=1,factor=10,step=1");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("slow link: rank 0 -> rank 1 took 10x its link class's time from step 1"));
}

TEST(RunFaults, MalformedFaultFlagsExitTwo) {
  for (const char* f : {"--fault=boom", "--fault=throw:rank=1", "--fault=throw:rank=x,step=0,op=0",
                        "--fault=slow_link:src=0,dst=1", "--fault=stall:rank=0,step=0,op=0,extra=1",
                        "--fault=throw:rank=9,step=0,op=0", "--fault=throw:rank=0,step=0,op=999",
                        "--straggler=1", "--jitter=a:b"}) {
    const Result r = RunBinary(std::string(kSmallRun) + " " + f);
    EXPECT_EQ(r.exit_code, 2) << f << "\n" << r.out;
  }
}

}  // namespace
