// The predictor's simulation: the emulator's rules (schedule/runner.h, runner_ops.cc) replayed on
// simulated LPs. Every rule here has its counterpart there; they record the same intervals.
#include "schedule/predictor_sim.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "runtime/status_macros.h"
#include "runtime/timing.h"

namespace rp::schedule::internal {
namespace {

using comm::ring::RingTimer;
using comm::ring::TimedKind;
using comm::ring::TimedShape;

enum ChannelKind { kAct = 0, kGrad = 1, kTpRing = 2, kDpRing = 3, kEp = 4 };

}  // namespace

Simulation::Simulation(const ExecutionPlan& plan, const PredictOptions& opts,
                       std::vector<int> ranks, int fold_period)
    : plan_(plan),
      opts_(opts),
      routing_(opts.routing),
      ranks_(std::move(ranks)),
      fold_period_(fold_period),
      fabric_(FabricModel::Create(plan.options.links, plan.grid.world_size(), plan.link_faults)
                  .value()) {
  dev_of_rank_.assign(static_cast<size_t>(plan.grid.world_size()), -1);
  devs_.resize(ranks_.size());
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Device& d = devs_[i];
    d.rank = ranks_[i];
    d.coord = plan.grid.CoordOf(d.rank);
    const size_t buckets = plan.ranks[static_cast<size_t>(d.coord.pp)].bucket_order.size();
    d.final.assign(buckets, false);
    d.launched.assign(buckets, false);
    d.buckets.resize(buckets);
    dev_of_rank_[static_cast<size_t>(d.rank)] = static_cast<int>(i);
  }
  lp_seq_.assign(2 * ranks_.size(), 0);
  queued_.assign(2 * ranks_.size(), false);
  if (routing_ == nullptr && plan.has_ep_exchanges()) {
    // Replicas 0 .. played − 1 (the EP all-to-alls read only theirs).
    balanced_ = BalancedRouting(plan.options.model, fold_period_ > 0 ? fold_period_ : plan.grid.shape().dp,
                                plan.options.program.num_micro_batches, plan.options.microbatch_size);
    routing_ = &balanced_;
  }
}

double Simulation::FactorOf(const Device& d, int compute_op) const {
  if (opts_.compute_op_factor) return opts_.compute_op_factor(d.rank, compute_op);
  if (!opts_.compute_factor.empty()) return opts_.compute_factor[static_cast<size_t>(d.rank)];
  return 1.0;
}

void Simulation::MakeRunnable(int lp) {
  if (queued_[static_cast<size_t>(lp)]) return;
  queued_[static_cast<size_t>(lp)] = true;
  runnable_.push_back(lp);
}

int Simulation::ChannelFor(int kind, int a, int b) {
  // Ranks are below 2^28 (predict's device cap is 2^20), kinds below 2^8.
  const uint64_t key = static_cast<uint64_t>(kind) << 56 | static_cast<uint64_t>(a) << 28 |
                       static_cast<uint64_t>(b);
  auto [it, inserted] = channel_ids_.emplace(key, 0);
  if (inserted) {
    it->second = static_cast<int>(channels_.size());
    channels_.emplace_back();
  }
  return it->second;
}

void Simulation::Post(int lp, int channel, const FabricMessage& m, int ingress_device) {
  const int dev = lp / 2;
  const LpId global = 2 * devs_[static_cast<size_t>(dev)].rank + lp % 2;
  uint32_t slot;
  if (free_slots_.empty()) {
    slot = static_cast<uint32_t>(messages_.size());
    messages_.emplace_back();
  } else {
    slot = free_slots_.back();
    free_slots_.pop_back();
  }
  messages_[slot] = PendingMessage{.msg = m, .channel = channel, .ingress_device = ingress_device};
  pending_.push(Pending{.time = m.ready.count(),
                        .tie = plan_.tie_rank[static_cast<size_t>(global)],
                        .seq = lp_seq_[static_cast<size_t>(lp)]++,
                        .slot = slot});
  devs_[static_cast<size_t>(dev)].modeled_bytes += m.bytes;
}

void Simulation::PostRing(int lp, Ring& ring, const RingTimer::Post& p) {
  Post(lp, ring.send_channel,
       {.src = ring.src_device, .dst = ring.dst_device, .bytes = p.bytes, .ready = p.ready,
        .step = opts_.step},
       ring.ingress_device);
}

