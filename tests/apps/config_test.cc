// apps/config: presets < config file < flags, field parsing and validation messages.
#include "apps/config.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "apps/cli.h"
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
    auto plan = BuildPlan(*cfg);
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
      {{"--schedule=interleaved", "--microbatches=3"}, "--microbatches"},
      {{"--virtual_stages=2"}, "--virtual_stages"},
      {{"--codec=fp8"}, "--codec"},
      {{"--segment_bytes=6"}, "--segment_bytes"},
      {{"--link=nowhere"}, "--link"},
      {{"--time_scale=0"}, "--time_scale"},
      {{"--layers_per_stage=3"}, "--layers_per_stage"},
      {{"--dp=x"}, "--dp"},
      {{"--cost_model=flops", "--flops_device=tpu"}, "flops_device"},
      {{"--dp=2000"}, "--dp"},  // 8000 devices: run emulates at most 4096
  };
  for (const Case& c : cases) {
    auto cfg = Load(c.args);
    std::string joined;
    for (const auto& a : c.args) joined += a + " ";
    EXPECT_EQ(cfg.status().code(), absl::StatusCode::kInvalidArgument) << joined;
    EXPECT_THAT(std::string(cfg.status().message()), HasSubstr(c.field)) << joined;
  }
}

TEST(Config, PredictAcceptsLayoutsTooLargeToRun) {
  EXPECT_FALSE(Load({"--dp=1024", "--pp=16", "--tp=1", "--hidden=64x16"}, /*for_run=*/true).ok());
  auto cfg = Load({"--dp=1024", "--pp=16", "--tp=1", "--hidden=64x16"}, /*for_run=*/false);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->world_size(), 16384);
}

TEST(Config, S1PlanIsTheWriteUpsModel) {
  auto cfg = Load({"--preset=s1"});
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  auto plan = BuildPlan(*cfg);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->executor.cost.stages.size(), 2u);
  EXPECT_EQ(plan->executor.cost.stages[1].forward, FromMillis(50));
  EXPECT_EQ(plan->executor.cost.stages[1].backward, FromMillis(80));
  EXPECT_EQ(plan->predict.dp_ring.segment_bytes, 0u);  // one message per ring step
  EXPECT_EQ(plan->predict.links.inter_node.alpha, FromMillis(20));
  EXPECT_EQ(plan->predict.links.intra_node.alpha, FromMillis(20));  // every transfer: 20 ms
  // Same rule as the executor's.
  const schedule::PredictOptions ex = schedule::PredictOptionsFor(plan->executor);
  EXPECT_EQ(ex.dp_ring.segment_bytes, plan->predict.dp_ring.segment_bytes);
  EXPECT_EQ(ex.dp_ring.codec, plan->predict.dp_ring.codec);
  EXPECT_EQ(ex.tp_ring.segment_bytes, plan->predict.tp_ring.segment_bytes);
  EXPECT_EQ(ex.tp_ring.codec, plan->predict.tp_ring.codec);
  EXPECT_EQ(ex.links.inter_node.alpha, plan->predict.links.inter_node.alpha);
}

}  // namespace
}  // namespace rp::apps
