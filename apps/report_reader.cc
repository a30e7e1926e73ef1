#include "apps/report_reader.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <istream>
#include <streambuf>
#include <cmath>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "apps/config.h"
#include "apps/flags.h"
#include "nlohmann/json.hpp"
#include "runtime/status_macros.h"

namespace rp::apps {
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

// Pulls the text from a ReadChunk for the parser's std::istream; a read error ends the text and is
// kept (status()).
class ChunkBuffer : public std::streambuf {
 public:
  explicit ChunkBuffer(const ReadChunk& read) : read_(read) {}
  const absl::Status& status() const { return status_; }

 protected:
  int_type underflow() override {
    if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
    if (!status_.ok()) return traits_type::eof();
    absl::StatusOr<size_t> n = read_(buffer_.data(), buffer_.size());
    if (!n.ok()) status_ = n.status();
    if (!n.ok() || *n == 0) return traits_type::eof();
    setg(buffer_.data(), buffer_.data(), buffer_.data() + *n);
    return traits_type::to_int_type(*gptr());
  }

 private:
  const ReadChunk& read_;
  std::array<char, 65536> buffer_;
  absl::Status status_;
};

// Heap bytes a value of the DOM takes at most (libstdc++, 64-bit, malloc's 16-byte overhead): an
// array element (a 16-byte json, three times: while the vector grows it holds the old and the new,
// twice as large, storage), an object member (a tree node: its
// links, key and json), a container or a string (its own allocation) and a long string's text.
constexpr size_t kArrayElementBytes = 48;
constexpr size_t kMemberBytes = 96;
constexpr size_t kContainerBytes = 64;
constexpr size_t kStringBytes = 48;
size_t LongTextBytes(const std::string& s) { return s.size() > 15 ? s.size() + 17 : 0; }
// What one op of a report's timeline takes ({"kind", "op", "start_ms", "end_ms", "mb", "chunk"}: an
// element, an object, six members and two strings): how many ops kMaxParsedBytes holds, for the error.
constexpr size_t kOpBytes = kArrayElementBytes + kContainerBytes + 6 * kMemberBytes + 2 * kStringBytes;

// An nlohmann SAX handler that builds the DOM of the sections drawn as the text is parsed, and stops
// the parse at once (returns false) on a syntax error, nesting deeper than kMaxJsonDepth, or more than
// kMaxParsedBytes of DOM: so a hostile report costs at most that much memory, never its text's
// size in DOM. Kept: the top-level "schema", "layout", "schedule" and "timeline" but its "emulated"
// rows (not drawn); every other value is parsed and dropped.
class SectionParser {
 public:
  enum class Error { kNone, kNotJson, kTooDeep, kTooLarge };
  Error error() const { return error_; }
  const json& root() const { return root_; }

  bool null() { return Value(json(nullptr), 0); }
  bool boolean(bool v) { return Value(json(v), 0); }
  bool number_integer(json::number_integer_t v) { return Value(json(v), 0); }
  bool number_unsigned(json::number_unsigned_t v) { return Value(json(v), 0); }
  bool number_float(json::number_float_t v, const json::string_t& /*text*/) { return Value(json(v), 0); }
  bool string(json::string_t& v) {
    const size_t bytes = kStringBytes + LongTextBytes(v);
    return Value(json(std::move(v)), bytes);
  }
  bool binary(json::binary_t& /*v*/) { return Fail(Error::kNotJson); }  // not in JSON text
  bool start_object(size_t /*elements*/) { return Open(json::object()); }
  bool start_array(size_t /*elements*/) { return Open(json::array()); }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }
  bool key(json::string_t& k) {
    Frame& top = stack_.back();
    if (top.value == nullptr) return true;
    // The root's members: only the sections drawn; the timeline's: not the emulated rows.
    top.skip = (stack_.size() == 1 && k != "timeline" && k != "layout" && k != "schedule" && k != "schema") ||
               (stack_.size() == 2 && stack_.front().key == "timeline" && k == "emulated");
    top.key = std::move(k);
    return top.skip || Charge(kMemberBytes + LongTextBytes(top.key));
  }
  bool parse_error(size_t /*position*/, const std::string& /*token*/, const nlohmann::detail::exception& /*e*/) {
    return Fail(Error::kNotJson);
  }

