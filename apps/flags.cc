#include "apps/flags.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "runtime/status_macros.h"

namespace rp::apps {
namespace {

// Longest flag value quoted in a message (a longer one is cut with "...").
constexpr size_t kMaxQuoted = 200;

std::string Quote(absl::string_view text) {
  if (text.size() > kMaxQuoted) return absl::StrCat("'", OneLine(text.substr(0, kMaxQuoted)), "...'");
  return absl::StrCat("'", OneLine(text), "'");
}

absl::Status Bad(absl::string_view what, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(OneLine(what), ": ", why));
}

// Length of the UTF-8 sequence starting at s[i], or 0 if it is not a valid one (overlong forms,
// surrogates and code points above U+10FFFF are invalid).
size_t Utf8Length(absl::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n;
  uint32_t cp;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
    cp = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    cp = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3f);
  }
  if ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff))) {
    return 0;
  }
  return n;
}

}  // namespace

std::string OneLine(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto u = static_cast<unsigned char>(text[i]);
    const size_t n = Utf8Length(text, i);
    if (n == 0 || u < 0x20 || u == 0x7f) {
      absl::StrAppend(&out, absl::StrFormat("\\x%02x", u));
      ++i;
    } else {
      out.append(text.data() + i, n);
      i += n;
    }
  }
  return out;
}

const char* GrammarName(Grammar g) {
  switch (g) {
    case Grammar::kInt: return "integer";
    case Grammar::kNumber: return "number";
    case Grammar::kBool: return "true|false";
    case Grammar::kString: return "text";
    case Grammar::kBytes: return "bytes, e.g. 64K";
    case Grammar::kByteList: return "bytes or a list, e.g. 16K,64K,1M";
    case Grammar::kNumberList: return "number or a list, e.g. 50,60";
    case Grammar::kWidthList: return "widths, e.g. 128,64x3";
    case Grammar::kNumberOrAuto: return "number or auto";
  }
  return "text";
}

absl::StatusOr<int64_t> ParseInt(absl::string_view what, absl::string_view text) {
  int64_t x;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &x)) {
    return Bad(what, absl::StrCat("expected an integer, got ", Quote(text)));
  }
  return x;
}

bool IsDecimalText(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  if (text.empty()) return false;
  for (const char c : text) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '.' && c != 'e' &&
        c != 'E') {
      return false;
    }
  }
  return true;
}

namespace {

// Decimal text that reads as a finite double, and not as 0 when its digits are not all 0: SimpleAtod
// reads 1e-400 as 0, which a range check then told as "got 0".
bool ReadsAsFiniteDecimal(absl::string_view text, double* d) {
  text = absl::StripAsciiWhitespace(text);
  if (!IsDecimalText(text) || !absl::SimpleAtod(text, d) || !std::isfinite(*d)) return false;
  const absl::string_view mantissa = text.substr(0, text.find_first_of("eE"));
  return *d != 0 || mantissa.find_first_of("123456789") == absl::string_view::npos;
}

}  // namespace

absl::StatusOr<double> ParseNumber(absl::string_view what, absl::string_view text, absl::string_view word) {
  double d;
  if (!ReadsAsFiniteDecimal(text, &d)) {
    return Bad(what, absl::StrCat("expected a finite number", word.empty() ? "" : " or ", word, ", got ", Quote(text)));
  }
  return d;
}

absl::StatusOr<bool> ParseBool(absl::string_view what, absl::string_view text) {
  const std::string s = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (s == "true" || s == "1" || s == "yes") return true;
  if (s == "false" || s == "0" || s == "no") return false;
  return Bad(what, absl::StrCat("expected true or false, got ", Quote(text)));
}

