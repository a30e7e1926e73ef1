// The modeled shape of a ring collective on the fabric: how many messages each chunk takes, how
// many modeled bytes each carries, and when a received segment's data is ready to go on. Pure
// arithmetic shared by the threaded collectives (comm/collectives.cc) and the predictor
// (schedule/), so the timing rule of a ring is written once.
//
// Words as in comm/ring_steps.h (n, chunk, segment, step), plus:
//   modeled elements  the FP32 element count the fabric times (the described model's gradient,
//                     CollectiveOptions::model), which may differ from the real buffer's count.
//   modeled chunk     every chunk of a ring has ceil(M / n) modeled elements — equal chunks, padded
//                     like NCCL's chunk alignment — so every rank of a ring sends the same modeled
//                     messages; a broadcast chain has one chunk of M.
//   K                 segments per chunk: max(1, ceil(modeled chunk / modeled segment)); the real
//                     chunk is cut into the same K segments (balanced; some may be empty), so real
//                     and modeled messages correspond one to one.
// Timing of one rank (DESIGN.md "Collectives are timed by their own messages"):
//   step 0 segments are ready at the collective's start;
//   segment k of step s + 1 is ready when segment k of step s has been received and consumed:
//   consumed = arrival for a copy (all-gather, broadcast), and for a reduction the rank's reduce
//   engine takes segments in arrival order: reduce_end = max(reduce_end, arrival) + 4·e / reduce_gbps
//   (e modeled elements; free when reduce_gbps is 0);
//   and a rank's posts leave in posting order: each is ready no earlier than the one before it.
//
// Example:
//   TimedShape s = TimedShape::Ring(/*n=*/4, /*elements=*/1 << 20, /*segment_elems=*/65536,
//                                    Codec::kBf16, /*reduce_gbps=*/0);
//   s.segments();          // ceil(262144 / 65536) = 4
//   s.segment_bytes(3);    // 65536 × 2
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "comm/codec.h"
#include "comm/ring_steps.h"
#include "runtime/time.h"
#include "runtime/timing.h"

namespace rp::comm::ring {

struct TimedShape {
  uint64_t chunk_elems = 0;    // modeled elements per chunk
  uint64_t segment_elems = 1;  // modeled elements per full segment, >= 1
  Codec codec = Codec::kFp32;
  double reduce_gbps = 0;

  // A ring of n ranks over `elements` modeled elements.
  static TimedShape Ring(int n, uint64_t elements, uint64_t segment_elems, Codec codec,
                         double reduce_gbps) {
    const uint64_t un = static_cast<uint64_t>(n < 1 ? 1 : n);
    return TimedShape{elements / un + (elements % un != 0 ? 1 : 0),  // ceil, without overflow
                      segment_elems < 1 ? 1 : segment_elems, codec, reduce_gbps};
  }
  // A chain (broadcast) of `elements`: one chunk.
  static TimedShape Chain(uint64_t elements, uint64_t segment_elems, Codec codec) {
    return TimedShape{elements, segment_elems < 1 ? 1 : segment_elems, codec, 0};
  }

