// rp::apps::RunConfig: the one validated configuration of a `ringpipe run` / `ringpipe predict`.
//
// A config is built in three layers, each overriding the one before (docs/config.md):
//   1. a named preset (apps/presets.h): `--preset=NAME`, else the config file's "preset" key, else
//      "default";
//   2. a config file (`--config=FILE`): one JSON object whose keys are the flag names below (comments
//      allowed), e.g. {"dp": 2, "forward_ms": [50, 60], "codec": "int8"};
//   3. the flags the user set explicitly on the command line (ParsedArgs::specified).
// Every field has exactly one name, used by the flag, the file key, the error messages and the
// report's "config" echo.
//
// Validation (ValidateConfig) checks everything a run needs before anything runs or is written: sizes,
// per-stage list lengths, the model partition (PP × virtual stages <= layers, widths divisible by TP),
// the schedule's conditions, link and codec names, the output directories. Errors are InvalidArgument
// with one line that starts with the field name ("pp: ...", or "FILE:LINE: key: ..." for a file).
//
// Plan (BuildPlan) turns a valid config into what the lower layers take: the grid, the program of the
// chosen schedule, the cost model and the predictor options. `run` and `predict` build the same plan,
// so `predict` reports exactly what `run` puts in its "predicted" column.
//
// Thread safety: plain data and pure functions. Flag reading (LoadConfig) touches absl's global flags:
// call it from the main thread only.
//
// Example:
//   RP_ASSIGN_OR_RETURN(RunConfig cfg, LoadConfig(args));   // preset < file < flags, validated
//   RP_ASSIGN_OR_RETURN(Plan plan, BuildPlan(cfg));
//   RP_ASSIGN_OR_RETURN(schedule::Prediction pred,
//                       schedule::Predict(plan.program, plan.grid, plan.cost, plan.predict));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "apps/cli.h"
#include "comm/codec.h"
#include "nlohmann/json.hpp"
#include "runtime/link.h"
#include "runtime/model/mlp.h"
#include "runtime/model/optimizer.h"
#include "schedule/cost_model.h"
#include "schedule/executor.h"
#include "schedule/grid.h"
#include "schedule/predictor.h"
#include "schedule/program.h"

namespace rp::apps {

enum class CostModelKind { kFixed, kFlops };
const char* CostModelName(CostModelKind k);  // "fixed", "flops"

// Largest layout `run` emulates (one thread per device); `predict` takes up to kMaxPredictDevices.
inline constexpr int kMaxRunDevices = 4096;
inline constexpr int kMaxPredictDevices = 1 << 20;

// The FLOPs cost model: a transformer the user describes, on a device preset. Per layer and
// micro-batch, forward FLOPs = 24·b·s·h²·(1 + s/(6h)) (Narayanan et al., 2021), backward = 2 × forward,
// of which the weight gradient is half; optimizer free. A pipeline rank holds layers/(pp·v) layers per
// chunk (balanced like the MLP), a TP shard 1/tp of their FLOPs. Time = FLOPs / (peak × efficiency).
// Bytes on the wire follow the described model too (bf16 activations b·s·h·2 bytes between stages;
// fp32 gradients 12h² + 13h parameters per layer; two TP all-reduces of b·s·h per layer each way).
struct FlopsModel {
  std::string device = "a100";  // a100 (312 TFLOPS dense bf16) | h100 (989 TFLOPS dense bf16)
  double efficiency = 0.5;      // fraction of the dense peak reached (model FLOPs utilisation)
  int layers = 24;
  int hidden = 2048;
  int seq_len = 2048;
  int microbatch_size = 1;      // sequences per micro-batch
};

// Dense bf16 peak TFLOPS of a device preset; InvalidArgument naming the accepted names otherwise.
absl::StatusOr<double> DevicePeakTflops(const std::string& device);

struct RunConfig {
  std::string preset = "default";  // which preset the config started from (echoed in the report)
  std::string config_file;         // "" if none

  // Layout and schedule.
  int dp = 1, pp = 1, tp = 1;
  int microbatches = 1;  // per replica per step
  schedule::ScheduleKind schedule = schedule::ScheduleKind::kOneFOneB;
  int virtual_stages = 1;  // interleaved only

  // Cost model.
  CostModelKind cost_model = CostModelKind::kFixed;
  std::vector<double> forward_ms = {1};   // per micro-batch per device; 1 value or one per stage
  std::vector<double> backward_ms = {2};  // whole backward (input + weight gradients)
  std::vector<double> weight_grad_ms;     // part of backward (zb-h1); empty: backward / 2
  double optimizer_ms = 0;
  FlopsModel flops;

  // A straggler (a what-if a sweep can vary): the device of global rank `straggler_rank` runs every
  // compute op `straggler_factor` times slower (1 = none). Emulated and predicted alike.
  int straggler_rank = 0;
  double straggler_factor = 1;

  // Gradient all-reduce and wire format.
  comm::Codec codec = comm::Codec::kFp32;
  uint64_t segment_bytes = 0;  // fp32 bytes per ring segment; 0 = one message per chunk
  int buckets = 1;             // gradient buckets per chunk
  bool overlap_allreduce = true;

