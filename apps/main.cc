// ringpipe: a runtime emulator of hybrid-parallel deep-learning training.
// This file sets up the process (malloc tunables, cleanup handlers, heap retention) and hands argv
// to the dispatcher (apps/dispatch.cc, apps/subcommands.h).
#include <string>
#include <vector>

#include "apps/files.h"
#include "apps/malloc_tunables.h"
#include "apps/subcommands.h"
#include "runtime/heap.h"

int main(int argc, char** argv) {
  // glibc's heap on transparent huge pages: may re-execute this binary once (apps/malloc_tunables.h).
  rp::apps::ApplyMallocTunables(argv);
  rp::apps::InstallCleanupHandlers();  // an interrupted run leaves no temporary file
  // One job per process: freed heap stays resident for reuse (a run's devices populate their
  // first step's memory in bulk; runtime/heap.h). Peak RSS is unchanged.
  rp::KeepFreedHeapMemory();
  return rp::apps::RunMain(std::vector<std::string>(argv, argv + argc));
}
