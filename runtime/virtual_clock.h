// rp::VirtualClock: modeled time that advances only by events. Deterministic; never sleeps.
//
// Single thread (the predictor's case): WaitUntil(d) simply moves time to d (if later) and returns
// 0 at once; AdvanceTo(t) does the same without waiting. Nothing to set up.
//
// Several threads (deterministic emulation runs): every thread that takes part registers
// (Register()/Unregister() or rp::VirtualClock::Participant). Time then advances only when every
// registered participant is blocked — in WaitUntil, or in an external wait bracketed with
// BeginExternalWait()/EndExternalWait() (rp::ScopedExternalWait) — and it advances to the earliest
// pending WaitUntil deadline, releasing exactly the waiters due at that time. Waiters released by
// an advance count as running from that moment (the advancing thread marks them), so time cannot
// skip past them before they wake.
//
// Producer → consumer hand-off: a thread in BeginExternalWait() counts as blocked until it calls
// EndExternalWait itself, even after the message it waits for was posted, so time may advance
// past the message's arrival before the receiver wakes (its WaitUntil(arrival) then returns at
// once with a positive lateness; modeled timestamps are unaffected, they are computed from
// message stamps — DESIGN.md "Time discipline"). Waits that a producer ends use an
// ExternalWaiter instead: the producer calls Wake() right after publishing, and the consumer
// counts as running from that moment, under the clock's lock, so time cannot pass it:
//
//   VirtualClock::ExternalWaiter waiter(&clock);    // one per consumer (e.g. per receive slot)
//   // consumer:                                    // producer:
//   uint64_t ticket = waiter.PrepareWait();          //   Publish(msg);  (release)
//   if (!HasMessage()) {                             //   waiter.Wake();
//     waiter.BeginWait(ticket);
//     BlockUntilMessage();   // its own condvar / futex
//     waiter.EndWait();
//   }
// PrepareWait/BeginWait is an event count: a Wake() between them makes BeginWait a no-op, so a
// message published before the consumer blocks is never missed.
//
// With no registered participant, every WaitUntil advances at once (single-thread mode): do not
// mix registered and unregistered waiting threads.
//
// Thread safety: all methods may be called concurrently. Now() is a relaxed atomic read of the
// value published under the clock's mutex (acquire: it is stored with release in Advance).
#pragma once

#include <atomic>
#include <cstdint>
#include <set>
#include <utility>

#include "runtime/clock.h"
#include "runtime/mutex.h"
#include "runtime/time.h"

namespace rp {

class VirtualClock final : public Clock {
 public:
  explicit VirtualClock(Nanos start = kZeroTime) : now_(start.count()) {}

  Nanos Now() const override { return Nanos(now_.load(std::memory_order_acquire)); }
  // Blocks until modeled time reaches `deadline` (see the header comment for when it advances).
  // Returns Now() − deadline at return (0 unless an external wait let time run ahead).
  Nanos WaitUntil(Nanos deadline) override;
  void BeginExternalWait() override;
  void EndExternalWait() override;
  void Shutdown() override;
  bool is_shut_down() const override;
  bool is_virtual() const override { return true; }

  // Moves time forward to `t` (no-op if already later) and releases the waiters due by then.
  void AdvanceTo(Nanos t);

  // Adds / removes one participating thread (see header comment).
  void Register();
  void Unregister();
  // Participants counted as blocked right now (diagnostics and tests).
  int blocked_participants() const;

  // A consumer's external wait that a producer can end (see the header comment). Not copyable;
  // must not outlive the clock. Consumer methods: one consumer thread at a time; Wake: any thread.
  class ExternalWaiter {
   public:
    explicit ExternalWaiter(VirtualClock* clock) : clock_(clock) {}
    ExternalWaiter(const ExternalWaiter&) = delete;
    ExternalWaiter& operator=(const ExternalWaiter&) = delete;

    // Consumer, before checking its condition: a ticket for BeginWait.
    uint64_t PrepareWait();
    // Consumer, after its condition was false: counts it as blocked (time may then advance),
    // unless Wake() was called since the PrepareWait that returned `ticket`.
    void BeginWait(uint64_t ticket);
    // Consumer, once its wait is over: counts it as running again (no-op if Wake() already did,
    // or if BeginWait did not block).
    void EndWait();
    // Producer, after publishing what the consumer waits for: the consumer counts as running
    // from now on, so time cannot advance past the producer's current time before it wakes.
    void Wake();

   private:
    VirtualClock* const clock_;
    uint64_t wakes_ ABSL_GUARDED_BY(clock_->mu_) = 0;
    bool blocked_ ABSL_GUARDED_BY(clock_->mu_) = false;
  };

  // RAII registration for the scope of a participating thread.
  class Participant {
   public:
    explicit Participant(VirtualClock* clock) : clock_(clock) { clock_->Register(); }
    ~Participant() { clock_->Unregister(); }
    Participant(const Participant&) = delete;
    Participant& operator=(const Participant&) = delete;

   private:
    VirtualClock* const clock_;
  };

 private:
  struct Waiter {
    Nanos deadline;
    bool released = false;
  };
  // If every participant is blocked, advances to the earliest pending deadline.
  void MaybeAdvanceLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AdvanceLocked(Nanos t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::atomic<int64_t> now_;
  mutable Mutex mu_;
  CondVar cv_;
  int participants_ ABSL_GUARDED_BY(mu_) = 0;
  int blocked_ ABSL_GUARDED_BY(mu_) = 0;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  // Pending waiters ordered by deadline (ties by address: any order is fine, all are released).
  std::set<std::pair<int64_t, Waiter*>> waiters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rp
