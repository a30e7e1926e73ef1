// Executor implementation. Words: "rank" is the global rank of the grid; the Cluster's device index
// equals the global rank (so errors and faults name global ranks), and link classes come from the
// grid's placement (device ids). Modeled times are absolute (ns since the run's epoch); a step's
// intervals are shifted to its start for the metrics.
#include "schedule/executor.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <cmath>
#include <exception>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/device.h"
#include "runtime/model/kernels.h"
#include "runtime/real_clock.h"
#include "runtime/model/reference_trainer.h"
#include "runtime/status_macros.h"
#include "runtime/virtual_clock.h"
#include "schedule/validator.h"

namespace rp::schedule {

Codec CostCodec(comm::Codec codec) {
  switch (codec) {
    case comm::Codec::kFp32: return Codec::kFp32;
    case comm::Codec::kFp16: return Codec::kFp16;
    case comm::Codec::kBf16: return Codec::kBf16;
    case comm::Codec::kInt8: return Codec::kInt8;
  }
  return Codec::kFp32;
}

PredictOptions PredictOptionsFor(const ExecutorOptions& o) {
  PredictOptions p;
  p.links = o.links;
  p.links.devices_per_node = o.placement.devices_per_node;
  p.dp_ring = RingModel{.segment_bytes = o.model_segment_bytes, .codec = CostCodec(o.codec)};
  p.tp_ring = RingModel{.segment_bytes = o.tp_model_segment_bytes, .codec = Codec::kFp32};
  p.compute_factor = StragglerFactors(o.faults, o.grid.dp * o.grid.pp * o.grid.tp);
  return p;
}

std::vector<double> StragglerFactors(const FaultPlan& faults, int world) {
  if (faults.stragglers.empty()) return {};
  std::vector<double> f(static_cast<size_t>(world), 1.0);
  for (const Straggler& s : faults.stragglers) {
    if (s.rank >= 0 && s.rank < world) f[static_cast<size_t>(s.rank)] *= s.factor;
  }
  return f;
}

namespace {

// p2p link model, as schedule::Predict: a directed link carries one message at a time, so a message
// departs at max(ready, the link's previous arrival) and arrives LinkParams::Duration(the op's
// MODELED bytes) later, on the class of the two devices. The sender sets the modeled bytes for its
// thread right before comm's Send, which calls Transmit on the sender's thread (comm/channel.h).
thread_local uint64_t tl_model_bytes = 0;
// The sender's step, for kSlowLink faults, and whether it sends a gradient (set with the bytes).
thread_local int tl_step = 0;
thread_local bool tl_grad = false;

// A kSlowLink fault in device ids.
struct SlowLinkFault {
  int src = 0, dst = 0, step = 0;
  double factor = 1.0;
};

class PlanLinkModel final : public LinkModel {
 public:
  PlanLinkModel(LinkSpec spec, std::vector<DegradedLink> degraded, std::vector<SlowLinkFault> slow)
      : spec_(spec), degraded_(std::move(degraded)), slow_(std::move(slow)) {}
  Nanos Transmit(int src, int dst, Nanos ready_at, uint64_t) override {
    const Nanos wire = Duration(src, dst, tl_model_bytes, tl_step);
    MutexLock lock(&mu_);
    DirectedLink& link = links_[{src, dst}];
    const Nanos arrival = std::max(ready_at, link.free_at) + wire;
    link.free_at = arrival;
    link.flights[tl_grad ? 1 : 0].push_back(arrival - ready_at);
    return arrival;
  }
  // The flight time (arrival − ready: wire time plus the wait for the link) of the oldest message
  // src → dst of that kind whose flight was not taken yet. Receivers take them in their channel's
  // FIFO order, which is the order the sender transmitted them.
  Nanos TakeFlight(int src, int dst, bool grad) {
    MutexLock lock(&mu_);
    auto it = links_.find({src, dst});
    if (it == links_.end() || it->second.flights[grad ? 1 : 0].empty()) return Nanos(0);
    std::deque<Nanos>& q = it->second.flights[grad ? 1 : 0];
    const Nanos f = q.front();
    q.pop_front();
    return f;
  }
  // The healthy link class's time for `bytes`.
  Nanos ClassDuration(int src, int dst, uint64_t bytes) const {
    return spec_.ParamsOf(src, dst).Duration(bytes);
  }
  // The time factor of src → dst during `step` (degraded links × slow-link faults).
  double Factor(int src, int dst, int step) const {
    double f = 1.0;
    for (const DegradedLink& g : degraded_) {
      if (g.src == src && g.dst == dst) {
        f = g.factor;
        break;
      }
    }
    for (const SlowLinkFault& x : slow_) {
      if (x.src == src && x.dst == dst && x.step <= step) f *= x.factor;
    }
    return f;
  }
  Nanos Duration(int src, int dst, uint64_t bytes, int step) const {
    const Nanos d = ClassDuration(src, dst, bytes);
    const double f = Factor(src, dst, step);
    if (f == 1.0) return d;
    return Nanos(static_cast<int64_t>(static_cast<double>(d.count()) * f));
  }
  bool is_ideal() const override { return false; }

 private:
  struct DirectedLink {
    Nanos free_at{0};                 // arrival of the last message on the link
    std::deque<Nanos> flights[2];     // activations, gradients: flights not yet taken
  };
  const LinkSpec spec_;
  const std::vector<DegradedLink> degraded_;  // device ids
  const std::vector<SlowLinkFault> slow_;     // device ids
  Mutex mu_;
  std::map<std::pair<int, int>, DirectedLink> links_ ABSL_GUARDED_BY(mu_);
};

// A modeled-time rendezvous of a fixed group: round r returns the max of the members' values once
// all have arrived. Members call rounds in the same order. Watchdog-bounded; on failure `missing`
// receives the members (global ranks) that had not arrived in that round.
class Rendezvous {
 public:
  explicit Rendezvous(std::vector<int> members)
      : n_(static_cast<int>(members.size())), members_(std::move(members)) {}
  absl::StatusOr<Nanos> Arrive(Watchdog& wd, int64_t round, Nanos value, const WaitSite& site,
                               int member, std::vector<int>* missing) {
    MutexLock lock(&mu_);
    Entry& e = rounds_[round];
    e.max = std::max(e.max, value);
    if (e.in.empty()) e.in.assign(static_cast<size_t>(n_), false);
    e.in[static_cast<size_t>(member)] = true;
    if (++e.arrived == n_) cv_.SignalAll();
    if (absl::Status s = wd.Wait(&mu_, &cv_, [&] {
          mu_.AssertHeld();  // Watchdog::Wait evaluates the predicate with `mu_` held
          return rounds_[round].arrived == n_;
        }, site);
        !s.ok()) {
      missing->clear();
      const Entry& now = rounds_[round];
      for (int i = 0; i < n_; ++i) {
        if (!now.in[static_cast<size_t>(i)]) missing->push_back(members_[static_cast<size_t>(i)]);
      }
      return s;
    }
    Entry& done = rounds_[round];
    const Nanos result = done.max;
    if (++done.left == n_) rounds_.erase(round);
    return result;
  }

 private:
  struct Entry {
    int arrived = 0;
    int left = 0;
    Nanos max{0};
    std::vector<bool> in;  // per member: arrived
  };
  const int n_;
  const std::vector<int> members_;  // global ranks
  Mutex mu_;
  CondVar cv_;
  std::map<int64_t, Entry> rounds_ ABSL_GUARDED_BY(mu_);
};

struct Pending {
  Tensor value;
  Nanos ready{0};
};

struct BucketSlice {
  int chunk = 0;
  size_t offset = 0;
  size_t count = 0;
  uint64_t model_bytes = 0;
  Nanos cost{0};  // modeled ring time over the DP group
};

// Per-step record of one device (written by its compute thread; read at the barrier).
struct DeviceStep {
  Nanos measured_start{0}, measured_end{0}, modeled_end{0};
  DeviceMetrics metrics;
  std::vector<OpInterval> timeline;  // relative to the step start
};

}  // namespace

class Executor::Impl {
 public:
  struct Dev {
    int rank = 0;
    Coord coord;
    std::vector<std::unique_ptr<MlpStage>> stages;  // per chunk
    std::vector<std::unique_ptr<Optimizer>> optimizers;
    std::map<std::pair<int, int>, Pending> acts;   // (mb, model stage) → stage input
    std::map<std::pair<int, int>, Pending> grads;  // (mb, model stage) → stage output gradient
    std::map<int, Tensor> dlogits;
    std::vector<double> loss_sum;
    std::vector<int64_t> correct;
    std::vector<OpInterval> intervals;
    std::vector<OpTiming> bucket_iv;  // written by the comm stream, read after AwaitComm
    Nanos comm_prev_end{0};           // comm stream only
    int64_t tp_round = 0;
    int64_t act_accounted = 0;
    Nanos last_end{0};
    std::vector<DeviceStep> steps;
    // Where the compute thread is (for RunFailure): step, op index (-1 between ops) and the ranks
    // its current wait waits for. Written by the compute thread; read after the cluster joined.
    int cur_step = -1;
    int cur_op = -1;
    std::vector<int> waiting;
    std::vector<int> comm_waiting;  // the same for the comm stream's current bucket
    // Commit protocol: the parameters and optimizer state before this device's last optimizer
    // update (of step backup_step), restored after a failed run if that step was not committed.
    int backup_step = -1;
    std::vector<std::vector<float>> backup_params;      // per chunk
    std::vector<std::unique_ptr<Optimizer>> backup_opt;  // per chunk
    // Links into this device seen slower than their class: (src rank) → (first step, factor).
    std::map<int, std::pair<int, double>> slow_in;
  };

