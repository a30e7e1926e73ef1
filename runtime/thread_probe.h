// What the host does with a thread, for a stall monitor that must tell a stalled thread from one
// the host did not run (issue 13 §5: on the virtual clock a stall is "no device made progress for
// the timeout", never elapsed wall time).
//
// ReadHostThreadState(tid) reads Linux's /proc/self/task/<tid>/stat (state R: running or waiting
// for a CPU) and /proc/self/task/<tid>/schedstat (nanoseconds on a CPU). A thread that has exited,
// or a host without /proc, reads as not known: the monitor then counts its quiet time as before.
//
// QuietClock accumulates the monitor's "no progress" time over its looks, except the looks in
// which a thread the run waits for (one running without progress) was runnable and got less than
// `min_cpu` of CPU since the previous look while none of them got more: the host owed it the CPU
// (a descheduled thread, a stopped process, an overloaded host), so that time is not the run's.
// Blocked threads (a hung device) let the time count; so does any of them that ran and still made
// no progress (a livelock), even while it starves another.
//
// Example (the executor's stall monitor, every look without progress):
//   quiet_clock.Look(elapsed, {{rank, rp::ReadHostThreadState(tid)}});
//   if (quiet_clock.quiet() >= timeout) Fail(...);
// Thread safety: ReadHostThreadState and CurrentThreadId from any thread; QuietClock is
// thread-compatible (the monitor's own).
#pragma once

#include <chrono>
#include <map>
#include <span>
#include <utility>

namespace rp {

// The calling thread's kernel id (gettid).
int CurrentThreadId();

struct HostThreadState {
  bool known = false;     // the thread exists and /proc could be read
  bool runnable = false;  // state R: on a CPU or waiting for one
  std::chrono::nanoseconds cpu{0};  // time on a CPU so far
};
HostThreadState ReadHostThreadState(int tid);

class QuietClock {
 public:
  explicit QuietClock(std::chrono::nanoseconds min_cpu = std::chrono::milliseconds(1))
      : min_cpu_(min_cpu) {}

  // Progress was seen: quiet time back to 0.
  void Progress();
  // A look `elapsed` after the previous one, without progress, with the host's state of each
  // thread running without progress (keyed by the caller's id, e.g. its rank). Adds `elapsed`
  // unless one of them was starved (see the header comment). Returns whether it was added.
  bool Look(std::chrono::nanoseconds elapsed, std::span<const std::pair<int, HostThreadState>> running);
  std::chrono::nanoseconds quiet() const { return quiet_; }
  // Wall time of looks not counted because a thread was starved (since the last Progress).
  std::chrono::nanoseconds excused() const { return excused_; }

 private:
  const std::chrono::nanoseconds min_cpu_;
  std::chrono::nanoseconds quiet_{0};
  std::chrono::nanoseconds excused_{0};
  std::map<int, std::chrono::nanoseconds> cpu_seen_;  // id → its CPU time at the previous look
};

}  // namespace rp
