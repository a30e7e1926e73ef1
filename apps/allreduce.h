// `ringpipe allreduce`'s engines (apps/allreduce_cmd.cc prints their rows): one size and segment of
// the chunked ring all-reduce over `ranks` rank threads, on one of two paths.
//
//   untimed  --link=ideal: comm/'s communicator without a fabric; the row's time is the wall time of
//            this host (first start to last end over the ranks, median over iterations) — the
//            host-throughput mode, with nccl-tests' columns.
//   timed    --link=<preset>: the ranks run on a rp::Fabric (timed communicators, comm/communicator.h),
//            every iteration from ONE common modeled start (a fabric rendezvous hands every rank the
//            previous iteration's last end), so no rank's start skew leaks in; the row's time is the
//            emulated time (the last rank's modeled end − the common start), and the closed form of
//            docs/collectives.md is computed beside it as an oracle (RingAllReduceFormula).
// Every row checks the last iteration's result on every rank against a serial reference on
// exactly-summable data (#wrong).
//
// Thread safety: each call spawns and joins its own rank threads.
//
// Example:
//   RP_ASSIGN_OR_RETURN(LinkSpec spec, LinkSpecByName("dgx-a100"));
//   RP_ASSIGN_OR_RETURN(Row row, RunTimed(settings, /*bytes=*/1 << 20, /*segment=*/64 << 10, spec));
//   row.time_us == row.formula_us;  // 8 ranks or fewer: one node, an uncontended ring
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/codec.h"
#include "runtime/link.h"
#include "runtime/time.h"

namespace rp::apps::allreduce {

struct Settings {
  int ranks = 4;
  uint64_t min_bytes = 4096, max_bytes = 64 << 20;
  int step_factor = 4;
  std::vector<uint64_t> segments;  // --segment_bytes, in order
  comm::Codec codec = comm::Codec::kFp32;
  int iters = 20, warmup = 3;
  std::string link = "ideal";
  std::string json;
  bool in_place = false;
  bool forward = true;
  uint64_t streaming_min_bytes = 0;
};

struct Row {
  uint64_t bytes = 0;
  uint64_t count = 0;
  double time_us = 0;  // untimed: wall time on this host; timed: emulated (modeled) time
  // Timed: the closed form of docs/collectives.md for the same ring (NaN when it does not apply: the
  // ring crosses nodes, so its hops are not one link class). Untimed: NaN.
  double formula_us = 0;
  double algbw = 0;
  double busbw = 0;
  uint64_t wrong = 0;
  uint64_t wire_bytes_per_rank = 0;
};

// Bytes one rank of a row allocates at most: its input (out of place) and output, the lossy codecs'
// wire buffers on the untimed ring (channel_capacity + 2, each sized for the largest segment:
// comm/ring_runner.cc), and, timed, a copy of the whole buffer for its messages in flight (a bound).
double RankHostBytes(const Settings& s, uint64_t bytes, uint64_t segment, bool timed);

// Messages one rank sends in one all-reduce of `bytes` (count = bytes / 4 elements): 2(n − 1) steps
// × K segments of its largest chunk (⌈count / n⌉ elements, at most segment / 4 a segment; at least
// one, docs/collectives.md); 0 for one rank. Timed, the modeled chunk is the same ⌈count / n⌉.
double RankMessages(int ranks, uint64_t bytes, uint64_t segment);

// The untimed (host-throughput) path.
absl::StatusOr<Row> RunUntimed(const Settings& s, uint64_t bytes, uint64_t segment);
// The timed path on a fabric of `spec` (rank r on device r).
absl::StatusOr<Row> RunTimed(const Settings& s, uint64_t bytes, uint64_t segment, const LinkSpec& spec);

// The closed form of an n-rank ring all-reduce of `count` FP32 elements (segments of
// `segment_bytes`, wire format `codec`) on an uncontended ring whose every hop is `link`
// (docs/collectives.md): with T = 2(n − 1) steps, K segments per chunk each holding its ports for
// D = o + b/β, end − start = α + max((T − 1)(D + α) + K·D, T·K·D). With unequal segments (a shorter
// last one) the same longest path is summed segment by segment. 0 for n = 1.
Nanos RingAllReduceFormula(int n, uint64_t count, uint64_t segment_bytes, comm::Codec codec, const LinkParams& link);

}  // namespace rp::apps::allreduce
