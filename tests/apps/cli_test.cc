// The `ringpipe` binary as a user sees it: exit codes, messages, outputs (and no partial outputs).
#include "apps/cli.h"
#include "apps/files.h"
#include "apps/flags.h"
#include "apps/subcommands.h"

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/apps/binary_runner.h"
#include "nlohmann/json.hpp"


namespace rp::apps {
namespace {

namespace fs = std::filesystem;

using Result = rp::apps::testing::BinaryResult;
using rp::apps::testing::Names;
using rp::apps::testing::ReadFile;
inline Result RunBinary(const std::string& args) {
  return rp::apps::testing::RunBinaryMerged(args);
}

fs::path TempDir(const std::string& name) {
  return rp::apps::testing::TempDir("ringpipe_cli_test", name);
}

const std::vector<FlagSpec> kSpecs = {{"cli_test_int", Grammar::kInt, "3", "test flag"},
                                       {"cli_test_bool", Grammar::kBool, "false", "test flag"},
                                       {"cli_test_string", Grammar::kString, "", "test flag"},
                                       {"cli_test_bytes", Grammar::kByteList, "", "test flag"}};

TEST(ParseFlags, ReadsFlagsInEveryFormAndRecordsWhichWereGiven) {
  auto args = ParseFlags("x", {"--cli_test_int=7", "--cli_test_bool"}, kSpecs);
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->Int("cli_test_int", 3), 7);
  EXPECT_TRUE(args->Bool("cli_test_bool", false));
  EXPECT_TRUE(args->Has("cli_test_int"));
  EXPECT_FALSE(args->Has("cli_test_string"));

  args = ParseFlags("x", {"--cli_test_int", "9", "--nocli_test_bool", "--cli_test_bytes=64K,1M"}, kSpecs);
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->Int("cli_test_int", 3), 9);
  EXPECT_FALSE(args->Bool("cli_test_bool", true));
  EXPECT_EQ(*ParseByteList("b", args->Text("cli_test_bytes")), (std::vector<uint64_t>{65536, 1 << 20}));
}

TEST(ParseFlags, RejectsUnknownFlagsBadValuesMissingValuesAndStrayArgumentsNamingThem) {
  auto a = ParseFlags("x", {"--no_such_flag=1"}, kSpecs);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("--no_such_flag"), std::string::npos);
  a = ParseFlags("x", {"--cli_test_int=seven"}, kSpecs);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("--cli_test_int"), std::string::npos);
  a = ParseFlags("x", {"--cli_test_int"}, kSpecs);
  EXPECT_NE(a.status().message().find("missing value"), std::string::npos);
  // A flag followed by another flag has no value (a bare non-bool flag is not "true").
  a = ParseFlags("x", {"--cli_test_string", "--cli_test_int=4"}, kSpecs);
  EXPECT_NE(a.status().message().find("--cli_test_string: missing value"), std::string::npos);
  // Forgotten dashes: an error, not an ignored argument.
  a = ParseFlags("x", {"cli_test_int=0"}, kSpecs);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("unexpected argument 'cli_test_int=0'"), std::string::npos);
  a = ParseFlags("x", {"--cli_test_bool", "false"}, kSpecs);
  EXPECT_NE(a.status().message().find("unexpected argument 'false'"), std::string::npos);
}

TEST(ParseFlags, OneGrammarPerFlagWithSizeSuffixesAndLists) {
  EXPECT_EQ(*ParseBytes("b", "64K"), 65536u);
  EXPECT_EQ(*ParseBytes("b", "2g"), uint64_t{2} << 30);
  EXPECT_FALSE(ParseBytes("b", "64Q").ok());
  EXPECT_FALSE(ParseBytes("b", "-1").ok());
  EXPECT_FALSE(ParseBytes("b", "2000000000000G").ok());
  EXPECT_FALSE(ParseByteList("b", "4K,,8K").ok());
  EXPECT_EQ(*ParseWidthList("hidden", "128,64x3"), (std::vector<int>{128, 64, 64, 64}));
  EXPECT_FALSE(ParseWidthList("hidden", "64x100000").ok());  // bounded
  EXPECT_EQ(*ParseNumberList("forward_ms", " 1.5, 2"), (std::vector<double>{1.5, 2}));
  EXPECT_FALSE(ParseNumber("n", "1e999").ok());
  EXPECT_FALSE(ParseNumber("n", "nan").ok());
}

