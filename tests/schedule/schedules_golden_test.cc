// Golden values of ../shared/SCHEDULES.md for every schedule (free links; F = 50, I = 40, W = 40 ms per
// full stage, a chunk op costs 1/v of its rank's — 1/1 for DualPipe's one chunk per direction), the
// uniform-cost per-rank span bubbles, the peak live activations, and unequal per-rank costs checked
// against an independent list simulation written here.
#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "schedule/generators.h"
#include "schedule/predictor.h"
#include "tests/schedule/predict_helpers.h"
#include "schedule/validator.h"

namespace rp::schedule {
namespace {

struct Sched {
  const char* name;
  ScheduleKind kind;
  int v;
  bool fused = true;
};

const Sched kOneFOneB{"1f1b", ScheduleKind::kOneFOneB, 1};
const Sched kGPipe{"gpipe", ScheduleKind::kGPipe, 1};
const Sched kInterleaved2{"interleaved v=2", ScheduleKind::kInterleaved, 2};
const Sched kInterleaved4{"interleaved v=4", ScheduleKind::kInterleaved, 4};
const Sched kH1{"zb-h1", ScheduleKind::kZeroBubbleH1, 1};
const Sched kH2{"zb-h2", ScheduleKind::kZeroBubbleH2, 1};
const Sched kV{"zb-v", ScheduleKind::kZeroBubbleV, 2};
const Sched kDualPipeVFused{"dualpipev fused", ScheduleKind::kDualPipeV, 2, true};
const Sched kDualPipeVApart{"dualpipev independent", ScheduleKind::kDualPipeV, 2, false};
const Sched kDualPipeFused{"dualpipe fused", ScheduleKind::kDualPipe, 2, true};
const Sched kDualPipeApart{"dualpipe independent", ScheduleKind::kDualPipe, 2, false};

Program MustBuild(const Sched& s, int p, int m) {
  auto prog = BuildSchedule(s.kind, {.num_ranks = p, .num_micro_batches = m, .num_chunks = s.v,
                                     .fused_fb = s.fused});
  EXPECT_TRUE(prog.ok()) << s.name << ": " << prog.status();
  return prog.ok() ? *prog : Program{};
}

Prediction MustPredict(const Program& prog, const CostModel& cost) {
  auto grid = ParallelGrid::Create({.pp = prog.num_ranks});
  EXPECT_TRUE(grid.ok());
  auto pred = PredictProgram(prog, *grid, cost);
  EXPECT_TRUE(pred.ok()) << pred.status();
  return pred.ok() ? *pred : Prediction{};
}

// F = 50, B = I + W = 80, W = 40 ms per micro-batch of a full stage.
const CostModel kTableCost = CostModel::Uniform(
    {.forward = FromMillis(50), .backward = FromMillis(80), .weight_grad = FromMillis(40)});

Nanos Ms(double ms) { return Nanos(static_cast<int64_t>(ms * 1e6)); }

struct Row {
  Sched setup;
  double makespan4, bubble4, makespan8, bubble8;  // p = 4, m = 8 and p = 8, m = 16
};

TEST(SchedulesGolden, MakespanAndBubbleOfTheTable) {
  const std::vector<Row> rows = {
      {kGPipe, 1430, 390, 2990, 910},
      {kOneFOneB, 1430, 390, 2990, 910},
      {kInterleaved2, 1235, 195, 2535, 455},
      {kInterleaved4, 1137.5, 97.5, 2307.5, 227.5},
      {kH1, 1190, 150, 2430, 350},
      {kH2, 1190, 150, 2430, 350},
      {kV, 1125, 85, 2285, 205},
      {kDualPipeVApart, 1115, 75, 2255, 175},
      {kDualPipeVFused, 1190, 150, 2430, 350},
      {kDualPipeApart, 1090, 50, 2230, 150},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.setup.name);
    const Prediction four = MustPredict(MustBuild(row.setup, 4, 8), kTableCost);
    EXPECT_EQ(four.makespan, Ms(row.makespan4));
    EXPECT_EQ(four.makespan_bubble, Ms(row.bubble4));
    EXPECT_EQ(four.step_time, four.makespan);  // no all-reduce, no optimizer cost
    const Prediction eight = MustPredict(MustBuild(row.setup, 8, 16), kTableCost);
    EXPECT_EQ(eight.makespan, Ms(row.makespan8));
    EXPECT_EQ(eight.makespan_bubble, Ms(row.bubble8));
    for (const DeviceMetrics& d : four.devices) {  // every rank does m full stages of work
      EXPECT_EQ(d.pipeline_busy, 8 * FromMillis(130));
      EXPECT_EQ(d.makespan_bubble, four.makespan - d.pipeline_busy);
    }
  }
}

TEST(SchedulesGolden, PerRankSpanOfTheZeroBubbleSchedules) {
  // SCHEDULES.md: ZB-H2 and ZB-V close the bubble inside each rank's span, (p − 1)(F + I − 2W) with
  // free links; the flush at the end of the step remains in the makespan.
  for (const Sched& s : {kH2, kV}) {
    SCOPED_TRACE(s.name);
    const Prediction four = MustPredict(MustBuild(s, 4, 8), kTableCost);
    EXPECT_EQ(four.max_span, FromMillis(1070));
    EXPECT_EQ(four.span_bubble, FromMillis(30));
    const Prediction eight = MustPredict(MustBuild(s, 8, 16), kTableCost);
    EXPECT_EQ(eight.max_span, FromMillis(2150));
    EXPECT_EQ(eight.span_bubble, FromMillis(70));
    for (const DeviceMetrics& d : eight.devices) EXPECT_EQ(d.span_bubble, d.span - d.pipeline_busy);
  }
  // Schedules without a flush-free tail: span = makespan on the busiest rank.
  const Prediction one = MustPredict(MustBuild(kOneFOneB, 4, 8), kTableCost);
  EXPECT_EQ(one.max_span, one.makespan);
  EXPECT_EQ(one.span_bubble, FromMillis(390));
}

TEST(SchedulesGolden, UniformCostPerRankSpanBubbles) {
  // F = I = W = 1 per stage (1000 ns, so the halves of a V's chunks stay integral), p = 4, m = 8.
  const CostModel unit = CostModel::Uniform(
      {.forward = Nanos(1000), .backward = Nanos(2000), .weight_grad = Nanos(1000)});
  const std::vector<std::pair<Sched, double>> cases = {
      {kOneFOneB, 9}, {kH1, 3}, {kH2, 0}, {kV, 0}, {kDualPipeVFused, 3.0}, {kDualPipeVApart, 1.5}};
  for (const auto& [setup, bubble] : cases) {
    SCOPED_TRACE(setup.name);
    const Prediction pred = MustPredict(MustBuild(setup, 4, 8), unit);
    EXPECT_EQ(pred.span_bubble, Nanos(static_cast<int64_t>(bubble * 1000)));
  }
  // DualPipeV's README: (PP/2 − 1)(F&B + B − 3W) with PP = 8 stages, chunk F = I = W = 1/2:
  // 3 × (1.5 + 1 − 1.5) = 3, the fused figure.
  const Prediction fused = MustPredict(MustBuild(kDualPipeVFused, 4, 8), unit);
  EXPECT_EQ(fused.span_bubble, 3 * (Nanos(1500) + Nanos(1000) - 3 * Nanos(500)));
}

TEST(SchedulesGolden, PeakLiveActivationsInChunkUnits) {
  const std::vector<std::pair<Sched, std::vector<int>>> rows = {
      {kOneFOneB, {4, 3, 2, 1}},      {kInterleaved2, {11, 9, 7, 5}}, {kH1, {4, 4, 4, 4}},
      {kH2, {7, 7, 7, 7}},            {kV, {8, 8, 8, 8}},             {kDualPipeVFused, {9, 9, 9, 9}},
      {kDualPipeVApart, {9, 9, 9, 9}}, {kDualPipeFused, {5, 5, 5, 5}}, {kDualPipeApart, {5, 5, 5, 5}}};
  for (const auto& [setup, peaks] : rows) {
    SCOPED_TRACE(setup.name);
    auto rep = Validate(MustBuild(setup, 4, 8));
    ASSERT_TRUE(rep.ok()) << rep.status();
    EXPECT_EQ(rep->peak_in_flight, peaks);
  }
}

TEST(SchedulesGolden, PeakActivationBytesUseTheChunkSize) {
  // activation_bytes is one micro-batch of the rank's whole share: a V chunk holds half of it, a
  // DualPipe chunk (one stage of one direction) all of it.
  CostModel cost = kTableCost;
  cost.stages[0].activation_bytes = 1000;
  EXPECT_EQ(MustPredict(MustBuild(kV, 4, 8), cost).peak_activation_bytes[0], 8u * 500);
  EXPECT_EQ(MustPredict(MustBuild(kDualPipeFused, 4, 8), cost).peak_activation_bytes[0],
            5u * 1000);
}

// An independent model of the same rule (SCHEDULES.md: a rank runs its compute ops in order; an op
// starts when the rank is free and its producers are done; free links): per rank the start and end of
// each compute op, in program order.
std::vector<std::vector<std::pair<Nanos, Nanos>>> ListSimulate(const Program& prog,
                                                               const CostModel& cost, int divisor) {
  const int p = prog.num_ranks, last = prog.num_model_stages() - 1;
  // (stage, micro-batch): the micro-batch fixes the direction.
  std::map<std::pair<int, int>, Nanos> f_end, b_end;
  std::vector<size_t> next(p, 0);
  std::vector<Nanos> free_at(p, Nanos(0));
  std::vector<std::vector<std::pair<Nanos, Nanos>>> out(p);
  std::vector<std::vector<Op>> compute(p);
  for (int r = 0; r < p; ++r) {
    for (const Op& op : prog.ranks[r]) {
      if (IsCompute(op.kind)) compute[r].push_back(op);
    }
  }
  // The time the inputs of F / B of (stage k, mb) exist, or −1 if not yet.
  auto fwd_ready = [&](int k, int mb) {
    if (k == 0) return Nanos(0);
    auto it = f_end.find({k - 1, mb});
    return it == f_end.end() ? Nanos(-1) : it->second;
  };
  auto bwd_ready = [&](int k, int mb) {
    auto own = f_end.find({k, mb});
    if (own == f_end.end()) return Nanos(-1);
    if (k == last) return own->second;
    auto it = b_end.find({k + 1, mb});
    return it == b_end.end() ? Nanos(-1) : std::max(own->second, it->second);
  };
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      while (next[r] < compute[r].size()) {
        const Op& op = compute[r][next[r]];
        const int k = prog.ModelStage(r, op.chunk);
        // A chunk op's F, B, W: its model stage's own (cost.model_stages) or the rank's ÷ divisor.
        const auto durations = [&](int stage) {
          if (!cost.model_stages.empty()) {
            const StageCost& c = cost.model_stages[static_cast<size_t>(stage)];
            return std::array<Nanos, 3>{c.forward, c.backward, c.weight_grad};
          }
          const StageCost& c = cost.Of(r);
          return std::array<Nanos, 3>{c.forward / divisor, c.backward / divisor, c.weight_grad / divisor};
        };
        const auto [f, b, w] = durations(k);
        Nanos ready{0}, dur{0};
        switch (op.kind) {
          case OpKind::kForward: ready = fwd_ready(k, op.micro_batch); dur = f; break;
          case OpKind::kBackward: ready = bwd_ready(k, op.micro_batch); dur = b; break;
          case OpKind::kBackwardInput: ready = bwd_ready(k, op.micro_batch); dur = b - w; break;
          case OpKind::kWeightGrad: ready = Nanos(0); dur = w; break;  // its Bi ran earlier here
          case OpKind::kForwardBackward: {
            const Nanos a = fwd_ready(k, op.micro_batch);
            const Nanos bb = bwd_ready(prog.ModelStage(r, op.backward_chunk), op.backward_micro_batch);
            ready = a < Nanos(0) || bb < Nanos(0) ? Nanos(-1) : std::max(a, bb);
            dur = f + durations(prog.ModelStage(r, op.backward_chunk))[1];
            break;
          }
          default: break;
        }
        if (ready < Nanos(0)) break;
        const Nanos start = std::max(free_at[r], ready), end = start + dur;
        if (op.kind == OpKind::kForward || op.kind == OpKind::kForwardBackward) {
          f_end[{k, op.micro_batch}] = end;
        }
        if (op.kind == OpKind::kBackward || op.kind == OpKind::kBackwardInput) {
          b_end[{k, op.micro_batch}] = end;
        }
        if (op.kind == OpKind::kForwardBackward) {
          b_end[{prog.ModelStage(r, op.backward_chunk), op.backward_micro_batch}] = end;
        }
        free_at[r] = end;
        out[r].push_back({start, end});
        ++next[r];
        progress = true;
      }
    }
  }
  return out;
}

