// comm::EventCommStream: ring collectives run by the fabric as its messages commit (no thread)
// give the same bits and the same modeled timeline as threads driving the same collectives
// through RankComm, for every codec (error feedback included), modeled sizes, segments and
// per-rank readiness; queued collectives run in order from max(ready, previous end); a missing
// peer leaves the stream waiting with its site named, and an abort releases everyone.
#include "comm/comm_stream.h"

#include <memory>
#include <string>
#include <tuple>
#include <thread>
#include <vector>

#include "comm/collectives.h"
#include "comm/data_lane.h"
#include "comm/ring_machine.h"
#include "gtest/gtest.h"
#include "runtime/fabric.h"

namespace rp::comm {
namespace {

LinkSpec Spec() {
  LinkSpec s;
  s.intra_node = {.alpha = Nanos(3000), .bandwidth_gbps = 300, .overhead = Nanos(400)};
  s.inter_node = {.alpha = Nanos(5000), .bandwidth_gbps = 25, .overhead = Nanos(3000)};
  s.devices_per_node = 2;
  s.nics_per_node = 1;  // shared NICs: contention between ranks of a node
  return s;
}

std::unique_ptr<Fabric> MakeFabric(int lps, int devices) {
  std::vector<uint64_t> tie;
  for (int i = 0; i < lps; ++i) tie.push_back(static_cast<uint64_t>(i));
  auto f = Fabric::Create({.links = Spec(), .num_devices = devices, .tie_rank = tie});
  EXPECT_TRUE(f.ok()) << f.status();
  return std::move(f).value();
}

std::unique_ptr<Communicator> MakeTimed(Fabric* fabric, int n, LpId first_lp) {
  CommunicatorOptions o;
  o.fabric = fabric;
  for (int r = 0; r < n; ++r) {
    o.devices.push_back(r);
    o.lps.push_back(first_lp + r);
  }
  auto c = Communicator::Create(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return std::move(c).value();
}

struct Case {
  int n = 4;
  size_t count = 1000;
  uint64_t modeled = WireModel::kRealCount;
  size_t segment_bytes = 4096;
  Codec codec = Codec::kFp32;
  bool feedback = false;
  double reduce_gbps = 0;
};

std::vector<float> Input(int rank, int call, size_t count) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) {
    v[i] = static_cast<float>((i * 7 + static_cast<size_t>(rank) * 13 + static_cast<size_t>(call)) % 29) *
           0.37f - 3.1f;
  }
  return v;
}

Nanos Ready(int rank) { return Nanos(1000 + 2500 * rank); }

CollectiveOptions Options(const Case& c, int call) {
  return {.codec = c.codec, .segment_bytes = c.segment_bytes, .error_feedback = c.feedback,
          .feedback_slot = call,
          .model = {.elements = c.modeled, .step = 0, .reduce_gbps = c.reduce_gbps}};
}

constexpr int kCalls = 3;

// Threads: rank r runs kCalls all-reduces back to back (each starting at the previous end, the
// first at Ready(r)).
void RunThreaded(const Case& c, std::vector<std::vector<std::vector<float>>>* out,
                 std::vector<std::vector<CollectiveResult>>* res) {
  auto fabric = MakeFabric(c.n, c.n);
  auto comm = MakeTimed(fabric.get(), c.n, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < c.n; ++r) {
    threads.emplace_back([&, r] {
      Nanos start = Ready(r);
      for (int call = 0; call < kCalls; ++call) {
        std::vector<float>& v = (*out)[static_cast<size_t>(r)][static_cast<size_t>(call)];
        auto got = comm->rank(r).AllReduce(v, v, Options(c, call), start);
        ASSERT_TRUE(got.ok()) << got.status();
        (*res)[static_cast<size_t>(r)][static_cast<size_t>(call)] = *got;
        start = got->end;
      }
      fabric->Finish(r);
    });
  }
  for (auto& t : threads) t.join();
}

// Event streams: rank r's thread (LP r) enqueues its kCalls all-reduces at once, ready at
// Ready(r), on its event-driven comm stream (LP n + r), then awaits the last one's gate.
// With `lane`, the streams' data plane runs on it, and each rank waits for it after the gate.
void RunEvents(const Case& c, std::vector<std::vector<std::vector<float>>>* out,
               std::vector<std::vector<CollectiveResult>>* res, DataLane* lane = nullptr) {
  auto fabric = MakeFabric(2 * c.n, c.n);
  auto comm = MakeTimed(fabric.get(), c.n, c.n);
  std::vector<std::unique_ptr<EventCommStream>> streams;
  std::vector<GateId> gates;
  std::vector<uint64_t> lane_seq(static_cast<size_t>(c.n), 0);  // written in `done`, under the lock
  for (int r = 0; r < c.n; ++r) {
    streams.push_back(std::make_unique<EventCommStream>(fabric.get(), c.n + r, true,
                                                        std::vector<ChannelId>{}, lane));
    gates.push_back(fabric->AddGate());
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < c.n; ++r) {
    threads.emplace_back([&, r] {
      const int prev = (r + c.n - 1) % c.n;
      for (int call = 0; call < kCalls; ++call) {
        std::vector<float>& v = (*out)[static_cast<size_t>(r)][static_cast<size_t>(call)];
        const CollectiveOptions co = Options(c, call);
        const ring::Range own = ring::ChunkRange(v.size(), c.n, r);
        float* residual = co.error_feedback && co.codec != Codec::kFp32
                              ? comm->rank(r).Residual(co.feedback_slot, v.size()).data()
                              : nullptr;
        streams[static_cast<size_t>(r)]->Enqueue(
            {.spec = {.kind = ring::TimedKind::kAllReduce, .n = c.n, .rank = r, .device = r,
                      .next_device = (r + 1) % c.n, .count = v.size(), .codec = co.codec,
                      .segment_elems = co.segment_bytes / 4, .model = co.model,
                      .error_feedback = co.error_feedback, .op_id = comm->rank(r).TakeOpId()},
             .buffers = {.in = v.data(), .out = v.data(), .work = v.data(),
                         .own_out = v.data() + own.begin, .residual = residual},
             .ready = Ready(r),
             .send_channel = comm->RingChannel(r),
             .recv_channel = comm->RingChannel(prev),
             .site = {.rank = r, .op = "test all-reduce", .peer = prev},
             .done = [&, r, call](Fabric::Scope& scope, const absl::StatusOr<CollectiveResult>& got) {
               ASSERT_TRUE(got.ok()) << got.status();
               (*res)[static_cast<size_t>(r)][static_cast<size_t>(call)] = *got;
               if (lane != nullptr) lane_seq[static_cast<size_t>(r)] = lane->pushed();
               if (call == kCalls - 1) scope.Signal(gates[static_cast<size_t>(r)], got->end);
             }});
      }
      auto end = fabric->AwaitGate(r, gates[static_cast<size_t>(r)], {.rank = r, .op = "test"});
      ASSERT_TRUE(end.ok()) << end.status();
      if (lane != nullptr) {
        ASSERT_TRUE(lane->WaitFor(lane_seq[static_cast<size_t>(r)]).ok());
      }
      fabric->Finish(r);
    });
  }
  for (auto& t : threads) t.join();
}

// Each case: threads, event streams, and event streams whose data plane runs on a DataLane
// (comm/data_lane.h) all give the same bits and the same timeline.
TEST(EventCommStream, SameBitsAndTimelineAsThreads) {
  std::vector<Case> cases;
  for (int n : {1, 2, 3, 5}) {
    for (Codec codec : {Codec::kFp32, Codec::kFp16, Codec::kBf16, Codec::kInt8}) {
      cases.push_back({.n = n, .count = 1000, .segment_bytes = 1024, .codec = codec});
      cases.push_back({.n = n, .count = 257, .modeled = 1 << 20, .segment_bytes = 65536,
                       .codec = codec, .feedback = true, .reduce_gbps = 50});
    }
  }
  for (const Case& c : cases) {
    const std::string name = absl::StrCat("n=", c.n, " codec=", CodecName(c.codec),
                                          " count=", c.count, " feedback=", c.feedback);
    auto fresh = [&] {
      std::vector<std::vector<std::vector<float>>> v(static_cast<size_t>(c.n));
      for (int r = 0; r < c.n; ++r) {
        for (int call = 0; call < kCalls; ++call) v[static_cast<size_t>(r)].push_back(Input(r, call, c.count));
      }
      return v;
    };
    auto out_t = fresh(), out_e = fresh(), out_l = fresh();
    std::vector<std::vector<CollectiveResult>> res_t(
        static_cast<size_t>(c.n), std::vector<CollectiveResult>(kCalls));
    auto res_e = res_t, res_l = res_t;
    RunThreaded(c, &out_t, &res_t);
    RunEvents(c, &out_e, &res_e);
    {
      DataLane lane;
      RunEvents(c, &out_l, &res_l, &lane);
    }
    for (int r = 0; r < c.n; ++r) {
      for (int call = 0; call < kCalls; ++call) {
        const auto& a = out_t[static_cast<size_t>(r)][static_cast<size_t>(call)];
        const auto& b = out_l[static_cast<size_t>(r)][static_cast<size_t>(call)];
        ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << name << " (lane)";
        const CollectiveResult& x = res_t[static_cast<size_t>(r)][static_cast<size_t>(call)];
        const CollectiveResult& y = res_l[static_cast<size_t>(r)][static_cast<size_t>(call)];
        EXPECT_EQ(x.start, y.start) << name << " (lane)";
        EXPECT_EQ(x.end, y.end) << name << " (lane)";
        EXPECT_EQ(x.transfer, y.transfer) << name << " (lane)";
        EXPECT_EQ(x.wire_bytes, y.wire_bytes) << name << " (lane)";
      }
    }
    for (int r = 0; r < c.n; ++r) {
      for (int call = 0; call < kCalls; ++call) {
        const auto& a = out_t[static_cast<size_t>(r)][static_cast<size_t>(call)];
        const auto& b = out_e[static_cast<size_t>(r)][static_cast<size_t>(call)];
        ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << name;
        // Every rank holds the same bits.
        const auto& first = out_e[0][static_cast<size_t>(call)];
        ASSERT_EQ(0, std::memcmp(first.data(), b.data(), b.size() * sizeof(float))) << name;
        const CollectiveResult& x = res_t[static_cast<size_t>(r)][static_cast<size_t>(call)];
        const CollectiveResult& y = res_e[static_cast<size_t>(r)][static_cast<size_t>(call)];
        EXPECT_EQ(x.start, y.start) << name << " rank " << r << " call " << call;
        EXPECT_EQ(x.end, y.end) << name << " rank " << r << " call " << call;
        EXPECT_EQ(x.transfer, y.transfer) << name;
        EXPECT_EQ(x.peer_wait, y.peer_wait) << name;
        EXPECT_EQ(x.reduce, y.reduce) << name;
        EXPECT_EQ(x.wire_bytes, y.wire_bytes) << name;
        EXPECT_EQ(x.modeled_bytes, y.modeled_bytes) << name;
        if (c.n > 1) {
          // Queued calls start when the previous one ended (its ready time is earlier).
          if (call > 0) {
            EXPECT_EQ(y.start, res_e[static_cast<size_t>(r)][static_cast<size_t>(call - 1)].end);
          }
          EXPECT_GT(y.end, y.start) << name;
        }
      }
    }
  }
}

// Rank r's in-place all-reduce of *v on comm's ring (device r), ready at 0.
EventCommStream::Collective InPlaceAllReduce(
    Communicator& comm, int r, std::vector<float>* v, Codec codec, size_t segment_elems,
    uint64_t op_id,
    std::function<void(Fabric::Scope&, absl::StatusOr<CollectiveResult>&)> done) {
  const int n = comm.size();
  const int prev = (r + n - 1) % n;
  const ring::Range own = ring::ChunkRange(v->size(), n, r);
  return {.spec = {.kind = ring::TimedKind::kAllReduce, .n = n, .rank = r, .device = r,
                   .next_device = (r + 1) % n, .count = v->size(), .codec = codec,
                   .segment_elems = segment_elems, .op_id = op_id},
          .buffers = {.in = v->data(), .out = v->data(), .work = v->data(),
                      .own_out = v->data() + own.begin},
          .ready = Nanos(0),
          .send_channel = comm.RingChannel(r),
          .recv_channel = comm.RingChannel(prev),
          .site = {.rank = r, .op = "test all-reduce", .peer = prev},
          .done = std::move(done)};
}

TEST(EventCommStream, MissingPeerIsAWaitNamingItThenAbortReleasesEveryone) {
  const int n = 3;
  auto fabric = MakeFabric(2 * n, n);
  auto comm = MakeTimed(fabric.get(), n, n);
  std::vector<std::unique_ptr<EventCommStream>> streams;
  for (int r = 0; r < n; ++r) {
    streams.push_back(std::make_unique<EventCommStream>(fabric.get(), n + r, true));
  }
  const GateId gate = fabric->AddGate();
  std::vector<std::vector<float>> v(n, std::vector<float>(64, 1.0f));
  absl::Status failure;
  // Ranks 0 and 1 start; rank 2 never does.
  for (int r = 0; r < 2; ++r) {
    streams[static_cast<size_t>(r)]->Enqueue(InPlaceAllReduce(
        *comm, r, &v[r], Codec::kFp32, 16, /*op_id=*/0,
        [&](Fabric::Scope& scope, const absl::StatusOr<CollectiveResult>& got) {
          if (!got.ok()) failure = got.status();
          scope.Signal(gate, Nanos(0));
        }));
  }
  fabric->Finish(0);
  fabric->Finish(1);
  fabric->Finish(2);
  // Rank 1 got rank 0's segments and waits for rank 0's next ones, which need rank 2's: every
  // started stream waits, each naming its peer.
  int waiting = 0;
  for (const LpWait& w : fabric->Waits()) {
    if (w.lp < n) continue;
    if (w.state == LpWait::State::kAwaitChannel) {
      ++waiting;
      EXPECT_EQ(w.peer, n + (w.lp - n + n - 1) % n);
      EXPECT_STREQ(w.site.op, "test all-reduce");
    }
  }
  EXPECT_EQ(waiting, 2);
  std::thread waiter([&] {
    auto got = fabric->AwaitGate(0, gate, {.rank = 0, .op = "test"});
    EXPECT_FALSE(got.ok());
  });
  fabric->Abort(absl::DeadlineExceededError("rank 2 never came"));
  waiter.join();
  EXPECT_TRUE(failure.ok());  // nothing failed inside: the run was aborted from outside
}

// A data error (an FP16 overflow of a partial sum) found on a DataLane carries the message the
// stream gives it when the data runs under the lock (naming rank, collective, peer and ring
// step), and is kept for its device — not given to `done`, whose timing ran to the end. Every
// rank's first reduce overflows: each device has its own root error, the same every time.
TEST(EventCommStream, ADataLaneKeepsEachDevicesDataErrorAsTheStreamWouldWordIt) {
  const int n = 3;
  const size_t count = 48;
  auto run = [&](DataLane* lane) {
    auto fabric = MakeFabric(2 * n, n);
    auto comm = MakeTimed(fabric.get(), n, n);
    std::vector<std::unique_ptr<EventCommStream>> streams;
    for (int r = 0; r < n; ++r) {
      streams.push_back(std::make_unique<EventCommStream>(fabric.get(), n + r, true,
                                                          std::vector<ChannelId>{}, lane));
    }
    std::vector<std::vector<float>> v(n, std::vector<float>(count, 40000.0f));  // 2x: no FP16
    std::vector<absl::Status> failures;  // in the order reported (under the fabric's lock)
    int ended = 0;
    for (int r = 0; r < n; ++r) {
      auto c = InPlaceAllReduce(*comm, r, &v[r], Codec::kFp16, 8, comm->rank(r).TakeOpId(),
                                [&](Fabric::Scope&, const absl::StatusOr<CollectiveResult>& got) {
                                  if (got.ok()) ++ended;
                                  else failures.push_back(got.status());
                                });
      c.tag = 10 + r;
      streams[static_cast<size_t>(r)]->Enqueue(std::move(c));
    }
    for (int r = 0; r < n; ++r) fabric->Finish(r);
    std::vector<absl::Status> waited(n);
    std::vector<int> tags(n, -1);
    if (lane != nullptr) {
      EXPECT_EQ(ended, n);  // the timing ran to the end; the data failed on the lane
      for (int r = 0; r < n; ++r) waited[static_cast<size_t>(r)] = lane->WaitFor(lane->pushed(), r, &tags[static_cast<size_t>(r)]);
    }
    return std::make_tuple(failures, waited, tags);
  };
  const auto [inline_failures, none, no_tags] = run(nullptr);
  ASSERT_FALSE(inline_failures.empty());
  for (const absl::Status& s : none) EXPECT_TRUE(s.ok());
  DataLane lane;
  const auto [lane_failures, waited, tags] = run(&lane);
  EXPECT_TRUE(lane_failures.empty());  // nothing reaches `done`
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(waited[static_cast<size_t>(r)].code(), absl::StatusCode::kOutOfRange) << r;
    EXPECT_EQ(tags[static_cast<size_t>(r)], 10 + r);
  }
  // Rank 1's is the error the stream found first under the lock, word for word.
  EXPECT_EQ(waited[1], inline_failures[0]);
  EXPECT_NE(std::string(waited[1].message()).find("rank 1 (device 1) all-reduce #0 reducing data of rank 0"),
            std::string::npos)
      << waited[1];
  EXPECT_EQ(lane.WaitFor(lane.pushed()), waited[0]);  // the lowest device's
}

