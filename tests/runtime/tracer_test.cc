// Tests of rp::Tracer: Chrome trace JSON that Perfetto accepts, CSV, per-stream buffers, and the
// virtual clock's traces: no host time, events in modeled order, the same bytes whatever the
// threads' interleaving.
#include <algorithm>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/tracer.h"

namespace rp {
namespace {

std::unique_ptr<Tracer> MakeTrace() {
  auto owned = std::make_unique<Tracer>(/*num_devices=*/3, /*devices_per_node=*/2);
  Tracer& tracer = *owned;
  const uint64_t flow = tracer.NewFlowId();
  tracer.Record({.wall_start_ns = 1000, .wall_end_ns = 51000, .model_start_ns = 0,
                 .model_end_ns = 50000000, .name = "F", .rank = 0, .micro_batch = 3});
  tracer.Record({.wall_start_ns = 51000, .wall_end_ns = 52000, .model_start_ns = 50000000,
                 .model_end_ns = 50100000, .bytes = 4096, .flow_id = flow, .name = "send",
                 .rank = 0, .peer = 2, .micro_batch = 3, .kind = OpKind::kSend});
  tracer.Record({.wall_start_ns = 40000, .wall_end_ns = 53000, .model_start_ns = 50000000,
                 .model_end_ns = 50100000, .bytes = 4096, .flow_id = flow, .name = "recv",
                 .rank = 2, .peer = 0, .micro_batch = 3, .kind = OpKind::kRecv});
  tracer.Record({.wall_start_ns = 0, .wall_end_ns = 0, .name = "fault: straggler", .rank = 1,
                 .kind = OpKind::kFault});
  tracer.Record({.wall_start_ns = 10, .wall_end_ns = 20, .name = "allreduce step", .rank = 1,
                 .step = 0, .kind = OpKind::kCollective, .stream = Stream::kComm});
  tracer.Record({.name = "bad", .rank = 7});  // out of range: dropped
  return owned;
}

TEST(Tracer, ChromeJsonHasTheFieldsPerfettoNeeds) {
  const auto owned = MakeTrace();
  const Tracer& tracer = *owned;
  EXPECT_EQ(tracer.dropped(), 1u);
  const nlohmann::json root = nlohmann::json::parse(tracer.ToChromeJson());
  ASSERT_TRUE(root.contains("traceEvents"));
  int complete = 0, flow_s = 0, flow_f = 0, instants = 0;
  std::set<std::string> process_names;
  uint64_t s_id = 0, f_id = 0;
  for (const auto& e : root["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph"));
    ASSERT_TRUE(e.contains("pid"));
    ASSERT_TRUE(e.contains("tid"));
    ASSERT_TRUE(e.contains("name"));
    const std::string ph = e["ph"];
    if (ph == "M") {
      if (e["name"] == "process_name") process_names.insert(e["args"]["name"]);
    } else if (ph == "X") {
      ++complete;
      ASSERT_TRUE(e.contains("ts"));
      ASSERT_TRUE(e.contains("dur"));
      EXPECT_GE(e["dur"].get<double>(), 0.0);
      EXPECT_TRUE(e["args"].contains("modeled_start_us"));
      EXPECT_TRUE(e["args"].contains("modeled_end_us"));
    } else if (ph == "s") {
      ++flow_s;
      s_id = e["id"];
      EXPECT_EQ(e["tid"], 0);  // rank 0 compute
    } else if (ph == "f") {
      ++flow_f;
      f_id = e["id"];
      EXPECT_EQ(e["bp"], "e");
      EXPECT_EQ(e["pid"].get<int>() % 2, 1);  // rank 2 lives on node 1
    } else if (ph == "i") {
      ++instants;
    }
  }
  // 4 ops × 2 layouts (measured, modeled), one flow per layout, one fault instant per layout.
  EXPECT_EQ(complete, 8);
  EXPECT_EQ(flow_s, 2);
  EXPECT_EQ(flow_f, 2);
  EXPECT_EQ(s_id, f_id);
  EXPECT_NE(s_id, 0u);
  EXPECT_EQ(instants, 2);
  EXPECT_EQ(process_names,
            (std::set<std::string>{"node 0", "node 1", "node 0 (modeled)", "node 1 (modeled)"}));
}

TEST(Tracer, MeasuredOnlyLayout) {
  const nlohmann::json root =
      nlohmann::json::parse(MakeTrace()->ToChromeJson({.modeled_tracks = false}));
  int complete = 0;
  for (const auto& e : root["traceEvents"]) complete += e["ph"] == "X";
  EXPECT_EQ(complete, 4);
}

TEST(Tracer, CsvHasHeaderAndOneRowPerEvent) {
  const std::string csv = MakeTrace()->ToCsv();
  std::istringstream in(csv);
  std::string line;
  int lines = 0;
  std::getline(in, line);
  EXPECT_EQ(line.rfind("rank,node,stream,kind,name", 0), 0u);
  while (std::getline(in, line)) ++lines;
  EXPECT_EQ(lines, 5);
  EXPECT_NE(csv.find("2,1,compute,recv,recv,,3,-1,0,4096,1,40000,53000,50000000,50100000"),
            std::string::npos);
}

TEST(Tracer, EventsOrderedByWallStartAcrossChunks) {
  Tracer tracer(1, 8);
  const int n = static_cast<int>(Tracer::kChunkEvents) * 2 + 5;
  for (int i = 0; i < n; ++i) {
    tracer.Record({.wall_start_ns = n - i, .wall_end_ns = n - i + 1, .name = "op"});
  }
  const auto events = tracer.Events();
  ASSERT_EQ(events.size(), static_cast<size_t>(n));
  for (size_t i = 1; i < events.size(); ++i) {
    EXPECT_LE(events[i - 1].wall_start_ns, events[i].wall_start_ns);
  }
}

// Per (rank, stream), in program order: what one device thread of a virtual run records. The
// ranks' recordings interleave differently run to run, and their wall stamps differ.
struct Recording {
  std::vector<TraceEvent> events;  // one (rank, stream)'s, in order
};

std::vector<Recording> VirtualRunRecordings() {
  // Rank 0 compute: F mb0 [0, 10), send at 10, F mb1 [10, 20). Rank 0 comm: an all-reduce from 5.
  // Rank 1 compute: a straggler instant at 0, recv [0, 10) then F mb0 [10, 25) — it starts at 10
  // like rank 0's send and F mb1: ties go by rank, then stream, then recording order.
  const int64_t ms = 1'000'000;
  return {
      {{{.model_start_ns = 0, .model_end_ns = 10 * ms, .name = "F", .rank = 0, .micro_batch = 0},
        {.model_start_ns = 10 * ms, .model_end_ns = 10 * ms, .bytes = 64, .flow_id = 7,
         .name = "send", .rank = 0, .peer = 1, .micro_batch = 0, .kind = OpKind::kSend},
        {.model_start_ns = 10 * ms, .model_end_ns = 20 * ms, .name = "F", .rank = 0,
         .micro_batch = 1}}},
      {{{.model_start_ns = 5 * ms, .model_end_ns = 30 * ms, .name = "AllReduce", .rank = 0,
         .step = 0, .kind = OpKind::kCollective, .stream = Stream::kComm}}},
      {{{.name = "fault: straggler", .rank = 1, .kind = OpKind::kFault},
        {.model_start_ns = 0, .model_end_ns = 10 * ms, .bytes = 64, .flow_id = 7, .name = "recv",
         .rank = 1, .peer = 0, .micro_batch = 0, .kind = OpKind::kRecv},
        {.model_start_ns = 10 * ms, .model_end_ns = 25 * ms, .name = "F", .detail = "straggler",
         .rank = 1, .micro_batch = 0}}},
  };
}

// Records `recs` into `tracer`, interleaving the (rank, stream) sequences in the order `pick`
// chooses (each keeps its own order), with wall stamps from `wall`; then port events in `ports`'
// order.
void Replay(Tracer& tracer, const std::vector<Recording>& recs, const std::vector<size_t>& pick,
            int64_t wall, const std::vector<PortEvent>& ports) {
  std::vector<size_t> next(recs.size(), 0);
  for (size_t r : pick) {
    TraceEvent e = recs[r].events[next[r]++];
    e.wall_start_ns = wall;
    e.wall_end_ns = wall + 13;
    wall += 1000;
    tracer.Record(e);
  }
  for (const PortEvent& p : ports) tracer.RecordPort(p);
}

std::vector<PortEvent> Ports() {
  return {{.port = 0, .src = 0, .dst = 1, .bytes = 64, .ready_ns = 10, .start_ns = 10, .end_ns = 20},
          {.port = 1, .src = 0, .dst = 1, .bytes = 64, .ready_ns = 10, .start_ns = 10, .end_ns = 20},
          {.port = 0, .src = 0, .dst = 1, .bytes = 8, .ready_ns = 5, .start_ns = 20, .end_ns = 25},
          {.port = 2, .src = 1, .dst = 0, .bytes = 8, .ready_ns = 0, .start_ns = 3, .end_ns = 9}};
}

TEST(Tracer, VirtualClockKeepsNoHostTime) {
  Tracer tracer(/*num_devices=*/2, /*devices_per_node=*/8, Tracer::kUnbounded, TraceClock::kVirtual);
  EXPECT_EQ(tracer.clock(), TraceClock::kVirtual);
  EXPECT_EQ(tracer.WallNow(), 0);
  tracer.Record({.wall_start_ns = 123456, .wall_end_ns = 234567, .model_start_ns = 2000,
                 .model_end_ns = 5000, .name = "F", .rank = 1, .micro_batch = 0});
  const std::vector<TraceEvent> events = tracer.Events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].wall_start_ns, 0);
  EXPECT_EQ(events[0].wall_end_ns, 0);
  EXPECT_NE(tracer.ToCsv().find("1,0,compute,compute,F,,0,-1,-1,0,0,0,0,2000,5000"),
            std::string::npos)
      << tracer.ToCsv();
  // The Chrome JSON: the modeled layout alone, whatever modeled_tracks says, at modeled times.
  for (const bool modeled_tracks : {true, false}) {
    const std::string text = tracer.ToChromeJson({.modeled_tracks = modeled_tracks});
    EXPECT_EQ(text.find("wall_"), std::string::npos) << text;
    const nlohmann::json root = nlohmann::json::parse(text);
    std::set<std::string> process_names;
    int complete = 0;
    for (const auto& e : root["traceEvents"]) {
      if (e["ph"] == "M" && e["name"] == "process_name") process_names.insert(e["args"]["name"]);
      if (e["ph"] != "X") continue;
      ++complete;
      EXPECT_EQ(e["pid"], 0);
      EXPECT_EQ(e["tid"], 2);  // rank 1 compute
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 2.0);
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 3.0);
    }
    EXPECT_EQ(complete, 1);
    EXPECT_EQ(process_names, std::set<std::string>{"node 0 (modeled)"});
  }
}

