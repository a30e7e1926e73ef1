// comm/ benchmarks: ringpipe's ring all-reduce against two same-run baselines.
//
//   BM_RingAllReduce/ranks/bytes/segment[/codec]  rp::comm all-reduce, ideal link, in-place.
//   BM_RingAllReduceLendOnly/...                  the same without the inline small-message path
//        and without the yield phase in waits (inline_bytes = 0, yield_iterations = 0).
//   BM_RingAllReduceNoForward/...                 the same without all-gather forwarding
//        (CommunicatorOptions::forward_lends = false).
//   BM_PlainRing/ranks/bytes                      the reference: a plain threaded ring written
//        here (one thread per rank, each rank reduces straight out of its predecessor's buffer,
//        hand-off by std::atomic wait/notify on per-rank progress counters, 256 KiB sub-chunks).
//   BM_AddLoop/bytes                              one thread, dst[i] += src[i] over the same bytes:
//        the machine's memory-bandwidth bound.
//   BM_EventRing/rings/ranks/chunk                the virtual clock's message path alone: `rings`
//        ring all-reduces of `ranks` event-driven comm streams each (rp::Fabric + EventCommStream,
//        as a run's DP gradient buckets; rank k of ring r on device k * rings + r, DGX-A100 links),
//        `chunk` floats per ring chunk, every commit on the benchmark thread. Counter
//        time_per_message: CPU per fabric message (commit, reduce, next send, post), the cost issue
//        13's linear scaling turns on (a 4096-device run is 16 rings of 256 ranks, 8-float chunks).
// Counters: algbw = bytes / time, busbw = algbw * 2 (n - 1) / n (GB/s, 1e9). Real time.
//
// Ranks are threads: rank 0 runs on the benchmark thread, ranks 1..n-1 on pooled threads woken per
// iteration (the same harness for ringpipe and the plain ring).
//
// Default grid is sparse (a few minutes). Full grid (ranks {2,4,8} x 4 KiB..256 MiB x segments
// 4 KiB..4 MiB x codecs; hours): RINGPIPE_BENCH_FULL=1 ./comm_bench.
// Medians:  ./comm_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "comm/collectives.h"
#include "comm/comm_stream.h"
#include "comm/communicator.h"
#include "runtime/fabric.h"
#include "runtime/link_models.h"

