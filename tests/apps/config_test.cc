// apps/config: presets < config file < flags, field parsing and validation messages.
#include "apps/config.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "apps/cli.h"
#include "apps/host.h"
#include "apps/memory_estimate.h"
#include "apps/plan.h"
#include "apps/subcommands.h"
#include "apps/presets.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rp::apps {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

fs::path WriteTemp(const std::string& name, const std::string& text) {
  const fs::path p = fs::temp_directory_path() / ("ringpipe_config_test_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(p) << text;
  return p;
}

// Parses a command line (sets the flags it names) and loads the config.
absl::StatusOr<RunConfig> Load(std::vector<std::string> argv, bool for_run = true) {
  auto args = ParseSubcommandArgs(for_run ? "run" : "predict", argv);
  if (!args.ok()) return args.status();
  return LoadConfig(*args, for_run);
}

TEST(Config, PresetThenFileThenFlags) {
  const fs::path file = WriteTemp("prec.json", R"({
    // the file names the preset and overrides two of its fields
    "preset": "s1",
    "microbatches": 4,
    "forward_ms": [60, 70]
  })");
  auto cfg = Load({"--config=" + file.string(), "--forward_ms=55"});
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->preset, "s1");
  EXPECT_EQ(cfg->microbatches, 4);                    // file over preset (8)
  EXPECT_EQ(cfg->forward_ms, std::vector<double>{55});  // flag over file
  EXPECT_EQ(cfg->backward_ms, std::vector<double>{80});  // preset
  EXPECT_EQ(cfg->dp, 2);
  EXPECT_EQ(ResolveLinks(*cfg)->inter_node.alpha, FromMillis(20));  // s1's 20 ms ring step

  // --preset beats the file's "preset" key; the file still overrides the preset.
  cfg = Load({"--config=" + file.string(), "--preset=default"});
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->preset, "default");
  EXPECT_EQ(cfg->tp, 2);
  EXPECT_EQ(cfg->microbatches, 4);
  EXPECT_EQ(cfg->forward_ms, (std::vector<double>{60, 70}));
  fs::remove(file);
}

TEST(Config, EveryPresetIsValidAndBuildsAPlan) {
  for (const std::string& name : PresetNames()) {
    SCOPED_TRACE(name);
    auto cfg = PresetByName(name);
    ASSERT_TRUE(cfg.ok());
    ASSERT_TRUE(ValidateConfig(*cfg, /*for_run=*/true).ok()) << ValidateConfig(*cfg, true);
    auto plan = BuildPlan(*cfg, /*for_run=*/true);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->grid.world_size(), cfg->world_size());
  }
  EXPECT_EQ(PresetByName("s9").status().code(), absl::StatusCode::kNotFound);
}

TEST(Config, S3LadderKeepsTheGlobalBatch) {
  for (const char* name : {"s3-0d", "s3-1d", "s3-2d", "s3-3d"}) {
    auto cfg = PresetByName(name);
    ASSERT_TRUE(cfg.ok());
    EXPECT_EQ(cfg->dp * cfg->microbatches * cfg->microbatch_size, 256) << name;
    EXPECT_EQ(cfg->cost_model, CostModelKind::kFlops) << name;
  }
  EXPECT_EQ(PresetByName("s3-3d")->world_size(), 8);
}

TEST(Config, ListsParseCommaListsAndRepeats) {
  EXPECT_EQ(*ParseWidthList("hidden", "128,64x3"), (std::vector<int>{128, 64, 64, 64}));
  EXPECT_EQ(*ParseNumberList("forward_ms", " 1.5, 2"), (std::vector<double>{1.5, 2}));
  EXPECT_THAT(std::string(ParseWidthList("hidden", "64,0").status().message()), HasSubstr("hidden"));
  EXPECT_THAT(std::string(ParseNumberList("forward_ms", "1,,2").status().message()), HasSubstr("forward_ms"));
}

