// Executor timing fidelity and scale (issues 11 and 13). Each benchmark iteration is one whole
// training run; its figures are the run's medians over steps (RunResult):
//   measured   wall stamps on the device threads ÷ time scale (real clock; virtual: = emulated)
//   emulated   the run's own modeled timeline, emerging from its messages on the fabric
//   predicted  schedule::Predict of the same plan
//   fidelity_host_pct = 100 (measured / emulated − 1): host noise; the target is |·| <= 1 % for
//   S1 at time scale 1 and <= 3 % for 256 devices at a time scale the host sustains.
//   fidelity_model_pct = 100 (emulated / predicted − 1): what the predictor misses (0 on a
//   virtual clock, by construction; on a real clock too — the modeled timeline does not depend on
//   the host).
//
// BM_ExecutorS1 — SCENARIOS.md S1 on a real clock: DP 2 × PP 2, 1F1B, m = 8, F 50 ms, B 80 ms,
//   every message 20 ms (α = 20 ms, infinite bandwidth, one message per ring chunk), replicas on
//   separate nodes; step 1210 ms. Args: scale_x100 (time scale × 100), steps.
// BM_ExecutorReal — `ringpipe run --dp=16 --pp=8 --tp=2 --hidden=64x16` (256 devices) on a real
//   clock: 1F1B, m = 4, F 2 ms, B 4 ms, optimizer 0 (so every real update is an overrun: one per
//   device and step), DGX-A100 links; step 66.46 ms. Args: dp, scale_x100, steps. The sweep
//   brackets the scale the host sustains. Measured on a 2-core host shared with other jobs (load
//   average 6-8), fidelity.host: S1 at scale 1 +0.03 %; 256 devices at scale 1 +366..513 %, 4
//   +42..45 %, 8 +1.9 %, 16 +1.2..1.7 % — 8 is the smallest of these scales this host sustains
//   for 256 devices (|fidelity.host| <= 3 %).
// BM_ExecutorVirtual — the same layout on the virtual clock: host speed (real time per run,
//   device_ops_per_s = program ops of every device per wall second) and emulated == predicted.
//   Args: dp, steps (pp 8 × tp 2 = 16 devices per replica).
//
// Counters: devices, measured_ms, emulated_ms, predicted_ms, fidelity_host_pct,
// fidelity_model_pct, overruns, late_p99_ms (clock-wait lateness, modeled ms), crowded_pct (clock
// waits that ran as plain sleeps), rss_mb (peak resident set of the process so far), wall_s (whole
// run), device_ops_per_s.
//
//   build/release/bench/executor_bench                        # S1, 256 devices (real, virtual)
//   RINGPIPE_BENCH_FULL=1 build/release/bench/executor_bench  # adds 1024 devices (virtual)
#include <sys/resource.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "runtime/link_models.h"
#include "schedule/executor.h"
#include "schedule/generators.h"

