// Issue 12's class of ignored or misread arguments, through the binary (hardening_test.cc has the
// others): stray arguments, negative link overrides, empty paths, out-of-range values where unused, a
// flag given twice, and the bare command's usage.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "apps/cli.h"
#include "apps/files.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/tracer.h"
#include "tests/apps/binary_runner.h"

namespace rp::apps {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Result = rp::apps::testing::BinaryResult;
using rp::apps::testing::ExpectBadInput;
using rp::apps::testing::Leftovers;
using rp::apps::testing::ReadFile;
using rp::apps::testing::RunBinary;

fs::path TempDir(const std::string& name) { return rp::apps::testing::TempDir("ringpipe_hardening_flags", name); }

// 8. Stray positional arguments are an error.
TEST(Hardening, StrayArgumentsAreAnError) {
  const fs::path dir = TempDir("positional");
  ExpectBadInput(RunBinary("predict steps=0 dp=0", dir), "unexpected argument 'steps=0'", "forgotten dashes");
  ExpectBadInput(RunBinary("run --virtual_time true", dir), "unexpected argument 'true'", "bool with a value");
  ExpectBadInput(RunBinary("allreduce extra", dir), "unexpected argument 'extra'", "allreduce");
  fs::remove_all(dir);
}

// 9. A link override is unset or >= 0: -1 is not a hidden "unset" (flag, file, sweep axis), and an
// unset override is null in the report's config.
TEST(Hardening, NegativeLinkOverridesAreRefusedAndUnsetIsNull) {
  const fs::path dir = TempDir("link_override");
  for (const char* f : {"alpha_us", "bandwidth_gbps", "overhead_us", "intra_alpha_us", "intra_bandwidth_gbps",
                        "intra_overhead_us", "inter_alpha_us", "inter_bandwidth_gbps", "inter_overhead_us"}) {
    ExpectBadInput(RunBinary(std::string("predict --steps=1 --") + f + "=-1", dir),
                   std::string("--") + f + ": must be >= 0, got -1", f);
  }
  std::ofstream(dir / "c.json") << R"({"alpha_us": -1})";
  ExpectBadInput(RunBinary("predict --config=" + (dir / "c.json").string(), dir), "alpha_us: must be >= 0", "file");
  // A sweep point: invalid (exit 4), as every point whose config is refused.
  const Result axis = RunBinary("sweep --predict_only --axis=alpha_us=-1,2 --out_dir=" + (dir / "out").string(), dir);
  EXPECT_EQ(axis.exit_code, kExitSomePointsFailed) << axis.err;
  EXPECT_NE(axis.err.find("alpha_us=-1: invalid: alpha_us: must be >= 0, got -1"), std::string::npos) << axis.err;
  const Result r = RunBinary("predict --steps=1 --link=dgx-a100 --inter_alpha_us=0 --report_json=" +
                                 (dir / "r.json").string(),
                             dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json report = json::parse(ReadFile(dir / "r.json"));
  EXPECT_TRUE(report["config"]["alpha_us"].is_null()) << report["config"];
  EXPECT_EQ(report["config"]["inter_alpha_us"], 0.0);
  // null in a file, as the report shows it: "not given".
  std::ofstream(dir / "back.json") << R"({"link": "dgx-a100", "alpha_us": null})";
  const Result back = RunBinary("predict --config=" + (dir / "back.json").string(), dir);
  EXPECT_EQ(back.exit_code, 0) << back.err;
  fs::remove_all(dir);
}

// 10. A path flag given empty is an error, not "unset" (an empty --from_report ran a whole emulation).
TEST(Hardening, AnEmptyPathFlagIsAnError) {
  const fs::path dir = TempDir("empty_path");
  const std::string svg = (dir / "x.svg").string();
  ExpectBadInput(RunBinary("timeline --from_report= --out=" + svg, dir), "--from_report: empty path", "from_report");
  ExpectBadInput(RunBinary("timeline --from_report=\"\" --out=" + svg, dir), "--from_report: empty path", "quoted");
  ExpectBadInput(RunBinary("timeline --out= --predict_only", dir), "--out: empty path", "out");
  ExpectBadInput(RunBinary("predict --report_json=", dir), "--report_json: empty path", "report_json");
  ExpectBadInput(RunBinary("run --virtual_time --trace=", dir), "--trace: empty path", "trace");
  ExpectBadInput(RunBinary("sweep --predict_only --axis=pp=1,2 --out_dir=", dir), "--out_dir: empty path", "out_dir");
  ExpectBadInput(RunBinary("allreduce --ranks=2 --max_bytes=4K --iters=1 --warmup=0 --json=", dir),
                 "--json: empty path", "json");
  ExpectBadInput(RunBinary("predict --config=", dir), "--config: empty path", "config");
  EXPECT_TRUE(Leftovers(dir, {}).empty());
  fs::remove_all(dir);
}

// 11. Every field's range is checked, whether or not the cost model or the subcommand uses it.
TEST(Hardening, OutOfRangeValuesAreRefusedEvenWhereUnused) {
  const fs::path dir = TempDir("unused_ranges");
  const std::string report = (dir / "r.json").string();
  ExpectBadInput(RunBinary("predict --steps=1 --flops_efficiency=-5 --report_json=" + report, dir),
                 "--flops_efficiency: must be in (0, 1], got -5", "efficiency, fixed cost model");
  ExpectBadInput(RunBinary("predict --steps=1 --flops_device=v100 --report_json=" + report, dir),
                 "--flops_device: unknown device 'v100'", "device, fixed cost model");
  ExpectBadInput(RunBinary("predict --cost_model=flops --forward_ms=-1 --report_json=" + report, dir),
                 "--forward_ms: entry 1 of 1 is -1; must be in [0, 1e9] ms", "forward_ms, flops cost model");
  ExpectBadInput(RunBinary("predict --cost_model=flops --lr=0 --report_json=" + report, dir), "--lr: must be > 0",
                 "lr, flops cost model");
  EXPECT_FALSE(fs::exists(report));
  fs::remove_all(dir);
}

// 12. A flag given twice is an error (it was silently last-wins; a config file's duplicate key is one).
TEST(Hardening, AFlagGivenTwiceIsAnError) {
  const fs::path dir = TempDir("twice");
  ExpectBadInput(RunBinary("predict --steps=1 --dp=2 --dp=4", dir), "--dp: given twice", "dp");
  ExpectBadInput(RunBinary("predict --overlap --nooverlap", dir), "--overlap: given twice", "bool and its negation");
  ExpectBadInput(RunBinary("allreduce --ranks=2 --ranks=4", dir), "--ranks: given twice", "allreduce");
  ExpectBadInput(RunBinary("run --virtual_time --steps=1 --fault=stall:rank=1,rank=2,step=0,op=0", dir),
                 "--fault: 'stall:rank=1,rank=2,step=0,op=0': rank given twice", "fault key twice");
  // --axis is repeatable.
  const Result sweep = RunBinary("sweep --predict_only --axis=pp=1,2 --axis=dp=1,2 --out_dir=" + (dir / "o").string(), dir);
  EXPECT_EQ(sweep.exit_code, 0) << sweep.err;
  fs::remove_all(dir);
}

// 13. `ringpipe` alone: the usage is the message of exit code 2, so it goes to stderr.
TEST(Hardening, BareRingpipePrintsUsageOnStderr) {
  const fs::path dir = TempDir("bare");
  const Result r = RunBinary("", dir);
  EXPECT_EQ(r.exit_code, kExitBadInput);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("usage: ringpipe <subcommand>"), std::string::npos) << r.err;
  const Result help = RunBinary("--help", dir);
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("usage: ringpipe <subcommand>"), std::string::npos) << help.out;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rp::apps
