#include "comm/ring_machine.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/status_macros.h"

namespace rp::comm {

const char* TimedKindName(ring::TimedKind kind) {
  switch (kind) {
    case ring::TimedKind::kAllReduce: return "all-reduce";
    case ring::TimedKind::kReduceScatter: return "reduce-scatter";
    case ring::TimedKind::kAllGather: return "all-gather";
    case ring::TimedKind::kBroadcast: return "broadcast";
  }
  return "collective";
}

namespace {

ring::TimedShape ShapeOf(const RingMachine::Spec& s) {
  const uint64_t modeled = s.model.elements == WireModel::kRealCount ? s.count : s.model.elements;
  return s.kind == ring::TimedKind::kBroadcast
             ? ring::TimedShape::Chain(modeled, s.segment_elems, s.codec)
             : ring::TimedShape::Ring(s.n, modeled, s.segment_elems, s.codec, s.model.reduce_gbps);
}

}  // namespace

RingMachine::RingMachine(const Spec& spec, const Buffers& buffers, Nanos start, SegmentPool* pool,
                         DataLane* lane, const DataLane::Context* lane_context)
    : spec_(spec),
      buffers_(buffers),
      start_(start),
      pool_(pool),
      lane_(lane),
      lane_context_(lane_context),
      shape_(ShapeOf(spec)),
      segments_(shape_.segments()),
      chunk_base_(spec.n > 0 ? spec.count / static_cast<size_t>(spec.n) : 0),
      chunk_extra_(spec.n > 0 ? spec.count % static_cast<size_t>(spec.n) : 0),
      timer_(spec.kind, shape_, spec.n, spec.rank, spec.root, start),
      phase_steps_(spec.n - 1),
      own_(ring::ChunkRange(spec.count, spec.n, spec.rank)) {}

RingMachine::StepPlan RingMachine::ReduceScatterStep(int s) const {
  const int n = spec_.n, r = spec_.rank;
  StepPlan p;
  p.step = s;
  p.send_chunk = Wrap(r - 1 - s);  // ring::ReduceScatterSendChunk(n, r, s)
  p.recv_chunk = Wrap(r - 2 - s);  // ring::ReduceScatterRecvChunk(n, r, s)
  p.send = Chunk(p.send_chunk);
  p.recv = Chunk(p.recv_chunk);
  p.send_src = s == 0 ? buffers_.in : buffers_.work;  // step 0 sends this rank's own data
  p.feedback = spec_.error_feedback && spec_.codec != Codec::kFp32;
  p.reduce = true;
  p.add = buffers_.in;
  const bool last = s == n - 2;  // the reduced own chunk goes to own_out
  p.dst = last ? buffers_.own_out : buffers_.work;
  p.dst_offset = last ? p.recv.begin : 0;
  return p;
}

RingMachine::StepPlan RingMachine::AllGatherStep(int s) const {
  const int r = spec_.rank;
  const bool lossy = spec_.codec != Codec::kFp32;
  StepPlan p;
  p.step = s;
  p.send_chunk = Wrap(r - s);      // ring::AllGatherSendChunk(n, r, s)
  p.recv_chunk = Wrap(r - 1 - s);  // ring::AllGatherRecvChunk(n, r, s)
  p.send = Chunk(p.send_chunk);
  p.recv = Chunk(p.recv_chunk);
  p.send_src = buffers_.out;
  p.adopt = s == 0 && lossy ? buffers_.out : nullptr;  // the owner adopts what it sends
  p.feedback = s == 0 && lossy && spec_.error_feedback;
  p.dst = buffers_.out;
  return p;
}

RingMachine::StepPlan RingMachine::BroadcastStep() const {
  const bool root = spec_.rank == spec_.root;
  StepPlan p;
  p.send = p.recv = ring::Range{0, spec_.count};
  p.send_src = root && buffers_.in != nullptr ? buffers_.in : buffers_.out;
  p.adopt = root && spec_.codec != Codec::kFp32 ? buffers_.out : nullptr;
  p.dst = buffers_.out;
  return p;
}

RingMachine::StepPlan RingMachine::Plan(int t) const {
  switch (spec_.kind) {
    case ring::TimedKind::kAllReduce:
      return t < phase_steps_ ? ReduceScatterStep(t) : AllGatherStep(t - phase_steps_);
    case ring::TimedKind::kReduceScatter: return ReduceScatterStep(t);
    case ring::TimedKind::kAllGather: return AllGatherStep(t);
    case ring::TimedKind::kBroadcast: return BroadcastStep();
  }
  return BroadcastStep();
}

int RingMachine::next_step() const {
  const int t = timer_.received() / segments_;
  if (spec_.kind == ring::TimedKind::kAllReduce && t >= phase_steps_) return t - phase_steps_;
  return t;
}

absl::Status RingMachine::Begin(std::vector<Send>* sends) {
  if (spec_.n <= 1) return absl::OkStatus();
  if (spec_.kind == ring::TimedKind::kBroadcast && spec_.rank == spec_.root &&
      spec_.codec == Codec::kFp32 && buffers_.in != nullptr && buffers_.in != buffers_.out &&
      spec_.count > 0) {
    std::memcpy(buffers_.out, buffers_.in, spec_.count * sizeof(float));
  }
  starting_ = true;
  for (const ring::RingTimer::Post& post : timer_.Begin()) {
    RP_RETURN_IF_ERROR(MakeSend(Plan(post.step), post.segment, post, sends));
  }
  starting_ = false;
  return absl::OkStatus();
}

absl::Status RingMachine::MakeSend(const StepPlan& p, int k, const ring::RingTimer::Post& post,
                                   std::vector<Send>* sends) {
  const ring::Range g = Segment(p.send, k);
  const uint64_t bytes = SegmentWireBytes(spec_.codec, g.size);
  std::unique_ptr<SegmentPayload> payload =
      pool_ != nullptr ? pool_->Take() : std::make_unique_for_overwrite<SegmentPayload>();
  if (lane_ != nullptr) {
    // The lane writes the header and the bytes: this thread does not touch the payload (a cold
    // line a message at thousands of streams).
    lane_->Push({.op = p.feedback ? DataLane::Item::Op::kEncodeFeedback : DataLane::Item::Op::kEncode,
                 .codec = spec_.codec, .starting = starting_, .n = static_cast<uint32_t>(g.size),
                 .ring_step = next_step(), .step = p.step, .chunk = p.send_chunk, .segment = k,
                 .first = g.begin, .src = p.send_src + g.begin,
                 .dst = p.adopt != nullptr ? p.adopt + g.begin : nullptr,
                 .payload = payload.get(), .context = lane_context_});
  } else {
    payload->op_id = spec_.op_id;
    payload->count = spec_.count;
    payload->elems = static_cast<uint32_t>(g.size);
    payload->step = p.step;
    payload->chunk = p.send_chunk;
    payload->segment = k;
    payload->kind = spec_.kind;
    payload->codec = spec_.codec;
  }
  if (g.size > 0 && lane_ == nullptr) {
    RP_RETURN_IF_ERROR(EncodeSegment(spec_.codec, p.send_src + g.begin, g.size,
                                     p.feedback ? buffers_.residual + g.begin : nullptr,
                                     payload->Reserve(bytes), g.begin,
                                     p.adopt != nullptr ? p.adopt + g.begin : nullptr));
  }
  wire_bytes_ += bytes;
  modeled_bytes_ += post.bytes;
  ++messages_;
  sends->push_back(Send{.message = {.src = spec_.device, .dst = spec_.next_device,
                                    .bytes = post.bytes, .ready = post.ready,
                                    .step = spec_.model.step},
                        .payload = std::move(payload)});
  return absl::OkStatus();
}

absl::Status EncodeSegment(Codec codec, const float* src, size_t n, float* residual,
                           std::byte* wire, uint64_t first, float* adopt) {
  if (residual != nullptr) {
    RP_RETURN_IF_ERROR(EncodeWithFeedback(codec, src, n, residual, wire, first));
  } else if (codec == Codec::kFp32) {
    std::memcpy(wire, src, n * sizeof(float));
  } else {
    RP_RETURN_IF_ERROR(Encode(codec, src, n, wire, first));
  }
  if (adopt != nullptr) Decode(codec, wire, n, adopt);
  return absl::OkStatus();
}

absl::Status DecodeSegment(Codec codec, const float* add, const std::byte* wire, size_t n,
                           float* dst, uint64_t first) {
  if (add != nullptr) return DecodeAdd(codec, add, wire, n, dst, first);
  Decode(codec, wire, n, dst);
  return absl::OkStatus();
}

absl::Status RingRankError(const absl::Status& status, int rank, int n, int device,
                           ring::TimedKind kind, uint64_t op_id, const char* what, int peer_device,
                           int ring_step) {
  const int prev = (rank + n - 1) % n;
  return absl::Status(status.code(),
                      absl::StrCat("rank ", rank, " (device ", device, ") ", TimedKindName(kind),
                                   " #", op_id, " ", what, " rank ", prev, " (device ", peer_device,
                                   ") at ring step ", ring_step, ": ", status.message()));
}

absl::Status CheckSegment(const SegmentPayload& m, uint64_t op_id, ring::TimedKind kind,
                          uint64_t count, Codec codec, int32_t step, int32_t chunk, int32_t segment,
                          size_t elems) {
  if (m.op_id != op_id || m.kind != kind || m.count != count || m.codec != codec) {
    return absl::FailedPreconditionError(absl::StrCat(
        "mismatched collectives: this rank runs ", TimedKindName(kind), " #", op_id, " of ",
        count, " elements with ", CodecName(codec), ", the peer sent ", TimedKindName(m.kind),
        " #", m.op_id, " of ", m.count, " elements with ", CodecName(m.codec)));
  }
  if (m.step != step || m.chunk != chunk || m.segment != segment || m.elems != elems) {
    return absl::FailedPreconditionError(absl::StrCat(
        "mismatched segments (is segment_bytes equal on all ranks?): expected step ", step,
        " chunk ", chunk, " segment ", segment, " of ", elems, " elements, got step ", m.step,
        " chunk ", m.chunk, " segment ", m.segment, " of ", m.elems, " elements"));
  }
  return absl::OkStatus();
}

absl::Status RingMachine::Check(const SegmentPayload& m, const StepPlan& p, int k,
                                size_t elems) const {
  return CheckSegment(m, spec_.op_id, spec_.kind, spec_.count, spec_.codec, p.step, p.recv_chunk,
                      k, elems);
}

absl::Status RingMachine::OnReceive(const MessageTiming& timing, const SegmentPayload& payload,
                                    std::vector<Send>* sends) {
  if (done()) {
    return absl::FailedPreconditionError(
        absl::StrCat("a message after the last receive of ", TimedKindName(spec_.kind), " #",
                     spec_.op_id));
  }
  const int received = timer_.received();
  const int t = segments_ == 1 ? received : received / segments_;
  const int k = segments_ == 1 ? 0 : received % segments_;
  const StepPlan p = Plan(t);
  const ring::Range g = Segment(p.recv, k);
  if (lane_ != nullptr) {
    // The lane checks the header, reads the bytes, then keeps the payload for reuse (the caller
    // lets go of it: lane_took_payload).
    DataLane::Item it{.op = p.reduce ? DataLane::Item::Op::kDecodeAdd : DataLane::Item::Op::kDecode,
                      .codec = spec_.codec, .n = static_cast<uint32_t>(g.size),
                      .ring_step = p.step, .step = p.step, .chunk = p.recv_chunk, .segment = k,
                      .first = g.begin,
                      .payload = const_cast<SegmentPayload*>(&payload), .context = lane_context_};
    if (p.reduce) {
      it.src = p.add + g.begin;
      it.dst = p.dst + (g.begin - p.dst_offset);
    } else {
      it.dst = p.dst + g.begin;
    }
    lane_->Push(it);
  } else {
    RP_RETURN_IF_ERROR(Check(payload, p, k, g.size));
  }
  if (g.size > 0 && lane_ == nullptr) {
    RP_RETURN_IF_ERROR(DecodeSegment(spec_.codec, p.reduce ? p.add + g.begin : nullptr,
                                     payload.data(), g.size,
                                     p.dst + (g.begin - (p.reduce ? p.dst_offset : 0)), g.begin));
  }
  ring::RingTimer::Post next;
  if (timer_.OnReceive(timing.arrival, timing.ready, &next)) {
    const StepPlan np = spec_.kind == ring::TimedKind::kBroadcast ? BroadcastStep() : Plan(next.step);
    RP_RETURN_IF_ERROR(MakeSend(np, next.segment, next, sends));
  }
  return absl::OkStatus();
}

CollectiveResult RingMachine::TakeResult() {
  CollectiveResult r;
  r.start = start_;
  r.end = timer_.end();
  r.wire_bytes = wire_bytes_;
  r.modeled_bytes = modeled_bytes_;
  r.transfer = timer_.transfer();
  r.peer_wait = timer_.peer_wait();
  r.reduce = timer_.reduce();
  r.spans = timer_.TakeSpans();
  r.messages = messages_;
  return r;
}

}  // namespace rp::comm
