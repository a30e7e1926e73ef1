// Timed communicators: collectives and p2p messages timed by their own messages on the fabric.
// The emulated ring equals the closed form of docs/collectives.md on an uncontended fabric, to the
// nanosecond; contention, late peers and modeled sizes show up by themselves; results stay exact.
// A timed ring's failures and size limits: timed_limits_test.cc.
#include <algorithm>
#include <cmath>
#include <functional>
#include <thread>
#include <vector>

#include "comm/collectives.h"
#include "comm/ring_timing.h"
#include "gtest/gtest.h"
#include "runtime/fabric.h"
#include "runtime/timing.h"
#include "tests/comm/timed_helpers.h"

namespace rp::comm {
namespace {

// The longest-path recurrence of a symmetric ring (every link exclusive): message (t, k) of a
// rank starts at max(its ready time, the end of the rank's previous message on the link); step 0
// is ready at the start, step t + 1 segment k when segment k of step t arrived. Returns the last
// arrival. An oracle independent of ports, tickets and threads.
Nanos RingRecurrence(int steps, const std::vector<Nanos>& hold, Nanos alpha, Nanos start) {
  const size_t K = hold.size();
  std::vector<Nanos> arrival_prev(K, start), arrival(K);
  Nanos link_free = start, last = start;
  for (int t = 0; t < steps; ++t) {
    for (size_t k = 0; k < K; ++k) {
      const Nanos ready = t == 0 ? start : arrival_prev[k];
      const Nanos s = std::max(ready, link_free);
      link_free = s + hold[k];
      arrival[k] = link_free + alpha;
      last = std::max(last, arrival[k]);
    }
    arrival_prev = arrival;
  }
  return last;
}

struct RingCase {
  int n;
  size_t count;
  size_t segment_bytes;
  Codec codec;
};

TEST(TimedRing, AllReduceOnAnUncontendedFabricEqualsTheClosedForm) {
  const LinkParams& p = Spec().intra_node;
  std::vector<RingCase> cases;
  for (int n = 1; n <= 8; ++n) {
    for (size_t count : {size_t{1}, size_t{7}, size_t{1000}, size_t{65539}}) {
      for (size_t seg : {size_t{256}, size_t{4096}, size_t{1} << 20}) {
        for (Codec c : {Codec::kFp32, Codec::kBf16, Codec::kInt8}) cases.push_back({n, count, seg, c});
      }
    }
  }
  for (const RingCase& rc : cases) {
    auto fabric = MakeFabric(rc.n, 8, Spec());
    std::vector<int> devices;
    std::vector<LpId> lps;
    for (int r = 0; r < rc.n; ++r) {
      devices.push_back(r);
      lps.push_back(r);
    }
    auto comm = MakeTimed(fabric.get(), devices, lps);
    std::vector<CollectiveResult> res(static_cast<size_t>(rc.n));
    std::vector<std::vector<float>> data(static_cast<size_t>(rc.n));
    auto st = RunThreads(rc.n, [&](int r) -> absl::Status {
      auto& v = data[static_cast<size_t>(r)];
      v.assign(rc.count, static_cast<float>(r + 1));
      auto out = comm->rank(r).AllReduce(
          v, v, {.codec = rc.codec, .segment_bytes = rc.segment_bytes}, kStart);
      if (out.ok()) res[static_cast<size_t>(r)] = *out;
      fabric->Finish(r);
      return out.status();
    });
    const std::string name = absl::StrCat("n=", rc.n, " count=", rc.count, " seg=",
                                          rc.segment_bytes, " codec=", CodecName(rc.codec));
    for (const absl::Status& s : st) ASSERT_TRUE(s.ok()) << name << ": " << s;
    // Oracle: the recurrence with the rounded port holds of the modeled segments.
    const ring::TimedShape shape =
        ring::TimedShape::Ring(rc.n, rc.count, rc.segment_bytes / 4, rc.codec, 0);
    std::vector<Nanos> hold;
    for (int k = 0; k < shape.segments(); ++k) {
      hold.push_back(PortOccupancy(p, shape.segment_bytes(k), 1.0));
    }
    const int steps = 2 * (rc.n - 1);
    const Nanos expected = rc.n == 1 ? kStart : RingRecurrence(steps, hold, p.alpha, kStart);
    const float sum = static_cast<float>(rc.n * (rc.n + 1) / 2);
    for (int r = 0; r < rc.n; ++r) {
      const CollectiveResult& x = res[static_cast<size_t>(r)];
      EXPECT_EQ(x.end, expected) << name << " rank " << r;
      EXPECT_EQ(x.transfer + x.peer_wait + x.reduce, x.end - x.start) << name;
      EXPECT_EQ(x.peer_wait, Nanos(0)) << name << ": every rank started together";
      if (rc.codec != Codec::kInt8) {
        for (float v : data[static_cast<size_t>(r)]) ASSERT_EQ(v, sum) << name;
      }
    }
    // With equal segments the recurrence is the closed form of docs/collectives.md:
    //   end − start = α + max((T − 1)(D + α) + K·D, T·K·D).
    if (rc.n > 1 && hold.front() == hold.back()) {
      const Nanos D = hold.front();
      const int64_t K = static_cast<int64_t>(hold.size());
      const Nanos closed = p.alpha + std::max((steps - 1) * (D + p.alpha) + K * D, steps * K * D);
      EXPECT_EQ(expected - kStart, closed) << name;
    }
  }
}

TEST(TimedRing, ReduceScatterAllGatherAndBroadcastFollowTheRecurrence) {
  const LinkParams& p = Spec().intra_node;
  for (int n : {2, 3, 5}) {
    const size_t count = 3000;
    const ring::TimedShape ring_shape = ring::TimedShape::Ring(n, count, 256, Codec::kFp32, 0);
    const ring::TimedShape chain_shape = ring::TimedShape::Chain(count, 256, Codec::kFp32);
    auto holds = [&](const ring::TimedShape& sh) {
      std::vector<Nanos> h;
      for (int k = 0; k < sh.segments(); ++k) h.push_back(PortOccupancy(p, sh.segment_bytes(k), 1));
      return h;
    };
    auto fabric = MakeFabric(n, 8, Spec());
    std::vector<int> devices;
    std::vector<LpId> lps;
    for (int r = 0; r < n; ++r) {
      devices.push_back(r);
      lps.push_back(r);
    }
    auto comm = MakeTimed(fabric.get(), devices, lps);
    std::vector<Nanos> rs_end(n), ag_end(n), bc_end(n);
    std::vector<std::vector<float>> gathered(n), bcast(n);
    const int root = 1;
    auto st = RunThreads(n, [&](int r) -> absl::Status {
      const ring::Range own = ring::ChunkRange(count, n, r);
      std::vector<float> in(count, 1.0f), out(own.size);
      auto rs = comm->rank(r).ReduceScatter(in, out, {.segment_bytes = 1024}, kStart);
      if (!rs.ok()) return rs.status();
      rs_end[static_cast<size_t>(r)] = rs->end;
      for (float v : out) {
        if (v != static_cast<float>(n)) return absl::InternalError("wrong reduce-scatter sum");
      }
      std::vector<float> mine(own.size, static_cast<float>(r));
      gathered[static_cast<size_t>(r)].assign(count, -1.0f);
      auto ag = comm->rank(r).AllGather(mine, gathered[static_cast<size_t>(r)],
                                        {.segment_bytes = 1024}, rs->end);
      if (!ag.ok()) return ag.status();
      ag_end[static_cast<size_t>(r)] = ag->end - rs->end;
      bcast[static_cast<size_t>(r)].assign(count, r == root ? 7.0f : 0.0f);
      auto bc = comm->rank(r).Broadcast(root, {}, bcast[static_cast<size_t>(r)],
                                        {.segment_bytes = 1024}, ag->end);
      if (!bc.ok()) return bc.status();
      bc_end[static_cast<size_t>(r)] = bc->end - ag->end;
      fabric->Finish(r);
      return absl::OkStatus();
    });
    for (const absl::Status& x : st) ASSERT_TRUE(x.ok()) << "n=" << n << ": " << x;
    const Nanos one_pass = RingRecurrence(n - 1, holds(ring_shape), p.alpha, kStart) - kStart;
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(rs_end[static_cast<size_t>(r)], kStart + one_pass) << "n=" << n;
      EXPECT_EQ(ag_end[static_cast<size_t>(r)], one_pass) << "n=" << n;
      for (int c = 0; c < n; ++c) {
        const ring::Range ch = ring::ChunkRange(count, n, c);
        for (size_t i = ch.begin; i < ch.end(); ++i) {
          ASSERT_EQ(gathered[static_cast<size_t>(r)][i], static_cast<float>(c));
        }
      }
      for (float v : bcast[static_cast<size_t>(r)]) ASSERT_EQ(v, 7.0f);
    }
    // The chain's last rank (root − 1) receives after n − 1 hops, each over a link of its own
    // (segment k leaves hop j once it arrived from hop j − 1 and hop j's link is free); the root
    // itself ends at once.
    const std::vector<Nanos> h = holds(chain_shape);
    std::vector<Nanos> arrived(h.size(), kStart);
    for (int hop = 0; hop < n - 1; ++hop) {
      Nanos link_free = kStart;
      for (size_t k = 0; k < h.size(); ++k) {
        const Nanos start = std::max(arrived[k], link_free);
        link_free = start + h[k];
        arrived[k] = link_free + p.alpha;
      }
    }
    const int last = (root + n - 1) % n;
    EXPECT_EQ(bc_end[static_cast<size_t>(last)], arrived.back() - kStart);
    EXPECT_EQ(bc_end[static_cast<size_t>(root)], Nanos(0));
  }
}

TEST(TimedRing, ModeledSizeIsTimedWhileTheRealBufferIsReduced) {
  // 10 real floats timed as a 1 Mi-element (4 MiB) bucket: K = 8 segments of 256 KiB per chunk
  // at n = 2, most real segments empty.
  const int n = 2;
  auto fabric = MakeFabric(n, 8, Spec());
  auto comm = MakeTimed(fabric.get(), {0, 1}, {0, 1});
  std::vector<std::vector<float>> data(n);
  std::vector<CollectiveResult> res(n);
  auto st = RunThreads(n, [&](int r) -> absl::Status {
    auto& v = data[static_cast<size_t>(r)];
    for (int i = 0; i < 10; ++i) v.push_back(static_cast<float>(i * (r + 1)));
    auto out = comm->rank(r).AllReduce(
        v, v, {.segment_bytes = 256 << 10, .model = {.elements = 1 << 20}}, kStart);
    if (out.ok()) res[static_cast<size_t>(r)] = *out;
    fabric->Finish(r);
    return out.status();
  });
  for (const absl::Status& s : st) ASSERT_TRUE(s.ok()) << s;
  const LinkParams& p = Spec().intra_node;
  const Nanos D = PortOccupancy(p, 256 << 10, 1.0);
  // Chunk 512 Ki elements (2 MiB) = K = 8 segments; T = 2 steps.
  const Nanos expected = kStart + p.alpha + std::max(1 * (D + p.alpha) + 8 * D, 2 * 8 * D);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(res[static_cast<size_t>(r)].end, expected);
    EXPECT_EQ(res[static_cast<size_t>(r)].modeled_bytes, 2u * 8 * (256 << 10));
    EXPECT_EQ(res[static_cast<size_t>(r)].messages, 16u);
    for (int i = 0; i < 10; ++i) EXPECT_EQ(data[static_cast<size_t>(r)][i], 3.0f * i);
  }
}

