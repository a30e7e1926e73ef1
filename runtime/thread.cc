#include "runtime/thread.h"

#include <limits.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace rp {
namespace {

void* Trampoline(void* arg) {
  std::unique_ptr<std::function<void()>> fn(static_cast<std::function<void()>*>(arg));
  (*fn)();
  return nullptr;
}

}  // namespace

absl::StatusOr<Thread> Thread::Start(size_t stack_bytes, std::function<void()> fn) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t min_stack = static_cast<size_t>(PTHREAD_STACK_MIN);
  size_t stack = stack_bytes < min_stack ? min_stack : stack_bytes;
  stack = (stack + page - 1) / page * page;
  pthread_attr_t attr;
  if (int e = pthread_attr_init(&attr); e != 0) {
    return absl::ResourceExhaustedError(absl::StrCat("thread attributes: ", std::strerror(e)));
  }
  int e = pthread_attr_setstacksize(&attr, stack);
  auto arg = std::make_unique<std::function<void()>>(std::move(fn));
  Thread t;
  if (e == 0) e = pthread_create(&t.handle_, &attr, &Trampoline, arg.get());
  pthread_attr_destroy(&attr);
  if (e != 0) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot start a thread with a ", stack >> 10, " KiB stack: ", std::strerror(e),
        e == EAGAIN ? " (the system's thread limit: see ulimit -u and kernel.threads-max)" : ""));
  }
  arg.release();  // the thread owns it now
  t.started_ = true;
  return t;
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

}  // namespace rp
