#include "apps/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "apps/files_internal.h"
#include "apps/flags.h"
#include "apps/temp_registry.h"
#include "runtime/status_macros.h"

namespace rp::apps {
namespace files_internal {

namespace fs = std::filesystem;

std::string Errno(int err) { return std::strerror(err); }

absl::Status Bad(const std::string& flag, const std::string& path, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", OneLine(path), "': ", why));
}

const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

std::string TempTemplate(const std::string& target) {
  const fs::path p(target);
  const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  return (dir / absl::StrCat(".", p.filename().string().substr(0, 200), ".ringpipe-XXXXXX")).string();
}

std::string WithoutTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

}  // namespace files_internal

using files_internal::Bad;
using files_internal::Errno;
using files_internal::kBackupSuffix;
using files_internal::KindOf;
using files_internal::kMaxPathBytes;
using files_internal::TempTemplate;
using files_internal::WithoutTrailingSlashes;

namespace {

namespace fs = std::filesystem;

// The identity of a path for "is this the same file": device and inode when it exists, else the
// canonical path of its directory plus its name.
std::string Identity(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) return absl::StrCat("inode:", st.st_dev, ":", st.st_ino);
  std::error_code ec;
  const fs::path p(path);
  fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  const fs::path canon = fs::weakly_canonical(dir, ec);
  return absl::StrCat("path:", (ec ? dir : canon).string(), "/", p.filename().string());
}

// The identity of standard input when it is a regular file (`--config=- < c.json`), else "": an output
// must not replace the file an input `-` reads.
std::string StdinIdentity() {
  struct stat st;
  if (::fstat(STDIN_FILENO, &st) != 0 || !S_ISREG(st.st_mode)) return "";
  return absl::StrCat("inode:", st.st_dev, ":", st.st_ino);
}

// The nearest existing ancestor of `dir` (for an output directory created at commit time), after
// checking what commit will create on the way to it: each missing name fits the file system (255
// bytes), and none is a dangling symbolic link (lstat finds it, stat does not; creating it would fail
// with EEXIST after the work).
absl::StatusOr<fs::path> ExistingAncestor(const std::string& flag, const std::string& path, fs::path dir) {
  while (!dir.empty()) {
    struct stat st;
    if (::stat(dir.c_str(), &st) == 0) return dir;
    if (::lstat(dir.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
      return Bad(flag, path,
                 absl::StrCat("'", OneLine(dir.string()), "' is a symbolic link to nothing (dangling, or a loop)"));
    }
    const std::string name = dir.filename().string();
    if (name.size() > 255) {
      return Bad(flag, path, absl::StrCat("directory name longer than 255 bytes ('", OneLine(name.substr(0, 40)),
                                          "...')"));
    }
    fs::path parent = dir.parent_path();  // "a/b/" -> "a/b" (an empty name), "a/b" -> "a"
    if (parent == dir) break;
    dir = std::move(parent);
  }
  return fs::path(".");
}

absl::Status CheckWritableDir(const std::string& flag, const std::string& path, const fs::path& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    return Bad(flag, path, absl::StrCat("directory '", OneLine(dir.string()), "': ", Errno(errno)));
  }
  if (!S_ISDIR(st.st_mode)) return Bad(flag, path, absl::StrCat("'", OneLine(dir.string()), "' is not a directory"));
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return Bad(flag, path, absl::StrCat("directory '", OneLine(dir.string()), "': ", Errno(errno)));
  }
  // access() is not proof: root passes it everywhere, and /proc, /sys or a read-only mount then
  // refuse the file only at the commit, after the work (exit 1). Creating a file proves it; the
  // signals wait until it is removed, so none is left behind.
  std::string probe = (dir / ".ringpipe-probe-XXXXXX").string();
  BlockCleanupSignals blocked;
  const int fd = ::mkostemp(probe.data(), O_CLOEXEC);  // O_CREAT | O_EXCL: never through a symlink
  if (fd < 0) {
    return Bad(flag, path, absl::StrCat("directory '", OneLine(dir.string()), "': cannot create a file there: ",
                                        Errno(errno)));
  }
  ::close(fd);
  ::unlink(probe.c_str());
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckInputFile(const std::string& flag, const std::string& path) {
  if (path == "-") return absl::OkStatus();
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, ": empty path"));
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Bad(flag, path, absl::StrCat("cannot read: ", Errno(errno)));
  if (!S_ISREG(st.st_mode)) return Bad(flag, path, absl::StrCat("is ", KindOf(st.st_mode), ", not a regular file"));
  return absl::OkStatus();
}

absl::Status OutputFiles::Declare(const std::string& flag, const std::string& path, bool is_dir,
                                  std::vector<std::string> entries) {
  if (path.empty()) return absl::OkStatus();
  if (Find(flag) != nullptr) return absl::InternalError(absl::StrCat("output --", flag, " declared twice"));
  outputs_.push_back({flag, path, is_dir, std::move(entries), {}});
  return absl::OkStatus();
}

OutputFiles::Output* OutputFiles::Find(const std::string& flag) {
  for (Output& o : outputs_) {
    if (o.flag == flag) return &o;
  }
  return nullptr;
}

