// rp::comm::UnboundedQueue<T>: a single-producer single-consumer queue that never refuses a push,
// with the blocking, cancellable, time-limited waits of rp::comm::SpscQueue.
//
// Why: a timed communicator's sender must never wait for its receiver (rp::Fabric's conservative
// rule counts a thread blocked on the host as able to post, so a sender stuck behind a receiver
// that waits for a later message would stall the emulation; comm/communicator.h). The queue is
// boost::lockfree::queue, node-based: it grows with what is in flight and keeps its nodes for
// reuse, so memory follows the actual backlog rather than a worst-case capacity. It reserves no
// node up front (only the queue's own dummy): a node is a 64-byte-aligned allocation of about
// 256 bytes here, so the 64 it used to reserve cost 17 KiB a queue — per ordered pair of ranks of a
// timed all-to-all (comm/communicator.h A2aLink), 1.1 GB at 256 ranks, where one call puts a
// message or two on most links.
//
// Memory ordering: boost::lockfree::queue's push publishes the node with a release CAS on the
// tail and pop reads it with acquire, so what the producer wrote before Push happens-before what
// the consumer does after Pop. `cancelled_` is released by Cancel and acquired by waiters; the
// Wakeup eventcount (comm/channel.h) only decides whether to sleep. `size_` is a relaxed count for
// diagnostics. (The Relacy model of tests/model/ covers SpscQueue; this queue is covered by TSan
// runs of the timed-communicator tests.)
//
// Thread safety: one producer thread (Push/TryPush), one consumer thread (Pop/TryPop); Cancel from
// any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <thread>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "boost/lockfree/queue.hpp"
#include "comm/wakeup.h"

namespace rp::comm {

template <typename T>
class UnboundedQueue {
  static_assert(std::is_trivially_copyable_v<T>, "UnboundedQueue carries trivially copyable values");

 public:
  UnboundedQueue(int spin_iterations, int yield_iterations)
      : queue_(0), spin_iterations_(spin_iterations), yield_iterations_(yield_iterations) {}
  UnboundedQueue(const UnboundedQueue&) = delete;
  UnboundedQueue& operator=(const UnboundedQueue&) = delete;

  // Producer thread only. False only if memory runs out.
  bool TryPush(const T& v) {
    if (!queue_.push(v)) return false;  // release (tail CAS); acquired by pop
    size_.fetch_add(1, std::memory_order_relaxed);
    data_.Notify();
    return true;
  }
  // Consumer thread only. False when empty.
  bool TryPop(T* v) {
    if (!queue_.pop(*v)) return false;  // acquire of the pushed node
    size_.fetch_sub(1, std::memory_order_relaxed);
    return true;
  }
  // Producer thread only: pushes (never waits for room); errors: Cancelled after Cancel().
  [[nodiscard]] absl::Status Push(const T& v, std::chrono::nanoseconds) {
    if (cancelled()) return absl::CancelledError("channel cancelled");
    if (!TryPush(v)) return absl::ResourceExhaustedError("channel: out of memory");
    return absl::OkStatus();
  }
  // Consumer thread only. Blocks while empty: DeadlineExceeded after `timeout`, Cancelled once
  // Cancel() was called (a queued value is still delivered).
  [[nodiscard]] absl::Status Pop(T* v, std::chrono::nanoseconds timeout) {
    for (int i = 0; i < spin_iterations_; ++i) {
      if (TryPop(v)) return absl::OkStatus();
    }
    for (int i = 0; i < yield_iterations_; ++i) {
      if (TryPop(v)) return absl::OkStatus();
      std::this_thread::yield();
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      const uint32_t key = data_.Prepare();
      if (TryPop(v)) return absl::OkStatus();
      if (cancelled()) return absl::CancelledError("channel cancelled");
      if (!data_.Wait(key, deadline)) {
        if (TryPop(v)) return absl::OkStatus();
        return absl::DeadlineExceededError(
            absl::StrCat("no peer after ", timeout.count() / 1000000, " ms"));
      }
    }
  }
  void Cancel() {
    cancelled_.store(true, std::memory_order_release);  // acquired in cancelled()
    data_.Notify();
  }
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }
  size_t size() const { return size_.load(std::memory_order_relaxed); }

 private:
  boost::lockfree::queue<T> queue_;
  const int spin_iterations_;
  const int yield_iterations_;
  Wakeup data_;
  std::atomic<bool> cancelled_{false};
  std::atomic<size_t> size_{0};
};

}  // namespace rp::comm
