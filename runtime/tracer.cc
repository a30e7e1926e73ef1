#include "runtime/tracer.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string_view>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace rp {
namespace {
int64_t SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
double Us(int64_t ns) { return static_cast<double>(ns) / 1e3; }

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::NotFoundError(absl::StrCat("cannot open '", path, "' for writing"));
  out << text;
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat("failed writing '", path, "'"));
  return absl::OkStatus();
}
}  // namespace

const char* OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kCompute: return "compute";
    case OpKind::kSend: return "send";
    case OpKind::kRecv: return "recv";
    case OpKind::kCollective: return "collective";
    case OpKind::kWait: return "wait";
    case OpKind::kFault: return "fault";
  }
  return "unknown";
}

const char* StreamName(Stream stream) {
  return stream == Stream::kCompute ? "compute" : "comm";
}

Tracer::Tracer(int num_devices, int devices_per_node, size_t max_events, TraceClock clock)
    : num_devices_(std::max(1, num_devices)),
      devices_per_node_(std::max(1, devices_per_node)),
      clock_(clock),
      epoch_ns_(clock == TraceClock::kVirtual ? 0 : SteadyNs()),
      buffers_(std::make_unique<Buffer[]>(static_cast<size_t>(num_devices_) * kStreams)) {
  // Half of max_events for the device streams' ops (an equal share each), half for port events:
  // at most max_events in all.
  const size_t buffers = static_cast<size_t>(num_devices_) * kStreams;
  const size_t share = max_events == kUnbounded ? kUnbounded : max_events / 2 / buffers;
  for (size_t b = 0; b < buffers; ++b) buffers_[b].Configure(std::clamp<size_t>(share, 1, kChunkEvents), share);
  max_port_events_ = max_events == kUnbounded ? kUnbounded : max_events - max_events / 2;
}

uint64_t Tracer::capped() const {
  uint64_t n = 0;
  for (size_t b = 0; b < static_cast<size_t>(num_devices_) * kStreams; ++b) n += buffers_[b].capped();
  return n + port_capped_;
}

int64_t Tracer::WallNow() const {
  return clock_ == TraceClock::kVirtual ? 0 : SteadyNs() - epoch_ns_;
}

std::vector<TraceEvent> Tracer::Events() const {
  std::vector<TraceEvent> all;
  size_t total = 0;
  for (size_t b = 0; b < static_cast<size_t>(num_devices_) * kStreams; ++b) total += buffers_[b].size();
  all.reserve(total);  // one copy of the events, not up to two (a 1M-event trace: 88 MB each)
  // Buffer by buffer, (rank, stream) in order: the stable sort's ties keep each buffer's recording
  // order, which is its one thread's program order.
  for (size_t b = 0; b < static_cast<size_t>(num_devices_) * kStreams; ++b) {
    buffers_[b].ForEach([&](const TraceEvent& e) { all.push_back(e); });
  }
  const bool modeled = clock_ == TraceClock::kVirtual;
  std::stable_sort(all.begin(), all.end(), [modeled](const TraceEvent& a, const TraceEvent& b) {
    const int64_t ta = modeled ? a.model_start_ns : a.wall_start_ns;
    const int64_t tb = modeled ? b.model_start_ns : b.wall_start_ns;
    return std::tie(ta, a.rank, a.stream) < std::tie(tb, b.rank, b.stream);
  });
  return all;
}

std::vector<PortEvent> Tracer::SortedPortEvents() const {
  std::vector<PortEvent> sorted = port_events_;
  std::sort(sorted.begin(), sorted.end(), [](const PortEvent& a, const PortEvent& b) {
    return std::tie(a.start_ns, a.port, a.src, a.dst, a.ready_ns, a.end_ns, a.bytes) <
           std::tie(b.start_ns, b.port, b.src, b.dst, b.ready_ns, b.end_ns, b.bytes);
  });
  return sorted;
}

