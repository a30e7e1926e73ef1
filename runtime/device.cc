#include "runtime/device.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/post.hpp"
#include "runtime/real_clock.h"
#include "runtime/status_macros.h"

namespace rp {

namespace {
// Runs `fn` and turns an escaping exception into an InternalError naming the rank and stream, so a
// throwing kernel or task fails the run (and releases the other devices) instead of terminating
// the process.
template <typename Fn>
absl::Status CatchAll(int rank, const char* stream, Fn&& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("rank ", rank, " ", stream, " stream: exception: ", e.what()));
  } catch (...) {
    return absl::InternalError(absl::StrCat("rank ", rank, " ", stream, " stream: unknown exception"));
  }
}
}  // namespace
namespace {

// Which device stream the calling thread runs (set by the Cluster for both threads of a device).
thread_local const Device* tl_device = nullptr;
thread_local int tl_stream = -1;

class ScopedStream {
 public:
  ScopedStream(const Device* d, Stream s) {
    tl_device = d;
    tl_stream = static_cast<int>(s);
  }
  ~ScopedStream() {
    tl_device = nullptr;
    tl_stream = -1;
  }
};

const char* FaultDetail(bool straggler, bool jitter) {
  if (straggler && jitter) return "straggler+jitter";
  if (straggler) return "straggler";
  if (jitter) return "jitter";
  return "";
}

}  // namespace

Device::Device(int rank, int node, Clock* clock, Tracer* tracer, Watchdog* watchdog,
               const FaultInjector* faults)
    : rank_(rank),
      node_(node),
      clock_(clock),
      tracer_(tracer),
      watchdog_(watchdog),
      faults_(faults),
      memory_(rank) {}

Device::~Device() { StopCommStream(); }

int Device::CurrentStream() const { return tl_device == this ? tl_stream : -1; }

void Device::Trace(const OpInfo& op, int64_t wall_start_ns, int64_t wall_end_ns,
                   Nanos model_start, Nanos model_end, uint64_t flow_id,
                   const char* detail) const {
  if (tracer_ == nullptr) return;
  const int stream = CurrentStream();
  if (stream < 0) return;
  RecordOn(static_cast<Stream>(stream), op, wall_start_ns, wall_end_ns, model_start, model_end,
           flow_id, detail);
}

void Device::TraceComm(const OpInfo& op, int64_t wall_start_ns, int64_t wall_end_ns,
                       Nanos model_start, Nanos model_end) const {
  if (tracer_ == nullptr || comm_thread_.joinable()) return;
  if (CurrentStream() != static_cast<int>(Stream::kCompute)) return;
  RecordOn(Stream::kComm, op, wall_start_ns, wall_end_ns, model_start, model_end, 0, "");
}

void Device::RecordOn(Stream stream, const OpInfo& op, int64_t wall_start_ns,
                      int64_t wall_end_ns, Nanos model_start, Nanos model_end, uint64_t flow_id,
                      const char* detail) const {
  TraceEvent e;
  e.wall_start_ns = wall_start_ns;
  e.wall_end_ns = wall_end_ns;
  e.model_start_ns = model_start.count();
  e.model_end_ns = model_end.count();
  e.bytes = op.bytes;
  e.flow_id = flow_id;
  e.name = op.name;
  e.detail = detail;
  e.rank = rank_;
  e.peer = op.peer;
  e.micro_batch = op.micro_batch;
  e.step = op.step;
  e.kind = op.kind;
  e.stream = stream;
  tracer_->Record(e);
}

void Device::RecordFaultsAtStart() {
  if (faults_recorded_) return;
  faults_recorded_ = true;
  const Nanos t = cursor_;
  const int64_t w = WallNow();
  if (faults_->StragglerFactor(rank_) != 1.0) {
    Trace({.name = "fault: straggler", .kind = OpKind::kFault}, w, w, t, t);
  }
  for (const DegradedLink& d : faults_->plan().degraded_links) {
    if (d.src == rank_) {
      Trace({.name = "fault: degraded link", .kind = OpKind::kFault, .peer = d.dst}, w, w, t, t);
    }
  }
}

