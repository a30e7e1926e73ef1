// rp::Thread: a joinable thread with an explicit stack size. std::thread cannot set one, and its
// default (8 MiB of address space per thread, the process's RLIMIT_STACK) matters when a run
// starts thousands of device threads: 4096 devices reserve 32 GiB of address space and as many
// guard pages. A device thread needs far less (the model's kernels keep their data on the heap).
//
// Contract: Start runs fn on a new thread whose stack is `stack_bytes` (rounded up to the page
// size, at least PTHREAD_STACK_MIN); ResourceExhausted naming the reason if the system refuses
// (thread limit, memory). Join waits for it; the destructor joins a thread not joined yet.
// Move-only.
//
// Scheduling (SchedPolicy). kBatch starts the thread under Linux's SCHED_BATCH (same priority and
// CPU share as the default policy, no privilege needed): a thread it wakes does not preempt it, so
// a waker runs on until it blocks itself. That is right for a virtual-clock run, where hundreds of
// device threads hand work to each other and only the total matters (a 512-device run: involuntary
// context switches 20 000 → 400), and wrong for a real-clock run, whose threads must wake at their
// deadlines. Where the policy cannot be set the thread starts with the inherited one (a
// performance setting, never an error); CurrentSchedPolicyName() tells which one a thread has.
//
// Example:
//   RP_ASSIGN_OR_RETURN(rp::Thread t, rp::Thread::Start(kDeviceStackBytes, [&] { Work(); }));
//   t.Join();
#pragma once

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "absl/status/statusor.h"

namespace rp {

// Whether this build runs under ASan or TSan (their interceptors may enlarge a thread's stack).
// GCC's macros first: some headers define a fallback __has_feature(x) as 0 under GCC.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitizerBuild = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
inline constexpr bool kSanitizerBuild = true;
#else
inline constexpr bool kSanitizerBuild = false;
#endif
#else
inline constexpr bool kSanitizerBuild = false;
#endif

// The stack of an emulated device's threads: 1 MiB, 4 MiB under sanitizers (their frames are
// larger).
inline constexpr size_t kDeviceStackBytes = kSanitizerBuild ? size_t{4} << 20 : size_t{1} << 20;

// Sizes this process's private futex hash (Linux >= 6.16, prctl PR_FUTEX_HASH) for `threads`
// threads that each sleep on futexes of their own: 4 slots per thread, a power of two, never
// shrunk. Without it the kernel hashes every futex of the process into the global table (256
// buckets per CPU), and with thousands of sleeping device threads each wake-up walks a long bucket
// (a 4096-device virtual run spent 17 % of its time in futex_wake). Returns the slots now in use,
// 0 if the process uses the global table, or Unimplemented where the kernel has no such call
// (then nothing changed; callers go on).
absl::StatusOr<int> ReserveFutexHash(int threads);

// A one-thread parking spot (a futex word, Linux): its owner Parks, anyone Unparks. An Unpark
// before the Park leaves a token that makes the next Park return at once, so a waker need not hold
// the waiter's lock: the waiter checks its condition under its lock, unlocks, then Parks; a waker
// that changed the condition under that lock Unparks after unlocking (the woken thread does not
// find the lock still held by its waker, as it would with a condition variable signalled inside).
// A Park may also return for a token of an earlier Unpark: callers re-check their condition.
// Unpark costs a system call only when the owner is asleep.
class Parker {
 public:
  // Blocks until an Unpark (or its token) or `deadline` (steady_clock); false if the deadline
  // passed with no token. Only the owner thread calls it.
  bool Park(std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max());
  // Wakes the owner, or leaves a token for its next Park. Any thread.
  void Unpark();

 private:
  static constexpr int32_t kEmpty = 0, kNotified = 1, kParked = -1;
  std::atomic<int32_t> state_{kEmpty};
};

enum class SchedPolicy : uint8_t { kInherit, kBatch };

// The calling thread's scheduling policy: "SCHED_OTHER", "SCHED_BATCH", "SCHED_IDLE", "SCHED_FIFO",
// "SCHED_RR" (or "unknown").
const char* CurrentSchedPolicyName();

// Stacks for many threads in one mapping: `count` stacks of `stack_bytes` (page-rounded), each
// above a guard page of its own. A thread started on one (Thread::StartOn) costs glibc no mapping
// of its own and, at its exit, no madvise that frees its touched stack pages (a 512-device run's
// threads spent ~30 ms of wall time in those at the end; all pages go in one munmap here). Address
// space is reserved, not committed (MAP_NORESERVE): pages cost memory only once touched. The
// region must outlive every thread started on it: join them before destroying it. Not for
// sanitizer builds: TSan's pthread_create may resize a stack it is given (then EINVAL). Move-only.
class StackRegion {
 public:
  StackRegion() = default;
  // ResourceExhausted naming the size if the system refuses the mapping (address-space limit).
  [[nodiscard]] static absl::StatusOr<StackRegion> Map(size_t count, size_t stack_bytes);
  StackRegion(StackRegion&& other) noexcept;
  StackRegion& operator=(StackRegion&& other) noexcept;
  StackRegion(const StackRegion&) = delete;
  StackRegion& operator=(const StackRegion&) = delete;
  ~StackRegion();

  size_t count() const { return count_; }
  // The usable bytes of stack i < count() (its guard page below, not included).
  std::span<std::byte> stack(size_t i) const;

 private:
  void Unmap();
  std::byte* base_ = nullptr;
  size_t count_ = 0;
  size_t stride_ = 0;  // guard page + stack
  size_t guard_ = 0;
};

class Thread {
 public:
  Thread() = default;
  [[nodiscard]] static absl::StatusOr<Thread> Start(size_t stack_bytes, std::function<void()> fn,
                                                    SchedPolicy policy = SchedPolicy::kInherit);
  // The same on a stack the caller provides (a StackRegion's), which must outlive the thread.
  [[nodiscard]] static absl::StatusOr<Thread> StartOn(std::span<std::byte> stack,
                                                      std::function<void()> fn,
                                                      SchedPolicy policy = SchedPolicy::kInherit);
  Thread(Thread&& other) noexcept;
  Thread& operator=(Thread&& other) noexcept;
  Thread(const Thread&) = delete;
  Thread& operator=(const Thread&) = delete;
  ~Thread();

  bool joinable() const { return started_; }
  void Join();

 private:
  // Starts fn under `attr` (initialized; destroyed here); `stack` for the error message.
  static absl::StatusOr<Thread> Launch(pthread_attr_t* attr, size_t stack, std::function<void()> fn,
                                       SchedPolicy policy);
  pthread_t handle_{};
  bool started_ = false;
};

// Runs fn(begin, end) over [0, n) in contiguous slices of at least `min_per_slice` items, on up to
// `threads` threads (the caller runs the first slice; 0 = the host's cores, at most 4), and returns
// once every slice is done. For setup work whose items are independent (a data set's rows, the
// devices' model shards): fn must be safe to run concurrently on disjoint ranges. A helper thread
// the system refuses is not an error: its slice runs on the caller.
void ForSlices(int64_t n, int threads, int64_t min_per_slice,
               const std::function<void(int64_t, int64_t)>& fn);

}  // namespace rp
