// An exploratory test's findings on the CLI (outputs, config files, reports read back, fault and sweep
// flags, messages), one regression test each, through the binary. hardening_test.cc has issue 12's.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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

// A report's `config` section said `"config": ""`, which the loader refused ("a config file cannot name
// another config file"): it is null now, and a file's null or "" names no file.
TEST(HardeningExplore, AReportsConfigSectionLoadsBackAsAConfigFileUnchanged) {
  const fs::path dir = TempDir("roundtrip");
  const fs::path cfg = dir / "c.json", report = dir / "r.json", back = dir / "back.json";
  WriteFile(cfg, R"({"preset": "s1", "microbatches": 4})");
  Result r = RunBinary("predict --config=" + cfg.string() + " --report_json=" + report.string(), dir);
  ASSERT_EQ(r.exit_code, kExitOk) << r.err;
  const json first = json::parse(ReadFile(report))["config"];
  EXPECT_TRUE(first["config"].is_null()) << first["config"];
  EXPECT_EQ(first["microbatches"], 4);
  WriteFile(back, first.dump(1));
  // The run is reproduced, its report_json included: the report is replaced by the same config.
  r = RunBinary("predict --config=" + back.string(), dir);
  ASSERT_EQ(r.exit_code, kExitOk) << r.err;
  EXPECT_EQ(json::parse(ReadFile(report))["config"], first);

  const fs::path run_report = dir / "run.json";
  r = RunBinary(std::string("run ") + kSmallRun + " --report_json=" + run_report.string(), dir);
  ASSERT_EQ(r.exit_code, kExitOk) << r.err;
  WriteFile(back, json::parse(ReadFile(run_report))["config"].dump());
  r = RunBinary("run --config=" + back.string(), dir);
  EXPECT_EQ(r.exit_code, kExitOk) << r.err;

  const fs::path sweep_dir = dir / "sw";
  ASSERT_EQ(RunBinary("sweep --predict_only --axis=dp=1,2 --out_dir=" + sweep_dir.string(), dir).exit_code, kExitOk);
  WriteFile(back, json::parse(ReadFile(sweep_dir / "sweep.json"))["points"][1]["config"].dump());
  r = RunBinary("predict --config=" + back.string(), dir);
  EXPECT_EQ(r.exit_code, kExitOk) << r.err;

  for (const char* none : {R"({"config": null, "dp": 1})", R"({"config": "", "dp": 1})"}) {
    WriteFile(back, none);
    r = RunBinary("predict --config=" + back.string(), dir);
    EXPECT_EQ(r.exit_code, kExitOk) << none << "\n" << r.err;
  }
  WriteFile(back, "{\n\"config\": \"c.json\"}");
  ExpectBadInput(RunBinary("predict --config=" + back.string(), dir),
                 "back.json:2: config: a config file cannot name another config file", "names a file");
  WriteFile(back, "{\n\"config\": null,\n\"config\": null}");
  ExpectBadInput(RunBinary("predict --config=" + back.string(), dir), "back.json:3: config: duplicate key", "twice");
  fs::remove_all(dir);
}

// nlohmann's lexer ends the input at a NUL byte: what followed it was silently ignored (or misread).
TEST(HardeningExplore, ANulByteInAConfigOrAReportIsRefusedNamingItsOffset) {
  const fs::path dir = TempDir("nul");
  const fs::path cfg = dir / "k.json", report = dir / "r.json", svg = dir / "r.svg";
  const std::string good = R"({"virtual_time":true,"steps":1})";
  WriteFile(cfg, good + std::string(1, '\0') + R"({{{{ garbage "dp": 99)");
  ExpectBadInput(RunBinary("predict --config=" + cfg.string() + " --report_json=" + report.string(), dir),
                 "k.json:1: malformed JSON: a NUL byte at byte offset 31", "config");
  EXPECT_FALSE(fs::exists(report));
  WriteFile(cfg, good + "\n" + std::string(1, '\0') + R"({"dp":99})");
  ExpectBadInput(RunBinary("sweep --predict_only --config=" + cfg.string() + " --axis=pp=1,2 --out_dir=" +
                               (dir / "sw").string(),
                           dir),
                 "k.json:2: malformed JSON: a NUL byte at byte offset 32", "sweep config");
  EXPECT_FALSE(fs::exists(dir / "sw"));

  Result r = RunBinary("timeline --predict_only --out=" + svg.string() + " --report_json=" + report.string(), dir);
  ASSERT_EQ(r.exit_code, kExitOk) << r.err;
  const std::string text = ReadFile(report);
  WriteFile(report, text + std::string(1, '\0') + "garbage");
  const fs::path svg2 = dir / "r2.svg";
  ExpectBadInput(RunBinary("timeline --from_report=" + report.string() + " --out=" + svg2.string(), dir),
                 "--from_report: '" + report.string() + "' is not JSON: a NUL byte at byte offset " +
                     std::to_string(text.size()),
                 "report");
  EXPECT_FALSE(fs::exists(svg2));
  fs::remove_all(dir);
}

