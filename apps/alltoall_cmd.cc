// `ringpipe alltoall`: an nccl-tests-style driver for comm/'s pairwise all-to-all (apps/alltoall.h),
// with `ringpipe allreduce`'s columns and flags.
//
// For each size from --min_bytes to --max_bytes (× --step_factor; the bytes each rank sends in all)
// and each --segment_bytes, --ranks rank threads run --warmup untimed and --iters timed all-to-alls.
// With --link=ideal the time is this host's wall time; with a link preset the ranks run on the
// modeled fabric from one common modeled start and the time is the emulated one, printed beside the
// closed form of docs/collectives.md "All-to-all" ("formula"). algbw = bytes / time, busbw = algbw ×
// (n−1)/n (nccl-tests). Every row checks every rank's received blocks against a serial reference
// (#wrong); the exit code is 3 if any element is wrong.
#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "apps/alltoall.h"
#include "apps/cli.h"
#include "apps/config_fields.h"
#include "apps/files.h"
#include "apps/shared_flags.h"
#include "apps/subcommands.h"
#include "comm/codec.h"
#include "nlohmann/json.hpp"
#include "runtime/link_models.h"
#include "runtime/status_macros.h"

namespace rp::apps {
namespace {

using alltoall::Row;
using alltoall::Settings;

absl::StatusOr<Settings> ReadFlags(const ParsedArgs& args) {
  Settings s;
  auto bad = [](const char* flag, const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", why));
  };
  for (const auto& [flag, out, lo, hi, fallback] :
       {std::tuple<const char*, int*, int64_t, int64_t, int>{"ranks", &s.ranks, 1, 1024, 4},
        {"step_factor", &s.step_factor, 2, 1 << 20, 4},
        {"iters", &s.iters, 1, 1 << 24, 20},
        {"warmup", &s.warmup, 0, 1 << 24, 3}}) {
    const int64_t v = args.Int(flag, fallback);
    if (v < lo || v > hi) return bad(flag, absl::StrCat("must be in ", lo, "..", hi, ", got ", v));
    *out = static_cast<int>(v);
  }
  s.link = args.Text("link", "ideal");
  s.json = args.Text("json");
  for (const auto& [flag, text, out] :
       {std::tuple<const char*, std::string, uint64_t*>{"min_bytes", args.Text("min_bytes", "4096"), &s.min_bytes},
        std::tuple<const char*, std::string, uint64_t*>{"max_bytes", args.Text("max_bytes", "64M"), &s.max_bytes}}) {
    RP_ASSIGN_OR_RETURN(std::vector<uint64_t> v, ParseByteList(absl::StrCat("--", flag), text));
    if (v.size() != 1) return bad(flag, "takes one size, not a list");
    *out = v.front();
  }
  if (s.min_bytes < 4) return bad("min_bytes", "must be >= 4");
  if (s.max_bytes < s.min_bytes) return bad("max_bytes", "must be >= --min_bytes");
  if (s.max_bytes > (uint64_t{4} << 30)) return bad("max_bytes", "must be <= 4 GiB");
  RP_ASSIGN_OR_RETURN(s.segments, ParseByteList("--segment_bytes", args.Text("segment_bytes", "256K")));
  if (s.segments.empty()) return bad("segment_bytes", "needs at least one size");
  for (uint64_t seg : s.segments) {
    if (seg < 4 || seg % 4 != 0 || seg > (uint64_t{1} << 30)) {
      return bad("segment_bytes", absl::StrCat(seg, " must be a multiple of 4 in [4, 1 GiB]"));
    }
  }
  auto codec = comm::ParseCodec(args.Text("codec", "fp32"));
  if (!codec.ok()) return bad("codec", std::string(codec.status().message()));
  s.codec = *codec;
  if (s.link != "ideal") {
    auto spec = LinkSpecByName(s.link);
    if (!spec.ok()) return bad("link", std::string(spec.status().message()));
  }
  return s;
}

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "ringpipe alltoall: %s\n", message.c_str());
  return code;
}

void PrintHeader(const Settings& s, bool timed) {
  std::printf("# ringpipe alltoall: ranks %d, codec %s, segment %s B, link %s, %d iters (%d warmup)\n", s.ranks,
              comm::CodecName(s.codec), absl::StrJoin(s.segments, ",").c_str(), s.link.c_str(), s.iters, s.warmup);
  std::printf("# pairwise exchange, n-1 steps; size = bytes each rank sends in all (its own block included), "
              "count rounded down to a multiple of the ranks\n");
  if (timed) {
    std::printf("# time: emulated on the %s fabric from one common modeled start (median); formula: the closed form "
                "of docs/collectives.md \"All-to-all\" (n/a when the pairs span both link classes); busbw = algbw * "
                "(n-1)/n\n",
                s.link.c_str());
    std::printf("#%12s %12s %6s %10s %12s %12s %10s %10s %14s %8s\n", "size(B)", "count", "type", "segment(B)",
                "time(us)", "formula(us)", "algbw", "busbw", "wire/rank(B)", "#wrong");
  } else {
    std::printf("# time: wall time on this host (median); busbw = algbw * (n-1)/n\n");
    std::printf("#%12s %12s %6s %10s %12s %10s %10s %14s %8s\n", "size(B)", "count", "type", "segment(B)",
                "time(us)", "algbw", "busbw", "wire/rank(B)", "#wrong");
  }
}

