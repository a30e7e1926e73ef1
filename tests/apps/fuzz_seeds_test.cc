// The seed corpora and findings of fuzz/report_fuzzer.cc and fuzz/flags_fuzzer.cc, held to what the
// fuzzers check (docs/fuzzing.md): a saved report is drawn or refused with one line; a command line
// is parsed or refused with one line, each text valid for its flag's grammar.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "apps/flags.h"
#include "apps/report_reader.h"
#include "apps/subcommands.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace rp::apps {
namespace {

namespace fs = std::filesystem;

const fs::path kFuzzDir = fs::path(RINGPIPE_SOURCE_DIR) / "fuzz";

std::string ReadFile(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void ExpectOneLineRejection(const absl::Status& st, const std::string& what) {
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << what << ": " << st;
  const std::string msg(st.message());
  EXPECT_FALSE(msg.empty()) << what;
  EXPECT_EQ(OneLine(msg), msg) << what;
}

TEST(ReportFuzzCorpus, EverySeedIsDrawnOrRefusedWithOneLine) {
  int seeds = 0;
  for (const auto& e : fs::directory_iterator(kFuzzDir / "report_corpus")) {
    const std::string name = e.path().filename().string();
    auto r = ReadTimelineReport(ReadFile(e.path()));
    ++seeds;
    if (name.rfind("regress-", 0) == 0) {
      ASSERT_FALSE(r.ok()) << name;
      ExpectOneLineRejection(r.status(), name);
    } else {
      ASSERT_TRUE(r.ok()) << name << ": " << r.status();
      EXPECT_FALSE(r->panels.empty()) << name;
      for (const svg::GanttPanel& p : r->panels) {
        for (const svg::GanttBar& b : p.bars) EXPECT_GE(b.end_ms, b.start_ms) << name;
      }
    }
  }
  EXPECT_GE(seeds, 4);
}

TEST(ReportFuzzCorpus, TheSavedReportSeedIsTheS1PredictReport) {
  const std::string text = ReadFile(kFuzzDir / "report_corpus" / "predict-s1.json");
  auto r = ReadTimelineReport(text);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->panels.size(), 1u);  // predict: no measured panel
  EXPECT_EQ(r->rows, 2u);           // s1: PP=2, TP=1 in the first replica
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_DOUBLE_EQ(r->predicted_step_ms, j["timeline"]["predicted"]["step_ms"].get<double>());
  EXPECT_DOUBLE_EQ(r->predicted_step_ms, j["step_time_ms"]["predicted"].get<double>());
}

// The flags fuzzer's input format: first byte picks the subcommand, NUL bytes separate arguments.
TEST(FlagsFuzzCorpus, EverySeedParsesOrIsRefusedWithOneLine) {
  const std::vector<Subcommand> subs = AllSubcommands();
  int seeds = 0;
  for (const auto& e : fs::directory_iterator(kFuzzDir / "flags_corpus")) {
    const std::string data = ReadFile(e.path());
    ASSERT_FALSE(data.empty());
    const Subcommand& sub = subs[static_cast<unsigned char>(data[0]) % subs.size()];
    std::vector<std::string> args;
    std::string cur;
    for (size_t i = 1; i < data.size(); ++i) {
      if (data[i] == '\0') {
        args.push_back(cur);
        cur.clear();
      } else {
        cur.push_back(data[i]);
      }
    }
    if (data.size() > 1) args.push_back(cur);
    const std::string name = e.path().filename().string();
    auto parsed = ParseFlags(sub.name, args, sub.flags());
    ++seeds;
    if (name.rfind("regress-", 0) == 0) {
      ASSERT_FALSE(parsed.ok()) << name;
      ExpectOneLineRejection(parsed.status(), name);
    } else {
      EXPECT_TRUE(parsed.ok()) << name << ": " << parsed.status();
    }
  }
  EXPECT_GE(seeds, 5);
}

}  // namespace
}  // namespace rp::apps
