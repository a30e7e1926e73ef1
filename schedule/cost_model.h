// Cost models of the predictor: compute time per op, and the chunked ring all-reduce on α–β links.
//
// Compute. StageCost gives, for one micro-batch on one pipeline rank (all its layers, one TP shard):
// forward F, whole backward B (input + weight gradients), and W (the weight-gradient part of B, used by
// split-backward programs: Bi costs B − W, W costs W), plus the optimizer step and the bytes of stored
// activations. With v chunks per device each chunk op costs 1/v of it (integer nanoseconds).
//
// Ring all-reduce (docs/schedules.md has the derivation). n ranks, N fp32 elements (S = 4N bytes):
//   chunks    N split into n chunks, the first N mod n one element longer; the largest has c = ⌈N/n⌉.
//   steps     n − 1 reduce-scatter steps then n − 1 all-gather steps; in each, every rank sends one chunk
//             to its ring successor; a step ends when its largest chunk has arrived (and been reduced),
//             so every step costs the time of a c-element chunk.
//   segments  a chunk goes as k = ⌈c / e⌉ messages of e = segment_bytes / 4 elements (segments are cut
//             in fp32 elements, as comm/ does; segment_bytes = 0: one message; an empty chunk still sends
//             one empty message), each costing LinkParams::Duration(bytes), bytes = elements·w + meta
//             (w = codec wire bytes per element: fp32 4, fp16/bf16 2, int8 1; meta = the 4-byte scale
//             of an INT8 segment). Segments of one step go back to back: T_link = Σ Duration(segment_i).
//   reduce    at reduce_gbps > 0, reducing segment i (4·elements_i / reduce_gbps) overlaps the travel of
//             segment i+1: a two-stage pipeline whose makespan is max_j (Σ_{i≤j} a_i + Σ_{i≥j} r_i).
//   total     (n − 1)·(T_reduce_scatter_step + T_all_gather_step); with free reduction 2(n − 1)·T_link,
//             which unchunked, fp32, n | N is 2(n − 1)(α + S/(nβ)).
//   This equals comm/'s 2(n − 1)(Kα + S/(nβ)) (docs/collectives.md) when reduction is free.
//   A ring runs at its slowest link: with mixed link classes the slowest class's time is used.
//
// Pure functions; thread-compatible.
//
// Example:
//   RingModel ring{.segment_bytes = 1 << 20, .codec = Codec::kBf16};
//   absl::StatusOr<RingCost> c = RingAllReduceCost(n, elements, link, ring);
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/link.h"
#include "runtime/time.h"

namespace rp::schedule {

struct StageCost {
  Nanos forward{0};
  Nanos backward{0};     // whole backward, input + weight gradients
  Nanos weight_grad{0};  // the weight-gradient part of `backward` (<= backward)
  Nanos optimizer{0};
  uint64_t activation_bytes = 0;  // stored activations of one micro-batch (whole device)
};

struct StageFlops {
  double forward = 0;  // FLOPs of one micro-batch's forward on this rank
  double backward = 0;
  double weight_grad = 0;
  double optimizer = 0;
  uint64_t activation_bytes = 0;
};

struct CostModel {
  // One entry per pipeline rank, or a single entry used for every rank.
  std::vector<StageCost> stages;

  static CostModel Uniform(StageCost c) { return CostModel{{c}}; }
  // time = flops / (device_tflops · 1e12) s, rounded to the nanosecond. InvalidArgument if
  // device_tflops <= 0 or a FLOP count is negative.
  [[nodiscard]] static absl::StatusOr<CostModel> FromFlops(const std::vector<StageFlops>& stages,
                                                           double device_tflops);

  const StageCost& Of(int rank) const { return stages.size() == 1 ? stages[0] : stages[rank]; }
};

enum class Codec : uint8_t { kFp32, kFp16, kBf16, kInt8 };
const char* CodecName(Codec c);
int WireBytesPerElement(Codec c);  // 4, 2, 2, 1
int MetaBytesPerSegment(Codec c);  // 4 for INT8 (the fp32 scale), else 0

struct RingModel {
  uint64_t segment_bytes = 0;  // fp32 bytes per segment (segment_bytes / 4 elements); 0: one message
  Codec codec = Codec::kFp32;
  double reduce_gbps = 0;      // reduction throughput over fp32 bytes, GB/s; 0: free
};

struct RingCost {
  Nanos time{0};
  uint64_t wire_bytes = 0;  // bytes on all links together, codec metadata included
};

// The chunked ring all-reduce of `elements` fp32 values over n ranks on `link`. n == 1 costs nothing
// (elements == 0 still sends 2(n − 1) empty messages). InvalidArgument if n < 1 or 0 < segment_bytes < 4.
[[nodiscard]] absl::StatusOr<RingCost> RingAllReduceCost(int n, uint64_t elements,
                                                         const LinkParams& link, const RingModel& ring);

}  // namespace rp::schedule
