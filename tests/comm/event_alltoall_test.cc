// EventAllToAll: a rank's timed all-to-all-v run by the fabric's handlers while its thread awaits
// one gate. Against AllToAllV::Run on the same fabric and layout: the same messages committed in
// the same order with the same timings, the same bits, the same results; AllToAllV's errors with
// rank, peer and step; a missing peer named in the waiting ranks' stall sites.
#include "comm/alltoall_event.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/alltoall.h"
#include "gtest/gtest.h"
#include "runtime/fabric.h"
#include "runtime/status_macros.h"

namespace rp::comm {
namespace {

constexpr Nanos kStart{1000};

// 2 devices a node sharing one NIC: inter-node messages contend on it.
LinkSpec Spec() {
  LinkSpec s;
  s.intra_node = {.alpha = Nanos(3000), .bandwidth_gbps = 300, .overhead = Nanos(400)};
  s.inter_node = {.alpha = Nanos(5000), .bandwidth_gbps = 25, .overhead = Nanos(3000)};
  s.devices_per_node = 2;
  s.nics_per_node = 1;
  return s;
}


// n ranks on devices 1, 3, 5, ... (distinct from the ranks), LP r for rank r, an EventAllToAll
// per rank (with `event`), and the fabric's commits in order (with `commits`).
struct Group {
  std::unique_ptr<Fabric> fabric;
  std::unique_ptr<Communicator> comm;
  std::vector<std::unique_ptr<EventAllToAll>> streams;
};

struct Commit;
Group MakeGroup(int n, bool event, std::vector<Commit>* commits = nullptr);

struct Commit {
  FabricMessage m;
  MessageTiming t;
  friend bool operator==(const Commit& a, const Commit& b) {
    return a.m.src == b.m.src && a.m.dst == b.m.dst && a.m.bytes == b.m.bytes &&
           a.m.ready == b.m.ready && a.t.start == b.t.start && a.t.arrival == b.t.arrival;
  }
};

Group MakeGroup(int n, bool event, std::vector<Commit>* commits) {
  Group g;
  std::vector<uint64_t> tie;
  for (int i = 0; i < n; ++i) tie.push_back(static_cast<uint64_t>(i));
  std::function<void(const FabricMessage&, const MessageTiming&)> on_commit;
  if (commits != nullptr) {
    on_commit = [commits](const FabricMessage& m, const MessageTiming& t) {
      commits->push_back({m, t});
    };
  }
  auto fabric = Fabric::Create({.links = Spec(), .num_devices = 2 * n, .faults = {},
                                .tie_rank = tie, .on_commit = on_commit});
  EXPECT_TRUE(fabric.ok()) << fabric.status();
  g.fabric = std::move(fabric).value();
  CommunicatorOptions o;
  for (int r = 0; r < n; ++r) {
    o.devices.push_back(2 * r + 1);
    o.lps.push_back(r);
  }
  o.fabric = g.fabric.get();
  auto comm = Communicator::Create(o);
  EXPECT_TRUE(comm.ok()) << comm.status();
  g.comm = std::move(comm).value();
  if (event) {
    for (int r = 0; r < n; ++r) g.streams.push_back(std::make_unique<EventAllToAll>(&g.comm->rank(r)));
  }
  return g;
}

struct Case {
  int n = 2;
  int bins = 1;
  Codec codec = Codec::kFp32;
  size_t segment_bytes = 256;
  a2a::AllToAllWireModel wire;
  std::vector<std::vector<std::vector<int64_t>>> counts;  // per call, per rank: n·bins entries
  std::vector<Nanos> lag;                                 // per rank: its start after kStart
  std::string Name() const {
    return absl::StrCat("n=", n, " bins=", bins, " codec=", CodecName(codec),
                        " seg=", segment_bytes, " unit=", wire.unit_elements, "/",
                        wire.modeled_unit_elements);
  }
};

struct Outcome {
  std::vector<Commit> commits;
  std::vector<absl::Status> status;                        // per rank
  std::vector<std::vector<CollectiveResult>> results;      // per rank, per call
  std::vector<std::vector<std::vector<float>>> recv;       // per rank, per call
  std::vector<std::vector<std::vector<int64_t>>> recv_counts;
  std::vector<WireStats> stats;
};

float Value(int call, int rank, size_t i) {
  return static_cast<float>(call * 7919 + rank * 1009 + static_cast<int>(i % 4001)) * 0.37f - 50.f;
}

// Every rank runs the case's calls back to back, each from max(its previous end, kStart + lag):
// with `event`, through EventAllToAll; else AllToAllV::Run.
Outcome RunCase(const Case& c, bool event) {
  Outcome out;
  Group g = MakeGroup(c.n, event, &out.commits);
  const size_t calls = c.counts.size(), n = static_cast<size_t>(c.n);
  out.status.resize(n);
  out.results.assign(n, std::vector<CollectiveResult>(calls));
  out.recv.assign(n, std::vector<std::vector<float>>(calls));
  out.recv_counts.assign(n, std::vector<std::vector<int64_t>>(calls));
  auto body = [&](int r) -> absl::Status {
    const size_t ur = static_cast<size_t>(r);
    Nanos t = kStart + c.lag[ur];
    for (size_t k = 0; k < calls; ++k) {
      const std::vector<int64_t>& counts = c.counts[k][ur];
      int64_t total = 0;
      for (int64_t x : counts) total += x;
      std::vector<float> send(static_cast<size_t>(total));
      for (size_t i = 0; i < send.size(); ++i) send[i] = Value(static_cast<int>(k), r, i);
      const CollectiveOptions co{.codec = c.codec, .segment_bytes = c.segment_bytes};
      CollectiveResult res;
      if (event) {
        RP_ASSIGN_OR_RETURN(res, g.streams[ur]->Run(send, counts, c.bins, &out.recv[ur][k],
                                                  &out.recv_counts[ur][k], co, c.wire, t,
                                                  {.rank = r, .op = "test all-to-all"}));
      } else {
        RP_ASSIGN_OR_RETURN(auto op, AllToAllV::Create(&g.comm->rank(r), send, counts, c.bins,
                                                       &out.recv[ur][k], &out.recv_counts[ur][k],
                                                       co, c.wire));
        RP_RETURN_IF_ERROR(op.Run(t));
        res = op.result();
      }
      out.results[ur][k] = res;
      t = std::max(res.end, kStart + c.lag[ur]);
    }
    g.fabric->Finish(r);
    return absl::OkStatus();
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < c.n; ++r) {
    threads.emplace_back([&, r] {
      absl::Status s = body(r);
      if (!s.ok()) g.fabric->Abort(s);  // as the executor does: the peers return
      out.status[static_cast<size_t>(r)] = std::move(s);
    });
  }
  for (auto& th : threads) th.join();
  for (int r = 0; r < c.n; ++r) out.stats.push_back(g.comm->rank(r).stats());
  return out;
}

TEST(EventAllToAll, SameCommitsTimesBitsAndResultsAsTheThreadedAllToAllV) {
  std::mt19937 rng(20261127);
  int cases = 0;
  for (int n : {2, 3, 5, 8}) {
    for (Codec codec : {Codec::kFp32, Codec::kBf16, Codec::kInt8}) {
      for (int rep = 0; rep < 3; ++rep) {
        Case c;
        c.n = n;
        c.bins = 1 + static_cast<int>(rng() % 3);
        c.codec = codec;
        c.segment_bytes = std::vector<size_t>{16, 256, 4096}[rng() % 3];
        if (rep == 2) c.wire = {.unit_elements = 3, .modeled_unit_elements = 40, .step = 1};
        for (int call = 0; call < 3; ++call) {
          std::vector<std::vector<int64_t>> per_rank;
          for (int r = 0; r < n; ++r) {
            std::vector<int64_t> counts;
            for (int i = 0; i < n * c.bins; ++i) {
              // A third of the entries empty, so whole blocks are empty too (no messages).
              counts.push_back(rng() % 3 == 0 ? 0 : static_cast<int64_t>(rng() % 300));
            }
            per_rank.push_back(std::move(counts));
          }
          c.counts.push_back(std::move(per_rank));
        }
        // Staggered starts: early ranks' messages commit before late ranks reach the call.
        for (int r = 0; r < n; ++r) c.lag.push_back(Nanos(static_cast<int64_t>(rng() % 40000)));
        const Outcome a = RunCase(c, /*event=*/false);
        const Outcome b = RunCase(c, /*event=*/true);
        const std::string name = c.Name();
        for (int r = 0; r < n; ++r) {
          const size_t ur = static_cast<size_t>(r);
          ASSERT_TRUE(a.status[ur].ok()) << name << ": " << a.status[ur];
          ASSERT_TRUE(b.status[ur].ok()) << name << ": " << b.status[ur];
          for (size_t k = 0; k < c.counts.size(); ++k) {
            const CollectiveResult& x = a.results[ur][k];
            const CollectiveResult& y = b.results[ur][k];
            EXPECT_EQ(x.start, y.start) << name;
            EXPECT_EQ(x.end, y.end) << name << " rank " << r << " call " << k;
            EXPECT_EQ(x.transfer, y.transfer) << name;
            EXPECT_EQ(x.peer_wait, y.peer_wait) << name;
            EXPECT_EQ(x.wire_bytes, y.wire_bytes) << name;
            EXPECT_EQ(x.modeled_bytes, y.modeled_bytes) << name;
            EXPECT_EQ(x.messages, y.messages) << name;
            ASSERT_EQ(x.spans.size(), y.spans.size()) << name;
            for (size_t i = 0; i < x.spans.size(); ++i) {
              EXPECT_EQ(x.spans[i].start, y.spans[i].start) << name;
              EXPECT_EQ(x.spans[i].end, y.spans[i].end) << name;
              EXPECT_EQ(x.spans[i].peer, y.spans[i].peer) << name;
            }
            EXPECT_EQ(a.recv_counts[ur][k], b.recv_counts[ur][k]) << name;
            // Bit for bit (a lossy codec's values are the same round trips).
            ASSERT_EQ(a.recv[ur][k].size(), b.recv[ur][k].size()) << name;
            EXPECT_EQ(0, std::memcmp(a.recv[ur][k].data(), b.recv[ur][k].data(),
                                     a.recv[ur][k].size() * sizeof(float)))
                << name << " rank " << r << " call " << k;
          }
          EXPECT_EQ(a.stats[ur].messages, b.stats[ur].messages) << name;
          EXPECT_EQ(a.stats[ur].modeled_bytes, b.stats[ur].modeled_bytes) << name;
          for (size_t k = 0; k < std::size(a.stats[ur].collective_bytes); ++k) {
            EXPECT_EQ(a.stats[ur].collective_bytes[k], b.stats[ur].collective_bytes[k]) << name;
          }
        }
        // The fabric committed the same messages in the same order with the same timings.
        ASSERT_EQ(a.commits.size(), b.commits.size()) << name;
        EXPECT_TRUE(a.commits == b.commits) << name;
        EXPECT_GT(a.commits.size(), 0u);
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 36);
}

// A rank's received block matches what its peer sent (not only the threaded protocol's output).
TEST(EventAllToAll, EachRankReceivesWhatItsPeersSent) {
  Case c;
  c.n = 4;
  c.bins = 2;
  c.segment_bytes = 64;
  c.counts.push_back({});
  for (int r = 0; r < c.n; ++r) {
    std::vector<int64_t> counts;
    for (int i = 0; i < c.n * c.bins; ++i) counts.push_back(r + i);  // rank 0 sends itself 0, 1
    c.counts[0].push_back(counts);
  }
  c.lag.assign(4, Nanos(0));
  const Outcome o = RunCase(c, /*event=*/true);
  for (int r = 0; r < c.n; ++r) {
    ASSERT_TRUE(o.status[static_cast<size_t>(r)].ok()) << o.status[static_cast<size_t>(r)];
    const std::vector<float>& recv = o.recv[static_cast<size_t>(r)][0];
    const std::vector<int64_t>& rc = o.recv_counts[static_cast<size_t>(r)][0];
    size_t at = 0;
    for (int s = 0; s < c.n; ++s) {
      // Where rank r's block starts in rank s's send buffer, and how long it is.
      const std::vector<int64_t>& sc = c.counts[0][static_cast<size_t>(s)];
      size_t begin = 0, len = 0;
      for (int p = 0; p < c.n; ++p) {
        size_t block = 0;
        for (int b = 0; b < c.bins; ++b) block += static_cast<size_t>(sc[static_cast<size_t>(p * c.bins + b)]);
        if (p < r) begin += block;
        if (p == r) len = block;
      }
      for (int b = 0; b < c.bins; ++b) {
        EXPECT_EQ(rc[static_cast<size_t>(s * c.bins + b)], sc[static_cast<size_t>(r * c.bins + b)]);
      }
      for (size_t i = 0; i < len; ++i) {
        ASSERT_EQ(recv[at + i], Value(0, s, begin + i)) << "rank " << r << " from " << s;
      }
      at += len;
    }
    EXPECT_EQ(at, recv.size());
  }
}

TEST(EventAllToAll, MismatchedBinsFailNamingRankPeerAndStep) {
  Case c;
  c.n = 3;
  c.bins = 1;
  c.counts.push_back({{1, 2, 3}, {1, 2, 3}, {1, 2, 3}});
  c.lag.assign(3, Nanos(0));
  // Rank 1 says 2 bins per peer (its counts: 6 entries).
  Group g = MakeGroup(3, /*event=*/true);
  std::vector<absl::Status> st(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      const std::vector<int64_t> counts =
          r == 1 ? std::vector<int64_t>{1, 0, 1, 1, 2, 1} : std::vector<int64_t>{1, 2, 3};
      std::vector<float> send(6, 1.f), recv;
      std::vector<int64_t> recv_counts;
      st[static_cast<size_t>(r)] =
          g.streams[static_cast<size_t>(r)]
              ->Run(send, counts, r == 1 ? 2 : 1, &recv, &recv_counts, {.segment_bytes = 64}, {},
                    kStart, {.rank = r, .op = "test all-to-all"})
              .status();
      if (!st[static_cast<size_t>(r)].ok()) g.fabric->Abort(st[static_cast<size_t>(r)]);
      g.fabric->Finish(r);
    });
  }
  for (auto& t : threads) t.join();
  bool named = false;
  for (const absl::Status& s : st) {
    EXPECT_FALSE(s.ok());
    if (s.code() == absl::StatusCode::kFailedPrecondition &&
        s.message().find("count entries (bins)") != absl::string_view::npos) {
      EXPECT_NE(s.message().find("at step 0"), absl::string_view::npos) << s;
      EXPECT_NE(s.message().find("receiving from rank"), absl::string_view::npos) << s;
      named = true;
    }
  }
  EXPECT_TRUE(named) << st[0] << " | " << st[1] << " | " << st[2];
}

// Rank 0 cannot encode its block for rank 1 (fp16 overflow): its call fails naming the element and
// peer; once it aborts the fabric (as the executor does on a device's failure) its peers return
// Aborted, saying so and carrying the first failure; rank 0 refuses further calls.
TEST(EventAllToAll, AFailedCallIsTheFirstFailureAndItsPeersAreAborted) {
  Group g = MakeGroup(3, /*event=*/true);
  std::vector<absl::Status> st(3);
  absl::Status again;
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      const std::vector<int64_t> counts{2, 2, 2};
      std::vector<float> send(6, 1.f), recv;
      if (r == 0) send[3] = 1e6f;  // the second element of its block for rank 1
      std::vector<int64_t> recv_counts;
      const CollectiveOptions co{.codec = Codec::kFp16, .segment_bytes = 64};
      absl::Status s = g.streams[static_cast<size_t>(r)]
                           ->Run(send, counts, 1, &recv, &recv_counts, co, {}, kStart,
                                 {.rank = r, .op = "test all-to-all"})
                           .status();
      if (!s.ok() && r == 0) {
        g.fabric->Abort(s);
        again = g.streams[0]->Run(send, counts, 1, &recv, &recv_counts, co, {}, kStart, {}).status();
      }
      st[static_cast<size_t>(r)] = s;
      g.fabric->Finish(r);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(st[0].code(), absl::StatusCode::kOutOfRange) << st[0];
  EXPECT_NE(st[0].message().find("rank 0 (device 1) all-to-all-v #0 encoding for rank 1 (device 3) "
                                 "at step 1: element 3"),
            absl::string_view::npos)
      << st[0];
  for (int r : {1, 2}) {
    const absl::Status& s = st[static_cast<size_t>(r)];
    EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
    EXPECT_NE(s.message().find("aborted because the run failed"), absl::string_view::npos) << s;
    EXPECT_NE(s.message().find("encoding for rank 1"), absl::string_view::npos) << s;
  }
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition) << again;
}

TEST(EventAllToAll, BadArgumentsAreRefusedBeforeAnyMessage) {
  Group g = MakeGroup(2, /*event=*/false);
  EventAllToAll a2a(&g.comm->rank(0));
  std::vector<float> send(3), recv;
  std::vector<int64_t> recv_counts;
  const std::vector<int64_t> counts{1, 1};  // sums to 2, send has 3
  absl::StatusOr<CollectiveResult> r =
      a2a.Run(send, counts, 1, &recv, &recv_counts, {.segment_bytes = 64}, {}, kStart, {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_NE(r.status().message().find("send_counts"), absl::string_view::npos) << r.status();
  EXPECT_EQ(g.fabric->pending(), 0u);
  EXPECT_EQ(g.fabric->committed(), 0u);
}

// Rank 2 never joins: ranks 0 and 1 wait on their gates, each naming the device of the rank whose
// message it awaits (rank 2's, device 5) — the stall report a watchdog prints. Abort releases them.
TEST(EventAllToAll, AWaitingRankNamesThePeerItAwaits) {
  Group g = MakeGroup(3, /*event=*/true);
  g.fabric->Finish(2);  // posts nothing: holds nothing back
  std::vector<absl::Status> st(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      const std::vector<int64_t> counts{2, 2, 2};
      std::vector<float> send(6, 1.f), recv;
      std::vector<int64_t> recv_counts;
      st[static_cast<size_t>(r)] = g.streams[static_cast<size_t>(r)]
                                       ->Run(send, counts, 1, &recv, &recv_counts,
                                             {.segment_bytes = 64}, {}, kStart,
                                             {.rank = r, .op = "test all-to-all", .step = 4})
                                       .status();
    });
  }
  // Until both wait on their gates (a condition, not a delay; bounded so a bug fails, not hangs).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::vector<LpWait> waits;
  while (std::chrono::steady_clock::now() < deadline) {
    waits = g.fabric->Waits();
    if (waits[0].state == LpWait::State::kAwaitGate && waits[1].state == LpWait::State::kAwaitGate &&
        waits[0].site.peer == 5 && waits[1].site.peer == 5) {
      break;
    }
    std::this_thread::yield();
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(waits[static_cast<size_t>(r)].state, LpWait::State::kAwaitGate) << r;
    EXPECT_EQ(waits[static_cast<size_t>(r)].site.peer, 5) << r;
    EXPECT_EQ(waits[static_cast<size_t>(r)].site.rank, r);
    EXPECT_EQ(waits[static_cast<size_t>(r)].site.step, 4);
    EXPECT_STREQ(waits[static_cast<size_t>(r)].site.op, "test all-to-all");
  }
  g.fabric->Abort(absl::DeadlineExceededError("test: stalled"));
  for (auto& t : threads) t.join();
  for (const absl::Status& s : st) EXPECT_FALSE(s.ok()) << s;
}

}  // namespace
}  // namespace rp::comm
