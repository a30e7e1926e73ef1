#include "apps/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
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
  return {{"alpha_us", static_cast<double>(p.alpha.count()) / 1e3}, {"bandwidth_gbps", p.bandwidth_gbps}};
}

std::string PlacementOrder(const schedule::Placement& p) {
  std::vector<std::string> names;
  for (schedule::Dim d : p.order) names.emplace_back(d == schedule::Dim::kDp ? "dp" : d == schedule::Dim::kPp ? "pp" : "tp");
  return absl::StrJoin(names, ",");
}

// --- Gantt ---

struct Bar {
  int64_t start = 0, end = 0;  // ns, relative to the step start
  char letter = 'F';
  int micro_batch = -1;
};

std::string DrawRows(const std::vector<std::pair<std::string, std::vector<Bar>>>& rows, int64_t span_ns,
                     int width) {
  if (rows.empty() || span_ns <= 0 || width < 8) return "";
  size_t label_w = 0;
  for (const auto& [label, bars] : rows) label_w = std::max(label_w, label.size());
  std::string out;
  const double per_col = static_cast<double>(span_ns) / width;
  absl::StrAppend(&out, std::string(label_w, ' '), " |0", std::string(static_cast<size_t>(width - 1), ' '),
                  "| ", absl::StrFormat("%.4g ms", static_cast<double>(span_ns) / 1e6), "\n");
  for (const auto& [label, bars] : rows) {
    std::string cells(static_cast<size_t>(width), '.');
    for (const Bar& b : bars) {
      int a = static_cast<int>(std::lround(static_cast<double>(b.start) / per_col));
      int e = static_cast<int>(std::lround(static_cast<double>(b.end) / per_col));
      a = std::clamp(a, 0, width - 1);
      e = std::clamp(e, a + 1, width);
      for (int c = a; c < e; ++c) cells[static_cast<size_t>(c)] = b.letter;
      const std::string mb = b.micro_batch >= 0 ? absl::StrCat(b.micro_batch) : "";
      if (!mb.empty() && e - a >= static_cast<int>(mb.size()) + 1) {
        for (size_t i = 0; i < mb.size(); ++i) cells[static_cast<size_t>(a) + 1 + i] = mb[i];
      }
    }
    absl::StrAppend(&out, label, std::string(label_w - label.size(), ' '), " |", cells, "|\n");
  }
  return out;
}

char LetterOf(schedule::OpKind k) {
  switch (k) {
    case schedule::OpKind::kForward: return 'F';
    case schedule::OpKind::kBackward: return 'B';
    case schedule::OpKind::kBackwardInput: return 'b';
    case schedule::OpKind::kWeightGrad: return 'W';
    case schedule::OpKind::kOptimizerStep: return 'O';
    case schedule::OpKind::kTpAllReduce: return 'T';
    case schedule::OpKind::kAllReduce: return '=';
    default: return '?';
  }
}

char LetterOfEvent(const TraceEvent& e) {
  const std::string name = e.name == nullptr ? "" : e.name;
  if (e.stream == Stream::kComm || e.kind == OpKind::kCollective) {
    return name.rfind("Tp", 0) == 0 || name.rfind("TP", 0) == 0 ? 'T' : '=';
  }
  if (name.rfind("Bi", 0) == 0) return 'b';
  if (name.rfind("Opt", 0) == 0 || name.rfind("opt", 0) == 0 || name.rfind("O", 0) == 0) return 'O';
  if (name.rfind("Tp", 0) == 0 || name.rfind("TP", 0) == 0) return 'T';
  return name.empty() ? '#' : name[0];
}

