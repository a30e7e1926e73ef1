// rp::apps::RunConfig and its field table: every config field of `ringpipe run` / `predict` /
// `sweep` / `timeline`, with one name (the flag, the config file's key, the error messages and the
// report's "config" echo), one grammar, a help line, how it reads from JSON and how it is echoed.
//
// A field's entry knows only how to read a value of the right type into the config (a number into an
// int field that holds it, a codec name into a Codec, ...). Ranges and combinations are the
// validation's (apps/config.h): an entry's `lo`/`hi` bound an integer field and ValidateConfig checks
// them, so that "microbatches: 0" is rejected by the same code whether it came from a preset, a file,
// a flag or a sweep axis.
//
// Adding a field: a member of RunConfig, one entry in the table (BuildFieldTable, config_table.cc), its checks in
// ValidateConfig (config.cc) beyond a range; the docs' table (docs/config.md) and the fuzzer's
// dictionary (fuzz/config.dict; a test checks it) name it too.
//
// Thread safety: plain data; the table is built once, immutable, and may be read from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/status.h"
#include "apps/flags.h"
#include "comm/codec.h"
#include "nlohmann/json.hpp"
#include "runtime/link.h"
#include "runtime/model/mlp.h"
#include "runtime/model/optimizer.h"
#include "schedule/program.h"
#include "schedule/workload_cost.h"

namespace rp::apps {

enum class CostModelKind { kFixed, kFlops };
const char* CostModelName(CostModelKind k);  // "fixed", "flops"

// The FLOPs cost model's described transformer (schedule/workload_cost.h has the formulas).
using FlopsModel = schedule::TransformerModel;

// Largest layout `predict` takes; `run`'s limit is the machine's thread limit (apps/host.h,
// MaxRunDevices: one thread per device on the virtual clock, two on the real clock).
inline constexpr int kMaxPredictDevices = 1 << 20;

// The documented ranges of the byte-count fields, as their errors say them (the file's reader for a
// value no byte count can be, ValidateConfig for the rest).
inline constexpr char kSegmentBytesRange[] = "0 (one message per chunk) or a multiple of 4 in [4, 1G]";
inline constexpr char kEpRowBytesRange[] = "0 (derived) or a multiple of 4 up to 1G";

struct RunConfig {
  std::string preset = "default";  // which preset the config started from (echoed in the report)
  std::string config_file;         // "" if none

  // Layout and schedule.
  int dp = 1, pp = 1, tp = 1;
  int microbatches = 1;  // per replica per step
  schedule::ScheduleKind schedule = schedule::ScheduleKind::kOneFOneB;
  int virtual_stages = 1;  // interleaved; zb-v, dualpipev and dualpipe always hold 2 chunks (1 or 2)
  int microbatch_group = 0;     // interleaved: Megatron's group size N (0 = pp)
  bool pytorch_rounds = false;  // interleaved: PyTorch's rounds rule instead (microbatch_group 0)
  bool fused_fb = true;         // dualpipev, dualpipe: an overlapped pair is one F&B op

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

  // Gradient all-reduce and wire format (DESIGN.md "Gradient buckets overlap backward").
  comm::Codec codec = comm::Codec::kFp32;
  // Modeled FP32 bytes per ring message (TP and DP rings); 0 = one message per chunk.
  uint64_t segment_bytes = 0;
  double bucket_mb = 25;  // DDP bucket cap in MiB of modeled gradients (PyTorch's bucket_cap_mb)
  bool overlap = true;    // buckets start inside the last backward (DDP overlap); false: at the optimizer
  double reduce_gbps = 0; // modeled reduction throughput of a ring (0 = free)

  // Links: a preset of runtime/link_models.h (or "ideal") with overrides (unset: keep the preset's).
  // alpha and overhead in µs, bandwidth in GB/s (0 = infinite). ResolveLinks (apps/config.h) gives the
  // LinkSpec.
  std::string link = "ideal";
  int devices_per_node = 8;
  int nics_per_node = 0;  // 0 = one NIC per device (rail-optimized); else a divisor of devices_per_node
  std::optional<double> alpha_us, bandwidth_gbps, overhead_us;
  std::optional<double> intra_alpha_us, intra_bandwidth_gbps, intra_overhead_us;
  std::optional<double> inter_alpha_us, inter_bandwidth_gbps, inter_overhead_us;