TEST(Config, FileErrorsNameFileLineAndKey) {
  RunConfig cfg = *PresetByName("default");
  absl::Status st = ApplyConfigText(cfg, "c.json", "{\n  \"dp\": 2,\n  \"bogus_key\": 1\n}");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("c.json:3: bogus_key: unknown key"));
  st = ApplyConfigText(cfg, "c.json", "{\n  \"dp\": \"two\"\n}");
  EXPECT_THAT(std::string(st.message()), HasSubstr("c.json:2: dp: expected an integer"));
  st = ApplyConfigText(cfg, "c.json", "{\n  \"dp\": 2,\n  \"pp\": \n}");
  EXPECT_THAT(std::string(st.message()), HasSubstr("c.json:4: malformed JSON"));
  st = ApplyConfigText(cfg, "c.json", "[1, 2]");
  EXPECT_THAT(std::string(st.message()), HasSubstr("expected a JSON object"));
  st = ApplyConfigText(cfg, "c.json", R"({"forward_ms": [1, "x"]})");
  EXPECT_THAT(std::string(st.message()), HasSubstr("forward_ms[1]"));
}

TEST(Config, DuplicateKeysAreAnErrorNamingBothLines) {
  RunConfig cfg = *PresetByName("default");
  absl::Status st = ApplyConfigText(cfg, "c.json", "{\n  \"dp\": 2,\n  \"pp\": 1,\n  \"dp\": 4\n}");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("c.json:4: dp: duplicate key (first at line 2)"));
  // A key spelled with an escape is the same key.
  st = ApplyConfigText(cfg, "c.json", "{\"dp\": 2,\n\"\\u0064p\": 4}");
  EXPECT_THAT(std::string(st.message()), HasSubstr("c.json:2: dp: duplicate key (first at line 1)"));
  // A nested object's keys are not the config's.
  st = ApplyConfigText(cfg, "c.json", "{\"dp\": {\"dp\": 1}}");
  EXPECT_THAT(std::string(st.message()), HasSubstr("dp: expected an integer"));
}

TEST(Config, ValidationDoesNotChangeTheConfigAndNamesTheFieldAsData) {
  RunConfig cfg = *PresetByName("s1");
  cfg.microbatches = 0;
  const nlohmann::json before = ConfigToJson(cfg);
  const absl::Status st = ValidateConfig(cfg, /*for_run=*/true);
  EXPECT_EQ(ConfigToJson(cfg), before);
  EXPECT_EQ(ErrorField(st), "microbatches");
  cfg.microbatches = 8;
  cfg.tp = 3;
  EXPECT_EQ(ErrorField(ValidateConfig(cfg, true)), "tp");
  cfg.tp = 1;
  cfg.layers_per_stage = {1, 9};
  EXPECT_EQ(ErrorField(ValidateConfig(cfg, true)), "layers_per_stage");
}

