// The config fuzzer's seed corpus and dictionary (fuzz/, docs/fuzzing.md), the inputs the fuzzer
// found, and malformed config files end to end through the `ringpipe` binary: FILE:LINE: KEY in a
// one-line message, exit code 2, no output file (not even the temporary one).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "apps/cli.h"
#include "apps/plan.h"
#include "apps/subcommands.h"
#include "apps/config.h"
#include "apps/presets.h"
#include "gtest/gtest.h"
#include "tests/apps/binary_runner.h"
#include "nlohmann/json.hpp"

namespace rp::apps {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const fs::path kFuzzDir = fs::path(RINGPIPE_SOURCE_DIR) / "fuzz";

using rp::apps::testing::ReadFile;

fs::path TempDir(const std::string& name) {
  return rp::apps::testing::TempDir("ringpipe_fuzz_regress", name);
}

// Parses a command line the way `ringpipe <subcommand>` does and loads the config.
absl::StatusOr<RunConfig> Load(const std::string& subcommand, std::vector<std::string> argv) {
  auto args = ParseSubcommandArgs(subcommand, argv);
  if (!args.ok()) return args.status();
  return LoadConfig(*args, subcommand == "run");
}

// A preset as a config file: every field by its name ("config" left out: a file cannot name one).
std::string PresetFileText(const std::string& name) {
  auto cfg = PresetByName(name);
  if (!cfg.ok()) return "";
  json j = ConfigToJson(*cfg);
  j.erase("config");
  return j.dump(2) + "\n";
}

TEST(ConfigFuzzCorpus, PresetSeedsAreThePresetsSerializedAndLoadAsThePreset) {
  // RINGPIPE_REGENERATE_CORPUS=1 rewrites the preset seeds (after a preset or a field changed).
  const bool regenerate = std::getenv("RINGPIPE_REGENERATE_CORPUS") != nullptr;
  for (const std::string& name : PresetNames()) {
    const fs::path path = kFuzzDir / "corpus" / ("preset-" + name + ".json");
    const std::string expected = PresetFileText(name);
    ASSERT_FALSE(expected.empty()) << name;
    if (regenerate) std::ofstream(path, std::ios::binary | std::ios::trunc) << expected;
    EXPECT_EQ(ReadFile(path), expected) << path << " is stale: rerun with RINGPIPE_REGENERATE_CORPUS=1";

    for (const char* sub : {"run", "predict"}) {
      auto from_file = Load(sub, {"--config=" + path.string()});
      ASSERT_TRUE(from_file.ok()) << sub << " " << path << ": " << from_file.status();
      auto from_preset = Load(sub, {"--preset=" + name});
      ASSERT_TRUE(from_preset.ok()) << sub << " " << name << ": " << from_preset.status();
      json a = ConfigToJson(*from_file), b = ConfigToJson(*from_preset);
      a.erase("config");
      b.erase("config");
      EXPECT_EQ(a, b) << sub << " " << name;
      EXPECT_TRUE(BuildPlan(*from_file, sub == std::string("run")).ok()) << sub << " " << name;
    }
  }
}

TEST(ConfigFuzzCorpus, DictionaryHasEveryConfigKey) {
  const std::string dict = ReadFile(kFuzzDir / "config.dict");
  ASSERT_FALSE(dict.empty());
  for (const std::string& f : ConfigFieldNames()) {
    const std::string entry = "key_" + f + "=\"\\\"" + f + "\\\":\"";
    EXPECT_NE(dict.find(entry), std::string::npos) << "fuzz/config.dict lacks " << entry;
  }
}

// Every malformed seed, with where its message must point.
struct BadSeed {
  const char* file;
  const char* where;  // what follows "PATH:" in the message
};
const BadSeed kBadSeeds[] = {
    {"bad-syntax.json", "3: malformed JSON: "},
    {"bad-unknown-key.json", "3: layerz: unknown key"},
    {"bad-type.json", "3: microbatches: expected an integer, got [4]"},
    {"bad-range.json", "3: microbatches: must be in 1..1048576, got 0"},
    {"bad-layout.json", "4: pp: 7 model stages"},
    {"bad-not-object.json", "1: expected a JSON object"},
    {"bad-nested-config.json", "2: config: a config file cannot name another config file"},
    {"bad-empty.json", "1: malformed JSON: "},
    {"bad-comment.json", "4: malformed JSON: "},  // the comment never closes: the error is at the end
    {"bad-enum.json", "2: codec: "},
    {"bad-interleaved.json", "4: microbatches: the interleaved schedule needs a multiple of pp=2"},
    {"bad-duplicate-key.json", "3: dp: duplicate key (first at line 2)"},
    // Found by fuzz/config_fuzzer.cc. A number beyond double's range: nlohmann throws out_of_range,
    // not parse_error, which escaped ApplyConfigText and terminated the process.
    {"regress-number-overflow.json", "4: malformed JSON: number overflow parsing '1e3084'"},
    // An unknown key spelled with an escape: it was reported at line 0 with a raw NUL byte in the
    // message (LineOfKey searched the raw text for the decoded key). Keys are checked in file order,
    // so this file's other unknown key (line 36) comes first; the -only seed has the escaped key alone.
    {"regress-escaped-key.json", "36: intra: unknown key"},
    {"regress-escaped-key-only.json", "2: \\x00reference: unknown key"},
    // nlohmann ends a // comment at a NUL byte too: the key after it was reported at line 0. Any NUL
    // byte is now refused first (nlohmann ends the whole text at one: what followed was ignored).
    {"regress-nul-ends-comment.json", "2: malformed JSON: a NUL byte at byte offset 37"},
    // Valid-looking sizes the plan builder could not hold (crafted with the fuzzer binary): the
    // weights (operator new aborted), the schedule program (out of memory in `predict`), one
    // micro-batch's activations.
    {"regress-huge-model.json", "5: hidden: the model has 281475412918272 weights; at most "},
    {"regress-huge-program.json", "5: microbatches: pp x chunks x microbatches = 2147483648"},
    {"regress-huge-activations.json", "2: microbatch_size: 1048576 rows x the widest layer (2097152)"},
    // A control character in a value is shown escaped: the message stays one line.
    {"regress-newline-value.json", "2: link: 'dgx\\x0ah100' has control characters or bytes that are not UTF-8"},
    // The FLOPs cost model times the described transformer, but the execution plan still lays the
    // passes, TP all-reduces and buckets out over the real MLP's layers: `predict` accepted a width
    // tp does not divide, and the plan builder then failed without naming a field.
    {"regress-flops-odd-width.json", "5: tp: layer 0 (output width 63) is not divisible by tp=2"},
};

TEST(ConfigFuzzCorpus, MalformedSeedsNameFileLineAndKey) {
  for (const BadSeed& seed : kBadSeeds) {
    const fs::path path = kFuzzDir / "corpus" / seed.file;
    ASSERT_TRUE(fs::exists(path)) << path;
    for (const char* sub : {"run", "predict"}) {
      auto cfg = Load(sub, {"--config=" + path.string()});
      ASSERT_FALSE(cfg.ok()) << sub << " " << seed.file;
      EXPECT_EQ(cfg.status().code(), absl::StatusCode::kInvalidArgument) << cfg.status();
      EXPECT_EQ(std::string(cfg.status().message()).rfind(path.string() + ":" + seed.where, 0), 0u)
          << sub << " " << seed.file << ": " << cfg.status();
    }
  }
}

// The findings the fuzzer saved that are good configs (every regress-* seed not in kBadSeeds): each
// loads and plans for `predict`, and for `run` unless this host's memory refuses it — among them layouts whose planning once took the fuzzer
// past its 10 s limit (regress-wide-moe, regress-late-drop-moe, regress-wide-experts: 1024 x 3 with
// two experts of hidden 9783 on every layer, planned by building 1.3 GB of stages; 45 s under ASan).
TEST(ConfigFuzzCorpus, GoodRegressionSeedsLoadAndPlan) {
  int good = 0;
  for (const auto& e : fs::directory_iterator(kFuzzDir / "corpus")) {
    const std::string name = e.path().filename().string();
    if (name.rfind("regress-", 0) != 0) continue;
    if (std::any_of(std::begin(kBadSeeds), std::end(kBadSeeds),
                    [&](const BadSeed& b) { return name == b.file; })) {
      continue;
    }
    ++good;
    for (const char* sub : {"run", "predict"}) {
      auto cfg = Load(sub, {"--config=" + e.path().string()});
      // `run` may refuse what this host's memory cannot hold (regress-wide-experts: 235 GB).
      if (sub == std::string("run") && !cfg.ok() && absl::StrContains(cfg.status().message(), "would allocate")) {
        continue;
      }
      ASSERT_TRUE(cfg.ok()) << sub << " " << name << ": " << cfg.status();
      auto plan = BuildPlan(*cfg, sub == std::string("run"));
      EXPECT_TRUE(plan.ok()) << sub << " " << name << ": " << plan.status();
    }
  }
  EXPECT_GE(good, 3);
}

using Result = rp::apps::testing::BinaryResult;
using rp::apps::testing::RunBinary;

TEST(RunCommandBadConfigFile, ExitsTwoWithFileLineKeyAndWritesNoOutput) {
  const fs::path dir = TempDir("e2e");
  const fs::path report = dir / "out.json", trace = dir / "trace.json";
  for (const BadSeed& seed : kBadSeeds) {
    const fs::path path = kFuzzDir / "corpus" / seed.file;
    for (const std::string sub : {"run", "predict"}) {
      const Result r = RunBinary(sub + " --config=" + path.string() + " --report_json=" + report.string() +
                                     (sub == "run" ? " --trace=" + trace.string() : ""),
                                 dir);
      EXPECT_EQ(r.exit_code, kExitBadInput) << sub << " " << seed.file << "\n" << r.err;
      const std::string prefix = "ringpipe " + sub + ": " + path.string() + ":" + seed.where;
      EXPECT_EQ(r.err.rfind(prefix, 0), 0u) << prefix << "\n" << r.err;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
      EXPECT_TRUE(r.out.empty()) << r.out;
      // No output, not even a temporary file beside it.
      EXPECT_TRUE(fs::is_empty(dir)) << sub << " " << seed.file << " left a file in " << dir;
      for (const auto& e : fs::directory_iterator(dir)) fs::remove(e.path());
    }
  }
  fs::remove_all(dir);
}

// A good file whose flags make it invalid: the message names the flag, not the file.
TEST(RunCommandBadConfigFile, FlagThatBreaksAGoodFileIsNamedAsTheFlag) {
  const fs::path dir = TempDir("flag");
  const fs::path report = dir / "out.json";
  const fs::path seed = kFuzzDir / "corpus" / "preset-s1.json";
  const Result r = RunBinary("run --config=" + seed.string() + " --pp=7 --report_json=" + report.string(), dir);
  EXPECT_EQ(r.exit_code, kExitBadInput) << r.err;
  EXPECT_EQ(r.err.rfind("ringpipe run: --pp: 7 model stages", 0), 0u) << r.err;
  EXPECT_FALSE(fs::exists(report));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rp::apps
