#include "runtime/watchdog.h"

#include "absl/strings/str_cat.h"

namespace rp {

std::string DescribeSite(const WaitSite& site) {
  std::string s = absl::StrCat("rank ", site.rank, " in op '", site.op, "'");
  if (site.peer >= 0) absl::StrAppend(&s, " waiting for peer ", site.peer);
  if (site.step >= 0) absl::StrAppend(&s, " at step ", site.step);
  if (site.micro_batch >= 0) absl::StrAppend(&s, " (micro-batch ", site.micro_batch, ")");
  return s;
}

Watchdog::Watchdog(std::chrono::nanoseconds timeout, std::function<void()> on_fail)
    : timeout_(timeout > std::chrono::nanoseconds(0) ? timeout
                                                     : std::chrono::milliseconds(1)),
      on_fail_(std::move(on_fail)) {}

void Watchdog::Fail(const absl::Status& status) {
  if (status.ok()) return;
  {
    MutexLock lock(&mu_);
    if (!status_.ok()) return;
    status_ = status;
    failed_.store(true, std::memory_order_release);  // pairs with the acquire in failed()
    cv_.SignalAll();
  }
  if (on_fail_) on_fail_();
}

absl::Status Watchdog::status() const {
  MutexLock lock(&mu_);
  return status_;
}

absl::Status Watchdog::Expired(const WaitSite& site) {
  absl::Status s = absl::DeadlineExceededError(absl::StrCat(
      "watchdog: ", DescribeSite(site), " for more than ",
      std::chrono::duration_cast<std::chrono::milliseconds>(timeout_).count(), " ms"));
  Fail(s);
  return s;
}

absl::Status Watchdog::Cancelled(const WaitSite& site) const {
  return absl::CancelledError(absl::StrCat(DescribeSite(site),
                                           ": released because the run failed: ",
                                           status().message()));
}

bool Watchdog::WaitForFailure(std::chrono::nanoseconds max_wait, const std::atomic<bool>* stop) {
  const auto deadline = std::chrono::steady_clock::now() + max_wait;
  MutexLock lock(&mu_);
  while (status_.ok()) {
    // Read under mu_: a Notify after the flag's store cannot fall between this check and the wait.
    if (stop != nullptr && stop->load(std::memory_order_acquire)) return false;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    cv_.WaitFor(&mu_, std::min<std::chrono::steady_clock::duration>(deadline - now,
                                                                     kPollInterval));
  }
  return true;
}

void Watchdog::Notify() {
  MutexLock lock(&mu_);
  cv_.SignalAll();
}

}  // namespace rp
