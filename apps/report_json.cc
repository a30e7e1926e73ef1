// BuildReport: the JSON report (schema ringpipe-report/2, docs/report.md).
#include <algorithm>
#include <thread>
#include <cmath>
#include <memory>

#include "absl/strings/str_join.h"
#include "apps/host.h"
#include "apps/malloc_tunables.h"
#include "apps/report.h"
#include "schedule/cost_model.h"
#include "schedule/metrics.h"
#include "schedule/program.h"

namespace rp::apps {
namespace {

using json = nlohmann::json;

double Ms(Nanos t) { return ToMillis(t); }

// NaN is not JSON: write null.
json Num(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

json LinkJson(const LinkParams& p) {
  return {{"alpha_us", static_cast<double>(p.alpha.count()) / 1e3},
          {"bandwidth_gbps", p.bandwidth_gbps},
          {"overhead_us", static_cast<double>(p.overhead.count()) / 1e3}};
}

std::string PlacementOrder(const schedule::Placement& p) {
  std::vector<std::string> names;
  for (schedule::Dim d : p.order) {
    names.emplace_back(d == schedule::Dim::kDp ? "dp" : d == schedule::Dim::kPp ? "pp" : "tp");
  }
  return absl::StrJoin(names, ",");
}

// The timing figures of one device on one timeline (the same keys on every timeline).
json Figures(const schedule::TimelineFigures& f) {
  return {{"busy_ms", f.busy_ms},         {"bubble_total", f.bubble_total},
          {"bubble_ideal", f.bubble_ideal}, {"comm_ms", f.comm_ms},
          {"exposed_comm_ms", f.exposed_comm_ms}, {"peer_wait_ms", f.peer_wait_ms},
          {"overlap", f.overlap},
          // The EP all-to-alls' share of exposed_comm_ms and peer_wait_ms (the same step's).
          {"ep_peer_wait_ms", f.ep_peer_wait_ms}, {"ep_exposed_comm_ms", f.ep_exposed_comm_ms},
          // Measured: waits past their data's modeled arrival (the host woke the device late); in
          // neither exposed_comm_ms nor peer_wait_ms. 0 on the emulated and predicted timelines.
          {"host_late_ms", f.host_late_ms}};
}

// Modeled bytes per step and modeled peak activations, added to a timeline's figures.
struct ModeledBytes {
  uint64_t wire = 0, p2p = 0, tp = 0, dp = 0, ep = 0;
};
void AddModeledBytes(json& j, const ModeledBytes& b, uint64_t peak_act) {
  j["modeled_wire_bytes"] = b.wire;
  j["modeled_p2p_bytes"] = b.p2p;
  j["modeled_tp_bytes"] = b.tp;
  j["modeled_dp_bytes"] = b.dp;
  j["modeled_ep_bytes"] = b.ep;
  j["modeled_peak_activation_bytes"] = peak_act;
}

json PipelineJson(const schedule::PipelineFigures& p) {
  return {{"makespan_ms", Ms(p.makespan)},
          {"max_span_ms", Ms(p.max_span)},
          {"makespan_bubble_ms", Ms(p.makespan_bubble)},
          {"span_bubble_ms", Ms(p.span_bubble)}};
}

// One interval as a timeline entry (docs/report.md "timeline"), or null when it draws nothing:
// compute ops, TP and gradient all-reduces, and the transfer part of waits (exposed communication).
// A measured interval's host lateness (after a wait's transfer, after a compute op's work) is idle.
json TimelineEntry(const std::vector<schedule::Op>& list, int num_chunks, const schedule::OpInterval& iv,
                   bool wall) {
  const schedule::Op* op =
      iv.op >= 0 && static_cast<size_t>(iv.op) < list.size() ? &list[static_cast<size_t>(iv.op)] : nullptr;
  Nanos start = wall ? iv.wall_start : iv.start;
  Nanos end = wall ? iv.wall_end : iv.end;
  const Nanos transfer = wall ? iv.wall_transfer : iv.transfer;
  const Nanos late = wall ? iv.wall_late : Nanos(0);
  const char* kind = "compute";
  const char* name = op != nullptr ? schedule::OpKindName(op->kind) : "";
  int mb = op != nullptr ? op->micro_batch : -1;
  int chunk = op != nullptr ? op->chunk : -1;
  switch (iv.kind) {
    case schedule::IntervalKind::kCompute:
      end -= late;
      if (op != nullptr && op->kind == schedule::OpKind::kForwardBackward) {
        // The two parts of an F&B: its forward, then its backward (detail 1).
        name = iv.detail == 1 ? "B" : "F";
        if (iv.detail == 1) {
          mb = op->backward_micro_batch;
          chunk = op->backward_chunk;
        }
      }
      break;
    case schedule::IntervalKind::kOptimizer:
      end -= late;
      name = "Opt";
      break;
    case schedule::IntervalKind::kSend: return nullptr;
    case schedule::IntervalKind::kRecv:
    case schedule::IntervalKind::kGradWait:
      end -= late;
      start = std::max(start, end - transfer);  // peer wait is bubble, not communication
      kind = "wait";
      break;
    case schedule::IntervalKind::kTpAllReduce:
      end -= late;
      kind = "tp_allreduce";
      break;
    case schedule::IntervalKind::kEpAllToAll:
      end -= late;
      start = std::max(start, end - transfer);  // its peer wait (the EP straggler) is bubble
      kind = "ep_alltoall";
      break;
    case schedule::IntervalKind::kGradAllReduce: kind = "grad_allreduce"; break;
  }
  if (end <= start) return nullptr;
  json e = {{"kind", kind}, {"op", name}, {"start_ms", Ms(start)}, {"end_ms", Ms(end)}};
  if (mb >= 0) e["mb"] = mb;
  if (num_chunks > 1 && chunk >= 0) e["chunk"] = chunk;
  return e;
}

// A timeline's device rows, each made when it is read: `timeline_of(rank)` gives the intervals.
LazyJson TimelineDevices(const Plan& plan, int rows,
                         std::function<const std::vector<schedule::OpInterval>*(int)> timeline_of, bool wall) {
  return LazyJson::Array(static_cast<size_t>(rows), [&plan, timeline_of = std::move(timeline_of), wall](size_t i) {
    const int rank = static_cast<int>(i);
    const std::vector<schedule::OpInterval>* ivs = timeline_of(rank);
    if (ivs == nullptr) return json();
    const schedule::Program& prog = plan.executor.program;
    const schedule::Coord c = plan.grid.CoordOf(rank);
    json ops = json::array();
    for (const schedule::OpInterval& iv : *ivs) {
      json e = TimelineEntry(prog.ranks[static_cast<size_t>(c.pp)], prog.num_chunks, iv, wall);
      if (!e.is_null()) ops.push_back(std::move(e));
    }
    return json{{"rank", rank}, {"dp", c.dp}, {"pp", c.pp}, {"tp", c.tp}, {"ops", std::move(ops)}};
  });
}

// The "timeline" section: the first replica's devices (dp = 0), at most kMaxTimelineRows of them;
// measured from the wall stamps, emulated and predicted from the modeled times.
LazyJson TimelineJson(const Plan& plan, const schedule::Prediction& pred, const schedule::RunResult* run) {
  const int rows = std::min(plan.grid.shape().pp * plan.grid.shape().tp, kMaxTimelineRows);
  json t;
  t["ranks"] = json::array();
  for (int rank = 0; rank < rows; ++rank) t["ranks"].push_back(rank);
  LazyJson::Members panels;
  if (run != nullptr && !run->timelines.empty()) {
    const size_t step = static_cast<size_t>(run->timeline_step);
    const schedule::StepRecord* rec = step < run->steps.size() ? &run->steps[step] : nullptr;
    auto of = [run](int rank) {
      return static_cast<size_t>(rank) < run->timelines.size() ? &run->timelines[static_cast<size_t>(rank)] : nullptr;
    };
    // The median step's intervals, or the last step's when the run did not keep every step's.
    const bool median = run->timeline_step == run->median_step;
    // On the virtual clock the measured rows are the emulated times (no thread reads a wall clock).
    panels.emplace_back("measured", LazyJson::Object({{"step", run->timeline_step},
                                                      {"median", median},
                                                      {"clock", run->virtual_time ? "virtual" : "real"},
                                                      {"step_ms", rec != nullptr ? rec->measured_ms : 0.0}},
                                                     {{"devices", TimelineDevices(plan, rows, of, /*wall=*/true)}}));
    panels.emplace_back("emulated", LazyJson::Object({{"step", run->timeline_step},
                                                      {"median", median},
                                                      {"step_ms", rec != nullptr ? rec->emulated_ms : 0.0}},
                                                     {{"devices", TimelineDevices(plan, rows, of, /*wall=*/false)}}));
  }
  if (!pred.timelines.empty()) {
    auto of = [&plan, &pred](int rank) { return &pred.Timeline(plan.grid, rank); };
    panels.emplace_back("predicted", LazyJson::Object({{"step_ms", Ms(pred.step_time)}},
                                                      {{"devices", TimelineDevices(plan, rows, of, /*wall=*/false)}}));
  }
  return LazyJson::Object(std::move(t), std::move(panels));
}

// Config-derived sections: layout, schedule, cost model, links, collectives, what bytes mean.
void DescribeSetup(const RunConfig& cfg, const Plan& plan, json& r) {
  const schedule::ParallelGrid& grid = plan.grid;
  const schedule::ExecutorOptions& ex = plan.executor;
  r["layout"] = {{"dp", cfg.dp}, {"pp", cfg.pp}, {"tp", cfg.tp}, {"ep", cfg.ep}, {"world", grid.world_size()},
                 {"devices_per_node", grid.placement().devices_per_node}, {"nodes", grid.num_nodes()},
                 {"placement", PlacementOrder(grid.placement())}, {"description", grid.ToString()}};
  r["schedule"] = {{"name", schedule::ScheduleName(cfg.schedule)}, {"microbatches", cfg.microbatches},
                   {"chunks", cfg.chunks()}, {"virtual_stages", cfg.virtual_stages},
                   {"microbatch_group", cfg.microbatch_group}, {"pytorch_rounds", cfg.pytorch_rounds},
                   {"fused_fb", cfg.fused_fb}, {"directions", ex.program.num_directions()},
                   {"global_batch", int64_t{cfg.dp} * cfg.microbatches * cfg.microbatch_size}};
  json stages = json::array();
  for (int s = 0; s < cfg.pp; ++s) {
    const schedule::StageCost& c = ex.cost.Of(s);
    stages.push_back({{"forward_ms", Ms(c.forward)}, {"backward_ms", Ms(c.backward)},
                      {"weight_grad_ms", Ms(c.weight_grad)}, {"optimizer_ms", Ms(c.optimizer)},
                      {"modeled_activation_bytes", c.activation_bytes}});
  }
  r["cost_model"] = {{"kind", CostModelName(cfg.cost_model)}, {"description", plan.cost_description},
                     {"stages", stages}};
  r["links"] = {{"name", cfg.link}, {"devices_per_node", ex.links.devices_per_node},
                {"nics_per_node", ex.links.nics_per_node}, {"intra_node", LinkJson(ex.links.intra_node)},
                {"inter_node", LinkJson(ex.links.inter_node)}};
  size_t buckets = 0;
  for (const schedule::RankPlan& rp : plan.execution.ranks) buckets = std::max(buckets, rp.bucket_order.size());
  // The largest group any bucket is all-reduced over (replica 0's ranks stand for every replica's):
  // 1 when no device has a copy of its gradients to average with (dp 1, one direction).
  size_t largest_group = 0;
  for (int pp = 0; pp < cfg.pp; ++pp) {
    for (int tp = 0; tp < cfg.tp; ++tp) {
      const int rank = grid.RankOf({.dp = 0, .pp = pp, .tp = tp});
      const schedule::RankPlan& rp = plan.execution.ranks[static_cast<size_t>(pp)];
      for (const auto& [chunk, b] : rp.bucket_order) {
        int index = 0;
        const schedule::BucketPlan& bucket = rp.chunks[static_cast<size_t>(chunk)].buckets[static_cast<size_t>(b)];
        largest_group = std::max(largest_group, plan.execution.BucketGroup(rank, chunk, bucket, &index).size());
      }
    }
  }
  r["collectives"] = {{"codec", comm::CodecName(cfg.codec)}, {"segment_bytes", cfg.segment_bytes},
                      {"bucket_mb", cfg.bucket_mb}, {"buckets_per_device", buckets},
                      {"largest_group", largest_group}, {"overlap", cfg.overlap},
                      {"reduce_gbps", cfg.reduce_gbps}};
  uint64_t activation = 0;
  for (const auto& ops : ex.program.ranks) {
    for (const auto& op : ops) {
      if (op.kind == schedule::OpKind::kSendAct) activation = std::max(activation, op.bytes);
    }
  }
  if (ex.model.moe.enabled()) {
    const MoeConfig& moe = ex.model.moe;
    r["moe"] = {{"layers", moe.layers}, {"experts", moe.experts}, {"top_k", moe.top_k},
                {"expert_hidden", moe.expert_hidden}, {"capacity_factor", moe.capacity_factor},
                {"aux_loss", moe.aux_loss}, {"router_skew", moe.router_skew},
                {"init", MoeInitName(moe.init)}, {"ep", ex.ep},
                {"ep_groups", plan.execution.has_ep_exchanges() ? plan.execution.num_ep_groups() : 0},
                {"modeled_ep_row_bytes", plan.execution.EpRowElements(ex.model.in_dim(moe.layers.front())) * 4},
                {"ep_codec", comm::CodecName(ex.ep_codec)}};
  }
  r["bytes"] = {{"modeled", absl::StrCat("sizes of ", plan.modeled_sizes, ": what the fabric times")},
                {"real", "the real MLP's buffers in this process"},
                {"modeled_activation_message_bytes", activation}};
}

json StepsJson(const std::vector<schedule::StepRecord>& records) {
  json steps = json::array();
  for (const schedule::StepRecord& s : records) {
    steps.push_back({{"step", s.step}, {"loss", Num(s.loss)}, {"accuracy", Num(s.train_accuracy)},
                     {"test_accuracy", Num(s.accuracy)}, {"test_loss", Num(s.test_loss)},
                     {"test_samples", s.test_samples}, {"measured_ms", s.measured_ms}, {"emulated_ms", s.emulated_ms},
                     {"predicted_ms", s.predicted_ms}, {"replica_divergence", s.replica_divergence},
                     {"reference_loss", Num(s.reference_loss)}});
    if (!s.moe.empty()) {
      json blocks = json::array();
      for (const schedule::StepRecord::MoeBlockRecord& b : s.moe) {
        blocks.push_back({{"layer", b.layer}, {"expert_tokens", b.expert_tokens}, {"dropped", b.dropped}});
      }
      steps.back()["moe"] = std::move(blocks);
    }
  }
  return steps;
}

// A run's step records, training figures and three-timeline summary.
void DescribeRun(const schedule::RunResult& run, const schedule::Prediction& pred, int world, json& r) {
  r["step_time_ms"] = {{"measured", run.measured_step_ms}, {"emulated", run.emulated_step_ms},
                       {"predicted", run.predicted_step_ms}};
  r["fidelity"] = {{"host", Num(run.fidelity_host)}, {"model", Num(run.fidelity_model)}};
  const schedule::Scaling emu = schedule::ComputeScaling(pred.single_device_time,
                                                         FromMillis(run.emulated_step_ms), world);
  const schedule::Scaling pre = schedule::ComputeScaling(pred.single_device_time,
                                                         FromMillis(run.predicted_step_ms), world);
  r["speedup"] = {{"measured", Num(run.speedup)}, {"emulated", Num(emu.speedup)}, {"predicted", pre.speedup}};
  r["efficiency"] = {{"measured", Num(run.efficiency)}, {"emulated", Num(emu.efficiency)},
                     {"predicted", pre.efficiency}};
  // The median step's, as every headline figure (run.timelines may hold the last step instead).
  r["pipeline"] = {{"measured", PipelineJson(run.measured_pipeline)},
                   {"emulated", PipelineJson(run.emulated_pipeline)},
                   {"predicted", PipelineJson({pred.makespan, pred.max_span, pred.makespan_bubble,
                                               pred.span_bubble})}};
  r["replica_divergence"] = run.max_replica_divergence;
  r["training"] = {{"final_loss", Num(run.final_loss)}, {"final_test_accuracy", Num(run.final_accuracy)},
                   {"final_test_samples", run.steps.empty() ? int64_t{0} : run.steps.back().test_samples},
                   {"chance_accuracy", run.chance_accuracy},
                   {"max_loss_rel_diff_vs_fp32_reference", Num(run.max_loss_rel_diff)}};
  r["steps"] = StepsJson(run.steps);
}

// The "host" section: what the run cost this machine (docs/report.md).
json HostJson(const schedule::RunResult& run, const HostUsage* host) {
  uint64_t device_ops = 0;
  double overrun_ms = 0;
  for (const auto& d : run.devices) {
    device_ops += d.compute_ops;
    overrun_ms += d.overrun_ms;
  }
  const int world = static_cast<int>(std::max<size_t>(1, run.devices.size()));
  const ThreadLimit limit = MachineThreadLimit();
  const MallocTunables tunables = MallocTunablesInEffect();
  json h = {{"clock", run.virtual_time ? "virtual" : "real"}, {"virtual_time", run.virtual_time},
            // No wall clock paces the virtual clock: no time scale (null).
            {"time_scale", run.virtual_time ? json(nullptr) : json(run.time_scale)},
            {"wall_seconds", run.wall_seconds}, {"device_ops", device_ops},
            {"device_ops_per_second", run.wall_seconds > 0 ? static_cast<double>(device_ops) / run.wall_seconds : 0.0},
            {"fabric_messages", run.fabric_messages},
            {"fabric_messages_per_second",
             run.wall_seconds > 0 ? static_cast<double>(run.fabric_messages) / run.wall_seconds : 0.0},
            {"threads_per_device", ThreadsPerDevice(run.virtual_time)},
            {"thread_policy", run.thread_policy},
            {"malloc_tunables", {{"value", tunables.value}, {"source", tunables.source}}},
            {"first_step_populated_bytes", run.first_step_populated_bytes},
            {"thread_limit", {{"threads", limit.threads}, {"source", limit.source}}},
            {"max_run_devices", MaxRunDevices(run.virtual_time)},
            {"overruns", run.overruns}, {"overrun_ms", overrun_ms},
            {"wait_lateness_ms", {{"count", run.lateness.count()}, {"mean", Ms(run.lateness.mean())},
                                  {"p50", Ms(run.lateness.Quantile(0.5))}, {"p99", Ms(run.lateness.Quantile(0.99))},
                                  {"max", Ms(run.lateness.max())}}},
            {"clock_waits", {{"total", run.clock_waits}, {"crowded", run.clock_crowded_waits}}},
            {"faults", run.faults}};
  if (host != nullptr) {
    const double per_device =
        std::max(0.0, host->peak_rss_bytes - host->rss_before_bytes - host->model_buffer_bytes) / world;
    h["threads"] = host->threads;
    h["peak_rss_bytes"] = host->peak_rss_bytes;
    h["rss_before_run_bytes"] = host->rss_before_bytes;
    h["model_buffer_bytes"] = host->model_buffer_bytes;
    h["rss_per_device_bytes"] = per_device;
    if (!host->time_scale_choice.is_null()) h["time_scale_choice"] = host->time_scale_choice;
  }
  return h;
}

ModeledBytes PredictedBytes(const Plan& plan, const schedule::Prediction& pred,
                            const std::vector<schedule::PredictedWire>& wire, int rank) {
  const size_t r = static_cast<size_t>(rank);
  const schedule::PredictedWire& w = wire[static_cast<size_t>(plan.grid.CoordOf(rank).pp)];
  ModeledBytes b{.wire = w.total(), .p2p = w.p2p, .tp = w.tp, .dp = w.dp};
  // EP all-to-alls: what the predictor's fabric timed beyond the closed-form p2p, TP and DP bytes.
  if (plan.execution.has_ep_exchanges() && r < pred.modeled_wire_bytes.size()) {
    b.wire = std::max(b.wire, pred.modeled_wire_bytes[r]);
    b.ep = b.wire - w.total();
  }
  return b;
}

json PredictedDevice(const Plan& plan, const schedule::Prediction& pred,
                     const std::vector<schedule::PredictedWire>& wire, int rank) {
  const size_t r = static_cast<size_t>(rank);
  json p = Figures(schedule::FiguresOf(pred.devices[r]));
  AddModeledBytes(p, PredictedBytes(plan, pred, wire, rank),
                  r < pred.peak_activation_bytes.size() ? pred.peak_activation_bytes[r] : 0);
  if (r < pred.peak_in_flight.size()) p["peak_in_flight"] = pred.peak_in_flight[r];
  return p;
}

// A run's device: the measured figures, its emulated object, and its real buffers and host figures
// (the timing figures, the EP all-to-alls' share included, of the median step).
void AddRunDevice(const schedule::DeviceReport& m, uint64_t steps, json& d) {
  const json measured = Figures(m.measured);
  for (auto it = measured.begin(); it != measured.end(); ++it) d[it.key()] = it.value();
  // Per step: p2p, TP and DP bytes are the same every step; the EP all-to-alls' follow the step's
  // routing, so they are the median step's — the step the predicted figures are of.
  const ModeledBytes b{.wire = (m.modeled_wire_bytes - m.modeled_ep_bytes) / steps + m.median_step_modeled_ep_bytes,
                       .p2p = m.modeled_p2p_bytes / steps,
                       .tp = m.modeled_tp_bytes / steps,
                       .dp = m.modeled_dp_bytes / steps,
                       .ep = m.median_step_modeled_ep_bytes};
  // Bytes and memory do not depend on the clock: the measured figures are the run's fabric counts.
  AddModeledBytes(d, b, m.modeled_peak_activation_bytes);
  json emulated = Figures(m.emulated);
  AddModeledBytes(emulated, b, m.modeled_peak_activation_bytes);
  d["emulated"] = std::move(emulated);
  d["real"] = {{"wire_bytes", (m.wire_bytes - m.ep_bytes) / steps + m.median_step_ep_bytes},
               {"p2p_bytes", m.p2p_bytes / steps},
               {"tp_bytes", m.tp_bytes / steps},
               {"dp_bytes", m.dp_bytes / steps},
               {"ep_bytes", m.median_step_ep_bytes},
               {"peak_activation_bytes", m.peak_activation_bytes}};
  d["host"] = {{"compute_ops", m.compute_ops}, {"overruns", m.overruns}, {"overrun_ms", m.overrun_ms},
               {"lateness_p50_ms", m.lateness_p50_ms}, {"lateness_p99_ms", m.lateness_p99_ms},
               {"lateness_max_ms", m.lateness_max_ms}};
}

}  // namespace

std::string DumpJson(const json& j, int indent) {
  return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

LazyJson BuildLazyReport(const RunConfig& cfg, const Plan& plan, const schedule::Prediction& pred,
                         const schedule::RunResult* run, const HostUsage* host, bool with_timeline) {
  const schedule::ParallelGrid& grid = plan.grid;
  json r;
  r["schema"] = kReportSchema;
  r["mode"] = run != nullptr ? "run" : "predict";
  r["config"] = ConfigToJson(cfg);
  // Where the config came from, beside it: the section's own "config" is null so that it loads back.
  r["config_file"] = cfg.config_file.empty() ? json(nullptr) : json(cfg.config_file);
  DescribeSetup(cfg, plan, r);
  r["t1_ms"] = Ms(pred.single_device_time);
  if (r.contains("moe")) {
    // A prediction without a run's routing sizes the EP all-to-alls by balanced routing: say so.
    r["moe"]["balanced_routing_assumed"] = pred.balanced_routing_assumed;
  }
  // How much of the layout the predictor played (schedule/predictor.h "Replica folding").
  const schedule::GridShape shape = grid.shape();
  r["predictor"] = {{"replicas_played", pred.replicas_played},
                    {"devices_played", static_cast<int64_t>(pred.replicas_played) * shape.pp * shape.tp},
                    {"folded", pred.folded},
                    {"not_folded_because", pred.folded ? json(nullptr)
                                                       : json(schedule::FoldBlockerText(pred.fold_blocker))}};
  if (run != nullptr) {
    r["status"] = "ok";
    DescribeRun(*run, pred, grid.world_size(), r);
    r["host"] = HostJson(*run, host);
  } else {
    r["step_time_ms"] = {{"predicted", Ms(pred.step_time)}};
    r["speedup"] = {{"predicted", pred.speedup}};
    r["efficiency"] = {{"predicted", pred.efficiency}};
    r["pipeline"] = {{"predicted", PipelineJson({pred.makespan, pred.max_span, pred.makespan_bubble,
                                                 pred.span_bubble})}};
  }
  // Each device's object is made when it is read (BuildLazyReport's comment, apps/report.h).
  auto wire = std::make_shared<const std::vector<schedule::PredictedWire>>(PredictWireBytes(plan));
  const uint64_t steps = static_cast<uint64_t>(std::max(1, cfg.steps));
  auto device = [&plan, &pred, run, wire, steps](size_t i) {
    const int rank = static_cast<int>(i);
    const schedule::Coord c = plan.grid.CoordOf(rank);
    json d = {{"rank", rank}, {"dp", c.dp}, {"pp", c.pp}, {"tp", c.tp}, {"device", plan.grid.DeviceOf(rank)},
              {"node", plan.grid.NodeOf(rank)}};
    if (run != nullptr && i < run->devices.size()) AddRunDevice(run->devices[i], steps, d);
    d["predicted"] = PredictedDevice(plan, pred, *wire, rank);
    return d;
  };
  // A prediction's device as the text's maxima read it (report_text.cc Devices): its predicted
  // bubble, exposed communication and EP figures, without the rest of its object. (A run's
  // devices — tens of thousands at most, and its text reads more of each — are read whole.)
  LazyJson::Element digest;
  if (run == nullptr) {
    digest = [&plan, &pred, wire](size_t i) {
      const schedule::TimelineFigures f = schedule::FiguresOf(pred.devices[i]);
      return json{{"predicted",
                   {{"bubble_total", f.bubble_total}, {"exposed_comm_ms", f.exposed_comm_ms},
                    {"ep_peer_wait_ms", f.ep_peer_wait_ms}, {"ep_exposed_comm_ms", f.ep_exposed_comm_ms},
                    {"modeled_ep_bytes", PredictedBytes(plan, pred, *wire, static_cast<int>(i)).ep}}}};
    };
  }
  LazyJson::Members lazy;
  lazy.emplace_back("devices", LazyJson::Array(static_cast<size_t>(grid.world_size()), std::move(device),
                                               std::move(digest)));
  if (with_timeline) lazy.emplace_back("timeline", TimelineJson(plan, pred, run));
  return LazyJson::Object(std::move(r), std::move(lazy));
}

int ReportStreamThreads() {
  return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
}

json BuildReport(const RunConfig& cfg, const Plan& plan, const schedule::Prediction& pred,
                 const schedule::RunResult* run, const HostUsage* host, bool with_timeline) {
  return BuildLazyReport(cfg, plan, pred, run, host, with_timeline).ToJson();
}

json BuildFailedRunReport(const RunConfig& cfg, const Plan& plan, const schedule::Prediction& pred,
                          const schedule::RunFailure& failure, const HostUsage* host) {
  json r = BuildReport(cfg, plan, pred, nullptr);
  r["mode"] = "run";
  r["status"] = "failed";
  r["failure"] = {{"message", std::string(failure.status.message())},
                  {"code", absl::StatusCodeToString(failure.status.code())},
                  {"rank", failure.rank}, {"step", failure.step}, {"op", failure.op},
                  {"op_name", failure.op_name}, {"missing_peers", failure.missing_peers},
                  {"stuck_ranks", failure.stuck_ranks}, {"committed_steps", failure.committed_steps},
                  {"rolled_back_devices", failure.rolled_back},
                  {"seconds_after_fault", failure.seconds_after_fault}};
  r["steps"] = StepsJson(failure.steps);
  if (host != nullptr) {
    // Which clock and scale the failed run used and why (its committed steps' measured times are
    // the host's at that scale), and what it cost this machine until it failed.
    json h = {{"clock", cfg.virtual_time ? "virtual" : "real"}, {"virtual_time", cfg.virtual_time},
              {"time_scale", cfg.virtual_time ? json(nullptr) : host->time_scale_choice.value("scale", json(nullptr))},
              {"threads", host->threads}, {"peak_rss_bytes", host->peak_rss_bytes},
              {"rss_before_run_bytes", host->rss_before_bytes}, {"model_buffer_bytes", host->model_buffer_bytes}};
    if (!host->time_scale_choice.is_null()) h["time_scale_choice"] = host->time_scale_choice;
    r["host"] = std::move(h);
  }
  return r;
}

}  // namespace rp::apps
