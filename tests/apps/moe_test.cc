// Issue 15 on the apps side: the MoE / EP config fields (moe_layers grammar, validation naming the
// field), `ringpipe alltoall` against its closed form and a serial reference, the s3-4d preset run on
// the virtual clock (emulated == predicted, per-expert tokens in the report), the EP figures of
// `predict` (balanced routing stated), and `ep` as a sweep axis.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "apps/cli.h"
#include "apps/config.h"
#include "apps/moe_config.h"
#include "apps/presets.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/apps/binary_runner.h"

namespace rp::apps {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Result = rp::apps::testing::BinaryResult;

fs::path TempDir(const std::string& name) { return rp::apps::testing::TempDir("ringpipe_moe", name); }
Result RunBinary(const std::string& args, const fs::path& dir) { return rp::apps::testing::RunBinary(args, dir); }

using rp::apps::testing::ReadJson;

RunConfig Hidden(std::vector<int> hidden, const std::string& moe_layers) {
  RunConfig c;
  c.hidden = std::move(hidden);
  c.moe_layers = moe_layers;
  return c;
}

TEST(MoeLayers, NamesLayersByListAllOrEveryN) {
  const std::vector<int> h = {64, 64, 64, 64, 64};  // layers 0..5; 1..4 map 64 -> 64
  EXPECT_EQ(*ResolveMoeLayers(Hidden(h, "")), std::vector<int>{});
  EXPECT_EQ(*ResolveMoeLayers(Hidden(h, "none")), std::vector<int>{});
  EXPECT_EQ(*ResolveMoeLayers(Hidden(h, "all")), (std::vector<int>{1, 2, 3, 4}));
  EXPECT_EQ(*ResolveMoeLayers(Hidden(h, "every:2")), (std::vector<int>{2, 4}));
  EXPECT_EQ(*ResolveMoeLayers(Hidden(h, "every:3")), (std::vector<int>{3}));
  EXPECT_EQ(*ResolveMoeLayers(Hidden(h, " 1, 3 ")), (std::vector<int>{1, 3}));
  // "all" skips the layers that change width: 64,32,32 -> only layer 2 maps 32 -> 32.
  EXPECT_EQ(*ResolveMoeLayers(Hidden({64, 32, 32}, "all")), (std::vector<int>{2}));
  for (const char* bad : {"every:0", "every:x", "some", "2,x", "3,2", "2,2"}) {
    auto r = ResolveMoeLayers(Hidden(h, bad));
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(std::string(r.status().message()).rfind("moe_layers: ", 0), 0u) << r.status();
  }
  EXPECT_FALSE(ResolveMoeLayers(Hidden({64, 32}, "all")).ok());  // no eligible layer
  // A config file may give a list or one index.
  RunConfig c;
  ASSERT_TRUE(SetField(c, "moe_layers", json::array({2, 4})).ok());
  EXPECT_EQ(c.moe_layers, "2,4");
  ASSERT_TRUE(SetField(c, "moe_layers", json(3)).ok());
  EXPECT_EQ(c.moe_layers, "3");
  EXPECT_FALSE(SetField(c, "moe_layers", json::array({"a"})).ok());
  EXPECT_EQ(c.Mlp().moe.layers, std::vector<int>{3});
}

TEST(MoeConfig, TheS34dPresetIsTheS33dLadderRungWithMoeAndEp) {
  auto c4 = PresetByName("s3-4d");
  auto c3 = PresetByName("s3-3d");
  ASSERT_TRUE(c4.ok() && c3.ok());
  EXPECT_EQ(c4->dp * c4->microbatches, c3->dp * c3->microbatches);  // the same global batch
  EXPECT_EQ(c4->world_size(), c3->world_size());
  EXPECT_EQ(c4->ep, 2);
  EXPECT_EQ(c4->Mlp().moe.layers, (std::vector<int>{2, 4}));
  EXPECT_TRUE(ValidateConfig(*c4, /*for_run=*/true).ok());
  // A real token row stands for the described model's 1024 x 1 / 32 tokens of 1024 bf16 values.
  EXPECT_EQ(EpRowBytes(*c4), 32u * 1024 * 2);
  c4->ep_row_bytes = 4096;
  EXPECT_EQ(EpRowBytes(*c4), 4096u);
}

// Every bad MoE / EP input: exit 2, one line naming the field, no file written (run and predict).
TEST(MoeBinary, BadInputExitsTwoWithOneLineNamingTheFieldAndWritesNothing) {
  const fs::path dir = TempDir("bad");
  const fs::path report = dir / "r.json";
  struct Case {
    std::string args;
    std::string field;
    std::string says;
  } cases[] = {
      {"--preset=s3-4d --experts=6 --ep=4 --dp=4 --microbatches=2", "ep", "does not divide experts=6"},
      {"--preset=s3-4d --dp=3", "ep", "dp=3 is not a multiple of ep=2"},
      {"--preset=s3-4d --experts=1 --ep=1", "top_k", "more than experts=1"},
      {"--preset=s3-4d --top_k=3", "top_k", "1..2"},
      {"--preset=s3-4d --capacity_factor=-0.5", "capacity_factor", ">= 0"},
      {"--preset=s3-4d --aux_loss=-1", "aux_loss", "must be in [0, 1000], got -1"},
      {"--preset=s3-4d --router_skew=-1", "router_skew", "must be in [0, 10000], got -1"},
      {"--preset=s3-3d --ep=2", "ep", "needs MoE layers"},
      {"--preset=s3-4d --moe_layers=none", "ep", "needs MoE layers"},
      {"--preset=s3-4d --moe_layers=2,9", "moe_layers", "layer 9"},
      {"--preset=s3-4d --moe_layers=every:x", "moe_layers", "every:N"},
      {"--preset=s3-4d --hidden=64,32 --pp=1", "moe_layers", "selects no layer"},
      {"--preset=s3-4d --ep_row_bytes=6", "ep_row_bytes", "multiple of 4"},
      // The FLOPs model's derived row is already bf16: a lossy EP codec would encode it twice.
      {"--preset=s3-4d --ep_codec=int8", "ep_codec", "set ep_row_bytes to the row in fp32 (131072)"},
      {"--preset=s3-4d --ep_codec=fp8", "ep_codec", "fp32"},
      {"--preset=s3-4d --experts=0", "experts", "1..65536"},
      {"--preset=s3-4d --moe_init=xavier", "moe_init", "unknown MoE init 'xavier' (he, scaled)"},
  };
  for (const char* sub : {"predict", "run --virtual_time"}) {
    for (const Case& c : cases) {
      const std::string args = std::string(sub) + " " + c.args + " --report_json=" + report.string();
      const Result r = RunBinary(args, dir);
      EXPECT_EQ(r.exit_code, kExitBadInput) << args << "\n" << r.err;
      const std::vector<std::string> lines = absl::StrSplit(r.err, '\n', absl::SkipEmpty());
      ASSERT_EQ(lines.size(), 1u) << args << "\n" << r.err;
      EXPECT_NE(lines[0].find(c.field + ": "), std::string::npos) << args << "\n" << r.err;
      EXPECT_NE(lines[0].find(c.says), std::string::npos) << args << "\n" << r.err;
      EXPECT_TRUE(r.out.empty()) << args;
      EXPECT_FALSE(fs::exists(report)) << args;
    }
  }
  fs::remove_all(dir);
}

// On one node of a link preset every pair is one link class: the emulated time equals the closed
// form of docs/collectives.md "All-to-all" to the nanosecond, for several n, and nothing is wrong.
TEST(MoeBinary, AllToAllOnALinkPresetEqualsTheClosedFormWithNoWrongElement) {
  const fs::path dir = TempDir("alltoall");
  const fs::path rows_json = dir / "rows.json";
  for (const int n : {2, 3, 5, 8}) {
    const std::string cmd = "alltoall --link=dgx-a100 --ranks=" + std::to_string(n) +
                            " --min_bytes=64K --max_bytes=1M --segment_bytes=16K,1M --iters=2 --warmup=1 --json=" +
                            rows_json.string();
    const Result r = RunBinary(cmd, dir);
    ASSERT_EQ(r.exit_code, 0) << cmd << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find("# #wrong total: 0"), std::string::npos) << r.out;
    const json rows = ReadJson(rows_json);
    ASSERT_EQ(rows.size(), 6u) << rows.dump();  // 64K, 256K, 1M x two segment sizes
    for (const json& row : rows) {
      EXPECT_EQ(row["wrong"], 0) << row.dump();
      EXPECT_EQ(row["time"], "emulated");
      EXPECT_EQ(row["count"].get<uint64_t>() % static_cast<uint64_t>(n), 0u);
      ASSERT_TRUE(row["formula_us"].is_number()) << row.dump();
      EXPECT_DOUBLE_EQ(row["time_us"].get<double>(), row["formula_us"].get<double>()) << n << " " << row.dump();
      EXPECT_DOUBLE_EQ(row["busbw_gbps"].get<double>(), row["algbw_gbps"].get<double>() * (n - 1) / n);
    }
    if (n == 8) {
      // 1 MiB, one message per block of 128 KiB: 7 steps of α 3 us + o 0.4 us + 131072 B / 300 GB/s.
      const json& last = rows[5];
      ASSERT_EQ(last["bytes"], 1048576);
      ASSERT_EQ(last["segment_bytes"], 1048576);
      EXPECT_NEAR(last["time_us"].get<double>(), 7 * (3 + 0.4 + 131072 / 300e3), 0.01);
      // FP32 on the wire: each rank sends its 7 other blocks.
      EXPECT_EQ(last["wire_bytes_per_rank"], 7 * 131072);
    }
  }
  // Across nodes the pairs mix link classes: no closed form, still exact results.
  const Result cross = RunBinary("alltoall --link=dgx-h100 --ranks=12 --min_bytes=48K --max_bytes=48K --iters=1 "
                                 "--warmup=0 --json=" + rows_json.string(), dir);
  ASSERT_EQ(cross.exit_code, 0) << cross.out << cross.err;
  EXPECT_TRUE(ReadJson(rows_json)[0]["formula_us"].is_null());
  // The host path with every codec: received blocks equal the serial reference.
  for (const char* codec : {"fp32", "fp16", "bf16", "int8"}) {
    const Result r = RunBinary(std::string("alltoall --ranks=3 --min_bytes=4 --max_bytes=64K --iters=2 --warmup=1 "
                                           "--segment_bytes=4K --codec=") + codec + " --json=" + rows_json.string(),
                               dir);
    ASSERT_EQ(r.exit_code, 0) << codec << "\n" << r.out << r.err;
    const json rows = ReadJson(rows_json);
    EXPECT_EQ(rows.size(), 7u);  // 4 and 16 bytes are both 12 B (3 elements): measured once
    for (const json& row : rows) EXPECT_EQ(row["wrong"], 0) << codec << " " << row.dump();
    EXPECT_EQ(rows[0]["count"], 3);  // 4 bytes: at least one element per block
  }
  fs::remove_all(dir);
}