  // An error a device thread or comm task returned (RunFailure's candidates).
  struct ErrorRecord {
    int rank = -1, step = -1, op = -1;
    std::string op_name;
    std::vector<int> waiting;
    absl::Status status;
    bool awaits_comm = false;  // the compute thread waited for its comm stream (OptimizerStep)
  };

  ExecutorOptions o;
  std::optional<ParallelGrid> grid;
  std::optional<Dataset> data;
  ModelPartition part;
  BatchLayout layout;
  int P = 1, V = 1, D = 1, T = 1, K = 1, world = 1;
  PredictOptions popts;
  std::vector<std::vector<BucketSlice>> buckets;  // per pp
  std::vector<Dev> devs;
  bool ran = false;
  FaultInjector injector;
  int committed = 0;                     // written by the barrier's last arriver; read after Run
  std::optional<RunFailure> failure;     // after a failed Run

  absl::Status Build();
  absl::StatusOr<RunResult> Run();

 private:
  absl::Status Body(Device& dev);
  absl::Status RunStep(Device& dev, Dev& d, int step);
  absl::Status RunBucket(Device& dev, Dev& d, int step, int b, Nanos enqueued);
  absl::StatusOr<Nanos> Barrier(Device& dev, Dev& d, int step);
  absl::Status Bookkeep(int step);
  void NoteError(ErrorRecord rec);
  absl::Status Fail(const absl::Status& run, std::chrono::steady_clock::time_point w0);
  absl::Status InjectedFault(Device& dev, Dev& d, int step, const Op& op, int32_t oi,
                             const OpFault& f);
  std::string OpName(const Dev& d, int op) const;
  absl::Status Evaluate(int step);
  void AccountActivations(Device& dev, Dev& d);
  Nanos OpCost(const Op& op, int pp) const;

  Clock* clock = nullptr;
  std::unique_ptr<RealClock> real_clock;
  std::unique_ptr<VirtualClock> virtual_clock;
  std::unique_ptr<PlanLinkModel> link;
  std::vector<std::unique_ptr<comm::Communicator>> pp_act, pp_grad;  // per (dp, tp)
  std::vector<std::unique_ptr<comm::Communicator>> tp_comm;          // per (dp, pp)
  std::vector<std::unique_ptr<comm::Communicator>> dp_comm;          // per (pp, tp)
  std::vector<std::unique_ptr<Rendezvous>> tp_rv, dp_rv;
  Mutex err_mu;
  std::vector<ErrorRecord> errors ABSL_GUARDED_BY(err_mu);
  // steady_clock ns when the first injected OpFault fired (-1: none).
  std::atomic<int64_t> fault_fired_ns{-1};

  // Step barrier (all devices).
  Mutex bar_mu;
  CondVar bar_cv;
  int bar_arrived ABSL_GUARDED_BY(bar_mu) = 0;
  std::vector<bool> bar_in ABSL_GUARDED_BY(bar_mu);  // per rank: arrived at the current barrier
  int64_t bar_generation ABSL_GUARDED_BY(bar_mu) = 0;
  Nanos bar_release ABSL_GUARDED_BY(bar_mu){0};
  absl::Status bar_status ABSL_GUARDED_BY(bar_mu);
  Nanos step_start{0};  // written by the barrier's last arriver before release

  // Results (written at the barrier by its last arriver).
  std::vector<StepRecord> records;
};

namespace {
absl::Status Invalid(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("executor: ", field, ": ", why));
}
}  // namespace

absl::Status Executor::Impl::Build() {
  if (o.grid.dp < 1 || o.grid.pp < 1 || o.grid.tp < 1) {
    return Invalid("grid", "dp, pp and tp must be >= 1");
  }
  {
    absl::StatusOr<ParallelGrid> g = ParallelGrid::Create(o.grid, o.placement);
    if (!g.ok()) return Invalid("grid", std::string(g.status().message()));
    grid.emplace(*g);
  }
  if (o.program.num_ranks != o.grid.pp) {
    return Invalid("program", absl::StrCat("has ", o.program.num_ranks,
                                           " pipeline ranks but grid.pp = ", o.grid.pp));
  }
  if (absl::StatusOr<ValidationReport> r = Validate(o.program); !r.ok()) {
    return Invalid("program", std::string(r.status().message()));
  }
  // [J] Two chunks in a V, two directions and fused F&B ops are predicted but not yet played.
  {
    bool fused = false;
    for (const auto& list : o.program.ranks) {
      for (const Op& op : list) fused = fused || op.kind == OpKind::kForwardBackward;
    }
    if (fused || (!o.program.placement.empty() &&
                  !(o.program.placement ==
                    StagePlacement::Loop(o.program.num_ranks, o.program.num_chunks)))) {
      return absl::UnimplementedError(absl::StrCat(
          "executor: program: schedule ", ScheduleName(o.program.kind),
          " (V placement, two directions or fused F&B ops) is not executed yet; `predict` models it"));
    }
  }
  P = o.grid.pp;
  D = o.grid.dp;
  T = o.grid.tp;
  V = o.program.num_chunks;
  K = P * V;
  world = grid->world_size();
  if (o.cost.stages.size() != 1 && static_cast<int>(o.cost.stages.size()) != P) {
    return Invalid("cost", absl::StrCat("has ", o.cost.stages.size(),
                                        " stage entries, expected 1 or pp = ", P));
  }
  for (int s = 0; s < P; ++s) {
    const StageCost& c = o.cost.Of(s);
    if (c.forward < Nanos(0) || c.backward < Nanos(0) || c.weight_grad < Nanos(0) ||
        c.optimizer < Nanos(0) || c.weight_grad > c.backward) {
      return Invalid(absl::StrCat("cost.stages[", s, "]"),
                     "times must be >= 0 and weight_grad <= backward");
    }
  }
  if (o.microbatch_size < 1) return Invalid("microbatch_size", "must be >= 1");
  layout = BatchLayout{.dp = D, .microbatches = o.program.num_micro_batches,
                       .microbatch_size = o.microbatch_size};
  if (o.global_batch != 0 && o.global_batch != layout.global_batch()) {
    return Invalid("global_batch", absl::StrCat(o.global_batch, " != dp x microbatches x "
                                                "microbatch_size = ", layout.global_batch()));
  }
  if (o.steps < 1) return Invalid("steps", "must be >= 1");
  if (o.eval_every < 0) return Invalid("eval_every", "must be >= 0");
  if (o.eval_samples < 0) return Invalid("eval_samples", "must be >= 0");
  if (!o.virtual_time && !(o.time_scale > 0 && std::isfinite(o.time_scale))) {
    return Invalid("time_scale", "must be > 0 and finite");
  }
  if (o.watchdog_timeout <= Nanos(0)) return Invalid("watchdog_timeout", "must be > 0");
  if (o.segment_bytes < 4 || o.segment_bytes % 4 != 0) {
    return Invalid("segment_bytes", "must be a multiple of 4 and >= 4");
  }
  if ((o.model_segment_bytes != 0 && o.model_segment_bytes < 4) ||
      (o.tp_model_segment_bytes != 0 && o.tp_model_segment_bytes < 4)) {
    return Invalid("model_segment_bytes", "must be 0 or >= 4");
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
    const size_t n = o.program.ranks[static_cast<size_t>(grid->CoordOf(f.rank).pp)].size();
    if (f.kind != OpFaultKind::kSlowLink && static_cast<size_t>(f.op) >= n) {
      return Invalid("faults", absl::StrCat("op fault ", OpFaultKindName(f.kind), " rank ", f.rank,
                                            ": op ", f.op, " out of range (its op list has ", n,
                                            " ops)"));
    }
  }
  {
    absl::StatusOr<ModelPartition> pr = PartitionMlp(o.model, K, T, o.layers_per_stage);
    if (!pr.ok()) return Invalid("model", std::string(pr.status().message()));
    part = *pr;
  }
  {
    absl::StatusOr<Dataset> ds = Dataset::Create(o.dataset);
    if (!ds.ok()) return Invalid("dataset", std::string(ds.status().message()));
    data.emplace(std::move(*ds));
  }
  popts = PredictOptionsFor(o);

  // Shards (replicas start bit-identical: init is a pure hash of the element).
  devs.resize(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    Dev& d = devs[static_cast<size_t>(r)];
    d.rank = r;
    d.coord = grid->CoordOf(r);
    for (int c = 0; c < V; ++c) {
      RP_ASSIGN_OR_RETURN(auto st,
                          MlpStage::Create(o.model, part, o.program.ModelStage(d.coord.pp, c),
                                           d.coord.tp));
      RP_ASSIGN_OR_RETURN(auto opt, Optimizer::Create(o.optimizer, st->params().size()));
      d.stages.push_back(std::move(st));
      d.optimizers.push_back(std::move(opt));
    }
  }

  // Gradient buckets: the program's kAllReduce ops of each pipeline rank, in order; each chunk's
  // real gradients are split into its buckets (element counts differing by at most one).
  buckets.assign(static_cast<size_t>(P), {});
  for (int s = 0; s < P; ++s) {
    std::vector<int> per_chunk(static_cast<size_t>(V), 0);
    for (const Op& op : o.program.ranks[static_cast<size_t>(s)]) {
      if (op.kind == OpKind::kAllReduce) ++per_chunk[static_cast<size_t>(op.chunk)];
    }
    std::vector<int> seen(static_cast<size_t>(V), 0);
    const std::vector<int> dp_group = grid->DpGroup(grid->RankOf({0, s, 0}));
    for (const Op& op : o.program.ranks[static_cast<size_t>(s)]) {
      if (op.kind != OpKind::kAllReduce) continue;
      const int c = op.chunk;
      const size_t n = devs[static_cast<size_t>(grid->RankOf({0, s, 0}))]
                           .stages[static_cast<size_t>(c)]->params().size();
      const size_t nb = static_cast<size_t>(per_chunk[static_cast<size_t>(c)]);
      const size_t i = static_cast<size_t>(seen[static_cast<size_t>(c)]++);
      const size_t base = n / nb, extra = n % nb;
      BucketSlice b{.chunk = c, .offset = i * base + std::min(i, extra),
                    .count = base + (i < extra ? 1 : 0), .model_bytes = op.bytes};
      RP_ASSIGN_OR_RETURN(b.cost, RingCostOverGroup(*grid, dp_group, op.bytes, popts.links,
                                                    popts.dp_ring));
      buckets[static_cast<size_t>(s)].push_back(b);
    }
  }
  return absl::OkStatus();
}

