#include "schedule/metrics.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "runtime/status_macros.h"

namespace rp::schedule {

DeviceMetrics ComputeDeviceMetrics(std::span<const OpInterval> ops, Nanos step_time) {
  DeviceMetrics m;
  for (const OpInterval& op : ops) {
    const Nanos len = std::max(Nanos(0), op.end - op.start);
    switch (op.kind) {
      case IntervalKind::kCompute: m.busy += len; break;
      case IntervalKind::kRecv:
        m.comm += op.comm;
        m.exposed_comm += std::min(len, op.comm);
        break;
      case IntervalKind::kTpAllReduce:
        m.comm += op.comm;
        m.exposed_comm += op.comm;
        break;
      case IntervalKind::kGradAllReduce: m.comm += op.comm; break;
      case IntervalKind::kGradWait: m.exposed_comm += len; break;
      case IntervalKind::kSend: break;
    }
  }
  m.bubble = step_time - m.busy;
  const double step = static_cast<double>(step_time.count());
  m.bubble_total = step > 0 ? static_cast<double>(m.bubble.count()) / step : 0.0;
  m.bubble_ideal = m.busy.count() > 0
                       ? static_cast<double>(m.bubble.count()) / static_cast<double>(m.busy.count())
                       : 0.0;
  m.overlap = m.comm.count() > 0 ? 1.0 - static_cast<double>(m.exposed_comm.count()) /
                                             static_cast<double>(m.comm.count())
                                 : 1.0;
  return m;
}

Nanos StepTime(std::span<const std::vector<OpInterval>> devices) {
  bool any = false;
  Nanos lo{0}, hi{0};
  for (const auto& ops : devices) {
    for (const OpInterval& op : ops) {
      if (!any) {
        lo = op.start;
        hi = op.end;
        any = true;
      }
      lo = std::min(lo, op.start);
      hi = std::max(hi, op.end);
    }
  }
  return any ? hi - lo : Nanos(0);
}

absl::StatusOr<Nanos> SingleDeviceTime(const Program& prog, const GridShape& grid,
                                       const CostModel& cost) {
  const int p = prog.num_ranks, v = prog.num_chunks;
  if (cost.stages.size() != 1 && static_cast<int>(cost.stages.size()) != p) {
    return absl::InvalidArgumentError(absl::StrCat("cost model has ", cost.stages.size(),
                                                   " stage entries, expected 1 or ", p));
  }
  if (static_cast<int>(prog.ranks.size()) != p) {
    return absl::InvalidArgumentError("program: ranks.size() differs from num_ranks");
  }
  Nanos t1{0};
  for (int s = 0; s < p; ++s) {
    const StageCost& c = cost.Of(s);
    Nanos per_device{0};
    for (const Op& op : prog.ranks[static_cast<size_t>(s)]) {
      switch (op.kind) {
        case OpKind::kForward: per_device += c.forward / v; break;
        case OpKind::kBackward: per_device += c.backward / v; break;
        case OpKind::kBackwardInput: per_device += (c.backward - c.weight_grad) / v; break;
        case OpKind::kWeightGrad: per_device += c.weight_grad / v; break;
        default: break;
      }
    }
    t1 += per_device * (grid.dp * grid.tp) + c.optimizer * grid.tp;
  }
  return t1;
}

Scaling ComputeScaling(Nanos t1, Nanos step_time, int world) {
  Scaling s;
  if (step_time.count() > 0) {
    s.speedup = static_cast<double>(t1.count()) / static_cast<double>(step_time.count());
    s.efficiency = world > 0 ? s.speedup / world : 0.0;
  }
  return s;
}

double Fidelity(Nanos measured, Nanos predicted) {
  if (predicted.count() == 0) return 0.0;
  return static_cast<double>(measured.count()) / static_cast<double>(predicted.count()) - 1.0;
}

absl::StatusOr<std::vector<OpInterval>> PredictedIntervals(const Program& prog,
                                                           const ParallelGrid& grid,
                                                           const CostModel& cost,
                                                           const PredictOptions& opts,
                                                           const Prediction& pred, int rank) {
  if (!grid.IsValidRank(rank)) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is not in the grid"));
  }
  const Coord c = grid.CoordOf(rank);
  const auto& ops = prog.ranks[static_cast<size_t>(c.pp)];
  const auto& tl = pred.Timeline(grid, rank);
  RP_CHECK(tl.size() == ops.size()) << "prediction timeline does not match the program";
  std::vector<OpInterval> out;
  out.reserve(ops.size() + 1);
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    const OpTiming& t = tl[i];
    const size_t first = out.size();
    switch (op.kind) {
      case OpKind::kForward:
      case OpKind::kBackward:
      case OpKind::kBackwardInput:
      case OpKind::kWeightGrad:
      case OpKind::kForwardBackward:
        out.push_back({IntervalKind::kCompute, t.start, t.end});
        break;
      case OpKind::kSendAct:
      case OpKind::kSendGrad: out.push_back({IntervalKind::kSend, t.start, t.end}); break;
      case OpKind::kRecvAct:
      case OpKind::kRecvGrad: {
        const int peer = grid.StageRank(rank, op.peer);
        const Nanos link = grid.ParamsOf(peer, rank, opts.links).Duration(op.bytes);
        out.push_back({IntervalKind::kRecv, t.start, t.end, link});
        break;
      }
      case OpKind::kTpAllReduce: {
        const Nanos ring = pred.tp > 1 ? RingCostOverGroup(grid, grid.TpGroup(rank), op.bytes,
                                                           opts.links, opts.tp_ring)
                                             .value_or(Nanos(0))
                                       : Nanos(0);
        out.push_back({IntervalKind::kTpAllReduce, t.start, t.end, ring});
        break;
      }
      case OpKind::kAllReduce:
        out.push_back({IntervalKind::kGradAllReduce, t.start, t.end, t.end - t.start});
        break;
      case OpKind::kOptimizerStep: {
        const Nanos opt = cost.Of(c.pp).optimizer;
        out.push_back({IntervalKind::kGradWait, t.start, t.end - opt});
        out.push_back({IntervalKind::kCompute, t.end - opt, t.end});
        break;
      }
    }
    for (size_t j = first; j < out.size(); ++j) out[j].op = static_cast<int32_t>(i);
  }
  return out;
}

absl::StatusOr<Nanos> RingCostOverGroup(const ParallelGrid& grid, const std::vector<int>& group,
                                        uint64_t bytes, const LinkSpec& links,
                                        const RingModel& ring) {
  const int n = static_cast<int>(group.size());
  if (n <= 1) return Nanos(0);
  bool seen[3] = {false, false, false};
  for (int i = 0; i < n; ++i) {
    seen[static_cast<int>(grid.ClassOf(group[static_cast<size_t>(i)],
                                       group[static_cast<size_t>((i + 1) % n)]))] = true;
  }
  Nanos worst{0};
  for (int cls = 0; cls < 3; ++cls) {
    if (!seen[cls]) continue;
    LinkParams lp;
    if (static_cast<LinkClass>(cls) == LinkClass::kIntraNode) lp = links.intra_node;
    if (static_cast<LinkClass>(cls) == LinkClass::kInterNode) lp = links.inter_node;
    RP_ASSIGN_OR_RETURN(RingCost rc, RingAllReduceCost(n, (bytes + 3) / 4, lp, ring));
    worst = std::max(worst, rc.time);
  }
  return worst;
}

}  // namespace rp::schedule