TEST(OneLine, EscapesControlBytesAndBytesThatAreNotUtf8) {
  EXPECT_EQ(OneLine("a\nb"), "a\\x0ab");
  EXPECT_EQ(OneLine("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(OneLine("caf\xc3\xa9"), "caf\xc3\xa9");           // valid UTF-8 stays
  EXPECT_EQ(OneLine("\xed\xa0\x80"), "\\xed\\xa0\\x80");     // a surrogate is not UTF-8
  EXPECT_EQ(OneLine("\xc3"), "\\xc3");                         // truncated sequence
}

// Through the binary: a sweep whose files pass the file-size limit (`ulimit -f`) fails with one line
// (exit 1) and leaves --out_dir as it was — absent, or the previous sweep's files byte for byte, with
// no temporary file. Before, SIGXFSZ killed the process half way: a new out_dir stayed behind with the
// temporary files in it.
TEST(RingpipeBinary, ASweepPastTheFileSizeLimitLeavesOutDirAsItWas) {
  const fs::path dir = TempDir("sweep_fsize");
  const std::string sweep = "sweep --predict_only --axis=dp=1,2 --out_dir=";
  const std::string limit = "ulimit -f 8";  // 4 KiB (sh: 512-byte blocks) or 8 KiB: under overview.svg
  rp::apps::testing::BinaryResult r = rp::apps::testing::RunBinaryInShell(limit, sweep + (dir / "new").string(), dir);
  EXPECT_EQ(r.exit_code, kExitFailed) << r.err;
  // The progress lines, then one line: the error.
  const std::string last = r.err.substr(r.err.rfind('\n', r.err.size() - 2) + 1);
  EXPECT_EQ(last.rfind("ringpipe sweep: --out_dir: '" + (dir / "new").string() + "/", 0), 0u) << r.err;
  EXPECT_NE(last.find("': cannot write: File too large\n"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(Names(dir), std::vector<std::string>{});

  const fs::path old = dir / "old";
  ASSERT_EQ(rp::apps::testing::RunBinary(sweep + old.string() + " --title=before", dir).exit_code, kExitOk);
  const std::vector<std::string> names = Names(old);
  ASSERT_EQ(names.size(), 9u);
  std::vector<std::string> before;
  for (const std::string& n : names) before.push_back(ReadFile(old / n));
  r = rp::apps::testing::RunBinaryInShell(limit, sweep + old.string() + " --title=after", dir);
  EXPECT_EQ(r.exit_code, kExitFailed) << r.err;
  EXPECT_EQ(Names(dir), std::vector<std::string>{"old"});
  ASSERT_EQ(Names(old), names);
  for (size_t i = 0; i < names.size(); ++i) EXPECT_EQ(ReadFile(old / names[i]), before[i]) << names[i];
  fs::remove_all(dir);
}

TEST(RingpipeBinary, BadInputExitsTwoWithOneLineNamingTheFieldAndWritesNothing) {
  const fs::path dir = TempDir("bad");
  const fs::path json = dir / "rows.json";
  struct Case {
    std::string args;
    std::string field;
  } cases[] = {
      {"allreduce --ranks=0", "--ranks"},
      {"allreduce --codec=fp8", "--codec"},
      {"allreduce --segment_bytes=6", "--segment_bytes"},
      {"allreduce --segment_bytes=64Q", "--segment_bytes"},
      {"allreduce --segment_bytes=4K,,8K", "--segment_bytes"},
      {"allreduce --max_bytes=1K,2K", "--max_bytes"},
      {"allreduce --min_bytes=1024 --max_bytes=512", "--max_bytes"},
      {"allreduce --link=nowhere", "--link"},
      {"allreduce --bogus=1", "--bogus"},
      {"allreduce --iters=x", "--iters"},
      {"alltoall --ranks=0", "--ranks"},
      {"alltoall --segment_bytes=6", "--segment_bytes"},
      {"alltoall --codec=fp8", "--codec"},
      {"alltoall --link=nowhere", "--link"},
      {"alltoall --min_bytes=1024 --max_bytes=512", "--max_bytes"},
      {"alltoall --in_place", "--in_place"},
      {"no_such_subcommand", "no_such_subcommand"},
  };
  for (const Case& c : cases) {
    const Result r = RunBinary(c.args + " --json=" + json.string());
    EXPECT_EQ(r.exit_code, kExitBadInput) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.field), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_FALSE(fs::exists(json)) << c.args;
  }
  fs::remove_all(dir);
}

TEST(RingpipeBinary, AllReduceDriverPrintsRowsAndWritesJsonWithNoWrongElements) {
  const fs::path dir = TempDir("allreduce");
  const fs::path json = dir / "rows.json";
  for (const char* codec : {"fp32", "fp16", "bf16", "int8"}) {
    const Result r = RunBinary(std::string("allreduce --ranks=3 --min_bytes=4 --max_bytes=65536 "
                                           "--iters=2 --warmup=1 --segment_bytes=4096 --codec=") +
                               codec + " --json=" + json.string());
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("busbw"), std::string::npos);
    std::ifstream f(json);
    const nlohmann::json rows = nlohmann::json::parse(f);
    ASSERT_TRUE(rows.is_array());
    ASSERT_EQ(rows.size(), 8u) << rows.dump();  // 4 B .. 64 KiB by x4
    for (const auto& row : rows) {
      for (const char* key : {"bytes", "count", "type", "time_us", "algbw_gbps", "busbw_gbps", "wrong"}) {
        EXPECT_TRUE(row.contains(key)) << key;
      }
      EXPECT_EQ(row["wrong"], 0) << codec << " " << row.dump();
      EXPECT_EQ(row["type"], codec);
      EXPECT_DOUBLE_EQ(row["busbw_gbps"].get<double>(),
                       row["algbw_gbps"].get<double>() * 2.0 * 2 / 3);
    }
    EXPECT_EQ(rows[0]["count"], 1);
    EXPECT_EQ(rows[7]["bytes"], 65536);
  }
  fs::remove_all(dir);
}

TEST(RingpipeBinary, AllReduceSegmentListMeasuresEverySizeWithEverySegment) {
  const fs::path dir = TempDir("allreduce_segments");
  const fs::path json = dir / "rows.json";
  const Result r = RunBinary("allreduce --ranks=3 --min_bytes=16K --max_bytes=64K --iters=2 "
                             "--warmup=1 --segment_bytes=4K,16K --json=" + json.string());
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("segment(B)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("# fastest segment per size: 16384 B -> "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("65536 B -> "), std::string::npos) << r.out;
  std::ifstream f(json);
  const nlohmann::json rows = nlohmann::json::parse(f);
  ASSERT_EQ(rows.size(), 4u) << rows.dump();  // 16 KiB and 64 KiB, each with 4 KiB and 16 KiB
  const std::vector<std::pair<uint64_t, uint64_t>> want = {
      {16384, 4096}, {16384, 16384}, {65536, 4096}, {65536, 16384}};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(rows[i]["bytes"].get<uint64_t>(), want[i].first) << i;
    EXPECT_EQ(rows[i]["segment_bytes"].get<uint64_t>(), want[i].second) << i;
    EXPECT_EQ(rows[i]["wrong"], 0) << i;
  }
  fs::remove_all(dir);
}

TEST(RingpipeBinary, AllReduceForwardingFlagsKeepEveryElementRight) {
  // 32 KiB segments are lent (above the 16 KiB inline limit), so forwarding is in play at n = 4.
  for (const char* flags : {"--forward=false", "--forward --streaming_min_bytes=0",
                            "--forward --streaming_min_bytes=1099511627776",
                            "--in_place --streaming_min_bytes=0"}) {
    const Result r = RunBinary(std::string("allreduce --ranks=4 --min_bytes=4 --max_bytes=1048576 "
                                           "--iters=2 --warmup=1 --segment_bytes=32768 ") +
                               flags);
    ASSERT_EQ(r.exit_code, 0) << flags << "\n" << r.out;
    EXPECT_NE(r.out.find("# #wrong total: 0"), std::string::npos) << flags << "\n" << r.out;
    EXPECT_NE(r.out.find(std::string("all-gather forwarding ") +
                         (std::string(flags) == "--forward=false" ? "off" : "on")),
              std::string::npos)
        << r.out;
  }
}

nlohmann::json ReadRows(const fs::path& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

// With a link preset the ranks run on the modeled fabric from one common start: the emulated time is
// the closed form of docs/collectives.md to the nanosecond, the same run after run, and a segment
// sweep shows the trade-off (4 ranks, 1 MiB, NVLink 3: α 3 us, o 0.4 us, 300 GB/s; the closed form
// gives 161.9, 46.6, 23.6 and 25.6 us for 4K, 16K, 64K and 256K segments).
TEST(RingpipeBinary, AllReduceOnALinkPresetIsEmulatedAndEqualsTheClosedForm) {
  const fs::path dir = TempDir("allreduce_timed");
  const fs::path json = dir / "rows.json";
  const std::string cmd = "allreduce --link=dgx-a100 --ranks=4 --min_bytes=1M --max_bytes=1M --iters=2 --warmup=1 "
                          "--segment_bytes=4K,16K,64K,256K --json=" + json.string();
  const Result r = RunBinary(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("formula(us)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("# fastest segment per size: 1048576 B -> 65536 B"), std::string::npos) << r.out;
  const nlohmann::json rows = ReadRows(json);
  ASSERT_EQ(rows.size(), 4u);
  for (const auto& row : rows) {
    EXPECT_EQ(row["time"], "emulated");
    EXPECT_EQ(row["wrong"], 0);
    ASSERT_TRUE(row["formula_us"].is_number()) << row.dump();
    EXPECT_DOUBLE_EQ(row["time_us"].get<double>(), row["formula_us"].get<double>()) << row.dump();
  }
  const double t4k = rows[0]["time_us"], t16k = rows[1]["time_us"], t64k = rows[2]["time_us"], t256k = rows[3]["time_us"];
  EXPECT_GT(t4k, t16k);   // too small: o on every one of 64 messages per chunk and step
  EXPECT_GT(t16k, t64k);
  EXPECT_LT(t64k, t256k);  // too large: no pipelining across the 6 ring steps
  EXPECT_NEAR(t4k, 161.9, 0.1);
  EXPECT_NEAR(t64k, 23.6, 0.1);
  // One common modeled start: the same command gives the same time.
  ASSERT_EQ(RunBinary(cmd).exit_code, 0);
  EXPECT_EQ(ReadRows(json), rows);
  // A ring across nodes mixes link classes: no closed form, still exact results.
  const Result cross = RunBinary("allreduce --link=dgx-h100 --ranks=12 --min_bytes=4K --max_bytes=4K --iters=1 "
                                 "--warmup=0 --json=" + json.string());
  ASSERT_EQ(cross.exit_code, 0) << cross.out;
  const nlohmann::json x = ReadRows(json);
  EXPECT_TRUE(x[0]["formula_us"].is_null());
  EXPECT_EQ(x[0]["wrong"], 0);
  EXPECT_GT(x[0]["time_us"].get<double>(), 0);
  fs::remove_all(dir);
}

// --help shows the effective default of every flag, per subcommand, in one grammar.
TEST(RingpipeBinary, HelpShowsTheEffectiveDefaultOfEveryFlag) {
  const Result run = RunBinary("run --help");
  ASSERT_EQ(run.exit_code, 0);
  EXPECT_NE(run.out.find("--link=<text>  (default: dgx-a100)"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("--segment_bytes=<bytes or a list, e.g. 16K,64K,1M>  (default: 0 (one message per chunk))"),
            std::string::npos);
  EXPECT_NE(run.out.find("--nics_per_node=<integer>  (default: one per device)"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("--bucket_mb=<number>  (default: 25)"), std::string::npos);
  EXPECT_NE(run.out.find("--watchdog_timeout=<number>  (default: 10)"), std::string::npos);
  EXPECT_NE(run.out.find("--overlap=<true|false>  (default: true)"), std::string::npos);
  EXPECT_NE(run.out.find("--dp=<integer>  (default: 2)"), std::string::npos);
  EXPECT_NE(run.out.find("--hidden=<widths, e.g. 128,64x3>  (default: 64,64,64,64,64)"), std::string::npos);
  EXPECT_NE(run.out.find("--alpha_us=<number>  (default: the link preset's)"), std::string::npos);
  EXPECT_EQ(run.out.find("(default: \"\")"), std::string::npos);
  const Result ar = RunBinary("allreduce --help");
  EXPECT_NE(ar.out.find("--link=<text>  (default: ideal)"), std::string::npos) << ar.out;
  EXPECT_NE(ar.out.find("--segment_bytes=<bytes or a list, e.g. 16K,64K,1M>  (default: 256K)"), std::string::npos);
  for (const char* sub : {"run", "predict", "sweep", "timeline", "allreduce", "stress"}) {
    const Result r = RunBinary(std::string(sub) + " --help");
    EXPECT_EQ(r.exit_code, 0) << sub;
    EXPECT_NE(r.out.find("(default: "), std::string::npos) << sub;
  }
}

TEST(RingpipeBinary, HelpListsEveryAllReduceFlag) {
  const Result r = RunBinary("allreduce --help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag : {"--ranks", "--min_bytes", "--max_bytes", "--step_factor", "--segment_bytes",
                           "--codec", "--iters", "--warmup", "--link", "--json", "--in_place", "--forward",
                           "--streaming_min_bytes"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
}

// Help wins: -h / --help anywhere among a subcommand's arguments prints its help on stdout and exits 0,
// whatever else is there — an unknown flag, a bad value, a stray argument, a flag missing its value —
// for every subcommand `ringpipe --help` lists. (Before: the first bad argument was an error, exit 2.)
TEST(RingpipeBinary, HelpAnywhereWinsOverInvalidArgumentsInEverySubcommand) {
  const fs::path dir = TempDir("help_wins");
  for (const Subcommand& sub : AllSubcommands()) {
    const std::string name = sub.name;
    const std::vector<FlagSpec> specs = sub.flags();
    // One of its own flags that takes an integer, given a word; one that takes a value, given none;
    // one that takes text.
    std::string bad_int, no_value, text_flag;
    for (const FlagSpec& f : specs) {
      if (bad_int.empty() && f.grammar == Grammar::kInt) bad_int = "--" + f.name + "=abc";
      if (no_value.empty() && f.grammar != Grammar::kBool) no_value = "--" + f.name;
      if (text_flag.empty() && f.grammar == Grammar::kString) text_flag = "--" + f.name;
    }
    ASSERT_FALSE(bad_int.empty()) << name;
    ASSERT_FALSE(no_value.empty()) << name;
    const std::string help_head = "ringpipe " + name + ": " + sub.summary + "\n\nflags:\n";
    const std::vector<std::string> cases = {"--bogus --help", "--help --bogus", bad_int + " --help", bad_int + " -h",
                                            "-h " + bad_int, "stray --help", "--bogus=1 " + bad_int + " -help",
                                            no_value + " --helpfull", no_value + " -h", "--help --help"};
    for (const std::string& args : cases) {
      const std::string cmd = name + " " + args;
      const rp::apps::testing::BinaryResult r = rp::apps::testing::RunBinary(cmd, dir);
      EXPECT_EQ(r.exit_code, kExitOk) << cmd << "\n" << r.err;
      EXPECT_EQ(r.out.rfind(help_head, 0), 0u) << cmd << "\n" << r.out.substr(0, 200);
      EXPECT_EQ(r.out, rp::apps::testing::RunBinary(name + " --help", dir).out) << cmd;
      EXPECT_EQ(r.err, "") << cmd;
    }
    // A help word as a flag's value after '=' is the value, not help.
    if (!text_flag.empty()) {
      auto parsed = ParseSubcommandArgs(name, {text_flag + "=-h"});
      ASSERT_TRUE(parsed.ok()) << name << ": " << parsed.status();
      EXPECT_FALSE(parsed->help) << name;
    }
  }
  // Before any subcommand: the list of subcommands. An unknown subcommand stays an error.
  for (const std::string args : {"--bogus --help", "--help --bogus", "--dp=abc -h", "--help --help", "help --help"}) {
    const rp::apps::testing::BinaryResult r = rp::apps::testing::RunBinary(args, dir);
    EXPECT_EQ(r.exit_code, kExitOk) << args << "\n" << r.err;
    EXPECT_EQ(r.out.rfind("ringpipe: emulates", 0), 0u) << args << "\n" << r.out.substr(0, 200);
    EXPECT_EQ(r.err, "") << args;
  }
  rp::apps::testing::ExpectBadInput(rp::apps::testing::RunBinary("bogus --help", dir), "unknown subcommand 'bogus'",
                                    "bogus --help");
  fs::remove_all(dir);
}

TEST(ParseFlags, AHelpArgumentAnywhereWinsAndReadsNothingElse) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--no_such_flag", "--help"},
           {"--cli_test_int=seven", "-h"},
           {"-help", "stray"},
           {"--cli_test_int=1", "--cli_test_int=2", "--helpfull"},
           {"--cli_test_string", "-h"}}) {
    auto a = ParseFlags("x", args, kSpecs);
    ASSERT_TRUE(a.ok()) << args[0] << ": " << a.status();
    EXPECT_TRUE(a->help) << args[0];
    EXPECT_TRUE(a->occurrences.empty()) << args[0];
  }
  auto a = ParseFlags("x", {"--cli_test_string=--help"}, kSpecs);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE(a->help);
  EXPECT_EQ(a->Text("cli_test_string"), "--help");
}

}  // namespace
}  // namespace rp::apps
