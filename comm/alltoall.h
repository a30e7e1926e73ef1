// All-to-all collectives on real FP32 buffers: one small class per algorithm.
//
//   AllToAll   every rank sends block p of its buffer (all blocks of one size) to rank p; recv
//              block p holds what rank p sent to this rank.
//   AllToAllV  the same with blocks of any size, described by n·bins element counts (bins count
//              entries per peer, e.g. tokens per expert of the peer); the counts travel first
//              (one counts message per peer), then the payload; recv and recv_counts are filled.
//
// Words (block, bins, step, segment) as defined in comm/alltoall_steps.h. Each class: static
// Create(...) validates (InvalidArgument naming the field) and returns the operation; Run(start)
// executes it on the calling rank's thread and must be called on every rank of the group.
//
// Protocol. Each ordered pair of ranks has its own link (data one way, acknowledgements back;
// created on first use). Step s = 1 .. n − 1 exchanges blocks with the pair (r + s, r − s): the
// rank sends segment k of its block, then receives segment k of the incoming block, for k = 0, 1,
// ... (the ring's rule: before blocking on segment k it has sent segments 0..k, so the permutation
// cycles of a step cannot deadlock with links of capacity >= 2; a rank in a later step has sent
// everything of the earlier ones). Messages are lent views — of the caller's FP32 buffer, of the
// counts, or, for lossy codecs, of the rank's staging buffer the segments are encoded into — and
// the receiver acknowledges each one once it has copied or decoded it; Run returns only after
// every message it sent was acknowledged. Block r is copied locally (no wire, no codec).
//
// Exactness: FP32 payloads arrive bit for bit; a lossy codec's element equals
// Decode(Encode(segment)) of the sender's segment (comm/codec.h), whichever rank sends it.
//
// Timed communicators (options().fabric set; comm/communicator.h "Timed communicators"). Every
// message is a copy of its bytes (encoded for lossy codecs) that the receiver frees, on an unbounded
// link, and a fabric message with its MODELED size (AllToAllWireModel: a block's real elements
// stand for modeled ones, e.g. a token row of width d for the described model's token; the real
// block is cut into the same K messages as the modeled one, comm/alltoall_timing.h). The sender
// posts each message the moment its ready time is known and never waits for its receiver; the
// receiver awaits the fabric's timing (and, with a clock, the arrival), then takes the data. Each
// round is a pairwise exchange of n − 1 steps timed by a2a::PairwiseTimer: step 1's messages are
// ready at the round's start, step s + 1's once step s's receives have arrived. AllToAll is one
// round from `start`; AllToAllV two: the counts (one message of bins · 8 bytes per step, modeled
// as sent), then the blocks from the counts' end. result.end = when the last message arrived (on
// an uncontended fabric the closed form of docs/collectives.md "All-to-all", to the nanosecond);
// result.transfer / peer_wait split [start, end) as for the ring (a late peer is peer wait),
// result.spans list it, result.modeled_bytes what the fabric timed. Untimed communicators keep the
// lent protocol above; result.end == start.
//
// Errors (any aborts the group, see comm/communicator.h): FailedPrecondition for mismatched calls
// (another collective, codec or block size on the peer; different bins; different segment_bytes;
// names both sides), DeadlineExceeded (a peer did not arrive within options.timeout; names waiting
// rank, peer and step), OutOfRange (a lossy codec cannot represent a value; names the element),
// Aborted (another rank failed first). error_feedback is not supported (InvalidArgument).
//
// Example (in rank r's thread; EP dispatch of rows of width d with per-expert counts):
//   RP_ASSIGN_OR_RETURN(auto op, AllToAllV::Create(&comm->rank(r), rows, counts_in_elems,
//                                                  /*bins=*/experts_per_rank, &recv,
//                                                  &recv_counts, options));
//   RP_RETURN_IF_ERROR(op.Run(start));
//   Nanos end = op.result().end;
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/alltoall_timing.h"
#include "comm/communicator.h"
#include "runtime/time.h"

namespace rp::comm {

using a2a::AllToAllWireModel;

class AllToAll {
 public:
  // send.size() == recv.size(), a multiple of the group size n (block = size / n). send and recv
  // must not overlap. `comm` must outlive the op. `wire`: modeled sizes (timed; equal on every
  // rank; unit_elements >= 1).
  static absl::StatusOr<AllToAll> Create(RankComm* comm, std::span<const float> send,
                                         std::span<float> recv, const CollectiveOptions& options,
                                         const AllToAllWireModel& wire = {});
  [[nodiscard]] absl::Status Run(Nanos start = kZeroTime);
  const CollectiveResult& result() const { return result_; }

 private:
  AllToAll(RankComm* comm, std::span<const float> send, std::span<float> recv,
           const CollectiveOptions& options, const AllToAllWireModel& wire)
      : comm_(comm), send_(send), recv_(recv), options_(options), wire_(wire) {}
  RankComm* comm_;
  std::span<const float> send_;
  std::span<float> recv_;
  CollectiveOptions options_;
  AllToAllWireModel wire_;
  CollectiveResult result_;
};

class AllToAllV {
 public:
  // send_counts: n·bins entries >= 0 (bins >= 1) summing to send.size(); block p is the next
  // Σ_b send_counts[p·bins + b] elements of send. recv and recv_counts (non-null, not aliasing
  // send) are resized and filled: recv_counts[s·bins + b] as rank s sent them, recv = the blocks
  // from ranks 0..n−1 back to back. `comm`, send, send_counts, recv and recv_counts must outlive
  // the op. `wire` as AllToAll's.
  static absl::StatusOr<AllToAllV> Create(RankComm* comm, std::span<const float> send,
                                          std::span<const int64_t> send_counts, int bins,
                                          std::vector<float>* recv,
                                          std::vector<int64_t>* recv_counts,
                                          const CollectiveOptions& options,
                                          const AllToAllWireModel& wire = {});
  [[nodiscard]] absl::Status Run(Nanos start = kZeroTime);
  const CollectiveResult& result() const { return result_; }

 private:
  AllToAllV(RankComm* comm, std::span<const float> send, std::span<const int64_t> send_counts,
            int bins, std::vector<float>* recv, std::vector<int64_t>* recv_counts,
            const CollectiveOptions& options, const AllToAllWireModel& wire)
      : comm_(comm),
        send_(send),
        send_counts_(send_counts),
        bins_(bins),
        recv_(recv),
        recv_counts_(recv_counts),
        options_(options),
        wire_(wire) {}
  RankComm* comm_;
  std::span<const float> send_;
  std::span<const int64_t> send_counts_;
  int bins_;
  std::vector<float>* recv_;           // caller's; filled by Run
  std::vector<int64_t>* recv_counts_;  // caller's; filled by Run
  CollectiveOptions options_;
  AllToAllWireModel wire_;
  CollectiveResult result_;
};

}  // namespace rp::comm
