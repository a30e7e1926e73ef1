// The host machine as `ringpipe run` sees it: how many emulated devices it can hold (its thread
// limit), and what a run used (peak resident memory, threads, device-ops per second) — the "host"
// section of the report (docs/report.md; issue 13 §2, §3).
//
// Thread limit. Every emulated device is a std::thread (its compute stream); on the real clock its
// comm stream is a second thread (on the virtual clock comm streams are event-driven: no thread).
// The machine's limit is the smallest of RLIMIT_NPROC (soft), /proc/sys/kernel/threads-max,
// /proc/sys/kernel/pid_max and half of /proc/sys/vm/max_map_count (each thread stack is two
// mappings, the stack and its guard page); the environment variable RINGPIPE_THREAD_LIMIT, when set
// to a positive integer, replaces it (tests; users who share a host). `run` takes at most
// (limit − kReservedThreads) / threads per device devices; larger layouts are for `predict`.
//
// Resident memory comes from /proc/self/status (VmRSS, VmHWM: the peak since the process started);
// threads from its "Threads:" line, sampled while a run goes (ThreadSampler) — `run` also takes the
// executor's reading at the first step boundary (RunResult::threads_at_first_step), which a run
// shorter than the sampling period would otherwise miss.
//
// Thread safety: the free functions read /proc and may be called from any thread; a ThreadSampler
// is started and stopped by one thread.
//
// Example:
//   const int64_t max_devices = MaxRunDevices(/*virtual_time=*/true);
//   ThreadSampler sampler;  // samples until Stop()
//   ... run ...
//   const int peak_threads = sampler.Stop();
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "runtime/mutex.h"

namespace rp::apps {

// Threads ringpipe itself may need besides the devices' (main, the stall monitor, a sampler, the
// libraries' helpers), kept out of the devices' share of the limit.
inline constexpr int64_t kReservedThreads = 64;

struct ThreadLimit {
  int64_t threads = 0;
  std::string source;  // which limit it is, e.g. "/proc/sys/kernel/pid_max"
};
// The machine's thread limit (see the header comment).
ThreadLimit MachineThreadLimit();

// Threads per emulated device: 1 on the virtual clock, 2 on the real clock.
inline int ThreadsPerDevice(bool virtual_time) { return virtual_time ? 1 : 2; }
// The most devices `run` emulates on this machine with this clock (at least 1).
int64_t MaxRunDevices(bool virtual_time);

// /proc/self/status figures (0 when unreadable).
struct ProcStatus {
  double rss_bytes = 0;       // VmRSS
  double peak_rss_bytes = 0;  // VmHWM
  int threads = 0;            // Threads
};
ProcStatus ReadProcStatus();

// Samples the process's thread count every kPeriod on a thread of its own until Stop().
class ThreadSampler {
 public:
  static constexpr std::chrono::milliseconds kPeriod{20};
  ThreadSampler();
  ~ThreadSampler();
  ThreadSampler(const ThreadSampler&) = delete;
  ThreadSampler& operator=(const ThreadSampler&) = delete;
  // Stops sampling (idempotent) and returns the largest count seen, the sampler's own thread not
  // counted.
  int Stop();

 private:
  Mutex mu_;
  CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<int> peak_{0};
  std::thread thread_;
};

}  // namespace rp::apps
