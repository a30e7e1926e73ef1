// Point-to-point channels: single producer, single consumer, lock-free, with blocking waits that
// never burn a core and always end (a wall-clock timeout turns a missing peer into a Status).
//
// Three layers, each usable on its own:
//   * rp::comm::Wakeup       an eventcount over a futex word: "sleep until notified or deadline".
//   * rp::comm::SpscQueue<T> boost::lockfree::spsc_queue<T> + two Wakeups (data, space): TryPush /
//                            TryPop never block; Push / Pop spin briefly, then yield the core a
//                            bounded number of times, then block on the futex.
//   * rp::comm::Channel<T>   a SpscQueue of messages stamped with their modeled time (ready, then
//                            arrival) and the fabric ticket that times them. Channels carry data
//                            only: modeled timing is the fabric's (rp::Fabric, runtime/fabric.h),
//                            which the communicator consults (comm/communicator.h).
//   * rp::comm::OwningChannel<T>  carries std::unique_ptr<T> by ownership (no payload copy).
//
// Why raw pointers inside OwningChannel: Boost 1.81's spsc_queue only accepts copyable element types
// (push(T const&)), so a std::unique_ptr cannot be queued. OwningChannel releases the pointer on
// Send and re-owns it on Recv; a message left in the queue when the channel dies is deleted by the
// destructor. Ownership is therefore never shared and never leaked.
//
// Memory ordering: the spsc_queue publishes an element with a release store of its write index and
// the consumer reads it with an acquire load (boost), so everything the producer wrote before Push
// (the payload the message points to) happens-before everything the consumer does after Pop. The
// Wakeup only decides whether to sleep; it carries no data.
//
// Thread safety: for each queue exactly one producer thread (Push/TryPush/Send) and one consumer
// thread (Pop/TryPop/Recv). Cancel() may be called from any thread.
//
// Example:
//   rp::comm::SpscQueue<int> q(2);
//   std::thread producer([&] { for (int i = 0; i < 100; ++i) (void)q.Push(i, kTimeout); });
//   int v;
//   for (int i = 0; i < 100; ++i) RP_RETURN_IF_ERROR(q.Pop(&v, kTimeout));  // v == i
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "boost/lockfree/spsc_queue.hpp"
#include "comm/unbounded_queue.h"
#include "comm/wakeup.h"
#include "runtime/time.h"

namespace rp::comm {

using WallDuration = std::chrono::nanoseconds;

// Default number of busy-poll iterations (each with a pause, ~50 ns) before a blocking wait
// starts yielding. Tiny on purpose: ranks are threads on few cores, and a spinning waiter steals
// the core its peer needs (measured, 4 ranks on 2 cores, 4 KiB all-reduce: 64 spins took ~1.7x
// the latency of 0-8 spins followed by yields).
inline constexpr int kDefaultSpinIterations = 4;
// Default number of sched_yield() polls after the spin and before the futex sleep. A yield hands
// the core to a runnable peer (often the very thread this waiter waits for, when ranks outnumber
// cores) and costs far less than a futex sleep + wake-up; bounded, so an absent peer ends in a
// futex sleep, never in a busy loop.
inline constexpr int kDefaultYieldIterations = 8;

namespace internal {
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
}  // namespace internal

// Bounded SPSC queue of trivially copyable T with blocking, cancellable, time-limited waits.
template <typename T>
class SpscQueue {
  static_assert(std::is_trivially_copyable_v<T>, "SpscQueue carries trivially copyable values");

 public:
  // `capacity` >= 1 messages. A blocking wait polls `spin_iterations` times with a pause, then
  // `yield_iterations` times with a sched_yield, then sleeps on the futex.
  explicit SpscQueue(size_t capacity, int spin_iterations = kDefaultSpinIterations,
                     int yield_iterations = kDefaultYieldIterations)
      : queue_(capacity), spin_iterations_(spin_iterations), yield_iterations_(yield_iterations) {}
  SpscQueue(const SpscQueue&) = delete;
  SpscQueue& operator=(const SpscQueue&) = delete;

