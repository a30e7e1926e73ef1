// Benchmarks of the emulated machine (runtime/): wait precision, tracing cost, cluster start/stop,
// and model kernel paths (a MoE stage's pass against its expert count; the ways of dx = dy · wᵀ).
//
// Wait lateness — methodology (also in docs/runtime.md, "Measuring wait lateness"):
//   BM_WaitLateness/devices/wait_us: `devices` threads wait at once, as device threads of an
//   emulation do: each thread has its own phase (seeded-uniform in [0, wait)) and waits on a
//   periodic chain of deadlines deadline_k = start + phase + k × wait, k = 0..K. Wait k = 0 is a
//   warm-up and is not counted (it absorbs the release from the start barrier, first-touch page
//   faults and thread start-up). After its last wait a thread parks on an exit barrier until every
//   thread has finished, so thread teardown (which costs 10-20 ms of CPU for 1024 threads) never
//   overlaps a measured wait. Lateness = steady_clock at return − the deadline's wall time,
//   measured identically for both methods:
//     wu: rp::RealClock::WaitUntil (default options)
//     su: plain std::this_thread::sleep_until (the thread's default 50 µs timer slack): baseline
//   Every benchmark iteration runs one round of each method, alternating which goes first, so
//   both see the same background load (this 2-core machine is shared). Counters: wu_p50_us,
//   wu_p99_us, su_p50_us, su_p99_us over all counted waits of all rounds, and the ratios
//   p50_gain = su_p50 / wu_p50 (> 1: WaitUntil less late) and p99_gain = su_p99 / wu_p99;
//   wu_cpu_us / su_cpu_us: process CPU time per counted wait (thread start/stop included).
//   Background load on the shared machine moves p99 from run to run: run the benchmark several
//   times (--benchmark_repetitions) and compare medians over runs.
//   Rows where devices / wait exceeds what 2 cores can wake (e.g. 256 threads every 10 µs) are
//   saturated for both methods and say nothing about precision.
//   BM_WaitLatenessLoaded/devices/wait_us: the same while a forked child process busy-loops (one
//   CPU of two kept busy by another program, for both methods); WaitUntil's load adaptation
//   should then run it crowded (counter adapted = 1, ext_load ≈ 0.5).
//   Before measuring, each benchmark runs one uncounted WaitUntil round (the clock learns its lead
//   and the host's load, as in the first 0.2 s of an emulation).
//   BM_WaitLatenessAligned/devices/wait_us: the same, but every thread has phase 0 — all
//   deadlines identical, all threads due at the same instant. That is bounded by the cost of
//   waking N threads on 2 cores (~N × a few µs for the last one), whatever the waiting method;
//   it is reported separately and is not what an emulation does.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "runtime/device.h"
#include "runtime/lateness.h"
#include "runtime/model/kernels.h"
#include "runtime/model/mlp.h"
#include "runtime/real_clock.h"
#include "runtime/tracer.h"
#include "runtime/virtual_clock.h"

