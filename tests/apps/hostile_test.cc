// A hostile or careless user of every subcommand's inputs and outputs (the hunt of branch
// hunt-harden): each test is a defect found that way, held to the contract of README/docs — bad input
// prints one line naming the field and exits 2 before any work, without writing or damaging a file;
// what is written is well-formed.
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "apps/cli.h"
#include "apps/flags.h"
#include "apps/report_reader.h"
#include "apps/svg.h"
#include "apps/sweep.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/apps/binary_runner.h"
#include "tests/apps/xml_check.h"

namespace rp::apps {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Result = rp::apps::testing::BinaryResult;
using rp::apps::testing::RunBinary;

fs::path TempDir(const std::string& name) { return rp::apps::testing::TempDir("ringpipe_hostile", name); }

using rp::apps::testing::ReadFile;

using rp::apps::testing::ExpectBadInput;

// Valid UTF-8 (OneLine escapes any other byte; line breaks and tabs aside, which it escapes too).
bool IsUtf8(std::string s) {
  std::replace_if(s.begin(), s.end(), [](char c) { return c == '\n' || c == '\r' || c == '\t'; }, ' ');
  return OneLine(s) == s;
}

// `sweep --axis=dp=A..B` with a range wider than int64 (B - A overflowed: the range passed the
// length check and the sweep tried to list 10^19 values, never returning) is refused at once.
TEST(HostileInput, SweepRangesWiderThanInt64AreRefusedAtOnce) {
  const auto t0 = std::chrono::steady_clock::now();
  for (const std::string spec : {"dp=-9223372036854775808..9223372036854775807",
                                 "dp=-5000000000000000000..5000000000000000000", "dp=-1..9223372036854775807"}) {
    absl::StatusOr<sweep::Axis> axis = sweep::ParseAxis(spec);
    ASSERT_FALSE(axis.ok()) << spec;
    EXPECT_EQ(axis.status().code(), absl::StatusCode::kInvalidArgument) << spec;
    EXPECT_NE(axis.status().message().find("is too long"), absl::string_view::npos) << axis.status().message();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  // The longest range allowed still reads.
  absl::StatusOr<sweep::Axis> ok = sweep::ParseAxis("seed=0..4095");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->values.size(), sweep::kMaxPoints);
  EXPECT_FALSE(sweep::ParseAxis("seed=0..4096").ok());
}

// A linked axis that names a field twice (`--axis=dp:dp=1:2`) set dp twice per point, the last value
// winning silently under a label that showed both; it is bad input naming the field.
TEST(HostileInput, ALinkedAxisNamesEachFieldOnce) {
  absl::StatusOr<sweep::Axis> axis = sweep::ParseAxis("dp:dp=1:2,2:4");
  ASSERT_FALSE(axis.ok());
  EXPECT_EQ(axis.status().message(), "--axis=dp:dp: field 'dp' is named twice");
  EXPECT_TRUE(sweep::ParseAxis("pp:dp=1:2,2:4").ok());
  const fs::path dir = TempDir("linked");
  ExpectBadInput(RunBinary("sweep --predict_only --axis=pp:forward_ms:pp=1:2:1 --out_dir=" + (dir / "o").string(), dir),
                 "--axis=pp:forward_ms:pp: field 'pp' is named twice", "linked axis");
  EXPECT_FALSE(fs::exists(dir / "o"));
  fs::remove_all(dir);
}

// An --out_dir that cannot be created — a dangling symbolic link, or a name longer than the file
// system's 255 bytes, itself or on the way to it — was found out only when the outputs were
// committed, after every point had run (exit 1). It is bad input, checked before the work.
TEST(HostileInput, AnOutDirThatCannotBeCreatedIsBadInputBeforeTheWork) {
  const fs::path dir = TempDir("out_dir");
  fs::create_symlink(dir / "nowhere" / "x", dir / "dangling");
  const std::string sweep = "sweep --predict_only --steps=1 --axis=dp=1,2 --out_dir=";
  ExpectBadInput(RunBinary(sweep + (dir / "dangling").string(), dir), "dangling' is a symbolic link to nothing",
                 "dangling out_dir");
  ExpectBadInput(RunBinary(sweep + (dir / "dangling" / "sub").string(), dir),
                 "dangling' is a symbolic link to nothing", "under a dangling link");
  const std::string long_name(256, 'd');
  ExpectBadInput(RunBinary(sweep + (dir / long_name).string(), dir), "name longer than 255 bytes", "long out_dir");
  ExpectBadInput(RunBinary(sweep + (dir / long_name / "sub").string(), dir), "name longer than 255 bytes",
                 "long ancestor");
  // A directory made on the way (a, a/b) works, and so does a link to a directory.
  ASSERT_EQ(RunBinary(sweep + (dir / "a" / "b").string(), dir).exit_code, 0);
  EXPECT_TRUE(fs::is_regular_file(dir / "a" / "b" / "sweep.csv"));
  fs::create_directory_symlink(dir / "a", dir / "to_a");
  ASSERT_EQ(RunBinary(sweep + (dir / "to_a" / "c").string(), dir).exit_code, 0);
  EXPECT_TRUE(fs::is_regular_file(dir / "a" / "c" / "sweep.csv"));
  EXPECT_TRUE(fs::is_symlink(dir / "dangling"));
  EXPECT_FALSE(fs::exists(dir / "nowhere"));
  fs::remove_all(dir);
}

// A saved report's strings are cut to 120 bytes for the chart; the cut fell inside a UTF-8 sequence,
// so the SVG of `timeline --from_report` held a broken sequence (not well-formed XML), and a long
// wrong "schema" was quoted in the error line as bytes that are not UTF-8.
TEST(HostileInput, StringsReadFromAReportAreCutOnCharacterBoundaries) {
  std::string accents = "a";
  for (int i = 0; i < 100; ++i) accents += "\xc3\xa9";  // é: the 120-byte cut falls inside one
  const json report = {
      {"schema", kReportSchemaRead},
      {"layout", {{"world", 1}, {"pp", 1}, {"tp", 1}, {"description", accents}}},
      {"schedule", {{"name", accents}, {"microbatches", 1}}},
      {"timeline",
       {{"predicted",
         {{"step_ms", 1.0},
          {"devices", json::array({{{"rank", 0}, {"ops", json::array({{{"start_ms", 0.0}, {"end_ms", 1.0}}})}}})}}}}}};
  absl::StatusOr<TimelineReport> t = ReadTimelineReport(report.dump());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(IsUtf8(t->title)) << t->title;
  EXPECT_NE(t->title.find("a\xc3\xa9"), std::string::npos);
  const std::string svg_text = svg::RenderGantt(t->title, t->panels);
  EXPECT_TRUE(IsUtf8(svg_text));
  EXPECT_TRUE(rp::apps::testing::ParseXml(svg_text).ok) << rp::apps::testing::ParseXml(svg_text).error;

  json wrong = report;
  wrong["schema"] = accents;
  absl::StatusOr<TimelineReport> w = ReadTimelineReport(wrong.dump());
  ASSERT_FALSE(w.ok());
  EXPECT_TRUE(IsUtf8(std::string(w.status().message()))) << w.status().message();
  EXPECT_NE(w.status().message().find("a\xc3\xa9\xc3\xa9"), absl::string_view::npos) << w.status().message();
}

// `--forward_ms=0x10` read as 16 ms (absl::SimpleAtod takes hexadecimal floats), though `--help` says
// a number is decimal and `--dp=0x10` was refused: every number grammar is decimal.
TEST(HostileInput, NumbersAreDecimalOnly) {
  for (const std::string text : {"0x10", "0X1p3", "-0x1", "0x1.8p1", "1e", ".", "+-1", "1e+"}) {
    EXPECT_FALSE(ParseNumber("--x", text).ok()) << text;
    EXPECT_FALSE(ParseNumberList("--x", "1," + text).ok()) << text;
    EXPECT_FALSE(CheckGrammar("--x", Grammar::kNumberOrAuto, text).ok()) << text;
  }
  for (const auto& [text, value] : std::vector<std::pair<std::string, double>>{
           {"16", 16}, {"+2", 2}, {"-0", 0}, {" 2.5 ", 2.5}, {"1e-3", 1e-3}, {"1E3", 1000}, {".5", 0.5}, {"5.", 5}}) {
    absl::StatusOr<double> v = ParseNumber("--x", text);
    ASSERT_TRUE(v.ok()) << text << ": " << v.status();
    EXPECT_EQ(*v, value) << text;
  }
  const fs::path dir = TempDir("hex");
  ExpectBadInput(RunBinary("predict --forward_ms=0x10", dir), "--forward_ms: '0x10' is not a number", "hex list");
  ExpectBadInput(RunBinary("predict --bucket_mb=0x1p3", dir), "--bucket_mb: expected a finite number, got '0x1p3'",
                 "hex number");
  ExpectBadInput(RunBinary("run --virtual_time --steps=1 --straggler=1:0x2", dir),
                 "--straggler: '1:0x2': expected RANK:FACTOR", "hex straggler factor");
  ExpectBadInput(RunBinary("run --virtual_time --steps=1 --jitter=0x0.1", dir), "--jitter: '0x0.1'", "hex jitter");
  ExpectBadInput(RunBinary("run --virtual_time --steps=1 --fault=slow_link:src=0,dst=2,factor=0x10", dir),
                 "needs factor=F (a number >= 1)", "hex slow-link factor");
  const fs::path cfg = dir / "c.json";
  std::ofstream(cfg) << R"({"bucket_mb": "0x8"})";
  ExpectBadInput(RunBinary("predict --config=" + cfg.string(), dir), "bucket_mb", "hex in a config string");
  fs::remove_all(dir);
}

// A number too small for a double is refused as given: SimpleAtod reads 1e-400 as 0, and
// --bucket_mb=1e-400 was told "must be in (0, 1048576] MiB, got 0" (found by the hardening hunt).
// Zero written any way, and the smallest subnormal, still read as themselves.
TEST(HostileInput, NumbersThatUnderflowAreRefusedNotReadAsZero) {
  for (const std::string text : {"1e-400", "-2.5e-999", "0.0000001e-330"}) {
    EXPECT_FALSE(ParseNumber("--x", text).ok()) << text;
    EXPECT_FALSE(ParseNumberList("--x", "1," + text).ok()) << text;
  }
  for (const std::string text : {"0", "-0", "0.000", "0e-400", "00.0E5"}) {
    absl::StatusOr<double> v = ParseNumber("--x", text);
    ASSERT_TRUE(v.ok()) << text << ": " << v.status();
    EXPECT_EQ(*v, 0) << text;
  }
  EXPECT_GT(ParseNumber("--x", "5e-324").value(), 0);
  const fs::path dir = TempDir("underflow");
  ExpectBadInput(RunBinary("predict --bucket_mb=1e-400", dir), "--bucket_mb: expected a finite number, got '1e-400'",
                 "underflow");
  fs::remove_all(dir);
}

// `timeline --from_report` with config flags named one of them at random (the order of a hash set,
// seeded per process); it names the first given.
TEST(HostileInput, TimelineFromReportNamesTheFirstFlagItCannotTake) {
  const fs::path dir = TempDir("from_report");
  const fs::path report = dir / "r.json";
  ASSERT_EQ(RunBinary("predict --steps=1 --report_json=" + report.string(), dir).exit_code, 0);
  for (int i = 0; i < 8; ++i) {
    ExpectBadInput(RunBinary("timeline --from_report=" + report.string() + " --out=" + (dir / "t.svg").string() +
                                 " --seed=4 --dp=2 --pp=2 --steps=3 --tp=1 --microbatches=2",
                             dir),
                   "--seed: cannot be combined with --from_report", "run " + std::to_string(i));
  }
  EXPECT_FALSE(fs::exists(dir / "t.svg"));
  fs::remove_all(dir);
}

// XML 1.0 has no U+FFFE or U+FFFF (valid UTF-8 all the same, so `--title` takes them): the charts
// wrote them as they were, and the SVG was not well-formed.
TEST(HostileInput, TitlesWithNoncharactersStillMakeWellFormedSvg) {
  const std::string title = "a\xef\xbf\xbe" "b\xef\xbf\xbf" "c";
  const std::string escaped = svg::Escape(title);
  EXPECT_EQ(escaped, "a\xef\xbf\xbd" "b\xef\xbf\xbd" "c");
  const fs::path dir = TempDir("nonchar");
  const fs::path report = dir / "r.json", out = dir / "t.svg";
  ASSERT_EQ(RunBinary("predict --steps=1 --report_json=" + report.string(), dir).exit_code, 0);
  const Result r = RunBinary("timeline --from_report=" + report.string() + " --out=" + out.string() +
                                 " --title=$(printf 'x\\357\\277\\277y')",
                             dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string svg_text = ReadFile(out);
  EXPECT_EQ(svg_text.find("\xef\xbf\xbf"), std::string::npos);
  EXPECT_NE(svg_text.find("x\xef\xbf\xbdy"), std::string::npos);
  fs::remove_all(dir);
}

// `timeline` on auto's real clock ran its calibration trials with ops longer than the watchdog: the
// first trial failed as a stall and the command exited 1 with a watchdog message, where `run` with
// the same flags refuses the layout as bad input naming --watchdog_timeout (1d4e929 fixed `run` only).
TEST(HostileInput, TimelineOpsThatOutlastTheWatchdogAreBadInputAsInRun) {
  const fs::path dir = TempDir("timeline_watchdog");
  const std::string flags = " --steps=1 --forward_ms=60 --backward_ms=120 --watchdog_timeout=0.1";
  const std::string why = "--watchdog_timeout: at time scale 1 the longest op (120 ms modeled) takes 0.12 s";
  ExpectBadInput(RunBinary("run" + flags + " --report_json=" + (dir / "r.json").string(), dir), why, "run");
  ExpectBadInput(RunBinary("timeline" + flags + " --out=" + (dir / "t.svg").string() + " --report_json=" +
                               (dir / "r.json").string(),
                           dir),
                 why, "timeline");
  EXPECT_FALSE(fs::exists(dir / "t.svg"));
  EXPECT_FALSE(fs::exists(dir / "r.json"));
  fs::remove_all(dir);
}

// An input given as `-` (standard input) redirected from a file was not compared with the outputs:
// `timeline --from_report=- --out=r.json < r.json` replaced the report with its SVG, and
// `predict --config=- --report_json=c.json < c.json` the config with the report (exit 0), where the
// same paths given by name are refused.
TEST(HostileInput, AnOutputIsNotTheFileStandardInputReads) {
  const fs::path dir = TempDir("stdin");
  const fs::path report = dir / "r.json", cfg = dir / "c.json";
  ASSERT_EQ(RunBinary("predict --steps=1 --report_json=" + report.string(), dir).exit_code, 0);
  const std::string saved = ReadFile(report);
  ExpectBadInput(RunBinary("timeline --from_report=- --out=" + report.string() + " < " + report.string(), dir),
                 "--out: '" + report.string() + "': is also the input --from_report (read from standard input)",
                 "timeline");
  EXPECT_EQ(ReadFile(report), saved);
  std::ofstream(cfg) << R"({"steps": 1})";
  ExpectBadInput(RunBinary("predict --config=- --report_json=" + cfg.string() + " < " + cfg.string(), dir),
                 "is also the input --config (read from standard input)", "predict");
  EXPECT_EQ(ReadFile(cfg), R"({"steps": 1})");
  fs::create_directories(dir / "sw");
  std::ofstream(dir / "sw" / "sweep.json") << R"({"steps": 1})";
  ExpectBadInput(RunBinary("sweep --predict_only --config=- --axis=dp=1,2 --out_dir=" + (dir / "sw").string() + " < " +
                               (dir / "sw" / "sweep.json").string(),
                           dir),
                 "sweep.json': is also the input --config (read from standard input)", "sweep");
  EXPECT_EQ(ReadFile(dir / "sw" / "sweep.json"), R"({"steps": 1})");
  // Standard input from another file is fine.
  EXPECT_EQ(RunBinary("timeline --from_report=- --out=" + (dir / "t.svg").string() + " < " + report.string(), dir)
                .exit_code,
            0);
  EXPECT_EQ(RunBinary("predict --config=- --report_json=" + (dir / "p.json").string() + " < " + cfg.string(), dir)
                .exit_code,
            0);
  fs::remove_all(dir);
}

// A path whose names all fit 255 bytes but that is, with its temporary file's name, longer than
// PATH_MAX passed the checks; the work ran and the commit failed with ENAMETOOLONG (exit 1): a 3900-byte
// directory and a 180-byte name (the temporary file's path is 17 bytes longer), or a 250-byte name in
// a 3852-byte directory (the target itself is over). Refused before the work, naming the lengths.
TEST(HostileInput, PathsLongerThanPathMaxAreBadInputBeforeTheWork) {
  const fs::path dir = TempDir("long_paths");
  fs::path deep = dir;
  while (deep.string().size() + 256 < 3852) deep /= std::string(255, 'd');
  deep /= std::string(3852 - deep.string().size() - 1, 'e');
  ASSERT_EQ(deep.string().size(), 3852u);
  fs::create_directories(deep);
  const fs::path deeper = deep / std::string(47, 'f');
  fs::create_directories(deeper);
  ExpectBadInput(RunBinary("predict --steps=1 --report_json=" + (deeper / std::string(180, 'r')).string(), dir),
                 "path too long: 4081 bytes, 4102 for its temporary files beside it; at most 4095", "temporary file");
  ExpectBadInput(RunBinary("run --steps=1 --report_json=" + (deep / std::string(250, 'r')).string(), dir),
                 "path too long: 4103 bytes", "target");
  ExpectBadInput(RunBinary("sweep --predict_only --steps=1 --axis=dp=1,2 --out_dir=" +
                               (deeper / std::string(180, 'o')).string(),
                           dir),
                 "path too long", "a directory output's files");
  EXPECT_TRUE(fs::is_empty(deeper));
  // The longest that fit are written.
  const fs::path fits = deep / std::string(200, 'r');  // 4053 bytes, its temporary files 4074
  ASSERT_EQ(RunBinary("predict --steps=1 --report_json=" + fits.string(), dir).exit_code, 0);
  EXPECT_TRUE(json::parse(ReadFile(fits)).is_object());
  fs::remove_all(dir);
}

// The fault flags' ranges the executor checks were reported in its words, naming no flag: "executor:
// faults: straggler: rank 99 out of range [0, 8)", "executor: faults: jitter.max_fraction must be in
// [0, 10], got 11", "executor: faults: op fault throw rank 0: op 99999 out of range ...". Each names
// its flag now, exit 2, nothing written.
TEST(HostileInput, FaultFlagRangesNameTheirFlag) {
  const fs::path dir = TempDir("fault_ranges");
  const std::string run = "run --virtual_time --steps=1 --report_json=" + (dir / "r.json").string() + " ";
  ExpectBadInput(RunBinary(run + "--straggler=99:2", dir),
                 "--straggler: '99:2': rank 99 is not a rank of the 8 devices", "straggler rank");
  ExpectBadInput(RunBinary(run + "--straggler=-1:2", dir), "--straggler: '-1:2': rank -1", "negative rank");
  ExpectBadInput(RunBinary(run + "--straggler=0:0.5", dir), "--straggler: '0:0.5': FACTOR must be a number >= 1",
                 "straggler factor");
  ExpectBadInput(RunBinary(run + "--straggler=0:nan", dir), "--straggler: '0:nan': FACTOR", "nan factor");
  ExpectBadInput(RunBinary(run + "--jitter=11", dir), "--jitter: '11': FRACTION must be in [0, 10]", "jitter");
  ExpectBadInput(RunBinary(run + "--jitter=-0.5:3", dir), "--jitter: '-0.5:3': FRACTION", "negative jitter");
  ExpectBadInput(RunBinary(run + "--fault=throw:rank=0,step=0,op=99999", dir),
                 "--fault: op fault throw rank 0: op 99999 out of range", "op index");
  EXPECT_FALSE(fs::exists(dir / "r.json"));
  // In range, they run.
  EXPECT_EQ(RunBinary(run + "--straggler=7:1 --jitter=0:1", dir).exit_code, 0);
  fs::remove_all(dir);
}

// One axis of many ranges (`--axis=seed=0..4095,0..4095,...`, 3000 of them within the kernel's
// 128 KiB argument) was listed in full — 12 million values, 1.25 GB and 4.7 s — before the sweep
// counted its points and refused it. ParseAxis stops at kMaxPoints values.
TEST(HostileInput, AnAxisOfManyRangesIsRefusedBeforeItIsListed) {
  std::string spec = "seed=0..4095";
  for (int i = 0; i < 3000; ++i) spec += ",0..4095";
  absl::StatusOr<sweep::Axis> axis = sweep::ParseAxis(spec);
  ASSERT_FALSE(axis.ok());
  EXPECT_EQ(axis.status().message(), "--axis=seed: more than 4096 values");
  EXPECT_EQ(sweep::ParseAxis("seed=0..4095,7").status().message(), "--axis=seed: more than 4096 values");
  std::string many = "seed=0";
  for (int i = 1; i <= 4096; ++i) many += "," + std::to_string(i);
  EXPECT_EQ(sweep::ParseAxis(many).status().message(), "--axis=seed: more than 4096 values");
  absl::StatusOr<sweep::Axis> full = sweep::ParseAxis("seed=0..4094,7");
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->values.size(), sweep::kMaxPoints);
}

// An input larger than its limit was read up to the limit before it was refused: a 2 GiB sparse
// `--from_report` took 8 s and 1.1 GB of memory to say "larger than 1073741824 bytes". A regular
// file's size is checked first: under a 600 MB address-space limit the refusal still comes (the read
// ran out of memory and aborted before the fix).
TEST(HostileInput, AnInputKnownToBeTooLargeIsRefusedBeforeItIsRead) {
  const fs::path dir = TempDir("large_input");
  const fs::path big = dir / "big.json";
  { std::ofstream(big) << ""; }
  fs::resize_file(big, kMaxReportBytes + 1);  // sparse: no disk space
  const fs::path err = dir / "err.txt";
  const std::string cmd = "ulimit -v 600000; " + std::string(RINGPIPE_BIN) + " timeline --from_report=" +
                          big.string() + " --out=" + (dir / "t.svg").string() + " 2>" + err.string();
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), kExitBadInput) << ReadFile(err);
  EXPECT_NE(ReadFile(err).find("--from_report: '" + big.string() + "': larger than 1073741824 bytes"),
            std::string::npos)
      << ReadFile(err);
  // The same from standard input redirected from the file.
  const int in_status = std::system(("ulimit -v 600000; " + std::string(RINGPIPE_BIN) +
                                     " timeline --from_report=- --out=" + (dir / "t.svg").string() + " < " +
                                     big.string() + " 2>" + err.string())
                                        .c_str());
  ASSERT_TRUE(WIFEXITED(in_status)) << in_status;
  EXPECT_EQ(WEXITSTATUS(in_status), kExitBadInput) << ReadFile(err);
  EXPECT_NE(ReadFile(err).find("--from_report: '-': larger than 1073741824 bytes"), std::string::npos)
      << ReadFile(err);
  EXPECT_FALSE(fs::exists(dir / "t.svg"));
  fs::remove_all(dir);
}

