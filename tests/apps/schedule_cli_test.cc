// The pipeline schedules through `ringpipe predict`, `run` and `sweep` as a demanding user drives them
// (hunt-sched2): repeated sweep points, what the text Gantt draws on unusual layouts, the memory a
// prediction of many micro-batches takes and its estimate.
#include <sys/resource.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "runtime/thread.h"
#include "tests/apps/binary_runner.h"

namespace rp::apps {
namespace {

namespace fs = std::filesystem;
using Result = rp::apps::testing::BinaryResult;
using rp::apps::testing::ExpectBadInput;
using rp::apps::testing::RunBinary;

fs::path TempDir(const std::string& name) { return rp::apps::testing::TempDir("ringpipe_schedule_cli_test", name); }

// The lines of `text` that start with `prefix`.
std::vector<std::string> LinesStartingWith(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) == 0) out.push_back(line);
  }
  return out;
}

// A value listed twice in one axis, as read by its field's grammar, would run one point twice (and
// draw two categories of one name): one line naming the axis and both spellings, exit 2, nothing written.
TEST(SweepCommand, AValueRepeatedInItsAxisIsBadInput) {
  const fs::path dir = TempDir("repeat");
  const fs::path out = dir / "out";
  struct Case {
    std::string args;
    std::string names;
  } cases[] = {
      {"--axis=microbatches=8,4,08", "--axis=microbatches: '08' repeats the value '8'"},
      {"--axis=segment_bytes=64K,0,65536", "--axis=segment_bytes: '65536' repeats the value '64K'"},
      {"--axis=overlap=true,yes", "--axis=overlap: 'yes' repeats the value 'true'"},
      {"--axis=pp:forward_ms=2:50,1:100,2:50.0", "--axis=pp:forward_ms: '2:50.0' repeats the value '2:50'"},
      {"--axis=microbatches=2,4 --axis=schedule=1f1b,gpipe,1f1b", "--axis=schedule: '1f1b' repeats the value '1f1b'"},
      {"--axis=microbatches=1..4,3", "--axis=microbatches: '3' repeats the value '3'"},
  };
  for (const Case& c : cases) {
    ExpectBadInput(RunBinary("sweep --preset=s1 --predict_only " + c.args + " --out_dir=" + out.string(), dir),
                   c.names, c.args);
    EXPECT_FALSE(fs::exists(out)) << c.args;
  }
  // Distinct values of a linked axis that share a first field are distinct points.
  const Result ok = RunBinary("sweep --preset=s1 --predict_only --axis=pp:forward_ms=2:50,2:25 --out_dir=" +
                                  out.string(), dir);
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  fs::remove_all(dir);
}

