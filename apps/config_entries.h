// Internal to apps/config_fields.cc and apps/config_table.cc: how a config field's entry reads a JSON
// value (the type, and whether the member can hold it; ranges are the validation's) and the entry
// builders the field table (config_table.cc) is written with. Not for other users.
//
// Thread safety: pure functions.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "apps/config_budget.h"
#include "apps/config_fields.h"
#include "runtime/status_macros.h"

namespace rp::apps::entries {

using json = nlohmann::json;


inline absl::Status Bad(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(OneLine(field), ": ", why));
}

// --- JSON value readers: the type, and whether the member can hold the value (ranges are validation's) ---

// Whether `v` is an integer: a JSON integer, or a finite number without a fraction (2.0, 1e300).
inline bool IsIntegral(const json& v) {
  return v.is_number_integer() ||
         (v.is_number_float() && std::isfinite(v.get<double>()) && std::floor(v.get<double>()) == v.get<double>());
}

template <typename T>
absl::StatusOr<T> AsInt(absl::string_view f, const json& v) {
  if (!IsIntegral(v)) return Bad(f, absl::StrCat("expected an integer, got ", ShortDump(v)));
  const double d = v.get<double>();
  // A float's bound is 2^digits, the first value past T's max: the max itself is not a double for 64
  // bits (it rounds up to 2^63, which the cast below could not hold).
  const bool fits = v.is_number_unsigned()  ? std::in_range<T>(v.get<uint64_t>())
                    : v.is_number_integer() ? std::in_range<T>(v.get<int64_t>())
                                            : d >= static_cast<double>(std::numeric_limits<T>::min()) &&
                                                  d < std::ldexp(1.0, std::numeric_limits<T>::digits);
  if (!fits) return Bad(f, absl::StrCat("must be in ", std::numeric_limits<T>::min(), "..",
                                        std::numeric_limits<T>::max(), ", got ", ShortDump(v)));
  if (v.is_number_unsigned()) return static_cast<T>(v.get<uint64_t>());
  if (v.is_number_integer()) return static_cast<T>(v.get<int64_t>());
  return static_cast<T>(d);
}

// AsInt for a field of range lo..hi (validation checks it): an integer the member cannot hold is out
// of that range, and said so — not as T's range, which is no field's ({"dp": 1e300}).
template <typename T>
absl::StatusOr<T> AsIntIn(absl::string_view f, const json& v, int64_t lo, int64_t hi) {
  absl::StatusOr<T> x = AsInt<T>(f, v);
  if (!x.ok() && IsIntegral(v)) return Bad(f, absl::StrCat("must be in ", lo, "..", hi, ", got ", ShortDump(v)));
  return x;
}

inline absl::StatusOr<double> AsDouble(absl::string_view f, const json& v) {
  if (!v.is_number()) return Bad(f, absl::StrCat("expected a number, got ", ShortDump(v)));
  const double d = v.get<double>();
  if (!std::isfinite(d)) return Bad(f, "must be finite");
  return d;
}

inline absl::StatusOr<std::string> AsString(absl::string_view f, const json& v) {
  if (!v.is_string()) return Bad(f, absl::StrCat("expected a string, got ", ShortDump(v)));
  const std::string& s = v.get_ref<const std::string&>();
  RP_RETURN_IF_ERROR(CheckGrammar(f, Grammar::kString, s));
  return s;
}

inline absl::StatusOr<bool> AsBool(absl::string_view f, const json& v) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_string()) return ParseBool(f, v.get_ref<const std::string&>());
  return Bad(f, absl::StrCat("expected true or false, got ", ShortDump(v)));
}

inline absl::StatusOr<std::vector<double>> AsDoubleList(absl::string_view f, const json& v) {
  if (v.is_string()) return ParseNumberList(f, v.get_ref<const std::string&>());
  if (v.is_number()) {
    RP_ASSIGN_OR_RETURN(double d, AsDouble(f, v));
    return std::vector<double>{d};
  }
  if (!v.is_array() || v.size() > kMaxListItems) {
    return Bad(f, absl::StrCat("expected a number or a list of at most ", kMaxListItems, " numbers, got ",
                               ShortDump(v)));
  }
  std::vector<double> out;
  for (size_t i = 0; i < v.size(); ++i) {
    RP_ASSIGN_OR_RETURN(double d, AsDouble(absl::StrCat(f, "[", i, "]"), v[i]));
    out.push_back(d);
  }
  return out;
}

inline absl::StatusOr<std::vector<int>> AsWidthList(absl::string_view f, const json& v) {
  if (v.is_string()) return ParseWidthList(f, v.get_ref<const std::string&>());
  if (v.is_number()) {
    RP_ASSIGN_OR_RETURN(int x, AsInt<int>(f, v));
    if (x < 1) return Bad(f, absl::StrCat("must be >= 1, got ", x));
    return std::vector<int>{x};
  }
  if (!v.is_array() || v.size() > kMaxListItems) {
    return Bad(f, absl::StrCat("expected a list of at most ", kMaxListItems, " integers, got ", ShortDump(v)));
  }
  std::vector<int> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string item = absl::StrCat(f, "[", i, "]");
    RP_ASSIGN_OR_RETURN(int x, AsInt<int>(item, v[i]));
    if (x < 1) return Bad(item, absl::StrCat("must be >= 1, got ", x));
    out.push_back(x);
  }
  return out;
}

