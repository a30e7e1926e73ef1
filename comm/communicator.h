// rp::comm::Communicator: a group of ranks that run collectives and point-to-point transfers on
// real buffers, each rank driven by its own thread (think ncclComm_t).
//
// A Communicator is created once for a group (Create validates the options) and hands out one
// RankComm per rank. Group rank r is mapped to the global device id options.devices[r]; link
// models see device ids, so a schedule can build DP/TP groups out of a larger world. The ring
// direction is r -> r + 1 (mod n).
//
// Guarantees:
//   * Every blocking wait is bounded by the operation's timeout: a missing peer is a
//     DeadlineExceeded Status naming the waiting rank, the peer and the ring step, never a hang.
//   * The first failure of any rank aborts the group: ranks blocked in the same group return
//     Aborted promptly, and every later operation returns FailedPrecondition. Create a new
//     Communicator to continue.
//   * Counters (RankComm::stats) count exactly the bytes put on the wire, codec metadata included.
//
// Timed communicators (options.fabric set): every message — a ring segment, a p2p buffer — is a
// real buffer timed by the fabric (rp::Fabric): the sender posts it with its modeled size and
// ready time, the receiver gets its modeled arrival (and, with a clock, waits until it). A
// collective's result.end is when its last segment was consumed. Because the fabric's
// conservative rule lets a rank that waits on the host hold back everyone's commits, a timed
// communicator never makes a sender wait for its receiver: its links are unbounded queues, lossy
// codecs' wire buffers grow as needed, and neither inline slots nor forwarding are used (they tie
// a sender to its receiver's progress). Each rank is driven by one LP (options.lps).
//
// Thread safety: Communicator methods are thread-safe. A RankComm is used by one thread at a time
// (normally its rank's thread); different RankComms are used concurrently. Collectives are matched
// across ranks by call order: every rank of the group must issue the same sequence of collectives
// with the same element count, codec and segment size (mismatches are detected and reported).
//
// Example (one thread per rank):
//   RP_ASSIGN_OR_RETURN(auto comm, Communicator::Create({.devices = {0, 1, 2, 3}}));
//   // in rank r's thread:
//   RP_ASSIGN_OR_RETURN(CollectiveResult res,
//                       comm->rank(r).AllReduce(grad, grad, {.codec = Codec::kFp16}));
//   // grad now holds the sum over ranks, bit-identical on every rank.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "comm/channel.h"
#include "comm/codec.h"
#include "runtime/clock.h"
#include "runtime/fabric.h"
#include "runtime/mutex.h"
#include "runtime/time.h"

