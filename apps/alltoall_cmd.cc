// `ringpipe alltoall`: an nccl-tests-style driver for comm/'s pairwise all-to-all (apps/alltoall.h),
// with `ringpipe allreduce`'s columns and flags (apps/collective_bench.h).
//
// For each size from --min_bytes to --max_bytes (× --step_factor; the bytes each rank sends in all)
// and each --segment_bytes, --ranks rank threads run --warmup untimed and --iters timed all-to-alls.
// With --link=ideal the time is this host's wall time; with a link preset the ranks run on the
// modeled fabric from one common modeled start and the time is the emulated one, printed beside the
// closed form of docs/collectives.md "All-to-all" ("formula"). algbw = bytes / time, busbw = algbw ×
// (n−1)/n (nccl-tests). Every row checks every rank's received blocks against a serial reference
// (#wrong); the exit code is 1 if any element is wrong (a check failed, apps/cli.h).
#include <string>
#include <vector>

#include "apps/alltoall.h"
#include "apps/cli.h"
#include "apps/collective_bench.h"
#include "apps/subcommands.h"

namespace rp::apps {
namespace {

int Run(const ParsedArgs& args) {
  collective_bench::Command c;
  c.name = "alltoall";
  c.busbw_rule = "(n-1)/n";
  c.formula = "the closed form of docs/collectives.md \"All-to-all\" (n/a when the pairs span both link classes)";
  c.notes = {"pairwise exchange, n-1 steps; size = bytes each rank sends in all (its own block included), a "
             "multiple of 4 B x ranks: each size rounded down to one (up if below --min_bytes)"};
  alltoall::Settings s;
  if (absl::Status st = collective_bench::ReadFlags(args, s); !st.ok()) {
    return collective_bench::Fail(c, kExitBadInput, std::string(st.message()));
  }
  c.unit_bytes = 4 * static_cast<uint64_t>(s.ranks);
  c.run = [&s](uint64_t bytes, uint64_t segment, const LinkSpec* spec) {
    return spec != nullptr ? alltoall::RunTimed(s, bytes, segment, *spec) : alltoall::RunUntimed(s, bytes, segment);
  };
  c.rank_bytes = [&s](uint64_t bytes, uint64_t segment, bool on_fabric) {
    return alltoall::RankHostBytes(s, bytes, segment, on_fabric);
  };
  c.rank_messages = [&s](uint64_t bytes, uint64_t segment) { return alltoall::RankMessages(s.ranks, bytes, segment); };
  return collective_bench::Run(s, c);
}

std::vector<FlagSpec> Flags() {
  return collective_bench::Flags(
      "Smallest size: bytes each rank sends in all, its own block included (FP32 buffer), >= 4.",
      "Largest size in bytes, >= min_bytes, <= 4G.", ": a block is cut into messages of at most this size");
}

}  // namespace

Subcommand AllToAllSubcommand() {
  return {"alltoall", "nccl-tests-style benchmark of the pairwise all-to-all (expert parallelism's collective)",
          Flags, Run};
}

}  // namespace rp::apps