bool Simulation::PumpRing(int lp, Ring& ring) {
  while (!ring.timer.done()) {
    Channel& ch = channels_[static_cast<size_t>(ring.recv_channel)];
    if (ch.committed.empty()) {
      ch.waiter = lp;
      return false;
    }
    const MessageTiming t = ch.committed.front();
    ch.committed.pop_front();
    RingTimer::Post next;
    if (ring.timer.OnReceive(t.arrival, t.ready, &next)) PostRing(lp, ring, next);
  }
  return true;
}

void Simulation::Record(Device& d, OpInterval iv) { d.intervals.push_back(iv); }

absl::Status Simulation::Run() {
  for (size_t i = 0; i < devs_.size(); ++i) MakeRunnable(LpOf(static_cast<int>(i), 0));
  while (true) {
    while (!runnable_.empty()) {
      const int lp = runnable_.back();
      runnable_.pop_back();
      queued_[static_cast<size_t>(lp)] = false;
      RP_RETURN_IF_ERROR(lp % 2 == 0 ? AdvanceCompute(lp / 2) : AdvanceComm(lp / 2));
    }
    if (pending_.empty()) break;
    const uint32_t slot = pending_.top().slot;
    pending_.pop();
    const PendingMessage p = messages_[slot];
    free_slots_.push_back(slot);
    const MessageTiming t = p.ingress_device >= 0 ? fabric_.CommitThrough(p.msg, p.ingress_device)
                                                  : fabric_.Commit(p.msg);
    if (IsSaturated(t.arrival)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "predict: a message of device ", p.msg.src, " arrives past the largest modeled time "
          "(", kMaxModeledNs, " ns): the configuration's times do not fit"));
    }
    transits_.Add(p.msg, t);
    Channel& ch = channels_[static_cast<size_t>(p.channel)];
    ch.committed.push_back(t);
    if (ch.waiter >= 0) {
      MakeRunnable(ch.waiter);
      ch.waiter = -1;
    }
  }
  for (const Device& d : devs_) {
    if (!d.finished || d.dp_ring.has_value() || !d.queue.empty()) {
      const auto& ops = plan_.options.program.ranks[static_cast<size_t>(d.coord.pp)];
      return absl::InternalError(absl::StrCat(
          "predict: rank ", d.rank, " stopped at op ", d.pc, " of ", ops.size(),
          d.pc < ops.size() ? absl::StrCat(" (", ToString(ops[d.pc], plan_.v), ")") : "",
          " with nothing left to commit"));
    }
    if (IsSaturated(d.cursor)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "predict: rank ", d.rank, "'s step does not fit in the largest modeled time"));
    }
  }
  return absl::OkStatus();
}

