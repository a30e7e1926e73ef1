#include "comm/ring_steps.h"

namespace rp::comm::ring {
namespace {

// Bytes of every chunk except `skip`.
uint64_t AllChunksBut(Codec codec, size_t count, int n, int skip, size_t segment_elems) {
  uint64_t total = 0;
  for (int c = 0; c < n; ++c) {
    if (c != skip) total += ChunkWireBytes(codec, ChunkRange(count, n, c).size, segment_elems);
  }
  return total;
}

}  // namespace

uint64_t ReduceScatterWireBytes(Codec codec, size_t count, int n, int r, size_t segment_elems) {
  if (n <= 1) return 0;
  return AllChunksBut(codec, count, n, r, segment_elems);
}

uint64_t AllGatherWireBytes(Codec codec, size_t count, int n, int r, size_t segment_elems) {
  if (n <= 1) return 0;
  return AllChunksBut(codec, count, n, Mod(r + 1, n), segment_elems);
}

uint64_t AllReduceWireBytes(Codec codec, size_t count, int n, int r, size_t segment_elems) {
  return ReduceScatterWireBytes(codec, count, n, r, segment_elems) +
         AllGatherWireBytes(codec, count, n, r, segment_elems);
}

uint64_t BroadcastWireBytes(Codec codec, size_t count, int n, int r, int root,
                            size_t segment_elems) {
  if (n <= 1 || Mod(r + 1, n) == root) return 0;
  return ChunkWireBytes(codec, count, segment_elems);
}

}  // namespace rp::comm::ring