namespace rp {
namespace {

using SteadyClock = std::chrono::steady_clock;

// CPU time (user + system) the whole process has used so far, in ns.
int64_t ProcessCpuNs() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  const auto ns = [](const timeval& tv) {
    return int64_t{tv.tv_sec} * 1'000'000'000 + int64_t{tv.tv_usec} * 1000;
  };
  return ns(u.ru_utime) + ns(u.ru_stime);
}

enum class WaitMethod { kWaitUntil, kSleepUntil };

// One round: `devices` threads, `waits` counted periodic waits each (plus one warm-up wait).
void RunWaitRound(RealClock& clock, WaitMethod method, int devices, Nanos wait, int waits,
                  bool aligned, uint64_t seed, LatenessStats* out) {
  std::vector<LatenessStats> per_thread(static_cast<size_t>(devices));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(devices));
  std::atomic<int64_t> start_ns{-1};
  std::atomic<int> finished{0};
  for (int t = 0; t < devices; ++t) {
    threads.emplace_back([&, t] {
      int64_t s0;
      while ((s0 = start_ns.load(std::memory_order_acquire)) < 0) start_ns.wait(-1);
      std::mt19937_64 rng(seed * 7919 + static_cast<uint64_t>(t));
      const Nanos phase =
          aligned ? Nanos(0) : Nanos(static_cast<int64_t>(rng() % static_cast<uint64_t>(wait.count())));
      LatenessStats& stats = per_thread[static_cast<size_t>(t)];
      for (int k = 0; k <= waits; ++k) {
        const Nanos deadline = Nanos(s0) + phase + wait * k;
        const SteadyClock::time_point target = clock.WallOf(deadline);
        if (method == WaitMethod::kWaitUntil) {
          clock.WaitUntil(deadline);
        } else {
          std::this_thread::sleep_until(target);
        }
        const Nanos late = std::chrono::duration_cast<Nanos>(SteadyClock::now() - target);
        if (k > 0) stats.Record(late);  // k = 0: warm-up, not counted
      }
      // Exit barrier: no thread exits while another still has a measured wait ahead.
      int done = finished.fetch_add(1, std::memory_order_acq_rel) + 1;
      if (done == devices) {
        finished.notify_all();
      } else {
        while ((done = finished.load(std::memory_order_acquire)) < devices) finished.wait(done);
      }
    });
  }
  // Every thread exists; the warm-up deadline leaves them time to wake from the start signal.
  start_ns.store((clock.Now() + FromMillis(2) + Nanos(int64_t{devices} * 20000)).count(),
                 std::memory_order_release);  // pairs with the acquire in the threads
  start_ns.notify_all();
  for (auto& th : threads) th.join();
  for (const auto& s : per_thread) out->Merge(s);
}

// A busy child process (another program keeping one CPU busy) for the lifetime of the object.
class ExternalHog {
 public:
  ExternalHog() {
    pid_ = fork();
    if (pid_ == 0) {
      volatile uint64_t x = 0;
      for (;;) x = x + 1;  // killed by the parent
    }
  }
  ~ExternalHog() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  bool ok() const { return pid_ > 0; }

 private:
  pid_t pid_ = -1;
};

void WaitLatenessBenchmark(benchmark::State& state, bool aligned, bool loaded = false) {
  const int devices = static_cast<int>(state.range(0));
  const Nanos wait = FromMicros(static_cast<double>(state.range(1)));
  // About 0.2 s of waiting per round, at least 10 counted waits per thread.
  const int waits = static_cast<int>(std::clamp<int64_t>(FromMillis(200) / wait, 10, 200));
  std::unique_ptr<ExternalHog> hog;
  if (loaded) {
    hog = std::make_unique<ExternalHog>();
    if (!hog->ok()) {
      state.SkipWithError("fork failed");
      return;
    }
  }
  auto clock = RealClock::Create({}).value();
  // One uncounted WaitUntil round first (~0.2 s): the clock learns its lead and the host's load
  // (two load windows), as it has in an emulation after its first 0.2 s. Runs on threads of its
  // own, like every round: WaitUntil sets its caller's timer slack, which threads created later
  // would inherit (sleep_until's baseline with them).
  {
    LatenessStats discard;
    RunWaitRound(*clock, WaitMethod::kWaitUntil, devices, wait, waits, aligned, 0, &discard);
  }
  LatenessStats wu;
  LatenessStats su;
  int64_t wu_cpu_ns = 0;
  int64_t su_cpu_ns = 0;
  uint64_t round = 0;
  for (auto _ : state) {
    // Alternate the order so neither method always runs right after the other.
    const bool wu_first = round % 2 == 0;
    for (int i = 0; i < 2; ++i) {
      const bool run_wu = (i == 0) == wu_first;
      const int64_t cpu0 = ProcessCpuNs();
      RunWaitRound(*clock, run_wu ? WaitMethod::kWaitUntil : WaitMethod::kSleepUntil, devices,
                   wait, waits, aligned, round + 1, run_wu ? &wu : &su);
      (run_wu ? wu_cpu_ns : su_cpu_ns) += ProcessCpuNs() - cpu0;
    }
    ++round;
  }
  const auto us = [](Nanos t) { return static_cast<double>(t.count()) / 1e3; };
  state.counters["wu_p50_us"] = us(wu.Quantile(0.5));
  state.counters["wu_p99_us"] = us(wu.Quantile(0.99));
  state.counters["su_p50_us"] = us(su.Quantile(0.5));
  state.counters["su_p99_us"] = us(su.Quantile(0.99));
  state.counters["p50_gain"] = us(su.Quantile(0.5)) / std::max(us(wu.Quantile(0.5)), 1e-3);
  state.counters["p99_gain"] = us(su.Quantile(0.99)) / std::max(us(wu.Quantile(0.99)), 1e-3);
  // CPU the process used per counted wait (thread start/stop included, the same for both).
  state.counters["wu_cpu_us"] = static_cast<double>(wu_cpu_ns) / 1e3 / std::max<double>(1, static_cast<double>(wu.count()));
  state.counters["su_cpu_us"] = static_cast<double>(su_cpu_ns) / 1e3 / std::max<double>(1, static_cast<double>(su.count()));
  state.counters["lead_us"] = us(clock->learned_lead());
  state.counters["ext_load"] = clock->external_load();
  state.counters["own_load"] = clock->own_load();
  state.counters["adapted"] = clock->load_adapted() ? 1 : 0;
  state.counters["waits"] = static_cast<double>(wu.count());
}

