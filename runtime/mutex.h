// rp::Mutex, rp::MutexLock, rp::CondVar: a mutex with Abseil's thread-safety annotations.
//
// Why not absl::Mutex: Debian's libabsl is not built with ThreadSanitizer, so TSan cannot see
// absl::Mutex's lock/unlock and reports false races on every field it guards (checked on this
// machine with a 4-thread counter). rp::Mutex wraps std::mutex (pthread, intercepted by TSan) and
// carries the same annotations (ABSL_GUARDED_BY(mu_), ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_)), so
// clang's -Wthread-safety checks the code and TSan checks the runs. The API mirrors Abseil's:
// MutexLock takes a pointer.
//
// CondVar::WaitFor/WaitUntilSteady wait on the system clock internally: libstdc++ turns a
// steady_clock wait into pthread_cond_clockwait, which GCC 12's TSan does not intercept (false
// races again). Those waits are watchdog-style timeouts where a wall-clock jump only changes when a
// timeout fires, never correctness; precise waits go through rp::Clock, not a CondVar.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include <pthread.h>

#include "absl/base/thread_annotations.h"

namespace rp {

// How a contended Lock waits. kSleep: glibc's default mutex, which sleeps on a futex at once.
// kSpinThenSleep: glibc's adaptive mutex (PTHREAD_MUTEX_ADAPTIVE_NP), which first retries for a
// bounded number of rounds (glibc's `glibc.mutex.spin_count` tunable, default 100) — for a lock
// whose critical sections are short and whose holder is running on another core, as the fabric's
// is: a 512-device virtual run sleeps on it ~3 000 fewer times (docs/fabric.md "Speed").
enum class MutexWait : uint8_t { kSleep, kSpinThenSleep };

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  // libstdc++'s std::mutex is a pthread mutex with a trivial destructor; re-initialising its
  // handle with another type leaves TSan's interception (pthread_mutex_*) as it is.
  explicit Mutex(MutexWait wait) {
    if (wait == MutexWait::kSleep) return;
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_init(mu_.native_handle(), &attr);
    pthread_mutexattr_destroy(&attr);
  }
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) { return mu_.try_lock(); }
  // Tells the analysis the caller holds the lock (no runtime check).
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds `mu` for its scope. `mu` must outlive the lock.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// Condition variable for rp::Mutex. All waits may wake spuriously: callers loop on their condition.
class CondVar {
 public:
  // Atomically releases `mu`, blocks, re-acquires `mu` before returning.
  void Wait(Mutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lk(mu->mu_, std::adopt_lock);
    cv_.wait(lk);
    lk.release();
  }
  // As Wait, but returns after at most `timeout`. Returns true if the time ran out.
  template <typename Rep, typename Period>
  bool WaitFor(Mutex* mu, std::chrono::duration<Rep, Period> timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const auto deadline = std::chrono::system_clock::now() +
                          std::chrono::duration_cast<std::chrono::system_clock::duration>(timeout);
    std::unique_lock<std::mutex> lk(mu->mu_, std::adopt_lock);
    const bool timed_out = cv_.wait_until(lk, deadline) == std::cv_status::timeout;
    lk.release();
    return timed_out;
  }
  // As WaitFor, with a steady_clock deadline (converted to a system_clock wait, see above).
  bool WaitUntilSteady(Mutex* mu, std::chrono::steady_clock::time_point deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return WaitFor(mu, deadline - std::chrono::steady_clock::now());
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace rp
