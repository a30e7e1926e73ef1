#include "runtime/thread.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <cerrno>

#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace rp {
namespace {

struct StartArgs {
  std::function<void()> fn;
  SchedPolicy policy;
};

void* Trampoline(void* arg) {
  std::unique_ptr<StartArgs> start(static_cast<StartArgs*>(arg));
  if (start->policy == SchedPolicy::kBatch) {
    // On Linux this sets the calling thread's policy (pthread attributes accept only OTHER, FIFO
    // and RR). A refusal (e.g. a seccomp filter) leaves the inherited policy.
    const sched_param param{};  // priority 0, the only one SCHED_BATCH has
    (void)sched_setscheduler(0, SCHED_BATCH, &param);
  }
  start->fn();
  return nullptr;
}

}  // namespace

const char* CurrentSchedPolicyName() {
  switch (sched_getscheduler(0)) {
    case SCHED_OTHER: return "SCHED_OTHER";
    case SCHED_BATCH: return "SCHED_BATCH";
    case SCHED_IDLE: return "SCHED_IDLE";
    case SCHED_FIFO: return "SCHED_FIFO";
    case SCHED_RR: return "SCHED_RR";
    default: return "unknown";
  }
}

absl::StatusOr<Thread> Thread::Start(size_t stack_bytes, std::function<void()> fn,
                                     SchedPolicy policy) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t min_stack = static_cast<size_t>(PTHREAD_STACK_MIN);
  size_t stack = stack_bytes < min_stack ? min_stack : stack_bytes;
  stack = (stack + page - 1) / page * page;
  pthread_attr_t attr;
  if (int e = pthread_attr_init(&attr); e != 0) {
    return absl::ResourceExhaustedError(absl::StrCat("thread attributes: ", std::strerror(e)));
  }
  if (int e = pthread_attr_setstacksize(&attr, stack); e != 0) {
    pthread_attr_destroy(&attr);
    return absl::ResourceExhaustedError(absl::StrCat("thread stack of ", stack >> 10, " KiB: ", std::strerror(e)));
  }
  return Launch(&attr, stack, std::move(fn), policy);
}

absl::StatusOr<Thread> Thread::StartOn(std::span<std::byte> stack, std::function<void()> fn,
                                       SchedPolicy policy) {
  pthread_attr_t attr;
  if (int e = pthread_attr_init(&attr); e != 0) {
    return absl::ResourceExhaustedError(absl::StrCat("thread attributes: ", std::strerror(e)));
  }
  if (int e = pthread_attr_setstack(&attr, stack.data(), stack.size()); e != 0) {
    pthread_attr_destroy(&attr);
    return absl::InvalidArgumentError(absl::StrCat("thread stack of ", stack.size(), " bytes: ",
                                                   std::strerror(e)));
  }
  return Launch(&attr, stack.size(), std::move(fn), policy);
}

absl::StatusOr<Thread> Thread::Launch(pthread_attr_t* attr, size_t stack, std::function<void()> fn,
                                      SchedPolicy policy) {
  auto arg = std::make_unique<StartArgs>(StartArgs{.fn = std::move(fn), .policy = policy});
  Thread t;
  const int e = pthread_create(&t.handle_, attr, &Trampoline, arg.get());
  pthread_attr_destroy(attr);
  if (e != 0) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot start a thread with a ", stack >> 10, " KiB stack: ", std::strerror(e),
        e == EAGAIN ? " (the system's thread limit: see ulimit -u and kernel.threads-max)" : ""));
  }
  arg.release();  // the thread owns it now
  t.started_ = true;
  return t;
}

absl::StatusOr<StackRegion> StackRegion::Map(size_t count, size_t stack_bytes) {
  StackRegion r;
  if (count == 0) return r;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t min_stack = static_cast<size_t>(PTHREAD_STACK_MIN);
  size_t stack = std::max(stack_bytes, min_stack);
  stack = (stack + page - 1) / page * page;
  const size_t stride = stack + page;
  if (count > std::numeric_limits<size_t>::max() / stride) {
    return absl::ResourceExhaustedError(absl::StrCat(count, " thread stacks of ", stack >> 10,
                                                     " KiB overflow the address space"));
  }
  void* base = mmap(nullptr, count * stride, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (base == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot map ", count, " thread stacks of ",
                                                     stack >> 10, " KiB: ", std::strerror(errno)));
  }
  r.base_ = static_cast<std::byte*>(base);
  r.count_ = count;
  r.stride_ = stride;
  r.guard_ = page;
  for (size_t i = 0; i < count; ++i) {
    if (mprotect(r.base_ + i * stride, page, PROT_NONE) != 0) {
      // Past the system's map count (each guard splits the mapping); the destructor unmaps.
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot place the guard page of thread stack ", i, " of ", count, ": ", std::strerror(errno),
          errno == ENOMEM ? " (see /proc/sys/vm/max_map_count)" : ""));
    }
  }
  return r;
}