// One device's step as report entries (docs/report.md "timeline"): compute ops, TP and gradient
// all-reduces, and the exposed part of communication waits; sends are not device time.
json TimelineOps(const schedule::Program& prog, int pp, const std::vector<schedule::OpInterval>& ivs) {
  json ops = json::array();
  const auto& list = prog.ranks[static_cast<size_t>(pp)];
  for (const schedule::OpInterval& iv : ivs) {
    const schedule::Op* op =
        iv.op >= 0 && static_cast<size_t>(iv.op) < list.size() ? &list[static_cast<size_t>(iv.op)] : nullptr;
    Nanos start = iv.start;
    const char* kind = "compute";
    switch (iv.kind) {
      case schedule::IntervalKind::kCompute: kind = "compute"; break;
      case schedule::IntervalKind::kSend: continue;
      case schedule::IntervalKind::kRecv:
        // Only the wait the link time explains is exposed communication; the rest is bubble.
        start = std::max(iv.start, iv.end - iv.comm);
        kind = "wait";
        break;
      case schedule::IntervalKind::kGradWait: kind = "wait"; break;
      case schedule::IntervalKind::kTpAllReduce: kind = "tp_allreduce"; break;
      case schedule::IntervalKind::kGradAllReduce: kind = "grad_allreduce"; break;
    }
    if (iv.end <= start) continue;
    json e = {{"kind", kind},
              {"op", op != nullptr ? schedule::OpKindName(op->kind) : ""},
              {"start_ms", Ms(start)},
              {"end_ms", Ms(iv.end)}};
    if (op != nullptr && op->micro_batch >= 0) e["mb"] = op->micro_batch;
    if (op != nullptr && prog.num_chunks > 1) e["chunk"] = op->chunk;
    ops.push_back(std::move(e));
  }
  return ops;
}

// The "timeline" section: the first replica's devices (dp = 0), at most kMaxTimelineRows of them.
json TimelineJson(const Plan& plan, const schedule::Prediction& pred, const schedule::RunResult* run) {
  const schedule::ParallelGrid& grid = plan.grid;
  const schedule::Program& prog = plan.executor.program;
  const int n = std::min(grid.world_size() / std::max(1, plan.executor.grid.dp), kMaxTimelineRows);
  json t;
  t["ranks"] = json::array();
  for (int rank = 0; rank < n; ++rank) t["ranks"].push_back(rank);
  json predicted = {{"step_ms", Ms(pred.step_time)}, {"devices", json::array()}};
  for (int rank = 0; rank < n; ++rank) {
    const schedule::Coord c = grid.CoordOf(rank);
    json d = {{"rank", rank}, {"dp", c.dp}, {"pp", c.pp}, {"tp", c.tp}};
    auto ivs = schedule::PredictedIntervals(prog, grid, plan.executor.cost, plan.predict, pred, rank);
    d["ops"] = ivs.ok() ? TimelineOps(prog, c.pp, *ivs) : json::array();
    predicted["devices"].push_back(std::move(d));
  }
  t["predicted"] = std::move(predicted);
  if (run != nullptr && !run->timelines.empty()) {
    json measured = {{"step", run->timeline_step}, {"devices", json::array()}};
    int64_t end = 0;
    for (int rank = 0; rank < n && static_cast<size_t>(rank) < run->timelines.size(); ++rank) {
      const schedule::Coord c = grid.CoordOf(rank);
      json d = {{"rank", rank}, {"dp", c.dp}, {"pp", c.pp}, {"tp", c.tp}};
      d["ops"] = TimelineOps(prog, c.pp, run->timelines[static_cast<size_t>(rank)]);
      for (const auto& iv : run->timelines[static_cast<size_t>(rank)]) end = std::max<int64_t>(end, iv.end.count());
      measured["devices"].push_back(std::move(d));
    }
    measured["step_ms"] = static_cast<double>(end) / 1e6;
    t["measured"] = std::move(measured);
  }
  return t;
}

}  // namespace

