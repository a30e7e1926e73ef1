// Executor timing fidelity and scale (issue 5). Each benchmark iteration trains `steps` steps of
// SCENARIOS.md S1's timing model on a real MLP and reports the measured step time (modeled ms:
// wall / time_scale, median over steps) next to schedule::Predict's, and peak RSS.
//
// S1 timing model: 1F1B, m = 8, F = 50 ms, B = 80 ms per stage per micro-batch, every p2p transfer
// and every ring step 20 ms (LinkParams alpha = 20 ms, infinite bandwidth, one message per ring
// chunk: model_segment_bytes = 0), replicas on separate nodes.
//
// Manual time = the measured step time. Counters: measured_ms, predicted_ms, fidelity_pct
// (measured / predicted − 1, in %), devices, overruns, late_p99_ms (clock-wait lateness), rss_mb
// (peak resident set of the process so far), wall_s (whole run).
//
// Args: dp, pp, time_scale × 100, steps.
//   build/exec-rel/bench/executor_bench                       # S1 at 1 and 0.1, 256 devices
//   RINGPIPE_BENCH_FULL=1 build/exec-rel/bench/executor_bench  # adds 1024 devices
#include <sys/resource.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "benchmark/benchmark.h"
#include "schedule/executor.h"
#include "schedule/generators.h"

namespace rp::schedule {
namespace {

double PeakRssMb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

void BM_ExecutorS1(benchmark::State& state) {
  const int dp = static_cast<int>(state.range(0)), pp = static_cast<int>(state.range(1));
  const double scale = static_cast<double>(state.range(2)) / 100.0;
  const int steps = static_cast<int>(state.range(3));
  const int m = 8;
  auto prog = BuildOneFOneB({.num_ranks = pp, .num_micro_batches = m, .activation_bytes = 1 << 20,
                             .gradient_bytes = 1 << 20});
  if (!prog.ok()) {
    state.SkipWithError(std::string(prog.status().message()).c_str());
    return;
  }
  ExecutorOptions o;
  o.grid = {.dp = dp, .pp = pp, .tp = 1};
  o.placement.devices_per_node = pp;  // one replica per node: the DP ring crosses nodes
  o.program = *prog;
  o.model.hidden = std::vector<int>(static_cast<size_t>(std::max(pp, 6) - 1), 64);
  o.microbatch_size = dp * pp > 64 ? 4 : 32;
  o.cost = CostModel::Uniform({.forward = FromMillis(50), .backward = FromMillis(80)});
  o.links.intra_node = {.alpha = FromMillis(20), .bandwidth_gbps = 0};
  o.links.inter_node = {.alpha = FromMillis(20), .bandwidth_gbps = 0};
  o.model_segment_bytes = 0;
  o.time_scale = scale;
  o.steps = steps;
  o.eval_every = 0;
  o.eval_samples = 1024;
  o.run_reference = dp * pp <= 16;
  o.watchdog_timeout = std::chrono::seconds(120);
  RunResult res;
  for (auto _ : state) {
    auto ex = Executor::Create(o);
    if (!ex.ok()) {
      state.SkipWithError(std::string(ex.status().message()).c_str());
      return;
    }
    auto r = (*ex)->Run();
    if (!r.ok()) {
      state.SkipWithError(std::string(r.status().message()).c_str());
      return;
    }
    res = *r;
    state.SetIterationTime(res.measured_step_ms / 1e3);
  }
  state.counters["devices"] = dp * pp;
  state.counters["measured_ms"] = res.measured_step_ms;
  state.counters["predicted_ms"] = res.predicted_step_ms;
  state.counters["fidelity_pct"] = 100.0 * res.fidelity;
  state.counters["overruns"] = static_cast<double>(res.overruns);
  state.counters["late_p99_ms"] = ToMillis(res.lateness.Quantile(0.99));
  state.counters["rss_mb"] = PeakRssMb();
  state.counters["wall_s"] = res.wall_seconds;
  state.counters["loss"] = res.final_loss;
}

void Args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"dp", "pp", "scale_x100", "steps"});
  b->Args({2, 2, 100, 5});   // S1 at time scale 1
  b->Args({2, 2, 10, 10});   // S1 at time scale 0.1
  b->Args({32, 8, 100, 3});  // 256 devices at time scale 1
  if (std::getenv("RINGPIPE_BENCH_FULL") != nullptr) b->Args({128, 8, 100, 2});  // 1024 devices
  b->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_ExecutorS1)->Apply(Args);

}  // namespace
}  // namespace rp::schedule

BENCHMARK_MAIN();