TEST(TimedRing, ALatePeerIsPeerWaitNotTransfer) {
  const int n = 4;
  const Nanos late{500000};
  auto fabric = MakeFabric(n, 8, Spec());
  auto comm = MakeTimed(fabric.get(), {0, 1, 2, 3}, {0, 1, 2, 3});
  std::vector<CollectiveResult> res(n);
  auto st = RunThreads(n, [&](int r) -> absl::Status {
    std::vector<float> v(4096, 1.0f);
    auto out = comm->rank(r).AllReduce(v, v, {.segment_bytes = 4096}, r == 2 ? kStart + late : kStart);
    if (out.ok()) res[static_cast<size_t>(r)] = *out;
    fabric->Finish(r);  // it posts nothing more: later commits need not wait for it
    return out.status();
  });
  for (const absl::Status& s : st) ASSERT_TRUE(s.ok()) << s;
  // Rank 3 receives from rank 2: its first wait is the whole lateness, as peer wait.
  EXPECT_GE(res[3].peer_wait, late);
  for (int r = 0; r < n; ++r) {
    const CollectiveResult& x = res[static_cast<size_t>(r)];
    EXPECT_EQ(x.transfer + x.peer_wait + x.reduce, x.end - x.start) << "rank " << r;
    Nanos spans{0};
    for (const auto& sp : x.spans) spans += sp.end - sp.start;
    EXPECT_EQ(spans, x.transfer + x.peer_wait);
  }
  // The transfer part is what the ring costs without the straggler, give or take the lateness'
  // shift: it does not grow by the lateness.
  EXPECT_LT(res[3].transfer, late);
}

