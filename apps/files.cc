#include "apps/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "apps/flags.h"
#include "apps/temp_registry.h"
#include "runtime/status_macros.h"

namespace rp::apps {
namespace {

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
  return absl::OkStatus();
}

// The mkostemp template of `target`'s temporary file: beside it, with at most 200 bytes of its name
// (the temporary name must fit where the target's 255 do).
std::string TempTemplate(const std::string& target) {
  const fs::path p(target);
  const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  return (dir / absl::StrCat(".", p.filename().string().substr(0, 200), ".ringpipe-XXXXXX")).string();
}

// A replaced file's old contents stay at its temporary file's name plus this until the commit ends.
constexpr const char* kBackupSuffix = ".old";

// Longest path the system calls take (PATH_MAX, with its terminating NUL): a longer one fails with
// ENAMETOOLONG even where every name fits.
constexpr size_t kMaxPathBytes = 4095;

mode_t Umask() {
  static const mode_t kUmask = [] {
    const mode_t m = ::umask(0);
    ::umask(m);
    return m;
  }();
  return kUmask;
}

// Writes `contents` to `fd` (a new file at `path`), gives it the mode of a file created the usual way,
// fsyncs and closes it; on failure closes it, removes `path` and unregisters `slot` (set to -1).
// Errors name `target`, the output the file is for.
absl::Status WriteAndClose(const std::string& flag, const std::string& target, int fd, const std::string& path,
                           const OutputContents& contents, int& slot) {
  auto fail_with = [&](const std::string& why, bool close_fd) {
    if (close_fd) ::close(fd);
    ::unlink(path.c_str());
    UnregisterTemp(slot);
    slot = -1;
    return Bad(flag, target, why);
  };
  auto fail = [&](const char* what, bool close_fd) { return fail_with(absl::StrCat(what, ": ", Errno(errno)), close_fd); };
  int write_errno = 0;  // the write(2) that failed, if one did
  auto write_all = [&](std::string_view piece) {
    size_t done = 0;
    while (done < piece.size()) {
      const ssize_t n = ::write(fd, piece.data() + done, piece.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        write_errno = n < 0 ? errno : EIO;
        return absl::DataLossError("cannot write");
      }
      done += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  };
  const absl::Status written = contents.writer ? contents.writer(write_all) : write_all(contents.text);
  if (write_errno != 0) {
    errno = write_errno;
    return fail("cannot write", true);
  }
  if (!written.ok()) return fail_with(std::string(written.message()), true);
  if (::fchmod(fd, 0666 & ~Umask()) != 0) return fail("cannot set permissions", true);
  if (::fsync(fd) != 0) return fail("cannot write (fsync)", true);
  if (::close(fd) != 0) return fail("cannot write (close)", false);
  return absl::OkStatus();
}

// Writes `contents` to a new temporary file beside `target`; returns its path (registered in `slot`).
absl::StatusOr<std::string> WriteTemp(const std::string& flag, const std::string& target,
                                      const OutputContents& contents, int& slot) {
  std::string tmpl = TempTemplate(target);
  const int fd = ::mkostemp(tmpl.data(), O_CLOEXEC);  // O_CREAT | O_EXCL: never through a symlink
  if (fd < 0) return Bad(flag, target, absl::StrCat("cannot create a temporary file: ", Errno(errno)));
  slot = RegisterTemp(tmpl);
  RP_RETURN_IF_ERROR(WriteAndClose(flag, target, fd, tmpl, contents, slot));
  return tmpl;
}

// Writes `contents` to the new file `path` inside a staging directory (registered in `slot`).
absl::Status WriteNew(const std::string& flag, const std::string& target, const std::string& path,
                      const OutputContents& contents, int& slot) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return Bad(flag, target, absl::StrCat("cannot create '", OneLine(path), "': ", Errno(errno)));
  slot = RegisterTemp(path);
  return WriteAndClose(flag, target, fd, path, contents, slot);
}

void SyncDir(const fs::path& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// `path` without trailing slashes ("out/" names the directory "out"; "/" stays).
std::string WithoutTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
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

absl::Status OutputFiles::Commit() {
  // What the commit publishes, in declaration order: a file renamed over its target (the target's old
  // contents kept under `backup` until every step succeeded), or a directory output that did not
  // exist, built whole in a staging directory beside it and renamed into place in one step.
  struct Step {
    const Output* output;
    std::string target, temp;  // temp: the temporary file, or the staging directory
    int slot = -1;
    bool is_dir = false;
    std::string backup;        // "" when the target did not exist
    bool done = false;         // renamed into place (and not undone)
  };
  std::vector<Step> steps;
  std::vector<std::pair<std::string, int>> staged;   // files inside staging directories (path, slot)
  std::vector<std::pair<std::string, int>> created;  // directories made for a new output, outermost first
  // After a failure: removes what the commit made and did not publish (nothing of it stays).
  auto discard = [&] {
    for (Step& s : steps) {
      if (!s.done && !s.is_dir) ::unlink(s.temp.c_str());
      if (!s.is_dir) UnregisterTemp(s.slot);
    }
    for (const auto& [path, slot] : staged) {
      ::unlink(path.c_str());
      UnregisterTemp(slot);
    }
    for (Step& s : steps) {
      if (s.is_dir && !s.done) ::rmdir(s.temp.c_str());
      if (s.is_dir) UnregisterTemp(s.slot);
    }
    for (auto it = created.rbegin(); it != created.rend(); ++it) {
      ::rmdir(it->first.c_str());
      UnregisterTemp(it->second);
    }
  };
  auto fail = [&](const absl::Status& st) {
    discard();
    return st;
  };

  // 1. Every file written and fsynced: beside its target, or into a staging directory.
  for (const Output& o : outputs_) {
    if (o.files.empty()) continue;
    std::string dir = o.is_dir ? WithoutTrailingSlashes(o.path) : "";
    const fs::path dir_path(dir);
    const std::string dir_name = dir_path.filename().string();
    struct stat st;
    const bool new_dir = o.is_dir && ::stat(dir.c_str(), &st) != 0;
    if (o.is_dir && !new_dir && !S_ISDIR(st.st_mode)) {
      return fail(Bad(o.flag, o.path, absl::StrCat("became ", KindOf(st.st_mode), " during the run")));
    }
    if (!new_dir || dir_name.empty() || dir_name == "." || dir_name == "..") {
      if (new_dir) {  // "a/b/.." and the like: no name to stage under; made first, then filled in place
        std::error_code ec;
        fs::create_directories(dir_path, ec);
        if (ec) return fail(Bad(o.flag, o.path, absl::StrCat("cannot create the directory: ", ec.message())));
      }
      for (const auto& [target, contents] : o.files) {
        int slot = -1;
        auto temp = WriteTemp(o.flag, target, contents, slot);
        if (!temp.ok()) return fail(temp.status());
        steps.push_back({&o, target, *temp, slot, false, "", false});
      }
      continue;
    }
    // A new directory: its missing ancestors first (removed again on failure), then the staging
    // directory beside it, which becomes it.
    const fs::path parent = dir_path.parent_path();
    std::vector<fs::path> missing;
    for (fs::path a = parent; !a.empty() && ::stat(a.c_str(), &st) != 0; a = a.parent_path()) {
      missing.push_back(a);
      if (a.parent_path() == a) break;
    }
    for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
      if (::mkdir(it->c_str(), 0777) == 0) {
        created.emplace_back(it->string(), RegisterTemp(it->string(), /*is_dir=*/true));
      } else if (errno != EEXIST) {
        return fail(Bad(o.flag, o.path,
                        absl::StrCat("cannot create the directory '", OneLine(it->string()), "': ", Errno(errno))));
      }
    }
    std::string staging =
        ((parent.empty() ? fs::path(".") : parent) / absl::StrCat(".", dir_name.substr(0, 200), ".ringpipe-XXXXXX"))
            .string();
    if (::mkdtemp(staging.data()) == nullptr) {
      return fail(Bad(o.flag, o.path, absl::StrCat("cannot create a temporary directory: ", Errno(errno))));
    }
    steps.push_back({&o, dir, staging, RegisterTemp(staging, /*is_dir=*/true), true, "", false});
    if (::chmod(staging.c_str(), 0777 & ~Umask()) != 0) {  // mkdtemp's 0700: the mode mkdir would give
      return fail(Bad(o.flag, o.path, absl::StrCat("cannot set permissions: ", Errno(errno))));
    }
    for (const auto& [target, contents] : o.files) {
      const std::string path = (fs::path(staging) / fs::path(target).filename()).string();
      int slot = -1;
      absl::Status st_write = WriteNew(o.flag, target, path, contents, slot);
      if (!st_write.ok()) return fail(st_write);
      staged.emplace_back(path, slot);
    }
    SyncDir(staging);
  }

  // 2. The renames, undone in reverse order if one fails: every target as it was, or every one new.
  BlockCleanupSignals block;
  auto undo = [&] {
    for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
      if (!it->done) continue;
      if (it->is_dir) {
        ::rename(it->target.c_str(), it->temp.c_str());  // back to the staging name; discard removes it
      } else if (!it->backup.empty()) {
        ::rename(it->backup.c_str(), it->target.c_str());
        it->backup.clear();
      } else {
        ::unlink(it->target.c_str());
      }
      it->done = false;
    }
    for (Step& s : steps) {
      if (!s.backup.empty()) ::unlink(s.backup.c_str());  // a backup whose rename did not happen
    }
  };
  for (Step& s : steps) {
    struct stat st;
    const bool exists = ::lstat(s.target.c_str(), &st) == 0;
    if (s.is_dir) {
      if (exists) {  // a directory output that appeared while the work ran: not merged, not replaced
        undo();
        return fail(Bad(s.output->flag, s.output->path,
                        absl::StrCat("appeared during the run (", KindOf(st.st_mode), "); nothing was written")));
      }
    } else if (exists && !S_ISREG(st.st_mode)) {
      undo();
      return fail(Bad(s.output->flag, s.target, absl::StrCat("became ", KindOf(st.st_mode), " during the run")));
    } else if (exists) {
      // The old contents stay reachable under a second name: a hard link (the target never goes
      // missing), or where the file system has none, the target itself renamed aside.
      s.backup = s.temp + kBackupSuffix;
      if (::link(s.target.c_str(), s.backup.c_str()) != 0 && ::rename(s.target.c_str(), s.backup.c_str()) != 0) {
        const int err = errno;
        s.backup.clear();
        undo();
        return fail(Bad(s.output->flag, s.target, absl::StrCat("cannot keep the old file until the end: ", Errno(err))));
      }
    }
    if (::rename(s.temp.c_str(), s.target.c_str()) != 0) {
      const int err = errno;
      if (!s.backup.empty() && ::access(s.target.c_str(), F_OK) != 0) ::rename(s.backup.c_str(), s.target.c_str());
      undo();
      return fail(Bad(s.output->flag, s.is_dir ? s.output->path : s.target,
                      absl::StrCat("cannot rename into place: ", Errno(err))));
    }
    s.done = true;
  }

  // 3. Done: the old contents go, nothing is left registered, the directories are synced.
  for (Step& s : steps) {
    if (!s.backup.empty()) ::unlink(s.backup.c_str());
    UnregisterTemp(s.slot);
  }
  for (const auto& [path, slot] : staged) UnregisterTemp(slot);
  for (const auto& [path, slot] : created) UnregisterTemp(slot);
  for (const Step& s : steps) {
    const fs::path parent = fs::path(s.target).parent_path();
    SyncDir(parent);
  }
  for (auto it = created.rbegin(); it != created.rend(); ++it) SyncDir(fs::path(it->first).parent_path());
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& contents) {
  OutputFiles out;
  RP_RETURN_IF_ERROR(out.Declare("out", path));
  RP_RETURN_IF_ERROR(out.CheckAll({}));
  out.Set("out", contents);
  return out.Commit();
}

}  // namespace rp::apps
