// A hostile user of the MoE fields (hunt-harden, ep-left), through the binary under an address-space
// limit: sizes that used to take the whole micro-batch or the whole routing table at once, or
// slipped past the time budget.
#include <algorithm>
#include <filesystem>
#include <string>

#include "apps/cli.h"
#include "gtest/gtest.h"
#include "tests/apps/binary_runner.h"

namespace rp::apps {
namespace {

namespace fs = std::filesystem;
using Result = rp::apps::testing::BinaryResult;

// `ringpipe <args>` under `ulimit -v <kb>` (in a fresh directory).
Result RunUnder(int kb, const std::string& args) {
  const fs::path dir = rp::apps::testing::TempDir("ringpipe_moe_hostile", "run");
  Result r = rp::apps::testing::RunBinaryInShell("ulimit -v " + std::to_string(kb), args, dir);
  fs::remove_all(dir);
  return r;
}

// `predict <args>` under a 600 MB address-space limit succeeds.
void ExpectPredictsWithin600MB(const std::string& args) {
  const Result r = RunUnder(600000, "predict " + args);
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.err;
  EXPECT_NE(r.out.find("predicted"), std::string::npos) << args << "\n" << r.out;
}

// A MoE stage's stored bytes were measured by a forward and a Bi of a whole micro-batch through the
// real model before every run and prediction: this prediction took 41 s and 1.1 GB, and aborted
// under a 600 MB address-space limit. They are now fitted from a few small row counts (checked
// against whole micro-batches in tests/schedule/workload_cost_test.cc).
TEST(HostileInput, AWideMoePredictionNeedsNoWholeMicroBatchForward) {
  ExpectPredictsWithin600MB("--hidden=1024x3 --moe_layers=all --experts=2 --expert_hidden=1024"
                            " --microbatch_size=30000 --train_size=60000 --capacity_factor=1.25");
}

// The fit probed at most 64 rows for the count the capacity starts to drop at: with C·k/E = 0.99
// (experts 2, top_k 2, capacity_factor 0.99) it drops from 100 rows on, so the stage was measured on
// the whole micro-batch again and this prediction aborted under the same 600 MB limit. Probing the
// first dropping count from the capacity formula (100 and 101 rows) was still past the config
// fuzzer's 10 s under ASan; the fit now probes at most 3 rows, on a stage with a capacity that drops
// from 2 rows on (schedule/workload_cost.cc).
TEST(HostileInput, AMoeWhoseCapacityDropsPastSixtyFourRowsNeedsNoWholeMicroBatchForward) {
  ExpectPredictsWithin600MB("--hidden=1024x3 --moe_layers=all --experts=2 --top_k=2 --expert_hidden=1024"
                            " --microbatch_size=30000 --train_size=60000 --capacity_factor=0.99");
}

// A step's routing table holds a count per MoE block, replica, micro-batch and expert: 10 blocks of
// 65536 experts, dp 64 and 256 micro-batches are 1.1e10 counts (86 GB), and `predict` died of
// std::bad_alloc (exit 134 under a 3 GB limit). It is bad input naming --experts, as in run (whose
// memory estimate already refused it).
TEST(HostileInput, AHugeMoeRoutingTableIsBadInputNamingExperts) {
  for (const char* sub : {"predict", "run --virtual_time"}) {
    const Result r = RunUnder(3000000, std::string(sub) +
                                           " --hidden=8x11 --moe_layers=all --experts=65536 --expert_hidden=1"
                                           " --ep=64 --dp=64 --microbatches=256 --microbatch_size=1"
                                           " --train_size=100000");
    EXPECT_EQ(r.exit_code, kExitBadInput) << sub << ": " << r.err;
    EXPECT_EQ(r.err.rfind("ringpipe " + std::string(sub).substr(0, std::string(sub).find(' ')) + ": --experts: ", 0), 0u)
        << sub << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(r.out.empty()) << sub << ": " << r.out;
  }
}

// A prediction builds the balanced routing of the replicas it plays only — one EP group when they fold
// (schedule/predictor.h) — so a layout whose whole routing table (2 blocks x 2048 replicas x 64
// micro-batches x 128 experts: 3.4e7 counts, 268 MB) is past the bound is predicted within 600 MB,
// while a run, which records every replica's routing, is refused naming --dp; and a layout whose
// replicas do not fold (two replicas share each node's one NIC) is refused as a prediction too.
TEST(HostileInput, APredictionBuildsTheRoutingOfTheReplicasItPlays) {
  const std::string layout = " --hidden=64x3 --moe_layers=all --experts=128 --ep=8 --dp=2048 --pp=1 --tp=1"
                             " --microbatches=64";
  ExpectPredictsWithin600MB(layout);
  const std::string routing = ": a step's MoE routing (2 blocks x dp=2048 x microbatches=64 x experts=128";
  for (const std::string& args : {"run --virtual_time" + layout, "predict --devices_per_node=2 --nics_per_node=1" + layout}) {
    const Result r = RunUnder(3000000, args);
    EXPECT_EQ(r.exit_code, kExitBadInput) << args << ": " << r.err;
    EXPECT_NE(r.err.find("--dp" + routing), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(r.out.empty()) << args << ": " << r.out;
  }
}

// The time budget (modeled step and communication within 1e12 ms) left the EP all-to-alls out: with
// 2^20-row micro-batches whose token rows stand for 1 GiB each on 1 MB/s links, `predict` passed it
// and then failed in the predictor with "predict: a message of device 2 arrives past the largest
// modeled time" — no field named. It is now refused by the budget, naming the link's bandwidth.
TEST(HostileInput, EpAllToAllsCountInTheTimeBudget) {
  const Result r = RunUnder(3000000,
                            "predict --preset=s3-4d --ep_row_bytes=1G --microbatch_size=1048576"
                            " --train_size=10000000 --bandwidth_gbps=0.001");
  EXPECT_EQ(r.exit_code, kExitBadInput) << r.err;
  EXPECT_EQ(r.err.rfind("ringpipe predict: --bandwidth_gbps: the modeled times would not fit", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

}  // namespace
}  // namespace rp::apps