  // Producer thread only. False when full.
  bool TryPush(const T& v) {
    if (!queue_.push(v)) return false;  // release of the write index; acquired by TryPop
    data_.Notify();
    return true;
  }
  // Consumer thread only. False when empty.
  bool TryPop(T* v) {
    if (!queue_.pop(*v)) return false;  // acquire of the write index; release of the read index
    space_.Notify();
    return true;
  }
  // Producer thread only. Blocks while full. DeadlineExceeded after `timeout` of waiting,
  // Cancelled once Cancel() was called (a value is still pushed if there is room).
  [[nodiscard]] absl::Status Push(const T& v, WallDuration timeout) {
    return Await(space_, [&] { return TryPush(v); }, timeout);
  }
  // Consumer thread only. Blocks while empty; same errors as Push (a queued value is still
  // delivered after Cancel()).
  [[nodiscard]] absl::Status Pop(T* v, WallDuration timeout) {
    return Await(data_, [&] { return TryPop(v); }, timeout);
  }
  // Producer thread only. True when the next Push would not block (it stays true until this
  // producer pushes).
  bool writable() const { return queue_.write_available() > 0; }
  // Producer thread only. Blocks until the next Push would not block (same errors as Push). On OK
  // the consumer has popped every value but the last capacity - 1 (acquire of the read index:
  // whatever the consumer did before those pops happens-before the return).
  [[nodiscard]] absl::Status WaitWritable(WallDuration timeout) {
    return Await(space_, [&] { return queue_.write_available() > 0; }, timeout);
  }
  // Any thread. Wakes both sides; every later wait that would block returns Cancelled.
  void Cancel() {
    cancelled_.store(true, std::memory_order_release);  // acquired in Await
    data_.Notify();
    space_.Notify();
  }
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }
  // Consumer thread only (approximate from any other thread).
  size_t read_available() const { return queue_.read_available(); }

 private:
  template <typename TryOp>
  absl::Status Await(Wakeup& w, TryOp try_op, WallDuration timeout) {
    for (int i = 0; i < spin_iterations_; ++i) {
      if (try_op()) return absl::OkStatus();
      internal::CpuRelax();
    }
    for (int i = 0; i < yield_iterations_; ++i) {
      if (try_op()) return absl::OkStatus();
      std::this_thread::yield();
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      const uint32_t key = w.Prepare();
      if (try_op()) return absl::OkStatus();
      if (cancelled()) return absl::CancelledError("channel cancelled");
      if (!w.Wait(key, deadline)) {
        if (try_op()) return absl::OkStatus();
        return absl::DeadlineExceededError(
            absl::StrCat("no peer after ", timeout.count() / 1000000, " ms"));
      }
    }
  }

  boost::lockfree::spsc_queue<T> queue_;
  const int spin_iterations_;
  const int yield_iterations_;
  alignas(64) Wakeup data_;   // notified after each push (consumers wait here)
  alignas(64) Wakeup space_;  // notified after each pop (producers wait here)
  std::atomic<bool> cancelled_{false};
};

// A channel's endpoints and queue. Timing is not the channel's: see rp::Fabric.
struct ChannelOptions {
  int src_device = 0;           // global device id of the producer
  int dst_device = 0;           // global device id of the consumer
  size_t capacity = 8;          // messages in flight, >= 1; 0 = unbounded (the producer never waits)
  int spin_iterations = kDefaultSpinIterations;
  int yield_iterations = kDefaultYieldIterations;
};

// A message with its modeled times: the sender stamps when it is ready; a timed receiver replaces
// `arrival` by the fabric's arrival (the ticket names the fabric message that times it).
template <typename T>
struct Stamped {
  T body;
  Nanos arrival{0};
  uint64_t ticket = 0;
};