// 15 blocks of --hidden=64x16 with the plain He init overflow fp32 at the first step (the DP
// all-reduce finds it); the failure names moe_init among the knobs, and the scaled init trains.
TEST(MoeBinary, ADeepStackOverflowsWithHeAndTrainsWithTheScaledInit) {
  const fs::path dir = TempDir("deep");
  const fs::path report = dir / "r.json";
  const std::string deep = "run --virtual_time --steps=3 --dp=2 --pp=1 --tp=1 --moe_layers=all --hidden=64x16";
  const Result he = RunBinary(deep, dir);
  EXPECT_EQ(he.exit_code, 3) << he.err;
  EXPECT_NE(he.err.find("try a smaller --lr (now 0.05), or --moe_init=scaled (now he)"), std::string::npos) << he.err;
  const Result scaled = RunBinary(deep + " --moe_init=scaled --report_json=" + report.string(), dir);
  ASSERT_EQ(scaled.exit_code, 0) << scaled.err;
  EXPECT_NE(scaled.out.find("W2 init scaled by 1/sqrt(blocks)"), std::string::npos) << scaled.out;
  const json j = ReadJson(report);
  EXPECT_EQ(j["moe"]["init"], "scaled");
  EXPECT_EQ(j["moe"]["layers"].size(), 15u);
  for (const json& s : j["steps"]) EXPECT_LT(s["loss"].get<double>(), 10.0) << s.dump();
  fs::remove_all(dir);
}

