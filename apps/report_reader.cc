#include "apps/report_reader.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "apps/config.h"
#include "apps/flags.h"
#include "nlohmann/json.hpp"

namespace rp::apps {
namespace {

using json = nlohmann::json;

// Values kept from the sections drawn: about eight per bar.
constexpr size_t kMaxKeptValues = kMaxBars * 8;
// Longest string shown from the report (a title part, a row label).
constexpr size_t kMaxShown = 120;

// Deepest nesting of '[' / '{' outside strings (the text need not be valid JSON).
int MaxDepth(const std::string& text) {
  int depth = 0, max_depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return max_depth;
}

const json& Get(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

// A finite, non-negative time in ms (0 otherwise), below 1e15 ms.
double Ms(const json& j, const char* key) {
  const json& v = Get(j, key);
  if (!v.is_number()) return 0;
  const double d = v.get<double>();
  return std::isfinite(d) && d > 0 ? std::min(d, 1e15) : 0;
}

int64_t Int(const json& j, const char* key, int64_t fallback) {
  const json& v = Get(j, key);
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_unsigned()) return static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), INT64_MAX));
  return fallback;
}

std::string Str(const json& j, const char* key) {
  const json& v = Get(j, key);
  if (!v.is_string()) return "";
  std::string s = OneLine(v.get_ref<const std::string&>());
  if (s.size() > kMaxShown) s = s.substr(0, kMaxShown) + "...";
  return s;
}

svg::BarClass ClassOf(const std::string& kind, const std::string& op) {
  if (kind == "tp_allreduce" || kind == "ep_alltoall") return svg::BarClass::kTpComm;
  if (kind == "grad_allreduce") return svg::BarClass::kDpComm;
  if (kind == "wait") return svg::BarClass::kWait;
  if (op == "B") return svg::BarClass::kBackward;
  if (op == "Bi") return svg::BarClass::kBackwardInput;
  if (op == "W") return svg::BarClass::kWeightGrad;
  if (op == "F") return svg::BarClass::kForward;
  return svg::BarClass::kOptimizer;
}

svg::GanttPanel Panel(const std::string& title, const json& section, size_t& bars) {
  svg::GanttPanel p;
  p.title = title;
  p.span_ms = Ms(section, "step_ms");
  const json& devices = Get(section, "devices");
  if (!devices.is_array()) return p;
  for (const json& d : devices) {
    if (p.rows.size() >= kMaxRows) break;
    const int row = static_cast<int>(p.rows.size());
    p.rows.push_back(absl::StrFormat("rank %d  (pp %d, tp %d)", Int(d, "rank", row), Int(d, "pp", 0), Int(d, "tp", 0)));
    const json& ops = Get(d, "ops");
    if (!ops.is_array()) continue;
    for (const json& op : ops) {
      if (bars >= kMaxBars) break;
      svg::GanttBar b;
      b.row = row;
      b.start_ms = Ms(op, "start_ms");
      b.end_ms = std::max(b.start_ms, Ms(op, "end_ms"));
      b.cls = ClassOf(Str(op, "kind"), Str(op, "op"));
      const int64_t mb = Int(op, "mb", -1);
      if (mb >= 0 && b.cls != svg::BarClass::kWait) {
        b.label = absl::StrCat(mb);
        if (const int64_t chunk = Int(op, "chunk", -1); chunk >= 0) absl::StrAppend(&b.label, ".", chunk);
      }
      p.span_ms = std::max(p.span_ms, b.end_ms);
      p.bars.push_back(std::move(b));
      ++bars;
    }
  }
  return p;
}

}  // namespace

absl::StatusOr<TimelineReport> ReadTimelineReport(const std::string& text) {
  if (text.size() > kMaxReportBytes) {
    return absl::InvalidArgumentError(absl::StrCat("is larger than ", kMaxReportBytes, " bytes"));
  }
  if (MaxDepth(text) > kMaxJsonDepth) {
    return absl::InvalidArgumentError(absl::StrCat("is not a report: nested deeper than ", kMaxJsonDepth, " levels"));
  }
  // Keep only the sections drawn, and at most kMaxKeptValues values of them.
  bool keep = true, too_large = false;
  size_t kept = 0;
  const json::parser_callback_t filter = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key) {
      keep = parsed.is_string() &&
             (parsed == "timeline" || parsed == "layout" || parsed == "schedule" || parsed == "schema");
      return keep;
    }
    if (depth >= 1 && !keep) return false;
    if (depth >= 1 && (event == json::parse_event_t::value || event == json::parse_event_t::object_end ||
                       event == json::parse_event_t::array_end)) {
      if (++kept > kMaxKeptValues) too_large = true;
      return !too_large;
    }
    return true;
  };
  const json report = json::parse(text, filter, /*allow_exceptions=*/false);
  if (report.is_discarded()) return absl::InvalidArgumentError("is not JSON");
  if (too_large) {
    return absl::InvalidArgumentError(absl::StrCat("has a \"timeline\" section of more than ", kMaxKeptValues,
                                                   " values (at most ", kMaxBars, " bars)"));
  }
  return ReadTimelineReport(report);
}

absl::StatusOr<TimelineReport> ReadTimelineReport(const nlohmann::json& report) {
  const json& schema = Get(report, "schema");
  if (!schema.is_string()) {
    return absl::InvalidArgumentError(absl::StrCat("has no \"schema\" (a ", kReportSchemaRead,
                                                   " report of `ringpipe run` or `predict` --report_json)"));
  }
  if (schema != kReportSchemaRead) {
    return absl::InvalidArgumentError(absl::StrCat("has \"schema\": \"", Str(report, "schema"), "\"; this ringpipe reads \"",
                                                   kReportSchemaRead, "\" (write it again with --report_json)"));
  }
  const json& t = Get(report, "timeline");
  if (!t.is_object()) {
    return absl::InvalidArgumentError(
        "has no \"timeline\" section (written by an older ringpipe? write it again with --report_json)");
  }
  TimelineReport out;
  size_t bars = 0;
  if (const json& m = Get(t, "measured"); Get(m, "devices").is_array()) {
    out.panels.push_back(Panel(absl::StrFormat("measured — step %d (the median step): wall clock on the device "
                                               "threads / time scale",
                                               Int(m, "step", 0)),
                               m, bars));
    out.measured_step_ms = out.panels.back().span_ms;
  }
  if (const json& p = Get(t, "predicted"); Get(p, "devices").is_array()) {
    out.panels.push_back(Panel("predicted — the predictor's step", p, bars));
    out.predicted_step_ms = out.panels.back().span_ms;
  }
  if (out.panels.empty()) {
    return absl::InvalidArgumentError("\"timeline\" holds neither measured nor predicted devices");
  }
  out.rows = out.panels.front().rows.size();
  const json& lay = Get(report, "layout");
  const json& sch = Get(report, "schedule");
  out.title = absl::StrCat("ringpipe timeline — ", Str(lay, "description"), ", ", Str(sch, "name"), ", ",
                           Int(sch, "microbatches", 0), " micro-batches");
  const json& ranks = Get(t, "ranks");
  if (ranks.is_array() && Int(lay, "world", 0) > static_cast<int64_t>(ranks.size())) {
    absl::StrAppend(&out.title, " (first replica)");
  }
  return out;
}

}  // namespace rp::apps
