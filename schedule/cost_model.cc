#include "schedule/cost_model.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace rp::schedule {

absl::StatusOr<CostModel> CostModel::FromFlops(const std::vector<StageFlops>& stages,
                                               double device_tflops) {
  if (!(device_tflops > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("CostModel::FromFlops: device_tflops must be > 0, got ", device_tflops));
  }
  if (stages.empty()) {
    return absl::InvalidArgumentError("CostModel::FromFlops: no stages");
  }
  CostModel cm;
  auto t = [&](double flops) { return Nanos(std::llround(flops / (device_tflops * 1e3))); };
  for (size_t i = 0; i < stages.size(); ++i) {
    const StageFlops& f = stages[i];
    if (f.forward < 0 || f.backward < 0 || f.weight_grad < 0 || f.optimizer < 0 ||
        f.weight_grad > f.backward) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CostModel::FromFlops: stage ", i, ": FLOPs must be >= 0 and weight_grad <= backward"));
    }
    cm.stages.push_back(StageCost{t(f.forward), t(f.backward), t(f.weight_grad), t(f.optimizer),
                                  f.activation_bytes});
  }
  return cm;
}

const char* CodecName(Codec c) {
  switch (c) {
    case Codec::kFp32: return "fp32";
    case Codec::kFp16: return "fp16";
    case Codec::kBf16: return "bf16";
    case Codec::kInt8: return "int8";
  }
  return "?";
}

int WireBytesPerElement(Codec c) {
  switch (c) {
    case Codec::kFp32: return 4;
    case Codec::kFp16:
    case Codec::kBf16: return 2;
    case Codec::kInt8: return 1;
  }
  return 4;
}

int MetaBytesPerSegment(Codec c) { return c == Codec::kInt8 ? 4 : 0; }

namespace {
Nanos ReduceTime(uint64_t elements, double gbps) {
  if (gbps <= 0) return Nanos(0);
  return Nanos(std::llround(static_cast<double>(elements) * 4.0 / gbps));
}

struct ChunkSend {
  Nanos link{0};     // Σ segment travel
  Nanos reduced{0};  // travel + pipelined reduction
  uint64_t wire_bytes = 0;
};

// One step's cost for a chunk of c elements.
ChunkSend SendChunk(uint64_t c, const LinkParams& link, const RingModel& ring) {
  ChunkSend out;
  if (c == 0) {  // an empty chunk still sends one empty message (comm/ checks every peer's header)
    out.link = out.reduced = link.Duration(0);
    return out;
  }
  const uint64_t w = WireBytesPerElement(ring.codec);
  const uint64_t meta = MetaBytesPerSegment(ring.codec);
  // Segments are counted in fp32 elements, as comm/ cuts them: segment_bytes / 4 per segment.
  const uint64_t e = ring.segment_bytes == 0 ? c : std::min<uint64_t>(c, ring.segment_bytes / 4);
  const uint64_t k = (c + e - 1) / e;
  const uint64_t last = c - (k - 1) * e;
  const Nanos a_full = link.Duration(e * w + meta), a_last = link.Duration(last * w + meta);
  const Nanos r_full = ReduceTime(e, ring.reduce_gbps), r_last = ReduceTime(last, ring.reduce_gbps);
  const int64_t km1 = static_cast<int64_t>(k - 1);
  out.link = a_full * km1 + a_last;
  out.wire_bytes = (k - 1) * (e * w + meta) + last * w + meta;
  // Two-stage flow shop (travel a_i, then reduce r_i), segments in order: makespan =
  // max_j (Σ_{i<=j} a_i + Σ_{i>=j} r_i); with equal segments but the last, the max is at j ∈ {1, k−1, k}.
  auto f = [&](int64_t j) {  // 1-based
    const Nanos a = j < static_cast<int64_t>(k) ? a_full * j : a_full * km1 + a_last;
    const Nanos r = j < static_cast<int64_t>(k) ? r_full * (km1 - j + 1) + r_last : r_last;
    return a + r;
  };
  out.reduced = f(1);
  if (k >= 2) out.reduced = std::max(out.reduced, f(km1));
  out.reduced = std::max(out.reduced, f(static_cast<int64_t>(k)));
  return out;
}
}  // namespace

absl::StatusOr<RingCost> RingAllReduceCost(int n, uint64_t elements, const LinkParams& link,
                                           const RingModel& ring) {
  if (n < 1) return absl::InvalidArgumentError(absl::StrCat("RingAllReduceCost: n must be >= 1, got ", n));
  if (ring.segment_bytes != 0 && ring.segment_bytes < 4) {
    return absl::InvalidArgumentError(absl::StrCat("RingAllReduceCost: segment_bytes ", ring.segment_bytes,
                                                   " smaller than one fp32 element (4 bytes)"));
  }
  RingCost cost;
  if (n == 1) return cost;
  const uint64_t un = static_cast<uint64_t>(n);
  const uint64_t largest = (elements + un - 1) / un;
  const ChunkSend step = SendChunk(largest, link, ring);
  cost.time = (step.reduced + step.link) * (n - 1);
  // Every step sends each chunk once: Σ over chunks of their wire bytes, 2(n − 1) times.
  const uint64_t rem = elements % un;
  const uint64_t small = elements / un;
  const uint64_t per_round = rem * SendChunk(small + 1, link, ring).wire_bytes +
                             (un - rem) * SendChunk(small, link, ring).wire_bytes;
  cost.wire_bytes = 2 * (un - 1) * per_round;
  return cost;
}

}  // namespace rp::schedule
