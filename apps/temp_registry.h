// The signal-safe registry of the temporary files and directories an output commit holds
// (apps/files.h): what the SIGINT / SIGTERM / SIGHUP handler InstallCleanupHandlers installs removes
// before the process dies of the signal. Internal to apps/files.cc (and its test hooks,
// internal::RegisterTempFile / RegisterTempDir in apps/files.h).
//
// Thread safety: registration from one thread (the one committing); the handler reads the slots
// lock-free (each slot's state is an atomic published with release, read with acquire).
#pragma once

#include <signal.h>

#include <string>

namespace rp::apps {

// Registers `path` (a file, or a directory the handler removes once the files in it are gone) and
// returns its slot; -1 if the registry is full or the path too long (it is then only removed by the
// ordinary error paths).
int RegisterTemp(const std::string& path, bool is_dir = false);
// Frees a slot RegisterTemp returned (-1: nothing).
void UnregisterTemp(int slot);

// Blocks SIGINT, SIGTERM and SIGHUP while it lives: the renames of a commit and their undoing are not
// interrupted half way; a signal that comes meanwhile is delivered at the end, when there is no backup
// left to lose and the handler removes what is left.
class BlockCleanupSignals {
 public:
  BlockCleanupSignals() {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, sig);
    ::pthread_sigmask(SIG_BLOCK, &set, &old_);
  }
  ~BlockCleanupSignals() { ::pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  BlockCleanupSignals(const BlockCleanupSignals&) = delete;
  BlockCleanupSignals& operator=(const BlockCleanupSignals&) = delete;

 private:
  sigset_t old_;
};

}  // namespace rp::apps
