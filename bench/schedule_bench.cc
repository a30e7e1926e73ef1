// Predictor and validator speed (pure code: no threads, no clock). Real time (host throughput);
// 3 repetitions, medians reported.
//
// BM_Predict1F1B: BuildPlan + Predict of one step of 1F1B — what `ringpipe predict` does for a
// layout. The target (issues 5 and 11 §7): DP 1024 × PP 16 × m 64 (16384 devices) in under 1 s.
// The workload: an MLP of `layers` hidden layers of width 64 (16: the README's `--hidden=64x16`,
// about one layer per stage; 160: ten per stage, so each stage's gradients form ten DDP buckets,
// each a DP ring started inside the last backward), 16 MiB activations between stages, 1 GiB of
// gradients per device, 25 MiB buckets, BF16 gradients in 4 MiB ring segments, on DGX-A100 links
// (8 devices per node, one NIC per device: every replica identical, so the predictor folds them).
//   Args: dp, pp, m, layers, fold (1: replica folding; 0: every device simulated — the check).
//   Counters: devices, device_ops_per_s (program ops of every device per second), sim_ms (the
//   predicted step, modeled ms — equal across fold = 0 and 1), folded.
// BM_PredictFold: the same for layouts whose replicas fold into one EP group (MoE blocks on every
// layer, 8 experts, ep 8) or whose two directions fold (DualPipe), folded and not.
//   Args: dp, pp, ep (1: dense), dualpipe (0/1), fold. Counters: devices, devices_played, sim_ms
//   (equal across fold = 0 and 1).
// BM_Validate: schedule validation of a ZB-H1 program; ops_per_s.
//
//   build/release/bench/schedule_bench                          # all
//   build/release/bench/schedule_bench --benchmark_filter='Predict1F1B/dp:1024/pp:16/m:64/fold:1'
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "runtime/link_models.h"
#include "schedule/generators.h"
#include "schedule/plan.h"
#include "schedule/predictor.h"
#include "schedule/validator.h"