namespace {
// The elements of a trace's traceEvents array, each dumped alone (only one event's JSON document
// exists at a time), joined by ',': the bytes of the whole array's one-line dump.
class PieceWriter {
 public:
  explicit PieceWriter(TextSink sink) : text_(sink) {}
  void Element(const nlohmann::json& e) {
    if (!first_) text_.Append(',');
    first_ = false;
    text_.Append(e.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  void Raw(std::string_view s) { text_.Append(s); }
  absl::Status Finish() { return text_.Finish(); }

 private:
  TextPieces text_;
  bool first_ = true;
};

// The Chrome JSON's layouts, in pid order: on kWall the measured one (layout 0) and, if asked, the
// modeled one (layout 1); on kVirtual the modeled one alone (layout 0).
struct ChromeLayouts {
  bool wall = false;
  int count = 1;
  int num_nodes = 1;
  int devices_per_node = 1;
  bool modeled(int layout) const { return !wall || layout == 1; }
};

// Every layout's processes (one per node) and thread tracks (one per device stream), named.
void WriteTracks(PieceWriter& out, const ChromeLayouts& l, int num_devices) {
  for (int layout = 0; layout < l.count; ++layout) {
    for (int node = 0; node < l.num_nodes; ++node) {
      const int pid = layout * l.num_nodes + node;
      out.Element({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"tid", 0},
                   {"args", {{"name", absl::StrCat("node ", node, l.modeled(layout) ? " (modeled)" : "")}}}});
      out.Element({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", pid}, {"tid", 0},
                   {"args", {{"sort_index", pid}}}});
    }
    for (int r = 0; r < num_devices; ++r) {
      for (int s = 0; s < Tracer::kStreams; ++s) {
        out.Element({{"ph", "M"}, {"name", "thread_name"},
                     {"pid", layout * l.num_nodes + r / l.devices_per_node},
                     {"tid", r * Tracer::kStreams + s},
                     {"args", {{"name", absl::StrCat("rank ", r, " ", StreamName(static_cast<Stream>(s)))}}}});
      }
    }
  }
}

// One op on every layout: a complete event (an instant for a fault), and a flow end for a message.
void WriteOp(PieceWriter& out, const ChromeLayouts& l, const TraceEvent& e) {
  using nlohmann::json;
  const int node = e.rank / l.devices_per_node;
  const int tid = e.rank * Tracer::kStreams + static_cast<int>(e.stream);
  json args = {{"kind", OpKindName(e.kind)},
               {"rank", e.rank},
               {"stream", StreamName(e.stream)},
               {"modeled_start_us", Us(e.model_start_ns)},
               {"modeled_end_us", Us(e.model_end_ns)}};
  if (l.wall) {
    args["wall_start_us"] = Us(e.wall_start_ns);
    args["wall_end_us"] = Us(e.wall_end_ns);
  }
  if (e.bytes) args["bytes"] = e.bytes;
  if (e.peer >= 0) args["peer"] = e.peer;
  if (e.micro_batch >= 0) args["micro_batch"] = e.micro_batch;
  if (e.step >= 0) args["step"] = e.step;
  if (e.detail && *e.detail) args["detail"] = e.detail;
  const std::string name = e.micro_batch >= 0 ? absl::StrCat(e.name, " mb", e.micro_batch) : std::string(e.name);
  for (int layout = 0; layout < l.count; ++layout) {
    const bool m = l.modeled(layout);
    const int64_t start = m ? e.model_start_ns : e.wall_start_ns;
    const int64_t end = std::max(start, m ? e.model_end_ns : e.wall_end_ns);
    const int pid = layout * l.num_nodes + node;
    if (e.kind == OpKind::kFault) {
      out.Element({{"ph", "i"}, {"s", "t"}, {"name", name}, {"cat", "fault"},
                   {"ts", Us(start)}, {"pid", pid}, {"tid", tid}, {"args", args}});
      continue;
    }
    out.Element({{"ph", "X"}, {"name", name}, {"cat", OpKindName(e.kind)},
                 {"ts", Us(start)}, {"dur", Us(end - start)}, {"pid", pid}, {"tid", tid},
                 {"args", args}});
    if (e.flow_id != 0 && (e.kind == OpKind::kSend || e.kind == OpKind::kRecv)) {
      json flow = {{"name", "message"}, {"cat", "flow"}, {"id", e.flow_id}, {"pid", pid}, {"tid", tid}};
      if (e.kind == OpKind::kSend) {
        flow["ph"] = "s";
        flow["ts"] = Us(start);
      } else {
        flow["ph"] = "f";
        flow["bp"] = "e";  // binds to the enclosing slice: this receive
        flow["ts"] = std::max(Us(start), Us(end) - 0.001);
      }
      out.Element(flow);
    }
  }
}

// The "fabric ports (modeled)" process at `pid`: a track per port, a slice per message on it.
void WritePorts(PieceWriter& out, int pid, const std::vector<std::string>& names,
                const std::vector<PortEvent>& sorted) {
  out.Element({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"tid", 0},
               {"args", {{"name", "fabric ports (modeled)"}}}});
  out.Element({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", pid}, {"tid", 0},
               {"args", {{"sort_index", pid}}}});
  for (size_t p = 0; p < names.size(); ++p) {
    out.Element({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid},
                 {"tid", static_cast<int>(p)}, {"args", {{"name", names[p]}}}});
  }
  for (const PortEvent& e : sorted) {
    out.Element({{"ph", "X"}, {"name", absl::StrCat(e.src, " → ", e.dst)},
                 {"cat", "port"}, {"ts", Us(e.start_ns)},
                 {"dur", Us(std::max<int64_t>(0, e.end_ns - e.start_ns))}, {"pid", pid},
                 {"tid", e.port},
                 {"args", {{"bytes", e.bytes}, {"queued_us", Us(e.start_ns - e.ready_ns)}}}});
  }
}
}  // namespace

