#include "apps/config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "apps/presets.h"
#include "runtime/link_models.h"
#include "runtime/status_macros.h"
#include "runtime/model/tensor.h"
#include "schedule/generators.h"

// Flags shared with `ringpipe allreduce` (defined in apps/allreduce_cmd.cc). For run/predict, only an
// explicitly given value counts: the preset and the config file supply the rest.
ABSL_DECLARE_FLAG(std::string, codec);
ABSL_DECLARE_FLAG(uint64_t, segment_bytes);
ABSL_DECLARE_FLAG(std::string, link);

// Every run/predict flag is a string: unset flags take the preset's (or the config file's) value,
// and values are parsed by the same code as the config file's, with the same messages.
#define RP_CONFIG_FLAG(name, help) ABSL_FLAG(std::string, name, "", help)
RP_CONFIG_FLAG(preset, "Named starting configuration: default, s1, s2, s3-0d, s3-1d, s3-2d, s3-3d "
                       "(docs/config.md). Unset: the config file's \"preset\", else default.");
RP_CONFIG_FLAG(config, "JSON config file: an object whose keys are these flag names. Overrides the "
                       "preset; flags override it.");
RP_CONFIG_FLAG(dp, "Data-parallel replicas (default preset: 2).");
RP_CONFIG_FLAG(pp, "Pipeline stages (devices per pipeline) (default preset: 2).");
RP_CONFIG_FLAG(tp, "Tensor-parallel shards per stage (default preset: 2).");
RP_CONFIG_FLAG(microbatches, "Micro-batches per replica per step, >= 1 (default preset: 4).");
RP_CONFIG_FLAG(schedule, "Pipeline schedule: gpipe, 1f1b, interleaved or zb-h1 (default preset: 1f1b).");
RP_CONFIG_FLAG(virtual_stages, "Virtual stages (model chunks) per device; > 1 needs "
                               "--schedule=interleaved (default 1).");
RP_CONFIG_FLAG(cost_model, "fixed: --forward_ms/--backward_ms/--weight_grad_ms per stage; flops: "
                           "FLOPs of the model described by --flops_* on --flops_device.");
RP_CONFIG_FLAG(forward_ms, "Forward time of one micro-batch on one device (fixed cost model), ms: one "
                           "value, or a comma list with one value per pipeline stage.");
RP_CONFIG_FLAG(backward_ms, "Whole backward (input + weight gradients) time per micro-batch, ms: one "
                            "value or one per stage.");
RP_CONFIG_FLAG(weight_grad_ms, "Weight-gradient part of the backward (zb-h1's W), ms: one value or one "
                               "per stage. Unset: half the backward.");
RP_CONFIG_FLAG(optimizer_ms, "Optimizer step time per device, ms (default 0).");
RP_CONFIG_FLAG(straggler_rank, "Global rank of a straggler device (with --straggler_factor; default 0).");
RP_CONFIG_FLAG(straggler_factor, "Every compute op of --straggler_rank takes this many times longer, >= 1 "
                                 "(default 1: no straggler). Emulated and predicted; sweepable.");
RP_CONFIG_FLAG(flops_device, "FLOPs cost model: device preset a100 (312 TFLOPS dense bf16) or h100 (989).");
RP_CONFIG_FLAG(flops_efficiency, "FLOPs cost model: fraction of the dense peak reached, (0, 1] (default 0.5).");
RP_CONFIG_FLAG(flops_layers, "FLOPs cost model: transformer layers of the described model (default 24).");
RP_CONFIG_FLAG(flops_hidden, "FLOPs cost model: hidden size (default 2048).");
RP_CONFIG_FLAG(flops_seq_len, "FLOPs cost model: sequence length (default 2048).");
RP_CONFIG_FLAG(flops_microbatch_size, "FLOPs cost model: sequences per micro-batch (default 1).");
RP_CONFIG_FLAG(buckets, "Gradient all-reduce buckets per model chunk, >= 1 (default 1).");
RP_CONFIG_FLAG(overlap_allreduce, "true: a chunk's gradient buckets start right after its last backward "
                                  "(overlapping the rest); false: after the last compute op.");
RP_CONFIG_FLAG(devices_per_node, "Devices per node: decides which links are intra- or inter-node (default 8).");
RP_CONFIG_FLAG(alpha_us, "Override the link latency of both link classes, microseconds.");
RP_CONFIG_FLAG(bandwidth_gbps, "Override the link bandwidth of both link classes, GB/s (0: infinite).");
RP_CONFIG_FLAG(intra_alpha_us, "Override the intra-node link latency, microseconds.");
RP_CONFIG_FLAG(intra_bandwidth_gbps, "Override the intra-node link bandwidth, GB/s (0: infinite).");
RP_CONFIG_FLAG(inter_alpha_us, "Override the inter-node link latency, microseconds.");
RP_CONFIG_FLAG(inter_bandwidth_gbps, "Override the inter-node link bandwidth, GB/s (0: infinite).");
RP_CONFIG_FLAG(time_scale, "Wall seconds per modeled second, > 0 (0.1 runs ten times faster than modeled).");
RP_CONFIG_FLAG(steps, "Training steps, >= 1.");
RP_CONFIG_FLAG(virtual_time, "true: run on a virtual clock (as fast as the host allows, deterministic "
                             "modeled times); false: real time at --time_scale.");
RP_CONFIG_FLAG(eval_every, "Evaluate held-out accuracy every N steps and after the last (0: about 10 "
                           "evaluations per run).");
RP_CONFIG_FLAG(eval_samples, "Held-out samples per evaluation (0: the whole held-out split).");
RP_CONFIG_FLAG(reference, "true: also train the single-device FP32 reference and report the loss gap.");
RP_CONFIG_FLAG(seed, "Seed of the weights and the data set.");
RP_CONFIG_FLAG(input_dim, "Real model: input features (default 16).");
RP_CONFIG_FLAG(hidden, "Real model: hidden layer widths, e.g. 64,64,32 or 64x5 (default 64x5: 6 layers).");
RP_CONFIG_FLAG(classes, "Real model: output classes, >= 2 (default 10).");
RP_CONFIG_FLAG(activation, "Real model: relu or gelu.");
RP_CONFIG_FLAG(layers_per_stage, "Real model: layers of each model stage (pp x virtual_stages counts), "
                                 "e.g. 4,2. Unset: balanced.");
RP_CONFIG_FLAG(microbatch_size, "Real model: samples per micro-batch (default 32).");
RP_CONFIG_FLAG(train_size, "Real data set: training samples (default 32768).");
RP_CONFIG_FLAG(test_size, "Real data set: held-out samples (default 4096).");
RP_CONFIG_FLAG(optimizer, "sgd (with momentum) or adam.");
RP_CONFIG_FLAG(lr, "Learning rate, > 0.");
RP_CONFIG_FLAG(momentum, "SGD momentum, [0, 1).");
RP_CONFIG_FLAG(weight_decay, "Weight decay, >= 0.");
RP_CONFIG_FLAG(report_json, "Write the report as JSON to this path (schema: docs/report.md).");
RP_CONFIG_FLAG(trace, "Write the Chrome/Perfetto trace of the run to this path (run only).");
#undef RP_CONFIG_FLAG

