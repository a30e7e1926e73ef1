// `ringpipe timeline` on large and failing steps: the ops it would draw are counted from the plan before
// anything is predicted or run (schedule/step_intervals.h), and that count is the predictor's and the
// emulator's own.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "apps/cli.h"
#include "apps/config.h"
#include "apps/files.h"
#include "apps/flags.h"
#include "apps/plan.h"
#include "apps/subcommands.h"
#include "apps/svg.h"
#include "apps/timeline_failed.h"
#include "apps/report_reader.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "absl/strings/str_cat.h"
#include "runtime/faults.h"
#include "schedule/executor.h"
#include "schedule/predictor.h"
#include "schedule/step_intervals.h"
#include "tests/apps/binary_runner.h"

namespace rp::apps {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using rp::apps::testing::BinaryResult;
using rp::apps::testing::ExpectBadInput;
using rp::apps::testing::ReadFile;
using rp::apps::testing::RunBinary;
using rp::apps::testing::RunBinaryInShell;

absl::StatusOr<Plan> PlanOf(const std::vector<std::string>& argv, RunConfig* cfg_out = nullptr) {
  auto args = ParseSubcommandArgs("run", argv);
  if (!args.ok()) return args.status();
  absl::StatusOr<RunConfig> cfg = LoadConfig(*args, /*for_run=*/true);
  if (!cfg.ok()) return cfg.status();
  if (cfg_out != nullptr) *cfg_out = *cfg;
  return BuildPlan(*cfg, /*for_run=*/true);
}

// Layouts whose intervals differ in kind: TP all-reduces, EP all-to-alls, DP buckets (one and many),
// F&B ops, split backward passes, chunks, two directions.
const std::vector<std::vector<std::string>>& Layouts() {
  static const std::vector<std::vector<std::string>> layouts = {
      {"--preset=default"},
      {"--preset=s1"},
      {"--preset=s2"},
      {"--preset=s3-4d"},
      {"--pp=2", "--tp=2", "--dp=2", "--schedule=gpipe", "--microbatches=3", "--bucket_mb=0.001"},
      {"--pp=2", "--tp=1", "--dp=2", "--schedule=zb-h1", "--microbatches=4"},
      {"--pp=2", "--tp=2", "--dp=1", "--schedule=zb-v", "--microbatches=4"},
      {"--pp=2", "--tp=1", "--dp=1", "--schedule=interleaved", "--virtual_stages=2", "--microbatches=4"},
      {"--pp=2", "--tp=1", "--dp=2", "--schedule=dualpipev", "--microbatches=4"},
      {"--pp=4", "--tp=1", "--dp=1", "--schedule=dualpipe", "--microbatches=8"},
  };
  return layouts;
}

std::string Joined(const std::vector<std::string>& argv) {
  std::string s;
  for (const std::string& a : argv) s += a + " ";
  return s;
}

// The count from the plan is the predictor's timeline, device by device (every rank of every replica).
TEST(StepIntervals, CountFromThePlanIsThePredictorsTimeline) {
  for (const std::vector<std::string>& argv : Layouts()) {
    absl::StatusOr<Plan> plan = PlanOf(argv);
    ASSERT_TRUE(plan.ok()) << Joined(argv) << plan.status();
    absl::StatusOr<schedule::Prediction> pred = schedule::Predict(plan->execution, plan->predict);
    ASSERT_TRUE(pred.ok()) << Joined(argv) << pred.status();
    for (int rank = 0; rank < plan->grid.world_size(); ++rank) {
      const schedule::StepIntervals n = schedule::CountStepIntervals(plan->execution, plan->grid.CoordOf(rank).pp);
      uint64_t sends = 0;
      for (const schedule::OpInterval& iv : pred->Timeline(plan->grid, rank)) {
        sends += iv.kind == schedule::IntervalKind::kSend ? 1 : 0;
      }
      EXPECT_EQ(n.sends, sends) << Joined(argv) << "rank " << rank;
      EXPECT_EQ(n.sends + n.others, pred->Timeline(plan->grid, rank).size()) << Joined(argv) << "rank " << rank;
    }
  }
}

// And the emulator's (a run on the virtual clock: its kept step's timelines).
TEST(StepIntervals, CountFromThePlanIsTheEmulatorsTimeline) {
  for (const std::vector<std::string>& layout : Layouts()) {
    std::vector<std::string> argv = layout;
    argv.insert(argv.end(), {"--virtual_time", "--steps=2", "--train_size=256", "--test_size=64"});
    absl::StatusOr<Plan> plan = PlanOf(argv);
    ASSERT_TRUE(plan.ok()) << Joined(argv) << plan.status();
    auto exec = schedule::Executor::Create(plan->executor);
    ASSERT_TRUE(exec.ok()) << Joined(argv) << exec.status();
    auto run = (*exec)->Run();
    ASSERT_TRUE(run.ok()) << Joined(argv) << run.status();
    ASSERT_FALSE(run->timelines.empty()) << Joined(argv);
    for (size_t rank = 0; rank < run->timelines.size(); ++rank) {
      const schedule::StepIntervals n =
          schedule::CountStepIntervals(plan->execution, plan->grid.CoordOf(static_cast<int>(rank)).pp);
      EXPECT_EQ(n.sends + n.others, run->timelines[rank].size()) << Joined(argv) << "rank " << rank;
    }
  }
}

// A step of more ops than a chart draws (2^22) was refused only after its prediction (or its run):
// `timeline --predict_only --pp=2 --tp=2 --hidden=64x32 --microbatches=32000` (4.35 million ops to draw,
// TP all-reduces between 16 layers a stage) predicted for about a minute in over 3 GB first. Now refused
// from the plan's count, before predicting — in a fraction of a second within a 600 MB address space —
// and a run (two panels: half the micro-batches) before its run.
TEST(Timeline, AStepTooLargeToDrawIsRefusedBeforePredicting) {
  const fs::path dir = rp::apps::testing::TempDir("ringpipe_timeline", "too_many_ops");
  const fs::path svg = dir / "t.svg";
  for (const std::string mode : {"--predict_only --microbatches=32000", "--virtual_time --microbatches=16000"}) {
    const std::string cmd = "timeline " + mode + " --pp=2 --tp=2 --dp=1 --hidden=64x32 --out=" + svg.string();
    ExpectBadInput(RunBinaryInShell("ulimit -v 600000", cmd, dir),
                   "--microbatches: the step has 43520", cmd);  // 4352012 and 4352024 (the plan's counts)
    EXPECT_FALSE(fs::exists(svg)) << cmd;
  }
  fs::remove_all(dir);
}

// The line `timeline` ends with counts its rows in words that agree with the count ("1 device rows").
TEST(Timeline, TheLastLineCountsItsRowsInGoodEnglish) {
  const fs::path dir = rp::apps::testing::TempDir("ringpipe_timeline", "rows_line");
  const fs::path svg = dir / "t.svg";
  const BinaryResult one = RunBinary("timeline --predict_only --pp=1 --tp=1 --dp=1 --out=" + svg.string(), dir);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_NE(one.out.find(": 1 device row, predicted step"), std::string::npos) << one.out;
  const BinaryResult two = RunBinary("timeline --predict_only --pp=2 --tp=1 --dp=1 --out=" + svg.string(), dir);
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_NE(two.out.find(": 2 device rows, predicted step"), std::string::npos) << two.out;
  fs::remove_all(dir);
}

// `timeline --from_report` kept a DOM of the report's timeline and refused one of more than about
// 342000 ops ("holds more than the 256 MiB this reader keeps"), yet `timeline --report_json` (and
// `run`, `predict`) wrote such reports: `timeline --predict_only --pp=2 --microbatches=80000
// --report_json=r.json` drew its 400000 ops, and `timeline --from_report=r.json` refused the report it
// had just written. The ops are now turned into bars as they are parsed: the same chart, byte for byte,
// from the saved report, within a 600 MB address space.
TEST(TimelineReader, DrawsAReportTheToolWroteAsTheRunDrewIt) {
  const fs::path dir = rp::apps::testing::TempDir("ringpipe_timeline", "tool_written");
  const fs::path report = dir / "r.json", direct = dir / "direct.svg", drawn = dir / "drawn.svg";
  const BinaryResult w = RunBinary("timeline --predict_only --pp=2 --tp=1 --dp=1 --microbatches=80000 --report_json=" +
                                       report.string() + " --out=" + direct.string(), dir);
  ASSERT_EQ(w.exit_code, 0) << w.err;
  const json written = json::parse(ReadFile(report));
  size_t ops = 0;
  for (const json& d : written["timeline"]["predicted"]["devices"]) ops += d["ops"].size();
  EXPECT_GT(ops, 350000u) << "more than the old reader kept";
  const BinaryResult r = RunBinaryInShell("ulimit -v 600000", "timeline --from_report=" + report.string() +
                                                                  " --out=" + drawn.string(), dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ReadFile(drawn), ReadFile(direct));
  fs::remove_all(dir);
}

// Text of a report whose predicted panel holds `ops` ops over 64 devices, made as it is read: no file,
// no DOM (the generator for the reader's limits below).
class GeneratedReport {
 public:
  explicit GeneratedReport(size_t ops) : ops_(ops) {}
  absl::StatusOr<size_t> Read(char* buf, size_t size) {
    size_t n = 0;
    while (n < size) {
      if (at_ == pending_.size()) {
        if (!Next()) break;
      }
      const size_t k = std::min(size - n, pending_.size() - at_);
      std::memcpy(buf + n, pending_.data() + at_, k);
      n += k;
      at_ += k;
    }
    return n;
  }

