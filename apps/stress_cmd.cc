// `ringpipe stress`: seeded random configurations, each run for a few steps by the Executor, with
// every invariant of DESIGN.md checked each step, and a direct comm check. docs/reliability.md.
//
// Configuration i uses seed (--seed + i) and nothing else (apps/stress_draw.cc): it draws DP, PP, TP,
// micro-batches, schedule (all eight, with F&B pairs fused or apart), codec, modeled segment size,
// DDP bucket cap and overlap, reduction throughput, links (α, β, o; a NIC per device or one per
// node), clock (virtual, or a real clock with a tiny time scale), jitter, model widths, steps, and —
// for one configuration in --fault_every — one fault (a kernel that throws, a device that stalls, a
// link that slows down) at a seeded step and op.
// Any failed check prints the seed and the one-line command that replays it:
//   FAIL seed=1234: step 1: replica divergence 3e-08 (must be 0)
//     replay: ringpipe stress --seed=1234 --configs=1
//
// Checks (healthy configurations):
//   * the program validates (every (stage, micro-batch) F and B — or Bi and W — exactly once) and
//     the trace holds exactly the program's compute ops per (rank, step, micro-batch);
//   * the run succeeds (no wait outlived the watchdog) and every wait's lateness < the watchdog;
//   * replica divergence is exactly 0 after every step, with every codec;
//   * each device's DP wire bytes equal steps × Σ over its plan's buckets of the ring's real bytes
//     (each chunk in the modeled chunk's K segments, comm/ring_timing.h);
//   * on every timeline, overlap in [0, 1] and no negative busy, exposed or peer-wait time;
//   * FP32: the loss curve follows the single-device reference (relative difference < 1e-4);
//   * virtual clock: measured = emulated every step, and emulated = predicted to the nanosecond (jitter
//     included: each step is predicted with its own draws);
//   * comm directly: an all-reduce of a random count with a random segment size and codec over a
//     random number of rank threads leaves every rank the same bits; FP32 on exactly-summable data
//     gives the exact sum; each rank's wire bytes equal the formula; on a DGX A100 fabric the
//     emulated time equals the closed form of docs/collectives.md.
// Fault configurations: throw / stall must fail the run with a Status (no crash) within the
// watchdog timeout + 1 s of the fault, attribute it (the failing rank is the faulty one, or the
// missing peers' wait chains end at it: RunFailure::stuck_ranks), commit no partial step (parameters bit-identical to a run of
// `fault step` steps), and leave no thread behind (/proc/self/status Threads); a slow link must
// run to the end and show in RunResult::slow_links with its factor from its step.
//
// Exit codes: 0 every check passed; 1 a check failed (each failure printed with its replay line);
// 2 bad flags.
#include <chrono>
#include <cstdio>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "apps/cli.h"
#include "apps/shared_flags.h"
#include "apps/stress.h"
#include "apps/subcommands.h"