// A byte count: a JSON integer, or a string in the bytes grammar ("64K"); one size, not a list. An
// integer below 0 or beyond 64 bits is out of the field's documented `range` (kSegmentBytesRange), and
// said so — not as int64's range ({"segment_bytes": 1e300}).
inline absl::StatusOr<uint64_t> AsBytes(absl::string_view f, const json& v, absl::string_view range) {
  if (v.is_string()) {
    RP_ASSIGN_OR_RETURN(std::vector<uint64_t> list, ParseByteList(f, v.get_ref<const std::string&>()));
    if (list.size() != 1) {
      return Bad(f, absl::StrCat("takes one size, got ", list.size(),
                                 " (`ringpipe allreduce` measures a list; a sweep varies it with --axis)"));
    }
    return list[0];
  }
  if (v.is_array() && v.size() == 1) return AsBytes(f, v[0], range);
  absl::StatusOr<int64_t> x = AsInt<int64_t>(f, v);
  if ((!x.ok() && IsIntegral(v)) || (x.ok() && *x < 0)) {
    return Bad(f, absl::StrCat("must be ", range, ", got ", ShortDump(v)));
  }
  RP_RETURN_IF_ERROR(x.status());
  return static_cast<uint64_t>(*x);
}

// moe_layers (apps/moe_config.h): its text, a list of layer indices (joined with commas) or one index.
inline absl::StatusOr<std::string> AsMoeLayers(absl::string_view f, const json& v) {
  if (v.is_string()) return AsString(f, v);
  if (v.is_number()) {
    RP_ASSIGN_OR_RETURN(int layer, AsInt<int>(f, v));
    return absl::StrCat(layer);
  }
  if (!v.is_array() || v.size() > kMaxListItems) {
    return Bad(f, absl::StrCat("expected none, all, every:N or a list of at most ", kMaxListItems,
                               " layer indices, got ", ShortDump(v)));
  }
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    RP_ASSIGN_OR_RETURN(int layer, AsInt<int>(absl::StrCat(f, "[", i, "]"), v[i]));
    absl::StrAppend(&out, i == 0 ? "" : ",", layer);
  }
  return out;
}

// --- Entry builders. `M` returns the member of a config: [](RunConfig& c) -> auto& { return c.x; } ---

template <typename M>
auto Member(M m) {
  return [m](const RunConfig& c) -> const auto& { return m(const_cast<RunConfig&>(c)); };
}

template <typename M>
ConfigField IntF(const char* name, M m, int64_t lo, int64_t hi, const char* help, unsigned scope = kEveryRun) {
  using T = std::remove_reference_t<decltype(m(std::declval<RunConfig&>()))>;
  return {name, Grammar::kInt, scope, lo, hi, help, nullptr,
          [=](RunConfig& c, const json& v) -> absl::Status {
            RP_ASSIGN_OR_RETURN(m(c), AsIntIn<T>(name, v, lo, hi));
            return absl::OkStatus();
          },
          [=](const RunConfig& c) { return json(Member(m)(c)); }};
}

// A float member's value as JSON: the double of its shortest decimal (0.05f echoes as 0.05, not
// 0.05000000074505806, and reads back as the same float).
inline std::string FloatText(float f) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), f);
  return std::string(buf, r.ptr);
}
inline json FloatJson(float f) {
  const std::string text = FloatText(f);
  double d = 0;
  std::from_chars(text.data(), text.data() + text.size(), d);
  return json(d);
}

template <typename M>
ConfigField NumberF(const char* name, M m, const char* help, const char* unset = nullptr,
                    unsigned scope = kEveryRun) {
  return {name, Grammar::kNumber, scope, 1, 0, help, unset,
          [=](RunConfig& c, const json& v) -> absl::Status {
            RP_ASSIGN_OR_RETURN(double d, AsDouble(name, v));
            using T = std::remove_reference_t<decltype(m(c))>;
            if constexpr (std::is_same_v<T, float>) {
              // A float member (the optimizer's): a value it cannot hold is told as given, not as the
              // float it would become ("lr: must be > 0, got 0" for 1e-50).
              if (std::fabs(d) > static_cast<double>(std::numeric_limits<float>::max())) {
                return Bad(name, absl::StrCat("must be at most ", FloatText(std::numeric_limits<float>::max()),
                                              " in magnitude (a 32-bit float), got ", budget::Exact(d)));
              }
              if (d != 0 && static_cast<float>(d) == 0) {
                return Bad(name, absl::StrCat(budget::Exact(d), " is 0 as a 32-bit float (the smallest is ",
                                              FloatText(std::numeric_limits<float>::denorm_min()), ")"));
              }
            }
            m(c) = static_cast<T>(d);
            return absl::OkStatus();
          },
          [=](const RunConfig& c) {
            if constexpr (std::is_same_v<std::remove_cvref_t<decltype(Member(m)(c))>, float>) {
              return FloatJson(Member(m)(c));
            } else {
              return json(Member(m)(c));
            }
          }};
}

