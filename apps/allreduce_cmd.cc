// `ringpipe allreduce`: an nccl-tests-style driver for comm/'s chunked ring all-reduce.
//
// For each size from --min_bytes to --max_bytes (× --step_factor), one Communicator of --ranks rank
// threads runs --warmup untimed and --iters timed all-reduces. A timed iteration starts when every
// rank has passed a barrier and ends when the last rank returns; the row shows the median over
// iterations. With --link=ideal the time is wall time on this host; with a link preset it is the
// modeled time of the emulated cluster (ranks also really wait for it on a real clock). algbw =
// bytes / time, busbw = algbw × 2(n−1)/n (nccl-tests' convention). Every row checks the result of
// the last iteration on every rank against a serial reference on exactly-summable data (#wrong).
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "apps/cli.h"
#include "apps/config_fields.h"
#include "apps/files.h"
#include "apps/shared_flags.h"
#include "apps/subcommands.h"
#include "comm/codec.h"
#include "comm/communicator.h"
#include "nlohmann/json.hpp"
#include "runtime/link_models.h"
#include "runtime/mutex.h"
#include "runtime/real_clock.h"
#include "runtime/status_macros.h"

namespace rp::apps {
namespace {

struct Row {
  uint64_t bytes = 0;
  uint64_t count = 0;
  double time_us = 0;
  double algbw = 0;
  double busbw = 0;
  uint64_t wrong = 0;
  uint64_t wire_bytes_per_rank = 0;
};

struct Settings {
  int ranks;
  uint64_t min_bytes, max_bytes;
  int step_factor;
  std::vector<uint64_t> segments;  // --segment_bytes, in order
  comm::Codec codec;
  int iters, warmup;
  std::string link;
  std::string json;
  bool in_place;
  bool forward;
  uint64_t streaming_min_bytes;
};

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
  s.in_place = args.Bool("in_place", false);
  s.forward = args.Bool("forward", true);
  RP_ASSIGN_OR_RETURN(s.streaming_min_bytes,
                      ParseBytes("--streaming_min_bytes",
                                 args.Text("streaming_min_bytes", absl::StrCat(comm::kDefaultStreamingMinBytes))));
  for (const auto& [flag, text, out] :
       {std::tuple<const char*, std::string, uint64_t*>{"min_bytes", args.Text("min_bytes", "4096"), &s.min_bytes},
        std::tuple<const char*, std::string, uint64_t*>{"max_bytes", args.Text("max_bytes", "64M"), &s.max_bytes}}) {
    auto v = ParseByteList(absl::StrCat("--", flag), text);
    if (!v.ok()) return v.status();
    if (v->size() != 1) return bad(flag, "takes one size, not a list");
    *out = v->front();
  }
  if (s.min_bytes < 4) return bad("min_bytes", "must be >= 4");
  if (s.max_bytes < s.min_bytes) return bad("max_bytes", "must be >= --min_bytes");
  if (s.max_bytes > (uint64_t{4} << 30)) return bad("max_bytes", "must be <= 4 GiB");
  {
    auto segments = ParseByteList("--segment_bytes", args.Text("segment_bytes", "256K"));
    if (!segments.ok()) return segments.status();
    s.segments = *std::move(segments);
    if (s.segments.empty()) return bad("segment_bytes", "needs at least one size");
    for (uint64_t seg : s.segments) {
      if (seg < 4 || seg % 4 != 0 || seg > (uint64_t{1} << 30)) {
        return bad("segment_bytes", absl::StrCat(seg, " must be a multiple of 4 in [4, 1 GiB]"));
      }
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

// Exactly-summable input: small integers, so every ordering of the FP32 sum is exact.
float InputValue(uint64_t i, int rank) { return static_cast<float>((i + static_cast<uint64_t>(rank)) % 7); }

// Largest deviation from the exact sum that the codec allows on this data (docs/collectives.md):
// FP32, FP16 and BF16 carry sums of integers <= 6n <= 6144 exactly (FP16 and BF16 up to 2048 and 256
// respectively, so for larger n those two get the relative bound); INT8 re-quantizes the running
// partial sum at each of the n-1 reduce-scatter hops and once more at the owner, each time with an
// error below max|partial| / 127 <= 6n / 127.
double Tolerance(comm::Codec codec, int n) {
  const double max_sum = 6.0 * n;
  switch (codec) {
    case comm::Codec::kFp32: return 0;
    case comm::Codec::kFp16: return max_sum <= 2048 ? 0 : n * max_sum * std::ldexp(1.0, -11);
    case comm::Codec::kBf16: return max_sum <= 256 ? 0 : n * max_sum * std::ldexp(1.0, -8);
    case comm::Codec::kInt8: return n * max_sum / 127.0;
  }
  return 0;
}

absl::StatusOr<Row> RunSize(const Settings& s, uint64_t bytes, uint64_t segment, LinkModel* link,
                            RealClock* clock) {
  const int n = s.ranks;
  const uint64_t count = bytes / sizeof(float);
  std::vector<int> devices(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) devices[static_cast<size_t>(r)] = r;
  RP_ASSIGN_OR_RETURN(auto comm,
                      comm::Communicator::Create({.devices = devices,
                                                  .link = link,
                                                  .clock = clock,
                                                  .forward_lends = s.forward,
                                                  .streaming_min_bytes = s.streaming_min_bytes}));
  const comm::CollectiveOptions options{.codec = s.codec, .segment_bytes = segment};
  const int total_iters = s.warmup + s.iters;

  using SteadyTime = std::chrono::steady_clock::time_point;
  // [iter][rank]: wall start/end and modeled duration of each rank's call.
  std::vector<std::vector<SteadyTime>> starts(total_iters, std::vector<SteadyTime>(n));
  std::vector<std::vector<SteadyTime>> ends(total_iters, std::vector<SteadyTime>(n));
  std::vector<std::vector<Nanos>> modeled(total_iters, std::vector<Nanos>(n));
  std::vector<absl::Status> status(static_cast<size_t>(n));
  std::vector<uint64_t> wrong(static_cast<size_t>(n), 0);
  std::vector<uint64_t> wire(static_cast<size_t>(n), 0);
  std::barrier sync(n);
  const double tol = Tolerance(s.codec, n);

  auto rank_main = [&](int r) {
    // Out of place (default), as nccl-tests and the MPI peer measure: `in` is written once and
    // every iteration reduces it into `buf`. In place: `buf` is refilled before every call.
    std::vector<float> in(s.in_place ? 0 : count), buf(count);
    for (uint64_t i = 0; i < in.size(); ++i) in[i] = InputValue(i, r);
    comm::RankComm& me = comm->rank(r);
    Nanos t = kZeroTime;
    for (int it = 0; it < total_iters; ++it) {
      if (s.in_place) {
        for (uint64_t i = 0; i < count; ++i) buf[i] = InputValue(i, r);
      }
      sync.arrive_and_wait();
      if (clock != nullptr) t = std::max(t, clock->Now());
      starts[it][r] = std::chrono::steady_clock::now();
      auto res = s.in_place ? me.AllReduce(buf, buf, options, t) : me.AllReduce(in, buf, options, t);
      ends[it][r] = std::chrono::steady_clock::now();
      if (!res.ok()) {
        status[r] = res.status();
        comm->Abort(res.status());
        sync.arrive_and_drop();
        return;
      }
      modeled[it][r] = res->end - res->start;
      t = res->end;
      wire[r] = res->wire_bytes;
    }
    for (uint64_t i = 0; i < count; ++i) {
      double expect = 0;
      for (int q = 0; q < n; ++q) expect += InputValue(i, q);
      if (!(std::fabs(static_cast<double>(buf[i]) - expect) <= tol)) ++wrong[r];
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) threads.emplace_back(rank_main, r);
  for (auto& th : threads) th.join();
  for (const absl::Status& st : status) RP_RETURN_IF_ERROR(st);

  std::vector<double> times;
  for (int it = s.warmup; it < total_iters; ++it) {
    double us;
    if (link == nullptr) {
      const SteadyTime t0 = *std::min_element(starts[it].begin(), starts[it].end());
      const SteadyTime t1 = *std::max_element(ends[it].begin(), ends[it].end());
      us = std::chrono::duration<double, std::micro>(t1 - t0).count();
    } else {
      us = static_cast<double>(std::max_element(modeled[it].begin(), modeled[it].end())->count()) / 1e3;
    }
    times.push_back(us);
  }
  std::nth_element(times.begin(), times.begin() + static_cast<ptrdiff_t>(times.size() / 2), times.end());
  Row row;
  row.bytes = count * sizeof(float);
  row.count = count;
  row.time_us = times[times.size() / 2];
  row.algbw = row.time_us > 0 ? static_cast<double>(row.bytes) / (row.time_us * 1e3) : 0;
  row.busbw = row.algbw * (n > 1 ? 2.0 * (n - 1) / n : 0.0);
  for (uint64_t w : wrong) row.wrong += w;
  row.wire_bytes_per_rank = *std::max_element(wire.begin(), wire.end());
  return row;
}

int Run(const ParsedArgs& args) {
  auto settings = ReadFlags(args);
  if (!settings.ok()) {
    std::fprintf(stderr, "ringpipe allreduce: %s\n", std::string(settings.status().message()).c_str());
    return kExitBadInput;
  }
  const Settings& s = *settings;
  OutputFiles outputs;
  if (absl::Status st = outputs.Declare("json", s.json); !st.ok() || !(st = outputs.CheckAll({})).ok()) {
    std::fprintf(stderr, "ringpipe allreduce: %s\n", std::string(st.message()).c_str());
    return kExitBadInput;
  }
  std::unique_ptr<AlphaBetaLinkModel> link;
  std::unique_ptr<RealClock> clock;
  if (s.link != "ideal") {
    auto spec = LinkSpecByName(s.link);
    auto made = spec.ok() ? AlphaBetaLinkModel::Create(*spec, s.ranks)
                          : absl::StatusOr<std::unique_ptr<AlphaBetaLinkModel>>(spec.status());
    auto made_clock = RealClock::Create({});
    if (!made.ok() || !made_clock.ok()) {
      std::fprintf(stderr, "ringpipe allreduce: --link: %s\n",
                   std::string((made.ok() ? made_clock.status() : made.status()).message()).c_str());
      return kExitBadInput;
    }
    link = std::move(*made);
    clock = std::move(*made_clock);
  }
  const char* type = comm::CodecName(s.codec);
  std::printf("# ringpipe allreduce: ranks %d, codec %s, segment %s B, link %s, %d iters (%d warmup)\n",
              s.ranks, type, absl::StrJoin(s.segments, ",").c_str(), s.link.c_str(), s.iters,
              s.warmup);
  std::printf("# %s; all-gather forwarding %s\n",
              s.in_place ? "in place, input refilled before every call" : "out of place",
              s.forward ? absl::StrCat("on (streaming stores when size x ranks >= ",
                                       s.streaming_min_bytes, " B)").c_str()
                        : "off");
  std::printf("# time: %s; busbw = algbw * 2(n-1)/n\n",
              link ? "modeled time of the emulated links (median)" : "wall time on this host (median)");
  std::printf("#%12s %12s %6s %10s %12s %10s %10s %14s %8s\n", "size(B)", "count", "type",
              "segment(B)", "time(us)", "algbw", "busbw", "wire/rank(B)", "#wrong");
  nlohmann::json rows = nlohmann::json::array();
  uint64_t total_wrong = 0;
  // With several segment sizes: the fastest one per message size, for the summary line.
  std::vector<std::tuple<uint64_t, uint64_t, double>> best;  // bytes, segment, busbw
  for (uint64_t bytes = s.min_bytes; bytes <= s.max_bytes; bytes *= static_cast<uint64_t>(s.step_factor)) {
    for (const uint64_t segment : s.segments) {
      auto row = RunSize(s, bytes, segment, link.get(), clock.get());
      if (!row.ok()) {
        std::fprintf(stderr, "ringpipe allreduce: %llu bytes, segment %llu B: %s\n",
                     static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(segment),
                     row.status().ToString().c_str());
        return kExitFailed;
      }
      std::printf(" %12llu %12llu %6s %10llu %12.1f %10.3f %10.3f %14llu %8llu\n",
                  static_cast<unsigned long long>(row->bytes),
                  static_cast<unsigned long long>(row->count), type,
                  static_cast<unsigned long long>(segment), row->time_us, row->algbw, row->busbw,
                  static_cast<unsigned long long>(row->wire_bytes_per_rank),
                  static_cast<unsigned long long>(row->wrong));
      std::fflush(stdout);
      total_wrong += row->wrong;
      if (best.empty() || std::get<0>(best.back()) != row->bytes) {
        best.emplace_back(row->bytes, segment, row->busbw);
      } else if (row->busbw > std::get<2>(best.back())) {
        best.back() = {row->bytes, segment, row->busbw};
      }
      rows.push_back({{"bytes", row->bytes}, {"count", row->count}, {"type", type},
                      {"ranks", s.ranks}, {"segment_bytes", segment}, {"link", s.link},
                      {"in_place", s.in_place}, {"forward", s.forward},
                      {"time_us", row->time_us}, {"algbw_gbps", row->algbw},
                      {"busbw_gbps", row->busbw}, {"wire_bytes_per_rank", row->wire_bytes_per_rank},
                      {"wrong", row->wrong}});
    }
    if (bytes > s.max_bytes / static_cast<uint64_t>(s.step_factor)) break;  // no overflow
  }
  if (s.segments.size() > 1) {
    std::string line = "# fastest segment per size:";
    for (const auto& [bytes, segment, busbw] : best) {
      absl::StrAppend(&line, " ", bytes, " B -> ", segment, " B (", absl::StrFormat("%.3f", busbw),
                      " GB/s busbw);");
    }
    std::printf("%s\n", line.c_str());
  }
  std::printf("# #wrong total: %llu\n", static_cast<unsigned long long>(total_wrong));
  outputs.Set("json", rows.dump(2) + "\n");
  if (absl::Status st = outputs.Commit(); !st.ok()) {
    std::fprintf(stderr, "ringpipe allreduce: %s\n", std::string(st.message()).c_str());
    return kExitFailed;
  }
  return total_wrong == 0 ? kExitOk : kExitFailed;
}

std::vector<FlagSpec> Flags() {
  return {
      {"ranks", Grammar::kInt, "4", "Number of ranks (one thread each), 1..1024."},
      {"min_bytes", Grammar::kBytes, "4096", "Smallest message size in bytes (FP32 buffer), >= 4."},
      {"max_bytes", Grammar::kBytes, "64M", "Largest message size in bytes, >= min_bytes, <= 4G."},
      {"step_factor", Grammar::kInt, "4", "Multiply the size by this between rows, >= 2."},
      SharedFieldFlag("segment_bytes", "256K",
                      "Here a comma list (e.g. 16K,64K,256K,1M) measures every size with each, and 0 is not "
                      "accepted."),
      SharedFieldFlag("codec", "fp32", ""),
      {"iters", Grammar::kInt, "20", "Timed iterations per size, >= 1."},
      {"warmup", Grammar::kInt, "3", "Untimed iterations per size, >= 0."},
      SharedFieldFlag("link", "ideal", "Here ideal measures wall time on this host; a preset, modeled time."),
      {"json", Grammar::kString, "", "Also write the rows as a JSON list to this path."},
      {"in_place", Grammar::kBool, "false",
       "Reduce in place (out = in), refilling the input before every call as a training step would write fresh "
       "gradients; default out of place (in -> out), as nccl-tests and MPI benchmarks measure."},
      {"forward", Grammar::kBool, "true",
       "All-gather forwarding of lent FP32 segments (every rank copies each chunk from its owner); "
       "--forward=false lends each rank's own copy."},
      {"streaming_min_bytes", Grammar::kBytes, absl::StrCat(comm::kDefaultStreamingMinBytes),
       "With --forward: copy forwarded segments with streaming stores when size x ranks is at least this many "
       "bytes (0 = always)."},
  };
}

}  // namespace

Subcommand AllReduceSubcommand() {
  return {"allreduce", "nccl-tests-style benchmark of the chunked ring all-reduce", Flags, Run};
}

}  // namespace rp::apps
