// Internal to comm/alltoall*.cc: the all-to-all of one rank, for one Run(). Words (block, bins,
// step, segment) as in comm/alltoall_steps.h, timing words as in comm/alltoall_timing.h; the
// protocols are described in comm/alltoall.h.
//   alltoall_runner.cc  the untimed protocol (lent views, acknowledgements) and what both share
//   alltoall_timed.cc   the timed protocol (owned copies posted to the fabric, PairwiseTimer)
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/alltoall_timing.h"
#include "comm/communicator.h"
#include "comm/ring_steps.h"
#include "runtime/time.h"

namespace rp::comm::internal {

// A received message's header against what the receiver expects: the same call (op_id, kind,
// codec), a block of `block` elements (-1 = not known yet), and message `segment` of `elems`
// elements (kCountsSegment: the counts, `elems` = bins). FailedPrecondition naming both sides'
// values; the caller adds rank, peer and step.
absl::Status CheckHeader(const A2aMsg& w, uint64_t op_id, OpKind kind, Codec codec,
                         int32_t segment, uint32_t elems, int64_t block);
// A timed message's bytes: elems elements of src as they travel (copied, or encoded in `codec`;
// `index` = the first element's index in the caller's block, for encode errors) into `wire`
// (SegmentWireBytes(codec, elems) bytes, 4-byte aligned). Encode's errors.
absl::Status ToWire(Codec codec, const float* src, size_t elems, size_t index, std::byte* wire);
// The same into a new buffer of at least one byte.
absl::StatusOr<std::unique_ptr<std::byte[]>> WireCopy(Codec codec, const float* src, size_t elems,
                                                      size_t index);
// The receive side of WireCopy: elems elements into dst.
void FromWire(Codec codec, const std::byte* wire, size_t elems, float* dst);

class AllToAllRunner {
 public:
  AllToAllRunner(RankComm* rc, OpKind kind, const CollectiveOptions& options,
                 const a2a::AllToAllWireModel& model, Nanos start);
  // On an exit without Finish (an error): leaves the op, then waits until no peer can still read
  // this rank's lent buffers (every message acknowledged) or no other rank is in a collective (the
  // group is aborted: they leave promptly). Bounded by the timeout. As RingRunner.
  ~AllToAllRunner();

  absl::Status Begin();
  // AllToAllV's counts: counts[p·bins, (p+1)·bins) go to peer p; each peer's arrive in
  // recv_counts[s·bins, (s+1)·bins) (this rank's own are copied). Timed: the first round.
  absl::Status ExchangeCounts(std::span<const int64_t> counts, int bins,
                              std::span<int64_t> recv_counts);
  // The payload: block p of `send` (elements [send_off[p], send_off[p + 1])) goes to rank p, and
  // block s of `recv` (recv_off likewise) comes from rank s. `empty_block_message`: AllToAll's
  // rule (alltoall_steps.h). Timed: the last round (starting when the counts round ended).
  absl::Status ExchangeBlocks(const float* send, std::span<const size_t> send_off, float* recv,
                              std::span<const size_t> recv_off, bool empty_block_message);
  // Waits until every message this rank sent was acknowledged (untimed), then counts the call.
  absl::Status Finish();
  const CollectiveResult& result() const { return result_; }

 private:
  std::string Prefix() const;
  absl::Status Fail(const absl::Status& s, const char* what, int peer, int step);
  absl::Status FailLocal(const absl::Status& s, const char* what, int peer, int step);
  // Checks a received message's header: the same call, and (segment, elems, block) as expected
  // (`block` -1 = not known yet).
  absl::Status Check(const A2aMsg& w, int peer, int step, int32_t segment, uint32_t elems,
                     int64_t block);

  // Untimed (alltoall_runner.cc).
  void PrepareStaging(std::span<const size_t> send_off, bool empty_block_message);
  absl::Status SendSegment(int dst, int step, const float* send, ring::Range out, int k);
  absl::Status Post(int peer, const A2aMsg& m, uint64_t wire_bytes, int step);
  absl::Status Receive(int peer, int step, int32_t segment, uint32_t elems, int64_t block,
                       Stamped<A2aMsg>* m);
  absl::Status Acknowledge(int peer, int step);
  void DrainAcks(int peer);

  // Timed (alltoall_timed.cc).
  absl::Status TimedCounts(std::span<const int64_t> counts, int bins,
                           std::span<int64_t> recv_counts);
  absl::Status TimedBlocks(const float* send, std::span<const size_t> send_off, float* recv,
                           std::span<const size_t> recv_off, bool empty_block_message);
  a2a::BlockShape ShapeOf(size_t real_elems, bool empty_block_message) const;
  // Posts `bytes` modeled bytes to `peer` ready at `ready` and pushes the owned copy of `payload`
  // (`payload_bytes` real wire bytes) behind it.
  absl::Status PostOwned(int peer, A2aMsg m, std::unique_ptr<std::byte[]> payload,
                         uint64_t payload_bytes, uint64_t bytes, Nanos ready, int step);
  // Awaits the next message from `peer` on the fabric (and its arrival, with a clock), pops it and
  // checks it; *timing gets its modeled timing.
  absl::Status ReceiveTimed(int peer, int step, int32_t segment, uint32_t elems, int64_t block,
                            Stamped<A2aMsg>* m, MessageTiming* timing);
  void AddRound(const a2a::PairwiseTimer& t);

  RankComm& rc_;
  Communicator& group_;
  const OpKind kind_;
  const Codec codec_;
  const std::chrono::nanoseconds timeout_;
  const size_t seg_;  // segment_elems
  const int n_, r_;
  const Nanos start_;
  const a2a::AllToAllWireModel model_;
  const bool timed_;
  Nanos round_start_;  // timed: where the next round starts
  bool began_ = false;
  bool finished_ = false;
  uint64_t op_id_ = 0;
  std::vector<size_t> stage_off_;  // per peer: byte offset of its block's slots in a2a_wire_
  size_t stride_ = 0;              // bytes per slot (the largest segment's wire bytes, 8-aligned)
  CollectiveResult result_;
};

}  // namespace rp::comm::internal
