// The predictor's EP all-to-all (predictor_sim.h): a MoE block's dispatch or combine as the
// emulator runs it (schedule/runner_ep.cc, comm/alltoall_timed.cc) — a counts round, then a blocks
// round, each an a2a::PairwiseTimer over the EP group, with the block sizes of the step's routing
// in the EP wire format (schedule/ep_wire.h, shared with the emulator).
#include "comm/alltoall_steps.h"
#include "schedule/ep_wire.h"
#include "schedule/predictor_sim.h"

namespace rp::schedule::internal {
namespace {

using comm::a2a::PairwiseTimer;

enum { kEpChannel = 4 };  // predictor_sim.cc's ChannelKind::kEp

}  // namespace

void Simulation::PostEp(int lp, const Device& d, const PairwiseTimer::Post& p) {
  const EpExchangeSim& x = *d.ep;
  const int n = static_cast<int>(x.group.size());
  const size_t to = static_cast<size_t>(comm::a2a::SendPeer(n, x.index, p.step));
  const int peer = x.group[to];
  Post(lp, d.ep_to[to],
       {.src = plan_.grid.DeviceOf(d.rank), .dst = plan_.grid.DeviceOf(peer), .bytes = p.bytes,
        .ready = p.ready, .step = opts_.step},
       -1);
}

// Starts the next round of d.ep (the counts, or once they ended, the blocks) and posts what its
// timer releases at once.
void Simulation::BeginEpRound(int dev) {
  Device& d = devs_[static_cast<size_t>(dev)];
  EpExchangeSim& x = *d.ep;
  if (!x.timer) {
    const int n = static_cast<int>(x.group.size());
    const uint64_t counts = comm::a2a::kCountBytes * static_cast<uint64_t>(x.bins);
    x.round = 0;
    x.timer.emplace(x.start, std::vector<std::vector<uint64_t>>(static_cast<size_t>(n - 1), {counts}),
                    std::vector<int>(static_cast<size_t>(n - 1), 1));
  } else {
    x.transfer += x.timer->transfer();
    x.peer += x.timer->peer_wait();
    const Nanos end = x.timer->end();
    x.round = 1;
    x.timer.emplace(end, x.block_bytes, x.block_messages);
  }
  for (const PairwiseTimer::Post& p : x.timer->Begin()) PostEp(LpOf(dev, 0), d, p);
}

bool Simulation::EpStep(int dev, const Device::Part& part, const PassStep& s) {
  Device& d = devs_[static_cast<size_t>(dev)];
  const int lp = LpOf(dev, 0);
  const int32_t oi = static_cast<int32_t>(d.pc);
  if (!d.ep) {
    Record(d, {.kind = IntervalKind::kCompute, .op = oi, .detail = part.detail,
               .start = d.segment_start, .end = d.cursor});
    EpExchangeSim x;
    x.group = plan_.EpGroup(d.rank, &x.index);
    if (d.ep_to.empty()) {
      for (int r : x.group) {
        d.ep_to.push_back(ChannelFor(kEpChannel, d.rank, r));
        d.ep_from.push_back(ChannelFor(kEpChannel, r, d.rank));
      }
    }
    x.start = d.cursor;
    const int n = static_cast<int>(x.group.size());
    const int per = plan_.options.model.moe.experts / n;
    const LayerPlan& layer =
        plan_.Chunk(d.coord.pp, part.chunk).layers[static_cast<size_t>(s.local_layer)];
    const int block = MoeBlockIndex(plan_.options.model, layer.layer);
    std::vector<int> replicas;
    for (int r : x.group) replicas.push_back(plan_.grid.CoordOf(r).dp);
    // Dispatch: EP rank a sends b the rows of a's tokens for b's experts; the combine returns them.
    const bool dispatch = s.moe_phase == 0;
    auto rows = [&](int from, int to) {
      return dispatch ? EpRows(*routing_, block, part.micro_batch, replicas, per, from, to)
                      : EpRows(*routing_, block, part.micro_batch, replicas, per, to, from);
    };
    // The emulator's block shapes (schedule/ep_wire.h): ep_codec, the row model, the segment.
    auto shape = [&](int64_t r) { return EpBlockShape(plan_, layer.width, r); };
    for (int step = 1; step < n; ++step) {
      const int dst = comm::a2a::SendPeer(n, x.index, step);
      const int src = comm::a2a::RecvPeer(n, x.index, step);
      x.block_bytes.push_back(shape(rows(x.index, dst)).AllBytes());
      x.block_messages.push_back(shape(rows(src, x.index)).messages());
    }
    x.bins = dispatch ? per : 1;  // count entries per peer (EpExchange::bins)
    d.ep.emplace(std::move(x));
    BeginEpRound(dev);
  }
  EpExchangeSim& x = *d.ep;
  const int n = static_cast<int>(x.group.size());
  while (true) {
    PairwiseTimer& t = *x.timer;
    while (!t.done()) {
      const size_t from = static_cast<size_t>(comm::a2a::RecvPeer(n, x.index, t.step()));
      Channel& ch = channels_[static_cast<size_t>(d.ep_from[from])];
      if (ch.committed.empty()) {
        ch.waiter = lp;
        return false;
      }
      const MessageTiming m = ch.committed.front();
      ch.committed.pop_front();
      std::vector<PairwiseTimer::Post> posts;
      t.OnReceive(m.arrival, m.ready, &posts);
      for (const PairwiseTimer::Post& p : posts) PostEp(lp, d, p);
    }
    if (x.round == 1) break;
    BeginEpRound(dev);
  }
  const PairwiseTimer& t = *x.timer;
  const Nanos transfer = x.transfer + t.transfer(), peer = x.peer + t.peer_wait();
  Record(d, {.kind = IntervalKind::kEpAllToAll, .op = oi, .detail = d.ep_calls++,
             .start = x.start, .end = t.end(), .transfer = transfer, .peer = peer,
             .comm = transfer});
  d.cursor = t.end();
  d.ep.reset();
  return true;
}

}  // namespace rp::schedule::internal