Nanos Executor::Impl::OpCost(const Op& op, int pp) const {
  const StageCost& c = o.cost.Of(pp);
  switch (op.kind) {
    case OpKind::kForward: return c.forward / V;
    case OpKind::kBackward: return c.backward / V;
    case OpKind::kBackwardInput: return (c.backward - c.weight_grad) / V;
    case OpKind::kWeightGrad: return c.weight_grad / V;
    case OpKind::kOptimizerStep: return c.optimizer;
    default: return Nanos(0);
  }
}

void Executor::Impl::AccountActivations(Device& dev, Dev& d) {
  int64_t now = 0;
  for (const auto& st : d.stages) now += st->activation_bytes();
  if (now > d.act_accounted) {
    dev.memory().Allocate(MemoryKind::kActivations, static_cast<uint64_t>(now - d.act_accounted));
  } else if (now < d.act_accounted) {
    dev.memory().Free(MemoryKind::kActivations, static_cast<uint64_t>(d.act_accounted - now))
        .IgnoreError();  // counts only what it allocated: cannot underflow
  }
  d.act_accounted = now;
}

namespace {
absl::Status WithSite(const absl::Status& s, const Coord& c, int rank, int step, const Op& op,
                      int peer_rank) {
  if (s.ok()) return s;
  return absl::Status(
      s.code(), absl::StrCat("rank ", rank, " (dp ", c.dp, ", pp ", c.pp, ", tp ", c.tp,
                             ") step ", step, " op ", ToString(op),
                             peer_rank >= 0 ? absl::StrCat(" peer rank ", peer_rank) : "", ": ",
                             s.message()));
}
}  // namespace

absl::Status Executor::Impl::RunBucket(Device& dev, Dev& d, int step, int b, Nanos enqueued) {
  const BucketSlice& bs = buckets[static_cast<size_t>(d.coord.pp)][static_cast<size_t>(b)];
  const int group = d.coord.pp * T + d.coord.tp;
  const int nb = static_cast<int>(buckets[static_cast<size_t>(d.coord.pp)].size());
  const WaitSite site{.rank = d.rank, .op = "AllReduce", .step = step};
  RP_ASSIGN_OR_RETURN(const Nanos ready,
                      dp_rv[static_cast<size_t>(group)]->Arrive(
                          dev.watchdog(), int64_t{step} * nb + b, enqueued, site, d.coord.dp,
                          &d.comm_waiting));
  // comm's ring receives from the predecessor: that is whom a failed all-reduce waited for.
  d.comm_waiting = {grid->RankOf({(d.coord.dp + D - 1) % D, d.coord.pp, d.coord.tp})};
  const Nanos start = std::max(ready, d.comm_prev_end);
  std::span<float> g =
      d.stages[static_cast<size_t>(bs.chunk)]->grads().subspan(bs.offset, bs.count);
  const int64_t w0 = dev.WallNow();
  if (D > 1) {
    comm::CollectiveOptions co{.codec = o.codec, .segment_bytes = o.segment_bytes,
                               .timeout = o.watchdog_timeout, .error_feedback = o.error_feedback};
    absl::StatusOr<comm::CollectiveResult> r =
        dp_comm[static_cast<size_t>(group)]->rank(d.coord.dp).AllReduce(g, g, co, start);
    if (!r.ok()) {
      return absl::Status(r.status().code(),
                          absl::StrCat("rank ", d.rank, " step ", step, " gradient bucket ", b,
                                       " (DP all-reduce): ", r.status().message()));
    }
  }
  const Nanos end = start + bs.cost;
  d.comm_prev_end = end;
  d.bucket_iv[static_cast<size_t>(b)] = {start, end};
  d.comm_waiting.clear();
  RP_RETURN_IF_ERROR(dev.WaitUntil(end, site));
  dev.Trace({.name = "AllReduce", .kind = rp::OpKind::kCollective, .step = step,
             .bytes = bs.model_bytes},
            w0, dev.WallNow(), start, end);
  return absl::OkStatus();
}

