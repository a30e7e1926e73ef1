// `ringpipe sweep` and `ringpipe timeline` as a user sees them: the CSV header is exactly the list
// documented in docs/studies.md, a sweep survives an impossible point (reported, exit 4), bad axes exit
// 2 writing nothing, grids and linked axes give the closed-form numbers, the charts are well-formed SVG
// with the measured and predicted series, and a timeline drawn from a saved report is the same file.
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
using rp::apps::testing::RunBinary;

fs::path TempDir(const std::string& name) {
  return rp::apps::testing::TempDir("ringpipe_sweep_test", name);
}

using rp::apps::testing::ReadFile;

using rp::apps::testing::Cell;
using rp::apps::testing::ReadCsv;

// The column list documented in docs/studies.md: the line after "<!-- sweep-csv-columns -->".
std::vector<std::string> DocumentedColumns() {
  const std::string doc = ReadFile(fs::path(RINGPIPE_SOURCE_DIR) / "docs" / "studies.md");
  const std::string marker = "<!-- sweep-csv-columns -->";
  size_t at = doc.find(marker);
  if (at == std::string::npos) return {};
  at = doc.find("```", at);
  at = doc.find('\n', at) + 1;
  const std::string line = doc.substr(at, doc.find('\n', at) - at);
  return absl::StrSplit(line, ',');
}