absl::Status Simulation::AdvanceCompute(int dev) {
  Device& d = devs_[static_cast<size_t>(dev)];
  const auto& ops = plan_.options.program.ranks[static_cast<size_t>(d.coord.pp)];
  const int lp = LpOf(dev, 0);
  while (d.pc < ops.size()) {
    const Op& op = ops[d.pc];
    const int32_t oi = static_cast<int32_t>(d.pc);
    switch (op.kind) {
      case OpKind::kForward:
      case OpKind::kBackward:
      case OpKind::kBackwardInput:
      case OpKind::kWeightGrad:
      case OpKind::kForwardBackward:
        if (!d.in_pass) BeginPass(d, op);
        if (!StepPass(dev, op)) return absl::OkStatus();
        d.in_pass = false;
        break;
      case OpKind::kSendAct:
      case OpKind::kSendGrad: {
        const bool grad = op.kind == OpKind::kSendGrad;
        const int peer = plan_.grid.StageRank(d.rank, op.peer);
        const int k = plan_.Chunk(d.coord.pp, op.chunk).model_stage;
        (grad ? d.grad_ready : d.act_ready).erase({op.micro_batch, grad ? k - 1 : k + 1});
        Post(lp, ChannelFor(grad ? kGrad : kAct, d.rank, peer),
             {.src = plan_.grid.DeviceOf(d.rank), .dst = plan_.grid.DeviceOf(peer),
              .bytes = op.bytes, .ready = d.cursor, .step = opts_.step},
             -1);
        Record(d, {.kind = IntervalKind::kSend, .op = oi, .start = d.cursor, .end = d.cursor});
        break;
      }
      case OpKind::kRecvAct:
      case OpKind::kRecvGrad: {
        const bool grad = op.kind == OpKind::kRecvGrad;
        const int peer = plan_.grid.StageRank(d.rank, op.peer);
        Channel& ch = channels_[static_cast<size_t>(ChannelFor(grad ? kGrad : kAct, peer, d.rank))];
        if (ch.committed.empty()) {
          ch.waiter = lp;
          return absl::OkStatus();
        }
        const MessageTiming t = ch.committed.front();
        ch.committed.pop_front();
        const Nanos reached = d.cursor, end = std::max(reached, t.arrival);
        d.cursor = end;
        const int k = plan_.Chunk(d.coord.pp, op.chunk).model_stage;
        (grad ? d.grad_ready : d.act_ready)[{op.micro_batch, k}] = t.arrival;
        const WaitSplit w = SplitWait(reached, end, t.ready);
        Record(d, {.kind = IntervalKind::kRecv, .op = oi, .start = reached, .end = end,
                   .transfer = w.transfer, .peer = w.peer, .comm = t.arrival - t.ready});
        break;
      }
      case OpKind::kTpAllReduce:
      case OpKind::kAllReduce: break;  // sizes only (schedule/plan.h)
      case OpKind::kOptimizerStep:
        if (!Optimizer(dev)) return absl::OkStatus();
        break;
    }
    ++d.pc;
  }
  d.finished = true;
  return absl::OkStatus();
}

void Simulation::BeginPass(Device& d, const Op& op) {
  const int K = plan_.options.program.num_model_stages();
  const bool has_f = op.kind == OpKind::kForward || op.kind == OpKind::kForwardBackward;
  const bool has_b = op.kind != OpKind::kForward;
  const OpKind b_kind = op.kind == OpKind::kForwardBackward ? OpKind::kBackward : op.kind;
  const int b_chunk = op.kind == OpKind::kForwardBackward ? op.backward_chunk : op.chunk;
  const int b_mb = op.kind == OpKind::kForwardBackward ? op.backward_micro_batch : op.micro_batch;
  Nanos ready{0};
  d.parts.clear();
  std::vector<Nanos> bases;
  if (has_f) {
    const int k = plan_.Chunk(d.coord.pp, op.chunk).model_stage;
    if (k > 0) {
      auto it = d.act_ready.find({op.micro_batch, k});
      if (it != d.act_ready.end()) {
        ready = std::max(ready, it->second);
        d.act_ready.erase(it);
      }
    }
    d.parts.push_back({.pass = 0, .chunk = op.chunk, .durations = {}, .micro_batch = op.micro_batch});
    bases.push_back(plan_.Chunk(d.coord.pp, op.chunk).op_cost[0]);
  }
  if (has_b) {
    const int k = plan_.Chunk(d.coord.pp, b_chunk).model_stage;
    if (b_kind != OpKind::kWeightGrad && k < K - 1) {
      auto it = d.grad_ready.find({b_mb, k});
      if (it != d.grad_ready.end()) {
        ready = std::max(ready, it->second);
        d.grad_ready.erase(it);
      }
    }
    const int pass = PassIndex(b_kind);
    d.parts.push_back({.pass = pass, .chunk = b_chunk,
                       .detail = op.kind == OpKind::kForwardBackward ? 1 : -1,
                       .durations = {}, .micro_batch = b_mb});
    bases.push_back(plan_.Chunk(d.coord.pp, b_chunk).op_cost[static_cast<size_t>(pass)]);
  }
  // One fault draw for the whole op; the parts cut its duration by their costs (as RunParts).
  Nanos base{0};
  for (Nanos b : bases) base += b;
  const double factor = FactorOf(d, d.compute_ops++);
  const Nanos duration = ScaleDuration(base, factor);
  uint64_t done = 0;
  Nanos prev{0};
  for (size_t i = 0; i < d.parts.size(); ++i) {
    done += static_cast<uint64_t>(bases[i].count());
    const Nanos share = ShareEnd(duration, done, static_cast<uint64_t>(base.count()));
    d.parts[i].durations = StepDurations(plan_.Chunk(d.coord.pp, d.parts[i].chunk), d.parts[i].pass,
                                         share - prev);
    prev = share;
  }
  d.cursor = std::max(d.cursor, ready);
  d.segment_start = d.cursor;
  d.part_index = 0;
  d.step_index = 0;
  d.tp_calls = 0;
  d.ep_calls = 0;
  d.in_pass = true;
}