namespace rp::apps {
namespace {

using json = nlohmann::json;

// Messages are one line of printable text: control bytes a user wrote (a key or a value with "\n" or
// "\u0000" in it) are shown as \xNN (found by fuzz/config_fuzzer.cc).
std::string OneLine(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      absl::StrAppend(&out, absl::StrFormat("\\x%02x", u));
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// Sizes ValidateConfig bounds so that BuildPlan fits in memory (see there).
constexpr double kMaxModelFloats = double{1 << 28};
constexpr int64_t kMaxProgramSlots = int64_t{1} << 22;

absl::Status Bad(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(OneLine(field), ": ", OneLine(why)));
}

// --- JSON value readers (a file value, or a flag's text converted by FlagToJson) ---

absl::StatusOr<int64_t> AsInt(const std::string& f, const json& v, int64_t lo, int64_t hi) {
  if (!v.is_number_integer() && !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>())) {
    return Bad(f, absl::StrCat("expected an integer, got ", v.dump()));
  }
  const double d = v.get<double>();
  if (d < static_cast<double>(lo) || d > static_cast<double>(hi)) {
    return Bad(f, absl::StrCat("must be in ", lo, "..", hi, ", got ", v.dump()));
  }
  return v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(d);
}
absl::StatusOr<double> AsDouble(const std::string& f, const json& v) {
  if (!v.is_number()) return Bad(f, absl::StrCat("expected a number, got ", v.dump()));
  const double d = v.get<double>();
  if (!std::isfinite(d)) return Bad(f, "must be finite");
  return d;
}
absl::StatusOr<std::string> AsString(const std::string& f, const json& v) {
  if (!v.is_string()) return Bad(f, absl::StrCat("expected a string, got ", v.dump()));
  return v.get<std::string>();
}
absl::StatusOr<bool> AsBool(const std::string& f, const json& v) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_string()) {
    const std::string s = absl::AsciiStrToLower(v.get<std::string>());
    if (s == "true" || s == "1" || s == "yes") return true;
    if (s == "false" || s == "0" || s == "no") return false;
  }
  return Bad(f, absl::StrCat("expected true or false, got ", v.dump()));
}
absl::StatusOr<std::vector<double>> AsDoubleList(const std::string& f, const json& v) {
  if (v.is_string()) return ParseDoubleList(f, v.get<std::string>());
  if (v.is_number()) return std::vector<double>{v.get<double>()};
  if (!v.is_array() || v.empty()) {
    return Bad(f, absl::StrCat("expected a number or a non-empty list of numbers, got ", v.dump()));
  }
  std::vector<double> out;
  for (size_t i = 0; i < v.size(); ++i) {
    RP_ASSIGN_OR_RETURN(double d, AsDouble(absl::StrCat(f, "[", i, "]"), v[i]));
    out.push_back(d);
  }
  return out;
}
absl::StatusOr<std::vector<int>> AsIntList(const std::string& f, const json& v, bool allow_empty) {
  if (v.is_string()) {
    if (allow_empty && v.get<std::string>().empty()) return std::vector<int>{};
    return ParseIntList(f, v.get<std::string>());
  }
  if (v.is_number()) {
    RP_ASSIGN_OR_RETURN(int64_t x, AsInt(f, v, 1, 1 << 24));
    return std::vector<int>{static_cast<int>(x)};
  }
  if (!v.is_array() || (v.empty() && !allow_empty)) {
    return Bad(f, absl::StrCat("expected a list of integers, got ", v.dump()));
  }
  std::vector<int> out;
  for (size_t i = 0; i < v.size(); ++i) {
    RP_ASSIGN_OR_RETURN(int64_t x, AsInt(absl::StrCat(f, "[", i, "]"), v[i], 1, 1 << 24));
    out.push_back(static_cast<int>(x));
  }
  return out;
}

absl::StatusOr<schedule::ScheduleKind> ParseSchedule(const std::string& f, const std::string& s) {
  for (auto k : {schedule::ScheduleKind::kGPipe, schedule::ScheduleKind::kOneFOneB,
                 schedule::ScheduleKind::kInterleaved, schedule::ScheduleKind::kZeroBubbleH1}) {
    if (s == schedule::ScheduleName(k)) return k;
  }
  return Bad(f, absl::StrCat("unknown schedule '", s, "' (gpipe, 1f1b, interleaved, zb-h1)"));
}

// --- The field table: one entry per config field ---

enum class Type { kInt, kDouble, kBool, kString, kDoubleList, kIntList };

struct Field {
  const char* name;
  Type type;
  std::function<absl::Status(RunConfig&, const json&)> set;
  std::function<json(const RunConfig&)> get;
};

template <typename T>
Field IntField(const char* name, T RunConfig::*member, int64_t lo, int64_t hi) {
  return {name, Type::kInt,
          [=](RunConfig& c, const json& v) -> absl::Status {
            RP_ASSIGN_OR_RETURN(int64_t x, AsInt(name, v, lo, hi));
            c.*member = static_cast<T>(x);
            return absl::OkStatus();
          },
          [=](const RunConfig& c) { return json(c.*member); }};
}

Field DoubleField(const char* name, double RunConfig::*member) {
  return {name, Type::kDouble,
          [=](RunConfig& c, const json& v) -> absl::Status {
            RP_ASSIGN_OR_RETURN(c.*member, AsDouble(name, v));
            return absl::OkStatus();
          },
          [=](const RunConfig& c) { return json(c.*member); }};
}

Field MsListField(const char* name, std::vector<double> RunConfig::*member) {
  return {name, Type::kDoubleList,
          [=](RunConfig& c, const json& v) -> absl::Status {
            if (v.is_array() && v.empty()) {  // [] = unset (weight_grad_ms: half the backward)
              c.*member = {};
              return absl::OkStatus();
            }
            RP_ASSIGN_OR_RETURN(c.*member, AsDoubleList(name, v));
            return absl::OkStatus();
          },
          [=](const RunConfig& c) { return json(c.*member); }};
}

Field StringField(const char* name, std::string RunConfig::*member) {
  return {name, Type::kString,
          [=](RunConfig& c, const json& v) -> absl::Status {
            RP_ASSIGN_OR_RETURN(c.*member, AsString(name, v));
            return absl::OkStatus();
          },
          [=](const RunConfig& c) { return json(c.*member); }};
}

template <typename Get, typename Set>
Field Custom(const char* name, Type type, Set set, Get get) {
  return {name, type, set, get};
}