namespace rp::comm {

// Messages a ring link holds before its producer blocks.
inline constexpr size_t kDefaultChannelCapacity = 8;
// Default segment: 256 KiB of FP32 values (65536 elements) per message.
inline constexpr size_t kDefaultSegmentBytes = size_t{256} << 10;
// Default inline limit: a ring message of at most this many wire bytes is copied into a slot of
// the link (see CommunicatorOptions::inline_bytes) instead of being lent.
inline constexpr size_t kDefaultInlineBytes = size_t{16} << 10;
// Largest accepted CommunicatorOptions::inline_bytes.
inline constexpr size_t kMaxInlineBytes = size_t{1} << 20;
// Default watchdog for any single blocking wait inside an operation.
inline constexpr std::chrono::milliseconds kDefaultTimeout{30000};
// Default CommunicatorOptions::streaming_min_bytes (measured: comm_bench, see
// docs/collectives.md).
inline constexpr size_t kDefaultStreamingMinBytes = size_t{192} << 20;
// Default CommunicatorOptions::max_held_segments. Measured need, 64 MiB in 256 KiB segments: up
// to (n - 2) chunks' worth are held at once (192 at n = 8).
inline constexpr size_t kDefaultMaxHeldSegments = 512;
// Largest accepted CommunicatorOptions::max_held_segments.
inline constexpr size_t kMaxMaxHeldSegments = size_t{1} << 16;
// Largest accepted CommunicatorOptions::channel_capacity.
inline constexpr size_t kMaxChannelCapacity = 4096;

struct CommunicatorOptions {
  // Global device id of each group rank (size = number of ranks, >= 1; ids >= 0 and distinct).
  std::vector<int> devices;
  // The modeled network that times every message (see "Timed communicators"); nullptr = untimed:
  // a message arrives when it is ready (the host-throughput path). Non-owning: it belongs to the
  // emulated machine, which outlives the communicator.
  Fabric* fabric = nullptr;
  // With a fabric: the LP driving each rank (parallel to `devices`), distinct.
  std::vector<LpId> lps;
  // With a fabric: the clock a receiver waits on until a message's modeled arrival (a real clock);
  // nullptr = never wait. Non-owning, same lifetime as `fabric`.
  Clock* clock = nullptr;
  // Messages in flight per ring link, in [2, kMaxChannelCapacity].
  size_t channel_capacity = kDefaultChannelCapacity;
  // Busy polls before a blocked rank starts yielding, >= 0.
  int spin_iterations = kDefaultSpinIterations;
  // Ring messages (segments) of at most this many wire bytes travel inline: the sender copies
  // (encodes) them into one of capacity + 1 fixed slots of the link, the receiver reads the slot,
  // and no acknowledgement goes back (the queue's own read index frees the slot). Larger messages
  // are lent (FP32) or sent from a pool buffer (lossy codecs) and acknowledged. 0 = never inline.
  // <= kMaxInlineBytes; each ring link holds (capacity + 1) * inline_bytes bytes of slots.
  size_t inline_bytes = kDefaultInlineBytes;
  // sched_yield() polls after the spin and before a blocked rank sleeps on a futex, >= 0.
  int yield_iterations = kDefaultYieldIterations;
  // All-gather forwarding of lent FP32 segments: a rank that receives a lent segment which it must
  // pass on passes on the same view (of the chunk's owner's buffer) instead of a view of its own
  // copy, and acknowledges it only once the next rank acknowledged the forward. Every rank then
  // copies each chunk from its owner, whose freshly reduced chunk is still in cache, and may write
  // its own copy with streaming stores (nobody reads it during the collective; see
  // streaming_min_bytes). Same messages, same bytes, same results; less memory traffic (see
  // docs/collectives.md). At most max_held_segments segments are held
  // per rank; beyond that a rank forwards its own copy as without forwarding.
  bool forward_lends = true;
  // Forwarded views a rank may hold at once, in [0, kMaxMaxHeldSegments] (0 = never forward).
  // Each ring link's acknowledgement queue has room for channel_capacity + this + 4 entries.
  size_t max_held_segments = kDefaultMaxHeldSegments;
  // A forwarding rank copies a held view with streaming (non-temporal) stores when the group's
  // buffers together (elements x 4 bytes x ranks) have at least this many bytes; below it, plain
  // stores: what fits in the last-level cache stays there for the caller, and streaming would
  // push it to memory. 0 = always stream. The default is measured on the reference machine
  // (480 MiB L3; see docs/collectives.md); tune it to the machine's cache.
  size_t streaming_min_bytes = kDefaultStreamingMinBytes;
  // Fault-injection hook for tests: called on a rank's thread with its group rank right before it
  // sends each collective message (e.g. to stall a rank mid-collective). Empty = none.
  std::function<void(int rank)> send_hook;
};


// How a collective's messages are sized on the fabric (timed communicators; see
// comm/ring_timing.h). Must be equal on every rank of the call.
struct WireModel {
  static constexpr uint64_t kRealCount = ~uint64_t{0};
  // Modeled FP32 elements (e.g. a described model's gradient bucket); kRealCount = the real
  // buffer's count.
  uint64_t elements = kRealCount;
  // Training step the messages belong to (slow-link faults are per step).
  int step = 0;
  // Modeled reduction throughput over FP32 bytes, GB/s; 0 = free.
  double reduce_gbps = 0;
};

// Options of one collective call. Must be equal on every rank of the call.
struct CollectiveOptions {
  Codec codec = Codec::kFp32;
  // FP32 bytes per segment (one message): a multiple of 4, >= 4.
  size_t segment_bytes = kDefaultSegmentBytes;
  // Watchdog for each blocking wait (wall time), > 0.
  std::chrono::nanoseconds timeout = kDefaultTimeout;
  // Keep a per-rank residual of the quantization error and add it before the next encode
  // (lossy codecs only; its memory is RankComm::residual_bytes()).
  bool error_feedback = false;
  // Which of the rank's residuals error feedback uses, >= 0 (e.g. one per gradient bucket, so
  // buckets of different sizes keep theirs). A residual is zeroed when its size changes.
  int feedback_slot = 0;
  // Timed communicators: modeled sizes (segment_bytes then cuts the MODELED chunk).
  WireModel model = {};
};

// What one rank observed in one collective.
struct CollectiveResult {
  Nanos start{0};            // modeled start passed to Run
  Nanos end{0};              // modeled end: when its last received segment was consumed (timed);
                             // == start untimed
  uint64_t wire_bytes = 0;   // bytes this rank put on the wire (codec metadata included)
  uint64_t modeled_bytes = 0;  // bytes the fabric timed for this rank's messages (timed)
  // Timed: how [start, end) splits (DESIGN.md "Communication vs waiting"). Each receive waits
  // from the rank's modeled "now" (start, or when it consumed the previous segment) to the
  // segment's arrival: the part after the segment was ready at its sender is transfer (the data
  // was in flight, or queued for a busy port), the part before is peer wait (the peer had not
  // sent it yet). reduce = modeled reduction time: the tail after the last arrival and the parts
  // of the waits while the rank's reduce engine was busy (not peer wait: in a ring the neighbour's
  // next segment waits on the same step's reductions). transfer + peer_wait + reduce == end - start.
  Nanos transfer{0};
  Nanos peer_wait{0};
  Nanos reduce{0};
  // The same split as intervals, in order (timed): for overlaying another stream's waits.
  using Span = WaitSpan;  // peer: peer wait; else transfer or reduce (reduce tails not listed)
  std::vector<Span> spans;
  uint64_t messages = 0;     // messages this rank sent
  uint64_t forwarded = 0;    // of which forwarded views (CommunicatorOptions::forward_lends)
};

// Cumulative per-rank counters.
struct WireStats {
  uint64_t collective_bytes[4] = {0, 0, 0, 0};  // indexed by static_cast<int>(Codec)
  uint64_t p2p_bytes = 0;
  uint64_t modeled_bytes = 0;  // bytes the fabric timed (collectives and p2p; timed communicators)
  uint64_t messages = 0;
  // Of `messages`, those that forwarded a view received from the previous rank
  // (CommunicatorOptions::forward_lends).
  uint64_t forwarded = 0;
  uint64_t total_bytes() const {
    return collective_bytes[0] + collective_bytes[1] + collective_bytes[2] + collective_bytes[3] +
           p2p_bytes;
  }
};

// The payload of point-to-point transfers (activations): moved, never copied.
using Buffer = std::vector<float>;

// A received point-to-point buffer and its modeled timing (untimed: every time = the send's
// ready time).
struct Received {
  std::unique_ptr<Buffer> buffer;
  Nanos arrival{0};
  MessageTiming timing;
  uint64_t ticket = 0;  // timed: the sender's fabric ticket (what Send returned)
};

// A point-to-point message's modeled size and tag (timed communicators), and its wait limit.
struct P2POptions {
  static constexpr uint64_t kRealBytes = ~uint64_t{0};
  uint64_t modeled_bytes = kRealBytes;  // bytes the fabric times; kRealBytes = the buffer's bytes
  int step = 0;                // training step (slow-link faults)
  std::chrono::nanoseconds timeout = kDefaultTimeout;
  const char* what = "p2p receive";  // the receive's name in wait sites (a literal)
};

namespace internal {
enum class OpKind : uint8_t {
  kAllReduce, kReduceScatter, kAllGather, kBroadcast, kAllToAll, kAllToAllV
};
const char* OpName(OpKind kind);
// "rank R (device D) <op> #N": how a collective's runner names itself in its errors.
std::string OpPrefix(int rank, int device, OpKind kind, uint64_t op_id);

// One ring message: a segment of a collective. Trivially copyable (see channel.h).
struct WireMsg {
  const std::byte* payload;  // wire bytes: a lent view of the sender's FP32 buffer, a pool buffer
                             // or an inline slot of the link
  std::byte* pool_buffer;    // the sender's pool buffer to hand back (nullptr for lent views)
  uint64_t op_id;            // the sender's collective sequence number
  uint64_t count;            // the sender's total element count
  uint32_t elems;            // elements in this segment
  int32_t step;
  int32_t chunk;
  int32_t segment;
  // Forwarding depth of a lent view: 0 when the sender lends its own buffer, h + 1 when it
  // forwards a view it received with depth h (see CommunicatorOptions::forward_lends).
  int32_t hops;
  OpKind kind;
  Codec codec;
  bool needs_ack;  // false for inline messages: the receiver sends no acknowledgement
};
// Returned by the receiver after it consumed a message (the sender may reuse the bytes). The hops
// of the acknowledged message come back with it: hops > 0 means the sender forwarded a view it
// still holds, and now acknowledges that view to its own predecessor with hops - 1.
struct Ack {
  std::byte* pool_buffer;
  int32_t hops;
};
class RingRunner;

// One all-to-all message (comm/alltoall*.cc): a segment of a block, or a block's counts. Trivially
// copyable. Untimed, the payload is lent (the sender's FP32 buffer, its encoded staging buffer or
// its counts) until the receiver acknowledges it; timed, it is a copy the receiver frees (owned).
struct A2aMsg {
  const std::byte* payload;
  bool owned;            // timed: payload was allocated (new[]) for this message only
  uint64_t op_id;        // the sender's collective sequence number
  uint64_t block_elems;  // elements of the sender's block for this receiver
  uint32_t elems;        // elements in this message (the counts message: count entries)
  int32_t segment;       // segment index; kCountsSegment for the counts message
  OpKind kind;
  Codec codec;
};
inline constexpr int32_t kCountsSegment = -1;

// The all-to-all link of one ordered pair src -> dst: data one way, acknowledgements back (timed:
// an unbounded data channel, no acknowledgements, and the fabric channel that times it). Created
// on first use (Communicator::AllToAllLink) and owned by the group.
struct A2aLink {
  A2aLink(const ChannelOptions& options, size_t ack_capacity)
      : data(options), acks(ack_capacity, options.spin_iterations, options.yield_iterations) {}
  ~A2aLink();  // frees owned payloads nobody received (a failed run)
  Channel<A2aMsg> data;    // producer: src, consumer: dst
  SpscQueue<uint32_t> acks;  // producer: dst, consumer: src (one entry per message consumed)
  ChannelId fabric_channel = -1;  // timed
};
class AllToAllRunner;
}  // namespace internal

class Communicator;

// One rank's handle. Used by one thread at a time (see the file comment).
class RankComm {
 public:
  int rank() const { return rank_; }
  int size() const;
  int device() const;