TEST(SchedulesGolden, UnequalPerRankCostsMatchAnIndependentListSimulation) {
  const std::vector<Sched> all = {kGPipe,          kOneFOneB,       kInterleaved2,  kH1,
                                  kH2,             kV,              kDualPipeVFused, kDualPipeVApart,
                                  kDualPipeFused,  kDualPipeApart};
  for (int p : {2, 4, 6}) {
    CostModel cost;
    for (int r = 0; r < p; ++r) {  // every rank different (even ms: a V chunk's half stays integral)
      cost.stages.push_back({.forward = FromMillis(40 + 6 * r),
                             .backward = FromMillis(70 + 10 * ((r * 7) % p)),
                             .weight_grad = FromMillis(30 + 2 * r)});
    }
    for (int m : {2 * p, 3 * p}) {
      for (const Sched& s : all) {
        SCOPED_TRACE(::testing::Message() << s.name << " p=" << p << " m=" << m);
        const Program prog = MustBuild(s, p, m);
        auto grid = ParallelGrid::Create({.pp = p});
        ASSERT_TRUE(grid.ok());
        auto pred = PredictProgram(prog, *grid, cost);
        ASSERT_TRUE(pred.ok()) << pred.status();
        const auto expected = ListSimulate(prog, cost, prog.chunks_per_direction());
        Nanos makespan{0};
        for (int r = 0; r < p; ++r) {
          const std::vector<std::pair<Nanos, Nanos>> got = ComputeSpans(*pred, *grid, r);
          ASSERT_EQ(got.size(), expected[r].size()) << "rank " << r << ": a rank stalled";
          EXPECT_EQ(got, expected[r]) << "rank " << r;
          EXPECT_EQ(pred->devices[r].span, expected[r].back().second - expected[r].front().first);
          makespan = std::max(makespan, expected[r].back().second);
        }
        EXPECT_EQ(pred->makespan, makespan);
      }
    }
  }
}