void BM_WaitLateness(benchmark::State& state) { WaitLatenessBenchmark(state, false); }
BENCHMARK(BM_WaitLateness)
    ->ArgNames({"devices", "wait_us"})
    ->ArgsProduct({{1, 64, 256, 1024}, {10, 100, 1000, 10000}})
    ->Iterations(3)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// The same with another process keeping one CPU busy for the whole run (both methods).
void BM_WaitLatenessLoaded(benchmark::State& state) { WaitLatenessBenchmark(state, false, true); }
BENCHMARK(BM_WaitLatenessLoaded)
    ->ArgNames({"devices", "wait_us"})
    ->ArgsProduct({{1, 64}, {1000, 10000}})
    ->Iterations(3)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void BM_WaitLatenessAligned(benchmark::State& state) { WaitLatenessBenchmark(state, true); }
BENCHMARK(BM_WaitLatenessAligned)
    ->ArgNames({"devices", "wait_us"})
    ->ArgsProduct({{64, 1024}, {1000, 10000}})
    ->Iterations(3)
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

// One Forward and Backward of a stage whose middle layer is a MoE block of `experts` experts (width
// 64, expert hidden 1, 32 tokens, top-2, one device: local exchanges): the experts' work is a few
// rows each, so the pass's cost is the per-expert bookkeeping, which must grow linearly with the
// experts (`Complexity` fits it). The gather and scatter of each expert's rows recomputed the
// offsets of every block: quadratic — a 1-step virtual run with 16 384 experts took 27 s, 4 s once
// the offsets were computed once per pass.
void BM_MoeStagePass(benchmark::State& state) {
  MlpConfig c;
  c.input_dim = 64;
  c.hidden = {64, 64};
  c.classes = 10;
  c.moe.layers = {1};
  c.moe.experts = static_cast<int>(state.range(0));
  c.moe.top_k = 2;
  c.moe.expert_hidden = 1;
  absl::StatusOr<ModelPartition> part = PartitionMlp(c, 1, 1);
  if (!part.ok()) return state.SkipWithError(std::string(part.status().message()).c_str());
  absl::StatusOr<std::unique_ptr<MlpStage>> stage = MlpStage::Create(c, *part, 0, /*tp_rank=*/0);
  if (!stage.ok()) return state.SkipWithError(std::string(stage.status().message()).c_str());
  Tensor x(32, 64), dy(32, 10);
  for (int64_t i = 0; i < x.size(); ++i) x.data()[i] = static_cast<float>((i * 37) % 101) / 101.0f - 0.5f;
  for (int64_t i = 0; i < dy.size(); ++i) dy.data()[i] = static_cast<float>((i * 13) % 7) / 7.0f - 0.5f;
  const TpAllReduceFn identity = [](std::span<float>) { return absl::OkStatus(); };
  for (auto _ : state) {
    absl::StatusOr<Tensor> y = (*stage)->Forward(0, x, identity);
    if (!y.ok()) return state.SkipWithError(std::string(y.status().message()).c_str());
    absl::StatusOr<Tensor> dx = (*stage)->Backward(0, dy, identity);
    if (!dx.ok()) return state.SkipWithError(std::string(dx.status().message()).c_str());
    benchmark::DoNotOptimize(dx->data());
  }
  state.SetComplexityN(state.range(0));
}
BENCHMARK(BM_MoeStagePass)
    ->ArgNames({"experts"})
    ->RangeMultiplier(4)
    ->Range(256, 16384)
    ->Complexity(benchmark::oN)
    ->Unit(benchmark::kMillisecond);

