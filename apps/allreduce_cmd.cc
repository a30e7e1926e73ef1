// `ringpipe allreduce`: an nccl-tests-style driver for comm/'s chunked ring all-reduce.
//
// For each size from --min_bytes to --max_bytes (× --step_factor) and each --segment_bytes, --ranks
// rank threads run --warmup untimed and --iters timed all-reduces (apps/allreduce.h). With
// --link=ideal the time is the wall time of this host (the host-throughput mode); with a link preset
// the ranks run on the modeled fabric from one common modeled start and the time is the emulated one,
// printed beside the closed form of docs/collectives.md ("formula"), so a --segment_bytes list shows
// the trade-off of the segment size: too small pays the per-message overhead o on every message, too
// large loses the pipelining across ring steps. algbw = bytes / time, busbw = algbw × 2(n−1)/n
// (nccl-tests' convention). Every row checks the result of the last iteration on every rank against a
// serial reference on exactly-summable data (#wrong). The flags, loop and table are shared with
// `ringpipe alltoall` (apps/collective_bench.h).
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "apps/allreduce.h"
#include "apps/cli.h"
#include "apps/collective_bench.h"
#include "apps/config_fields.h"
#include "apps/subcommands.h"
#include "comm/communicator.h"
#include "runtime/status_macros.h"

namespace rp::apps {
namespace {

using allreduce::Settings;

absl::StatusOr<Settings> ReadFlags(const ParsedArgs& args) {
  Settings s;
  RP_RETURN_IF_ERROR(collective_bench::ReadFlags(args, s));
  s.in_place = args.Bool("in_place", false);
  s.forward = args.Bool("forward", true);
  RP_ASSIGN_OR_RETURN(s.streaming_min_bytes,
                      ParseBytes("--streaming_min_bytes",
                                 args.Text("streaming_min_bytes", absl::StrCat(comm::kDefaultStreamingMinBytes))));
  return s;
}

int Run(const ParsedArgs& args) {
  collective_bench::Command c;
  c.name = "allreduce";
  c.busbw_rule = "2(n-1)/n";
  c.formula = "the closed form of docs/collectives.md (n/a when the ring crosses nodes)";
  auto settings = ReadFlags(args);
  if (!settings.ok()) return collective_bench::Fail(c, kExitBadInput, std::string(settings.status().message()));
  const Settings& s = *settings;
  const bool timed = s.link != "ideal";
  // Whether the ring forwards at all (comm/ring_runner.cc: FP32 lends on 3 or more ranks).
  const bool forwards = s.forward && !timed && s.codec == comm::Codec::kFp32 && s.ranks > 2;
  const std::string forwarding =
      timed             ? "off (timed communicators never forward)"
      : !s.forward      ? "off"
      : s.codec != comm::Codec::kFp32 ? "off (only FP32 segments are forwarded)"
      : s.ranks <= 2    ? "off (2 ranks: the all-gather has no chunk to pass on)"
                        : absl::StrCat("on (streaming stores when size x ranks >= ", s.streaming_min_bytes, " B)");
  c.notes = {absl::StrCat(s.in_place ? "in place, input refilled before every call" : "out of place",
                          "; all-gather forwarding ", forwarding)};
  c.row_extra = {{"in_place", s.in_place}, {"forward", forwards}};
  c.run = [&s](uint64_t bytes, uint64_t segment, const LinkSpec* spec) {
    return spec != nullptr ? allreduce::RunTimed(s, bytes, segment, *spec) : allreduce::RunUntimed(s, bytes, segment);
  };
  c.rank_bytes = [&s](uint64_t bytes, uint64_t segment, bool on_fabric) {
    return allreduce::RankHostBytes(s, bytes, segment, on_fabric);
  };
  c.rank_messages = [&s](uint64_t bytes, uint64_t segment) { return allreduce::RankMessages(s.ranks, bytes, segment); };
  return collective_bench::Run(s, c);
}

std::vector<FlagSpec> Flags() {
  std::vector<FlagSpec> flags = collective_bench::Flags("Smallest message size in bytes (FP32 buffer), >= 4.",
                                                        "Largest message size in bytes, >= min_bytes, <= 4G.", "");
  flags.push_back(
      {"in_place", Grammar::kBool, "false",
       "Reduce in place (out = in), refilling the input before every call as a training step would write fresh "
       "gradients; default out of place (in -> out), as nccl-tests and MPI benchmarks measure."});
  flags.push_back({"forward", Grammar::kBool, "true",
                   "All-gather forwarding of lent FP32 segments (every rank copies each chunk from its owner); "
                   "--forward=false lends each rank's own copy."});
  flags.push_back({"streaming_min_bytes", Grammar::kBytes, absl::StrCat(comm::kDefaultStreamingMinBytes),
                   "With --forward: copy forwarded segments with streaming stores when size x ranks is at least "
                   "this many bytes (0 = always)."});
  return flags;
}

}  // namespace

Subcommand AllReduceSubcommand() {
  return {"allreduce", "nccl-tests-style benchmark of the chunked ring all-reduce", Flags, Run};
}

}  // namespace rp::apps