// The threads of a virtual run interleave differently run to run: the exports do not show it.
TEST(Tracer, VirtualClockExportsTheSameBytesWhateverTheInterleaving) {
  const std::vector<Recording> recs = VirtualRunRecordings();
  std::vector<PortEvent> ports = Ports();
  Tracer a(2, 1, Tracer::kUnbounded, TraceClock::kVirtual);
  Replay(a, recs, {0, 0, 0, 1, 2, 2, 2}, /*wall=*/0, ports);
  std::reverse(ports.begin(), ports.end());
  Tracer b(2, 1, Tracer::kUnbounded, TraceClock::kVirtual);
  Replay(b, recs, {2, 1, 0, 2, 0, 2, 0}, /*wall=*/777, ports);
  EXPECT_EQ(a.ToChromeJson(), b.ToChromeJson());
  EXPECT_EQ(a.ToCsv(), b.ToCsv());
  // Ordered by modeled start, then rank, stream and recording order.
  std::vector<std::string> order;
  for (const TraceEvent& e : b.Events()) {
    order.push_back(absl::StrCat(e.rank, StreamName(e.stream), " ", e.name, " ", e.model_start_ns / 1'000'000));
  }
  EXPECT_EQ(order, (std::vector<std::string>{"0compute F 0", "1compute fault: straggler 0",
                                             "1compute recv 0", "0comm AllReduce 5",
                                             "0compute send 10", "0compute F 10", "1compute F 10"}));
  // The port tracks in (start, port, ...) order.
  std::vector<std::pair<int64_t, int>> port_order;
  for (const PortEvent& p : b.SortedPortEvents()) port_order.emplace_back(p.start_ns, p.port);
  EXPECT_EQ(port_order, (std::vector<std::pair<int64_t, int>>{{3, 2}, {10, 0}, {10, 1}, {20, 0}}));
}

