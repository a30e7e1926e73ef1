#include "apps/report_sections.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <istream>
#include <streambuf>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "apps/config.h"
#include "apps/flags.h"
#include "runtime/status_macros.h"

namespace rp::apps::report_internal {
namespace {

using json = nlohmann::json;

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
    // nlohmann's lexer takes a NUL for the end of the input: what follows it was silently ignored.
    if (const void* nul = std::memchr(buffer_.data(), '\0', *n); nul != nullptr) {
      status_ = absl::InvalidArgumentError(absl::StrCat(
          "is not JSON: a NUL byte at byte offset ", offset_ + static_cast<size_t>(static_cast<const char*>(nul) -
                                                                                    buffer_.data())));
      return traits_type::eof();
    }
    offset_ += *n;
    setg(buffer_.data(), buffer_.data(), buffer_.data() + *n);
    return traits_type::to_int_type(*gptr());
  }

 private:
  const ReadChunk& read_;
  std::array<char, 65536> buffer_;
  size_t offset_ = 0;  // of buffer_'s first byte in the text
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

// The longest reason a "not JSON" error quotes from the parser.
constexpr size_t kMaxWhyBytes = 200;

// An nlohmann SAX handler that builds the DOM of the sections drawn as the text is parsed, and stops
// the parse at once (returns false) on a syntax error, nesting deeper than kMaxJsonDepth, or more than
// kMaxParsedBytes of DOM: so a hostile report costs at most that much memory, never its text's
// size in DOM. Kept: the top-level "schema", "layout", "schedule", "timeline" but its "emulated"
// rows (not drawn), and "host" but its "faults" (the chart's title names a run's faults); every other value is parsed and dropped. The op lists of the panels' devices
// (timeline.<panel>.devices[i].ops, i < kMaxRows) are not kept: each element is built alone (charged
// while it is built), turned into a bar (OpBar) and dropped. A key given twice in an object, kept or
// not, stops the parse (kDuplicateKey, duplicate(): its path), as a config file's does: the last one
// silently won. The keys of the objects open are charged while they are open.
class SectionParser {
 public:
  enum class Error { kNone, kNotJson, kTooDeep, kTooLarge, kDuplicateKey };
  SectionParser(size_t max_bars, ParsedSections* out) : max_bars_(max_bars), out_(out) {}
  Error error() const { return error_; }

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
    const size_t key_bytes = kMemberBytes + LongTextBytes(k);
    if (!top.keys.insert(k).second) {
      duplicate_ = Path() + PathKey(k, stack_.size() == 1);
      return Fail(Error::kDuplicateKey);
    }
    top.key_bytes += key_bytes;
    if (!Charge(key_bytes)) return false;
    top.key = std::move(k);
    if (top.value == nullptr) return true;
    // The root's members: only the sections drawn; the timeline's: not the emulated rows.
    top.skip = (stack_.size() == 1 && top.key != "timeline" && top.key != "layout" && top.key != "schedule" &&
                top.key != "schema" && top.key != "host") ||
               (top.role == Role::kTimeline && top.key == "emulated") ||
               (top.role == Role::kHost && top.key != "faults");
    return top.skip || Charge(key_bytes);
  }
  bool parse_error(size_t /*position*/, const std::string& /*token*/, const nlohmann::detail::exception& e) {
    // nlohmann's words without their "[json.exception.parse_error.101] " tag: where and why.
    const std::string what = e.what();
    const size_t tag = what.rfind("] ", what.find(' ') == std::string::npos ? 0 : what.find(' '));
    why_ = tag == std::string::npos ? what : what.substr(tag + 2);
    return Fail(Error::kNotJson);
  }
  // Why the text is not JSON (kNotJson), as nlohmann says it.
  const std::string& why() const { return why_; }
  // The path of the key given twice (kDuplicateKey): "timeline.measured.clock", "layout[\"a b\"]".
  const std::string& duplicate() const { return duplicate_; }