 private:
  static constexpr size_t kDevices = 64;
  bool Next() {
    pending_.clear();
    at_ = 0;
    if (state_ == 0) {
      pending_ = R"({"schema":"ringpipe-report/2","layout":{"pp":64,"tp":1,"world":64},)"
                 R"("timeline":{"predicted":{"devices":[)";
      state_ = 1;
      return true;
    }
    if (state_ == 2) return false;
    const size_t per = (ops_ + kDevices - 1) / kDevices;
    // One device at a time, its ops in blocks.
    if (in_device_ == 0) pending_ = absl::StrCat(device_ > 0 ? "]}," : "", R"({"rank":)", device_, R"(,"pp":)", device_,
                                                R"(,"ops":[)");
    for (int i = 0; i < 4096 && in_device_ < per && done_ < ops_; ++i, ++in_device_, ++done_) {
      absl::StrAppend(&pending_, in_device_ > 0 ? "," : "", R"({"kind":"compute","op":"F","start_ms":)", in_device_,
                      R"(,"end_ms":)", in_device_ + 1, R"(,"mb":)", in_device_ % 1000, "}");
    }
    if (done_ == ops_) {
      absl::StrAppend(&pending_, "]}]}}}");
      state_ = 2;
    } else if (in_device_ == per) {
      ++device_;
      in_device_ = 0;
    }
    return true;
  }
  const size_t ops_;
  std::string pending_;
  size_t at_ = 0;
  int state_ = 0;
  size_t device_ = 0, in_device_ = 0, done_ = 0;
};

// VmSize of this process, bytes.
size_t MappedBytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmSize:", 0) == 0) return std::stoull(line.substr(7)) * 1024;
  }
  return 0;
}