  // Links.
  std::string link = "ideal";  // "ideal" or a preset of runtime/link_models.h
  LinkSpec links;              // resolved: the preset with the overrides below applied
  int devices_per_node = 8;
  // Overrides (< 0: keep the preset's). alpha in µs, bandwidth in GB/s (0 = infinite).
  double alpha_us = -1, bandwidth_gbps = -1;
  double intra_alpha_us = -1, intra_bandwidth_gbps = -1;
  double inter_alpha_us = -1, inter_bandwidth_gbps = -1;

  // Emulation.
  double time_scale = 1.0;  // wall seconds per modeled second
  bool virtual_time = false;  // true: virtual clock (as fast as the host allows; deterministic)
  int steps = 1;
  uint64_t seed = 1;
  int eval_every = 0;         // held-out evaluation every N steps (and after the last); 0: ~10 in all
  int64_t eval_samples = 0;   // held-out samples per evaluation; 0: the whole split
  bool reference = true;      // also train the single-device FP32 reference; report the loss gap

  // The real workload (runtime/model/mlp.h, runtime/model/dataset.h, runtime/model/optimizer.h).
  int input_dim = 16;
  std::vector<int> hidden = {64, 64, 64, 64, 64};
  int classes = 10;
  Activation activation = Activation::kRelu;
  std::vector<int> layers_per_stage;  // empty: balanced; else one count per model stage (pp × v)
  int microbatch_size = 32;
  int64_t train_size = 32768;
  int64_t test_size = 4096;
  OptimizerConfig optimizer;

  // Outputs ("" = none).
  std::string report_json;
  std::string trace;

  int world_size() const { return dp * pp * tp; }
  int num_model_stages() const { return pp * virtual_stages; }
  MlpConfig Mlp() const;
};

// Every config field's name, in help order (the flags `run` and `predict` accept, plus "preset" and
// "config").
const std::vector<std::string>& ConfigFieldNames();

// Sets one field from a JSON value (numbers, strings, booleans; lists as arrays, a single number, or a
// comma string). InvalidArgument "<name>: <reason>" for an unknown name or a wrong type/value.
[[nodiscard]] absl::Status SetField(RunConfig& cfg, const std::string& name, const nlohmann::json& value);

// Applies a JSON config file's text (`path` is only used in messages). Errors:
// "PATH:LINE: malformed JSON: ...", "PATH:LINE: KEY: unknown key" / wrong type or value.
[[nodiscard]] absl::Status ApplyConfigText(RunConfig& cfg, const std::string& path,
                                           const std::string& text);

// Checks a config (see the header comment). `for_run`: also the limits of the emulation (world size,
// the real model's partition); `predict` needs the model partition only in the fixed cost model (the
// message and activation sizes come from the real model then).
[[nodiscard]] absl::Status ValidateConfig(RunConfig& cfg, bool for_run);

// The whole pipeline: preset < file < flags, resolved links, validated. `args.specified` says which
// flags the user set.
[[nodiscard]] absl::StatusOr<RunConfig> LoadConfig(const ParsedArgs& args, bool for_run);

// One axis value of a `ringpipe sweep` point: a config field (its flag name) and the value to set.
struct FieldOverride {
  std::string field;
  nlohmann::json value;  // as in a config file (a number, a string, a list)
};

// LoadConfig, with `overrides` set after the flags and before validation (a sweep point's axis values).
// An override of "preset" replaces the preset the config starts from (the file and flags still apply on
// top). Errors: InvalidArgument for bad flags, config file or override values (they do not parse: the
// same for every point, e.g. "microbatches: must be in 1..1048576, got 0"); FailedPrecondition when
// every value parses but ValidateConfig rejects the combination (e.g. "pp: 99 model stages ... but the
// model has only 6 layers") — one bad point of a sweep.
[[nodiscard]] absl::StatusOr<RunConfig> LoadConfigWithOverrides(const ParsedArgs& args, bool for_run,
                                                                const std::vector<FieldOverride>& overrides);

// The config as JSON (every field by its name; the "config" section of the report).
nlohmann::json ConfigToJson(const RunConfig& cfg);

// What the lower layers take, derived from a valid config. `executor` holds the program, the cost
// model, the links and the workload (tracer unset); `predict` are the predictor options the executor
// itself uses for the same options (schedule::PredictOptionsFor's rule: links; DP ring = codec and
// segment_bytes; TP ring = fp32, one message per chunk).
struct Plan {
  schedule::ParallelGrid grid;
  schedule::ExecutorOptions executor;
  schedule::PredictOptions predict;
  std::string cost_description;  // one line for the report, e.g. "fixed: F 50 ms, B 80 ms per ..."
};

[[nodiscard]] absl::StatusOr<Plan> BuildPlan(const RunConfig& cfg);

// Parses "1,2.5,3" into numbers (one or more). InvalidArgument naming `field`.
absl::StatusOr<std::vector<double>> ParseDoubleList(const std::string& field, const std::string& text);
// Parses "64,64,32" or "64x5" (five 64s) or a mix ("128,64x3").
absl::StatusOr<std::vector<int>> ParseIntList(const std::string& field, const std::string& text);

}  // namespace rp::apps