absl::Status Executor::Impl::RunStep(Device& dev, Dev& d, int step) {
  const Coord c = d.coord;
  const int m = layout.microbatches;
  const float grad_scale = 1.0f / static_cast<float>(layout.global_batch());
  for (auto& st : d.stages) st->ZeroGrads();
  d.intervals.clear();
  d.loss_sum.assign(static_cast<size_t>(m), 0.0);
  d.correct.assign(static_cast<size_t>(m), 0);
  d.bucket_iv.assign(buckets[static_cast<size_t>(c.pp)].size(), OpTiming{});
  std::vector<CommTicket> tickets;
  const int pipe = c.dp * T + c.tp;
  comm::RankComm& act_comm = pp_act[static_cast<size_t>(pipe)]->rank(c.pp);
  comm::RankComm& grad_comm = pp_grad[static_cast<size_t>(pipe)]->rank(c.pp);
  comm::RankComm* tpc = T > 1 ? &tp_comm[static_cast<size_t>(c.dp * P + c.pp)]->rank(c.tp) : nullptr;
  TpAllReduceFn tp_fn = [&](std::span<float> buf) -> absl::Status {
    comm::CollectiveOptions co{.timeout = o.watchdog_timeout};
    return tpc->AllReduce(buf, buf, co).status();
  };
  const int rows = layout.microbatch_size;

  const auto& ops = o.program.ranks[static_cast<size_t>(c.pp)];
  std::vector<int32_t> bucket_op;
  for (size_t op_index = 0; op_index < ops.size(); ++op_index) {
    const Op& op = ops[op_index];
    const int32_t oi = static_cast<int32_t>(op_index);
    const size_t first_interval = d.intervals.size();
    const int k = o.program.ModelStage(c.pp, op.chunk);
    const int peer_rank = op.peer >= 0 ? grid->StageRank(d.rank, op.peer) : -1;
    auto site_err = [&](const absl::Status& s) { return WithSite(s, c, d.rank, step, op, peer_rank); };
    const OpInfo info{.name = OpKindName(op.kind), .micro_batch = op.micro_batch, .step = step,
                      .peer = peer_rank, .bytes = op.bytes};
    MlpStage& stage = *d.stages[static_cast<size_t>(op.chunk)];
    d.cur_op = oi;
    d.waiting.clear();
    // Injected op faults (runtime/faults.h OpFault): a stall blocks here; a throw fires inside the
    // kernel of a compute op (as a failing kernel would), else right here.
    const OpFault* fault = injector.OpFaultAt(d.rank, step, oi);
    const bool compute_op = IsDeviceCompute(op.kind);
    const bool throw_in_kernel = fault != nullptr && fault->kind == OpFaultKind::kThrow && compute_op;
    if (fault != nullptr && !throw_in_kernel) {
      RP_RETURN_IF_ERROR(site_err(InjectedFault(dev, d, step, op, oi, *fault)));
    }
    auto kernel_fault = [&] {
      if (throw_in_kernel) (void)InjectedFault(dev, d, step, op, oi, *fault);  // throws
    };
    // TP all-reduces run inside F/B kernels; comm's ring waits for the TP predecessor.
    if (T > 1 && compute_op && op.kind != OpKind::kOptimizerStep && op.kind != OpKind::kWeightGrad) {
      d.waiting = {grid->RankOf({c.dp, c.pp, (c.tp + T - 1) % T})};
    }
    switch (op.kind) {
      case OpKind::kForward: {
        Pending in;
        std::vector<int32_t> labels;
        const bool last = k == K - 1;
        if (k == 0 || last) {
          RP_ASSIGN_OR_RETURN(Batch b, data->TrainMicroBatch(layout, step, c.dp, op.micro_batch));
          if (k == 0) in.value = std::move(b.inputs);
          labels = std::move(b.labels);
        }
        if (k > 0) {
          auto it = d.acts.find({op.micro_batch, k});
          if (it == d.acts.end()) {
            return site_err(absl::FailedPreconditionError("its input activation never arrived"));
          }
          in = std::move(it->second);
          d.acts.erase(it);
        }
        Tensor out;
        const Nanos start = std::max(dev.cursor(), in.ready);
        absl::StatusOr<Nanos> end = dev.Compute(info, OpCost(op, c.pp), in.ready, [&]() -> absl::Status {
          kernel_fault();
          RP_ASSIGN_OR_RETURN(out, stage.Forward(op.micro_batch, in.value, tp_fn));
          if (last) {
            Tensor dl(out.rows(), out.cols());
            RP_ASSIGN_OR_RETURN(LossStats ls, SoftmaxCrossEntropy(out, labels, grad_scale, dl));
            d.loss_sum[static_cast<size_t>(op.micro_batch)] += ls.loss_sum;
            d.correct[static_cast<size_t>(op.micro_batch)] += ls.correct;
            d.dlogits[op.micro_batch] = std::move(dl);
          }
          return absl::OkStatus();
        });
        if (!end.ok()) return site_err(end.status());
        d.intervals.push_back({IntervalKind::kCompute, start, *end});
        if (!last) d.acts[{op.micro_batch, k + 1}] = Pending{std::move(out), *end};
        AccountActivations(dev, d);
        break;
      }
      case OpKind::kBackward:
      case OpKind::kBackwardInput: {
        Pending dy;
        if (k == K - 1) {
          auto it = d.dlogits.find(op.micro_batch);
          if (it == d.dlogits.end()) {
            return site_err(absl::FailedPreconditionError("backward before its forward"));
          }
          dy.value = std::move(it->second);
          d.dlogits.erase(it);
        } else {
          auto it = d.grads.find({op.micro_batch, k});
          if (it == d.grads.end()) {
            return site_err(absl::FailedPreconditionError("its output gradient never arrived"));
          }
          dy = std::move(it->second);
          d.grads.erase(it);
        }
        Tensor dx;
        const Nanos start = std::max(dev.cursor(), dy.ready);
        absl::StatusOr<Nanos> end = dev.Compute(info, OpCost(op, c.pp), dy.ready, [&]() -> absl::Status {
          kernel_fault();
          if (op.kind == OpKind::kBackward) {
            RP_ASSIGN_OR_RETURN(dx, stage.Backward(op.micro_batch, dy.value, tp_fn));
          } else {
            RP_ASSIGN_OR_RETURN(dx, stage.BackwardInput(op.micro_batch, dy.value, tp_fn));
          }
          return absl::OkStatus();
        });
        if (!end.ok()) return site_err(end.status());
        d.intervals.push_back({IntervalKind::kCompute, start, *end});
        if (k > 0) d.grads[{op.micro_batch, k - 1}] = Pending{std::move(dx), *end};
        AccountActivations(dev, d);
        break;
      }
      case OpKind::kWeightGrad: {
        const Nanos start = dev.cursor();
        absl::StatusOr<Nanos> end = dev.Compute(info, OpCost(op, c.pp), kZeroTime, [&] {
          kernel_fault();
          return stage.BackwardWeight(op.micro_batch);
        });
        if (!end.ok()) return site_err(end.status());
        d.intervals.push_back({IntervalKind::kCompute, start, *end});
        AccountActivations(dev, d);
        break;
      }
      case OpKind::kSendAct:
      case OpKind::kSendGrad: {
        const bool grad = op.kind == OpKind::kSendGrad;
        auto& store = grad ? d.grads : d.acts;
        const std::pair<int, int> key{op.micro_batch, grad ? k - 1 : k + 1};
        auto it = store.find(key);
        if (it == store.end()) {
          return site_err(absl::FailedPreconditionError("nothing to send (op before its compute)"));
        }
        auto buf = std::make_unique<comm::Buffer>(std::move(it->second.value).Release());
        store.erase(it);
        const Nanos ready = dev.cursor();
        const int64_t w0 = dev.WallNow();
        tl_model_bytes = op.bytes;
        tl_step = step;
        tl_grad = grad;
        d.waiting = {peer_rank};  // a full channel waits for the receiver
        absl::StatusOr<Nanos> arrival =
            (grad ? grad_comm : act_comm).Send(op.peer, std::move(buf), ready, o.watchdog_timeout);
        if (!arrival.ok()) return site_err(arrival.status());
        d.intervals.push_back({IntervalKind::kSend, ready, *arrival});
        dev.Trace({.name = info.name, .kind = rp::OpKind::kSend, .micro_batch = op.micro_batch,
                   .step = step, .peer = peer_rank, .bytes = op.bytes},
                  w0, dev.WallNow(), ready, *arrival);
        break;
      }
      case OpKind::kRecvAct:
      case OpKind::kRecvGrad: {
        const bool grad = op.kind == OpKind::kRecvGrad;
        const Nanos reached = dev.cursor();
        const int64_t w0 = dev.WallNow();
        d.waiting = {peer_rank};
        absl::StatusOr<comm::Received> r =
            (grad ? grad_comm : act_comm).Recv(op.peer, o.watchdog_timeout);
        if (!r.ok()) return site_err(r.status());
        const Nanos end = std::max(reached, r->arrival);
        dev.AdvanceCursor(end);
        RP_RETURN_IF_ERROR(site_err(dev.WaitUntil(
            end, {.rank = d.rank, .op = info.name, .peer = peer_rank, .step = step,
                  .micro_batch = op.micro_batch})));
        const int64_t n = static_cast<int64_t>(r->buffer->size());
        Tensor t(rows, rows > 0 ? n / rows : 0, std::move(*r->buffer));
        (grad ? d.grads : d.acts)[{op.micro_batch, k}] = Pending{std::move(t), r->arrival};
        const int src_dev = grid->DeviceOf(peer_rank), dst_dev = grid->DeviceOf(d.rank);
        const Nanos link_time = link->TakeFlight(src_dev, dst_dev, grad);
        if (const double f = link->Factor(src_dev, dst_dev, step);
            f != 1.0 && !d.slow_in.contains(peer_rank)) {
          d.slow_in[peer_rank] = {step, f};
        }
        d.intervals.push_back({IntervalKind::kRecv, reached, end, link_time});
        dev.Trace({.name = info.name, .kind = rp::OpKind::kRecv, .micro_batch = op.micro_batch,
                   .step = step, .peer = peer_rank, .bytes = op.bytes},
                  w0, dev.WallNow(), reached, end);
        break;
      }
      case OpKind::kTpAllReduce: {
        const Nanos reached = dev.cursor();
        if (T == 1) {
          d.intervals.push_back({IntervalKind::kTpAllReduce, reached, reached});
          break;
        }
        RP_ASSIGN_OR_RETURN(const Nanos cost, RingCostOverGroup(*grid, grid->TpGroup(d.rank),
                                                                op.bytes, popts.links,
                                                                popts.tp_ring));
        absl::StatusOr<Nanos> group_start = tp_rv[static_cast<size_t>(c.dp * P + c.pp)]->Arrive(
            dev.watchdog(), d.tp_round++, reached,
            {.rank = d.rank, .op = "TpAllReduce", .step = step, .micro_batch = op.micro_batch},
            c.tp, &d.waiting);
        if (!group_start.ok()) return site_err(group_start.status());
        const Nanos end = *group_start + cost;
        dev.AdvanceCursor(end);
        d.intervals.push_back({IntervalKind::kTpAllReduce, reached, end, cost});
        break;
      }
      case OpKind::kAllReduce: {
        const Nanos enq = dev.cursor();
        const int b = op.bucket;
        bucket_op.push_back(oi);
        tickets.push_back(dev.PostComm([this, &dev, &d, step, b, enq, oi]() -> absl::Status {
          // Nothing escapes the comm stream's thread: an exception becomes an Internal error.
          absl::Status s;
          try {
            s = RunBucket(dev, d, step, b, enq);
          } catch (const std::exception& e) {
            s = absl::InternalError(absl::StrCat("rank ", d.rank, " step ", step, " gradient bucket ",
                                                 b, ": exception on the comm stream: ", e.what()));
          } catch (...) {
            s = absl::InternalError(absl::StrCat("rank ", d.rank, " step ", step, " gradient bucket ",
                                                 b, ": unknown exception on the comm stream"));
          }
          if (!s.ok()) {
            NoteError({.rank = d.rank, .step = step, .op = oi,
                       .op_name = absl::StrCat("AllReduce bucket ", b), .waiting = d.comm_waiting,
                       .status = s});
          }
          return s;
        }));
        break;
      }
      case OpKind::kForwardBackward:  // [J] refused by Build
        return site_err(absl::UnimplementedError("fused F&B ops are not executed yet"));
      case OpKind::kOptimizerStep: {
        Nanos ar_end{0};
        for (size_t b = 0; b < tickets.size(); ++b) {
          RP_RETURN_IF_ERROR(dev.AwaitComm(
              tickets[b], {.rank = d.rank, .op = "OptimizerStep (awaits all-reduce)", .step = step}));
          ar_end = std::max(ar_end, d.bucket_iv[b].end);
          d.intervals.push_back({IntervalKind::kGradAllReduce, d.bucket_iv[b].start,
                                 d.bucket_iv[b].end, d.bucket_iv[b].end - d.bucket_iv[b].start,
                                 bucket_op[b]});
        }
        const Nanos reached = dev.cursor();
        d.intervals.push_back({IntervalKind::kGradWait, reached, std::max(reached, ar_end)});
        const Nanos start = std::max(reached, ar_end);
        absl::StatusOr<Nanos> end = dev.Compute(info, OpCost(op, c.pp), ar_end, [&]() -> absl::Status {
          // Commit protocol: keep the state before the update until the step is committed.
          d.backup_params.resize(d.stages.size());
          d.backup_opt.resize(d.stages.size());
          for (size_t ch = 0; ch < d.stages.size(); ++ch) {
            const std::span<const float> w = d.stages[ch]->params();
            d.backup_params[ch].assign(w.begin(), w.end());
            if (d.backup_opt[ch]) {
              *d.backup_opt[ch] = *d.optimizers[ch];
            } else {
              d.backup_opt[ch] = std::make_unique<Optimizer>(*d.optimizers[ch]);
            }
          }
          d.backup_step = step;
          kernel_fault();
          for (size_t ch = 0; ch < d.stages.size(); ++ch) {
            RP_RETURN_IF_ERROR(d.optimizers[ch]->Step(d.stages[ch]->params(), d.stages[ch]->grads()));
          }
          return absl::OkStatus();
        });
        if (!end.ok()) return site_err(end.status());
        d.intervals.push_back({IntervalKind::kCompute, start, *end});
        break;
      }
    }
    for (size_t i = first_interval; i < d.intervals.size(); ++i) {
      if (d.intervals[i].op < 0) d.intervals[i].op = oi;
    }
  }
  d.last_end = dev.cursor();
  return absl::OkStatus();
}