TEST(Config, ValidationNamesTheField) {
  struct Case {
    std::vector<std::string> args;
    std::string field;
  } cases[] = {
      {{"--preset=nope"}, "--preset"},
      {{"--pp=7"}, "--pp"},  // the default model has 6 layers
      {{"--microbatches=0"}, "--microbatches"},
      {{"--tp=3"}, "--tp"},  // widths of 64 do not divide by 3
      {{"--forward_ms=1,2,3"}, "--forward_ms"},
      {{"--backward_ms=4,4", "--weight_grad_ms=5"}, "--weight_grad_ms"},
      {{"--schedule=pipedream"}, "--schedule"},
      {{"--schedule=interleaved", "--virtual_stages=2", "--microbatches=3"}, "--microbatches"},
      {{"--schedule=interleaved"}, "--virtual_stages"},  // v = 1 is 1F1B under another name
      {{"--virtual_stages=2"}, "--virtual_stages"},
      {{"--codec=fp8"}, "--codec"},
      {{"--segment_bytes=6"}, "--segment_bytes"},
      {{"--link=nowhere"}, "--link"},
      {{"--time_scale=0"}, "--time_scale"},
      {{"--layers_per_stage=3"}, "--layers_per_stage"},
      {{"--dp=x"}, "--dp"},
      {{"--cost_model=flops", "--flops_device=tpu"}, "flops_device"},
      // The new fields (issue 11, 13, 14): one line naming the field.
      {{"--nics_per_node=3", "--devices_per_node=4"}, "--nics_per_node"},
      {{"--nics_per_node=8", "--devices_per_node=4"}, "--nics_per_node"},
      {{"--bucket_mb=0"}, "--bucket_mb"},
      {{"--bucket_mb=-1"}, "--bucket_mb"},
      {{"--bucket_mb=x"}, "--bucket_mb"},
      {{"--reduce_gbps=-1"}, "--reduce_gbps"},
      {{"--overhead_us=-2"}, "--overhead_us"},
      {{"--inter_overhead_us=1e16"}, "--inter_overhead_us"},
      {{"--watchdog_timeout=0"}, "--watchdog_timeout"},
      {{"--watchdog_timeout=1e9"}, "--watchdog_timeout"},
      {{"--segment_bytes=4", "--cost_model=flops"}, "--segment_bytes"},  // ~1e8 messages per step
      {{"--microbatch_group=4"}, "--microbatch_group"},  // 1f1b
      {{"--pytorch_rounds"}, "--pytorch_rounds"},
      {{"--fused_fb=false"}, "--fused_fb"},
      {{"--schedule=interleaved", "--virtual_stages=2", "--microbatch_group=3"}, "--microbatch_group"},  // < pp
      {{"--schedule=interleaved", "--virtual_stages=2", "--microbatches=5"}, "--microbatches"},  // 5 mod 2 = 1
      {{"--schedule=interleaved", "--virtual_stages=2", "--pytorch_rounds", "--microbatch_group=2"}, "--microbatch_group"},
      {{"--schedule=zb-h2", "--microbatches=3"}, "--microbatches"},  // m < 2 pp
      {{"--schedule=dualpipev", "--microbatches=3"}, "--microbatches"},
      {{"--schedule=dualpipe", "--pp=3", "--hidden=64x7"}, "--pp"},  // odd pp
      {{"--schedule=dualpipe", "--microbatches=5"}, "--microbatches"},
      {{"--schedule=zb-v", "--virtual_stages=3"}, "--virtual_stages"},
      {{"--buckets=2"}, "--buckets"},  // gone: bucket_mb replaced it
  };
  for (const Case& c : cases) {
    auto cfg = Load(c.args);
    std::string joined;
    for (const auto& a : c.args) joined += a + " ";
    EXPECT_EQ(cfg.status().code(), absl::StatusCode::kInvalidArgument) << joined;
    EXPECT_THAT(std::string(cfg.status().message()), HasSubstr(c.field)) << joined;
  }
}

// A bound and a value just past it are told apart: with 6 significant digits both read
// "1.04858e+06" ("must be in (0, 1.04858e+06] MiB, got 1.04858e+06").
TEST(Config, OutOfRangeBucketAndWatchdogNameTheExactBoundAndValue) {
  auto cfg = Load({"--bucket_mb=1048577"});
  EXPECT_THAT(std::string(cfg.status().message()),
              HasSubstr("--bucket_mb: must be in (0, 1048576] MiB, got 1048577"));
  cfg = Load({"--bucket_mb=1048576.5"});
  EXPECT_THAT(std::string(cfg.status().message()), HasSubstr("got 1048576.5"));
  cfg = Load({"--bucket_mb=1e-7"});
  EXPECT_THAT(std::string(cfg.status().message()), HasSubstr("--bucket_mb: 1e-07 MiB is less than one fp32"));
  cfg = Load({"--watchdog_timeout=86400.25"});
  EXPECT_THAT(std::string(cfg.status().message()),
              HasSubstr("--watchdog_timeout: must be in (0, 86400] seconds, got 86400.25"));
  // Under half a nanosecond the executor's watchdog is 0 ns: `run --virtual_time
  // --watchdog_timeout=1e-10` said "executor: watchdog_timeout: must be > 0", naming no flag.
  cfg = Load({"--watchdog_timeout=1e-10"});
  EXPECT_THAT(std::string(cfg.status().message()),
              HasSubstr("--watchdog_timeout: must be at least 1 ns (1e-9 s), got 1e-10"));
}

