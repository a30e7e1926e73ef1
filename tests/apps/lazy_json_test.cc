// LazyJson (apps/lazy_json.h) against nlohmann's dump of the same document, and the report made one
// device at a time (BuildLazyReport) against the report as one document: the same file, byte for
// byte, and the same text.
#include <atomic>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "apps/config.h"
#include "apps/flags.h"
#include "apps/lazy_json.h"
#include "apps/plan.h"
#include "apps/report.h"
#include "apps/subcommands.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "schedule/executor.h"
#include "schedule/predictor.h"

namespace rp::apps {
namespace {

using json = nlohmann::json;

std::string Streamed(const LazyJson& doc, int indent, size_t* pieces = nullptr) {
  std::string text;
  size_t n = 0;
  const absl::Status st = doc.Stream(indent, [&](std::string_view piece) {
    text += piece;
    ++n;
    return absl::OkStatus();
  });
  EXPECT_TRUE(st.ok()) << st;
  if (pieces != nullptr) *pieces = n;
  return text;
}

// Element i of the test's arrays: null (left out) for every third.
json Row(size_t i) {
  if (i % 3 == 1) return json();
  return {{"i", i}, {"op", i % 2 == 0 ? "F" : "B"}, {"start_ms", static_cast<double>(i) * 0.125}};
}

// Lazy members between, before and after the plain keys, one over a plain key, nested lazy objects,
// arrays with left-out elements, empty ones, and bytes that are not UTF-8 in a key and in a value.
LazyJson Document() {
  LazyJson timeline = LazyJson::Object(
      {{"ranks", {0, 1, 2}}, {"empty", json::object()}},
      {{"predicted", LazyJson::Object({{"step_ms", 1.5}}, {{"devices", LazyJson::Array(7, Row)}})},
       {"measured", LazyJson::Object(json::object(), {{"devices", LazyJson::Array(0, Row)}})},
       {"all_left_out", LazyJson::Array(3, [](size_t) { return json(); })}});
  return LazyJson::Object({{"schema", "x/2"},
                           {"config", {{"report_json", "/tmp/caf\xc3\xa9/\xff.json"}, {"pp", 4}}},
                           {"mode", "predict"},
                           {"bad\xfe key", 1},
                           {"zeta", json::array()},
                           {"devices", "replaced by the lazy member"}},
                          {{"devices", LazyJson::Array(10, Row)},
                           {"timeline", std::move(timeline)},
                           {"a_first", LazyJson(json{{"x", nullptr}})},
                           {"zzz_last", LazyJson::Object(json::object())}});
}

TEST(LazyJson, StreamWritesNlohmannsDumpOfTheWholeDocument) {
  const LazyJson doc = Document();
  const json whole = doc.ToJson();
  EXPECT_EQ(whole["devices"].size(), 7u);  // 10 made, every third left out
  EXPECT_EQ(whole["timeline"]["all_left_out"], json::array());
  EXPECT_EQ(whole["timeline"]["predicted"]["devices"][1]["i"], 2);
  EXPECT_EQ(whole["zzz_last"], json::object());
  for (int indent : {-1, 0, 1, 2, 4}) {
    EXPECT_EQ(Streamed(doc, indent), DumpJson(whole, indent) + "\n") << "indent " << indent;
  }
  EXPECT_NE(Streamed(doc, 2).find("caf\xc3\xa9/\xef\xbf\xbd.json"), std::string::npos);
  // A value node and an empty object node alone.
  EXPECT_EQ(Streamed(LazyJson(json{{"k", {1, 2}}}), 2), DumpJson(json{{"k", {1, 2}}}, 2) + "\n");
  EXPECT_EQ(Streamed(LazyJson::Object(json::object()), 2), "{}\n");
  EXPECT_EQ(Streamed(LazyJson::Array(2, [](size_t) { return json(); }), -1), "[]\n");
}

// Elements are made as they are written, once each and in order, and the text leaves in pieces of
// about a MiB; the sink's first error ends it.
TEST(LazyJson, ElementsAreMadeOnceEachAsTheTextIsHandedOn) {
  std::vector<size_t> made;
  const LazyJson doc = LazyJson::Object({{"n", 1}}, {{"rows", LazyJson::Array(60000, [&](size_t i) {
                                                       made.push_back(i);
                                                       return Row(i);
                                                     })}});
  size_t pieces = 0;
  const std::string text = Streamed(doc, 2, &pieces);
  ASSERT_EQ(made.size(), 60000u);
  for (size_t i = 0; i < made.size(); ++i) ASSERT_EQ(made[i], i);
  EXPECT_GE(pieces, 2u);
  EXPECT_EQ(text, DumpJson(doc.ToJson(), 2) + "\n");
  made.clear();
  int calls = 0;
  EXPECT_EQ(doc.Stream(2,
                       [&](std::string_view) {
                         ++calls;
                         return absl::DataLossError("disk full");
                       }),
            absl::DataLossError("disk full"));
  EXPECT_EQ(calls, 1);
}

// With threads, a large array is made in blocks by several threads: the same text, every element
// made once; blocks with no element written (the whole first block left out, so the array's first
// item opens a later block), a last partial block, and arrays below the threshold or empty.
TEST(LazyJson, ThreadsWriteTheSameTextAndMakeEachElementOnce) {
  const size_t block = LazyJson::kBlock;
  const size_t n = 3 * block + 17;
  std::vector<std::atomic<int>> made(n);
  auto element = [&](size_t i) -> json {
    made[i].fetch_add(1, std::memory_order_relaxed);
    if (i < block + 5 || (i >= 2 * block && i < 3 * block)) return json();  // blocks 0, 2 and more
    return Row(i);
  };
  const LazyJson doc = LazyJson::Object(
      {{"n", 1}}, {{"rows", LazyJson::Array(n, element)},
                   {"dense", LazyJson::Array(LazyJson::kParallelElements + 1, Row)},
                   {"small", LazyJson::Array(LazyJson::kParallelElements - 1, Row)},
                   {"none", LazyJson::Array(LazyJson::kParallelElements, [](size_t) { return json(); })}});
  const json whole = doc.ToJson();
  for (auto& m : made) m.store(0);
  for (int indent : {-1, 0, 2}) {
    for (int threads : {2, 3, 8}) {
      size_t pieces = 0;
      std::string text;
      const absl::Status st = doc.Stream(indent,
                                         [&](std::string_view piece) {
                                           text += piece;
                                           ++pieces;
                                           return absl::OkStatus();
                                         },
                                         threads);
      ASSERT_TRUE(st.ok()) << st;
      EXPECT_EQ(text, DumpJson(whole, indent) + "\n") << "indent " << indent << ", threads " << threads;
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(made[i].exchange(0), 1) << i;
    }
  }
  size_t written = 0;
  for (size_t i = block + 5; i < 2 * block; ++i) written += Row(i).is_null() ? 0 : 1;
  for (size_t i = 3 * block; i < n; ++i) written += Row(i).is_null() ? 0 : 1;
  EXPECT_EQ(whole["rows"].size(), written);
  EXPECT_EQ(whole["none"], json::array());
}

// rp::TextPieces (runtime/text_sink.h): small texts are gathered into pieces of about kPiece bytes;
// a text of kPiece bytes or more is a piece of its own, after what was waiting; the first error
// ends the calls.
TEST(TextPieces, ALargeTextIsAPieceOfItsOwnAfterWhatWasWaiting) {
  std::vector<std::string> pieces;
  const std::string large(TextPieces::kPiece, 'x');
  {
    TextPieces out([&](std::string_view p) {
      pieces.emplace_back(p);
      return absl::OkStatus();
    });
    out.Append("ab");
    out.Append('c');
    out.Append(large);
    out.Append("d");
    ASSERT_TRUE(out.Finish().ok());
  }
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0], "abc");
  EXPECT_EQ(pieces[1], large);
  EXPECT_EQ(pieces[2], "d");
  int calls = 0;
  TextPieces failing([&](std::string_view) {
    ++calls;
    return absl::DataLossError("disk full");
  });
  failing.Append("ab");
  failing.Append(large);  // "ab" fails; the large text is dropped
  failing.Append(large);
  EXPECT_EQ(failing.Finish(), absl::DataLossError("disk full"));
  EXPECT_EQ(calls, 1);
}

