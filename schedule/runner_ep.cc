// DeviceRunner's EP all-to-all (runner.h): a MoE block's dispatch or combine, inside a compute op,
// as a timed all-to-all-v on the device's EP group (counts, then token rows; comm/alltoall.h). The
// real rows move; the fabric times the modeled rows (ExecutionPlan::EpRowElements). The wait splits
// into transfer and peer wait like every receive (a straggler of the EP group — the busiest expert
// owner — is peer wait, not communication).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "comm/alltoall.h"
#include "runtime/status_macros.h"
#include "schedule/ep_wire.h"
#include "schedule/runner.h"
#include "schedule/runner_internal.h"

namespace rp::schedule {

using namespace runner_internal;  // NOLINT: this file's helpers

absl::StatusOr<Nanos> DeviceRunner::EpAllToAll(int step, int op_index, const Op& op,
                                               EpExchange& x, Nanos start, Nanos wall0) {
  const int64_t trace_w0 = dev_->WallNow();
  const ExecutionPlan& plan = *ctx_->plan;
  int index = 0;
  const std::vector<int> group = plan.EpGroup(rank_, &index);
  waiting_.clear();
  for (int peer : group) {
    if (peer != rank_) waiting_.push_back(peer);
  }
  // Counts and sizes travel in elements; the exchange's are in rows.
  const int64_t width = x.row_width;
  std::vector<int64_t> send_elems(x.send_counts.begin(), x.send_counts.end());
  for (int64_t& c : send_elems) c *= width;
  std::vector<int64_t> recv_elems;
  // The rows travel in ep_codec (no error feedback: nothing is summed); schedule/ep_wire.h.
  const comm::CollectiveOptions co{.codec = plan.options.ep_codec,
                                   .segment_bytes = plan.ring_segment_bytes,
                                   .timeout = CommTimeout(*ctx_->options),
                                   .model = {.step = step}};
  const comm::AllToAllWireModel wire = EpWireModel(plan, width, step);
  // Errors go back through the pass's kernel, which names the site (runner_ops.cc): naming it here
  // too printed "rank R (...) step S op X: " twice.
  absl::StatusOr<comm::CollectiveResult> run = [&]() -> absl::StatusOr<comm::CollectiveResult> {
    if (!ctx_->ep_streams.empty()) {  // virtual clock: the fabric runs it, this thread parks once
      return ctx_->ep_streams[static_cast<size_t>(rank_)]->Run(
          x.send, send_elems, x.bins, &x.recv, &recv_elems, co, wire, start,
          {.rank = rank_, .op = "EP all-to-all", .step = step});
    }
    absl::StatusOr<comm::AllToAllV> a2a = comm::AllToAllV::Create(
        &ctx_->Ep(rank_).rank(index), x.send, send_elems, x.bins, &x.recv, &recv_elems, co, wire);
    if (!a2a.ok()) return a2a.status();
    RP_RETURN_IF_ERROR(a2a->Run(start));
    return a2a->result();
  }();
  if (!run.ok()) {
    // Only a wait that timed out missed its peers; a data error (an encode out of range) or a
    // consequence of another failure waited for nobody.
    if (!absl::IsDeadlineExceeded(run.status())) waiting_.clear();
    return run.status();
  }
  const comm::CollectiveResult& r = *run;
  x.recv_counts.resize(recv_elems.size());
  for (size_t i = 0; i < recv_elems.size(); ++i) x.recv_counts[i] = recv_elems[i] / width;
  waiting_.clear();
  const Nanos wall1 = WallNow();
  const WaitSplit w = SplitWallBySpans(wall0, wall1, r.spans, step_start_, r.end);
  Record({.kind = IntervalKind::kEpAllToAll, .op = op_index, .detail = ep_calls_++,
          .start = start - step_start_, .end = r.end - step_start_, .transfer = r.transfer,
          .peer = r.peer_wait, .comm = r.transfer, .wall_start = wall0, .wall_end = wall1,
          .wall_transfer = w.transfer, .wall_peer = w.peer, .wall_late = w.late});
  dev_->Trace({.name = x.kind == EpExchange::Kind::kDispatch ? "EpDispatch" : "EpCombine",
               .kind = rp::OpKind::kCollective, .micro_batch = op.micro_batch, .step = step,
               .bytes = r.modeled_bytes},
              trace_w0, dev_->WallNow(), start, r.end);
  return r.end;
}

}  // namespace rp::schedule
