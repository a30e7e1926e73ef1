// `ringpipe run --trace` through the binary. On the virtual clock the trace holds nothing of the
// host and orders its events by modeled time, so the same options write the same bytes run after
// run (it used to order them by the wall time they were recorded and carry the host's wall
// stamps: two identical runs differed from the first event on); and the file is still Chrome
// trace-event JSON with the run's events on its modeled tracks. On the real clock the trace keeps
// the host's timeline beside the modeled one.
#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <map>
#include <ostream>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/apps/binary_runner.h"

namespace rp::apps {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using rp::apps::testing::BinaryResult;
using rp::apps::testing::ReadFile;
using rp::apps::testing::RunBinary;

// A layout to trace, and what its trace must hold.
struct Layout {
  std::string name;   // the test's parameter name
  std::string args;   // `run` flags besides --virtual_time and --trace
  int world;          // devices
  int nodes;          // "node n (modeled)" processes
  int steps;          // steps traced in full (every rank, every step)
  int forwards;       // forward passes per rank and step: micro-batches x chunks ("F" or "F&B")
  int exit_code = 0;  // 3: a run that fails at run time (--fault)
  int failed_rank = -1, failed_step = -1;  // the failure's, with exit_code 3
};

void PrintTo(const Layout& l, std::ostream* os) { *os << l.args; }

// Where two byte strings first differ, with a little context (the traces are 0.2-0.4 MB).
std::string FirstDifference(const std::string& a, const std::string& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  const size_t from = i < 80 ? 0 : i - 80;
  return absl::StrCat("sizes ", a.size(), " and ", b.size(), "; first difference at byte ", i,
                      ":\n  ", a.substr(from, 160), "\n  ", b.substr(from, 160));
}

// The checks a virtual-clock trace must pass: Chrome trace-event JSON (every event with ph, name,
// pid and tid; complete events with ts and dur >= 0; each flow's start joined to one finish), the
// modeled processes alone and no wall stamp, device events placed at their modeled times and
// written in modeled order (port events too), every rank's compute ops in every traced step.
// Stops at the first event that fails (ASSERT): a trace has thousands.
void ExpectModeledChromeTrace(const json& root, const Layout& l) {
  ASSERT_TRUE(root.is_object());
  ASSERT_TRUE(root.contains("traceEvents"));
  ASSERT_TRUE(root["traceEvents"].is_array());
  EXPECT_EQ(root["displayTimeUnit"], "ms");
  std::set<std::string> processes;
  std::map<uint64_t, std::pair<int, int>> flows;  // id -> (starts, finishes)
  std::map<std::tuple<int, int, std::string>, int> computes;  // (rank, step, name) -> count
  double last_device_ts = -1, last_port_ts = -1;
  int run_failed = 0;
  for (const json& e : root["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("name") && e.contains("pid") && e.contains("tid")) << e;
    const std::string ph = e["ph"];
    if (ph == "M") {
      if (e["name"] == "process_name") processes.insert(e["args"]["name"].get<std::string>());
      continue;
    }
    if (ph == "s" || ph == "f") {
      auto& [starts, finishes] = flows[e["id"].get<uint64_t>()];
      (ph == "s" ? starts : finishes) += 1;
      continue;
    }
    ASSERT_TRUE(ph == "X" || ph == "i") << e;
    ASSERT_TRUE(e.contains("ts")) << e;
    const double ts = e["ts"].get<double>();
    if (ph == "X") {
      ASSERT_TRUE(e.contains("dur")) << e;
      ASSERT_GE(e["dur"].get<double>(), 0.0) << e;
    }
    if (e.value("cat", "") == "port") {
      ASSERT_EQ(e["pid"], l.nodes) << e;
      ASSERT_GE(ts, last_port_ts) << "port events out of modeled order: " << e;
      last_port_ts = ts;
      continue;
    }
    const json& args = e["args"];
    ASSERT_FALSE(args.contains("wall_start_us") || args.contains("wall_end_us")) << e;
    const int rank = args["rank"];
    ASSERT_TRUE(rank >= 0 && rank < l.world) << e;
    ASSERT_EQ(e["pid"], rank / (l.world / l.nodes)) << e;
    ASSERT_EQ(e["tid"], 2 * rank + (args["stream"] == "comm" ? 1 : 0)) << e;
    ASSERT_EQ(ts, args["modeled_start_us"].get<double>()) << e;
    if (ph == "X") {
      ASSERT_NEAR(e["dur"].get<double>(),
                  args["modeled_end_us"].get<double>() - args["modeled_start_us"].get<double>(), 1e-6)
          << e;
    }
    ASSERT_GE(ts, last_device_ts) << "device events out of modeled order: " << e;
    last_device_ts = ts;
    if (args["kind"] == "compute") {
      const std::string name = e["name"];
      ++computes[{rank, args.value("step", -1), name.substr(0, name.find(" mb"))}];
    }
    if (e["name"] == "run failed") {
      ++run_failed;
      ASSERT_EQ(ph, "i");
      ASSERT_EQ(e["cat"], "fault");
      ASSERT_EQ(rank, l.failed_rank) << e;
      ASSERT_EQ(args["step"], l.failed_step) << e;
    }
  }
  std::set<std::string> want_processes = {"fabric ports (modeled)"};
  for (int n = 0; n < l.nodes; ++n) want_processes.insert(absl::StrCat("node ", n, " (modeled)"));
  EXPECT_EQ(processes, want_processes);
  EXPECT_FALSE(flows.empty());
  for (const auto& [id, n] : flows) {
    // A failed run's last messages may have been sent and never received.
    EXPECT_EQ(n.first, 1) << "flow " << id;
    if (l.exit_code == 0) {
      EXPECT_EQ(n.second, 1) << "flow " << id;
    } else {
      EXPECT_LE(n.second, 1) << "flow " << id;
    }
  }
  for (int rank = 0; rank < l.world; ++rank) {
    for (int step = 0; step < l.steps; ++step) {
      EXPECT_EQ((computes[{rank, step, "F"}] + computes[{rank, step, "F&B"}]), l.forwards)
          << "rank " << rank << " step " << step;
      EXPECT_EQ((computes[{rank, step, "Opt"}]), 1) << "rank " << rank << " step " << step;
    }
  }
  EXPECT_EQ(run_failed, l.exit_code == 0 ? 0 : 1);
}

class VirtualTrace : public ::testing::TestWithParam<Layout> {};

// Two runs of the same options write the same trace bytes, and it is a valid modeled trace.
TEST_P(VirtualTrace, TwoRunsWriteTheSameBytes) {
  const Layout& l = GetParam();
  const fs::path dir = rp::apps::testing::TempDir("ringpipe_trace_test", l.name);
  std::string bytes[2];
  for (int run = 0; run < 2; ++run) {
    const fs::path trace = dir / absl::StrCat("t", run, ".json");
    const BinaryResult r =
        RunBinary(absl::StrCat("run --virtual_time ", l.args, " --trace=", trace.string()), dir);
    ASSERT_EQ(r.exit_code, l.exit_code) << l.args << "\n" << r.err;
    bytes[run] = ReadFile(trace);
    ASSERT_FALSE(bytes[run].empty()) << l.args;
  }
  EXPECT_TRUE(bytes[0] == bytes[1]) << l.args << ": " << FirstDifference(bytes[0], bytes[1]);
  const json root = json::parse(bytes[0], nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(root.is_discarded()) << "not JSON: " << l.args;
  ExpectModeledChromeTrace(root, l);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, VirtualTrace,
    ::testing::Values(
        // The default job: DP=2 x PP=2 x TP=2, 1F1B, 4 micro-batches, on 2 nodes.
        Layout{.name = "dp2_pp2_tp2_1f1b", .args = "--steps=2", .world = 8, .nodes = 2, .steps = 2,
               .forwards = 4},
        Layout{.name = "zb_h1", .args = "--steps=2 --schedule=zb-h1", .world = 8, .nodes = 2,
               .steps = 2, .forwards = 4},
        Layout{.name = "interleaved", .args = "--steps=2 --schedule=interleaved --virtual_stages=2",
               .world = 8, .nodes = 2, .steps = 2, .forwards = 8},
        Layout{.name = "dualpipev", .args = "--steps=2 --schedule=dualpipev", .world = 8, .nodes = 2,
               .steps = 2, .forwards = 8},
        // MoE blocks over EP=2 (DP x PP x TP x EP on one node of 8), 4 experts, top-2.
        Layout{.name = "moe_ep2", .args = "--preset=s3-4d --steps=2 --experts=4", .world = 8,
               .nodes = 1, .steps = 2, .forwards = 4},
        // 32 devices on 8 nodes sharing one NIC each (contention), jitter and a straggler: many
        // interleavings of the device threads and of the fabric's commits.
        Layout{.name = "dp4_pp4_tp2_shared_nic_jitter",
               .args = "--steps=2 --dp=4 --pp=4 --tp=2 --microbatches=8 --hidden=64x8 "
                       "--nics_per_node=1 --jitter=0.2:3 --straggler=5:1.5 --segment_bytes=64K",
               .world = 32, .nodes = 8, .steps = 2, .forwards = 8},
        // Rank 2 throws in its first op of step 1: exit 3, the trace of step 0 and the failure.
        Layout{.name = "failed_run", .args = "--steps=3 --fault=throw:rank=2,step=1,op=0",
               .world = 8, .nodes = 2, .steps = 1, .forwards = 4, .exit_code = 3,
               .failed_rank = 2, .failed_step = 1}),
    [](const ::testing::TestParamInfo<Layout>& p) { return p.param.name; });

// On the real clock the trace keeps the host's timeline: the measured processes with the wall
// stamps, and the modeled ones beside them.
TEST(RealClockTrace, KeepsTheMeasuredAndTheModeledProcesses) {
  const fs::path dir = rp::apps::testing::TempDir("ringpipe_trace_test", "real_clock");
  const fs::path trace = dir / "t.json";
  const BinaryResult r = RunBinary(
      "run --dp=2 --pp=2 --tp=1 --hidden=32x4 --microbatches=2 --forward_ms=0.5 --backward_ms=1 "
      "--steps=2 --reference=false --time_scale=0.05 --trace=" + trace.string(), dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json root = json::parse(ReadFile(trace), nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(root.is_discarded());
  std::set<std::string> processes;
  int measured = 0, modeled = 0;
  for (const json& e : root["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") processes.insert(e["args"]["name"].get<std::string>());
    if (e["ph"] != "X" || e.value("cat", "") == "port") continue;
    EXPECT_TRUE(e["args"].contains("wall_start_us")) << e;
    (e["pid"].get<int>() == 0 ? measured : modeled) += 1;  // 4 devices on node 0: pids 0 and 1
  }
  EXPECT_EQ(processes, (std::set<std::string>{"node 0", "node 0 (modeled)", "fabric ports (modeled)"}));
  EXPECT_GT(measured, 0);
  EXPECT_EQ(measured, modeled);
  fs::remove_all(dir);
}

// The trace's wall clock starts at the measured run, after --time_scale=auto's trial runs: it was
// built before them, so every wall stamp included the whole calibration (each op started later than
// all the trials' wall seconds together). Now the first op starts before the trials' time is over:
// each trial built its own executor and ran two steps of 450 modeled ms (at least 0.9 s at the first
// scale tried, 1), the run only its executor before its first op (with 0.5 / 1 ms ops the run's setup
// on a loaded host outlasted the trials once: 323 ms against 310).
TEST(RealClockTrace, WallTimesStartAtTheRunNotAtTheCalibration) {
  const fs::path dir = rp::apps::testing::TempDir("ringpipe_trace_test", "wall_origin");
  const fs::path trace = dir / "t.json", report = dir / "r.json";
  const BinaryResult r = RunBinary(
      "run --dp=2 --pp=2 --tp=1 --hidden=32x4 --microbatches=2 --forward_ms=50 --backward_ms=100 "
      "--steps=2 --reference=false --time_scale=auto --trace=" + trace.string() + " --report_json=" +
      report.string(), dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json root = json::parse(ReadFile(trace), nullptr, /*allow_exceptions=*/false);
  const json rep = json::parse(ReadFile(report), nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(root.is_discarded());
  ASSERT_FALSE(rep.is_discarded());
  double trials_us = 0;
  for (const json& t : rep["host"]["time_scale_choice"]["calibration_trials"]) {
    trials_us += t["wall_seconds"].get<double>() * 1e6;
  }
  ASSERT_GT(trials_us, 0) << rep["host"]["time_scale_choice"].dump();
  double first_us = -1;
  for (const json& e : root["traceEvents"]) {
    if (e["ph"] != "X" || e.value("cat", "") == "port" || e["pid"].get<int>() != 0) continue;  // measured ops
    const double ts = e["args"]["wall_start_us"].get<double>();
    first_us = first_us < 0 ? ts : std::min(first_us, ts);
  }
  ASSERT_GE(first_us, 0);
  EXPECT_LT(first_us, trials_us) << "the trace's first op at " << first_us << " us; the trials took " << trials_us
                                 << " us";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rp::apps