namespace {
// A file output's path and its temporary file's fit PATH_MAX; else the run would go ahead and its
// commit fail (exit 1): creating the temporary file, or renaming it into place, with ENAMETOOLONG.
absl::Status CheckPathLength(const std::string& flag, const std::string& path) {
  // The longest is the name that keeps the old contents until the commit ends: the temporary file's
  // and kBackupSuffix.
  const size_t temp = TempTemplate(path).size() + std::strlen(kBackupSuffix);
  if (std::max(path.size(), temp) <= kMaxPathBytes) return absl::OkStatus();
  return Bad(flag, path,
             absl::StrCat("path too long: ", path.size(), " bytes, ", temp,
                          " for its temporary files beside it; at most ", kMaxPathBytes));
}

// A file output's checks (CheckAll): `shown` is how errors name it, `ids` the identities of the
// outputs checked before it (this one's is added).
absl::Status CheckFileTarget(const std::string& flag, const std::string& path,
                             const std::vector<std::pair<std::string, std::string>>& inputs,
                             std::vector<std::pair<std::string, std::string>>& ids) {
  const fs::path p(path);
  if (p.filename().empty() || p.filename() == "." || p.filename() == "..") {
    return Bad(flag, path, "names a directory, not a file");
  }
  if (p.filename().string().size() > 255) return Bad(flag, path, "file name longer than 255 bytes");
  RP_RETURN_IF_ERROR(CheckPathLength(flag, path));
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) {
      return Bad(flag, path, absl::StrCat("exists and is ", KindOf(st.st_mode), " (only a regular file is replaced)"));
    }
    if (::access(path.c_str(), W_OK) != 0) {
      return Bad(flag, path, absl::StrCat("exists and is not writable: ", Errno(errno)));
    }
  }
  RP_RETURN_IF_ERROR(CheckWritableDir(flag, path, p.parent_path().empty() ? fs::path(".") : p.parent_path()));
  const std::string id = Identity(path);
  for (const auto& [in_flag, in_path] : inputs) {
    if (in_path == "-") {
      if (const std::string in = StdinIdentity(); !in.empty() && in == id) {
        return Bad(flag, path, absl::StrCat("is also the input --", in_flag, " (read from standard input)"));
      }
    } else if (!in_path.empty() && Identity(in_path) == id) {
      return Bad(flag, path, absl::StrCat("is also the input --", in_flag));
    }
  }
  for (const auto& [out_flag, out_id] : ids) {
    if (out_id == id) return Bad(flag, path, absl::StrCat("is also the output --", out_flag));
  }
  ids.emplace_back(flag, id);
  return absl::OkStatus();
}
}  // namespace

absl::Status OutputFiles::CheckAll(const std::vector<std::pair<std::string, std::string>>& inputs) const {
  std::vector<std::pair<std::string, std::string>> ids;  // (flag, identity) of the files checked
  for (const Output& o : outputs_) {
    RP_RETURN_IF_ERROR(CheckGrammar(absl::StrCat("--", o.flag), Grammar::kString, o.path));
    if (o.path == "-") {
      return Bad(o.flag, o.path, "standard output is not an output file here; give a path");
    }
    const fs::path p(o.path);
    struct stat st;
    if (!o.is_dir) {
      RP_RETURN_IF_ERROR(CheckFileTarget(o.flag, o.path, inputs, ids));
      continue;
    }
    if (::stat(o.path.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode)) {
        return Bad(o.flag, o.path,
                   S_ISREG(st.st_mode) ? std::string("exists and is a file, not a directory")
                                       : absl::StrCat("exists and is ", KindOf(st.st_mode)));
      }
      RP_RETURN_IF_ERROR(CheckWritableDir(o.flag, o.path, p));
      for (const std::string& name : o.entries) {
        RP_RETURN_IF_ERROR(CheckFileTarget(o.flag, (p / name).string(), inputs, ids));
      }
    } else {
      RP_ASSIGN_OR_RETURN(const fs::path ancestor, ExistingAncestor(o.flag, o.path, p));
      RP_RETURN_IF_ERROR(CheckWritableDir(o.flag, o.path, ancestor));
      for (const std::string& name : o.entries) RP_RETURN_IF_ERROR(CheckPathLength(o.flag, (p / name).string()));
    }
  }
  return absl::OkStatus();
}

void OutputFiles::Set(const std::string& flag, std::string contents) {
  // Emplaced: a braced list's elements are const, so `files = {{path, std::move(contents)}}` copied the
  // contents once more (a 722 MB chart held twice).
  if (Output* o = Find(flag); o != nullptr && !o->is_dir) {
    o->files.clear();
    o->files.emplace_back(o->path, OutputContents{std::move(contents), nullptr});
  }
}

void OutputFiles::SetStreamed(const std::string& flag, ContentWriter writer) {
  if (Output* o = Find(flag); o != nullptr && !o->is_dir) {
    o->files.clear();
    o->files.emplace_back(o->path, OutputContents{"", std::move(writer)});
  }
}

void OutputFiles::SetInDir(const std::string& flag, const std::string& name, std::string contents) {
  if (Output* o = Find(flag); o != nullptr && o->is_dir) {
    o->files.emplace_back((fs::path(o->path) / name).string(), OutputContents{std::move(contents), nullptr});
  }
}

}  // namespace rp::apps