nlohmann::json PrintRow(const Settings& s, const Row& row, uint64_t segment, bool timed) {
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
  return {{"bytes", row.bytes}, {"count", row.count}, {"type", type}, {"ranks", s.ranks},
          {"segment_bytes", segment}, {"link", s.link}, {"time", timed ? "emulated" : "wall"},
          {"time_us", row.time_us},
          {"formula_us", std::isfinite(row.formula_us) ? nlohmann::json(row.formula_us) : nlohmann::json(nullptr)},
          {"algbw_gbps", row.algbw}, {"busbw_gbps", row.busbw}, {"wire_bytes_per_rank", row.wire_bytes_per_rank},
          {"wrong", row.wrong}};
}

int Run(const ParsedArgs& args) {
  auto settings = ReadFlags(args);
  if (!settings.ok()) return Fail(kExitBadInput, std::string(settings.status().message()));
  const Settings& s = *settings;
  OutputFiles outputs;
  if (absl::Status st = outputs.Declare("json", s.json); !st.ok() || !(st = outputs.CheckAll({})).ok()) {
    return Fail(kExitBadInput, std::string(st.message()));
  }
  const bool timed = s.link != "ideal";
  absl::StatusOr<LinkSpec> spec = timed ? LinkSpecByName(s.link) : LinkSpec{};
  if (!spec.ok()) return Fail(kExitBadInput, absl::StrCat("--link: ", spec.status().message()));
  PrintHeader(s, timed);
  nlohmann::json rows = nlohmann::json::array();
  uint64_t total_wrong = 0;
  for (uint64_t bytes = s.min_bytes; bytes <= s.max_bytes; bytes *= static_cast<uint64_t>(s.step_factor)) {
    for (const uint64_t segment : s.segments) {
      auto row = timed ? alltoall::RunTimed(s, bytes, segment, *spec) : alltoall::RunUntimed(s, bytes, segment);
      if (!row.ok()) {
        return Fail(kExitFailed, absl::StrCat(bytes, " bytes, segment ", segment, " B: ", row.status().ToString()));
      }
      rows.push_back(PrintRow(s, *row, segment, timed));
      total_wrong += row->wrong;
    }
    if (bytes > s.max_bytes / static_cast<uint64_t>(s.step_factor)) break;  // no overflow
  }
  std::printf("# #wrong total: %llu\n", static_cast<unsigned long long>(total_wrong));
  outputs.Set("json", rows.dump(2) + "\n");
  if (absl::Status st = outputs.Commit(); !st.ok()) return Fail(kExitFailed, std::string(st.message()));
  return total_wrong == 0 ? kExitOk : kExitFailed;
}

std::vector<FlagSpec> Flags() {
  return {
      {"ranks", Grammar::kInt, "4", "Number of ranks (one thread each), 1..1024."},
      {"min_bytes", Grammar::kBytes, "4096",
       "Smallest size: bytes each rank sends in all, its own block included (FP32 buffer), >= 4."},
      {"max_bytes", Grammar::kBytes, "64M", "Largest size in bytes, >= min_bytes, <= 4G."},
      {"step_factor", Grammar::kInt, "4", "Multiply the size by this between rows, >= 2."},
      SharedFieldFlag("segment_bytes", "256K",
                      "Here a comma list (e.g. 16K,64K,256K,1M) measures every size with each, and 0 is not "
                      "accepted: a block is cut into messages of at most this size."),
      SharedFieldFlag("codec", "fp32", ""),
      {"iters", Grammar::kInt, "20", "Timed iterations per size, >= 1."},
      {"warmup", Grammar::kInt, "3", "Untimed iterations per size, >= 0."},
      SharedFieldFlag("link", "ideal",
                      "Here ideal measures wall time on this host (untimed communicators); a preset runs the ranks "
                      "on the modeled fabric and reports the emulated time beside the closed form."),
      {"json", Grammar::kString, "", "Also write the rows as a JSON list to this path."},
  };
}

}  // namespace

Subcommand AllToAllSubcommand() {
  return {"alltoall", "nccl-tests-style benchmark of the pairwise all-to-all (expert parallelism's collective)",
          Flags, Run};
}

}  // namespace rp::apps