 private:
  // Where a container sits: the sections' path down to an op list, an element of one (kOp), or
  // anything else (kOther).
  enum class Role : uint8_t { kOther, kRoot, kTimeline, kPanel, kDevices, kDevice, kOps, kOp, kHost };
  // A container being parsed: null while skipped (and for an op list, which is not kept); an
  // object's last key and whether its value is skipped.
  struct Frame {
    json* value = nullptr;
    std::string key;
    bool skip = false;
    bool object = false;
    size_t elements = 0;                      // an array's, so far
    absl::flat_hash_set<std::string> keys;    // an object's, so far
    size_t key_bytes = 0;                     // charged for `keys`
    Role role = Role::kOther;
    int panel = -1;     // kPanel .. kOps: the kPanelKeys index
    int device = -1;    // kDevice, kOps: the index in "devices"
    size_t ops = 0;     // kOps: elements so far
  };

  static int PanelOf(const std::string& key) {
    for (size_t p = 0; p < kPanelKeys.size(); ++p) {
      if (key == kPanelKeys[p]) return static_cast<int>(p);
    }
    return -1;
  }
  // `key` as a step of a JSON path: ".clock" ("clock" first), or quoted when it is not a plain name.
  static std::string PathKey(const std::string& key, bool first) {
    const bool plain = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
      return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
    });
    if (plain) return absl::StrCat(first ? "" : ".", key);
    return absl::StrCat("[", ShortDump(json(key)), "]");
  }
  // The path of the value being parsed, down to the innermost open container.
  std::string Path() const {
    std::string path;
    for (size_t i = 1; i < stack_.size(); ++i) {
      const Frame& parent = stack_[i - 1];
      absl::StrAppend(&path, parent.object ? PathKey(parent.key, i == 1) : absl::StrCat("[", parent.elements - 1, "]"));
    }
    return path;
  }
  bool Fail(Error e) {
    if (error_ == Error::kNone) error_ = e;
    return false;
  }
  bool Charge(size_t bytes) {
    parsed_bytes_ += bytes;
    return parsed_bytes_ <= kMaxParsedBytes || Fail(Error::kTooLarge);
  }
  // The role of a container opened in `parent` (its value kept): the path to the op lists.
  static Role RoleIn(const Frame& parent, bool object) {
    switch (parent.role) {
      case Role::kRoot:
        return !object ? Role::kOther
               : parent.key == "timeline" ? Role::kTimeline
               : parent.key == "host"     ? Role::kHost
                                          : Role::kOther;
      case Role::kTimeline: return object && PanelOf(parent.key) >= 0 ? Role::kPanel : Role::kOther;
      case Role::kPanel: return !object && parent.key == "devices" ? Role::kDevices : Role::kOther;
      case Role::kDevices: return object ? Role::kDevice : Role::kOther;
      case Role::kDevice:
        return !object && parent.key == "ops" && parent.device < static_cast<int>(kMaxRows) ? Role::kOps
                                                                                              : Role::kOther;
      case Role::kOps: return Role::kOp;
      default: return Role::kOther;
    }
  }
  // Where the next value goes: null if it is skipped. An element of an op list goes to op_ (dropped
  // once it is a bar), unless its panel already failed.
  json* Slot(size_t bytes, bool& ok) {
    ok = true;
    if (stack_.empty()) return &out_->root;
    Frame& top = stack_.back();
    if (top.role == Role::kOps) {
      if (out_->panels[static_cast<size_t>(top.panel)].error_device >= 0) return nullptr;
      element_base_ = parsed_bytes_;
      op_ = nullptr;
      ok = Charge(bytes);
      return &op_;
    }
    if (top.value == nullptr || (top.value->is_object() && top.skip)) return nullptr;
    if (top.value->is_object()) {
      ok = Charge(bytes);
      return &(*top.value)[top.key];
    }
    ok = Charge(kArrayElementBytes + bytes);
    top.value->push_back(nullptr);
    return &top.value->back();
  }
  void CountElement() {
    if (!stack_.empty() && !stack_.back().object) ++stack_.back().elements;
  }
  bool Value(json v, size_t bytes) {
    CountElement();
    bool ok = true;
    json* slot = Slot(bytes, ok);
    if (slot != nullptr && ok) *slot = std::move(v);
    if (slot == &op_ && ok) ToBar(stack_.back());
    return ok;
  }
  bool Open(json container) {
    if (stack_.size() + 1 > static_cast<size_t>(kMaxJsonDepth)) return Fail(Error::kTooDeep);
    CountElement();
    bool ok = true;
    json* slot = Slot(kContainerBytes, ok);
    if (!ok) return false;
    Frame f;
    f.value = slot;
    f.object = container.is_object();
    if (slot != nullptr) {
      f.role = stack_.empty() ? (container.is_object() ? Role::kRoot : Role::kOther)
                              : RoleIn(stack_.back(), container.is_object());
      if (!stack_.empty()) {
        const Frame& parent = stack_.back();
        f.panel = f.role == Role::kPanel ? PanelOf(parent.key) : parent.panel;
        f.device = f.role == Role::kDevice ? static_cast<int>(parent.value->size()) - 1 : parent.device;
      }
      if (f.role == Role::kOps) {
        *slot = json::binary({});  // the marker: this list's ops are the panel's StreamedOps
        f.value = nullptr;
      } else {
        *slot = std::move(container);
      }
    }
    stack_.push_back(std::move(f));
    return true;
  }
  bool Close() {
    const Role role = stack_.back().role;
    parsed_bytes_ -= stack_.back().key_bytes;  // the key set goes
    stack_.pop_back();
    if (role == Role::kOp) ToBar(stack_.back());
    return true;
  }
  // op_, the element just parsed of the op list `ops`, as a bar of its panel (or the panel's error).
  void ToBar(Frame& ops) {
    const size_t k = ops.ops++;
    parsed_bytes_ = element_base_;  // op_ is dropped
    StreamedOps& s = out_->panels[static_cast<size_t>(ops.panel)];
    const std::string dev = absl::StrCat("timeline.", kPanelKeys[static_cast<size_t>(ops.panel)], ".devices[",
                                         ops.device, "]");
    // Refused, not cut: the chart would silently leave out the rest of the step.
    absl::StatusOr<svg::GanttBar> bar =
        bars_ >= max_bars_ ? absl::InvalidArgumentError(absl::StrCat(dev, ".ops: more than ", max_bars_,
                                                                      " ops to draw over the panels, the most a "
                                                                      "chart draws"))
                           : OpBar(op_, absl::StrCat(dev, ".ops[", k, "]"), ops.device);
    op_ = nullptr;
    if (!bar.ok()) {
      s.error_device = ops.device;
      s.error = bar.status();
      return;
    }
    s.bars.push_back(std::move(*bar));
    ++bars_;
  }

  const size_t max_bars_;
  ParsedSections* out_;
  std::vector<Frame> stack_;
  size_t parsed_bytes_ = 0;
  size_t element_base_ = 0;  // parsed_bytes_ before the op list element being built
  json op_;                  // that element
  size_t bars_ = 0;          // over the panels
  Error error_ = Error::kNone;
  std::string why_;
  std::string duplicate_;
};

}  // namespace