// time_scale's "auto" is stored as -1: a -1 given as a number is out of range in the same words as -2,
// and seed's bound 2^63 - 1 is exact (as doubles, 2^63 equalled it and was taken).
TEST(Config, TimeScaleMinusOneAndSeedTwoToThe63AreOutOfRangeInTheirFieldsWords) {
  auto cfg = Load({"--time_scale=-1"}, /*for_run=*/false);
  EXPECT_THAT(std::string(cfg.status().message()), HasSubstr("--time_scale: must be in [0.0001, 1000] or auto, got -1"));
  const fs::path file = WriteTemp("range.json", "{\n  \"time_scale\": -1\n}\n");
  cfg = Load({"--config=" + file.string()}, /*for_run=*/false);
  EXPECT_THAT(std::string(cfg.status().message()), HasSubstr(":2: time_scale: must be in [0.0001, 1000] or auto, got -1"));
  std::ofstream(file) << "{\"seed\": 9223372036854775808}";
  cfg = Load({"--config=" + file.string()}, /*for_run=*/false);
  EXPECT_EQ(cfg.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(cfg.status().message()),
              HasSubstr("seed: must be in 0..9223372036854775807, got 9223372036854775808"));
  std::ofstream(file) << "{\"seed\": 9223372036854775807}";
  cfg = Load({"--config=" + file.string()}, /*for_run=*/false);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->seed, uint64_t{9223372036854775807});
  fs::remove(file);
}

// The straggler's bound is on a stage's F + B (or the optimizer step) times the factor, 2e9 ms, and the
// message says which and prints the factor as given (it said "1 x the slowest op" for 1.0000001).
TEST(Config, StragglerFactorBoundNamesWhatItMultiplies) {
  const std::vector<std::string> one_device = {"--dp=1", "--pp=1", "--tp=1", "--microbatches=1"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), one_device.begin(), one_device.end());
    return Load(extra, /*for_run=*/false);
  };
  // A 1e9 ms F and a 1e9 ms B (each within its field's bound) with a factor of 1: taken.
  EXPECT_TRUE(with({"--forward_ms=1e9", "--backward_ms=1e9", "--optimizer_ms=0"}).ok());
  // A 1e9 ms F alone times 2 is within the 2e9 ms: taken.
  EXPECT_TRUE(with({"--forward_ms=1e9", "--backward_ms=0", "--optimizer_ms=0", "--straggler_factor=2"}).ok());
  auto cfg = with({"--forward_ms=1e9", "--backward_ms=1e9", "--optimizer_ms=0", "--straggler_factor=1.0000001"});
  EXPECT_THAT(std::string(cfg.status().message()),
              HasSubstr("--straggler_factor: 1.0000001 x the slowest stage's F + B (2e+09 ms) exceeds 2e9 ms"));
  cfg = with({"--forward_ms=1", "--backward_ms=1", "--optimizer_ms=1e9", "--straggler_factor=2.5"});
  EXPECT_THAT(std::string(cfg.status().message()),
              HasSubstr("--straggler_factor: 2.5 x the optimizer step (1e+09 ms) exceeds 2e9 ms"));
}

