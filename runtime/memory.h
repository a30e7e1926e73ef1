// rp::MemoryTracker: per-device byte accounting (current and peak) by category.
//
// Categories follow DESIGN.md's metrics: activations stored for backward (peak activation memory),
// parameters, gradients, codec residuals (error-feedback buffers of lossy wire codecs), other.
// Counters are atomics so the compute stream and the comm stream of one device may both account
// (relaxed ordering: values are statistics, read after the device's threads are joined, or read
// approximately while they run). Peaks are maintained with a CAS loop.
//
// Example:
//   device.memory().Allocate(rp::MemoryKind::kActivations, 4 << 20);   // forward stores input
//   RP_RETURN_IF_ERROR(device.memory().Free(rp::MemoryKind::kActivations, 4 << 20));  // backward
//   device.memory().peak(rp::MemoryKind::kActivations);  // 4 MiB
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "absl/status/status.h"

namespace rp {

enum class MemoryKind : int { kActivations, kParameters, kGradients, kCodecResiduals, kOther };
inline constexpr int kNumMemoryKinds = 5;
const char* MemoryKindName(MemoryKind kind);

class MemoryTracker {
 public:
  explicit MemoryTracker(int rank = 0) : rank_(rank) {}

  // Adds `bytes` to `kind` (and the total); updates the peaks.
  void Allocate(MemoryKind kind, uint64_t bytes);
  // Removes `bytes`. FailedPrecondition (naming rank, kind, bytes) if more than is held; then
  // nothing changes.
  [[nodiscard]] absl::Status Free(MemoryKind kind, uint64_t bytes);

  uint64_t current(MemoryKind kind) const { return Slot(kind).current.load(std::memory_order_relaxed); }
  uint64_t peak(MemoryKind kind) const { return Slot(kind).peak.load(std::memory_order_relaxed); }
  uint64_t total_current() const { return total_.current.load(std::memory_order_relaxed); }
  // Peak of the sum of all kinds (not the sum of the per-kind peaks).
  uint64_t total_peak() const { return total_.peak.load(std::memory_order_relaxed); }
  int rank() const { return rank_; }

 private:
  struct Counter {
    std::atomic<uint64_t> current{0};
    std::atomic<uint64_t> peak{0};
  };
  const Counter& Slot(MemoryKind kind) const { return kinds_[static_cast<size_t>(kind)]; }
  static void Add(Counter& c, uint64_t bytes);
  const int rank_;
  std::array<Counter, kNumMemoryKinds> kinds_;
  Counter total_;
};

}  // namespace rp
