// `ringpipe allreduce`'s engines (apps/allreduce.h): the untimed (host wall time) and timed
// (fabric, emulated time) paths, and the closed form used as the timed path's oracle.
#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <vector>

#include "apps/allreduce.h"
#include "apps/rank_threads.h"
#include "comm/communicator.h"
#include "comm/ring_timing.h"
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

// Rank r's buffers: out of place (default, as nccl-tests and the MPI peer measure) `in` is written
// once and every iteration reduces it into `out`; in place, `out` is refilled before every call.
class AllReduceRank : public RankEngine {
 public:
  AllReduceRank(const Settings& s, const comm::CollectiveOptions& options, uint64_t count, int r)
      : s_(s), options_(options), in_(s.in_place ? 0 : count), out_(count), rank_(r) {
    for (uint64_t i = 0; i < in_.size(); ++i) in_[i] = InputValue(i, r);
  }
  void BeforeCall() override {
    if (!s_.in_place) return;
    for (uint64_t i = 0; i < out_.size(); ++i) out_[i] = InputValue(i, rank_);
  }
  absl::StatusOr<comm::CollectiveResult> Call(comm::RankComm& me, Nanos start) override {
    return me.AllReduce(s_.in_place ? std::span<const float>(out_) : std::span<const float>(in_),
                        out_, options_, start);
  }
  uint64_t Wrong() const override {
    const double tol = Tolerance(s_.codec, s_.ranks);
    uint64_t wrong = 0;
    for (uint64_t i = 0; i < out_.size(); ++i) {
      double expect = 0;
      for (int q = 0; q < s_.ranks; ++q) expect += InputValue(i, q);
      if (!(std::fabs(static_cast<double>(out_[i]) - expect) <= tol)) ++wrong;
    }
    return wrong;
  }

 private:
  const Settings& s_;
  const comm::CollectiveOptions options_;
  std::vector<float> in_, out_;
  const int rank_;
};

double BusBwFactor(int n) { return n > 1 ? 2.0 * (n - 1) / n : 0.0; }

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
  RowState sh(s, count);
  RunWallIterations(sh, *comm, [&](int r) {
    return std::make_unique<AllReduceRank>(s, options, count, r);
  });
  return FinishRow(s, sh, BusBwFactor(s.ranks));
}

absl::StatusOr<Row> RunTimed(const Settings& s, uint64_t bytes, uint64_t segment, const LinkSpec& spec) {
  const int n = s.ranks;
  const uint64_t count = bytes / sizeof(float);
  const comm::CollectiveOptions options{.codec = s.codec, .segment_bytes = segment};
  RowState sh(s, count);
  RP_RETURN_IF_ERROR(RunModeledIterations(sh, spec, [&](int r) {
    return std::make_unique<AllReduceRank>(s, options, count, r);
  }));
  RP_ASSIGN_OR_RETURN(Row row, FinishRow(s, sh, BusBwFactor(n)));
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