absl::StatusOr<uint64_t> ParseBytes(absl::string_view what, absl::string_view text) {
  absl::string_view item = absl::StripAsciiWhitespace(text);
  uint64_t mult = 1;
  if (!item.empty()) {
    switch (absl::ascii_toupper(static_cast<unsigned char>(item.back()))) {
      case 'K': mult = uint64_t{1} << 10; break;
      case 'M': mult = uint64_t{1} << 20; break;
      case 'G': mult = uint64_t{1} << 30; break;
      default: break;
    }
    if (mult != 1) item.remove_suffix(1);
  }
  uint64_t v = 0;
  if (item.empty() || !absl::SimpleAtoi(item, &v)) {
    return Bad(what, absl::StrCat(Quote(text), " is not a byte count (e.g. 4096, 64K, 1M)"));
  }
  // At most 2^40 bytes after the suffix: the product is checked before it is taken (17179869185G
  // wrapped around 2^64 to 1 GiB and was accepted as that).
  if (v > (uint64_t{1} << 40) / mult) {
    return Bad(what, absl::StrCat(Quote(text), " is more than 2^40 bytes (1024G)"));
  }
  return v * mult;
}

absl::StatusOr<std::vector<uint64_t>> ParseByteList(absl::string_view what, absl::string_view text) {
  std::vector<uint64_t> out;
  if (absl::StripAsciiWhitespace(text).empty()) return out;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    if (out.size() >= kMaxListItems) return Bad(what, absl::StrCat("more than ", kMaxListItems, " values"));
    RP_ASSIGN_OR_RETURN(uint64_t v, ParseBytes(what, item));
    out.push_back(v);
  }
  return out;
}

absl::StatusOr<std::vector<double>> ParseNumberList(absl::string_view what, absl::string_view text) {
  std::vector<double> out;
  if (absl::StripAsciiWhitespace(text).empty()) return out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    double d;
    if (out.size() >= kMaxListItems) return Bad(what, absl::StrCat("more than ", kMaxListItems, " values"));
    if (!ReadsAsFiniteDecimal(part, &d)) {
      return Bad(what, absl::StrCat(Quote(text), " is not a number or a comma list of numbers"));
    }
    out.push_back(d);
  }
  return out;
}

absl::StatusOr<std::vector<int>> ParseWidthList(absl::string_view what, absl::string_view text) {
  std::vector<int> out;
  if (absl::StripAsciiWhitespace(text).empty()) return out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    part = absl::StripAsciiWhitespace(part);
    int value = 0, repeat = 1;
    bool ok;
    if (size_t x = part.find('x'); x != absl::string_view::npos) {
      ok = absl::SimpleAtoi(part.substr(0, x), &value) && absl::SimpleAtoi(part.substr(x + 1), &repeat);
    } else {
      ok = absl::SimpleAtoi(part, &value);
    }
    if (!ok || value < 1 || repeat < 1 || static_cast<size_t>(repeat) > kMaxListItems - out.size()) {
      return Bad(what, absl::StrCat(Quote(text), " is not a comma list of positive integers "
                                                 "(WIDTHxCOUNT repeats a width; at most ",
                                    kMaxListItems, " in all)"));
    }
    out.insert(out.end(), static_cast<size_t>(repeat), value);
  }
  return out;
}