// Two n = 2 rings between node 0 and node 1: devices (0, 8) and (1, 9), inter-node, bandwidth
// bound (K = 16 segments of 256 KiB). With one NIC per device they do not meet; with one shared
// NIC per node every byte of both goes through the same ports.
std::vector<Nanos> TwoRingEnds(int nics_per_node) {
  auto fabric = MakeFabric(4, 16, Spec(nics_per_node));
  auto a = MakeTimed(fabric.get(), {0, 8}, {0, 1});
  auto b = MakeTimed(fabric.get(), {1, 9}, {2, 3});
  std::vector<Nanos> ends(4);
  const size_t count = 2 * 16 * (256 << 10) / 4;
  auto st = RunThreads(4, [&](int lp) -> absl::Status {
    Communicator& c = lp < 2 ? *a : *b;
    std::vector<float> v(count, 1.0f);
    auto out = c.rank(lp % 2).AllReduce(v, v, {.segment_bytes = 256 << 10}, kStart);
    if (out.ok()) ends[static_cast<size_t>(lp)] = out->end;
    fabric->Finish(lp);
    return out.status();
  });
  for (const absl::Status& s : st) EXPECT_TRUE(s.ok()) << s;
  return ends;
}

TEST(TimedRing, RingsSharingANicContendAndTheResultIsDeterministic) {
  const LinkParams& p = Spec().inter_node;
  const Nanos D = PortOccupancy(p, 256 << 10, 1.0);
  const int64_t K = 16, T = 2;
  const std::vector<Nanos> rail = TwoRingEnds(0);
  for (Nanos e : rail) EXPECT_EQ(e, kStart + T * K * D + p.alpha);  // bandwidth bound, alone
  const std::vector<Nanos> shared = TwoRingEnds(1);
  // Both rings' 2·T·K messages per direction go back to back through one NIC.
  EXPECT_EQ(*std::max_element(shared.begin(), shared.end()), kStart + 2 * T * K * D + p.alpha);
  for (Nanos e : shared) EXPECT_GT(e, rail[0]);
  for (int run = 0; run < 3; ++run) EXPECT_EQ(TwoRingEnds(1), shared) << "run " << run;
}

