// Loading and validating the one configuration of `ringpipe run` / `predict` / `sweep` / `timeline`.
//
// A config is built in layers, each overriding the one before (docs/config.md):
//   1. a named preset (apps/presets.h): `--preset=NAME`, else the config file's "preset" key, else
//      "default";
//   2. a config file (`--config=FILE`, or `-` for standard input): one JSON object whose keys are the
//      field names (apps/config_fields.h; comments allowed), each key at most once;
//   3. the flags given on the command line;
//   4. a sweep point's axis values (LoadConfigWithOverrides).
// LoadConfig records where each field's value came from (FieldSource), so an error names that place:
// "FILE:LINE: pp: ...", "--pp: ...", "--pp: ... (value from preset 'NAME')", or the axis as given.
//
// Validation (ValidateConfig) reads the config and changes nothing. It checks everything a run needs
// before anything runs or is written: field ranges (the table's), per-stage list lengths, the model
// partition, the schedule's conditions, link and codec names, that every modeled time fits the int64
// nanosecond time base, and the sizes the plan will allocate. Its errors are InvalidArgument "FIELD:
// reason" and carry the field as data (ErrorField), never to be recovered from the text.
//
// Thread safety: plain data and pure functions (LoadConfig reads the files it is given).
//
// Example:
//   RP_ASSIGN_OR_RETURN(RunConfig cfg, LoadConfig(args, /*for_run=*/true));  // validated
//   RP_ASSIGN_OR_RETURN(Plan plan, BuildPlan(cfg, /*for_run=*/true));          // apps/plan.h
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "apps/config_fields.h"
#include "apps/flags.h"
#include "nlohmann/json.hpp"
#include "runtime/link.h"

namespace rp::apps {

// Largest config file read (a config is a few hundred bytes), and deepest nesting of its JSON.
inline constexpr size_t kMaxConfigBytes = size_t{1} << 20;
inline constexpr int kMaxJsonDepth = 64;
// The largest time_scale a run takes (wall seconds per modeled second); a warning that the host did not
// keep a scale never suggests more (apps/clock_choice.cc).
inline constexpr double kMaxTimeScale = 1000;

// Applies a JSON config file's text (`path` is only used in messages). Errors:
// "PATH:LINE: malformed JSON: ...", "PATH:LINE: KEY: unknown key" / wrong type or value,
// "PATH:LINE: KEY: duplicate key (first at line N)". `key_lines` (optional) receives each key's line.
[[nodiscard]] absl::Status ApplyConfigText(RunConfig& cfg, const std::string& path, const std::string& text,
                                           std::vector<std::pair<std::string, int>>* key_lines = nullptr);

// Checks a config (see the header comment); changes nothing. `for_run`: also the limits of the
// emulation (world size, the real model, the memory a run allocates); `predict` needs the model
// partition only in the fixed cost model (the message and activation sizes come from the real model).
[[nodiscard]] absl::Status ValidateConfig(const RunConfig& cfg, bool for_run);

// A real-clock run at `time_scale` (wall seconds per modeled second): every single op, its modeled
// time (the config's straggler included) × `op_factor` (what the fault flags add), must take less
// wall time than watchdog_timeout, else its planned wait would be reported as a stall.
// InvalidArgument "--FIELD: ..." (ValidateConfig checks a forced --time_scale; `run` the one auto chose).
[[nodiscard]] absl::Status CheckOpsFitTheWatchdog(const RunConfig& cfg, double time_scale, const std::string& field,
                                                  double op_factor = 1);
// The time scale at which that longest op takes exactly watchdog_timeout of wall time (+inf without
// ops): auto's calibration trials stay below it.
[[nodiscard]] absl::StatusOr<double> WatchdogTimeScaleLimit(const RunConfig& cfg, double op_factor);

// The run-time faults' factors must keep the modeled times within the emulator's budget, and each op
// within the watchdog on a forced real-clock scale: `op_factor`, the largest factor the fault flags
// add to an op beyond the config's own straggler (--straggler, --jitter; `op_field` names the flag),
// and `link_factor`, the largest --fault slow_link factor on a link. InvalidArgument "--fault: ...",
// "--straggler: ..." or "--jitter: ...".
[[nodiscard]] absl::Status CheckFaultFactors(const RunConfig& cfg, double op_factor, double link_factor,
                                             const std::string& op_field);

// An upper bound of the modeled messages the pp x tp devices of one replica put on the fabric per
// step (ring segments of their DP buckets and TP all-reduces, p2p messages, as ValidateConfig bounds
// them, and the EP all-to-alls' messages): what the predictor plays for a replica.
[[nodiscard]] absl::StatusOr<double> ModeledMessagesPerReplicaStep(const RunConfig& cfg);

// The config field a ValidateConfig error names, if any (a payload of the Status under this type
// URL, set by FieldError).
inline constexpr char kFieldPayload[] = "type.googleapis.com/ringpipe.ConfigField";
std::optional<std::string> ErrorField(const absl::Status& status);
// InvalidArgument "FIELD: why", with FIELD as the payload.
absl::Status FieldError(const std::string& field, const std::string& why);

// The links a config describes: its preset with the overrides applied. InvalidArgument naming the
// field for an unknown preset or a bad override.
absl::StatusOr<LinkSpec> ResolveLinks(const RunConfig& cfg);

// The whole pipeline: preset < file < flags, validated. `args` holds the flags given.
[[nodiscard]] absl::StatusOr<RunConfig> LoadConfig(const ParsedArgs& args, bool for_run);

// One axis value of a `ringpipe sweep` point: a config field and the value to set.
struct FieldOverride {
  std::string field;
  nlohmann::json value;  // as in a config file (a number, a string, a list)
};

// LoadConfig, with `overrides` set after the flags and before validation (a sweep point's axis
// values). An override of "preset" replaces the preset the config starts from. Errors:
// InvalidArgument when the flags or the config file are bad (the same for every point);
// FailedPrecondition when an override value cannot be set or the combination is invalid (one bad
// point of a sweep, e.g. "microbatches: must be in 1..1048576, got 0").
// `config_text`, if given, is the text of the --config file, already read (ReadConfigText): a sweep
// reads it once for all its points (standard input can be read only once).
[[nodiscard]] absl::StatusOr<RunConfig> LoadConfigWithOverrides(const ParsedArgs& args, bool for_run,
                                                                const std::vector<FieldOverride>& overrides,
                                                                const std::string* config_text = nullptr);

// The text of the file --config names ("" without --config). InvalidArgument as ReadInputFile.
absl::StatusOr<std::string> ReadConfigText(const ParsedArgs& args);

}  // namespace rp::apps
