// OutputFiles::Commit (apps/files.h): every declared output written to a temporary file or a
// staging directory, then renamed into place, all or none.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "apps/files.h"
#include "apps/files_internal.h"
#include "apps/flags.h"
#include "apps/temp_registry.h"
#include "runtime/status_macros.h"

namespace rp::apps {

using files_internal::Bad;
using files_internal::Errno;
using files_internal::kBackupSuffix;
using files_internal::KindOf;
using files_internal::TempTemplate;
using files_internal::WithoutTrailingSlashes;

namespace {

namespace fs = std::filesystem;

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

}  // namespace

// What a commit publishes, in declaration order: a file renamed over its target (the target's old
// contents kept under `backup` until every step succeeded), or a directory output that did not
// exist, built whole in a staging directory beside it and renamed into place in one step.
class OutputFiles::Committer {
 public:
  absl::Status Write(const Output& o);
  absl::Status Publish();
  void Finish();
  void Discard();

 private:
  struct Step {
    const Output* output;
    std::string target, temp;  // temp: the temporary file, or the staging directory
    int slot = -1;
    bool is_dir = false;
    std::string backup;        // "" when the target did not exist
    bool done = false;         // renamed into place (and not undone)
  };
  void Undo();
  std::vector<Step> steps;
  std::vector<std::pair<std::string, int>> staged;   // files inside staging directories (path, slot)
  std::vector<std::pair<std::string, int>> created;  // directories made for a new output, outermost first
};

// After a failure: removes what the commit made and did not publish (nothing of it stays).
void OutputFiles::Committer::Discard() {
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
}

// Step 1 for output `o`: every file written and fsynced, beside its target or into a staging
// directory (recorded as it goes, so Discard removes what a failure left).
absl::Status OutputFiles::Committer::Write(const Output& o) {
  std::string dir = o.is_dir ? WithoutTrailingSlashes(o.path) : "";
  const fs::path dir_path(dir);
  const std::string dir_name = dir_path.filename().string();
  struct stat st;
  const bool new_dir = o.is_dir && ::stat(dir.c_str(), &st) != 0;
  if (o.is_dir && !new_dir && !S_ISDIR(st.st_mode)) {
    return Bad(o.flag, o.path, absl::StrCat("became ", KindOf(st.st_mode), " during the run"));
  }
  if (!new_dir || dir_name.empty() || dir_name == "." || dir_name == "..") {
    if (new_dir) {  // "a/b/.." and the like: no name to stage under; made first, then filled in place
      std::error_code ec;
      fs::create_directories(dir_path, ec);
      if (ec) return Bad(o.flag, o.path, absl::StrCat("cannot create the directory: ", ec.message()));
    }
    for (const auto& [target, contents] : o.files) {
      int slot = -1;
      auto temp = WriteTemp(o.flag, target, contents, slot);
      if (!temp.ok()) return temp.status();
      steps.push_back({&o, target, *temp, slot, false, "", false});
    }
    return absl::OkStatus();
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
      return Bad(o.flag, o.path,
                 absl::StrCat("cannot create the directory '", OneLine(it->string()), "': ", Errno(errno)));
    }
  }
  std::string staging =
      ((parent.empty() ? fs::path(".") : parent) / absl::StrCat(".", dir_name.substr(0, 200), ".ringpipe-XXXXXX"))
          .string();
  if (::mkdtemp(staging.data()) == nullptr) {
    return Bad(o.flag, o.path, absl::StrCat("cannot create a temporary directory: ", Errno(errno)));
  }
  steps.push_back({&o, dir, staging, RegisterTemp(staging, /*is_dir=*/true), true, "", false});
  if (::chmod(staging.c_str(), 0777 & ~Umask()) != 0) {  // mkdtemp's 0700: the mode mkdir would give
    return Bad(o.flag, o.path, absl::StrCat("cannot set permissions: ", Errno(errno)));
  }
  for (const auto& [target, contents] : o.files) {
    const std::string path = (fs::path(staging) / fs::path(target).filename()).string();
    int slot = -1;
    absl::Status st_write = WriteNew(o.flag, target, path, contents, slot);
    if (!st_write.ok()) return st_write;
    staged.emplace_back(path, slot);
  }
  SyncDir(staging);
  return absl::OkStatus();
}

// Puts back what Publish renamed, in reverse order: every target as it was.
void OutputFiles::Committer::Undo() {
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (!it->done) continue;
    if (it->is_dir) {
      ::rename(it->target.c_str(), it->temp.c_str());  // back to the staging name; Discard removes it
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
}

// Step 2: the renames, undone in reverse order if one fails: every target as it was, or every one
// new.
absl::Status OutputFiles::Committer::Publish() {
  for (Step& s : steps) {
    struct stat st;
    const bool exists = ::lstat(s.target.c_str(), &st) == 0;
    if (s.is_dir) {
      if (exists) {  // a directory output that appeared while the work ran: not merged, not replaced
        Undo();
        return Bad(s.output->flag, s.output->path,
                   absl::StrCat("appeared during the run (", KindOf(st.st_mode), "); nothing was written"));
      }
    } else if (exists && !S_ISREG(st.st_mode)) {
      Undo();
      return Bad(s.output->flag, s.target, absl::StrCat("became ", KindOf(st.st_mode), " during the run"));
    } else if (exists) {
      // The old contents stay reachable under a second name: a hard link (the target never goes
      // missing), or where the file system has none, the target itself renamed aside.
      s.backup = s.temp + kBackupSuffix;
      if (::link(s.target.c_str(), s.backup.c_str()) != 0 && ::rename(s.target.c_str(), s.backup.c_str()) != 0) {
        const int err = errno;
        s.backup.clear();
        Undo();
        return Bad(s.output->flag, s.target, absl::StrCat("cannot keep the old file until the end: ", Errno(err)));
      }
    }
    if (::rename(s.temp.c_str(), s.target.c_str()) != 0) {
      const int err = errno;
      if (!s.backup.empty() && ::access(s.target.c_str(), F_OK) != 0) ::rename(s.backup.c_str(), s.target.c_str());
      Undo();
      return Bad(s.output->flag, s.is_dir ? s.output->path : s.target,
                 absl::StrCat("cannot rename into place: ", Errno(err)));
    }
    s.done = true;
  }
  return absl::OkStatus();
}

// Step 3, done: the old contents go, nothing is left registered, the directories are synced.
void OutputFiles::Committer::Finish() {
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
}

absl::Status OutputFiles::Commit() {
  Committer c;
  auto fail = [&c](const absl::Status& st) {
    c.Discard();
    return st;
  };
  for (const Output& o : outputs_) {
    if (o.files.empty()) continue;
    if (absl::Status st = c.Write(o); !st.ok()) return fail(st);
  }
  BlockCleanupSignals block;  // through the renames and, on failure, the clean-up
  if (absl::Status st = c.Publish(); !st.ok()) return fail(st);
  c.Finish();
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
