// ringpipe: a runtime emulator of hybrid-parallel deep-learning training.
// This file only hands argv to the dispatcher (apps/dispatch.cc, apps/subcommands.h).
#include <string>
#include <vector>

#include "apps/files.h"
#include "apps/subcommands.h"
#include "runtime/heap.h"

int main(int argc, char** argv) {
  rp::apps::InstallCleanupHandlers();  // an interrupted run leaves no temporary file
  // One job per process: freed heap stays resident for reuse (a run's devices populate their
  // first step's memory in bulk; runtime/heap.h). Peak RSS is unchanged.
  rp::KeepFreedHeapMemory();
  return rp::apps::RunMain(std::vector<std::string>(argv, argv + argc));
}
