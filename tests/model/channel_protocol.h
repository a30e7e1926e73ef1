// The synchronization protocol of rp::comm::SpscQueue (comm/channel.h, comm/channel.cc), written as
// a template over an atomics policy so a model checker can run it (tests/model/channel_model_test.cc
// instantiates it with Relacy's rl:: types; docs/fuzzing.md).
//
// This is a faithful COPY, not the production code itself: comm/ was still being changed by the
// performance work when the model was written, so comm/channel.h was left untouched. Every atomic
// operation below mirrors one line of the production code with the same memory order, and
// tests/model/channel_drift_test.cc fails when any mirrored line changes in comm/channel.{h,cc} or in
// Boost's spsc_queue.hpp — re-sync this file then. Mirrored, line by line:
//   * boost::lockfree::spsc_queue's ring buffer (boost/lockfree/spsc_queue.hpp, ringbuffer_base):
//     `capacity + 1` slots, write_index_ / read_index_, push / pop / write_available;
//   * rp::comm::Wakeup (comm/channel.{h,cc}): Prepare / Wait / Notify over seq_ and waiters_, with the
//     futex wait/wake system calls (FUTEX_WAIT re-checks the word atomically; FUTEX_WAKE wakes all);
//   * rp::comm::SpscQueue: TryPush / TryPop / Push / Pop / WaitWritable / Cancel and Await (spin,
//     yield, then Prepare / re-check / cancelled / Wait). Deadlines are not modeled: a wait without
//     a notification blocks forever, so a lost wake-up shows as a deadlock.
//
// Mutations (compile-time RP_CHANNEL_MUTATION, one per build; 0 = the production orderings). Each
// weakens exactly one memory order; channel_model_test expects Relacy to report the failure:
//   1  ring buffer push publishes write_index_ with relaxed instead of release (the payload written
//      before Push is no longer visible to the consumer after Pop: data race);
//   2  ring buffer pop frees the slot (read_index_) with relaxed instead of release (the producer may
//      overwrite a slot the consumer is still reading: data race);
//   3  Wakeup::Notify reads waiters_ with relaxed instead of seq_cst (the store-load handshake with
//      Wait breaks: a waiter can sleep through the notification: lost wake-up, deadlock).
//
// Policy P provides: Atomic<T> (atomic), Plain<T> (non-atomic data the checker tracks for races),
// FutexWord / FutexValue, memory orders kRelaxed kAcquire kRelease kSeqCst, and the operations
// Load, Store, FetchAdd, FetchSub, Read, Write, FutexWait, FutexWake, CpuRelax, Yield.
#pragma once

#include <cstddef>
#include <cstdint>
#include <array>

#ifndef RP_CHANNEL_MUTATION
#define RP_CHANNEL_MUTATION 0
#endif

namespace rp::model {

// Status of a blocking call (absl::Status in production: OK, Cancelled; DeadlineExceeded is not
// modeled).
enum class WaitResult { kOk, kCancelled };

// rp::comm::Wakeup (comm/channel.h, comm/channel.cc).
template <typename P>
class Wakeup {
 public:
  Wakeup() {
    P::Store(seq_, typename P::FutexValue{0}, P::kRelaxed);
    P::Store(waiters_, uint32_t{0}, P::kRelaxed);
  }
  // channel.h: `uint32_t Prepare() const { return seq_.load(std::memory_order_seq_cst); }`
  typename P::FutexValue Prepare() const { return P::Load(seq_, P::kSeqCst); }
  // channel.cc, Wakeup::Wait (no deadline: always returns true, like a wait that did not time out).
  bool Wait(typename P::FutexValue key) {
    P::FetchAdd(waiters_, uint32_t{1}, P::kSeqCst);
    // Pairs with Notify: either Notify's seq_ bump is visible here, or Notify sees waiters_ > 0.
    if (P::Load(seq_, P::kSeqCst) == key) {
      P::FutexWait(seq_, key);
    }
    P::FetchSub(waiters_, uint32_t{1}, P::kSeqCst);
    return true;
  }
  // channel.cc, Wakeup::Notify.
  void Notify() {
    P::FetchAdd(seq_, typename P::FutexValue{1}, P::kSeqCst);
#if RP_CHANNEL_MUTATION == 3
    if (P::Load(waiters_, P::kRelaxed) != 0) {  // MUTATION 3: seq_cst -> relaxed
#else
    if (P::Load(waiters_, P::kSeqCst) != 0) {
#endif
      P::FutexWake(seq_);
    }
  }

 private:
  typename P::FutexWord seq_;
  typename P::template Atomic<uint32_t> waiters_;
};

// The most messages a model queue holds (the slots are a fixed array: no heap inside the checker).
inline constexpr size_t kMaxModelCapacity = 4;

// boost::lockfree::spsc_queue<T> (runtime-sized): ringbuffer_base's push, consume_one (which
// spsc_queue::pop(U&) calls) and write_available.
template <typename T, typename P>
class RingBuffer {
 public:
  explicit RingBuffer(size_t capacity) : max_size_(capacity + 1) {
    P::Store(write_index_, size_t{0}, P::kRelaxed);
    P::Store(read_index_, size_t{0}, P::kRelaxed);
  }

