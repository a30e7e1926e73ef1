// `ringpipe predict` through the binary: scenario S1's corrected numbers, 16 384 devices predicted
// without emulating, the FLOPs cost model per stage, stored activations per schedule. `run`:
// run_test.cc.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>

#include "apps/cli.h"
#include "gtest/gtest.h"
#include "tests/apps/binary_runner.h"
#include "nlohmann/json.hpp"
#include "runtime/heap.h"
#include "runtime/thread.h"

namespace rp::apps {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Result = rp::apps::testing::BinaryResult;
using rp::apps::testing::ReadJson;
using rp::apps::testing::RunBinary;

fs::path TempDir(const std::string& name) { return rp::apps::testing::TempDir("ringpipe_predict_test", name); }

TEST(PredictCommand, ScenarioS1MatchesTheWriteUpsCorrectedNumbers) {
  const fs::path dir = TempDir("s1");
  const fs::path report = dir / "report.json";
  // The write-up's "correct expectation with free p2p": --intra_alpha_us=0 (stage-to-stage
  // transfers free, ring steps 20 ms).
  const Result r = RunBinary("predict --preset=s1 --intra_alpha_us=0 --report_json=" + report.string(), dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = ReadJson(report);
  EXPECT_EQ(j["mode"], "predict");
  EXPECT_DOUBLE_EQ(j["step_time_ms"]["predicted"].get<double>(), 1210.0);  // 9 x 130 + 2 x 20
  EXPECT_DOUBLE_EQ(j["t1_ms"].get<double>(), 4160.0);                      // 2 x 2 x 8 x 130
  EXPECT_NEAR(j["speedup"]["predicted"].get<double>(), 4160.0 / 1210.0, 1e-9);  // 3.44
  EXPECT_NEAR(j["efficiency"]["predicted"].get<double>(), 4160.0 / 1210.0 / 4, 1e-9);
  EXPECT_EQ(j["schedule"]["global_batch"], 256);
  // Predict has no measured fields.
  EXPECT_FALSE(j["step_time_ms"].contains("measured"));
  for (const char* key : {"fidelity", "steps", "replica_divergence", "host"}) EXPECT_FALSE(j.contains(key)) << key;
  ASSERT_EQ(j["devices"].size(), 4u);
  EXPECT_DOUBLE_EQ(j["devices"][0]["predicted"]["exposed_comm_ms"].get<double>(), 40.0);
  // Rank 0 waits (p - 1)(F + B) = 130 ms for gradients that are not sent yet: bubble, not communication.
  EXPECT_DOUBLE_EQ(j["devices"][0]["predicted"]["peer_wait_ms"].get<double>(), 130.0);
  EXPECT_EQ(j["schema"], "ringpipe-report/2");
  EXPECT_TRUE(j["timeline"].contains("predicted"));
  EXPECT_FALSE(j["timeline"].contains("measured"));
  EXPECT_FALSE(j["devices"][0].contains("busy_ms"));
  fs::remove_all(dir);
}

TEST(PredictCommand, SixteenThousandDevicesPredictWithoutEmulating) {
  const fs::path dir = TempDir("big");
  const fs::path report = dir / "report.json";
  const Result r = RunBinary("predict --dp=1024 --pp=16 --tp=1 --microbatches=64 --hidden=64x16 "
                             "--report_json=" + report.string(), dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("more devices"), std::string::npos);  // the text table is summarised
  const json j = ReadJson(report);
  EXPECT_EQ(j["layout"]["world"], 16384);
  EXPECT_EQ(j["devices"].size(), 16384u);
  // 1F1B, uniform costs, m = 64, p = 16: the pipeline is (m + p − 1)(F + B) before the all-reduce.
  EXPECT_GE(j["step_time_ms"]["predicted"].get<double>(), 79 * 6.0);
  // `run` refuses what the machine's thread limit cannot hold, naming dp and pointing at predict.
  ASSERT_EQ(::setenv("RINGPIPE_THREAD_LIMIT", "4096", 1), 0);
  const Result refused = RunBinary("run --dp=1024 --pp=16 --tp=1 --hidden=64x16", dir);
  ASSERT_EQ(::unsetenv("RINGPIPE_THREAD_LIMIT"), 0);
  EXPECT_EQ(refused.exit_code, kExitBadInput);
  EXPECT_NE(refused.err.find("--dp: "), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("use `ringpipe predict` for larger layouts"), std::string::npos) << refused.err;
  fs::remove_all(dir);
}

// `predict` counts the real MLP, it does not build it: a model past `run`'s bound (2^28 weights, 1 GiB,
// which a run allocates) is predicted, its gradient all-reduces sized by every weight — a replica's
// ring of 4 sends 2 · 3/4 of its 4-byte gradients — while `run` refuses it naming the field.
TEST(PredictCommand, PredictsAModelTooLargeToRun) {
  const fs::path dir = TempDir("large_model");
  const fs::path report = dir / "report.json";
  const std::string layout = "--input_dim=16 --hidden=8192x8 --classes=10 --dp=4 --pp=4 --tp=1";
  const Result r = RunBinary("predict " + layout + " --report_json=" + report.string(), dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = ReadJson(report);
  const double weights = 16.0 * 8192 + 8192 + 7 * (8192.0 * 8192 + 8192) + 8192.0 * 10 + 10;  // 470 040 586
  ASSERT_GT(weights, double{1 << 28});
  double dp_bytes = 0;
  for (const json& d : j["devices"]) {
    if (d["dp"] == 0) dp_bytes += d["predicted"]["modeled_dp_bytes"].get<double>();
  }
  EXPECT_NEAR(dp_bytes, 2 * 0.75 * 4 * weights, 1e-6 * dp_bytes);
  const Result refused = RunBinary("run " + layout, dir);
  EXPECT_EQ(refused.exit_code, kExitBadInput);
  EXPECT_NE(refused.err.find("--hidden: the model has 469975040 weights; at most 268435456 (1 GiB of fp32)"),
            std::string::npos)
      << refused.err;
  fs::remove_all(dir);
}

// The setup's gradients line names the all-reduce only where one runs: a group of one member (dp 1,
// one direction) all-reduces nothing — the report's wire bytes say so too — while DualPipe's
// mirror all-reduce averages its two copies even at dp 1, and EP's expert buckets use dp / ep.
TEST(PredictCommand, TheGradientsLineSaysWhenNoAllReduceRuns) {
  const fs::path dir = TempDir("groups");
  const fs::path report = dir / "report.json";
  struct Case {
    std::string flags;
    int largest;
  };
  for (const Case& c : {Case{"--dp=1 --pp=2 --tp=2", 1}, Case{"--dp=2 --pp=2 --tp=1", 2},
                        Case{"--dp=1 --pp=4 --tp=1 --schedule=dualpipe --microbatches=8 --hidden=64x8", 2},
                        Case{"--dp=4 --pp=1 --tp=1 --ep=4 --moe_layers=all", 4}}) {
    const Result r = RunBinary("predict " + c.flags + " --report_json=" + report.string(), dir);
    ASSERT_EQ(r.exit_code, 0) << c.flags << ": " << r.err;
    const json j = ReadJson(report);
    EXPECT_EQ(j["collectives"]["largest_group"], c.largest) << c.flags;
    uint64_t dp_bytes = 0;
    for (const json& d : j["devices"]) dp_bytes += d["predicted"]["modeled_dp_bytes"].get<uint64_t>();
    EXPECT_EQ(dp_bytes == 0, c.largest == 1) << c.flags;
    EXPECT_EQ(r.out.find("gradients  none all-reduced") != std::string::npos, c.largest == 1) << r.out;
    EXPECT_EQ(r.out.find("gradients  ring all-reduce") != std::string::npos, c.largest > 1) << r.out;
  }
  fs::remove_all(dir);
}

// The report says how much of the layout the predictor played: one replica, one EP group, or every
// device and why (schedule::ReplicasPlayed, FoldBlockerText).
TEST(PredictCommand, TheReportSaysHowMuchOfTheLayoutThePredictorPlayed) {
  const fs::path dir = TempDir("played");
  const fs::path report = dir / "report.json";
  struct Played {
    std::string flags;
    int replicas, devices;
    std::string line;
  };
  for (const Played& c :
       {Played{"--dp=64 --pp=4 --tp=2", 1, 8, "predictor  played 8 of 512 devices: one replica stands for all 64"},
        Played{"--dp=64 --pp=4 --tp=2 --moe_layers=all --ep=4", 4, 32,
               "predictor  played 32 of 512 devices: the first 4 replicas stand for all 64, every 4 alike"},
        // Nodes of 4 holding two replicas of 2 devices: the layout repeats every 2 replicas.
        Played{"--dp=8 --pp=2 --tp=1", 2, 4, "predictor  played 4 of 16 devices: the first 2 replicas stand for all 8"},
        Played{"--dp=16 --pp=4 --tp=1 --microbatches=8 --schedule=dualpipe", 1, 4,
               "predictor  played 4 of 64 devices: one replica stands for all 16"},
        Played{"--dp=8 --pp=4 --tp=2 --straggler_rank=3 --straggler_factor=2", 8, 64,
               "predictor  played every device: a straggler slows one replica only"},
        Played{"--dp=4 --pp=2 --tp=2 --moe_layers=all --ep=4", 4, 16,
               "predictor  played every device: the EP all-to-alls couple the replicas"}}) {
    const Result r = RunBinary("predict " + c.flags + " --report_json=" + report.string(), dir);
    ASSERT_EQ(r.exit_code, 0) << c.flags << ": " << r.err;
    const json p = ReadJson(report)["predictor"];
    EXPECT_EQ(p["replicas_played"], c.replicas) << c.flags;
    EXPECT_EQ(p["devices_played"], c.devices) << c.flags;
    EXPECT_EQ(p["folded"].get<bool>(), c.line.find(" stand") != std::string::npos) << c.flags;
    EXPECT_EQ(p["not_folded_because"].is_null(), p["folded"].get<bool>()) << c.flags;
    EXPECT_NE(r.out.find(c.line), std::string::npos) << c.flags << "\n" << r.out;
  }
  fs::remove_all(dir);
}

TEST(PredictCommand, FlopsCostModelIsNamedInTheReport) {
  const fs::path dir = TempDir("flops");
  const fs::path report = dir / "report.json";
  const Result r = RunBinary("predict --preset=s3-3d --report_json=" + report.string(), dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = ReadJson(report);
  EXPECT_EQ(j["cost_model"]["kind"], "flops");
  // 16 layers x 24·b·s·h²(1 + s/6h) forward FLOPs, halved by PP and by TP, at 312 x 0.5 TFLOPS.
  const double h = 1024, s = 1024;
  const double fwd_ms = 8 * 24 * s * h * h * (1 + s / (6 * h)) / 2 / (156e12) * 1e3;
  EXPECT_NEAR(j["cost_model"]["stages"][0]["forward_ms"].get<double>(), fwd_ms, 1e-6);
  EXPECT_NE(r.out.find("flops: 16-layer transformer"), std::string::npos);
  fs::remove_all(dir);
}

// The FLOPs model's TP all-reduces are the described transformer's, 2 of b·s·h bf16 values per layer
// each way, whatever TP points the small real MLP has: s3-3d's real stage 0 has none in its backward
// (the model's first layer needs no input gradient), s3-4d's MoE blocks leave their stages none at
// all (every layer replicated). Each device's ring of 2 sends once the pass's bytes: 8 layers × 2 ×
// 1024 × 1024 × 2 B = 32 MiB per pass, × (F + B) × 4 micro-batches = 256 MiB a step, on every stage;
// the run's emulated timeline times the same messages as the prediction.
TEST(PredictCommand, TheFlopsModelsTpBytesDoNotDependOnTheRealModelsTpPoints) {
  const fs::path dir = TempDir("flops_tp");
  const fs::path report = dir / "report.json";
  const double per_step = 8.0 * 2 * 1024 * 1024 * 2 * 2 * 4;
  for (const std::string flags : {"predict --preset=s3-3d", "predict --preset=s3-4d --ep=1",
                                  "predict --preset=s3-4d", "run --preset=s3-4d --virtual_time --steps=1"}) {
    const Result r = RunBinary(flags + " --report_json=" + report.string(), dir);
    ASSERT_EQ(r.exit_code, 0) << flags << "\n" << r.err;
    const json j = ReadJson(report);
    const char* timeline = flags.starts_with("run") ? "emulated" : "predicted";
    ASSERT_EQ(j["devices"].size(), 8u) << flags;
    for (const json& d : j["devices"]) {
      EXPECT_EQ(d[timeline]["modeled_tp_bytes"].get<double>(), per_step) << flags << " rank " << d["rank"];
    }
    if (flags.starts_with("run")) {
      EXPECT_EQ(j["step_time_ms"]["emulated"].get<double>(), j["step_time_ms"]["predicted"].get<double>());
    }
    fs::remove(report);
  }
  fs::remove_all(dir);
}

// Each rank stores the activations of the stages its schedule's placement gives it: a V (zb-v) puts
// stages r and 2p − 1 − r on rank r, the loop (interleaved) r and r + p — read off one stage per rank.
TEST(PredictCommand, StoredActivationsFollowTheSchedulesPlacement) {
  const fs::path dir = TempDir("placement");
  const fs::path report = dir / "report.json";
  auto stages = [&](const std::string& flags) {
    const Result r = RunBinary("predict --dp=1 --tp=1 --hidden=64,64,32,32,64,64,16 " + flags +
                                   " --report_json=" + report.string(),
                               dir);
    EXPECT_EQ(r.exit_code, 0) << flags << "\n" << r.err;
    const json j = ReadJson(report);
    std::vector<double> out;
    for (const json& st : j["cost_model"]["stages"]) out.push_back(st["modeled_activation_bytes"]);
    fs::remove(report);
    return out;
  };
  const std::vector<double> one = stages("--pp=4 --schedule=1f1b");
  ASSERT_EQ(one.size(), 4u);
  EXPECT_NE(one[0] + one[3], one[0] + one[2]);  // the case tells the placements apart
  EXPECT_EQ(stages("--pp=2 --schedule=zb-v --microbatches=4"), (std::vector<double>{one[0] + one[3], one[1] + one[2]}));
  EXPECT_EQ(stages("--pp=2 --schedule=interleaved --virtual_stages=2 --microbatches=4"),
            (std::vector<double>{one[0] + one[2], one[1] + one[3]}));
  fs::remove_all(dir);
}

// The FLOPs model times each chunk op by its own stage's layers, and a rank by the stages its
// program's placement gives it. 14 layers over 8 stages of a V on 4 ranks: stages 0–5 hold 2
// layers, 6 and 7 one; rank r holds stages r and 7 − r, so ranks 0 and 1 hold 3 layers, ranks 2
// and 3 four (the loop placement would give 4, 4, 3, 3).
TEST(PredictCommand, TheFlopsModelTimesEachStageByItsOwnLayers) {
  const fs::path dir = TempDir("flops_stages");
  const fs::path report = dir / "report.json";
  const Result r = RunBinary("predict --cost_model=flops --flops_layers=14 --hidden=64x16 --dp=1 --tp=1 --pp=4 "
                             "--schedule=zb-v --microbatches=8 --optimizer_ms=0 --report_json=" + report.string(),
                             dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = ReadJson(report);
  std::vector<double> forward, stored;
  for (const json& st : j["cost_model"]["stages"]) {
    forward.push_back(st["forward_ms"]);
    stored.push_back(st["modeled_activation_bytes"]);
  }
  ASSERT_EQ(forward.size(), 4u);
  // A rank's F per micro-batch is its two chunks' layers' F.
  const double layer_f = forward[0] / 3;
  EXPECT_NEAR(forward[1], 3 * layer_f, 1e-6);
  EXPECT_NEAR(forward[2], 4 * layer_f, 1e-6);
  EXPECT_NEAR(forward[3], 4 * layer_f, 1e-6);
  EXPECT_EQ(stored[0], stored[1]);
  EXPECT_DOUBLE_EQ(stored[2] / stored[0], 4.0 / 3.0);
  // The busier ranks are 2 and 3 — by a third more compute.
  const json& devs = j["devices"];
  EXPECT_NEAR(devs[2]["predicted"]["busy_ms"].get<double>() / devs[0]["predicted"]["busy_ms"].get<double>(), 4.0 / 3.0,
              1e-6);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rp::apps
