// Input and output files of the `ringpipe` binary: read safely, written atomically.
//
// Inputs (ReadInputFile): a regular file, or `-` for standard input; anything else (a FIFO, a device,
// a directory) is refused before it is read, so `--config=/dev/zero` or a FIFO never hangs or fills
// memory; at most `max_bytes` are read.
//
// Outputs (OutputFiles): every output of a command is declared before the work starts (Declare), and
// checked then (CheckAll): its directory exists and is writable, its name fits the file system (255
// bytes), an existing target is a writable regular file (not a symlink, a device or a directory), no
// output is also an input (an input `-` is standard input: the file it was redirected from) or another
// output — for a directory output, each file it will hold; a
// directory output that does not exist yet can be created (its missing names fit in 255 bytes, none is
// a dangling symbolic link, and the nearest existing ancestor is a writable directory).
//
// At the end Commit writes every output or none (a failure anywhere leaves every target as it was):
//   1. Each file's contents (given whole, or written by a ContentWriter now) go to a fresh temporary
//      file beside its target (created with O_EXCL: never through a symlink, never shared with a
//      concurrent run), fsynced. A directory output that
//      does not exist is built whole in a fresh staging directory beside it (`.NAME.ringpipe-XXXXXX`),
//      its missing ancestors created first. A directory that exists is filled file by file instead —
//      it may hold other files (`--out_dir=.`), which stay.
//   2. With SIGINT / SIGTERM / SIGHUP held back, each file is renamed over its target, whose old
//      contents stay under a second name (a hard link) until the end, and a new directory is renamed
//      into place in one step. If a rename fails (a target became a directory, the directory output
//      appeared meanwhile), the ones before are undone in reverse order: old contents back, new files
//      and the new directory gone.
//   3. On failure the temporary files, the staging directory and the ancestors the commit created are
//      removed; on success the old contents go and the directories are fsynced.
// Temporary files and directories are also removed, through a signal-safe registry, on SIGINT /
// SIGTERM / SIGHUP (InstallCleanupHandlers), which also makes a write past the file-size limit an
// error (EFBIG) rather than a death by SIGXFSZ. Errors carry the errno text.
//
// Thread safety: OutputFiles is single-threaded; the cleanup registry is written by the main thread
// and read by the signal handler (lock-free, async-signal-safe).
//
// Example:
//   OutputFiles out;
//   RP_RETURN_IF_ERROR(out.Declare("report_json", cfg.report_json));
//   RP_RETURN_IF_ERROR(out.CheckAll({{"config", cfg.config_file}}));  // before the run
//   ... run ...
//   out.Set("report_json", report.dump(2));  // or, not held whole: written at commit, in pieces
//   out.SetStreamed("trace", [&](TextSink sink) { return tracer.StreamChromeJson(sink); });
//   RP_RETURN_IF_ERROR(out.Commit());
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/text_sink.h"

namespace rp::apps {

// Reads the file at `path` (`-`: standard input). `flag` names it in errors ("--config: ..."):
// InvalidArgument when it cannot be opened, is not a regular file, or is larger than `max_bytes`.
absl::StatusOr<std::string> ReadInputFile(const std::string& flag, const std::string& path, size_t max_bytes);

// An input opened as ReadInputFile opens it, read in pieces: for an input parsed as it is read, so
// that its text need not be held in memory (apps/input_file.cc). Move-only; closes the file.
class InputFile {
 public:
  // The checks and errors of ReadInputFile, up to the size of a regular file (or of what is left of
  // one redirected to standard input).
  static absl::StatusOr<InputFile> Open(const std::string& flag, const std::string& path, size_t max_bytes);
  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&&) = delete;
  InputFile(const InputFile&) = delete;
  ~InputFile();
  // Reads up to `size` bytes into `buf`: how many, 0 at the end. InvalidArgument ("--FLAG: 'PATH':
  // larger than N bytes", or the read's errno text) once the input holds more than `max_bytes` or
  // cannot be read.
  absl::StatusOr<size_t> Read(char* buf, size_t size);

 private:
  InputFile(std::string flag, std::string path, int fd, size_t max_bytes)
      : flag_(std::move(flag)), path_(std::move(path)), fd_(fd), max_bytes_(max_bytes) {}
  std::string flag_, path_;
  int fd_ = -1;  // STDIN_FILENO for `-` (not closed)
  size_t max_bytes_ = 0, read_ = 0;
};

// Checks that `path` names an input ReadInputFile would accept (exists, regular file or `-`),
// without reading it.
absl::Status CheckInputFile(const std::string& flag, const std::string& path);

// Installs SIGINT / SIGTERM / SIGHUP handlers that remove the temporary files and directories of a
// commit in progress, then die of the signal as before, and ignores SIGXFSZ (a write past the
// file-size limit fails with EFBIG). Call once, from main, before any output is written.
void InstallCleanupHandlers();

// Writes a file's contents piece by piece through the sink it is given (e.g. rp::Tracer::
// StreamChromeJson), so they need not be held whole; the first error it returns fails the commit.
using ContentWriter = std::function<absl::Status(TextSink)>;

// A file output's contents: `text`, or what `writer` writes when set.
struct OutputContents {
  std::string text;
  ContentWriter writer;
};

class OutputFiles {
 public:
  // An output `path` of flag `flag` ("" = none; "-" is refused: outputs are files). A directory
  // output (`is_dir`) holds the files given to SetInDir, whose names `entries` lists (every name
  // it may hold: CheckAll checks each like a file output); one that does not exist is created whole
  // at commit time (see the header comment).
  absl::Status Declare(const std::string& flag, const std::string& path, bool is_dir = false,
                       std::vector<std::string> entries = {});
  // Checks every declared output (see the header comment); `inputs` are (flag, path) pairs the
  // outputs must not overwrite.
  absl::Status CheckAll(const std::vector<std::pair<std::string, std::string>>& inputs) const;
  // The contents of a declared file output.
  void Set(const std::string& flag, std::string contents);
  // The contents of a declared file output, written by `writer` into the temporary file at commit
  // time (it must stay callable until Commit returns). A writer's error fails the commit like a
  // write error ("--FLAG: 'PATH': <its message>"): every target stays as it was.
  void SetStreamed(const std::string& flag, ContentWriter writer);
  // A file `name` (no '/') inside a declared directory output.
  void SetInDir(const std::string& flag, const std::string& name, std::string contents);
  // Writes every output that was given contents, all or none (see the header comment).
  absl::Status Commit();

 private:
  struct Output {
    std::string flag, path;
    bool is_dir = false;
    std::vector<std::string> entries;  // a directory's file names
    std::vector<std::pair<std::string, OutputContents>> files;  // (path, contents)
  };
  // One Commit's state and steps (apps/files.cc).
  class Committer;
  Output* Find(const std::string& flag);
  std::vector<Output> outputs_;
};

namespace internal {
// Adds `path` to the files the SIGINT / SIGTERM handler removes (what a commit does for each of its
// temporary files; exposed for the test of the handler).
void RegisterTempFile(const std::string& path);
// Adds the directory `path` to those the handler removes once the files in them are gone (a commit's
// staging directory and the parents it created).
void RegisterTempDir(const std::string& path);
}  // namespace internal

// Writes `contents` to `path` atomically (an OutputFiles of one file: checked, temporary file,
// fsync, rename).
absl::Status WriteFileAtomically(const std::string& path, const std::string& contents);

}  // namespace rp::apps
