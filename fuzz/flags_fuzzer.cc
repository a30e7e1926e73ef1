// libFuzzer target: arbitrary bytes as a `ringpipe` command line. The input is cut at NUL bytes into
// arguments; its first byte picks the subcommand. The arguments go through the subcommand's flag
// parser (apps/flags.h) and, for the subcommands that take a config, LoadConfig (apps/config.h):
// everything the binary does before any work, files included (a --config path the fuzzer spells is
// read if it exists: only regular files, at most 1 MiB).
//
// Properties (a violation aborts, which libFuzzer reports as a crash with the input saved):
//   * no crash, no sanitizer report, no hang, no unbounded allocation (libFuzzer's limits);
//   * every rejection is InvalidArgument with a non-empty, one-line, printable message (a byte the
//     user typed that is not UTF-8 or is a control character is shown escaped);
//   * a parse that succeeds records only flags of the subcommand, each text valid for its grammar.
//
// Run: scripts/fuzz.sh (docs/fuzzing.md).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "apps/config.h"
#include "apps/flags.h"
#include "apps/subcommands.h"

namespace {

[[noreturn]] void Fail(const char* what, const absl::Status& st) {
  std::fprintf(stderr, "flags_fuzzer: %s\n  status: %s\n", what, st.ToString().c_str());
  std::abort();
}

void CheckRejection(const absl::Status& st) {
  if (st.code() != absl::StatusCode::kInvalidArgument) Fail("rejection is not InvalidArgument", st);
  const std::string msg(st.message());
  if (msg.empty() || rp::apps::OneLine(msg) != msg) Fail("message is not one printable line", st);
}

}  // namespace

// `--config=-` and `--from_report=-` read standard input: make it empty, never a terminal.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (std::freopen("/dev/null", "r", stdin) == nullptr) std::abort();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const std::vector<rp::apps::Subcommand> subs = rp::apps::AllSubcommands();
  const rp::apps::Subcommand& sub = subs[data[0] % subs.size()];
  std::vector<std::string> args;
  std::string cur;
  for (size_t i = 1; i < size; ++i) {
    if (data[i] == 0) {
      args.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(static_cast<char>(data[i]));
    }
  }
  if (size > 1) args.push_back(cur);
  const std::vector<rp::apps::FlagSpec> specs = sub.flags();
  auto parsed = rp::apps::ParseFlags(sub.name, args, specs);
  if (!parsed.ok()) {
    CheckRejection(parsed.status());
    return 0;
  }
  for (const auto& [name, text] : parsed->occurrences) {
    const rp::apps::FlagSpec* spec = nullptr;
    for (const rp::apps::FlagSpec& s : specs) {
      if (s.name == name) spec = &s;
    }
    if (spec == nullptr) Fail("parsed a flag the subcommand does not have", absl::InternalError(name));
    if (absl::Status st = rp::apps::CheckGrammar(name, spec->grammar, text); !st.ok()) {
      Fail("parsed a value its grammar rejects", st);
    }
  }
  const std::string name = sub.name;
  if (name == "run" || name == "predict") {
    auto cfg = rp::apps::LoadConfig(*parsed, name == "run");
    if (!cfg.ok()) CheckRejection(cfg.status());
  }
  return 0;
}
