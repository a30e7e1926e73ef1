// rp::comm::Wakeup: an eventcount over a futex word, the blocking primitive of ringpipe's
// channels (comm/channel.h, comm/unbounded_queue.h). Implemented in comm/channel.cc.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace rp::comm {

// An eventcount over a 32-bit futex word. Waiters call Prepare(), re-check their condition, then
// Wait(key): Wait returns at once if any Notify() happened since Prepare(). Notify() issues the
// futex wake syscall only when a thread is (about to be) asleep.
//
// Ordering: Wait's registration (waiters_++) and Notify's bump (seq_++) are both seq_cst, so either
// the waiter sees the new seq_ and does not sleep, or the notifier sees the waiter and wakes it.
class Wakeup {
 public:
  uint32_t Prepare() const { return seq_.load(std::memory_order_seq_cst); }
  // Sleeps until a Notify() after Prepare() returned `key`, or until `deadline` (steady_clock).
  // May return early (spuriously): callers loop on their condition. Returns false when the deadline
  // has passed.
  bool Wait(uint32_t key, std::chrono::steady_clock::time_point deadline);
  void Notify();

 private:
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                    std::atomic<uint32_t>::is_always_lock_free,
                "the futex word must be a plain 32-bit atomic");
  std::atomic<uint32_t> seq_{0};
  std::atomic<uint32_t> waiters_{0};
};

}  // namespace rp::comm