// All devices meet; the last arriver records step `step − 1` (if any) and picks the next step's
// modeled start. Returns that start.
absl::StatusOr<Nanos> Executor::Impl::Barrier(Device& dev, Dev& d, int step) {
  const WaitSite site{.rank = d.rank, .op = "step barrier", .step = step};
  ScopedExternalWait external(clock);
  MutexLock lock(&bar_mu);
  const int64_t gen = bar_generation;
  if (bar_in.empty()) bar_in.assign(static_cast<size_t>(world), false);
  bar_in[static_cast<size_t>(d.rank)] = true;
  if (++bar_arrived == world) {
    bar_mu.Unlock();
    // Every other device waits on the barrier: its state is ours to read (the mutex orders it).
    absl::Status s = step > 0 ? Bookkeep(step - 1) : absl::OkStatus();
    Nanos release{0};
    for (const Dev& x : devs) release = std::max(release, x.last_end);
    if (!o.virtual_time) {
      // Leave the host time to wake every device before the step starts.
      const Nanos margin = Nanos(static_cast<int64_t>(
          (1e6 + 5e3 * world) / o.time_scale));
      release = std::max(release, clock->Now() + margin);
    }
    step_start = release;
    committed = step;  // every device passed the barrier after step − 1: steps < step committed
    bar_mu.Lock();
    bar_arrived = 0;
    bar_in.assign(static_cast<size_t>(world), false);
    bar_release = release;
    bar_status = s;
    ++bar_generation;
    bar_cv.SignalAll();
  } else {
    if (absl::Status s = dev.watchdog().Wait(&bar_mu, &bar_cv,
                                             [&] {
                                               bar_mu.AssertHeld();  // held by Watchdog::Wait
                                               return bar_generation != gen;
                                             },
                                             site);
        !s.ok()) {
      d.waiting.clear();
      for (int r = 0; r < world; ++r) {
        if (!bar_in[static_cast<size_t>(r)]) d.waiting.push_back(r);
      }
      return s;
    }
  }
  RP_RETURN_IF_ERROR(bar_status);
  return bar_release;
}

