// `ringpipe stress`: seeded random configurations, each run for a few steps by the Executor, with
// every invariant of DESIGN.md checked each step, and a direct comm check. docs/reliability.md.
//
// Configuration i uses seed (--seed + i) and nothing else: it draws DP, PP, TP, micro-batches,
// schedule, codec, segment size, buckets, links, clock (virtual, or a real clock with a tiny time
// scale), jitter, model widths, steps, and — for one configuration in --fault_every — one fault
// (a kernel that throws, a device that stalls, a link that slows down) at a seeded step and op.
// Any failed check prints the seed and the one-line command that replays it:
//   FAIL seed=1234: step 1: replica divergence 3e-08 (must be 0)
//     replay: ringpipe stress --seed=1234 --configs=1
//
// Checks (healthy configurations):
//   * the program validates (every (stage, micro-batch) F and B — or Bi and W — exactly once) and
//     the trace holds exactly that many F / B / Bi / W events per (rank, step, micro-batch);
//   * the run succeeds (no wait outlived the watchdog) and every wait's lateness < the watchdog;
//   * replica divergence is exactly 0 after every step, with every codec;
//   * each device's DP wire bytes equal steps × Σ_buckets ring::AllReduceWireBytes (comm/ring_steps.h);
//   * FP32: the loss curve follows the single-device reference (relative difference < 1e-4);
//   * virtual clock without jitter: the measured (modeled) step time equals the predictor's;
//   * comm directly: an all-reduce of a random count with a random segment size and codec over a
//     random number of rank threads leaves every rank the same bits; FP32 on exactly-summable data
//     gives the exact sum; each rank's wire bytes equal the formula.
// Fault configurations: throw / stall must fail the run with a Status (no crash) within the
// watchdog timeout + 1 s of the fault, attribute it (the failing rank is the faulty one, or the
// missing peers' wait chains end at it: RunFailure::stuck_ranks), commit no partial step (parameters bit-identical to a run of
// `fault step` steps), and leave no thread behind (/proc/self/status Threads); a slow link must
// run to the end and show in RunResult::slow_links with its factor from its step.
//
// Exit codes: 0 every check passed; 1 a check failed (each failure printed with its replay line);
// 2 bad flags.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "apps/cli.h"
#include "apps/shared_flags.h"
#include "apps/subcommands.h"
#include "comm/communicator.h"
#include "comm/ring_steps.h"
#include "runtime/tracer.h"
#include "schedule/executor.h"
#include "schedule/generators.h"
#include "schedule/validator.h"

namespace rp::apps {
namespace {

using schedule::OpKind;
using schedule::ScheduleKind;

// Deterministic draws from a seed (std::mt19937_64's sequence is fixed by the standard; the
// distributions are ours so that a seed means the same configuration on every platform).
class Draw {
 public:
  explicit Draw(uint64_t seed) : rng_(seed * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL) {}
  int Int(int lo, int hi) {  // [lo, hi]
    return lo + static_cast<int>(rng_() % static_cast<uint64_t>(hi - lo + 1));
  }
  double Real(double lo, double hi) {
    return lo + (hi - lo) * static_cast<double>(rng_() >> 11) * 0x1.0p-53;
  }
  bool Chance(double p) { return Real(0, 1) < p; }
  template <typename T>
  T Pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(Int(0, static_cast<int>(v.size()) - 1))];
  }
  uint64_t Raw() { return rng_(); }

 private:
  std::mt19937_64 rng_;
};

int ThreadCount() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

struct Drawn {
  std::string summary;  // one line
  schedule::ExecutorOptions options;
  int split_backward = 0;
  std::optional<OpFault> fault;
  // The direct comm check.
  int comm_ranks = 1;
  size_t comm_count = 0;
  size_t comm_segment_bytes = 4;
  comm::Codec comm_codec = comm::Codec::kFp32;
  // Message protocol of the comm check: inline slots (the default for small messages) or every
  // segment lent / pooled and acknowledged (inline_bytes 0), and the all-gather forwarding's hold
  // limit (0 = no forwarding). Drawn from a stream of their own, so the other draws of a seed
  // stay what they were.
  size_t comm_inline_bytes = comm::kDefaultInlineBytes;
  size_t comm_max_held = comm::kDefaultMaxHeldSegments;
};

