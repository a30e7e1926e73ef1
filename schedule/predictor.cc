#include "schedule/predictor.h"

#include <cmath>

#include <algorithm>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "runtime/status_macros.h"
#include "schedule/validator.h"

namespace rp::schedule {
namespace {

constexpr int kNumClasses = 3;  // LinkClass values

uint8_t ClassBit(LinkClass c) { return static_cast<uint8_t>(1u << static_cast<int>(c)); }

LinkParams ParamsOfClass(const LinkSpec& spec, int cls) {
  switch (static_cast<LinkClass>(cls)) {
    case LinkClass::kSelf: return LinkParams{};
    case LinkClass::kIntraNode: return spec.intra_node;
    case LinkClass::kInterNode: return spec.inter_node;
  }
  return LinkParams{};
}

// Ring all-reduce time over a group whose ring uses the link classes in `mask`: the slowest class.
absl::StatusOr<Nanos> RingTime(int n, uint64_t bytes, uint8_t mask, const LinkSpec& spec,
                               const RingModel& ring) {
  Nanos worst{0};
  for (int c = 0; c < kNumClasses; ++c) {
    if (!(mask & (1u << c))) continue;
    RP_ASSIGN_OR_RETURN(RingCost rc, RingAllReduceCost(n, (bytes + 3) / 4, ParamsOfClass(spec, c), ring));
    worst = std::max(worst, rc.time);
  }
  return worst;
}

// Per-op durations of one pipeline rank.
struct RankCosts {
  Nanos f, b, bi, w, opt;
};

// [J] Channel of messages into device `l` from its next (or previous) pipeline neighbour: with two
// chunks per rank (V placement, two directions) a device receives activations (and gradients) from
// both neighbours, so one FIFO per (receiver, sender side, kind). Both sides compute "the sender is
// the receiver's next" (with p = 2 the two neighbours are one device and the answer is always yes).
size_t ChannelIndex(int l, bool from_next, bool grad) {
  return (static_cast<size_t>(l) * 2 + (from_next ? 1 : 0)) * 2 + (grad ? 1 : 0);
}

struct Message {
  Nanos arrival;
  Nanos link;  // arrival − the send's start: the wire time plus any wait for the link
};

// Simulates the p·TP devices of one DP replica up to (not including) their optimizer step.
// Local device index l = s·TP + t.
// A compute cost on a device slowed by `factor` (FaultInjector::ComputeDuration's rounding).
Nanos ScaleCost(Nanos base, double factor) {
  if (factor == 1.0) return base;
  return Nanos(static_cast<int64_t>(std::llround(static_cast<double>(base.count()) * factor)));
}

class ReplicaSim {
 public:
  struct Links {
    std::vector<LinkParams> to_next, to_prev;  // per l: link to the same-t device of stage s±1
    std::vector<uint8_t> tp_mask;              // per s: classes on the TP ring
  };

  // `op_factors`: empty, or per l the factor of each compute op (PredictOptions::compute_op_factor),
  // which then replaces `factors`.
  ReplicaSim(const Program& prog, const std::vector<RankCosts>& costs, int tp, const Links& links,
             const PredictOptions& opts, std::vector<double> factors,
             const std::vector<std::vector<double>>* op_factors)
      : prog_(prog),
        costs_(costs),
        tp_(tp),
        links_(links),
        opts_(opts),
        factors_(std::move(factors)),
        op_factors_(op_factors) {
    const int n = prog.num_ranks * tp;
    dev_.assign(n, Dev{});
    channels_.resize(static_cast<size_t>(n) * 4);
    link_free_.assign(static_cast<size_t>(n) * 2, Nanos(0));
    tp_count_.assign(prog.num_ranks, 0);
    tp_max_.assign(prog.num_ranks, Nanos(0));
    tp_cache_.assign(prog.num_ranks, {~uint64_t{0}, Nanos(0)});
    ready_.resize(n);
    timeline_.resize(n);
    for (int l = 0; l < n; ++l) timeline_[l].resize(prog.ranks[l / tp].size());
  }

