// rp::comm::EventCommStream: a device's comm stream run by the fabric instead of a thread
// (runtime/fabric.h "Event-driven LPs"). Ring collectives handed to it run one after another, in
// the order given, each starting at max(its ready time, the previous one's end) — the rule of a
// threaded comm stream — as comm::RingMachine state machines fed by the fabric the moment each of
// their messages commits. No thread, no context switch and no wake-up per message: a virtual-clock
// run with thousands of devices then costs one thread per device (its compute stream), and its
// data-parallel rings cost a commit and a handler call per message. Same messages at the same
// modeled times as a thread driving the same machine, so the timeline is unchanged.
//
// Messages of a collective that arrive before the stream reaches it (a peer ran ahead) wait in the
// stream's inbox, in order, and are consumed when it starts.
//
// Thread safety: Enqueue from the LP that feeds the stream (its compute stream), one call at a
// time; everything else runs under the fabric's lock (the handler and Fabric::Run), including the
// collectives' data plane and the `done` callbacks — except, with a DataLane, the all-reduces'
// data plane, which runs on the lane's thread. The buffers of a queued collective belong to the
// stream until its `done` runs (with a lane: until the lane ran the items pushed up to then).
//
// Lifetime: the stream must outlive every message the fabric may still deliver to its LP.
//
// Example (rank r of a DP group on device d, whose comm LP is lp):
//   EventCommStream stream(fabric, lp);
//   stream.Enqueue({.spec = spec, .buffers = {.in = g, .out = g, .work = g, .own_out = g + own},
//                   .ready = t, .send_channel = group.RingChannel(r),
//                   .recv_channel = group.RingChannel(r - 1),
//                   .done = [&](Fabric::Scope& s, const absl::StatusOr<CollectiveResult>& res) {
//                     if (res.ok()) s.Signal(gate, res->end);
//                   }});
#pragma once

#include <deque>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/ring_machine.h"
#include "runtime/fabric.h"

namespace rp::comm {

class EventCommStream {
 public:
  struct Collective {
    RingMachine::Spec spec;
    RingMachine::Buffers buffers;
    Nanos ready{0};
    ChannelId send_channel = -1;  // this rank -> the next (Communicator::RingChannel)
    ChannelId recv_channel = -1;  // the previous rank -> this rank
    // Named in stall reports while the collective waits (peer: the previous rank's device).
    WaitSite site;
    // Runs under the fabric's lock once the collective ended (its result) or failed (the
    // status, already naming rank, collective and peer). After a failure the stream runs
    // nothing more. Called once: it may move from the result (its spans).
    std::function<void(Fabric::Scope&, absl::StatusOr<CollectiveResult>&)> done;
    // The caller's name for it (e.g. a gradient bucket's index), given back with a data error
    // found on a lane (DataLane::WaitFor).
    int32_t tag = -1;
  };

  // The stream posts as `lp`. With lp_is_event_driven it registers as lp's handler
  // (Fabric::SetHandler: lp is a comm stream no thread runs) and reports lp's waits; otherwise lp
  // is run by a thread that awaits each collective's end itself (e.g. on a gate the `done`
  // callback signals: a compute stream running its TP all-reduces this way), and the stream only
  // handles `listen`, the channels its collectives receive on (Fabric::SetChannelHandler). Before
  // any message is posted.
  //
  // `lane` (optional; outliving the stream): the data plane of its all-reduces runs there
  // (comm/data_lane.h): a collective's `done` then reports its timing, and its buffers hold the
  // result once the lane ran the items pushed up to then (lane->pushed() read in `done`); a data
  // error found there is kept for the collective's device (DataLane::WaitFor), not given to
  // `done`.
  EventCommStream(Fabric* fabric, LpId lp, bool lp_is_event_driven,
                  const std::vector<ChannelId>& listen = {}, DataLane* lane = nullptr);
  EventCommStream(const EventCommStream&) = delete;
  EventCommStream& operator=(const EventCommStream&) = delete;

  // Queues `c`. The caller's fabric key must precede c.ready (its bound <= c.ready and a lower
  // tie rank than lp's), see Fabric::Run.
  void Enqueue(Collective c);

 private:
  struct Running {
    Collective collective;
    RingMachine machine;
  };
  void OnMessage(Fabric::Scope& scope, ChannelId channel, Delivery delivery);
  // Runs what can run: starts queued collectives, feeds waiting messages, ends finished ones.
  void Pump(Fabric::Scope& scope);
  absl::Status Post(Fabric::Scope& scope, std::vector<RingMachine::Send>& sends);
  void Fail(Fabric::Scope& scope, const absl::Status& status, const char* what);
  std::deque<Delivery>& Inbox(ChannelId channel);
  // Feeds one message to the running collective; false once the stream failed.
  bool Feed(Fabric::Scope& scope, Delivery& d);

  Fabric* const fabric_;
  const LpId lp_;
  const bool event_lp_;
  // Touched only under the fabric's lock.
  std::deque<Collective> queue_;
  std::optional<Running> running_;
  // Messages not consumed yet, per channel (a stream listens on one or two: a linear search).
  std::deque<std::pair<ChannelId, std::deque<Delivery>>> inbox_;  // stable on growth
  size_t buffered_ = 0;  // deliveries in inbox_, all channels
  Nanos prev_end_{0};
  bool failed_ = false;
  // Whether the fabric was told (Scope::Awaiting) that the running collective waits on its
  // channel: said once per collective, not after every message (the LP's wait site is another
  // cold line at thousands of streams).
  bool awaiting_said_ = false;
  SegmentPool pool_;  // received segments, reused for sends
  DataLane* const lane_;
  // Error contexts of the lane's collectives: the running one's, then retired ones kept until
  // the lane ran their last item (pushed() at their end), reused after.
  std::unique_ptr<DataLane::Context> context_;
  std::deque<std::pair<uint64_t, std::unique_ptr<DataLane::Context>>> retired_;
  uint64_t lane_collectives_ = 0;  // the lane's collectives started so far (Context::sequence)
};

}  // namespace rp::comm