 private:
  // A container being parsed: null while skipped; an object's last key and whether its value is skipped.
  struct Frame {
    json* value = nullptr;
    std::string key;
    bool skip = false;
  };

  bool Fail(Error e) {
    if (error_ == Error::kNone) error_ = e;
    return false;
  }
  bool Charge(size_t bytes) {
    parsed_bytes_ += bytes;
    return parsed_bytes_ <= kMaxParsedBytes || Fail(Error::kTooLarge);
  }
  // Where the next value goes: null if it is skipped.
  json* Slot(size_t bytes, bool& ok) {
    ok = true;
    if (stack_.empty()) return &root_;
    Frame& top = stack_.back();
    if (top.value == nullptr || (top.value->is_object() && top.skip)) return nullptr;
    if (top.value->is_object()) {
      ok = Charge(bytes);
      return &(*top.value)[top.key];
    }
    ok = Charge(kArrayElementBytes + bytes);
    top.value->push_back(nullptr);
    return &top.value->back();
  }
  bool Value(json v, size_t bytes) {
    bool ok = true;
    if (json* slot = Slot(bytes, ok); slot != nullptr && ok) *slot = std::move(v);
    return ok;
  }
  bool Open(json container) {
    if (stack_.size() + 1 > static_cast<size_t>(kMaxJsonDepth)) return Fail(Error::kTooDeep);
    bool ok = true;
    json* slot = Slot(kContainerBytes, ok);
    if (!ok) return false;
    if (slot != nullptr) *slot = std::move(container);
    stack_.push_back({slot, "", false});
    return true;
  }
  bool Close() {
    stack_.pop_back();
    return true;
  }

  json root_;
  std::vector<Frame> stack_;
  size_t parsed_bytes_ = 0;
  Error error_ = Error::kNone;
};

// `text` as printable UTF-8 (OneLine), cut to at most kMaxShown bytes on a character boundary.
std::string Shown(const std::string& text) {
  std::string s = OneLine(text);
  if (s.size() <= kMaxShown) return s;
  size_t cut = kMaxShown;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xc0) == 0x80) --cut;  // not inside a sequence
  s.resize(cut);
  return s + "...";
}

std::string ShortSchema(const json& v) { return Shown(v.get_ref<const std::string&>()); }

const json& Get(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

absl::Status BadField(const std::string& path, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", why));
}

// A time in ms: a finite number in [0, kMaxReportMs]. Absent: `fallback` if it is set, else an error.
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

// An integer in [lo, hi]; absent: `fallback`.
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

// A string shown in the chart; absent: "".
absl::StatusOr<std::string> Str(const json& j, const char* key, const std::string& path) {
  const json& v = Get(j, key);
  if (v.is_null()) return std::string();
  if (!v.is_string()) return BadField(absl::StrCat(path, ".", key), absl::StrCat("expected a string, got ", ShortDump(v)));
  return Shown(v.get_ref<const std::string&>());
}

// The report's layout sizes (each absent: the largest layout), bounding the device coordinates.
struct Layout {
  int64_t world = kMaxPredictDevices, pp = kMaxPredictDevices, tp = kMaxPredictDevices;
};

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

absl::StatusOr<svg::GanttPanel> Panel(const std::string& title, const json& section, const std::string& path,
                                       const Layout& layout, size_t max_bars, size_t& bars) {
  svg::GanttPanel p;
  p.title = title;
  RP_ASSIGN_OR_RETURN(p.span_ms, Ms(section, "step_ms", path, 0.0));
  const json& devices = Get(section, "devices");
  if (!devices.is_array()) return BadField(path + ".devices", absl::StrCat("expected a list, got ", ShortDump(devices)));
  if (devices.empty()) return BadField(path + ".devices", "no devices to draw");
  for (size_t i = 0; i < devices.size() && p.rows.size() < kMaxRows; ++i) {
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
    if (!ops.is_array()) return BadField(dev + ".ops", absl::StrCat("expected a list, got ", ShortDump(ops)));
    for (size_t k = 0; k < ops.size(); ++k) {
      // Refused, not cut: the chart would silently leave out the rest of the step.
      if (bars >= max_bars) {
        return absl::ResourceExhaustedError(
            absl::StrCat(dev, ".ops: more than ", max_bars, " ops to draw over the panels, the most a chart draws"));
      }
      const json& op = ops[k];
      const std::string where = absl::StrCat(dev, ".ops[", k, "]");
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
      b.cls = ClassOf(kind, name);
      RP_ASSIGN_OR_RETURN(const int64_t mb, Int(op, "mb", where, 0, kMaxMicrobatches - 1, -1));
      RP_ASSIGN_OR_RETURN(const int64_t chunk, Int(op, "chunk", where, 0, kMaxChunks - 1, -1));
      if (mb >= 0 && b.cls != svg::BarClass::kWait) {
        b.label = absl::StrCat(mb);
        if (chunk >= 0) absl::StrAppend(&b.label, ".", chunk);
      }
      p.span_ms = std::max(p.span_ms, b.end_ms);
      p.bars.push_back(std::move(b));
      ++bars;
    }
  }
  return p;
}

}  // namespace