  absl::Status Run() {
    const int n = static_cast<int>(dev_.size());
    work_.clear();
    for (int l = n - 1; l >= 0; --l) work_.push_back(l);
    while (!work_.empty()) {
      const int l = work_.back();
      work_.pop_back();
      RP_RETURN_IF_ERROR(Advance(l));
    }
    for (int l = 0; l < n; ++l) {
      const auto& ops = prog_.ranks[l / tp_];
      RP_CHECK(dev_[l].pc + 1 == ops.size() && ops.back().kind == OpKind::kOptimizerStep)
          << "device " << l << " stopped at op " << dev_[l].pc << " of " << ops.size();
    }
    return absl::OkStatus();
  }

  struct Dev {
    size_t pc = 0;
    Nanos t{0};
    bool blocked = false;
    bool in_tp = false;
    Nanos busy_fbw{0};
    Nanos first_compute{-1};  // [J] start of the first F/B/Bi/W/F&B (−1: none yet)
    Nanos last_compute{0};    // [J] end of the last one
    Nanos busy_base{0};  // busy_fbw without the device's compute factor (for T1)
    int compute_ops = 0;  // compute ops done (the next one's index for compute_op_factor)
    Nanos comm{0};
    Nanos exposed{0};
  };
  const std::vector<Dev>& devs() const { return dev_; }
  const std::vector<std::vector<Nanos>>& ready() const { return ready_; }
  std::vector<std::vector<OpTiming>>& timeline() { return timeline_; }

 private:
  void Wake(int l) {
    if (dev_[l].blocked) {
      dev_[l].blocked = false;
      work_.push_back(l);
    }
  }

  absl::StatusOr<Nanos> TpCost(int s, uint64_t bytes) {
    auto& [cached_bytes, cached] = tp_cache_[s];
    if (cached_bytes != bytes) {
      RP_ASSIGN_OR_RETURN(cached, RingTime(tp_, bytes, links_.tp_mask[s], opts_.links, opts_.tp_ring));
      cached_bytes = bytes;
    }
    return cached;
  }

