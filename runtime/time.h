// Modeled time.
//
// ringpipe distinguishes modeled time (what the emulated cluster experiences: a 50 ms forward pass,
// a 20 ms ring step) from wall time (what the host spends). Modeled time is an integer count of
// nanoseconds since the start of a run, `rp::Nanos`. Only rp::Clock implementations convert it to
// wall time (through a time scale); everything else computes in modeled time.
#pragma once

#include <chrono>
#include <cstdint>

namespace rp {

using Nanos = std::chrono::nanoseconds;

constexpr Nanos kZeroTime{0};

inline constexpr double ToMillis(Nanos t) { return static_cast<double>(t.count()) / 1e6; }
inline constexpr Nanos FromMillis(double ms) {
  return Nanos(static_cast<int64_t>(ms * 1e6 + (ms >= 0 ? 0.5 : -0.5)));
}
inline constexpr Nanos FromMicros(double us) {
  return Nanos(static_cast<int64_t>(us * 1e3 + (us >= 0 ? 0.5 : -0.5)));
}

// A stretch of a collective's modeled time as its rank spent it: waiting for a peer (the segment
// was not ready at its sender yet) or in transfer. One type from the ring's timer
// (comm::ring::RingTimer) through its result (comm::CollectiveResult) to the executor's wait
// split (schedule::SplitBySpans), so the spans are moved along, not copied.
struct WaitSpan {
  Nanos start{0};
  Nanos end{0};
  bool peer = false;
};

}  // namespace rp
