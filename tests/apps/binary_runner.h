// Test helper: runs the `ringpipe` binary (path from the RINGPIPE_BIN compile definition) as a user
// would, makes per-test temporary directories, reads files and checks the bad-input contract.
// Header-only; shared by the tests/apps suites.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "apps/cli.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace rp::apps::testing {

struct BinaryResult {
  int exit_code = -1;  // -1 if the process did not exit normally
  std::string out;     // stdout
  std::string err;     // stderr
};

// The JSON document in the file at `p` (throws nlohmann's parse_error when it is not one).
inline nlohmann::json ReadJson(const std::filesystem::path& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

// The bytes of the file at `p` ("" if it cannot be read).
inline std::string ReadFile(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Runs `<shell>; ringpipe <args>` in one shell (`shell` sets it up: "ulimit -f 8"), stderr captured
// in a file under `dir`.
inline BinaryResult RunBinaryInShell(const std::string& shell, const std::string& args,
                                     const std::filesystem::path& dir) {
  const std::filesystem::path err = dir / "stderr.txt";
  const std::string cmd =
      (shell.empty() ? "" : shell + "; exec ") + std::string(RINGPIPE_BIN) + " " + args + " 2>" + err.string();
  BinaryResult r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = ReadFile(err);
  std::filesystem::remove(err);
  return r;
}

// Runs `ringpipe <args>` (args go through the shell) with stderr captured in a file under `dir`.
inline BinaryResult RunBinary(const std::string& args, const std::filesystem::path& dir) {
  return RunBinaryInShell("", args, dir);
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

// Every name in `dir`, sorted (temporary files and directories included: they start with '.').
inline std::vector<std::string> Names(const std::filesystem::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// CSV rows split on commas (the tests' values hold no quoted commas except `error`, which is last
// among the columns they read by index before it... so they read columns by header name).
inline std::vector<std::vector<std::string>> ReadCsv(const std::filesystem::path& p) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(ReadFile(p));
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::string cell;
    bool quoted = false;
    for (char c : line) {
      if (c == '"') {
        quoted = !quoted;
      } else if (c == ',' && !quoted) {
        cells.push_back(cell);
        cell.clear();
      } else {
        cell += c;
      }
    }
    cells.push_back(cell);
    rows.push_back(cells);
  }
  return rows;
}

inline std::string Cell(const std::vector<std::vector<std::string>>& csv, size_t row, const std::string& column) {
  for (size_t c = 0; c < csv[0].size(); ++c) {
    if (csv[0][c] == column) return c < csv[row].size() ? csv[row][c] : "<missing>";
  }
  return "<no column " + column + ">";
}

// Files in `dir` other than those named (temporary files would show up here).
inline std::vector<std::string> Leftovers(const std::filesystem::path& dir, const std::vector<std::string>& expected) {
  std::vector<std::string> extra;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (std::find(expected.begin(), expected.end(), name) == expected.end()) extra.push_back(name);
  }
  return extra;
}

// Bad input: exit 2, one line on stderr that contains `what`, nothing on stdout.
inline void ExpectBadInput(const BinaryResult& r, const std::string& what, const std::string& context) {
  EXPECT_EQ(r.exit_code, kExitBadInput) << context << "\n" << r.err;
  EXPECT_NE(r.err.find(what), std::string::npos) << context << "\n" << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << context << "\n" << r.err;
  EXPECT_TRUE(r.out.empty()) << context << "\n" << r.out;
}

}  // namespace rp::apps::testing
