// rp::apps::OutputFiles: every output written or none, a failure anywhere leaving every target as
// it was; contents given whole (Set) or written piece by piece at commit time (SetStreamed, StreamJson).
#include <sys/resource.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "apps/files.h"
#include "apps/report.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/apps/binary_runner.h"

namespace rp::apps {
namespace {

namespace fs = std::filesystem;

using rp::apps::testing::Names;
using rp::apps::testing::ReadFile;

fs::path TempDir(const std::string& name) {
  return rp::apps::testing::TempDir("ringpipe_output_files_test", name);
}

TEST(WriteFileAtomically, WritesWholeFileAndLeavesNothingOnFailure) {
  const fs::path dir = TempDir("atomic");
  const fs::path ok = dir / "out.json";
  ASSERT_TRUE(WriteFileAtomically(ok.string(), "{\"a\": 1}\n").ok());
  std::ifstream f(ok);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(ss.str(), "{\"a\": 1}\n");
  const fs::path bad = dir / "no_such_dir" / "out.json";
  EXPECT_FALSE(WriteFileAtomically(bad.string(), "x").ok());
  EXPECT_FALSE(fs::exists(bad));
  size_t files = 0;
  for ([[maybe_unused]] auto& e : fs::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 1u);  // no temporary left behind
  fs::remove_all(dir);
}

// Holds the file-size limit at `bytes` (SIGXFSZ ignored: a write past it fails with EFBIG) while it lives.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) : old_handler_(std::signal(SIGXFSZ, SIG_IGN)) {
    ::getrlimit(RLIMIT_FSIZE, &old_);
    rlimit lim = old_;
    lim.rlim_cur = bytes;
    ok_ = ::setrlimit(RLIMIT_FSIZE, &lim) == 0;
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, old_handler_);
  }
  bool ok() const { return ok_; }

 private:
  rlimit old_;
  void (*old_handler_)(int);
  bool ok_ = false;
};

// A directory output that exists is left exactly as it was when one of the renames fails: a directory
// put where the last chart goes after the checks (a concurrent user) made the commit stop after the
// others were renamed into place — sweep.csv and sweep.json were the new ones beside the old charts.
TEST(OutputFilesCommit, AnExistingDirectoryIsLeftAsItWasWhenARenameFails) {
  const fs::path dir = TempDir("commit_existing");
  const fs::path out = dir / "out";
  fs::create_directory(out);
  std::ofstream(out / "sweep.csv") << "old csv";
  std::ofstream(out / "chart.svg") << "old chart";
  std::ofstream(out / "notes.txt") << "mine";
  OutputFiles files;
  ASSERT_TRUE(files.Declare("out_dir", out.string(), true, {"sweep.csv", "sweep.json", "chart.svg", "last.svg"}).ok());
  ASSERT_TRUE(files.CheckAll({}).ok());
  for (const char* name : {"sweep.csv", "sweep.json", "chart.svg", "last.svg"}) files.SetInDir("out_dir", name, "new");
  fs::create_directory(out / "last.svg");
  const absl::Status st = files.Commit();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("last.svg': became a directory during the run"), std::string::npos) << st;
  EXPECT_EQ(Names(out), (std::vector<std::string>{"chart.svg", "last.svg", "notes.txt", "sweep.csv"}));
  EXPECT_EQ(ReadFile(out / "sweep.csv"), "old csv");
  EXPECT_EQ(ReadFile(out / "chart.svg"), "old chart");
  EXPECT_EQ(ReadFile(out / "notes.txt"), "mine");
  EXPECT_TRUE(fs::is_empty(out / "last.svg"));
  // Without the obstacle the same commit goes through, and the other files stay.
  fs::remove(out / "last.svg");
  ASSERT_TRUE(files.Commit().ok());
  EXPECT_EQ(Names(out), (std::vector<std::string>{"chart.svg", "last.svg", "notes.txt", "sweep.csv", "sweep.json"}));
  EXPECT_EQ(ReadFile(out / "sweep.csv"), "new");
  EXPECT_EQ(ReadFile(out / "notes.txt"), "mine");
  fs::remove_all(dir);
}