const comm::Codec kCodecs[] = {comm::Codec::kFp32, comm::Codec::kFp16, comm::Codec::kBf16,
                               comm::Codec::kInt8};

absl::StatusOr<Drawn> DrawConfig(uint64_t seed, int fault_every, int max_devices, bool comm_empty) {
  Draw g(seed);
  Drawn c;
  schedule::ExecutorOptions& o = c.options;
  // Layout: world <= max_devices.
  int dp = 1, pp = 1, tp = 1;
  do {
    dp = g.Int(1, 4);
    pp = g.Int(1, 4);
    tp = g.Pick<int>({1, 1, 2, 4});
  } while (dp * pp * tp > max_devices);
  const ScheduleKind kind = g.Pick<ScheduleKind>(
      {ScheduleKind::kGPipe, ScheduleKind::kOneFOneB, ScheduleKind::kInterleaved,
       ScheduleKind::kZeroBubbleH1});
  int v = kind == ScheduleKind::kInterleaved ? 2 : 1;
  int m = g.Int(1, 4);
  if (kind == ScheduleKind::kInterleaved) m = pp * g.Int(1, 2);  // Megatron: m % p == 0
  const int buckets = g.Int(1, 2);
  const int steps = g.Int(2, 3);
  const int width = 8 * tp * g.Int(1, 2);
  const int layers = std::max(pp * v, g.Int(2, 4));  // >= model stages
  schedule::PipelineOptions po{.num_ranks = pp, .num_micro_batches = m, .num_chunks = v,
                               .activation_bytes = static_cast<uint64_t>(g.Int(1, 64)) << 10,
                               .tp_allreduce_bytes = tp > 1 ? 4096u : 0u,
                               .gradient_bytes = static_cast<uint64_t>(g.Int(1, 256)) << 10,
                               .buckets_per_chunk = buckets,
                               .overlap_grad_allreduce = g.Chance(0.8)};
  absl::StatusOr<schedule::Program> prog = schedule::BuildSchedule(kind, po);
  if (!prog.ok()) return prog.status();
  o.grid = {.dp = dp, .pp = pp, .tp = tp};
  o.program = *prog;
  c.split_backward = o.program.split_backward ? 1 : 0;
  o.model.input_dim = 8;
  o.model.classes = 4;
  o.model.hidden.assign(static_cast<size_t>(layers - 1), width);
  o.model.seed = seed;
  o.dataset.input_dim = 8;
  o.dataset.classes = 4;
  o.dataset.train_size = 512;
  o.dataset.test_size = 32;
  o.dataset.teacher_hidden = 8;
  o.dataset.seed = seed + 1;
  o.microbatch_size = g.Int(1, 4);
  o.optimizer.kind = g.Chance(0.5) ? OptimizerKind::kSgdMomentum : OptimizerKind::kAdam;
  o.optimizer.lr = o.optimizer.kind == OptimizerKind::kAdam ? 1e-3f : 0.05f;
  const double f_ms = g.Real(0.5, 3), b_ms = f_ms * g.Real(1.5, 2.5);
  o.cost = schedule::CostModel::Uniform({.forward = FromMillis(f_ms), .backward = FromMillis(b_ms),
                                         .weight_grad = FromMillis(b_ms / 2),
                                         .optimizer = FromMillis(g.Real(0, 0.5))});
  const bool ideal = g.Chance(0.3);
  if (!ideal) {
    o.links.intra_node = {.alpha = FromMicros(g.Real(1, 20)), .bandwidth_gbps = g.Real(20, 300)};
    o.links.inter_node = {.alpha = FromMicros(g.Real(5, 50)), .bandwidth_gbps = g.Real(5, 50)};
  }
  o.placement.devices_per_node = g.Pick<int>({1, 2, 4, 8});
  o.codec = g.Pick<comm::Codec>({kCodecs[0], kCodecs[1], kCodecs[2], kCodecs[3]});
  o.segment_bytes = g.Chance(0.2) ? comm::kDefaultSegmentBytes : size_t{4} * g.Int(1, 96);
  o.model_segment_bytes = g.Chance(0.5) ? 0 : uint64_t{4} * g.Int(256, 65536);
  o.virtual_time = g.Chance(0.6);
  o.time_scale = o.virtual_time ? 1.0 : g.Pick<double>({0.01, 0.02, 0.05});
  const double jitter = g.Pick<double>({0, 0, 0.1, 0.5});
  o.faults.jitter = {.seed = g.Raw(), .max_fraction = jitter};
  o.steps = steps;
  o.eval_every = 0;
  o.eval_samples = 32;
  o.run_reference = o.codec == comm::Codec::kFp32;
  o.watchdog_timeout = std::chrono::seconds(20);  // healthy runs: a hang guard (sanitizers are slow)
  // The direct comm check.
  c.comm_ranks = g.Int(1, 8);
  c.comm_count = g.Pick<size_t>({0, 1, 7, 97, static_cast<size_t>(g.Int(2, 5000))});
  if (c.comm_count == 0 && !comm_empty) c.comm_count = 1;
  c.comm_segment_bytes = size_t{4} * g.Int(1, 512);
  c.comm_codec = g.Pick<comm::Codec>({kCodecs[0], kCodecs[1], kCodecs[2], kCodecs[3]});
  {
    Draw h(seed ^ 0x9e3779b97f4a7c15ULL);
    c.comm_inline_bytes = h.Chance(0.5) ? 0 : comm::kDefaultInlineBytes;
    c.comm_max_held = h.Pick<size_t>({0, 1, comm::kDefaultMaxHeldSegments});
  }

  // One fault in `fault_every` configurations (decided by the seed alone, so a replay agrees).
  if (fault_every > 0 && g.Raw() % static_cast<uint64_t>(fault_every) == 0) {
    const int world = dp * pp * tp;
    OpFault f;
    std::vector<OpFaultKind> kinds = {OpFaultKind::kThrow, OpFaultKind::kStall};
    if (pp > 1) kinds.push_back(OpFaultKind::kSlowLink);
    f.kind = g.Pick(kinds);
    f.step = g.Int(0, steps - 1);
    if (f.kind == OpFaultKind::kSlowLink) {
      // A pipeline link: (dp, s, tp) → (dp, s + 1, tp).
      const int s = g.Int(0, pp - 2), d = g.Int(0, dp - 1), t = g.Int(0, tp - 1);
      f.rank = (d * pp + s) * tp + t;
      f.dst = (d * pp + s + 1) * tp + t;
      f.factor = g.Pick<double>({2, 10, 100});
    } else {
      f.rank = g.Int(0, world - 1);
      const int stage = (f.rank / tp) % pp;
      f.op = g.Int(0, static_cast<int>(o.program.ranks[static_cast<size_t>(stage)].size()) - 1);
      o.watchdog_timeout = std::chrono::milliseconds(400);  // the detection bound under test
    }
    o.faults.op_faults.push_back(f);
    c.fault = f;
  }
  c.summary = absl::StrFormat(
      "dp %d pp %d tp %d m %d %s%s, %d bucket(s), codec %s, segment %d B, %s, %s, jitter %.1f, "
      "steps %d, mb %d, widths %dx%d, comm %d ranks x %d (%s, segment %d B, %s, hold %d)%s",
      dp, pp, tp, m, schedule::ScheduleName(kind), v > 1 ? " v 2" : "", buckets,
      comm::CodecName(o.codec), o.segment_bytes, ideal ? "ideal links" : "alpha-beta links",
      o.virtual_time ? "virtual clock" : absl::StrCat("time scale ", o.time_scale), jitter, steps,
      o.microbatch_size, width, layers - 1, c.comm_ranks, c.comm_count,
      comm::CodecName(c.comm_codec), c.comm_segment_bytes,
      c.comm_inline_bytes == 0 ? "lent" : "inline", c.comm_max_held,
      c.fault ? absl::StrFormat(", fault %s rank %d step %d %s", OpFaultKindName(c.fault->kind),
                                c.fault->rank, c.fault->step,
                                c.fault->kind == OpFaultKind::kSlowLink
                                    ? absl::StrFormat("-> %d x%g", c.fault->dst, c.fault->factor)
                                    : absl::StrCat("op ", c.fault->op))
              : "");
  return c;
}

