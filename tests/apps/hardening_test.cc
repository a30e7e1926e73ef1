// Issue 12's classes of failure, one regression test per class, through the binary as a user (or an
// attacker) would drive it: crashes on input, memory exhaustion, special files, overflow, false
// faults, output files, lost standard output, ignored arguments. Each test holds the contract of
// README/docs: bad input prints one line naming the field and exits 2 without writing any file.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "apps/cli.h"
#include "apps/files.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/tracer.h"
#include "tests/apps/binary_runner.h"

namespace rp::apps {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Result = rp::apps::testing::BinaryResult;
using rp::apps::testing::RunBinary;

fs::path TempDir(const std::string& name) { return rp::apps::testing::TempDir("ringpipe_hardening", name); }

using rp::apps::testing::ReadFile;

using rp::apps::testing::ExpectBadInput;

using rp::apps::testing::Leftovers;

// 1. Crashes on input: deep nesting, bytes that are not UTF-8, malformed reports.
TEST(Hardening, MalformedInputIsOneLineAndExitTwoNeverACrash) {
  const fs::path dir = TempDir("crash");
  const fs::path deep = dir / "deep.json";
  std::ofstream(deep) << "{\"dp\": " << std::string(100000, '[') << std::string(100000, ']') << "}";
  ExpectBadInput(RunBinary("predict --config=" + deep.string(), dir), "nested deeper than 64", "deep config");
  ExpectBadInput(RunBinary("predict --overlap=\"$(printf '\\377')\"", dir), "--overlap", "0xff bool");
  ExpectBadInput(RunBinary("predict --report_json=\"" + dir.string() + "/r$(printf '\\351').json\"", dir), "report_json",
                 "Latin-1 path");
  ExpectBadInput(RunBinary("predict --link=\"$(printf '\\377')\"", dir), "\\xff", "0xff link");

  struct Report {
    const char* name;
    std::string text;
  } reports[] = {
      {"measured-array", R"({"timeline":{"measured":[]}})"},
      {"not-json", "{\"timeline\": "},
      {"no-timeline", R"({"schema": "ringpipe-report/2"})"},
      {"wrong-types", R"({"timeline":{"predicted":{"devices":"x"},"measured":{"devices":{"0":1}}}})"},
      {"deep", "{\"timeline\":" + std::string(5000, '[') + std::string(5000, ']') + "}"},
      {"array", "[1, 2]"},
      {"old-schema", R"({"schema":"ringpipe-report/1","timeline":{"predicted":{"devices":[]}}})"},
      {"no-schema", R"({"timeline":{"predicted":{"step_ms":1,"devices":[{"rank":0,"ops":[]}]}}})"},
      {"bad-utf8", "{\"timeline\": {\"predicted\": \"\xff\"}}"},
  };
  for (const Report& r : reports) {
    const fs::path path = dir / (std::string(r.name) + ".json");
    std::ofstream(path, std::ios::binary) << r.text;
    const fs::path svg = dir / "t.svg";
    ExpectBadInput(RunBinary("timeline --from_report=" + path.string() + " --out=" + svg.string(), dir),
                   "--from_report", r.name);
    EXPECT_FALSE(fs::exists(svg)) << r.name;
    fs::remove(svg);
  }
  // A report whose values have odd types or sizes is refused naming the value by its path (it used to
  // be drawn with the values clamped or ignored: a rank of 2^63 wrapped, -5 ms became 0).
  const std::string head = R"({"schema":"ringpipe-report/2","layout":{"world":4,"pp":2,"tp":1},"timeline":{"predicted":{"step_ms":10,"devices":[)";
  const std::string good_dev = R"({"rank":0,"pp":0,"tp":0,"ops":[{"kind":"compute","op":"F","start_ms":0,"end_ms":1,"mb":0}]})";
  const std::string tail = "]}}}";
  auto dev_with_op = [&](const std::string& op) {
    return R"({"rank":1,"pp":1,"tp":0,"ops":[{"kind":"compute","op":"F","start_ms":0,"end_ms":1},)" + op + "]}";
  };
  struct Tampered {
    const char* name;
    std::string devices;
    const char* what;
  } tampered[] = {
      {"rank-2^63", R"({"rank":9223372036854775808,"ops":[]})", "timeline.predicted.devices[0].rank: expected an integer in 0..3"},
      {"rank-outside", good_dev + R"(,{"rank":4,"ops":[]})", "timeline.predicted.devices[1].rank: expected an integer in 0..3"},
      {"pp-negative", R"({"rank":0,"pp":-1,"ops":[]})", "timeline.predicted.devices[0].pp: expected an integer in 0..1"},
      {"start-negative", good_dev + "," + dev_with_op(R"({"start_ms":-5,"end_ms":1})"),
       "timeline.predicted.devices[1].ops[1].start_ms: must be in [0, 1e+12] ms, got -5"},
      {"end-text", dev_with_op(R"({"start_ms":0,"end_ms":"abc"})"), "timeline.predicted.devices[0].ops[1].end_ms: expected a number"},
      {"end-missing", dev_with_op(R"({"start_ms":0})"), "timeline.predicted.devices[0].ops[1].end_ms: missing"},
      {"end-before-start", dev_with_op(R"({"start_ms":5,"end_ms":1})"), "timeline.predicted.devices[0].ops[1].end_ms: is before start_ms"},
      {"end-huge", dev_with_op(R"({"start_ms":0,"end_ms":1e300})"), "timeline.predicted.devices[0].ops[1].end_ms: must be in [0, 1e+12] ms"},
      {"mb-text", dev_with_op(R"({"start_ms":0,"end_ms":1,"mb":"2"})"), "timeline.predicted.devices[0].ops[1].mb: expected an integer"},
      {"device-not-object", good_dev + ",1", "timeline.predicted.devices[1]: expected an object"},
      {"no-devices", "", "timeline.predicted.devices: no devices to draw"},
  };
  for (const Tampered& t : tampered) {
    const fs::path path = dir / (std::string(t.name) + ".json");
    std::ofstream(path, std::ios::binary) << head << t.devices << tail;
    const fs::path svg = dir / "t.svg";
    ExpectBadInput(RunBinary("timeline --from_report=" + path.string() + " --out=" + svg.string(), dir),
                   "--from_report: '" + path.string() + "': " + t.what, t.name);
    EXPECT_FALSE(fs::exists(svg)) << t.name;
  }
  // The same report untampered draws.
  std::ofstream(dir / "good.json") << head << good_dev << tail;
  const Result good = RunBinary("timeline --from_report=" + (dir / "good.json").string() + " --out=" +
                                    (dir / "good.svg").string(), dir);
  EXPECT_EQ(good.exit_code, 0) << good.err;
  EXPECT_NE(ReadFile(dir / "good.svg").find("<svg"), std::string::npos);
  // The layout itself is checked too.
  std::ofstream(dir / "world.json") << R"({"schema":"ringpipe-report/2","layout":{"world":"big"},"timeline":{"predicted":{"devices":[)"
                                    << good_dev << tail;
  ExpectBadInput(RunBinary("timeline --from_report=" + (dir / "world.json").string() + " --out=" +
                               (dir / "w.svg").string(), dir),
                 "'" + (dir / "world.json").string() + "': layout.world: expected an integer in 1..1048576", "world");
  fs::remove_all(dir);
}

// 2. Memory exhaustion: estimated before allocating, refused naming the field.
TEST(Hardening, RunsThatWouldNotFitInMemoryAreBadInputAndInvalidSweepPoints) {
  const fs::path dir = TempDir("memory");
  // The estimate is compared with MemAvailable, here replaced by a 200 MB limit (inherited by the
  // binary) so that the test does not depend on the host.
  ASSERT_EQ(::setenv("RINGPIPE_MEMORY_LIMIT_BYTES", "200000000", 1), 0);
  ExpectBadInput(RunBinary("run --train_size=1073741824 --steps=1 --virtual_time", dir),
                 "train_size: the run would allocate about", "huge data set");
  ExpectBadInput(RunBinary("run --dp=64 --pp=8 --tp=8 --hidden=1024x8 --steps=1 --virtual_time", dir),
                 "the run would allocate about", "many devices");
  // 2^20 devices in replicas that fold (pp 8 per replica: two whole nodes), at 512 B a device.
  ExpectBadInput(RunBinary("predict --dp=131072 --pp=8 --tp=1 --hidden=64x16", dir),
                 "--dp: the prediction would allocate about", "predict, 2^20 devices");
  // Mixture-of-experts weights count: 16 experts of hidden 4096 over 2 replicas need about 460 MB (the
  // dense layers alone are a few MB, which is all the estimate used to count).
  ExpectBadInput(RunBinary("run --virtual_time --steps=1 --dp=2 --pp=1 --tp=1 --hidden=64x3 --moe_layers=1 "
                           "--experts=16 --expert_hidden=4096 --ep=2 --microbatches=2",
                           dir),
                 "--expert_hidden: the run would allocate about", "MoE experts");
  // A sweep point that would not fit is an invalid point; the others run.
  const fs::path out = dir / "out";
  const Result r = RunBinary("sweep --preset=s1 --steps=1 --reference=false --virtual_time "
                             "--axis=train_size=4096,8000000 --out_dir=" + out.string(), dir);
  ::unsetenv("RINGPIPE_MEMORY_LIMIT_BYTES");
  EXPECT_EQ(r.exit_code, kExitSomePointsFailed) << r.err;
  const std::string csv = ReadFile(out / "sweep.csv");
  EXPECT_NE(csv.find("invalid"), std::string::npos) << csv;
  EXPECT_NE(csv.find("the run would allocate about"), std::string::npos) << csv;
  fs::remove_all(dir);
}

// `allreduce` and `alltoall` allocate ranks x their buffers per row: a row that would not fit is bad
// input before anything is allocated or printed (it was std::bad_alloc, exit 134, or the OOM killer).
TEST(Hardening, CollectiveBenchmarksThatWouldNotFitInMemoryAreBadInput) {
  const fs::path dir = TempDir("bench-memory");
  const std::string rows = (dir / "rows.json").string();
  ASSERT_EQ(::setenv("RINGPIPE_MEMORY_LIMIT_BYTES", "200000000", 1), 0);
  for (const std::string cmd : {"allreduce", "alltoall"}) {
    // 4 ranks x (64 MiB in + 64 MiB out): 537 MB.
    ExpectBadInput(RunBinary(cmd + " --ranks=4 --min_bytes=64M --max_bytes=64M --iters=1 --warmup=0 --json=" + rows,
                             dir),
                   "--max_bytes: a row of 67108864 B on 4 ranks", cmd);
    ExpectBadInput(RunBinary(cmd + " --ranks=4 --min_bytes=64M --max_bytes=64M --iters=1 --warmup=0 "
                             "--link=dgx-a100 --codec=bf16",
                             dir),
                   "would allocate about", cmd + " timed");
    EXPECT_FALSE(fs::exists(rows)) << cmd;
    // A small row with huge segments fits: lossy wire buffers are sized by the largest segment.
    const Result r = RunBinary(cmd + " --ranks=2 --min_bytes=4K --max_bytes=4K --segment_bytes=1G --codec=fp16 "
                               "--iters=1 --warmup=0",
                               dir);
    EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.err;
  }
  ::unsetenv("RINGPIPE_MEMORY_LIMIT_BYTES");
  fs::remove_all(dir);
}

TEST(Hardening, TheTracerKeepsAtMostItsCapAndCountsTheRest) {
  Tracer tracer(/*num_devices=*/2, /*devices_per_node=*/8, /*max_events=*/100);
  for (int i = 0; i < 1000; ++i) {
    tracer.Record({.wall_start_ns = i, .wall_end_ns = i + 1, .name = "F", .rank = i % 2});
  }
  for (int i = 0; i < 1000; ++i) tracer.RecordPort({.port = i % 3, .start_ns = i, .end_ns = i + 1});
  // At most the cap in all, ops and port events together; every other event counted.
  EXPECT_LE(tracer.Events().size() + tracer.port_events().size(), 100u);
  EXPECT_GT(tracer.port_events().size(), 0u);
  EXPECT_EQ(tracer.Events().size() + tracer.port_events().size() + tracer.capped(), 2000u);
  Tracer unbounded(2, 8);
  for (int i = 0; i < 10000; ++i) unbounded.Record({.wall_start_ns = i, .name = "F", .rank = 0});
  EXPECT_EQ(unbounded.Events().size(), 10000u);
  EXPECT_EQ(unbounded.capped(), 0u);
}

// 3. Special files: refused before they are read, never a hang; `-` reads standard input.
TEST(Hardening, InputsMustBeRegularFilesOrStandardInput) {
  const fs::path dir = TempDir("special");
  const fs::path fifo = dir / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ExpectBadInput(RunBinary("predict --config=" + fifo.string(), dir), "is a FIFO", "fifo config");
  ExpectBadInput(RunBinary("timeline --from_report=" + fifo.string() + " --out=" + (dir / "t.svg").string(), dir),
                 "is a FIFO", "fifo report");
  ExpectBadInput(RunBinary("predict --config=/dev/zero", dir), "is a device", "/dev/zero");
  ExpectBadInput(RunBinary("predict --config=" + dir.string(), dir), "is a directory", "directory");
  std::ofstream(dir / "in.json") << "{\"preset\": \"s1\", \"microbatches\": 4}";
  const Result r = RunBinary("predict --config=- --report_json=" + (dir / "r.json").string() + " < " +
                                 (dir / "in.json").string(),
                             dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(ReadFile(dir / "r.json"))["config"]["microbatches"], 4);
  // A sweep reads standard input once for all its points.
  const Result sweep = RunBinary("sweep --predict_only --config=- --axis=pp=1,2 --out_dir=" + (dir / "out").string() +
                                     " < " + (dir / "in.json").string(),
                                 dir);
  ASSERT_EQ(sweep.exit_code, 0) << sweep.err;
  EXPECT_EQ(std::count(sweep.out.begin(), sweep.out.end(), '\n'), 4) << sweep.out;  // header, 2 points, "# wrote"
  EXPECT_EQ(sweep.out.find("invalid"), std::string::npos) << sweep.out;
  fs::remove_all(dir);
}

// A prediction too large to play device by device names why its replicas are not folded into one: the
// node/NIC advice is wrong for an EP or straggler layout whose pp x tp already fills whole nodes, and a
// single replica has nothing to fold.
TEST(Hardening, UnfoldedPredictionTooLargeNamesTheRealReason) {
  const fs::path dir = TempDir("unfolded");
  const std::string big = "predict --dp=4096 --pp=16 --tp=1 --microbatches=64 --hidden=64x16 ";
  const std::string layout_advice = "Make pp x tp a multiple or a divisor of devices_per_node";
  // DualPipe's gradient rings visit each replica's two copies in turn: its 4096 replicas fold too.
  const Result dualpipe = RunBinary(big + "--schedule=dualpipe", dir);
  EXPECT_EQ(dualpipe.exit_code, 0) << dualpipe.err;
  const Result straggler = RunBinary(big + "--straggler_rank=5 --straggler_factor=2", dir);
  ExpectBadInput(straggler, "the straggler (rank 5, factor 2) slows one replica only", "straggler");
  EXPECT_EQ(straggler.err.find(layout_advice), std::string::npos) << straggler.err;
  // EP with one EP group of every replica: nothing folds.
  const std::string moe = "predict --pp=16 --microbatches=32 --hidden=64x16 --moe_layers=all --experts=128 ";
  const Result ep = RunBinary(moe + "--dp=128 --ep=128", dir);
  ExpectBadInput(ep, "expert parallelism with one EP group of every replica: the EP all-to-alls exchange tokens",
                 "ep");
  EXPECT_EQ(ep.err.find(layout_advice), std::string::npos) << ep.err;
  // Smaller EP groups fold into one EP group, which must still be small enough to play.
  ExpectBadInput(RunBinary(moe + "--dp=256 --ep=128", dir),
                 "--ep: the predictor plays one EP group whole (the all-to-alls exchange tokens between its 128 "
                 "replicas; pp x tp x ep = 4096 devices)",
                 "ep group too large");
  // Nodes of 48 devices hold a replica and a half (pp 16 x tp 2): the nodes repeat every 3 replicas, the
  // layout every lcm(64, 3) = 192, and the refusal counts those (it said "one EP group ... its 64
  // replicas" for them).
  ExpectBadInput(RunBinary(moe + "--dp=384 --ep=64 --devices_per_node=48", dir),
                 "--ep: the predictor plays 192 replicas whole: the all-to-alls exchange tokens between the 64 "
                 "replicas of an EP group, and on nodes of 48 devices the layout repeats only every 192 "
                 "replicas (pp x tp x 192 = 6144 devices)",
                 "ep groups out of step with the nodes");
  // 65536 devices in EP groups of 2 fold into one group of 2 replicas: predicted in well under a second.
  const Result ep_folds = RunBinary(big + "--moe_layers=all --ep=2", dir);
  EXPECT_EQ(ep_folds.exit_code, 0) << ep_folds.err;
  // One replica of 65536 devices (a TP ring of 256 per stage): nothing to fold, too many messages.
  const Result one = RunBinary(
      "predict --dp=1 --pp=256 --tp=256 --microbatches=64 --hidden=256x300 --devices_per_node=256", dir);
  ExpectBadInput(one, "--microbatches: this layout's one replica (pp x tp = 65536 devices", "one replica");
  EXPECT_EQ(one.err.find("replicas of this layout are not identical"), std::string::npos) << one.err;
  // The same 16-stage layout with 1F1B folds its 4096 replicas: predicted in well under a second.
  const Result folds = RunBinary(big + "--schedule=1f1b", dir);
  EXPECT_EQ(folds.exit_code, 0) << folds.err;
  fs::remove_all(dir);
}

// The model-stage count in messages and help follows the schedule's placement: zb-v and dualpipev cut the
// model into 2 x pp stages whatever virtual_stages says, dualpipe into pp (two directions over them).
TEST(Hardening, ModelStageCountsInMessagesFollowTheSchedule) {
  const fs::path dir = TempDir("stages");
  ExpectBadInput(RunBinary("predict --schedule=dualpipe --pp=4 --microbatches=8 --hidden=8x8 "
                           "--layers_per_stage=2,2,2,2,1",
                           dir),
                 "--layers_per_stage: has 5 entries; expected one per model stage: 4 model stages (pp=4; dualpipe's "
                 "two directions run over the same stages)",
                 "dualpipe layers_per_stage");
  ExpectBadInput(RunBinary("predict --schedule=dualpipe --pp=8 --microbatches=16 --hidden=8x3", dir),
                 "--pp: 8 model stages (pp=8; dualpipe's two directions run over the same stages) but the model has "
                 "only 4 layers",
                 "dualpipe pp");
  ExpectBadInput(RunBinary("predict --schedule=zb-v --pp=4 --hidden=8x3", dir),
                 "--pp: 8 model stages (pp=4 x 2 chunks) but the model has only 4 layers", "zb-v pp");
  ExpectBadInput(RunBinary("predict --schedule=zb-v --pp=2 --hidden=8x7 --layers_per_stage=4,4", dir),
                 "expected one per model stage: 4 model stages (pp=2 x 2 chunks)", "zb-v layers_per_stage");
  const Result help = RunBinary("predict --help", dir);
  std::string words;  // the help as one line: it wraps its descriptions
  for (const char c : help.out) {
    if (c == '\n' || c == ' ') {
      if (!words.empty() && words.back() != ' ') words += ' ';
    } else {
      words += c;
    }
  }
  EXPECT_NE(words.find("(pp x virtual_stages counts; zb-v and dualpipev: 2 x pp; dualpipe: pp)"), std::string::npos)
      << help.out;
  fs::remove_all(dir);
}

// 4. Overflow: a config whose modeled times do not fit int64 nanoseconds is refused naming the field.
TEST(Hardening, ModeledTimesThatDoNotFitAreRefusedNamingTheField) {
  const fs::path dir = TempDir("overflow");
  ExpectBadInput(RunBinary("predict --alpha_us=1e16", dir), "--alpha_us", "alpha");
  ExpectBadInput(RunBinary("predict --straggler_factor=1e300", dir), "--straggler_factor", "straggler");
  ExpectBadInput(RunBinary("predict --forward_ms=1e9 --backward_ms=1e9 --microbatches=100000", dir), "--backward_ms",
                 "F x m");
  ExpectBadInput(RunBinary("predict --bandwidth_gbps=1e-300", dir), "--bandwidth_gbps", "bandwidth");
  ExpectBadInput(RunBinary("predict --cost_model=flops --flops_hidden=16777216 --flops_seq_len=16777216", dir),
                 "flops_", "flops");
  // A prediction whose replicas do not fold plays every device's messages (dp² of them): bounded.
  // (Replicas of one device, four a node, repeat every four replicas: they fold, unless they share the NIC.)
  ExpectBadInput(RunBinary("predict --dp=8192 --pp=1 --tp=1 --hidden=64x16 --steps=1 --microbatches=1 --nics_per_node=1",
                           dir),
                 "--dp: the 8192 replicas of this layout are not identical (a NIC shared by replicas",
                 "unfolded prediction too large");
  EXPECT_EQ(RunBinary("predict --dp=8192 --pp=1 --tp=1 --hidden=64x16 --steps=1 --microbatches=1", dir).exit_code, 0);
  // Run-time faults whose factors would not fit either: refused before the run, naming the flag.
  const fs::path report = dir / "f.json";
  ExpectBadInput(RunBinary("run --virtual_time --steps=1 --fault=slow_link:src=0,dst=2,factor=1e15 --report_json=" +
                               report.string(),
                           dir),
                 "--fault: a factor of 1e+15: the modeled times would not fit", "slow link factor");
  ExpectBadInput(RunBinary("run --virtual_time --steps=1 --fault=stall:rank=9,step=0,op=0", dir),
                 "--fault: 'stall:rank=9,step=0,op=0': rank=9 is not a rank of the 8 devices", "fault rank");
  // A real-clock op longer than the watchdog would be reported as a stall it is not: refused.
  ExpectBadInput(RunBinary("run --time_scale=1000 --steps=1 --dp=1 --pp=1 --tp=1 --forward_ms=11 --backward_ms=1 "
                           "--microbatches=1 --report_json=" + report.string(),
                           dir),
                 "--time_scale: at time scale 1000 the longest op (11 ms modeled) takes 11 s", "op over watchdog");
  ExpectBadInput(RunBinary("run --time_scale=50 --steps=1 --forward_ms=4 --straggler=1:100", dir),
                 "--straggler: at time scale 50 the longest op (400 ms modeled, with the fault flags' factor of 100) takes 20 s", "straggler over watchdog");
  EXPECT_FALSE(fs::exists(report));
  // At the edge: large but representable times give positive, finite figures.
  const Result r = RunBinary("predict --forward_ms=1e6 --backward_ms=1e6 --microbatches=64 --report_json=" +
                                 (dir / "r.json").string(),
                             dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(ReadFile(dir / "r.json"));
  EXPECT_GT(j["step_time_ms"]["predicted"].get<double>(), 0);
  EXPECT_GT(j["t1_ms"].get<double>(), 0);
  EXPECT_GT(j["speedup"]["predicted"].get<double>(), 0);
  fs::remove_all(dir);
}

// 5. False faults: validation accepts exactly what comm's collectives take.
TEST(Hardening, SegmentBytesValidationMatchesTheCollectives) {
  const fs::path dir = TempDir("segment");
  ExpectBadInput(RunBinary("run --segment_bytes=2147483648", dir), "--segment_bytes", "2 GiB");
  ExpectBadInput(RunBinary("run --segment_bytes=6", dir), "--segment_bytes", "6");
  ExpectBadInput(RunBinary("run --segment_bytes=64K,128K", dir), "takes one size", "list");
  for (const char* ok : {"1G", "64K", "4", "0"}) {
    const fs::path report = dir / "r.json";
    const Result r = RunBinary(std::string("predict --segment_bytes=") + ok + " --report_json=" + report.string(), dir);
    EXPECT_EQ(r.exit_code, 0) << ok << ": " << r.err;
  }
  EXPECT_EQ(json::parse(ReadFile(dir / "r.json"))["collectives"]["segment_bytes"], 0);
  const Result r = RunBinary("predict --segment_bytes=64K --report_json=" + (dir / "k.json").string(), dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(ReadFile(dir / "k.json"))["collectives"]["segment_bytes"], 65536);
  fs::remove_all(dir);
}



// 14. Messages name the field that is wrong, its real range and where the value came from.
TEST(Hardening, MessagesNameTheRightFieldAndRange) {
  const fs::path dir = TempDir("messages");
  const fs::path cfg = dir / "c.json";
  std::ofstream(cfg) << R"({"preset": ""})";
  ExpectBadInput(RunBinary("predict --config=" + cfg.string(), dir), cfg.string() + ":1: preset: ", "empty preset");
  std::ofstream(cfg, std::ios::trunc) << "{\n  \"steps\": 1,\n  \"preset\": \"s9\"\n}";
  ExpectBadInput(RunBinary("predict --config=" + cfg.string(), dir), cfg.string() + ":3: preset: ", "unknown preset");
  // The flag and the file say the same range, the field's.
  ExpectBadInput(RunBinary("predict --seed=-1", dir), "--seed: must be in 0..9223372036854775807, got -1", "seed flag");
  std::ofstream(cfg, std::ios::trunc) << R"({"seed": -1})";
  ExpectBadInput(RunBinary("predict --config=" + cfg.string(), dir),
                 cfg.string() + ":1: seed: must be in 0..9223372036854775807, got -1", "seed file");
  ExpectBadInput(RunBinary("predict --dp=99999999999", dir), "--dp: must be in 1..1048576, got 99999999999", "dp");
  for (const auto& [flag, range] : {std::pair{"configs=0", "--configs: must be in 1..1073741824, got 0"},
                                    {"max_devices=65", "--max_devices: must be in 1..64, got 65"},
                                    {"fault_every=-1", "--fault_every: must be in 0..1073741824, got -1"}}) {
    ExpectBadInput(RunBinary(std::string("stress --") + flag, dir), range, flag);
  }
  const Result codec = RunBinary("predict --codec=fp8", dir);
  ExpectBadInput(codec, "--codec: unknown codec 'fp8'", "codec");
  ExpectBadInput(RunBinary("allreduce --codec=fp8", dir), "--codec: unknown codec 'fp8'", "allreduce codec");
  std::ofstream(cfg, std::ios::trunc) << R"({"fault": "x"})";
  ExpectBadInput(RunBinary("run --config=" + cfg.string(), dir),
                 cfg.string() + ":1: fault: a flag of `ringpipe run` only, not a config key (give it as --fault)",
                 "fault in a file");
  // The world size makes the DP ring's messages many: dp is named, with every digit.
  ASSERT_EQ(::setenv("RINGPIPE_MEMORY_LIMIT_BYTES", "1e15", 1), 0);
  ExpectBadInput(RunBinary("predict --dp=1048576 --pp=1 --tp=1", dir),
                 "--dp: about 4194316 modeled messages", "dp messages");
  // A wide input makes the data set large: input_dim is named, not train_size.
  ASSERT_EQ(::setenv("RINGPIPE_MEMORY_LIMIT_BYTES", "200000000", 1), 0);
  ExpectBadInput(RunBinary("run --virtual_time --steps=1 --input_dim=1048576 --hidden=64", dir),
                 "--input_dim: the run would allocate about", "input_dim");
  ASSERT_EQ(::unsetenv("RINGPIPE_MEMORY_LIMIT_BYTES"), 0);
  fs::remove_all(dir);
}

// 15. The benchmarks measure sizes within [--min_bytes, --max_bytes] only, each once.
TEST(Hardening, BenchmarkSizesStayInTheRequestedRange) {
  const fs::path dir = TempDir("bench_sizes");
  const fs::path json_path = dir / "rows.json";
  auto sizes = [&](const std::string& cmd) {
    std::vector<uint64_t> out;
    const Result r = RunBinary(cmd + " --iters=1 --warmup=0 --json=" + json_path.string(), dir);
    EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.err;
    if (r.exit_code != 0) return out;
    for (const json& row : json::parse(ReadFile(json_path))) out.push_back(row["bytes"].get<uint64_t>());
    return out;
  };
  EXPECT_EQ(sizes("alltoall --ranks=3 --min_bytes=4 --max_bytes=64"), (std::vector<uint64_t>{12, 60}));
  EXPECT_EQ(sizes("allreduce --ranks=2 --min_bytes=5 --max_bytes=80"), (std::vector<uint64_t>{8, 20, 80}));
  EXPECT_EQ(sizes("alltoall --ranks=8 --min_bytes=32 --max_bytes=32"), (std::vector<uint64_t>{32}));
  fs::remove(json_path);
  ExpectBadInput(RunBinary("alltoall --iters=1 --warmup=0 --ranks=8 --min_bytes=4 --max_bytes=4 --json=" +
                               json_path.string(), dir),
                 "--max_bytes: no size in [4, 4] B", "alltoall, nothing fits");
  ExpectBadInput(RunBinary("allreduce --iters=1 --warmup=0 --ranks=2 --min_bytes=5 --max_bytes=7", dir),
                 "--max_bytes: no size in [5, 7] B", "allreduce, nothing fits");
  EXPECT_FALSE(fs::exists(json_path));
  fs::remove_all(dir);
}

// 16. Values that drive the model's numbers out of fp32. aux_loss and router_skew passed validation
// at any finite value: --aux_loss=1e12 failed at run time as an fp32 overflow naming no field, and a
// router skew near 1e308 converted out of float's range (undefined behaviour) in every forward.
// Both are bounded now. A learning rate cannot be (whether a run diverges depends on the model):
// --lr=1e30 fails at run time as a fault (exit 3) whose second line says the training diverged
// and names the values to lower.
TEST(Hardening, ValuesThatDriveTheModelOutOfFp32) {
  const fs::path dir = TempDir("fp32_range");
  const std::string moe = " --hidden=64x4 --moe_layers=all";
  for (const std::string sub : {"run --steps=2 --virtual_time", "predict"}) {
    const std::string name = sub.substr(0, sub.find(' '));
    ExpectBadInput(RunBinary(sub + moe + " --aux_loss=1e12", dir),
                   "ringpipe " + name + ": --aux_loss: must be in [0, 1000], got 1e+12", sub + " aux_loss");
    ExpectBadInput(RunBinary(sub + moe + " --router_skew=1e300", dir),
                   "ringpipe " + name + ": --router_skew: must be in [0, 10000], got 1e+300", sub + " router_skew");
  }
  // At the bounds the runs train.
  const Result bounds = RunBinary("run --steps=2 --virtual_time" + moe + " --aux_loss=1000 --router_skew=10000", dir);
  EXPECT_EQ(bounds.exit_code, 0) << bounds.err;

  const fs::path report = dir / "r.json";
  const Result r = RunBinary("run --lr=1e30 --steps=3 --virtual_time --report_json=" + report.string(), dir);
  EXPECT_EQ(r.exit_code, kExitFault) << r.err;
  EXPECT_NE(r.err.find("overflows fp32"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("\nringpipe run: a value left the range of its number format: the training diverged; try a "
                       "smaller --lr (now 1e+30)\n"),
            std::string::npos)
      << r.err;
  // The failed run's report says so too.
  ASSERT_TRUE(fs::exists(report));
  const json rep = json::parse(ReadFile(report));
  EXPECT_EQ(rep["status"], "failed");
  EXPECT_EQ(rep["failure"]["code"], "OUT_OF_RANGE");

  // With no collective on the way (dp 1, tp 1) the losses went nan and the run exited 0, its report
  // claiming a max. rel. diff of 0 against the reference. The last stage's loss fails it now, as
  // the codecs do, naming its rank, step and op; the steps before it stay committed.
  for (const std::string pp : {"1", "2"}) {
    const fs::path diverged = dir / ("pp" + pp + ".json");
    const Result d = RunBinary("run --dp=1 --tp=1 --pp=" + pp + " --lr=1e6 --steps=5 --virtual_time --report_json=" +
                                   diverged.string(),
                               dir);
    EXPECT_EQ(d.exit_code, kExitFault) << d.err;
    const std::string last = pp == "1" ? "rank 0 (dp 0, pp 0, tp 0)" : "rank 1 (dp 0, pp 1, tp 0)";
    EXPECT_NE(d.err.find(last + " step 2 op F0: the loss of micro-batch 0 is nan: its logits left fp32's range"),
              std::string::npos)
        << d.err;
    EXPECT_NE(d.err.find("\nringpipe run: a value left the range of its number format: the training diverged; try a "
                         "smaller --lr (now 1e+06)\n"),
              std::string::npos)
        << d.err;
    ASSERT_TRUE(fs::exists(diverged));
    const json f = json::parse(ReadFile(diverged));
    EXPECT_EQ(f["status"], "failed");
    EXPECT_EQ(f["failure"]["code"], "OUT_OF_RANGE");
    EXPECT_EQ(f["failure"]["committed_steps"], 2);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rp::apps
