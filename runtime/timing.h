// Timing primitives: the one place where modeled durations are computed and rounded.
//
// Every modeled duration in ringpipe — a compute op slowed by a fault, a layer's share of a
// backward pass, a message's port occupancy and latency — is computed here, by the emulator
// (device runner, fabric, collectives) and the predictor alike, so the two cannot drift apart by a
// rounding rule written twice.
//
// The rounding rule: a real-valued duration x (in nanoseconds) becomes RoundNanos(x) = the nearest
// integer, halves away from zero, saturated to ±kMaxModeledNs. Integer inputs are never rounded
// (a factor of exactly 1 returns its input). Sums that may overflow use SaturatingAdd; a result at
// ±kMaxModeledNs means "does not fit" and callers that accept user input check for it
// (IsSaturated) and refuse the input instead of printing a wrapped-around time.
//
// Link timing (DESIGN.md "The fabric"): a message of b bytes on a link class (α, β, o) holds both of
// its ports for PortOccupancy = o + b/β and arrives LinkLatency = α after its last byte left. A
// factor f >= 1 (a degraded link, a slow-link fault) multiplies both: f·(o + b/β) and f·α, each
// rounded once.
//
// Pure functions; thread-compatible.
//
// Example:
//   LinkParams nvlink{.alpha = FromMicros(3), .bandwidth_gbps = 300, .overhead = FromMicros(1)};
//   Nanos hold = PortOccupancy(nvlink, 1 << 20, 1.0);   // 1000 + 3495 ns
//   Nanos arrival = start + hold + LinkLatency(nvlink, 1.0);
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "runtime/link.h"
#include "runtime/time.h"

namespace rp {

// The largest modeled time or duration ringpipe represents (about 146 years).
inline constexpr int64_t kMaxModeledNs = int64_t{1} << 62;

// x ns rounded to the nearest integer (halves away from zero), saturated to ±kMaxModeledNs; NaN
// becomes +kMaxModeledNs (never a valid time).
inline Nanos RoundNanos(double x) {
  if (!(x < static_cast<double>(kMaxModeledNs))) return Nanos(kMaxModeledNs);
  if (!(x > -static_cast<double>(kMaxModeledNs))) return Nanos(-kMaxModeledNs);
  return Nanos(std::llround(x));
}

// a + b saturated to ±kMaxModeledNs.
inline Nanos SaturatingAdd(Nanos a, Nanos b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a.count(), b.count(), &r)) {
    return Nanos(a.count() > 0 ? kMaxModeledNs : -kMaxModeledNs);
  }
  return Nanos(std::clamp(r, -kMaxModeledNs, kMaxModeledNs));
}

// True when `t` is a saturated value (the computation that produced it did not fit).
inline bool IsSaturated(Nanos t) {
  return t.count() >= kMaxModeledNs || t.count() <= -kMaxModeledNs;
}

// `base` × `factor`, rounded once; exactly `base` when factor == 1.
inline Nanos ScaleDuration(Nanos base, double factor) {
  if (factor == 1.0) return base;
  return RoundNanos(static_cast<double>(base.count()) * factor);
}

// The end, relative to the start, of the first `done` parts out of `total` parts of `duration`
// (parts weighted by integer weights, `done` and `total` their running sums): duration · done /
// total rounded to the nearest ns in exact integer arithmetic. ShareEnd(d, total, total) == d, and
// consecutive ends never decrease, so pieces cut this way sum to exactly `duration`.
__extension__ typedef __int128 Int128;  // GCC/Clang extension: exact 64 x 64-bit products
inline Nanos ShareEnd(Nanos duration, uint64_t done, uint64_t total) {
  if (total == 0 || done >= total) return duration;
  const Int128 num = static_cast<Int128>(duration.count()) * static_cast<Int128>(done);
  const Int128 den = static_cast<Int128>(total);
  const Int128 q = num / den, r = num % den;
  return Nanos(static_cast<int64_t>(2 * r >= den ? q + 1 : q));
}

// bytes / β in ns (β in GB/s = bytes per ns), rounded; 0 at infinite bandwidth (β = 0).
inline Nanos TransferTime(uint64_t bytes, double bandwidth_gbps) {
  if (bandwidth_gbps <= 0) return Nanos(0);
  return RoundNanos(static_cast<double>(bytes) / bandwidth_gbps);
}

// How long a message of `bytes` holds its ports: factor · (o + bytes / β).
inline Nanos PortOccupancy(const LinkParams& link, uint64_t bytes, double factor) {
  if (factor == 1.0) return SaturatingAdd(link.overhead, TransferTime(bytes, link.bandwidth_gbps));
  const double transfer =
      link.bandwidth_gbps <= 0 ? 0.0 : static_cast<double>(bytes) / link.bandwidth_gbps;
  return RoundNanos(factor * (static_cast<double>(link.overhead.count()) + transfer));
}

// How long after its last byte left a message arrives: factor · α.
inline Nanos LinkLatency(const LinkParams& link, double factor) {
  return ScaleDuration(link.alpha, factor);
}

}  // namespace rp