// lr, momentum and weight_decay are 32-bit floats: a value the float cannot hold is refused as given
// (1e-50 was "lr: must be > 0, got 0", 1e39 "lr: out of range"), and the report's config echoes the
// float as its shortest decimal (0.05, not 0.05000000074505806), which reads back as the same float.
TEST(Config, FloatFieldsAreToldAndEchoedAsGiven) {
  auto cfg = Load({"--lr=1e-50"}, /*for_run=*/false);
  EXPECT_THAT(std::string(cfg.status().message()), HasSubstr("--lr: 1e-50 is 0 as a 32-bit float"));
  cfg = Load({"--weight_decay=1e39"}, /*for_run=*/false);
  EXPECT_THAT(std::string(cfg.status().message()),
              HasSubstr("--weight_decay: must be at most 3.4028235e+38 in magnitude (a 32-bit float), got 1e+39"));
  cfg = Load({"--lr=0.05", "--momentum=0.3"}, /*for_run=*/false);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  const nlohmann::json echo = ConfigToJson(*cfg);
  EXPECT_EQ(echo["lr"].get<double>(), 0.05);
  EXPECT_EQ(echo["momentum"].get<double>(), 0.3);
  RunConfig back = *cfg;
  ASSERT_TRUE(SetField(back, "lr", echo["lr"]).ok());
  EXPECT_EQ(back.optimizer.lr, cfg->optimizer.lr);
}

// --help states the bounds ValidateConfig enforces, and what a 0 default means for every field that has one.
TEST(Config, HelpStatesTheEnforcedBoundsAndWhatZeroMeans) {
  auto defaults = PresetByName("default");
  ASSERT_TRUE(defaults.ok());
  std::map<std::string, FlagSpec> flags;
  for (const FlagSpec& f : ConfigFlags(0, *defaults)) flags.emplace(f.name, f);
  EXPECT_EQ(flags.at("ep_row_bytes").default_text, "0 (derived)");
  EXPECT_EQ(flags.at("segment_bytes").default_text, "0 (one message per chunk)");
  EXPECT_THAT(flags.at("bucket_mb").help, HasSubstr("(0, 1048576]"));
  EXPECT_THAT(flags.at("reduce_gbps").help, HasSubstr("0 (free) or at least 1e-6"));
  EXPECT_THAT(flags.at("ep_row_bytes").help, HasSubstr("a multiple of 4 up to 1G"));
  // Each bound as the help says it.
  EXPECT_TRUE(Load({"--bucket_mb=1048576"}, false).ok());
  EXPECT_FALSE(Load({"--bucket_mb=1048576.001"}, false).ok());
  EXPECT_TRUE(Load({"--reduce_gbps=1e-6"}, false).ok());
  EXPECT_FALSE(Load({"--reduce_gbps=0.9e-6"}, false).ok());
  EXPECT_TRUE(Load({"--ep_row_bytes=1G"}, false).ok());
  EXPECT_FALSE(Load({"--ep_row_bytes=1073741828"}, false).ok());
}

// A link override of both classes overrides the per-class values of the layers before it, as every
// layer overrides the one before: `--preset=s1 --alpha_us=0` was still 20 ms on both links (s1 sets
// intra_alpha_us and inter_alpha_us, which won over alpha_us whatever its layer).
TEST(Config, BothClassLinkOverrideBeatsAnEarlierLayersPerClassValues) {
  auto cfg = Load({"--preset=s1", "--alpha_us=0"}, /*for_run=*/false);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  auto links = ResolveLinks(*cfg);
  ASSERT_TRUE(links.ok());
  EXPECT_EQ(links->intra_node.alpha, FromMicros(0));
  EXPECT_EQ(links->inter_node.alpha, FromMicros(0));
  // s1 sets inter_bandwidth_gbps = 0 (infinite): --bandwidth_gbps reaches the inter-node links too.
  cfg = Load({"--preset=s1", "--bandwidth_gbps=7"}, /*for_run=*/false);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(ResolveLinks(*cfg)->inter_node.bandwidth_gbps, 7);
  // A per-class value of the same layer still wins for its class.
  cfg = Load({"--preset=s1", "--alpha_us=0", "--inter_alpha_us=7"}, /*for_run=*/false);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(ResolveLinks(*cfg)->intra_node.alpha, FromMicros(0));
  EXPECT_EQ(ResolveLinks(*cfg)->inter_node.alpha, FromMicros(7));
  // The file's layer over the preset's, and the flags' per-class value over the file's both-class one.
  const fs::path file = WriteTemp("links.json", R"({"preset": "s1", "alpha_us": 5})");
  cfg = Load({"--config=" + file.string()}, /*for_run=*/false);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(ResolveLinks(*cfg)->intra_node.alpha, FromMicros(5));
  EXPECT_EQ(ResolveLinks(*cfg)->inter_node.alpha, FromMicros(5));
  cfg = Load({"--config=" + file.string(), "--intra_alpha_us=1"}, /*for_run=*/false);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(ResolveLinks(*cfg)->intra_node.alpha, FromMicros(1));
  EXPECT_EQ(ResolveLinks(*cfg)->inter_node.alpha, FromMicros(5));
  // A sweep point's axis is a layer too.
  auto args = ParseSubcommandArgs("predict", {"--preset=s1"});
  ASSERT_TRUE(args.ok());
  cfg = LoadConfigWithOverrides(*args, /*for_run=*/false, {{"alpha_us", 0.0}});
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(ResolveLinks(*cfg)->inter_node.alpha, FromMicros(0));
  fs::remove(file);
}

