// `ringpipe run` and `ringpipe predict` as a user sees them: exit codes, one-line errors that name
// the field, no partial outputs, the documented report keys, the reference scenarios' numbers.
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "apps/cli.h"
#include "gtest/gtest.h"
#include "tests/apps/binary_runner.h"
#include "nlohmann/json.hpp"

namespace rp::apps {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

using Result = rp::apps::testing::BinaryResult;
using rp::apps::testing::RunBinary;

fs::path TempDir(const std::string& name) {
  return rp::apps::testing::TempDir("ringpipe_run_test", name);
}

json ReadJson(const fs::path& p) {
  std::ifstream f(p);
  return json::parse(f);
}

TEST(RunCommand, BadInputExitsTwoWithOneLineNamingTheFieldAndWritesNothing) {
  const fs::path dir = TempDir("bad");
  const fs::path report = dir / "report.json", trace = dir / "trace.json";
  const fs::path malformed = dir / "malformed.json", unknown = dir / "unknown.json", typed = dir / "typed.json";
  std::ofstream(malformed) << "{\n  \"dp\": 2,\n  \"pp\": ,\n}\n";
  std::ofstream(unknown) << "{\n  \"dp\": 2,\n  \"layerz\": 3\n}\n";
  std::ofstream(typed) << "{\n  \"microbatches\": [4]\n}\n";
  struct Case {
    std::string args;
    std::string field;
  } cases[] = {
      {"run --preset=nope", "--preset"},
      {"run --pp=7", "--pp"},
      {"run --microbatches=0", "--microbatches"},
      {"run --tp=3", "--tp"},
      {"run --hidden=30,64 --pp=1 --tp=4", "--tp"},  // layer 0 is column-parallel, width 30
      {"run --forward_ms=1,2,3", "--forward_ms"},
      {"run --config=" + (dir / "missing.json").string(), "--config"},
      {"run --config=" + malformed.string(), malformed.string() + ":3: malformed JSON"},
      {"run --config=" + unknown.string(), unknown.string() + ":3: layerz: unknown key"},
      {"run --config=" + typed.string(), typed.string() + ":2: microbatches: expected an integer"},
      {"run --schedule=pipedream", "--schedule"},
      {"run --bogus=1", "--bogus"},
      {"predict --microbatches=0", "--microbatches"},
      {"predict --pp=7", "--pp"},
      {"predict --trace=x.json", "--trace"},
  };
  for (const Case& c : cases) {
    const bool run = c.args.rfind("run", 0) == 0;
    const Result r = RunBinary(
        c.args + " --report_json=" + report.string() + (run ? " --trace=" + trace.string() : ""), dir);
    EXPECT_EQ(r.exit_code, kExitBadInput) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.field), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.args << "\n" << r.err;
    EXPECT_TRUE(r.out.empty()) << c.args << "\n" << r.out;
    EXPECT_FALSE(fs::exists(report)) << c.args;
    EXPECT_FALSE(fs::exists(trace)) << c.args;
    fs::remove(report);
    fs::remove(trace);
  }
  fs::remove_all(dir);
}