// The same rule when every model stage has its own cost (the FLOPs model's unequal layer counts):
// a chunk op lasts its own stage's time, so a rank's two chunks of a V (or of two directions) differ.
TEST(SchedulesGolden, UnequalPerStageCostsMatchAnIndependentListSimulation) {
  const std::vector<Sched> all = {kGPipe,          kOneFOneB,       kInterleaved2,  kH1,
                                  kH2,             kV,              kDualPipeVFused, kDualPipeVApart,
                                  kDualPipeFused,  kDualPipeApart};
  for (int p : {2, 4}) {
    for (const Sched& s : all) {
      const int m = 2 * p;
      SCOPED_TRACE(::testing::Message() << s.name << " p=" << p << " m=" << m);
      const Program prog = MustBuild(s, p, m);
      CostModel cost = CostModel::Uniform({.forward = FromMillis(1), .backward = FromMillis(2)});
      const int K = prog.num_model_stages();
      for (int k = 0; k < K; ++k) {  // every stage different
        cost.model_stages.push_back({.forward = FromMillis(30 + 4 * k),
                                     .backward = FromMillis(60 + 6 * ((k * 5) % K)),
                                     .weight_grad = FromMillis(20 + k)});
      }
      auto grid = ParallelGrid::Create({.pp = p});
      ASSERT_TRUE(grid.ok());
      auto pred = PredictProgram(prog, *grid, cost);
      ASSERT_TRUE(pred.ok()) << pred.status();
      const auto expected = ListSimulate(prog, cost, prog.chunks_per_direction());
      for (int r = 0; r < p; ++r) {
        const std::vector<std::pair<Nanos, Nanos>> got = ComputeSpans(*pred, *grid, r);
        ASSERT_EQ(got.size(), expected[r].size()) << "rank " << r << ": a rank stalled";
        EXPECT_EQ(got, expected[r]) << "rank " << r;
      }
      // A stage list of the wrong length is refused, naming the field.
      cost.model_stages.pop_back();
      auto bad = PredictProgram(prog, *grid, cost);
      ASSERT_FALSE(bad.ok());
      EXPECT_NE(bad.status().message().find("cost.model_stages"), std::string::npos) << bad.status();
    }
  }
}

