// `ringpipe allreduce`'s engines (apps/allreduce.h): the untimed (host wall time) and timed
// (fabric, emulated time) paths, and the closed form used as the timed path's oracle.
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "apps/allreduce.h"
#include "apps/rank_threads.h"
#include "comm/communicator.h"
#include "comm/ring_timing.h"
#include "runtime/fabric.h"
#include "runtime/status_macros.h"
#include "runtime/timing.h"

namespace rp::apps::allreduce {
namespace {

// Exactly-summable input: small integers, so every ordering of the FP32 sum is exact.
float InputValue(uint64_t i, int rank) { return static_cast<float>((i + static_cast<uint64_t>(rank)) % 7); }

// Largest deviation from the exact sum that the codec allows on this data (docs/collectives.md):
// FP32, FP16 and BF16 carry sums of integers <= 6n <= 6144 exactly (FP16 and BF16 up to 2048 and 256
// respectively, so for larger n those two get the relative bound); INT8 re-quantizes the running
// partial sum at each of the n-1 reduce-scatter hops and once more at the owner, each time with an
// error below max|partial| / 127 <= 6n / 127.
double Tolerance(comm::Codec codec, int n) {
  const double max_sum = 6.0 * n;
  switch (codec) {
    case comm::Codec::kFp32: return 0;
    case comm::Codec::kFp16: return max_sum <= 2048 ? 0 : n * max_sum * std::ldexp(1.0, -11);
    case comm::Codec::kBf16: return max_sum <= 256 ? 0 : n * max_sum * std::ldexp(1.0, -8);
    case comm::Codec::kInt8: return n * max_sum / 127.0;
  }
  return 0;
}

// What every rank thread shares: buffers, results, per-iteration times.
struct Shared {
  Shared(const Settings& s, uint64_t elements)
      : n(s.ranks), count(elements), total(s.warmup + s.iters), tol(Tolerance(s.codec, s.ranks)),
        status(static_cast<size_t>(n)), wrong(static_cast<size_t>(n), 0), wire(static_cast<size_t>(n), 0),
        time_ns(static_cast<size_t>(total), std::vector<double>(static_cast<size_t>(n), 0)) {}
  int n;
  uint64_t count;
  int total;
  double tol;
  std::vector<absl::Status> status;
  std::vector<uint64_t> wrong, wire;
  // [iteration][rank]: untimed, the call's wall end − the earliest wall start (filled as ends and
  // starts); timed, the modeled end − the common start.
  std::vector<std::vector<double>> time_ns;
};

// Rank r's buffers: out of place (default, as nccl-tests and the MPI peer measure) `in` is written
// once and every iteration reduces it into `out`; in place, `out` is refilled before every call.
struct Buffers {
  Buffers(const Settings& s, uint64_t count, int r) : in(s.in_place ? 0 : count), out(count), rank(r) {
    for (uint64_t i = 0; i < in.size(); ++i) in[i] = InputValue(i, r);
  }
  void Refill(const Settings& s) {
    if (!s.in_place) return;
    for (uint64_t i = 0; i < out.size(); ++i) out[i] = InputValue(i, rank);
  }
  std::span<const float> input(const Settings& s) const { return s.in_place ? out : in; }
  std::vector<float> in, out;
  int rank;
};

void CountWrong(Shared& sh, const Buffers& b) {
  for (uint64_t i = 0; i < sh.count; ++i) {
    double expect = 0;
    for (int q = 0; q < sh.n; ++q) expect += InputValue(i, q);
    if (!(std::fabs(static_cast<double>(b.out[i]) - expect) <= sh.tol)) ++sh.wrong[static_cast<size_t>(b.rank)];
  }
}

absl::StatusOr<Row> Finish(const Settings& s, const Shared& sh, uint64_t count) {
  for (const absl::Status& st : sh.status) RP_RETURN_IF_ERROR(st);
  std::vector<double> times;
  for (int it = s.warmup; it < sh.total; ++it) {
    const auto& t = sh.time_ns[static_cast<size_t>(it)];
    times.push_back(*std::max_element(t.begin(), t.end()) / 1e3);
  }
  std::nth_element(times.begin(), times.begin() + static_cast<ptrdiff_t>(times.size() / 2), times.end());
  Row row;
  row.bytes = count * sizeof(float);
  row.count = count;
  row.time_us = times[times.size() / 2];
  row.formula_us = std::numeric_limits<double>::quiet_NaN();
  row.algbw = row.time_us > 0 ? static_cast<double>(row.bytes) / (row.time_us * 1e3) : 0;
  row.busbw = row.algbw * (s.ranks > 1 ? 2.0 * (s.ranks - 1) / s.ranks : 0.0);
  for (uint64_t w : sh.wrong) row.wrong += w;
  row.wire_bytes_per_rank = *std::max_element(sh.wire.begin(), sh.wire.end());
  return row;
}

}  // namespace

double RankHostBytes(const Settings& s, uint64_t bytes, uint64_t segment, bool timed) {
  const uint64_t count = bytes / sizeof(float);
  double total = static_cast<double>(bytes) * (s.in_place ? 1 : 2);
  if (!timed && s.codec != comm::Codec::kFp32 && s.ranks > 1) {
    const uint64_t n = static_cast<uint64_t>(s.ranks);
    const uint64_t largest = std::min<uint64_t>(segment / sizeof(float), (count + n - 1) / n);
    const uint64_t buffer = (comm::SegmentWireBytes(s.codec, largest) + 63) / 64 * 64;
    total += static_cast<double>(comm::kDefaultChannelCapacity + 2) * static_cast<double>(buffer);
  }
  if (timed) total += static_cast<double>(bytes);
  return total;
}

double RankMessages(int ranks, uint64_t bytes, uint64_t segment) {
  if (ranks <= 1) return 0;
  const uint64_t n = static_cast<uint64_t>(ranks), chunk = (bytes / sizeof(float) + n - 1) / n;
  const uint64_t per_segment = std::max<uint64_t>(1, segment / sizeof(float));
  return 2.0 * static_cast<double>(n - 1) * static_cast<double>(std::max<uint64_t>(1, (chunk + per_segment - 1) / per_segment));
}

absl::StatusOr<Row> RunUntimed(const Settings& s, uint64_t bytes, uint64_t segment) {
  const uint64_t count = bytes / sizeof(float);
  comm::CommunicatorOptions co;
  co.devices = Iota(s.ranks);
  co.forward_lends = s.forward;
  co.streaming_min_bytes = s.streaming_min_bytes;
  RP_ASSIGN_OR_RETURN(auto comm, comm::Communicator::Create(co));
  const comm::CollectiveOptions options{.codec = s.codec, .segment_bytes = segment};
  Shared sh(s, count);
  using Steady = std::chrono::steady_clock;
  std::vector<std::vector<Steady::time_point>> starts(static_cast<size_t>(sh.total),
                                                      std::vector<Steady::time_point>(static_cast<size_t>(s.ranks)));
  std::vector<std::vector<Steady::time_point>> ends = starts;
  std::barrier sync(s.ranks);
  RunThreads(s.ranks, [&](int r) {
    Buffers b(s, count, r);
    comm::RankComm& me = comm->rank(r);
    for (int it = 0; it < sh.total; ++it) {
      b.Refill(s);
      sync.arrive_and_wait();
      starts[static_cast<size_t>(it)][static_cast<size_t>(r)] = Steady::now();
      auto res = me.AllReduce(b.input(s), b.out, options);
      ends[static_cast<size_t>(it)][static_cast<size_t>(r)] = Steady::now();
      if (!res.ok()) {
        sh.status[static_cast<size_t>(r)] = res.status();
        comm->Abort(res.status());
        sync.arrive_and_drop();
        return;
      }
      sh.wire[static_cast<size_t>(r)] = res->wire_bytes;
    }
    CountWrong(sh, b);
  });
  for (int it = 0; it < sh.total; ++it) {
    const auto& st = starts[static_cast<size_t>(it)];
    const Steady::time_point t0 = *std::min_element(st.begin(), st.end());
    for (int r = 0; r < s.ranks; ++r) {
      sh.time_ns[static_cast<size_t>(it)][static_cast<size_t>(r)] =
          std::chrono::duration<double, std::nano>(ends[static_cast<size_t>(it)][static_cast<size_t>(r)] - t0).count();
    }
  }
  return Finish(s, sh, count);
}

absl::StatusOr<Row> RunTimed(const Settings& s, uint64_t bytes, uint64_t segment, const LinkSpec& spec) {
  const int n = s.ranks;
  const uint64_t count = bytes / sizeof(float);
  std::vector<uint64_t> tie(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) tie[static_cast<size_t>(r)] = static_cast<uint64_t>(r);
  RP_ASSIGN_OR_RETURN(auto fabric, Fabric::Create({.links = spec, .num_devices = n, .faults = {}, .tie_rank = tie,
                                                   .on_commit = {}}));
  comm::CommunicatorOptions co;
  co.devices = Iota(n);
  co.fabric = fabric.get();  // outlives the communicator: declared first, destroyed last
  co.lps.assign(co.devices.begin(), co.devices.end());
  RP_ASSIGN_OR_RETURN(auto comm, comm::Communicator::Create(co));
  const comm::CollectiveOptions options{.codec = s.codec, .segment_bytes = segment};
  const RendezvousId next_iteration = fabric->AddRendezvous(n);
  Shared sh(s, count);
  RunThreads(n, [&](int r) {
    Buffers b(s, count, r);
    Nanos start{0};  // every iteration starts at the same modeled time on every rank
    for (int it = 0; it < sh.total; ++it) {
      b.Refill(s);
      auto res = comm->rank(r).AllReduce(b.input(s), b.out, options, start);
      if (!res.ok()) {
        sh.status[static_cast<size_t>(r)] = res.status();
        comm->Abort(res.status());
        fabric->Abort(res.status());
        return;
      }
      sh.time_ns[static_cast<size_t>(it)][static_cast<size_t>(r)] = static_cast<double>((res->end - start).count());
      sh.wire[static_cast<size_t>(r)] = res->wire_bytes;
      // The last rank to arrive hands everyone the latest end: the next common start.
      auto next = fabric->Arrive(r, next_iteration, res->end, {.rank = r, .op = "next iteration"},
                                 [](Nanos latest) -> absl::StatusOr<Nanos> { return latest; });
      if (!next.ok()) {
        sh.status[static_cast<size_t>(r)] = next.status();
        return;
      }
      start = *next;
    }
    fabric->Finish(r);
    CountWrong(sh, b);
  });
  RP_ASSIGN_OR_RETURN(Row row, Finish(s, sh, count));
  // The oracle applies when every hop of the ring is one link class (all on one node, or one device
  // per node with a NIC each).
  const bool one_node = n <= spec.devices_per_node;
  const bool all_nodes = spec.devices_per_node == 1;
  if (n > 1 && (one_node || all_nodes)) {
    row.formula_us =
        static_cast<double>(RingAllReduceFormula(n, count, segment, s.codec, one_node ? spec.intra_node : spec.inter_node)
                                .count()) /
        1e3;
  } else if (n == 1) {
    row.formula_us = 0;
  }
  return row;
}

Nanos RingAllReduceFormula(int n, uint64_t count, uint64_t segment_bytes, comm::Codec codec, const LinkParams& link) {
  if (n <= 1) return Nanos(0);
  const comm::ring::TimedShape shape = comm::ring::TimedShape::Ring(n, count, segment_bytes / 4, codec, 0);
  const int steps = 2 * (n - 1), segments = shape.segments();
  std::vector<Nanos> hold(static_cast<size_t>(segments));
  for (int k = 0; k < segments; ++k) hold[static_cast<size_t>(k)] = PortOccupancy(link, shape.segment_bytes(k), 1.0);
  const Nanos alpha = LinkLatency(link, 1.0);
  if (hold.front() == hold.back()) {
    const Nanos d = hold.front();
    const int64_t k = segments;
    return alpha + std::max((steps - 1) * (d + alpha) + k * d, steps * k * d);
  }
  // Unequal segments: the longest path of the same ring, segment by segment. Segment k of step t
  // leaves when the port is free and segment k of step t − 1 has arrived.
  std::vector<Nanos> arrived(static_cast<size_t>(segments), Nanos(0));
  Nanos port_free{0}, last{0};
  for (int t = 0; t < steps; ++t) {
    for (int k = 0; k < segments; ++k) {
      const Nanos leave = std::max(t == 0 ? Nanos(0) : arrived[static_cast<size_t>(k)], port_free);
      port_free = leave + hold[static_cast<size_t>(k)];
      arrived[static_cast<size_t>(k)] = port_free + alpha;
      last = std::max(last, arrived[static_cast<size_t>(k)]);
    }
  }
  return last;
}

}  // namespace rp::apps::allreduce