TEST(TimedRing, ReduceCostIsModeledAndAccounted) {
  const int n = 3;
  auto run = [&](double reduce_gbps) {
    auto fabric = MakeFabric(n, 8, Spec());
    auto comm = MakeTimed(fabric.get(), {0, 1, 2}, {0, 1, 2});
    std::vector<CollectiveResult> res(n);
    auto st = RunThreads(n, [&](int r) -> absl::Status {
      std::vector<float> v(300000, 1.0f);
      auto out = comm->rank(r).ReduceScatter(
          v, std::span<float>(v).subspan(ring::ChunkRange(v.size(), n, r).begin,
                                         ring::ChunkRange(v.size(), n, r).size),
          {.segment_bytes = 64 << 10, .model = {.reduce_gbps = reduce_gbps}}, kStart);
      if (out.ok()) res[static_cast<size_t>(r)] = *out;
      fabric->Finish(r);
      return out.status();
    });
    for (const absl::Status& s : st) EXPECT_TRUE(s.ok()) << s;
    return res;
  };
  const auto free_reduce = run(0), slow_reduce = run(10);
  for (int r = 0; r < n; ++r) {
    const CollectiveResult& f = free_reduce[static_cast<size_t>(r)];
    const CollectiveResult& s = slow_reduce[static_cast<size_t>(r)];
    EXPECT_GT(s.end, f.end);
    EXPECT_GT(s.reduce, Nanos(0));
    EXPECT_EQ(f.reduce, Nanos(0));
    EXPECT_EQ(s.transfer + s.peer_wait + s.reduce, s.end - s.start);
  }
}