// In a child whose address space may grow by `limit_bytes`: reads a generated report of `ops` ops;
// exits 0 when it is read with that many bars and its chart written to `svg` (as `timeline` writes it:
// OutputFiles), 1 when refused naming the chart's cap, 3 when memory ran out, 2 otherwise.
int ReadInLimitedChild(size_t ops, size_t limit_bytes, const fs::path& svg) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    // The child never returns into the test runner: a std::bad_alloc is exit 3.
    try {
      // On top of what the test process maps already (the executors of earlier tests left their
      // threads' malloc arenas mapped).
      const rlim_t limit = static_cast<rlim_t>(MappedBytes() + limit_bytes);
      rlimit rl{.rlim_cur = limit, .rlim_max = limit};
      ::setrlimit(RLIMIT_AS, &rl);
      GeneratedReport gen(ops);
      absl::StatusOr<TimelineReport> t =
          ReadTimelineReport([&](char* buf, size_t size) { return gen.Read(buf, size); });
      if (t.ok()) {
        const bool read = t->panels.size() == 1 && t->panels[0].bars.size() == ops && t->rows == 64;
        OutputFiles out;
        if (!read || !out.Declare("out", svg.string()).ok()) ::_exit(2);
        out.Set("out", svg::RenderGantt(t->title, t->panels));
        ::_exit(out.Commit().ok() && fs::file_size(svg) > 100 * ops ? 0 : 2);
      }
      const bool cap = t.status().message().find(absl::StrCat("ops: more than ", kMaxBars, " ops to draw")) !=
                       absl::string_view::npos;
      ::_exit(cap ? 1 : 2);
    } catch (...) {
      ::_exit(3);
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The reader's bound: a report of kMaxBars ops — the most `timeline` draws from a run — is read, drawn
// and written within 1.5 GiB more of address space (the old reader refused it past about 342000 ops; the
// chart, a 722 MB SVG, doubled its buffer as it grew and OutputFiles::Set copied it once more: 1.7 GB
// peak RSS for `timeline --from_report` of such a report); one more op is refused naming the cap, also
// within it. A hostile report cannot make it hold more.
TEST(TimelineReader, ReadsAReportAtTheChartsCapInBoundedMemory) {
  constexpr size_t kLimit = size_t{3} << 29;
  const fs::path dir = rp::apps::testing::TempDir("ringpipe_timeline", "charts_cap");
  EXPECT_EQ(ReadInLimitedChild(kMaxBars, kLimit, dir / "t.svg"), 0);
  EXPECT_EQ(ReadInLimitedChild(kMaxBars + 1, kLimit, dir / "u.svg"), 1);
  EXPECT_FALSE(fs::exists(dir / "u.svg"));
  fs::remove_all(dir);
}

// The ops of a report's text are turned into bars as they are parsed, yet read as the DOM was: errors
// keep their order (a device's bad rank before a later device's bad op). A key given twice, which kept
// its last value (an op list replaced by another, or by null), is refused naming its path, and so is
// one in a section the reader skips.
TEST(TimelineReader, StreamedOpsFollowTheDomsRules) {
  const std::string head = R"({"schema":"ringpipe-report/2","timeline":{"predicted":{"devices":[)";
  const std::string good = R"({"start_ms":0,"end_ms":1,"op":"F","mb":3})";
  const std::string bad = R"({"start_ms":2,"end_ms":1})";
  auto read = [&](const std::string& devices) { return ReadTimelineReport(head + devices + "]}}}"); };
  absl::StatusOr<TimelineReport> t = read(R"({"ops":[)" + bad + R"(],"ops":[)" + good + "," + good + "]}");
  EXPECT_EQ(t.status().message(), "timeline.predicted.devices[0].ops: duplicate key");
  t = read(R"({"ops":[)" + good + R"(]},{"ops":[)" + good + R"(],"ops":null})");
  EXPECT_EQ(t.status().message(), "timeline.predicted.devices[1].ops: duplicate key");
  t = read(R"({"ops":[)" + good + R"(],"ops":5})");
  EXPECT_EQ(t.status().message(), "timeline.predicted.devices[0].ops: duplicate key");
  t = read(R"({"ops":[)" + good + "," + R"({"start_ms":0,"end_ms":1,"mb":1,"mb":2})" + "]}");
  EXPECT_EQ(t.status().message(), "timeline.predicted.devices[0].ops[1].mb: duplicate key");
  t = ReadTimelineReport(head + R"({"ops":[)" + good + R"(]}]},"emulated":{"devices":[{"rank":0,"rank":0}]}}})");
  EXPECT_EQ(t.status().message(), "timeline.emulated.devices[0].rank: duplicate key");
  t = read(R"({"rank":-1,"ops":[)" + good + R"(]},{"ops":[)" + good + "," + bad + "]}");
  EXPECT_EQ(t.status().message(), "timeline.predicted.devices[0].rank: expected an integer in 0..1048575, got -1");
  t = read(R"({"ops":[)" + good + R"(]},{"ops":[)" + good + "," + bad + "]}");
  EXPECT_EQ(t.status().message(), "timeline.predicted.devices[1].ops[1].end_ms: is before start_ms (1 < 2)");
  t = ReadTimelineReport(head + R"({"ops":[)" + good + "," + good + R"(]}]},"predicted":{"devices":[{"ops":[)" + good +
                         "]}]}}}");
  EXPECT_EQ(t.status().message(), "timeline.predicted: duplicate key");
  // In a section the reader skips, at the top level, and a key that is not a plain name.
  t = ReadTimelineReport(R"({"steps":[{"a":1},{"b":{"c":[0,{"d":1,"d":2}]}}],)" + head.substr(1) + R"({"ops":[)" + good + "]}]}}}");
  EXPECT_EQ(t.status().message(), "steps[1].b.c[1].d: duplicate key");
  t = ReadTimelineReport(head + R"({"ops":[)" + good + R"(]}]}},"schema":"ringpipe-report/2"})");
  EXPECT_EQ(t.status().message(), "schema: duplicate key");
  t = ReadTimelineReport(std::string(R"({"a b":1,"a b":2})"));
  EXPECT_EQ(t.status().message(), R"(["a b"]: duplicate key)");
  // The same key in two objects is no duplicate.
  t = read(R"({"ops":[)" + good + "," + good + R"(]},{"ops":[)" + good + "]}");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->panels[0].bars.size(), 3u);
}

