// The modeled shape and timing of an all-to-all on the fabric: how a block's modeled bytes are cut
// into messages, and when each pairwise step's messages are ready. Pure arithmetic shared by the
// threaded all-to-all (comm/alltoall*.cc) and the predictor (schedule/), so the timing rule is
// written once (as comm/ring_timing.h is for the ring).
//
// Words as in comm/alltoall_steps.h (n, block, bins, step, segment), plus:
//   modeled elements  the FP32 element count the fabric times. A block of e real elements is
//                     ceil(e / unit_elements) units of modeled_unit_elements modeled elements each
//                     (AllToAllWireModel: e.g. a token row of width d stands for the described
//                     model's token of h elements); the default unit is one element both ways.
//   K                 messages of a block: max(1, ceil(modeled / segment_elems)) — or 0 for an
//                     empty block of an all-to-all-v, whose counts message carried its header.
//                     Message k carries modeled min(segment_elems, rest) elements (full segments,
//                     then a tail), SegmentWireBytes(codec, ·) bytes; the real block is cut into
//                     the same K balanced pieces (ring::SplitSegment), so real and modeled messages
//                     correspond one to one.
//   round             a pairwise exchange of n − 1 steps (PairwiseTimer). An all-to-all is one
//                     round (the blocks); an all-to-all-v two (the counts, then the blocks).
// Timing of one rank in a round starting at `start` (docs/collectives.md "All-to-all"):
//   step 1's messages are ready at start; step s + 1's are ready at
//     ready(s + 1) = max(ready(s), arrivals of every message received at step s)
//   (a pairwise exchange: a rank moves to its next peer once its current receive is complete;
//   a step that receives nothing moves on at once). A round ends at max(start, every arrival).
//   The rank waits from its progress time (start, then each arrival, in step-major order) to each
//   later arrival: the part after the message was ready at its sender is transfer, the part before
//   peer wait; transfer + peer_wait == end − start.
//
// Example (n = 4, blocks of 1 MiB FP32, 256 KiB segments):
//   BlockShape b{.modeled_elems = 1 << 18, .segment_elems = 1 << 16, .codec = Codec::kFp32};
//   b.messages();   // 4
//   PairwiseTimer t(start, {{b bytes...}, ...}, {4, 4, 4});
//   for (const PairwiseTimer::Post& p : t.Begin()) post(p);
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "comm/codec.h"
#include "runtime/time.h"

namespace rp::comm::a2a {

// How an all-to-all's blocks are sized on the fabric (timed communicators). Equal on every rank.
struct AllToAllWireModel {
  uint64_t unit_elements = 1;          // real elements per unit, >= 1
  uint64_t modeled_unit_elements = 1;  // modeled FP32 elements per unit
  int step = 0;                        // training step (slow-link faults)

  uint64_t ModeledElements(uint64_t real_elements) const {
    const uint64_t unit = unit_elements < 1 ? 1 : unit_elements;
    return (real_elements + unit - 1) / unit * modeled_unit_elements;
  }
};

// The modeled messages of one block.
struct BlockShape {
  uint64_t modeled_elems = 0;
  uint64_t segment_elems = 1;  // >= 1
  Codec codec = Codec::kFp32;
  bool empty_block_message = true;  // AllToAll: an empty block is one empty message

  int messages() const {
    const uint64_t seg = segment_elems < 1 ? 1 : segment_elems;
    if (modeled_elems == 0) return empty_block_message ? 1 : 0;
    return static_cast<int>((modeled_elems + seg - 1) / seg);
  }
  uint64_t message_elems(int k) const {
    const uint64_t begin = static_cast<uint64_t>(k) * segment_elems;
    if (begin >= modeled_elems) return 0;
    const uint64_t left = modeled_elems - begin;
    return left < segment_elems ? left : segment_elems;
  }
  uint64_t message_bytes(int k) const { return SegmentWireBytes(codec, message_elems(k)); }
  // Every message's modeled bytes, in order.
  std::vector<uint64_t> AllBytes() const {
    std::vector<uint64_t> out;
    for (int k = 0; k < messages(); ++k) out.push_back(message_bytes(k));
    return out;
  }
};

// What the receiver of a timed all-to-all holds for one block that crossed ranks (not block r,
// which stays exact): the block's `block.size()` real elements cut into the same K balanced pieces
// as its modeled messages (ShapeOf: BlockShape{wire.ModeledElements(size), segment_elems, codec,
// empty_block_message}.messages(), then ring::SplitSegment — the rule of comm/alltoall_timed.cc),
// each replaced by Decode(Encode(piece)). In place; FP32 leaves the block unchanged. A serial
// oracle of the receive side, e.g. for a reference that reproduces a lossy EP run bit for bit.
// Errors: Encode's OutOfRange (element indices relative to the block).
[[nodiscard]] absl::Status RoundTripTimedBlock(Codec codec, const AllToAllWireModel& wire,
                                               uint64_t segment_elems, bool empty_block_message,
                                               std::span<float> block);

// The modeled messages of ONE rank in one round — which it posts, when each is ready, when the
// round ends and how its time splits — given the arrivals of the messages it receives. Pure: the
// threaded all-to-all and the predictor both drive it, so they post the same messages at the same
// times.
//
// Protocol: Begin() returns the posts available at the start (step 1's, and those of following
// steps that receive nothing). Then the rank's receives come in step-major order; OnReceive(arrival,
// ready at sender) appends the posts that receive enables (the next step's, once the current
// step's receives are complete). done() once every receive happened.
class PairwiseTimer {
 public:
  struct Post {
    int step = 1;     // 1 .. n − 1: to SendPeer(n, rank, step)
    int message = 0;  // index within the step's block
    uint64_t bytes = 0;
    Nanos ready{0};
  };
  struct Span {
    Nanos start{0}, end{0};
    bool peer = false;
  };

  // send_bytes[s − 1]: the modeled bytes of each message of step s (to SendPeer(s)); recv_messages
  // [s − 1]: how many messages step s receives (from RecvPeer(s)). Both have n − 1 entries.
  PairwiseTimer(Nanos start, std::vector<std::vector<uint64_t>> send_bytes,
                std::vector<int> recv_messages);

  std::vector<Post> Begin();
  void OnReceive(Nanos arrival, Nanos ready, std::vector<Post>* posts);

  bool done() const { return step_ > steps(); }
  // The step whose receives come next (steps() + 1 once done).
  int step() const { return step_; }
  int steps() const { return static_cast<int>(recv_messages_.size()); }
  // Valid once done().
  Nanos end() const { return progress_; }
  Nanos transfer() const { return transfer_; }
  Nanos peer_wait() const { return peer_wait_; }
  const std::vector<Span>& spans() const { return spans_; }
  uint64_t posted_bytes() const { return posted_bytes_; }
  uint64_t posted_messages() const { return posted_messages_; }

 private:
  // Posts step_'s messages ready at ready_, then moves past steps that receive nothing.
  void Open(std::vector<Post>* posts);

  const std::vector<std::vector<uint64_t>> send_bytes_;
  const std::vector<int> recv_messages_;
  int step_ = 1;         // the step whose receives are awaited (steps() + 1 when done)
  int received_ = 0;     // receives of step_ so far
  Nanos ready_;          // ready time of step_'s messages
  Nanos next_ready_;     // max(ready_, arrivals of step_ so far)
  Nanos progress_;
  Nanos transfer_{0}, peer_wait_{0};
  uint64_t posted_bytes_ = 0, posted_messages_ = 0;
  std::vector<Span> spans_;
};

}  // namespace rp::comm::a2a
