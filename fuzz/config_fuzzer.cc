// libFuzzer target: arbitrary bytes as the config file of `ringpipe run --config=FILE` and
// `ringpipe predict --config=FILE`.
//
// Each input is written to a per-process temporary file and goes through exactly what the binary
// does before anything runs: the subcommand's flag parser (--config=FILE), LoadConfig (preset < file,
// parsed, validated) and BuildPlan (grid, program, cost model) — for `run` and for `predict`. The
// emulator is never started.
//
// Properties (a violation aborts, which libFuzzer reports as a crash with the input saved):
//   * no crash, no sanitizer report (ASan + UBSan in the fuzz preset), no hang (libFuzzer -timeout),
//     no unbounded allocation (libFuzzer -rss_limit_mb / -malloc_limit_mb);
//   * every rejection is an absl::Status with code InvalidArgument and a one-line message (no control
//     characters, even when the input has them in a key or a value) that names
//     where the bad value is: "FILE:LINE: KEY: ..." (LINE >= 1; KEY a config field, or the unknown key),
//     "FILE:LINE: malformed JSON: ...", "FILE:1: expected a JSON object ...", or "--FIELD..." for a
//     value the file did not set (a preset's value that the file's other values made invalid);
//   * a config that LoadConfig accepts always yields a plan (the validator, not the plan builder,
//     rejects bad configs — BuildPlan's errors carry no file:line).
//
// Run: scripts/fuzz.sh (docs/fuzzing.md).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "apps/config.h"
#include "apps/plan.h"
#include "apps/subcommands.h"

namespace {

using rp::apps::ConfigFieldNames;

[[noreturn]] void Fail(const char* what, const absl::Status& st) {
  std::fprintf(stderr, "config_fuzzer: %s\n  status: %s\n", what, st.ToString().c_str());
  std::abort();
}

bool IsField(absl::string_view name) {
  for (const std::string& f : ConfigFieldNames()) {
    if (name == f) return true;
  }
  return false;
}

// The field a message names at its start: "dp: ...", "hidden[3] (...", "input_dim must ...".
bool StartsWithField(absl::string_view msg) {
  const size_t end = msg.find_first_of(":[ ");
  return end != absl::string_view::npos && IsField(msg.substr(0, end));
}

// Checks the documented shape of a rejection (see the file comment).
void CheckRejection(const absl::Status& st, const std::string& path) {
  if (st.code() != absl::StatusCode::kInvalidArgument) Fail("rejection is not InvalidArgument", st);
  absl::string_view msg = st.message();
  if (msg.empty()) Fail("empty error message", st);
  for (const char c : msg) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) Fail("error message is not one line of printable text", st);
  }
  if (absl::ConsumePrefix(&msg, path + ":")) {
    const size_t colon = msg.find(": ");
    int line = 0;
    if (colon == absl::string_view::npos || !absl::SimpleAtoi(msg.substr(0, colon), &line) || line < 1) {
      Fail("file error without FILE:LINE (line >= 1)", st);
    }
    msg.remove_prefix(colon + 2);
    if (absl::StartsWith(msg, "malformed JSON: ")) return;
    if (line == 1 && absl::StartsWith(msg, "expected a JSON object")) return;
    if (absl::StrContains(msg, ": unknown key")) return;  // KEY may be any string the user wrote
    if (!StartsWithField(msg)) Fail("file error does not name a config field after FILE:LINE:", st);
    return;
  }
  if (absl::ConsumePrefix(&msg, "--") && StartsWithField(msg)) return;
  Fail("error names neither FILE:LINE:KEY nor --FIELD", st);
}

std::string TempPath() {
  return (std::filesystem::temp_directory_path() /
          ("ringpipe_config_fuzzer_" + std::to_string(::getpid()) + ".json"))
      .string();
}

void LoadAndPlan(const std::string& path, const char* subcommand, bool for_run) {
  auto args = rp::apps::ParseSubcommandArgs(subcommand, {"--config=" + path});
  if (!args.ok()) Fail("the flag parser rejected --config=PATH", args.status());
  auto cfg = rp::apps::LoadConfig(*args, for_run);
  if (!cfg.ok()) {
    CheckRejection(cfg.status(), path);
    return;
  }
  auto plan = rp::apps::BuildPlan(*cfg, for_run);
  if (!plan.ok()) Fail("BuildPlan rejected a config that LoadConfig accepted", plan.status());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = TempPath();
  static const bool cleanup_registered = [] { return std::atexit([] { std::remove(path.c_str()); }) == 0; }();
  (void)cleanup_registered;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  if (size > 0 && std::fwrite(data, 1, size, f) != size) {
    std::fclose(f);
    return 0;
  }
  std::fclose(f);
  LoadAndPlan(path, "run", /*for_run=*/true);
  LoadAndPlan(path, "predict", /*for_run=*/false);
  return 0;
}
