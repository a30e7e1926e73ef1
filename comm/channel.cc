#include "comm/channel.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>

namespace rp::comm {
namespace {

uint32_t* FutexWord(std::atomic<uint32_t>* a) { return reinterpret_cast<uint32_t*>(a); }

}  // namespace

bool Wakeup::Wait(uint32_t key, std::chrono::steady_clock::time_point deadline) {
  const auto now = std::chrono::steady_clock::now();
  if (now >= deadline) return false;
  const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now).count();
  timespec ts;
  ts.tv_sec = static_cast<time_t>(left / 1000000000);
  ts.tv_nsec = static_cast<long>(left % 1000000000);
  waiters_.fetch_add(1, std::memory_order_seq_cst);
  // Pairs with Notify: either Notify's seq_ bump is visible here, or Notify sees waiters_ > 0.
  if (seq_.load(std::memory_order_seq_cst) == key) {
    syscall(SYS_futex, FutexWord(&seq_), FUTEX_WAIT_PRIVATE, key, &ts, nullptr, 0);
  }
  waiters_.fetch_sub(1, std::memory_order_seq_cst);
  return true;  // the caller re-checks its condition and calls again; the next call sees the time
}

void Wakeup::Notify() {
  seq_.fetch_add(1, std::memory_order_seq_cst);
  if (waiters_.load(std::memory_order_seq_cst) != 0) {
    syscall(SYS_futex, FutexWord(&seq_), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
  }
}

}  // namespace rp::comm
