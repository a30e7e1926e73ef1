// Pure all-to-all arithmetic: which peer rank r sends to and receives from at step s, where blocks
// begin, how many messages a block takes and how many bytes each rank puts on the wire. No threads,
// no state.
//
// Words (used the same way in comm/alltoall.{h,cc}, docs/collectives.md and the tests):
//   n        ranks in the group.
//   block    rank r's send buffer is cut into n blocks, block p for rank p (AllToAll: all of equal
//            size; AllToAllV: any sizes, given by the counts). Block r stays on the rank: it is
//            copied, never put on the wire and never encoded.
//   bins     AllToAllV's count entries per peer: the counts are n·bins element counts, entry
//            p·bins + b for bin b of block p, and block p has their sum (EP: bin b = the
//            destination's local expert b). The counts travel first: one counts message per peer
//            of bins · kCountBytes bytes (metadata, counted as wire bytes).
//   step     s in [1, n − 1]: rank r sends its block to (r + s) mod n and receives from
//            (r − s) mod n (pairwise exchange: each step is a permutation of the ranks, so every
//            rank sends to one peer and receives from one peer at a time).
//   segment  a block is cut into segments of at most segment_elems elements, one message each.
//            AllToAll sends an empty block as one empty message (its header is checked, as the
//            ring does); AllToAllV sends none (the counts message carried the header).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "comm/codec.h"
#include "comm/ring_steps.h"

namespace rp::comm::a2a {

// Wire bytes of one count entry.
inline constexpr uint64_t kCountBytes = 8;

constexpr int SendPeer(int n, int r, int s) { return ring::Mod(r + s, n); }
constexpr int RecvPeer(int n, int r, int s) { return ring::Mod(r - s, n); }

// Messages carrying a block of `elems` elements.
constexpr int BlockMessages(size_t elems, size_t segment_elems, bool empty_block_message) {
  if (elems == 0) return empty_block_message ? 1 : 0;
  return ring::NumSegments(elems, segment_elems);
}

// Bytes rank r puts on the wire in an AllToAll of `block` elements per peer over n ranks.
constexpr uint64_t AllToAllWireBytes(Codec codec, size_t block, int n, size_t segment_elems) {
  return static_cast<uint64_t>(n - 1) * ring::ChunkWireBytes(codec, block, segment_elems);
}

// Bytes rank r puts on the wire in an AllToAllV with `send_counts` (n·bins entries): per peer
// p != r the counts message and block p's segments.
uint64_t AllToAllVWireBytes(Codec codec, std::span<const int64_t> send_counts, int bins, int r,
                            size_t segment_elems);

}  // namespace rp::comm::a2a
