// `ringpipe alltoall`'s engines (apps/alltoall.h): the untimed (host wall time) and timed (fabric,
// emulated time) paths, and the closed form used as the timed path's oracle.
#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <vector>

#include "apps/alltoall.h"
#include "apps/rank_threads.h"
#include "comm/alltoall.h"
#include "comm/alltoall_timing.h"
#include "comm/communicator.h"
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

// Rank r's blocks: block p of `send_` goes to rank p, block s of `recv_` comes from rank s.
class AllToAllRank : public RankEngine {
 public:
  AllToAllRank(const Settings& s, const comm::CollectiveOptions& options, uint64_t count, int r)
      : s_(s), options_(options), send_(count), recv_(count), rank_(r) {
    const uint64_t block = count / static_cast<uint64_t>(s.ranks);
    for (uint64_t i = 0; i < count; ++i) {
      send_[i] = InputValue(r, static_cast<int>(i / block), i % block);
    }
  }
  absl::StatusOr<comm::CollectiveResult> Call(comm::RankComm& me, Nanos start) override {
    absl::StatusOr<comm::AllToAll> op = comm::AllToAll::Create(&me, send_, recv_, options_);
    if (!op.ok()) return op.status();
    RP_RETURN_IF_ERROR(op->Run(start));
    return op->result();
  }
  uint64_t Wrong() const override {
    const double tol = Tolerance(s_.codec);
    const uint64_t block = recv_.size() / static_cast<uint64_t>(s_.ranks);
    uint64_t wrong = 0;
    for (uint64_t i = 0; i < recv_.size(); ++i) {
      const double expect = InputValue(static_cast<int>(i / block), rank_, i % block);
      if (!(std::fabs(static_cast<double>(recv_[i]) - expect) <= tol)) ++wrong;
    }
    return wrong;
  }

 private:
  const Settings& s_;
  const comm::CollectiveOptions options_;
  std::vector<float> send_, recv_;
  const int rank_;
};

double BusBwFactor(int n) { return static_cast<double>(n - 1) / n; }

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
  const uint64_t count = CountFor(bytes, s.ranks);
  RowState sh(s, count);
  RunWallIterations(sh, *comm, [&](int r) {
    return std::make_unique<AllToAllRank>(s, options, count, r);
  });
  return FinishRow(s, sh, BusBwFactor(s.ranks));
}

absl::StatusOr<Row> RunTimed(const Settings& s, uint64_t bytes, uint64_t segment, const LinkSpec& spec) {
  const int n = s.ranks;
  const comm::CollectiveOptions options{.codec = s.codec, .segment_bytes = segment};
  const uint64_t count = CountFor(bytes, n);
  RowState sh(s, count);
  RP_RETURN_IF_ERROR(RunModeledIterations(sh, spec, [&](int r) {
    return std::make_unique<AllToAllRank>(s, options, count, r);
  }));
  RP_ASSIGN_OR_RETURN(Row row, FinishRow(s, sh, BusBwFactor(n)));
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