  // Emulation.
  // Wall seconds per modeled second on the real clock; kAutoTimeScale (the default, "auto"): the
  // smallest scale this host keeps, measured by short trial runs before the run (apps/clock_choice.h).
  static constexpr double kAutoTimeScale = -1;
  double time_scale = kAutoTimeScale;
  bool time_scale_auto() const { return time_scale == kAutoTimeScale; }
  bool virtual_time = false;  // true: virtual clock (as fast as the host allows; deterministic)
  double watchdog_timeout = 10;  // seconds without progress before a run is failed as stalled
  int steps = 1;
  uint64_t seed = 1;
  int eval_every = 0;         // held-out evaluation every N steps (and after the last); 0: ~10 in all
  int64_t eval_samples = 0;   // held-out samples per evaluation; 0: auto (schedule/executor.h)
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

  // Mixture of experts and expert parallelism (runtime/model/moe.h; apps/moe_config.h resolves and
  // checks them). moe_layers: "" (none), "all", "every:N" or a comma list of layer indices.
  std::string moe_layers;
  int experts = 4;
  int top_k = 1;
  int expert_hidden = 64;
  double capacity_factor = 0;  // 0: dropless
  double aux_loss = 0;
  double router_skew = 0;
  MoeInit moe_init = MoeInit::kHe;  // the experts' W2 init (MoeConfig::init)
  int ep = 1;
  uint64_t ep_row_bytes = 0;  // modeled bytes of one real token row in the EP all-to-all; 0: derived
  comm::Codec ep_codec = comm::Codec::kFp32;  // wire format of the EP token rows (not `codec`'s)

  // Outputs ("" = none).
  std::string report_json;
  std::string trace;

  int world_size() const { return dp * pp * tp; }
  // Chunks per pipeline rank: virtual_stages (interleaved), 2 (zb-v, dualpipev, dualpipe), else 1.
  int chunks() const;
  // Model stages the real model is cut into: pp × chunks, except DualPipe (two directions over the
  // same pp stages: each stage's weights live on two ranks).
  int num_model_stages() const;
  // num_model_stages() and how it follows from the layout, for messages: "8 model stages (pp=4 x 2
  // chunks)", or with DualPipe "4 model stages (pp=4; dualpipe's two directions run over the same stages)".
  std::string ModelStagesText() const;
  // The real model, with the MoE blocks moe_layers names (none if it does not resolve:
  // ValidateConfig reports that).
  MlpConfig Mlp() const;
};

// Which subcommands take a field.
enum FieldScope : unsigned {
  kEveryRun = 0,        // run, predict, sweep, timeline
  kEmulationOnly = 1,   // only an emulated run uses it (not `predict`)
  kOutputFile = 2,      // an output path (not a sweep axis, not `sweep`)
};

struct ConfigField {
  const char* name;
  Grammar grammar;     // of its flag text (a file value may also be a JSON number, array, bool)
  unsigned scope;      // FieldScope bits
  int64_t lo = 0, hi = 0;  // integer fields: the accepted range (checked by ValidateConfig); lo > hi: none
  const char* help;
  const char* unset;   // how --help shows an empty / sentinel default (e.g. "B/2"), or nullptr
  // Reads a JSON value (a file's, or a flag's text converted by FlagTextToJson) into the config.
  // InvalidArgument "<name>: <reason>" for a wrong type or a value the field cannot hold.
  std::function<absl::Status(RunConfig&, const nlohmann::json&)> set;
  std::function<nlohmann::json(const RunConfig&)> get;
};

// Every field, in help order ("preset" and "config" first).
const std::vector<ConfigField>& Fields();
const ConfigField* FindField(absl::string_view name);
// Every field's name, in help order.
const std::vector<std::string>& ConfigFieldNames();

// A flag's text (already valid for the field's grammar) as the JSON value its setter takes: an
// integer, a number, a bool, a string, or an array for the list grammars.
absl::StatusOr<nlohmann::json> FlagTextToJson(const ConfigField& field, absl::string_view text);

// Sets one field from a JSON value. InvalidArgument "<name>: <reason>" for an unknown name or a wrong
// type/value.
[[nodiscard]] absl::Status SetField(RunConfig& cfg, absl::string_view name, const nlohmann::json& value);

// The config as JSON (every field by its name; the "config" section of the report), loadable as a
// config file unchanged: its "config" is null, since the other fields already hold the file's values.
nlohmann::json ConfigToJson(const RunConfig& cfg);

// The flags of the config fields whose scope has none of `exclude`'s bits, with `--help` defaults
// taken from `defaults` (the default preset: what a flag not given means).
std::vector<FlagSpec> ConfigFlags(unsigned exclude, const RunConfig& defaults);

// A JSON value in a message: at most ~80 characters, one line, valid UTF-8 (never throws).
std::string ShortDump(const nlohmann::json& value);

}  // namespace rp::apps