// A run's faults (host.faults, written by `run` and `timeline` with the fault flags) are named in the
// chart's title, read from the text as from a DOM; the host section's other members are not kept, and
// faults of the wrong type are refused naming their path.
TEST(TimelineReader, TheTitleNamesARunsFaults) {
  const std::string head = R"({"schema":"ringpipe-report/2","timeline":{"predicted":{"devices":[{"ops":[)"
                           R"({"start_ms":0,"end_ms":1,"op":"F","mb":0}]}]}},"host":{"wall_seconds":1,)";
  auto read = [&](const std::string& faults) { return ReadTimelineReport(head + R"("faults":)" + faults + "}}"); };
  absl::StatusOr<TimelineReport> t = read(R"(["link 0->2: slow x10 from step 0","rank 1: straggler x1.5"])");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_NE(t->title.find(" — with 2 faults: link 0->2: slow x10 from step 0; rank 1: straggler x1.5"),
            std::string::npos) << t->title;
  absl::StatusOr<TimelineReport> dom = ReadTimelineReport(json::parse(head + R"("faults":["rank 1: straggler x1.5"]}})"));
  ASSERT_TRUE(dom.ok()) << dom.status();
  EXPECT_NE(dom->title.find(" — with 1 fault: rank 1: straggler x1.5"), std::string::npos) << dom->title;
  t = read("[]");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->title.find("fault"), std::string::npos) << t->title;
  // Many faults (one per rank with --jitter) are cut to a readable length.
  std::string many = "[";
  for (int r = 0; r < 500; ++r) many += absl::StrCat(r > 0 ? "," : "", "\"rank ", r, ": jitter up to +10% (seed 3)\"");
  t = read(many + "]");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_NE(t->title.find(" — with 500 faults: rank 0: jitter"), std::string::npos) << t->title;
  EXPECT_LT(t->title.size(), 400u) << t->title;
  EXPECT_EQ(read("5").status().message(), "host.faults: expected an array of strings, got 5");
  EXPECT_EQ(read(R"(["a",7])").status().message(), "host.faults[1]: expected a string, got 7");
}