// One rank's data overflows FP16 at its first send: that rank has the root error; the rank that
// decodes its (poisoned) segment and the one after it, whose data came through it, fail as
// consequences (Aborted), naming whom they received from. Decided by the data alone: the same in
// every run, whatever order the streams' items reached the lane in.
TEST(EventCommStream, ADataLanePoisonsWhatAFailedCollectiveSends) {
  const int n = 3;
  const size_t count = 48;
  for (int attempt = 0; attempt < 5; ++attempt) {
    DataLane lane;
    auto fabric = MakeFabric(2 * n, n);
    auto comm = MakeTimed(fabric.get(), n, n);
    std::vector<std::unique_ptr<EventCommStream>> streams;
    for (int r = 0; r < n; ++r) {
      streams.push_back(std::make_unique<EventCommStream>(fabric.get(), n + r, true,
                                                          std::vector<ChannelId>{}, &lane));
    }
    std::vector<std::vector<float>> v(n, std::vector<float>(count, 1.0f));
    v[0][32] = 1e9f;  // in chunk 2, rank 0's first send: it fails to encode
    int ended = 0;
    // Started in a different order each attempt: their first sends reach the lane in that order.
    for (int i = 0; i < n; ++i) {
      const int r = (i + attempt) % n;
      streams[static_cast<size_t>(r)]->Enqueue(InPlaceAllReduce(
          *comm, r, &v[r], Codec::kFp16, 8, comm->rank(r).TakeOpId(),
          [&](Fabric::Scope&, const absl::StatusOr<CollectiveResult>& got) { ended += got.ok(); }));
    }
    for (int r = 0; r < n; ++r) fabric->Finish(r);
    EXPECT_EQ(ended, n);
    const absl::Status root = lane.WaitFor(lane.pushed(), 0);
    EXPECT_EQ(root.code(), absl::StatusCode::kOutOfRange) << root;
    EXPECT_NE(std::string(root.message()).find("starting, next"), std::string::npos) << root;
    for (int r = 1; r < n; ++r) {
      const absl::Status s = lane.WaitFor(lane.pushed(), r);
      EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << r << ": " << s;
      EXPECT_NE(std::string(s.message()).find("receiving from"), std::string::npos) << s;
    }
    EXPECT_EQ(lane.WaitFor(lane.pushed()), root);  // a root before any consequence
  }
}