  absl::Status Advance(int l) {
    Dev& d = dev_[l];
    const int s = l / tp_;
    const int t_idx = l % tp_;
    const auto& ops = prog_.ranks[s];
    const RankCosts& c = costs_[s];
    auto& tl = timeline_[l];
    while (d.pc < ops.size()) {
      const Op& op = ops[d.pc];
      switch (op.kind) {
        case OpKind::kForward:
        case OpKind::kBackward:
        case OpKind::kBackwardInput:
        case OpKind::kWeightGrad:
        case OpKind::kForwardBackward: {
          const Nanos dur = op.kind == OpKind::kForward    ? c.f
                            : op.kind == OpKind::kBackward ? c.b
                            : op.kind == OpKind::kWeightGrad ? c.w
                            : op.kind == OpKind::kForwardBackward ? c.f + c.b  // [J] fused F&B
                                                                  : c.bi;
          const double f = op_factors_ == nullptr
                               ? factors_[l]
                               : (*op_factors_)[static_cast<size_t>(l)][static_cast<size_t>(d.compute_ops)];
          ++d.compute_ops;
          const Nanos scaled = ScaleCost(dur, f);
          tl[d.pc] = {d.t, d.t + scaled};
          if (d.first_compute < Nanos(0)) d.first_compute = d.t;  // [J]
          d.t += scaled;
          d.last_compute = d.t;  // [J]
          d.busy_fbw += scaled;
          d.busy_base += dur;
          break;
        }
        case OpKind::kSendAct:
        case OpKind::kSendGrad: {
          const bool grad = op.kind == OpKind::kSendGrad;
          const int p = prog_.num_ranks;
          const int dst = op.peer * tp_ + t_idx;
          const bool to_next = op.peer == (s + 1) % p;  // else the previous stage (p = 2: the same)
          const LinkParams& lp = to_next ? links_.to_next[l] : links_.to_prev[l];
          // The directed link carries one message at a time: this one starts once the previous
          // one on it has arrived.
          Nanos& free_at = link_free_[static_cast<size_t>(l) * 2 + (to_next ? 0 : 1)];
          const Nanos arrival = std::max(d.t, free_at) + lp.Duration(op.bytes);
          free_at = arrival;
          // [J] keyed as the receiver keys it: is this rank the receiver's next neighbour?
          const bool from_next_at_dst = s == (op.peer + 1) % p;
          channels_[ChannelIndex(dst, from_next_at_dst, grad)].q.push_back(
              Message{arrival, arrival - d.t});
          tl[d.pc] = {d.t, arrival};
          Wake(dst);
          break;
        }
        case OpKind::kRecvAct:
        case OpKind::kRecvGrad: {
          const bool from_next = op.peer == (s + 1) % prog_.num_ranks;  // [J]
          auto& ch = channels_[ChannelIndex(l, from_next, op.kind == OpKind::kRecvGrad)];
          if (ch.head == ch.q.size()) {
            d.blocked = true;
            return absl::OkStatus();
          }
          const Message msg = ch.q[ch.head++];
          const Nanos end = std::max(d.t, msg.arrival);
          d.exposed += std::min(end - d.t, msg.link);
          d.comm += msg.link;
          tl[d.pc] = {d.t, end};
          d.t = end;
          break;
        }
        case OpKind::kTpAllReduce: {
          if (tp_ == 1) {
            tl[d.pc] = {d.t, d.t};
            break;
          }
          if (d.in_tp) {  // woken by a message while waiting for the group
            d.blocked = true;
            return absl::OkStatus();
          }
          d.in_tp = true;
          tp_max_[s] = std::max(tp_max_[s], d.t);
          if (++tp_count_[s] < tp_) {
            d.blocked = true;
            return absl::OkStatus();
          }
          RP_ASSIGN_OR_RETURN(const Nanos cost, TpCost(s, op.bytes));
          const Nanos end = tp_max_[s] + cost;
          for (int u = 0; u < tp_; ++u) {
            const int m = s * tp_ + u;
            Dev& o = dev_[m];
            timeline_[m][o.pc] = {o.t, end};
            o.t = end;
            o.comm += cost;
            o.exposed += cost;
            o.in_tp = false;
            if (m != l) {
              ++o.pc;
              o.blocked = false;
              work_.push_back(m);
            }
          }
          tp_count_[s] = 0;
          tp_max_[s] = Nanos(0);
          break;
        }
        case OpKind::kAllReduce:
          ready_[l].push_back(d.t);
          tl[d.pc] = {d.t, d.t};
          break;
        case OpKind::kOptimizerStep:
          return absl::OkStatus();  // phase 1 ends here
      }
      ++d.pc;
    }
    return absl::OkStatus();
  }

  struct Channel {
    std::vector<Message> q;
    size_t head = 0;
  };

