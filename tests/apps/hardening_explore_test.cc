// An exploratory test's findings on the CLI (outputs, config files, reports read back, fault and sweep
// flags, messages), one regression test each, through the binary. hardening_test.cc has issue 12's.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "apps/cli.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
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

fs::path TempDir(const std::string& name) { return rp::apps::testing::TempDir("ringpipe_hardening_explore", name); }

void WriteFile(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

// A small layout that runs in well under a second on the virtual clock.
constexpr const char* kSmallRun =
    "--dp=2 --pp=2 --tp=1 --hidden=32x4 --microbatches=2 --forward_ms=0.5 --backward_ms=1 --steps=1 "
    "--reference=false --virtual_time";

// As root, access(W_OK) passes in /proc and /sys: the outputs there were accepted, the work ran, and the
// commit failed (exit 1). A probe file proves the directory takes a file, before the work.
TEST(HardeningExplore, OutputsWhereNoFileCanBeCreatedAreRefusedBeforeTheWork) {
  const fs::path dir = TempDir("proc");
  const std::string run = std::string("run ") + kSmallRun;
  ExpectBadInput(RunBinary(run + " --report_json=/proc/foo.json", dir),
                 "--report_json: '/proc/foo.json': directory '/proc'", "run");
  ExpectBadInput(RunBinary("predict --report_json=/proc/foo.json", dir), "--report_json: '/proc/foo.json'", "predict");
  ExpectBadInput(RunBinary("predict --report_json=/sys/foo.json", dir), "--report_json: '/sys/foo.json'", "sysfs");
  ExpectBadInput(RunBinary(std::string("timeline ") + kSmallRun + " --out=/proc/foo.svg", dir),
                 "--out: '/proc/foo.svg'", "timeline");
  ExpectBadInput(RunBinary("sweep --predict_only --axis=dp=1,2 --out_dir=/proc/swp", dir), "--out_dir: '/proc/swp'",
                 "sweep");
  // The table was printed before the commit failed: now nothing is.
  ExpectBadInput(RunBinary("allreduce --ranks=2 --min_bytes=1K --max_bytes=1K --json=/proc/foo.json", dir),
                 "--json: '/proc/foo.json'", "allreduce");
  if (::geteuid() == 0) {  // the case the probe is for; others are refused by the permission bits
    const Result r = RunBinary("predict --report_json=/proc/foo.json", dir);
    EXPECT_NE(r.err.find("cannot create a file there"), std::string::npos) << r.err;
  }

  // No probe is left: after a success, nor when a later output is refused.
  const fs::path report = dir / "r.json";
  ASSERT_EQ(RunBinary("predict --report_json=" + report.string(), dir).exit_code, kExitOk);
  EXPECT_EQ(Leftovers(dir, {"r.json"}), std::vector<std::string>{});
  const std::string before = ReadFile(report);
  ExpectBadInput(RunBinary(run + " --report_json=" + report.string() + " --trace=/proc/t.json", dir),
                 "--trace: '/proc/t.json'", "second output");
  EXPECT_EQ(Leftovers(dir, {"r.json"}), std::vector<std::string>{});
  EXPECT_EQ(ReadFile(report), before);
  const fs::path sweep_dir = dir / "sw";
  fs::create_directory(sweep_dir);
  ASSERT_EQ(RunBinary("sweep --predict_only --axis=dp=1,2 --out_dir=" + sweep_dir.string(), dir).exit_code, kExitOk);
  for (const auto& e : fs::directory_iterator(sweep_dir)) {
    EXPECT_EQ(e.path().filename().string().find(".ringpipe-probe"), std::string::npos) << e.path();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rp::apps
