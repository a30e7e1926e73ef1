// Loading a config: preset < file < flags < sweep overrides, with the provenance of every field.
// (Validation: apps/config_validate.cc.)
#include "apps/config.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "apps/files.h"
#include "apps/presets.h"
#include "runtime/status_macros.h"

namespace rp::apps {
namespace {

using json = nlohmann::json;

int LineOf(const std::string& text, size_t offset) {
  offset = std::min(offset, text.size());
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<ptrdiff_t>(offset), '\n'));
}

// The top-level keys of a JSON object's text in order, each with its line, and the deepest nesting.
// Comments end as nlohmann's do ("//" at '\n', '\r' or NUL; "/* */"). A key literal is decoded, so an
// escaped key ("\u0041") is found as what it spells.
struct KeyScan {
  std::vector<std::pair<std::string, int>> keys;
  int max_depth = 0;
  size_t deepest_at = 0;
};

KeyScan ScanKeys(const std::string& text) {
  KeyScan scan;
  int depth = 0;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (text.compare(i, 2, "//") == 0) {
      i = text.find_first_of(std::string("\n\r\0", 3), i);
      if (i == std::string::npos) break;
      continue;
    }
    if (text.compare(i, 2, "/*") == 0) {
      i = text.find("*/", i + 2);
      if (i == std::string::npos) break;
      i += 2;
      continue;
    }
    if (c == '{' || c == '[') {
      if (++depth > scan.max_depth) {
        scan.max_depth = depth;
        scan.deepest_at = i;
      }
      ++i;
      continue;
    }
    if (c == '}' || c == ']') {
      --depth;
      ++i;
      continue;
    }
    if (c != '"') {
      ++i;
      continue;
    }
    size_t end = i + 1;  // one past the closing quote
    while (end < text.size() && text[end] != '"') end += text[end] == '\\' ? 2 : 1;
    if (end >= text.size()) break;
    ++end;
    size_t after = end;
    while (after < text.size() && std::isspace(static_cast<unsigned char>(text[after]))) ++after;
    if (depth == 1 && after < text.size() && text[after] == ':') {
      const json literal = json::parse(text.begin() + static_cast<ptrdiff_t>(i),
                                       text.begin() + static_cast<ptrdiff_t>(end), nullptr,
                                       /*allow_exceptions=*/false);
      if (literal.is_string()) scan.keys.emplace_back(literal.get<std::string>(), LineOf(text, i));
    }
    i = end;
  }
  return scan;
}

// nlohmann's exceptions as "PATH:LINE: malformed JSON: ...".
absl::Status MalformedJson(const std::string& path, const std::string& text, const json::exception& e,
                           size_t byte) {
  std::string what = e.what();
  // "[json.exception.parse_error.101] parse error at line 3, column 5: syntax error ..." -> the tail.
  if (size_t colon = what.find(": "); colon != std::string::npos && byte > 0) {
    what = what.substr(colon + 2);
  } else if (size_t bracket = what.find("] "); bracket != std::string::npos) {
    what = what.substr(bracket + 2);
  }
  return absl::InvalidArgumentError(
      absl::StrCat(OneLine(path), ":", LineOf(text, byte > 0 ? byte - 1 : 0), ": malformed JSON: ", OneLine(what)));
}

// Where a field's value came from, for messages.
struct FieldSource {
  enum Kind { kPreset, kFile, kFlag, kOverride } kind = kPreset;
  int line = 0;  // kFile
};

// Prefixes a field error with where its value came from.
absl::Status Locate(const absl::Status& st, const std::map<std::string, FieldSource>& sources,
                    const std::string& file, const std::string& preset) {
  const std::optional<std::string> field = ErrorField(st);
  const std::string msg(st.message());
  auto it = field ? sources.find(*field) : sources.end();
  const FieldSource src = it == sources.end() ? FieldSource{} : it->second;
  switch (src.kind) {
    case FieldSource::kOverride: return absl::FailedPreconditionError(msg);
    case FieldSource::kFile:
      return absl::FailedPreconditionError(absl::StrCat(OneLine(file), ":", src.line, ": ", msg));
    case FieldSource::kFlag: return absl::FailedPreconditionError(absl::StrCat("--", msg));
    case FieldSource::kPreset:
      return absl::FailedPreconditionError(absl::StrCat(
          "--", msg, field ? absl::StrCat(" (value from preset '", OneLine(preset), "')") : ""));
  }
  return absl::FailedPreconditionError(msg);
}

