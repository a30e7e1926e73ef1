#include "apps/report_reader.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_format.h"
#include "apps/config.h"
#include "apps/flags.h"
#include "apps/report_sections.h"
#include "nlohmann/json.hpp"
#include "runtime/status_macros.h"

namespace rp::apps {
namespace report_internal {
namespace {

using json = nlohmann::json;

// Longest string shown from the report (a title part, a row label).
constexpr size_t kMaxShown = 120;
// Bounds of the values drawn: every modeled time fits 1e18 ns (apps/config_validate.cc), and the
// config's ranges bound micro-batches, chunks and steps.
constexpr double kMaxReportMs = 1e12;
constexpr int64_t kMaxMicrobatches = int64_t{1} << 20;
constexpr int64_t kMaxChunks = 1024;
constexpr int64_t kMaxSteps = int64_t{1} << 24;

// `text` as printable UTF-8 (OneLine), cut to at most kMaxShown bytes on a character boundary.
std::string Shown(const std::string& text) {
  std::string s = OneLine(text);
  if (s.size() <= kMaxShown) return s;
  size_t cut = kMaxShown;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xc0) == 0x80) --cut;  // not inside a sequence
  s.resize(cut);
  return s + "...";
}

}  // namespace

const json& Get(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

absl::Status BadField(const std::string& path, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", why));
}

absl::StatusOr<double> Ms(const json& j, const char* key, const std::string& path, std::optional<double> fallback) {
  const json& v = Get(j, key);
  const std::string where = absl::StrCat(path, ".", key);
  if (v.is_null() && fallback.has_value()) return *fallback;
  if (v.is_null()) return BadField(where, "missing");
  if (!v.is_number()) return BadField(where, absl::StrCat("expected a number of ms, got ", ShortDump(v)));
  const double d = v.get<double>();
  if (!(std::isfinite(d) && d >= 0 && d <= kMaxReportMs)) {
    return BadField(where, absl::StrFormat("must be in [0, %g] ms, got %s", kMaxReportMs, ShortDump(v)));
  }
  return d;
}

absl::StatusOr<int64_t> Int(const json& j, const char* key, const std::string& path, int64_t lo, int64_t hi,
                            int64_t fallback) {
  const json& v = Get(j, key);
  if (v.is_null()) return fallback;
  const bool in_range = v.is_number_unsigned() ? v.get<uint64_t>() >= static_cast<uint64_t>(std::max<int64_t>(lo, 0)) &&
                                                     v.get<uint64_t>() <= static_cast<uint64_t>(hi)
                        : v.is_number_integer() ? v.get<int64_t>() >= lo && v.get<int64_t>() <= hi
                                                : false;
  if (!in_range) return BadField(absl::StrCat(path, ".", key), absl::StrCat("expected an integer in ", lo, "..", hi,
                                                                           ", got ", ShortDump(v)));
  return v.get<int64_t>();
}

absl::StatusOr<std::string> Str(const json& j, const char* key, const std::string& path) {
  const json& v = Get(j, key);
  if (v.is_null()) return std::string();
  if (!v.is_string()) return BadField(absl::StrCat(path, ".", key), absl::StrCat("expected a string, got ", ShortDump(v)));
  return Shown(v.get_ref<const std::string&>());
}

namespace {

// The op kinds a report writes (docs/report.md, `timeline`); an absent kind is a compute op's.
bool IsOpKind(const std::string& kind) {
  for (const char* k : {"", "compute", "tp_allreduce", "ep_alltoall", "grad_allreduce", "wait"}) {
    if (kind == k) return true;
  }
  return false;
}

svg::BarClass ClassOf(const std::string& kind, const std::string& op) {
  if (kind == "tp_allreduce") return svg::BarClass::kTpComm;
  if (kind == "ep_alltoall") return svg::BarClass::kEpComm;
  if (kind == "grad_allreduce") return svg::BarClass::kDpComm;
  if (kind == "wait") return svg::BarClass::kWait;
  if (op == "B") return svg::BarClass::kBackward;
  if (op == "Bi") return svg::BarClass::kBackwardInput;
  if (op == "W") return svg::BarClass::kWeightGrad;
  if (op == "F") return svg::BarClass::kForward;
  return svg::BarClass::kOptimizer;
}

}  // namespace

absl::StatusOr<svg::GanttBar> OpBar(const json& op, const std::string& where, int row) {
  if (!op.is_object()) return BadField(where, absl::StrCat("expected an object, got ", ShortDump(op)));
  svg::GanttBar b;
  b.row = row;
  RP_ASSIGN_OR_RETURN(b.start_ms, Ms(op, "start_ms", where, std::nullopt));
  RP_ASSIGN_OR_RETURN(b.end_ms, Ms(op, "end_ms", where, std::nullopt));
  if (b.end_ms < b.start_ms) {
    return BadField(where + ".end_ms", absl::StrCat("is before start_ms (", b.end_ms, " < ", b.start_ms, ")"));
  }
  RP_ASSIGN_OR_RETURN(const std::string kind, Str(op, "kind", where));
  RP_ASSIGN_OR_RETURN(const std::string name, Str(op, "op", where));
  // An unknown kind fell through to the optimizer's class: drawn, and wrong.
  if (!IsOpKind(kind)) {
    return BadField(where + ".kind", absl::StrCat("expected compute, tp_allreduce, ep_alltoall, grad_allreduce or "
                                                  "wait, got \"", kind, "\""));
  }
  b.cls = ClassOf(kind, name);
  RP_ASSIGN_OR_RETURN(const int64_t mb, Int(op, "mb", where, 0, kMaxMicrobatches - 1, -1));
  RP_ASSIGN_OR_RETURN(const int64_t chunk, Int(op, "chunk", where, 0, kMaxChunks - 1, -1));
  if (mb >= 0 && b.cls != svg::BarClass::kWait) {
    b.label = absl::StrCat(mb);
    if (chunk >= 0) absl::StrAppend(&b.label, ".", chunk);
  }
  return b;
}

}  // namespace report_internal

