// rp::comm::EventAllToAll: one rank's timed all-to-all-v run by the fabric instead of its thread
// (runtime/fabric.h "Event-driven LPs", as comm/comm_stream.h runs a compute stream's TP ring).
// The calling thread posts the first messages and awaits the end on a gate; every message into
// the rank is handed to this object the moment it commits, under the fabric's lock, in whichever
// thread commits it, and the sends it enables are posted there. So a rank parks once per call
// instead of once per pairwise step: an EP all-to-all over 64 ranks is two rounds of 63 steps,
// about 126 parks and wake-ups of the device thread with AllToAllV::Run.
//
// Same messages at the same modeled times as AllToAllV::Run on the same timed communicator, and
// the same bits (the same copies and codecs): the rank handles its receives in the same order
// (step-major, each step's messages in order, buffering a message that commits before the rank
// reaches it) and so drives the same a2a::PairwiseTimer; the fabric commits in key order whoever
// posts. Checks and errors are AllToAllV's (comm/alltoall.h), with rank, call, peer and step named.
//
// Every rank of the communicator must run its all-to-alls this way (the data travels with the
// fabric message, not on the communicator's links), on a timed communicator without a clock (a
// virtual-clock run; a real clock needs its thread to wait for each arrival).
//
// Thread safety: Run from the rank's thread (its LP), one call at a time; the handlers run under
// the fabric's lock. The object must outlive every message the fabric may still hand it.
//
// Example (rank r of an EP group, in its device thread):
//   EventAllToAll a2a(&group.rank(r));            // at setup, before any message is posted
//   RP_ASSIGN_OR_RETURN(CollectiveResult res,
//                       a2a.Run(rows, counts, bins, &recv, &recv_counts, options, wire, start,
//                               {.rank = device, .op = "EP all-to-all"}));
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/alltoall_timing.h"
#include "comm/communicator.h"
#include "runtime/fabric.h"
#include "runtime/time.h"

namespace rp::comm {

class EventAllToAll {
 public:
  // `rc`: a rank of a timed communicator (options().fabric set, no clock). Creates the rank's
  // links to and from every peer and hands the channels into it to the fabric
  // (Fabric::SetChannelHandler): before any message is posted on them. `rc` outlives the object.
  explicit EventAllToAll(RankComm* rc);
  ~EventAllToAll();
  EventAllToAll(const EventAllToAll&) = delete;
  EventAllToAll& operator=(const EventAllToAll&) = delete;

  // AllToAllV::Create's arguments, checked the same way, run from `start` (AllToAllV::Run's
  // result). `site` names the call in stall reports while the rank waits (rank, op, step); its
  // peer is kept current: the rank whose message the call awaits. Errors as AllToAllV::Run's,
  // naming rank, call, peer and step. A failed call ends this rank's part only (it drops the
  // messages that still come, and runs no more calls): its peers wait for its messages until the
  // caller aborts the fabric (Fabric::Abort; the executor does once a device fails), and then
  // return Aborted ("... aborted because the run failed: <the fabric's status>"), so the first
  // failure a run reports is the one that caused the others.
  absl::StatusOr<CollectiveResult> Run(std::span<const float> send,
                                       std::span<const int64_t> send_counts, int bins,
                                       std::vector<float>* recv, std::vector<int64_t>* recv_counts,
                                       const CollectiveOptions& options,
                                       const a2a::AllToAllWireModel& wire, Nanos start,
                                       const WaitSite& site);

 private:
  // The running call (state touched only under the fabric's lock).
  struct Call {
    std::span<const float> send;
    std::span<const int64_t> send_counts;
    int bins = 1;
    std::vector<float>* recv = nullptr;
    std::vector<int64_t>* recv_counts = nullptr;
    Codec codec = Codec::kFp32;
    uint64_t seg = 1;  // segment elements
    a2a::AllToAllWireModel wire;
    uint64_t op_id = 0;
    bool blocks = false;  // false: the counts round, true: the blocks round
    std::optional<a2a::PairwiseTimer> timer;
    int received = 0;  // messages of the timer's current step handled so far
    std::vector<size_t> send_off, recv_off;
    std::vector<std::vector<uint64_t>> send_bytes;  // blocks round, per step
    std::vector<int> recv_messages;                 // blocks round, per step
    CollectiveResult result;
    WaitSite site;
  };

  struct Payload;  // a message's header and bytes (alltoall_event.cc)
  // A payload with room for `bytes`: a received one kept for reuse (its room grown if need be),
  // else a new one.
  std::unique_ptr<Payload> TakePayload(uint64_t bytes);
  void OnMessage(Fabric::Scope& scope, int peer, Delivery delivery);
  // Handles what can be handled: buffered messages the call awaits, round ends, the call's end.
  void Pump(Fabric::Scope& scope);
  absl::Status Handle(Fabric::Scope& scope, int peer, Delivery& d);
  // Starts the blocks round once the counts are in (the receive buffer is sized then).
  absl::Status StartBlocks(Fabric::Scope& scope);
  absl::Status Post(Fabric::Scope& scope, std::vector<a2a::PairwiseTimer::Post>& posts);
  absl::Status PostCounts(Fabric::Scope& scope, const a2a::PairwiseTimer::Post& p);
  absl::Status PostBlock(Fabric::Scope& scope, const a2a::PairwiseTimer::Post& p);
  void AddRound();
  void End(Fabric::Scope& scope, absl::Status status);
  absl::Status Error(absl::Status s, const char* what, int peer, int step) const;
  absl::Status Check(const internal::A2aMsg& w, int peer, int step, int32_t segment, uint32_t elems,
                     int64_t block) const;
  int AwaitedPeer() const;

  RankComm& rc_;
  Fabric& fabric_;
  const int n_, r_;
  const LpId lp_;
  const GateId gate_;
  std::vector<ChannelId> to_;  // per peer: the channel this rank sends it on
  // Touched only under the fabric's lock (and by Run once the gate released it).
  struct Buffered {
    int peer = -1;
    Delivery delivery;
  };
  // Committed before the call reached them (a peer ran ahead), in commit order, so each peer's
  // are in its channel's order. Usually a few: a linear search finds the awaited peer's first.
  std::deque<Buffered> inbox_;
  std::optional<Call> call_;
  // Received payloads kept for the next posts: a rank receives about as many messages as it
  // sends, so most posts allocate nothing. Payloads move between ranks' pools (under the lock).
  std::vector<std::unique_ptr<Payload>> pool_;
  bool failed_ = false;   // a call failed: the run is aborted, messages are dropped
  absl::Status status_;   // the last call's outcome
  CollectiveResult done_;  // the last call's result (ok)
};

}  // namespace rp::comm