// Every other range message prints the value as given too: with 6 significant digits a value just past
// its bound read as the bound itself ("flops_efficiency: must be in (0, 1], got 1").
TEST(Config, EveryRangeErrorPrintsTheExactValue) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"--flops_efficiency=1.0000001"}, "--flops_efficiency: must be in (0, 1], got 1.0000001"},
      {{"--cost_model=flops", "--flops_efficiency=1.0000001"}, "got 1.0000001"},
      {{"--time_scale=1000.0001"}, "--time_scale: must be in [0.0001, 1000] or auto, got 1000.0001"},
      {{"--forward_ms=1000000000.5"}, "--forward_ms: entry 1 of 1 is 1000000000.5; must be in [0, 1e9] ms"},
      {{"--backward_ms=4,1000000000.5"}, "--backward_ms: entry 2 of 2 is 1000000000.5; must be in [0, 1e9] ms"},
      {{"--backward_ms=4", "--weight_grad_ms=4.0000001"},
       "--weight_grad_ms: stage 0: 4.0000001 ms is more than its whole backward (4 ms)"},
      {{"--optimizer_ms=1000000000.1"}, "--optimizer_ms: must be in [0, 1e9] ms, got 1000000000.1"},
      {{"--alpha_us=1000000000001"}, "--alpha_us: must be at most 1e12 us, got 1000000000001"},
      {{"--inter_bandwidth_gbps=0.00000099999"}, "got 9.9999e-07"},
      {{"--reduce_gbps=0.00000099999"}, "--reduce_gbps: must be 0 (free) or at least 1e-6 GB/s, got 9.9999e-07"},
  };
  for (const Case& c : cases) {
    auto cfg = Load(c.args, /*for_run=*/false);
    EXPECT_EQ(cfg.status().code(), absl::StatusCode::kInvalidArgument) << c.args[0];
    EXPECT_THAT(std::string(cfg.status().message()), HasSubstr(c.message)) << c.args[0];
  }
}

