// `ringpipe timeline` through the binary: a run's chart and the same chart from its saved report, its
// report's host section, bad input, ops or messages that would outlast the watchdog, and the fault
// flags. The chart's
// drawing and the failed run's outputs: timeline_test.cc.
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "apps/cli.h"
#include "gtest/gtest.h"
#include "tests/apps/binary_runner.h"
#include "nlohmann/json.hpp"
#include "tests/apps/xml_check.h"

namespace rp::apps {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::ParseXml;
using testing::XmlDoc;
using Result = rp::apps::testing::BinaryResult;
using rp::apps::testing::Cell;
using rp::apps::testing::ReadCsv;
using rp::apps::testing::ReadFile;
using rp::apps::testing::RunBinary;

fs::path TempDir(const std::string& name) { return rp::apps::testing::TempDir("ringpipe_timeline_cmd", name); }

TEST(TimelineCommand, DrawsTheRunAndTheSameChartFromItsSavedReport) {
  const fs::path dir = TempDir("timeline");
  const fs::path svg1 = dir / "run.svg", svg2 = dir / "report.svg", report = dir / "report.json";
  const Result r = RunBinary("timeline --preset=s1 --steps=1 --reference=false --virtual_time=true --out=" +
                                 svg1.string() + " --report_json=" + report.string(),
                             dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("measured step 1370.000 ms, predicted step 1370.000 ms"), std::string::npos) << r.out;
  const json rep = json::parse(ReadFile(report));
  ASSERT_TRUE(rep.contains("timeline"));
  EXPECT_EQ(rep["timeline"]["measured"]["devices"].size(), 2u);
  const Result again = RunBinary("timeline --from_report=" + report.string() + " --out=" + svg2.string(), dir);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  const std::string text = ReadFile(svg1);
  EXPECT_EQ(text, ReadFile(svg2));
  const XmlDoc doc = ParseXml(text);
  ASSERT_TRUE(doc.ok) << doc.error;
  // 2 panels x 2 stages x 8 micro-batches of F and of B, each with a tooltip naming it.
  int forward = 0, backward = 0;
  for (const std::string& t : doc.texts) {
    forward += t.rfind("forward (F) ", 0) == 0;
    backward += t.rfind("backward (B) ", 0) == 0;
  }
  EXPECT_EQ(forward, 2 * 2 * 8);
  EXPECT_EQ(backward, 2 * 2 * 8);
  for (const char* label : {"rank 0  (pp 0, tp 0)", "rank 1  (pp 1, tp 0)", "7", "idle"}) {
    bool found = false;
    for (const std::string& t : doc.texts) found = found || t == label;
    EXPECT_TRUE(found) << label;
  }
}

// The report `timeline --report_json` writes of its run has the host section `run` writes: the
// clock's choice (whether the host kept the time scale: the measured figures' provenance), threads
// and memory — it had only the executor's figures.
TEST(TimelineCommand, ItsRunReportHasTheHostSectionOfRun) {
  const fs::path dir = TempDir("timeline_host");
  const fs::path svg = dir / "t.svg", report = dir / "r.json";
  const Result r = RunBinary("timeline --virtual_time --steps=1 --reference=false --out=" + svg.string() +
                                 " --report_json=" + report.string(),
                             dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json rep = json::parse(ReadFile(report));
  const json& host = rep["host"];
  ASSERT_TRUE(host.contains("time_scale_choice")) << host.dump();
  EXPECT_EQ(host["time_scale_choice"]["mode"], "virtual");
  EXPECT_EQ(host["time_scale_choice"]["host_fidelity_trusted"], true);
  ASSERT_TRUE(host.contains("threads")) << host.dump();
  EXPECT_GE(host["threads"].get<int>(), rep["layout"]["world"].get<int>() * host["threads_per_device"].get<int>());
  ASSERT_TRUE(host.contains("peak_rss_bytes")) << host.dump();
  EXPECT_GT(host["peak_rss_bytes"].get<double>(), 0);
  EXPECT_GE(host["peak_rss_bytes"].get<double>(), host["rss_before_run_bytes"].get<double>());
  EXPECT_GT(host["model_buffer_bytes"].get<double>(), 0);
}

TEST(TimelineCommand, BadInputExitsTwoAndWritesNothing) {
  const fs::path dir = TempDir("timeline_bad");
  const fs::path svg = dir / "t.svg", old_report = dir / "old.json";
  std::ofstream(old_report) << "{\"schema\": \"ringpipe-report/1\", \"mode\": \"predict\"}\n";
  for (const std::string& args : std::vector<std::string>{
        "timeline --from_report=" + old_report.string() + " --out=" + svg.string(),
        "timeline --from_report=" + (dir / "missing.json").string() + " --out=" + svg.string(),
        "timeline --from_report=" + old_report.string() + " --pp=2 --out=" + svg.string(),
        "timeline --preset=s1 --pp=7 --out=" + svg.string(), "timeline --preset=s1",
        "timeline --preset=s1 --out=" + (dir / "no" / "t.svg").string()}) {
    const Result r = RunBinary(args, dir);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
    EXPECT_FALSE(fs::exists(svg)) << args;
  }
  const Result old = RunBinary("timeline --from_report=" + old_report.string() + " --out=" + svg.string(), dir);
  EXPECT_NE(old.err.find("has \"schema\": \"ringpipe-report/1\"; this ringpipe reads \"ringpipe-report/2\""),
            std::string::npos)
      << old.err;
}

// On a real clock an op or a wait for one message longer than the watchdog would be reported as a
// stall: `timeline` refuses it as `run` does (exit 2, one line naming the field, nothing written) —
// its auto calibration's trial failed as stalled (exit 1, "watchdog: rank 1 in op 'B' at step 0 for
// more than 100 ms") and a forced scale's message wait failed the run at once (exit 3, "watchdog:
// rank 1 in op 'RecvAct' ..."); a sweep point is invalid, not a run that failed as stalled.
TEST(TimelineCommand, OpsAndMessagesThatOutlastTheWatchdogAreBadInputNotAStall) {
  const fs::path dir = TempDir("timeline_watchdog");
  const fs::path svg = dir / "t.svg";
  const std::string pipe = "--dp=1 --pp=2 --tp=1 --microbatches=1 --steps=2 --reference=false ";
  struct Case {
    std::string args, field;
  } cases[] = {
      {"--forward_ms=60 --backward_ms=120 --watchdog_timeout=0.1", "--watchdog_timeout"},  // auto
      {"--intra_alpha_us=600000 --watchdog_timeout=0.5 --time_scale=1", "--time_scale"},
      {"--intra_alpha_us=600000 --watchdog_timeout=0.5", "--watchdog_timeout"},             // auto
  };
  for (const Case& c : cases) {
    const Result r = RunBinary("timeline " + pipe + c.args + " --out=" + svg.string(), dir);
    EXPECT_EQ(r.exit_code, 2) << c.args << ": " << r.err;
    EXPECT_EQ(r.err.rfind("ringpipe timeline: " + c.field + ": ", 0), 0u) << c.args << ": " << r.err;
    EXPECT_NE(r.err.find("watchdog_timeout ("), std::string::npos) << c.args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.args << ": " << r.err;
    EXPECT_FALSE(fs::exists(svg)) << c.args;
  }
  const fs::path out = dir / "out";
  const Result r = RunBinary("sweep " + pipe + "--watchdog_timeout=0.5 --time_scale=1 --axis=intra_alpha_us=0,600000 "
                             "--out_dir=" + out.string(), dir);
  EXPECT_EQ(r.exit_code, rp::apps::kExitSomePointsFailed) << r.err;
  const auto csv = ReadCsv(out / "sweep.csv");
  ASSERT_EQ(csv.size(), 3u);
  EXPECT_EQ(Cell(csv, 1, "status"), "ok");
  EXPECT_EQ(Cell(csv, 2, "status"), "invalid");
  EXPECT_NE(Cell(csv, 2, "error").find("longest wait for one message"), std::string::npos) << Cell(csv, 2, "error");
  fs::remove_all(dir);
}

// The fault flags of `run` inject faults into `timeline`'s run too, so its failure path is a user's:
// a device that throws gives exit 3 and both outputs marked failed (the chart of the predicted step
// under a title that says so); a slow link lengthens the measured step and the run's prediction,
// which counts the flags' links, alike; and a fault flag that cannot apply is bad input.
TEST(TimelineCommand, FaultFlagsInjectFaultsIntoItsRun) {
  const fs::path dir = TempDir("timeline_faults");
  const fs::path svg = dir / "t.svg", report = dir / "r.json";
  const std::string pipe = "timeline --dp=1 --pp=2 --tp=1 --microbatches=2 --steps=3 --virtual_time "
                           "--reference=false --train_size=256 --test_size=64 --out=" + svg.string() +
                           " --report_json=" + report.string() + " ";
  const Result thrown = RunBinary(pipe + "--fault=throw:rank=1,step=1,op=0", dir);
  EXPECT_EQ(thrown.exit_code, kExitFault) << thrown.err;
  EXPECT_NE(thrown.err.find("ringpipe timeline: injected fault detected"), std::string::npos) << thrown.err;
  EXPECT_NE(ReadFile(svg).find("the run FAILED at step 1 (nothing measured): the predicted step"), std::string::npos);
  const json failed = json::parse(ReadFile(report));
  EXPECT_EQ(failed["status"], "failed");
  EXPECT_EQ(failed["failure"]["rank"], 1);
  EXPECT_EQ(failed["failure"]["step"], 1);
  EXPECT_EQ(failed["steps"].size(), 1u);

  double step_ms[2] = {0, 0};  // healthy, with a slow link
  for (const bool slow : {false, true}) {
    fs::remove(svg);
    const Result r = RunBinary(pipe + (slow ? "--fault=slow_link:src=0,dst=1,factor=50" : ""), dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err.find("slow link: rank 0 -> rank 1 took 50x") != std::string::npos, slow) << r.err;
    const json j = json::parse(ReadFile(report));
    step_ms[slow] = j["step_time_ms"]["measured"].get<double>();
    EXPECT_DOUBLE_EQ(step_ms[slow], j["step_time_ms"]["predicted"].get<double>()) << r.err;
    // The chart says it is of a faulty run, and its saved report draws the same chart.
    const std::string chart = ReadFile(svg);
    EXPECT_EQ(chart.find(" — with 1 fault: link 0-&gt;1: slow x50 from step 0") != std::string::npos, slow);
    if (!slow) {
      EXPECT_EQ(chart.find(" fault"), std::string::npos) << "a healthy run's chart names no fault";
    }
    const fs::path again = dir / "again.svg";
    const Result redrawn = RunBinary("timeline --from_report=" + report.string() + " --out=" + again.string(), dir);
    ASSERT_EQ(redrawn.exit_code, 0) << redrawn.err;
    EXPECT_EQ(ReadFile(again), chart);
  }
  EXPECT_GT(step_ms[1], step_ms[0]) << "the slow link did not show in the step (virtual clock: deterministic)";

  fs::remove(svg);
  fs::remove(report);
  for (const auto& [flags, says] : std::vector<std::pair<std::string, std::string>>{
           {"--predict_only --fault=throw:rank=0,step=0,op=0", "--fault: injects faults into a run"},
           {"--predict_only --straggler=0:2", "--straggler: injects faults into a run"},
           {"--fault=explode:rank=0", "--fault: 'explode:rank=0': kind must be"},
           {"--straggler=2:3", "--straggler: '2:3': rank 2 is not a rank of the 2 devices"},
           {"--fault=throw:rank=0,step=0,op=999", "--fault: op fault"}}) {
    const Result r = RunBinary(pipe + flags, dir);
    EXPECT_EQ(r.exit_code, kExitBadInput) << flags << ": " << r.err;
    EXPECT_EQ(r.err.rfind("ringpipe timeline: " + says, 0), 0u) << flags << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << flags << ": " << r.err;
    EXPECT_FALSE(fs::exists(svg)) << flags;
    EXPECT_FALSE(fs::exists(report)) << flags;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rp::apps