const std::vector<Field>& Fields() {
  static const std::vector<Field>* fields = new std::vector<Field>{
      Custom("preset", Type::kString,
             [](RunConfig& c, const json& v) -> absl::Status {
               RP_ASSIGN_OR_RETURN(c.preset, AsString("preset", v));
               return absl::OkStatus();
             },
             [](const RunConfig& c) { return json(c.preset); }),
      StringField("config", &RunConfig::config_file),
      IntField("dp", &RunConfig::dp, 1, kMaxPredictDevices),
      IntField("pp", &RunConfig::pp, 1, kMaxPredictDevices),
      IntField("tp", &RunConfig::tp, 1, kMaxPredictDevices),
      IntField("microbatches", &RunConfig::microbatches, 1, 1 << 20),
      Custom("schedule", Type::kString,
             [](RunConfig& c, const json& v) -> absl::Status {
               RP_ASSIGN_OR_RETURN(std::string s, AsString("schedule", v));
               RP_ASSIGN_OR_RETURN(c.schedule, ParseSchedule("schedule", s));
               return absl::OkStatus();
             },
             [](const RunConfig& c) { return json(schedule::ScheduleName(c.schedule)); }),
      IntField("virtual_stages", &RunConfig::virtual_stages, 1, 1024),
      Custom("cost_model", Type::kString,
             [](RunConfig& c, const json& v) -> absl::Status {
               RP_ASSIGN_OR_RETURN(std::string s, AsString("cost_model", v));
               if (s == "fixed") {
                 c.cost_model = CostModelKind::kFixed;
               } else if (s == "flops") {
                 c.cost_model = CostModelKind::kFlops;
               } else {
                 return Bad("cost_model", absl::StrCat("unknown cost model '", s, "' (fixed, flops)"));
               }
               return absl::OkStatus();
             },
             [](const RunConfig& c) { return json(CostModelName(c.cost_model)); }),
      MsListField("forward_ms", &RunConfig::forward_ms),
      MsListField("backward_ms", &RunConfig::backward_ms),
      MsListField("weight_grad_ms", &RunConfig::weight_grad_ms),
      DoubleField("optimizer_ms", &RunConfig::optimizer_ms),
      IntField("straggler_rank", &RunConfig::straggler_rank, 0, kMaxPredictDevices),
      DoubleField("straggler_factor", &RunConfig::straggler_factor),
      Custom("flops_device", Type::kString,
             [](RunConfig& c, const json& v) -> absl::Status {
               RP_ASSIGN_OR_RETURN(std::string s, AsString("flops_device", v));
               c.flops.device = absl::AsciiStrToLower(s);
               return absl::OkStatus();
             },
             [](const RunConfig& c) { return json(c.flops.device); }),
      Custom("flops_efficiency", Type::kDouble,
             [](RunConfig& c, const json& v) -> absl::Status {
               RP_ASSIGN_OR_RETURN(c.flops.efficiency, AsDouble("flops_efficiency", v));
               return absl::OkStatus();
             },
             [](const RunConfig& c) { return json(c.flops.efficiency); }),
      Custom("flops_layers", Type::kInt,
             [](RunConfig& c, const json& v) -> absl::Status {
               RP_ASSIGN_OR_RETURN(int64_t x, AsInt("flops_layers", v, 1, 1 << 20));
               c.flops.layers = static_cast<int>(x);
               return absl::OkStatus();
             },
             [](const RunConfig& c) { return json(c.flops.layers); }),
      Custom("flops_hidden", Type::kInt,
             [](RunConfig& c, const json& v) -> absl::Status {
               RP_ASSIGN_OR_RETURN(int64_t x, AsInt("flops_hidden", v, 1, 1 << 24));
               c.flops.hidden = static_cast<int>(x);
               return absl::OkStatus();
             },
             [](const RunConfig& c) { return json(c.flops.hidden); }),
      Custom("flops_seq_len", Type::kInt,
             [](RunConfig& c, const json& v) -> absl::Status {
               RP_ASSIGN_OR_RETURN(int64_t x, AsInt("flops_seq_len", v, 1, 1 << 24));
               c.flops.seq_len = static_cast<int>(x);
               return absl::OkStatus();
             },
             [](const RunConfig& c) { return json(c.flops.seq_len); }),
      Custom("flops_microbatch_size", Type::kInt,
             [](RunConfig& c, const json& v) -> absl::Status {
               RP_ASSIGN_OR_RETURN(int64_t x, AsInt("flops_microbatch_size", v, 1, 1 << 20));
               c.flops.microbatch_size = static_cast<int>(x);
               return absl::OkStatus();
             },
             [](const RunConfig& c) { return json(c.flops.microbatch_size); }),
      Custom("codec", Type::kString,
             [](RunConfig& c, const json& v) -> absl::Status {
               RP_ASSIGN_OR_RETURN(std::string s, AsString("codec", v));
               auto codec = comm::ParseCodec(s);
               if (!codec.ok()) return Bad("codec", std::string(codec.status().message()));
               c.codec = *codec;
               return absl::OkStatus();
             },
             [](const RunConfig& c) { return json(comm::CodecName(c.codec)); }),
      IntField("segment_bytes", &RunConfig::segment_bytes, 0, int64_t{1} << 40),
      IntField("buckets", &RunConfig::buckets, 1, 1 << 16),
      Custom("overlap_allreduce", Type::kBool,
             [](RunConfig& c, const json& v) -> absl::Status {
               RP_ASSIGN_OR_RETURN(c.overlap_allreduce, AsBool("overlap_allreduce", v));
               return absl::OkStatus();
             },
             [](const RunConfig& c) { return json(c.overlap_allreduce); }),
      StringField("link", &RunConfig::link),
      IntField("devices_per_node", &RunConfig::devices_per_node, 1, 1 << 20),
      DoubleField("alpha_us", &RunConfig::alpha_us),
      DoubleField("bandwidth_gbps", &RunConfig::bandwidth_gbps),
      DoubleField("intra_alpha_us", &RunConfig::intra_alpha_us),
      DoubleField("intra_bandwidth_gbps", &RunConfig::intra_bandwidth_gbps),
      DoubleField("inter_alpha_us", &RunConfig::inter_alpha_us),
      DoubleField("inter_bandwidth_gbps", &RunConfig::inter_bandwidth_gbps),
      DoubleField("time_scale", &RunConfig::time_scale),
      IntField("steps", &RunConfig::steps, 1, 1 << 24),
      Custom("virtual_time", Type::kBool,
             [](RunConfig& c, const json& v) -> absl::Status {
               RP_ASSIGN_OR_RETURN(c.virtual_time, AsBool("virtual_time", v));
               return absl::OkStatus();
             },
             [](const RunConfig& c) { return json(c.virtual_time); }),
      IntField("eval_every", &RunConfig::eval_every, 0, 1 << 24),
      IntField("eval_samples", &RunConfig::eval_samples, 0, int64_t{1} << 30),
      Custom("reference", Type::kBool,
             [](RunConfig& c, const json& v) -> absl::Status {
               RP_ASSIGN_OR_RETURN(c.reference, AsBool("reference", v));
               return absl::OkStatus();
             },
             [](const RunConfig& c) { return json(c.reference); }),
      IntField("seed", &RunConfig::seed, 0, std::numeric_limits<int64_t>::max()),
      IntField("input_dim", &RunConfig::input_dim, 1, 1 << 20),
      Custom("hidden", Type::kIntList,
             [](RunConfig& c, const json& v) -> absl::Status {
               RP_ASSIGN_OR_RETURN(c.hidden, AsIntList("hidden", v, /*allow_empty=*/true));
               return absl::OkStatus();
             },
             [](const RunConfig& c) { return json(c.hidden); }),
      IntField("classes", &RunConfig::classes, 2, 1 << 20),
      Custom("activation", Type::kString,
             [](RunConfig& c, const json& v) -> absl::Status {
               RP_ASSIGN_OR_RETURN(std::string s, AsString("activation", v));
               if (s == "relu") {
                 c.activation = Activation::kRelu;
               } else if (s == "gelu") {
                 c.activation = Activation::kGelu;
               } else {
                 return Bad("activation", absl::StrCat("unknown activation '", s, "' (relu, gelu)"));
               }
               return absl::OkStatus();
             },
             [](const RunConfig& c) { return json(std::string(ActivationName(c.activation))); }),
      Custom("layers_per_stage", Type::kIntList,
             [](RunConfig& c, const json& v) -> absl::Status {
               RP_ASSIGN_OR_RETURN(c.layers_per_stage,
                                   AsIntList("layers_per_stage", v, /*allow_empty=*/true));
               return absl::OkStatus();
             },
             [](const RunConfig& c) { return json(c.layers_per_stage); }),
      IntField("microbatch_size", &RunConfig::microbatch_size, 1, 1 << 20),
      IntField("train_size", &RunConfig::train_size, 1, int64_t{1} << 30),
      IntField("test_size", &RunConfig::test_size, 1, int64_t{1} << 30),
      Custom("optimizer", Type::kString,
             [](RunConfig& c, const json& v) -> absl::Status {
               RP_ASSIGN_OR_RETURN(std::string s, AsString("optimizer", v));
               if (s == "sgd") {
                 c.optimizer.kind = OptimizerKind::kSgdMomentum;
               } else if (s == "adam") {
                 c.optimizer.kind = OptimizerKind::kAdam;
               } else {
                 return Bad("optimizer", absl::StrCat("unknown optimizer '", s, "' (sgd, adam)"));
               }
               return absl::OkStatus();
             },
             [](const RunConfig& c) {
               return json(c.optimizer.kind == OptimizerKind::kAdam ? "adam" : "sgd");
             }),
      Custom("lr", Type::kDouble,
             [](RunConfig& c, const json& v) -> absl::Status {
               RP_ASSIGN_OR_RETURN(double d, AsDouble("lr", v));
               c.optimizer.lr = static_cast<float>(d);
               return absl::OkStatus();
             },
             [](const RunConfig& c) { return json(c.optimizer.lr); }),
      Custom("momentum", Type::kDouble,
             [](RunConfig& c, const json& v) -> absl::Status {
               RP_ASSIGN_OR_RETURN(double d, AsDouble("momentum", v));
               c.optimizer.momentum = static_cast<float>(d);
               return absl::OkStatus();
             },
             [](const RunConfig& c) { return json(c.optimizer.momentum); }),
      Custom("weight_decay", Type::kDouble,
             [](RunConfig& c, const json& v) -> absl::Status {
               RP_ASSIGN_OR_RETURN(double d, AsDouble("weight_decay", v));
               c.optimizer.weight_decay = static_cast<float>(d);
               return absl::OkStatus();
             },
             [](const RunConfig& c) { return json(c.optimizer.weight_decay); }),
      StringField("report_json", &RunConfig::report_json),
      StringField("trace", &RunConfig::trace),
  };
  return *fields;
}

