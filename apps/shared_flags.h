// Flags that several subcommands take and that are not config fields, each defined once here so it
// has one grammar and one meaning everywhere. (Config fields that other subcommands share, such as
// --codec, --segment_bytes, --link and --seed, come from their field entry: SharedFieldFlag.)
#pragma once

#include <string>

#include "apps/config_fields.h"
#include "apps/flags.h"

namespace rp::apps {

// `sweep` and `timeline`: the predictor only, no emulation.
inline FlagSpec PredictOnlyFlag() {
  return {"predict_only", Grammar::kBool, "false",
          "Predictor only (no emulation): instant, any layout size up to 2^20 devices."};
}

// `sweep` and `timeline`: the charts' title.
inline FlagSpec TitleFlag(const std::string& default_text) {
  return {"title", Grammar::kString, default_text, "Chart title (prefix)."};
}

// The flag of config field `name` as another subcommand takes it: same name and grammar, its own
// default and, appended to the field's help, what it means there.
FlagSpec SharedFieldFlag(const std::string& name, const std::string& default_text, const std::string& extra_help);

}  // namespace rp::apps