// The preset as it is, and with DualPipe's two directions (each expert shard held twice).
TEST(MoeBinary, S34dRunOnTheVirtualClockEmulatesThePredictionAndReportsEveryExpert) {
  for (const std::string schedule : {"", " --schedule=dualpipe"}) {
    SCOPED_TRACE(schedule);
    const fs::path dir = TempDir("s34d");
    const fs::path report = dir / "r.json";
    const Result r =
        RunBinary("run --preset=s3-4d --virtual_time --steps=2 --report_json=" + report.string() + schedule, dir);
    ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
    EXPECT_EQ(r.out.find("dualpipe") != std::string::npos, !schedule.empty()) << r.out;
    EXPECT_NE(r.out.find("experts of layer 2"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("EP all-to-all: peer wait"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("ASSUMED"), std::string::npos) << r.out;  // a run predicts its own routing
    const json j = ReadJson(report);
    EXPECT_EQ(j["layout"]["ep"], 2);
    EXPECT_EQ(j["moe"]["balanced_routing_assumed"], false);
    EXPECT_EQ(j["moe"]["layers"], json::array({2, 4}));
    EXPECT_EQ(j["step_time_ms"]["emulated"].get<double>(), j["step_time_ms"]["predicted"].get<double>());
    const int64_t global_batch = j["schedule"]["global_batch"];
    ASSERT_EQ(j["steps"].size(), 2u);
    for (const json& s : j["steps"]) {
      EXPECT_EQ(s["emulated_ms"].get<double>(), s["predicted_ms"].get<double>()) << s.dump();
      ASSERT_EQ(s["moe"].size(), 2u) << s.dump();
      for (const json& b : s["moe"]) {
        const std::vector<int64_t> tokens = b["expert_tokens"];
        ASSERT_EQ(tokens.size(), 4u);
        // Every token's top-2 slots are kept by an expert or dropped by the capacity.
        EXPECT_EQ(std::accumulate(tokens.begin(), tokens.end(), int64_t{0}) + b["dropped"].get<int64_t>(),
                  2 * global_batch)
            << b.dump();
      }
    }
    for (const json& d : j["devices"]) {
      EXPECT_GT(d["modeled_ep_bytes"].get<uint64_t>(), 0u) << d.dump();
      EXPECT_GT(d["real"]["ep_bytes"].get<uint64_t>(), 0u);
      EXPECT_GE(d["ep_peer_wait_ms"].get<double>(), 0);
      EXPECT_EQ(d["emulated"]["ep_peer_wait_ms"], d["predicted"]["ep_peer_wait_ms"]) << d.dump();
      EXPECT_EQ(d["emulated"]["peer_wait_ms"], d["predicted"]["peer_wait_ms"]) << d.dump();
    }
    // The timeline shows the all-to-alls' transfers; the reader still draws the report.
    const std::string text = j["timeline"]["emulated"].dump();
    EXPECT_NE(text.find("ep_alltoall"), std::string::npos);
    const Result tl =
        RunBinary("timeline --from_report=" + report.string() + " --out=" + (dir / "t.svg").string(), dir);
    EXPECT_EQ(tl.exit_code, 0) << tl.err;
    fs::remove_all(dir);
  }
}

// A lossy EP wire format: the EP line and the JSON name it; emulated == predicted, EP bytes too;
// the DP gradients keep `codec`.
TEST(MoeBinary, EpCodecIsNamedOnTheEpLineAndTheRunStillMatchesItsPrediction) {
  const fs::path dir = TempDir("ep_codec");
  const fs::path report = dir / "r.json";
  const Result r = RunBinary("run --preset=s3-4d --virtual_time --steps=1 --ep_codec=bf16 --ep_row_bytes=128K "
                             "--report_json=" + report.string(), dir);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("all-to-all of token rows in bf16 (ep_codec), a row = 131.1 kB modeled at fp32"),
            std::string::npos) << r.out;
  const json j = ReadJson(report);
  EXPECT_EQ(j["moe"]["ep_codec"], "bf16");
  EXPECT_EQ(j["collectives"]["codec"], "fp32");
  EXPECT_EQ(j["step_time_ms"]["emulated"].get<double>(), j["step_time_ms"]["predicted"].get<double>());
  for (const json& d : j["devices"]) {
    EXPECT_GT(d["modeled_ep_bytes"].get<uint64_t>(), 0u) << d.dump();
    EXPECT_EQ(d["modeled_ep_bytes"], d["predicted"]["modeled_ep_bytes"]) << d.dump();
  }
  // The default stays fp32 and says so.
  const Result p = RunBinary("predict --preset=s3-4d --report_json=" + report.string(), dir);
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_NE(p.out.find("token rows in fp32 (ep_codec)"), std::string::npos) << p.out;
  EXPECT_EQ(ReadJson(report)["moe"]["ep_codec"], "fp32");
  fs::remove_all(dir);
}

// One step: the modeled EP bytes the predictor's fabric timed are the run's, device by device.
TEST(MoeBinary, OneStepRunAndItsPredictionPutTheSameEpBytesOnTheWire) {
  const fs::path dir = TempDir("s34d_bytes");
  const fs::path report = dir / "r.json";
  const Result r = RunBinary("run --preset=s3-4d --virtual_time --steps=1 --report_json=" + report.string(), dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const json& d : ReadJson(report)["devices"]) {
    EXPECT_EQ(d["modeled_ep_bytes"], d["predicted"]["modeled_ep_bytes"]) << d.dump();
    EXPECT_EQ(d["modeled_wire_bytes"], d["predicted"]["modeled_wire_bytes"]) << d.dump();
  }
  fs::remove_all(dir);
}

TEST(MoeBinary, PredictSaysItAssumedBalancedRouting) {
  const fs::path dir = TempDir("predict");
  const fs::path report = dir / "r.json";
  const Result r = RunBinary("predict --preset=s3-4d --report_json=" + report.string(), dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("balanced routing ASSUMED"), std::string::npos) << r.out;
  const json j = ReadJson(report);
  EXPECT_EQ(j["moe"]["balanced_routing_assumed"], true);
  for (const json& d : j["devices"]) EXPECT_GT(d["predicted"]["modeled_ep_bytes"].get<uint64_t>(), 0u);
  // Without EP there is no all-to-all: no MoE section, no EP bytes.
  ASSERT_EQ(RunBinary("predict --preset=s3-3d --report_json=" + report.string(), dir).exit_code, 0);
  const json k = ReadJson(report);
  EXPECT_FALSE(k.contains("moe"));
  EXPECT_EQ(k["devices"][0]["predicted"]["modeled_ep_bytes"], 0);
  fs::remove_all(dir);
}

// The EP line counts the groups of replicas a user carves out of DP (dp / ep of them), not the EP
// communicators of every (group, pp, tp): dp = 8, ep = 2, pp = 2, tp = 2 said "16 EP groups carved out
// of DP", which reads as 16 groups taken from 8 replicas.
TEST(MoeBinary, TheEpLineCountsTheGroupsOfReplicasCarvedOutOfDp) {
  const fs::path dir = TempDir("ep_groups");
  const fs::path report = dir / "r.json";
  const Result r = RunBinary("predict --dp=8 --ep=2 --pp=2 --tp=2 --moe_layers=all --devices_per_node=8 "
                             "--report_json=" + report.string(), dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("  EP         2 (4 EP groups of 2 replicas carved out of DP=8, per pipeline stage and TP "
                       "shard: 16 in all;"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(ReadJson(report)["moe"]["ep_groups"], 16);  // the JSON keeps its count of communicators
  // One pipeline stage, no TP: nothing to multiply.
  const Result one = RunBinary("predict --dp=4 --ep=4 --pp=1 --tp=1 --moe_layers=all", dir);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_NE(one.out.find("  EP         4 (1 EP group of 4 replicas carved out of DP=4; all-to-all"), std::string::npos)
      << one.out;
  fs::remove_all(dir);
}

// --segment_bytes cuts the EP all-to-alls' token blocks too (schedule/runner_ep.cc and the predictor
// take the plan's ring_segment_bytes): 64-byte segments pay the overhead o per 64 bytes and expose more
// of the exchange. The help said "per ring message of the TP and DP all-reduces" only.
TEST(MoeBinary, SegmentBytesCutTheEpAllToAllsAndTheHelpSaysSo) {
  const fs::path dir = TempDir("segment");
  const std::string base = "predict --dp=2 --ep=2 --pp=2 --tp=1 --moe_layers=all --report_json=" + (dir / "r.json").string();
  double exposed[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    const Result r = RunBinary(base + (i == 0 ? " --segment_bytes=0" : " --segment_bytes=64"), dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json report = ReadJson(dir / "r.json");
    for (const json& d : report["devices"]) {
      exposed[i] = std::max(exposed[i], d["predicted"]["ep_exposed_comm_ms"].get<double>());
    }
  }
  EXPECT_GT(exposed[1], 2 * exposed[0]) << exposed[0] << " " << exposed[1];
  for (const char* sub : {"run", "predict"}) {
    const Result help = RunBinary(std::string(sub) + " --help", dir);
    ASSERT_EQ(help.exit_code, 0) << help.err;
    const size_t at = help.out.find("--segment_bytes=");
    ASSERT_NE(at, std::string::npos) << help.out;
    // The flag's help, its wrapped lines joined by single spaces.
    const std::string text = std::regex_replace(help.out.substr(at, help.out.find("\n  --", at + 1) - at),
                                                std::regex("\\s+"), " ");
    EXPECT_NE(text.find("per message of the EP all-to-alls' token blocks"), std::string::npos) << text;
  }
  fs::remove_all(dir);
}

// A run's EP line gives the prediction of each figure it measures: the peer wait had one in brackets,
// the exposed transfer did not (the JSON holds both; on the virtual clock they are equal).
TEST(MoeBinary, TheEpLineOfARunBracketsThePredictedExposedTransfer) {
  const fs::path dir = TempDir("ep_line");
  const Result r = RunBinary("run --dp=2 --ep=2 --pp=2 --tp=1 --moe_layers=all --microbatches=2 --steps=1 "
                             "--virtual_time --reference=false --devices_per_node=1",
                             dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(exposed transfer up to ([0-9.]+) \[([0-9.]+)\] ms)")))
      << r.out;
  EXPECT_EQ(m[1].str(), m[2].str());
  EXPECT_GT(std::stod(m[1].str()), 0);
  fs::remove_all(dir);
}

TEST(MoeBinary, EpIsASweepAxis) {
  const fs::path dir = TempDir("sweep");
  for (const char* mode : {"--predict_only", "--virtual_time --steps=1"}) {
    const Result r = RunBinary(std::string("sweep --preset=s3-4d ") + mode + " --axis=ep=1,2 --out_dir=" +
                                   (dir / "out").string(),
                               dir);
    ASSERT_EQ(r.exit_code, 0) << mode << "\n" << r.err << r.out;
    std::ifstream f(dir / "out" / "sweep.csv");
    std::vector<std::vector<std::string>> csv;
    for (std::string line; std::getline(f, line);) csv.push_back(absl::StrSplit(line, ','));
    ASSERT_EQ(csv.size(), 3u);
    const auto col = std::find(csv[0].begin(), csv[0].end(), "ep") - csv[0].begin();
    const auto status = std::find(csv[0].begin(), csv[0].end(), "status") - csv[0].begin();
    ASSERT_LT(static_cast<size_t>(col), csv[0].size());
    EXPECT_EQ(csv[1][static_cast<size_t>(col)], "1");
    EXPECT_EQ(csv[2][static_cast<size_t>(col)], "2");
    EXPECT_EQ(csv[1][static_cast<size_t>(status)], "ok");
    EXPECT_EQ(csv[2][static_cast<size_t>(status)], "ok");
    if (std::string(mode).find("virtual_time") != std::string::npos) {
      // A point that ran is predicted with its own routing, as `run` reports it: emulated == predicted.
      const auto emulated = std::find(csv[0].begin(), csv[0].end(), "step_ms_emulated") - csv[0].begin();
      const auto predicted = std::find(csv[0].begin(), csv[0].end(), "step_ms_predicted") - csv[0].begin();
      for (size_t row : {1u, 2u}) {
        EXPECT_EQ(csv[row][static_cast<size_t>(emulated)], csv[row][static_cast<size_t>(predicted)]) << row;
      }
    }
  }
  fs::remove_all(dir);
}

// A failing EP all-to-all names its site (rank, coordinates, step, op) once. Eight MoE blocks of 2
// experts at top-2 diverge (with ep = 1 too: the model, not EP); with fp16 token rows a value
// leaves fp16's range in an EP dispatch, whose all-to-all fails encoding it. Its site was prefixed
// twice ("rank 5 (dp 2, pp 1, tp 0) step 2 op B3: rank 5 (dp 2, pp 1, tp 0) step 2 op B3: ...").
TEST(MoeRun, AFailedEpAllToAllNamesItsSiteOnce) {
  const fs::path dir = TempDir("ep_failure");
  const Result r = RunBinary("run --virtual_time --steps=3 --dp=4 --pp=2 --tp=1 --moe_layers=all --ep=2 --experts=2 "
                             "--top_k=2 --hidden=64x9 --ep_codec=fp16", dir);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  ASSERT_NE(r.err.find("all-to-all-v"), std::string::npos) << r.err;  // an EP all-to-all failed
  EXPECT_NE(r.err.find("encoding for rank"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("aborted because"), std::string::npos) << r.err;  // the failure, not a consequence
  const std::regex twice(R"((rank \d+ \(dp \d+, pp \d+, tp \d+\) step \d+ op [^ ]+: )\1)");
  EXPECT_FALSE(std::regex_search(r.err, twice)) << r.err;
  fs::remove_all(dir);
}

// A run that fails with MoE blocks on some stages only (layer 2 of 64x4 is on stage 0 of 2): the
// expert groups of the other stage have no communicator, and aborting every communicator on the
// failure crashed on them (exit 139 for any injected fault with ep > 1; found trying faults with
// EP). Each schedule kind's failure is reported as any other: exit 3 naming the site.
TEST(MoeRun, AFaultInARunWithExpertsOnSomeStagesIsReported) {
  const fs::path dir = TempDir("ep_fault");
  struct Case {
    const char* flags;
    const char* says;
  };
  for (const Case& c : {Case{"--schedule=1f1b --fault=throw:rank=0,step=0,op=0", "injected fault: throw at step 0 op 0"},
                        Case{"--schedule=dualpipev --fault=throw:rank=1,step=1,op=2",
                             "injected fault: throw at step 1 op 2"},
                        Case{"--schedule=dualpipe --fault=stall:rank=1,step=1,op=2 --watchdog_timeout=0.5",
                             "watchdog: no device made progress"}}) {
    const Result r = RunBinary(std::string("run --virtual_time --steps=3 --dp=2 --pp=2 --tp=1 --ep=2 --moe_layers=2 "
                                           "--hidden=64x4 --microbatches=4 ") + c.flags,
                               dir);
    EXPECT_EQ(r.exit_code, 3) << c.flags << "\n" << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.flags << "\n" << r.err;
  }
  fs::remove_all(dir);
}

// The same model with FP32 rows and FP16 gradients: a gradient past FP16's range reaches a DP
// all-reduce first (its ring refuses to encode it), and the EP all-to-alls waiting on that replica
// are released by the abort. A released wait can reach the watchdog before the failure itself (the
// ring runs in whichever thread commits): the report still heads with the failure that caused the
// others, not with a consequence. (With FP32 gradients the model's first non-finite value is now
// the last stage's loss at step 2, on a device thread: no ring fails first.)
TEST(MoeRun, TheReportHeadsWithTheFailureNotAWaitItReleased) {
  const fs::path dir = TempDir("ep_root");
  const Result r = RunBinary("run --virtual_time --steps=3 --dp=4 --pp=2 --tp=1 --moe_layers=all --ep=2 --experts=2 "
                             "--top_k=2 --hidden=64x9 --codec=fp16", dir);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  const std::regex head(
      R"(ringpipe run: rank \d+ step 1 gradient bucket \d+ \(DP all-reduce\): .* is outside the fp16 range)");
  EXPECT_TRUE(std::regex_search(r.err, head)) << r.err;
  EXPECT_EQ(r.err.find("aborted because"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rp::apps