  // ---- Collectives (see comm/collectives.h for the per-algorithm classes these wrap) ----
  // out = sum over ranks of in (in.size() == out.size(); in-place when in.data() == out.data()).
  [[nodiscard]] absl::StatusOr<CollectiveResult> AllReduce(std::span<const float> in,
                                                           std::span<float> out,
                                                           const CollectiveOptions& options,
                                                           Nanos start = kZeroTime);
  // out = chunk `rank()` of the sum (out.size() == ring::ChunkRange(in.size(), n, rank()).size).
  [[nodiscard]] absl::StatusOr<CollectiveResult> ReduceScatter(std::span<const float> in,
                                                               std::span<float> out,
                                                               const CollectiveOptions& options,
                                                               Nanos start = kZeroTime);
  // out[chunk c] = in of rank c (in.size() == ChunkRange(out.size(), n, rank()).size).
  [[nodiscard]] absl::StatusOr<CollectiveResult> AllGather(std::span<const float> in,
                                                           std::span<float> out,
                                                           const CollectiveOptions& options,
                                                           Nanos start = kZeroTime);
  // out = root's in on every rank (root: in.size() == out.size(), or in empty = in-place in out;
  // other ranks: in ignored).
  [[nodiscard]] absl::StatusOr<CollectiveResult> Broadcast(int root, std::span<const float> in,
                                                           std::span<float> out,
                                                           const CollectiveOptions& options,
                                                           Nanos start = kZeroTime);