std::string DumpJson(const json& j, int indent) {
  return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

json BuildReport(const RunConfig& cfg, const Plan& plan, const schedule::Prediction& pred,
                 const schedule::RunResult* run) {
  const schedule::ParallelGrid& grid = plan.grid;
  const schedule::ExecutorOptions& ex = plan.executor;
  json r;
  r["schema"] = kReportSchema;
  r["mode"] = run != nullptr ? "run" : "predict";
  r["config"] = ConfigToJson(cfg);
  r["layout"] = {{"dp", cfg.dp},
                 {"pp", cfg.pp},
                 {"tp", cfg.tp},
                 {"world", grid.world_size()},
                 {"devices_per_node", grid.placement().devices_per_node},
                 {"nodes", grid.num_nodes()},
                 {"placement", PlacementOrder(grid.placement())},
                 {"description", grid.ToString()}};
  r["schedule"] = {{"name", schedule::ScheduleName(cfg.schedule)},
                   {"microbatches", cfg.microbatches},
                   {"virtual_stages", cfg.virtual_stages},
                   {"global_batch", int64_t{cfg.dp} * cfg.microbatches * cfg.microbatch_size}};
  json stages = json::array();
  for (int s = 0; s < cfg.pp; ++s) {
    const schedule::StageCost& c = ex.cost.Of(s);
    stages.push_back({{"forward_ms", Ms(c.forward)},
                      {"backward_ms", Ms(c.backward)},
                      {"weight_grad_ms", Ms(c.weight_grad)},
                      {"optimizer_ms", Ms(c.optimizer)},
                      {"activation_bytes", c.activation_bytes}});
  }
  r["cost_model"] = {{"kind", CostModelName(cfg.cost_model)}, {"description", plan.cost_description},
                     {"stages", stages}};
  r["links"] = {{"name", cfg.link},
                {"devices_per_node", cfg.devices_per_node},
                {"intra_node", LinkJson(ex.links.intra_node)},
                {"inter_node", LinkJson(ex.links.inter_node)}};
  r["codec"] = comm::CodecName(cfg.codec);
  r["segment_bytes"] = cfg.segment_bytes;
  r["messages"] = {{"activation_bytes", ex.program.ranks.empty() ? 0 : [&] {
                      uint64_t b = 0;
                      for (const auto& ops : ex.program.ranks)
                        for (const auto& op : ops)
                          if (op.kind == schedule::OpKind::kSendAct) b = std::max(b, op.bytes);
                      return b;
                    }()}};

  // A run's predicted step is the median of its steps' predictions (with jitter each step has its
  // own draws; otherwise they are all pred.step_time).
  const double predicted_ms = run != nullptr ? run->predicted_step_ms : Ms(pred.step_time);
  const double t1_ms = Ms(pred.single_device_time);
  r["t1_ms"] = t1_ms;
  if (run != nullptr) {
    r["step_time_ms"] = {{"measured", run->measured_step_ms}, {"predicted", predicted_ms},
                         {"modeled", run->modeled_step_ms}};
    r["fidelity"] = Num(run->fidelity);
    r["speedup"] = {{"measured", Num(run->speedup)}, {"predicted", pred.speedup}};
    r["efficiency"] = {{"measured", Num(run->efficiency)}, {"predicted", pred.efficiency}};
    r["replica_divergence"] = run->max_replica_divergence;
    r["training"] = {{"final_loss", Num(run->final_loss)},
                     {"final_test_accuracy", Num(run->final_accuracy)},
                     {"chance_accuracy", run->chance_accuracy},
                     {"max_loss_rel_diff_vs_fp32_reference", Num(run->max_loss_rel_diff)}};
    json steps = json::array();
    for (const schedule::StepRecord& s : run->steps) {
      steps.push_back({{"step", s.step},
                       {"loss", Num(s.loss)},
                       {"accuracy", Num(s.train_accuracy)},
                       {"test_accuracy", Num(s.accuracy)},
                       {"test_loss", Num(s.test_loss)},
                       {"measured_ms", s.measured_ms},
                       {"modeled_ms", s.modeled_ms},
                       {"predicted_ms", s.predicted_ms},
                       {"replica_divergence", s.replica_divergence},
                       {"reference_loss", Num(s.reference_loss)}});
    }
    r["steps"] = steps;
    double overrun_ms = 0;
    for (const auto& d : run->devices) overrun_ms += d.overrun_ms;
    r["host"] = {{"wall_seconds", run->wall_seconds},
                 {"virtual_time", run->virtual_time},
                 {"time_scale", run->time_scale},
                 {"overruns", run->overruns},
                 {"overrun_ms", overrun_ms},
                 {"wait_lateness_ms",
                  {{"count", run->lateness.count()},
                   {"mean", Ms(run->lateness.mean())},
                   {"p50", Ms(run->lateness.Quantile(0.5))},
                   {"p99", Ms(run->lateness.Quantile(0.99))},
                   {"max", Ms(run->lateness.max())}}},
                 {"clock_waits", {{"total", run->clock_waits}, {"crowded", run->clock_crowded_waits}}},
                 {"faults", run->faults}};
  } else {
    r["step_time_ms"] = {{"predicted", predicted_ms}};
    r["speedup"] = {{"predicted", pred.speedup}};
    r["efficiency"] = {{"predicted", pred.efficiency}};
  }

  const std::vector<schedule::PredictedWire> wire = PredictWireBytes(plan);
  json devices = json::array();
  for (int rank = 0; rank < grid.world_size(); ++rank) {
    const schedule::Coord c = grid.CoordOf(rank);
    const schedule::DeviceStats& p = pred.devices[static_cast<size_t>(rank)];
    json d = {{"rank", rank},         {"dp", c.dp},
              {"pp", c.pp},           {"tp", c.tp},
              {"device", grid.DeviceOf(rank)}, {"node", grid.NodeOf(rank)}};
    d["predicted"] = {{"busy_ms", Ms(p.busy)},
                      {"bubble_total", p.bubble_over_total},
                      {"bubble_ideal", p.bubble_over_ideal},
                      {"comm_ms", Ms(p.comm)},
                      {"exposed_comm_ms", Ms(p.exposed_comm)},
                      {"overlap", p.overlap},
                      {"peak_activation_bytes", p.peak_activation_bytes},
                      {"wire_bytes", wire[static_cast<size_t>(c.pp)].total()},
                      {"p2p_bytes", wire[static_cast<size_t>(c.pp)].p2p},
                      {"tp_bytes", wire[static_cast<size_t>(c.pp)].tp},
                      {"dp_bytes", wire[static_cast<size_t>(c.pp)].dp}};
    if (run != nullptr && static_cast<size_t>(rank) < run->devices.size()) {
      const schedule::DeviceReport& m = run->devices[static_cast<size_t>(rank)];
      const uint64_t steps = static_cast<uint64_t>(std::max(1, cfg.steps));
      d["busy_ms"] = m.busy_ms;
      d["bubble_total"] = m.bubble_total;
      d["bubble_ideal"] = m.bubble_ideal;
      d["comm_ms"] = m.comm_ms;
      d["exposed_comm_ms"] = m.exposed_comm_ms;
      d["overlap"] = m.overlap;
      d["peak_activation_bytes"] = m.peak_activation_bytes;
      d["wire_bytes"] = m.wire_bytes / steps;
      d["p2p_bytes"] = m.p2p_bytes / steps;
      d["tp_bytes"] = m.tp_bytes / steps;
      d["dp_bytes"] = m.dp_bytes / steps;
      d["overruns"] = m.overruns;
      d["overrun_ms"] = m.overrun_ms;
      d["lateness_p50_ms"] = m.lateness_p50_ms;
      d["lateness_p99_ms"] = m.lateness_p99_ms;
      d["lateness_max_ms"] = m.lateness_max_ms;
    }
    devices.push_back(std::move(d));
  }
  r["devices"] = std::move(devices);
  r["timeline"] = TimelineJson(plan, pred, run);
  return r;
}

namespace {

std::string Bytes(double b) {
  if (b >= 1e9) return absl::StrFormat("%.2f GB", b / 1e9);
  if (b >= 1e6) return absl::StrFormat("%.2f MB", b / 1e6);
  if (b >= 1e3) return absl::StrFormat("%.1f kB", b / 1e3);
  return absl::StrFormat("%.0f B", b);
}

double D(const json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_number()) return std::numeric_limits<double>::quiet_NaN();
  return j[key].get<double>();
}

// `f` is a printf format with one double conversion (a runtime string: absl::StrFormat needs a
// compile-time format, which clang enforces).
std::string Fmt(const char* f, double x) {
  if (!std::isfinite(x)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

}  // namespace

std::string RenderReport(const json& r, size_t max_device_rows) {
  const bool run = r.value("mode", "") == "run";
  std::string out;
  const json& lay = r["layout"];
  const json& cfg = r["config"];
  absl::StrAppend(&out, "ringpipe ", run ? "run" : "predict", " — preset ", cfg.value("preset", ""),
                  cfg.value("config", "").empty() ? "" : absl::StrCat(", config ", cfg.value("config", "")), "\n");
  absl::StrAppend(&out, "  layout     ", lay.value("description", ""), " = ", lay.value("world", 0), " devices\n");
  const json& sch = r["schedule"];
  absl::StrAppend(&out, "  schedule   ", sch.value("name", ""), ", ", sch.value("microbatches", 0),
                  " micro-batches per replica",
                  sch.value("virtual_stages", 1) > 1 ? absl::StrCat(", ", sch.value("virtual_stages", 1), " virtual stages") : "",
                  ", global batch ", sch.value("global_batch", 0), " samples\n");
  absl::StrAppend(&out, "  cost model ", r["cost_model"].value("description", ""), "\n");
  const json& ln = r["links"];
  auto link = [](const json& l) {
    const double bw = D(l, "bandwidth_gbps");
    return absl::StrCat(Fmt("%.6g", D(l, "alpha_us")), " us + ",
                        bw > 0 ? absl::StrCat(Fmt("%.6g", bw), " GB/s") : std::string("free bandwidth"));
  };
  absl::StrAppend(&out, "  links      ", ln.value("name", ""), ": intra-node ", link(ln["intra_node"]),
                  "; inter-node ", link(ln["inter_node"]), "; ", ln.value("devices_per_node", 0),
                  " devices per node\n");
  absl::StrAppend(&out, "  gradients  ring all-reduce, codec ", r.value("codec", ""), ", segment ",
                  r.value("segment_bytes", uint64_t{0}) == 0 ? std::string("one message per chunk")
                                                            : Bytes(r.value("segment_bytes", 0.0)),
                  "\n");
  if (run) {
    const json& h = r["host"];
    absl::StrAppend(&out, "  clock      ",
                    h.value("virtual_time", false) ? std::string("virtual (as fast as the host allows)")
                                                   : absl::StrCat("real, time scale ", Fmt("%g", D(h, "time_scale"))),
                    "\n");
  }

  if (run && r.contains("steps")) {
    absl::StrAppend(&out, "\nsteps      loss    train acc  held-out acc  step (measured ms)\n");
    const json& steps = r["steps"];
    const size_t n = steps.size();
    for (size_t i = 0; i < n; ++i) {
      // All steps up to 12, else the first 3, every tenth, and the last 3.
      if (n > 12 && i >= 3 && i + 3 < n && (i + 1) % std::max<size_t>(1, n / 10) != 0) continue;
      const json& s = steps[i];
      absl::StrAppend(&out, absl::StrFormat("  %5d  %8.4f  %9.3f  %12s  %10.2f\n", s.value("step", 0),
                                            D(s, "loss"), D(s, "accuracy"),
                                            Fmt("%.3f", D(s, "test_accuracy")), D(s, "measured_ms")));
    }
    const json& t = r["training"];
    absl::StrAppend(&out, "  held-out accuracy ", Fmt("%.3f", D(t, "final_test_accuracy")), " (chance ",
                    Fmt("%.3f", D(t, "chance_accuracy")), "); loss vs single-device FP32 reference: max rel. diff ",
                    Fmt("%.2e", D(t, "max_loss_rel_diff_vs_fp32_reference")), "\n");
  }

  absl::StrAppend(&out, "\ntiming (modeled ms)\n");
  const json& st = r["step_time_ms"];
  if (run) {
    absl::StrAppend(&out, "  step time   measured ", Fmt("%.3f", D(st, "measured")), "   predicted ",
                    Fmt("%.3f", D(st, "predicted")), "   fidelity ", Fmt("%+.3f%%", 100 * D(r, "fidelity")),
                    "  (median over steps)\n");
  } else {
    absl::StrAppend(&out, "  step time   predicted ", Fmt("%.3f", D(st, "predicted")), "\n");
  }
  absl::StrAppend(&out, "  T1          ", Fmt("%.3f", D(r, "t1_ms")),
                  "   (every compute op of the global batch on one device)\n");
  const int world = lay.value("world", 1);
  if (run) {
    absl::StrAppend(&out, "  speedup     ", Fmt("%.3f", D(r["speedup"], "measured")), " x   (predicted ",
                    Fmt("%.3f", D(r["speedup"], "predicted")), ")   efficiency ",
                    Fmt("%.1f%%", 100 * D(r["efficiency"], "measured")), " of ", world, " devices\n");
    absl::StrAppend(&out, "  replica divergence ", Fmt("%g", D(r, "replica_divergence")),
                    " (max |w_r - w_0| over replicas, every step)\n");
  } else {
    absl::StrAppend(&out, "  speedup     ", Fmt("%.3f", D(r["speedup"], "predicted")), " x   efficiency ",
                    Fmt("%.1f%%", 100 * D(r["efficiency"], "predicted")), " of ", world, " devices\n");
  }

  // Per-device table.
  const json& devs = r["devices"];
  absl::StrAppend(&out, "\ndevices", run ? " (measured; predicted in brackets)" : " (predicted)",
                  ": busy/step, bubble = idle / step (and / busy), exposed comm, overlap, peak activations, "
                  "wire bytes per step\n");
  absl::StrAppend(&out, absl::StrFormat("  %5s %-10s %20s %16s %22s %8s %12s %12s\n", "rank", "dp/pp/tp",
                                        "busy ms", "bubble tot/ideal", "exposed comm ms", "overlap",
                                        "peak act", "wire"));
  const size_t rows = std::min(devs.size(), max_device_rows);
  for (size_t i = 0; i < rows; ++i) {
    const json& d = devs[i];
    const json& p = d["predicted"];
    const std::string coord = absl::StrCat(d.value("dp", 0), "/", d.value("pp", 0), "/", d.value("tp", 0));
    if (run) {
      absl::StrAppend(
          &out, absl::StrFormat("  %5d %-10s %9s [%8s] %7s/%-8s %10s [%9s] %8s %12s %12s\n", d.value("rank", 0), coord,
                                Fmt("%.2f", D(d, "busy_ms")), Fmt("%.2f", D(p, "busy_ms")),
                                Fmt("%.3f", D(d, "bubble_total")), Fmt("%.3f", D(d, "bubble_ideal")),
                                Fmt("%.3f", D(d, "exposed_comm_ms")), Fmt("%.3f", D(p, "exposed_comm_ms")),
                                Fmt("%.3f", D(d, "overlap")), Bytes(D(d, "peak_activation_bytes")),
                                Bytes(D(d, "wire_bytes"))));
    } else {
      absl::StrAppend(&out, absl::StrFormat("  %5d %-10s %20s %7s/%-8s %22s %8s %12s %12s\n", d.value("rank", 0),
                                            coord, Fmt("%.3f", D(p, "busy_ms")), Fmt("%.3f", D(p, "bubble_total")),
                                            Fmt("%.3f", D(p, "bubble_ideal")), Fmt("%.3f", D(p, "exposed_comm_ms")),
                                            Fmt("%.3f", D(p, "overlap")), Bytes(D(p, "peak_activation_bytes")),
                                            Bytes(D(p, "wire_bytes"))));
    }
  }
  if (devs.size() > rows) {
    double max_bubble = 0, max_exposed = 0;
    for (const json& d : devs) {
      const json& src = run ? d : d["predicted"];
      max_bubble = std::max(max_bubble, D(src, "bubble_total"));
      max_exposed = std::max(max_exposed, D(src, "exposed_comm_ms"));
    }
    absl::StrAppend(&out, "  ... ", devs.size() - rows, " more devices (all in --report_json); over all ",
                    devs.size(), ": max bubble ", Fmt("%.3f", max_bubble), ", max exposed comm ",
                    Fmt("%.3f", max_exposed), " ms\n");
  }
  if (run) {
    const json& h = r["host"];
    const json& l = h["wait_lateness_ms"];
    absl::StrAppend(&out, "\nhost  wall ", Fmt("%.2f", D(h, "wall_seconds")), " s; overruns ",
                    h.value("overruns", uint64_t{0}), " compute ops (", Fmt("%.3f", D(h, "overrun_ms")),
                    " ms of real work beyond modeled time); wait lateness p50 ", Fmt("%.3f", D(l, "p50")),
                    " p99 ", Fmt("%.3f", D(l, "p99")), " max ", Fmt("%.3f", D(l, "max")), " ms over ",
                    l.value("count", uint64_t{0}), " waits\n");
    const uint64_t waits = h.contains("clock_waits") ? h["clock_waits"].value("total", uint64_t{0}) : 0;
    const uint64_t crowded =
        h.contains("clock_waits") ? h["clock_waits"].value("crowded", uint64_t{0}) : 0;
    if (crowded > 0 && waits > 0) {
      absl::StrAppend(&out, "      ", Fmt("%.1f", 100.0 * static_cast<double>(crowded) / static_cast<double>(waits)),
                      " % of clock waits ran crowded (busy host or > 128 waiting devices: plain sleeps, "
                      "less precise)\n");
    }
  }
  return out;
}

std::string RenderMeasuredGantt(const std::vector<TraceEvent>& events, int step, int num_devices, int width,
                                int max_rows) {
  const int rows_n = std::min(num_devices, max_rows);
  std::vector<std::vector<Bar>> compute(static_cast<size_t>(rows_n)), comm(static_cast<size_t>(rows_n));
  int64_t t0 = std::numeric_limits<int64_t>::max(), t1 = std::numeric_limits<int64_t>::min();
  for (const TraceEvent& e : events) {
    if (e.step != step) continue;
    if (e.kind == OpKind::kSend || e.kind == OpKind::kRecv || e.kind == OpKind::kFault) continue;
    t0 = std::min(t0, e.model_start_ns);
    t1 = std::max(t1, e.model_end_ns);
  }
  if (t0 >= t1) return "";
  for (const TraceEvent& e : events) {
    if (e.step != step || e.rank < 0 || e.rank >= rows_n) continue;
    if (e.kind != OpKind::kCompute && e.kind != OpKind::kCollective) continue;
    const Bar b{e.model_start_ns - t0, e.model_end_ns - t0, LetterOfEvent(e), e.micro_batch};
    (e.stream == Stream::kComm ? comm : compute)[static_cast<size_t>(e.rank)].push_back(b);
  }
  std::vector<std::pair<std::string, std::vector<Bar>>> rows;
  for (int r = 0; r < rows_n; ++r) {
    rows.emplace_back(absl::StrCat("rank ", r), compute[static_cast<size_t>(r)]);
    if (!comm[static_cast<size_t>(r)].empty()) rows.emplace_back("  comm", comm[static_cast<size_t>(r)]);
  }
  std::string out = DrawRows(rows, t1 - t0, width);
  if (num_devices > rows_n) absl::StrAppend(&out, "(", num_devices - rows_n, " more devices in --trace)\n");
  return out;
}

std::string RenderPredictedGantt(const Plan& plan, const schedule::Prediction& pred, int width) {
  const schedule::Program& prog = plan.executor.program;
  std::vector<std::pair<std::string, std::vector<Bar>>> rows;
  for (int s = 0; s < prog.num_ranks; ++s) {
    const int rank = plan.grid.RankOf({.dp = 0, .pp = s, .tp = 0});
    const auto& tl = pred.Timeline(plan.grid, rank);
    std::vector<Bar> compute, comm;
    for (size_t i = 0; i < prog.ranks[static_cast<size_t>(s)].size() && i < tl.size(); ++i) {
      const schedule::Op& op = prog.ranks[static_cast<size_t>(s)][i];
      const char letter = LetterOf(op.kind);
      if (letter == '?') continue;
      Bar b{tl[i].start.count(), tl[i].end.count(), letter, op.micro_batch};
      if (op.kind == schedule::OpKind::kAllReduce) {
        comm.push_back(b);
      } else {
        if (op.kind == schedule::OpKind::kOptimizerStep) {
          b.start = (tl[i].end - plan.executor.cost.Of(s).optimizer).count();
        }
        compute.push_back(b);
      }
    }
    rows.emplace_back(absl::StrCat("stage ", s), std::move(compute));
    if (!comm.empty()) rows.emplace_back("  comm", std::move(comm));
  }
  return DrawRows(rows, pred.step_time.count(), width);
}

}  // namespace rp::apps