// dx = dy · wᵀ (MatMulTransposedB, a dense layer's backward input gradient) for n rows of dy and a
// k × m w, each way it can take (way 1: strips of 16 rows of w transposed, then MatMul's register
// blocks; 2: w transposed whole, then MatMul; 0: kAuto's choice), up to a wide layer's TP shards.
// Compare ways within one run (kernels.h).
void BM_MatMulTransposedB(benchmark::State& state) {
  const int64_t n = state.range(0), k = state.range(1), m = state.range(2);
  const auto way = static_cast<TransposedBWay>(state.range(3));
  Tensor dy(n, m), w(k, m), dx(n, k), scratch;
  for (int64_t i = 0; i < dy.size(); ++i) dy.data()[i] = static_cast<float>((i * 37) % 101) / 101.0f - 0.5f;
  for (int64_t i = 0; i < w.size(); ++i) w.data()[i] = static_cast<float>((i * 13) % 97) / 97.0f - 0.5f;
  for (auto _ : state) {
    if (absl::Status st = MatMulTransposedB(dy, w, dx, &scratch, way); !st.ok()) {
      return state.SkipWithError(std::string(st.message()).c_str());
    }
    benchmark::DoNotOptimize(dx.data());
  }
  state.counters["gproducts_per_s"] = benchmark::Counter(static_cast<double>(n * k * m) * 1e-9,
                                                         benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_MatMulTransposedB)
    ->ArgNames({"n", "k", "m", "way"})
    ->ArgsProduct({{1, 16, 64, 128, 256}, {64, 1024}, {64, 1024}, {0, 1, 2}})
    ->ArgsProduct({{16, 32, 64, 256}, {256, 2048}, {256, 2048}, {1, 2}})
    ->Unit(benchmark::kMicrosecond);

// y = x · w (MatMul, a dense layer's forward) for n rows of x and a k × m w: small layers (the
// scaling benchmark's 64 wide) to a wide model's TP shards (2048 × 256, 256 × 2048) whose w
// (2 MB) lies past L2.
void BM_MatMul(benchmark::State& state) {
  const int64_t n = state.range(0), k = state.range(1), m = state.range(2);
  Tensor x(n, k), w(k, m), y(n, m);
  for (int64_t i = 0; i < x.size(); ++i) x.data()[i] = static_cast<float>((i * 37) % 101) / 101.0f - 0.5f;
  for (int64_t i = 0; i < w.size(); ++i) w.data()[i] = static_cast<float>((i * 13) % 97) / 97.0f - 0.5f;
  for (auto _ : state) {
    if (absl::Status st = MatMul(x, w, y); !st.ok()) {
      return state.SkipWithError(std::string(st.message()).c_str());
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["gproducts_per_s"] = benchmark::Counter(static_cast<double>(n * k * m) * 1e-9,
                                                         benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_MatMul)
    ->ArgNames({"n", "k", "m"})
    ->Args({16, 64, 64})
    ->Args({64, 1024, 1024})
    ->Args({32, 2048, 256})
    ->Args({32, 256, 2048})
    ->Args({256, 2048, 2048})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace rp

BENCHMARK_MAIN();
