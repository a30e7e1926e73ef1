// Tests of rp::Tracer: Chrome trace JSON that Perfetto accepts, CSV, and per-stream buffers.
#include <memory>
#include <set>
#include <sstream>
#include <string>

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

}  // namespace
}  // namespace rp