TEST(SweepCommand, CsvHeaderIsTheDocumentedColumnList) {
  const fs::path dir = TempDir("header");
  const Result r = RunBinary("sweep --preset=s1 --predict_only --axis=microbatches=2,4 --out_dir=" + dir.string(), dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto csv = ReadCsv(dir / "sweep.csv");
  ASSERT_EQ(csv.size(), 3u);
  const std::vector<std::string> documented = DocumentedColumns();
  ASSERT_FALSE(documented.empty()) << "docs/studies.md lost its column list";
  EXPECT_EQ(csv[0], documented);
  const json j = json::parse(ReadFile(dir / "sweep.json"));
  EXPECT_EQ(j["schema"], "ringpipe-sweep/2");
  EXPECT_EQ(j["columns"].get<std::vector<std::string>>(), documented);
  // The table's header says its one number is the prediction (it said "step ms (meas / pred)" over
  // predicted values alone).
  EXPECT_NE(r.out.find("step ms (predicted)"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("meas / pred"), std::string::npos) << r.out;
  // Predict-only: the measured columns are empty, the predicted ones are the S1 preset's numbers.
  EXPECT_EQ(Cell(csv, 1, "step_ms_measured"), "");
  EXPECT_EQ(Cell(csv, 2, "step_ms_predicted"), "770");  // m = 4: 5 x 130 + 3 transfers of 20 + 40
}

// Every CSV column has its value in sweep.json (docs/studies.md: the JSON holds "the same"): the
// point's world and the time scale it ran at were in the CSV only — the JSON's config echo says
// "auto" for a point whose CSV time_scale is the scale it measured, or "virtual".
TEST(SweepCommand, EveryCsvColumnIsInTheJsonWithTheSameValue) {
  const fs::path dir = TempDir("csv_json");
  const Result r = RunBinary("sweep --preset=s1 --hidden=64x3 --steps=1 --reference=false --virtual_time=true "
                             "--axis=pp=1,99 --out_dir=" + dir.string(), dir);
  ASSERT_EQ(r.exit_code, rp::apps::kExitSomePointsFailed) << r.err;
  const auto csv = ReadCsv(dir / "sweep.csv");
  const json j = json::parse(ReadFile(dir / "sweep.json"));
  ASSERT_EQ(csv.size(), 3u);
  ASSERT_EQ(j["points"].size(), 2u);
  const std::map<std::string, std::string> config_key = {
      {"preset", "preset"}, {"dp", "dp"}, {"pp", "pp"}, {"tp", "tp"}, {"ep", "ep"},
      {"microbatches", "microbatches"}, {"schedule", "schedule"}, {"virtual_stages", "virtual_stages"},
      {"codec", "codec"}, {"segment_bytes", "segment_bytes"}, {"bucket_mb", "bucket_mb"}, {"link", "link"}};
  for (size_t row = 1; row <= 2; ++row) {
    const json& p = j["points"][row - 1];
    for (const std::string& col : csv[0]) {
      json v;  // the JSON value of this column
      if (col == "point" || col == "label" || col == "status" || col == "error" || col == "world" ||
          col == "time_scale" || col == "t1_ms" || col == "wall_seconds") {
        v = p.value(col, json("<absent>"));
      } else if (col == "step_ms_emulated") {
        v = p["emulated_step_ms"];
      } else if (col == "fidelity_host" || col == "fidelity_model") {
        v = p["fidelity"][col.substr(9)];
      } else if (col == "real_peak_activation_bytes" || col == "real_wire_bytes") {
        v = p["real"][col.substr(5)];
      } else if (config_key.count(col) > 0) {
        v = p.contains("config") ? p["config"][config_key.at(col)] : json(nullptr);
      } else {
        const size_t cut = col.rfind('_');
        const std::string side = col.substr(cut + 1), key = col.substr(0, cut);
        v = p[side][key == "step_ms" || key == "speedup" || key == "efficiency" || key == "bubble" ||
                            key == "makespan_bubble_ms" || key == "span_bubble_ms" ||
                            key == "exposed_comm_ms" || key == "peer_wait_ms" || key == "host_late_ms" ||
                            key == "modeled_peak_activation_bytes" ||
                            key == "modeled_wire_bytes"
                        ? key
                        : "<unknown " + key + ">"];
      }
      const std::string cell = Cell(csv, row, col);
      std::string as_text = v.is_null() ? "" : v.is_string() ? v.get<std::string>() : v.dump();
      if (v.is_number()) {
        double a = 0;
        ASSERT_TRUE(absl::SimpleAtod(cell, &a)) << row << " " << col << ": '" << cell << "' vs " << as_text;
        EXPECT_NEAR(a, v.get<double>(), 1e-9 * std::max(1.0, std::abs(a))) << row << " " << col;
      } else {
        EXPECT_EQ(cell, as_text) << row << " " << col;
      }
    }
  }
  EXPECT_EQ(j["points"][0]["time_scale"], "virtual");
  EXPECT_EQ(j["points"][0]["world"], 2);
  fs::remove_all(dir);
}

// SCHEDULES.md asks for both bubbles of the zero-bubble schedules: ZB-H2 and ZB-V close the per-rank
// span's bubble, not the makespan's. The sweep's only bubble column, idle / step, is the same for
// ZB-H1 and ZB-H2 (150 ms of 1190 at p = 4, m = 8, F = 50, I = W = 40), so a schedule study could not
// tell them apart; the golden values are SCHEDULES.md's, measured on the virtual clock and predicted.
TEST(SweepCommand, ZeroBubbleSchedulesShowTheirSpanBubbleApartFromTheMakespans) {
  const fs::path dir = TempDir("span_bubble");
  const Result r = RunBinary("sweep --dp=1 --tp=1 --pp=4 --microbatches=8 --forward_ms=50 --backward_ms=80 "
                             "--weight_grad_ms=40 --optimizer_ms=0 --link=ideal --hidden=64x7 --steps=1 "
                             "--reference=false --virtual_time --axis=schedule=1f1b,zb-h1,zb-h2,zb-v --out_dir=" +
                                 dir.string(),
                             dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto csv = ReadCsv(dir / "sweep.csv");
  ASSERT_EQ(csv.size(), 5u);
  const char* want[4][2] = {{"390", "390"}, {"150", "150"}, {"150", "30"}, {"85", "30"}};  // makespan, span
  for (size_t row = 1; row <= 4; ++row) {
    SCOPED_TRACE(Cell(csv, row, "schedule"));
    for (const char* side : {"measured", "predicted"}) {
      EXPECT_EQ(Cell(csv, row, std::string("makespan_bubble_ms_") + side), want[row - 1][0]);
      EXPECT_EQ(Cell(csv, row, std::string("span_bubble_ms_") + side), want[row - 1][1]);
    }
  }
  EXPECT_EQ(Cell(csv, 2, "bubble_predicted"), Cell(csv, 3, "bubble_predicted"));  // what hid the difference
  fs::remove_all(dir);
}

TEST(SweepCommand, AnImpossiblePointIsReportedAndTheSweepGoesOn) {
  const fs::path dir = TempDir("failing");
  const fs::path out = dir / "out";
  // 3 widths = 4 layers: pp=99 cannot be cut; the virtual clock makes the measured runs exact.
  const Result r = RunBinary("sweep --preset=s1 --hidden=64x3 --steps=1 --reference=false --virtual_time=true "
                             "--axis=pp=1,2,99 --out_dir=" + out.string(), dir);
  EXPECT_EQ(r.exit_code, rp::apps::kExitSomePointsFailed) << r.err;
  const auto csv = ReadCsv(out / "sweep.csv");
  ASSERT_EQ(csv.size(), 4u);
  EXPECT_EQ(Cell(csv, 1, "status"), "ok");
  EXPECT_EQ(Cell(csv, 2, "status"), "ok");
  EXPECT_EQ(Cell(csv, 3, "status"), "invalid");
  EXPECT_NE(Cell(csv, 3, "error").find("pp: 99 model stages"), std::string::npos) << Cell(csv, 3, "error");
  EXPECT_EQ(Cell(csv, 3, "step_ms_predicted"), "");
  // S1 links (20 ms per transfer): pp=1 is 8 x 130 + a 2-step ring of 20 ms; pp=2 the preset's 1370.
  EXPECT_EQ(Cell(csv, 1, "step_ms_measured"), "1080");
  EXPECT_EQ(Cell(csv, 1, "step_ms_predicted"), "1080");
  EXPECT_EQ(Cell(csv, 2, "step_ms_measured"), "1370");
  EXPECT_EQ(Cell(csv, 2, "step_ms_predicted"), "1370");
  const json j = json::parse(ReadFile(out / "sweep.json"));
  ASSERT_EQ(j["points"].size(), 3u);
  EXPECT_EQ(j["points"][2]["status"], "invalid");
  EXPECT_EQ(j["points"][2]["axes"]["pp"], 99);
  EXPECT_DOUBLE_EQ(j["points"][1]["measured"]["step_ms"].get<double>(), 1370);
  // Not a terminal: one plain progress line per point.
  EXPECT_NE(r.err.find("[1/3] pp=1: ok"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[3/3] pp=99: invalid"), std::string::npos) << r.err;
  // Every chart is well-formed, with the measured and predicted series.
  for (const char* name : {"step_time.svg", "speedup.svg", "bubble.svg", "exposed_comm.svg", "peak_memory.svg",
                           "wire_bytes.svg", "overview.svg"}) {
    const XmlDoc doc = ParseXml(ReadFile(out / name));
    ASSERT_TRUE(doc.ok) << name << ": " << doc.error;
    const auto series = testing::AttributeValues(doc, "data-name");
    ASSERT_GE(series.size(), 2u) << name;
    EXPECT_EQ(series[0], "measured") << name;
    EXPECT_EQ(series[1], "predicted") << name;
    EXPECT_GE(doc.elements.at("circle"), 4) << name;  // 2 valid points x 2 series
  }
}

// A forced scale the host cannot keep (0.0001 wall s per modeled s: 50 ns for a 0.5 ms op) is named
// in a warning, as `run` warns; the sweep used to say nothing (S1's one-liners at 0.2 drifted +10 %
// on a busy 2-core host). A virtual-clock sweep has nothing to warn about.
TEST(SweepCommand, PointsWhoseTimeScaleTheHostDidNotKeepAreNamedInAWarning) {
  const fs::path dir = TempDir("unkept");
  const std::string small =
      "sweep --dp=2 --pp=2 --tp=1 --hidden=32x4 --forward_ms=0.5 --backward_ms=1 --steps=2 --reference=false "
      "--axis=microbatches=1,2 ";
  const Result r = RunBinary(small + "--time_scale=0.0001 --out_dir=" + (dir / "real").string(), dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("warning: the host did not keep the time scale at 2 of 2 points that ran"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("microbatches=1 (time scale 0.0001: +"), std::string::npos) << r.err;
  // A forced scale: auto is the way out (an auto scale the host did not keep is told to rerun instead).
  EXPECT_NE(r.err.find("(or omit --time_scale: auto measures one)"), std::string::npos) << r.err;
  // Each point with a scale it would likely keep, as `run`'s warning names one (it said only "a larger
  // --time_scale, or auto, keeps up") — or, when the miss is so large that the estimate passes the
  // largest scale (CI once ran this point's step in 34 ms of wall, +9.8e6 %), that none up to it would.
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex(R"(microbatches=1 \(time scale 0\.0001: \+[0-9.]+ %; (no scale up to )?[0-9.e+]+ would likely keep up\))")))
      << r.err;
  const Result v = RunBinary(small + "--virtual_time=true --out_dir=" + (dir / "virtual").string(), dir);
  EXPECT_EQ(v.exit_code, 0) << v.err;
  EXPECT_EQ(v.err.find("warning"), std::string::npos) << v.err;
  // The CSV says which clock each point's measured columns come from: the scale a real-clock point
  // ran at, "virtual" (measured = emulated) on the virtual clock — it said "auto" there.
  const auto real = ReadCsv(dir / "real" / "sweep.csv");
  const auto virt = ReadCsv(dir / "virtual" / "sweep.csv");
  for (size_t row = 1; row <= 2; ++row) {
    EXPECT_EQ(Cell(real, row, "time_scale"), "0.0001") << row;
    EXPECT_EQ(Cell(virt, row, "time_scale"), "virtual") << row;
  }
  fs::remove_all(dir);
}

TEST(SweepCommand, BadAxesExitTwoWithOneLineNamingTheFieldAndWriteNothing) {
  const fs::path dir = TempDir("bad");
  const fs::path out = dir / "out";
  struct Case {
    std::string args;
    std::string names;
  } cases[] = {
      {"--axis=bogus=1,2", "--axis=bogus"},
      {"--axis=report_json=a,b", "--axis=report_json"},
      {"--axis=microbatches=2,x", "--axis=microbatches: --microbatches: expected an integer, got 'x'"},
      {"--axis=overlap=true,maybe", "overlap"},
      {"--axis=bucket_mb=25,x", "bucket_mb"},
      {"--axis=segment_bytes=64K,64Q", "segment_bytes"},
      {"--axis=pp=3..1", "--axis=pp"},
      {"--axis=pp", "--axis"},
      {"--axis=pp:forward_ms=1:100,2", "--axis=pp:forward_ms"},
      {"--axis=pp=1,2 --axis=pp=4", "already an axis"},
      {"--axis=pp=1,2 --microbatches=zero", "--microbatches"},
      {"--axis=pp=50,60", "--axis: no point has a valid config"},
      {"", "--axis"},
  };
  for (const Case& c : cases) {
    const Result r = RunBinary("sweep --preset=s1 --predict_only " + c.args + " --out_dir=" + out.string(), dir);
    EXPECT_EQ(r.exit_code, 2) << c.args << ": " << r.err;
    EXPECT_NE(r.err.find(c.names), std::string::npos) << c.args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.args << ": " << r.err;
    EXPECT_FALSE(fs::exists(out)) << c.args;
  }
  const Result no_dir = RunBinary("sweep --preset=s1 --axis=pp=1,2", dir);
  EXPECT_EQ(no_dir.exit_code, 2);
  EXPECT_NE(no_dir.err.find("--out_dir"), std::string::npos) << no_dir.err;
}

// An axis value that reads but is impossible is an invalid point, the same for every field: a range
// (microbatches=0, time_scale=0), an unknown name (schedule=pipedream), a combination (pp=99).
TEST(SweepCommand, ImpossibleAxisValuesAreInvalidPointsForEveryField) {
  const fs::path dir = TempDir("impossible");
  for (const char* axis : {"microbatches=2,0,4", "time_scale=0.1,0,0.2", "schedule=1f1b,pipedream,gpipe",
                           "segment_bytes=0,6,64K", "pp=1,99,2", "straggler_factor=1,0.5,2"}) {
    const fs::path out = dir / "out";
    const Result r = RunBinary(std::string("sweep --preset=s1 --predict_only --axis=") + axis + " --out_dir=" +
                                   out.string(), dir);
    EXPECT_EQ(r.exit_code, rp::apps::kExitSomePointsFailed) << axis << ": " << r.err;
    const auto csv = ReadCsv(out / "sweep.csv");
    ASSERT_EQ(csv.size(), 4u) << axis;
    EXPECT_EQ(Cell(csv, 1, "status"), "ok") << axis;
    EXPECT_EQ(Cell(csv, 2, "status"), "invalid") << axis;
    EXPECT_EQ(Cell(csv, 3, "status"), "ok") << axis;
    fs::remove_all(out);
  }
}

TEST(SweepCommand, GridOfLinkedAxesGivesTheClosedFormPipeline) {
  const fs::path dir = TempDir("grid");
  // One model (F 100 / B 160 ms in all) cut into 1 or 2 stages, on 1 or 2 replicas; free links.
  const Result r = RunBinary(
      "sweep --preset=s1 --predict_only --intra_alpha_us=0 --inter_alpha_us=0 "
      "--axis=pp:forward_ms:backward_ms=1:100:160,2:50:80 --axis=dp=1,2 --out_dir=" + dir.string(), dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto csv = ReadCsv(dir / "sweep.csv");
  ASSERT_EQ(csv.size(), 5u);
  // Row order: the last axis varies fastest.
  EXPECT_EQ(Cell(csv, 1, "label"), "pp=1 forward_ms=100 backward_ms=160 dp=1");
  EXPECT_EQ(Cell(csv, 4, "label"), "pp=2 forward_ms=50 backward_ms=80 dp=2");
  // pp=1: m (F + B) = 8 x 260; pp=2: (m + p - 1)(F + B) = 9 x 130; T1 = dp x 8 x 260.
  EXPECT_EQ(Cell(csv, 1, "step_ms_predicted"), "2080");
  EXPECT_EQ(Cell(csv, 2, "step_ms_predicted"), "2080");
  EXPECT_EQ(Cell(csv, 3, "step_ms_predicted"), "1170");
  EXPECT_EQ(Cell(csv, 4, "step_ms_predicted"), "1170");
  EXPECT_EQ(Cell(csv, 3, "t1_ms"), "2080");
  EXPECT_EQ(Cell(csv, 4, "t1_ms"), "4160");
  EXPECT_EQ(Cell(csv, 4, "world"), "4");
  // The charts hold one series per value of the second axis (predict-only: predicted only).
  const XmlDoc doc = ParseXml(ReadFile(dir / "step_time.svg"));
  ASSERT_TRUE(doc.ok) << doc.error;
  const auto series = testing::AttributeValues(doc, "data-name");
  ASSERT_EQ(series.size(), 2u);
  EXPECT_EQ(series[0], "predicted (dp=1)");
  EXPECT_EQ(series[1], "predicted (dp=2)");
}

// A linked axis whose first field repeats a value (`pp:forward_ms=2:50,2:25,1:100`) cannot place its
// points by that number: both pp=2 points were drawn at x = 2, one tick label on the other and the
// line running straight up. Such an axis is drawn as categories, one position per value.
TEST(SweepCommand, ALinkedAxisWhoseFirstFieldRepeatsIsDrawnAsCategories) {
  const fs::path dir = TempDir("repeat_x");
  const Result r = RunBinary("sweep --preset=s1 --predict_only --axis=pp:forward_ms=2:50,2:25,1:100 --out_dir=" +
                                 dir.string(), dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string svg = ReadFile(dir / "step_time.svg");
  ASSERT_TRUE(ParseXml(svg).ok);
  std::vector<std::string> xs;
  for (const char* label : {"2:50", "2:25", "1:100"}) {
    const size_t at = svg.find(std::string(">") + label + "</text>");
    ASSERT_NE(at, std::string::npos) << label;
    const size_t tag = svg.rfind("<text x=\"", at) + 9;
    xs.push_back(svg.substr(tag, svg.find('"', tag) - tag));
  }
  EXPECT_NE(xs[0], xs[1]);
  EXPECT_NE(xs[0], xs[2]);
  EXPECT_NE(xs[1], xs[2]);
  fs::remove_all(dir);
}

// The charts mark the points that did not run instead of leaving a silent gap: an x position where no
// point ran says why in its tick label, a series missing some points names them in its legend entry.
TEST(SweepCommand, ChartsMarkThePointsThatDidNotRun) {
  const fs::path dir = TempDir("marked");
  const Result r = RunBinary("sweep --preset=s1 --predict_only --hidden=64x3 --axis=pp=1,2,99 "
                             "--axis=microbatches=4,0 --out_dir=" + dir.string(), dir);
  ASSERT_EQ(r.exit_code, rp::apps::kExitSomePointsFailed) << r.err;
  for (const char* name : {"step_time.svg", "overview.svg"}) {
    const XmlDoc doc = ParseXml(ReadFile(dir / name));
    ASSERT_TRUE(doc.ok) << name << ": " << doc.error;
    EXPECT_NE(std::find(doc.texts.begin(), doc.texts.end(), "99 (invalid)"), doc.texts.end()) << name;
    EXPECT_NE(std::find(doc.texts.begin(), doc.texts.end(), "predicted (microbatches=0) — invalid at pp=1,2"),
              doc.texts.end())
        << name;
    EXPECT_NE(std::find(doc.texts.begin(), doc.texts.end(), "predicted (microbatches=4)"), doc.texts.end()) << name;
  }
  fs::remove_all(dir);
}

// The table on stdout keeps its columns aligned: a linked axis's name ("pp:forward_ms:backward_ms", 25
// characters) and measured / predicted pairs such as "0.07898 / 0.07556" outgrew the fixed widths and
// pushed every later column of their row right of its header.
TEST(SweepCommand, TheTablesColumnsStayAlignedUnderTheirHeaders) {
  const fs::path dir = TempDir("table");
  const Result r = RunBinary("sweep --preset=s1 --virtual_time --steps=1 --reference=false --intra_alpha_us=0 "
                             "--hidden=64x7 --axis=pp:forward_ms:backward_ms=1:100:160,8:12.5:20 "
                             "--axis=microbatches=16 --out_dir=" + dir.string(), dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> lines = absl::StrSplit(r.out, '\n');
  ASSERT_GE(lines.size(), 3u) << r.out;
  const std::string& header = lines[0];
  const size_t status_end = header.find("status") + 6;
  for (size_t i = 1; i <= 2; ++i) {
    EXPECT_EQ(lines[i].size(), header.size()) << "\n" << header << "\n" << lines[i];
    EXPECT_EQ(lines[i].substr(status_end - 2, 2), "ok") << "\n" << header << "\n" << lines[i];
  }
  fs::remove_all(dir);
}

TEST(SweepCommand, StragglerFactorAxisSlowsMeasuredAndPredictedAlike) {
  const fs::path dir = TempDir("straggler");
  // One replica, one stage, free links: 8 micro-batches x (50 + 80) ms = 1040 ms; the only device
  // slowed by 1.5 and 2 takes 1560 and 2080 ms, on the virtual clock measured = predicted.
  const Result r = RunBinary(
      "sweep --preset=s1 --dp=1 --pp=1 --hidden=64x3 --intra_alpha_us=0 --inter_alpha_us=0 "
      "--virtual_time=true --steps=1 --straggler_rank=0 --axis=straggler_factor=1,1.5,2 --out_dir=" +
          dir.string(),
      dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto csv = ReadCsv(dir / "sweep.csv");
  ASSERT_EQ(csv.size(), 4u);
  const char* expected[] = {"1040", "1560", "2080"};
  for (int row = 1; row <= 3; ++row) {
    EXPECT_EQ(Cell(csv, row, "step_ms_predicted"), expected[row - 1]) << row;
    EXPECT_EQ(Cell(csv, row, "step_ms_measured"), expected[row - 1]) << row;
    EXPECT_EQ(Cell(csv, row, "t1_ms"), "1040") << row;  // T1: the healthy device
  }
}

TEST(SweepCommand, ScheduleAxisDrawsGroupedBars) {
  const fs::path dir = TempDir("schedules");
  // Interleaved with its 2 chunks (with 1 it is 1F1B, an invalid point: ScheduleAxisMarksInterleavedWith
  // OneChunkInvalid).
  const Result r = RunBinary("sweep --preset=s1 --predict_only --hidden=64x8 --pp=4 "
                             "--axis=schedule:virtual_stages=gpipe:1,1f1b:1,interleaved:2,zb-h1:1 --out_dir=" +
                                 dir.string(),
                             dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const XmlDoc doc = ParseXml(ReadFile(dir / "bubble.svg"));
  ASSERT_TRUE(doc.ok) << doc.error;
  EXPECT_EQ(doc.elements.at("rect"), 1 + 4 + 1);  // background, one predicted bar per schedule, legend
  EXPECT_NE(r.out.find("zb-h1"), std::string::npos) << r.out;
}

// Interleaved with one chunk per device is 1F1B op for op: a point that asks for it is invalid, its
// error naming the field and what to use instead, and the other points run (before, it ran as 1F1B
// labelled "interleaved").
TEST(SweepCommand, ScheduleAxisMarksInterleavedWithOneChunkInvalid) {
  const fs::path dir = TempDir("interleaved_v1");
  const Result r = RunBinary("sweep --preset=s1 --predict_only --hidden=64x7 --pp=4 "
                             "--axis=schedule=1f1b,interleaved --virtual_stages=1 --out_dir=" + dir.string(),
                             dir);
  EXPECT_EQ(r.exit_code, kExitSomePointsFailed) << r.err;
  const auto csv = ReadCsv(dir / "sweep.csv");
  ASSERT_EQ(csv.size(), 3u);
  EXPECT_EQ(Cell(csv, 1, "status"), "ok");
  EXPECT_EQ(Cell(csv, 2, "status"), "invalid");
  EXPECT_EQ(Cell(csv, 2, "error"), "--virtual_stages: 1 with --schedule=interleaved is plain 1F1B; interleaving needs "
                                   "at least 2 chunks per device (--virtual_stages=2), or use --schedule=1f1b");
}

// All eight schedules as one axis (issue 14), emulated on the virtual clock: every point runs, its
// emulated step equals the predicted one, and the charts hold a bar per schedule.
TEST(SweepCommand, ScheduleAxisCoversAllEightSchedules) {
  const fs::path dir = TempDir("eight");
  const Result r = RunBinary(
      "sweep --preset=s1 --hidden=64x7 --pp=4 --dp=2 --tp=1 --microbatches=8 --steps=1 --reference=false "
      "--virtual_time --axis=schedule:virtual_stages=gpipe:1,1f1b:1,interleaved:2,zb-h1:1,zb-h2:1,zb-v:2,"
      "dualpipev:2,dualpipe:2 --out_dir=" + dir.string(),
      dir);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const auto csv = ReadCsv(dir / "sweep.csv");
  ASSERT_EQ(csv.size(), 9u);
  const char* names[] = {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "dualpipev", "dualpipe"};
  for (size_t row = 1; row <= 8; ++row) {
    EXPECT_EQ(Cell(csv, row, "status"), "ok") << row << ": " << Cell(csv, row, "error");
    EXPECT_EQ(Cell(csv, row, "schedule"), names[row - 1]);
    EXPECT_EQ(Cell(csv, row, "step_ms_emulated"), Cell(csv, row, "step_ms_predicted")) << names[row - 1];
    EXPECT_EQ(Cell(csv, row, "step_ms_measured"), Cell(csv, row, "step_ms_emulated")) << names[row - 1];
  }
  const XmlDoc doc = ParseXml(ReadFile(dir / "bubble.svg"));
  ASSERT_TRUE(doc.ok) << doc.error;
  EXPECT_EQ(doc.elements.at("rect"), 1 + 2 * 8 + 2);  // background, measured and predicted bars, legend
}

}  // namespace
}  // namespace rp::apps