// A directory output that did not exist is created whole or not at all: a write that fails half way
// (here the file-size limit, `ulimit -f`) leaves neither it nor the ancestors the commit made — before,
// `out_dir` and its parents stayed behind, empty.
TEST(OutputFilesCommit, ANewDirectoryIsNotLeftBehindWhenAWriteFails) {
  const fs::path dir = TempDir("commit_new");
  const fs::path out = dir / "a" / "b" / "out";
  OutputFiles files;
  ASSERT_TRUE(files.Declare("out_dir", out.string() + "/", true, {"small.csv", "big.svg"}).ok());
  ASSERT_TRUE(files.CheckAll({}).ok());
  files.SetInDir("out_dir", "small.csv", "x");
  files.SetInDir("out_dir", "big.svg", std::string(64 << 10, 'y'));
  {
    FileSizeLimit limit(16 << 10);
    ASSERT_TRUE(limit.ok());
    const absl::Status st = files.Commit();
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("cannot write: File too large"), std::string::npos) << st;
  }
  EXPECT_EQ(Names(dir), std::vector<std::string>{});
  ASSERT_TRUE(files.Commit().ok());
  EXPECT_EQ(Names(dir / "a" / "b"), std::vector<std::string>{"out"});
  EXPECT_EQ(Names(out), (std::vector<std::string>{"big.svg", "small.csv"}));
  EXPECT_EQ(ReadFile(out / "small.csv"), "x");
  EXPECT_EQ(fs::file_size(out / "big.svg"), 64u << 10);
  fs::remove_all(dir);
}

// File outputs (run's --report_json and --trace) are committed together too: the second one's failure
// puts the first one's old contents back (before, the first stayed the new one).
TEST(OutputFilesCommit, FileOutputsAreRestoredWhenALaterOneFails) {
  const fs::path dir = TempDir("commit_files");
  const fs::path report = dir / "r.json", trace = dir / "t.json";
  std::ofstream(report) << "old report";
  OutputFiles files;
  ASSERT_TRUE(files.Declare("report_json", report.string()).ok());
  ASSERT_TRUE(files.Declare("trace", trace.string()).ok());
  ASSERT_TRUE(files.CheckAll({}).ok());
  files.Set("report_json", "new report");
  files.Set("trace", "new trace");
  fs::create_directory(trace);
  ASSERT_FALSE(files.Commit().ok());
  EXPECT_EQ(ReadFile(report), "old report");
  EXPECT_EQ(Names(dir), (std::vector<std::string>{"r.json", "t.json"}));
  fs::remove(trace);
  ASSERT_TRUE(files.Commit().ok());
  EXPECT_EQ(ReadFile(report), "new report");
  EXPECT_EQ(ReadFile(trace), "new trace");
  EXPECT_EQ(Names(dir), (std::vector<std::string>{"r.json", "t.json"}));
  fs::remove_all(dir);
}

