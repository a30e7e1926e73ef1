// RunFailure (executor_impl.h): what failed first, whom it waited for and where those waits end;
// uncommitted optimizer updates rolled back. And the stall the monitor reports.
#include <algorithm>
#include <chrono>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/thread_probe.h"
#include "schedule/executor_impl.h"

namespace rp::schedule {
namespace {

constexpr std::chrono::milliseconds kMonitorPeriod{20};  // the stall monitor's look at progress

std::string RankName(const ParallelGrid& g, int rank) {
  const Coord c = g.CoordOf(rank);
  return absl::StrCat("rank ", rank, " (dp ", c.dp, ", pp ", c.pp, ", tp ", c.tp, ")");
}

// The rank whose message a waiting LP awaits, or -1: the sender of the channel it awaits, or, on a
// gate that handlers running its collective will signal (a TP all-reduce, an EP all-to-all), the
// device its wait site names (comm names devices: Fabric::Scope::SetGateSite).
int AwaitedRank(const ParallelGrid& g, const LpWait& w) {
  if (w.state == LpWait::State::kAwaitChannel) return w.peer < 0 ? -1 : w.peer / 2;
  if (w.state == LpWait::State::kAwaitGate && w.site.peer >= 0 && w.site.peer < g.world_size()) {
    return g.RankAtDevice(w.site.peer);
  }
  return -1;
}

}  // namespace

// The ranks with a stream running without progress, and in *detail what the first of them runs.
std::vector<int> Executor::Impl::RunningRanks(const std::vector<LpWait>& waits, std::string* detail) const {
  const ParallelGrid& g = plan->grid;
  std::vector<int> running;
  for (const LpWait& w : waits) {
    const int rank = ExecutionPlan::RankOfLp(w.lp);
    if (w.state != LpWait::State::kRunning ||
        std::find(running.begin(), running.end(), rank) != running.end()) {
      continue;
    }
    running.push_back(rank);
    if (detail->empty()) {
      // A compute stream names the op its device runs (its last wait site may be long past: a
      // device stalled in op 0 of a step said "last in 'step barrier'").
      const DeviceRunner::Position at = runners[static_cast<size_t>(rank)]->position();
      const auto& ops = o.program.ranks[static_cast<size_t>(g.CoordOf(rank).pp)];
      *detail =
          w.lp % 2 == 0 && at.op >= 0 && static_cast<size_t>(at.op) < ops.size()
              ? absl::StrCat(" (compute stream, in op ", at.op, " '", ToString(ops[static_cast<size_t>(at.op)], plan->v),
                             "' at step ", at.step, ", modeled time ", ToMillis(w.bound), " ms)")
              : absl::StrCat(" (", w.lp % 2 == 0 ? "compute" : "comm", " stream, last in '", w.site.op,
                             "', modeled time ", ToMillis(w.bound), " ms)");
    }
  }
  return running;
}

// The stall monitor's loop (its own thread, until `done`): a failure anywhere aborts every
// communicator and the fabric, so no device stays blocked; no progress for the watchdog timeout
// (while nobody sleeps on a real clock and no host work of ours runs: a step boundary's
// bookkeeping, a compute kernel) is a stall, reported with who waits for whom. Time counts as
// "no progress" only while the host runs what the run waits for (runtime/thread_probe.h
// QuietClock): a look in which one of those threads was runnable and got no CPU while none of them
// used any — descheduled on a busy host, or the whole process stopped — is the host's time.
void Executor::Impl::Monitor(Cluster& cluster, const std::atomic<bool>& done) {
  uint64_t last = ~uint64_t{0};
  auto prev = std::chrono::steady_clock::now();
  QuietClock quiet;
  std::vector<std::pair<int, HostThreadState>> running;
  while (!done.load(std::memory_order_acquire)) {
    if (cluster.watchdog().WaitForFailure(kMonitorPeriod, &done)) {
      const absl::Status s = cluster.watchdog().status();
      // The fabric first, with the failure itself (a communicator's abort would wrap it).
      fabric->Abort(s);
      for (auto* v : {&ctx.pipes_act, &ctx.pipes_grad, &ctx.tps, &ctx.grads, &ctx.eps}) {
        for (auto& c : *v) {
          // An expert group id of a stage with no MoE block has no communicator.
          if (c != nullptr) c->Abort(s);
        }
      }
      return;
    }
    // The data lane's items are host work of ours too (a 256-replica run's reductions, slowed by a
    // busy host, outlasted a 50 ms timeout while every device waited for them).
    const uint64_t progress = fabric->progress() +
                              static_cast<uint64_t>(ctx.ops_done.load(std::memory_order_relaxed)) +
                              (ctx.lane != nullptr ? ctx.lane->completed() : 0);
    const auto now = std::chrono::steady_clock::now();
    const std::chrono::nanoseconds elapsed = now - prev;
    prev = now;
    // Every device done: what is left is the cluster joining threads, however long the host takes
    // (a 256-replica run under load, timeout 10 ms, failed after committing all its steps).
    if (progress != last || ctx.clock_sleepers.load(std::memory_order_relaxed) > 0 ||
        ctx.host_work.load(std::memory_order_relaxed) > 0 ||
        ctx.devices_done.load(std::memory_order_relaxed) == plan->grid.world_size()) {
      last = progress;
      quiet.Progress();
      continue;
    }
    // The threads the run may wait for, as the host sees them: the device threads running without
    // progress (compute streams: a comm stream's thread is not probed, its time counts) and the
    // data lane's worker (id -1), whose reductions a device's optimizer may be waiting for.
    running.clear();
    for (const LpWait& w : fabric->Waits()) {
      if (w.state != LpWait::State::kRunning || w.lp % 2 != 0) continue;
      const int rank = ExecutionPlan::RankOfLp(w.lp);
      const int tid = runners[static_cast<size_t>(rank)]->host_thread_id();
      // A device thread not started yet: the host has not run it (thousands start on a busy host).
      running.emplace_back(rank, tid != 0 ? ReadHostThreadState(tid)
                                          : HostThreadState{.known = true, .runnable = true});
    }
    // (An idle worker sleeps: not runnable, it excuses nothing.)
    if (ctx.lane != nullptr) {
      running.emplace_back(-1, ReadHostThreadState(ctx.lane->worker_thread_id()));
    }
    quiet.Look(elapsed, running);
    if (quiet.quiet() >= o.watchdog_timeout) {
      cluster.watchdog().Fail(StallStatus(quiet.quiet(), quiet.excused()));
    }
  }
}

absl::Status Executor::Impl::StallStatus(std::chrono::nanoseconds quiet, std::chrono::nanoseconds excused) {
  const ParallelGrid& g = plan->grid;
  const std::vector<LpWait> waits = fabric->Waits();
  // Ranks with a stream running without progress: stalled or dead devices. The conservative rule
  // holds back every commit past such a stream's bound, so in the end everybody waits for them
  // (even for a message its sender already posted). With none, the waits form a deadlock.
  std::string running_detail;
  const std::vector<int> running = RunningRanks(waits, &running_detail);
  const auto runs = [&](int rank) {
    return std::find(running.begin(), running.end(), rank) != running.end();
  };
  // Who waits in which op for whom (ranks; a rank with a running stream waits for nobody). The
  // waits on a running rank come first: they name the stall's rank, op and peer.
  struct Waiter {
    int rank, peer;
    const LpWait* wait;
  };
  // A rank's two streams may wait for different peers (its compute stream in a TP all-reduce, its
  // comm stream in a DP bucket's ring): its chain goes on through a wait on a running rank if one
  // of them has it. Any other wait only stands behind the running rank's bound (the conservative
  // rule), and following it named a healthy peer as the end of the chain.
  std::vector<Waiter> waiters;
  std::map<int, int> waits_for;
  for (const LpWait& w : waits) {
    const int rank = ExecutionPlan::RankOfLp(w.lp);
    const int peer = AwaitedRank(g, w);
    if (peer < 0 || runs(rank)) continue;
    waiters.push_back({rank, peer, &w});
    auto [it, inserted] = waits_for.emplace(rank, peer);
    if (!inserted && runs(peer) && !runs(it->second)) it->second = peer;
  }
  std::stable_partition(waiters.begin(), waiters.end(), [&](const Waiter& x) { return runs(x.peer); });
  std::vector<std::string> lines;
  for (size_t i = 0; i < waiters.size() && i < 4; ++i) {
    lines.push_back(absl::StrCat(RankName(g, waiters[i].rank), " waits in '", waiters[i].wait->site.op,
                                 "' at step ", waiters[i].wait->site.step, " for rank ",
                                 waiters[i].peer));
  }
  // The first failure: a waiter on a running rank, else a running rank (nobody waits on it
  // through a channel, e.g. everyone else is at the step barrier), else the first waiter.
  const int first = !waiters.empty() && runs(waiters.front().peer) ? waiters.front().rank
                    : !running.empty()                             ? running.front()
                    : waits_for.empty()                            ? -1
                                                                   : waits_for.begin()->first;
  // Follow the chain from it to a rank that waits for nobody (or around a deadlock's cycle).
  std::vector<int> chain;
  for (int at = first; at >= 0 && std::find(chain.begin(), chain.end(), at) == chain.end();) {
    chain.push_back(at);
    auto it = waits_for.find(at);
    at = it == waits_for.end() ? -1 : it->second;
  }
  const absl::Status s = absl::DeadlineExceededError(absl::StrCat(
      "watchdog: no device made progress for ",
      std::chrono::duration_cast<std::chrono::milliseconds>(quiet).count(), " ms (timeout ",
      std::chrono::duration_cast<std::chrono::milliseconds>(o.watchdog_timeout).count(), " ms",
      excused.count() > 0
          ? absl::StrCat("; not counted: ", std::chrono::duration_cast<std::chrono::milliseconds>(excused).count(),
                         " ms in which the host did not run a thread the run waited for")
          : std::string(),
      "): ", lines.empty() ? "no device waits on a message" : absl::StrJoin(lines, "; "),
      running.empty() ? ""
                      : absl::StrCat("; running without progress: ", RankName(g, running.front()),
                                     running_detail),
      chain.size() > 1 ? absl::StrCat("; the wait chain ends at rank ", chain.back()) : ""));
  NoteStallRecords(s, first, running, waits, waits_for);
  return s;
}

void Executor::Impl::NoteHandlerFailure(LpId receiver, const WaitSite& site, const absl::Status& status) {
  // In commit order, before the abort releases the threads whose own reports (each wrapping this
  // status) come in host order: RootError prefers the shortest record of the run's status, and
  // among equals the first — this one, naming the receiver's rank.
  ctx.NoteError({.rank = ExecutionPlan::RankOfLp(receiver), .step = site.step, .op = -1,
                 .op_name = "message handler", .waiting = {}, .status = status});
}

void Executor::Impl::NoteStallRecords(const absl::Status& stall, int first,
                                      const std::vector<int>& running,
                                      const std::vector<LpWait>& waits,
                                      const std::map<int, int>& waits_for) {
  // One record per rank in the picture, `first` first: RunFailure follows the same wait chains,
  // which end at the running ranks (their threads' own records, noted as the abort releases them,
  // may name a peer: a stalled device's comm stream waiting in a ring).
  auto note = [&](int rank) {
    ErrorRecord e{.rank = rank, .step = -1, .op = -1, .op_name = "stall", .waiting = {},
                  .status = stall,
                  .running = std::find(running.begin(), running.end(), rank) != running.end()};
    if (e.running) e.op_name = "running without progress";
    if (auto it = waits_for.find(rank); it != waits_for.end()) e.waiting = {it->second};
    // The site of the wait the chain follows (a rank's two streams may wait for different peers).
    for (const LpWait& w : waits) {
      if (!e.waiting.empty() && ExecutionPlan::RankOfLp(w.lp) == rank &&
          AwaitedRank(plan->grid, w) == e.waiting.front()) {
        e.op_name = w.site.op;
        e.step = w.site.step;
        break;
      }
    }
    ctx.NoteError(e);
  };
  if (first >= 0) note(first);
  for (const auto& [rank, peer] : waits_for) {
    if (rank != first) note(rank);
  }
  for (int rank : running) {
    if (rank != first) note(rank);
  }
}

namespace {

// A status that only echoes an earlier failure: a wait the abort released (Cancelled, Aborted), or
// a collective or send begun on a communicator already aborted (comm's "communicator aborted
// earlier", FailedPrecondition, which carries the abort's status in its message).
bool IsConsequence(const absl::Status& s) {
  return absl::IsCancelled(s) || absl::IsAborted(s) ||
         (absl::IsFailedPrecondition(s) && absl::StrContains(s.message(), "communicator aborted earlier: "));
}

// The record that carries the run's first failure: same code and its message contains the
// watchdog's (followers wrap it too, in longer messages: take the first, then the shortest); else
// the first that is not a consequence (IsConsequence); else the first.
const ErrorRecord* RootError(const std::vector<ErrorRecord>& errs, const absl::Status& run) {
  const ErrorRecord* root = nullptr;
  for (const ErrorRecord& e : errs) {
    if (e.status.code() == run.code() && absl::StrContains(e.status.message(), run.message()) &&
        (root == nullptr || e.status.message().size() < root->status.message().size())) {
      root = &e;
    }
  }
  if (root != nullptr) return root;
  for (const ErrorRecord& e : errs) {
    if (!IsConsequence(e.status)) return &e;
  }
  return errs.empty() ? nullptr : &errs.front();
}

// Follows each missing peer's own failed wait (its error record) to the end of the chain: the
// ranks that waited for nobody, or that the stall monitor saw running (distinct, in the peers'
// order).
std::vector<int> WaitChainEnds(const std::vector<ErrorRecord>& errs, const std::vector<int>& missing,
                               int world) {
  std::map<int, std::vector<int>> waits;  // rank → whom its failed wait waited for
  std::vector<bool> running(static_cast<size_t>(world), false);
  for (const ErrorRecord& e : errs) {
    if (e.running && e.rank >= 0 && e.rank < world) running[static_cast<size_t>(e.rank)] = true;
  }
  for (const ErrorRecord& e : errs) {
    if (e.rank >= 0 && e.rank < world && running[static_cast<size_t>(e.rank)]) continue;
    if (!waits.contains(e.rank) || waits[e.rank].empty()) waits[e.rank] = e.waiting;
  }
  std::vector<int> ends;
  for (int r : missing) {
    std::vector<bool> seen(static_cast<size_t>(world), false);
    int at = r;
    while (!seen[static_cast<size_t>(at)]) {
      seen[static_cast<size_t>(at)] = true;
      auto it = waits.find(at);
      if (it == waits.end()) break;
      int next = -1;
      for (int x : it->second) {
        if (x != at) {
          next = x;
          break;
        }
      }
      if (next < 0) break;
      at = next;
    }
    if (std::find(ends.begin(), ends.end(), at) == ends.end()) ends.push_back(at);
  }
  return ends;
}

// How much of `e`'s failure the consequence `c` carries: the length of the longest tail of e's
// message — all of it, or what follows one of its ": " (the prefixes the layers above the failure
// added, e.g. the runner's "rank R (...) step S op X: ") — that c's message contains, or 0. A tail
// must be long enough to name a failure ("element 19: value 78274.4 is outside the fp16 range").
size_t CarriedTail(const absl::Status& c, const absl::Status& e) {
  constexpr size_t kMinTail = 32;
  const absl::string_view m = e.message();
  for (size_t at = 0; at < m.size() && m.size() - at >= kMinTail;) {
    const absl::string_view tail = m.substr(at);
    if (absl::StrContains(c.message(), tail)) return tail.size();
    const size_t sep = m.find(": ", at);
    if (sep == absl::string_view::npos) break;
    at = sep + 2;
  }
  return 0;
}

// The failure that heads the report: the first one a device reported, unless that was a
// consequence (IsConsequence: a wait released because another failure aborted the fabric, or an op
// begun on an aborted communicator), whose message carries that failure — which can reach the watchdog before the thread that failed
// does (a collective run by handlers fails in whichever thread commits; on a real clock a
// collective that fails aborts its group and the fabric at once, before its thread reports); then
// the failure it carries, as its rank recorded it (the record carried most fully: the failure may
// have been carried before its rank's runner named it).
absl::Status HeadStatus(const std::vector<ErrorRecord>& errs, const absl::Status& first) {
  if (!IsConsequence(first)) return first;
  const ErrorRecord* best = nullptr;
  size_t best_tail = 0;
  for (const ErrorRecord& e : errs) {
    if (IsConsequence(e.status) || e.status.message().empty()) continue;
    if (absl::StrContains(first.message(), e.status.message())) return e.status;
    if (const size_t tail = CarriedTail(first, e.status); tail > best_tail) {
      best = &e;
      best_tail = tail;
    }
  }
  if (best != nullptr) return best->status;
  return first;
}

// A device's failure on its way through the fabric's commit order.
struct FailureNote final : FabricPayload {
  explicit FailureNote(absl::Status s) : status(std::move(s)) {}
  absl::Status status;
};

}  // namespace

void Executor::Impl::OrderFailures(Watchdog& watchdog) {
  failure_watchdog = &watchdog;
  const int world = plan->grid.world_size();
  failure_channels.assign(static_cast<size_t>(world), -1);
  failure_gates.assign(static_cast<size_t>(world), -1);
  for (int r = 0; r < world; ++r) {
    const LpId lp = ExecutionPlan::ComputeLp(r);
    const ChannelId ch = fabric->AddChannel(lp, lp);
    const GateId gate = fabric->AddGate();
    fabric->SetChannelHandler(ch, [&watchdog, gate](Fabric::Scope& scope, ChannelId, Delivery d) {
      watchdog.Fail(static_cast<const FailureNote&>(*d.payload).status);
      scope.Signal(gate, d.timing.arrival);
    });
    failure_channels[static_cast<size_t>(r)] = ch;
    failure_gates[static_cast<size_t>(r)] = gate;
  }
}

void Executor::Impl::AwaitFailureTurn(int rank, Nanos at, const absl::Status& status) {
  if (failure_channels.empty()) return;
  if (!fabric->aborted() && !absl::IsCancelled(status) && !absl::IsAborted(status)) {
    const LpId lp = ExecutionPlan::ComputeLp(rank);
    const int device = plan->grid.DeviceOf(rank);
    // A running LP's key follows every committed one, so this post is in order; one that is not
    // running (a failure at a step boundary's rendezvous) may be refused: then it fails unordered,
    // as a thread that reaches its failure first.
    const absl::StatusOr<uint64_t> posted = fabric->Post(
        lp, failure_channels[static_cast<size_t>(rank)],
        {.src = device, .dst = device, .bytes = 0, .ready = std::max(at, fabric->bound(lp))},
        std::make_unique<FailureNote>(status));
    // OK once this failure committed (it failed the run unless an earlier one had); the abort
    // status once the run was aborted first.
    if (posted.ok()) {
      (void)fabric->AwaitGate(lp, failure_gates[static_cast<size_t>(rank)],
                              {.rank = rank, .op = "its own failure, in modeled-time order"});
    }
  }
  // A handler that found a collective's data error aborted the fabric at that commit, in key order:
  // that is the run's failure, not the status each released thread reports on its way out (which
  // wraps it, and whose first arrival is up to the host).
  if (fabric->aborted()) failure_watchdog->Fail(fabric->abort_status());
}

absl::Status Executor::Impl::Fail(const absl::Status& first_reported) {
  // Every thread has joined: the devices' state is ours.
  RunFailure f;
  f.committed_steps = committed;
  // Bookkeep records step k at the boundary that commits it. A held-out evaluation that failed
  // at that boundary leaves it uncommitted; one that ran while the next step trained (virtual
  // clock) fails the run at the next boundary, its step committed with a NaN accuracy.
  f.steps.assign(records.begin(),
                 records.begin() + std::min<ptrdiff_t>(std::ssize(records), committed));
  for (auto& r : runners) {
    if (r->backup_step() < 0 || r->backup_step() < committed) continue;
    r->Rollback();
    ++f.rolled_back;
  }
  std::vector<ErrorRecord> errs;
  {
    MutexLock lock(&ctx.errors_mu);
    errs = ctx.errors;
  }
  const absl::Status run = HeadStatus(errs, first_reported);
  const ErrorRecord* root = RootError(errs, run);
  std::string where = "first failure: unknown rank";
  const ParallelGrid& g = plan->grid;
  if (root != nullptr) {
    f.rank = root->rank;
    f.step = root->step;
    f.op = root->op;
    f.op_name = root->op_name;
    // A stall record knows what the fabric saw; the rank's own record (its thread's op when it
    // unwound) names the step and program op.
    for (const ErrorRecord& e : errs) {
      if (root->op >= 0 || e.rank != root->rank || e.op < 0) continue;
      f.step = e.step;
      f.op = e.op;
      f.op_name = e.op_name;
      break;
    }
    for (int r : root->waiting) {
      if (r != root->rank) f.missing_peers.push_back(r);
    }
    f.stuck_ranks = WaitChainEnds(errs, f.missing_peers, g.world_size());
    where = absl::StrCat("first failure: ", RankName(g, f.rank), " step ", f.step, " op ",
                         f.op >= 0 ? absl::StrCat(f.op, " ") : "", "'", f.op_name,
                         "'; missing peers: ",
                         f.missing_peers.empty() ? "none" : absl::StrJoin(f.missing_peers, ", "),
                         f.stuck_ranks == f.missing_peers
                             ? ""
                             : absl::StrCat(" (their wait chains end at rank(s) ",
                                            absl::StrJoin(f.stuck_ranks, ", "), ")"));
  }
  const int64_t fired = ctx.fault_fired_ns.load(std::memory_order_acquire);
  if (fired >= 0) {
    const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count();
    f.seconds_after_fault = static_cast<double>(now - fired) * 1e-9;
  }
  absl::Status out(run.code(),
                   absl::StrCat(run.message(), " [", where, "; committed steps: ", committed,
                                "; uncommitted updates rolled back on ", f.rolled_back,
                                " devices]"));
  f.status = out;
  failure = std::move(f);
  return out;
}

}  // namespace rp::schedule