absl::Status Tracer::StreamChromeJson(TextSink sink, const ChromeTraceOptions& options) const {
  const bool wall = clock_ == TraceClock::kWall;
  const ChromeLayouts layouts{.wall = wall,
                              .count = wall && options.modeled_tracks ? 2 : 1,
                              .num_nodes = (num_devices_ + devices_per_node_ - 1) / devices_per_node_,
                              .devices_per_node = devices_per_node_};
  // The document is {"displayTimeUnit":"ms","traceEvents":[...]} (keys in nlohmann's sorted order),
  // written element by element.
  PieceWriter out(sink);
  out.Raw(R"({"displayTimeUnit":"ms","traceEvents":[)");
  WriteTracks(out, layouts, num_devices_);
  for (const TraceEvent& e : Events()) WriteOp(out, layouts, e);
  if (!port_events_.empty()) {
    WritePorts(out, layouts.count * layouts.num_nodes, port_names_, SortedPortEvents());
  }
  out.Raw("]}");
  return out.Finish();
}

std::string Tracer::ToChromeJson(const ChromeTraceOptions& options) const {
  std::string text;
  // The sink cannot fail, so neither can the export.
  StreamChromeJson([&text](std::string_view piece) {
    text.append(piece);
    return absl::OkStatus();
  }, options).IgnoreError();
  return text;
}

std::string Tracer::ToCsv() const {
  std::string out =
      "rank,node,stream,kind,name,detail,micro_batch,step,peer,bytes,flow_id,wall_start_ns,"
      "wall_end_ns,model_start_ns,model_end_ns\n";
  for (const TraceEvent& e : Events()) {
    absl::StrAppendFormat(&out, "%d,%d,%s,%s,%s,%s,%d,%d,%d,%u,%u,%d,%d,%d,%d\n", e.rank,
                          e.rank / devices_per_node_, StreamName(e.stream), OpKindName(e.kind),
                          e.name, e.detail, e.micro_batch, e.step, e.peer, e.bytes, e.flow_id,
                          e.wall_start_ns, e.wall_end_ns, e.model_start_ns, e.model_end_ns);
  }
  return out;
}

absl::Status Tracer::WriteChromeJson(const std::string& path,
                                     const ChromeTraceOptions& options) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::NotFoundError(absl::StrCat("cannot open '", path, "' for writing"));
  absl::Status st = StreamChromeJson([&](std::string_view piece) {
    out.write(piece.data(), static_cast<std::streamsize>(piece.size()));
    return out ? absl::OkStatus() : absl::DataLossError(absl::StrCat("failed writing '", path, "'"));
  }, options);
  out.close();
  if (st.ok() && !out) st = absl::DataLossError(absl::StrCat("failed writing '", path, "'"));
  return st;
}

absl::Status Tracer::WriteCsv(const std::string& path) const { return WriteFile(path, ToCsv()); }

}  // namespace rp