// A rank --straggler names twice, or that is also the config's straggler, reached the executor, whose
// "executor: faults: straggler rank N named twice" named no flag.
TEST(HardeningExplore, StragglerConflictsNameTheFlags) {
  const fs::path dir = TempDir("straggler");
  const fs::path report = dir / "r.json";
  const std::string run = std::string("run ") + kSmallRun + " --report_json=" + report.string();
  ExpectBadInput(RunBinary(run + " --straggler=0:2,0:3", dir), "--straggler: '0:3': rank 0 named twice", "twice");
  ExpectBadInput(RunBinary(run + " --straggler=1:2 --straggler_rank=1 --straggler_factor=1.5", dir),
                 "--straggler: '1:2': rank 1 is also the config's straggler (straggler_rank 1, straggler_factor 1.5)",
                 "config's");
  ExpectBadInput(RunBinary(std::string("timeline ") + kSmallRun + " --out=" + (dir / "t.svg").string() +
                               " --straggler=0:2 --straggler_factor=2",
                           dir),
                 "--straggler: '0:2': rank 0 is also the config's straggler", "default rank");
  EXPECT_TRUE(fs::is_empty(dir));
  // Different ranks, or a config factor of 1 (no straggler), still run.
  Result r = RunBinary(run + " --straggler=0:2,1:3", dir);
  EXPECT_EQ(r.exit_code, kExitOk) << r.err;
  r = RunBinary(run + " --straggler=0:2 --straggler_rank=0 --straggler_factor=1", dir);
  EXPECT_EQ(r.exit_code, kExitOk) << r.err;
  fs::remove_all(dir);
}

// A flag on an axis's field was silently dropped (the axis wins at every point).
TEST(HardeningExplore, SweepRefusesAFlagOnAnAxissField) {
  const fs::path dir = TempDir("sweep");
  const std::string out = " --out_dir=" + (dir / "sw").string();
  ExpectBadInput(RunBinary("sweep --predict_only --axis=dp=2 --dp=4" + out, dir), "--dp: also the axis --axis=dp",
                 "dp");
  ExpectBadInput(RunBinary("sweep --predict_only --preset=s1 --axis=preset=s1,s2" + out, dir),
                 "--preset: also the axis --axis=preset", "preset");
  ExpectBadInput(RunBinary("sweep --predict_only --forward_ms=3 --axis=pp:forward_ms=1:2,2:1" + out, dir),
                 "--forward_ms: also the axis --axis=pp:forward_ms", "linked");
  EXPECT_FALSE(fs::exists(dir / "sw"));
  fs::remove_all(dir);
}

// An integer beyond 64 bits was reported against int's range, not the field's.
TEST(HardeningExplore, ConfigIntegersBeyondSixtyFourBitsReportTheFieldsRange) {
  const fs::path dir = TempDir("ints");
  const fs::path cfg = dir / "c.json";
  const struct {
    const char* text;
    const char* what;
  } kCases[] = {
      {R"({"dp": 9223372036854775808})", "c.json:1: dp: must be in 1..1048576, got 9223372036854775808"},
      {R"({"dp": 18446744073709551616})", "c.json:1: dp: must be in 1..1048576, got 1.8446744073709552e+19"},
      {R"({"dp": 1e300})", "c.json:1: dp: must be in 1..1048576, got 1e+300"},
      {R"({"dp": -9223372036854775809})", "c.json:1: dp: must be in 1..1048576, got -9.223372036854776e+18"},
      {R"({"nics_per_node": 1e300})", "c.json:1: nics_per_node: must be in 0..1048576, got 1e+300"},
      {R"({"seed": 1e300})", "c.json:1: seed: must be in 0..9223372036854775807, got 1e+300"},
      {R"({"seed": 9223372036854775808.0})", "c.json:1: seed: must be in 0..9223372036854775807"},
  };
  for (const auto& c : kCases) {
    WriteFile(cfg, c.text);
    ExpectBadInput(RunBinary("predict --config=" + cfg.string(), dir), c.what, c.text);
  }
  fs::remove_all(dir);
}