// `run` takes what the machine's thread limit allows (one thread per device on the virtual clock, two
// on the real clock) and points larger layouts at `predict`.
TEST(Config, RunTakesWhatTheThreadLimitAllowsAndPointsLargerLayoutsAtPredict) {
  ASSERT_EQ(::setenv("RINGPIPE_THREAD_LIMIT", "1064", 1), 0);  // 1000 threads beyond the reserve
  EXPECT_EQ(MaxRunDevices(/*virtual_time=*/true), 1000);
  EXPECT_EQ(MaxRunDevices(/*virtual_time=*/false), 500);
  // 125 x 2 x 2 = 500 devices: fits the real clock; 126 x 2 x 2 = 504 does not, the virtual clock does.
  const std::vector<std::string> small = {"--dp=125", "--hidden=64x5", "--train_size=1024", "--steps=1"};
  std::vector<std::string> big = {"--dp=126", "--hidden=64x5", "--train_size=1024", "--steps=1"};
  EXPECT_TRUE(Load(small).ok()) << Load(small).status();
  auto refused = Load(big);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("--dp: "));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("ringpipe predict"));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("thread limit 1064 from RINGPIPE_THREAD_LIMIT"));
  big.push_back("--virtual_time");
  EXPECT_TRUE(Load(big).ok()) << Load(big).status();
  ASSERT_EQ(::unsetenv("RINGPIPE_THREAD_LIMIT"), 0);
  EXPECT_GE(MachineThreadLimit().threads, 1);
}

TEST(Config, PredictAcceptsLayoutsTooLargeToRun) {
  EXPECT_FALSE(Load({"--dp=1024", "--pp=16", "--tp=1", "--hidden=64x16"}, /*for_run=*/true).ok());
  auto cfg = Load({"--dp=1024", "--pp=16", "--tp=1", "--hidden=64x16"}, /*for_run=*/false);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->world_size(), 16384);
}

// Under the FLOPs cost model a prediction lays its passes over the real MLP's layers but never
// allocates that MLP: a 34-billion-weight --hidden (137 GB of fp32, refused by `run`) plans at once.
// Only a run's plan measures the real MLP (its warm-up sizes).
TEST(Config, FlopsPredictionNeverAllocatesTheRealMlp) {
  const std::vector<std::string> args = {"--cost_model=flops", "--hidden=65536x8", "--tp=2", "--pp=2"};
  auto refused = Load(args, /*for_run=*/true);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(std::string(refused.status().message()).rfind("--hidden: the model has", 0), 0u) << refused.status();
  auto cfg = Load(args, /*for_run=*/false);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  auto plan = BuildPlan(*cfg, /*for_run=*/false);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->executor.warm_stage_stored.empty());
  // A runnable FLOPs config: the run's plan does measure the real MLP, one entry per model stage.
  auto small = Load({"--cost_model=flops", "--hidden=64x8", "--tp=2", "--pp=2"}, /*for_run=*/true);
  ASSERT_TRUE(small.ok()) << small.status();
  auto run_plan = BuildPlan(*small, /*for_run=*/true);
  ASSERT_TRUE(run_plan.ok()) << run_plan.status();
  EXPECT_EQ(run_plan->executor.warm_stage_stored.size(), 2u);
}

TEST(Config, S1PlanIsTheWriteUpsModel) {
  auto cfg = Load({"--preset=s1"});
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  auto plan = BuildPlan(*cfg, /*for_run=*/true);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->executor.cost.stages.size(), 2u);
  EXPECT_EQ(plan->executor.cost.stages[1].forward, FromMillis(50));
  EXPECT_EQ(plan->executor.cost.stages[1].backward, FromMillis(80));
  EXPECT_EQ(plan->executor.segment_bytes, 0u);  // one message per ring step
  EXPECT_EQ(plan->executor.links.inter_node.alpha, FromMillis(20));
  EXPECT_EQ(plan->executor.links.intra_node.alpha, FromMillis(20));  // every transfer: 20 ms
  EXPECT_EQ(plan->executor.links.intra_node.overhead, Nanos(0));
  EXPECT_EQ(plan->executor.bucket_bytes, uint64_t{25} << 20);  // PyTorch DDP's default
  EXPECT_TRUE(plan->executor.overlap_grad_allreduce);
  // The tiny MLP's gradients fit one bucket per device.
  for (const schedule::RankPlan& r : plan->execution.ranks) EXPECT_EQ(r.bucket_order.size(), 1u);
}