namespace rp::apps {
namespace {

// What a stress run draws and prints (its flags).
struct StressOptions {
  int fault_every = 4;
  int max_devices = 8;
  bool comm_empty = true;
  bool list = false;
};

// One configuration, drawn from seed `s` and checked; its lines printed (with --list, and a failure
// with its replay line). False: it failed.
bool StressOne(uint64_t s, const StressOptions& o, stress::FaultTally& tally, int& comm_checks) {
  stress::Checker ck;
  absl::StatusOr<stress::Drawn> c = stress::DrawConfig(s, o.fault_every, o.max_devices, o.comm_empty);
  std::string summary = c.ok() ? c->summary : "";
  if (o.list) {
    // Before running it: a sanitizer report halts the process, and this line names its seed.
    std::fprintf(stderr, "running seed=%llu\n", static_cast<unsigned long long>(s));
  }
  if (!c.ok()) {
    ck.Fail("drawing the configuration: %s", c.status().ToString());
  } else {
    stress::CheckComm(*c, s, ck);
    ++comm_checks;
    if (c->fault) {
      stress::CheckFault(*c, ck, tally);
    } else {
      stress::CheckHealthy(*c, ck);
    }
    if (ck.out_of_range) ++tally.out_of_range;
  }
  if (o.list) {
    std::printf("seed=%llu %s: %s\n", static_cast<unsigned long long>(s),
                !ck.failures.empty() ? "FAIL" : ck.out_of_range ? "ok (left its wire format's range)" : "ok",
                summary.c_str());
  }
  if (!ck.failures.empty()) {
    std::printf("FAIL seed=%llu: %s\n  config: %s\n",
                static_cast<unsigned long long>(s), absl::StrJoin(ck.failures, "\n  ").c_str(),
                summary.c_str());
    std::printf("  replay: ringpipe stress --seed=%llu --configs=1%s%s%s\n",
                static_cast<unsigned long long>(s),
                o.comm_empty ? "" : " --comm_empty=false",
                o.fault_every != 4 ? absl::StrCat(" --fault_every=", o.fault_every).c_str() : "",
                o.max_devices != 8 ? absl::StrCat(" --max_devices=", o.max_devices).c_str() : "");
  }
  return ck.failures.empty();
}

int Stress(const ParsedArgs& args) {
  const int64_t seed_flag = args.Int("seed", 1);
  if (seed_flag < 0) {
    std::fprintf(stderr, "ringpipe stress: --seed: must be >= 0, got %lld\n", static_cast<long long>(seed_flag));
    return kExitBadInput;
  }
  const uint64_t seed = static_cast<uint64_t>(seed_flag);
  const int64_t configs = args.Int("configs", 200);
  const int64_t fault_every = args.Int("fault_every", 4);
  const int64_t max_devices = args.Int("max_devices", 8);
  const bool comm_empty = args.Bool("comm_empty", true);
  for (const auto& [flag, value, lo, hi] : {std::tuple{"configs", configs, int64_t{1}, int64_t{1} << 30},
                                            {"fault_every", fault_every, int64_t{0}, int64_t{1} << 30},
                                            {"max_devices", max_devices, int64_t{1}, int64_t{64}}}) {
    if (value < lo || value > hi) {
      std::fprintf(stderr, "ringpipe stress: --%s: must be in %lld..%lld, got %lld\n", flag, static_cast<long long>(lo),
                   static_cast<long long>(hi), static_cast<long long>(value));
      return kExitBadInput;
    }
  }
  // Every configuration's seed must be one the replay line can name (--seed takes 0..2^63 - 1).
  if (configs - 1 > std::numeric_limits<int64_t>::max() - seed_flag) {
    std::fprintf(stderr,
                 "ringpipe stress: --configs: %lld configurations from --seed=%lld run seeds past %lld, the largest "
                 "--seed a replay line can name; at most %lld from this seed\n",
                 static_cast<long long>(configs), static_cast<long long>(seed_flag),
                 static_cast<long long>(std::numeric_limits<int64_t>::max()),
                 static_cast<long long>(std::numeric_limits<int64_t>::max() - seed_flag + 1));
    return kExitBadInput;
  }
  const StressOptions options{.fault_every = static_cast<int>(fault_every),
                              .max_devices = static_cast<int>(max_devices),
                              .comm_empty = comm_empty,
                              .list = args.Bool("list", false)};
  const auto t0 = std::chrono::steady_clock::now();
  int failed = 0, comm_checks = 0;
  stress::FaultTally tally;
  for (int i = 0; i < configs; ++i) {
    if (!StressOne(seed + static_cast<uint64_t>(i), options, tally, comm_checks)) ++failed;
    std::fflush(stdout);
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string kinds;
  for (const auto& [k, n] : tally.by_kind) absl::StrAppend(&kinds, kinds.empty() ? "" : ", ", k, " ", n);
  std::printf(
      "stress: %d configurations (seeds %llu..%llu), %d failed; comm checks %d; faults injected "
      "%d (%s), detected %d, attributed to the faulty rank %d%s; wall %.1f s\n",
      static_cast<int>(configs), static_cast<unsigned long long>(seed),
      static_cast<unsigned long long>(seed + static_cast<uint64_t>(configs) - 1), failed,
      comm_checks, tally.injected, kinds.empty() ? "none" : kinds.c_str(), tally.detected,
      tally.attributed,
      tally.out_of_range == 0
          ? ""
          : absl::StrCat("; ", tally.out_of_range,
                         " left their lossy wire format's range (OUT_OF_RANGE, their own failure: "
                         "trained to the end with FP32 wire formats)").c_str(),
      wall);
  return failed == 0 ? kExitOk : kExitFailed;
}

std::vector<FlagSpec> Flags() {
  return {
      SharedFieldFlag("seed", "1", "Here: the first configuration's seed (configuration i uses seed + i)."),
      {"configs", Grammar::kInt, "200", "Number of seeded configurations (seeds --seed .. --seed + N - 1)."},
      {"fault_every", Grammar::kInt, "4", "One configuration in N (chosen by its seed) gets an injected fault; 0 = none."},
      {"max_devices", Grammar::kInt, "8", "Largest DP x PP x TP drawn, 1..64."},
      {"list", Grammar::kBool, "false", "Print one line per configuration."},
      {"comm_empty", Grammar::kBool, "true",
       "Let the comm check draw 0-element all-reduces (false: 1 element instead; the switch kept from comm's "
       "Decode(nullptr, 0) UBSan report, fixed since: docs/reliability.md)."},
  };
}

}  // namespace

Subcommand StressSubcommand() {
  return {"stress",
          "seeded random configurations under every DESIGN.md invariant, with injected faults "
          "(docs/reliability.md)",
          Flags, Stress};
}

}  // namespace rp::apps
