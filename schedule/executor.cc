// Executor: Create (validation, plan, fabric, runners) and Run (communicators, devices, the stall
// monitor). See executor.h; the rest in step_book.cc, run_result.cc, run_failure.cc (executor_impl.h).
#include "schedule/executor.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/status_macros.h"
#include "runtime/thread.h"
#include "schedule/executor_impl.h"
#include "schedule/validator.h"

namespace rp::schedule {
namespace {

absl::Status Invalid(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("executor: ", field, ": ", why));
}

}  // namespace

TimelineFigures FiguresOf(const DeviceMetrics& m) {
  return {.busy_ms = ToMillis(m.busy), .bubble_total = m.bubble_total,
          .bubble_ideal = m.bubble_ideal, .comm_ms = ToMillis(m.comm),
          .exposed_comm_ms = ToMillis(m.exposed_comm), .peer_wait_ms = ToMillis(m.peer_wait),
          .overlap = m.overlap, .ep_exposed_comm_ms = ToMillis(m.ep_exposed_comm),
          .ep_peer_wait_ms = ToMillis(m.ep_peer_wait), .host_late_ms = ToMillis(m.host_late)};
}

std::vector<double> StragglerFactors(const FaultPlan& faults, int world) {
  if (faults.stragglers.empty()) return {};
  std::vector<double> f(static_cast<size_t>(world), 1.0);
  for (const Straggler& s : faults.stragglers) {
    if (s.rank >= 0 && s.rank < world) f[static_cast<size_t>(s.rank)] *= s.factor;
  }
  return f;
}

PlanOptions PlanOptionsFor(const ExecutorOptions& o) {
  return PlanOptions{.grid = o.grid,
                     .placement = o.placement,
                     .program = o.program,
                     .model = o.model,
                     .layers_per_stage = o.layers_per_stage,
                     .cost = o.cost,
                     .links = o.links,
                     .codec = o.codec,
                     .segment_bytes = o.segment_bytes,
                     .reduce_gbps = o.reduce_gbps,
                     .bucket_bytes = o.bucket_bytes,
                     .overlap_grad_allreduce = o.overlap_grad_allreduce,
                     .faults = o.faults,
                     .ep = o.ep,
                     .ep_row_bytes = o.ep_row_bytes,
                     .ep_codec = o.ep_codec,
                     .microbatch_size = o.microbatch_size};
}

PredictOptions PredictOptionsFor(const ExecutorOptions& o) {
  PredictOptions p;
  p.compute_factor = StragglerFactors(o.faults, o.grid.dp * o.grid.pp * o.grid.tp);
  return p;
}

// The fault plan against the grid and the program (ranks, steps, op indices).
absl::Status Executor::Impl::CheckFaults(int world) {
  if (absl::StatusOr<FaultInjector> f = FaultInjector::Create(o.faults, world); !f.ok()) {
    return Invalid("faults", std::string(f.status().message()));
  } else {
    injector = *std::move(f);
  }
  for (const OpFault& f : o.faults.op_faults) {
    if (f.step >= o.steps) {
      return Invalid("faults", absl::StrCat("op fault ", OpFaultKindName(f.kind), " rank ", f.rank,
                                            ": step ", f.step, " >= steps ", o.steps));
    }
    const size_t n = o.program.ranks[static_cast<size_t>(plan->grid.CoordOf(f.rank).pp)].size();
    if (f.kind != OpFaultKind::kSlowLink && static_cast<size_t>(f.op) >= n) {
      return Invalid("faults", absl::StrCat("op fault ", OpFaultKindName(f.kind), " rank ", f.rank,
                                            ": op ", f.op, " out of range (its op list has ", n,
                                            " ops)"));
    }
  }
  return absl::OkStatus();
}

