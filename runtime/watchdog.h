// rp::Watchdog: the run's failure state, and deadline-bounded waits. Never a silent hang.
//
// Every blocking wait in ringpipe has a wall-clock deadline of `timeout` (the watchdog timeout).
// A waiter whose deadline passes calls Expired(site): that builds DeadlineExceeded naming the
// rank, op, peer and step it was waiting in, and fails the run with it. The first failure of a
// run wins (Fail); it triggers the on_fail hook (rp::Cluster shuts the clock down there) and every
// other waiter notices within kPollInterval and returns Cancelled naming its own site, so all
// threads unwind and join within timeout + 1 s.
//
// Thread safety: every method may be called from any thread. failed() is an acquire load of the
// flag Fail() stores with release after recording the status under its mutex.
//
// Example (a receive that waits for a message):
//   rp::MutexLock lock(&mu_);
//   RP_RETURN_IF_ERROR(watchdog.Wait(&mu_, &cv_, [&] { return !queue_.empty(); },
//                                    {.rank = 1, .op = "recv", .peer = 0, .step = 3}));
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "runtime/mutex.h"

namespace rp {

// Where a thread waits: for error messages. `op` has static storage (a literal).
struct WaitSite {
  int rank = -1;
  const char* op = "wait";
  int peer = -1;
  int step = -1;
  int micro_batch = -1;
};
// "rank 1 in op 'recv' waiting for peer 0 at step 3 (micro-batch 2)"; absent fields left out.
std::string DescribeSite(const WaitSite& site);

class Watchdog {
 public:
  // How often a blocked waiter re-checks whether the run failed.
  static constexpr std::chrono::milliseconds kPollInterval{5};

  // `timeout` > 0 (non-positive values are raised to 1 ms). `on_fail` runs once, on the thread
  // that records the first failure, after the status is recorded; it must not block.
  explicit Watchdog(std::chrono::nanoseconds timeout, std::function<void()> on_fail = {});

  std::chrono::nanoseconds timeout() const { return timeout_; }
  // The wall deadline of a wait starting now.
  std::chrono::steady_clock::time_point DeadlineFromNow() const {
    return std::chrono::steady_clock::now() + timeout_;
  }

  // Records `status` as the run's failure if it is the first (ignored if OK or not first).
  void Fail(const absl::Status& status);
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // The first failure, or OK.
  absl::Status status() const;
  // Fails the run with DeadlineExceeded("watchdog: <site> for more than <timeout>") and returns it.
  absl::Status Expired(const WaitSite& site);
  // Cancelled("<site>: released because the run failed: <first failure>").
  absl::Status Cancelled(const WaitSite& site) const;

  // Waits on `cv` (with `mu` held) until pred() holds (OK), the run failed (Cancelled), or the
  // timeout passes (Expired, which fails the run). `pred` is evaluated with `mu` held.
  template <typename Pred>
  absl::Status Wait(Mutex* mu, CondVar* cv, Pred pred, const WaitSite& site)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const auto deadline = DeadlineFromNow();
    while (!pred()) {
      if (failed()) return Cancelled(site);
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return Expired(site);
      cv->WaitFor(mu, std::min<std::chrono::steady_clock::duration>(deadline - now, kPollInterval));
    }
    return absl::OkStatus();
  }

  // Blocks until the run fails, `max_wait` passes or, with `stop`, *stop is true after a Notify()
  // (a device stopped by a fault; the executor's stall monitor, stopped when the run ends).
  // Returns true if the run failed.
  bool WaitForFailure(std::chrono::nanoseconds max_wait, const std::atomic<bool>* stop = nullptr);
  // Wakes every WaitForFailure to re-check its `stop` flag: store the flag first, then Notify.
  void Notify();

 private:
  const std::chrono::nanoseconds timeout_;
  const std::function<void()> on_fail_;
  std::atomic<bool> failed_{false};
  mutable Mutex mu_;
  CondVar cv_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rp
