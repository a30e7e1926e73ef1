// rp::comm::RingMachine: one rank's part of one timed ring collective (all-reduce, reduce-scatter,
// all-gather, broadcast) as a state machine — its real data plane and its modeled messages —
// that whoever drives it feeds with the messages the rank receives. Two drivers:
//   * a thread: RankComm's collectives on a timed communicator (comm/collectives.h) post the
//     machine's sends on the fabric, await the next message, feed it, and repeat;
//   * the fabric itself: an event-driven comm stream (comm/comm_stream.h) is fed each message the
//     moment the fabric commits it, with no thread and no context switch per message.
// Both post the same messages at the same modeled times, so the timeline does not depend on the
// driver.
//
// Data plane (words as in comm/ring_steps.h and comm/ring_timing.h). Chunk c of the real buffer is
// ring::ChunkRange(count, n, c), cut into the K segments of the modeled shape (ring::SplitSegment;
// some may be empty). A send's wire bytes are encoded into a buffer of their own that travels
// with the fabric message (SegmentPayload); the receiver decodes (copies) or decodes-and-adds
// (reduces) them. Same order of operations as the untimed ring (comm/collectives.cc): each chunk
// is reduced along the ring, then copied; with a lossy codec the owner of a reduced chunk adopts
// the decoded value of what it sends, and error feedback applies to every reduce-scatter send and
// to the owner's all-gather send. So FP32 results are bit-identical to the untimed ring and every
// rank ends with the same bits with any codec.
//
// Modeled messages: ring::RingTimer (step 0 ready at the start; segment k of step s + 1 ready when
// segment k of step s was received and consumed). A message is posted the moment its ready time
// is known, which is also when its data exists, so a receiver never waits for data behind a
// committed message.
//
// Errors (returned by Begin/OnReceive; the driver adds rank and peer and fails the group):
// OutOfRange (codec overflow or FP32 sum overflow, naming the element), FailedPrecondition (the
// received message belongs to another collective or segment: mismatched calls across ranks).
//
// Example (a thread driving rank r; see RingRunner::RunMachine for the real one):
//   RingMachine m(spec, {.in = g.data(), .out = g.data(), .work = g.data(),
//                        .own_out = g.data() + own.begin}, start);
//   std::vector<RingMachine::Send> sends;
//   RP_RETURN_IF_ERROR(m.Begin(&sends));
//   while (true) {
//     for (auto& s : sends) post s.message with s.payload on the ring channel r -> r + 1;
//     if (m.done()) break;
//     sends.clear();
//     Delivery d = await the ring channel r - 1 -> r;
//     RP_RETURN_IF_ERROR(m.OnReceive(d.timing, static_cast<SegmentPayload&>(*d.payload), &sends));
//   }
//   m.TakeResult().end;  // when the last received segment was consumed
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <typeinfo>
#include <vector>

#include "absl/status/status.h"
#include "comm/codec.h"
#include "comm/communicator.h"
#include "comm/data_lane.h"
#include "comm/ring_steps.h"
#include "comm/ring_timing.h"
#include "runtime/fabric.h"
#include "runtime/time.h"

namespace rp::comm {

// One ring segment's wire bytes and identity, carried by its fabric message.
struct SegmentPayload final : FabricPayload {
  uint64_t op_id = 0;  // the sender's collective sequence number
  uint64_t count = 0;  // the sender's total element count
  uint32_t elems = 0;  // elements in this segment
  int32_t step = 0;    // step within its phase
  int32_t chunk = 0;
  int32_t segment = 0;
  ring::TimedKind kind = ring::TimedKind::kAllReduce;
  Codec codec = Codec::kFp32;
  // Set by a DataLane encode of a collective whose data already failed: the bytes were not
  // written, and a receiver fails as a consequence (comm/data_lane.h).
  bool poisoned = false;

  // Room for `n` wire bytes: inline up to kInlineBytes (no second allocation for the small
  // segments of large rings), else on the heap.
  // A recycled payload keeps its heap room for the next segment that fits.
  std::byte* Reserve(size_t n) {
    if (n <= kInlineBytes) return data_ = inline_.data();
    if (n > heap_bytes_) {
      heap_ = std::make_unique_for_overwrite<std::byte[]>(n);
      heap_bytes_ = n;
    }
    return data_ = heap_.get();
  }
  const std::byte* data() const { return data_; }  // SegmentWireBytes(codec, elems) bytes