absl::Status Executor::Impl::Bookkeep(int step) {
  StepRecord rec;
  rec.step = step;
  // Loss: Σ_d Σ_j loss_sum(d, j) in (d, j) order, from the last model stage's TP rank 0.
  const int last_pp = o.program.RankOfModelStage(K - 1);
  double loss = 0;
  int64_t correct = 0;
  for (int dp = 0; dp < D; ++dp) {
    const Dev& x = devs[static_cast<size_t>(grid->RankOf({dp, last_pp, 0}))];
    for (int j = 0; j < layout.microbatches; ++j) {
      loss += x.loss_sum[static_cast<size_t>(j)];
      correct += x.correct[static_cast<size_t>(j)];
    }
  }
  const double B = static_cast<double>(layout.global_batch());
  rec.loss = loss / B;
  rec.train_accuracy = static_cast<double>(correct) / B;
  // Divergence: max |w_r − w_0| over replicas, per shard.
  double div = 0;
  for (int dp = 1; dp < D; ++dp) {
    for (int pp = 0; pp < P; ++pp) {
      for (int tp = 0; tp < T; ++tp) {
        const Dev& a = devs[static_cast<size_t>(grid->RankOf({0, pp, tp}))];
        const Dev& b = devs[static_cast<size_t>(grid->RankOf({dp, pp, tp}))];
        for (int ch = 0; ch < V; ++ch) {
          auto wa = a.stages[static_cast<size_t>(ch)]->params();
          auto wb = b.stages[static_cast<size_t>(ch)]->params();
          for (size_t i = 0; i < wa.size(); ++i) {
            const double diff = std::fabs(static_cast<double>(wa[i]) - static_cast<double>(wb[i]));
            if (!(diff <= div)) div = std::isnan(diff) ? std::numeric_limits<double>::infinity() : diff;
          }
        }
      }
    }
  }
  rec.replica_divergence = div;
  // Step window and per-device metrics.
  Nanos m_start = Nanos::max(), m_end = Nanos::min(), mod_end{0};
  for (const Dev& x : devs) {
    m_start = std::min(m_start, x.steps.back().measured_start);
    m_end = std::max(m_end, x.steps.back().measured_end);
    mod_end = std::max(mod_end, x.last_end);
  }
  const Nanos modeled = mod_end - step_start;
  for (Dev& x : devs) {
    std::vector<OpInterval> rel = x.intervals;
    for (OpInterval& iv : rel) {
      iv.start -= step_start;
      iv.end -= step_start;
    }
    x.steps.back().metrics = ComputeDeviceMetrics(rel, modeled);
    x.steps.back().timeline = std::move(rel);
  }
  rec.modeled_ms = ToMillis(modeled);
  rec.measured_ms = o.virtual_time ? rec.modeled_ms : ToMillis(m_end - m_start);
  records.push_back(rec);
  const bool last = step == o.steps - 1;
  if (last || (o.eval_every > 0 && (step + 1) % o.eval_every == 0)) {
    RP_RETURN_IF_ERROR(Evaluate(step));
  }
  return absl::OkStatus();
}

absl::Status Executor::Impl::Evaluate(int step) {
  StepRecord& rec = records.back();
  const int64_t total = o.eval_samples > 0 ? std::min(o.eval_samples, data->size(Split::kTest))
                                           : data->size(Split::kTest);
  constexpr int64_t kChunk = 512;
  constexpr int kEvalMicroBatch = 1 << 30;  // an id no training micro-batch uses
  double loss = 0;
  int64_t correct = 0;
  for (int64_t begin = 0; begin < total; begin += kChunk) {
    const int64_t n = std::min(kChunk, total - begin);
    RP_ASSIGN_OR_RETURN(Batch b, data->Slice(Split::kTest, begin, n));
    Tensor x = std::move(b.inputs);
    for (int k = 0; k < K; ++k) {
      const int pp = o.program.RankOfModelStage(k), ch = o.program.ChunkOfModelStage(k);
      std::vector<MlpStage*> shards;
      for (int tp = 0; tp < T; ++tp) {
        shards.push_back(
            devs[static_cast<size_t>(grid->RankOf({0, pp, tp}))].stages[static_cast<size_t>(ch)].get());
      }
      RP_ASSIGN_OR_RETURN(x, RunTpGroupSerial(shards, MlpStage::Pass::kInfer, kEvalMicroBatch, x));
    }
    RP_ASSIGN_OR_RETURN(LossStats ls, SoftmaxCrossEntropy(x, b.labels, 1.0f, MatrixView{}));
    loss += ls.loss_sum;
    correct += ls.correct;
  }
  (void)step;
  rec.accuracy = total > 0 ? static_cast<double>(correct) / static_cast<double>(total) : 0.0;
  rec.test_loss = total > 0 ? loss / static_cast<double>(total) : 0.0;
  return absl::OkStatus();
}

absl::Status Executor::Impl::Body(Device& dev) {
  Dev& d = devs[static_cast<size_t>(dev.rank())];
  for (int step = 0; step < o.steps; ++step) {
    d.cur_step = step;
    d.cur_op = -1;
    d.waiting.clear();
    RP_ASSIGN_OR_RETURN(const Nanos t0, Barrier(dev, d, step));
    dev.AdvanceCursor(t0);
    RP_RETURN_IF_ERROR(dev.WaitUntil(t0, {.rank = d.rank, .op = "step start", .step = step}));
    DeviceStep ds;
    // The step starts at its modeled start t0 (mapped to wall time by the clock), not when this
    // thread woke: every deadline of the step is anchored at t0, so a late wake-up here is absorbed
    // by the ops' waits, and counting from the wake-up would shorten the measured window.
    ds.measured_start = t0;
    d.steps.push_back(ds);
    RP_RETURN_IF_ERROR(RunStep(dev, d, step));
    d.steps.back().modeled_end = d.last_end;
    d.steps.back().measured_end = o.virtual_time ? d.last_end : clock->Now();
  }
  d.cur_step = o.steps;
  d.cur_op = -1;
  d.waiting.clear();
  return Barrier(dev, d, o.steps).status();
}

void Executor::Impl::NoteError(ErrorRecord rec) {
  MutexLock lock(&err_mu);
  errors.push_back(std::move(rec));
}

absl::Status Executor::Impl::Fail(const absl::Status& run,
                                  std::chrono::steady_clock::time_point w0) {
  // Every thread has joined: the devices' state is ours.
  RunFailure f;
  f.status = run;
  f.committed_steps = committed;
  for (Dev& d : devs) {
    if (d.backup_step < 0 || d.backup_step < committed) continue;
    for (size_t ch = 0; ch < d.stages.size(); ++ch) {
      const std::span<float> w = d.stages[ch]->params();
      std::copy(d.backup_params[ch].begin(), d.backup_params[ch].end(), w.begin());
      *d.optimizers[ch] = *d.backup_opt[ch];
    }
    d.backup_step = -1;
    ++f.rolled_back;
  }
  std::vector<ErrorRecord> errs;
  {
    MutexLock lock(&err_mu);
    errs = errors;
  }
  // The record that carries the run's first failure: same code and its message contains the
  // watchdog's (followers wrap it too, in longer messages: take the first, then the shortest).
  const ErrorRecord* root = nullptr;
  for (const ErrorRecord& e : errs) {
    if (e.status.code() == run.code() && absl::StrContains(e.status.message(), run.message()) &&
        (root == nullptr || e.status.message().size() < root->status.message().size())) {
      root = &e;
    }
  }
  if (root == nullptr) {
    for (const ErrorRecord& e : errs) {
      if (!absl::IsCancelled(e.status) && !absl::IsAborted(e.status)) {
        root = &e;
        break;
      }
    }
  }
  if (root == nullptr && !errs.empty()) root = &errs.front();
  std::string where = "first failure: unknown rank";
  if (root != nullptr) {
    f.rank = root->rank;
    f.step = root->step;
    f.op = root->op;
    f.op_name = root->op_name;
    // A compute thread awaiting its all-reduce waited for whom its comm stream waited (read after
    // the comm threads joined).
    const std::vector<int>& waiting =
        root->awaits_comm && root->waiting.empty()
            ? devs[static_cast<size_t>(root->rank)].comm_waiting
            : root->waiting;
    for (int r : waiting) {
      if (r != root->rank) f.missing_peers.push_back(r);
    }
    // Follow each missing peer's own wait (its error record) to the end of the chain.
    std::map<int, std::vector<int>> waits;  // rank → whom its failed wait waited for
    for (const ErrorRecord& e : errs) {
      const std::vector<int>& w = e.awaits_comm && e.waiting.empty()
                                      ? devs[static_cast<size_t>(e.rank)].comm_waiting
                                      : e.waiting;
      if (!waits.contains(e.rank) || waits[e.rank].empty()) waits[e.rank] = w;
    }
    for (int r : f.missing_peers) {
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
      if (std::find(f.stuck_ranks.begin(), f.stuck_ranks.end(), at) == f.stuck_ranks.end()) {
        f.stuck_ranks.push_back(at);
      }
    }
    const Coord c = grid->CoordOf(root->rank);
    where = absl::StrCat("first failure: rank ", root->rank, " (dp ", c.dp, ", pp ", c.pp, ", tp ",
                         c.tp, ") step ", root->step, " op ",
                         root->op >= 0 ? absl::StrCat(root->op, " ") : "", "'", root->op_name,
                         "'; missing peers: ",
                         f.missing_peers.empty() ? "none" : absl::StrJoin(f.missing_peers, ", "),
                         f.stuck_ranks == f.missing_peers
                             ? ""
                             : absl::StrCat(" (their wait chains end at rank(s) ",
                                            absl::StrJoin(f.stuck_ranks, ", "), ")"));
  }
  const auto now = std::chrono::steady_clock::now();
  const int64_t fired = fault_fired_ns.load(std::memory_order_acquire);
  if (fired >= 0) {
    f.seconds_after_fault =
        static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                now.time_since_epoch()).count() - fired) * 1e-9;
  }
  (void)w0;
  absl::Status out(run.code(),
                   absl::StrCat(run.message(), " [", where, "; committed steps: ", committed,
                                "; uncommitted updates rolled back on ", f.rolled_back,
                                " devices]"));
  f.status = out;
  failure = std::move(f);
  return out;
}