// The byte-count fields were left out of that fix: `{"segment_bytes": 1e300}` still said int64's range.
TEST(HardeningExplore, ConfigByteCountsBeyondSixtyFourBitsReportTheFieldsRange) {
  const fs::path dir = TempDir("bytes");
  const fs::path cfg = dir / "c.json", report = dir / "r.json";
  const std::string seg = "segment_bytes: must be 0 (one message per chunk) or a multiple of 4 in [4, 1G], got ";
  const std::string row = "ep_row_bytes: must be 0 (derived) or a multiple of 4 up to 1G, got ";
  const struct {
    const char* text;
    std::string what;
  } kCases[] = {
      {R"({"segment_bytes": 1e300})", "c.json:1: " + seg + "1e+300"},
      {R"({"segment_bytes": 9223372036854775808})", "c.json:1: " + seg + "9223372036854775808"},
      {R"({"segment_bytes": 18446744073709551616})", "c.json:1: " + seg + "1.8446744073709552e+19"},
      {R"({"segment_bytes": [1e300]})", "c.json:1: " + seg + "1e+300"},
      {R"({"segment_bytes": -1})", "c.json:1: " + seg + "-1"},
      {R"({"segment_bytes": 6})", "c.json:1: " + seg + "6"},  // validation's message, the same range
      {R"({"ep_row_bytes": 1e300})", "c.json:1: " + row + "1e+300"},
      {R"({"ep_row_bytes": 9223372036854775808})", "c.json:1: " + row + "9223372036854775808"},
      {R"({"ep_row_bytes": -9223372036854775809})", "c.json:1: " + row + "-9.223372036854776e+18"},
      {R"({"ep_row_bytes": 6})", "c.json:1: " + row + "6"},
  };
  for (const auto& c : kCases) {
    WriteFile(cfg, c.text);
    ExpectBadInput(RunBinary("predict --config=" + cfg.string() + " --report_json=" + report.string(), dir), c.what,
                   c.text);
    EXPECT_FALSE(fs::exists(report)) << c.text;
  }
  fs::remove_all(dir);
}