// A report's sections are parsed as they are read and at most kMaxParsedBytes of them kept: a report
// of 2^25 numbers in its timeline (64 MiB of text) was held whole and parsed into over 600 MB before
// the reader's cap on the count of values (2^25) could refuse it — under a 600 MB address-space limit
// it died of std::bad_alloc (no exit code, no line). Now one line, exit 2, nothing written, from a
// file and from standard input.
TEST(HostileInput, AReportTooLargeToKeepIsRefusedInBoundedMemory) {
  const fs::path dir = TempDir("parsed_bytes");
  const fs::path big = dir / "big.json";
  {
    std::ofstream f(big, std::ios::binary);
    // In a key the reader keeps (an op list's ops are bars as they are parsed, tests/apps/timeline_test.cc).
    f << R"({"schema":"ringpipe-report/2","timeline":{"predicted":{"devices":[{"notes":[)";
    std::string block;
    for (size_t i = 0; i < (size_t{1} << 19); ++i) block += "0,";
    for (int i = 0; i < 64; ++i) f << block;  // 2^25 zeros
    f << "0]}]}}}";
  }
  const fs::path svg = dir / "t.svg";
  const std::string expected = "holds more than the 256 MiB this reader keeps";
  for (const std::string& input : {"--from_report=" + big.string(), "--from_report=- < " + big.string()}) {
    const Result r = rp::apps::testing::RunBinaryInShell("ulimit -v 600000", "timeline " + input + " --out=" +
                                                                                  svg.string(), dir);
    ExpectBadInput(r, expected, input);
    EXPECT_FALSE(fs::exists(svg)) << input;
  }
  // The same cap in-process, and a report's emulated rows (not drawn) are not kept: a report whose
  // emulated section alone is that large still draws.
  json ops = json::array();
  for (int i = 0; i < 4; ++i) ops.push_back({{"kind", "compute"}, {"op", "F"}, {"start_ms", i}, {"end_ms", i + 1}});
  json report = {{"schema", kReportSchemaRead},
                 {"timeline", {{"predicted", {{"step_ms", 4}, {"devices", {{{"rank", 0}, {"ops", ops}}}}}}}}};
  std::string text = report.dump();
  ASSERT_TRUE(ReadTimelineReport(text).ok());
  std::string filler;
  filler.reserve(kMaxParsedBytes / 8);
  for (size_t i = 0; i < kMaxParsedBytes / 32 + 1; ++i) filler += "0,";
  text.insert(text.find("\"timeline\":{") + 12, R"("emulated":[)" + filler + "0],");
  absl::StatusOr<TimelineReport> t = ReadTimelineReport(text);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->panels.size(), 1u);
  text.replace(text.find("\"emulated\""), 10, "\"measures\"");  // kept, as every other timeline key
  EXPECT_NE(std::string(ReadTimelineReport(text).status().message()).find(expected), std::string::npos);
  fs::remove_all(dir);
}