// A SpscQueue of stamped messages (see the file comment).
// Capacity 0 makes it unbounded (rp::comm::UnboundedQueue): Send never waits.
template <typename T>
class Channel {
 public:
  explicit Channel(const ChannelOptions& options) : options_(options) {
    if (options.capacity == 0) {
      unbounded_ = std::make_unique<UnboundedQueue<Stamped<T>>>(options.spin_iterations,
                                                                options.yield_iterations);
    } else {
      bounded_ = std::make_unique<SpscQueue<Stamped<T>>>(options.capacity, options.spin_iterations,
                                                         options.yield_iterations);
    }
  }

  // Producer thread only. Pushes `body` stamped with `ready_at` and `ticket`. Errors as
  // SpscQueue::Push.
  [[nodiscard]] absl::Status Send(const T& body, Nanos ready_at, uint64_t ticket,
                                  WallDuration timeout) {
    const Stamped<T> m{body, ready_at, ticket};
    return bounded_ ? bounded_->Push(m, timeout) : unbounded_->Push(m, timeout);
  }
  // Consumer thread only. Pops the next message (arrival = the sender's ready stamp).
  [[nodiscard]] absl::Status Recv(Stamped<T>* out, WallDuration timeout) {
    return bounded_ ? bounded_->Pop(out, timeout) : unbounded_->Pop(out, timeout);
  }
  bool TryRecvNoWait(Stamped<T>* out) {
    return bounded_ ? bounded_->TryPop(out) : unbounded_->TryPop(out);
  }
  // Producer thread only. See SpscQueue::WaitWritable (a producer that writes a message's bytes
  // into a slot the consumer reads after Recv waits here before writing the slot).
  [[nodiscard]] absl::Status WaitWritable(WallDuration timeout) {
    return bounded_ ? bounded_->WaitWritable(timeout) : absl::OkStatus();
  }
  // Producer thread only. True when the next Send would not block.
  bool writable() const { return !bounded_ || bounded_->writable(); }
  void Cancel() { bounded_ ? bounded_->Cancel() : unbounded_->Cancel(); }
  const ChannelOptions& options() const { return options_; }

 private:
  const ChannelOptions options_;
  std::unique_ptr<SpscQueue<Stamped<T>>> bounded_;       // capacity >= 1
  std::unique_ptr<UnboundedQueue<Stamped<T>>> unbounded_;  // capacity 0
};

// Carries std::unique_ptr<T> by ownership: Send releases the pointer into the queue, Recv re-owns
// it. The payload itself is never copied.
template <typename T>
class OwningChannel {
 public:
  explicit OwningChannel(const ChannelOptions& options) : channel_(options) {}
  ~OwningChannel() {
    Stamped<T*> m;
    while (channel_.TryRecvNoWait(&m)) delete m.body;  // re-own what nobody received
  }
  OwningChannel(const OwningChannel&) = delete;
  OwningChannel& operator=(const OwningChannel&) = delete;

  // Producer thread only. On error the buffer is destroyed (it never entered the queue).
  [[nodiscard]] absl::Status Send(std::unique_ptr<T> value, Nanos ready_at, uint64_t ticket,
                                  WallDuration timeout) {
    T* raw = value.release();
    absl::Status s = channel_.Send(raw, ready_at, ticket, timeout);
    if (!s.ok()) delete raw;  // not queued: still ours
    return s;
  }
  // Consumer thread only. On success *value owns the received object; *ready (may be null) holds
  // the sender's ready stamp and *ticket (may be null) its fabric ticket.
  [[nodiscard]] absl::Status Recv(std::unique_ptr<T>* value, Nanos* ready, uint64_t* ticket,
                                  WallDuration timeout) {
    Stamped<T*> m;
    absl::Status s = channel_.Recv(&m, timeout);
    if (!s.ok()) return s;
    value->reset(m.body);
    if (ready != nullptr) *ready = m.arrival;
    if (ticket != nullptr) *ticket = m.ticket;
    return absl::OkStatus();
  }
  void Cancel() { channel_.Cancel(); }

 private:
  Channel<T*> channel_;
};

}  // namespace rp::comm