// A report that is not JSON said only "is not JSON" (its header promised "is not JSON: ..."): a user
// with a 300 MB report that a tool cut short or a hand edit broke could not tell where. Now nlohmann's
// words, where and why, on one line cut to a readable length (its last token is quoted whole).
TEST(TimelineReader, TextThatIsNotJsonIsRefusedSayingWhereAndWhy) {
  EXPECT_EQ(ReadTimelineReport(std::string("{\n  \"schema\": tru }")).status().message(),
            "is not JSON: parse error at line 2, column 16: syntax error while parsing value - invalid literal; "
            "last read: '\"schema\": tru '");
  EXPECT_EQ(ReadTimelineReport(std::string(R"({"timeline":{"predicted":{"step_ms":1e999}}})")).status().message(),
            "is not JSON: number overflow parsing '1e999'");
  const std::string cut = "{\"a\":\"" + std::string(5000, 'x');
  const absl::StatusOr<TimelineReport> t = ReadTimelineReport(cut);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message().substr(0, 52), "is not JSON: parse error at line 1, column 5007: syn");
  EXPECT_LE(t.status().message().size(), 220u) << t.status().message();
  EXPECT_EQ(OneLine(std::string(t.status().message())), t.status().message());
}

// A report of more devices than a chart has rows (kMaxRows) was drawn cut short without a word: its
// first 4096 devices, "wrote t.svg: 4096 device rows". Now refused naming the count and the cap; at the
// cap it is drawn whole.
TEST(TimelineReader, MoreDevicesThanAChartHasRowsAreRefusedNotCut) {
  auto report = [](size_t devices) {
    std::string text = R"({"schema":"ringpipe-report/2","timeline":{"predicted":{"devices":[)";
    for (size_t i = 0; i < devices; ++i) {
      absl::StrAppend(&text, i > 0 ? "," : "", R"({"ops":[{"start_ms":)", i, R"(,"end_ms":)", i + 1, "}]}");
    }
    return text + "]}}}";
  };
  absl::StatusOr<TimelineReport> all = ReadTimelineReport(report(kMaxRows));
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->rows, kMaxRows);
  EXPECT_EQ(all->panels[0].bars.size(), kMaxRows);
  absl::StatusOr<TimelineReport> more = ReadTimelineReport(report(kMaxRows + 1));
  ASSERT_FALSE(more.ok()) << more->rows << " rows drawn";
  EXPECT_EQ(more.status().message(), "timeline.predicted.devices: 4097 devices; a chart draws at most 4096 rows");
}

