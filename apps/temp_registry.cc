#include "apps/temp_registry.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <csignal>
#include <cstddef>
#include <cstring>

#include "apps/files.h"

namespace rp::apps {
namespace {

constexpr size_t kMaxTempFiles = 64;
constexpr size_t kMaxTempPath = 4096;
constexpr int kSlotFree = 0, kSlotFile = 1, kSlotDir = 2;
struct TempSlot {
  std::atomic<int> ready{kSlotFree};  // kSlotFile / kSlotDir: `path` names one to remove on a signal
  char path[kMaxTempPath] = {};
};
std::array<TempSlot, kMaxTempFiles> g_temps;

extern "C" void CleanupAndDie(int sig) {
  for (TempSlot& t : g_temps) {
    if (t.ready.load(std::memory_order_acquire) == kSlotFile) ::unlink(t.path);  // async-signal-safe
  }
  // Directories (a staging directory, the ancestors a commit created) in passes: a parent empties once
  // its children are gone.
  for (size_t pass = 0; pass < kMaxTempFiles; ++pass) {
    bool removed = false;
    for (TempSlot& t : g_temps) {
      if (t.ready.load(std::memory_order_acquire) == kSlotDir && ::rmdir(t.path) == 0) removed = true;
    }
    if (!removed) break;
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace

int RegisterTemp(const std::string& path, bool is_dir) {
  if (path.size() + 1 > kMaxTempPath) return -1;
  for (size_t i = 0; i < g_temps.size(); ++i) {
    if (g_temps[i].ready.load(std::memory_order_relaxed) != kSlotFree) continue;
    std::memcpy(g_temps[i].path, path.c_str(), path.size() + 1);
    g_temps[i].ready.store(is_dir ? kSlotDir : kSlotFile, std::memory_order_release);  // pairs with the handler's acquire
    return static_cast<int>(i);
  }
  return -1;
}

void UnregisterTemp(int slot) {
  if (slot >= 0) g_temps[static_cast<size_t>(slot)].ready.store(kSlotFree, std::memory_order_release);
}

namespace internal {
void RegisterTempFile(const std::string& path) { RegisterTemp(path); }
void RegisterTempDir(const std::string& path) { RegisterTemp(path, /*is_dir=*/true); }
}  // namespace internal

void InstallCleanupHandlers() {
  struct sigaction sa = {};
  sa.sa_handler = CleanupAndDie;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
  // A write past the file-size limit (`ulimit -f`) fails with EFBIG, an error the commit reports and
  // undoes, instead of SIGXFSZ killing the process half way through, its temporary files left behind.
  std::signal(SIGXFSZ, SIG_IGN);
}

}  // namespace rp::apps
