// rp::SplitMix64: the 64-bit finalizer of SplitMix64 (Steele, Lea, Flood 2014), a pure hash of one
// word. ringpipe draws every seeded value (weights, data, jitter) from it, so a seed names the same
// numbers on every platform and thread order.
#pragma once

#include <cstdint>

namespace rp {

constexpr uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace rp
