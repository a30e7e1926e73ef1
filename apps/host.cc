#include "apps/host.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "apps/config_fields.h"

namespace rp::apps {
namespace {

// The first integer of a /proc file, or -1.
int64_t ReadProcInt(const char* path) {
  std::ifstream in(path);
  int64_t v = -1;
  if (!(in >> v)) return -1;
  return v;
}

// A "Key:   123 kB" line's value in bytes (kB lines) or as is; -1 if absent.
double StatusValue(const std::string& line, absl::string_view key) {
  if (!absl::StartsWith(line, key)) return -1;
  absl::string_view rest = absl::StripAsciiWhitespace(absl::string_view(line).substr(key.size()));
  const bool kb = absl::ConsumeSuffix(&rest, "kB");
  rest = absl::StripAsciiWhitespace(rest);
  double v = 0;
  if (!absl::SimpleAtod(rest, &v)) return -1;
  return kb ? v * 1024 : v;
}

}  // namespace

ThreadLimit MachineThreadLimit() {
  if (const char* env = std::getenv("RINGPIPE_THREAD_LIMIT"); env != nullptr) {
    int64_t v = 0;
    if (absl::SimpleAtoi(env, &v) && v > 0) return {v, "RINGPIPE_THREAD_LIMIT"};
  }
  ThreadLimit best{std::numeric_limits<int64_t>::max(), "none"};
  auto consider = [&](int64_t v, const char* source) {
    if (v > 0 && v < best.threads) best = {v, source};
  };
  rlimit rl{};
  if (::getrlimit(RLIMIT_NPROC, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    consider(static_cast<int64_t>(std::min<rlim_t>(rl.rlim_cur, std::numeric_limits<int64_t>::max())),
             "RLIMIT_NPROC (ulimit -u)");
  }
  consider(ReadProcInt("/proc/sys/kernel/threads-max"), "/proc/sys/kernel/threads-max");
  consider(ReadProcInt("/proc/sys/kernel/pid_max"), "/proc/sys/kernel/pid_max");
  const int64_t maps = ReadProcInt("/proc/sys/vm/max_map_count");
  consider(maps > 0 ? maps / 2 : -1, "/proc/sys/vm/max_map_count / 2");
  return best;
}

int64_t MaxRunDevices(bool virtual_time) {
  const ThreadLimit limit = MachineThreadLimit();
  const int64_t free_threads = limit.threads - kReservedThreads;
  return std::clamp<int64_t>(free_threads / ThreadsPerDevice(virtual_time), 1, kMaxPredictDevices);
}

ProcStatus ReadProcStatus() {
  ProcStatus s;
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (double v = StatusValue(line, "VmRSS:"); v >= 0) s.rss_bytes = v;
    if (double v = StatusValue(line, "VmHWM:"); v >= 0) s.peak_rss_bytes = v;
    if (double v = StatusValue(line, "Threads:"); v >= 0) s.threads = static_cast<int>(v);
  }
  return s;
}

ThreadSampler::ThreadSampler() {
  peak_.store(ReadProcStatus().threads, std::memory_order_relaxed);
  thread_ = std::thread([this] {
    MutexLock lock(&mu_);
    while (!stop_) {
      // The sampler's own thread is one of the threads counted.
      const int now = ReadProcStatus().threads - 1;
      if (now > peak_.load(std::memory_order_relaxed)) peak_.store(now, std::memory_order_relaxed);
      cv_.WaitFor(&mu_, kPeriod);
    }
  });
}

ThreadSampler::~ThreadSampler() { Stop(); }

int ThreadSampler::Stop() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  if (thread_.joinable()) thread_.join();
  return peak_.load(std::memory_order_relaxed);
}

}  // namespace rp::apps
