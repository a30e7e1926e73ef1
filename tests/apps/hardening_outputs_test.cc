// Issue 12's output-file class of failure, through the binary (hardening_test.cc has the others):
// outputs written atomically, checked before the work, their temporary files and staging directory
// removed on a signal during the commit, and a failed write to standard output an error.
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
using rp::apps::testing::Names;
using rp::apps::testing::ReadFile;
using rp::apps::testing::RunBinary;

fs::path TempDir(const std::string& name) { return rp::apps::testing::TempDir("ringpipe_hardening_outputs", name); }

// 6. Output files: never through a symlink, never a special file, never an input or another output,
// checked before the work, committed with fsync + rename, no temporary file left.
TEST(Hardening, OutputsAreAtomicSafeAndCheckedBeforeTheWork) {
  const fs::path dir = TempDir("outputs");
  const fs::path victim = dir / "victim", report = dir / "r.json";
  std::ofstream(victim) << "precious";
  fs::create_symlink(victim, dir / "r.json.tmp-ringpipe");  // the old fixed temporary name
  Result r = RunBinary("predict --preset=s1 --report_json=" + report.string(), dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ReadFile(victim), "precious");
  EXPECT_TRUE(json::parse(ReadFile(report)).is_object());
  EXPECT_EQ(Leftovers(dir, {"victim", "r.json", "r.json.tmp-ringpipe"}), std::vector<std::string>{});

  ExpectBadInput(RunBinary("predict --report_json=/dev/full", dir), "is a device", "/dev/full");
  struct stat st;
  ASSERT_EQ(::stat("/dev/full", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  fs::create_symlink(victim, dir / "link.json");
  ExpectBadInput(RunBinary("predict --report_json=" + (dir / "link.json").string(), dir), "symbolic link", "symlink");
  ExpectBadInput(RunBinary("predict --report_json=" + dir.string(), dir), "report_json", "directory");
  ExpectBadInput(RunBinary("run --report_json=" + (dir / "x").string() + " --trace=" + (dir / "x").string(), dir),
                 "is also the output --report_json", "same output twice");
  const fs::path cfg = dir / "c.json";
  std::ofstream(cfg) << "{\"preset\": \"s1\"}";
  ExpectBadInput(RunBinary("predict --config=" + cfg.string() + " --report_json=" + cfg.string(), dir),
                 "is also the input --config", "output = input");
  EXPECT_EQ(ReadFile(cfg), "{\"preset\": \"s1\"}");
  // Checked before the work, with the real errno text.
  r = RunBinary("run --report_json=" + (dir / "no" / "r.json").string(), dir);
  ExpectBadInput(r, "No such file or directory", "missing directory");

  // Two concurrent runs to one path: each writes its own temporary file; the result is one whole report.
  r = RunBinary("predict --preset=s1 --report_json=" + report.string() + " > /dev/null & " + RINGPIPE_BIN +
                    " predict --preset=s2 --report_json=" + report.string() + " > /dev/null; wait",
                dir);
  EXPECT_TRUE(json::parse(ReadFile(report)).is_object());
  EXPECT_EQ(Leftovers(dir, {"victim", "r.json", "r.json.tmp-ringpipe", "link.json", "c.json"}),
            std::vector<std::string>{});
  fs::remove_all(dir);
}

// A directory output's files are checked before the work like file outputs; names up to the file
// system's 255 bytes work, longer ones are refused before the work; "-" is not an output file.
TEST(Hardening, SweepOutputsNamesAndStandardOutputAreCheckedBeforeTheWork) {
  const fs::path dir = TempDir("outputs2");
  const fs::path out = dir / "sw";
  fs::create_directories(out);
  const std::string sweep = "sweep --predict_only --steps=1 --axis=dp=1,2 --out_dir=" + out.string();
  std::ofstream(out / "sweep.json") << "{\"steps\": 1}";
  ExpectBadInput(RunBinary(sweep + " --config=" + (out / "sweep.json").string(), dir),
                 "sweep.json': is also the input --config", "sweep input inside its out_dir");
  EXPECT_EQ(ReadFile(out / "sweep.json"), "{\"steps\": 1}");
  std::ofstream(out / "sweep.csv") << "old";
  fs::create_directories(out / "step_time.svg");
  ExpectBadInput(RunBinary(sweep, dir), "step_time.svg': exists and is a directory", "a directory entry");
  EXPECT_EQ(ReadFile(out / "sweep.csv"), "old");
  EXPECT_EQ(ReadFile(out / "sweep.json"), "{\"steps\": 1}");
  fs::remove(out / "step_time.svg");
  ASSERT_EQ(RunBinary(sweep, dir).exit_code, 0);
  EXPECT_NE(ReadFile(out / "sweep.csv"), "old");
  ExpectBadInput(RunBinary("sweep --predict_only --axis=dp=1,2 --out_dir=" + (out / "sweep.csv").string(), dir),
                 "exists and is a file, not a directory", "out_dir is a file");

  const std::string name250(250, 'b'), name256(256, 'b');
  ASSERT_EQ(RunBinary("predict --steps=1 --report_json=" + (dir / name250).string(), dir).exit_code, 0);
  EXPECT_TRUE(json::parse(ReadFile(dir / name250)).is_object());
  ExpectBadInput(RunBinary("run --steps=1 --report_json=" + (dir / name256).string(), dir),
                 "file name longer than 255 bytes", "name too long");
  ExpectBadInput(RunBinary("predict --steps=1 --report_json=-", dir), "standard output is not an output file",
                 "dash");
  EXPECT_FALSE(fs::exists(dir / "-"));
  EXPECT_EQ(Leftovers(dir, {"sw", name250}), std::vector<std::string>{});
  fs::remove_all(dir);
}

TEST(Hardening, ASignalDuringACommitRemovesItsTemporaryFiles) {
  const fs::path dir = TempDir("signal");
  const fs::path temp = dir / ".r.json.ringpipe-test";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    InstallCleanupHandlers();
    std::ofstream(temp) << "partial";
    internal::RegisterTempFile(temp.string());
    ::raise(SIGTERM);
    ::_exit(0);  // not reached: the handler dies of the signal
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  EXPECT_FALSE(fs::exists(temp));
  fs::remove_all(dir);
}

// The same for a new --out_dir's staging directory and the parents the commit created: their files,
// then they (registered outermost first, as a commit does), go; a directory with a file of someone
// else's stays.
TEST(Hardening, ASignalDuringACommitRemovesItsStagingDirectoryAndTheParentsItMade) {
  const fs::path dir = TempDir("signal_dirs");
  const fs::path parent = dir / "a", staging = parent / ".out.ringpipe-test", other = dir / "kept";
  fs::create_directories(staging);
  fs::create_directories(other);
  std::ofstream(other / "theirs.txt") << "theirs";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    InstallCleanupHandlers();
    internal::RegisterTempDir(parent.string());
    internal::RegisterTempDir(staging.string());
    internal::RegisterTempDir(other.string());
    std::ofstream(staging / "sweep.csv") << "partial";
    internal::RegisterTempFile((staging / "sweep.csv").string());
    ::raise(SIGINT);
    ::_exit(0);  // not reached: the handler dies of the signal
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT) << status;
  EXPECT_FALSE(fs::exists(parent));
  EXPECT_EQ(ReadFile(other / "theirs.txt"), "theirs");
  fs::remove_all(dir);
}

// 7. Lost standard output is an error, as coreutils have it.
TEST(Hardening, AFailedWriteToStandardOutputIsAnError) {
  const fs::path dir = TempDir("stdout");
  for (const std::string& cmd : std::vector<std::string>{"predict", "allreduce --ranks=2 --max_bytes=4K --iters=1 --warmup=0",
                                "sweep --preset=s1 --predict_only --axis=microbatches=2,4 --out_dir=" +
                                    (dir / "out").string()}) {
    const Result r = RunBinary(cmd + " > /dev/full", dir);
    EXPECT_EQ(r.exit_code, kExitFailed) << cmd << "\n" << r.err;
    EXPECT_NE(r.err.find("standard output: No space left on device"), std::string::npos) << cmd << "\n" << r.err;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rp::apps
