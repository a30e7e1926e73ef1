// Helpers shared by the two halves of apps/files.h's OutputFiles: files.cc (declaring and checking
// outputs, reading inputs) and files_commit.cc (writing and publishing them). Not for other users.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

#include "absl/status/status.h"

namespace rp::apps::files_internal {

// strerror's text of `err`.
std::string Errno(int err);
// InvalidArgument "--FLAG: 'PATH': WHY" (the path made one printable line).
absl::Status Bad(const std::string& flag, const std::string& path, const std::string& why);
// What a file of mode `mode` is, for errors: "a directory", "a FIFO", ...
const char* KindOf(mode_t mode);
// The mkostemp template of `target`'s temporary file: beside it, with at most 200 bytes of its name
// (the temporary name must fit where the target's 255 do).
std::string TempTemplate(const std::string& target);
// `path` without trailing slashes ("out/" names the directory "out"; "/" stays).
std::string WithoutTrailingSlashes(std::string path);

// A replaced file's old contents stay at its temporary file's name plus this until the commit ends.
inline constexpr const char* kBackupSuffix = ".old";
// Longest path the system calls take (PATH_MAX, with its terminating NUL): a longer one fails with
// ENAMETOOLONG even where every name fits.
inline constexpr size_t kMaxPathBytes = 4095;

}  // namespace rp::apps::files_internal