// The closed form of docs/collectives.md with a reduce engine: K = 1 on an uncontended ideal ring
// (α = o = 0), n = 4: end − start = (n − 1)(D + R) + (n − 1)D, all of it communication — transfer
// 2(n − 1)D, reduce (n − 1)R — and no peer wait: every rank reduces in the same step, so waiting for
// the neighbour's next segment while its own engine reduces is reduce time, not a straggler's.
TEST(TimedRing, AllReduceReductionsAreReduceTimeNotPeerWait) {
  const int n = 4;
  constexpr size_t kChunk = 4096;  // FP32 elements per chunk: 16384 bytes, one segment
  LinkSpec spec;
  spec.intra_node = {.alpha = Nanos(0), .bandwidth_gbps = 1, .overhead = Nanos(0)};
  spec.inter_node = spec.intra_node;
  const Nanos D{16384};  // 16384 bytes at 1 byte/ns
  for (double gbps : {0.5, 1.0, 2.0}) {
    const Nanos R{static_cast<int64_t>(4.0 * kChunk / gbps)};
    auto fabric = MakeFabric(n, 8, spec);
    auto comm = MakeTimed(fabric.get(), {0, 1, 2, 3}, {0, 1, 2, 3});
    std::vector<CollectiveResult> res(n);
    auto st = RunThreads(n, [&](int r) -> absl::Status {
      std::vector<float> v(n * kChunk, 1.0f);
      auto out = comm->rank(r).AllReduce(v, v, {.segment_bytes = 4 * kChunk, .model = {.reduce_gbps = gbps}},
                                         kStart);
      if (out.ok()) res[static_cast<size_t>(r)] = *out;
      fabric->Finish(r);
      return out.status();
    });
    for (const absl::Status& s : st) ASSERT_TRUE(s.ok()) << s;
    for (int r = 0; r < n; ++r) {
      const CollectiveResult& x = res[static_cast<size_t>(r)];
      EXPECT_EQ(x.end - x.start, (n - 1) * (D + R) + (n - 1) * D) << gbps << " GB/s, rank " << r;
      EXPECT_EQ(x.transfer, 2 * (n - 1) * D) << gbps << " GB/s, rank " << r;
      EXPECT_EQ(x.reduce, (n - 1) * R) << gbps << " GB/s, rank " << r;
      EXPECT_EQ(x.peer_wait, Nanos(0)) << gbps << " GB/s, rank " << r;
      Nanos spans{0};
      for (const auto& sp : x.spans) {
        EXPECT_FALSE(sp.peer);
        spans += sp.end - sp.start;
      }
      EXPECT_EQ(spans, x.end - x.start) << "an all-reduce ends on an arrival: no reduce tail";
    }
  }
}