absl::Status CheckGrammar(absl::string_view what, Grammar grammar, absl::string_view text) {
  switch (grammar) {
    case Grammar::kInt: return ParseInt(what, text).status();
    case Grammar::kNumber: return ParseNumber(what, text).status();
    case Grammar::kNumberOrAuto: return text == "auto" ? absl::OkStatus() : ParseNumber(what, text, "auto").status();
    case Grammar::kBool: return ParseBool(what, text).status();
    case Grammar::kBytes: return ParseBytes(what, text).status();
    case Grammar::kByteList: return ParseByteList(what, text).status();
    case Grammar::kNumberList: return ParseNumberList(what, text).status();
    case Grammar::kWidthList: return ParseWidthList(what, text).status();
    case Grammar::kString:
      if (OneLine(text) != text) {
        return Bad(what, absl::StrCat(Quote(text), " has control characters or bytes that are not UTF-8"));
      }
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

std::string ParsedArgs::Text(absl::string_view name, absl::string_view fallback) const {
  for (auto it = occurrences.rbegin(); it != occurrences.rend(); ++it) {
    if (it->first == name) return it->second;
  }
  return std::string(fallback);
}

int64_t ParsedArgs::Int(absl::string_view name, int64_t fallback) const {
  if (!Has(name)) return fallback;
  auto v = ParseInt(name, Text(name));
  return v.ok() ? *v : fallback;
}

double ParsedArgs::Number(absl::string_view name, double fallback) const {
  if (!Has(name)) return fallback;
  auto v = ParseNumber(name, Text(name));
  return v.ok() ? *v : fallback;
}

bool ParsedArgs::Bool(absl::string_view name, bool fallback) const {
  if (!Has(name)) return fallback;
  auto v = ParseBool(name, Text(name));
  return v.ok() ? *v : fallback;
}

bool IsHelpArgument(absl::string_view arg) {
  return arg == "-h" || arg == "--help" || arg == "-help" || arg == "--helpfull";
}

absl::StatusOr<ParsedArgs> ParseFlags(absl::string_view subcommand, const std::vector<std::string>& args,
                                      const std::vector<FlagSpec>& specs) {
  ParsedArgs out;
  out.subcommand = std::string(subcommand);
  auto find = [&](absl::string_view name) -> const FlagSpec* {
    for (const FlagSpec& s : specs) {
      if (s.name == name) return &s;
    }
    return nullptr;
  };
  // Help wins over every other argument, valid or not (flags.h).
  if (std::any_of(args.begin(), args.end(), [](const std::string& a) { return IsHelpArgument(a); })) {
    out.help = true;
    return out;
  }
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view arg = args[i];
    if (arg.size() < 2 || arg[0] != '-') {
      return absl::InvalidArgumentError(absl::StrCat(
          "unexpected argument ", Quote(arg), ": `ringpipe ", subcommand,
          "` takes only flags (--name=value; see --help)"));
    }
    arg.remove_prefix(absl::StartsWith(arg, "--") ? 2 : 1);
    std::string name(arg), value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
      has_value = true;
    }
    const FlagSpec* spec = find(name);
    if (spec == nullptr && !has_value && absl::StartsWith(name, "no")) {
      const FlagSpec* neg = find(absl::string_view(name).substr(2));
      if (neg != nullptr && neg->grammar == Grammar::kBool) {
        spec = neg;
        name = neg->name;
        value = "false";
        has_value = true;
      }
    }
    if (spec == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("--", OneLine(name.substr(0, kMaxQuoted)),
                                                     ": unknown flag (see `ringpipe ", subcommand, " --help`)"));
    }
    if (!has_value) {
      if (spec->grammar == Grammar::kBool) {
        value = "true";
      } else if (i + 1 < args.size() && !absl::StartsWith(args[i + 1], "--")) {
        value = args[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("--", name, ": missing value"));
      }
    }
    if (!spec->repeatable && out.specified.contains(name)) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, ": given twice"));
    }
    if (spec->path && value.empty()) return absl::InvalidArgumentError(absl::StrCat("--", name, ": empty path"));
    RP_RETURN_IF_ERROR(CheckGrammar(absl::StrCat("--", name), spec->grammar, value));
    out.specified.insert(name);
    out.occurrences.emplace_back(name, std::move(value));
  }
  return out;
}

std::string FlagsHelp(const std::vector<FlagSpec>& specs) {
  std::string out;
  for (const FlagSpec& s : specs) {
    absl::StrAppend(&out, "  --", s.name, "=<", GrammarName(s.grammar), ">  (default: ",
                    s.default_text.empty() ? "none" : s.default_text, ")", s.repeatable ? "  (repeatable)" : "", "\n");
    std::string line = "      ";
    for (absl::string_view word : absl::StrSplit(s.help, ' ')) {
      if (line.size() + word.size() > 96 && line.size() > 6) {
        absl::StrAppend(&out, line, "\n");
        line = "      ";
      }
      absl::StrAppend(&line, word, " ");
    }
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

}  // namespace rp::apps