  // ---- Point to point ----
  // Moves `buffer` to group rank `peer` (!= rank()), ready at modeled `ready_at`. Timed: posts it
  // to the fabric (never blocks) and returns its ticket; untimed: returns 0. Untimed and bounded,
  // blocks while the pair's channel is full (DeadlineExceeded after options.timeout).
  [[nodiscard]] absl::StatusOr<uint64_t> Send(int peer, std::unique_ptr<Buffer> buffer,
                                              Nanos ready_at, const P2POptions& options = {});
  // Receives the next buffer group rank `peer` sent to this rank (FIFO per pair) with its modeled
  // timing. Timed: waits for the fabric to commit it (and, with a clock, until its arrival).
  [[nodiscard]] absl::StatusOr<Received> Recv(int peer, const P2POptions& options = {});

  const WireStats& stats() const { return stats_; }
  // Bytes of error-feedback residual this rank holds.
  uint64_t residual_bytes() const;
  // Bytes of wire buffers this rank holds for lossy codecs on untimed communicators: the ring's
  // pool (channel_capacity + 2 buffers, each sized for the largest segment a call has sent, not for
  // segment_bytes) and the all-to-all's staging buffer. They are kept for later calls and grow only
  // when a call needs more.
  uint64_t wire_buffer_bytes() const;
  Communicator& group() { return *group_; }