// Collects failed checks of one configuration.
struct Checker {
  std::vector<std::string> failures;
  template <typename... A>
  void Fail(const absl::FormatSpec<A...>& fmt, const A&... args) {
    failures.push_back(absl::StrFormat(fmt, args...));
  }
};

// All-reduce over `n` rank threads of a random count: same bits everywhere, exact FP32 sums of
// integers, wire bytes = the formula.
void CheckComm(const Drawn& c, uint64_t seed, Checker& ck) {
  const int n = c.comm_ranks;
  std::vector<int> devices(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) devices[static_cast<size_t>(r)] = r;
  absl::StatusOr<std::unique_ptr<comm::Communicator>> comm =
      comm::Communicator::Create({.devices = devices,
                                  .inline_bytes = c.comm_inline_bytes,
                                  .max_held_segments = c.comm_max_held});
  if (!comm.ok()) return ck.Fail("comm: Create: %s", comm.status().ToString());
  for (const bool integers : {false, true}) {
    const comm::Codec codec = integers ? comm::Codec::kFp32 : c.comm_codec;
    std::vector<std::vector<float>> bufs(static_cast<size_t>(n));
    Draw g(seed ^ (integers ? 0x1234567ULL : 0x89abcdefULL));
    for (auto& b : bufs) {
      b.resize(c.comm_count);
      for (float& x : b) {
        x = integers ? static_cast<float>(g.Int(-64, 64)) : static_cast<float>(g.Real(-2, 2));
      }
    }
    std::vector<double> exact(c.comm_count, 0.0);
    for (const auto& b : bufs) {
      for (size_t i = 0; i < b.size(); ++i) exact[i] += b[i];
    }
    std::vector<absl::StatusOr<comm::CollectiveResult>> res(static_cast<size_t>(n),
                                                            absl::UnknownError("not run"));
    const comm::CollectiveOptions co{.codec = codec, .segment_bytes = c.comm_segment_bytes,
                                     .timeout = std::chrono::seconds(20)};
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        auto& b = bufs[static_cast<size_t>(r)];
        res[static_cast<size_t>(r)] = (*comm)->rank(r).AllReduce(b, b, co);
      });
    }
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < n; ++r) {
      const auto& rr = res[static_cast<size_t>(r)];
      if (!rr.ok()) return ck.Fail("comm: rank %d: %s", r, rr.status().ToString());
      const uint64_t want = comm::ring::AllReduceWireBytes(codec, c.comm_count, n, r,
                                                           c.comm_segment_bytes / 4);
      if (rr->wire_bytes != want) {
        ck.Fail("comm: rank %d (%s) wire bytes %d, formula %d", r, comm::CodecName(codec),
                rr->wire_bytes, want);
      }
      if (bufs[static_cast<size_t>(r)] != bufs[0]) {
        ck.Fail("comm: %s all-reduce: rank %d's result differs from rank 0's", comm::CodecName(codec), r);
      }
    }
    if (integers) {
      for (size_t i = 0; i < c.comm_count; ++i) {
        if (static_cast<double>(bufs[0][i]) != exact[i]) {
          ck.Fail("comm: fp32 all-reduce element %d = %g, exact sum %g", i, bufs[0][i], exact[i]);
          break;
        }
      }
    }
  }
}