// An optional number (a link override): unset is JSON null (the report's echo; a file may say null too).
template <typename M>
ConfigField OptionalNumberF(const char* name, M m, const char* help, const char* unset) {
  return {name, Grammar::kNumber, kEveryRun, 1, 0, help, unset,
          [=](RunConfig& c, const json& v) -> absl::Status {
            if (v.is_null()) {
              m(c).reset();
              return absl::OkStatus();
            }
            RP_ASSIGN_OR_RETURN(m(c), AsDouble(name, v));
            return absl::OkStatus();
          },
          [=](const RunConfig& c) { return Member(m)(c).has_value() ? json(*Member(m)(c)) : json(nullptr); }};
}

// A number, or the JSON string / flag text "auto" stored as `auto_value` (outside the number's range,
// `range`, which validation checks and a number equal to `auto_value` is told in the same words).
template <typename M>
ConfigField NumberOrAutoF(const char* name, M m, double auto_value, const char* range, const char* help) {
  return {name, Grammar::kNumberOrAuto, kEveryRun, 1, 0, help, "auto",
          [=](RunConfig& c, const json& v) -> absl::Status {
            if (v.is_string() && v.get_ref<const std::string&>() == "auto") {
              m(c) = auto_value;
              return absl::OkStatus();
            }
            if (!v.is_number()) return Bad(name, absl::StrCat("expected a number or auto, got ", ShortDump(v)));
            RP_ASSIGN_OR_RETURN(double d, AsDouble(name, v));
            if (d == auto_value) return Bad(name, absl::StrCat("must be in ", range, " or auto, got ", budget::Exact(d)));
            m(c) = d;
            return absl::OkStatus();
          },
          [=](const RunConfig& c) { return Member(m)(c) == auto_value ? json("auto") : json(Member(m)(c)); }};
}

template <typename M>
ConfigField BoolF(const char* name, M m, const char* help, unsigned scope = kEveryRun) {
  return {name, Grammar::kBool, scope, 1, 0, help, nullptr,
          [=](RunConfig& c, const json& v) -> absl::Status {
            RP_ASSIGN_OR_RETURN(m(c), AsBool(name, v));
            return absl::OkStatus();
          },
          [=](const RunConfig& c) { return json(Member(m)(c)); }};
}

template <typename M>
ConfigField StringF(const char* name, M m, const char* help, unsigned scope = kEveryRun,
                    const char* unset = nullptr) {
  return {name, Grammar::kString, scope, 1, 0, help, unset,
          [=](RunConfig& c, const json& v) -> absl::Status {
            RP_ASSIGN_OR_RETURN(m(c), AsString(name, v));
            return absl::OkStatus();
          },
          [=](const RunConfig& c) { return json(Member(m)(c)); }};
}

template <typename M>
ConfigField MsListF(const char* name, M m, const char* help, const char* unset = nullptr) {
  return {name, Grammar::kNumberList, kEveryRun, 1, 0, help, unset,
          [=](RunConfig& c, const json& v) -> absl::Status {
            RP_ASSIGN_OR_RETURN(m(c), AsDoubleList(name, v));
            return absl::OkStatus();
          },
          [=](const RunConfig& c) { return json(Member(m)(c)); }};
}

template <typename M>
ConfigField WidthsF(const char* name, M m, const char* help, const char* unset = nullptr) {
  return {name, Grammar::kWidthList, kEveryRun, 1, 0, help, unset,
          [=](RunConfig& c, const json& v) -> absl::Status {
            RP_ASSIGN_OR_RETURN(m(c), AsWidthList(name, v));
            return absl::OkStatus();
          },
          [=](const RunConfig& c) { return json(Member(m)(c)); }};
}

// A named choice: `parse` maps a name to the value (InvalidArgument without the field name), `print`
// back.
template <typename M, typename Parse, typename Print>
ConfigField EnumF(const char* name, M m, Parse parse, Print print, const char* help) {
  return {name, Grammar::kString, kEveryRun, 1, 0, help, nullptr,
          [=](RunConfig& c, const json& v) -> absl::Status {
            RP_ASSIGN_OR_RETURN(std::string s, AsString(name, v));
            auto value = parse(s);
            if (!value.ok()) return Bad(name, value.status().message());
            m(c) = *value;
            return absl::OkStatus();
          },
          [=](const RunConfig& c) { return json(std::string(print(Member(m)(c)))); }};
}

// The field table, in help order (apps/config_table.cc); Fields() keeps it.
std::vector<ConfigField>* BuildFieldTable();

}  // namespace rp::apps::entries
