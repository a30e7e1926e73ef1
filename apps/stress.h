// `ringpipe stress`'s pieces (apps/stress_cmd.cc runs them): seeded configurations (DrawConfig) and
// the checks of DESIGN.md's invariants on one run of each (CheckComm, CheckHealthy, CheckFault).
// docs/reliability.md lists the checks.
//
// Thread safety: plain data and functions; each check runs its own threads and joins them.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "comm/codec.h"
#include "comm/communicator.h"
#include "runtime/faults.h"
#include "schedule/executor.h"

namespace rp::apps::stress {

// Deterministic draws from a seed (std::mt19937_64's sequence is fixed by the standard; the
// distributions are ours so that a seed means the same configuration on every platform).
class Draw {
 public:
  explicit Draw(uint64_t seed) : rng_(seed * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL) {}
  int Int(int lo, int hi) {  // [lo, hi]
    return lo + static_cast<int>(rng_() % static_cast<uint64_t>(hi - lo + 1));
  }
  double Real(double lo, double hi) { return lo + (hi - lo) * static_cast<double>(rng_() >> 11) * 0x1.0p-53; }
  bool Chance(double p) { return Real(0, 1) < p; }
  template <typename T>
  T Pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(Int(0, static_cast<int>(v.size()) - 1))];
  }
  uint64_t Raw() { return rng_(); }

 private:
  std::mt19937_64 rng_;
};

// One drawn configuration.
struct Drawn {
  std::string summary;  // one line
  schedule::ExecutorOptions options;
  std::optional<OpFault> fault;
  // The direct comm check.
  int comm_ranks = 1;
  size_t comm_count = 0;
  size_t comm_segment_bytes = 4;
  comm::Codec comm_codec = comm::Codec::kFp32;
  // Message protocol of the comm check: inline slots (the default for small messages) or every
  // segment lent / pooled and acknowledged (inline_bytes 0), and the all-gather forwarding's hold
  // limit (0 = no forwarding). Drawn from a stream of their own, so the other draws of a seed
  // stay what they were.
  size_t comm_inline_bytes = comm::kDefaultInlineBytes;
  size_t comm_max_held = comm::kDefaultMaxHeldSegments;
};

// Configuration `seed`: world <= max_devices, one fault for one seed in `fault_every` (0: none),
// `comm_empty`: the comm check may draw a 0-element all-reduce.
absl::StatusOr<Drawn> DrawConfig(uint64_t seed, int fault_every, int max_devices, bool comm_empty);

// Collects failed checks of one configuration.
struct Checker {
  std::vector<std::string> failures;
  // The configuration's training left a lossy wire format's range (its own failure, not a broken
  // invariant: the same configuration with FP32 wire formats was checked to train to the end).
  bool out_of_range = false;
  template <typename... A>
  void Fail(const absl::FormatSpec<A...>& fmt, const A&... args) {
    failures.push_back(absl::StrFormat(fmt, args...));
  }
};

struct FaultTally {
  int injected = 0, detected = 0, attributed = 0;
  int out_of_range = 0;  // configurations (with or without a fault) that left their wire format's range
  std::map<std::string, int> by_kind;
};

// All-reduce over the drawn rank threads, untimed and on a fabric: same bits everywhere, exact FP32
// sums of integers, wire bytes = the formula, and on the fabric the emulated time = the closed form.
void CheckComm(const Drawn& c, uint64_t seed, Checker& ck);
// Healthy run: every invariant (header of apps/stress_cmd.cc).
void CheckHealthy(const Drawn& c, Checker& ck);
// Fault run: detected in time, attributed, nothing committed, no thread left.
void CheckFault(const Drawn& c, Checker& ck, FaultTally& tally);

}  // namespace rp::apps::stress