std::vector<std::vector<float>> AllParams(const schedule::Executor& ex, Checker& ck) {
  std::vector<std::vector<float>> out;
  const int world = ex.grid().world_size();
  for (int r = 0; r < world; ++r) {
    for (int ch = 0; ch < ex.options().program.num_chunks; ++ch) {
      absl::StatusOr<std::vector<float>> w = ex.Parameters(r, ch);
      if (!w.ok()) {
        ck.Fail("Parameters(%d, %d): %s", r, ch, w.status().ToString());
        return out;
      }
      out.push_back(*std::move(w));
    }
  }
  return out;
}

// Healthy run: every invariant.
void CheckHealthy(const Drawn& c, Checker& ck) {
  const schedule::ExecutorOptions& base = c.options;
  absl::StatusOr<schedule::ValidationReport> vr = schedule::Validate(base.program);
  if (!vr.ok()) return ck.Fail("program does not validate: %s", vr.status().ToString());
  const int world = base.grid.dp * base.grid.pp * base.grid.tp;
  Tracer tracer(world, base.placement.devices_per_node);
  schedule::ExecutorOptions o = base;
  o.tracer = &tracer;
  absl::StatusOr<std::unique_ptr<schedule::Executor>> ex = schedule::Executor::Create(o);
  if (!ex.ok()) return ck.Fail("Executor::Create: %s", ex.status().ToString());
  absl::StatusOr<schedule::RunResult> r = (*ex)->Run();
  if (!r.ok()) return ck.Fail("run failed: %s", r.status().ToString());
  if (static_cast<int>(r->steps.size()) != o.steps) {
    ck.Fail("%d step records, expected %d", r->steps.size(), o.steps);
  }
  for (const schedule::StepRecord& s : r->steps) {
    if (s.replica_divergence != 0) {
      ck.Fail("step %d: replica divergence %g (must be 0)", s.step, s.replica_divergence);
    }
    if (!std::isfinite(s.loss)) ck.Fail("step %d: loss %g", s.step, s.loss);
  }
  const double wd_ms = std::chrono::duration<double, std::milli>(o.watchdog_timeout).count();
  if (ToMillis(r->lateness.max()) * (o.virtual_time ? 0 : o.time_scale) >= wd_ms) {
    ck.Fail("a wait woke %g ms late (watchdog %g ms)", ToMillis(r->lateness.max()), wd_ms);
  }
  // F / B (Bi, W) exactly once per (model stage, micro-batch): per (rank, step, micro-batch) the
  // trace holds v of each.
  const int v = o.program.num_chunks, m = o.program.num_micro_batches;
  std::map<std::tuple<int, int, int, std::string>, int> count;
  for (const TraceEvent& e : tracer.Events()) {
    if (e.kind != rp::OpKind::kCompute || e.micro_batch < 0) continue;
    const std::string name = e.name;
    if (name != "F" && name != "B" && name != "Bi" && name != "W") continue;
    ++count[{e.rank, e.step, e.micro_batch, name}];
  }
  const std::vector<std::string> names =
      c.split_backward ? std::vector<std::string>{"F", "Bi", "W"} : std::vector<std::string>{"F", "B"};
  size_t expected_keys = 0;
  for (int rank = 0; rank < world; ++rank) {
    for (int step = 0; step < o.steps; ++step) {
      for (int mb = 0; mb < m; ++mb) {
        for (const std::string& nm : names) {
          ++expected_keys;
          auto it = count.find({rank, step, mb, nm});
          const int got = it == count.end() ? 0 : it->second;
          if (got != v) {
            ck.Fail("rank %d step %d micro-batch %d: %d %s ops traced, expected %d", rank, step,
                    mb, got, nm, v);
            return;
          }
        }
      }
    }
  }
  if (count.size() != expected_keys) ck.Fail("trace holds compute ops outside the program");
  // DP wire bytes: steps × Σ over chunks and buckets of the all-reduce formula.
  const int D = o.grid.dp;
  for (const schedule::DeviceReport& dr : r->devices) {
    uint64_t want = 0;
    const auto& ops = o.program.ranks[static_cast<size_t>(dr.coord.pp)];
    for (int ch = 0; ch < v; ++ch) {
      int nb = 0;
      for (const schedule::Op& op : ops) nb += op.kind == OpKind::kAllReduce && op.chunk == ch;
      absl::StatusOr<std::vector<float>> w = (*ex)->Parameters(dr.rank, ch);
      if (!w.ok() || nb == 0) continue;
      const size_t n = w->size(), base_n = n / static_cast<size_t>(nb),
                   extra = n % static_cast<size_t>(nb);
      for (size_t i = 0; i < static_cast<size_t>(nb); ++i) {
        want += comm::ring::AllReduceWireBytes(o.codec, base_n + (i < extra ? 1 : 0), D,
                                               dr.coord.dp, o.segment_bytes / 4);
      }
    }
    want *= static_cast<uint64_t>(o.steps);
    if (dr.dp_bytes != want) {
      ck.Fail("rank %d: DP wire bytes %d, formula %d", dr.rank, dr.dp_bytes, want);
    }
    if (o.grid.pp == 1 && dr.p2p_bytes != 0) ck.Fail("rank %d: p2p bytes without a pipeline", dr.rank);
    if (o.grid.tp == 1 && dr.tp_bytes != 0) ck.Fail("rank %d: TP bytes without TP", dr.rank);
  }
  if (o.run_reference && !(r->max_loss_rel_diff < 1e-4)) {
    ck.Fail("fp32 loss differs from the single-device reference by %g (relative)",
            r->max_loss_rel_diff);
  }
  if (o.virtual_time && o.faults.jitter.max_fraction == 0) {
    for (const schedule::StepRecord& s : r->steps) {
      if (std::fabs(s.modeled_ms - r->predicted_step_ms) > 1e-6 * std::max(1.0, r->predicted_step_ms)) {
        ck.Fail("step %d: virtual-clock step %.6f ms, predicted %.6f ms", s.step, s.modeled_ms,
                r->predicted_step_ms);
        break;
      }
    }
  }
}

