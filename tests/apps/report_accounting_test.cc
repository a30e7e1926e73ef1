// The report's accounting through the binary, on the virtual clock: modeled reductions are
// communication (comm_ms), not peer wait, against the closed form of docs/collectives.md; the
// headline step is one actual step — the one the per-device figures, the timeline and the EP
// bytes are of — on every timeline; the thread count of a run shorter than the sampling period; and
// the host's lateness, a measured figure of its own (a real-clock run too).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/apps/binary_runner.h"

namespace rp::apps {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using rp::apps::testing::BinaryResult;
using rp::apps::testing::RunBinary;

fs::path TempDir(const std::string& name) {
  return rp::apps::testing::TempDir("ringpipe_report_accounting_test", name);
}

// Runs `args` with --report_json and returns the report (null on failure, the test failed).
json RunReport(const std::string& name, const std::string& args) {
  const fs::path dir = TempDir(name);
  const fs::path report = dir / "r.json";
  const BinaryResult r = RunBinary(args + " --report_json=" + report.string(), dir);
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.err;
  if (r.exit_code != 0) return json();
  std::ifstream f(report);
  json j = json::parse(f);
  fs::remove_all(dir);
  return j;
}

// One ring all-reduce of n ranks, K = 1, on an ideal link (α = o = 0) of β = 1 GB/s: a rank sends
// 2(n − 1) chunks of c bytes (modeled_*_bytes = 2(n − 1)c) taking c ns each, and reduces n − 1
// chunks of c / 4 FP32 elements, 4·(c / 4) / R = c / R ns each (reduce_gbps = R). All of it is
// communication: comm_ms = bytes·(1 + 1 / (2R)) ns, and none of it peer wait.
double RingCommMs(double bytes, double reduce_gbps) {
  return bytes * (1.0 + (reduce_gbps > 0 ? 1.0 / (2.0 * reduce_gbps) : 0.0)) * 1e-6;
}

void ExpectReductionsAreComm(const std::string& layout, const char* bytes_key, const std::string& name) {
  for (double R : {0.0, 0.5, 1.0, 2.0}) {
    std::ostringstream args;
    args << "run --virtual_time " << layout
         << " --pp=1 --microbatches=1 --steps=1 --link=ideal --alpha_us=0 --bandwidth_gbps=1 --overlap=false"
         << " --reduce_gbps=" << R;
    const json j = RunReport(name, args.str());
    ASSERT_FALSE(j.is_null());
    for (const json& d : j["devices"]) {
      for (const char* tl : {"emulated", "predicted"}) {
        const json& f = d[tl];
        const double bytes = f[bytes_key].get<double>();
        ASSERT_GT(bytes, 0) << tl;
        EXPECT_NEAR(f["comm_ms"].get<double>(), RingCommMs(bytes, R), 1e-9)
            << layout << " R " << R << " rank " << d["rank"] << " " << tl;
        EXPECT_EQ(f["peer_wait_ms"].get<double>(), 0.0) << layout << " R " << R << " rank " << d["rank"] << " " << tl;
      }
      EXPECT_EQ(d["emulated"]["comm_ms"], d["predicted"]["comm_ms"]) << "rank " << d["rank"];
      EXPECT_EQ(d["emulated"]["exposed_comm_ms"], d["predicted"]["exposed_comm_ms"]) << "rank " << d["rank"];
    }
  }
}

TEST(ReportAccounting, DpReductionsAreCommNotPeerWait) {
  // 4 replicas, one bucket at the optimizer: the worked example 3·(18.38 + 18.38) + 3·18.38 µs at R = 1.
  ExpectReductionsAreComm("--dp=4 --tp=1", "modeled_dp_bytes", "dp");
}

TEST(ReportAccounting, TpReductionsAreCommNotPeerWait) {
  ExpectReductionsAreComm("--dp=1 --tp=2", "modeled_tp_bytes", "tp");
}

constexpr const char* kMoe =
    "run --virtual_time --dp=2 --pp=3 --tp=2 --microbatches=6 --schedule=zb-v --virtual_stages=2 --hidden=64x11 "
    "--moe_layers=2,5 --experts=2 --top_k=1 --ep=2 --capacity_factor=1.25 --aux_loss=0.01 --ep_row_bytes=65536 "
    "--codec=fp16 --link=dgx-h100 --segment_bytes=4K";

// The headline step is the median step: one step's time on every timeline, the step of the
// timeline, and the step whose time each device's bubble is measured against.
TEST(ReportAccounting, HeadlineStepIsTheStepOfThePerDeviceFigures) {
  const json j = RunReport("headline", std::string(kMoe) + " --steps=2");
  ASSERT_FALSE(j.is_null());
  const json& steps = j["steps"];
  ASSERT_EQ(steps.size(), 2u);
  ASSERT_NE(steps[0]["emulated_ms"], steps[1]["emulated_ms"]) << "the steps must differ for the test to mean anything";
  const int k = j["timeline"]["emulated"]["step"].get<int>();
  ASSERT_TRUE(k == 0 || k == 1);
  for (const char* tl : {"measured", "emulated", "predicted"}) {
    EXPECT_EQ(j["step_time_ms"][tl], steps[k][std::string(tl) + "_ms"]) << tl;
  }
  EXPECT_EQ(j["timeline"]["emulated"]["step_ms"], j["step_time_ms"]["emulated"]);
  EXPECT_EQ(j["timeline"]["predicted"]["step_ms"], j["step_time_ms"]["predicted"]);
  for (const json& d : j["devices"]) {
    for (const char* tl : {"emulated", "predicted"}) {
      const double step = j["step_time_ms"][tl].get<double>();
      const json& f = d[tl];
      EXPECT_NEAR(f["bubble_total"].get<double>(), (step - f["busy_ms"].get<double>()) / step, 1e-9)
          << tl << " rank " << d["rank"];
    }
    EXPECT_NEAR(d["bubble_total"].get<double>(),
                (j["step_time_ms"]["measured"].get<double>() - d["busy_ms"].get<double>()) /
                    j["step_time_ms"]["measured"].get<double>(),
                1e-9)
        << "measured, rank " << d["rank"];
  }
}

// Multi-step MoE: the EP all-to-alls' bytes follow each step's routing; emulated and predicted
// report the same (median) step's.
TEST(ReportAccounting, EpBytesAreTheMedianStepsOnBothTimelines) {
  const json j = RunReport("ep_bytes", std::string(kMoe) + " --steps=3");
  ASSERT_FALSE(j.is_null());
  bool any_ep = false;
  for (const json& d : j["devices"]) {
    for (const char* key : {"modeled_ep_bytes", "modeled_wire_bytes", "modeled_p2p_bytes", "modeled_tp_bytes",
                            "modeled_dp_bytes"}) {
      EXPECT_EQ(d["emulated"][key], d["predicted"][key]) << key << " rank " << d["rank"];
      EXPECT_EQ(d[key], d["emulated"][key]) << key << " rank " << d["rank"];
    }
    any_ep = any_ep || d["emulated"]["modeled_ep_bytes"].get<uint64_t>() > 0;
  }
  EXPECT_TRUE(any_ep);
}

// A run of ~10 ms (shorter than the sampler's 20 ms period) still reports its device threads.
TEST(ReportAccounting, ShortRunReportsAtLeastItsDeviceThreads) {
  const json j = RunReport("threads", "run --preset=s1 --virtual_time --steps=2");
  ASSERT_FALSE(j.is_null());
  const int world = j["layout"]["world"].get<int>();
  ASSERT_GT(world, 1);
  EXPECT_GE(j["host"]["threads"].get<int>(), world * j["host"]["threads_per_device"].get<int>());
}

// A run of world × steps > 8192 keeps only the last step's intervals (schedule/step_book.cc): its
// pipeline figures are still the median step's — the step of the headline times — and its
// timeline and measured Gantt say which step they draw, never calling the last step the median.
// --jitter makes the steps differ; seed 1 makes the last step's makespan (25.3 ms) longer than the
// median step (23.9 ms), so figures of the last step under a median headline cannot pass.
TEST(ReportAccounting, PipelineFiguresAreTheMedianStepsWhenOnlyTheLastStepWasKept) {
  const fs::path dir = TempDir("last_kept");
  const fs::path report = dir / "r.json";
  const BinaryResult r = RunBinary(
      "run --virtual_time --dp=2 --pp=2 --tp=1 --microbatches=2 --steps=2049 --reference=false --jitter=0.5:1"
      " --report_json=" + report.string(),
      dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream f(report);
  const json j = json::parse(f);
  const json& steps = j["steps"];
  ASSERT_EQ(steps.size(), 2049u);
  // The upper median by measured time, as run_result.cc picks it (stable order among equal times).
  std::vector<size_t> idx(steps.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    return steps[a]["measured_ms"].get<double>() < steps[b]["measured_ms"].get<double>();
  });
  const size_t median = idx[idx.size() / 2];
  ASSERT_EQ(j["step_time_ms"]["measured"], steps[median]["measured_ms"]);
  for (const char* tl : {"measured", "emulated"}) {
    const json& p = j["pipeline"][tl];
    const double step = j["step_time_ms"][tl].get<double>();
    EXPECT_LE(p["makespan_ms"].get<double>(), step) << tl << ": the makespan of another step";
    EXPECT_LE(p["max_span_ms"].get<double>(), p["makespan_ms"].get<double>()) << tl;
  }
  const json& drawn = j["timeline"]["measured"];
  const size_t drawn_step = drawn["step"].get<size_t>();
  ASSERT_NE(drawn_step, median) << "the run must not have kept the median step's intervals for the test to mean anything";
  ASSERT_TRUE(drawn.contains("median"));
  EXPECT_EQ(drawn["median"], false);
  EXPECT_EQ(j["timeline"]["emulated"]["median"], false);
  EXPECT_EQ(r.out.find("(median)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(absl::StrCat("measured step ", drawn_step, " (the last step")), std::string::npos) << r.out;
  fs::remove_all(dir);
}

// The EP all-to-alls' peer wait and exposed transfer are a share of the device's peer wait and
// exposed communication — of the same step, the median one — even when the run kept only the last
// step's intervals (world × steps > 8192). --jitter and a skewed router make the steps differ; with
// seed 1 the last step's EP peer wait of rank 1 (0.233 ms) exceeds the median step's whole peer
// wait (0.017 ms).
TEST(ReportAccounting, EpWaitsAreAShareOfTheMedianStepsWaits) {
  const json j = RunReport("ep_share",
                           "run --virtual_time --dp=2 --pp=1 --tp=1 --microbatches=1 --hidden=64x4 --moe_layers=1"
                           " --experts=2 --top_k=1 --ep=2 --router_skew=2 --steps=4097 --reference=false"
                           " --jitter=0.5:1");
  ASSERT_FALSE(j.is_null());
  ASSERT_EQ(j["timeline"]["measured"]["median"], false) << "the test needs a run that kept only the last step's";
  bool any_ep = false;
  for (const json& d : j["devices"]) {
    for (const json* f : {&d, &d["emulated"], &d["predicted"]}) {
      const double ep_peer = (*f)["ep_peer_wait_ms"].get<double>();
      const double ep_exposed = (*f)["ep_exposed_comm_ms"].get<double>();
      EXPECT_LE(ep_peer, (*f)["peer_wait_ms"].get<double>() + 1e-9) << "rank " << d["rank"];
      EXPECT_LE(ep_exposed, (*f)["exposed_comm_ms"].get<double>() + 1e-9) << "rank " << d["rank"];
      any_ep = any_ep || ep_peer > 0 || ep_exposed > 0;
    }
    EXPECT_EQ(d["ep_peer_wait_ms"], d["emulated"]["ep_peer_wait_ms"]) << "virtual clock: measured = emulated";
  }
  EXPECT_TRUE(any_ep);
}

// The host's lateness is a measured figure of its own, named on every timeline: on a real clock
// each device's host_late_ms is >= 0 and the text says where it went; on the modeled timelines and
// on the virtual clock it is 0 and the text has no such line.
TEST(ReportAccounting, HostLatenessIsMeasuredOnlyAndNamed) {
  for (const bool virtual_time : {false, true}) {
    const fs::path dir = TempDir(virtual_time ? "late_virtual" : "late_real");
    const fs::path report = dir / "r.json";
    const BinaryResult r = RunBinary(
        absl::StrCat("run --steps=3 --time_scale=0.2 --virtual_time=", virtual_time ? "true" : "false",
                     " --report_json=", report.string()),
        dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::ifstream f(report);
    const json j = json::parse(f);
    ASSERT_EQ(j["devices"].size(), 8u);
    for (const json& d : j["devices"]) {
      ASSERT_TRUE(d["host_late_ms"].is_number()) << d;
      EXPECT_GE(d["host_late_ms"].get<double>(), 0.0);
      if (virtual_time) {
        EXPECT_EQ(d["host_late_ms"].get<double>(), 0.0);
      }
      EXPECT_EQ(d["emulated"]["host_late_ms"].get<double>(), 0.0);
      EXPECT_EQ(d["predicted"]["host_late_ms"].get<double>(), 0.0);
    }
    EXPECT_EQ(r.out.find("  host lateness up to ") != std::string::npos, !virtual_time) << r.out;
    fs::remove_all(dir);
  }
}

}  // namespace
}  // namespace rp::apps
