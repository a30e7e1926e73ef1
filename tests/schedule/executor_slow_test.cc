// Slow but healthy runs are not faults (hardly a stall: waits past the timeout on the real clock, a
// slow step boundary, a long kernel on the virtual clock), and what slows a run is emulated and
// predicted alike: slow and degraded links, a straggler in another replica. The injected faults
// themselves: executor_faults_test.cc.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/faults.h"
#include "runtime/thread.h"
#include "runtime/tracer.h"
#include "schedule/executor.h"
#include "schedule/generators.h"
#include "tests/schedule/executor_faults_helpers.h"

namespace rp::schedule {
namespace {

using faults_testing::Healthy;
using faults_testing::RunHealthy;
using faults_testing::Small;

// On a real clock a device asleep until its op's modeled end is progress: in a healthy run whose
// devices wait longer than the watchdog timeout for their peers (the last stage's first receive
// waits for two forwards upstream, the first stage's first gradient for four ops), nothing fires.
TEST(ExecutorFaults, WaitsLongerThanTheTimeoutAreNotAStallOnRealClock) {
  ExecutorOptions o = Small(1, /*dp=*/1, /*pp=*/3);
  o.virtual_time = false;
  o.time_scale = 1.0;
  o.cost = CostModel::Uniform({.forward = FromMillis(30), .backward = FromMillis(30)});
  o.watchdog_timeout = std::chrono::milliseconds(45);
  absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
  ASSERT_TRUE(ex.ok()) << ex.status();
  absl::StatusOr<RunResult> r = (*ex)->Run();
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->timelines.size(), 3u);
  double longest_wait_ms = 0;  // measured (wall stamps); the modeled one is a few ms longer
  for (const auto& timeline : r->timelines) {
    for (const OpInterval& iv : timeline) {
      if (iv.kind == IntervalKind::kRecv) {
        longest_wait_ms = std::max(longest_wait_ms, ToMillis(iv.wall_end - iv.wall_start));
      }
    }
  }
  // Some device waited longer than the watchdog's timeout (modeled: 90 ms, two timeouts; the wall
  // wait is what the watchdog sees and varies by the host's wake-up latency).
  EXPECT_GT(longest_wait_ms, 1.5 * 45.0);
}

// The host work of the two cases below, in units: 8 in plain builds, 2 under a sanitizer, whose
// instrumented kernels run 15-30 times slower (the cases took 30 s each under TSan at 8): a
// quarter of the work still outlasts the watchdog many times over, and the check below skips a
// case that did not.
constexpr int kHostWorkScale = kSanitizerBuild ? 2 : 8;

// Runs a healthy layout whose own host work outlasts the watchdog: it must succeed. If the whole
// run took less than four timeouts (a much faster host) the case was not exercised: skipped, not
// failed — the host's speed is not what these tests check.
void ExpectHealthyRunOutlastingTheWatchdog(const ExecutorOptions& o) {
  absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
  ASSERT_TRUE(ex.ok()) << ex.status();
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<RunResult> r = (*ex)->Run();
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_TRUE(r.ok()) << r.status();
  if (took <= 4 * o.watchdog_timeout) GTEST_SKIP() << "this host ran the case faster than the watchdog";
}

// The step boundary's own host work (here the last step's held-out evaluation of a wide model
// on a large held-out split) runs while every device waits at the rendezvous: nothing advances,
// yet nothing is stalled. It once failed a healthy run as "no device made progress" whenever the
// evaluation outlasted the watchdog timeout — on either clock (ringpipe run --virtual_time
// --hidden=512x4 --test_size=65536 --eval_every=1 --watchdog_timeout=0.2).
TEST(ExecutorFaults, SlowStepBoundaryIsNotAStall) {
  for (const bool virtual_time : {true, false}) {
    SCOPED_TRACE(virtual_time ? "virtual clock" : "real clock");
    ExecutorOptions o = Small(1, /*dp=*/1, /*pp=*/2);
    o.virtual_time = virtual_time;
    o.time_scale = 1.0;
    o.model.hidden = {512, 512, 512};
    o.dataset.test_size = kHostWorkScale * 2048;
    o.eval_samples = 0;  // the whole held-out split
    o.watchdog_timeout = std::chrono::milliseconds(50);
    // The evaluation (16 384 samples through 3 layers of 512; 4 096 under a sanitizer) lasts
    // longer than the timeout plus the monitor's 20 ms period, most of it inside the boundary.
    ExpectHealthyRunOutlastingTheWatchdog(o);
  }
}

// On a virtual clock a compute kernel the host takes long over (wide layers, a large micro-batch,
// a busy host) is host work, not a stall: nothing is committed meanwhile, yet the device runs. It
// once failed a healthy run as "no device made progress" once a kernel outlasted the watchdog
// (ringpipe run --virtual_time --dp=1 --pp=1 --tp=1 --hidden=1024x3 --microbatch_size=1024
// --watchdog_timeout=0.05).
TEST(ExecutorFaults, LongKernelIsNotAStallOnVirtualClock) {
  ExecutorOptions o = Small(1, /*dp=*/1, /*pp=*/2);
  o.model.hidden = {1024, 1024, 1024};
  o.microbatch_size = kHostWorkScale * 128;
  o.dataset.train_size = kHostWorkScale * 256;
  // Under a sanitizer the device's own code between its ops (outside any kernel) is slow enough that
  // a descheduled thread once outlasted 50 ms there, beside the other tests CI runs at once: the case
  // is about a kernel that outlasts the timeout, which the slower kernels still do at 250 ms.
  o.watchdog_timeout = std::chrono::milliseconds(kSanitizerBuild ? 250 : 50);
  // Four passes of 1024 rows (256 under a sanitizer) through layers of 1024 take several
  // timeouts.
  ExpectHealthyRunOutlastingTheWatchdog(o);
}

// A link that drops to a tenth of its speed from step 1: the report lists it with its factor, the
// modeled step grows, and the predictor plays the same slow link — on a virtual clock every step's
// emulated time equals its prediction to the nanosecond.
TEST(ExecutorFaults, SlowLinkIsEmulatedAndPredicted) {
  ExecutorOptions o = Small(3);
  o.faults.op_faults = {{.kind = OpFaultKind::kSlowLink, .rank = 0, .step = 1, .dst = 1,
                         .factor = 10}};
  const RunResult r = RunHealthy(o).result;
  ASSERT_EQ(r.steps.size(), 3u);
  ASSERT_EQ(r.slow_links.size(), 1u);
  EXPECT_EQ(r.slow_links[0].src, 0);
  EXPECT_EQ(r.slow_links[0].dst, 1);
  EXPECT_EQ(r.slow_links[0].first_step, 1);
  EXPECT_EQ(r.slow_links[0].factor, 10.0);
  EXPECT_GT(r.steps[1].emulated_ms, r.steps[0].emulated_ms);
  EXPECT_EQ(r.steps[1].emulated_ms, r.steps[2].emulated_ms);
  for (const StepRecord& s : r.steps) {
    EXPECT_EQ(s.measured_ms, s.emulated_ms) << "step " << s.step;
    EXPECT_EQ(s.emulated_ms, s.predicted_ms) << "step " << s.step;
  }
  EXPECT_GT(r.steps[1].predicted_ms, r.steps[0].predicted_ms);
  EXPECT_EQ(r.max_replica_divergence, 0.0);
}

// A slow link that no message crosses slowed nothing and is not reported: rank 0 (dp 0, pp 0) sends
// to rank 1 (its next stage) and rank 2 (its DP ring), never to rank 3 (dp 1, pp 1). It was listed,
// and `run` said "slow link: rank 0 -> rank 3 took 1e+06x its link class's time from step 0".
TEST(ExecutorFaults, ASlowLinkThatCarriesNoMessageIsNotReported) {
  ExecutorOptions o = Small(3);
  o.faults.op_faults = {{.kind = OpFaultKind::kSlowLink, .rank = 0, .step = 0, .dst = 3, .factor = 1000},
                        {.kind = OpFaultKind::kSlowLink, .rank = 0, .step = 1, .dst = 1, .factor = 10}};
  const RunResult r = RunHealthy(o).result;
  ASSERT_EQ(r.slow_links.size(), 1u);
  EXPECT_EQ(r.slow_links[0].src, 0);
  EXPECT_EQ(r.slow_links[0].dst, 1);
  EXPECT_EQ(r.slow_links[0].first_step, 1);
  EXPECT_EQ(r.slow_links[0].factor, 10.0);
}

// A degraded link (from the start) is a factor on a pair of ports for emulator and predictor
// alike: the timelines are equal interval by interval.
TEST(ExecutorFaults, DegradedLinkIsEmulatedAndPredicted) {
  ExecutorOptions o = Small(1);
  const RunResult base = RunHealthy(o).result;
  o.faults.degraded_links.push_back({.src = 2, .dst = 0, .factor = 8});  // the DP ring of stage 0
  Healthy h = RunHealthy(o);
  ASSERT_NE(h.executor, nullptr);
  const RunResult& r = h.result;
  EXPECT_GT(r.emulated_step_ms, base.emulated_step_ms);
  EXPECT_EQ(r.emulated_step_ms, r.predicted_step_ms);
  for (int rank = 0; rank < 4; ++rank) {
    const std::vector<OpInterval>& want = r.prediction.Timeline(h.executor->grid(), rank);
    const std::vector<OpInterval>& got = r.timelines[static_cast<size_t>(rank)];
    ASSERT_EQ(got.size(), want.size()) << "rank " << rank;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].start, want[i].start) << "rank " << rank << " interval " << i;
      EXPECT_EQ(got[i].end, want[i].end) << "rank " << rank << " interval " << i;
      EXPECT_EQ(got[i].transfer, want[i].transfer) << "rank " << rank << " interval " << i;
      EXPECT_EQ(got[i].peer, want[i].peer) << "rank " << rank << " interval " << i;
    }
  }
}

