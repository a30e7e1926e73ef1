// `ringpipe stress`: the checks of one configuration (apps/stress.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>
#include <tuple>

#include <sys/syscall.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "apps/allreduce.h"
#include "apps/stress.h"
#include "comm/ring_steps.h"
#include "comm/ring_timing.h"
#include "runtime/link_models.h"
#include "runtime/tracer.h"
#include "schedule/plan.h"
#include "schedule/validator.h"

namespace rp::apps::stress {
namespace {

using schedule::OpKind;

int ThreadCount() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

// pthread_join returns once the kernel clears the thread's tid, a moment before the kernel reaps the
// thread and lowers the process's count, so a count read right after a join may still include it.
// These wait (bounded) for the kernel's reaping; they order nothing between the program's threads.
constexpr auto kReapLimit = std::chrono::seconds(5);

// The thread count with no thread still being reaped: a helper thread (which also starts a
// sanitizer's lazily created background thread) is joined, and its /proc entry must be gone.
int BaselineThreadCount() {
  pid_t tid = 0;
  std::thread([&tid] { tid = static_cast<pid_t>(::syscall(SYS_gettid)); }).join();
  const std::string task = absl::StrCat("/proc/self/task/", tid);
  const auto deadline = std::chrono::steady_clock::now() + kReapLimit;
  while (std::filesystem::exists(task) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return ThreadCount();
}

// The thread count once joined threads are reaped: waits until it is at most `baseline` or the
// limit passes, so a leaked thread still shows as a higher count.
int ThreadCountAfterJoins(int baseline) {
  const auto deadline = std::chrono::steady_clock::now() + kReapLimit;
  int n = ThreadCount();
  while (n > baseline && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    n = ThreadCount();
  }
  return n;
}

// The untimed all-reduce of one codec over the drawn ranks: same bits everywhere, the exact sum of
// integers in FP32, each rank's wire bytes = the formula.
void CheckUntimed(const Drawn& c, uint64_t seed, bool integers, comm::Communicator& comm, Checker& ck) {
  const int n = c.comm_ranks;
  const comm::Codec codec = integers ? comm::Codec::kFp32 : c.comm_codec;
  std::vector<std::vector<float>> bufs(static_cast<size_t>(n));
  Draw g(seed ^ (integers ? 0x1234567ULL : 0x89abcdefULL));
  for (auto& b : bufs) {
    b.resize(c.comm_count);
    for (float& x : b) x = integers ? static_cast<float>(g.Int(-64, 64)) : static_cast<float>(g.Real(-2, 2));
  }
  std::vector<double> exact(c.comm_count, 0.0);
  for (const auto& b : bufs) {
    for (size_t i = 0; i < b.size(); ++i) exact[i] += b[i];
  }
  std::vector<absl::StatusOr<comm::CollectiveResult>> res(static_cast<size_t>(n), absl::UnknownError("not run"));
  const comm::CollectiveOptions co{.codec = codec, .segment_bytes = c.comm_segment_bytes,
                                   .timeout = std::chrono::seconds(20)};
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto& b = bufs[static_cast<size_t>(r)];
      res[static_cast<size_t>(r)] = comm.rank(r).AllReduce(b, b, co);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    const auto& rr = res[static_cast<size_t>(r)];
    if (!rr.ok()) return ck.Fail("comm: rank %d: %s", r, rr.status().ToString());
    const uint64_t want = comm::ring::AllReduceWireBytes(codec, c.comm_count, n, r, c.comm_segment_bytes / 4);
    if (rr->wire_bytes != want) {
      ck.Fail("comm: rank %d (%s) wire bytes %d, formula %d", r, comm::CodecName(codec), rr->wire_bytes, want);
    }
    if (bufs[static_cast<size_t>(r)] != bufs[0]) {
      ck.Fail("comm: %s all-reduce: rank %d's result differs from rank 0's", comm::CodecName(codec), r);
    }
  }
  if (!integers) return;
  for (size_t i = 0; i < c.comm_count; ++i) {
    if (static_cast<double>(bufs[0][i]) != exact[i]) {
      return ck.Fail("comm: fp32 all-reduce element %d = %g, exact sum %g", i, bufs[0][i], exact[i]);
    }
  }
}

// The same ring on a DGX A100 fabric (one node: an uncontended ring): emulated = the closed form.
void CheckTimed(const Drawn& c, Checker& ck) {
  if (c.comm_count == 0) return;
  allreduce::Settings s;
  s.ranks = c.comm_ranks;
  s.codec = c.comm_codec;
  s.iters = 2;
  s.warmup = 0;
  absl::StatusOr<allreduce::Row> row = allreduce::RunTimed(s, 4 * c.comm_count, c.comm_segment_bytes, DgxA100());
  if (!row.ok()) return ck.Fail("timed comm: %s", row.status().ToString());
  if (row->wrong != 0) ck.Fail("timed comm: %d wrong elements", row->wrong);
  if (row->time_us != row->formula_us) {
    ck.Fail("timed comm: emulated %.3f us, closed form %.3f us", row->time_us, row->formula_us);
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

// Real wire bytes one rank puts on the wire for one ring all-reduce of `count` real elements timed
// as `modeled` elements: each of its chunks cut into the K segments of the modeled chunk
// (comm/ring_timing.h); reduce-scatter sends every chunk but the rank's, all-gather every chunk but
// the next rank's.
uint64_t RingWireBytes(comm::Codec codec, size_t count, uint64_t modeled, int n, int index, size_t segment_bytes) {
  if (n <= 1) return 0;
  const int k_segments = comm::ring::TimedShape::Ring(n, modeled, segment_bytes / 4, codec, 0).segments();
  uint64_t bytes = 0;
  for (int ch = 0; ch < n; ++ch) {
    uint64_t chunk = 0;
    for (int k = 0; k < k_segments; ++k) {
      chunk += comm::SegmentWireBytes(codec, comm::ring::SplitSegment(comm::ring::ChunkRange(count, n, ch), k_segments, k).size);
    }
    bytes += (ch != index ? chunk : 0) + (ch != (index + 1) % n ? chunk : 0);
  }
  return bytes;
}

// Every compute op of the program traced once per (rank, step): per (rank, step, name, micro-batch)
// the trace holds what the rank's op list has.
void CheckTrace(const schedule::ExecutorOptions& o, const std::vector<TraceEvent>& events, Checker& ck) {
  std::map<std::tuple<int, int, std::string, int>, int> traced;
  for (const TraceEvent& e : events) {
    if (e.kind != rp::OpKind::kCompute || e.name == nullptr || std::string(e.name) == "Opt") continue;
    ++traced[{e.rank, e.step, e.name, e.micro_batch}];
  }
  std::map<std::tuple<int, int, std::string, int>, int> want;
  const int world = o.grid.dp * o.grid.pp * o.grid.tp;
  for (int rank = 0; rank < world; ++rank) {
    const auto& ops = o.program.ranks[static_cast<size_t>((rank / o.grid.tp) % o.grid.pp)];
    for (int step = 0; step < o.steps; ++step) {
      for (const schedule::Op& op : ops) {
        if (schedule::IsCompute(op.kind)) ++want[{rank, step, schedule::OpKindName(op.kind), op.micro_batch}];
      }
    }
  }
  if (traced != want) ck.Fail("the trace's compute ops differ from the program's (%d vs %d keys)", traced.size(), want.size());
}

// Each device's DP wire bytes = steps × Σ over its buckets of RingWireBytes (over each bucket's
// group: an expert bucket's is its expert-data-parallel group).
void CheckDpBytes(const schedule::ExecutorOptions& o, const schedule::RunResult& r, Checker& ck) {
  absl::StatusOr<schedule::ExecutionPlan> plan = schedule::BuildPlan(schedule::PlanOptionsFor(o));
  if (!plan.ok()) return ck.Fail("BuildPlan: %s", plan.status().ToString());
  for (const schedule::DeviceReport& dr : r.devices) {
    uint64_t want = 0;
    for (int ch = 0; ch < plan->v; ++ch) {
      for (const schedule::BucketPlan& b : plan->Chunk(dr.coord.pp, ch).buckets) {
        int index = 0;  // an expert bucket's group is its expert-data-parallel group
        const int n = static_cast<int>(plan->BucketGroup(dr.rank, ch, b, &index).size());
        want += RingWireBytes(o.codec, b.grad_count, b.modeled_elements, n, index, plan->ring_segment_bytes);
      }
    }
    want *= static_cast<uint64_t>(o.steps);
    if (dr.dp_bytes != want) ck.Fail("rank %d: DP wire bytes %d, formula %d", dr.rank, dr.dp_bytes, want);
    if (o.grid.pp == 1 && dr.p2p_bytes != 0) ck.Fail("rank %d: p2p bytes without a pipeline", dr.rank);
    if (o.grid.tp == 1 && dr.tp_bytes != 0) ck.Fail("rank %d: TP bytes without TP", dr.rank);
  }
}

// Figures on every timeline: overlap in [0, 1], no negative time; the virtual clock's timelines.
void CheckFigures(const schedule::ExecutorOptions& o, const schedule::RunResult& r, Checker& ck) {
  for (const schedule::DeviceReport& dr : r.devices) {
    for (const schedule::TimelineFigures* f : {&dr.measured, &dr.emulated, &dr.predicted}) {
      if (!(f->overlap >= 0 && f->overlap <= 1) || f->exposed_comm_ms < 0 || f->peer_wait_ms < 0 || f->busy_ms < 0 ||
          f->host_late_ms < 0) {
        return ck.Fail("rank %d: overlap %g, exposed %g ms, peer wait %g ms, busy %g ms, host late %g ms", dr.rank,
                       f->overlap, f->exposed_comm_ms, f->peer_wait_ms, f->busy_ms, f->host_late_ms);
      }
    }
    // Lateness is a measured figure: none on the modeled timelines, none on a virtual clock.
    if (dr.emulated.host_late_ms != 0 || dr.predicted.host_late_ms != 0 ||
        (o.virtual_time && dr.measured.host_late_ms != 0)) {
      return ck.Fail("rank %d: host lateness %g / %g / %g ms (measured / emulated / predicted)", dr.rank,
                     dr.measured.host_late_ms, dr.emulated.host_late_ms, dr.predicted.host_late_ms);
    }
  }
  if (!o.virtual_time) return;
  for (const schedule::StepRecord& s : r.steps) {
    if (s.measured_ms != s.emulated_ms) {
      return ck.Fail("step %d: virtual clock, measured %.6f ms != emulated %.6f ms", s.step, s.measured_ms,
                     s.emulated_ms);
    }
    if (s.emulated_ms != s.predicted_ms) {
      return ck.Fail("step %d: virtual-clock step %.6f ms, predicted %.6f ms", s.step, s.emulated_ms, s.predicted_ms);
    }
  }
}

// A drawn configuration whose training leaves a lossy wire format's range: an FP16, BF16 or INT8
// encode refuses a value (OUT_OF_RANGE), which the emulator reports instead of saturating it — the
// configuration's own failure, not a broken invariant. True (and ck.out_of_range set) when the
// run's failure `run` is OUT_OF_RANGE, `o` uses a lossy wire format, its fault-free run (`o` without
// faults) fails with OUT_OF_RANGE, and the same configuration with FP32 wire formats trains to the
// end; a failed FP32 twin is a failed check.
bool LeavesTheWireFormatsRange(const absl::Status& run_status, const schedule::ExecutorOptions& with_faults,
                               Checker& ck) {
  if (!absl::IsOutOfRange(run_status)) return false;
  schedule::ExecutorOptions o = with_faults;
  if (o.codec == comm::Codec::kFp32 && o.ep_codec == comm::Codec::kFp32) return false;
  o.faults.op_faults.clear();
  auto run = [](const schedule::ExecutorOptions& x) -> absl::Status {
    absl::StatusOr<std::unique_ptr<schedule::Executor>> ex = schedule::Executor::Create(x);
    return ex.ok() ? (*ex)->Run().status() : ex.status();
  };
  if (!with_faults.faults.op_faults.empty()) {
    if (!absl::IsOutOfRange(run(o))) return false;
  }
  o.codec = comm::Codec::kFp32;
  o.ep_codec = comm::Codec::kFp32;
  if (const absl::Status fp32 = run(o); !fp32.ok()) {
    ck.Fail("left the wire format's range, and with FP32 wire formats the run fails too: %s", fp32.ToString());
  }
  ck.out_of_range = true;
  return true;
}

}  // namespace

void CheckComm(const Drawn& c, uint64_t seed, Checker& ck) {
  std::vector<int> devices(static_cast<size_t>(c.comm_ranks));
  for (int r = 0; r < c.comm_ranks; ++r) devices[static_cast<size_t>(r)] = r;
  comm::CommunicatorOptions options;
  options.devices = devices;
  options.inline_bytes = c.comm_inline_bytes;
  options.max_held_segments = c.comm_max_held;
  absl::StatusOr<std::unique_ptr<comm::Communicator>> comm = comm::Communicator::Create(options);
  if (!comm.ok()) return ck.Fail("comm: Create: %s", comm.status().ToString());
  for (const bool integers : {false, true}) CheckUntimed(c, seed, integers, **comm, ck);
  CheckTimed(c, ck);
}

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
  if (!r.ok()) {
    if (LeavesTheWireFormatsRange(r.status(), o, ck)) return;
    return ck.Fail("run failed: %s", r.status().ToString());
  }
  if (static_cast<int>(r->steps.size()) != o.steps) ck.Fail("%d step records, expected %d", r->steps.size(), o.steps);
  for (const schedule::StepRecord& s : r->steps) {
    if (s.replica_divergence != 0) ck.Fail("step %d: replica divergence %g (must be 0)", s.step, s.replica_divergence);
    if (!std::isfinite(s.loss)) ck.Fail("step %d: loss %g", s.step, s.loss);
  }
  const double wd_ms = std::chrono::duration<double, std::milli>(o.watchdog_timeout).count();
  if (ToMillis(r->lateness.max()) * (o.virtual_time ? 0 : o.time_scale) >= wd_ms) {
    ck.Fail("a wait woke %g ms late (watchdog %g ms)", ToMillis(r->lateness.max()), wd_ms);
  }
  CheckTrace(o, tracer.Events(), ck);
  CheckDpBytes(o, *r, ck);
  CheckFigures(o, *r, ck);
  if (o.run_reference && !(r->max_loss_rel_diff < 1e-4)) {
    ck.Fail("fp32 loss differs from the single-device reference by %g (relative)", r->max_loss_rel_diff);
  }
}

void CheckFault(const Drawn& c, Checker& ck, FaultTally& tally) {
  const OpFault f = *c.fault;
  ++tally.injected;
  ++tally.by_kind[OpFaultKindName(f.kind)];
  const int baseline = BaselineThreadCount();
  absl::StatusOr<std::unique_ptr<schedule::Executor>> ex = schedule::Executor::Create(c.options);
  if (!ex.ok()) return ck.Fail("Executor::Create: %s", ex.status().ToString());
  absl::StatusOr<schedule::RunResult> r = (*ex)->Run();
  if (f.kind == OpFaultKind::kSlowLink) {
    if (!r.ok()) {
      if (LeavesTheWireFormatsRange(r.status(), c.options, ck)) return;
      return ck.Fail("slow link: run failed: %s", r.status().ToString());
    }
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
  // The run failed before its fault fired: the configuration's own failure if it fails without the
  // fault too (a lossy wire format's range), else a failed check below.
  if (fl->seconds_after_fault < 0 && LeavesTheWireFormatsRange(r.status(), c.options, ck)) return;
  const size_t failures_before = ck.failures.size();
  const double limit = std::chrono::duration<double>(c.options.watchdog_timeout).count() + 1.0;
  if (!(fl->seconds_after_fault >= 0 && fl->seconds_after_fault < limit)) {
    ck.Fail("%s fault: reported %g s after the fault (limit %g s): %s", OpFaultKindName(f.kind),
            fl->seconds_after_fault, limit, r.status().ToString());
  }
  if (f.kind == OpFaultKind::kThrow && r.status().code() != absl::StatusCode::kInternal) {
    ck.Fail("throw fault: status %s, expected INTERNAL", r.status().ToString());
  }
  if (fl->committed_steps != f.step) {
    ck.Fail("%s fault at step %d: %d steps committed", OpFaultKindName(f.kind), f.step, fl->committed_steps);
  }
  if (const int after = ThreadCountAfterJoins(baseline); after != baseline) {
    ck.Fail("%s fault: %d threads after the run, %d before", OpFaultKindName(f.kind), after, baseline);
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
  }
  if (ck.failures.size() != failures_before) return;
  ++tally.detected;
  const bool attributed =
      f.kind == OpFaultKind::kThrow
          ? fl->rank == f.rank && fl->step == f.step && fl->op == f.op
          : fl->rank == f.rank || std::find(fl->stuck_ranks.begin(), fl->stuck_ranks.end(), f.rank) != fl->stuck_ranks.end();
  if (attributed) {
    ++tally.attributed;
  } else if (f.kind == OpFaultKind::kThrow) {
    ck.Fail("throw fault at rank %d step %d op %d reported as rank %d step %d op %d", f.rank, f.step, f.op, fl->rank,
            fl->step, fl->op);
  } else {
    // A stall blamed on neither the stalled rank nor the end of the wait chains is detected but not
    // attributed: a failed check, as for a throw (the summary's counts alone would hide it).
    ck.Fail("stall fault at rank %d step %d op %d reported as rank %d step %d op %d, wait chains ending at [%s]",
            f.rank, f.step, f.op, fl->rank, fl->step, fl->op, absl::StrJoin(fl->stuck_ranks, ", "));
  }
}

}  // namespace rp::apps::stress