// A TP all-reduce step of device `dev`'s pass part: the compute before it recorded, its ring started.
void Simulation::StartTpRing(int dev, const Device::Part& part, const ChunkPlan& chunk) {
  Device& d = devs_[static_cast<size_t>(dev)];
  const int32_t oi = static_cast<int32_t>(d.pc);
  Record(d, {.kind = IntervalKind::kCompute, .op = oi, .detail = part.detail,
             .start = d.segment_start, .end = d.cursor});
  // The TP group's ring neighbours (ParallelGrid::TpGroup's order, without building the group).
  const int T = plan_.grid.shape().tp, pos = d.coord.tp;
  const int next = plan_.grid.RankOf({d.coord.dp, d.coord.pp, (pos + 1) % T});
  const int prev = plan_.grid.RankOf({d.coord.dp, d.coord.pp, (pos + T - 1) % T});
  const TimedShape shape = TimedShape::Ring(
      T, chunk.tp_elements[static_cast<size_t>(part.pass)][static_cast<size_t>(d.tp_calls)],
      plan_.ring_segment_bytes / 4, comm::Codec::kFp32, plan_.options.reduce_gbps);
  d.tp_ring.emplace(Ring{.timer = RingTimer(TimedKind::kAllReduce, shape, T, pos, 0, d.cursor),
                         .send_channel = ChannelFor(kTpRing, d.rank, next),
                         .recv_channel = ChannelFor(kTpRing, prev, d.rank),
                         .src_device = plan_.grid.DeviceOf(d.rank),
                         .dst_device = plan_.grid.DeviceOf(next),
                         .ingress_device = -1,
                         .start = d.cursor});
  for (const RingTimer::Post& p : d.tp_ring->timer.Begin()) {
    PostRing(LpOf(dev, 0), *d.tp_ring, p);
  }
}

bool Simulation::StepPass(int dev, const Op& op) {
  Device& d = devs_[static_cast<size_t>(dev)];
  const int32_t oi = static_cast<int32_t>(d.pc);
  while (d.part_index < d.parts.size()) {
    const Device::Part& part = d.parts[d.part_index];
    const ChunkPlan& chunk = plan_.Chunk(d.coord.pp, part.chunk);
    const std::vector<PassStep>& steps = chunk.steps[static_cast<size_t>(part.pass)];
    const bool launches =
        plan_.options.overlap_grad_allreduce && static_cast<int>(d.pc) == chunk.last_grad_op;
    while (d.step_index < steps.size()) {
      const PassStep& s = steps[d.step_index];
      if (s.kind == PassStep::Kind::kLayer) {
        d.cursor = SaturatingAdd(d.cursor, part.durations[d.step_index]);
        ++d.step_index;
        if (launches && s.grads_final) {
          const size_t l = static_cast<size_t>(s.local_layer);
          for (const int b : {chunk.expert_bucket_of_layer[l], chunk.bucket_of_layer[l]}) {
            if (b >= 0) LaunchBucket(dev, part.chunk, b, d.cursor);
          }
        }
        continue;
      }
      if (s.kind == PassStep::Kind::kEpAllToAll) {
        if (!EpStep(dev, part, s)) return false;
        ++d.step_index;
        d.segment_start = d.cursor;
        continue;
      }
      if (!d.tp_ring) StartTpRing(dev, part, chunk);
      if (!PumpRing(LpOf(dev, 0), *d.tp_ring)) return false;
      const RingTimer& t = d.tp_ring->timer;
      Record(d, {.kind = IntervalKind::kTpAllReduce, .op = oi, .detail = d.tp_calls,
                 .start = d.tp_ring->start, .end = t.end(), .transfer = t.transfer() + t.reduce(),
                 .peer = t.peer_wait(), .comm = t.transfer() + t.reduce()});
      d.cursor = t.end();
      d.tp_ring.reset();
      ++d.step_index;
      ++d.tp_calls;
      d.segment_start = d.cursor;
    }
    Record(d, {.kind = IntervalKind::kCompute, .op = oi, .detail = part.detail,
               .start = d.segment_start, .end = d.cursor});
    d.segment_start = d.cursor;
    d.step_index = 0;
    d.tp_calls = 0;
    d.ep_calls = 0;
    ++d.part_index;
  }
  const int K = plan_.options.program.num_model_stages();
  if (op.kind == OpKind::kForward || op.kind == OpKind::kForwardBackward) {
    const int k = plan_.Chunk(d.coord.pp, op.chunk).model_stage;
    if (k < K - 1) d.act_ready[{op.micro_batch, k + 1}] = d.cursor;
  }
  if (op.kind == OpKind::kBackward || op.kind == OpKind::kBackwardInput ||
      op.kind == OpKind::kForwardBackward) {
    const int chunk = op.kind == OpKind::kForwardBackward ? op.backward_chunk : op.chunk;
    const int mb = op.kind == OpKind::kForwardBackward ? op.backward_micro_batch : op.micro_batch;
    const int k = plan_.Chunk(d.coord.pp, chunk).model_stage;
    if (k > 0) d.grad_ready[{mb, k - 1}] = d.cursor;
  }
  return true;
}