// A link override of both classes given at one layer (file, flags, a sweep point) overrides the per-class
// values of the layers before it — --alpha_us=0 on `--preset=s1`, whose intra_alpha_us and
// inter_alpha_us are 20000, means 0 on both links — while a per-class value given at the same layer
// still wins over it for its class (ResolveLinks applies the per-class values last).
void OverridePerClassLinks(RunConfig& cfg, const std::set<std::string>& layer) {
  using Override = std::optional<double> RunConfig::*;
  struct Kind {
    const char *both, *intra, *inter;
    Override both_v, intra_v, inter_v;
  };
  for (const Kind& k : {Kind{"alpha_us", "intra_alpha_us", "inter_alpha_us", &RunConfig::alpha_us,
                             &RunConfig::intra_alpha_us, &RunConfig::inter_alpha_us},
                        Kind{"bandwidth_gbps", "intra_bandwidth_gbps", "inter_bandwidth_gbps",
                             &RunConfig::bandwidth_gbps, &RunConfig::intra_bandwidth_gbps,
                             &RunConfig::inter_bandwidth_gbps},
                        Kind{"overhead_us", "intra_overhead_us", "inter_overhead_us", &RunConfig::overhead_us,
                             &RunConfig::intra_overhead_us, &RunConfig::inter_overhead_us}}) {
    if (layer.count(k.both) == 0 || !(cfg.*k.both_v).has_value()) continue;  // not given here, or null
    if (layer.count(k.intra) == 0) (cfg.*k.intra_v).reset();
    if (layer.count(k.inter) == 0) (cfg.*k.inter_v).reset();
  }
}

}  // namespace

std::optional<std::string> ErrorField(const absl::Status& status) {
  const auto field = status.GetPayload(kFieldPayload);
  if (!field) return std::nullopt;
  return std::string(*field);
}

absl::Status ApplyConfigText(RunConfig& cfg, const std::string& path, const std::string& text,
                             std::vector<std::pair<std::string, int>>* key_lines) {
  // nlohmann's lexer takes a NUL for the end of the input: what follows it was silently ignored.
  if (const size_t nul = text.find('\0'); nul != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(OneLine(path), ":", LineOf(text, nul),
                                                   ": malformed JSON: a NUL byte at byte offset ", nul));
  }
  const KeyScan scan = ScanKeys(text);
  if (scan.max_depth > kMaxJsonDepth) {
    return absl::InvalidArgumentError(absl::StrCat(OneLine(path), ":", LineOf(text, scan.deepest_at),
                                                   ": malformed JSON: nested deeper than ", kMaxJsonDepth,
                                                   " levels"));
  }
  json doc;
  try {
    doc = json::parse(text, nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const json::parse_error& e) {
    return MalformedJson(path, text, e, e.byte);
  } catch (const json::exception& e) {
    // Not a syntax error but still the parser's: "[json.exception.out_of_range.406] number overflow
    // parsing '1e400'" (found by fuzz/config_fuzzer.cc). The line is that of the quoted token.
    const std::string what = e.what();
    size_t token_at = 0;
    if (size_t q = what.find('\''); q != std::string::npos) {
      const std::string token = what.substr(q + 1, what.rfind('\'') - q - 1);
      if (size_t at = token.empty() ? std::string::npos : text.find(token); at != std::string::npos) token_at = at;
    }
    return MalformedJson(path, text, e, token_at + 1);
  }
  if (!doc.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(OneLine(path), ":1: expected a JSON object of config keys, got ", doc.type_name()));
  }
  std::map<std::string, int> first_line;
  for (const auto& [key, line] : scan.keys) {
    auto error = [&, line = line](const std::string& msg) {
      return absl::InvalidArgumentError(absl::StrCat(OneLine(path), ":", line, ": ", msg));
    };
    // null or "" names no file: a report's `config` section (ConfigToJson) loads unchanged.
    const bool names_no_file = key == "config" && (doc[key].is_null() || doc[key] == "");
    if (key == "config" && !names_no_file) return error("config: a config file cannot name another config file");
    if (FindField(key) == nullptr) {
      if (key == "fault" || key == "straggler" || key == "jitter") {
        return error(absl::StrCat(key, ": a flag of `ringpipe run` only, not a config key (give it as --", key, ")"));
      }
      return error(absl::StrCat(OneLine(key), ": unknown key (the keys are the flag names of `ringpipe run --help`)"));
    }
    if (auto [it, inserted] = first_line.emplace(key, line); !inserted) {
      return error(absl::StrCat(key, ": duplicate key (first at line ", it->second, ")"));
    }
    if (names_no_file) continue;
    if (absl::Status st = SetField(cfg, key, doc[key]); !st.ok()) return error(std::string(st.message()));
    if (key_lines != nullptr) key_lines->emplace_back(key, line);
  }
  return absl::OkStatus();
}

absl::StatusOr<RunConfig> LoadConfig(const ParsedArgs& args, bool for_run) {
  auto cfg = LoadConfigWithOverrides(args, for_run, {});
  if (!cfg.ok() && cfg.status().code() == absl::StatusCode::kFailedPrecondition) {
    return absl::InvalidArgumentError(cfg.status().message());
  }
  return cfg;
}

absl::StatusOr<std::string> ReadConfigText(const ParsedArgs& args) {
  for (auto it = args.occurrences.rbegin(); it != args.occurrences.rend(); ++it) {
    if (it->first == "config") return ReadInputFile("config", it->second, kMaxConfigBytes);
  }
  return std::string();
}

