// ASCII Gantt charts of one step (apps/report.h): measured from the wall stamps of the device
// threads, predicted from the predictor's timeline.
#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "apps/report.h"

namespace rp::apps {
namespace {

struct Bar {
  int64_t start = 0, end = 0;  // ns, relative to the step start
  char letter = 'F';
  int micro_batch = -1;
  int chunk = 0;  // > 0: labelled micro_batch.chunk
};

std::string DrawRows(const std::vector<std::pair<std::string, std::vector<Bar>>>& rows, int64_t span_ns,
                     int width) {
  if (rows.empty() || span_ns <= 0 || width < 8) return "";
  size_t label_w = 0;
  for (const auto& [label, bars] : rows) label_w = std::max(label_w, label.size());
  std::string out;
  const double per_col = static_cast<double>(span_ns) / width;
  absl::StrAppend(&out, std::string(label_w, ' '), " |0", std::string(static_cast<size_t>(width - 1), ' '),
                  "| ", absl::StrFormat("%.4g ms", static_cast<double>(span_ns) / 1e6), "\n");
  for (const auto& [label, bars] : rows) {
    std::string cells(static_cast<size_t>(width), '.');
    for (const Bar& b : bars) {
      int a = static_cast<int>(std::lround(static_cast<double>(b.start) / per_col));
      int e = static_cast<int>(std::lround(static_cast<double>(b.end) / per_col));
      a = std::clamp(a, 0, width - 1);
      e = std::clamp(e, a + 1, width);
      for (int c = a; c < e; ++c) cells[static_cast<size_t>(c)] = b.letter;
      const std::string mb = b.micro_batch < 0 ? ""
                             : b.chunk > 0      ? absl::StrCat(b.micro_batch, ".", b.chunk)
                                                : absl::StrCat(b.micro_batch);
      if (!mb.empty() && e - a >= static_cast<int>(mb.size()) + 1) {
        for (size_t i = 0; i < mb.size(); ++i) cells[static_cast<size_t>(a) + 1 + i] = mb[i];
      }
    }
    absl::StrAppend(&out, label, std::string(label_w - label.size(), ' '), " |", cells, "|\n");
  }
  return out;
}

// The bar of a compute interval of `op` (an F&B's backward part is a B), without its times.
Bar ComputeBar(const schedule::Op& op, int detail) {
  switch (op.kind) {
    case schedule::OpKind::kForward: return {.letter = 'F', .micro_batch = op.micro_batch, .chunk = op.chunk};
    case schedule::OpKind::kBackward: return {.letter = 'B', .micro_batch = op.micro_batch, .chunk = op.chunk};
    case schedule::OpKind::kBackwardInput: return {.letter = 'b', .micro_batch = op.micro_batch, .chunk = op.chunk};
    case schedule::OpKind::kWeightGrad: return {.letter = 'W', .micro_batch = op.micro_batch, .chunk = op.chunk};
    case schedule::OpKind::kForwardBackward:
      return detail == 1 ? Bar{.letter = 'B', .micro_batch = op.backward_micro_batch, .chunk = op.backward_chunk}
                         : Bar{.letter = 'F', .micro_batch = op.micro_batch, .chunk = op.chunk};
    default: return {.letter = '#'};
  }
}

}  // namespace

std::string RenderGantt(const schedule::Program& program, const schedule::ParallelGrid& grid,
                        const std::function<const std::vector<schedule::OpInterval>*(int rank)>& timeline_of,
                        bool wall, Nanos span, int width, int max_rows) {
  // The first replica: ranks with dp = 0 are the first pp x tp.
  const int first_replica = grid.shape().pp * grid.shape().tp;
  std::vector<int> ranks;
  for (int rank = 0; rank < first_replica && static_cast<int>(ranks.size()) < max_rows; ++rank) {
    if (timeline_of(rank) != nullptr) ranks.push_back(rank);
  }
  std::vector<std::pair<std::string, std::vector<Bar>>> rows;
  for (const int rank : ranks) {
    const auto& ops = program.ranks[static_cast<size_t>(grid.CoordOf(rank).pp)];
    std::vector<Bar> compute, comm;
    // An op cut into layer pieces by TP all-reduces shows its micro-batch on its first piece only.
    std::pair<int, int> labelled{-1, -1};  // (op, detail)
    for (const schedule::OpInterval& iv : *timeline_of(rank)) {
      const int64_t start = (wall ? iv.wall_start : iv.start).count();
      const int64_t end = (wall ? iv.wall_end : iv.end).count();
      const int64_t transfer = (wall ? iv.wall_transfer : iv.transfer).count();
      // A measured interval's host lateness (after a wait's transfer, after a compute op's work)
      // stays idle.
      const int64_t wait_end = end - (wall ? iv.wall_late.count() : 0);
      // Nothing happened: as the report's timeline (apps/report_json.cc), no bar — a one-replica DP
      // all-reduce ends where it starts and was drawn as a gradient all-reduce.
      if (end <= start) continue;
      const schedule::Op* op =
          iv.op >= 0 && static_cast<size_t>(iv.op) < ops.size() ? &ops[static_cast<size_t>(iv.op)] : nullptr;
      switch (iv.kind) {
        case schedule::IntervalKind::kCompute: {
          if (op == nullptr) break;
          Bar bar = ComputeBar(*op, iv.detail);
          bar.start = start;
          bar.end = wait_end;
          if (labelled == std::pair<int, int>{iv.op, iv.detail}) bar.micro_batch = -1;  // not the first piece
          labelled = {iv.op, iv.detail};
          compute.push_back(bar);
          break;
        }
        case schedule::IntervalKind::kOptimizer: compute.push_back({start, wait_end, 'O', -1}); break;
        case schedule::IntervalKind::kTpAllReduce: compute.push_back({start, wait_end, 'T', -1}); break;
        case schedule::IntervalKind::kEpAllToAll:
          // Its transfer; its peer wait (the EP straggler) stays idle.
          if (transfer > 0) compute.push_back({std::max(start, wait_end - transfer), wait_end, 'A', -1});
          break;
        case schedule::IntervalKind::kRecv:
        case schedule::IntervalKind::kGradWait:
          // Only the transfer part is exposed communication; peer wait stays idle.
          if (transfer > 0) compute.push_back({std::max(start, wait_end - transfer), wait_end, '-', -1});
          break;
        case schedule::IntervalKind::kGradAllReduce: comm.push_back({start, end, '=', -1}); break;
        case schedule::IntervalKind::kSend: break;
      }
    }
    rows.emplace_back(absl::StrCat("rank ", rank), std::move(compute));
    if (!comm.empty()) rows.emplace_back("  comm", std::move(comm));
  }
  std::string out = DrawRows(rows, span.count(), width);
  if (first_replica > static_cast<int>(ranks.size())) {
    absl::StrAppend(&out, "(", first_replica - static_cast<int>(ranks.size()),
                    " more devices of the first replica in --report_json)\n");
  }
  return out;
}

std::string RenderMeasuredGantt(const Plan& plan, const schedule::RunResult& run, int width, int max_rows) {
  if (run.timelines.empty()) return "";
  const size_t step = static_cast<size_t>(run.timeline_step);
  const Nanos span = step < run.steps.size() ? FromMillis(run.steps[step].measured_ms) : Nanos(0);
  return RenderGantt(
      plan.executor.program, plan.grid,
      [&](int rank) { return static_cast<size_t>(rank) < run.timelines.size() ? &run.timelines[static_cast<size_t>(rank)] : nullptr; },
      /*wall=*/true, span, width, max_rows);
}

std::string RenderPredictedGantt(const Plan& plan, const schedule::Prediction& prediction, int width,
                                 int max_rows) {
  if (prediction.timelines.empty()) return "";
  return RenderGantt(
      plan.executor.program, plan.grid, [&](int rank) { return &prediction.Timeline(plan.grid, rank); },
      /*wall=*/false, prediction.step_time, width, max_rows);
}

}  // namespace rp::apps
