#include "comm/channel.h"

#include <malloc.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "gtest/gtest.h"
#include "runtime/mutex.h"

namespace rp::comm {
namespace {

constexpr std::chrono::seconds kTimeout{20};

TEST(SpscQueue, DeliversEveryItemExactlyOnceInOrderWithCapacityTwo) {
  constexpr uint64_t kItems = 100000;
  SpscQueue<uint64_t> q(2);
  absl::Status producer_status;
  std::thread producer([&] {
    for (uint64_t i = 0; i < kItems && producer_status.ok(); ++i) {
      producer_status = q.Push(i, kTimeout);
    }
  });
  uint64_t wrong = 0;
  for (uint64_t i = 0; i < kItems; ++i) {
    uint64_t v = ~0ull;
    ASSERT_TRUE(q.Pop(&v, kTimeout).ok());
    wrong += v != i;
  }
  producer.join();
  EXPECT_TRUE(producer_status.ok()) << producer_status;
  EXPECT_EQ(wrong, 0u);
  uint64_t extra;
  EXPECT_FALSE(q.TryPop(&extra)) << "nothing delivered twice";
}

TEST(SpscQueue, PopOnAnEmptyQueueTimesOut) {
  SpscQueue<int> q(2);
  int v;
  EXPECT_EQ(q.Pop(&v, std::chrono::milliseconds(20)).code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST(SpscQueue, PushOnAFullQueueTimesOut) {
  SpscQueue<int> q(1);
  ASSERT_TRUE(q.TryPush(1));
  EXPECT_EQ(q.Push(2, std::chrono::milliseconds(20)).code(), absl::StatusCode::kDeadlineExceeded);
}

// The inline-slot protocol of the ring (comm/collectives.cc): with capacity c and c + 1 slots, a
// producer that writes slot i % (c + 1) only after WaitWritable never overwrites a slot the
// consumer is still reading. Under TSan this also checks the happens-before of the slot bytes.
TEST(SpscQueue, WaitWritableLetsAProducerReuseSlotsTheConsumerFinished) {
  constexpr uint64_t kItems = 20000;
  constexpr size_t kCapacity = 2, kSlots = kCapacity + 1, kWords = 16;
  SpscQueue<uint64_t> q(kCapacity);
  std::vector<uint64_t> slots(kSlots * kWords);  // plain memory, ordered only by the queue
  absl::Status producer_status;
  std::thread producer([&] {
    for (uint64_t i = 0; i < kItems && producer_status.ok(); ++i) {
      producer_status = q.WaitWritable(kTimeout);
      if (!producer_status.ok()) break;
      uint64_t* slot = &slots[(i % kSlots) * kWords];
      for (size_t w = 0; w < kWords; ++w) slot[w] = i;
      if (!q.TryPush(i)) producer_status = absl::InternalError("push failed after WaitWritable");
    }
  });
  uint64_t torn = 0;
  for (uint64_t i = 0; i < kItems; ++i) {
    uint64_t v = ~0ull;
    ASSERT_TRUE(q.Pop(&v, kTimeout).ok());
    const uint64_t* slot = &slots[(v % kSlots) * kWords];
    for (size_t w = 0; w < kWords; ++w) torn += slot[w] != i;
    if (i % 64 == 0) std::this_thread::yield();  // let the producer run ahead into a full queue
    for (size_t w = 0; w < kWords; ++w) torn += slot[w] != i;  // still ours until the next Pop
  }
  producer.join();
  EXPECT_TRUE(producer_status.ok()) << producer_status;
  EXPECT_EQ(torn, 0u);
}

TEST(SpscQueue, WaitWritableOnAFullQueueTimesOut) {
  SpscQueue<int> q(1);
  EXPECT_TRUE(q.WaitWritable(std::chrono::milliseconds(20)).ok());
  ASSERT_TRUE(q.TryPush(1));
  EXPECT_EQ(q.WaitWritable(std::chrono::milliseconds(20)).code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST(SpscQueue, CancelWakesABlockedConsumer) {
  SpscQueue<int> q(2);
  absl::Status s;
  std::thread consumer([&] {
    int v;
    s = q.Pop(&v, kTimeout);
  });
  q.Cancel();
  consumer.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
}

TEST(OwningChannel, MovesBuffersWithoutCopyingInOrder) {
  constexpr int kItems = 10000;
  OwningChannel<std::vector<int>> ch(ChannelOptions{.capacity = 2});
  std::vector<const int*> sent(kItems);
  std::thread producer([&] {
    for (int i = 0; i < kItems; ++i) {
      auto buf = std::make_unique<std::vector<int>>(4, i);
      sent[static_cast<size_t>(i)] = buf->data();
      if (!ch.Send(std::move(buf), Nanos(i), static_cast<uint64_t>(i), kTimeout).ok()) return;
    }
  });
  int wrong = 0;
  std::vector<const int*> received(kItems);
  std::vector<std::unique_ptr<std::vector<int>>> keep;  // storage stays alive to compare addresses
  for (int i = 0; i < kItems; ++i) {
    std::unique_ptr<std::vector<int>> buf;
    Nanos arrival{0};
    uint64_t ticket = 0;
    ASSERT_TRUE(ch.Recv(&buf, &arrival, &ticket, kTimeout).ok());
    wrong += (*buf)[0] != i || arrival != Nanos(i) || ticket != static_cast<uint64_t>(i);
    received[static_cast<size_t>(i)] = buf->data();
    keep.push_back(std::move(buf));
  }
  producer.join();
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(sent, received) << "the payload storage itself travelled";
}

TEST(Channel, CarriesTheReadyStampAndTicket) {
  Channel<int> ch(ChannelOptions{.capacity = 2});
  ASSERT_TRUE(ch.Send(7, Nanos(100), /*ticket=*/42, kTimeout).ok());
  Stamped<int> m;
  ASSERT_TRUE(ch.Recv(&m, kTimeout).ok());
  EXPECT_EQ(m.body, 7);
  EXPECT_EQ(m.arrival, Nanos(100));
  EXPECT_EQ(m.ticket, 42u);
}

TEST(UnboundedQueue, NeverRefusesAPushAndKeepsOrder) {
  UnboundedQueue<int> q(kDefaultSpinIterations, kDefaultYieldIterations);
  for (int i = 0; i < 100000; ++i) ASSERT_TRUE(q.TryPush(i));
  EXPECT_EQ(q.size(), 100000u);
  int v = -1, wrong = 0;
  for (int i = 0; i < 100000; ++i) {
    ASSERT_TRUE(q.TryPop(&v));
    wrong += v != i;
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_FALSE(q.TryPop(&v));
}

TEST(UnboundedQueue, HandsOffAcrossThreadsAndCancels) {
  constexpr int kItems = 200000;
  UnboundedQueue<int> q(kDefaultSpinIterations, kDefaultYieldIterations);
  std::thread producer([&] {
    for (int i = 0; i < kItems; ++i) ASSERT_TRUE(q.Push(i, kTimeout).ok());
  });
  int wrong = 0, v = 0;
  for (int i = 0; i < kItems; ++i) {
    ASSERT_TRUE(q.Pop(&v, kTimeout).ok());
    wrong += v != i;
  }
  producer.join();
  EXPECT_EQ(wrong, 0);
  q.Cancel();
  EXPECT_EQ(q.Pop(&v, kTimeout).code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(q.Push(1, kTimeout).code(), absl::StatusCode::kCancelled);
}

// A timed all-to-all holds one link per ordered pair of ranks (Communicator::GetAllToAllLink): an
// unbounded data channel and an acknowledgement queue. Its unbounded queue reserved 64 nodes of a
// boost::lockfree::queue up front, 17 KiB a link — 1.1 GB of links at 256 ranks, where one call puts
// a message or two on most of them. A link now holds what it carries: under 2 KiB before its first
// message (glibc's count of the heap in use; skipped where another allocator replaces it).
TEST(AllToAllLink, ATimedLinkReservesNoRoomForMessagesItHasNotCarried) {
  auto in_use = [] { return mallinfo2().uordblks; };
  const size_t base = in_use();
  auto probe = std::make_unique<std::byte[]>(size_t{1} << 16);
  if (in_use() < base + (size_t{1} << 16)) GTEST_SKIP() << "mallinfo2 does not see this allocator's blocks";
  probe.reset();
  constexpr int kLinks = 256;
  const ChannelOptions timed{.capacity = 0};  // as GetAllToAllLink's with a fabric
  std::vector<std::unique_ptr<internal::A2aLink>> links;
  links.reserve(kLinks);
  const size_t before = in_use();
  for (int i = 0; i < kLinks; ++i) {
    links.push_back(std::make_unique<internal::A2aLink>(timed, kDefaultChannelCapacity + 4));
  }
  const double per_link = static_cast<double>(in_use() - before) / kLinks;
  EXPECT_LT(per_link, 2048) << "bytes a timed link holds before its first message";
  // Room comes with the messages, and stays for reuse.
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(links[0]->data.Send({.payload = nullptr, .owned = false, .op_id = 1, .block_elems = 0,
                                     .elems = 0, .segment = i, .kind = {}, .codec = {}},
                                    Nanos(i), 0, kTimeout)
                    .ok());
  }
  for (int i = 0; i < 1000; ++i) {
    Stamped<internal::A2aMsg> m;
    ASSERT_TRUE(links[0]->data.Recv(&m, kTimeout).ok());
    EXPECT_EQ(m.body.segment, i);
  }
}

TEST(Channel, CapacityZeroIsUnbounded) {
  Channel<int> ch(ChannelOptions{.capacity = 0});
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(ch.Send(i, Nanos(i), 0, kTimeout).ok());
  EXPECT_TRUE(ch.writable());
  Stamped<int> m;
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(ch.Recv(&m, kTimeout).ok());
    ASSERT_EQ(m.body, i);
  }
}

}  // namespace
}  // namespace rp::comm