TEST(Config, NewFieldsReachTheExecutor) {
  auto cfg = Load({"--nics_per_node=1", "--bucket_mb=0.5", "--overlap=false", "--reduce_gbps=50",
                   "--segment_bytes=64K", "--inter_overhead_us=7", "--watchdog_timeout=2.5", "--link=dgx-h100"});
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  auto plan = BuildPlan(*cfg, /*for_run=*/true);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const schedule::ExecutorOptions& ex = plan->executor;
  EXPECT_EQ(ex.links.nics_per_node, 1);
  EXPECT_EQ(ex.bucket_bytes, uint64_t{1} << 19);
  EXPECT_FALSE(ex.overlap_grad_allreduce);
  EXPECT_EQ(ex.reduce_gbps, 50);
  EXPECT_EQ(ex.segment_bytes, uint64_t{64} << 10);
  EXPECT_EQ(ex.links.inter_node.overhead, FromMicros(7));
  EXPECT_EQ(ex.links.intra_node.overhead, FromMicros(0.4));  // the preset's (NCCL)
  EXPECT_EQ(ex.watchdog_timeout, std::chrono::milliseconds(2500));
  // Default: the presets' cited overheads, one NIC per device, 10 s watchdog.
  cfg = Load({});
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  plan = BuildPlan(*cfg, /*for_run=*/true);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->executor.links.inter_node.overhead, FromMicros(3));
  EXPECT_EQ(plan->executor.links.nics_per_node, 0);
  EXPECT_EQ(plan->executor.watchdog_timeout, std::chrono::seconds(10));
}

TEST(Config, EverySchedulePlansWithItsOptions) {
  for (const char* s : {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "dualpipev", "dualpipe"}) {
    std::vector<std::string> args = {std::string("--schedule=") + s, "--microbatches=8", "--tp=1", "--hidden=64x7"};
    if (std::string(s) == "interleaved") args.push_back("--virtual_stages=2");
    auto cfg = Load(args, /*for_run=*/false);
    ASSERT_TRUE(cfg.ok()) << s << ": " << cfg.status();
    auto plan = BuildPlan(*cfg, /*for_run=*/false);
    ASSERT_TRUE(plan.ok()) << s << ": " << plan.status();
    EXPECT_EQ(plan->executor.program.kind, cfg->schedule) << s;
    const bool two_chunks = std::string(s) == "zb-v" || std::string(s) == "dualpipev" ||
                            std::string(s) == "dualpipe" || std::string(s) == "interleaved";
    EXPECT_EQ(plan->executor.program.num_chunks, two_chunks ? 2 : 1) << s;
  }
  // DualPipe's two directions run over pp model stages; fused F&B or apart.
  for (const char* fused : {"--fused_fb=true", "--fused_fb=false"}) {
    auto cfg = Load({"--schedule=dualpipe", "--microbatches=8", "--tp=1", fused}, false);
    ASSERT_TRUE(cfg.ok()) << cfg.status();
    EXPECT_EQ(cfg->num_model_stages(), 2);
    auto plan = BuildPlan(*cfg, /*for_run=*/false);
    ASSERT_TRUE(plan.ok()) << plan.status();
    bool any_fb = false;
    for (const auto& ops : plan->executor.program.ranks) {
      for (const auto& op : ops) any_fb |= op.kind == schedule::OpKind::kForwardBackward;
    }
    EXPECT_EQ(any_fb, std::string(fused) == "--fused_fb=true");
  }
  // Megatron's group size and PyTorch's rounds.
  auto cfg = Load({"--schedule=interleaved", "--virtual_stages=2", "--microbatches=6", "--microbatch_group=3",
                   "--tp=1", "--hidden=64x7"}, false);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_TRUE(BuildPlan(*cfg, /*for_run=*/false).ok());
  cfg = Load({"--schedule=interleaved", "--virtual_stages=2", "--microbatches=3", "--pytorch_rounds", "--tp=1",
              "--hidden=64x7"}, false);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_TRUE(BuildPlan(*cfg, /*for_run=*/false).ok());
}

}  // namespace
}  // namespace rp::apps