absl::StatusOr<TimelineReport> ReadTimelineReport(const ReadChunk& read) {
  SectionParser sections;
  ChunkBuffer buffer(read);
  std::istream in(&buffer);
  json::sax_parse(in, &sections, json::input_format_t::json, /*strict=*/true);
  RP_RETURN_IF_ERROR(buffer.status());
  switch (sections.error()) {
    case SectionParser::Error::kNone: break;
    case SectionParser::Error::kNotJson: return absl::InvalidArgumentError("is not JSON");
    case SectionParser::Error::kTooDeep:
      return absl::InvalidArgumentError(absl::StrCat("is not a report: nested deeper than ", kMaxJsonDepth, " levels"));
    case SectionParser::Error::kTooLarge:
      return absl::InvalidArgumentError(
          absl::StrCat("holds more than the ", kMaxParsedBytes >> 20, " MiB this reader keeps of the sections it draws "
                       "(\"timeline\" but its emulated rows, \"layout\", \"schedule\"): about ", kMaxParsedBytes / kOpBytes,
                       " ops of a report's timeline"));
  }
  return ReadTimelineReport(sections.root());
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
    RP_ASSIGN_OR_RETURN(const int64_t step, Int(m, "step", "timeline.measured", 0, kMaxSteps, 0));
    // "median": false when the run kept only the last step's intervals (docs/report.md).
    const json& median = Get(m, "median");
    const bool is_median = !median.is_boolean() || median.get<bool>();
    // On the virtual clock the measured rows are the emulated times: no thread read a wall clock.
    const bool virtual_clock = Get(m, "clock") == json("virtual");
    RP_ASSIGN_OR_RETURN(svg::GanttPanel panel,
                        Panel(absl::StrFormat("measured — step %d (%s): %s", step,
                                              is_median ? "the median step" : "the last step, not the median",
                                              virtual_clock ? "the virtual clock's modeled times (= emulated)"
                                                            : "wall clock on the device threads / time scale"),
                              m, "timeline.measured", layout, max_bars, bars));
    out.panels.push_back(std::move(panel));
    out.measured_step_ms = out.panels.back().span_ms;
  }
  if (const json& p = Get(t, "predicted"); !p.is_null()) {
    RP_ASSIGN_OR_RETURN(svg::GanttPanel panel,
                        Panel("predicted — the predictor's step", p, "timeline.predicted", layout, max_bars, bars));
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
  const json& ranks = Get(t, "ranks");
  const int64_t drawn = ranks.is_array() ? static_cast<int64_t>(ranks.size()) : 0;
  const int64_t replica = pp > 0 && tp > 0 ? pp * tp : 0;
  if (drawn > 0 && replica > drawn) {
    absl::StrAppend(&out.title, " (the first ", drawn, " of the first replica's ", replica, " devices)");
  } else if (ranks.is_array() && world > drawn) {
    absl::StrAppend(&out.title, " (first replica)");
  }
  return out;
}

}  // namespace rp::apps
