#include "runtime/memory.h"

#include "absl/strings/str_cat.h"

namespace rp {

const char* MemoryKindName(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kActivations: return "activations";
    case MemoryKind::kParameters: return "parameters";
    case MemoryKind::kGradients: return "gradients";
    case MemoryKind::kCodecResiduals: return "codec_residuals";
    case MemoryKind::kOther: return "other";
  }
  return "unknown";
}

void MemoryTracker::Add(Counter& c, uint64_t bytes) {
  const uint64_t now = c.current.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  uint64_t peak = c.peak.load(std::memory_order_relaxed);
  while (now > peak && !c.peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

void MemoryTracker::Allocate(MemoryKind kind, uint64_t bytes) {
  Add(kinds_[static_cast<size_t>(kind)], bytes);
  Add(total_, bytes);
}

absl::Status MemoryTracker::Free(MemoryKind kind, uint64_t bytes) {
  Counter& c = kinds_[static_cast<size_t>(kind)];
  uint64_t cur = c.current.load(std::memory_order_relaxed);
  do {
    if (bytes > cur) {
      return absl::FailedPreconditionError(absl::StrCat("rank ", rank_, ": freeing ", bytes,
                                                        " bytes of ", MemoryKindName(kind),
                                                        " but only ", cur, " are held"));
    }
  } while (!c.current.compare_exchange_weak(cur, cur - bytes, std::memory_order_relaxed));
  total_.current.fetch_sub(bytes, std::memory_order_relaxed);
  return absl::OkStatus();
}

}  // namespace rp
