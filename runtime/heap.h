// Fresh heap memory made resident in bulk, for hosts where a page fault is expensive.
//
// In the PVM guests ringpipe's benchmarks run on, the first touch of an anonymous page costs about
// 15 µs; making a range resident with one madvise(MADV_POPULATE_WRITE) costs about 5 µs a page
// (docs/fabric.md "Speed"). A device's first step touches most of its memory for the first time
// (activations, the optimizer's commit backup, message payloads): at 1024 devices about 48 000
// pages, faulted one by one while the devices run. The executor instead has every device thread
// populate a block about that size before the first step and free it once all have
// (ExecutorOptions::warm_first_step); the first step's allocations then reuse resident
// pages — provided the allocator keeps freed memory, which KeepFreedHeapMemory arranges.
//
// Contract:
//  - KeepFreedHeapMemory(): process-wide (glibc mallopt): freed memory stays in the process (no
//    trimming of a heap's top) and blocks up to 32 MiB come from the heap, not from a mapping of
//    their own that free would unmap. Peak RSS is unchanged; RSS no longer falls after a free.
//    Call it once at program start (apps/main.cc does), before threads allocate. Returns false
//    if the C library refused a setting. HeapKeepsFreedMemory() tells whether it succeeded.
//  - PopulatedBlock::Allocate(bytes): malloc's block of `bytes`, its whole pages made resident
//    (writable, zero or reused data). Populating is best effort: `populated()` is false where the
//    kernel has no MADV_POPULATE_WRITE (Linux < 5.14) or refused it; the block is usable anyway.
//    The destructor frees it. Move-only.
//
// Example:
//   if (rp::HeapKeepsFreedMemory()) {
//     rp::PopulatedBlock warm = rp::PopulatedBlock::Allocate(256 << 10);
//   }  // freed: the next 256 KiB this thread's arena hands out are resident
#pragma once

#include <cstddef>

namespace rp {

bool KeepFreedHeapMemory();
bool HeapKeepsFreedMemory();

class PopulatedBlock {
 public:
  PopulatedBlock() = default;
  static PopulatedBlock Allocate(size_t bytes);
  PopulatedBlock(PopulatedBlock&& other) noexcept;
  PopulatedBlock& operator=(PopulatedBlock&& other) noexcept;
  PopulatedBlock(const PopulatedBlock&) = delete;
  PopulatedBlock& operator=(const PopulatedBlock&) = delete;
  ~PopulatedBlock();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  // Whether the kernel made its whole pages resident.
  bool populated() const { return populated_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
  bool populated_ = false;
};

}  // namespace rp