 private:
  static constexpr size_t kInlineBytes = 256;
  alignas(16) std::array<std::byte, kInlineBytes> inline_;
  std::unique_ptr<std::byte[]> heap_;
  size_t heap_bytes_ = 0;
  std::byte* data_ = nullptr;
};

// Segment payloads to reuse: a rank's received segment, once reduced, carries its next send, so a
// ring in its steady state allocates nothing per message. Owned by one driver (a comm stream),
// used by one thread at a time; RingMachine takes from it and the driver gives back what it
// received.
class SegmentPool {
 public:
  SegmentPool() = default;
  SegmentPool(const SegmentPool&) = delete;
  SegmentPool& operator=(const SegmentPool&) = delete;
  ~SegmentPool() {
    for (size_t i = 0; i < size_; ++i) delete free_[i];
  }
  // A payload to overwrite: a recycled one, else a new one.
  std::unique_ptr<SegmentPayload> Take() {
    if (size_ == 0) return std::make_unique_for_overwrite<SegmentPayload>();
    return std::unique_ptr<SegmentPayload>(free_[--size_]);
  }
  // Keeps `p` for a later Take (at most kKeep are kept); `p` must be a SegmentPayload (AsSegment).
  void Give(std::unique_ptr<FabricPayload> p) {
    if (size_ < kKeep) free_[size_++] = static_cast<SegmentPayload*>(p.release());
  }

 private:
  // Kept inline (not in a vector's block): a comm stream gives back the payload it was handed and
  // takes it again for the send that follows, and at thousands of streams a block of its own was
  // one more cold line a message.
  static constexpr size_t kKeep = 8;
  std::array<SegmentPayload*, kKeep> free_{};
  size_t size_ = 0;
};

// FailedPrecondition when segment `m` is not the one a receiver expects: another collective
// (op_id, kind, count, codec: "mismatched collectives ...") or another step, chunk, segment or
// size ("mismatched segments ...").
[[nodiscard]] absl::Status CheckSegment(const SegmentPayload& m, uint64_t op_id, ring::TimedKind kind,
                                        uint64_t count, Codec codec, int32_t step, int32_t chunk,
                                        int32_t segment, size_t elems);

// A segment's wire bytes from src[0, n): encoded in `codec` (with error feedback through
// residual[0, n) when `residual` is set; FP32 is a copy), then, with `adopt`, decoded into
// adopt[0, n) (a lossy owner keeps what it sent). `first`: the segment's offset, named by errors.
[[nodiscard]] absl::Status EncodeSegment(Codec codec, const float* src, size_t n, float* residual,
                                         std::byte* wire, uint64_t first, float* adopt);
// A received segment's bytes into dst[0, n): decoded, or with `add` set, decoded and added to
// add[0, n) (OutOfRange on a sum that is not finite).
[[nodiscard]] absl::Status DecodeSegment(Codec codec, const float* add, const std::byte* wire,
                                         size_t n, float* dst, uint64_t first);
// The error of a ring collective's rank (what a driver reports): "rank R (device D) <kind> #<op>
// <what> rank <prev> (device P) at ring step S: <status>".
[[nodiscard]] absl::Status RingRankError(const absl::Status& status, int rank, int n, int device,
                                         ring::TimedKind kind, uint64_t op_id, const char* what,
                                         int peer_device, int ring_step);

// `p` as a ring segment, or nullptr if it is something else (a cheap exact-type check).
inline const SegmentPayload* AsSegment(const FabricPayload* p) {
  return p != nullptr && typeid(*p) == typeid(SegmentPayload) ? static_cast<const SegmentPayload*>(p)
                                                             : nullptr;
}

class RingMachine {
 public:
  struct Spec {
    ring::TimedKind kind = ring::TimedKind::kAllReduce;
    int n = 1;
    int rank = 0;
    int root = 0;          // broadcast only
    int device = 0;        // fabric device ids of this rank and of the next one
    int next_device = 0;
    // Real elements: the all-reduce's and broadcast's buffer, the reduce-scatter's input, the
    // all-gather's output.
    size_t count = 0;
    Codec codec = Codec::kFp32;
    size_t segment_elems = 1;  // modeled FP32 elements per segment (CollectiveOptions)
    WireModel model;
    bool error_feedback = false;  // lossy codecs only
    uint64_t op_id = 0;           // equal on every rank of the call (matched on receive)
  };
  // Buffers of this rank (count elements unless said otherwise), owned by the caller and not
  // touched by anyone else until the machine is done:
  //   all-reduce       in, out (may alias); work = out; own_out = out + own chunk's begin;
  //   reduce-scatter   in; work (count elements of partial sums, may alias in); own_out (the
  //                    own chunk's elements);
  //   all-gather       out, holding the own chunk on entry;
  //   broadcast        root: in (the data); every rank: out.
  // residual: count elements of error-feedback residual (error_feedback only).
  struct Buffers {
    const float* in = nullptr;
    float* out = nullptr;
    float* work = nullptr;
    float* own_out = nullptr;
    float* residual = nullptr;
  };
  struct Send {
    FabricMessage message;  // modeled bytes and ready time
    std::unique_ptr<SegmentPayload> payload;
  };

