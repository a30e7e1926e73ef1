#include "schedule/render.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "runtime/status_macros.h"
#include "schedule/grid.h"
#include "schedule/predictor.h"

namespace rp::schedule {
namespace {
// The cell of compute op `op`: F<mb>, B<mb> (B or Bi), W<mb>, a chunk letter after it when v > 1.
// An F&B shows its forward part in its first cell and "&" + its backward part in the others.
std::string Label(const Op& op, int v, bool backward_part = false) {
  const bool fused_b = op.kind == OpKind::kForwardBackward && backward_part;
  const char* k = op.kind == OpKind::kForward || (op.kind == OpKind::kForwardBackward && !fused_b)
                      ? "F"
                  : op.kind == OpKind::kWeightGrad ? "W"
                                                   : "B";
  std::string s = absl::StrCat(fused_b ? "&" : "", k, fused_b ? op.backward_micro_batch : op.micro_batch);
  if (v > 1) s.push_back(static_cast<char>('a' + (fused_b ? op.backward_chunk : op.chunk) % 26));
  return s;
}
}  // namespace

absl::StatusOr<std::string> RenderTimeline(const Program& prog,
                                           const std::vector<std::vector<OpInterval>>& timelines,
                                           Nanos slot) {
  if (slot <= Nanos(0)) return absl::InvalidArgumentError("RenderTimeline: slot must be > 0");
  if (timelines.size() != prog.ranks.size()) {
    return absl::InvalidArgumentError(absl::StrCat("RenderTimeline: ", timelines.size(),
                                                   " timelines for ", prog.ranks.size(), " ranks"));
  }
  // The compute intervals to draw: those of compute ops (a fused F&B's backward part carries
  // detail 1).
  auto drawn = [&](size_t s, const OpInterval& iv) {
    return iv.kind == IntervalKind::kCompute &&
           IsCompute(prog.ranks[s][static_cast<size_t>(iv.op)].kind);
  };
  int64_t slots = 0;
  size_t width = 2;
  for (size_t s = 0; s < prog.ranks.size(); ++s) {
    for (const OpInterval& iv : timelines[s]) {
      if (iv.op < 0 || static_cast<size_t>(iv.op) >= prog.ranks[s].size()) {
        return absl::InvalidArgumentError(absl::StrCat("RenderTimeline: rank ", s,
                                                       " has an interval of op ", iv.op));
      }
      if (!drawn(s, iv)) continue;
      slots = std::max<int64_t>(slots, (iv.end.count() + slot.count() - 1) / slot.count());
      width = std::max(width, Label(prog.ranks[s][static_cast<size_t>(iv.op)], prog.num_chunks, true).size());
    }
  }
  if (slots > 100000) return absl::InvalidArgumentError("RenderTimeline: more than 100000 slots");
  const std::string head = "rank\\slot";
  auto pad = [](std::string s, size_t w) { return std::string(w > s.size() ? w - s.size() : 0, ' ') + s; };
  std::string out = head;
  for (int64_t c = 0; c < slots; ++c) absl::StrAppend(&out, " ", pad(absl::StrCat(c), width));
  out.push_back('\n');
  for (size_t s = 0; s < prog.ranks.size(); ++s) {
    std::vector<std::string> cells(static_cast<size_t>(slots), ".");
    for (const OpInterval& iv : timelines[s]) {
      if (!drawn(s, iv)) continue;
      const Op& op = prog.ranks[s][static_cast<size_t>(iv.op)];
      const int64_t a = iv.start.count() / slot.count();
      const int64_t b = (iv.end.count() + slot.count() - 1) / slot.count();
      for (int64_t c = a; c < b; ++c) {
        cells[static_cast<size_t>(c)] = Label(op, prog.num_chunks, iv.detail == 1);
      }
    }
    std::string row = absl::StrCat("rank ", s);
    row = row + std::string(head.size() - std::min(head.size(), row.size()), ' ');
    for (const auto& cell : cells) absl::StrAppend(&row, " ", pad(cell, width));
    out += row;
    out.push_back('\n');
  }
  return out;
}

absl::StatusOr<std::string> RenderSlots(const Program& prog) {
  // One slot per chunk op (a chunk op costs 1 / chunks_per_direction of the rank's StageCost); a
  // whole B takes two in split programs (Bi + W), an F&B its F's and its B's.
  const int64_t v = prog.chunks_per_direction();
  StageCost unit{.forward = Nanos(v), .backward = Nanos(prog.split_backward ? 2 * v : v),
                 .weight_grad = Nanos(prog.split_backward ? v : 0)};
  // A stand-in model with one layer per model stage (rendering needs only the schedule).
  MlpConfig model;
  model.input_dim = 4;
  model.hidden = std::vector<int>(static_cast<size_t>(prog.num_model_stages() - 1), 4);
  model.classes = 4;
  PlanOptions po;  // everything else at its default
  po.grid = {.dp = 1, .pp = prog.num_ranks, .tp = 1};
  po.program = prog;
  po.model = model;
  po.cost = CostModel::Uniform(unit);
  RP_ASSIGN_OR_RETURN(ExecutionPlan plan, BuildPlan(po));
  RP_ASSIGN_OR_RETURN(Prediction pred, Predict(plan));
  std::vector<std::vector<OpInterval>> tl;
  for (int s = 0; s < prog.num_ranks; ++s) tl.push_back(pred.Timeline(plan.grid, s));
  return RenderTimeline(prog, tl, Nanos(1));
}

}  // namespace rp::schedule
