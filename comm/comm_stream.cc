#include "comm/comm_stream.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace rp::comm {
namespace {

// The sends a message or a start enables, posted before the handler returns. Handlers run one at
// a time under the fabric's lock, in whichever thread commits: one buffer per thread stays in
// cache, where one per stream was a cold line a message at thousands of streams.
std::vector<RingMachine::Send>& Scratch() {
  thread_local std::vector<RingMachine::Send> sends;
  return sends;
}

}  // namespace

EventCommStream::EventCommStream(Fabric* fabric, LpId lp, bool lp_is_event_driven,
                                 const std::vector<ChannelId>& listen, DataLane* lane)
    : fabric_(fabric), lp_(lp), event_lp_(lp_is_event_driven), lane_(lane) {
  auto handler = [this](Fabric::Scope& scope, ChannelId channel, Delivery delivery) {
    OnMessage(scope, channel, std::move(delivery));
  };
  if (event_lp_) {
    fabric_->SetHandler(lp_, handler);
  } else {
    for (ChannelId c : listen) fabric_->SetChannelHandler(c, handler);
  }
}

void EventCommStream::Enqueue(Collective c) {
  fabric_->Run([&](Fabric::Scope& scope) {
    queue_.push_back(std::move(c));
    Pump(scope);
  });
}

std::deque<Delivery>& EventCommStream::Inbox(ChannelId channel) {
  for (auto& [c, box] : inbox_) {
    if (c == channel) return box;
  }
  return inbox_.emplace_back(channel, std::deque<Delivery>{}).second;
}

void EventCommStream::OnMessage(Fabric::Scope& scope, ChannelId channel, Delivery delivery) {
  if (failed_) return;
  // The common case: the running collective waits for exactly this message and nothing is
  // buffered (checked without touching the inbox: its lines are cold at thousands of streams).
  if (buffered_ == 0 && running_.has_value() && running_->collective.recv_channel == channel &&
      !running_->machine.done()) {
    if (!Feed(scope, delivery)) return;
  } else {
    Inbox(channel).push_back(std::move(delivery));
    ++buffered_;
  }
  Pump(scope);
}

bool EventCommStream::Feed(Fabric::Scope& scope, Delivery& d) {
  // A lane's stream leaves its payloads to the lane (not even their type is read here: a cold
  // line); its channels carry nothing but its ring's segments.
  const SegmentPayload* payload = lane_ != nullptr
                                      ? static_cast<const SegmentPayload*>(d.payload.get())
                                      : AsSegment(d.payload.get());
  if (payload == nullptr) {
    Fail(scope, absl::InternalError("a ring message without its data"), "receiving from");
    return false;
  }
  std::vector<RingMachine::Send>& sends = Scratch();
  sends.clear();
  absl::Status s = running_->machine.OnReceive(d.timing, *payload, &sends);
  if (s.ok() && running_->machine.lane_took_payload()) {
    (void)d.payload.release();  // the lane's now; it hands back one it has read
    if (std::unique_ptr<SegmentPayload> back = lane_->TakePayload()) pool_.Give(std::move(back));
  } else {
    pool_.Give(std::move(d.payload));
  }
  if (!s.ok()) {
    Fail(scope, s,
         s.code() == absl::StatusCode::kFailedPrecondition ? "receiving from" : "reducing data of");
    return false;
  }
  s = Post(scope, sends);
  if (!s.ok()) {
    Fail(scope, s, "posting to the fabric, next");
    return false;
  }
  return true;
}

absl::Status EventCommStream::Post(Fabric::Scope& scope, std::vector<RingMachine::Send>& sends) {
  for (RingMachine::Send& s : sends) {
    absl::StatusOr<uint64_t> ticket =
        scope.Post(lp_, running_->collective.send_channel, s.message, std::move(s.payload));
    if (!ticket.ok()) return ticket.status();
  }
  sends.clear();
  return absl::OkStatus();
}

void EventCommStream::Fail(Fabric::Scope& scope, const absl::Status& status, const char* what) {
  failed_ = true;
  const Collective& c = running_->collective;
  const RingMachine::Spec& spec = c.spec;
  absl::StatusOr<CollectiveResult> failed(
      RingRankError(status, spec.rank, spec.n, spec.device, spec.kind, spec.op_id, what,
                    c.site.peer, running_->machine.next_step()));
  if (c.done) c.done(scope, failed);
  queue_.clear();
  inbox_.clear();
  buffered_ = 0;
  running_.reset();
  if (context_ != nullptr) {
    lane_->Flush();
    retired_.emplace_back(lane_->pushed(), std::move(context_));
  }
  if (event_lp_) scope.Idle(lp_);
}

void EventCommStream::Pump(Fabric::Scope& scope) {
  while (!failed_ && !scope.aborted()) {
    if (!running_.has_value()) {
      if (queue_.empty()) {
        if (event_lp_) scope.Idle(lp_);
        return;
      }
      Collective c = std::move(queue_.front());
      queue_.pop_front();
      const Nanos start = std::max(c.ready, prev_end_);
      DataLane* lane = nullptr;
      if (lane_ != nullptr && c.spec.kind == ring::TimedKind::kAllReduce) {
        lane = lane_;
        if (!retired_.empty() && retired_.front().first <= lane_->completed()) {
          context_ = std::move(retired_.front().second);
          retired_.pop_front();
        } else {
          context_ = std::make_unique<DataLane::Context>();
        }
        const int n = c.spec.n;
        *context_ = {.rank = c.spec.rank, .device = c.spec.device, .n = n, .peer = c.site.peer,
                     .kind = c.spec.kind, .codec = c.spec.codec, .op_id = c.spec.op_id,
                     .count = c.spec.count, .residual = c.buffers.residual,
                     .sequence = lane_collectives_++, .tag = c.tag};
      }
      RingMachine machine(c.spec, c.buffers, start, &pool_, lane, lane ? context_.get() : nullptr);
      running_.emplace(Running{std::move(c), std::move(machine)});
      awaiting_said_ = false;
      std::vector<RingMachine::Send>& sends = Scratch();
      sends.clear();
      absl::Status s = running_->machine.Begin(&sends);
      if (s.ok()) s = Post(scope, sends);
      if (!s.ok()) return Fail(scope, s, "starting, next");
      continue;
    }
    RingMachine& machine = running_->machine;
    if (machine.done()) {
      absl::StatusOr<CollectiveResult> result = machine.TakeResult();
      prev_end_ = result->end;
      Collective c = std::move(running_->collective);
      running_.reset();
      if (context_ != nullptr) {
        lane_->Flush();  // its data, for whoever `done` tells to wait for it
        retired_.emplace_back(lane_->pushed(), std::move(context_));
      }
      if (c.done) c.done(scope, result);
      continue;
    }
    const Collective& c = running_->collective;
    std::deque<Delivery>* box = buffered_ == 0 ? nullptr : &Inbox(c.recv_channel);
    if (box == nullptr || box->empty()) {
      if (event_lp_ && !awaiting_said_) scope.Awaiting(lp_, c.recv_channel, c.site);
      awaiting_said_ = true;
      return;
    }
    Delivery d = std::move(box->front());
    box->pop_front();
    --buffered_;
    if (!Feed(scope, d)) return;
  }
}

}  // namespace rp::comm
