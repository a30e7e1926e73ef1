#include "runtime/radix_queue.h"

#include <cstdint>
#include <queue>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace rp {
namespace {

// A simulation's key: time, then a tie-break rank, then a sequence number (distinct keys).
struct Entry {
  int64_t time = 0;
  uint64_t tie = 0;
  uint64_t seq = 0;
  friend bool operator==(const Entry&, const Entry&) = default;
};
struct TimeOf {
  int64_t operator()(const Entry& e) const { return e.time; }
};
struct Before {
  bool operator()(const Entry& a, const Entry& b) const {
    return std::tie(a.time, a.tie, a.seq) < std::tie(b.time, b.tie, b.seq);
  }
};
struct After {
  bool operator()(const Entry& a, const Entry& b) const { return Before{}(b, a); }
};
using Queue = RadixQueue<Entry, TimeOf, Before>;

TEST(RadixQueue, TakesEntriesInKeyOrderWithTiesBrokenByTheWholeKey) {
  Queue q;
  q.push({5, 0, 0});
  q.push({3, 2, 1});
  q.push({3, 1, 2});
  q.push({0, 9, 3});
  q.push({1ll << 40, 0, 4});
  std::vector<Entry> out;
  while (!q.empty()) {
    out.push_back(q.top());
    q.pop();
  }
  EXPECT_EQ(out, (std::vector<Entry>{{0, 9, 3}, {3, 1, 2}, {3, 2, 1}, {5, 0, 0}, {1ll << 40, 0, 4}}));
}

// An entry earlier than the last time taken (a post at the current time with a lower tie-break, or
// one that precedes a peeked top) still leaves first.
TEST(RadixQueue, AnEntryBeforeTheLastTimeTakenStillLeavesInOrder) {
  Queue q;
  q.push({100, 5, 0});
  q.push({200, 0, 1});
  EXPECT_EQ(q.top(), (Entry{100, 5, 0}));  // the last time is now 100
  q.push({100, 1, 2});                       // same time, lower tie-break
  q.push({40, 7, 3});                        // earlier than the peeked top
  EXPECT_EQ(q.top(), (Entry{40, 7, 3}));
  q.pop();
  EXPECT_EQ(q.top(), (Entry{100, 1, 2}));
  q.pop();
  EXPECT_EQ(q.top(), (Entry{100, 5, 0}));
  q.pop();
  EXPECT_EQ(q.top(), (Entry{200, 0, 1}));
  q.pop();
  EXPECT_TRUE(q.empty());
}

// Against std::priority_queue over random workloads shaped like a simulation's: most pushes at or
// after the last key taken (spread over many powers of two), some at equal times, some earlier;
// tops peeked between pushes; the queue drained in between and at the end.
TEST(RadixQueue, MatchesABinaryHeapOnRandomWorkloads) {
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    std::mt19937_64 rng(seed);
    Queue q;
    std::priority_queue<Entry, std::vector<Entry>, After> ref;
    int64_t now = 0;
    uint64_t seq = 0;
    const int spread = static_cast<int>(rng() % 40) + 1;  // bits of the look-ahead
    for (int i = 0; i < 20000; ++i) {
      const uint64_t r = rng() % 100;
      if (r < 55 || ref.empty()) {
        int64_t t = now + static_cast<int64_t>(rng() % (uint64_t{1} << spread));
        if (r < 5) t = now;                                                    // the current time
        if (r >= 5 && r < 8) t = std::max<int64_t>(0, now - static_cast<int64_t>(rng() % 1000));  // earlier
        const Entry e{t, rng() % 16, seq++};
        q.push(e);
        ref.push(e);
      } else if (r < 60) {
        ASSERT_EQ(q.top(), ref.top()) << "seed " << seed << " i " << i;
      } else {
        ASSERT_EQ(q.top(), ref.top()) << "seed " << seed << " i " << i;
        now = std::max(now, ref.top().time);
        q.pop();
        ref.pop();
      }
      ASSERT_EQ(q.size(), ref.size());
    }
    while (!ref.empty()) {
      ASSERT_EQ(q.top(), ref.top()) << "seed " << seed;
      q.pop();
      ref.pop();
    }
    EXPECT_TRUE(q.empty());
  }
}

TEST(RadixQueue, TimesUpToTheLargestInt64) {
  Queue q;
  const int64_t big = INT64_MAX;
  q.push({big, 0, 0});
  q.push({big - 1, 0, 1});
  q.push({0, 0, 2});
  EXPECT_EQ(q.top().seq, 2u);
  q.pop();
  EXPECT_EQ(q.top().seq, 1u);
  q.pop();
  EXPECT_EQ(q.top().seq, 0u);
  q.pop();
  EXPECT_TRUE(q.empty());
}

}  // namespace
}  // namespace rp