bool IsStreamedOps(const json& v) { return v.is_binary(); }

absl::StatusOr<ParsedSections> ParseSections(const ReadChunk& read, size_t max_bars) {
  ParsedSections out;
  SectionParser sections(max_bars, &out);
  ChunkBuffer buffer(read);
  std::istream in(&buffer);
  json::sax_parse(in, &sections, json::input_format_t::json, /*strict=*/true);
  RP_RETURN_IF_ERROR(buffer.status());
  switch (sections.error()) {
    case SectionParser::Error::kNone: break;
    case SectionParser::Error::kNotJson: {
      // One line, cut (the last token read is quoted whole, and may be long).
      std::string why = OneLine(sections.why());
      if (why.size() > kMaxWhyBytes) {
        size_t cut = kMaxWhyBytes;
        while (cut > 0 && (static_cast<unsigned char>(why[cut]) & 0xc0) == 0x80) --cut;
        why = why.substr(0, cut) + "...";
      }
      return absl::InvalidArgumentError(why.empty() ? "is not JSON" : absl::StrCat("is not JSON: ", why));
    }
    case SectionParser::Error::kTooDeep:
      return absl::InvalidArgumentError(absl::StrCat("is not a report: nested deeper than ", kMaxJsonDepth, " levels"));
    case SectionParser::Error::kDuplicateKey:
      return absl::InvalidArgumentError(absl::StrCat(OneLine(sections.duplicate()), ": duplicate key"));
    case SectionParser::Error::kTooLarge:
      return absl::InvalidArgumentError(
          absl::StrCat("holds more than the ", kMaxParsedBytes >> 20, " MiB this reader keeps of the sections it draws "
                       "besides their ops (\"timeline\" but its emulated rows, \"layout\", \"schedule\")"));
  }
  return out;
}

}  // namespace rp::apps::report_internal
