// RenderReport: the text report, drawn from the JSON report (apps/report.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "apps/report.h"

namespace rp::apps {
namespace {

using json = nlohmann::json;

std::string Bytes(double b) {
  if (!std::isfinite(b)) return "n/a";
  if (b >= 1e9) return absl::StrFormat("%.2f GB", b / 1e9);
  if (b >= 1e6) return absl::StrFormat("%.2f MB", b / 1e6);
  if (b >= 1e3) return absl::StrFormat("%.1f kB", b / 1e3);
  return absl::StrFormat("%.0f B", b);
}

const json& Get(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

double D(const json& j, const char* key) {
  const json& v = Get(j, key);
  return v.is_number() ? v.get<double>() : std::numeric_limits<double>::quiet_NaN();
}

// `f` is a printf format with one double conversion (a runtime string: absl::StrFormat needs a
// compile-time format, which clang enforces).
std::string Fmt(const char* f, double x) {
  if (!std::isfinite(x)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

std::string LinkText(const json& l) {
  const double bw = D(l, "bandwidth_gbps"), o = D(l, "overhead_us");
  return absl::StrCat("a ", Fmt("%.6g", D(l, "alpha_us")), " us",
                      o > 0 ? absl::StrCat(" + o ", Fmt("%.6g", o), " us/message") : std::string(), " + ",
                      bw > 0 ? absl::StrCat(Fmt("%.6g", bw), " GB/s") : std::string("free bandwidth"));
}

std::string Join(const json& list) {
  std::string out;
  if (!list.is_array()) return out;
  for (const json& x : list) absl::StrAppend(&out, out.empty() ? "" : ", ", x.is_number() ? x.dump() : "?");
  return out;
}

// The "moe" section (absent without MoE blocks): the blocks, EP, and whether routing was assumed.
std::string MoeSetup(const json& r) {
  const json& m = Get(r, "moe");
  if (!m.is_object()) return "";
  const double cap = D(m, "capacity_factor"), aux = D(m, "aux_loss"), skew = D(m, "router_skew");
  std::string out = absl::StrCat(
      "  experts    MoE blocks at layers ", Join(Get(m, "layers")), ": ", m.value("experts", 0), " experts, top-",
      m.value("top_k", 1), ", expert hidden ", m.value("expert_hidden", 0), ", capacity ",
      cap > 0 ? Fmt("%g", cap) : std::string("none (dropless)"),
      aux > 0 ? absl::StrCat(", aux loss ", Fmt("%g", aux)) : std::string(),
      skew > 0 ? absl::StrCat(", router skew ", Fmt("%g", skew)) : std::string(),
      m.value("init", std::string("he")) == "scaled" ? ", W2 init scaled by 1/sqrt(blocks)" : "", "\n");
  const int ep = m.value("ep", 1);
  // The groups a user counts are the dp / ep groups of replicas; ep_groups counts one EP
  // communicator per (group, pp, tp): "64 EP groups" for dp = 64, ep = 8 read as 64 of one replica.
  const double dp_value = D(Get(r, "layout"), "dp"), all_value = D(m, "ep_groups");
  const int dp = std::isfinite(dp_value) ? static_cast<int>(dp_value) : ep;
  const int all = std::isfinite(all_value) ? static_cast<int>(all_value) : 0;
  const int groups = std::max(1, dp / std::max(1, ep));
  absl::StrAppend(
      &out, "  EP         ", ep,
      ep > 1 ? absl::StrCat(" (", groups, groups == 1 ? " EP group" : " EP groups", " of ", ep,
                            " replicas carved out of DP=", dp,
                            all > groups ? absl::StrCat(", per pipeline stage and TP shard: ", all, " in all") : "",
                            "; all-to-all of token rows in ", m.value("ep_codec", "fp32"), " (ep_codec), a row = ",
                            Bytes(D(m, "modeled_ep_row_bytes")), " modeled at fp32)")
             : std::string(" (every device holds every expert)"),
      "\n");
  if (m.value("balanced_routing_assumed", false)) {
    absl::StrAppend(&out, "  routing    balanced routing ASSUMED: the EP all-to-alls are sized as if every "
                          "source spread its tokens evenly over the experts (no run's routing)\n");
  }
  return out;
}

std::string Setup(const json& r, bool run) {
  std::string out;
  const json& cfg = Get(r, "config");
  const json& lay = Get(r, "layout");
  const json& sch = Get(r, "schedule");
  const json& file = Get(r, "config_file");
  absl::StrAppend(&out, "ringpipe ", run ? "run" : "predict", " — preset ", cfg.value("preset", ""),
                  file.is_string() ? absl::StrCat(", config ", file.get<std::string>()) : "", "\n");
  absl::StrAppend(&out, "  layout     ", lay.value("description", ""), " = ", lay.value("world", 0), " devices\n");
  absl::StrAppend(&out, "  schedule   ", sch.value("name", ""), ", ", sch.value("microbatches", 0),
                  " micro-batches per replica",
                  sch.value("chunks", 1) > 1 ? absl::StrCat(", ", sch.value("chunks", 1), " chunks per device") : "",
                  ", global batch ", sch.value("global_batch", 0), " samples\n");
  absl::StrAppend(&out, "  cost model ", Get(r, "cost_model").value("description", ""), "\n");
  const json& ln = Get(r, "links");
  const int nics = ln.value("nics_per_node", 0);
  absl::StrAppend(&out, "  links      ", ln.value("name", ""), ": intra-node ", LinkText(Get(ln, "intra_node")),
                  "; inter-node ", LinkText(Get(ln, "inter_node")), "; ", ln.value("devices_per_node", 0),
                  " devices per node, ", nics == 0 ? std::string("a NIC per device") : absl::StrCat(nics, " NIC(s) per node"),
                  "\n");
  const json& co = Get(r, "collectives");
  const double seg = D(co, "segment_bytes");
  if (co.value("largest_group", 2) <= 1) {
    absl::StrAppend(&out, "  gradients  none all-reduced: no device has another copy of its gradients to average with "
                          "(dp 1)\n");
  } else {
    absl::StrAppend(&out, "  gradients  ring all-reduce, codec ", co.value("codec", ""), ", ",
                  seg > 0 ? absl::StrCat(Bytes(seg), " modeled segments") : std::string("one message per chunk"),
                  ", buckets of ", Fmt("%g", D(co, "bucket_mb")), " MiB (", co.value("buckets_per_device", 0),
                  " per device), overlap ", co.value("overlap", true) ? "on" : "off", ", reduction ",
                  D(co, "reduce_gbps") > 0 ? absl::StrCat(Fmt("%g", D(co, "reduce_gbps")), " GB/s") : "free", "\n");
  }
  absl::StrAppend(&out, MoeSetup(r));
  absl::StrAppend(&out, "  bytes      modeled = ", Get(r, "bytes").value("modeled", ""), "; real = ",
                  Get(r, "bytes").value("real", ""), "\n");
  if (const json& p = Get(r, "predictor"); !run && p.is_object()) {
    const int played = p.value("replicas_played", 0), dp = lay.value("dp", 0);
    const int64_t devices = p.value("devices_played", int64_t{0});
    if (p.value("folded", false)) {
      absl::StrAppend(&out, "  predictor  played ", devices, " of ", lay.value("world", int64_t{0}), " devices: ",
                      played == 1 ? std::string("one replica stands for all ")
                                  : absl::StrCat("the first ", played, " replicas stand for all ", dp,
                                                 ", every ", played, " alike"),
                      played == 1 ? absl::StrCat(dp) : std::string(), " (same timelines: exact)\n");
    } else if (dp > 1) {
      absl::StrAppend(&out, "  predictor  played every device: ", p.value("not_folded_because", std::string()), "\n");
    }
  }
  if (run) {
    const json& h = Get(r, "host");
    absl::StrAppend(&out, "  clock      ",
                    h.value("virtual_time", false) ? std::string("virtual (as fast as the host allows; measured = emulated)")
                                                   : absl::StrCat("real, time scale ", Fmt("%g", D(h, "time_scale"))),
                    "\n");
    if (const json& c = Get(h, "time_scale_choice"); c.is_object() && c.value("mode", "") != "virtual") {
      absl::StrAppend(&out, "  time scale ", c.value("mode", ""), ": ", OneLine(c.value("reason", "")), "\n");
      if (!c.value("host_fidelity_trusted", true)) {
        const json& watchdog = Get(c, "suggested_watchdog_timeout");
        absl::StrAppend(&out, "  host       NOT TRUSTED: the host did not keep this scale (|fidelity.host| > 1 %); "
                              "time scale ", Fmt("%g", D(c, "suggested_scale")), " would likely keep up",
                        watchdog.is_number()
                            ? absl::StrCat(" with watchdog_timeout raised above ", Fmt("%g", watchdog.get<double>()), " s")
                            : std::string(),
                        "\n");
      }
    }
  }
  return out;
}

std::string Steps(const json& r) {
  std::string out = "\nsteps      loss    train acc  held-out acc  step (measured ms)\n";
  const json& steps = Get(r, "steps");
  const size_t n = steps.is_array() ? steps.size() : 0;
  for (size_t i = 0; i < n; ++i) {
    // All steps up to 12, else the first 3, every tenth, and the last 3.
    if (n > 12 && i >= 3 && i + 3 < n && (i + 1) % std::max<size_t>(1, n / 10) != 0) continue;
    const json& s = steps[i];
    absl::StrAppend(&out, absl::StrFormat("  %5d  %8.4f  %9.3f  %12s  %10.2f\n", s.value("step", 0), D(s, "loss"),
                                          D(s, "accuracy"), Fmt("%.3f", D(s, "test_accuracy")), D(s, "measured_ms")));
  }
  // Per-expert load of the last step (every step's is in the JSON report).
  if (n > 0 && Get(steps[n - 1], "moe").is_array()) {
    for (const json& b : Get(steps[n - 1], "moe")) {
      absl::StrAppend(&out, "  experts of layer ", b.value("layer", 0), ", step ", steps[n - 1].value("step", 0),
                      ": token slots [", Join(Get(b, "expert_tokens")), "], dropped ", Fmt("%.0f", D(b, "dropped")),
                      "\n");
    }
  }
  // Evaluations of fewer samples than the final one (eval_samples auto: a step's worth).
  const int64_t final_samples = Get(r, "training").value("final_test_samples", int64_t{0});
  int64_t fewer = 0;
  for (size_t i = 0; i + 1 < n; ++i) {
    const int64_t k = steps[i].value("test_samples", int64_t{0});
    if (k > 0 && k < final_samples) fewer = k;
  }
  if (fewer > 0) {
    absl::StrAppend(&out, "  held-out acc before the last step: the split's first ", fewer, " samples (the last: all ",
                    final_samples, "; --eval_samples sets one count for all)\n");
  }
  const json& t = Get(r, "training");
  absl::StrAppend(&out, "  held-out accuracy ", Fmt("%.3f", D(t, "final_test_accuracy")), " (chance ",
                  Fmt("%.3f", D(t, "chance_accuracy")), "); loss vs single-device FP32 reference: max rel. diff ",
                  Fmt("%.2e", D(t, "max_loss_rel_diff_vs_fp32_reference")), "\n");
  return out;
}

std::string Timing(const json& r, bool run) {
  std::string out = "\ntiming (modeled ms)\n";
  const json& st = Get(r, "step_time_ms");
  const int world = Get(r, "layout").value("world", 1);
  if (run) {
    // On the virtual clock no thread reads a wall clock: measured is the emulated timeline.
    const bool virtual_clock = Get(r, "host").value("virtual_time", false);
    absl::StrAppend(&out, "  step time   measured ", Fmt("%.3f", D(st, "measured")), "   emulated ",
                    Fmt("%.3f", D(st, "emulated")), "   predicted ", Fmt("%.3f", D(st, "predicted")),
                    "  (the median step)\n", "              measured: ",
                    virtual_clock ? "the virtual clock's modeled times (= emulated; no wall clock is read)"
                                  : "wall clock on the device threads / time scale",
                    "; emulated: the run's modeled timeline; predicted: the predictor\n");
    const json& f = Get(r, "fidelity");
    absl::StrAppend(&out, "  fidelity    host ", Fmt("%+.3f%%", 100 * D(f, "host")),
                    " (measured / emulated - 1)   model ", Fmt("%+.3f%%", 100 * D(f, "model")),
                    " (emulated / predicted - 1)\n");
  } else {
    absl::StrAppend(&out, "  step time   predicted ", Fmt("%.3f", D(st, "predicted")), "\n");
  }
  const json& pipe = Get(Get(r, "pipeline"), run ? "measured" : "predicted");
  absl::StrAppend(&out, "  pipeline    makespan ", Fmt("%.3f", D(pipe, "makespan_ms")), ", largest per-rank span ",
                  Fmt("%.3f", D(pipe, "max_span_ms")), "; bubble with the flush ",
                  Fmt("%.3f", D(pipe, "makespan_bubble_ms")), ", in the span ", Fmt("%.3f", D(pipe, "span_bubble_ms")),
                  run ? " (measured)\n" : "\n");
  absl::StrAppend(&out, "  T1          ", Fmt("%.3f", D(r, "t1_ms")),
                  "   (every compute op of the global batch on one device)\n");
  const json& sp = Get(r, "speedup");
  const json& ef = Get(r, "efficiency");
  if (run) {
    absl::StrAppend(&out, "  speedup     measured ", Fmt("%.3f", D(sp, "measured")), " x   (predicted ",
                    Fmt("%.3f", D(sp, "predicted")), ")   efficiency ", Fmt("%.1f%%", 100 * D(ef, "measured")), " of ",
                    world, " devices\n");
    absl::StrAppend(&out, "  replica divergence ", Fmt("%g", D(r, "replica_divergence")),
                    " (max |w_r - w_0| over replicas, every step)\n");
  } else {
    absl::StrAppend(&out, "  speedup     predicted ", Fmt("%.3f", D(sp, "predicted")), " x   efficiency ",
                    Fmt("%.1f%%", 100 * D(ef, "predicted")), " of ", world, " devices\n");
  }
  return out;
}

std::string DeviceRow(const json& d, bool run) {
  const json& p = Get(d, "predicted");
  const json& m = run ? d : p;
  const std::string coord = absl::StrCat(d.value("dp", 0), "/", d.value("pp", 0), "/", d.value("tp", 0));
  auto pair = [&](const char* f, const char* key) {
    return run ? absl::StrCat(Fmt(f, D(m, key)), " [", Fmt(f, D(p, key)), "]") : Fmt(f, D(p, key));
  };
  return absl::StrFormat("  %5d %-9s %19s %13s %19s %19s %15s %11s %11s\n", d.value("rank", 0), coord,
                         pair("%.2f", "busy_ms"), Fmt("%.3f", D(m, "bubble_total")), pair("%.3f", "exposed_comm_ms"),
                         pair("%.3f", "peer_wait_ms"), pair("%.3f", "overlap"),
                         Bytes(D(m, "modeled_peak_activation_bytes")), Bytes(D(m, "modeled_wire_bytes")));
}

// The devices of a report (its "devices" array), made one at a time (apps/lazy_json.h) or read from
// a document.
struct DeviceList {
  size_t size = 0;
  std::function<json(size_t)> at;
  // Device i with at least the members the maxima below read (LazyJson::digest).
  std::function<json(size_t)> digest;
};

// The EP all-to-alls over every device: the largest peer wait (the straggler gating its group),
// exposed communication and modeled bytes.
struct EpMaxima {
  double peer = 0, peer_pred = 0, exposed = 0, exposed_pred = 0, bytes = 0;
  void Add(const json& d, bool run) {
    const json& p = Get(d, "predicted");
    const json& m = run ? d : p;
    peer = std::max(peer, D(m, "ep_peer_wait_ms"));
    peer_pred = std::max(peer_pred, D(p, "ep_peer_wait_ms"));
    exposed = std::max(exposed, D(m, "ep_exposed_comm_ms"));
    exposed_pred = std::max(exposed_pred, D(p, "ep_exposed_comm_ms"));
    bytes = std::max(bytes, D(m, "modeled_ep_bytes"));
  }
  std::string Line(bool run) const {
    return absl::StrCat("  EP all-to-all: peer wait (the busiest EP rank gates its group) up to ", Fmt("%.3f", peer),
                        run ? absl::StrCat(" [", Fmt("%.3f", peer_pred), "]") : std::string(),
                        " ms, exposed transfer up to ", Fmt("%.3f", exposed),
                        run ? absl::StrCat(" [", Fmt("%.3f", exposed_pred), "]") : std::string(),
                        " ms, modeled EP bytes up to ", Bytes(bytes), " per step per device (part of the wire column)\n");
  }
};

// The per-device table: its first `max_rows` rows, and maxima over every device (each made once).
std::string Devices(const json& r, const DeviceList& devs, bool run, size_t max_rows) {
  std::string out = absl::StrCat(
      "\ndevices", run ? " (measured; predicted in brackets)" : " (predicted)",
      ": busy/step, bubble = idle / step, exposed comm (transfer only), peer wait (bubble), overlap, modeled peak "
      "activations and wire bytes per step\n");
  absl::StrAppend(&out, absl::StrFormat("  %5s %-9s %19s %13s %19s %19s %15s %11s %11s\n", "rank", "dp/pp/tp",
                                        "busy ms", "bubble", "exposed comm ms", "peer wait ms", "overlap",
                                        "peak act", "wire"));
  const size_t rows = std::min(devs.size, max_rows);
  double max_bubble = 0, max_exposed = 0, real_act = 0, real_wire = 0, max_late = 0, sum_late = 0;
  EpMaxima ep;
  for (size_t i = 0; i < devs.size; ++i) {
    const json d = i < rows ? devs.at(i) : devs.digest(i);
    if (i < rows) absl::StrAppend(&out, DeviceRow(d, run));
    const json& src = run ? d : Get(d, "predicted");
    max_bubble = std::max(max_bubble, D(src, "bubble_total"));
    max_exposed = std::max(max_exposed, D(src, "exposed_comm_ms"));
    real_act = std::max(real_act, D(Get(d, "real"), "peak_activation_bytes"));
    real_wire = std::max(real_wire, D(Get(d, "real"), "wire_bytes"));
    if (run) {
      max_late = std::max(max_late, D(d, "host_late_ms"));
      sum_late += D(d, "host_late_ms");
    }
    ep.Add(d, run);
  }
  if (Get(r, "moe").is_object() && Get(r, "moe").value("ep", 1) > 1) absl::StrAppend(&out, ep.Line(run));
  if (devs.size > rows) {
    absl::StrAppend(&out, "  ... ", devs.size - rows, " more devices (all in --report_json); over all ",
                    devs.size, ": max bubble ", Fmt("%.3f", max_bubble), ", max exposed comm ",
                    Fmt("%.3f", max_exposed), " ms\n");
  }
  if (run && !Get(r, "host").value("virtual_time", false) && devs.size > 0) {
    absl::StrAppend(&out, "  host lateness up to ", Fmt("%.3f", max_late), " ms per step on a device (mean ",
                    Fmt("%.3f", sum_late / static_cast<double>(devs.size)),
                    "): the host waking a device late, past its data's modeled arrival or its compute's modeled end "
                    "(bubble; not in busy, exposed comm or peer wait)\n");
  }
  if (run) {
    absl::StrAppend(&out, "  real buffers (", Get(r, "bytes").value("real", ""), "): peak activations up to ",
                    Bytes(real_act), ", wire bytes up to ", Bytes(real_wire), " per step per device\n");
  }
  return out;
}

std::string Host(const json& r) {
  const json& h = Get(r, "host");
  const json& l = Get(h, "wait_lateness_ms");
  std::string out = absl::StrCat(
      "\nhost  wall ", Fmt("%.2f", D(h, "wall_seconds")), " s on the ", h.value("clock", ""), " clock; ",
      Fmt("%.0f", D(h, "device_ops_per_second")), " device-ops/s, ", Fmt("%.0f", D(h, "fabric_messages_per_second")),
      " messages/s; ", Fmt("%.0f", D(h, "threads")), " threads at peak (each device runs ",
      h.value("threads_per_device", 1),
      h.value("thread_policy", std::string()).empty() ? "" : ", ", h.value("thread_policy", std::string()),
      "); peak RSS ", Bytes(D(h, "peak_rss_bytes")), ", ",
      Bytes(D(h, "rss_per_device_bytes")), " per device beyond the model buffers",
      D(h, "first_step_populated_bytes") > 0
          ? absl::StrCat("; ", Bytes(D(h, "first_step_populated_bytes")),
                         " made resident in bulk before the first step")
          : std::string(),
      "\n");
  if (h.value("virtual_time", false)) {
    // Real work takes no virtual time and no clock wait sleeps: nothing was measured to report.
    absl::StrAppend(&out, "      overruns and wait lateness: not measured on the virtual clock (real work takes no "
                          "modeled time; no wait sleeps)\n");
  } else {
    absl::StrAppend(&out, "      overruns ", h.value("overruns", uint64_t{0}), " compute ops (",
                    Fmt("%.3f", D(h, "overrun_ms")), " modeled ms of real work beyond modeled time); wait lateness p50 ",
                    Fmt("%.3f", D(l, "p50")), " p99 ", Fmt("%.3f", D(l, "p99")), " max ", Fmt("%.3f", D(l, "max")),
                    " modeled ms over ", l.value("count", uint64_t{0}), " waits\n");
  }
  const json& cw = Get(h, "clock_waits");
  const double waits = D(cw, "total"), crowded = D(cw, "crowded");
  if (crowded > 0 && waits > 0) {
    absl::StrAppend(&out, "      ", Fmt("%.1f", 100.0 * crowded / waits),
                    " % of clock waits ran crowded (busy host or > 128 waiting devices: plain sleeps, less precise)\n");
  }
  return out;
}

std::string Render(const json& r, const DeviceList* devices, size_t max_device_rows) {
  const bool run = r.value("mode", "") == "run";
  std::string out = Setup(r, run);
  if (run) absl::StrAppend(&out, Steps(r));
  absl::StrAppend(&out, Timing(r, run));
  if (devices != nullptr) absl::StrAppend(&out, Devices(r, *devices, run, max_device_rows));
  if (run) absl::StrAppend(&out, Host(r));
  return out;
}

}  // namespace

std::string RenderReport(const json& r, size_t max_device_rows) {
  const json& devs = Get(r, "devices");
  if (!devs.is_array()) return Render(r, nullptr, max_device_rows);
  const auto at = [&devs](size_t i) { return devs[i]; };
  const DeviceList list{devs.size(), at, at};
  return Render(r, &list, max_device_rows);
}

std::string RenderReport(const LazyJson& report, size_t max_device_rows) {
  const LazyJson* devs = report.lazy("devices");
  if (devs == nullptr) return RenderReport(report.members(), max_device_rows);
  const DeviceList list{devs->size(), [devs](size_t i) { return devs->at(i); },
                        [devs](size_t i) { return devs->digest(i); }};
  return Render(report.members(), &list, max_device_rows);
}

}  // namespace rp::apps
