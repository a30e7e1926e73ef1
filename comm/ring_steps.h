// Pure ring arithmetic: which chunk rank r sends and receives at ring step s, where chunks and
// segments begin and end, and how many bytes each rank puts on the wire. No threads, no state.
//
// Words (used the same way in every comm/ file and in docs/collectives.md):
//   n        number of ranks in the ring; rank r sends to (r + 1) % n and receives from (r - 1) % n.
//   chunk    the buffer of `count` elements is cut into n chunks; chunk c is owned by rank c (it
//            holds the fully reduced chunk c at the end of the reduce-scatter). Chunk sizes differ by
//            at most one element: the first count % n chunks have one element more.
//   segment  a chunk is cut into segments of at most `segment_elems` elements; a segment is one
//            message on the wire. Every chunk has at least one segment (an empty chunk has one empty
//            segment, so a step always carries a message and the peers' headers are always checked).
//   step     s in [0, n - 2]. Reduce-scatter step s: rank r sends chunk (r - 1 - s) and receives
//            chunk (r - 2 - s), adding it into its own copy. After step n - 2 rank r has chunk r.
//            All-gather step s: rank r sends chunk (r - s) and receives chunk (r - 1 - s).
//
// Wire bytes per rank (a closed form, see AllReduceWireBytes): a reduce-scatter sends every chunk
// except its own, an all-gather every chunk except the next rank's; with a count divisible by n
// and FP32 that is 2 (n - 1) / n of the buffer.
#pragma once

#include <cstddef>
#include <cstdint>

#include "comm/codec.h"

namespace rp::comm::ring {

// A half-open element range [begin, begin + size).
struct Range {
  size_t begin = 0;
  size_t size = 0;
  size_t end() const { return begin + size; }
  friend bool operator==(const Range&, const Range&) = default;
};

// a mod n in [0, n) for any int a (n >= 1).
constexpr int Mod(int a, int n) { return ((a % n) + n) % n; }

// Chunk c in [0, n) of a buffer of `count` elements.
constexpr Range ChunkRange(size_t count, int n, int c) {
  const size_t base = count / static_cast<size_t>(n);
  const size_t extra = count % static_cast<size_t>(n);
  const size_t uc = static_cast<size_t>(c);
  return Range{uc * base + (uc < extra ? uc : extra), base + (uc < extra ? 1 : 0)};
}

constexpr int ReduceScatterSendChunk(int n, int r, int s) { return Mod(r - 1 - s, n); }
constexpr int ReduceScatterRecvChunk(int n, int r, int s) { return Mod(r - 2 - s, n); }
constexpr int AllGatherSendChunk(int n, int r, int s) { return Mod(r - s, n); }
constexpr int AllGatherRecvChunk(int n, int r, int s) { return Mod(r - 1 - s, n); }

// Segments of a chunk of `chunk_elems` elements: max(1, ceil(chunk_elems / segment_elems)).
// segment_elems >= 1.
constexpr int NumSegments(size_t chunk_elems, size_t segment_elems) {
  if (chunk_elems == 0) return 1;
  return static_cast<int>((chunk_elems + segment_elems - 1) / segment_elems);
}

// Segment k of `chunk` (absolute element range).
constexpr Range SegmentRange(Range chunk, size_t segment_elems, int k) {
  const size_t begin = static_cast<size_t>(k) * segment_elems;
  if (begin >= chunk.size) return Range{chunk.end(), 0};
  const size_t left = chunk.size - begin;
  return Range{chunk.begin + begin, left < segment_elems ? left : segment_elems};
}

// Wire bytes of a whole chunk sent segment by segment.
constexpr uint64_t ChunkWireBytes(Codec codec, size_t chunk_elems, size_t segment_elems) {
  if (chunk_elems == 0) return 0;
  const uint64_t full = chunk_elems / segment_elems;
  const uint64_t tail = chunk_elems % segment_elems;
  return full * SegmentWireBytes(codec, segment_elems) + SegmentWireBytes(codec, tail);
}

// Bytes rank r sends in a reduce-scatter / all-gather / all-reduce of `count` elements over n
// ranks (0 when n == 1).
uint64_t ReduceScatterWireBytes(Codec codec, size_t count, int n, int r, size_t segment_elems);
uint64_t AllGatherWireBytes(Codec codec, size_t count, int n, int r, size_t segment_elems);
uint64_t AllReduceWireBytes(Codec codec, size_t count, int n, int r, size_t segment_elems);
// A broadcast over the ring from `root`: every rank but root's predecessor forwards the buffer.
uint64_t BroadcastWireBytes(Codec codec, size_t count, int n, int r, int root,
                            size_t segment_elems);

}  // namespace rp::comm::ring
