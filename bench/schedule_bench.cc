// Predictor and validator speed. The target: one step of DP = 1024 × PP = 16 × m = 64 in < 1 s.
// Real time (host throughput). Args: dp, pp, m, dedupe (1: replica classes, 0: every replica simulated).
#include <cstdint>
#include <string>

#include "benchmark/benchmark.h"
#include "schedule/generators.h"
#include "schedule/predictor.h"
#include "schedule/validator.h"

namespace rp::schedule {
namespace {

void BM_Predict1F1B(benchmark::State& state) {
  const int dp = static_cast<int>(state.range(0)), pp = static_cast<int>(state.range(1));
  const int m = static_cast<int>(state.range(2));
  auto prog = BuildOneFOneB({.num_ranks = pp, .num_micro_batches = m, .activation_bytes = 16 << 20,
                             .gradient_bytes = uint64_t{1} << 30, .buckets_per_chunk = 4});
  auto grid = ParallelGrid::Create({.dp = dp, .pp = pp, .tp = 1});
  if (!prog.ok() || !grid.ok()) {
    state.SkipWithError("setup failed");
    return;
  }
  PredictOptions opts;
  opts.links.intra_node = {.alpha = FromMicros(3), .bandwidth_gbps = 150};  // NVLink-like
  opts.links.inter_node = {.alpha = FromMicros(10), .bandwidth_gbps = 25};  // IB-like
  opts.dp_ring = {.segment_bytes = 4 << 20, .codec = Codec::kBf16};
  opts.dedupe_replicas = state.range(3) != 0;
  const CostModel cost = CostModel::Uniform(
      {.forward = FromMillis(10), .backward = FromMillis(20), .activation_bytes = 1 << 30});
  int classes = 0;
  for (auto _ : state) {
    auto pred = Predict(*prog, *grid, cost, opts);
    if (!pred.ok()) {
      state.SkipWithError(std::string(pred.status().message()).c_str());
      return;
    }
    classes = pred->num_replica_classes();
    benchmark::DoNotOptimize(pred->step_time);
  }
  const double ops = static_cast<double>(prog->num_ops()) * dp;
  state.counters["devices"] = dp * pp;
  state.counters["replica_classes"] = classes;
  state.counters["device_ops_per_s"] = benchmark::Counter(ops, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Predict1F1B)
    ->ArgNames({"dp", "pp", "m", "dedupe"})
    ->Args({1024, 16, 64, 1})
    ->Args({1024, 16, 64, 0})
    ->Args({1, 16, 64, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_Validate(benchmark::State& state) {
  const int pp = static_cast<int>(state.range(0)), m = static_cast<int>(state.range(1));
  auto prog = BuildZeroBubble({.num_ranks = pp, .num_micro_batches = m, .activation_bytes = 1 << 20,
                               .gradient_bytes = 1 << 20});
  if (!prog.ok()) {
    state.SkipWithError("setup failed");
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
BENCHMARK(BM_Validate)->ArgNames({"pp", "m"})->Args({16, 64})->Args({64, 256})->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace rp::schedule

BENCHMARK_MAIN();