// A step of more ops than a chart draws (kMaxBars) was drawn cut short, without a word:
// `timeline --predict_only --pp=2 --tp=1 --dp=1 --microbatches=1048576` wrote 4194304 of its 5242883
// ops (rank 1's last million left out) and said "wrote x.svg". Now refused, naming where the cap
// fell; in-process with a cap of 3 ops.
TEST(HostileInput, AStepOfMoreOpsThanAChartDrawsIsRefusedNotCut) {
  json ops = json::array();
  for (int i = 0; i < 2; ++i) ops.push_back({{"kind", "compute"}, {"op", "F"}, {"start_ms", i}, {"end_ms", i + 1}});
  const json report = {{"schema", kReportSchemaRead},
                       {"timeline",
                        {{"predicted", {{"step_ms", 2}, {"devices", {{{"rank", 0}, {"ops", ops}}, {{"rank", 1}, {"ops", ops}}}}}}}}};
  absl::StatusOr<TimelineReport> all = ReadTimelineReport(report, /*max_bars=*/4);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->panels.front().bars.size(), 4u);
  absl::StatusOr<TimelineReport> cut = ReadTimelineReport(report, /*max_bars=*/3);
  ASSERT_FALSE(cut.ok()) << cut->panels.front().bars.size() << " bars drawn";
  EXPECT_EQ(cut.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(cut.status().message(),
            "timeline.predicted.devices[1].ops: more than 3 ops to draw over the panels, the most a chart draws");
}

