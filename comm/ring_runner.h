// comm::internal::RingRunner: the ring algorithms of comm/collectives.h on one rank, for one call
// (internal to comm/). Words (chunk, segment, step) as defined in comm/ring_steps.h.
//
// Protocol on each ring link r -> r + 1: a data channel of WireMsg (one per segment, in step-major
// order on both sides) and an acknowledgement queue back r + 1 -> r. The receiver acknowledges a
// message once it has consumed its bytes (reduced, decoded or copied them); the acknowledgement
// returns the sender's pool buffer (lossy codecs) or ends the lend of the sender's FP32 buffer.
// A sender drains acknowledgements before every send, so at most capacity + 2 acknowledgements
// are ever queued (the ack queue holds 2 * capacity + 2).
//
// Timed communicators (a fabric): RunTimed drives a comm::RingMachine (comm/ring_machine.h) with
// the calling thread — it posts the machine's sends, each with its own copy of its wire bytes, awaits
// the next ring message on the fabric (and, with a clock, its arrival), feeds it, and repeats.
// Nothing is lent and nothing acknowledged, so a sender never waits for its receiver.
//
// Inline messages (at most CommunicatorOptions::inline_bytes wire bytes, the small-message path)
// are copied or encoded into one of the link's capacity + 1 slots and are not acknowledged: the
// sender rewrites a slot only after Channel::WaitWritable, when the receiver has popped the message
// after the one that used it and is therefore done reading it (acquire of the queue's read index,
// released by that pop). A small all-reduce then costs 2(n - 1) forward hand-offs and nothing else.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "comm/communicator.h"
#include "comm/ring_machine.h"
#include "comm/ring_steps.h"
#include "runtime/time.h"

namespace rp::comm::internal {

using ring::Range;

ring::TimedKind TimedKindOf(OpKind kind);

// Runs the phases of one collective on one rank. Lives for one Run().
class RingRunner {
 public:
  RingRunner(RankComm* rc, OpKind kind, const CollectiveOptions& options, size_t count,
             Nanos start)
      : rc_(*rc),
        group_(rc->group()),
        kind_(kind),
        codec_(options.codec),
        timeout_(options.timeout),
        count_(count),
        seg_(options.segment_bytes / sizeof(float)),
        n_(rc->size()),
        r_(rc->rank()),
        next_((r_ + 1) % n_),
        prev_((r_ + n_ - 1) % n_),
        start_(start),
        model_(options.model),
        timed_(rc->group().options().fabric != nullptr) {
    feedback_ = options.error_feedback && codec_ != Codec::kFp32;
    feedback_slot_ = options.feedback_slot;
    result_.start = start;
    result_.end = start;
  }

  // On any exit without Finish (an error), waits until no peer can still read this rank's lent
  // buffers: every lend acknowledged (forwarded views included), or every other rank out of its
  // collective (they leave promptly: the group is aborted). A forwarded view of this rank's buffer
  // may be read by any rank, so all are checked; each rank leaves the op (in_op_ = false) before it
  // waits, as it reads nothing more, so no two failing ranks wait for each other. Bounded by the
  // timeout.
  ~RingRunner();

  // Checks the group, takes an op id, sizes the reusable state.
  absl::Status Begin();
  void set_broadcast_root(int root) { broadcast_root_ = root; }

  // Reduce-scatter over the ring. `in` is this rank's contribution (count elements), `work`
  // receives partial sums (count elements; may equal `in`), `own_out` receives the reduced chunk
  // r (chunk-sized; may point into `work`).
  absl::Status ReduceScatterPhase(const float* in, float* work, float* own_out);

  // All-gather over the ring; `out` (count elements) holds the reduced chunk r on entry. With a
  // lossy codec this rank adopts the decoded value of its own chunk, as its receivers will.
  absl::Status AllGatherPhase(float* out);

  // Reduce-scatter then all-gather as one sequence of 2(n - 1) steps, so the all-gather's first
  // segments leave while the reduce-scatter's last ones are still being reduced.
  absl::Status AllReducePhases(const float* in, float* out, float* own_out);

  // A pipelined chain root -> root + 1 -> ... -> root - 1 over the whole buffer.
  absl::Status BroadcastChain(int root, const float* src, float* out);

  // Waits until the next rank acknowledged every message (every lend ended, every wire buffer
  // home), so the caller may touch its buffers again.
  absl::Status Finish();

  // Timed (a fabric): runs the collective as a RingMachine driven by this thread — posts its
  // sends, awaits the next ring message (and, with a clock, its arrival), feeds it, repeats.
  // Nothing is lent and nothing acknowledged: each message owns its bytes.
  absl::Status RunTimed(RingMachine::Buffers buffers);

  const CollectiveResult& result() const { return result_; }
  bool timed() const { return timed_; }

  // The rank's reusable scratch buffer, at least `elems` long.
  float* Scratch(size_t elems);