  const Program& prog_;
  const std::vector<RankCosts>& costs_;
  const int tp_;
  const Links& links_;
  const PredictOptions& opts_;
  const std::vector<double> factors_;  // per l: compute factor of that device (1 = healthy)
  const std::vector<std::vector<double>>* const op_factors_;  // per l, per compute op; or null
  std::vector<Dev> dev_;
  std::vector<Channel> channels_;  // [ChannelIndex(l, from_next, grad)]: messages to device l
  std::vector<Nanos> link_free_;  // [l·2 + (to next ? 0 : 1)]: when that directed link is free
  std::vector<int> tp_count_;
  std::vector<Nanos> tp_max_;
  std::vector<std::pair<uint64_t, Nanos>> tp_cache_;
  std::vector<std::vector<Nanos>> ready_;  // per l: enqueue time of each bucket
  std::vector<std::vector<OpTiming>> timeline_;
  std::vector<int> work_;
};

}  // namespace

absl::StatusOr<Prediction> Predict(const Program& prog, const ParallelGrid& grid, const CostModel& cost,
                                   const PredictOptions& opts) {
  RP_ASSIGN_OR_RETURN(ValidationReport report, Validate(prog));
  // [J] a chunk op costs 1 / (chunks per direction) of the rank's StageCost: with two directions
  // (DualPipe) each chunk is a whole stage of its direction.
  const int p = prog.num_ranks, v = prog.chunks_per_direction();
  const GridShape shape = grid.shape();
  if (shape.pp != p) {
    return absl::InvalidArgumentError(
        absl::StrCat("Predict: grid has pp=", shape.pp, " but the program has ", p, " pipeline ranks"));
  }
  if (cost.stages.size() != 1 && static_cast<int>(cost.stages.size()) != p) {
    return absl::InvalidArgumentError(absl::StrCat("Predict: cost model has ", cost.stages.size(),
                                                   " stage entries, expected 1 or ", p));
  }
  std::vector<RankCosts> costs(p);
  for (int s = 0; s < p; ++s) {
    const StageCost& sc = cost.Of(s);
    if (sc.forward < Nanos(0) || sc.backward < Nanos(0) || sc.weight_grad < Nanos(0) ||
        sc.optimizer < Nanos(0) || (prog.split_backward && sc.weight_grad > sc.backward)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Predict: cost of rank ", s, ": times must be >= 0 and weight_grad <= backward"));
    }
    costs[s] = RankCosts{sc.forward / v, sc.backward / v, (sc.backward - sc.weight_grad) / v,
                         sc.weight_grad / v, sc.optimizer};
  }
  const int D = shape.dp, T = shape.tp, L = p * T;
  if (!opts.compute_factor.empty()) {
    if (static_cast<int>(opts.compute_factor.size()) != grid.world_size()) {
      return absl::InvalidArgumentError(absl::StrCat("Predict: compute_factor has ", opts.compute_factor.size(),
                                                     " entries, expected the world size ", grid.world_size()));
    }
    for (size_t r = 0; r < opts.compute_factor.size(); ++r) {
      if (!(opts.compute_factor[r] >= 1.0) || !std::isfinite(opts.compute_factor[r])) {
        return absl::InvalidArgumentError(
            absl::StrCat("Predict: compute_factor of rank ", r, " must be a finite number >= 1"));
      }
    }
  }
  auto factor_of = [&](int rank) {
    return opts.compute_factor.empty() ? 1.0 : opts.compute_factor[static_cast<size_t>(rank)];
  };

  // Replica signatures: the link class of every PP hop and the classes on every TP ring.
  Prediction pred;
  pred.tp = T;
  pred.class_of_replica.assign(D, 0);
  std::vector<int> representative;
  {
    std::unordered_map<std::string, int> classes;
    std::string sig(2 * L + p, '\0');
    for (int d = 0; d < D; ++d) {
      for (int s = 0; s < p; ++s) {
        uint8_t tp_mask = 0;
        for (int t = 0; t < T; ++t) {
          const int r = grid.RankOf({d, s, t});
          sig[2 * (s * T + t)] = static_cast<char>(grid.ClassOf(r, grid.RankOf({d, (s + 1) % p, t})));
          sig[2 * (s * T + t) + 1] =
              static_cast<char>(grid.ClassOf(r, grid.RankOf({d, (s - 1 + p) % p, t})));
          if (T > 1) tp_mask |= ClassBit(grid.ClassOf(r, grid.RankOf({d, s, (t + 1) % T})));
        }
        sig[2 * L + s] = static_cast<char>(tp_mask);
      }
      if (!opts.compute_factor.empty()) {  // replicas with different stragglers differ
        sig.resize(2 * L + p);
        for (int l = 0; l < L; ++l) {
          const double f = factor_of(grid.RankOf({d, l / T, l % T}));
          sig.append(reinterpret_cast<const char*>(&f), sizeof f);
        }
      }
      if (!opts.dedupe_replicas || opts.compute_op_factor) {
        pred.class_of_replica[d] = d;
        representative.push_back(d);
        continue;
      }
      auto [it, inserted] = classes.emplace(sig, static_cast<int>(representative.size()));
      if (inserted) representative.push_back(d);
      pred.class_of_replica[d] = it->second;
    }
  }
  const int C = static_cast<int>(representative.size());

  // Per-op factors (per class = per replica when set): per l, one per compute op of its rank.
  std::vector<std::vector<std::vector<double>>> op_factors;
  if (opts.compute_op_factor) {
    op_factors.resize(C);
    for (int c = 0; c < C; ++c) {
      op_factors[c].resize(L);
      for (int l = 0; l < L; ++l) {
        const int s = l / T;
        const int rank = grid.RankOf({representative[c], s, l % T});
        int ops = 0;
        for (const Op& op : prog.ranks[s]) {
          ops += IsDeviceCompute(op.kind);
        }
        auto& f = op_factors[c][l];
        f.resize(static_cast<size_t>(ops));
        for (int i = 0; i < ops; ++i) {
          f[static_cast<size_t>(i)] = opts.compute_op_factor(rank, i);
          if (!(f[static_cast<size_t>(i)] >= 1.0) || !std::isfinite(f[static_cast<size_t>(i)])) {
            return absl::InvalidArgumentError(absl::StrCat("Predict: compute_op_factor of rank ", rank,
                                                           " op ", i, " must be a finite number >= 1"));
          }
        }
      }
    }
  }

  // Phase 1: one simulation per replica class.
  std::vector<std::vector<ReplicaSim::Dev>> devs(C);
  std::vector<std::vector<std::vector<Nanos>>> ready(C);
  pred.timelines.resize(C);
  for (int c = 0; c < C; ++c) {
    const int d = representative[c];
    ReplicaSim::Links links;
    links.to_next.resize(L);
    links.to_prev.resize(L);
    links.tp_mask.assign(p, 0);
    for (int s = 0; s < p; ++s) {
      for (int t = 0; t < T; ++t) {
        const int r = grid.RankOf({d, s, t});
        links.to_next[s * T + t] = grid.ParamsOf(r, grid.RankOf({d, (s + 1) % p, t}), opts.links);
        links.to_prev[s * T + t] = grid.ParamsOf(r, grid.RankOf({d, (s - 1 + p) % p, t}), opts.links);
        if (T > 1) links.tp_mask[s] |= ClassBit(grid.ClassOf(r, grid.RankOf({d, s, (t + 1) % T})));
      }
    }
    std::vector<double> factors(L);
    for (int l = 0; l < L; ++l) factors[l] = factor_of(grid.RankOf({d, l / T, l % T}));
    ReplicaSim sim(prog, costs, T, links, opts, std::move(factors),
                   op_factors.empty() ? nullptr : &op_factors[c]);
    RP_RETURN_IF_ERROR(sim.Run());
    devs[c] = sim.devs();
    ready[c] = sim.ready();
    pred.timelines[c] = std::move(sim.timeline());
  }

  // Phase 2: gradient buckets per DP group (s, t), in bucket order on the group's comm streams.
  std::vector<std::vector<OpTiming>> ar(L);  // per l, per bucket
  std::vector<Nanos> ar_total(L, Nanos(0));
  for (int s = 0; s < p; ++s) {
    std::vector<int> ar_ops;
    for (size_t i = 0; i < prog.ranks[s].size(); ++i) {
      if (prog.ranks[s][i].kind == OpKind::kAllReduce) ar_ops.push_back(static_cast<int>(i));
    }
    for (int t = 0; t < T; ++t) {
      const int l = s * T + t;
      uint8_t mask = 0;
      for (int d = 0; d < D && D > 1; ++d) {
        mask |= ClassBit(grid.ClassOf(grid.RankOf({d, s, t}), grid.RankOf({(d + 1) % D, s, t})));
      }
      Nanos prev_end{0};
      uint64_t cached_bytes = ~uint64_t{0};
      Nanos cached{0};
      for (size_t b = 0; b < ar_ops.size(); ++b) {
        Nanos ready_at{0};
        for (int c = 0; c < C; ++c) ready_at = std::max(ready_at, ready[c][l][b]);
        const uint64_t bytes = prog.ranks[s][ar_ops[b]].bytes;
        if (bytes != cached_bytes) {
          RP_ASSIGN_OR_RETURN(cached, RingTime(D, bytes, mask, opts.links, opts.dp_ring));
          cached_bytes = bytes;
        }
        const Nanos start = std::max(ready_at, prev_end);
        prev_end = start + cached;
        ar[l].push_back({start, prev_end});
        ar_total[l] += cached;
        for (int c = 0; c < C; ++c) pred.timelines[c][l][ar_ops[b]] = {start, prev_end};
      }
    }
  }

  // Phase 3: optimizer steps and per-device metrics.
  std::vector<std::vector<DeviceStats>> stats(C, std::vector<DeviceStats>(L));
  Nanos step{0};
  for (int c = 0; c < C; ++c) {
    for (int l = 0; l < L; ++l) {
      const int s = l / T;
      const ReplicaSim::Dev& d = devs[c][l];
      const Nanos ar_end = ar[l].empty() ? Nanos(0) : ar[l].back().end;
      const Nanos wait = std::max(Nanos(0), ar_end - d.t);
      const double opt_factor =
          op_factors.empty() ? factor_of(grid.RankOf({representative[c], s, l % T}))
                             : op_factors[c][l][static_cast<size_t>(d.compute_ops)];
      const Nanos opt = ScaleCost(costs[s].opt, opt_factor);
      const Nanos end = d.t + wait + opt;
      pred.timelines[c][l][d.pc] = {d.t, end};
      step = std::max(step, end);
      DeviceStats& st = stats[c][l];
      st.busy = d.busy_fbw + opt;
      st.pipeline_busy = d.busy_fbw;                                              // [J]
      st.span = d.first_compute < Nanos(0) ? Nanos(0) : d.last_compute - d.first_compute;  // [J]
      pred.makespan = std::max(pred.makespan, d.last_compute);                    // [J]
      st.comm = d.comm + ar_total[l];
      st.exposed_comm = d.exposed + wait;
      st.peak_in_flight = report.peak_in_flight[s];
      st.peak_activation_bytes =
          static_cast<uint64_t>(report.peak_in_flight[s]) * (cost.Of(s).activation_bytes / v);
    }
  }
  pred.step_time = step;
  pred.devices.resize(grid.world_size());
  Nanos t1{0};
  for (int l = 0; l < L; ++l) t1 += costs[l / T].opt;
  for (int r = 0; r < grid.world_size(); ++r) {
    const Coord co = grid.CoordOf(r);
    const int c = pred.class_of_replica[co.dp];
    const int l = co.pp * T + co.tp;
    DeviceStats st = stats[c][l];
    st.bubble = step - st.busy;
    const double step_d = static_cast<double>(step.count());
    st.bubble_over_total = step_d > 0 ? static_cast<double>(st.bubble.count()) / step_d : 0.0;
    st.bubble_over_ideal =
        st.busy.count() > 0 ? static_cast<double>(st.bubble.count()) / static_cast<double>(st.busy.count())
                            : 0.0;
    st.overlap = st.comm.count() > 0 ? 1.0 - static_cast<double>(st.exposed_comm.count()) /
                                                 static_cast<double>(st.comm.count())
                                     : 1.0;
    st.makespan_bubble = pred.makespan - st.pipeline_busy;            // [J]
    st.span_bubble = st.span - st.pipeline_busy;                      // [J]
    pred.max_span = std::max(pred.max_span, st.span);                 // [J]
    pred.makespan_bubble = std::max(pred.makespan_bubble, st.makespan_bubble);  // [J]
    pred.span_bubble = std::max(pred.span_bubble, st.span_bubble);    // [J]
    pred.devices[r] = st;
    t1 += devs[c][l].busy_base;
  }
  pred.single_device_time = t1;
  if (step.count() > 0) {
    pred.speedup = static_cast<double>(t1.count()) / static_cast<double>(step.count());
    pred.efficiency = pred.speedup / grid.world_size();
  }
  return pred;
}

}  // namespace rp::schedule