// DataLane: WaitFor of nothing returns at once; items run in push order, a decode's payload is
// handed back for reuse once read, and a lane destroyed with items it never ran drops them.
TEST(DataLane, RunsItemsInOrderAndHandsPayloadsBack) {
  DataLane lane;
  EXPECT_TRUE(lane.WaitFor(0).ok());
  std::vector<float> src = {1.5f, -2.0f, 3.25f}, acc = {10.0f, 20.0f, 30.0f}, out(3, 0.0f);
  const DataLane::Context context{.op_id = 7, .count = 3};
  SegmentPayload* raw = new SegmentPayload;  // the lane owns it once a decode has read it
  // Encode src, add it onto acc, then encode the sum: each reads what the one before wrote.
  lane.Push({.op = DataLane::Item::Op::kEncode, .n = 3, .src = src.data(), .payload = raw,
             .context = &context});
  lane.Push({.op = DataLane::Item::Op::kDecodeAdd, .n = 3, .src = acc.data(), .dst = acc.data(),
             .payload = raw, .context = &context});
  lane.Push({.op = DataLane::Item::Op::kEncode, .n = 3, .step = 1, .src = acc.data(),
             .payload = raw, .context = &context});
  lane.Flush();
  EXPECT_TRUE(lane.WaitFor(lane.pushed()).ok());
  std::unique_ptr<SegmentPayload> back = lane.TakePayload();
  ASSERT_NE(back, nullptr);
  EXPECT_EQ(back.get(), raw);
  EXPECT_EQ(lane.TakePayload(), nullptr);
  Decode(Codec::kFp32, back->data(), 3, out.data());
  EXPECT_EQ(out, (std::vector<float>{11.5f, 18.0f, 33.25f}));
  EXPECT_EQ(back->op_id, 7u);  // the header the encode wrote
  EXPECT_EQ(back->step, 1);
  EXPECT_EQ(back->elems, 3u);
  EXPECT_EQ(lane.completed(), 3u);
}