absl::Status Device::WaitUntil(Nanos deadline, const WaitSite& site) {
  if (watchdog_->failed()) return watchdog_->Cancelled(site);
  // Virtual time travels with the data (DESIGN.md "The time engine"): nothing to wait for.
  if (clock_->is_virtual()) return absl::OkStatus();
  if (const auto* real = dynamic_cast<const RealClock*>(clock_)) {
    const auto wall_left = real->WallOf(deadline) - std::chrono::steady_clock::now();
    if (wall_left > watchdog_->timeout()) return watchdog_->Expired(site);
  }
  const Nanos late = clock_->WaitUntil(deadline);
  const int stream = CurrentStream();
  if (stream >= 0) stats_.lateness[stream].Record(late);
  if (watchdog_->failed()) return watchdog_->Cancelled(site);
  return absl::OkStatus();
}

absl::StatusOr<Device::ComputeOp> Device::BeginCompute(const OpInfo& op, Nanos duration,
                                                      Nanos ready_at) {
  const WaitSite site{.rank = rank_, .op = op.name, .peer = op.peer, .step = op.step,
                      .micro_batch = op.micro_batch};
  if (watchdog_->failed()) return watchdog_->Cancelled(site);
  if (duration < Nanos(0)) {
    return absl::InvalidArgumentError(absl::StrCat(DescribeSite(site), ": negative duration ",
                                                   duration.count(), " ns"));
  }
  ComputeOp c;
  c.index = compute_index_++;
  c.start = std::max(cursor_, ready_at);
  if (faults_->StopsAt(rank_, c.index)) {
    const int64_t w = WallNow();
    Trace({.name = "fault: device stop", .kind = OpKind::kFault, .micro_batch = op.micro_batch,
           .step = op.step},
          w, w, c.start, c.start);
    // A dead GPU: it makes no progress. Its peers' waits stall and the watchdog reports them; if
    // nobody waits on it, it fails the run itself after twice the watchdog timeout, so there is
    // never a silent hang.
    watchdog_->WaitForFailure(2 * watchdog_->timeout());
    absl::Status s = absl::AbortedError(absl::StrCat(
        "rank ", rank_, " stopped by fault at compute op ", c.index, " ('", op.name, "'",
        op.step >= 0 ? absl::StrCat(", step ", op.step) : "", ")"));
    watchdog_->Fail(s);
    return s;
  }
  c.factor = faults_->ComputeFactor(rank_, c.index);
  c.duration = faults_->ComputeDuration(rank_, c.index, duration);
  c.wall_start = WallNow();
  c.clock_start = clock_->is_virtual() ? Nanos(0) : clock_->Now();
  return c;
}

absl::Status Device::EndCompute(const OpInfo& op, const ComputeOp& c, Nanos end,
                                Nanos kernel_time) {
  const WaitSite site{.rank = rank_, .op = op.name, .peer = op.peer, .step = op.step,
                      .micro_batch = op.micro_batch};
  // An overrun is real work that took longer than its modeled duration. Starting late because an
  // earlier wait woke late is lateness, not an overrun.
  if (!clock_->is_virtual() && kernel_time > c.duration) {
    ++stats_.overruns;
    stats_.overrun_time += kernel_time - c.duration;
  }
  if (!clock_->is_virtual()) {
    if (clock_->Now() < end) {
      RP_RETURN_IF_ERROR(WaitUntil(end, site));
    } else {
      ++stats_.late_ends;  // its modeled end had passed: an overrun or a late start, never hidden
    }
  }
  ++stats_.compute_ops;
  stats_.compute_time += c.duration;
  cursor_ = std::max(cursor_, end);
  const bool straggler = faults_->StragglerFactor(rank_) != 1.0;
  Trace(op, c.wall_start, WallNow(), c.start, end, 0,
        c.factor == 1.0 ? "" : FaultDetail(straggler, faults_->plan().jitter.max_fraction > 0));
  return absl::OkStatus();
}