 private:
  // Segments of `chunk` and the real range of its segment k: the modeled K when timed, else
  // segment_bytes-sized pieces (comm/ring_steps.h).
  int Segments(Range chunk) const { return ring::NumSegments(chunk.size, seg_); }
  Range Segment(Range chunk, int k) const { return ring::SegmentRange(chunk, seg_, k); }

  std::string Prefix() const;

  // Formats `s` with this rank, op, peer and step; aborts the group unless `s` is the echo of an
  // earlier abort.
  absl::Status Fail(const absl::Status& s, const char* what, int peer, int step);
  absl::Status FailLocal(const absl::Status& s, const char* what, int step);

  // An acknowledgement from the next rank. One of a forwarded view (hops > 0) ends this rank's
  // hold of the view, which it now acknowledges to the previous rank. The push cannot find the
  // queue full (see the ack queue's capacity in communicator.cc); if it did, that is a bug, not a
  // reason to block.
  absl::Status OnAck(const Ack& a, bool count_in_flight = true);
  absl::Status DrainAcks();

  // One ring step as this rank runs it: what it sends and what it does with what it receives.
  struct StepPlan {
    int step;  // the step within its phase (as carried by messages and named in errors)
    int send_chunk, recv_chunk;
    Range send, recv;
    int ks, kr;               // segments sent / received (>= 1 each)
    const float* send_src;    // sent segment g is send_src[g.begin, g.end())
    float* adopt;             // lossy own chunk: decoded wire bytes go to adopt + g.begin
    bool forward_out;         // a segment whose received view is held is sent as that view
    bool forward_in;          // received lent segments may be held to be forwarded next step
    bool feedback;            // encode with the error-feedback residual
    bool reduce;              // received segment g: dst[g - dst_offset] = add[g] + decoded
    const float* add;         //   (reduce) or out[g] = decoded (!reduce, dst = out, offset 0)
    float* dst;
    size_t dst_offset;
  };

  StepPlan ReduceScatterStep(int s, const float* in, float* work, float* own_out) const;

  StepPlan AllGatherStep(int s, float* out) const;

  // Runs steps 0 .. num_steps - 1 (plan(t) describes step t; the chunk sent at step t + 1 is the
  // chunk received at step t). Messages leave in step-major order, as the receiver expects them,
  // but as early as possible: segment k of step t + 1 is ready once segment k of step t has been
  // received, and a ready segment is sent, without blocking, whenever the link has room. So the
  // next rank may work up to channel_capacity segments ahead, across step boundaries, instead of
  // waiting for this rank's whole step. Progress: before blocking on segment k of step t this rank
  // has sent (blocking if need be) every segment up to k of step t, which is the order of the
  // first protocol and cannot deadlock (a rank blocked on a full link has a successor that holds
  // unread messages).
  absl::Status RunSteps(int num_steps, absl::FunctionRef<StepPlan(int)> plan);

  // Sends segment `g` (data at `src`, g.size elements). A message of at most inline_bytes wire
  // bytes is copied (encoded) into the link's next inline slot and not acknowledged; otherwise
  // FP32 lends `src` and lossy codecs encode into a pool buffer. Lossy codecs apply error feedback
  // if `feedback`, and, if `adopt` is set, decode the wire bytes back into `adopt` (the owner
  // adopting the value its receivers will see). With `sent` non-null the call never blocks:
  // *sent = false (and nothing happens) when the link or the wire-buffer pool is full.
  absl::Status SendSegment(const float* src, float* adopt, Range g, int step, int chunk, int k,
                           Nanos ready, bool feedback, int32_t hops, bool* sent = nullptr);

  // Receives the next message and checks it is the expected segment of the same collective.
  // Timed: first awaits its modeled timing (and, with a clock, its arrival), then lets the ring
  // timer account it and post the segment that depends on it.
  absl::Status RecvSegment(int step, int chunk, int k, size_t elems, Stamped<WireMsg>* m);

  // Tells the previous rank this rank is done with the message's bytes (inline messages need no
  // acknowledgement: popping the next message frees their slot).
  absl::Status Release(const Stamped<WireMsg>& m, int step, int k);

  RankComm& rc_;
  Communicator& group_;
  const OpKind kind_;
  const Codec codec_;
  const std::chrono::nanoseconds timeout_;
  const size_t count_;
  const size_t seg_;  // segment_elems
  const int n_, r_, next_, prev_;
  const Nanos start_;
  const WireModel model_;
  const bool timed_;  // a fabric times the messages
  int broadcast_root_ = 0;
  bool feedback_ = false;
  int feedback_slot_ = 0;
  float* residual_ = nullptr;  // error feedback: count_ elements
  bool forward_ = false;  // all-gather forwarding of lent views (FP32, n > 2)
  bool stream_ = false;   // held views are copied with streaming stores
  bool began_ = false;
  bool finished_ = false;
  uint64_t op_id_ = 0;
  CollectiveResult result_;
};

}  // namespace rp::comm::internal
