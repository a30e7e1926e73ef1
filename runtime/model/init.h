// rp::InitUniform: the weight-init draw shared by every layer kind (dense layers in mlp.cc, MoE
// blocks in moe.cc), so that a parameter's initial value is a pure function of its global
// coordinates and every shard and replica starts with exactly the bits of the unsharded model.
#pragma once

#include <cstdint>

#include "runtime/hash.h"

namespace rp {

// U(-1, 1) as a pure function of (seed, layer, index): 24 random bits, exact in float.
inline float InitUniform(uint64_t seed, int layer, int64_t index) {
  const uint64_t h = SplitMix64(SplitMix64(SplitMix64(seed) ^ static_cast<uint64_t>(layer)) ^
                                static_cast<uint64_t>(index));
  return static_cast<float>(static_cast<double>(h >> 40) * (2.0 / 16777216.0) - 1.0);
}

}  // namespace rp