// A reduce engine slower than the link: a rank's own reduced chunk (all-gather step 0, ready after
// its last reduction) is posted before the first segment it forwards, which arrives earlier; the
// forward leaves after it (posts leave in order) instead of being refused as out of modeled-time
// order (the stress harness found this: "posts a message ready ... before its bound").
TEST(TimedRing, AllReduceWithASlowReduceEnginePostsInOrder) {
  for (int n : {2, 3, 4}) {
    auto fabric = MakeFabric(n, 8, Spec());
    std::vector<int> devices, ranks;
    for (int r = 0; r < n; ++r) {
      devices.push_back(r);
      ranks.push_back(r);
    }
    auto comm = MakeTimed(fabric.get(), devices, ranks);
    std::vector<CollectiveResult> res(static_cast<size_t>(n));
    auto st = RunThreads(n, [&](int r) -> absl::Status {
      std::vector<float> v(300000, 1.0f + static_cast<float>(r));
      auto out = comm->rank(r).AllReduce(v, v, {.segment_bytes = 64 << 10, .model = {.reduce_gbps = 10}},
                                         kStart);
      if (out.ok()) res[static_cast<size_t>(r)] = *out;
      fabric->Finish(r);
      if (out.ok() && v[0] != static_cast<float>(n * (n + 1) / 2)) {
        return absl::InternalError("wrong sum");
      }
      return out.status();
    });
    for (const absl::Status& s : st) EXPECT_TRUE(s.ok()) << "n " << n << ": " << s;
    for (const CollectiveResult& c : res) {
      EXPECT_GT(c.reduce + c.peer_wait + c.transfer, Nanos(0));
      EXPECT_EQ(c.transfer + c.peer_wait + c.reduce, c.end - c.start) << "n " << n;
    }
  }
}

TEST(TimedP2P, ModeledBytesAndStepAreTimedWithSlowLinkFaults) {
  std::vector<uint64_t> tie = {0, 1};
  auto fabric = Fabric::Create({.links = Spec(), .num_devices = 16,
                                .faults = {{.src = 0, .dst = 8, .factor = 2, .from_step = 3}},
                                .tie_rank = tie});
  ASSERT_TRUE(fabric.ok());
  auto comm = MakeTimed(fabric->get(), {0, 8}, {0, 1});
  std::vector<MessageTiming> got;
  auto st = RunThreads(2, [&](int r) -> absl::Status {
    for (int step = 2; step <= 3; ++step) {
      if (r == 0) {
        auto t = comm->rank(0).Send(1, std::make_unique<Buffer>(4, 1.0f), kStart * step,
                                    {.modeled_bytes = 1 << 20, .step = step});
        if (!t.ok()) return t.status();
      } else {
        auto m = comm->rank(1).Recv(0, {.step = step});
        if (!m.ok()) return m.status();
        got.push_back(m->timing);
      }
    }
    return absl::OkStatus();
  });
  for (const absl::Status& s : st) ASSERT_TRUE(s.ok()) << s;
  const LinkParams& p = Spec().inter_node;
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].arrival, kStart * 2 + PortOccupancy(p, 1 << 20, 1) + p.alpha);
  EXPECT_EQ(got[1].arrival - got[1].start, PortOccupancy(p, 1 << 20, 2) + LinkLatency(p, 2));
  EXPECT_EQ(comm->rank(0).stats().modeled_bytes, 2u << 20);
  EXPECT_EQ(comm->rank(0).stats().p2p_bytes, 2u * 16);
}

}  // namespace
}  // namespace rp::comm