absl::StatusOr<Nanos> Device::Compute(const OpInfo& op, Nanos duration, Nanos ready_at,
                                      absl::FunctionRef<absl::Status()> kernel) {
  RP_ASSIGN_OR_RETURN(const ComputeOp c, BeginCompute(op, duration, ready_at));
  RP_RETURN_IF_ERROR(kernel());
  const Nanos end = c.start + c.duration;
  const Nanos kernel_time = clock_->is_virtual() ? Nanos(0) : clock_->Now() - c.clock_start;
  RP_RETURN_IF_ERROR(EndCompute(op, c, end, kernel_time));
  return end;
}

absl::Status Device::StartCommStream(SchedPolicy policy) {
  io_ = std::make_unique<boost::asio::io_context>(1);
  absl::StatusOr<Thread> t = Thread::Start(kDeviceStackBytes, [this] {
    ScopedStream scope(this, Stream::kComm);
    auto guard = boost::asio::make_work_guard(*io_);
    // The guard keeps run() alive until StopCommStream() calls stop() after the last task.
    io_->run();
  }, policy);
  if (!t.ok()) return t.status();
  comm_thread_ = *std::move(t);
  return absl::OkStatus();
}

void Device::StopCommStream() {
  if (!comm_thread_.joinable()) return;
  // Let queued tasks drain (each is skipped if the run failed), then stop.
  boost::asio::post(*io_, [this] { io_->stop(); });
  comm_thread_.Join();
  io_.reset();
}

CommTicket Device::PostComm(std::function<absl::Status()> task) {
  CommTicket ticket;
  ticket.state_ = std::make_shared<CommTicket::State>();
  auto complete = [state = ticket.state_](absl::Status s) {
    MutexLock lock(&state->mu);
    state->done = true;
    state->status = std::move(s);
    state->cv.SignalAll();
  };
  if (!io_) {
    complete(absl::FailedPreconditionError(
        absl::StrCat("rank ", rank_, ": PostComm without a running comm stream")));
    return ticket;
  }
  boost::asio::post(*io_, [this, task = std::move(task), complete]() mutable {
    if (watchdog_->failed()) {
      complete(watchdog_->Cancelled({.rank = rank_, .op = "comm task"}));
      return;
    }
    absl::Status s = CatchAll(rank_, "comm", [&] { return task(); });
    if (!s.ok()) watchdog_->Fail(s);
    complete(std::move(s));
  });
  return ticket;
}

absl::Status Device::AwaitComm(const CommTicket& ticket, const WaitSite& site) {
  if (!ticket.valid()) {
    return absl::InvalidArgumentError(absl::StrCat(DescribeSite(site), ": invalid CommTicket"));
  }
  CommTicket::State& st = *ticket.state_;
  ScopedExternalWait external(clock_);
  MutexLock lock(&st.mu);
  RP_RETURN_IF_ERROR(watchdog_->Wait(&st.mu, &st.cv, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return st.done;
  }, site));
  return st.status;
}

// --- Cluster --------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Cluster>> Cluster::Create(const ClusterOptions& options) {
  if (options.num_devices < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("ClusterOptions.num_devices must be >= 1, got ", options.num_devices));
  }
  if (options.devices_per_node < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ClusterOptions.devices_per_node must be >= 1, got ", options.devices_per_node));
  }
  if (options.clock == nullptr) {
    return absl::InvalidArgumentError("ClusterOptions.clock must be set");
  }
  if (options.tracer != nullptr && options.tracer->num_devices() < options.num_devices) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ClusterOptions.tracer has ", options.tracer->num_devices(), " devices, need ",
        options.num_devices));
  }
  if (options.watchdog_timeout <= std::chrono::nanoseconds(0)) {
    return absl::InvalidArgumentError("ClusterOptions.watchdog_timeout must be > 0");
  }
  RP_ASSIGN_OR_RETURN(FaultInjector faults,
                      FaultInjector::Create(options.faults, options.num_devices));
  return std::unique_ptr<Cluster>(new Cluster(options, std::move(faults)));
}

