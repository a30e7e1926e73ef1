#include "runtime/heap.h"

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <utility>

namespace rp {
namespace {

#ifndef MADV_POPULATE_WRITE
constexpr int MADV_POPULATE_WRITE = 23;  // Linux 5.14 (older headers lack the name)
#endif

std::atomic<bool> keeps_freed{false};

}  // namespace

bool KeepFreedHeapMemory() {
  // Fixing the trim threshold also fixes glibc's mmap threshold (128 KiB by default, otherwise
  // raised as mapped blocks are freed), so raise that too: a block above it would be a fresh
  // mapping each time. 32 MiB is glibc's largest (half a secondary arena's heap).
  const bool ok = mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1 && mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1;
  keeps_freed.store(ok, std::memory_order_relaxed);
  return ok;
}

bool HeapKeepsFreedMemory() { return keeps_freed.load(std::memory_order_relaxed); }

PopulatedBlock PopulatedBlock::Allocate(size_t bytes) {
  PopulatedBlock b;
  if (bytes == 0) return b;
  b.data_ = std::malloc(bytes);
  if (b.data_ == nullptr) return b;
  b.size_ = bytes;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(b.data_) + page - 1) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(b.data_) + bytes) & ~(page - 1);
  // Only whole pages: the partial ones at either end may hold other blocks (they fault as usual).
  b.populated_ = end > begin &&
                 madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE) == 0;
  return b;
}

PopulatedBlock::PopulatedBlock(PopulatedBlock&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      populated_(std::exchange(other.populated_, false)) {}

PopulatedBlock& PopulatedBlock::operator=(PopulatedBlock&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    populated_ = std::exchange(other.populated_, false);
  }
  return *this;
}

PopulatedBlock::~PopulatedBlock() { std::free(data_); }

}  // namespace rp