// A straggler in the other replica (DESIGN.md "Communication vs waiting"): the healthy replica's
// devices wait longer for the gradient all-reduce, and that wait is peer wait (the straggler had
// not sent yet), part of the bubble — not exposed communication, which stays what it was; overlap
// stays in [0, 1]. Emulated and predicted alike.
TEST(ExecutorFaults, StragglerInAnotherReplicaIsPeerWaitNotExposedComm) {
  ExecutorOptions o = Small(1);
  const RunResult base = RunHealthy(o).result;
  o.faults.stragglers.push_back({.rank = 3, .factor = 2.0});  // replica 1, stage 1
  const RunResult r = RunHealthy(o).result;
  ASSERT_EQ(r.devices.size(), 4u);
  ASSERT_EQ(base.devices.size(), 4u);
  EXPECT_EQ(r.emulated_step_ms, r.predicted_step_ms);
  EXPECT_GT(r.emulated_step_ms, base.emulated_step_ms);
  for (int rank : {0, 1}) {  // replica 0
    const TimelineFigures& got = r.devices[static_cast<size_t>(rank)].emulated;
    const TimelineFigures& was = base.devices[static_cast<size_t>(rank)].emulated;
    EXPECT_EQ(got.busy_ms, was.busy_ms) << "rank " << rank;
    EXPECT_GT(got.peer_wait_ms, was.peer_wait_ms) << "rank " << rank;
    EXPECT_LE(got.exposed_comm_ms, was.exposed_comm_ms) << "rank " << rank;
    EXPECT_GE(got.overlap, 0.0) << "rank " << rank;
    EXPECT_LE(got.overlap, 1.0) << "rank " << rank;
    EXPECT_EQ(got.exposed_comm_ms, r.devices[static_cast<size_t>(rank)].predicted.exposed_comm_ms);
    EXPECT_EQ(got.peer_wait_ms, r.devices[static_cast<size_t>(rank)].predicted.peer_wait_ms);
  }
  // The straggler's stage-1 partner waits for it through the DP ring most of all.
  const double extra_wait = r.devices[1].emulated.peer_wait_ms - base.devices[1].emulated.peer_wait_ms;
  const double extra_busy = r.devices[3].emulated.busy_ms - base.devices[3].emulated.busy_ms;
  EXPECT_GT(extra_wait, 0.5 * extra_busy);
}

TEST(ExecutorFaults, ParametersRejectsBadRankAndChunk) {
  absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(Small(1));
  ASSERT_TRUE(ex.ok());
  EXPECT_EQ((*ex)->Parameters(4).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*ex)->Parameters(0, 1).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE((*ex)->Parameters(3).ok());
  EXPECT_EQ((*ex)->failure(), nullptr);
}

}  // namespace
}  // namespace rp::schedule
