// README.md tells the truth: every `ringpipe` command it shows parses with the flags of its subcommand,
// the examples run (scaled down where they are slow: the same flags plus a virtual clock and fewer
// steps) and give what the README claims (device counts, exit codes).
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "apps/cli.h"
#include "apps/subcommands.h"
#include "gtest/gtest.h"
#include "tests/apps/binary_runner.h"

namespace rp::apps {
namespace {

namespace fs = std::filesystem;
using Result = rp::apps::testing::BinaryResult;
using rp::apps::testing::RunBinary;

std::string Readme() {
  std::ifstream f(fs::path(RINGPIPE_SOURCE_DIR) / "README.md");
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Every `ringpipe ...` command of the README: lines of ```sh blocks, and inline `ringpipe ...` code.
std::vector<std::string> Commands(const std::string& readme) {
  std::vector<std::string> out;
  bool in_sh = false;
  for (absl::string_view line : absl::StrSplit(readme, '\n')) {
    if (line.rfind("```", 0) == 0) {
      in_sh = !in_sh && line.find("sh") != absl::string_view::npos;
      continue;
    }
    if (in_sh && line.rfind("ringpipe ", 0) == 0) out.emplace_back(line);
  }
  const std::regex inline_cmd("`(ringpipe [a-z]+[^`]*)`");
  for (std::sregex_iterator it(readme.begin(), readme.end(), inline_cmd), end; it != end; ++it) {
    const std::string cmd = (*it)[1];
    if (cmd.find("--") != std::string::npos) out.push_back(cmd);
  }
  return out;
}

std::vector<std::string> Words(const std::string& cmd) { return absl::StrSplit(cmd, ' ', absl::SkipEmpty()); }

TEST(Readme, EveryCommandParsesWithItsSubcommandsFlags) {
  const std::vector<std::string> cmds = Commands(Readme());
  ASSERT_GE(cmds.size(), 6u);
  for (const std::string& cmd : cmds) {
    std::vector<std::string> words = Words(cmd);
    if (words.size() < 2 || words[1].rfind("<", 0) == 0) continue;  // "ringpipe <subcommand> --help"
    const std::string sub = words[1];
    std::vector<std::string> args(words.begin() + 2, words.end());
    // A placeholder value (`--seed=N`) stands for the user's: check the flag name with a number.
    for (std::string& a : args) {
      if (std::regex_match(a, std::regex("--[a-z_]+=[A-Z]+"))) a = a.substr(0, a.find('=') + 1) + "1";
    }
    auto parsed = ParseSubcommandArgs(sub, args);
    EXPECT_TRUE(parsed.ok()) << cmd << ": " << parsed.status();
  }
}

TEST(Readme, PredictExampleHasTheDeviceCountItClaims) {
  const std::string readme = Readme();
  const std::regex claim("`(ringpipe predict [^`]*)`: ([0-9]+) devices");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(readme, m, claim)) << "the README's predict example and its device count";
  const fs::path dir = rp::apps::testing::TempDir("ringpipe_readme", "predict");
  const Result r = RunBinary(m[1].str().substr(std::string("ringpipe ").size()), dir);
  ASSERT_EQ(r.exit_code, kExitOk) << r.err;
  EXPECT_NE(r.out.find("= " + m[2].str() + " devices"), std::string::npos) << m[1] << "\n" << r.out.substr(0, 400);
  fs::remove_all(dir);
}

TEST(Readme, ExitCodesAreTheOnesItStates) {
  const std::string readme = Readme();
  const fs::path dir = rp::apps::testing::TempDir("ringpipe_readme", "exit");
  // "Bad input ... exits 2 without writing any file; a failed run exits 3"
  EXPECT_NE(readme.find("exits 2 without writing any file"), std::string::npos);
  EXPECT_NE(readme.find("a run that fails at run time exits 3"), std::string::npos);
  EXPECT_EQ(RunBinary("run --pp=7", dir).exit_code, kExitBadInput);
  const Result fault = RunBinary("run --preset=s1 --steps=1 --virtual_time --reference=false "
                                 "--fault=throw:rank=0,step=0,op=0", dir);
  EXPECT_EQ(fault.exit_code, kExitFault) << fault.err;
  EXPECT_NE(readme.find("some points invalid or failed exits 4"), std::string::npos);
  fs::remove_all(dir);
}

TEST(Readme, DefaultRunIsTheEightDeviceJobItDescribes) {
  const std::string readme = Readme();
  EXPECT_NE(readme.find("DP=2 × PP=2 × TP=2 on 8 emulated devices"), std::string::npos);
  const fs::path dir = rp::apps::testing::TempDir("ringpipe_readme", "default");
  const Result r = RunBinary("run --steps=2 --virtual_time", dir);
  ASSERT_EQ(r.exit_code, kExitOk) << r.err;
  EXPECT_NE(r.out.find("DP=2 x PP=2 x TP=2 on 2 node(s) of 4 (order tp,pp,dp) = 8 devices"), std::string::npos)
      << r.out.substr(0, 400);
  fs::remove_all(dir);
}

// The studies' commands, each with its own flags plus a virtual clock and one step (the README's run
// on the real clock for minutes); every one must run and write its outputs.
TEST(Readme, StudyCommandsRunAndWriteTheirOutputs) {
  const fs::path dir = rp::apps::testing::TempDir("ringpipe_readme", "studies");
  int ran = 0;
  for (const std::string& cmd : Commands(Readme())) {
    std::vector<std::string> words = Words(cmd);
    if (words.size() < 3 || (words[1] != "sweep" && words[1] != "timeline")) continue;
    std::string args = words[1];
    std::string output;
    for (size_t i = 2; i < words.size(); ++i) {
      const std::string& w = words[i];
      if (w.rfind("--out_dir=", 0) == 0 || w.rfind("--out=", 0) == 0) {
        const std::string name = w.substr(w.find('=') + 1);
        output = (dir / name).string();
        args += " " + w.substr(0, w.find('=') + 1) + output;
      } else if (w.rfind("--steps=", 0) != 0) {
        args += " " + w;
      }
    }
    args += " --virtual_time --steps=1 --reference=false";
    const Result r = RunBinary(args, dir);
    EXPECT_EQ(r.exit_code, kExitOk) << cmd << "\n" << r.err;
    EXPECT_TRUE(fs::exists(output)) << cmd;
    if (words[1] == "sweep") {
      EXPECT_TRUE(fs::exists(fs::path(output) / "sweep.csv")) << cmd;
    }
    ++ran;
  }
  EXPECT_GE(ran, 6);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rp::apps