// A byte count times its suffix is checked before the product is taken: 17179869185G is 2^64 + 1 GiB,
// which wrapped around to 1 GiB and was taken as that by predict and allreduce (found by the config
// hunt). The largest count, 1024G, is still accepted.
TEST(HostileInput, ByteCountsPastTheirBoundAreRefusedNotWrapped) {
  EXPECT_EQ(ParseBytes("segment_bytes", "1024G").value(), uint64_t{1} << 40);
  EXPECT_EQ(ParseBytes("segment_bytes", "1073741824K").value(), uint64_t{1} << 40);
  for (const char* text : {"17179869185G", "1025G", "1073741825K", "1099511627777"}) {
    auto v = ParseBytes("segment_bytes", text);
    ASSERT_FALSE(v.ok()) << text << " = " << v.value();
    EXPECT_NE(std::string(v.status().message()).find("more than 2^40 bytes"), std::string::npos) << v.status();
  }
  const fs::path dir = TempDir("bytes");
  for (const std::string cmd : {"predict --segment_bytes=17179869185G", "allreduce --segment_bytes=17179869185G",
                                "predict --ep_row_bytes=17179869185G"}) {
    ExpectBadInput(RunBinary(cmd, dir), "'17179869185G' is more than 2^40 bytes", cmd);
  }
  fs::remove_all(dir);
}

