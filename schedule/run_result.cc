// RunResult (executor_impl.h): step times on the three timelines, fidelities, per-device reports
// of the median step (the headline step), bytes and memory, host figures, the per-step predictions
// and the single-device reference.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "runtime/model/reference_trainer.h"
#include "runtime/status_macros.h"
#include "runtime/thread.h"
#include "schedule/executor_impl.h"

namespace rp::schedule {
namespace {

uint64_t Total(const comm::WireStats& s) { return s.total_bytes(); }

}  // namespace

absl::StatusOr<std::vector<double>> Executor::Impl::ReferenceLosses(
    const std::atomic<bool>& cancel) const {
  ReferenceOptions ro;  // one device, balanced, rank-order rings
  ro.model = o.model;
  ro.layout = layout;
  ro.optimizer = o.optimizer;
  ro.ep = o.ep;
  // With EP, the replicas of a group hold E/ep experts each (rows move between them serially)
  // rather than all E each with only replica 0's in use: the same bits as the single-device
  // reference (canonical order; EpTraining.ShardedExpertsAreBitIdenticalToTheSingleDeviceReference)
  // in 1/ep of the experts' memory — the unused copies were 1.3 of the 2.1 GB a MoE run of 64
  // experts over ep 8 grew by.
  ro.shard_experts = o.ep > 1;
  RP_ASSIGN_OR_RETURN(auto ref, ReferenceTrainer::Create(ro, &*data));
  std::vector<double> losses;
  for (int step = 0; step < o.steps; ++step) {
    if (cancel.load(std::memory_order_relaxed)) return absl::CancelledError("reference: run failed");
    RP_ASSIGN_OR_RETURN(StepResult sr, ref->Step());
    losses.push_back(sr.loss);
  }
  return losses;
}

absl::StatusOr<Executor::Impl::StepPredictions> Executor::Impl::PredictEachStep(
    const PredictOptions& popts, std::optional<size_t> keep) {
  StepPredictions step_pred;
  const int world = plan->grid.world_size();
  const bool per_step = o.faults.jitter.max_fraction > 0 || !plan->link_faults.empty() ||
                        plan->has_ep_exchanges();
  if (!per_step) return step_pred;
  std::vector<int> ops_per_step(static_cast<size_t>(world), 0);
  for (int r = 0; r < world; ++r) {
    for (const Op& op : o.program.ranks[static_cast<size_t>(plan->grid.CoordOf(r).pp)]) {
      ops_per_step[static_cast<size_t>(r)] += IsDeviceCompute(op.kind);
    }
  }
  // The steps' predictions are independent (each reads the plan, its own routing record and the
  // injector's pure factors): up to 4 at once, on the host's cores, each writing its own slots.
  step_pred.step_time.resize(static_cast<size_t>(o.steps));
  std::vector<absl::Status> status(static_cast<size_t>(o.steps));
  ForSlices(o.steps, /*threads=*/0, /*min_per_slice=*/1, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      PredictOptions pk = popts;
      pk.step = static_cast<int>(k);
      if (o.faults.jitter.max_fraction > 0) {
        pk.compute_op_factor = [this, &ops_per_step, k](int rank, int i) {
          return injector.ComputeFactor(rank, k * ops_per_step[static_cast<size_t>(rank)] + i);
        };
      }
      if (plan->has_ep_exchanges()) pk.routing = &records[static_cast<size_t>(k)].routing;
      absl::StatusOr<Prediction> p = Predict(*plan, pk);
      if (!p.ok()) {
        status[static_cast<size_t>(k)] = p.status();
        continue;
      }
      step_pred.step_time[static_cast<size_t>(k)] = p->step_time;
      if (keep == static_cast<size_t>(k)) step_pred.kept = *std::move(p);
    }
  });
  for (const absl::Status& st : status) RP_RETURN_IF_ERROR(st);
  return step_pred;
}

size_t Executor::Impl::MedianStep() const {
  std::vector<size_t> idx(records.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(),
                   [&](size_t a, size_t b) { return records[a].measured_ms < records[b].measured_ms; });
  return idx[idx.size() / 2];
}

