// rp::comm::DataLane: an exception thrown by an item's work (here a payload allocation that the
// address-space limit refuses) becomes that collective's data error, naming rank, collective,
// peer and ring step — never the end of the process. Not under sanitizers: their allocators
// reserve terabytes of address space, so no RLIMIT_AS can leave the test room to run.
#include "comm/data_lane.h"

#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "comm/ring_machine.h"
#include "gtest/gtest.h"
#include "runtime/thread.h"

namespace rp::comm {
namespace {

// This process's address space in bytes (/proc/self/status VmSize), 0 if unreadable.
size_t AddressSpaceBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmSize:", 0) == 0) return static_cast<size_t>(std::atoll(line.c_str() + 7)) << 10;
  }
  return 0;
}

// In the child: a 64 MiB segment (16 Mi FP32 values) to encode while the address space may grow
// by 16 MiB only — the payload's wire bytes cannot be allocated. Exit 0 if WaitFor returns the
// collective's ResourceExhausted error with rank, collective, peer and the cause, the payload is
// marked poisoned (its receiver must not decode it), and the lane still runs a later collective.
[[noreturn]] void EncodeUnderAnAddressSpaceLimit() {
  constexpr uint32_t kValues = uint32_t{16} << 20;
  std::vector<float> src(kValues, 1.5f);
  std::vector<float> small(64, 2.0f);
  DataLane lane;
  SegmentPayload big, later;
  const DataLane::Context failing{.rank = 3, .device = 5, .n = 4, .peer = 4,
                                  .kind = ring::TimedKind::kAllReduce, .op_id = 11, .count = kValues,
                                  .sequence = 0};
  const DataLane::Context next{.rank = 3, .device = 6, .n = 4, .peer = 4,
                               .kind = ring::TimedKind::kAllReduce, .op_id = 12, .count = 64,
                               .sequence = 1};
  const size_t vm = AddressSpaceBytes();
  rlimit old{};
  if (vm == 0 || getrlimit(RLIMIT_AS, &old) != 0) std::_Exit(10);
  rlimit capped = old;
  capped.rlim_cur = vm + (size_t{16} << 20);
  if (setrlimit(RLIMIT_AS, &capped) != 0) std::_Exit(11);
  lane.Push({.op = DataLane::Item::Op::kEncode, .n = kValues, .ring_step = 2, .src = src.data(),
             .payload = &big, .context = &failing});
  lane.Push({.op = DataLane::Item::Op::kEncode, .n = 64, .ring_step = 0, .src = small.data(),
             .payload = &later, .context = &next});
  lane.Flush();
  const absl::Status s = lane.WaitFor(lane.pushed(), 5);
  const absl::Status after = lane.WaitFor(lane.pushed(), 6);
  setrlimit(RLIMIT_AS, &old);
  std::fprintf(stderr, "status: %s\nlater: %s\n", s.ToString().c_str(), after.ToString().c_str());
  const bool named = absl::IsResourceExhausted(s) && absl::StrContains(s.message(), "rank 3 (device 5)") &&
                     absl::StrContains(s.message(), "#11") && absl::StrContains(s.message(), "(device 4)") &&
                     absl::StrContains(s.message(), "ring step 2") &&
                     absl::StrContains(s.message(), "out of memory on the data lane");
  const bool later_ran = after.ok() && !later.poisoned && later.elems == 64;
  std::_Exit(named && big.poisoned && later_ran ? 0 : 1);
}

TEST(DataLaneDeathTest, AnAllocationThatFailsOnTheLaneIsItsCollectivesErrorNotTheProcesssEnd) {
  if (kSanitizerBuild) GTEST_SKIP() << "sanitizers reserve the address space RLIMIT_AS would cap";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(EncodeUnderAnAddressSpaceLimit(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace rp::comm
