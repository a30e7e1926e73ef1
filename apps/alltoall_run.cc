// `ringpipe alltoall`'s engines (apps/alltoall.h): the untimed (host wall time) and timed (fabric,
// emulated time) paths, and the closed form used as the timed path's oracle.
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <span>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "apps/alltoall.h"
#include "apps/rank_threads.h"
#include "comm/alltoall.h"
#include "comm/alltoall_timing.h"
#include "comm/communicator.h"
#include "runtime/fabric.h"
#include "runtime/status_macros.h"
#include "runtime/timing.h"

namespace rp::apps::alltoall {
namespace {

// What rank `src` sends to rank `dst` at element j of their block: small integers (exact in FP16 and
// BF16), a different pattern for every (src, dst) pair so a misplaced block is wrong.
float InputValue(int src, int dst, uint64_t j) {
  return static_cast<float>((static_cast<uint64_t>(src) * 3 + static_cast<uint64_t>(dst) * 5 + j) % 7);
}

// The codec's bound for one quantisation of values in [0, 6] (comm/codec.h): exact but for INT8
// (< max|x| / 127).
double Tolerance(comm::Codec codec) { return codec == comm::Codec::kInt8 ? 6.0 / 127 : 0; }

struct Shared {
  Shared(const Settings& s, uint64_t elements)
      : n(s.ranks), count(elements), total(s.warmup + s.iters), status(static_cast<size_t>(n)),
        wrong(static_cast<size_t>(n), 0), wire(static_cast<size_t>(n), 0),
        time_ns(static_cast<size_t>(total), std::vector<double>(static_cast<size_t>(n), 0)) {}
  int n;
  uint64_t count;
  int total;
  std::vector<absl::Status> status;
  std::vector<uint64_t> wrong, wire;
  std::vector<std::vector<double>> time_ns;  // [iteration][rank], as allreduce's
};

struct Buffers {
  Buffers(const Shared& sh, int r) : send(sh.count), recv(sh.count), rank(r) {
    const uint64_t block = sh.count / static_cast<uint64_t>(sh.n);
    for (uint64_t i = 0; i < sh.count; ++i) {
      send[i] = InputValue(r, static_cast<int>(i / block), i % block);
    }
  }
  std::vector<float> send, recv;
  int rank;
};

void CountWrong(Shared& sh, const Buffers& b, double tol) {
  const uint64_t block = sh.count / static_cast<uint64_t>(sh.n);
  for (uint64_t i = 0; i < sh.count; ++i) {
    const double expect = InputValue(static_cast<int>(i / block), b.rank, i % block);
    if (!(std::fabs(static_cast<double>(b.recv[i]) - expect) <= tol)) ++sh.wrong[static_cast<size_t>(b.rank)];
  }
}

absl::StatusOr<Row> Finish(const Settings& s, const Shared& sh) {
  for (const absl::Status& st : sh.status) RP_RETURN_IF_ERROR(st);
  std::vector<double> times;
  for (int it = s.warmup; it < sh.total; ++it) {
    const auto& t = sh.time_ns[static_cast<size_t>(it)];
    times.push_back(*std::max_element(t.begin(), t.end()) / 1e3);
  }
  std::nth_element(times.begin(), times.begin() + static_cast<ptrdiff_t>(times.size() / 2), times.end());
  Row row;
  row.count = sh.count;
  row.bytes = sh.count * sizeof(float);
  row.time_us = times[times.size() / 2];
  row.formula_us = std::numeric_limits<double>::quiet_NaN();
  row.algbw = row.time_us > 0 ? static_cast<double>(row.bytes) / (row.time_us * 1e3) : 0;
  row.busbw = row.algbw * (s.ranks - 1) / s.ranks;
  for (uint64_t w : sh.wrong) row.wrong += w;
  row.wire_bytes_per_rank = *std::max_element(sh.wire.begin(), sh.wire.end());
  return row;
}

}  // namespace

uint64_t CountFor(uint64_t bytes, int n) {
  const uint64_t ranks = static_cast<uint64_t>(std::max(1, n));
  return std::max(ranks, bytes / sizeof(float) / ranks * ranks);
}

double RankHostBytes(const Settings& s, uint64_t bytes, uint64_t segment, bool timed) {
  const uint64_t count = CountFor(bytes, s.ranks), n = static_cast<uint64_t>(s.ranks);
  const double buffer = static_cast<double>(count * sizeof(float));
  double total = 2 * buffer;  // send, recv
  if (!timed && s.codec != comm::Codec::kFp32 && n > 1) {
    const uint64_t block = count / n, seg = std::max<uint64_t>(1, segment / sizeof(float));
    const uint64_t messages = (n - 1) * std::max<uint64_t>(1, (block + seg - 1) / seg);
    // Every other block's wire bytes, plus each slot's scale and 8-byte alignment.
    total += static_cast<double>(comm::SegmentWireBytes(s.codec, (n - 1) * block)) + 12.0 * static_cast<double>(messages);
  }
  if (timed) total += buffer;
  // Its links to every peer (comm/communicator.cc: one per ordered pair, created on first use) with,
  // timed, their fabric channels. Measured beyond the buffers with 1 KiB rows on 256 ranks (65280
  // pairs): 125 MB peak RSS untimed, 121 MB timed, 1.8 KiB a pair either way (from 128 to 256 ranks:
  // 1.8 and 1.7 KiB a pair; 512 ranks, 2 KiB rows: 475 and 458 MB). Timed links held 17.4 KiB
  // each (1.14 GB at 256 ranks) while their unbounded queues reserved 64 nodes up front
  // (comm/unbounded_queue.h).
  constexpr double kPairBytes = 2.5 * 1024;
  total += static_cast<double>(n - 1) * kPairBytes;
  return total;
}

double RankMessages(int ranks, uint64_t bytes, uint64_t segment) {
  const uint64_t n = static_cast<uint64_t>(std::max(1, ranks)), block = CountFor(bytes, ranks) / n;
  const uint64_t per_segment = std::max<uint64_t>(1, segment / sizeof(float));
  return static_cast<double>(n - 1) * static_cast<double>(std::max<uint64_t>(1, (block + per_segment - 1) / per_segment));
}

absl::StatusOr<Row> RunUntimed(const Settings& s, uint64_t bytes, uint64_t segment) {
  comm::CommunicatorOptions co;
  co.devices = Iota(s.ranks);
  RP_ASSIGN_OR_RETURN(auto comm, comm::Communicator::Create(co));
  const comm::CollectiveOptions options{.codec = s.codec, .segment_bytes = segment};
  Shared sh(s, CountFor(bytes, s.ranks));
  using Steady = std::chrono::steady_clock;
  std::vector<std::vector<Steady::time_point>> starts(static_cast<size_t>(sh.total),
                                                      std::vector<Steady::time_point>(static_cast<size_t>(s.ranks)));
  std::vector<std::vector<Steady::time_point>> ends = starts;
  std::barrier sync(s.ranks);
  RunThreads(s.ranks, [&](int r) {
    Buffers b(sh, r);
    for (int it = 0; it < sh.total; ++it) {
      sync.arrive_and_wait();
      starts[static_cast<size_t>(it)][static_cast<size_t>(r)] = Steady::now();
      auto op = comm::AllToAll::Create(&comm->rank(r), b.send, b.recv, options);
      absl::Status st = op.ok() ? op->Run() : op.status();
      ends[static_cast<size_t>(it)][static_cast<size_t>(r)] = Steady::now();
      if (!st.ok()) {
        sh.status[static_cast<size_t>(r)] = st;
        comm->Abort(st);
        sync.arrive_and_drop();
        return;
      }
      sh.wire[static_cast<size_t>(r)] = op->result().wire_bytes;
    }
    CountWrong(sh, b, Tolerance(s.codec));
  });
  for (int it = 0; it < sh.total; ++it) {
    const auto& st = starts[static_cast<size_t>(it)];
    const Steady::time_point t0 = *std::min_element(st.begin(), st.end());
    for (int r = 0; r < s.ranks; ++r) {
      sh.time_ns[static_cast<size_t>(it)][static_cast<size_t>(r)] =
          std::chrono::duration<double, std::nano>(ends[static_cast<size_t>(it)][static_cast<size_t>(r)] - t0).count();
    }
  }
  return Finish(s, sh);
}

absl::StatusOr<Row> RunTimed(const Settings& s, uint64_t bytes, uint64_t segment, const LinkSpec& spec) {
  const int n = s.ranks;
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
  Shared sh(s, CountFor(bytes, n));
  RunThreads(n, [&](int r) {
    Buffers b(sh, r);
    Nanos start{0};  // every iteration starts at the same modeled time on every rank
    for (int it = 0; it < sh.total; ++it) {
      auto op = comm::AllToAll::Create(&comm->rank(r), b.send, b.recv, options);
      absl::Status st = op.ok() ? op->Run(start) : op.status();
      if (!st.ok()) {
        sh.status[static_cast<size_t>(r)] = st;
        comm->Abort(st);
        fabric->Abort(st);
        return;
      }
      const Nanos end = op->result().end;
      sh.time_ns[static_cast<size_t>(it)][static_cast<size_t>(r)] = static_cast<double>((end - start).count());
      sh.wire[static_cast<size_t>(r)] = op->result().wire_bytes;
      auto next = fabric->Arrive(r, next_iteration, end, {.rank = r, .op = "next iteration"},
                                 [](Nanos latest) -> absl::StatusOr<Nanos> { return latest; });
      if (!next.ok()) {
        sh.status[static_cast<size_t>(r)] = next.status();
        return;
      }
      start = *next;
    }
    fabric->Finish(r);
    CountWrong(sh, b, Tolerance(s.codec));
  });
  RP_ASSIGN_OR_RETURN(Row row, Finish(s, sh));
  // The oracle applies when every pair is one link class (one node, or one device per node).
  const bool one_node = n <= spec.devices_per_node;
  const bool all_nodes = spec.devices_per_node == 1;
  if (n == 1 || one_node || all_nodes) {
    row.formula_us = static_cast<double>(
                         AllToAllFormula(n, row.count, segment, s.codec, one_node ? spec.intra_node : spec.inter_node)
                             .count()) /
                     1e3;
  }
  return row;
}

Nanos AllToAllFormula(int n, uint64_t count, uint64_t segment_bytes, comm::Codec codec, const LinkParams& link) {
  if (n <= 1) return Nanos(0);
  const comm::a2a::BlockShape block{.modeled_elems = count / static_cast<uint64_t>(n),
                                    .segment_elems = std::max<uint64_t>(1, segment_bytes / 4),
                                    .codec = codec};
  Nanos step = LinkLatency(link, 1.0);
  for (int k = 0; k < block.messages(); ++k) step += PortOccupancy(link, block.message_bytes(k), 1.0);
  return (n - 1) * step;
}

}  // namespace rp::apps::alltoall