std::string Executor::Impl::OpName(const Dev& d, int op) const {
  if (op < 0) return "step barrier";
  return ToString(o.program.ranks[static_cast<size_t>(d.coord.pp)][static_cast<size_t>(op)], V);
}

absl::Status Executor::Impl::InjectedFault(Device& dev, Dev& d, int step, const Op& op,
                                           int32_t oi, const OpFault& f) {
  int64_t none = -1;
  fault_fired_ns.compare_exchange_strong(
      none, std::chrono::duration_cast<std::chrono::nanoseconds>(
                std::chrono::steady_clock::now().time_since_epoch())
                .count());
  const int64_t w = dev.WallNow();
  dev.Trace({.name = f.kind == OpFaultKind::kThrow ? "fault: throw" : "fault: stall",
             .kind = rp::OpKind::kFault, .micro_batch = op.micro_batch, .step = step},
            w, w, dev.cursor(), dev.cursor());
  const std::string what = absl::StrCat("injected fault: ", OpFaultKindName(f.kind), " at step ",
                                        step, " op ", oi, " (", ToString(op, V), ")");
  if (f.kind == OpFaultKind::kThrow) throw std::runtime_error(what);
  // A hung device: no progress. Peers waiting on it expire after the watchdog timeout; if nobody
  // waits on it, it fails the run itself a little later (still within timeout + 1 s).
  const std::chrono::nanoseconds limit =
      o.watchdog_timeout + std::min<std::chrono::nanoseconds>(o.watchdog_timeout / 2,
                                                              std::chrono::milliseconds(250));
  d.waiting.clear();
  if (dev.watchdog().WaitForFailure(limit)) {
    return dev.watchdog().Cancelled({.rank = d.rank, .op = "stalled by injected fault", .step = step});
  }
  return absl::DeadlineExceededError(absl::StrCat(
      what, ": no progress for ", std::chrono::duration<double, std::milli>(limit).count(), " ms"));
}