// The emulator's rule (runner_buckets.cc LaunchBucket): buckets start in the rank's bucket order,
// one final before those ahead of it when they start.
void Simulation::LaunchBucket(int dev, int chunk, int bucket, Nanos ready) {
  Device& d = devs_[static_cast<size_t>(dev)];
  const auto& order = plan_.ranks[static_cast<size_t>(d.coord.pp)].bucket_order;
  d.final[static_cast<size_t>(std::find(order.begin(), order.end(), std::make_pair(chunk, bucket)) -
                              order.begin())] = true;
  for (; d.next_launch < order.size() && d.final[d.next_launch]; ++d.next_launch) {
    StartBucket(dev, static_cast<int>(d.next_launch), ready);
  }
}

void Simulation::StartBucket(int dev, int o, Nanos ready) {
  Device& d = devs_[static_cast<size_t>(dev)];
  const std::pair<int, int>& at = plan_.ranks[static_cast<size_t>(d.coord.pp)].bucket_order[static_cast<size_t>(o)];
  const int chunk = at.first, bucket = at.second;
  d.launched[static_cast<size_t>(o)] = true;
  const BucketPlan& b = plan_.Chunk(d.coord.pp, chunk).buckets[static_cast<size_t>(bucket)];
  if (plan_.BucketGroup(d.rank, chunk, b, nullptr).size() == 1) {  // nothing to reduce
    d.buckets[static_cast<size_t>(o)] = BucketDone{.start = ready, .end = ready, .spans = {}, .done = true};
    return;
  }
  d.queue.push_back(Bucket{.order = o, .chunk = chunk, .index = bucket, .ready = ready});
  MakeRunnable(LpOf(dev, 1));
}