// Stored activations counted stage by stage (ValidateOptions::stage_stored): with every stage the
// same size they are the peak in flight × that size; with sizes that differ, a rank's peak lies
// between its peak in flight × its smallest and × its largest chunk.
TEST(SchedulesGolden, PeakStoredBytesCountEachStagesOwnSize) {
  const std::vector<Sched> all = {kGPipe,          kOneFOneB,       kInterleaved2,  kH1,
                                  kH2,             kV,              kDualPipeVFused, kDualPipeVApart,
                                  kDualPipeFused,  kDualPipeApart};
  for (const Sched& s : all) {
    SCOPED_TRACE(s.name);
    const Program prog = MustBuild(s, 4, 8);
    const size_t K = static_cast<size_t>(prog.num_model_stages());
    auto same = Validate(prog, {.stage_stored = std::vector<StageStored>(K, {1000, 1000})});
    ASSERT_TRUE(same.ok()) << same.status();
    std::vector<uint64_t> expected;
    for (int r = 0; r < 4; ++r) expected.push_back(1000u * static_cast<uint64_t>(same->peak_in_flight[r]));
    EXPECT_EQ(same->peak_stored_bytes, expected);
    std::vector<StageStored> sizes;
    for (size_t k = 0; k < K; ++k) sizes.push_back({100u << k, 100u << k});
    auto differ = Validate(prog, {.stage_stored = sizes});
    ASSERT_TRUE(differ.ok()) << differ.status();
    for (int r = 0; r < 4; ++r) {
      uint64_t lo = ~uint64_t{0}, hi = 0;
      for (int c = 0; c < prog.num_chunks; ++c) {
        lo = std::min(lo, sizes[static_cast<size_t>(prog.ModelStage(r, c))].after_forward);
        hi = std::max(hi, sizes[static_cast<size_t>(prog.ModelStage(r, c))].after_forward);
      }
      const uint64_t n = static_cast<uint64_t>(differ->peak_in_flight[r]);
      EXPECT_GE(differ->peak_stored_bytes[r], n * lo) << "rank " << r;
      EXPECT_LE(differ->peak_stored_bytes[r], n * hi) << "rank " << r;
      if (prog.num_chunks == 1) {
        EXPECT_EQ(differ->peak_stored_bytes[r], n * lo) << "rank " << r;
      }
    }
    sizes.pop_back();
    EXPECT_EQ(Validate(prog, {.stage_stored = sizes}).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

// A split backward keeps from its Bi until its W what W needs (after_input_grad), not what F stored.
// ZB-H1 at p = 4, m = 8: rank 3 (the last) runs F, Bi, then defers its W's — by the golden table it
// holds at most 4 micro-batches at once. With F storing 1 byte and Bi keeping 1000, its peak is
// that of those held past their Bi; with no Bi-to-W bytes it is 1 × its peak in flight.
TEST(SchedulesGolden, ASplitBackwardHoldsWhatItsWNeeds) {
  const Program prog = MustBuild(kH1, 4, 8);
  auto flat = Validate(prog, {.stage_stored = std::vector<StageStored>(4, {1, 1})});
  ASSERT_TRUE(flat.ok()) << flat.status();
  EXPECT_EQ(flat->peak_stored_bytes, (std::vector<uint64_t>{4, 4, 4, 4}));
  auto kept = Validate(prog, {.stage_stored = std::vector<StageStored>(4, {1, 1000})});
  ASSERT_TRUE(kept.ok()) << kept.status();
  auto dropped = Validate(prog, {.stage_stored = std::vector<StageStored>(4, {1, 0})});
  ASSERT_TRUE(dropped.ok()) << dropped.status();
  for (int r = 0; r < 4; ++r) {
    // Some micro-batch waits between its Bi and its W on every rank of ZB-H1: the peak counts it.
    EXPECT_GE(kept->peak_stored_bytes[r], 1000u) << "rank " << r;
    EXPECT_LE(kept->peak_stored_bytes[r], 1000u * 4) << "rank " << r;
    EXPECT_LE(dropped->peak_stored_bytes[r], 4u) << "rank " << r;
  }
  // 1F1B has no split: the Bi-to-W bytes never count.
  auto whole = Validate(MustBuild(kOneFOneB, 4, 8), {.stage_stored = std::vector<StageStored>(4, {1, 1000})});
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->peak_stored_bytes, (std::vector<uint64_t>{4, 3, 2, 1}));
}

}  // namespace
}  // namespace rp::schedule