// A deep pipeline's prediction held a channel for every ordered pair of ranks in its validation
// (2 p² deques): `predict --pp=1024` took 1.4 GB and 1.5 s, --pp=4096 ran out of memory. The
// channels a pipeline uses are O(p); under a 600 MB address-space limit --pp=4096 now predicts.
TEST(HostileInput, ADeepPipelinesPredictionNeedsNoMemoryPerPairOfRanks) {
  const fs::path dir = TempDir("deep_pipeline");
  const fs::path out = dir / "out.txt";
  const int status = std::system(("ulimit -v 600000; " + std::string(RINGPIPE_BIN) +
                                  " predict --pp=4096 --hidden=64x4096 --tp=1 --dp=1 > " + out.string() +
                                  " 2>&1")
                                     .c_str());
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << ReadFile(out);
  EXPECT_NE(ReadFile(out).find("4096 devices"), std::string::npos) << ReadFile(out);
  fs::remove_all(dir);
}

// Too many modeled messages a step name the field that makes them many. `predict --microbatches=1000000`
// named --tp "(value from preset 'default')": the TP rings dominate, but they grow with the
// micro-batches, and one micro-batch needs 20 messages.
TEST(HostileInput, TooManyMessagesNameTheFieldThatMakesThemMany) {
  const fs::path dir = TempDir("message_blame");
  ExpectBadInput(RunBinary("predict --microbatches=1000000", dir),
                 "ringpipe predict: --microbatches: about 20000004 modeled messages per device per step", "m");
  ExpectBadInput(RunBinary("predict --dp=1048576 --pp=1 --tp=1", dir), "ringpipe predict: --dp: about", "dp");
  ExpectBadInput(RunBinary("predict --segment_bytes=4 --hidden=4096x8", dir), "ringpipe predict: --segment_bytes: about",
                 "segments");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rp::apps