namespace rp::schedule {
namespace {

double PeakRssMb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

// S1 (SCENARIOS.md; tests/schedule/executor_test.cc S1ModeledStepMatchesClosedForm).
absl::StatusOr<ExecutorOptions> S1Options() {
  absl::StatusOr<Program> prog = BuildOneFOneB({.num_ranks = 2, .num_micro_batches = 8,
                                                .activation_bytes = 4096, .gradient_bytes = 4096});
  if (!prog.ok()) return prog.status();
  ExecutorOptions o;
  o.grid = {.dp = 2, .pp = 2, .tp = 1};
  o.placement.devices_per_node = 2;  // replicas on separate nodes
  o.links.devices_per_node = 2;
  o.program = *prog;
  o.cost = CostModel::Uniform({.forward = FromMillis(50), .backward = FromMillis(80)});
  o.links.inter_node = {.alpha = FromMillis(20), .bandwidth_gbps = 0};
  o.segment_bytes = 0;  // one message per chunk: 2 (n − 1) ring steps of 20 ms
  o.eval_every = 0;
  o.eval_samples = 1024;
  o.run_reference = false;
  return o;
}

// `ringpipe run --dp=<dp> --pp=8 --tp=2 --hidden=64x16` with the default costs and links.
absl::StatusOr<ExecutorOptions> LayoutOptions(int dp) {
  constexpr int kPp = 8, kTp = 2, kMicroBatches = 4, kMicroBatchSize = 8, kWidth = 64;
  absl::StatusOr<Program> prog = BuildOneFOneB(
      {.num_ranks = kPp, .num_micro_batches = kMicroBatches,
       .activation_bytes = uint64_t{kMicroBatchSize} * kWidth * 4,
       .tp_allreduce_bytes = uint64_t{kMicroBatchSize} * kWidth * 4,
       .gradient_bytes = uint64_t{2} * kWidth * kWidth * 4 / kTp});
  if (!prog.ok()) return prog.status();
  ExecutorOptions o;
  o.grid = {.dp = dp, .pp = kPp, .tp = kTp};
  o.program = *prog;
  o.model.hidden = std::vector<int>(16, kWidth);
  o.microbatch_size = kMicroBatchSize;
  o.dataset.test_size = 256;
  o.cost = CostModel::Uniform({.forward = FromMillis(2), .backward = FromMillis(4)});
  o.links = DgxA100();
  o.placement.devices_per_node = o.links.devices_per_node;
  o.eval_every = 0;
  o.eval_samples = 256;
  o.run_reference = false;
  o.watchdog_timeout = std::chrono::seconds(60);
  return o;
}

// Runs `o` once per iteration; manual time = the measured step (modeled seconds) when
// `manual_time`, else the benchmark's own real time. Sets the counters above.
void RunAndReport(benchmark::State& state, const ExecutorOptions& o, bool manual_time) {
  RunResult res;
  for (auto _ : state) {
    absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
    if (!ex.ok()) {
      state.SkipWithError(std::string(ex.status().message()).c_str());
      return;
    }
    absl::StatusOr<RunResult> r = (*ex)->Run();
    if (!r.ok()) {
      state.SkipWithError(std::string(r.status().message()).c_str());
      return;
    }
    res = *std::move(r);
    if (manual_time) state.SetIterationTime(res.measured_step_ms / 1e3);
  }
  const int world = o.grid.dp * o.grid.pp * o.grid.tp;
  double device_ops = 0;
  for (int pp = 0; pp < o.grid.pp; ++pp) {
    device_ops += static_cast<double>(o.program.ranks[static_cast<size_t>(pp)].size()) *
                  o.grid.dp * o.grid.tp * o.steps;
  }
  state.counters["devices"] = world;
  state.counters["measured_ms"] = res.measured_step_ms;
  state.counters["emulated_ms"] = res.emulated_step_ms;
  state.counters["predicted_ms"] = res.predicted_step_ms;
  state.counters["fidelity_host_pct"] = 100.0 * res.fidelity_host;
  state.counters["fidelity_model_pct"] = 100.0 * res.fidelity_model;
  state.counters["overruns"] = static_cast<double>(res.overruns);
  state.counters["late_p99_ms"] = ToMillis(res.lateness.Quantile(0.99));
  state.counters["crowded_pct"] =
      res.clock_waits == 0 ? 0.0
                           : 100.0 * static_cast<double>(res.clock_crowded_waits) /
                                 static_cast<double>(res.clock_waits);
  state.counters["rss_mb"] = PeakRssMb();
  state.counters["wall_s"] = res.wall_seconds;
  state.counters["device_ops_per_s"] = res.wall_seconds > 0 ? device_ops / res.wall_seconds : 0;
}

void BM_ExecutorS1(benchmark::State& state) {
  absl::StatusOr<ExecutorOptions> o = S1Options();
  if (!o.ok()) {
    state.SkipWithError(std::string(o.status().message()).c_str());
    return;
  }
  o->time_scale = static_cast<double>(state.range(0)) / 100.0;
  o->steps = static_cast<int>(state.range(1));
  RunAndReport(state, *o, /*manual_time=*/true);
}
BENCHMARK(BM_ExecutorS1)
    ->ArgNames({"scale_x100", "steps"})
    ->Args({100, 5})  // the target: |fidelity.host| <= 1 %
    ->Args({10, 10})
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

void BM_ExecutorReal(benchmark::State& state) {
  absl::StatusOr<ExecutorOptions> o = LayoutOptions(static_cast<int>(state.range(0)));
  if (!o.ok()) {
    state.SkipWithError(std::string(o.status().message()).c_str());
    return;
  }
  o->time_scale = static_cast<double>(state.range(1)) / 100.0;
  o->steps = static_cast<int>(state.range(2));
  RunAndReport(state, *o, /*manual_time=*/true);
}
BENCHMARK(BM_ExecutorReal)
    ->ArgNames({"dp", "scale_x100", "steps"})
    ->Args({16, 100, 5})   // 256 devices at time scale 1
    ->Args({16, 400, 5})   // at 4
    ->Args({16, 800, 5})   // at 8: sustained on a 2-core host (|fidelity.host| <= 3 %)
    ->Args({16, 1600, 5})  // at 16
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

void BM_ExecutorVirtual(benchmark::State& state) {
  absl::StatusOr<ExecutorOptions> o = LayoutOptions(static_cast<int>(state.range(0)));
  if (!o.ok()) {
    state.SkipWithError(std::string(o.status().message()).c_str());
    return;
  }
  o->virtual_time = true;
  o->steps = static_cast<int>(state.range(1));
  RunAndReport(state, *o, /*manual_time=*/false);
}
void VirtualArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"dp", "steps"});
  b->Args({16, 10});  // 256 devices
  if (std::getenv("RINGPIPE_BENCH_FULL") != nullptr) b->Args({64, 10});  // 1024 devices
  b->Iterations(1)->Repetitions(3)->ReportAggregatesOnly(true)->UseRealTime();
  b->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_ExecutorVirtual)->Apply(VirtualArgs);

}  // namespace
}  // namespace rp::schedule

BENCHMARK_MAIN();
