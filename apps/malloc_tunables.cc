#include "apps/malloc_tunables.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "runtime/thread.h"

namespace rp::apps {
namespace {

constexpr const char* kMarker = "RINGPIPE_MALLOC_TUNED";

}  // namespace

bool RestoreProcessName() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return false;
  path[n] = '\0';
  std::string name(path);
  name = name.substr(name.rfind('/') + 1);
  if (const size_t deleted = name.find(" (deleted)"); deleted != std::string::npos) name.resize(deleted);
  if (name.empty()) return false;
  name.resize(std::min<size_t>(name.size(), 15));  // the kernel's limit (TASK_COMM_LEN - 1)
  return prctl(PR_SET_NAME, name.c_str(), 0, 0, 0) == 0;
}

void ApplyMallocTunables(char** argv) {
  if (kSanitizerBuild) return;
  if (std::getenv(kMarker) != nullptr) {
    // The image this process re-executed: exec of /proc/self/exe named it "exe" (ps, top, pgrep
    // and killall go by that name); it gets its file's name back.
    char comm[32] = {};
    if (prctl(PR_GET_NAME, comm, 0, 0, 0) == 0 && std::strcmp(comm, "exe") == 0) RestoreProcessName();
    return;
  }
  if (std::getenv("GLIBC_TUNABLES") != nullptr) return;
  if (setenv("GLIBC_TUNABLES", kRingpipeMallocTunables, 1) != 0 || setenv(kMarker, "1", 1) != 0) {
    unsetenv("GLIBC_TUNABLES");
    unsetenv(kMarker);
    return;
  }
  execv("/proc/self/exe", argv);
  // No /proc, or the image cannot be executed again: run untuned.
  unsetenv("GLIBC_TUNABLES");
  unsetenv(kMarker);
}

MallocTunables MallocTunablesInEffect() {
  const char* value = std::getenv("GLIBC_TUNABLES");
  if (value == nullptr) return {"", "none"};
  const char* marker = std::getenv(kMarker);
  const bool ours = marker != nullptr && std::strcmp(value, kRingpipeMallocTunables) == 0;
  return {value, ours ? "ringpipe" : "environment"};
}

bool HeapOnHugePages() {
  if (kSanitizerBuild) return false;
  const std::string value = MallocTunablesInEffect().value;
  if (value.find("glibc.malloc.hugetlb=1") == std::string::npos &&
      value.find("glibc.malloc.hugetlb=2") == std::string::npos) {
    return false;
  }
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  if (!std::getline(f, mode)) return false;  // no THP in this kernel
  return mode.find("[never]") == std::string::npos;
}

}  // namespace rp::apps
