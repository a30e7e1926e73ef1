#include "runtime/heap.h"

#include <sys/mman.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <tuple>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/thread.h"

namespace rp {
namespace {

// Whether the kernel has MADV_POPULATE_WRITE (Linux >= 5.14).
bool KernelCanPopulate() {
  utsname u{};
  if (uname(&u) != 0) return false;
  int major = 0, minor = 0;
  if (std::sscanf(u.release, "%d.%d", &major, &minor) != 2) return false;
  return major > 5 || (major == 5 && minor >= 14);
}

// Resident pages among the whole pages of [p, p + bytes), and how many whole pages there are.
std::pair<size_t, size_t> Resident(const void* p, size_t bytes) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(page - 1);
  const size_t pages = (end - begin) / page;
  std::vector<unsigned char> vec(pages);
  if (mincore(reinterpret_cast<void*>(begin), end - begin, vec.data()) != 0) return {0, pages};
  size_t resident = 0;
  for (unsigned char v : vec) resident += v & 1;
  return {resident, pages};
}

TEST(PopulatedBlock, EveryWholePageIsResident) {
  if (!KernelCanPopulate()) GTEST_SKIP() << "kernel older than 5.14: no MADV_POPULATE_WRITE";
  constexpr size_t kBytes = size_t{3} << 20;  // above glibc's default mmap threshold: fresh pages
  PopulatedBlock b = PopulatedBlock::Allocate(kBytes);
  ASSERT_NE(b.data(), nullptr);
  EXPECT_EQ(b.size(), kBytes);
  ASSERT_TRUE(b.populated());
  const auto [resident, pages] = Resident(b.data(), b.size());
  EXPECT_GE(pages, (kBytes >> 12) - 1);
  EXPECT_EQ(resident, pages);
}

TEST(PopulatedBlock, EmptyAndMovedBlocksOwnNothing) {
  PopulatedBlock none = PopulatedBlock::Allocate(0);
  EXPECT_EQ(none.data(), nullptr);
  EXPECT_FALSE(none.populated());
  PopulatedBlock a = PopulatedBlock::Allocate(1 << 16);
  void* p = a.data();
  PopulatedBlock b = std::move(a);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  EXPECT_EQ(b.data(), p);
  b = PopulatedBlock();
  EXPECT_EQ(b.data(), nullptr);
}

// The point of the pair: with freed memory kept, a block freed after populating is handed out
// again resident. Without KeepFreedHeapMemory glibc maps a 24 MiB block on its own (above its
// mmap threshold, which only the free of such a block raises, to that block's size) and unmaps it
// on free, so a second block of that size is mapped afresh and not resident.
TEST(PopulatedBlock, FreedPopulatedMemoryIsReusedResidentWhenTheHeapKeepsIt) {
  if (!KernelCanPopulate()) GTEST_SKIP() << "kernel older than 5.14: no MADV_POPULATE_WRITE";
  if (kSanitizerBuild) GTEST_SKIP() << "the sanitizer's allocator replaces glibc's (mallopt)";
  ASSERT_TRUE(KeepFreedHeapMemory());
  EXPECT_TRUE(HeapKeepsFreedMemory());
  constexpr size_t kBytes = size_t{24} << 20;
  // On a thread of its own: its arena holds nothing else that could take the freed block.
  size_t resident = 0, pages = 0;
  absl::StatusOr<Thread> t = Thread::Start(1 << 20, [&] {
    { PopulatedBlock warm = PopulatedBlock::Allocate(kBytes); }
    void* again = std::malloc(kBytes);
    std::tie(resident, pages) = Resident(again, kBytes);
    std::free(again);
  });
  ASSERT_TRUE(t.ok()) << t.status();
  t->Join();
  ASSERT_GT(pages, 0u);
  EXPECT_EQ(resident, pages);
}

}  // namespace
}  // namespace rp
