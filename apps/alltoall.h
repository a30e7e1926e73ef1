// `ringpipe alltoall`'s engines (apps/alltoall_cmd.cc prints their rows): one size and segment of
// comm/'s pairwise all-to-all (comm::AllToAll, equal blocks) over `ranks` rank threads, on the two
// paths of `ringpipe allreduce` (apps/allreduce.h):
//
//   untimed  --link=ideal: communicators without a fabric; the row's time is this host's wall time
//            (first start to last end over the ranks, median over iterations).
//   timed    --link=<preset>: the ranks run on a rp::Fabric from ONE common modeled start per
//            iteration (a fabric rendezvous); the row's time is the emulated time, printed beside the
//            closed form of docs/collectives.md "All-to-all" (AllToAllFormula) as an oracle.
//
// Size (nccl-tests' convention): the bytes each rank sends and receives in all, its own block
// included: count = bytes / 4 elements rounded down to a multiple of n (at least n), blocks of
// count / n. algbw = bytes / time; busbw = algbw × (n − 1)/n (the share that crosses the network).
// Every row checks the last iteration's receive buffer on every rank against a serial reference: the
// block from rank p is what rank p's send buffer holds for this rank (#wrong; lossy codecs within their
// one-quantisation bound).
//
// Thread safety: each call spawns and joins its own rank threads.
//
// Example:
//   RP_ASSIGN_OR_RETURN(LinkSpec spec, LinkSpecByName("dgx-a100"));
//   RP_ASSIGN_OR_RETURN(Row row, RunTimed(settings, /*bytes=*/1 << 20, /*segment=*/64 << 10, spec));
//   row.time_us == row.formula_us;  // 8 ranks or fewer: one node, an uncontended fabric
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "apps/allreduce.h"
#include "comm/codec.h"
#include "runtime/link.h"
#include "runtime/time.h"

namespace rp::apps::alltoall {

// The flags are allreduce's (in_place, forward and streaming_min_bytes unused); the row has its columns.
using Settings = allreduce::Settings;
using Row = allreduce::Row;

// Elements per rank for a size: bytes / 4 rounded down to a multiple of n, at least n.
uint64_t CountFor(uint64_t bytes, int n);

// Bytes one rank of a row allocates at most: its send and receive buffers, the lossy codecs' staging
// buffer on the untimed path (every block but its own, a slot per message: comm/alltoall_runner.cc),
// timed, a copy of every message it sends (each owns its bytes), and its n − 1 links to its peers
// (about 2 KiB each, timed or not: n² of them for the row).
double RankHostBytes(const Settings& s, uint64_t bytes, uint64_t segment, bool timed);
// Messages one rank sends in one all-to-all of `bytes`: n − 1 blocks of CountFor(bytes, n) / n
// elements, each max(1, ⌈block / (segment / 4)⌉) messages (docs/collectives.md "All-to-all").
double RankMessages(int ranks, uint64_t bytes, uint64_t segment);
absl::StatusOr<Row> RunUntimed(const Settings& s, uint64_t bytes, uint64_t segment);
absl::StatusOr<Row> RunTimed(const Settings& s, uint64_t bytes, uint64_t segment, const LinkSpec& spec);

// The closed form of an n-rank pairwise all-to-all of `count` FP32 elements per rank (blocks of
// count / n, segments of `segment_bytes`, wire format `codec`) on an uncontended fabric whose every
// pair is `link` (docs/collectives.md "All-to-all"): each of the n − 1 steps sends one block as K
// messages back to back, D_k = o + b_k/β each, and ends α after the last one left:
// T = (n − 1)·(α + Σ_k D_k). 0 for n = 1.
Nanos AllToAllFormula(int n, uint64_t count, uint64_t segment_bytes, comm::Codec codec, const LinkParams& link);

}  // namespace rp::apps::alltoall