// `timeline` failed at run time without writing anything: a stall (the host kept the run from
// progressing for the watchdog timeout) or a device's exception left neither the chart nor the report
// asked for. As `run`, both are now written, marked failed: the report's status and failure, the
// chart's title over the predicted step. Here the outputs themselves, of a device's exception injected
// in-process (rank 1 throws in step 1); through the binary's --fault: timeline_cmd_test.cc.
TEST(Timeline, ARunThatFailsAtRunTimeStillGivesItsChartAndReportMarkedFailed) {
  RunConfig cfg;
  absl::StatusOr<Plan> plan = PlanOf({"--pp=2", "--tp=1", "--dp=1", "--microbatches=2", "--steps=3", "--virtual_time",
                                      "--reference=false", "--train_size=256", "--test_size=64"}, &cfg);
  ASSERT_TRUE(plan.ok()) << plan.status();
  schedule::ExecutorOptions options = plan->executor;
  options.faults.op_faults.push_back({.kind = OpFaultKind::kThrow, .rank = 1, .step = 1, .op = 0});
  auto exec = schedule::Executor::Create(options);
  ASSERT_TRUE(exec.ok()) << exec.status();
  ASSERT_FALSE((*exec)->Run().ok());
  const schedule::RunFailure* failure = (*exec)->failure();
  ASSERT_NE(failure, nullptr);
  const FailedTimeline out = FailedTimelineOutputs(cfg, *plan, *failure, HostUsage{}, "");
  const json report = json::parse(out.report_json);
  EXPECT_EQ(report["status"], "failed");
  EXPECT_EQ(report["failure"]["rank"], 1);
  EXPECT_EQ(report["failure"]["step"], 1);
  EXPECT_EQ(report["steps"].size(), 1u);
  EXPECT_NE(out.svg.find("the run FAILED at step 1 (nothing measured): the predicted step"), std::string::npos);
  EXPECT_NE(out.svg.find("predicted — the predictor"), std::string::npos);
  EXPECT_EQ(out.svg.find("measured — step"), std::string::npos);
  // The chart is the failed report's own, as `timeline --from_report` draws it (the title aside).
  absl::StatusOr<TimelineReport> drawn = ReadTimelineReport(out.report_json);
  ASSERT_TRUE(drawn.ok()) << drawn.status();
  EXPECT_EQ(out.svg, svg::RenderGantt(drawn->title + " — the run FAILED at step 1 (nothing measured): the predicted step",
                                      drawn->panels));
}

}  // namespace
}  // namespace rp::apps