std::span<std::byte> StackRegion::stack(size_t i) const {
  return {base_ + i * stride_ + guard_, stride_ - guard_};
}

StackRegion::StackRegion(StackRegion&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)),
      count_(std::exchange(other.count_, 0)),
      stride_(std::exchange(other.stride_, 0)),
      guard_(std::exchange(other.guard_, 0)) {}

StackRegion& StackRegion::operator=(StackRegion&& other) noexcept {
  if (this != &other) {
    Unmap();
    base_ = std::exchange(other.base_, nullptr);
    count_ = std::exchange(other.count_, 0);
    stride_ = std::exchange(other.stride_, 0);
    guard_ = std::exchange(other.guard_, 0);
  }
  return *this;
}

StackRegion::~StackRegion() { Unmap(); }

void StackRegion::Unmap() {
  if (base_ != nullptr) munmap(base_, count_ * stride_);
  base_ = nullptr;
  count_ = 0;
}

Thread::Thread(Thread&& other) noexcept
    : handle_(other.handle_), started_(std::exchange(other.started_, false)) {}

Thread& Thread::operator=(Thread&& other) noexcept {
  if (this != &other) {
    Join();
    handle_ = other.handle_;
    started_ = std::exchange(other.started_, false);
  }
  return *this;
}

Thread::~Thread() { Join(); }

void Thread::Join() {
  if (!started_) return;
  pthread_join(handle_, nullptr);
  started_ = false;
}

absl::StatusOr<int> ReserveFutexHash(int threads) {
  // <linux/prctl.h> of Debian 12 predates these (Linux 6.16 uapi values).
  constexpr int kPrFutexHash = 78, kSetSlots = 1, kGetSlots = 2;
  const long current = prctl(kPrFutexHash, kGetSlots, 0, 0, 0);
  if (current < 0) return absl::UnimplementedError("this kernel has no private futex hash (PR_FUTEX_HASH)");
  long want = 16;
  while (want < 4L * threads && want < (long{1} << 20)) want *= 2;
  if (current >= want) return static_cast<int>(current);
  if (prctl(kPrFutexHash, kSetSlots, want, 0, 0) != 0) {
    return absl::ResourceExhaustedError(absl::StrCat("PR_FUTEX_HASH_SET_SLOTS ", want, ": errno ", errno));
  }
  return static_cast<int>(prctl(kPrFutexHash, kGetSlots, 0, 0, 0));
}

bool Parker::Park(std::chrono::steady_clock::time_point deadline) {
  if (state_.fetch_sub(1, std::memory_order_acquire) == kNotified) return true;  // the token
  const bool bounded = deadline != std::chrono::steady_clock::time_point::max();
  timespec at{};
  if (bounded) {  // steady_clock is CLOCK_MONOTONIC, FUTEX_WAIT_BITSET's default clock
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch()).count();
    at.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
    at.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  }
  for (;;) {
    // Sleeps while the word is kParked (EAGAIN at once if an Unpark already changed it).
    ::syscall(SYS_futex, &state_, FUTEX_WAIT_BITSET_PRIVATE, kParked, bounded ? &at : nullptr, nullptr,
              FUTEX_BITSET_MATCH_ANY);
    int32_t notified = kNotified;
    if (state_.compare_exchange_strong(notified, kEmpty, std::memory_order_acquire)) return true;
    if (bounded && std::chrono::steady_clock::now() >= deadline) {
      return state_.exchange(kEmpty, std::memory_order_acquire) == kNotified;
    }
  }
}

void Parker::Unpark() {
  if (state_.exchange(kNotified, std::memory_order_release) == kParked) {
    ::syscall(SYS_futex, &state_, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
  }
}

void ForSlices(int64_t n, int threads, int64_t min_per_slice,
               const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int64_t want = threads > 0 ? threads
                                   : std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 4);
  const int64_t slices = std::clamp<int64_t>(n / std::max<int64_t>(min_per_slice, 1), 1, want);
  std::vector<std::thread> helpers;
  helpers.reserve(static_cast<size_t>(slices - 1));
  for (int64_t s = 1; s < slices; ++s) {
    const int64_t begin = n * s / slices, end = n * (s + 1) / slices;
    try {
      helpers.emplace_back(fn, begin, end);
    } catch (const std::system_error&) {
      fn(begin, end);
    }
  }
  fn(0, n / slices);
  for (std::thread& t : helpers) t.join();
}

}  // namespace rp