absl::Status CompareWithReference(const absl::StatusOr<std::vector<double>>& reference, RunResult& res) {
  if (!reference.ok()) return reference.status();
  if (reference->size() != res.steps.size()) {
    return absl::InternalError(absl::StrCat("reference: ", reference->size(), " losses for ",
                                            res.steps.size(), " steps"));
  }
  res.max_loss_rel_diff = 0;
  for (size_t k = 0; k < res.steps.size(); ++k) {
    StepRecord& r = res.steps[k];
    r.reference_loss = (*reference)[k];
    r.loss_rel_diff = std::fabs(r.loss - r.reference_loss) / std::max(std::fabs(r.reference_loss), 1e-30);
    // A non-finite loss on either side (the reference diverged alone) is the maximum: std::max
    // would drop a NaN.
    if (std::isnan(r.loss_rel_diff) || r.loss_rel_diff > res.max_loss_rel_diff) {
      if (!std::isnan(res.max_loss_rel_diff)) res.max_loss_rel_diff = r.loss_rel_diff;
    }
  }
  return absl::OkStatus();
}

// Device r's report of the run: its figures on the median step `med` (measured, emulated, predicted),
// its real and modeled bytes by kind, and its host figures (`lat`: both its lateness histograms).
DeviceReport Executor::Impl::DeviceReportOf(const Cluster& cluster, const Prediction& prediction, size_t med,
                                            int r, const LatenessStats& lat) {
  const ParallelGrid& g = plan->grid;
  const DeviceRunner& x = *runners[static_cast<size_t>(r)];
  const Device& dv = cluster.device(r);
  DeviceReport rep;
  rep.rank = r;
  rep.coord = x.coord();
  rep.device = g.DeviceOf(r);
  rep.node = g.NodeOf(r);
  rep.measured = FiguresOf(metrics[med][static_cast<size_t>(r)].measured);
  rep.emulated = FiguresOf(metrics[med][static_cast<size_t>(r)].emulated);
  rep.predicted = FiguresOf(prediction.devices[static_cast<size_t>(r)]);
  rep.peak_activation_bytes = dv.memory().peak(MemoryKind::kActivations);
  rep.modeled_peak_activation_bytes = prediction.peak_activation_bytes[static_cast<size_t>(r)];
  const Coord c = x.coord();
  const comm::WireStats& act = ctx.Pipe(c, false).rank(c.pp).stats();
  const comm::WireStats& grad = ctx.Pipe(c, true).rank(c.pp).stats();
  const comm::WireStats& tps = ctx.Tp(c).rank(c.tp).stats();
  comm::WireStats dps;
  std::vector<int> seen;
  for (int ch = 0; ch < plan->v; ++ch) {
    for (const BucketPlan& b : plan->Chunk(c.pp, ch).buckets) {
      const int id = plan->BucketGroupId(r, ch, b);
      if (std::find(seen.begin(), seen.end(), id) != seen.end()) continue;
      seen.push_back(id);
      int index = 0;
      plan->BucketGroup(r, ch, b, &index);
      const comm::WireStats& w = ctx.Grad(id).rank(index).stats();
      for (int k = 0; k < 4; ++k) dps.collective_bytes[k] += w.collective_bytes[k];
      dps.modeled_bytes += w.modeled_bytes;
    }
  }
  comm::WireStats eps;
  if (plan->has_ep_exchanges()) {
    int index = 0;
    plan->EpGroup(r, &index);
    eps = ctx.Ep(r).rank(index).stats();
    const size_t ur = static_cast<size_t>(r);
    const auto& after = ep_bytes_after[med][ur];
    const std::pair<uint64_t, uint64_t> before =
        med == 0 ? std::pair<uint64_t, uint64_t>{0, 0} : ep_bytes_after[med - 1][ur];
    rep.median_step_ep_bytes = after.first - before.first;
    rep.median_step_modeled_ep_bytes = after.second - before.second;
  }
  rep.p2p_bytes = Total(act) + Total(grad);
  rep.tp_bytes = Total(tps);
  rep.dp_bytes = Total(dps);
  rep.ep_bytes = Total(eps);
  rep.wire_bytes = rep.p2p_bytes + rep.tp_bytes + rep.dp_bytes + rep.ep_bytes;
  rep.modeled_p2p_bytes = act.modeled_bytes + grad.modeled_bytes;
  rep.modeled_tp_bytes = tps.modeled_bytes;
  rep.modeled_dp_bytes = dps.modeled_bytes;
  rep.modeled_ep_bytes = eps.modeled_bytes;
  rep.modeled_wire_bytes = rep.modeled_p2p_bytes + rep.modeled_tp_bytes +
                           rep.modeled_dp_bytes + rep.modeled_ep_bytes;
  const rp::DeviceStats& st = dv.stats();
  rep.compute_ops = st.compute_ops;
  rep.overruns = st.overruns;
  rep.overrun_ms = ToMillis(st.overrun_time);
  rep.lateness_p50_ms = ToMillis(lat.Quantile(0.5));
  rep.lateness_p99_ms = ToMillis(lat.Quantile(0.99));
  rep.lateness_max_ms = ToMillis(lat.max());
  return rep;
}

