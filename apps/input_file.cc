// Inputs of the `ringpipe` binary (apps/files.h): InputFile and ReadInputFile.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "apps/files.h"
#include "apps/flags.h"
#include "runtime/status_macros.h"

namespace rp::apps {
namespace {

absl::Status Bad(const std::string& flag, const std::string& path, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", OneLine(path), "': ", why));
}

}  // namespace

absl::StatusOr<InputFile> InputFile::Open(const std::string& flag, const std::string& path, size_t max_bytes) {
  RP_RETURN_IF_ERROR(CheckInputFile(flag, path));
  const bool in = path == "-";
  // O_NONBLOCK: a path swapped for a FIFO after the check must not block the open.
  const int fd = in ? STDIN_FILENO : ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return Bad(flag, path, absl::StrCat("cannot read: ", std::strerror(errno)));
  InputFile file(flag, path, fd, max_bytes);
  struct stat st;
  if (!in && (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) return Bad(flag, path, "is not a regular file");
  // A file known to be too large is refused before it is read (Read still stops one that grows): a
  // 2 GiB --from_report was read up to its 1 GiB limit first, 8 s and 1.1 GB of memory.
  if (!in && static_cast<uint64_t>(st.st_size) > max_bytes) {
    return Bad(flag, path, absl::StrCat("larger than ", max_bytes, " bytes"));
  }
  if (in && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {  // `- < file`: what is left of the file
    const off_t at = ::lseek(fd, 0, SEEK_CUR);
    if (at >= 0 && st.st_size > at && static_cast<uint64_t>(st.st_size - at) > max_bytes) {
      return Bad(flag, path, absl::StrCat("larger than ", max_bytes, " bytes"));
    }
  }
  return file;
}

InputFile::InputFile(InputFile&& other) noexcept
    : flag_(std::move(other.flag_)), path_(std::move(other.path_)), fd_(other.fd_), max_bytes_(other.max_bytes_),
      read_(other.read_) {
  other.fd_ = -1;
}

InputFile::~InputFile() {
  if (fd_ >= 0 && fd_ != STDIN_FILENO) ::close(fd_);
}

absl::StatusOr<size_t> InputFile::Read(char* buf, size_t size) {
  while (true) {
    const ssize_t n = ::read(fd_, buf, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Bad(flag_, path_, absl::StrCat("cannot read: ", std::strerror(errno)));
    if (read_ + static_cast<size_t>(n) > max_bytes_) {
      return Bad(flag_, path_, absl::StrCat("larger than ", max_bytes_, " bytes"));
    }
    read_ += static_cast<size_t>(n);
    return static_cast<size_t>(n);
  }
}

absl::StatusOr<std::string> ReadInputFile(const std::string& flag, const std::string& path, size_t max_bytes) {
  RP_ASSIGN_OR_RETURN(InputFile file, InputFile::Open(flag, path, max_bytes));
  std::string text;
  std::array<char, 65536> buf;
  while (true) {
    RP_ASSIGN_OR_RETURN(const size_t n, file.Read(buf.data(), buf.size()));
    if (n == 0) return text;
    text.append(buf.data(), n);
  }
}

}  // namespace rp::apps