  // ---- For collectives driven by an event-driven comm stream (comm/comm_stream.h) ----
  // The rank's next collective sequence number (collectives are matched by it across ranks).
  uint64_t TakeOpId() { return next_op_id_++; }
  // Error-feedback residual `slot` sized `count` (zeroed when its size changes).
  std::span<float> Residual(int slot, size_t count);
  // Counts a finished collective in stats().
  void Account(const CollectiveResult& result, Codec codec);

 private:
  friend class Communicator;
  friend class internal::RingRunner;
  friend class internal::AllToAllRunner;
  friend class EventAllToAll;
  RankComm(Communicator* group, int rank) : group_(group), rank_(rank) {}

  OwningChannel<Buffer>* P2PChannel(int src, int dst);
  bool timed() const;
  internal::A2aLink* AllToAllLink(int src, int dst);

  Communicator* const group_;  // owns this RankComm
  const int rank_;
  // Ring links (owned by the group).
  Channel<internal::WireMsg>* to_next_ = nullptr;        // producer: this rank
  Channel<internal::WireMsg>* from_prev_ = nullptr;      // consumer: this rank
  SpscQueue<internal::Ack>* acks_from_next_ = nullptr;   // consumer: this rank
  SpscQueue<internal::Ack>* acks_to_prev_ = nullptr;     // producer: this rank
  // Inline slots of the link to the next rank (owned by the group): slots_to_next_count_ slots of
  // slot_bytes_ each, used round robin by this rank (the link's producer). Slot i is rewritten
  // only after Channel::WaitWritable, i.e. after the next rank popped the message that followed
  // the one using slot i, so it finished reading the slot (count = capacity + 1).
  std::byte* slots_to_next_ = nullptr;
  size_t slots_to_next_count_ = 0;
  size_t slot_bytes_ = 0;
  size_t next_slot_ = 0;
  // True while this rank is inside a collective and may read lent buffers (its predecessor's, or
  // any rank's through a forwarded view). Written by this rank's thread (seq_cst, paired with
  // Communicator::aborted_), read by failing ranks that must know whether their lends are still
  // being read.
  std::atomic<bool> in_op_{false};
  // Collective state, reused across calls (no per-segment allocation).
  uint64_t next_op_id_ = 0;
  uint64_t in_flight_ = 0;  // messages sent to the next rank and not yet acknowledged
  std::vector<std::unique_ptr<std::byte[]>> pool_;  // wire buffers for lossy codecs
  std::vector<std::byte*> free_buffers_;
  size_t pool_buffer_bytes_ = 0;
  std::vector<float> scratch_;   // out-of-place reduce-scatter partial sums
  std::vector<std::vector<float>> residuals_;  // error feedback, per CollectiveOptions::feedback_slot
  std::vector<Nanos> ready_;     // modeled ready time per segment of the current chunk
  // Forwarding (CommunicatorOptions::forward_lends): per segment of the chunk received at the
  // previous all-gather step, the held lent view to forward (nullptr: forward this rank's copy)
  // and its hops; held_ counts views received and not yet acknowledged to the previous rank.
  std::vector<const std::byte*> fwd_;
  std::vector<int32_t> fwd_hops_;
  size_t held_ = 0;
  absl::flat_hash_map<int64_t, OwningChannel<Buffer>*> p2p_cache_;
  // All-to-all state: the links to and from each peer (cached on first use), messages sent to each
  // peer and not yet acknowledged, and the staging buffer lossy codecs encode into.
  std::vector<internal::A2aLink*> a2a_to_, a2a_from_;
  std::vector<uint64_t> a2a_in_flight_;
  std::vector<std::byte> a2a_wire_;
  WireStats stats_;
};

class Communicator {
 public:
  // InvalidArgument naming the field on bad options.
  static absl::StatusOr<std::unique_ptr<Communicator>> Create(const CommunicatorOptions& options);
  ~Communicator();