namespace {

// The preset a config starts from — a sweep axis's, else the flag's, else the config file's (named
// at its line in errors) — and its name.
absl::StatusOr<std::pair<RunConfig, std::string>> BasePreset(const std::vector<FieldOverride>& overrides,
                                                              const json* preset_flag, const std::string& file,
                                                              const std::string& text) {
  std::string preset = "default";
  int preset_line = 0;  // > 0: the preset is the config file's, at this line
  const json* preset_override = nullptr;
  for (const FieldOverride& o : overrides) {
    if (o.field == "preset") preset_override = &o.value;
  }
  if (preset_override != nullptr) {
    if (!preset_override->is_string()) {
      return absl::FailedPreconditionError(absl::StrCat("preset: expected a name, got ", ShortDump(*preset_override)));
    }
    preset = preset_override->get<std::string>();
  } else if (const json* p = preset_flag) {
    preset = p->get<std::string>();
  } else if (!file.empty()) {
    RunConfig probe;
    std::vector<std::pair<std::string, int>> lines;
    RP_RETURN_IF_ERROR(ApplyConfigText(probe, file, text, &lines));  // also reports a bad file early
    preset = probe.preset;
    for (const auto& [key, line] : lines) {
      if (key == "preset") preset_line = line;
    }
  }
  auto base = PresetByName(preset);
  if (!base.ok()) {
    const std::string msg = absl::StrCat("preset: ", base.status().message());
    if (preset_override != nullptr) return absl::FailedPreconditionError(msg);
    if (preset_line > 0) return absl::InvalidArgumentError(absl::StrCat(OneLine(file), ":", preset_line, ": ", msg));
    return absl::InvalidArgumentError(absl::StrCat("--", msg));
  }
  return std::pair<RunConfig, std::string>(*std::move(base), preset);
}

}  // namespace

absl::StatusOr<RunConfig> LoadConfigWithOverrides(const ParsedArgs& args, bool for_run,
                                                  const std::vector<FieldOverride>& overrides,
                                                  const std::string* config_text) {
  // The flags given (each at most once: ParseFlags), as JSON values, in command-line order.
  std::vector<std::pair<const ConfigField*, json>> given;
  for (const auto& [name, text] : args.occurrences) {
    const ConfigField* f = FindField(name);
    if (f == nullptr) continue;  // a flag of the subcommand, not a config field
    RP_ASSIGN_OR_RETURN(json v, FlagTextToJson(*f, text));
    given.emplace_back(f, std::move(v));
  }
  auto flag_value = [&](absl::string_view name) -> const json* {
    const json* last = nullptr;
    for (const auto& [f, v] : given) {
      if (f->name == name) last = &v;
    }
    return last;
  };

  // The config file's text (the preset may come from it).
  std::string file, text;
  if (const json* c = flag_value("config")) {
    file = c->get<std::string>();
    if (config_text != nullptr) {
      text = *config_text;
    } else {
      RP_ASSIGN_OR_RETURN(text, ReadInputFile("config", file, kMaxConfigBytes));
    }
  }
  RP_ASSIGN_OR_RETURN(auto base, BasePreset(overrides, flag_value("preset"), file, text));
  const std::string preset = base.second;
  RunConfig cfg = std::move(base.first);
  std::map<std::string, FieldSource> sources;
  if (!file.empty()) {
    std::vector<std::pair<std::string, int>> lines;
    RP_RETURN_IF_ERROR(ApplyConfigText(cfg, file, text, &lines));
    std::set<std::string> layer;
    for (const auto& [key, line] : lines) {
      sources[key] = {FieldSource::kFile, line};
      layer.insert(key);
    }
    OverridePerClassLinks(cfg, layer);
    cfg.config_file = file;
  }
  std::set<std::string> flag_layer;
  for (const auto& [f, v] : given) {
    if (absl::Status st = f->set(cfg, v); !st.ok()) return absl::InvalidArgumentError(absl::StrCat("--", st.message()));
    sources[f->name] = {FieldSource::kFlag, 0};
    flag_layer.insert(f->name);
  }
  OverridePerClassLinks(cfg, flag_layer);
  std::set<std::string> override_layer;
  for (const FieldOverride& o : overrides) {
    if (o.field == "preset") continue;
    if (o.field == "config") return absl::FailedPreconditionError("config: cannot be a sweep axis");
    if (absl::Status st = SetField(cfg, o.field, o.value); !st.ok()) {
      return absl::FailedPreconditionError(st.message());
    }
    sources[o.field] = {FieldSource::kOverride, 0};
    override_layer.insert(o.field);
  }
  OverridePerClassLinks(cfg, override_layer);
  cfg.preset = preset;
  if (absl::Status st = ValidateConfig(cfg, for_run); !st.ok()) return Locate(st, sources, file, preset);
  return cfg;
}

}  // namespace rp::apps
