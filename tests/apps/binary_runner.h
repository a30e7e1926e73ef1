// Test helper: runs the `ringpipe` binary (path from the RINGPIPE_BIN compile definition) as a user
// would, and makes per-test temporary directories. Header-only; shared by the tests/apps suites.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace rp::apps::testing {

struct BinaryResult {
  int exit_code = -1;  // -1 if the process did not exit normally
  std::string out;     // stdout
  std::string err;     // stderr
};

// Runs `ringpipe <args>` (args go through the shell) with stderr captured in a file under `dir`.
inline BinaryResult RunBinary(const std::string& args, const std::filesystem::path& dir) {
  const std::filesystem::path err = dir / "stderr.txt";
  const std::string cmd = std::string(RINGPIPE_BIN) + " " + args + " 2>" + err.string();
  BinaryResult r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream f(err);
  r.err.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  std::filesystem::remove(err);
  return r;
}

// Runs `ringpipe <args>` with stderr merged into stdout (`out`; `err` stays empty).
inline BinaryResult RunBinaryMerged(const std::string& args) {
  const std::string cmd = std::string(RINGPIPE_BIN) + " " + args + " 2>&1";
  BinaryResult r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// A fresh, empty directory named after the suite, the test and this process.
inline std::filesystem::path TempDir(const std::string& suite, const std::string& name) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    (suite + "_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace rp::apps::testing
