// The shared driver of `ringpipe allreduce` and `ringpipe alltoall` (see collective_bench.h).
#include "apps/collective_bench.h"

#include <cmath>
#include <cstdio>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "apps/config_fields.h"
#include "apps/files.h"
#include "apps/memory_estimate.h"
#include "apps/shared_flags.h"
#include "comm/codec.h"
#include "runtime/link_models.h"
#include "runtime/status_macros.h"

namespace rp::apps::collective_bench {
namespace {

absl::Status Bad(const char* flag, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", why));
}

void PrintHeader(const Settings& s, const Command& c, bool timed) {
  std::printf("# ringpipe %s: ranks %d, codec %s, segment %s B, link %s, %d iters (%d warmup)\n", c.name, s.ranks,
              comm::CodecName(s.codec), absl::StrJoin(s.segments, ",").c_str(), s.link.c_str(), s.iters, s.warmup);
  for (const std::string& note : c.notes) std::printf("# %s\n", note.c_str());
  if (timed) {
    std::printf("# time: emulated on the %s fabric from one common modeled start (median); formula: %s; "
                "busbw = algbw * %s\n",
                s.link.c_str(), c.formula, c.busbw_rule);
    std::printf("#%12s %12s %6s %10s %12s %12s %10s %10s %14s %8s\n", "size(B)", "count", "type", "segment(B)",
                "time(us)", "formula(us)", "algbw", "busbw", "wire/rank(B)", "#wrong");
  } else {
    std::printf("# time: wall time on this host (median); busbw = algbw * %s\n", c.busbw_rule);
    std::printf("#%12s %12s %6s %10s %12s %10s %10s %14s %8s\n", "size(B)", "count", "type", "segment(B)",
                "time(us)", "algbw", "busbw", "wire/rank(B)", "#wrong");
  }
}

// Prints one row and returns it as JSON.
nlohmann::json PrintRow(const Settings& s, const Command& c, const Row& row, uint64_t segment, bool timed) {
  const char* type = comm::CodecName(s.codec);
  const auto u = [](uint64_t x) { return static_cast<unsigned long long>(x); };
  if (timed) {
    const std::string formula = std::isfinite(row.formula_us) ? absl::StrFormat("%12.3f", row.formula_us)
                                                              : absl::StrFormat("%12s", "n/a");
    std::printf(" %12llu %12llu %6s %10llu %12.3f %s %10.3f %10.3f %14llu %8llu\n", u(row.bytes), u(row.count), type,
                u(segment), row.time_us, formula.c_str(), row.algbw, row.busbw, u(row.wire_bytes_per_rank),
                u(row.wrong));
  } else {
    std::printf(" %12llu %12llu %6s %10llu %12.1f %10.3f %10.3f %14llu %8llu\n", u(row.bytes), u(row.count), type,
                u(segment), row.time_us, row.algbw, row.busbw, u(row.wire_bytes_per_rank), u(row.wrong));
  }
  std::fflush(stdout);
  nlohmann::json j = {
      {"bytes", row.bytes}, {"count", row.count}, {"type", type}, {"ranks", s.ranks},
      {"segment_bytes", segment}, {"link", s.link}, {"time", timed ? "emulated" : "wall"},
      {"time_us", row.time_us},
      {"formula_us", std::isfinite(row.formula_us) ? nlohmann::json(row.formula_us) : nlohmann::json(nullptr)},
      {"algbw_gbps", row.algbw}, {"busbw_gbps", row.busbw}, {"wire_bytes_per_rank", row.wire_bytes_per_rank},
      {"wrong", row.wrong}};
  if (c.row_extra.is_object()) j.update(c.row_extra);
  return j;
}

}  // namespace

std::vector<FlagSpec> Flags(const std::string& min_bytes_help, const std::string& max_bytes_help,
                            const std::string& segment_help) {
  return {
      {"ranks", Grammar::kInt, "4", "Number of ranks (one thread each), 1..1024."},
      {"min_bytes", Grammar::kBytes, "4096", min_bytes_help},
      {"max_bytes", Grammar::kBytes, "64M", max_bytes_help},
      {"step_factor", Grammar::kInt, "4", "Multiply the size by this between rows, >= 2."},
      SharedFieldFlag("segment_bytes", "256K",
                      absl::StrCat("Here a comma list (e.g. 16K,64K,256K,1M) measures every size with each, and 0 "
                                   "is not accepted",
                                   segment_help, ".")),
      SharedFieldFlag("codec", "fp32", ""),
      {"iters", Grammar::kInt, "20", "Timed iterations per size, >= 1."},
      {"warmup", Grammar::kInt, "3", "Untimed iterations per size, >= 0."},
      SharedFieldFlag("link", "ideal",
                      "Here ideal measures wall time on this host (untimed communicators); a preset runs the ranks "
                      "on the modeled fabric and reports the emulated time beside the closed form."),
      {"json", Grammar::kString, "", "Also write the rows as a JSON list to this path.", false, /*path=*/true},
  };
}

absl::Status ReadFlags(const ParsedArgs& args, Settings& s) {
  for (const auto& [flag, out, lo, hi, fallback] :
       {std::tuple<const char*, int*, int64_t, int64_t, int>{"ranks", &s.ranks, 1, 1024, 4},
        {"step_factor", &s.step_factor, 2, 1 << 20, 4},
        {"iters", &s.iters, 1, 1 << 24, 20},
        {"warmup", &s.warmup, 0, 1 << 24, 3}}) {
    const int64_t v = args.Int(flag, fallback);
    if (v < lo || v > hi) return Bad(flag, absl::StrCat("must be in ", lo, "..", hi, ", got ", v));
    *out = static_cast<int>(v);
  }
  s.link = args.Text("link", "ideal");
  s.json = args.Text("json");
  for (const auto& [flag, text, out] :
       {std::tuple<const char*, std::string, uint64_t*>{"min_bytes", args.Text("min_bytes", "4096"), &s.min_bytes},
        std::tuple<const char*, std::string, uint64_t*>{"max_bytes", args.Text("max_bytes", "64M"), &s.max_bytes}}) {
    RP_ASSIGN_OR_RETURN(std::vector<uint64_t> v, ParseByteList(absl::StrCat("--", flag), text));
    if (v.size() != 1) return Bad(flag, "takes one size, not a list");
    *out = v.front();
  }
  if (s.min_bytes < 4) return Bad("min_bytes", "must be >= 4");
  if (s.max_bytes < s.min_bytes) return Bad("max_bytes", "must be >= --min_bytes");
  if (s.max_bytes > (uint64_t{4} << 30)) return Bad("max_bytes", "must be <= 4 GiB");
  RP_ASSIGN_OR_RETURN(s.segments, ParseByteList("--segment_bytes", args.Text("segment_bytes", "256K")));
  if (s.segments.empty()) return Bad("segment_bytes", "needs at least one size");
  for (uint64_t seg : s.segments) {
    if (seg < 4 || seg % 4 != 0 || seg > (uint64_t{1} << 30)) {
      return Bad("segment_bytes", absl::StrCat(seg, " must be a multiple of 4 in [4, 1 GiB]"));
    }
  }
  auto codec = comm::ParseCodec(args.Text("codec", "fp32"));
  if (!codec.ok()) return Bad("codec", std::string(codec.status().message()));
  s.codec = *codec;
  if (s.link != "ideal") {
    auto spec = LinkSpecByName(s.link);
    if (!spec.ok()) return Bad("link", std::string(spec.status().message()));
  }
  return absl::OkStatus();
}

int Fail(const Command& c, int code, const std::string& message) {
  std::fprintf(stderr, "ringpipe %s: %s\n", c.name, message.c_str());
  return code;
}

namespace {

// The sizes measured: min_bytes, × step_factor up to max_bytes, each rounded down to a multiple of
// `unit` (up, when that falls below min_bytes); a size above max_bytes or a repeat is left out.
std::vector<uint64_t> Sizes(const Settings& s, uint64_t unit) {
  std::vector<uint64_t> sizes;
  for (uint64_t bytes = s.min_bytes; bytes <= s.max_bytes; bytes *= static_cast<uint64_t>(s.step_factor)) {
    uint64_t measured = bytes / unit * unit;
    if (measured < s.min_bytes) measured += unit;
    if (measured <= s.max_bytes && (sizes.empty() || sizes.back() != measured)) sizes.push_back(measured);
    if (bytes > s.max_bytes / static_cast<uint64_t>(s.step_factor)) break;  // no overflow
  }
  return sizes;
}

// A rank thread's resident stack, counted per rank (as `run`'s estimate does per device).
constexpr double kRankThreadBytes = 256 << 10;

}  // namespace

double RowHostBytes(const Command& c, int ranks, uint64_t bytes, uint64_t segment, bool timed) {
  const double per_rank = (c.rank_bytes ? c.rank_bytes(bytes, segment, timed) : 0) + kRankThreadBytes;
  return static_cast<double>(ranks) * per_rank;
}

absl::Status CheckMessages(const Settings& s, const Command& c, const std::vector<uint64_t>& sizes) {
  if (!c.rank_messages || sizes.empty()) return absl::OkStatus();
  const double calls = static_cast<double>(s.warmup) + s.iters;
  const uint64_t bytes = sizes.back();  // messages grow with the size
  for (const uint64_t segment : s.segments) {
    const double per_call = c.rank_messages(bytes, segment);
    if (per_call * calls <= kMaxRankMessagesPerRow) continue;
    const std::string row =
        absl::StrFormat("a row of %d B on %d ranks cut into %d B segments is %.0f messages per rank per call, %.0f "
                        "over its %.0f calls (--warmup + --iters); at most %.0f per rank per row (every message costs "
                        "wall time: the row would run for minutes)",
                        bytes, s.ranks, segment, per_call, per_call * calls, calls, kMaxRankMessagesPerRow);
    constexpr uint64_t kLargest = uint64_t{1} << 30;  // --segment_bytes' bound
    if (c.rank_messages(bytes, kLargest) * calls > kMaxRankMessagesPerRow) {
      return Bad("iters", absl::StrCat(row, "; fewer --iters or --warmup"));
    }
    // The smallest segment (a multiple of 4 B) whose row fits: messages fall as segments grow.
    uint64_t lo = segment / 4, hi = kLargest / 4;  // lo does not fit, hi does
    while (hi - lo > 1) {
      const uint64_t mid = lo + (hi - lo) / 2;
      (c.rank_messages(bytes, mid * 4) * calls <= kMaxRankMessagesPerRow ? hi : lo) = mid;
    }
    return Bad("segment_bytes", absl::StrCat(row, "; use segments of at least ", hi * 4, " B for this size"));
  }
  return absl::OkStatus();
}

int Run(const Settings& s, const Command& c) {
  const std::vector<uint64_t> sizes = Sizes(s, c.unit_bytes);
  if (sizes.empty()) {
    return Fail(c, kExitBadInput,
                absl::StrCat("--max_bytes: no size in [", s.min_bytes, ", ", s.max_bytes, "] B (--min_bytes, "
                             "--max_bytes) is a multiple of ", c.unit_bytes, " B",
                             c.unit_bytes > 4 ? absl::StrCat(" (4 B x ", c.unit_bytes / 4, " ranks)") : ""));
  }
  if (absl::Status st = CheckMessages(s, c, sizes); !st.ok()) return Fail(c, kExitBadInput, std::string(st.message()));
  if (c.rank_bytes) {
    // Rows run one at a time, and each frees its buffers: the largest row must fit.
    double largest = 0;
    uint64_t largest_segment = 0;
    for (const uint64_t segment : s.segments) {
      const double b = RowHostBytes(c, s.ranks, sizes.back(), segment, s.link != "ideal");
      if (b > largest) largest = b, largest_segment = segment;
    }
    if (const double available = AvailableMemoryBytes(); largest > available) {
      // --ranks when even a row of the smallest size would not fit (the all-to-all's links grow as n²).
      const bool ranks = RowHostBytes(c, s.ranks, c.unit_bytes, largest_segment, s.link != "ideal") > available;
      return Fail(c, kExitBadInput,
                  absl::StrFormat("--%s: a row of %d B on %d ranks (segment %d B, codec %s) would allocate "
                                  "about %.3g GB; this machine has %.3g GB available (MemAvailable)",
                                  ranks ? "ranks" : "max_bytes", sizes.back(), s.ranks, largest_segment,
                                  comm::CodecName(s.codec), largest / 1e9, available / 1e9));
    }
  }
  OutputFiles outputs;
  if (absl::Status st = outputs.Declare("json", s.json); !st.ok() || !(st = outputs.CheckAll({})).ok()) {
    return Fail(c, kExitBadInput, std::string(st.message()));
  }
  const bool timed = s.link != "ideal";
  absl::StatusOr<LinkSpec> spec = timed ? LinkSpecByName(s.link) : LinkSpec{};
  if (!spec.ok()) return Fail(c, kExitBadInput, absl::StrCat("--link: ", spec.status().message()));
  PrintHeader(s, c, timed);
  nlohmann::json rows = nlohmann::json::array();
  uint64_t total_wrong = 0;
  // With several segment sizes: the fastest one per message size, for the summary line.
  std::vector<std::tuple<uint64_t, uint64_t, double>> best;  // bytes, segment, busbw
  for (const uint64_t bytes : sizes) {
    for (const uint64_t segment : s.segments) {
      auto row = c.run(bytes, segment, timed ? &*spec : nullptr);
      if (!row.ok()) {
        return Fail(c, kExitFailed, absl::StrCat(bytes, " bytes, segment ", segment, " B: ", row.status().ToString()));
      }
      rows.push_back(PrintRow(s, c, *row, segment, timed));
      total_wrong += row->wrong;
      if (best.empty() || std::get<0>(best.back()) != row->bytes) {
        best.emplace_back(row->bytes, segment, row->busbw);
      } else if (row->busbw > std::get<2>(best.back())) {
        best.back() = {row->bytes, segment, row->busbw};
      }
    }
  }
  if (s.segments.size() > 1) {
    std::string line = "# fastest segment per size:";
    for (const auto& [bytes, segment, busbw] : best) {
      absl::StrAppend(&line, " ", bytes, " B -> ", segment, " B (", absl::StrFormat("%.3f", busbw), " GB/s busbw);");
    }
    std::printf("%s\n", line.c_str());
  }
  std::printf("# #wrong total: %llu\n", static_cast<unsigned long long>(total_wrong));
  outputs.Set("json", rows.dump(2) + "\n");
  if (absl::Status st = outputs.Commit(); !st.ok()) return Fail(c, kExitFailed, std::string(st.message()));
  return total_wrong == 0 ? kExitOk : kExitFailed;
}

}  // namespace rp::apps::collective_bench
