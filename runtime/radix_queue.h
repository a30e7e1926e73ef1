// rp::RadixQueue: the pending-message queue of a discrete-event simulation (rp::Fabric's commits,
// the predictor's), a min-priority queue whose entries leave in key order and mostly arrive at or
// after the last key that left.
//
// Why not a heap: a simulation of thousands of devices keeps tens of thousands of messages pending,
// so a binary or 4-ary heap's sift-down after every pop walks levels that are cache misses (the
// largest self time of a straggler's full play in `predict`, and of the fabric's commit loop at
// 4096 devices; docs/fabric.md "Speed"). Here the entries are kept by the highest bit in which their
// time differs from the last time taken (a radix heap, Ahuja, Mehlhorn, Orlin and Tarjan 1990):
// a push appends to one of 64 vectors; a pop that finds no entry at or before the last time moves
// the lowest non-empty vector's entries once, to lower vectors or to `near_`, a small heap of the
// entries at or before the last time, in full key order (time, then the caller's tie-breaks).
// Each entry moves at most 64 times (down one bucket or more each time), through contiguous memory.
//
// Order: exactly the key order `Before` gives, whatever the order of pushes — an entry whose time
// precedes the last time taken (a simulation may post at the current time with a lower tie-break,
// or earlier than a peeked top) goes to `near_`, which holds every entry at or before that time, and
// every other entry is later than all of them. Keys should be distinct (else equal keys leave in
// an unspecified order, as from any heap).
//
// Requirements: TimeOf(entry) is the entry's time as a non-negative integer (int64_t ≥ 0 or
// uint64_t); Before(a, b) is a strict weak order on whole keys consistent with time (an earlier
// time comes first). top() may move entries (it is not const); references it returns are valid
// until the next push or pop.
//
// Thread safety: none (the fabric holds its lock; the predictor is single-threaded).
//
// Example:
//   struct E { int64_t time; int id; };
//   RadixQueue<E, decltype([](const E& e) { return e.time; }),
//              decltype([](const E& a, const E& b) { return a.time != b.time ? a.time < b.time : a.id < b.id; })> q;
//   q.push({5, 0}); q.push({3, 1}); q.push({3, 0});
//   q.top().id;  // 0 (time 3, id 0); then pop(): (3, 1), then (5, 0)
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace rp {

template <typename T, typename TimeOf, typename Before>
class RadixQueue {
 public:
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }

  void push(const T& v) {
    ++size_;
    const uint64_t t = Time(v);
    if (t <= last_) {
      near_.push_back(v);
      std::push_heap(near_.begin(), near_.end(), After{});
      return;
    }
    const int b = BucketOf(t);
    buckets_[static_cast<size_t>(b)].push_back(v);
    nonempty_ |= uint64_t{1} << b;
  }

  // The entry with the least key. Precondition: !empty().
  const T& top() {
    if (near_.empty()) Refill();
    return near_.front();
  }

  // Removes top(). Precondition: !empty().
  void pop() {
    if (near_.empty()) Refill();
    std::pop_heap(near_.begin(), near_.end(), After{});
    near_.pop_back();
    --size_;
  }

 private:
  // For the std heap functions (a max-heap of this order = the least key on top).
  struct After {
    bool operator()(const T& a, const T& b) const { return Before{}(b, a); }
  };
  static uint64_t Time(const T& v) { return static_cast<uint64_t>(TimeOf{}(v)); }
  // t > last_: the index of the highest bit in which t and last_ differ (0..63).
  int BucketOf(uint64_t t) const { return 63 - std::countl_zero(t ^ last_); }

  // near_ is empty and some bucket is not: the lowest non-empty bucket's least time becomes the
  // last time; its entries at that time go to near_, the others to lower buckets (they share
  // every bit above the bucket's with the new last time, and differ from it below).
  void Refill() {
    const int b = std::countr_zero(nonempty_);
    std::vector<T>& from = buckets_[static_cast<size_t>(b)];
    uint64_t least = Time(from.front());
    for (const T& v : from) least = std::min(least, Time(v));
    last_ = least;
    nonempty_ &= ~(uint64_t{1} << b);
    for (const T& v : from) {
      const uint64_t t = Time(v);
      if (t == least) {
        near_.push_back(v);
        continue;
      }
      const int to = BucketOf(t);
      buckets_[static_cast<size_t>(to)].push_back(v);
      nonempty_ |= uint64_t{1} << to;
    }
    from.clear();  // keeps its capacity
    std::make_heap(near_.begin(), near_.end(), After{});
  }

  std::vector<T> near_;                    // entries at or before last_: a heap in key order
  std::array<std::vector<T>, 64> buckets_;  // later entries by BucketOf
  uint64_t nonempty_ = 0;                   // bit b: buckets_[b] is not empty
  uint64_t last_ = 0;                       // the last time Refill took
  size_t size_ = 0;
};

}  // namespace rp
