// Model check of the SPSC channel's synchronization protocol (tests/model/channel_protocol.h, a
// faithful copy of comm/channel.{h,cc} and Boost's ring buffer) with Relacy (Debian relacy-dev):
// Relacy runs the threads on its own scheduler and memory model (C++11 orderings, relaxed loads may
// read stale values, every non-atomic access is checked for a happens-before race, a state where
// every thread sleeps is a deadlock).
//
// Scenarios (each one CTest test, label `model`):
//   fifo            producer Push()es N values whose payload (plain memory) it wrote first; the
//                   consumer Pop()s and checks value i == i (exactly once, in order), reads the
//                   payload (race-checked), and finds the queue empty after N; capacity 1, so both
//                   sides block on the futex (a lost wake-up is a deadlock).
//   wait_writable   the lend protocol: the producer calls WaitWritable() and then TryPush must
//                   succeed; what the consumer wrote before popping value m - capacity must be
//                   visible to the producer once WaitWritable returned before its push m.
//   cancel          3 threads: producer and consumer as in fifo, plus Cancel() from a third; both
//                   blocked sides wake and return Cancelled; the values received are an in-order
//                   prefix of those pushed, and at most `capacity` pushed values were left queued.
//
// Usage: channel_model_test SCENARIO [--expect=success|data_race|deadlock|assert] [--iterations=N]
//                                    [--search=random|bound] [--bound=PREEMPTIONS]
// --search=random: N seeded random schedules (default 100000). --search=bound: every schedule with at
// most PREEMPTIONS preemptions (default 2), or the first N of them.
// Exit 0 when Relacy's verdict is the expected one (success by default). The mutants
// (RP_CHANNEL_MUTATION=1..3, channel_protocol.h) are the same program built with one weakened
// memory order, registered with the failure Relacy must report.
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "tests/model/channel_protocol.h"

// Relacy last: it #defines new, delete, assert and memory_order_* for the code that follows.
#include <relacy/relacy.hpp>

namespace {

// The caller's location as defaulted parameters (GCC and clang builtins; clang 14 has no
// std::source_location).
#define RP_CALLER \
  const char *func = __builtin_FUNCTION(), const char *file = __builtin_FILE(), unsigned line = __builtin_LINE()
#define RP_CALLER_INFO rl::debug_info(func, file, line)

// The atomics policy that runs channel_protocol.h under Relacy. Each operation carries its caller's
// source location, so Relacy's history names the protocol line.
struct RelacyPolicy {
  template <typename T>
  using Atomic = rl::atomic<T>;
  template <typename T>
  using Plain = rl::var<T>;
  using FutexWord = rl::atomic<int>;  // Relacy's futex() takes an atomic<int>
  using FutexValue = int;
  static constexpr rl::memory_order kRelaxed = rl::mo_relaxed;
  static constexpr rl::memory_order kAcquire = rl::mo_acquire;
  static constexpr rl::memory_order kRelease = rl::mo_release;
  static constexpr rl::memory_order kSeqCst = rl::mo_seq_cst;

  template <typename T>
  static T Load(const rl::atomic<T>& a, rl::memory_order mo, RP_CALLER) {
    return a.load(mo, RP_CALLER_INFO);
  }
  template <typename T>
  static void Store(rl::atomic<T>& a, T v, rl::memory_order mo, RP_CALLER) {
    a.store(v, mo, RP_CALLER_INFO);
  }
  template <typename T>
  static T FetchAdd(rl::atomic<T>& a, T v, rl::memory_order mo, RP_CALLER) {
    return a(RP_CALLER_INFO).fetch_add(v, mo);
  }
  template <typename T>
  static T FetchSub(rl::atomic<T>& a, T v, rl::memory_order mo, RP_CALLER) {
    return a(RP_CALLER_INFO).fetch_sub(v, mo);
  }
  template <typename T>
  static T Read(rl::var<T>& v, RP_CALLER) {
    return v(RP_CALLER_INFO);
  }
  template <typename T>
  static void Write(rl::var<T>& v, const T& x, RP_CALLER) {
    v(RP_CALLER_INFO) = x;
  }
  // FUTEX_WAIT without a timeout: returns at once if the word is not `expected` (checked atomically
  // with going to sleep, after a full fence, as the kernel does); may wake spuriously.
  static void FutexWait(rl::atomic<int>& word, int expected, RP_CALLER) {
    rl::rl_futex(&word, rl::RL_FUTEX_WAIT, expected, nullptr, nullptr, 0, RP_CALLER_INFO);
  }
  static void FutexWake(rl::atomic<int>& word, RP_CALLER) {
    rl::rl_futex(&word, rl::RL_FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0, RP_CALLER_INFO);
  }
  static void CpuRelax(RP_CALLER) { rl::yield(1, RP_CALLER_INFO); }
  static void Yield(RP_CALLER) { rl::yield(1, RP_CALLER_INFO); }
};

using rp::model::SpscQueue;
using rp::model::WaitResult;

constexpr size_t kCapacity = 1;  // the smallest ring: every second operation blocks
constexpr int kSpins = 1, kYields = 1;  // one pass through each phase of Await before the futex
constexpr int kMessages = 3;

struct Fifo : rl::test_suite<Fifo, 2> {
  SpscQueue<int, RelacyPolicy> q{kCapacity, kSpins, kYields};
  rl::var<int> payload[kMessages];

