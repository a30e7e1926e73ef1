// apps/malloc_tunables.h through the binary: glibc's malloc tunables are set when the environment
// has none (ringpipe re-executes itself once: the run completing shows it does not loop), the
// report's host section says which are in effect and who set them, and a user's own
// GLIBC_TUNABLES — the way to opt out — is left as it is.
#include <sys/prctl.h>

#include <filesystem>
#include <string>

#include "apps/malloc_tunables.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/thread.h"
#include "tests/apps/binary_runner.h"

namespace rp::apps {
namespace {

namespace fs = std::filesystem;
using rp::apps::testing::ReadJson;
using rp::apps::testing::RunBinaryInShell;

TEST(MallocTunables, SetWhenTheEnvironmentHasNoneKeptWhenGivenAndReported) {
  const fs::path dir = rp::apps::testing::TempDir("ringpipe_malloc_tunables_test", "tunables");
  const fs::path report = dir / "r.json";
  const std::string run = "run --virtual_time --steps=1 --reference=false --report_json=" + report.string();

  auto r = RunBinaryInShell("unset GLIBC_TUNABLES RINGPIPE_MALLOC_TUNED", run, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json t = ReadJson(report)["host"]["malloc_tunables"];
  if (kSanitizerBuild) {  // the sanitizer's allocator, not glibc's: nothing to tune
    EXPECT_EQ(t["source"], "none");
    EXPECT_EQ(t["value"], "");
  } else {
    EXPECT_EQ(t["source"], "ringpipe");
    EXPECT_EQ(t["value"], kRingpipeMallocTunables);
  }

  r = RunBinaryInShell("unset RINGPIPE_MALLOC_TUNED; export GLIBC_TUNABLES=glibc.malloc.hugetlb=0", run, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  t = ReadJson(report)["host"]["malloc_tunables"];
  EXPECT_EQ(t["source"], "environment");
  EXPECT_EQ(t["value"], "glibc.malloc.hugetlb=0");

  // Empty is a value too: the user's, kept.
  r = RunBinaryInShell("unset RINGPIPE_MALLOC_TUNED; export GLIBC_TUNABLES=", run, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  t = ReadJson(report)["host"]["malloc_tunables"];
  EXPECT_EQ(t["source"], "environment");
  EXPECT_EQ(t["value"], "");
  fs::remove_all(dir);
}

// The re-executed image was named "exe" (ps, top, pgrep and killall went by it): ringpipe
// renames itself after its file. Here on this test's own process, its name set to "exe" first.
TEST(MallocTunables, ARenamedProcessGetsItsFilesNameBack) {
  char before[32] = {};
  ASSERT_EQ(prctl(PR_GET_NAME, before, 0, 0, 0), 0);
  ASSERT_EQ(prctl(PR_SET_NAME, "exe", 0, 0, 0), 0);
  const bool restored = RestoreProcessName();
  char after[32] = {};
  ASSERT_EQ(prctl(PR_GET_NAME, after, 0, 0, 0), 0);
  prctl(PR_SET_NAME, before, 0, 0, 0);
  ASSERT_TRUE(restored);
  const std::string file = fs::read_symlink("/proc/self/exe").filename().string();
  EXPECT_EQ(std::string(after), file.substr(0, 15));
  EXPECT_NE(std::string(after), "exe");
}

}  // namespace
}  // namespace rp::apps