TEST(RunCommand, DefaultRunTrainsFarAboveChanceAndWritesEveryDocumentedKey) {
  const fs::path dir = TempDir("default");
  const fs::path report = dir / "report.json", trace = dir / "trace.json";
  // The default preset on the virtual clock: the same run as `ringpipe run`, without the wall time.
  const Result r = RunBinary("run --virtual_time=true --report_json=" + report.string() +
                                 " --trace=" + trace.string(), dir);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  for (const char* text : {"step time", "fidelity", "speedup", "replica divergence", "held-out accuracy",
                           "wait lateness", "rank 0 |"}) {
    EXPECT_NE(r.out.find(text), std::string::npos) << text;
  }
  const json j = ReadJson(report);
  for (const char* key : {"schema", "mode", "config", "layout", "schedule", "cost_model", "links", "codec",
                          "segment_bytes", "step_time_ms", "fidelity", "t1_ms", "speedup", "efficiency",
                          "replica_divergence", "training", "steps", "devices", "host"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["mode"], "run");
  EXPECT_TRUE(j["step_time_ms"].contains("measured"));
  EXPECT_TRUE(j["step_time_ms"].contains("predicted"));
  EXPECT_EQ(j["layout"]["world"], 8);
  ASSERT_EQ(j["devices"].size(), 8u);
  for (const json& d : j["devices"]) {
    for (const char* key : {"rank", "dp", "pp", "tp", "node", "busy_ms", "bubble_total", "bubble_ideal",
                            "exposed_comm_ms", "overlap", "peak_activation_bytes", "wire_bytes", "overruns",
                            "predicted"}) {
      EXPECT_TRUE(d.contains(key)) << key;
    }
    EXPECT_GT(d["wire_bytes"].get<double>(), 0);
  }
  for (const char* key : {"overruns", "wait_lateness_ms", "wall_seconds", "clock_waits"}) EXPECT_TRUE(j["host"].contains(key));
  ASSERT_EQ(j["steps"].size(), static_cast<size_t>(j["config"]["steps"].get<int>()));
  for (const json& s : j["steps"]) {
    EXPECT_TRUE(s["predicted_ms"].is_number());
    EXPECT_TRUE(s["loss"].is_number());
    EXPECT_TRUE(s["accuracy"].is_number());
  }
  const double acc = j["training"]["final_test_accuracy"].get<double>();
  const double chance = j["training"]["chance_accuracy"].get<double>();
  EXPECT_GT(acc, 0.5) << "chance " << chance;
  EXPECT_GT(acc, 3 * chance);
  EXPECT_EQ(j["replica_divergence"].get<double>(), 0.0);
  // On the virtual clock every op ends exactly at its modeled time: measured = predicted.
  EXPECT_NEAR(j["fidelity"].get<double>(), 0.0, 1e-9);
  const json t = ReadJson(trace);
  EXPECT_TRUE(t.contains("traceEvents") || t.is_array());
  fs::remove_all(dir);
}

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
  EXPECT_FALSE(j["devices"][0].contains("busy_ms"));
  fs::remove_all(dir);
}

TEST(RunCommand, ScenarioS1OnTheVirtualClockMeasuresThePredictedStep) {
  const fs::path dir = TempDir("s1run");
  const fs::path report = dir / "report.json";
  const Result r = RunBinary("run --preset=s1 --virtual_time=true --steps=2 --report_json=" + report.string(), dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = ReadJson(report);
  // The preset models every transfer as 20 ms (d). Stage 0 starts B0 at F + d + (F + B) + d = 220;
  // from then on each pair of micro-batches costs 2(F + B) + 2d = 300 ms (two in flight), so B7
  // starts at 220 + 3 x 300 + 130 = 1250 and ends at 1330; the 2-replica ring adds 2 x 20 = 40.
  EXPECT_DOUBLE_EQ(j["step_time_ms"]["measured"].get<double>(), 1370.0);
  EXPECT_DOUBLE_EQ(j["step_time_ms"]["predicted"].get<double>(), 1370.0);
  EXPECT_NEAR(j["speedup"]["measured"].get<double>(), 4160.0 / 1370.0, 1e-9);
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
  // The same layout is refused by `run`.
  EXPECT_EQ(RunBinary("run --dp=1024 --pp=16 --tp=1 --hidden=64x16", dir).exit_code, kExitBadInput);
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

TEST(RunCommand, HelpListsTheRunFlags) {
  const fs::path dir = TempDir("help");
  const Result r = RunBinary("run --help", dir);
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag : {"--preset", "--config", "--dp", "--pp", "--tp", "--microbatches", "--schedule",
                           "--virtual_stages", "--forward_ms", "--backward_ms", "--weight_grad_ms", "--codec",
                           "--segment_bytes", "--link", "--alpha_us", "--bandwidth_gbps", "--time_scale",
                           "--steps", "--seed", "--report_json", "--trace", "--cost_model", "--flops_device"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rp::apps