// The fabric of the plan's links and faults; with a tracer, a track per port.
absl::Status Executor::Impl::MakeFabric(int world) {
  FabricOptions fo{.links = plan->options.links,
                   .num_devices = world,
                   .faults = plan->link_faults,
                   .tie_rank = plan->tie_rank,
                   // The gradient rings' data is read on the data lane's thread (MakeCommunicators).
                   .prefetch_payload = !(o.virtual_time && o.data_lane),
                   .on_handler_failure = std::bind_front(&Impl::NoteHandlerFailure, this)};
  link_fault_seen.assign(plan->link_faults.size(), -1);
  if (Tracer* tracer = o.tracer; tracer != nullptr || !plan->link_faults.empty()) {
    // Port occupancy tracks: each committed message on its egress and ingress ports. And which link
    // faults a message crossed (a slow link that carries nothing slowed nothing: not reported).
    fo.on_commit = [this, tracer](const FabricMessage& m, const MessageTiming& t) {
      for (size_t i = 0; i < plan->link_faults.size(); ++i) {
        const LinkFault& f = plan->link_faults[i];
        if (link_fault_seen[i] < 0 && m.src == f.src && m.dst == f.dst && m.step >= f.from_step) {
          link_fault_seen[i] = m.step;
        }
      }
      if (tracer == nullptr) return;
      for (int port : {t.egress_port, t.ingress_port}) {
        if (port < 0) continue;
        tracer->RecordPort({.port = port, .src = m.src, .dst = m.dst, .bytes = m.bytes,
                            .ready_ns = t.ready.count(), .start_ns = t.start.count(),
                            .end_ns = t.last_byte.count()});
      }
    };
  }
  RP_ASSIGN_OR_RETURN(fabric, Fabric::Create(fo));
  if (o.tracer != nullptr) {
    std::vector<std::string> ports;
    for (int p = 0; p < fabric->model().num_ports(); ++p) ports.push_back(fabric->model().PortName(p));
    o.tracer->SetPorts(std::move(ports));
  }
  return absl::OkStatus();
}

absl::Status Executor::Impl::Build() {
  if (o.microbatch_size < 1) return Invalid("microbatch_size", "must be >= 1");
  if (o.steps < 1) return Invalid("steps", "must be >= 1");
  if (o.eval_every < 0) return Invalid("eval_every", "must be >= 0");
  if (o.eval_samples < 0) return Invalid("eval_samples", "must be >= 0");
  if (o.eval_threads < 0 || o.eval_threads > 64) {
    return Invalid("eval_threads", "must be in [0, 64]");
  }
  if (!o.virtual_time && !(o.time_scale >= kMinRealTimeScale && std::isfinite(o.time_scale))) {
    // Below it modeled time (wall ÷ scale) overflows within days (runtime/real_clock.h).
    return Invalid("time_scale", absl::StrCat("must be finite and >= ", kMinRealTimeScale));
  }
  if (o.watchdog_timeout <= Nanos(0)) return Invalid("watchdog_timeout", "must be > 0");
  {
    absl::StatusOr<ExecutionPlan> p = BuildPlan(PlanOptionsFor(o));
    if (!p.ok()) return Invalid("plan", std::string(p.status().message()));
    plan.emplace(*std::move(p));
  }
  const int world = plan->grid.world_size();
  layout = BatchLayout{.dp = o.grid.dp, .microbatches = o.program.num_micro_batches,
                       .microbatch_size = o.microbatch_size};
  if (o.global_batch != 0 && o.global_batch != layout.global_batch()) {
    return Invalid("global_batch", absl::StrCat(o.global_batch, " != dp x microbatches x "
                                                "microbatch_size = ", layout.global_batch()));
  }
  if (o.tracer != nullptr && o.tracer->num_devices() < world) {
    return Invalid("tracer", absl::StrCat("has ", o.tracer->num_devices(),
                                          " devices, the grid ", world));
  }
  if (absl::Status s = ValidateOptimizerConfig(o.optimizer); !s.ok()) {
    return Invalid("optimizer", std::string(s.message()));
  }
  if (o.dataset.input_dim != o.model.input_dim || o.dataset.classes != o.model.classes) {
    return Invalid("dataset", absl::StrCat("input_dim/classes (", o.dataset.input_dim, "/",
                                           o.dataset.classes, ") differ from the model's (",
                                           o.model.input_dim, "/", o.model.classes, ")"));
  }
  RP_RETURN_IF_ERROR(CheckFaults(world));
  {
    absl::StatusOr<Dataset> ds = Dataset::Create(o.dataset);
    if (!ds.ok()) return Invalid("dataset", std::string(ds.status().message()));
    data.emplace(std::move(*ds));
  }
  RP_RETURN_IF_ERROR(MakeFabric(world));
  ctx.options = &o;
  ctx.plan = &*plan;
  ctx.data = &*data;
  ctx.layout = layout;
  ctx.fabric = fabric.get();
  ctx.injector = &injector;
  ctx.barrier = fabric->AddRendezvous(world);
  // The model shards and optimizers of the devices are independent: built on up to 4 threads
  // (thousands of devices spend most of their setup here, first-touching their buffers). Gates
  // are then registered in rank order, so their ids do not depend on the split.
  std::vector<absl::StatusOr<std::unique_ptr<DeviceRunner>>> built(static_cast<size_t>(world));
  constexpr int64_t kMinRanksPerSlice = 64;
  ForSlices(world, /*threads=*/0, kMinRanksPerSlice, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      built[static_cast<size_t>(r)] = DeviceRunner::Create(&ctx, static_cast<int>(r));
    }
  });
  runners.reserve(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    absl::StatusOr<std::unique_ptr<DeviceRunner>>& runner = built[static_cast<size_t>(r)];
    if (!runner.ok()) return runner.status();  // the lowest failing rank's, whatever the split
    runners.push_back(*std::move(runner));
    runners.back()->AddGates();
    // A comm stream has no work yet. On a virtual clock it is event-driven (MakeCommunicators).
    if (!o.virtual_time) fabric->StartParked(ExecutionPlan::CommLp(r));
  }
  return absl::OkStatus();
}