// The line after a failed run named a trace (or a report) that was not asked for.
TEST(HardeningExplore, AFailedRunNamesOnlyTheOutputsItWrote) {
  const fs::path dir = TempDir("failed");
  const fs::path report = dir / "r.json", trace = dir / "t.json", svg = dir / "t.svg";
  const std::string run = std::string("run ") + kSmallRun + " --fault=throw:rank=0,step=0,op=0";
  Result r = RunBinary(run + " --report_json=" + report.string(), dir);
  EXPECT_EQ(r.exit_code, kExitFault) << r.err;
  EXPECT_NE(r.err.find("the failed run's report was written"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("trace"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(report));
  EXPECT_FALSE(fs::exists(trace));
  r = RunBinary(run + " --trace=" + trace.string(), dir);
  EXPECT_EQ(r.exit_code, kExitFault) << r.err;
  EXPECT_NE(r.err.find("the failed run's trace was written"), std::string::npos) << r.err;
  r = RunBinary(std::string("timeline ") + kSmallRun + " --fault=throw:rank=0,step=0,op=0 --out=" + svg.string(), dir);
  EXPECT_EQ(r.exit_code, kExitFault) << r.err;
  EXPECT_NE(r.err.find("the failed run's chart was written"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(svg));
  fs::remove_all(dir);
}

// `run` printed "standard output: write error": its text is longer than stdio's buffer, written at once,
// and the final flush had nothing left to fail on and no reason to give.
TEST(HardeningExplore, AFailedWriteToStandardOutputGivesTheSystemsReason) {
  const fs::path dir = TempDir("stdout");
  const std::string sweep = "sweep --predict_only --axis=dp=1,2 --out_dir=" + (dir / "sw").string();
  for (const std::string& args : {std::string("run ") + kSmallRun, std::string("run --help"),
                                  std::string("predict --preset=s1"), sweep}) {
    const Result r = RunBinary(args + " > /dev/full", dir);
    EXPECT_EQ(r.exit_code, kExitFailed) << args << "\n" << r.err;
    EXPECT_NE(r.err.find("standard output: No space left on device"), std::string::npos) << args << "\n" << r.err;
  }
  fs::remove_all(dir);
}

// An unknown op kind in a report read back was drawn as an optimizer bar.
TEST(HardeningExplore, TimelineFromReportRefusesAnUnknownOpKind) {
  const fs::path dir = TempDir("kind");
  const fs::path report = dir / "r.json", svg = dir / "r.svg", bad = dir / "bad.json", svg2 = dir / "bad.svg";
  Result r = RunBinary("timeline --predict_only --out=" + svg.string() + " --report_json=" + report.string(), dir);
  ASSERT_EQ(r.exit_code, kExitOk) << r.err;
  json j = json::parse(ReadFile(report));
  ASSERT_TRUE(j["timeline"]["predicted"]["devices"][0]["ops"][1].is_object());
  j["timeline"]["predicted"]["devices"][0]["ops"][1]["kind"] = "bogus";
  WriteFile(bad, j.dump());
  ExpectBadInput(RunBinary("timeline --from_report=" + bad.string() + " --out=" + svg2.string(), dir),
                 "timeline.predicted.devices[0].ops[1].kind: expected compute, tp_allreduce, ep_alltoall, "
                 "grad_allreduce or wait, got \"bogus\"",
                 "kind");
  EXPECT_FALSE(fs::exists(svg2));
  fs::remove_all(dir);
}

// The report of kSmallRun written into `dir` (null, the test failed, if the run did not succeed).
json SmallRunReport(const fs::path& dir) {
  const fs::path report = dir / "r.json";
  const Result r = RunBinary(std::string("run ") + kSmallRun + " --report_json=" + report.string(), dir);
  EXPECT_EQ(r.exit_code, kExitOk) << r.err;
  return r.exit_code == kExitOk ? json::parse(ReadFile(report)) : json();
}

// `timeline --from_report` of `edited` (written into `dir`): refused with one line holding `what`,
// and no chart written.
void ExpectTimelineRefuses(const fs::path& dir, const json& edited, const std::string& what) {
  const fs::path bad = dir / "bad.json", svg = dir / "bad.svg";
  WriteFile(bad, edited.dump());
  ExpectBadInput(RunBinary("timeline --from_report=" + bad.string() + " --out=" + svg.string(), dir), what, what);
  EXPECT_FALSE(fs::exists(svg)) << what;
}

// `timeline.measured.clock: 5` (or `median: 5`) was accepted and drawn as the real clock's (the median).
TEST(HardeningExplore, TimelineFromReportRefusesAnIllTypedClockOrMedian) {
  const fs::path dir = TempDir("clock");
  const fs::path bad = dir / "bad.json", svg = dir / "bad.svg";
  const json good = SmallRunReport(dir);
  ASSERT_FALSE(good.is_null());
  ASSERT_EQ(good["timeline"]["measured"]["clock"], "virtual");
  const struct {
    const char* key;
    json value;
    const char* what;
  } kCases[] = {
      {"clock", 5, R"(timeline.measured.clock: expected "virtual" or "real", got 5)"},
      {"clock", "wall", R"(timeline.measured.clock: expected "virtual" or "real", got "wall")"},
      {"clock", json::array(), R"(timeline.measured.clock: expected "virtual" or "real", got [])"},
      {"median", 5, "timeline.measured.median: expected true or false, got 5"},
      {"median", "true", R"(timeline.measured.median: expected true or false, got "true")"},
  };
  for (const auto& c : kCases) {
    json j = good;
    j["timeline"]["measured"][c.key] = c.value;
    ExpectTimelineRefuses(dir, j, c.what);
  }
  // Absent, both are still read (the real clock's rows; the median step).
  json j = good;
  j["timeline"]["measured"].erase("clock");
  j["timeline"]["measured"].erase("median");
  WriteFile(bad, j.dump());
  const Result r = RunBinary("timeline --from_report=" + bad.string() + " --out=" + svg.string(), dir);
  EXPECT_EQ(r.exit_code, kExitOk) << r.err;
  EXPECT_NE(ReadFile(svg).find("wall clock on the device threads"), std::string::npos);
  fs::remove_all(dir);
}

// timeline.ranks (which devices the rows are, for the title) of the wrong type was ignored: now refused,
// naming the element; absent (an older report) it is still read.
TEST(HardeningExplore, TimelineFromReportRefusesIllTypedRanks) {
  const fs::path dir = TempDir("ranks");
  const fs::path bad = dir / "bad.json", svg = dir / "bad.svg";
  const json good = SmallRunReport(dir);
  ASSERT_FALSE(good.is_null());
  const int world = good["layout"]["world"].get<int>();
  const struct {
    json value;
    std::string what;
  } kCases[] = {
      {"abc", R"(timeline.ranks: expected a list of ranks, got "abc")"},
      {3, "timeline.ranks: expected a list of ranks, got 3"},
      {json::array({0, "x"}), absl::StrCat(R"(timeline.ranks[1]: expected a rank in 0..)", world - 1, R"(, got "x")")},
      {json::array({0.5}), absl::StrCat("timeline.ranks[0]: expected a rank in 0..", world - 1, ", got 0.5")},
      {json::array({0, -1}), absl::StrCat("timeline.ranks[1]: expected a rank in 0..", world - 1, ", got -1")},
      {json::array({world}), absl::StrCat("timeline.ranks[0]: expected a rank in 0..", world - 1, ", got ", world)},
  };
  for (const auto& c : kCases) {
    json j = good;
    j["timeline"]["ranks"] = c.value;
    ExpectTimelineRefuses(dir, j, c.what);
  }
  json j = good;
  j["timeline"].erase("ranks");
  WriteFile(bad, j.dump());
  const Result r = RunBinary("timeline --from_report=" + bad.string() + " --out=" + svg.string(), dir);
  EXPECT_EQ(r.exit_code, kExitOk) << r.err;
  EXPECT_TRUE(fs::exists(svg));
  fs::remove_all(dir);
}

// A key given twice in a report read back was accepted, the last one winning; a config file refuses it.
TEST(HardeningExplore, TimelineFromReportRefusesADuplicateKey) {
  const fs::path dir = TempDir("dup");
  const fs::path report = dir / "r.json", bad = dir / "bad.json", svg = dir / "bad.svg";
  Result r = RunBinary(std::string("run ") + kSmallRun + " --report_json=" + report.string(), dir);
  ASSERT_EQ(r.exit_code, kExitOk) << r.err;
  const std::string text = ReadFile(report);
  // Each case inserts a member before the first `at` after the sections `after` (found in turn),
  // repeating the key that follows it.
  const struct {
    std::vector<std::string> after;
    const char* at;
    const char* insert;
    const char* what;
  } kCases[] = {
      {{}, "\"schema\"", R"("schema": "ringpipe-report/2", )", "bad.json': schema: duplicate key"},
      {{"\"timeline\": {", "\"measured\": {"}, "\"clock\"", R"("clock": "real", )", "bad.json': timeline.measured.clock: duplicate key"},
      {{"\"timeline\": {", "\"predicted\": {"}, "\"start_ms\"", R"("start_ms": 0, )",
       "bad.json': timeline.predicted.devices[0].ops[0].start_ms: duplicate key"},
      {{}, "\"devices\"", R"("odd key": 1, "odd key": 2, )", R"(bad.json': ["odd key"]: duplicate key)"},
  };
  for (const auto& c : kCases) {
    size_t at = 0;
    for (const std::string& section : c.after) at = text.find(section, at);
    at = text.find(c.at, at);
    ASSERT_NE(at, std::string::npos) << c.at;
    WriteFile(bad, text.substr(0, at) + c.insert + text.substr(at));
    ExpectBadInput(RunBinary("timeline --from_report=" + bad.string() + " --out=" + svg.string(), dir), c.what,
                   c.what);
    EXPECT_FALSE(fs::exists(svg)) << c.what;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rp::apps