  int segments() const {
    if (chunk_elems == 0) return 1;
    return static_cast<int>((chunk_elems + segment_elems - 1) / segment_elems);
  }
  uint64_t segment_elements(int k) const {
    const uint64_t begin = static_cast<uint64_t>(k) * segment_elems;
    if (begin >= chunk_elems) return 0;
    const uint64_t left = chunk_elems - begin;
    return left < segment_elems ? left : segment_elems;
  }
  // Modeled wire bytes of segment k (codec metadata included).
  uint64_t segment_bytes(int k) const { return SegmentWireBytes(codec, segment_elements(k)); }
  // Modeled time to reduce segment k (4 bytes per FP32 element at reduce_gbps; 0 if free).
  Nanos reduce_time(int k) const {
    if (reduce_gbps <= 0) return Nanos(0);
    return RoundNanos(4.0 * static_cast<double>(segment_elements(k)) / reduce_gbps);
  }
  // When received segment k that arrived at `arrival` is consumed; `reduce_end` is the rank's
  // reduce engine (read and advanced when `reduce`).
  Nanos Consume(int k, Nanos arrival, bool reduce, Nanos* reduce_end) const {
    if (!reduce || reduce_gbps <= 0) return arrival;
    *reduce_end = SaturatingAdd(*reduce_end > arrival ? *reduce_end : arrival, reduce_time(k));
    return *reduce_end;
  }
};

// Segment k of `segments` balanced pieces of `chunk` (the first chunk.size % segments pieces one
// element longer; pieces may be empty).
constexpr Range SplitSegment(Range chunk, int segments, int k) {
  const size_t parts = static_cast<size_t>(segments < 1 ? 1 : segments);
  const size_t uk = static_cast<size_t>(k);
  const size_t base = chunk.size / parts, extra = chunk.size % parts;
  return Range{chunk.begin + uk * base + (uk < extra ? uk : extra), base + (uk < extra ? 1 : 0)};
}

// Which collective a RingTimer times.
enum class TimedKind : uint8_t { kAllReduce, kReduceScatter, kAllGather, kBroadcast };

// The modeled messages of ONE rank in one ring collective — the order it posts them, when each is
// ready, when the collective ends and how its time splits — given the arrivals of the messages it
// receives. Pure: the threaded collectives (comm/collectives.cc) and the predictor
// (schedule/predictor.cc) both drive it, so they post the same messages at the same times.
//
// Protocol: Begin() returns the posts available at the start (step 0: every segment of the
// rank's first chunk, ready at the start; a broadcast's root: its whole chain). Then the rank's
// receives come in step-major order (segment k of step s is receive s·K + k); OnReceive(arrival,
// ready at sender) returns the post that receive enables, if any (segment k of step s + 1, ready
// when segment k of step s was consumed, and no earlier than the rank's previous post: its sends
// leave in posting order, so with a reduce engine (reduce_gbps) the all-gather's first forward
// waits for the rank's own reduced chunk posted before it). done() once every receive happened.
// Accounting (DESIGN.md "Communication vs waiting"): the rank waits from its progress time (the
// start, then each arrival) to each later arrival; the part after the message was ready at its
// sender is transfer, the part before is peer wait; the tail of the last reduction after the last
// arrival is reduce, and so is every part of a wait while the rank's own reduce engine is busy
// (in a ring every rank reduces in the same step, so the neighbour's next segment waits on that
// step's reductions: communication, not a straggler). transfer + peer_wait + reduce == end() − start.
class RingTimer {
 public:
  struct Post {
    int step = 0;
    int segment = 0;
    uint64_t bytes = 0;  // modeled wire bytes
    Nanos ready{0};
  };
  using Span = WaitSpan;  // runtime/time.h

  // n ranks, this rank `rank`; `root` for a broadcast (ignored otherwise).
  RingTimer(TimedKind kind, const TimedShape& shape, int n, int rank, int root, Nanos start);

  // Inline for up to 4 segments (a collective begins every bucket and TP all-reduce: no allocation).
  absl::InlinedVector<Post, 4> Begin();
  // The next receive arrived at `arrival`; its sender had it ready at `ready`. Returns whether a
  // post follows (then *post is it).
  bool OnReceive(Nanos arrival, Nanos ready, Post* post);

  int steps() const { return steps_; }
  int segments() const { return segments_; }
  int receives() const { return receives_; }
  int received() const { return received_; }
  bool done() const { return received_ >= receives_; }
  // Valid once done().
  Nanos end() const;
  Nanos transfer() const { return transfer_; }
  Nanos peer_wait() const { return peer_wait_; }
  Nanos reduce() const { return reduce_in_waits_ + (end() - progress_); }
  // The waits from the start to the last arrival in time order, adjacent ones of the same kind
  // merged: peer wait (peer), and transfer or reduce (not peer). Their total is
  // end() − start minus the reduce tail after the last arrival.
  const std::vector<Span>& spans() const { return spans_; }
  // Moves the spans out (for a result; spans() is empty afterwards).
  std::vector<Span> TakeSpans() { return std::move(spans_); }
  uint64_t posted_bytes() const { return posted_bytes_; }

 private:
  Post MakePost(int step, int k, Nanos ready);

  const TimedKind kind_;
  const TimedShape shape_;
  const int n_, rank_, root_;
  const Nanos start_;
  int steps_ = 0;      // steps this rank receives in (and sends in)
  int receives_ = 0;   // messages it receives in all
  bool forwards_ = false;  // broadcast: it passes each received segment on
  int received_ = 0;
  Nanos progress_;
  Nanos reduce_end_;
  Nanos last_consumed_;
  Nanos last_post_ready_;  // posts leave in order: each is ready no earlier than the previous
  Nanos transfer_{0}, peer_wait_{0};
  Nanos reduce_in_waits_{0};  // the reduce engine's busy time inside the waits
  std::vector<Span> busy_;    // the reduce engine's busy intervals in time order
  size_t busy_next_ = 0;      // the first that may still overlap a later wait
  uint64_t posted_bytes_ = 0;
  const int segments_;  // shape_.segments(), computed once (a division)
  void AddSpan(Nanos start, Nanos end, bool peer);
  std::vector<Span> spans_;
};

}  // namespace rp::comm::ring