Cluster::Cluster(const ClusterOptions& options, FaultInjector faults)
    : options_(options), faults_(std::move(faults)) {
  Clock* clock = options_.clock;
  watchdog_ = std::make_unique<Watchdog>(options_.watchdog_timeout,
                                         [clock] { clock->Shutdown(); });
  devices_.reserve(static_cast<size_t>(options_.num_devices));
  for (int r = 0; r < options_.num_devices; ++r) {
    devices_.push_back(std::unique_ptr<Device>(new Device(r, r / options_.devices_per_node,
                                                          clock, options_.tracer,
                                                          watchdog_.get(), &faults_)));
  }
}

Cluster::~Cluster() = default;


absl::Status Cluster::Run(absl::FunctionRef<absl::Status(Device&)> body) {
  if (watchdog_->failed()) {
    return absl::FailedPreconditionError(
        absl::StrCat("Cluster::Run after a failed run: ", watchdog_->status().message()));
  }
  const size_t n = devices_.size();
  // Thousands of threads sleeping on futexes of their own: a private futex hash of their size
  // (a performance setting only; a kernel without one keeps the global table).
  (void)ReserveFutexHash(static_cast<int>(n * (options_.comm_streams ? 2 : 1)));
  // A thread that cannot start fails the run; those started see the failure and end.
  auto failed_to_start = [this](const absl::Status& s, size_t rank, const char* stream) {
    watchdog_->Fail(absl::Status(s.code(), absl::StrCat("device ", rank, " ", stream,
                                                        " stream: ", s.message())));
  };
  if (options_.comm_streams) {
    for (size_t r = 0; r < n; ++r) {
      absl::Status s = devices_[r]->StartCommStream(options_.thread_policy);
      if (!s.ok()) {
        failed_to_start(s, r, "comm");
        break;
      }
    }
  }
  // The compute threads' stacks in one mapping, unmapped once they are all joined (StackRegion);
  // where it cannot be mapped, and under sanitizers (whose pthread_create may resize a stack it is
  // given), each thread gets a stack of glibc's (a performance setting only).
  absl::StatusOr<StackRegion> stacks =
      kSanitizerBuild ? absl::UnimplementedError("sanitizer build: glibc's stacks")
                      : StackRegion::Map(n, kDeviceStackBytes);
  std::vector<Thread> threads;
  threads.reserve(n);
  for (size_t r = 0; r < n && !watchdog_->failed(); ++r) {
    Device* dev = devices_[r].get();
    auto fn = [this, dev, &body] {
      ScopedStream scope(dev, Stream::kCompute);
      if (dev->rank() == 0) thread_policy_name_ = CurrentSchedPolicyName();
      dev->RecordFaultsAtStart();
      absl::Status s = CatchAll(dev->rank(), "compute", [&] { return body(*dev); });
      if (!s.ok()) watchdog_->Fail(s);
    };
    absl::StatusOr<Thread> t = stacks.ok()
        ? Thread::StartOn(stacks->stack(r), std::move(fn), options_.thread_policy)
        : Thread::Start(kDeviceStackBytes, std::move(fn), options_.thread_policy);
    if (!t.ok()) {
      failed_to_start(t.status(), r, "compute");
      break;
    }
    threads.push_back(*std::move(t));
  }
  for (Thread& t : threads) t.Join();
  for (auto& d : devices_) d->StopCommStream();
  return watchdog_->status();
}

LatenessStats Cluster::MergedLateness() const {
  LatenessStats all;
  for (const auto& d : devices_) {
    for (const LatenessStats& s : d->stats().lateness) all.Merge(s);
  }
  return all;
}

}  // namespace rp