namespace rp::schedule {
namespace {

constexpr int kRepetitions = 3;

PlanOptions PlanFor1F1B(int dp, int pp, int layers, const Program& prog) {
  PlanOptions po;
  po.grid = {.dp = dp, .pp = pp, .tp = 1};
  po.program = prog;
  po.model.hidden = std::vector<int>(static_cast<size_t>(layers), 64);
  po.cost = CostModel::Uniform({.forward = FromMillis(10), .backward = FromMillis(20),
                                .activation_bytes = 1 << 30});
  po.links = DgxA100();
  po.placement.devices_per_node = po.links.devices_per_node;
  po.codec = comm::Codec::kBf16;
  po.segment_bytes = 4 << 20;
  po.bucket_bytes = uint64_t{25} << 20;
  return po;
}

// The timed loop: BuildPlan + Predict each iteration; the last prediction, or nullopt once an error
// has been reported to the benchmark.
std::optional<Prediction> TimePlanAndPredict(benchmark::State& state, const PlanOptions& po,
                                             const PredictOptions& opts) {
  std::optional<Prediction> last;
  for (auto _ : state) {
    absl::StatusOr<ExecutionPlan> plan = BuildPlan(po);
    if (!plan.ok()) {
      state.SkipWithError(std::string(plan.status().message()).c_str());
      return std::nullopt;
    }
    absl::StatusOr<Prediction> pred = Predict(*plan, opts);
    if (!pred.ok()) {
      state.SkipWithError(std::string(pred.status().message()).c_str());
      return std::nullopt;
    }
    benchmark::DoNotOptimize(pred->devices.data());
    last = *std::move(pred);
  }
  return last;
}

void BM_Predict1F1B(benchmark::State& state) {
  const int dp = static_cast<int>(state.range(0)), pp = static_cast<int>(state.range(1));
  const int m = static_cast<int>(state.range(2));
  absl::StatusOr<Program> prog =
      BuildOneFOneB({.num_ranks = pp, .num_micro_batches = m, .activation_bytes = 16 << 20,
                     .gradient_bytes = uint64_t{1} << 30});
  if (!prog.ok()) {
    state.SkipWithError(std::string(prog.status().message()).c_str());
    return;
  }
  const PlanOptions po = PlanFor1F1B(dp, pp, static_cast<int>(state.range(3)), *prog);
  PredictOptions opts;
  opts.fold_replicas = state.range(4) != 0;
  const std::optional<Prediction> pred = TimePlanAndPredict(state, po, opts);
  if (!pred) return;
  const double device_ops = static_cast<double>(prog->num_ops()) * dp;
  state.counters["devices"] = dp * pp;
  state.counters["sim_ms"] = ToMillis(pred->step_time);
  state.counters["folded"] = pred->folded ? 1 : 0;
  state.counters["device_ops_per_s"] =
      benchmark::Counter(device_ops, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Predict1F1B)
    ->ArgNames({"dp", "pp", "m", "layers", "fold"})
    ->Args({1024, 16, 64, 16, 1})  // the target: < 1 s
    ->Args({1024, 16, 64, 160, 1})
    ->Args({64, 16, 64, 160, 1})
    ->Args({64, 16, 64, 160, 0})   // every device simulated: the same sim_ms
    ->Args({1, 16, 64, 16, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Repetitions(kRepetitions)
    ->ReportAggregatesOnly(true);

void BM_PredictFold(benchmark::State& state) {
  const int dp = static_cast<int>(state.range(0)), pp = static_cast<int>(state.range(1));
  const int ep = static_cast<int>(state.range(2));
  const bool dualpipe = state.range(3) != 0;
  const PipelineOptions popts{.num_ranks = pp, .num_micro_batches = 2 * pp, .num_chunks = dualpipe ? 2 : 1,
                              .activation_bytes = 16 << 20, .gradient_bytes = uint64_t{1} << 30};
  absl::StatusOr<Program> prog = dualpipe ? BuildDualPipe(popts) : BuildOneFOneB(popts);
  if (!prog.ok()) {
    state.SkipWithError(std::string(prog.status().message()).c_str());
    return;
  }
  PlanOptions po = PlanFor1F1B(dp, pp, 16, *prog);
  if (ep > 1) {
    for (int layer = 1; layer <= 15; ++layer) po.model.moe.layers.push_back(layer);
    po.model.moe.experts = 8;
    po.model.moe.expert_hidden = 64;
    po.ep = ep;
  }
  PredictOptions opts;
  opts.fold_replicas = state.range(4) != 0;
  const std::optional<Prediction> pred = TimePlanAndPredict(state, po, opts);
  if (!pred) return;
  state.counters["devices"] = dp * pp;
  state.counters["devices_played"] = pred->replicas_played * pp;
  state.counters["sim_ms"] = ToMillis(pred->step_time);
}
BENCHMARK(BM_PredictFold)
    ->ArgNames({"dp", "pp", "ep", "dualpipe", "fold"})
    ->Args({256, 4, 8, 0, 1})  // one EP group of 8 replicas played
    ->Args({256, 4, 8, 0, 0})
    ->Args({256, 4, 1, 1, 1})  // DualPipe: one replica played
    ->Args({256, 4, 1, 1, 0})
    ->Args({256, 4, 8, 1, 1})  // both
    ->Args({256, 4, 8, 1, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Repetitions(kRepetitions)
    ->ReportAggregatesOnly(true);

void BM_Validate(benchmark::State& state) {
  const int pp = static_cast<int>(state.range(0)), m = static_cast<int>(state.range(1));
  absl::StatusOr<Program> prog = BuildZeroBubble(
      {.num_ranks = pp, .num_micro_batches = m, .activation_bytes = 1 << 20,
       .gradient_bytes = 1 << 20});
  if (!prog.ok()) {
    state.SkipWithError(std::string(prog.status().message()).c_str());
    return;
  }
  for (auto _ : state) {
    auto rep = Validate(*prog);
    if (!rep.ok()) {
      state.SkipWithError(std::string(rep.status().message()).c_str());
      return;
    }
    benchmark::DoNotOptimize(rep->peak_in_flight.data());
  }
  state.counters["ops_per_s"] = benchmark::Counter(static_cast<double>(prog->num_ops()),
                                                   benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Validate)
    ->ArgNames({"pp", "m"})
    ->Args({16, 64})
    ->Args({64, 256})
    ->Unit(benchmark::kMicrosecond)
    ->Repetitions(kRepetitions)
    ->ReportAggregatesOnly(true);

}  // namespace
}  // namespace rp::schedule

BENCHMARK_MAIN();
