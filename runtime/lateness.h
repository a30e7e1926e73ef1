// rp::LatenessStats: a compact histogram of wait lateness (or any non-negative duration).
//
// Every precise wait in ringpipe (rp::Clock::WaitUntil) returns how late it woke; devices record
// those values here so the report can show host noise apart from modeled time (DESIGN.md, "Time
// discipline"). Values are bucketed log-linearly: 16 sub-buckets per power of two, so a quantile
// is exact below 16 ns and within 1/16 (6.25 %) above; count, sum, min and max are exact.
//
// Memory: the histogram (976 counters, 7.8 KB) is allocated at the first Record or Merge of a
// value, so an empty one costs a few words — a virtual-clock run, whose devices never wait on a
// clock, keeps thousands of them empty (two per device).
//
// Thread safety: NOT thread-safe. One writer (the device thread that waits); read after that
// thread has been joined, or copy under the owner's synchronisation. Merge() combines devices.
//
// Example:
//   rp::LatenessStats s;
//   s.Record(rp::Nanos(1200));
//   s.Record(rp::Nanos(800));
//   s.Quantile(0.5);  // ~800 ns
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/time.h"

namespace rp {

class LatenessStats {
 public:
  // Records one value; negative values are recorded as 0.
  void Record(Nanos value) {
    const uint64_t v = value.count() > 0 ? static_cast<uint64_t>(value.count()) : 0;
    if (buckets_.empty()) buckets_.assign(kBuckets, 0);
    ++buckets_[static_cast<size_t>(BucketOf(v))];
    ++count_;
    sum_ += v;
    if (count_ == 1 || v < min_) min_ = v;
    if (v > max_) max_ = v;
  }
  // Adds every value of `other`.
  void Merge(const LatenessStats& other);

  uint64_t count() const { return count_; }
  Nanos sum() const { return Nanos(static_cast<int64_t>(sum_)); }
  Nanos min() const { return Nanos(static_cast<int64_t>(count_ ? min_ : 0)); }
  Nanos max() const { return Nanos(static_cast<int64_t>(max_)); }
  Nanos mean() const { return count_ ? Nanos(static_cast<int64_t>(sum_ / count_)) : Nanos(0); }
  // The q-quantile (q in [0, 1]), the midpoint of the bucket that holds it, clamped to
  // [min, max]. 0 when empty.
  Nanos Quantile(double q) const;

 private:
  static constexpr int kSubBits = 4;  // 16 sub-buckets per octave
  static constexpr int kBuckets = (64 - kSubBits + 1) << kSubBits;
  static int BucketOf(uint64_t v) {
    if (v < (1u << kSubBits)) return static_cast<int>(v);
    const int msb = 63 - __builtin_clzll(v);
    const int shift = msb - kSubBits;
    const int sub = static_cast<int>((v >> shift) & ((1u << kSubBits) - 1));
    return ((shift + 1) << kSubBits) + sub;
  }
  // Smallest value in bucket b and the bucket width.
  static uint64_t BucketLow(int b, uint64_t* width);

  std::vector<uint64_t> buckets_;  // kBuckets counters once a value was recorded, else empty
  uint64_t count_ = 0;
  uint64_t sum_ = 0;
  uint64_t min_ = 0;
  uint64_t max_ = 0;
};

}  // namespace rp