absl::StatusOr<RunResult> Executor::Impl::Run() {
  if (ran) return absl::FailedPreconditionError("executor: Run() may be called once");
  ran = true;
  RP_ASSIGN_OR_RETURN(Prediction pred, Predict(o.program, *grid, o.cost, popts));

  if (o.virtual_time) {
    virtual_clock = std::make_unique<VirtualClock>();
    clock = virtual_clock.get();
  } else {
    RP_ASSIGN_OR_RETURN(real_clock, RealClock::Create({.time_scale = o.time_scale}));
    clock = real_clock.get();
  }
  LinkSpec spec = o.links;
  spec.devices_per_node = o.placement.devices_per_node;
  std::vector<DegradedLink> degraded;
  for (const DegradedLink& g : o.faults.degraded_links) {
    degraded.push_back({grid->DeviceOf(g.src), grid->DeviceOf(g.dst), g.factor});
  }
  std::vector<SlowLinkFault> slow;
  for (const OpFault& f : o.faults.op_faults) {
    if (f.kind == OpFaultKind::kSlowLink) {
      slow.push_back({grid->DeviceOf(f.rank), grid->DeviceOf(f.dst), f.step, f.factor});
    }
  }
  link = std::make_unique<PlanLinkModel>(spec, std::move(degraded), std::move(slow));

  // Communicators: p2p per (dp, tp) pipeline (activations, gradients), TP per (dp, pp), DP per
  // (pp, tp). Device ids are placement ids; the p2p ones stamp arrivals with the plan link model.
  const size_t cap = std::max<size_t>(comm::kDefaultChannelCapacity,
                                      static_cast<size_t>(layout.microbatches * V + 2));
  for (int dp = 0; dp < D; ++dp) {
    for (int tp = 0; tp < T; ++tp) {
      std::vector<int> ids;
      for (int pp = 0; pp < P; ++pp) ids.push_back(grid->DeviceOf(grid->RankOf({dp, pp, tp})));
      comm::CommunicatorOptions co{.devices = ids, .link = link.get(), .clock = nullptr,
                                   .channel_capacity = cap};
      RP_ASSIGN_OR_RETURN(auto a, comm::Communicator::Create(co));
      RP_ASSIGN_OR_RETURN(auto g, comm::Communicator::Create(co));
      pp_act.push_back(std::move(a));
      pp_grad.push_back(std::move(g));
    }
  }
  for (int dp = 0; dp < D; ++dp) {
    for (int pp = 0; pp < P; ++pp) {
      std::vector<int> ids;
      for (int tp = 0; tp < T; ++tp) ids.push_back(grid->DeviceOf(grid->RankOf({dp, pp, tp})));
      RP_ASSIGN_OR_RETURN(auto c, comm::Communicator::Create({.devices = ids}));
      tp_comm.push_back(std::move(c));
      tp_rv.push_back(std::make_unique<Rendezvous>(grid->TpGroup(grid->RankOf({dp, pp, 0}))));
    }
  }
  for (int pp = 0; pp < P; ++pp) {
    for (int tp = 0; tp < T; ++tp) {
      std::vector<int> ids;
      for (int dp = 0; dp < D; ++dp) ids.push_back(grid->DeviceOf(grid->RankOf({dp, pp, tp})));
      RP_ASSIGN_OR_RETURN(auto c, comm::Communicator::Create({.devices = ids}));
      dp_comm.push_back(std::move(c));
      dp_rv.push_back(std::make_unique<Rendezvous>(grid->DpGroup(grid->RankOf({0, pp, tp}))));
    }
  }

  RP_ASSIGN_OR_RETURN(auto cluster,
                      Cluster::Create({.num_devices = world,
                                       .devices_per_node = o.placement.devices_per_node,
                                       .clock = clock,
                                       .tracer = o.tracer,
                                       .faults = o.faults,
                                       .watchdog_timeout = o.watchdog_timeout}));
  // A failure anywhere aborts every communicator, so no rank stays blocked in comm until its own
  // timeout (the run ends within watchdog timeout + 1 s).
  std::atomic<bool> done{false};
  std::thread monitor([&] {
    while (!done.load(std::memory_order_acquire)) {
      if (cluster->watchdog().WaitForFailure(std::chrono::milliseconds(20))) {
        const absl::Status s = cluster->watchdog().status();
        for (auto* v : {&pp_act, &pp_grad, &tp_comm, &dp_comm}) {
          for (auto& c : *v) c->Abort(s);
        }
        return;
      }
    }
  });
  if (real_clock) real_clock->ResetEpoch();
  const auto w0 = std::chrono::steady_clock::now();
  absl::Status run = cluster->Run([&](Device& dev) -> absl::Status {
    Dev& d = devs[static_cast<size_t>(dev.rank())];
    // Nothing escapes a device thread: an exception (a failing kernel) becomes an Internal error
    // naming the rank, step and op.
    absl::Status s;
    try {
      s = Body(dev);
    } catch (const std::exception& e) {
      d.waiting.clear();  // it failed by itself
      s = absl::InternalError(absl::StrCat("rank ", d.rank, " step ", d.cur_step, " op ",
                                           OpName(d, d.cur_op), ": exception in the device thread: ",
                                           e.what()));
    } catch (...) {
      d.waiting.clear();
      s = absl::InternalError(absl::StrCat("rank ", d.rank, " step ", d.cur_step, " op ",
                                           OpName(d, d.cur_op),
                                           ": unknown exception in the device thread"));
    }
    if (!s.ok()) {
      const bool awaits_comm =
          d.cur_op >= 0 &&
          o.program.ranks[static_cast<size_t>(d.coord.pp)][static_cast<size_t>(d.cur_op)].kind ==
              OpKind::kOptimizerStep;
      NoteError({.rank = d.rank, .step = d.cur_step, .op = d.cur_op, .op_name = OpName(d, d.cur_op),
                 .waiting = d.waiting, .status = s, .awaits_comm = awaits_comm});
    }
    return s;
  });
  const auto w1 = std::chrono::steady_clock::now();
  done.store(true, std::memory_order_release);
  monitor.join();
  if (!run.ok()) return Fail(run, w0);

  RunResult res;
  res.steps = records;
  res.virtual_time = o.virtual_time;
  res.time_scale = o.time_scale;
  res.wall_seconds = std::chrono::duration<double>(w1 - w0).count();
  res.prediction = pred;
  res.faults = cluster->faults().Describe();
  for (const Dev& x : devs) {
    for (const auto& [src, v] : x.slow_in) {
      res.slow_links.push_back({.src = src, .dst = x.rank, .first_step = v.first,
                                .factor = v.second});
    }
  }
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  };
  std::vector<double> meas, mod;
  for (const StepRecord& r : records) {
    meas.push_back(r.measured_ms);
    mod.push_back(r.modeled_ms);
    res.max_replica_divergence = std::max(res.max_replica_divergence, r.replica_divergence);
  }
  // Jitter draws differ per step (a hash of the device's running compute-op index): each step is
  // then predicted with its own draws, as the devices ran it.
  std::vector<Prediction> step_pred;
  if (o.faults.jitter.max_fraction > 0) {
    const FaultInjector& inj = cluster->faults();
    std::vector<int> ops_per_step(static_cast<size_t>(world), 0);
    for (int r = 0; r < world; ++r) {
      for (const Op& op : o.program.ranks[static_cast<size_t>(grid->CoordOf(r).pp)]) {
        ops_per_step[static_cast<size_t>(r)] += IsDeviceCompute(op.kind);
      }
    }
    for (size_t k = 0; k < records.size(); ++k) {
      PredictOptions pk = popts;
      pk.compute_op_factor = [&inj, &ops_per_step, k](int rank, int i) {
        return inj.ComputeFactor(
            rank, static_cast<int64_t>(k) * ops_per_step[static_cast<size_t>(rank)] + i);
      };
      RP_ASSIGN_OR_RETURN(Prediction p, Predict(o.program, *grid, o.cost, pk));
      step_pred.push_back(std::move(p));
    }
  }
  std::vector<double> pred_ms;
  for (size_t k = 0; k < records.size(); ++k) {
    const Nanos t = step_pred.empty() ? pred.step_time : step_pred[k].step_time;
    res.steps[k].predicted_ms = ToMillis(t);
    pred_ms.push_back(ToMillis(t));
  }
  res.measured_step_ms = median(meas);
  res.modeled_step_ms = median(mod);
  res.predicted_step_ms = median(pred_ms);
  res.fidelity = Fidelity(FromMillis(res.measured_step_ms), FromMillis(res.predicted_step_ms));
  RP_ASSIGN_OR_RETURN(const Nanos t1, SingleDeviceTime(o.program, o.grid, o.cost));
  res.t1_ms = ToMillis(t1);
  const Scaling sc = ComputeScaling(t1, FromMillis(res.measured_step_ms), world);
  res.speedup = sc.speedup;
  res.efficiency = sc.efficiency;
  res.predicted_speedup = pred.speedup;
  res.final_loss = records.back().loss;
  res.final_accuracy = records.back().accuracy;
  res.chance_accuracy = data->MajorityFraction(Split::kTest);
  // The median step (by measured time) gives the per-device metrics.
  size_t med = 0;
  {
    std::vector<size_t> idx(records.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::sort(idx.begin(), idx.end(),
              [&](size_t a, size_t b) { return records[a].measured_ms < records[b].measured_ms; });
    med = idx[idx.size() / 2];
  }
  res.timeline_step = static_cast<int>(med);
  if (!step_pred.empty()) {
    res.prediction = step_pred[med];  // the median step's own prediction
    res.predicted_speedup = res.prediction.speedup;
  }
  for (int r = 0; r < world; ++r) {
    const Dev& x = devs[static_cast<size_t>(r)];
    const Device& dv = cluster->device(r);
    res.timelines.push_back(x.steps[med].timeline);
    DeviceReport rep;
    rep.rank = r;
    rep.coord = x.coord;
    rep.device = grid->DeviceOf(r);
    rep.node = grid->NodeOf(r);
    const DeviceMetrics& mt = x.steps[med].metrics;
    rep.busy_ms = ToMillis(mt.busy);
    rep.bubble_total = mt.bubble_total;
    rep.bubble_ideal = mt.bubble_ideal;
    rep.comm_ms = ToMillis(mt.comm);
    rep.exposed_comm_ms = ToMillis(mt.exposed_comm);
    rep.overlap = mt.overlap;
    rep.peak_activation_bytes = dv.memory().peak(MemoryKind::kActivations);
    const int pipe = x.coord.dp * T + x.coord.tp;
    rep.p2p_bytes = pp_act[static_cast<size_t>(pipe)]->rank(x.coord.pp).stats().total_bytes() +
                    pp_grad[static_cast<size_t>(pipe)]->rank(x.coord.pp).stats().total_bytes();
    rep.tp_bytes =
        tp_comm[static_cast<size_t>(x.coord.dp * P + x.coord.pp)]->rank(x.coord.tp).stats().total_bytes();
    rep.dp_bytes =
        dp_comm[static_cast<size_t>(x.coord.pp * T + x.coord.tp)]->rank(x.coord.dp).stats().total_bytes();
    rep.wire_bytes = rep.p2p_bytes + rep.tp_bytes + rep.dp_bytes;
    const rp::DeviceStats& st = dv.stats();
    rep.compute_ops = st.compute_ops;
    rep.overruns = st.overruns;
    rep.overrun_ms = ToMillis(st.overrun_time);
    LatenessStats lat = st.lateness[0];
    lat.Merge(st.lateness[1]);
    rep.lateness_p50_ms = ToMillis(lat.Quantile(0.5));
    rep.lateness_p99_ms = ToMillis(lat.Quantile(0.99));
    rep.lateness_max_ms = ToMillis(lat.max());
    res.lateness.Merge(lat);
    res.overruns += st.overruns;
    res.devices.push_back(rep);
  }
  if (real_clock) {
    res.clock_waits = real_clock->waits();
    res.clock_crowded_waits = real_clock->crowded_waits();
  }

  if (o.run_reference) {
    ReferenceOptions ro{.model = o.model, .layout = layout, .optimizer = o.optimizer,
                        .num_stages = 1, .tp = 1, .layers_per_stage = {}};
    RP_ASSIGN_OR_RETURN(auto ref, ReferenceTrainer::Create(ro, &*data));
    res.max_loss_rel_diff = 0;
    for (StepRecord& r : res.steps) {
      RP_ASSIGN_OR_RETURN(StepResult sr, ref->Step());
      r.reference_loss = sr.loss;
      r.loss_rel_diff = std::fabs(r.loss - sr.loss) / std::max(std::fabs(sr.loss), 1e-30);
      res.max_loss_rel_diff = std::max(res.max_loss_rel_diff, r.loss_rel_diff);
    }
  }
  return res;
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
const ParallelGrid& Executor::grid() const { return *impl_->grid; }
int Executor::committed_steps() const { return impl_->committed; }
const RunFailure* Executor::failure() const {
  return impl_->failure.has_value() ? &*impl_->failure : nullptr;
}
absl::StatusOr<std::vector<float>> Executor::Parameters(int rank, int chunk) const {
  if (rank < 0 || rank >= impl_->world) {
    return absl::OutOfRangeError(absl::StrCat("executor: Parameters: rank ", rank,
                                              " out of range [0, ", impl_->world, ")"));
  }
  const auto& stages = impl_->devs[static_cast<size_t>(rank)].stages;
  if (chunk < 0 || static_cast<size_t>(chunk) >= stages.size()) {
    return absl::OutOfRangeError(absl::StrCat("executor: Parameters: chunk ", chunk,
                                              " out of range [0, ", stages.size(), ")"));
  }
  const std::span<const float> w = std::as_const(*stages[static_cast<size_t>(chunk)]).params();
  return std::vector<float>(w.begin(), w.end());
}

}  // namespace rp::schedule