  bool push(const T& t) {
    const size_t write_index = P::Load(write_index_, P::kRelaxed);  // only written from push thread
    const size_t next = next_index(write_index);
    if (next == P::Load(read_index_, P::kAcquire)) return false;  // ringbuffer is full
    P::Write(buffer_[write_index], t);  // copy-construct
#if RP_CHANNEL_MUTATION == 1
    P::Store(write_index_, next, P::kRelaxed);  // MUTATION 1: release -> relaxed
#else
    P::Store(write_index_, next, P::kRelease);
#endif
    return true;
  }

  bool pop(T& ret) {
    const size_t write_index = P::Load(write_index_, P::kAcquire);
    const size_t read_index = P::Load(read_index_, P::kRelaxed);  // only written from pop thread
    if (write_index == read_index) return false;  // empty
    ret = P::Read(buffer_[read_index]);
    const size_t next = next_index(read_index);
#if RP_CHANNEL_MUTATION == 2
    P::Store(read_index_, next, P::kRelaxed);  // MUTATION 2: release -> relaxed
#else
    P::Store(read_index_, next, P::kRelease);
#endif
    return true;
  }

  size_t write_available() const {
    const size_t write_index = P::Load(write_index_, P::kRelaxed);
    const size_t read_index = P::Load(read_index_, P::kAcquire);
    size_t ret = read_index - write_index - 1;
    if (write_index >= read_index) ret += max_size_;
    return ret;
  }

 private:
  size_t next_index(size_t arg) const {
    size_t ret = arg + 1;
    while (ret >= max_size_) ret -= max_size_;
    return ret;
  }

  const size_t max_size_;  // capacity + 1 <= kMaxModelCapacity + 1 slots, as Boost allocates
  std::array<typename P::template Plain<T>, kMaxModelCapacity + 1> buffer_;
  typename P::template Atomic<size_t> write_index_;
  typename P::template Atomic<size_t> read_index_;
};

// rp::comm::SpscQueue<T> (comm/channel.h).
template <typename T, typename P>
class SpscQueue {
 public:
  SpscQueue(size_t capacity, int spin_iterations, int yield_iterations)
      : queue_(capacity), spin_iterations_(spin_iterations), yield_iterations_(yield_iterations) {
    P::Store(cancelled_, false, P::kRelaxed);
  }

  bool TryPush(const T& v) {
    if (!queue_.push(v)) return false;  // release of the write index; acquired by TryPop
    data_.Notify();
    return true;
  }
  bool TryPop(T* v) {
    if (!queue_.pop(*v)) return false;  // acquire of the write index; release of the read index
    space_.Notify();
    return true;
  }
  WaitResult Push(const T& v) {
    return Await(space_, [&] { return TryPush(v); });
  }
  WaitResult Pop(T* v) {
    return Await(data_, [&] { return TryPop(v); });
  }
  WaitResult WaitWritable() {
    return Await(space_, [&] { return queue_.write_available() > 0; });
  }
  void Cancel() {
    P::Store(cancelled_, true, P::kRelease);  // acquired in Await
    data_.Notify();
    space_.Notify();
  }
  bool cancelled() const { return P::Load(cancelled_, P::kAcquire); }

 private:
  template <typename TryOp>
  WaitResult Await(Wakeup<P>& w, TryOp try_op) {
    for (int i = 0; i < spin_iterations_; ++i) {
      if (try_op()) return WaitResult::kOk;
      P::CpuRelax();
    }
    for (int i = 0; i < yield_iterations_; ++i) {
      if (try_op()) return WaitResult::kOk;
      P::Yield();
    }
    while (true) {
      const auto key = w.Prepare();
      if (try_op()) return WaitResult::kOk;
      if (cancelled()) return WaitResult::kCancelled;
      if (!w.Wait(key)) {  // never: deadlines are not modeled
        if (try_op()) return WaitResult::kOk;
        return WaitResult::kCancelled;
      }
    }
  }

  RingBuffer<T, P> queue_;
  const int spin_iterations_;
  const int yield_iterations_;
  Wakeup<P> data_;   // notified after each push (consumers wait here)
  Wakeup<P> space_;  // notified after each pop (producers wait here)
  typename P::template Atomic<bool> cancelled_;
};

}  // namespace rp::model