absl::Status Executor::Impl::MakeCommunicators() {
  const ParallelGrid& g = plan->grid;
  const GridShape s = g.shape();
  auto make = [&](std::vector<int> ranks, bool comm_stream, Clock* clock)
      -> absl::StatusOr<std::unique_ptr<comm::Communicator>> {
    comm::CommunicatorOptions co;
    co.fabric = fabric.get();
    co.clock = clock;
    for (int r : ranks) {
      co.devices.push_back(g.DeviceOf(r));
      co.lps.push_back(comm_stream ? ExecutionPlan::CommLp(r) : ExecutionPlan::ComputeLp(r));
    }
    return comm::Communicator::Create(co);
  };
  Clock* ring_clock = o.virtual_time ? nullptr : ctx.clock;
  for (int dp = 0; dp < s.dp; ++dp) {
    for (int tp = 0; tp < s.tp; ++tp) {
      const std::vector<int> pipe = g.PpGroup(g.RankOf({dp, 0, tp}));
      RP_ASSIGN_OR_RETURN(auto a, make(pipe, false, nullptr));
      RP_ASSIGN_OR_RETURN(auto b, make(pipe, false, nullptr));
      ctx.pipes_act.push_back(std::move(a));
      ctx.pipes_grad.push_back(std::move(b));
    }
  }
  for (int dp = 0; dp < s.dp; ++dp) {
    for (int pp = 0; pp < s.pp; ++pp) {
      const std::vector<int> group = g.TpGroup(g.RankOf({dp, pp, 0}));
      RP_ASSIGN_OR_RETURN(auto c, make(group, false, ring_clock));
      if (o.virtual_time && s.tp > 1) {
        ctx.tp_streams.resize(static_cast<size_t>(g.world_size()));
        for (int i = 0; i < s.tp; ++i) {
          ctx.tp_streams[static_cast<size_t>(group[static_cast<size_t>(i)])] =
              std::make_unique<comm::EventCommStream>(
                  fabric.get(), ExecutionPlan::ComputeLp(group[static_cast<size_t>(i)]),
                  /*lp_is_event_driven=*/false,
                  std::vector<ChannelId>{c->RingChannel((i + s.tp - 1) % s.tp)});
        }
      }
      ctx.tps.push_back(std::move(c));
    }
  }
  if (o.virtual_time) {
    if (o.data_lane) ctx.lane = std::make_unique<comm::DataLane>();
    for (int r = 0; r < g.world_size(); ++r) {
      ctx.comm_streams.push_back(std::make_unique<comm::EventCommStream>(
          fabric.get(), ExecutionPlan::CommLp(r), /*lp_is_event_driven=*/true,
          std::vector<ChannelId>{}, ctx.lane.get()));
    }
  }
  ctx.grads.resize(static_cast<size_t>(plan->num_bucket_groups()));
  for (int r = 0; r < g.world_size(); ++r) {
    for (int ch = 0; ch < plan->v; ++ch) {
      for (const BucketPlan& b : plan->Chunk(g.CoordOf(r).pp, ch).buckets) {
        auto& slot = ctx.grads[static_cast<size_t>(plan->BucketGroupId(r, ch, b))];
        if (slot == nullptr) {
          RP_ASSIGN_OR_RETURN(slot, make(plan->BucketGroup(r, ch, b, nullptr), true, ring_clock));
        }
      }
    }
  }
  if (plan->has_ep_exchanges()) {
    ctx.eps.resize(static_cast<size_t>(plan->num_ep_groups()));
    for (int r = 0; r < g.world_size(); ++r) {
      auto& slot = ctx.eps[static_cast<size_t>(plan->EpGroupId(r))];
      if (slot == nullptr) {
        RP_ASSIGN_OR_RETURN(slot, make(plan->EpGroup(r, nullptr), false, ring_clock));
      }
    }
    if (o.virtual_time) {
      ctx.ep_streams.resize(static_cast<size_t>(g.world_size()));
      for (int r = 0; r < g.world_size(); ++r) {
        int index = 0;
        (void)plan->EpGroup(r, &index);
        ctx.ep_streams[static_cast<size_t>(r)] =
            std::make_unique<comm::EventAllToAll>(&ctx.Ep(r).rank(index));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Executor::Impl::SizeFirstStepWarmUp(int world) {
  // What a device touches first in step 0: its real activations (its peak of the real model's
  // stored activations over its program), the optimizer's commit backup of weights
  // and state (at most 3 × the weights: Adam), and message payloads, pipeline buffers and
  // records (the 4th weights' worth, with 16 KiB).
  ctx.warm_heap_bytes.resize(static_cast<size_t>(world));
  std::vector<uint64_t> peak_activations;  // by pp rank
  if (!o.warm_stage_stored.empty()) {
    RP_ASSIGN_OR_RETURN(ValidationReport v, Validate(o.program, {.stage_stored = o.warm_stage_stored}));
    peak_activations = std::move(v.peak_stored_bytes);
  }
  for (int r = 0; r < world; ++r) {
    size_t weights = 0;
    for (const auto& st : runners[static_cast<size_t>(r)]->stages()) {
      weights += std::as_const(*st).params().size_bytes();
    }
    const size_t pp = static_cast<size_t>(plan->grid.CoordOf(r).pp);
    const size_t activations = pp < peak_activations.size() ? peak_activations[pp] : 0;
    ctx.warm_heap_bytes[static_cast<size_t>(r)] = activations + 4 * weights + (size_t{16} << 10);
  }
  return absl::OkStatus();
}

absl::Status Executor::Impl::RunDevice(Device& dev) {
  DeviceRunner& r = *runners[static_cast<size_t>(dev.rank())];
  absl::Status s;
  try {
    s = r.Body(dev, [this](Nanos max_end) { return OnStepBoundary(max_end); });
  } catch (const std::exception& e) {
    s = absl::InternalError(absl::StrCat("rank ", r.rank(), " step ", r.cur_step(),
                                         ": exception in the device thread: ", e.what()));
  } catch (...) {
    s = absl::InternalError(absl::StrCat("rank ", r.rank(), " step ", r.cur_step(),
                                         ": unknown exception in the device thread"));
  }
  if (!s.ok()) {
    const auto& ops = o.program.ranks[static_cast<size_t>(r.coord().pp)];
    ctx.NoteError({.rank = r.rank(), .step = r.cur_step(), .op = r.cur_op(),
                   .op_name = r.cur_op() >= 0 && static_cast<size_t>(r.cur_op()) < ops.size()
                                  ? ToString(ops[static_cast<size_t>(r.cur_op())], plan->v)
                                  : "step barrier",
                   .waiting = r.waiting(), .status = s});
    // Noted first: its record precedes those of the waits its abort releases (which may carry
    // its very status), so the report's root is found among equal records as before.
    AwaitFailureTurn(r.rank(), dev.cursor(), s);
  }
  ctx.devices_done.fetch_add(1, std::memory_order_relaxed);
  return s;
}

absl::Status Executor::Impl::FailedRun(const absl::Status& run, const Prediction& pred,
                                       const PredictOptions& popts) {
  const absl::Status failed = Fail(run);
  failure->prediction = pred;
  if (o.tracer != nullptr) {
    // The trace says that the run failed, and where: an instant event on the first failing rank
    // (every device thread has been joined: nobody else records), modeled at its step's start.
    const int64_t now = o.tracer->WallNow();
    o.tracer->Record({.wall_start_ns = now, .wall_end_ns = now, .model_start_ns = step_start.count(),
                      .model_end_ns = step_start.count(), .name = "run failed",
                      .detail = "its failure: the report's 'failure', run's last line",
                      .rank = std::max(0, failure->rank), .step = failure->step,
                      .kind = rp::OpKind::kFault});
  }
  // Each failed step's prediction: per step where the step's inputs are known without the run
  // (jitter, link faults); an EP step's routing may be incomplete, so it gets the plan's.
  std::vector<Nanos> step_time;
  if (!plan->has_ep_exchanges()) {
    absl::StatusOr<StepPredictions> each = PredictEachStep(popts, /*keep=*/std::nullopt);
    if (each.ok()) step_time = std::move(each->step_time);
  }
  for (StepRecord& r : failure->steps) {
    r.predicted_ms = ToMillis(step_time.empty() ? pred.step_time : step_time[static_cast<size_t>(r.step)]);
  }
  return failed;
}

absl::StatusOr<RunResult> Executor::Impl::Run() {
  if (ran) return absl::FailedPreconditionError("executor: Run() may be called once");
  ran = true;
  // The prediction of the same plan (per step, after the run, when jitter draws, slow links or
  // the routing of EP exchanges differ per step).
  const PredictOptions popts = PredictOptionsFor(o);
  RP_ASSIGN_OR_RETURN(Prediction pred, Predict(*plan, popts));
  const int world = plan->grid.world_size();
  if (o.virtual_time) {
    virtual_clock_ = std::make_unique<VirtualClock>();
    ctx.clock = virtual_clock_.get();
  } else {
    RP_ASSIGN_OR_RETURN(real_clock_, RealClock::Create({.time_scale = o.time_scale}));
    ctx.clock = real_clock_.get();
    ctx.real_clock = real_clock_.get();
  }
  RP_RETURN_IF_ERROR(MakeCommunicators());
  if (o.warm_first_step) RP_RETURN_IF_ERROR(SizeFirstStepWarmUp(world));
  RP_ASSIGN_OR_RETURN(auto cluster,
                      Cluster::Create({.num_devices = world,
                                       .devices_per_node = o.placement.devices_per_node,
                                       .clock = ctx.clock,
                                       .tracer = o.tracer,
                                       .faults = o.faults,
                                       .watchdog_timeout = o.watchdog_timeout,
                                       .comm_streams = !o.virtual_time &&
                                                       (o.grid.dp > 1 ||
                                                        o.program.num_directions() > 1),
                                       .thread_policy = o.virtual_time ? SchedPolicy::kBatch
                                                                       : SchedPolicy::kInherit}));
  if (o.virtual_time) OrderFailures(cluster->watchdog());
  std::atomic<bool> done{false};
  std::thread monitor([&] { Monitor(*cluster, done); });
  // The single-device reference needs nothing from the run: on the virtual clock it trains on a
  // thread of its own meanwhile (the device threads leave a core partly idle while they wait on
  // each other); on a real clock it would steal the host time the run's deadlines need, so it
  // trains after the run.
  absl::StatusOr<std::vector<double>> reference = std::vector<double>{};
  std::atomic<bool> cancel_reference{false};
  std::thread reference_thread;
  if (o.run_reference && o.virtual_time) {
    reference_thread = std::thread([&] { reference = ReferenceLosses(cancel_reference); });
  }
  const auto join_reference = [&](bool cancel) {
    if (!reference_thread.joinable()) return;
    cancel_reference.store(cancel, std::memory_order_relaxed);
    reference_thread.join();
  };
  if (real_clock_) real_clock_->ResetEpoch();
  const auto w0 = std::chrono::steady_clock::now();
  absl::Status run = cluster->Run([this](Device& dev) { return RunDevice(dev); });
  const double wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  done.store(true, std::memory_order_release);
  cluster->watchdog().Notify();  // the monitor stops now, not at its next period
  monitor.join();
  // After the monitor (it reads the lane's progress), before the buffers its items name (a failed
  // run may leave some).
  ctx.lane.reset();
  // A held-out evaluation still running: the run failed before the boundary that would join it
  // (the last step's evaluation is at its boundary). Its error does not replace the run's.
  const absl::Status evaluation = JoinEvaluation();
  if (run.ok() && !evaluation.ok()) run = evaluation;
  if (!run.ok()) {
    join_reference(/*cancel=*/true);
    return FailedRun(run, pred, popts);
  }
  absl::StatusOr<StepPredictions> step_pred = PredictEachStep(popts, MedianStep());
  join_reference(/*cancel=*/!step_pred.ok());
  if (!step_pred.ok()) return step_pred.status();
  if (o.run_reference && !o.virtual_time) reference = ReferenceLosses(cancel_reference);
  return Assemble(*cluster, pred, *std::move(step_pred), wall_seconds, reference);
}

// --- Executor ---

Executor::Executor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Executor::~Executor() = default;

absl::StatusOr<std::unique_ptr<Executor>> Executor::Create(const ExecutorOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->o = options;
  RP_RETURN_IF_ERROR(impl->Build());
  return std::unique_ptr<Executor>(new Executor(std::move(impl)));
}

absl::StatusOr<RunResult> Executor::Run() { return impl_->Run(); }
const ExecutorOptions& Executor::options() const { return impl_->o; }
const ParallelGrid& Executor::grid() const { return impl_->plan->grid; }
int Executor::committed_steps() const { return impl_->committed; }
const RunFailure* Executor::failure() const {
  return impl_->failure.has_value() ? &*impl_->failure : nullptr;
}
absl::StatusOr<std::vector<float>> Executor::Parameters(int rank, int chunk) const {
  if (rank < 0 || rank >= static_cast<int>(impl_->runners.size())) {
    return absl::OutOfRangeError(absl::StrCat("executor: Parameters: rank ", rank,
                                              " out of range [0, ", impl_->runners.size(), ")"));
  }
  const auto& stages = impl_->runners[static_cast<size_t>(rank)]->stages();
  if (chunk < 0 || static_cast<size_t>(chunk) >= stages.size()) {
    return absl::OutOfRangeError(absl::StrCat("executor: Parameters: chunk ", chunk,
                                              " out of range [0, ", stages.size(), ")"));
  }
  const std::span<const float> w = std::as_const(*stages[static_cast<size_t>(chunk)]).params();
  return std::vector<float>(w.begin(), w.end());
}

}  // namespace rp::schedule
