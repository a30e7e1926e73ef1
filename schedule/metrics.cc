#include "schedule/metrics.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "runtime/status_macros.h"

namespace rp::schedule {

const char* IntervalKindName(IntervalKind k) {
  switch (k) {
    case IntervalKind::kCompute: return "compute";
    case IntervalKind::kRecv: return "recv";
    case IntervalKind::kSend: return "send";
    case IntervalKind::kTpAllReduce: return "tp_allreduce";
    case IntervalKind::kGradAllReduce: return "grad_allreduce";
    case IntervalKind::kGradWait: return "grad_wait";
    case IntervalKind::kOptimizer: return "optimizer";
    case IntervalKind::kEpAllToAll: return "ep_alltoall";
  }
  return "?";
}

PipelineFigures ComputePipelineFigures(std::span<DeviceMetrics> devices) {
  PipelineFigures f;
  for (const DeviceMetrics& m : devices) f.makespan = std::max(f.makespan, m.pipeline_end);
  for (DeviceMetrics& m : devices) {
    m.makespan_bubble = f.makespan - m.pipeline_busy;
    m.span_bubble = m.span - m.pipeline_busy;
    f.max_span = std::max(f.max_span, m.span);
    f.makespan_bubble = std::max(f.makespan_bubble, m.makespan_bubble);
    f.span_bubble = std::max(f.span_bubble, m.span_bubble);
  }
  return f;
}

WaitSplit SplitWait(Nanos start, Nanos end, Nanos ready) {
  if (end <= start) return {};
  const Nanos split = std::clamp(ready, start, end);
  return {.transfer = end - split, .peer = split - start};
}

WaitSplit SplitMeasuredWait(Nanos start, Nanos end, Nanos ready, Nanos arrival) {
  if (end <= start) return {};
  const Nanos due = std::clamp(arrival, start, end);
  WaitSplit w = SplitWait(start, due, ready);
  w.late = end - due;
  return w;
}

WaitSplit SplitBySpans(Nanos start, Nanos end, std::span<const WaitSpan> spans, Nanos done) {
  if (end <= start) return {};
  const Nanos due = std::clamp(done, start, end);
  WaitSplit w = SplitBySpans(start, due, spans);
  w.late = end - due;
  return w;
}

WaitSplit SplitBySpans(Nanos start, Nanos end, std::span<const WaitSpan> spans) {
  WaitSplit out;
  if (end <= start) return out;
  for (const WaitSpan& sp : spans) {
    if (!sp.peer) continue;
    const Nanos a = std::max(start, sp.start), b = std::min(end, sp.end);
    if (b > a) out.peer += b - a;
  }
  out.transfer = (end - start) - out.peer;
  return out;
}

DeviceMetrics ComputeDeviceMetrics(std::span<const OpInterval> ops, Nanos step_time,
                                   Timeline timeline) {
  const bool wall = timeline == Timeline::kMeasured;
  DeviceMetrics m;
  bool any_compute = false;
  for (const OpInterval& op : ops) {
    const Nanos len = std::max(Nanos(0), wall ? op.wall_end - op.wall_start : op.end - op.start);
    // A compute op's wall_late: the host woke it late at its end, after its work (idle, not busy).
    const Nanos late = wall ? std::min(op.wall_late, len) : Nanos(0);
    switch (op.kind) {
      case IntervalKind::kCompute: {
        m.busy += len - late;
        m.pipeline_busy += len - late;
        m.host_late += late;
        const Nanos a = wall ? op.wall_start : op.start, b = wall ? op.wall_end - late : op.end;
        m.pipeline_start = any_compute ? std::min(m.pipeline_start, a) : a;
        m.pipeline_end = any_compute ? std::max(m.pipeline_end, b) : b;
        any_compute = true;
        break;
      }
      case IntervalKind::kOptimizer:
        m.busy += len - late;
        m.host_late += late;
        break;
      case IntervalKind::kEpAllToAll:
        m.ep_exposed_comm += wall ? op.wall_transfer : op.transfer;
        m.ep_peer_wait += wall ? op.wall_peer : op.peer;
        [[fallthrough]];
      case IntervalKind::kRecv:
      case IntervalKind::kTpAllReduce:
      case IntervalKind::kGradWait:
        m.exposed_comm += wall ? op.wall_transfer : op.transfer;
        m.peer_wait += wall ? op.wall_peer : op.peer;
        if (wall) m.host_late += op.wall_late;
        m.comm += op.comm;
        break;
      case IntervalKind::kGradAllReduce: m.comm += op.comm; break;
      case IntervalKind::kSend: break;
    }
  }
  m.span = m.pipeline_end - m.pipeline_start;
  m.bubble = step_time - m.busy;
  const double step = static_cast<double>(step_time.count());
  m.bubble_total = step > 0 ? static_cast<double>(m.bubble.count()) / step : 0.0;
  m.bubble_ideal = m.busy.count() > 0
                       ? static_cast<double>(m.bubble.count()) / static_cast<double>(m.busy.count())
                       : 0.0;
  m.overlap = m.comm.count() > 0
                  ? std::clamp(1.0 - static_cast<double>(m.exposed_comm.count()) /
                                         static_cast<double>(m.comm.count()),
                               0.0, 1.0)
                  : 1.0;
  return m;
}

absl::StatusOr<Nanos> SingleDeviceTime(const Program& prog, const GridShape& grid,
                                       const CostModel& cost) {
  const int p = prog.num_ranks, v = prog.chunks_per_direction();
  if (cost.stages.size() != 1 && static_cast<int>(cost.stages.size()) != p) {
    return absl::InvalidArgumentError(absl::StrCat("cost model has ", cost.stages.size(),
                                                   " stage entries, expected 1 or ", p));
  }
  if (static_cast<int>(prog.ranks.size()) != p) {
    return absl::InvalidArgumentError("program: ranks.size() differs from num_ranks");
  }
  if (!cost.model_stages.empty() && static_cast<int>(cost.model_stages.size()) != prog.num_model_stages()) {
    return absl::InvalidArgumentError(absl::StrCat("cost model has ", cost.model_stages.size(),
                                                   " model stage entries, expected ", prog.num_model_stages()));
  }
  Nanos t1{0};
  for (int s = 0; s < p; ++s) {
    // {F, B, Bi, W} of one op of chunk `chunk` on rank s.
    const auto costs = [&](int chunk) { return ChunkOpCosts(cost, s, prog.ModelStage(s, chunk), v); };
    Nanos per_device{0};
    for (const Op& op : prog.ranks[static_cast<size_t>(s)]) {
      switch (op.kind) {
        case OpKind::kForward: per_device += costs(op.chunk)[0]; break;
        case OpKind::kBackward: per_device += costs(op.chunk)[1]; break;
        case OpKind::kBackwardInput: per_device += costs(op.chunk)[2]; break;
        case OpKind::kWeightGrad: per_device += costs(op.chunk)[3]; break;
        case OpKind::kForwardBackward: per_device += costs(op.chunk)[0] + costs(op.backward_chunk)[1]; break;
        default: break;
      }
    }
    t1 += per_device * (grid.dp * grid.tp) + cost.Of(s).optimizer * grid.tp;
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

double Fidelity(Nanos a, Nanos b) {
  if (b.count() == 0) return 0.0;
  return static_cast<double>(a.count()) / static_cast<double>(b.count()) - 1.0;
}

}  // namespace rp::schedule
