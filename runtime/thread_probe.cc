#include "runtime/thread_probe.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace rp {
namespace {

// Reads up to size − 1 bytes of `path` into buf (NUL-terminated); false if it cannot.
bool ReadSmallFile(const char* path, char* buf, size_t size) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  size_t got = 0;
  while (got + 1 < size) {
    const ssize_t n = ::read(fd, buf + got, size - 1 - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  buf[got] = '\0';
  return got > 0;
}

}  // namespace

int CurrentThreadId() { return static_cast<int>(::syscall(SYS_gettid)); }

HostThreadState ReadHostThreadState(int tid) {
  HostThreadState s;
  if (tid <= 0) return s;
  char path[64];
  char buf[512];
  std::snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
  if (!ReadSmallFile(path, buf, sizeof(buf))) return s;
  // "tid (comm) S ...": the command may hold spaces and parentheses; the state follows the last ')'.
  const char* close = std::strrchr(buf, ')');
  if (close == nullptr || close[1] != ' ' || close[2] == '\0') return s;
  const char state = close[2];
  std::snprintf(path, sizeof(path), "/proc/self/task/%d/schedstat", tid);
  if (!ReadSmallFile(path, buf, sizeof(buf))) return s;
  char* end = nullptr;
  const unsigned long long on_cpu = std::strtoull(buf, &end, 10);
  if (end == buf) return s;
  s.known = true;
  s.runnable = state == 'R';
  s.cpu = std::chrono::nanoseconds(static_cast<int64_t>(on_cpu));
  return s;
}

void QuietClock::Progress() {
  quiet_ = excused_ = std::chrono::nanoseconds(0);
  cpu_seen_.clear();
}

bool QuietClock::Look(std::chrono::nanoseconds elapsed,
                      std::span<const std::pair<int, HostThreadState>> running) {
  bool starved = false, ran = false;
  for (const auto& [id, s] : running) {
    if (!s.known) continue;
    const auto seen = cpu_seen_.find(id);
    if (seen != cpu_seen_.end() && s.cpu - seen->second >= min_cpu_) {
      ran = true;
    } else if (s.runnable) {
      // Runnable and no CPU since the last look (without one, its share is unknown: excused once).
      starved = true;
    }
    cpu_seen_[id] = s.cpu;
  }
  // Threads of ours that ran without progress (a livelock) make it count even while they starve
  // another: only a look in which the host ran none of them is the host's time.
  if (starved && !ran) {
    excused_ += elapsed;
    return false;
  }
  quiet_ += elapsed;
  return true;
}

}  // namespace rp