// sweep.csv's `virtual_stages` is the chunks a point's devices held: zb-v always holds two, whatever
// the field said (it echoed the field's 1, so zb-v looked like a one-chunk schedule).
TEST(SweepCommand, TheCsvGivesTheChunksEachDeviceHeld) {
  const fs::path dir = TempDir("chunks");
  const fs::path out = dir / "out";
  const Result r = RunBinary("sweep --preset=s1 --predict_only --microbatches=8 "
                             "--axis=schedule:virtual_stages=1f1b:1,zb-v:1,zb-v:2,interleaved:2 --out_dir=" +
                                 out.string(),
                             dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream csv(out / "sweep.csv");
  std::string line;
  ASSERT_TRUE(std::getline(csv, line));
  std::vector<std::string> header = absl::StrSplit(line, ',');
  const auto col = std::find(header.begin(), header.end(), "virtual_stages") - header.begin();
  ASSERT_LT(static_cast<size_t>(col), header.size());
  std::vector<std::string> chunks;
  while (std::getline(csv, line)) {
    const std::vector<std::string> row = absl::StrSplit(line, ',');
    ASSERT_GT(row.size(), static_cast<size_t>(col)) << line;
    chunks.push_back(row[static_cast<size_t>(col)]);
  }
  EXPECT_EQ(chunks, (std::vector<std::string>{"1", "2", "2", "2"}));
  fs::remove_all(dir);
}

// The text Gantt names the chunk of an op after a device's first (micro-batch.chunk, as the SVG): with
// two chunks a device runs F1 twice, and the chart drew both as "F1".
TEST(PredictCommand, TheGanttNamesTheChunkOfAnOp) {
  const fs::path dir = TempDir("gantt_chunks");
  for (const std::string schedule : {"interleaved --virtual_stages=2", "dualpipev"}) {
    const Result r = RunBinary("predict --pp=2 --dp=1 --tp=1 --microbatches=4 --schedule=" + schedule, dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::vector<std::string> rows = LinesStartingWith(r.out, "rank 0 |");
    ASSERT_EQ(rows.size(), 1u) << r.out;
    EXPECT_TRUE(std::regex_search(rows[0], std::regex("[FBbW][0-9]+\\.1"))) << schedule << ": " << rows[0];
    EXPECT_FALSE(std::regex_search(rows[0], std::regex("[0-9]\\.0"))) << schedule << ": chunk 0 is unmarked: " << rows[0];
  }
  // One chunk: no mark.
  const Result r = RunBinary("predict --pp=2 --dp=1 --tp=1 --microbatches=4", dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> rows = LinesStartingWith(r.out, "rank 0 |");
  ASSERT_EQ(rows.size(), 1u) << r.out;
  EXPECT_TRUE(std::regex_search(rows[0], std::regex("F[0-9]"))) << rows[0];
  EXPECT_FALSE(std::regex_search(rows[0], std::regex("[0-9]\\.[0-9]"))) << rows[0];
  fs::remove_all(dir);
}

// The text Gantt under `predict` draws what the report's timeline holds: one replica has no gradient
// all-reduce (its interval ends where it starts), so no comm row — it drew an '=' per device.
TEST(PredictCommand, TheGanttDrawsNoGradientAllReduceForOneReplica) {
  const fs::path dir = TempDir("gantt");
  const std::string base = "predict --tp=1 --pp=2 --microbatches=4 --hidden=64x3 ";
  const Result one = RunBinary(base + "--dp=1", dir);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(LinesStartingWith(one.out, "rank ").size(), 2u) << one.out;
  EXPECT_TRUE(LinesStartingWith(one.out, "  comm |").empty()) << one.out;
  const Result two = RunBinary(base + "--dp=2", dir);
  ASSERT_EQ(two.exit_code, 0) << two.err;
  const std::vector<std::string> comm = LinesStartingWith(two.out, "  comm |");
  ASSERT_EQ(comm.size(), 2u) << two.out;
  for (const std::string& row : comm) EXPECT_NE(row.find('='), std::string::npos) << row;
  fs::remove_all(dir);
}

// `predict` refuses a layout whose prediction would not fit in memory by an up-front estimate: it must
// bound what the prediction takes. It counted 512 B per (rank, chunk, micro-batch) slot: 17 MB for
// 1F1B pp=64 x m=512, which took 111 MB, and 2 MB for tp=2 pp=16 x m=256 on 256 layers, which took
// 218 MB (each TP all-reduce cuts the passes; tp=2 pp=64 x m=2048 on 4096 layers: 14.2 GB estimated at
// 67 MB, so a host with less was out of memory, not told). Layouts by increasing peak (the children's
// peak RSS is the largest so far).
TEST(PredictCommand, TheMemoryEstimateBoundsThePredictionsPeak) {
  // With and without --report_json (the report's timeline rows are built only for the file, so they
  // are counted only then). The children's peak RSS is a maximum over every child so far: the runs go
  // in increasing estimate, so each run's bound also bounds every earlier run's peak.
  const fs::path dir = TempDir("memory");
  const fs::path report = dir / "r.json";
  std::vector<std::pair<double, std::string>> runs;  // (estimate, flags)
  // (The third: 2^18 devices, whose report objects are made one at a time — 2.7 kB a device while the
  // report was one document, over the 512 B a device the estimate counts now.)
  for (const std::string layout : {"--dp=1 --tp=1 --pp=64 --microbatches=512 --hidden=8x255 --input_dim=8",
                                   "--dp=1 --tp=2 --pp=16 --microbatches=256 --hidden=8x255 --input_dim=8",
                                   "--dp=8192 --tp=4 --pp=8 --hidden=64x16"}) {
    double estimate[2] = {0, 0};
    for (const bool with_report : {false, true}) {
      const std::string flags = layout + (with_report ? " --report_json=" + report.string() : "");
      ASSERT_EQ(::setenv("RINGPIPE_MEMORY_LIMIT_BYTES", "1000", 1), 0);  // refused: the message says the estimate
      const Result refused = RunBinary("predict " + flags, dir);
      ASSERT_EQ(::unsetenv("RINGPIPE_MEMORY_LIMIT_BYTES"), 0);
      const std::string says = "the prediction would allocate about ";
      ExpectBadInput(refused, (layout.find("--dp=8192") != std::string::npos ? "--dp: " : "--microbatches: ") + says,
                     flags);
      EXPECT_FALSE(fs::exists(report)) << flags;
      const size_t at = refused.err.find(says);
      ASSERT_NE(at, std::string::npos) << flags << "\n" << refused.err;
      estimate[with_report] = std::stod(refused.err.substr(at + says.size())) * 1e9;
      runs.emplace_back(estimate[with_report], flags);
    }
    // (The rows of 2^18 devices' one replica are too few to show in the message's 3 digits.)
    if (layout.find("--dp=8192") == std::string::npos) {
      EXPECT_LT(estimate[false], estimate[true]) << layout << ": the timeline rows count only with --report_json";
    }
  }
  std::sort(runs.begin(), runs.end());
  for (const auto& [estimate_bytes, flags] : runs) {
    const Result r = RunBinary("predict " + flags, dir);
    ASSERT_EQ(r.exit_code, 0) << flags << "\n" << r.err;
    fs::remove(report);
    struct rusage usage {};
    ASSERT_EQ(::getrusage(RUSAGE_CHILDREN, &usage), 0);
    EXPECT_LE(static_cast<double>(usage.ru_maxrss) * 1024, estimate_bytes) << flags;
  }
  fs::remove_all(dir);
}

// The report's timeline (every op of the first replica's devices) is built for --report_json only: the
// text report does not read it. Built always, it was half of a prediction's peak — 1F1B pp=64 x m=2048
// took 423 MB (217 MB without it) and died of std::bad_alloc (exit 134) under a 340 MB address-space
// limit; 1.6 s for m=4096, 0.56 s now. The file still holds it.
TEST(PredictCommand, TheTimelineIsBuiltOnlyForTheReportFile) {
  if (rp::kSanitizerBuild) GTEST_SKIP() << "a sanitizer reserves more address space than the limit";
  const fs::path dir = TempDir("timeline");
  const std::string layout = "predict --dp=1 --tp=1 --pp=64 --microbatches=2048 --hidden=8x255 --input_dim=8";
  const Result r = rp::apps::testing::RunBinaryInShell("ulimit -v 340000", layout, dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("predicted step, first replica"), std::string::npos);
  const fs::path report = dir / "r.json";
  const Result small = RunBinary("predict --dp=1 --tp=1 --pp=2 --hidden=64x3 --report_json=" + report.string(), dir);
  ASSERT_EQ(small.exit_code, 0) << small.err;
  EXPECT_NE(rp::apps::testing::ReadFile(report).find("\"timeline\""), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rp::apps