absl::Status Simulation::AdvanceComm(int dev) {
  Device& d = devs_[static_cast<size_t>(dev)];
  const int lp = LpOf(dev, 1);
  while (true) {
    if (!d.dp_ring) {
      if (d.queue.empty()) return absl::OkStatus();
      d.current = d.queue.front();
      d.queue.pop_front();
      const Nanos start = std::max(d.current.ready, d.comm_prev_end);
      const BucketPlan& b = plan_.Chunk(d.coord.pp, d.current.chunk).buckets[static_cast<size_t>(d.current.index)];
      int pos = 0;
      const std::vector<int> group = plan_.BucketGroup(d.rank, d.current.chunk, b, &pos);
      const int D = static_cast<int>(group.size());
      // One channel space per gradient group (two groups may join the same pair of devices).
      const int kind = kDpRing + 4 * (1 + plan_.BucketGroupId(d.rank, d.current.chunk, b));
      const int next = group[static_cast<size_t>((pos + 1) % D)];
      const int prev = group[static_cast<size_t>((pos + D - 1) % D)];
      const TimedShape shape = TimedShape::Ring(D, b.modeled_elements, plan_.ring_segment_bytes / 4,
                                                plan_.options.codec, plan_.options.reduce_gbps);
      Ring r{.timer = RingTimer(TimedKind::kAllReduce, shape, D, pos, 0, start),
             .src_device = plan_.grid.DeviceOf(d.rank),
             .dst_device = plan_.grid.DeviceOf(next),
             .start = start};
      if (fold_period_ > 0) {
        // Replica d is replica d mod fold_period's stand-in: a message to a replica not played is
        // the one the played stand-in of that replica receives from its previous member, through
        // the same egress and (standing in for the receiver's) the stand-in's ingress port — with
        // one replica played, each replica's message to itself.
        auto stand_in = [&](int rank) {
          const Coord c = plan_.grid.CoordOf(rank);
          return plan_.grid.RankOf({c.dp % fold_period_, c.pp, c.tp});
        };
        const int to = stand_in(next);
        r.send_channel = ChannelFor(kind, d.rank, to);
        r.recv_channel = ChannelFor(kind, stand_in(prev), d.rank);
        if (to != next) r.ingress_device = plan_.grid.DeviceOf(to);
      } else {
        r.send_channel = ChannelFor(kind, d.rank, next);
        r.recv_channel = ChannelFor(kind, prev, d.rank);
      }
      d.dp_ring.emplace(std::move(r));
      for (const RingTimer::Post& p : d.dp_ring->timer.Begin()) PostRing(lp, *d.dp_ring, p);
    }
    if (!PumpRing(lp, *d.dp_ring)) return absl::OkStatus();
    const RingTimer& t = d.dp_ring->timer;
    BucketDone& done = d.buckets[static_cast<size_t>(d.current.order)];
    done = BucketDone{.start = d.dp_ring->start, .end = t.end(), .transfer = t.transfer(),
                      .reduce = t.reduce(), .spans = {}, .done = true};
    for (const RingTimer::Span& sp : t.spans()) done.spans.push_back({sp.start, sp.end, sp.peer});
    d.comm_prev_end = t.end();
    d.dp_ring.reset();
    if (d.at_optimizer) MakeRunnable(LpOf(dev, 0));
  }
}

bool Simulation::Optimizer(int dev) {
  Device& d = devs_[static_cast<size_t>(dev)];
  const RankPlan& rp = plan_.ranks[static_cast<size_t>(d.coord.pp)];
  if (!d.at_optimizer) {
    for (size_t o = 0; o < rp.bucket_order.size(); ++o) {
      if (!d.launched[o]) LaunchBucket(dev, rp.bucket_order[o].first, rp.bucket_order[o].second, d.cursor);
    }
    d.at_optimizer = true;
  }
  for (const BucketDone& b : d.buckets) {
    if (!b.done) return false;
  }
  const int32_t oi = static_cast<int32_t>(d.pc);
  const Nanos reached = d.cursor;
  Nanos ar_end = reached;
  std::vector<WaitSpan> spans;
  for (size_t o = 0; o < d.buckets.size(); ++o) {
    const BucketDone& b = d.buckets[o];
    ar_end = std::max(ar_end, b.end);
    spans.insert(spans.end(), b.spans.begin(), b.spans.end());
    Record(d, {.kind = IntervalKind::kGradAllReduce, .op = oi, .detail = static_cast<int32_t>(o),
               .start = b.start, .end = b.end, .comm = b.transfer + b.reduce});
  }
  const WaitSplit w = SplitBySpans(reached, ar_end, spans);
  Record(d, {.kind = IntervalKind::kGradWait, .op = oi, .start = reached, .end = ar_end,
             .transfer = w.transfer, .peer = w.peer});
  d.cursor = ar_end;
  const double factor = FactorOf(d, d.compute_ops++);
  const Nanos start = d.cursor;
  d.cursor = SaturatingAdd(d.cursor, ScaleDuration(plan_.OptimizerCost(d.coord.pp), factor));
  Record(d, {.kind = IntervalKind::kOptimizer, .op = oi, .start = start, .end = d.cursor});
  for (BucketDone& b : d.buckets) b = BucketDone{};
  d.at_optimizer = false;
  return true;
}

}  // namespace rp::schedule::internal