// DataLane: a device whose collectives only received poisoned data (consequences) keeps its
// earliest collective's (by sequence), whichever reached the lane first; a root error in a later
// collective still beats them; and a wait for items never flushed is an error, not a hang.
TEST(DataLane, KeepsADevicesEarliestConsequenceWhateverTheOrderItsItemsArrived) {
  for (const bool second_first : {false, true}) {
    // Two collectives of device 0 (sequences 0 and 1) each decode a poisoned segment (contexts
    // anew each time: the lane marks a failed one).
    const DataLane::Context first{.device = 0, .op_id = 1, .count = 2, .sequence = 0, .tag = 100};
    const DataLane::Context second{.device = 0, .op_id = 2, .count = 2, .sequence = 1, .tag = 101};
    const DataLane::Context overflowing{.device = 0, .op_id = 3, .count = 2, .sequence = 2,
                                        .tag = 102};
    DataLane lane;
    std::vector<float> dst(2, 0.0f);
    auto poisoned_decode = [&](const DataLane::Context& c) {
      auto* p = new SegmentPayload;  // the lane owns it once its decode has read it
      p->op_id = c.op_id;
      p->count = c.count;
      p->elems = 2;
      p->poisoned = true;
      lane.Push({.op = DataLane::Item::Op::kDecode, .n = 2, .dst = dst.data(), .payload = p,
                 .context = &c});
    };
    if (second_first) poisoned_decode(second);
    poisoned_decode(first);
    if (!second_first) poisoned_decode(second);
    EXPECT_EQ(lane.WaitFor(lane.pushed() + 1, 0).code(), absl::StatusCode::kFailedPrecondition)
        << "not flushed yet";
    lane.Flush();
    int tag = -1;
    const absl::Status got = lane.WaitFor(lane.pushed(), 0, &tag);
    EXPECT_TRUE(absl::IsAborted(got)) << got;
    EXPECT_EQ(tag, 100) << (second_first ? "second collective's items first" : "in order");
    EXPECT_TRUE(lane.WaitFor(lane.pushed(), 1).ok());  // another device: nothing
    // A root error (an FP16 overflow at a send) of a later collective beats both consequences.
    const std::vector<float> huge = {1e9f, 1.0f};
    auto* out = new SegmentPayload;
    lane.Push({.op = DataLane::Item::Op::kEncode, .codec = Codec::kFp16, .n = 2,
               .src = huge.data(), .payload = out, .context = &overflowing});
    lane.Flush();
    const absl::Status root = lane.WaitFor(lane.pushed(), 0, &tag);
    EXPECT_EQ(root.code(), absl::StatusCode::kOutOfRange) << root;
    EXPECT_EQ(tag, 102);
    EXPECT_TRUE(out->poisoned);  // its bytes are not the segment's
    delete out;                  // an encode's payload stays the pusher's
  }
}

// SegmentPool: a payload given back is the next one taken (a ring's received segment carries
// its next send), and a recycled payload keeps its heap room for a segment that fits.
TEST(SegmentPool, ReusesPayloadsAndTheirHeapRoom) {
  SegmentPool pool;
  std::unique_ptr<SegmentPayload> a = pool.Take();
  std::byte* room = a->Reserve(4096);  // beyond the inline bytes: on the heap
  SegmentPayload* raw = a.get();
  pool.Give(std::move(a));
  std::unique_ptr<SegmentPayload> b = pool.Take();
  EXPECT_EQ(b.get(), raw);
  EXPECT_EQ(b->Reserve(1000), room);  // fits the kept room
  EXPECT_NE(b->Reserve(64), room);    // small: inline
  EXPECT_NE(pool.Take().get(), raw);  // the pool was empty again: a new one
}

}  // namespace
}  // namespace rp::comm