  void thread(unsigned index) {
    if (index == 0) {
      for (int i = 0; i < kMessages; ++i) {
        payload[i]($) = 100 + i;  // written before Push: must be visible after Pop
        RL_ASSERT(q.Push(i) == WaitResult::kOk);
      }
    } else {
      for (int i = 0; i < kMessages; ++i) {
        int v = -1;
        RL_ASSERT(q.Pop(&v) == WaitResult::kOk);
        RL_ASSERT(v == i);  // exactly once, in order
        RL_ASSERT(payload[v]($) == 100 + v);
      }
      int extra;
      RL_ASSERT(!q.TryPop(&extra));  // nothing delivered twice
    }
  }
};

struct WaitWritable : rl::test_suite<WaitWritable, 2> {
  SpscQueue<int, RelacyPolicy> q{kCapacity, kSpins, kYields};
  rl::var<int> consumed[kMessages];  // written by the consumer before it pops value j

  void thread(unsigned index) {
    if (index == 0) {
      for (int m = 0; m < kMessages; ++m) {
        RL_ASSERT(q.WaitWritable() == WaitResult::kOk);
        // The consumer popped every value but the last capacity - 1: all of 0 .. m - capacity.
        for (int j = 0; j + static_cast<int>(kCapacity) <= m; ++j) RL_ASSERT(consumed[j]($) == 1);
        RL_ASSERT(q.TryPush(m));  // writable stays true until this producer pushes
      }
    } else {
      for (int j = 0; j < kMessages; ++j) {
        consumed[j]($) = 1;
        int v = -1;
        RL_ASSERT(q.Pop(&v) == WaitResult::kOk);
        RL_ASSERT(v == j);
      }
    }
  }
};

struct Cancel : rl::test_suite<Cancel, 3> {
  SpscQueue<int, RelacyPolicy> q{kCapacity, kSpins, kYields};
  rl::var<int> pushed, received;

  void before() {
    pushed($) = 0;
    received($) = 0;
  }
  void thread(unsigned index) {
    if (index == 0) {
      int n = 0;
      while (n < kMessages && q.Push(n) == WaitResult::kOk) ++n;
      pushed($) = n;
    } else if (index == 1) {
      int n = 0, v = -1;
      while (q.Pop(&v) == WaitResult::kOk) {  // must end: Cancel wakes a blocked Pop
        RL_ASSERT(v == n);
        ++n;
      }
      received($) = n;
    } else {
      q.Cancel();
    }
  }
  void after() {
    // Every thread returned (no deadlock). Received values are an in-order prefix of the pushed
    // ones; at most `capacity` pushed values stayed queued.
    RL_ASSERT(received($) <= pushed($));
    RL_ASSERT(pushed($) - received($) <= static_cast<int>(kCapacity));
  }
};

rl::test_result_e ParseExpect(const std::string& s) {
  if (s == "success") return rl::test_result_success;
  if (s == "data_race") return rl::test_result_data_race;
  if (s == "deadlock") return rl::test_result_deadlock;
  if (s == "assert") return rl::test_result_user_assert_failed;
  std::fprintf(stderr, "unknown --expect=%s\n", s.c_str());
  std::exit(2);
}

template <typename Test>
int Check(const char* name, rl::test_result_e expect, long iterations, rl::scheduler_type_e search,
          unsigned bound) {
  rl::test_params p;
  p.iteration_count = static_cast<rl::iteration_t>(iterations);
  p.search_type = search;
  p.context_bound = bound;  // preemptions per execution the bound search explores exhaustively
  p.execution_depth_limit = 4000;
  p.output_history = expect == rl::test_result_success;  // a real failure prints its interleaving
  const bool ok = rl::simulate<Test>(p);
  std::cout << "model " << name << " (" << rl::format(search)
            << (search == rl::fair_context_bound_scheduler_type ? ", bound " + std::to_string(bound) : "")
            << "): " << (ok ? "no failure" : "FAILURE")
            << " (" << rl::test_result_str(p.test_result) << ") after "
            << static_cast<long>(p.stop_iteration) << " iterations; expected "
            << rl::test_result_str(expect) << "; mutation " << RP_CHANNEL_MUTATION << "\n";
  if (p.test_result != expect) {
    std::cout << "model " << name << ": UNEXPECTED verdict\n";
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s fifo|wait_writable|cancel [--expect=R] [--iterations=N] [--search=random|bound] "
                 "[--bound=K]\n",
                 argv[0]);
    return 2;
  }
  const std::string scenario = argv[1];
  rl::test_result_e expect = rl::test_result_success;
  long iterations = 100000;
  rl::scheduler_type_e search = rl::random_scheduler_type;
  unsigned bound = 2;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--expect=", 0) == 0) {
      expect = ParseExpect(a.substr(9));
    } else if (a.rfind("--iterations=", 0) == 0) {
      iterations = std::atol(a.c_str() + 13);
    } else if (a == "--search=bound") {
      search = rl::fair_context_bound_scheduler_type;
    } else if (a.rfind("--bound=", 0) == 0) {
      bound = static_cast<unsigned>(std::atoi(a.c_str() + 8));
    } else if (a == "--search=random") {
      search = rl::random_scheduler_type;
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (scenario == "fifo") return Check<Fifo>("fifo", expect, iterations, search, bound);
  if (scenario == "wait_writable") return Check<WaitWritable>("wait_writable", expect, iterations, search, bound);
  if (scenario == "cancel") return Check<Cancel>("cancel", expect, iterations, search, bound);
  std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
  return 2;
}