namespace {

using json = nlohmann::json;
using report_internal::BadField;
using report_internal::Get;
using report_internal::Int;
using report_internal::kMaxMicrobatches;
using report_internal::kMaxSteps;
using report_internal::Ms;
using report_internal::Str;
using report_internal::StreamedOps;

std::string ShortSchema(const json& v) { return report_internal::Shown(v.get_ref<const std::string&>()); }

// The report's layout sizes (each absent: the largest layout), bounding the device coordinates.
struct Layout {
  int64_t world = kMaxPredictDevices, pp = kMaxPredictDevices, tp = kMaxPredictDevices;
};

// A panel of the timeline: its devices' rows and their ops' bars — from the DOM's op lists, or, for
// the lists ParseSections streamed, `streamed`'s bars (its error at the device it names).
absl::StatusOr<svg::GanttPanel> Panel(const std::string& title, const json& section, const std::string& path,
                                       const Layout& layout, size_t max_bars, size_t& bars, StreamedOps* streamed) {
  svg::GanttPanel p;
  p.title = title;
  RP_ASSIGN_OR_RETURN(p.span_ms, Ms(section, "step_ms", path, 0.0));
  const json& devices = Get(section, "devices");
  if (!devices.is_array()) return BadField(path + ".devices", absl::StrCat("expected a list, got ", ShortDump(devices)));
  if (devices.empty()) return BadField(path + ".devices", "no devices to draw");
  // Refused, not cut (the rows past kMaxRows were left out without a word).
  if (devices.size() > kMaxRows) {
    return BadField(path + ".devices",
                    absl::StrCat(devices.size(), " devices; a chart draws at most ", kMaxRows, " rows"));
  }
  for (size_t i = 0; i < devices.size(); ++i) {
    const json& d = devices[i];
    const std::string dev = absl::StrCat(path, ".devices[", i, "]");
    if (!d.is_object()) return BadField(dev, absl::StrCat("expected an object, got ", ShortDump(d)));
    const int row = static_cast<int>(p.rows.size());
    RP_ASSIGN_OR_RETURN(const int64_t rank, Int(d, "rank", dev, 0, layout.world - 1, row));
    RP_ASSIGN_OR_RETURN(const int64_t pp, Int(d, "pp", dev, 0, layout.pp - 1, 0));
    RP_ASSIGN_OR_RETURN(const int64_t tp, Int(d, "tp", dev, 0, layout.tp - 1, 0));
    p.rows.push_back(absl::StrFormat("rank %d  (pp %d, tp %d)", rank, pp, tp));
    const json& ops = Get(d, "ops");
    if (ops.is_null()) continue;
    if (report_internal::IsStreamedOps(ops)) {
      if (streamed != nullptr && streamed->error_device == row) return streamed->error;
      continue;
    }
    if (!ops.is_array()) return BadField(dev + ".ops", absl::StrCat("expected a list, got ", ShortDump(ops)));
    for (size_t k = 0; k < ops.size(); ++k) {
      // Refused, not cut: the chart would silently leave out the rest of the step.
      if (bars >= max_bars) {
        return absl::ResourceExhaustedError(
            absl::StrCat(dev, ".ops: more than ", max_bars, " ops to draw over the panels, the most a chart draws"));
      }
      RP_ASSIGN_OR_RETURN(svg::GanttBar b, report_internal::OpBar(ops[k], absl::StrCat(dev, ".ops[", k, "]"), row));
      p.bars.push_back(std::move(b));
      ++bars;
    }
  }
  if (streamed != nullptr) {
    bars += streamed->bars.size();
    if (p.bars.empty()) {
      p.bars = std::move(streamed->bars);
    } else {
      p.bars.insert(p.bars.end(), std::make_move_iterator(streamed->bars.begin()),
                    std::make_move_iterator(streamed->bars.end()));
    }
  }
  for (const svg::GanttBar& b : p.bars) p.span_ms = std::max(p.span_ms, b.end_ms);
  return p;
}

// The title's part that names a run's faults (the fault flags; host.faults, one per rank and link):
// the chart is of a faulty run. Empty without faults.
absl::StatusOr<std::string> FaultsTitle(const json& report) {
  const json& faults = Get(Get(report, "host"), "faults");
  if (faults.is_null()) return std::string();
  if (!faults.is_array()) {
    return BadField("host.faults", absl::StrCat("expected an array of strings, got ", ShortDump(faults)));
  }
  std::vector<std::string> named;
  for (size_t i = 0; i < faults.size(); ++i) {
    if (!faults[i].is_string()) {
      return BadField(absl::StrCat("host.faults[", i, "]"), absl::StrCat("expected a string, got ", ShortDump(faults[i])));
    }
    named.push_back(faults[i].get_ref<const std::string&>());
  }
  if (named.empty()) return std::string();
  return absl::StrCat(" — with ", named.size(), named.size() == 1 ? " fault: " : " faults: ",
                      report_internal::Shown(absl::StrJoin(named, "; ")));
}

// The measured panel of a report's timeline section `m` ("timeline.measured").
absl::StatusOr<svg::GanttPanel> MeasuredPanel(const json& m, const Layout& layout, size_t max_bars, size_t& bars,
                                              StreamedOps* streamed) {
  RP_ASSIGN_OR_RETURN(const int64_t step, Int(m, "step", "timeline.measured", 0, kMaxSteps, 0));
  // "median": false when the run kept only the last step's intervals (docs/report.md); absent: true.
  const json& median = Get(m, "median");
  if (!median.is_null() && !median.is_boolean()) {
    return BadField("timeline.measured.median", absl::StrCat("expected true or false, got ", ShortDump(median)));
  }
  const bool is_median = !median.is_boolean() || median.get<bool>();
  // On the virtual clock the measured rows are the emulated times: no thread read a wall clock.
  // Absent: the real clock's. A number or another name was accepted and drawn as the real clock's.
  const json& clock = Get(m, "clock");
  if (!clock.is_null() && clock != json("virtual") && clock != json("real")) {
    return BadField("timeline.measured.clock", absl::StrCat("expected \"virtual\" or \"real\", got ", ShortDump(clock)));
  }
  const bool virtual_clock = clock == json("virtual");
  return Panel(absl::StrFormat("measured — step %d (%s): %s", step,
                               is_median ? "the median step" : "the last step, not the median",
                               virtual_clock ? "the virtual clock's modeled times (= emulated)"
                                             : "wall clock on the device threads / time scale"),
               m, "timeline.measured", layout, max_bars, bars, streamed);
}

// The timeline of a report's DOM; `streamed` (by report_internal::kPanelKeys; null for a report built
// in memory) the op lists streamed out of it.
absl::StatusOr<TimelineReport> FromSections(const json& report, size_t max_bars,
                                            std::array<StreamedOps, report_internal::kPanelKeys.size()>* streamed) {
  const json& schema = Get(report, "schema");
  if (!schema.is_string()) {
    return absl::InvalidArgumentError(absl::StrCat("has no \"schema\" (a ", kReportSchemaRead,
                                                   " report of `ringpipe run` or `predict` --report_json)"));
  }
  if (schema != kReportSchemaRead) {
    return absl::InvalidArgumentError(absl::StrCat("has \"schema\": \"", ShortSchema(schema), "\"; this ringpipe reads \"",
                                                   kReportSchemaRead, "\" (write it again with --report_json)"));
  }
  const json& t = Get(report, "timeline");
  if (!t.is_object()) {
    return absl::InvalidArgumentError(
        "has no \"timeline\" section (written by an older ringpipe? write it again with --report_json)");
  }
  const json& lay = Get(report, "layout");
  const json& sch = Get(report, "schedule");
  RP_ASSIGN_OR_RETURN(const int64_t world, Int(lay, "world", "layout", 1, kMaxPredictDevices, 0));
  RP_ASSIGN_OR_RETURN(const int64_t pp, Int(lay, "pp", "layout", 1, kMaxPredictDevices, 0));
  RP_ASSIGN_OR_RETURN(const int64_t tp, Int(lay, "tp", "layout", 1, kMaxPredictDevices, 0));
  Layout layout;
  if (world > 0) layout.world = world;
  if (pp > 0) layout.pp = pp;
  if (tp > 0) layout.tp = tp;
  TimelineReport out;
  size_t bars = 0;
  if (const json& m = Get(t, "measured"); !m.is_null()) {
    RP_ASSIGN_OR_RETURN(svg::GanttPanel panel,
                        MeasuredPanel(m, layout, max_bars, bars, streamed != nullptr ? &(*streamed)[0] : nullptr));
    out.panels.push_back(std::move(panel));
    out.measured_step_ms = out.panels.back().span_ms;
  }
  if (const json& p = Get(t, "predicted"); !p.is_null()) {
    RP_ASSIGN_OR_RETURN(svg::GanttPanel panel,
                        Panel("predicted — the predictor's step", p, "timeline.predicted", layout, max_bars, bars,
                              streamed != nullptr ? &(*streamed)[1] : nullptr));
    out.panels.push_back(std::move(panel));
    out.predicted_step_ms = out.panels.back().span_ms;
  }
  if (out.panels.empty()) {
    return absl::InvalidArgumentError("\"timeline\" holds neither measured nor predicted devices");
  }
  out.rows = out.panels.front().rows.size();
  RP_ASSIGN_OR_RETURN(const std::string description, Str(lay, "description", "layout"));
  RP_ASSIGN_OR_RETURN(const std::string name, Str(sch, "name", "schedule"));
  RP_ASSIGN_OR_RETURN(const int64_t microbatches, Int(sch, "microbatches", "schedule", 0, kMaxMicrobatches, 0));
  out.title = absl::StrCat("ringpipe timeline — ", description, ", ", name, ", ", microbatches, " micro-batches");
  // Which devices the rows are: the first replica (dp = 0), or only its first ranks when the replica
  // has more than the report's rows (at most 64).
  // Absent: an older report (the title then says nothing about which devices the rows are).
  const json& ranks = Get(t, "ranks");
  if (!ranks.is_null() && !ranks.is_array()) {
    return BadField("timeline.ranks", absl::StrCat("expected a list of ranks, got ", ShortDump(ranks)));
  }
  for (size_t i = 0; ranks.is_array() && i < ranks.size(); ++i) {
    const json& r = ranks[i];
    if (!r.is_number_integer() || r.get<int64_t>() < 0 || r.get<int64_t>() >= world) {
      return BadField(absl::StrCat("timeline.ranks[", i, "]"),
                      absl::StrCat("expected a rank in 0..", world - 1, ", got ", ShortDump(r)));
    }
  }
  const int64_t drawn = ranks.is_array() ? static_cast<int64_t>(ranks.size()) : 0;
  const int64_t replica = pp > 0 && tp > 0 ? pp * tp : 0;
  if (drawn > 0 && replica > drawn) {
    absl::StrAppend(&out.title, " (the first ", drawn, " of the first replica's ", replica, " devices)");
  } else if (ranks.is_array() && world > drawn) {
    absl::StrAppend(&out.title, " (first replica)");
  }
  RP_ASSIGN_OR_RETURN(const std::string faults, FaultsTitle(report));
  absl::StrAppend(&out.title, faults);
  return out;
}

}  // namespace

absl::StatusOr<TimelineReport> ReadTimelineReport(const ReadChunk& read) {
  RP_ASSIGN_OR_RETURN(report_internal::ParsedSections sections, report_internal::ParseSections(read, kMaxBars));
  return FromSections(sections.root, kMaxBars, &sections.panels);
}

absl::StatusOr<TimelineReport> ReadTimelineReport(const std::string& text) {
  if (text.size() > kMaxReportBytes) {
    return absl::InvalidArgumentError(absl::StrCat("is larger than ", kMaxReportBytes, " bytes"));
  }
  size_t at = 0;
  return ReadTimelineReport([&](char* buf, size_t size) -> absl::StatusOr<size_t> {
    const size_t n = std::min(size, text.size() - at);
    std::memcpy(buf, text.data() + at, n);
    at += n;
    return n;
  });
}

absl::StatusOr<TimelineReport> ReadTimelineReport(const nlohmann::json& report, size_t max_bars) {
  return FromSections(report, max_bars, nullptr);
}

}  // namespace rp::apps