struct FaultTally {
  int injected = 0, detected = 0, attributed = 0;
  std::map<std::string, int> by_kind;
};

// Fault run: detected in time, attributed, nothing committed, no thread left.
void CheckFault(const Drawn& c, Checker& ck, FaultTally& tally) {
  const OpFault f = *c.fault;
  ++tally.injected;
  ++tally.by_kind[OpFaultKindName(f.kind)];
  std::thread([] {}).join();  // a sanitizer's lazily started background thread joins the baseline
  const int baseline = ThreadCount();
  absl::StatusOr<std::unique_ptr<schedule::Executor>> ex = schedule::Executor::Create(c.options);
  if (!ex.ok()) return ck.Fail("Executor::Create: %s", ex.status().ToString());
  absl::StatusOr<schedule::RunResult> r = (*ex)->Run();
  if (f.kind == OpFaultKind::kSlowLink) {
    if (!r.ok()) return ck.Fail("slow link: run failed: %s", r.status().ToString());
    bool seen = false;
    for (const auto& s : r->slow_links) {
      seen |= s.src == f.rank && s.dst == f.dst && s.first_step == f.step && s.factor == f.factor;
    }
    if (!seen) return ck.Fail("slow link %d->%d x%g from step %d not reported", f.rank, f.dst, f.factor, f.step);
    if (r->max_replica_divergence != 0) ck.Fail("slow link: replica divergence %g", r->max_replica_divergence);
    ++tally.detected;
    ++tally.attributed;
    return;
  }
  if (r.ok()) return ck.Fail("%s fault: the run succeeded", OpFaultKindName(f.kind));
  const schedule::RunFailure* fl = (*ex)->failure();
  if (fl == nullptr) return ck.Fail("%s fault: no RunFailure", OpFaultKindName(f.kind));
  bool ok = true;
  const double limit = std::chrono::duration<double>(c.options.watchdog_timeout).count() + 1.0;
  if (!(fl->seconds_after_fault >= 0 && fl->seconds_after_fault < limit)) {
    ck.Fail("%s fault: reported %g s after the fault (limit %g s): %s", OpFaultKindName(f.kind),
            fl->seconds_after_fault, limit, r.status().ToString());
    ok = false;
  }
  if (f.kind == OpFaultKind::kThrow && r.status().code() != absl::StatusCode::kInternal) {
    ck.Fail("throw fault: status %s, expected INTERNAL", r.status().ToString());
    ok = false;
  }
  if (fl->committed_steps != f.step) {
    ck.Fail("%s fault at step %d: %d steps committed", OpFaultKindName(f.kind), f.step, fl->committed_steps);
    ok = false;
  }
  const int after = ThreadCount();
  if (after != baseline) {
    ck.Fail("%s fault: %d threads after the run, %d before", OpFaultKindName(f.kind), after, baseline);
    ok = false;
  }
  // No partial step: parameters equal those of a healthy run of f.step steps (or the initial ones).
  schedule::ExecutorOptions before = c.options;
  before.faults.op_faults.clear();
  before.steps = std::max(1, f.step);
  absl::StatusOr<std::unique_ptr<schedule::Executor>> ref = schedule::Executor::Create(before);
  if (!ref.ok()) return ck.Fail("reference Create: %s", ref.status().ToString());
  if (f.step > 0) {
    if (absl::StatusOr<schedule::RunResult> rr = (*ref)->Run(); !rr.ok()) {
      return ck.Fail("reference run: %s", rr.status().ToString());
    }
  }
  if (AllParams(**ex, ck) != AllParams(**ref, ck)) {
    ck.Fail("%s fault at step %d: parameters differ from a run of %d steps (partial step committed)",
            OpFaultKindName(f.kind), f.step, f.step);
    ok = false;
  }
  if (!ok) return;
  ++tally.detected;
  const bool attributed =
      f.kind == OpFaultKind::kThrow
          ? fl->rank == f.rank && fl->step == f.step && fl->op == f.op
          : fl->rank == f.rank || std::find(fl->stuck_ranks.begin(), fl->stuck_ranks.end(),
                                            f.rank) != fl->stuck_ranks.end();
  if (attributed) {
    ++tally.attributed;
  } else if (f.kind == OpFaultKind::kThrow) {
    ck.Fail("throw fault at rank %d step %d op %d reported as rank %d step %d op %d", f.rank,
            f.step, f.op, fl->rank, fl->step, fl->op);
  }
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
  if (configs < 1 || configs > (1 << 30) || fault_every < 0 || fault_every > (1 << 30) || max_devices < 1 ||
      max_devices > 64) {
    std::fprintf(stderr, "ringpipe stress: configs must be >= 1, fault_every >= 0, max_devices in "
                         "1..64\n");
    return kExitBadInput;
  }
  const bool list = args.Bool("list", false);
  const auto t0 = std::chrono::steady_clock::now();
  int failed = 0, comm_checks = 0;
  FaultTally tally;
  for (int i = 0; i < configs; ++i) {
    const uint64_t s = seed + static_cast<uint64_t>(i);
    Checker ck;
    absl::StatusOr<Drawn> c = DrawConfig(s, static_cast<int>(fault_every), static_cast<int>(max_devices), comm_empty);
    std::string summary = c.ok() ? c->summary : "";
    if (list) {
      // Before running it: a sanitizer report halts the process, and this line names its seed.
      std::fprintf(stderr, "running seed=%llu\n", static_cast<unsigned long long>(s));
    }
    if (!c.ok()) {
      ck.Fail("drawing the configuration: %s", c.status().ToString());
    } else {
      CheckComm(*c, s, ck);
      ++comm_checks;
      if (c->fault) {
        CheckFault(*c, ck, tally);
      } else {
        CheckHealthy(*c, ck);
      }
    }
    if (list) {
      std::printf("seed=%llu %s: %s\n", static_cast<unsigned long long>(s),
                  ck.failures.empty() ? "ok" : "FAIL", summary.c_str());
    }
    if (!ck.failures.empty()) {
      ++failed;
      std::printf("FAIL seed=%llu: %s\n  config: %s\n",
                  static_cast<unsigned long long>(s), absl::StrJoin(ck.failures, "\n  ").c_str(),
                  summary.c_str());
      std::printf("  replay: ringpipe stress --seed=%llu --configs=1%s%s%s\n",
                  static_cast<unsigned long long>(s),
                  comm_empty ? "" : " --comm_empty=false",
                  fault_every != 4 ? absl::StrCat(" --fault_every=", fault_every).c_str() : "",
                  max_devices != 8 ? absl::StrCat(" --max_devices=", max_devices).c_str() : "");
    }
    std::fflush(stdout);
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string kinds;
  for (const auto& [k, n] : tally.by_kind) absl::StrAppend(&kinds, kinds.empty() ? "" : ", ", k, " ", n);
  std::printf(
      "stress: %d configurations (seeds %llu..%llu), %d failed; comm checks %d; faults injected "
      "%d (%s), detected %d, attributed to the faulty rank %d; wall %.1f s\n",
      static_cast<int>(configs), static_cast<unsigned long long>(seed),
      static_cast<unsigned long long>(seed + static_cast<uint64_t>(configs) - 1), failed,
      comm_checks, tally.injected, kinds.empty() ? "none" : kinds.c_str(), tally.detected,
      tally.attributed, wall);
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
       "Let the comm check draw 0-element all-reduces (false: 1 element instead; a workaround while comm's "
       "Decode(nullptr, 0) UBSan report is open, docs/reliability.md)."},
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
