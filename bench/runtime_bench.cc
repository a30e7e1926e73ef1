// Benchmarks of the emulated machine (runtime/): wait precision, tracing cost, cluster start/stop.
//
// BM_WaitLateness/devices/wait_us/method: `devices` threads wait at once, each on a chain of
// deadlines `wait_us` apart (deadline_k = start + phase + k × wait, phase seeded-uniform in
// [0, wait) per thread, as devices with modeled timestamps do). Lateness = steady_clock at return
// − deadline, measured identically for every method:
//   method 0: rp::RealClock::WaitUntil (hybrid: 1 ns timer slack, sleep, bounded spin)
//   method 1: plain std::this_thread::sleep_until (default 50 µs timer slack) — the baseline
//   method 2: sleep_until after PR_SET_TIMERSLACK 1 ns (to show what the slack alone gives)
// Counters: p50_us, p99_us (over all waits of all threads and iterations), waits.
#include <sys/prctl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "runtime/device.h"
#include "runtime/lateness.h"
#include "runtime/real_clock.h"
#include "runtime/tracer.h"
#include "runtime/virtual_clock.h"

namespace rp {
namespace {

using SteadyClock = std::chrono::steady_clock;

void BM_WaitLateness(benchmark::State& state) {
  const int devices = static_cast<int>(state.range(0));
  const Nanos wait = FromMicros(static_cast<double>(state.range(1)));
  const int method = static_cast<int>(state.range(2));
  // About 0.2 s of waiting per iteration, at least 10 waits per thread.
  const int waits_per_thread =
      static_cast<int>(std::clamp<int64_t>(FromMillis(200) / wait, 10, 200));
  auto clock = RealClock::Create({}).value();
  LatenessStats all;
  uint64_t seed = 1;
  for (auto _ : state) {
    std::vector<LatenessStats> per_thread(static_cast<size_t>(devices));
    std::vector<std::thread> threads;
    threads.reserve(static_cast<size_t>(devices));
    // Everyone starts from the same instant, published once every thread exists.
    std::atomic<int64_t> start_ns{-1};
    for (int t = 0; t < devices; ++t) {
      threads.emplace_back([&, t] {
        int64_t s0;
        while ((s0 = start_ns.load(std::memory_order_acquire)) < 0) start_ns.wait(-1);
        const Nanos start(s0);
        if (method == 2) prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
        std::mt19937_64 rng(seed * 7919 + static_cast<uint64_t>(t));
        const Nanos phase(static_cast<int64_t>(rng() % static_cast<uint64_t>(wait.count())));
        LatenessStats& stats = per_thread[static_cast<size_t>(t)];
        for (int k = 1; k <= waits_per_thread; ++k) {
          const Nanos deadline = start + phase + wait * k;
          const SteadyClock::time_point target = clock->WallOf(deadline);
          if (method == 0) {
            clock->WaitUntil(deadline);
          } else {
            std::this_thread::sleep_until(target);
          }
          stats.Record(std::chrono::duration_cast<Nanos>(SteadyClock::now() - target));
        }
      });
    }
    // Leave time for every thread to wake from the start signal before its first deadline.
    start_ns.store((clock->Now() + FromMillis(2) + Nanos(devices * 30000)).count(),
                   std::memory_order_release);  // pairs with the acquire above
    start_ns.notify_all();
    for (auto& th : threads) th.join();
    for (const auto& s : per_thread) all.Merge(s);
    ++seed;
  }
  state.counters["p50_us"] = static_cast<double>(all.Quantile(0.5).count()) / 1e3;
  state.counters["p99_us"] = static_cast<double>(all.Quantile(0.99).count()) / 1e3;
  state.counters["waits"] = static_cast<double>(all.count());
}
BENCHMARK(BM_WaitLateness)
    ->ArgNames({"devices", "wait_us", "method"})
    ->ArgsProduct({{1, 64, 256, 1024}, {10, 100, 1000, 10000}, {0, 1, 2}})
    ->Iterations(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Cost of one Record() on the recording thread (timestamps prepared by the caller).
void BM_TracerRecord(benchmark::State& state) {
  auto tracer = std::make_unique<Tracer>(1, 8);
  TraceEvent e{.name = "F", .rank = 0, .micro_batch = 1};
  int64_t i = 0;
  for (auto _ : state) {
    e.wall_start_ns = i;
    e.wall_end_ns = ++i;
    tracer->Record(e);
  }
  benchmark::DoNotOptimize(tracer.get());
  state.counters["ns_per_event"] =
      benchmark::Counter(static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_TracerRecord)->Iterations(2000000);

// Same, with the two steady_clock reads a traced op takes (start and end).
void BM_TracerRecordWithTimestamps(benchmark::State& state) {
  auto tracer = std::make_unique<Tracer>(1, 8);
  TraceEvent e{.name = "F", .rank = 0, .micro_batch = 1};
  for (auto _ : state) {
    e.wall_start_ns = tracer->WallNow();
    e.wall_end_ns = tracer->WallNow();
    tracer->Record(e);
  }
  state.counters["ns_per_event"] =
      benchmark::Counter(static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_TracerRecordWithTimestamps)->Iterations(2000000);

// Starting and joining every device's compute thread and comm stream (empty body).
void BM_ClusterStartStop(benchmark::State& state) {
  VirtualClock clock;
  auto cluster = Cluster::Create({.num_devices = static_cast<int>(state.range(0)),
                                  .clock = &clock})
                     .value();
  for (auto _ : state) {
    absl::Status s = cluster->Run([](Device&) { return absl::OkStatus(); });
    if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
  }
}
BENCHMARK(BM_ClusterStartStop)
    ->ArgNames({"devices"})
    ->Arg(64)
    ->Arg(1024)
    ->Iterations(5)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace rp

BENCHMARK_MAIN();