absl::StatusOr<RunResult> Executor::Impl::Assemble(const Cluster& cluster, const Prediction& pred,
                                                   StepPredictions step_pred,
                                                   double wall_seconds,
                                                   const absl::StatusOr<std::vector<double>>& reference) {
  const ParallelGrid& g = plan->grid;
  const int world = g.world_size();
  // The median step by measured time (of an even count, the slower of the two middle ones — the upper
  // median): one actual step, whose times are the headline step times on all three timelines and
  // which gives the per-device figures and, when its intervals were kept, the timelines (else the
  // last step's) — so a headline never is a value no step had, and the bubble of a device is
  // (headline step − busy) / headline step.
  const size_t med = MedianStep();
  RunResult res;
  res.steps = std::move(records);  // the run is over: its records become the result's
  records.clear();
  res.virtual_time = o.virtual_time;
  res.time_scale = o.time_scale;
  res.wall_seconds = wall_seconds;
  res.threads_at_first_step = threads_at_first_step;
  res.fabric_messages = fabric->committed();
  res.thread_policy = cluster.thread_policy_name();
  for (const auto& r : runners) res.first_step_populated_bytes += r->populated_bytes();
  res.faults = cluster.faults().Describe();
  for (size_t i = 0; i < plan->link_faults.size(); ++i) {
    const LinkFault& f = plan->link_faults[i];
    if (link_fault_seen[i] < 0) continue;  // no message crossed it: it slowed nothing
    res.slow_links.push_back({.src = g.RankAtDevice(f.src), .dst = g.RankAtDevice(f.dst),
                              .first_step = link_fault_seen[i], .factor = f.factor});
  }
  for (size_t k = 0; k < res.steps.size(); ++k) {
    StepRecord& r = res.steps[k];
    r.predicted_ms = ToMillis(step_pred.step_time.empty() ? pred.step_time : step_pred.step_time[k]);
    res.max_replica_divergence = std::max(res.max_replica_divergence, r.replica_divergence);
  }
  res.median_step = static_cast<int>(med);
  res.measured_step_ms = res.steps[med].measured_ms;
  res.emulated_step_ms = res.steps[med].emulated_ms;
  res.predicted_step_ms = res.steps[med].predicted_ms;
  res.fidelity_host = Fidelity(FromMillis(res.measured_step_ms), FromMillis(res.emulated_step_ms));
  res.fidelity_model = Fidelity(FromMillis(res.emulated_step_ms), FromMillis(res.predicted_step_ms));
  res.t1_ms = ToMillis(pred.single_device_time);
  const Scaling sc = ComputeScaling(pred.single_device_time, FromMillis(res.measured_step_ms), world);
  res.speedup = sc.speedup;
  res.efficiency = sc.efficiency;
  res.final_loss = res.steps.back().loss;
  res.final_accuracy = res.steps.back().accuracy;
  res.chance_accuracy = data->MajorityFraction(Split::kTest);
  const size_t tl = kept[med].empty() ? kept.size() - 1 : med;
  res.timeline_step = static_cast<int>(tl);
  res.timelines = kept[tl];
  {
    std::vector<DeviceMetrics> measured, emulated;
    for (const StepMetrics& m : metrics[med]) {
      measured.push_back(m.measured);
      emulated.push_back(m.emulated);
    }
    res.measured_pipeline = ComputePipelineFigures(measured);
    res.emulated_pipeline = ComputePipelineFigures(emulated);
  }
  res.prediction = step_pred.kept.has_value() ? *std::move(step_pred.kept) : pred;
  res.predicted_speedup = res.prediction.speedup;
  for (int r = 0; r < world; ++r) {
    const rp::DeviceStats& st = cluster.device(r).stats();
    LatenessStats lat = st.lateness[0];
    lat.Merge(st.lateness[1]);
    res.devices.push_back(DeviceReportOf(cluster, res.prediction, med, r, lat));
    res.lateness.Merge(lat);
    res.overruns += st.overruns;
  }
  if (ctx.real_clock != nullptr) {
    res.clock_waits = ctx.real_clock->waits();
    res.clock_crowded_waits = ctx.real_clock->crowded_waits();
  }
  if (o.run_reference) RP_RETURN_IF_ERROR(CompareWithReference(reference, res));
  return res;
}

}  // namespace rp::schedule
