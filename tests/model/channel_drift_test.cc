// Keeps the model honest: tests/model/channel_protocol.h is a copy of the channel's synchronization
// protocol (comm/channel.{h,cc}) and of Boost's spsc_queue ring buffer. This test fails when a line
// the model mirrors changes, or when the production code gains or loses an atomic operation, so the
// model check (channel_model_test) never silently checks an outdated protocol. On failure: update
// channel_protocol.h to the new code (same orders), then the expectations below.
#include <fstream>
#include <iterator>
#include <string>

#include "gtest/gtest.h"

namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

void ExpectMirrored(const std::string& path, std::initializer_list<const char*> lines) {
  const std::string text = ReadFile(path);
  ASSERT_FALSE(text.empty()) << "cannot read " << path;
  for (const char* line : lines) {
    EXPECT_NE(text.find(line), std::string::npos)
        << path << " no longer contains `" << line << "`: re-sync tests/model/channel_protocol.h";
  }
}

const std::string kSource = RINGPIPE_SOURCE_DIR;

TEST(ChannelModelDrift, WakeupAndQueueOrderingsAreTheModeledOnes) {
  ExpectMirrored(kSource + "/comm/wakeup.h",
                 {"uint32_t Prepare() const { return seq_.load(std::memory_order_seq_cst); }"});
  ExpectMirrored(kSource + "/comm/channel.h",
                 {"if (!queue_.push(v)) return false;", "data_.Notify();",
                  "if (!queue_.pop(*v)) return false;", "space_.Notify();",
                  "return Await(space_, [&] { return TryPush(v); }, timeout);",
                  "return Await(data_, [&] { return TryPop(v); }, timeout);",
                  "return Await(space_, [&] { return queue_.write_available() > 0; }, timeout);",
                  "cancelled_.store(true, std::memory_order_release);",
                  "bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }",
                  "const uint32_t key = w.Prepare();", "if (cancelled()) return absl::CancelledError(",
                  "if (!w.Wait(key, deadline)) {", "boost::lockfree::spsc_queue<T> queue_;"});
  ExpectMirrored(kSource + "/comm/channel.cc",
                 {"waiters_.fetch_add(1, std::memory_order_seq_cst);",
                  "if (seq_.load(std::memory_order_seq_cst) == key) {",
                  "syscall(SYS_futex, FutexWord(&seq_), FUTEX_WAIT_PRIVATE, key, &ts, nullptr, 0);",
                  "waiters_.fetch_sub(1, std::memory_order_seq_cst);", "seq_.fetch_add(1, std::memory_order_seq_cst);",
                  "if (waiters_.load(std::memory_order_seq_cst) != 0) {",
                  "syscall(SYS_futex, FutexWord(&seq_), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);"});
}

TEST(ChannelModelDrift, NoUnmodeledAtomicOperation) {
  // Every memory order in the channel's code is one the model mirrors: 1 in wakeup.h (Prepare),
  // 2 in channel.h (Cancel, cancelled), 5 in channel.cc (Wait: 3, Notify: 2). (The unbounded
  // queue of timed communicators, comm/unbounded_queue.h, is outside the model: TSan covers it.)
  EXPECT_EQ(Count(ReadFile(kSource + "/comm/wakeup.h"), "std::memory_order_"), 1);
  EXPECT_EQ(Count(ReadFile(kSource + "/comm/channel.h"), "std::memory_order_"), 2);
  EXPECT_EQ(Count(ReadFile(kSource + "/comm/channel.cc"), "std::memory_order_"), 5);
}

TEST(ChannelModelDrift, BoostRingBufferIsTheModeledOne) {
  ExpectMirrored(BOOST_SPSC_QUEUE_HPP,
                 {"const size_t write_index = write_index_.load(memory_order_relaxed);  // only written from push thread",
                  "if (next == read_index_.load(memory_order_acquire))",
                  "write_index_.store(next, memory_order_release);",
                  "const size_t write_index = write_index_.load(memory_order_acquire);",
                  "const size_t read_index  = read_index_.load(memory_order_relaxed); // only written from pop thread",
                  "if ( empty(write_index, read_index) )",  // consume_one: pop(U&) goes through it
                  "read_index_.store(next, memory_order_release);",
                  "return consume_one( consume_functor );",
                  "max_elements_(max_elements + 1)"});
}

}  // namespace