// On the real clock the same recordings keep their wall stamps and wall order (the measured
// layout is the host's), with the modeled layout beside it.
TEST(Tracer, WallClockKeepsTheWallStampsAndTheirOrder) {
  const std::vector<Recording> recs = VirtualRunRecordings();
  Tracer tracer(2, 1);
  EXPECT_EQ(tracer.clock(), TraceClock::kWall);
  Replay(tracer, recs, {2, 1, 0, 2, 0, 2, 0}, /*wall=*/777, Ports());
  int64_t last = -1;
  for (const TraceEvent& e : tracer.Events()) {
    EXPECT_GT(e.wall_start_ns, last) << e.name;
    last = e.wall_start_ns;
  }
  const nlohmann::json root = nlohmann::json::parse(tracer.ToChromeJson());
  std::set<std::string> process_names;
  for (const auto& e : root["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") process_names.insert(e["args"]["name"]);
    if (e["ph"] == "X" && e["cat"] != "port") {
      EXPECT_TRUE(e["args"].contains("wall_start_us")) << e;
    }
  }
  EXPECT_EQ(process_names, (std::set<std::string>{"node 0", "node 1", "node 0 (modeled)",
                                                  "node 1 (modeled)", "fabric ports (modeled)"}));
}

// The Chrome JSON is handed out in pieces of about 1 MiB (the text of a 4096-device run's trace was
// held whole, with a JSON document of every event: 1.74 GB above the run for a 155 MB file); the
// pieces are, in order, exactly the document's one-line dump, and a sink's error stops the export.
TEST(Tracer, ChromeJsonIsStreamedInPiecesThatMakeTheDocumentsDump) {
  Tracer tracer(/*num_devices=*/4, /*devices_per_node=*/2);
  for (int i = 0; i < 12000; ++i) {
    const uint64_t flow = tracer.NewFlowId();
    tracer.Record({.wall_start_ns = 1000 * i, .wall_end_ns = 1000 * i + 777, .model_start_ns = 3 * i,
                   .model_end_ns = 3 * i + 1, .bytes = 4096, .flow_id = flow, .name = "send",
                   .rank = i % 4, .peer = (i + 1) % 4, .micro_batch = i % 5, .step = i / 100,
                   .kind = OpKind::kSend});
  }
  tracer.SetPorts({"nvlink out 0", "nic in 1"});
  for (int i = 0; i < 2000; ++i) {
    tracer.RecordPort({.port = i % 2, .src = 0, .dst = 1, .bytes = 64, .ready_ns = i, .start_ns = i + 5,
                       .end_ns = i + 9});
  }
  std::vector<std::string> pieces;
  ASSERT_TRUE(tracer.StreamChromeJson([&](std::string_view piece) {
    pieces.emplace_back(piece);
    return absl::OkStatus();
  }).ok());
  ASSERT_GE(pieces.size(), 3u);
  std::string joined;
  for (const std::string& p : pieces) {
    EXPECT_LE(p.size(), (size_t{1} << 20) + 4096);
    joined += p;
  }
  EXPECT_EQ(joined, tracer.ToChromeJson());
  const nlohmann::json root = nlohmann::json::parse(joined);
  EXPECT_EQ(root.dump(), joined);  // the bytes of the whole document's dump (sorted keys, one line)
  // Per layout (measured, modeled): 2 nodes' name and sort index, 8 streams' names; every send as a
  // slice and a flow start on both layouts; the ports' process (name, sort index), 2 tracks, 2000 events.
  EXPECT_EQ(root["traceEvents"].size(), 2u * (2 * 2 + 4 * 2) + 12000 * 2 * 2 + 2 + 2 + 2000);
  // The sink fails on the second piece: the export returns its error and asks for no more.
  int calls = 0;
  const absl::Status st = tracer.StreamChromeJson([&](std::string_view) {
    return ++calls == 2 ? absl::DataLossError("disk full") : absl::OkStatus();
  });
  EXPECT_EQ(st, absl::DataLossError("disk full"));
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace rp
