#include "schedule/step_intervals.h"

#include <vector>

#include "runtime/model/mlp.h"
#include "schedule/program.h"

namespace rp::schedule {
namespace {

// The intervals of one part (pass `pass` of `chunk`): its compute segments and exchanges.
uint64_t PartIntervals(const ExecutionPlan& plan, int pp, int chunk, int pass) {
  uint64_t exchanges = 0;
  for (const PassStep& s : plan.Chunk(pp, chunk).steps[static_cast<size_t>(pass)]) {
    if (s.kind != PassStep::Kind::kLayer) ++exchanges;
  }
  return 1 + 2 * exchanges;
}

}  // namespace

StepIntervals CountStepIntervals(const ExecutionPlan& plan, int pp) {
  StepIntervals n;
  for (const Op& op : plan.options.program.ranks[static_cast<size_t>(pp)]) {
    if (IsSend(op.kind)) {
      ++n.sends;
    } else if (IsRecv(op.kind)) {
      ++n.others;
    } else if (op.kind == OpKind::kForwardBackward) {
      n.others += PartIntervals(plan, pp, op.chunk, PassIndex(OpKind::kForward)) +
                  PartIntervals(plan, pp, op.backward_chunk, PassIndex(OpKind::kBackward));
    } else if (IsCompute(op.kind)) {
      n.others += PartIntervals(plan, pp, op.chunk, PassIndex(op.kind));
    } else if (op.kind == OpKind::kOptimizerStep) {
      n.others += plan.ranks[static_cast<size_t>(pp)].bucket_order.size() + 2;
    }
  }
  return n;
}

}  // namespace rp::schedule
