#include "apps/config_fields.h"

#include "apps/config_entries.h"
#include "apps/moe_config.h"
#include "apps/shared_flags.h"

#include <cmath>
#include <limits>
#include <type_traits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/status_macros.h"

namespace rp::apps {
namespace {

using json = nlohmann::json;
using entries::Bad;

// A default for --help: the value as flag text ("64,64", "dgx-a100", "true").
std::string FlagText(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) return absl::StrFormat("%g", v.get<double>());  // 25, 0.5, 1e-06
  if (v.is_array()) {
    std::vector<std::string> parts;
    for (const json& x : v) parts.push_back(FlagText(x));
    return absl::StrJoin(parts, ",");
  }
  return ShortDump(v);
}

}  // namespace

const char* CostModelName(CostModelKind k) { return k == CostModelKind::kFlops ? "flops" : "fixed"; }

int RunConfig::chunks() const {
  switch (schedule) {
    case schedule::ScheduleKind::kInterleaved: return virtual_stages;
    case schedule::ScheduleKind::kZeroBubbleV:
    case schedule::ScheduleKind::kDualPipeV:
    case schedule::ScheduleKind::kDualPipe: return 2;
    default: return 1;
  }
}

int RunConfig::num_model_stages() const {
  return schedule == schedule::ScheduleKind::kDualPipe ? pp : pp * chunks();
}

std::string RunConfig::ModelStagesText() const {
  if (schedule == schedule::ScheduleKind::kDualPipe) {
    return absl::StrCat(num_model_stages(), " model stages (pp=", pp,
                        "; dualpipe's two directions run over the same stages)");
  }
  return absl::StrCat(num_model_stages(), " model stages (pp=", pp, " x ", chunks(), chunks() == 1 ? " chunk)" : " chunks)");
}

MlpConfig RunConfig::Mlp() const {
  MlpConfig m;
  m.input_dim = input_dim;
  m.hidden = hidden;
  m.classes = classes;
  m.activation = activation;
  m.seed = seed;
  if (auto layers = ResolveMoeLayers(*this); layers.ok() && !layers->empty()) {
    m.moe = {.layers = *std::move(layers),
             .experts = experts,
             .top_k = top_k,
             .expert_hidden = expert_hidden,
             .capacity_factor = capacity_factor,
             .aux_loss = aux_loss,
             .router_skew = router_skew,
             .init = moe_init};
  }
  return m;
}

const std::vector<ConfigField>& Fields() {
  static const std::vector<ConfigField>* fields = entries::BuildFieldTable();
  return *fields;
}

const ConfigField* FindField(absl::string_view name) {
  for (const ConfigField& f : Fields()) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

const std::vector<std::string>& ConfigFieldNames() {
  static const std::vector<std::string>* names = [] {
    auto* v = new std::vector<std::string>;
    for (const ConfigField& f : Fields()) v->emplace_back(f.name);
    return v;
  }();
  return *names;
}

absl::StatusOr<json> FlagTextToJson(const ConfigField& f, absl::string_view text) {
  const std::string name = absl::StrCat("--", f.name);
  switch (f.grammar) {
    case Grammar::kInt: {
      RP_ASSIGN_OR_RETURN(int64_t x, ParseInt(name, text));
      return json(x);
    }
    case Grammar::kNumber: {
      RP_ASSIGN_OR_RETURN(double d, ParseNumber(name, text));
      return json(d);
    }
    case Grammar::kNumberOrAuto: {
      if (text == "auto") return json("auto");
      RP_ASSIGN_OR_RETURN(double d, ParseNumber(name, text, "auto"));
      return json(d);
    }
    case Grammar::kBool: {
      RP_ASSIGN_OR_RETURN(bool b, ParseBool(name, text));
      return json(b);
    }
    case Grammar::kNumberList: {
      RP_ASSIGN_OR_RETURN(std::vector<double> l, ParseNumberList(name, text));
      return json(l);
    }
    case Grammar::kWidthList: {
      RP_ASSIGN_OR_RETURN(std::vector<int> l, ParseWidthList(name, text));
      return json(l);
    }
    case Grammar::kByteList:
    case Grammar::kBytes:
    case Grammar::kString:
      RP_RETURN_IF_ERROR(CheckGrammar(name, f.grammar, text));
      return json(std::string(text));
  }
  return json(std::string(text));
}

absl::Status SetField(RunConfig& cfg, absl::string_view name, const json& value) {
  const ConfigField* f = FindField(name);
  if (f == nullptr) return Bad(name, "unknown key");
  return f->set(cfg, value);
}

json ConfigToJson(const RunConfig& cfg) {
  json out = json::object();
  for (const ConfigField& f : Fields()) out[f.name] = f.get(cfg);
  // The fields hold the config file's values already: naming the file again would make the echo
  // unloadable as a config file (a file names no other file), and reading it twice adds nothing.
  out["config"] = nullptr;
  return out;
}

std::vector<FlagSpec> ConfigFlags(unsigned exclude, const RunConfig& defaults) {
  std::vector<FlagSpec> out;
  for (const ConfigField& f : Fields()) {
    if ((f.scope & exclude) != 0) continue;
    const json v = f.get(defaults);
    // Unset: an empty text or list, null (an optional override), an integer or byte count of 0 whose entry
    // says what 0 means (one message per chunk, one NIC per device).
    const bool unset = (v.is_string() && v.get_ref<const std::string&>().empty()) || (v.is_array() && v.empty()) ||
                       v.is_null() ||
                       ((f.grammar == Grammar::kByteList || f.grammar == Grammar::kBytes || f.grammar == Grammar::kInt) &&
                        v == 0);
    out.push_back({f.name, f.grammar, unset && f.unset != nullptr ? f.unset : FlagText(v), f.help});
    out.back().path = (f.scope & kOutputFile) != 0 || absl::string_view(f.name) == "config";
  }
  return out;
}

std::string ShortDump(const json& value) {
  std::string s = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return OneLine(s);
}

}  // namespace rp::apps

namespace rp::apps {

FlagSpec SharedFieldFlag(const std::string& name, const std::string& default_text, const std::string& extra_help) {
  const ConfigField* f = FindField(name);
  if (f == nullptr) return {name, Grammar::kString, default_text, extra_help};
  return {name, f->grammar, default_text, extra_help.empty() ? f->help : absl::StrCat(f->help, " ", extra_help)};
}

}  // namespace rp::apps
