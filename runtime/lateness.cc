#include "runtime/lateness.h"

#include <algorithm>
#include <cmath>

namespace rp {

void LatenessStats::Merge(const LatenessStats& other) {
  if (other.count_ == 0) return;
  if (buckets_.empty()) buckets_.assign(kBuckets, 0);
  for (size_t b = 0; b < buckets_.size(); ++b) buckets_[b] += other.buckets_[b];
  min_ = count_ ? std::min(min_, other.min_) : other.min_;
  max_ = std::max(max_, other.max_);
  count_ += other.count_;
  sum_ += other.sum_;
}

uint64_t LatenessStats::BucketLow(int b, uint64_t* width) {
  if (b < (1 << kSubBits)) {
    *width = 1;
    return static_cast<uint64_t>(b);
  }
  const int shift = (b >> kSubBits) - 1;
  const uint64_t sub = static_cast<uint64_t>(b & ((1 << kSubBits) - 1));
  *width = uint64_t{1} << shift;
  return ((uint64_t{1} << kSubBits) | sub) << shift;
}

Nanos LatenessStats::Quantile(double q) const {
  if (count_ == 0) return Nanos(0);
  q = std::clamp(q, 0.0, 1.0);
  // The rank (1-based) of the wanted value.
  const uint64_t rank = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(q * count_)));
  uint64_t seen = 0;
  for (int b = 0; b < kBuckets; ++b) {
    seen += buckets_[static_cast<size_t>(b)];
    if (seen >= rank) {
      uint64_t width = 0;
      const uint64_t low = BucketLow(b, &width);
      const uint64_t mid = low + (width - 1) / 2;
      return Nanos(static_cast<int64_t>(std::clamp(mid, min_, max_)));
    }
  }
  return max();
}

}  // namespace rp