  // `pool` (optional, outliving the machine): where sends take their payloads from.
  // `lane` (optional, outliving the machine, with `lane_context`): runs the data plane on the
  // lane's thread (comm/data_lane.h), headers and their checks included — the buffers then hold
  // the results once the lane ran every item pushed up to done(), a payload OnReceive accepts
  // passes to the lane (lane_took_payload), and data and mismatch errors go to `lane_context`,
  // not to Begin/OnReceive. For all-reduces (a broadcast root's copy in Begin is not the lane's).
  RingMachine(const Spec& spec, const Buffers& buffers, Nanos start, SegmentPool* pool = nullptr,
              DataLane* lane = nullptr, const DataLane::Context* lane_context = nullptr);

  // The sends available at the start (step 0; a broadcast root's whole chain). Appends to *sends.
  [[nodiscard]] absl::Status Begin(std::vector<Send>* sends);
  // The rank's next message from the previous rank arrived with `timing`: checks it, reduces or
  // copies its data, and appends the send it enables (if any) to *sends.
  [[nodiscard]] absl::Status OnReceive(const MessageTiming& timing, const SegmentPayload& payload,
                                       std::vector<Send>* sends);

  bool done() const { return timer_.done(); }
  // Whether a payload OnReceive accepted (returned OK for) is the lane's now.
  bool lane_took_payload() const { return lane_ != nullptr; }
  // Receives so far / in all (for wait sites and progress).
  int received() const { return timer_.received(); }
  // The step (within its phase) of the next expected receive.
  int next_step() const;
  // Valid once done(): end, transfer, peer wait, reduce, spans, bytes, messages. Moves the spans
  // out: call it once.
  CollectiveResult TakeResult();
  const Spec& spec() const { return spec_; }

 private:
  // One step as this rank runs it (global step index t: an all-reduce's all-gather steps follow
  // its reduce-scatter steps).
  struct StepPlan {
    int step = 0;  // within its phase (carried by messages)
    int send_chunk = 0, recv_chunk = 0;
    ring::Range send, recv;
    const float* send_src = nullptr;  // sent segment g is send_src[g.begin, g.end())
    float* adopt = nullptr;           // lossy own chunk: decoded wire bytes go to adopt + g.begin
    bool feedback = false;
    bool reduce = false;  // received g: dst[g - dst_offset] = add[g] + decoded; else dst[g] = decoded
    const float* add = nullptr;
    float* dst = nullptr;
    size_t dst_offset = 0;
  };
  StepPlan Plan(int t) const;
  StepPlan ReduceScatterStep(int s) const;
  StepPlan AllGatherStep(int s) const;
  StepPlan BroadcastStep() const;
  absl::Status MakeSend(const StepPlan& p, int k, const ring::RingTimer::Post& post,
                        std::vector<Send>* sends);
  absl::Status Check(const SegmentPayload& m, const StepPlan& p, int k, size_t elems) const;

  const Spec spec_;
  const Buffers buffers_;
  const Nanos start_;
  SegmentPool* const pool_;
  DataLane* const lane_;
  const DataLane::Context* const lane_context_;
  // Chunk c of the real buffer (ring::ChunkRange without its division: every message plans two
  // steps, and divisions were a tenth of a small message's cost).
  ring::Range Chunk(int c) const {
    const size_t uc = static_cast<size_t>(c);
    return ring::Range{uc * chunk_base_ + (uc < chunk_extra_ ? uc : chunk_extra_),
                       chunk_base_ + (uc < chunk_extra_ ? 1 : 0)};
  }
  // a mod n for a in [-2n, 2n) (ring::Mod without its divisions).
  int Wrap(int a) const {
    const int n = spec_.n;
    if (a < 0) a += n;
    if (a < 0) a += n;
    if (a >= n) a -= n;
    return a;
  }
  // Segment k of a step's range (ring::SplitSegment; no division for one segment a chunk).
  ring::Range Segment(ring::Range r, int k) const {
    return segments_ == 1 ? r : ring::SplitSegment(r, segments_, k);
  }

  const ring::TimedShape shape_;
  const int segments_;     // shape_.segments()
  const size_t chunk_base_, chunk_extra_;  // count / n, count % n
  ring::RingTimer timer_;
  const int phase_steps_;  // reduce-scatter steps of an all-reduce (n - 1)
  ring::Range own_;        // the own chunk
  uint64_t wire_bytes_ = 0, modeled_bytes_ = 0, messages_ = 0;
  bool starting_ = false;  // in Begin (a lane's error wording)
};

// The RingTimer kind of a collective and its name ("all-reduce", ...).
const char* TimedKindName(ring::TimedKind kind);

}  // namespace rp::comm