namespace {

using rp::comm::Codec;

// Runs body(rank) on n ranks per iteration: rank 0 on the caller, the others on pooled threads.
class RankPool {
 public:
  RankPool(int n, std::function<void(int)> body) : n_(n), body_(std::move(body)) {
    for (int r = 1; r < n_; ++r) threads_.emplace_back([this, r] { Loop(r); });
  }
  ~RankPool() {
    stop_.store(true, std::memory_order_relaxed);
    gen_.fetch_add(1, std::memory_order_release);
    gen_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void RunOnce() {
    done_.store(0, std::memory_order_relaxed);
    gen_.fetch_add(1, std::memory_order_release);  // acquired by Loop's gen_ load
    gen_.notify_all();
    body_(0);
    for (int spins = 0;; ++spins) {
      const int d = done_.load(std::memory_order_acquire);  // released by Loop's fetch_add
      if (d == n_ - 1) break;
      if (spins > 64) done_.wait(d, std::memory_order_acquire);
    }
  }

 private:
  void Loop(int r) {
    uint32_t seen = 0;
    while (true) {
      for (int spins = 0;; ++spins) {
        const uint32_t g = gen_.load(std::memory_order_acquire);
        if (g != seen) {
          seen = g;
          break;
        }
        if (spins > 64) gen_.wait(g, std::memory_order_acquire);
      }
      if (stop_.load(std::memory_order_relaxed)) return;
      body_(r);
      done_.fetch_add(1, std::memory_order_release);
      done_.notify_one();
    }
  }

  const int n_;
  std::function<void(int)> body_;
  std::vector<std::thread> threads_;
  std::atomic<uint32_t> gen_{0};
  std::atomic<int> done_{0};
  std::atomic<bool> stop_{false};
};

void SetCounters(benchmark::State& state, int n, double bytes) {
  const double iters = static_cast<double>(state.iterations());
  state.counters["algbw"] = benchmark::Counter(bytes * iters / 1e9, benchmark::Counter::kIsRate);
  state.counters["busbw"] = benchmark::Counter(bytes * iters / 1e9 * 2.0 * (n - 1) / n,
                                               benchmark::Counter::kIsRate);
}

// Runs rp::comm's all-reduce with communicator options `co` (devices are filled in here).
void RunRingAllReduce(benchmark::State& state, rp::comm::CommunicatorOptions co) {
  const int n = static_cast<int>(state.range(0));
  const size_t bytes = static_cast<size_t>(state.range(1));
  const size_t segment = static_cast<size_t>(state.range(2));
  const Codec codec = static_cast<Codec>(state.range(3));
  const size_t count = bytes / sizeof(float);
  co.devices.clear();
  for (int r = 0; r < n; ++r) co.devices.push_back(r);
  auto comm = rp::comm::Communicator::Create(co);
  if (!comm.ok()) {
    state.SkipWithError(comm.status().ToString().c_str());
    return;
  }
  std::vector<std::vector<float>> buf(static_cast<size_t>(n), std::vector<float>(count, 0.0f));
  const rp::comm::CollectiveOptions options{.codec = codec, .segment_bytes = segment};
  std::vector<absl::Status> status(static_cast<size_t>(n));
  RankPool pool(n, [&](int r) {
    auto& v = buf[static_cast<size_t>(r)];
    status[static_cast<size_t>(r)] = (*comm)->rank(r).AllReduce(v, v, options).status();
  });
  for (auto _ : state) {
    pool.RunOnce();
    for (const auto& s : status) {
      if (!s.ok()) {
        state.SkipWithError(s.ToString().c_str());
        return;
      }
    }
  }
  SetCounters(state, n, static_cast<double>(bytes));
  state.SetLabel(rp::comm::CodecName(codec));
}

void BM_RingAllReduce(benchmark::State& state) { RunRingAllReduce(state, {}); }

// Without the small-message path and the yield phase, for same-run comparisons: every message
// lent and acknowledged, blocked ranks spin then sleep on the futex (the first protocol's waits).
void BM_RingAllReduceLendOnly(benchmark::State& state) {
  rp::comm::CommunicatorOptions co;
  co.inline_bytes = 0;
  co.yield_iterations = 0;
  RunRingAllReduce(state, co);
}

// Without all-gather forwarding (every rank lends its own copy, copied with plain stores).
void BM_RingAllReduceNoForward(benchmark::State& state) {
  rp::comm::CommunicatorOptions co;
  co.forward_lends = false;
  RunRingAllReduce(state, co);
}

// ---- The plain threaded ring (reference) ----

struct alignas(64) Progress {
  std::atomic<uint32_t> units{0};
};

void BM_PlainRing(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const size_t bytes = static_cast<size_t>(state.range(1));
  const size_t count = bytes / sizeof(float);
  const size_t chunk = count / static_cast<size_t>(n);  // sizes are multiples of n * 4 bytes
  const size_t sub = (size_t{256} << 10) / sizeof(float);
  const uint32_t k_per_step = static_cast<uint32_t>((chunk + sub - 1) / sub);
  const uint32_t steps = 2 * static_cast<uint32_t>(n - 1);
  const uint32_t per_iter = steps * k_per_step;
  std::vector<std::vector<float>> buf(static_cast<size_t>(n), std::vector<float>(count, 0.0f));
  std::vector<Progress> progress(static_cast<size_t>(n));
  uint32_t iter = 0;  // written by rank 0 between iterations only (ordered by the pool)
  RankPool pool(n, [&](int r) {
    const int prev = (r + n - 1) % n;
    const uint32_t base = iter * per_iter;
    float* mine = buf[static_cast<size_t>(r)].data();
    const float* theirs = buf[static_cast<size_t>(prev)].data();
    std::atomic<uint32_t>& prev_units = progress[static_cast<size_t>(prev)].units;
    std::atomic<uint32_t>& my_units = progress[static_cast<size_t>(r)].units;
    for (uint32_t s = 0; s < steps; ++s) {
      const bool reduce = s < static_cast<uint32_t>(n - 1);
      const int c = reduce ? ((r - 2 - static_cast<int>(s)) % n + 2 * n) % n
                           : ((r - 1 - static_cast<int>(s - (n - 1))) % n + 2 * n) % n;
      for (uint32_t k = 0; k < k_per_step; ++k) {
        if (s > 0) {  // prev finished (s - 1, k): its copy of chunk c is ready
          const uint32_t need = base + (s - 1) * k_per_step + k + 1;
          for (int spins = 0;; ++spins) {
            const uint32_t u = prev_units.load(std::memory_order_acquire);  // released below
            if (u >= need) break;
            if (spins > 64) prev_units.wait(u, std::memory_order_acquire);
          }
        }
        const size_t begin = static_cast<size_t>(c) * chunk + k * sub;
        const size_t len = std::min(sub, chunk - k * sub);
        float* d = mine + begin;
        const float* src = theirs + begin;
        if (reduce) {
          for (size_t i = 0; i < len; ++i) d[i] += src[i];
        } else {
          std::memcpy(d, src, len * sizeof(float));
        }
        my_units.fetch_add(1, std::memory_order_release);
        my_units.notify_all();
      }
    }
  });
  for (auto _ : state) {
    pool.RunOnce();
    ++iter;
  }
  SetCounters(state, n, static_cast<double>(bytes));
}

void BM_AddLoop(benchmark::State& state) {
  const size_t count = static_cast<size_t>(state.range(0)) / sizeof(float);
  std::vector<float> dst(count, 0.0f), src(count, 0.0f);
  for (auto _ : state) {
    float* d = dst.data();
    const float* s = src.data();
    for (size_t i = 0; i < count; ++i) d[i] += s[i];
    benchmark::DoNotOptimize(d);
    benchmark::ClobberMemory();
  }
  state.counters["algbw"] = benchmark::Counter(
      static_cast<double>(state.range(0)) * static_cast<double>(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
}

constexpr int64_t KiB = 1024, MiB = 1024 * 1024;

bool FullGrid() {
  const char* v = std::getenv("RINGPIPE_BENCH_FULL");
  return v != nullptr && std::string(v) == "1";
}

// The virtual clock's message path: see the header. One iteration = one all-reduce on every ring,
// started at the previous one's latest end; the driver LP (tie rank 0) awaits a gate per stream,
// and its first wait commits the whole cascade.
void BM_EventRing(benchmark::State& state) {
  const int rings = static_cast<int>(state.range(0)), n = static_cast<int>(state.range(1));
  const size_t count = static_cast<size_t>(state.range(2)) * static_cast<size_t>(n);
  const int world = rings * n;
  const rp::LpId driver = world;
  std::vector<uint64_t> tie(static_cast<size_t>(world) + 1);
  for (size_t i = 0; i < tie.size(); ++i) tie[i] = i == static_cast<size_t>(driver) ? 0 : i + 1;
  auto fabric = rp::Fabric::Create({.links = rp::DgxA100(), .num_devices = world, .faults = {},
                                    .tie_rank = tie, .on_commit = {}});
  if (!fabric.ok()) return state.SkipWithError(fabric.status().ToString().c_str());
  std::vector<std::unique_ptr<rp::comm::Communicator>> comms;
  std::vector<std::unique_ptr<rp::comm::EventCommStream>> streams(static_cast<size_t>(world));
  // Zeros: the sums stay finite over any number of iterations.
  std::vector<std::vector<float>> grads(static_cast<size_t>(world),
                                        std::vector<float>(count, 0.0f));
  std::vector<rp::GateId> gates;
  for (int r = 0; r < rings; ++r) {
    rp::comm::CommunicatorOptions co;
    for (int k = 0; k < n; ++k) co.devices.push_back(k * rings + r);
    co.fabric = fabric->get();
    co.lps = co.devices;
    auto comm = rp::comm::Communicator::Create(co);
    if (!comm.ok()) return state.SkipWithError(comm.status().ToString().c_str());
    comms.push_back(*std::move(comm));
  }
  for (int d = 0; d < world; ++d) {
    streams[static_cast<size_t>(d)] =
        std::make_unique<rp::comm::EventCommStream>(fabric->get(), d, /*lp_is_event_driven=*/true);
    gates.push_back((*fabric)->AddGate());
  }
  rp::Nanos start{0};
  uint64_t op = 0;
  for (auto _ : state) {
    rp::Nanos end = start;
    ++op;
    for (int r = 0; r < rings; ++r) {
      rp::comm::Communicator& comm = *comms[static_cast<size_t>(r)];
      for (int k = 0; k < n; ++k) {
        const int d = k * rings + r;
        float* g = grads[static_cast<size_t>(d)].data();
        const rp::comm::ring::Range own = rp::comm::ring::ChunkRange(count, n, k);
        rp::comm::EventCommStream::Collective c{
            .spec = {.kind = rp::comm::ring::TimedKind::kAllReduce, .n = n, .rank = k, .device = d,
                     .next_device = comm.device((k + 1) % n), .count = count,
                     .codec = rp::comm::Codec::kFp32, .segment_elems = count, .model = {},
                     .error_feedback = false, .op_id = op},
            .buffers = {.in = g, .out = g, .work = g, .own_out = g + own.begin,
                        .residual = nullptr},
            .ready = start,
            .send_channel = comm.RingChannel(k),
            .recv_channel = comm.RingChannel((k + n - 1) % n),
            .site = {.rank = d, .op = "bench all-reduce", .peer = comm.device((k + n - 1) % n)},
            .done = [&end, gate = gates[static_cast<size_t>(d)]](
                        rp::Fabric::Scope& scope, absl::StatusOr<rp::comm::CollectiveResult>& res) {
              if (!res.ok()) return scope.Abort(res.status());
              end = std::max(end, res->end);
              scope.Signal(gate, res->end);
            }};
        streams[static_cast<size_t>(d)]->Enqueue(std::move(c));
      }
    }
    for (rp::GateId g : gates) {
      auto t = (*fabric)->AwaitGate(driver, g, {.rank = -1, .op = "bench driver"});
      if (!t.ok()) return state.SkipWithError(t.status().ToString().c_str());
      (*fabric)->ResetGate(g);
    }
    start = end;
  }
  const double messages = static_cast<double>((*fabric)->committed());
  state.counters["messages"] = messages / static_cast<double>(state.iterations());
  state.counters["time_per_message"] =
      benchmark::Counter(messages, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  (*fabric)->Finish(driver);
}

void RingArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"ranks", "bytes", "segment", "codec"});
  if (FullGrid()) {
    for (int64_t n : {2, 4, 8}) {
      for (int64_t bytes = 4 * KiB; bytes <= 256 * MiB; bytes *= 4) {
        for (int64_t seg = 4 * KiB; seg <= 4 * MiB; seg *= 4) {
          for (int64_t c = 0; c < 4; ++c) b->Args({n, bytes, seg, c});
        }
      }
    }
    return;
  }
  for (int64_t n : {2, 4, 8}) {
    for (int64_t bytes : {4 * KiB, 256 * KiB, 4 * MiB, 64 * MiB}) b->Args({n, bytes, 256 * KiB, 0});
  }
  for (int64_t seg : {4 * KiB, 64 * KiB, 1 * MiB, 4 * MiB}) b->Args({4, 64 * MiB, seg, 0});
  b->Args({4, 256 * MiB, 256 * KiB, 0});
  for (int64_t c = 1; c < 4; ++c) b->Args({4, 64 * MiB, 256 * KiB, c});
}

void PlainArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"ranks", "bytes"});
  for (int64_t n : {2, 4, 8}) {
    for (int64_t bytes : {4 * KiB, 256 * KiB, 4 * MiB, 64 * MiB}) b->Args({n, bytes});
  }
}

BENCHMARK(BM_RingAllReduce)->Apply(RingArgs)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_RingAllReduceLendOnly)
    ->Apply(RingArgs)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_RingAllReduceNoForward)
    ->Apply(RingArgs)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
// 16 rings as a 4096-device run's (and 512 / 256 devices' dp 32 / 16), 8 floats a chunk.
BENCHMARK(BM_EventRing)
    ->ArgNames({"rings", "ranks", "chunk"})
    ->Args({16, 16, 8})
    ->Args({16, 32, 8})
    ->Args({16, 256, 8})
    ->Args({1, 256, 8})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PlainRing)->Apply(PlainArgs)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AddLoop)
    ->ArgName("bytes")
    ->Arg(4 * KiB)
    ->Arg(64 * MiB)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
