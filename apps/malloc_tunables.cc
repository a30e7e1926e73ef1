#include "apps/malloc_tunables.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "runtime/thread.h"

namespace rp::apps {
namespace {

constexpr const char* kMarker = "RINGPIPE_MALLOC_TUNED";

}  // namespace

void ApplyMallocTunables(char** argv) {
  if (kSanitizerBuild || std::getenv("GLIBC_TUNABLES") != nullptr || std::getenv(kMarker) != nullptr) return;
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