  int size() const { return static_cast<int>(options_.devices.size()); }
  int device(int rank) const { return options_.devices[static_cast<size_t>(rank)]; }
  const CommunicatorOptions& options() const { return options_; }
  // The handle of group rank r in [0, size()).
  RankComm& rank(int r) { return *ranks_[static_cast<size_t>(r)]; }

  // Fails the group with `status` (the first call wins) and wakes every blocked rank. A timed
  // group aborts its fabric too, with Aborted "aborted because of an earlier failure: <status>"
  // (status itself if already Aborted or Cancelled): what that releases elsewhere is a consequence.
  void Abort(const absl::Status& status);
  bool aborted() const { return aborted_.load(std::memory_order_seq_cst); }
  // The status that aborted the group (OK if none).
  absl::Status abort_status() const;
  // ---- For the collectives' runners (comm/ring_runner.h, comm/alltoall_runner.h) ----
  // Whether a rank other than `r` is inside a collective (and may still read lent buffers).
  bool AnyRankInOpBesides(int r) const;
  // A failure at `where` (the runner's prefix, what it did, with whom): `s` with `where` put in
  // front of its message; aborts the group with it and returns it.
  absl::Status AbortAt(const absl::Status& s, absl::string_view where);
  // A failure met waiting on a peer: the echo of an earlier abort (Cancelled) becomes Aborted
  // naming that abort, without a second abort; anything else is AbortAt.
  absl::Status FailAt(const absl::Status& s, absl::string_view where);
  // Timed groups: the fabric channel of ring link r -> r + 1 (-1 for a group of one).
  ChannelId RingChannel(int r) const {
    return ring_fabric_.empty() ? ChannelId{-1} : ring_fabric_[static_cast<size_t>(r)];
  }

 private:
  explicit Communicator(const CommunicatorOptions& options) : options_(options) {}
  friend class RankComm;
  friend class internal::RingRunner;
  OwningChannel<Buffer>* GetP2P(int src, int dst);
  // Timed: the fabric channel of ring link r -> r + 1, and of p2p pair src -> dst (made on first use).
  ChannelId P2PFabricChannel(int src, int dst);
  internal::A2aLink* GetAllToAllLink(int src, int dst);

  const CommunicatorOptions options_;
  std::vector<std::unique_ptr<Channel<internal::WireMsg>>> ring_data_;  // [r]: r -> r + 1
  std::vector<std::unique_ptr<SpscQueue<internal::Ack>>> ring_acks_;    // [r]: r + 1 -> r
  std::vector<std::unique_ptr<std::byte[]>> ring_slots_;                // [r]: inline slots r -> r+1
  std::vector<std::unique_ptr<RankComm>> ranks_;
  std::vector<ChannelId> ring_fabric_;  // timed: [r]: fabric channel r -> r + 1
  std::atomic<bool> aborted_{false};  // seq_cst: paired with RankComm::in_op_
  mutable Mutex mu_;
  absl::Status abort_status_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int64_t, std::unique_ptr<OwningChannel<Buffer>>> p2p_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int64_t, ChannelId> p2p_fabric_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int64_t, std::unique_ptr<internal::A2aLink>> a2a_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rp::comm