const Field* FindField(const std::string& name) {
  for (const Field& f : Fields()) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

// A flag's text as the JSON value its field's setter takes.
absl::StatusOr<json> FlagToJson(const Field& f, const std::string& text) {
  const std::string name = absl::StrCat("--", f.name);
  switch (f.type) {
    case Type::kInt: {
      int64_t x;
      if (!absl::SimpleAtoi(text, &x)) return Bad(name, absl::StrCat("expected an integer, got '", text, "'"));
      return json(x);
    }
    case Type::kDouble: {
      double d;
      if (!absl::SimpleAtod(text, &d)) return Bad(name, absl::StrCat("expected a number, got '", text, "'"));
      return json(d);
    }
    case Type::kBool:
    case Type::kString:
    case Type::kDoubleList:
    case Type::kIntList:
      return json(text);
  }
  return json(text);
}

int LineOf(const std::string& text, size_t offset) {
  return 1 + static_cast<int>(std::count(text.begin(),
                                         text.begin() + static_cast<ptrdiff_t>(std::min(offset, text.size())),
                                         '\n'));
}

// The line where `key` first appears as an object key (a string literal followed by ':'), outside
// comments; the literal is decoded, so an escaped key ("\u0041") is found too. 0 if not found.
int LineOfKey(const std::string& text, const std::string& key) {
  size_t i = 0;
  while (i < text.size()) {
    if (text.compare(i, 2, "//") == 0) {  // ends as nlohmann's does: at '\n', '\r' or a NUL byte
      i = text.find_first_of(std::string_view("\n\r\0", 3), i);
      if (i == std::string::npos) return 0;
      continue;
    }
    if (text.compare(i, 2, "/*") == 0) {
      i = text.find("*/", i + 2);
      if (i == std::string::npos) return 0;
      i += 2;
      continue;
    }
    if (text[i] != '"') {
      ++i;
      continue;
    }
    size_t end = i + 1;  // one past the closing quote
    while (end < text.size() && text[end] != '"') end += text[end] == '\\' ? 2 : 1;
    if (end >= text.size()) return 0;
    ++end;
    size_t after = end;
    while (after < text.size() && std::isspace(static_cast<unsigned char>(text[after]))) ++after;
    if (after < text.size() && text[after] == ':') {
      const json literal = json::parse(text.begin() + static_cast<ptrdiff_t>(i),
                                       text.begin() + static_cast<ptrdiff_t>(end), nullptr,
                                       /*allow_exceptions=*/false);
      if (literal.is_string() && literal.get_ref<const std::string&>() == key) return LineOf(text, i);
    }
    i = end;
  }
  return 0;
}

absl::Status ResolveLinks(RunConfig& cfg) {
  auto spec = LinkSpecByName(cfg.link);
  if (!spec.ok()) return Bad("link", std::string(spec.status().message()));
  LinkSpec s = *spec;
  s.devices_per_node = cfg.devices_per_node;
  auto apply = [](const char* field, double alpha_us, double gbps, LinkParams& p) -> absl::Status {
    if (alpha_us >= 0) p.alpha = FromMicros(alpha_us);
    if (gbps >= 0) p.bandwidth_gbps = gbps;
    (void)field;
    return absl::OkStatus();
  };
  for (auto [name, v] : {std::pair{"alpha_us", cfg.alpha_us}, {"bandwidth_gbps", cfg.bandwidth_gbps},
                         {"intra_alpha_us", cfg.intra_alpha_us},
                         {"intra_bandwidth_gbps", cfg.intra_bandwidth_gbps},
                         {"inter_alpha_us", cfg.inter_alpha_us},
                         {"inter_bandwidth_gbps", cfg.inter_bandwidth_gbps}}) {
    // -1 is "unset"; any other negative value is a mistake.
    if (v < 0 && v != -1) return Bad(name, "must be >= 0");
  }
  RP_RETURN_IF_ERROR(apply("", cfg.alpha_us, cfg.bandwidth_gbps, s.intra_node));
  RP_RETURN_IF_ERROR(apply("", cfg.alpha_us, cfg.bandwidth_gbps, s.inter_node));
  RP_RETURN_IF_ERROR(apply("intra", cfg.intra_alpha_us, cfg.intra_bandwidth_gbps, s.intra_node));
  RP_RETURN_IF_ERROR(apply("inter", cfg.inter_alpha_us, cfg.inter_bandwidth_gbps, s.inter_node));
  cfg.links = s;
  return absl::OkStatus();
}

absl::Status CheckPerStage(const char* field, const std::vector<double>& v, int pp, bool allow_empty) {
  if (v.empty()) {
    if (allow_empty) return absl::OkStatus();
    return Bad(field, "needs one value or one per pipeline stage");
  }
  if (v.size() != 1 && v.size() != static_cast<size_t>(pp)) {
    return Bad(field, absl::StrCat("has ", v.size(), " values; expected 1 or one per pipeline stage (pp=",
                                   pp, ")"));
  }
  for (size_t i = 0; i < v.size(); ++i) {
    if (!(v[i] >= 0) || v[i] > 1e9) {
      return Bad(field, absl::StrCat("value ", i, " (", v[i], ") must be in [0, 1e9] ms"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckOutputPath(const char* field, const std::string& path) {
  if (path.empty()) return absl::OkStatus();
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path parent = fs::path(path).parent_path();
  if (parent.empty()) parent = ".";
  if (!fs::is_directory(parent, ec)) {
    return Bad(field, absl::StrCat("directory '", parent.string(), "' of '", path, "' does not exist"));
  }
  if (fs::is_directory(path, ec)) return Bad(field, absl::StrCat("'", path, "' is a directory"));
  return absl::OkStatus();
}

double Ms(Nanos t) { return ToMillis(t); }

schedule::Codec ToCostCodec(comm::Codec c) {
  switch (c) {
    case comm::Codec::kFp32: return schedule::Codec::kFp32;
    case comm::Codec::kFp16: return schedule::Codec::kFp16;
    case comm::Codec::kBf16: return schedule::Codec::kBf16;
    case comm::Codec::kInt8: return schedule::Codec::kInt8;
  }
  return schedule::Codec::kFp32;
}

}  // namespace

const char* CostModelName(CostModelKind k) { return k == CostModelKind::kFlops ? "flops" : "fixed"; }

absl::StatusOr<double> DevicePeakTflops(const std::string& device) {
  if (device == "a100") return 312.0;
  if (device == "h100") return 989.0;
  return Bad("flops_device", absl::StrCat("unknown device '", device, "' (a100, h100)"));
}

MlpConfig RunConfig::Mlp() const {
  MlpConfig m;
  m.input_dim = input_dim;
  m.hidden = hidden;
  m.classes = classes;
  m.activation = activation;
  m.seed = seed;
  return m;
}

absl::StatusOr<std::vector<double>> ParseDoubleList(const std::string& field, const std::string& text) {
  std::vector<double> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    part = absl::StripAsciiWhitespace(part);
    double d;
    if (!absl::SimpleAtod(part, &d) || !std::isfinite(d)) {
      return Bad(field, absl::StrCat("'", text, "' is not a number or a comma list of numbers"));
    }
    out.push_back(d);
  }
  return out;
}

absl::StatusOr<std::vector<int>> ParseIntList(const std::string& field, const std::string& text) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    part = absl::StripAsciiWhitespace(part);
    int value = 0, repeat = 1;
    bool ok;
    if (size_t x = part.find('x'); x != absl::string_view::npos) {
      ok = absl::SimpleAtoi(part.substr(0, x), &value) && absl::SimpleAtoi(part.substr(x + 1), &repeat);
    } else {
      ok = absl::SimpleAtoi(part, &value);
    }
    if (!ok || value < 1 || repeat < 1 || repeat > 4096) {
      return Bad(field, absl::StrCat("'", text, "' is not a comma list of positive integers "
                                                "(WIDTHxCOUNT repeats a width)"));
    }
    for (int i = 0; i < repeat; ++i) out.push_back(value);
  }
  return out;
}

const std::vector<std::string>& ConfigFieldNames() {
  static const std::vector<std::string>* names = [] {
    auto* v = new std::vector<std::string>;
    for (const Field& f : Fields()) v->emplace_back(f.name);
    return v;
  }();
  return *names;
}

absl::Status SetField(RunConfig& cfg, const std::string& name, const json& value) {
  const Field* f = FindField(name);
  if (f == nullptr) return Bad(name, "unknown key");
  return f->set(cfg, value);
}

absl::Status ApplyConfigText(RunConfig& cfg, const std::string& path, const std::string& text) {
  json doc;
  try {
    doc = json::parse(text, nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 3, column 5: syntax error ..." → the tail.
    if (size_t colon = what.find(": "); colon != std::string::npos) what = what.substr(colon + 2);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ":", LineOf(text, e.byte > 0 ? e.byte - 1 : 0), ": malformed JSON: ", OneLine(what)));
  } catch (const json::exception& e) {
    // Not a syntax error but still the parser's: "[json.exception.out_of_range.406] number overflow
    // parsing '1e400'" (found by fuzz/config_fuzzer.cc). The line is that of the quoted token.
    std::string what = e.what();
    size_t token_at = 0;
    if (size_t q = what.find('\''); q != std::string::npos) {
      const std::string token = what.substr(q + 1, what.rfind('\'') - q - 1);
      if (size_t at = token.empty() ? std::string::npos : text.find(token); at != std::string::npos) token_at = at;
    }
    if (size_t bracket = what.find("] "); bracket != std::string::npos) what = what.substr(bracket + 2);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ":", LineOf(text, token_at), ": malformed JSON: ", OneLine(what)));
  }
  if (!doc.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ":1: expected a JSON object of config keys, got ", doc.type_name()));
  }
  for (const auto& [key, value] : doc.items()) {
    absl::Status st = key == "config" ? Bad(key, "a config file cannot name another config file")
                                      : SetField(cfg, key, value);
    if (!st.ok()) {
      std::string msg(st.message());
      if (FindField(key) == nullptr) msg = absl::StrCat(OneLine(key), ": unknown key (the keys are the flag names of `ringpipe run --help`)");
      return absl::InvalidArgumentError(absl::StrCat(path, ":", LineOfKey(text, key), ": ", msg));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateConfig(RunConfig& cfg, bool for_run) {
  const int64_t world = int64_t{cfg.dp} * cfg.pp * cfg.tp;
  for (auto [name, v] : {std::pair{"dp", cfg.dp}, {"pp", cfg.pp}, {"tp", cfg.tp},
                         {"microbatches", cfg.microbatches}, {"virtual_stages", cfg.virtual_stages},
                         {"steps", cfg.steps}, {"buckets", cfg.buckets},
                         {"microbatch_size", cfg.microbatch_size}, {"devices_per_node", cfg.devices_per_node}}) {
    if (v < 1) return Bad(name, absl::StrCat("must be >= 1, got ", v));
  }
  const int64_t max_world = for_run ? kMaxRunDevices : kMaxPredictDevices;
  if (world > max_world) {
    return Bad("dp", absl::StrCat("dp x pp x tp = ", world, " devices; `ringpipe ", for_run ? "run" : "predict",
                                  "` takes at most ", max_world,
                                  for_run ? " (use `ringpipe predict` for larger layouts)" : ""));
  }
  if (cfg.virtual_stages > 1 && cfg.schedule != schedule::ScheduleKind::kInterleaved) {
    return Bad("virtual_stages", absl::StrCat(cfg.virtual_stages, " needs --schedule=interleaved (schedule is ",
                                              schedule::ScheduleName(cfg.schedule), ")"));
  }
  if (cfg.schedule == schedule::ScheduleKind::kInterleaved && cfg.microbatches % cfg.pp != 0) {
    return Bad("microbatches", absl::StrCat("the interleaved schedule needs a multiple of pp=", cfg.pp,
                                            ", got ", cfg.microbatches));
  }
  // The schedule program holds a few ops per (pipeline rank, model chunk, micro-batch): bound it, or
  // `predict --pp=1048576 --microbatches=1048576` runs out of memory (a crafted input run through fuzz/config_fuzzer).
  if (const int64_t slots = int64_t{cfg.pp} * cfg.virtual_stages * cfg.microbatches; slots > kMaxProgramSlots) {
    return Bad("microbatches", absl::StrCat("pp x virtual_stages x microbatches = ", slots, "; at most ",
                                            kMaxProgramSlots, " (the schedule program must fit in memory)"));
  }
  if (!(cfg.time_scale > 0) || cfg.time_scale > 1000) {
    return Bad("time_scale", absl::StrCat("must be in (0, 1000], got ", cfg.time_scale));
  }
  if (cfg.segment_bytes % 4 != 0) {
    return Bad("segment_bytes", absl::StrCat("must be a multiple of 4 (fp32 elements), got ", cfg.segment_bytes));
  }
  RP_RETURN_IF_ERROR(ResolveLinks(cfg));

  // Cost model.
  if (cfg.cost_model == CostModelKind::kFixed) {
    RP_RETURN_IF_ERROR(CheckPerStage("forward_ms", cfg.forward_ms, cfg.pp, false));
    RP_RETURN_IF_ERROR(CheckPerStage("backward_ms", cfg.backward_ms, cfg.pp, false));
    RP_RETURN_IF_ERROR(CheckPerStage("weight_grad_ms", cfg.weight_grad_ms, cfg.pp, true));
    for (int s = 0; s < cfg.pp && !cfg.weight_grad_ms.empty(); ++s) {
      const double w = cfg.weight_grad_ms.size() == 1 ? cfg.weight_grad_ms[0] : cfg.weight_grad_ms[s];
      const double b = cfg.backward_ms.size() == 1 ? cfg.backward_ms[0] : cfg.backward_ms[s];
      if (w > b) {
        return Bad("weight_grad_ms", absl::StrCat("stage ", s, ": ", w, " ms is more than its whole backward (",
                                                  b, " ms)"));
      }
    }
  } else {
    RP_RETURN_IF_ERROR(DevicePeakTflops(cfg.flops.device).status());
    if (!(cfg.flops.efficiency > 0 && cfg.flops.efficiency <= 1)) {
      return Bad("flops_efficiency", absl::StrCat("must be in (0, 1], got ", cfg.flops.efficiency));
    }
    if (cfg.flops.layers < cfg.num_model_stages()) {
      return Bad("pp", absl::StrCat(cfg.num_model_stages(), " model stages (pp=", cfg.pp, " x virtual_stages=",
                                    cfg.virtual_stages, ") but the described model has flops_layers=",
                                    cfg.flops.layers));
    }
    if (cfg.flops.hidden % cfg.tp != 0) {
      return Bad("tp", absl::StrCat("flops_hidden=", cfg.flops.hidden, " is not divisible by tp=", cfg.tp));
    }
  }
  if (!(cfg.optimizer_ms >= 0)) return Bad("optimizer_ms", "must be >= 0");
  if (!(cfg.straggler_factor >= 1) || !std::isfinite(cfg.straggler_factor)) {
    return Bad("straggler_factor", "must be a finite number >= 1");
  }
  if (cfg.straggler_rank >= cfg.world_size()) {
    return Bad("straggler_rank", absl::StrCat("must be below the world size ", cfg.world_size()));
  }

  // The real model: needed by `run`, and by `predict` in the fixed cost model (message sizes).
  if (for_run || cfg.cost_model == CostModelKind::kFixed) {
    const MlpConfig mlp = cfg.Mlp();
    if (absl::Status st = ValidateMlpConfig(mlp); !st.ok()) return st;
    // BuildPlan allocates the model's weights and one micro-batch's activations to size the
    // messages: bound both, or a valid-looking --hidden=16777216x2 aborts in operator new (a crafted
    // input run through fuzz/config_fuzzer). Counted in double: the product of huge widths overflows int64.
    double weights = 0, widest = mlp.input_dim;
    for (int l = 0; l < mlp.num_layers(); ++l) {
      weights += static_cast<double>(mlp.in_dim(l)) * mlp.out_dim(l);
      widest = std::max<double>(widest, mlp.out_dim(l));
    }
    if (weights > kMaxModelFloats) {
      return Bad("hidden", absl::StrFormat("the model has %.0f weights; at most %.0f (1 GiB of fp32)", weights,
                                           kMaxModelFloats));
    }
    if (widest * cfg.microbatch_size > kMaxModelFloats) {
      return Bad("microbatch_size", absl::StrFormat("%d rows x the widest layer (%.0f) = %.0f activations; at "
                                                    "most %.0f (1 GiB of fp32)",
                                                    cfg.microbatch_size, widest, widest * cfg.microbatch_size,
                                                    kMaxModelFloats));
    }
    if (cfg.num_model_stages() > mlp.num_layers()) {
      return Bad("pp", absl::StrCat(cfg.num_model_stages(), " model stages (pp=", cfg.pp, " x virtual_stages=",
                                    cfg.virtual_stages, ") but the model has only ", mlp.num_layers(),
                                    " layers (--hidden has ", cfg.hidden.size(), " widths)"));
    }
    if (!cfg.layers_per_stage.empty() &&
        cfg.layers_per_stage.size() != static_cast<size_t>(cfg.num_model_stages())) {
      return Bad("layers_per_stage", absl::StrCat("has ", cfg.layers_per_stage.size(),
                                                  " entries; expected one per model stage (pp x virtual_stages = ",
                                                  cfg.num_model_stages(), ")"));
    }
    auto part = PartitionMlp(mlp, cfg.num_model_stages(), cfg.tp, cfg.layers_per_stage);
    if (!part.ok()) {
      const std::string msg(part.status().message());
      const char* field = msg.find("tp") != std::string::npos ? "tp"
                          : msg.find("layers_per_stage") != std::string::npos ? "layers_per_stage"
                                                                              : "hidden";
      return Bad(field, msg);
    }
    if (absl::Status st = ValidateOptimizerConfig(cfg.optimizer); !st.ok()) return st;
    if (cfg.train_size < cfg.microbatch_size) {
      return Bad("train_size", absl::StrCat(cfg.train_size, " is smaller than one micro-batch (",
                                            cfg.microbatch_size, ")"));
    }
  }
  RP_RETURN_IF_ERROR(CheckOutputPath("report_json", cfg.report_json));
  RP_RETURN_IF_ERROR(CheckOutputPath("trace", cfg.trace));
  return absl::OkStatus();
}

absl::StatusOr<RunConfig> LoadConfig(const ParsedArgs& args, bool for_run) {
  auto cfg = LoadConfigWithOverrides(args, for_run, {});
  if (!cfg.ok() && cfg.status().code() == absl::StatusCode::kFailedPrecondition) {
    return absl::InvalidArgumentError(cfg.status().message());
  }
  return cfg;
}

absl::StatusOr<RunConfig> LoadConfigWithOverrides(const ParsedArgs& args, bool for_run,
                                                  const std::vector<FieldOverride>& overrides) {
  // The flags given, as JSON values (parsed first, so a bad flag is reported even with a bad file).
  std::vector<std::pair<const Field*, json>> given;
  for (const Field& f : Fields()) {
    if (!args.specified.contains(f.name)) continue;
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(f.name);
    if (flag == nullptr) return absl::InternalError(absl::StrCat("no flag --", f.name));
    RP_ASSIGN_OR_RETURN(json v, FlagToJson(f, flag->CurrentValue()));
    given.emplace_back(&f, std::move(v));
  }
  auto flag_value = [&](const char* name) -> const json* {
    for (const auto& [f, v] : given) {
      if (std::string(f->name) == name) return &v;
    }
    return nullptr;
  };

  // The config file's text (the preset may come from it).
  std::string file, text;
  json file_doc;
  if (const json* c = flag_value("config")) {
    file = c->get<std::string>();
    std::ifstream in(file, std::ios::binary);
    if (file.empty() || !in) return Bad("--config", absl::StrCat("cannot read '", file, "'"));
    std::stringstream ss;
    ss << in.rdbuf();
    if (in.bad()) return Bad("--config", absl::StrCat("cannot read '", file, "'"));
    text = ss.str();
  }
  std::string preset = "default";
  const json* preset_override = nullptr;
  for (const FieldOverride& o : overrides) {
    if (o.field == "preset") preset_override = &o.value;
  }
  if (preset_override != nullptr) {
    RP_ASSIGN_OR_RETURN(preset, AsString("preset", *preset_override));
  } else if (const json* p = flag_value("preset")) {
    preset = p->get<std::string>();
  } else if (!file.empty()) {
    RunConfig probe;
    RP_RETURN_IF_ERROR(ApplyConfigText(probe, file, text));  // also reports a bad file early
    preset = probe.preset;
  }
  auto base = PresetByName(preset);
  if (!base.ok()) return Bad("--preset", std::string(base.status().message()));
  RunConfig cfg = *base;
  cfg.preset = preset;
  if (!file.empty()) {
    RP_RETURN_IF_ERROR(ApplyConfigText(cfg, file, text));
    cfg.preset = preset;
    cfg.config_file = file;
  }
  for (const auto& [f, v] : given) {
    if (absl::Status st = f->set(cfg, v); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--", st.message()));
    }
  }
  for (const FieldOverride& o : overrides) {
    if (o.field == "preset") continue;
    if (o.field == "config") return Bad("config", "cannot be a sweep axis");
    if (absl::Status st = SetField(cfg, o.field, o.value); !st.ok()) return st;
  }
  cfg.preset = preset;
  if (absl::Status st = ValidateConfig(cfg, for_run); !st.ok()) {
    // Say where the offending value came from: a sweep axis (as is), the command line, the file (with
    // its line), or the preset (then the flag is what the user would change).
    const std::string msg(st.message());
    const std::string field = msg.substr(0, msg.find(':'));
    for (const FieldOverride& o : overrides) {
      if (o.field == field) return absl::FailedPreconditionError(msg);
    }
    if (flag_value(field.c_str()) == nullptr && !file.empty()) {
      if (const int line = LineOfKey(text, field); line > 0) {
        return absl::FailedPreconditionError(absl::StrCat(file, ":", line, ": ", msg));
      }
    }
    const bool from_preset = flag_value(field.c_str()) == nullptr && FindField(field) != nullptr;
    return absl::FailedPreconditionError(
        absl::StrCat("--", msg, from_preset ? absl::StrCat(" (value from preset '", preset, "')") : ""));
  }
  return cfg;
}

json ConfigToJson(const RunConfig& cfg) {
  json out = json::object();
  for (const Field& f : Fields()) out[f.name] = f.get(cfg);
  return out;
}

// --- Plan ---

namespace {

struct Bytes {
  uint64_t activation_message = 0;  // largest stage output of one micro-batch (fp32)
  uint64_t tp_allreduce = 0;        // per F (or B) of one chunk, fp32 bytes
  uint64_t gradient = 0;            // fp32 gradient bytes of the busiest device
  std::vector<uint64_t> stored;     // per pipeline rank: stored activations of one micro-batch
};

// Sizes from the real model: build each model stage's TP-rank-0 shard and run one forward on zeros.
absl::StatusOr<Bytes> RealModelBytes(const RunConfig& cfg) {
  const MlpConfig mlp = cfg.Mlp();
  const int k_stages = cfg.num_model_stages();
  RP_ASSIGN_OR_RETURN(ModelPartition part, PartitionMlp(mlp, k_stages, cfg.tp, cfg.layers_per_stage));
  Bytes b;
  b.stored.assign(static_cast<size_t>(cfg.pp), 0);
  std::vector<uint64_t> grads(static_cast<size_t>(cfg.pp), 0);
  const uint64_t rows = static_cast<uint64_t>(cfg.microbatch_size);
  const TpAllReduceFn identity = [](std::span<float>) { return absl::OkStatus(); };
  for (int k = 0; k < k_stages; ++k) {
    RP_ASSIGN_OR_RETURN(auto stage, MlpStage::Create(mlp, part, k, /*tp_rank=*/0));
    const int rank = k % cfg.pp;
    grads[static_cast<size_t>(rank)] += stage->params().size() * sizeof(float);
    Tensor x(cfg.microbatch_size, stage->input_dim());
    RP_RETURN_IF_ERROR(stage->Forward(0, x, identity).status());
    b.stored[static_cast<size_t>(rank)] += static_cast<uint64_t>(stage->activation_bytes());
    if (k + 1 < k_stages) {
      b.activation_message = std::max(b.activation_message, rows * stage->output_dim() * sizeof(float));
    }
    uint64_t fwd = 0, bwd = 0;
    for (const MlpStage::LayerInfo& l : stage->layers()) {
      if (l.kind == ShardKind::kRowParallel) fwd += rows * static_cast<uint64_t>(l.out) * sizeof(float);
      if (l.kind == ShardKind::kColumnParallel && l.layer > 0) {
        bwd += rows * static_cast<uint64_t>(l.in) * sizeof(float);
      }
    }
    if (cfg.tp > 1) b.tp_allreduce = std::max({b.tp_allreduce, fwd, bwd});
  }
  b.gradient = *std::max_element(grads.begin(), grads.end());
  return b;
}

// Layers of model stage k when `layers` are balanced over `stages` (the first layers % stages get one more).
int BalancedLayers(int layers, int stages, int k) { return layers / stages + (k < layers % stages ? 1 : 0); }

}  // namespace

absl::StatusOr<Plan> BuildPlan(const RunConfig& cfg) {
  schedule::Placement placement;
  placement.devices_per_node = cfg.devices_per_node;
  RP_ASSIGN_OR_RETURN(schedule::ParallelGrid grid,
                      schedule::ParallelGrid::Create({.dp = cfg.dp, .pp = cfg.pp, .tp = cfg.tp}, placement));
  Plan plan{.grid = std::move(grid), .executor = {}, .predict = {}, .cost_description = {}};
  schedule::ExecutorOptions& ex = plan.executor;
  ex.grid = {.dp = cfg.dp, .pp = cfg.pp, .tp = cfg.tp};
  ex.placement = placement;
  ex.model = cfg.Mlp();
  ex.layers_per_stage = cfg.layers_per_stage;
  ex.optimizer = cfg.optimizer;
  ex.dataset.input_dim = cfg.input_dim;
  ex.dataset.classes = cfg.classes;
  ex.dataset.train_size = cfg.train_size;
  ex.dataset.test_size = cfg.test_size;
  ex.dataset.seed = cfg.seed + 6;  // DatasetConfig's default seed (7) at the default --seed=1
  ex.microbatch_size = cfg.microbatch_size;
  ex.links = cfg.links;
  ex.codec = cfg.codec;
  ex.segment_bytes = cfg.segment_bytes > 0 ? cfg.segment_bytes : comm::kDefaultSegmentBytes;
  ex.model_segment_bytes = cfg.segment_bytes;
  ex.tp_model_segment_bytes = 0;
  ex.virtual_time = cfg.virtual_time;
  ex.time_scale = cfg.time_scale;
  ex.steps = cfg.steps;
  ex.eval_every = cfg.eval_every > 0 ? cfg.eval_every : std::max(1, (cfg.steps + 9) / 10);
  ex.eval_samples = cfg.eval_samples;
  ex.run_reference = cfg.reference;

  const int pp = cfg.pp, v = cfg.virtual_stages;
  schedule::PipelineOptions po;
  po.num_ranks = pp;
  po.num_micro_batches = cfg.microbatches;
  po.num_chunks = v;
  po.buckets_per_chunk = cfg.buckets;
  po.overlap_grad_allreduce = cfg.overlap_allreduce;

  if (cfg.cost_model == CostModelKind::kFixed) {
    RP_ASSIGN_OR_RETURN(Bytes bytes, RealModelBytes(cfg));
    po.activation_bytes = bytes.activation_message;
    po.tp_allreduce_bytes = bytes.tp_allreduce;
    po.gradient_bytes = bytes.gradient;
    auto at = [](const std::vector<double>& list, int s) { return list.size() == 1 ? list[0] : list[s]; };
    for (int s = 0; s < pp; ++s) {
      schedule::StageCost c;
      c.forward = FromMillis(at(cfg.forward_ms, s));
      c.backward = FromMillis(at(cfg.backward_ms, s));
      c.weight_grad = cfg.weight_grad_ms.empty() ? c.backward / 2 : FromMillis(at(cfg.weight_grad_ms, s));
      c.optimizer = FromMillis(cfg.optimizer_ms);
      c.activation_bytes = bytes.stored[static_cast<size_t>(s)];
      ex.cost.stages.push_back(c);
    }
    auto list = [](const std::vector<double>& l) {
      return l.size() == 1 ? absl::StrCat(l[0]) : absl::StrCat("[", absl::StrJoin(l, ", "), "]");
    };
    plan.cost_description = absl::StrCat(
        "fixed: F ", list(cfg.forward_ms), " ms, B ", list(cfg.backward_ms), " ms",
        cfg.schedule == schedule::ScheduleKind::kZeroBubbleH1
            ? absl::StrCat(" (W ", cfg.weight_grad_ms.empty() ? std::string("B/2") : list(cfg.weight_grad_ms),
                           " ms)")
            : "",
        " per micro-batch per device");
  } else {
    const FlopsModel& f = cfg.flops;
    RP_ASSIGN_OR_RETURN(double peak, DevicePeakTflops(f.device));
    const double b = f.microbatch_size, s = f.seq_len, h = f.hidden, t = cfg.tp;
    const double layer_fwd = 24.0 * b * s * h * h * (1.0 + s / (6.0 * h));
    const uint64_t tokens = static_cast<uint64_t>(f.microbatch_size) * static_cast<uint64_t>(f.seq_len);
    const uint64_t layer_params = 12ull * static_cast<uint64_t>(f.hidden) * static_cast<uint64_t>(f.hidden) +
                                  13ull * static_cast<uint64_t>(f.hidden);
    std::vector<schedule::StageFlops> stages(static_cast<size_t>(pp));
    uint64_t max_grad = 0;
    int max_chunk_layers = 0;
    for (int r = 0; r < pp; ++r) {
      int layers = 0;
      for (int c = 0; c < v; ++c) {
        const int n = BalancedLayers(f.layers, pp * v, c * pp + r);
        layers += n;
        max_chunk_layers = std::max(max_chunk_layers, n);
      }
      schedule::StageFlops& sf = stages[static_cast<size_t>(r)];
      sf.forward = layers * layer_fwd / t;
      sf.backward = 2 * sf.forward;
      sf.weight_grad = sf.forward;
      // Stored activations (Korthikanti et al., 2022; no recomputation, attention scores not stored
      // as with flash attention): s·b·h·(10 + 24/t) bytes per layer.
      sf.activation_bytes = static_cast<uint64_t>(layers * s * b * h * (10.0 + 24.0 / t));
      max_grad = std::max(max_grad, static_cast<uint64_t>(layers) * layer_params / static_cast<uint64_t>(t) * 4);
    }
    RP_ASSIGN_OR_RETURN(ex.cost, schedule::CostModel::FromFlops(stages, peak * f.efficiency));
    for (schedule::StageCost& c : ex.cost.stages) c.optimizer = FromMillis(cfg.optimizer_ms);
    po.activation_bytes = tokens * static_cast<uint64_t>(f.hidden) * 2;  // bf16
    po.gradient_bytes = max_grad;                                        // fp32, a multiple of 4
    // Two all-reduces of b·s·h bf16 values per layer each way. The TP ring is modeled in fp32
    // elements, so pass the bf16 volume as its byte count.
    po.tp_allreduce_bytes = cfg.tp > 1 ? static_cast<uint64_t>(max_chunk_layers) * 2 * tokens *
                                             static_cast<uint64_t>(f.hidden) * 2
                                       : 0;
    plan.cost_description = absl::StrFormat(
        "flops: %d-layer transformer, hidden %d, seq %d, %d seq/micro-batch on %s (%.0f TFLOPS x %.2f): "
        "stage 0 F %.3f ms, B %.3f ms per micro-batch",
        f.layers, f.hidden, f.seq_len, f.microbatch_size, absl::AsciiStrToUpper(f.device), peak, f.efficiency,
        Ms(ex.cost.stages[0].forward), Ms(ex.cost.stages[0].backward));
  }
  RP_ASSIGN_OR_RETURN(ex.program, schedule::BuildSchedule(cfg.schedule, po));
  // schedule::PredictOptionsFor(ex)'s rule (schedule/executor.h), spelled out so `predict` does not
  // need the executor.
  plan.predict.links = ex.links;
  plan.predict.dp_ring = {.segment_bytes = ex.model_segment_bytes, .codec = ToCostCodec(ex.codec)};
  plan.predict.tp_ring = {.segment_bytes = ex.tp_model_segment_bytes, .codec = schedule::Codec::kFp32};
  if (cfg.straggler_factor != 1) {
    ex.faults.stragglers.push_back({.rank = cfg.straggler_rank, .factor = cfg.straggler_factor});
  }
  plan.predict.compute_factor = schedule::StragglerFactors(ex.faults, cfg.world_size());
  return plan;
}

}  // namespace rp::apps
