// Tests of rp::Device / rp::Cluster: threads, modeled time, comm stream, watchdog, faults, memory.
#include <atomic>
#include <deque>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/device.h"
#include "runtime/fabric_model.h"
#include "runtime/link_models.h"
#include "runtime/real_clock.h"
#include "runtime/status_macros.h"
#include "runtime/virtual_clock.h"

namespace rp {
namespace {

using ::testing::HasSubstr;

absl::Status NoKernel() { return absl::OkStatus(); }

// A one-slot-per-pair mailbox carrying a message's modeled arrival (what comm/ channels do).
class Mailbox {
 public:
  explicit Mailbox(Watchdog* wd) : wd_(wd) {}
  void Put(Nanos arrival) {
    MutexLock lock(&mu_);
    q_.push_back(arrival);
    cv_.SignalAll();
  }
  absl::StatusOr<Nanos> Take(const WaitSite& site) {
    MutexLock lock(&mu_);
    RP_RETURN_IF_ERROR(wd_->Wait(&mu_, &cv_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return !q_.empty();
    }, site));
    const Nanos t = q_.front();
    q_.pop_front();
    return t;
  }

 private:
  Watchdog* const wd_;
  Mutex mu_;
  CondVar cv_;
  std::deque<Nanos> q_ ABSL_GUARDED_BY(mu_);
};

TEST(Cluster, RejectsBadOptions) {
  VirtualClock clock;
  EXPECT_EQ(Cluster::Create({.num_devices = 0, .clock = &clock}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Cluster::Create({.num_devices = 2}).status().code(),
            absl::StatusCode::kInvalidArgument);
  ClusterOptions o{.num_devices = 2, .clock = &clock};
  o.faults.stragglers.push_back({.rank = 5, .factor = 2});
  EXPECT_EQ(Cluster::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  Tracer small(1, 8);
  EXPECT_EQ(Cluster::Create({.num_devices = 2, .clock = &clock, .tracer = &small}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Cluster, EveryDeviceRunsItsOpsAtModeledTimes) {
  VirtualClock clock;
  Tracer tracer(8, 4);
  auto cluster = Cluster::Create({.num_devices = 8, .devices_per_node = 4, .clock = &clock,
                                  .tracer = &tracer}).value();
  std::atomic<int> kernels{0};
  ASSERT_TRUE(cluster->Run([&](Device& dev) -> absl::Status {
    for (int i = 0; i < 3; ++i) {
      RP_ASSIGN_OR_RETURN(Nanos end, dev.Compute({.name = "F", .micro_batch = i}, FromMillis(10),
                                                 FromMillis(5), [&] {
                                                   kernels.fetch_add(1);
                                                   return absl::OkStatus();
                                                 }));
      RP_CHECK(end == FromMillis(15 + 10 * i)) << "end " << end.count();
    }
    return absl::OkStatus();
  }).ok());
  EXPECT_EQ(kernels.load(), 24);
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(cluster->device(r).cursor(), FromMillis(35));
    EXPECT_EQ(cluster->device(r).stats().compute_ops, 3u);
    EXPECT_EQ(cluster->device(r).stats().compute_time, FromMillis(30));
    EXPECT_EQ(cluster->device(r).node(), r / 4);
  }
  EXPECT_EQ(tracer.Events().size(), 24u);
}

TEST(Cluster, ComputeWaitsForModeledEndOnRealClockAndRecordsLateness) {
  auto clock = RealClock::Create({.time_scale = 0.05}).value();
  auto cluster = Cluster::Create({.num_devices = 2, .clock = clock.get()}).value();
  ASSERT_TRUE(cluster->Run([&](Device& dev) -> absl::Status {
    for (int i = 0; i < 4; ++i) {
      RP_ASSIGN_OR_RETURN(Nanos end, dev.Compute({.name = "F"}, FromMillis(2), kZeroTime, NoKernel));
      RP_CHECK(dev.clock().Now() >= end);  // never before the modeled end
    }
    return absl::OkStatus();
  }).ok());
  for (int r = 0; r < 2; ++r) {
    const DeviceStats& s = cluster->device(r).stats();
    // Each op either waited (lateness recorded, >= 0) or ended late (counted): never hidden.
    EXPECT_EQ(s.lateness[0].count() + s.late_ends, 4u);
    EXPECT_LE(s.overruns, s.late_ends + s.lateness[0].count());
    EXPECT_GE(s.lateness[0].min(), Nanos(0));
  }
}

TEST(Cluster, CommStreamRunsWhileComputeStreamWorks) {
  VirtualClock clock;
  auto cluster = Cluster::Create({.num_devices = 4, .clock = &clock,
                                  .watchdog_timeout = std::chrono::seconds(20)}).value();
  ASSERT_TRUE(cluster->Run([&](Device& dev) -> absl::Status {
    Mutex mu;
    CondVar cv;
    bool compute_done = false;
    // The comm task needs the compute stream to make progress after the post: it only completes
    // if the two streams really run at the same time.
    CommTicket t = dev.PostComm([&]() -> absl::Status {
      RP_CHECK(dev.CurrentStream() == static_cast<int>(Stream::kComm));
      MutexLock lock(&mu);
      return dev.watchdog().Wait(&mu, &cv, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return compute_done;
      }, {.rank = dev.rank(), .op = "comm"});
    });
    RP_RETURN_IF_ERROR(dev.Compute({.name = "B"}, FromMillis(1), kZeroTime, NoKernel).status());
    {
      MutexLock lock(&mu);
      compute_done = true;
      cv.SignalAll();
    }
    return dev.AwaitComm(t, {.rank = dev.rank(), .op = "await allreduce"});
  }).ok());
}

TEST(Watchdog, StalledPeerFailsRunWithDeadlineExceededNamingSite) {
  VirtualClock clock;
  Tracer tracer(2, 8);
  ClusterOptions o{.num_devices = 2, .clock = &clock, .tracer = &tracer,
                   .watchdog_timeout = std::chrono::milliseconds(200)};
  o.faults.stops.push_back({.rank = 0, .op_index = 1});
  auto cluster = Cluster::Create(o).value();
  Mailbox box(&cluster->watchdog());
  const absl::Status s = cluster->Run([&](Device& dev) -> absl::Status {
    if (dev.rank() == 0) {
      for (int step = 0; step < 3; ++step) {
        RP_ASSIGN_OR_RETURN(Nanos end, dev.Compute({.name = "F", .step = step}, FromMillis(1),
                                                   kZeroTime, NoKernel));
        box.Put(end);
      }
      return absl::OkStatus();
    }
    for (int step = 0; step < 3; ++step) {
      RP_ASSIGN_OR_RETURN(Nanos arrival,
                          box.Take({.rank = 1, .op = "recv", .peer = 0, .step = step + 1}));
      RP_RETURN_IF_ERROR(dev.Compute({.name = "F", .step = step}, FromMillis(1), arrival,
                                     NoKernel).status());
    }
    return absl::OkStatus();
  });
  ASSERT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("rank 1"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("'recv'"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("peer 0"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("step 2"));
  // The stop is in the trace, on rank 0.
  int stops = 0;
  for (const TraceEvent& e : tracer.Events()) {
    stops += e.kind == OpKind::kFault && e.rank == 0 && std::string(e.name) == "fault: device stop";
  }
  EXPECT_EQ(stops, 1);
  // A failed cluster refuses to run again.
  EXPECT_EQ(cluster->Run([](Device&) { return absl::OkStatus(); }).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(Watchdog, NotifyReleasesAWaitWhoseStopFlagIsSetButNeverHidesAFailure) {
  Watchdog wd(std::chrono::hours(1));
  std::atomic<bool> stop{false};
  std::atomic<int> result{-1};
  // Without the flag and the Notify this wait would last its hour (the test's timeout fails it).
  std::thread waiter([&] { result = wd.WaitForFailure(std::chrono::hours(1), &stop) ? 1 : 0; });
  stop.store(true, std::memory_order_release);
  wd.Notify();
  waiter.join();
  EXPECT_EQ(result.load(), 0);
  // A flag already set returns at once; a failure is reported whatever the flag says.
  EXPECT_FALSE(wd.WaitForFailure(std::chrono::hours(1), &stop));
  wd.Fail(absl::InternalError("rank 3: kernel failed"));
  EXPECT_TRUE(wd.WaitForFailure(std::chrono::hours(1), &stop));
}

TEST(Cluster, FailureReleasesSleepingDevices) {
  auto clock = RealClock::Create({}).value();
  auto cluster = Cluster::Create({.num_devices = 3, .clock = clock.get(),
                                  .watchdog_timeout = std::chrono::hours(2)}).value();
  const absl::Status s = cluster->Run([&](Device& dev) -> absl::Status {
    if (dev.rank() == 0) return absl::InternalError("rank 0: kernel failed");
    // An hour of modeled (= wall) time: only cancellation can end it.
    return dev.Compute({.name = "long"}, std::chrono::hours(1), kZeroTime, NoKernel).status();
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(s.message(), "rank 0: kernel failed");
}

TEST(Faults, StragglerSlowsOnlyItsRank) {
  VirtualClock clock;
  ClusterOptions o{.num_devices = 4, .clock = &clock};
  o.faults.stragglers.push_back({.rank = 2, .factor = 1.5});
  auto cluster = Cluster::Create(o).value();
  ASSERT_TRUE(cluster->Run([&](Device& dev) -> absl::Status {
    for (int i = 0; i < 4; ++i) {
      RP_RETURN_IF_ERROR(dev.Compute({.name = "F"}, FromMillis(10), kZeroTime, NoKernel).status());
    }
    return absl::OkStatus();
  }).ok());
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(cluster->device(r).cursor(), r == 2 ? FromMillis(60) : FromMillis(40)) << r;
  }
  EXPECT_EQ(cluster->faults().DescribeRank(2), std::vector<std::string>{"rank 2: straggler x1.5"});
  EXPECT_TRUE(cluster->faults().DescribeRank(1).empty());
}

TEST(Faults, JitterIsSeededDeterministicAndBounded) {
  FaultPlan plan;
  plan.jitter = {.seed = 42, .max_fraction = 0.2};
  const FaultInjector a = FaultInjector::Create(plan, 4).value();
  const FaultInjector b = FaultInjector::Create(plan, 4).value();
  plan.jitter.seed = 43;
  const FaultInjector c = FaultInjector::Create(plan, 4).value();
  int differs = 0;
  for (int r = 0; r < 4; ++r) {
    for (int op = 0; op < 50; ++op) {
      const double f = a.ComputeFactor(r, op);
      EXPECT_EQ(f, b.ComputeFactor(r, op));
      EXPECT_GE(f, 1.0);
      EXPECT_LT(f, 1.2);
      differs += f != c.ComputeFactor(r, op);
      EXPECT_FALSE(a.StopsAt(r, op));
    }
  }
  EXPECT_GT(differs, 190);
  EXPECT_EQ(FaultInjector().ComputeDuration(0, 0, FromMillis(3)), FromMillis(3));
}

TEST(Faults, RejectsBadPlans) {
  FaultPlan p;
  p.stragglers.push_back({.rank = 0, .factor = 0.5});
  EXPECT_EQ(FaultInjector::Create(p, 2).status().code(), absl::StatusCode::kInvalidArgument);
  p = {};
  p.stops.push_back({.rank = 0, .op_index = -1});
  EXPECT_EQ(FaultInjector::Create(p, 2).status().code(), absl::StatusCode::kInvalidArgument);
  p = {};
  p.jitter.max_fraction = -0.1;
  EXPECT_EQ(FaultInjector::Create(p, 2).status().code(), absl::StatusCode::kInvalidArgument);
  p = {};
  p.degraded_links.push_back({.src = 1, .dst = 1, .factor = 2});
  EXPECT_EQ(FaultInjector::Create(p, 2).status().code(), absl::StatusCode::kInvalidArgument);
}

// A ring pass: rank r computes, sends to r+1 over the fabric model; r+1 computes after arrival.
// On the virtual clock the modeled timeline is identical across runs and matches closed form.
std::vector<int64_t> RingPassEnds(const FaultPlan& faults) {
  VirtualClock clock;
  constexpr int kRanks = 4;
  ClusterOptions o{.num_devices = kRanks, .devices_per_node = 2, .clock = &clock};
  o.faults = faults;
  auto cluster = Cluster::Create(o).value();
  const LinkSpec spec{LinkParams{FromMicros(1), 1.0}, LinkParams{FromMicros(10), 0.5}, 2};
  std::vector<LinkFault> link_faults;
  for (const DegradedLink& d : faults.degraded_links) {
    link_faults.push_back({.src = d.src, .dst = d.dst, .factor = d.factor});
  }
  // Messages are committed in their modeled order here: each waits for the previous rank.
  auto links = FabricModel::Create(spec, kRanks, link_faults).value();
  std::vector<std::unique_ptr<Mailbox>> boxes;
  for (int r = 0; r < kRanks; ++r) boxes.push_back(std::make_unique<Mailbox>(&cluster->watchdog()));
  EXPECT_TRUE(cluster->Run([&](Device& dev) -> absl::Status {
    const int r = dev.rank();
    Nanos ready = kZeroTime;
    if (r > 0) {
      ScopedExternalWait external(&dev.clock());
      RP_ASSIGN_OR_RETURN(ready, boxes[r]->Take({.rank = r, .op = "recv", .peer = r - 1}));
    }
    RP_ASSIGN_OR_RETURN(Nanos end, dev.Compute({.name = "F"}, FromMillis(1), ready, NoKernel));
    if (r + 1 < kRanks) {
      boxes[r + 1]->Put(links.Commit({.src = r, .dst = r + 1, .bytes = 1000, .ready = end}).arrival);
    }
    return absl::OkStatus();
  }).ok());
  std::vector<int64_t> ends;
  for (int r = 0; r < kRanks; ++r) ends.push_back(cluster->device(r).cursor().count());
  return ends;
}

TEST(Faults, DegradedLinkChangesExactlyThatHop) {
  // Healthy: 1 ms compute per rank; hops 0→1 and 2→3 intra (2 µs), 1→2 inter (12 µs).
  const std::vector<int64_t> healthy = RingPassEnds({});
  EXPECT_EQ(healthy, (std::vector<int64_t>{1000000, 2002000, 3014000, 4016000}));
  EXPECT_EQ(RingPassEnds({}), healthy);  // deterministic
  FaultPlan plan;
  plan.degraded_links.push_back({.src = 1, .dst = 2, .factor = 2});
  const std::vector<int64_t> degraded = RingPassEnds(plan);
  // Only the 1→2 hop doubles (12 → 24 µs); ranks 0 and 1 are untouched.
  EXPECT_EQ(degraded, (std::vector<int64_t>{1000000, 2002000, 3026000, 4028000}));
}

TEST(MemoryTracker, CurrentAndPeakPerKind) {
  MemoryTracker m(3);
  m.Allocate(MemoryKind::kActivations, 100);
  m.Allocate(MemoryKind::kActivations, 50);
  m.Allocate(MemoryKind::kParameters, 1000);
  ASSERT_TRUE(m.Free(MemoryKind::kActivations, 100).ok());
  m.Allocate(MemoryKind::kActivations, 20);
  EXPECT_EQ(m.current(MemoryKind::kActivations), 70u);
  EXPECT_EQ(m.peak(MemoryKind::kActivations), 150u);
  EXPECT_EQ(m.total_current(), 1070u);
  EXPECT_EQ(m.total_peak(), 1150u);
  const absl::Status s = m.Free(MemoryKind::kGradients, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("rank 3"));
  EXPECT_EQ(m.current(MemoryKind::kGradients), 0u);
}

TEST(MemoryTracker, TwoStreamsAccountConcurrently) {
  VirtualClock clock;
  auto cluster = Cluster::Create({.num_devices = 2, .clock = &clock}).value();
  ASSERT_TRUE(cluster->Run([&](Device& dev) -> absl::Status {
    CommTicket t = dev.PostComm([&]() -> absl::Status {
      for (int i = 0; i < 1000; ++i) dev.memory().Allocate(MemoryKind::kCodecResiduals, 2);
      return absl::OkStatus();
    });
    for (int i = 0; i < 1000; ++i) dev.memory().Allocate(MemoryKind::kActivations, 1);
    return dev.AwaitComm(t, {.rank = dev.rank(), .op = "await"});
  }).ok());
  EXPECT_EQ(cluster->device(1).memory().total_current(), 3000u);
  EXPECT_EQ(cluster->device(1).memory().total_peak(), 3000u);
}

}  // namespace
}  // namespace rp

namespace rp {
namespace {

TEST(Cluster, ExceptionsInDeviceAndCommTasksFailTheRunInsteadOfTerminating) {
  VirtualClock clock;
  {
    auto cluster = Cluster::Create({.num_devices = 3, .clock = &clock}).value();
    const absl::Status s = cluster->Run([&](Device& dev) -> absl::Status {
      if (dev.rank() == 1) throw std::runtime_error("kernel blew up");
      return absl::OkStatus();
    });
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
    EXPECT_NE(s.message().find("rank 1 compute stream: exception: kernel blew up"),
              std::string::npos) << s;
  }
  {
    auto cluster = Cluster::Create({.num_devices = 2, .clock = &clock}).value();
    const absl::Status s = cluster->Run([&](Device& dev) -> absl::Status {
      CommTicket t = dev.PostComm([&]() -> absl::Status {
        if (dev.rank() == 0) throw std::logic_error("collective bug");
        return absl::OkStatus();
      });
      return dev.AwaitComm(t, {.rank = dev.rank(), .op = "allreduce"});
    });
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
    EXPECT_NE(s.message().find("rank 0 comm stream: exception: collective bug"), std::string::npos)
        << s;
  }
}

}  // namespace
}  // namespace rp