// A streamed output (SetStreamed: --trace's Chrome JSON) is written piece by piece into the
// temporary file at commit time: the target gets every piece in order, and the text never exists
// whole in the process.
TEST(OutputFilesCommit, AStreamedOutputGetsEveryPieceInOrder) {
  const fs::path dir = TempDir("streamed");
  const fs::path trace = dir / "t.json";
  std::ofstream(trace) << "old trace";
  OutputFiles files;
  ASSERT_TRUE(files.Declare("trace", trace.string()).ok());
  ASSERT_TRUE(files.CheckAll({}).ok());
  std::string expected;
  for (int i = 0; i < 1000; ++i) absl::StrAppend(&expected, "piece ", i, std::string(i % 97, 'x'), "\n");
  int calls = 0;
  files.SetStreamed("trace", [&](absl::FunctionRef<absl::Status(std::string_view)> sink) {
    ++calls;
    for (int i = 0; i < 1000; ++i) {
      if (absl::Status st = sink(absl::StrCat("piece ", i, std::string(i % 97, 'x'), "\n")); !st.ok()) return st;
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(files.Commit().ok());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(ReadFile(trace), expected);
  EXPECT_EQ(Names(dir), std::vector<std::string>{"t.json"});  // no temporary file left
  fs::remove_all(dir);
}

// A streamed output whose writer fails (an export error) or whose pieces pass the file-size limit
// fails the commit with one line naming the flag and the path, and every output stays as it was:
// the other output is not replaced, no temporary file is left.
TEST(OutputFilesCommit, AFailedStreamedOutputLeavesEveryTargetAsItWas) {
  const fs::path dir = TempDir("streamed_fail");
  const fs::path report = dir / "r.json", trace = dir / "t.json";
  std::ofstream(report) << "old report";
  std::ofstream(trace) << "old trace";
  OutputFiles files;
  ASSERT_TRUE(files.Declare("report_json", report.string()).ok());
  ASSERT_TRUE(files.Declare("trace", trace.string()).ok());
  ASSERT_TRUE(files.CheckAll({}).ok());
  files.Set("report_json", "new report");
  files.SetStreamed("trace", [](absl::FunctionRef<absl::Status(std::string_view)> sink) {
    if (absl::Status st = sink("{\"traceEvents\":["); !st.ok()) return st;
    return absl::InternalError("the export broke");
  });
  absl::Status st = files.Commit();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(), absl::StrCat("--trace: '", trace.string(), "': the export broke"));
  EXPECT_EQ(ReadFile(report), "old report");
  EXPECT_EQ(ReadFile(trace), "old trace");
  EXPECT_EQ(Names(dir), (std::vector<std::string>{"r.json", "t.json"}));

  // The pieces pass the file-size limit: the write's error, and the writer is not asked for more.
  int pieces_after_error = 0;
  files.SetStreamed("trace", [&](absl::FunctionRef<absl::Status(std::string_view)> sink) {
    absl::Status first;
    for (int i = 0; i < 64; ++i) {
      absl::Status s = sink(std::string(4096, 'z'));
      if (!first.ok()) ++pieces_after_error;
      if (!s.ok() && first.ok()) first = s;
      if (!first.ok()) return first;
    }
    return absl::OkStatus();
  });
  {
    FileSizeLimit limit(16 << 10);
    ASSERT_TRUE(limit.ok());
    st = files.Commit();
  }
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("--trace: '"), std::string::npos) << st;
  EXPECT_NE(st.message().find("cannot write: File too large"), std::string::npos) << st;
  EXPECT_EQ(pieces_after_error, 0);
  EXPECT_EQ(ReadFile(report), "old report");
  EXPECT_EQ(ReadFile(trace), "old trace");
  EXPECT_EQ(Names(dir), (std::vector<std::string>{"r.json", "t.json"}));
  fs::remove_all(dir);
}

// A report written to a file is handed out in pieces (StreamJson), not held as one string beside its
// document: the pieces make DumpJson's text and a newline, bytes that are not UTF-8 (a path a user
// gave) become U+FFFD as there, and the sink's first error ends it.
TEST(StreamJson, ThePiecesAreTheDumpAndANewline) {
  nlohmann::json doc = {{"config", {{"report_json", "/tmp/caf\xc3\xa9/\xff.json"}}}, {"rows", nlohmann::json::array()}};
  for (int i = 0; i < 40000; ++i) doc["rows"].push_back({{"op", "F"}, {"start_ms", i * 0.125}, {"mb", i % 7}});
  std::vector<std::string> pieces;
  ASSERT_TRUE(StreamJson(doc, 2, [&](std::string_view p) {
                pieces.emplace_back(p);
                return absl::OkStatus();
              }).ok());
  ASSERT_GE(pieces.size(), 2u);
  std::string joined;
  for (const std::string& p : pieces) joined += p;
  EXPECT_EQ(joined, DumpJson(doc, 2) + "\n");
  EXPECT_NE(joined.find("caf\xc3\xa9/\xef\xbf\xbd.json"), std::string::npos);
  int calls = 0;
  EXPECT_EQ(StreamJson(doc, -1, [&](std::string_view) {
              ++calls;
              return absl::DataLossError("disk full");
            }),
            absl::DataLossError("disk full"));
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace rp::apps