TEST(LazyJson, AnObjectsLazyMembersAndArraysAreReadable) {
  const LazyJson doc = Document();
  EXPECT_EQ(doc.members().value("mode", ""), "predict");
  ASSERT_NE(doc.lazy("devices"), nullptr);
  EXPECT_EQ(doc.lazy("devices")->size(), 10u);
  EXPECT_EQ(doc.lazy("devices")->at(3), Row(3));
  EXPECT_TRUE(doc.lazy("devices")->at(1).is_null());
  EXPECT_EQ(doc.lazy("mode"), nullptr);
}

// Reports of several layouts and schedules, predicted and run on the virtual clock: made one device
// at a time they write the same file and the same text as the whole document.
TEST(LazyReport, IsTheWholeReportByteForByteAndRendersTheSameText) {
  const std::vector<std::vector<std::string>> layouts = {
      {"--preset=s1"},
      {"--preset=s3-4d"},
      {"--pp=2", "--tp=2", "--dp=2", "--schedule=gpipe", "--microbatches=3", "--bucket_mb=0.001"},
      {"--pp=2", "--tp=1", "--dp=2", "--schedule=zb-h1", "--microbatches=4"},
      {"--pp=2", "--tp=1", "--dp=2", "--schedule=dualpipev", "--microbatches=4"},
      {"--pp=2", "--tp=1", "--dp=24", "--microbatches=2"},  // more devices than the text's rows
  };
  for (std::vector<std::string> argv : layouts) {
    argv.insert(argv.end(), {"--virtual_time", "--steps=2", "--train_size=256", "--test_size=64"});
    std::string name;
    for (const std::string& a : argv) name += a + " ";
    auto args = ParseSubcommandArgs("run", argv);
    ASSERT_TRUE(args.ok()) << name << args.status();
    absl::StatusOr<RunConfig> cfg = LoadConfig(*args, /*for_run=*/true);
    ASSERT_TRUE(cfg.ok()) << name << cfg.status();
    absl::StatusOr<Plan> plan = BuildPlan(*cfg, /*for_run=*/true);
    ASSERT_TRUE(plan.ok()) << name << plan.status();
    absl::StatusOr<schedule::Prediction> pred = schedule::Predict(plan->execution, plan->predict);
    ASSERT_TRUE(pred.ok()) << name << pred.status();
    auto exec = schedule::Executor::Create(plan->executor);
    ASSERT_TRUE(exec.ok()) << name << exec.status();
    absl::StatusOr<schedule::RunResult> run = (*exec)->Run();
    ASSERT_TRUE(run.ok()) << name << run.status();
    for (const schedule::RunResult* r : {static_cast<const schedule::RunResult*>(nullptr), static_cast<const schedule::RunResult*>(&*run)}) {
      const schedule::Prediction& p = r != nullptr ? r->prediction : *pred;
      const LazyJson lazy = BuildLazyReport(*cfg, *plan, p, r);
      const json whole = BuildReport(*cfg, *plan, p, r);
      ASSERT_EQ(whole["devices"].size(), static_cast<size_t>(plan->grid.world_size())) << name;
      ASSERT_TRUE(whole.contains("timeline")) << name;
      EXPECT_EQ(Streamed(lazy, 2), DumpJson(whole, 2) + "\n") << name << (r != nullptr ? "run" : "predict");
      EXPECT_EQ(RenderReport(lazy), RenderReport(whole)) << name << (r != nullptr ? "run" : "predict");
      EXPECT_EQ(RenderReport(lazy, 4), RenderReport(whole, 4)) << name;
    }
  }
}

}  // namespace
}  // namespace rp::apps
