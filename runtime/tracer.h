// rp::Tracer: records every op of every device, exports Chrome trace-event JSON and CSV.
//
// Each (device, stream) has its own append-only buffer written only by the thread that runs that
// stream, so recording takes no lock and touches no shared cache line: Record() is a copy into a
// pre-allocated chunk (a new chunk of up to 4096 events is allocated when one fills). Timestamps are
// taken by the caller (WallNow(): steady_clock ns since the tracer's epoch) so an event's wall
// start/end bracket exactly the work it describes.
//
// The clock a tracer is built for (TraceClock) decides what its events may carry:
//   * kWall (a run on the real clock): events carry the host's wall stamps beside the modeled ones;
//     exports order them by wall start, then rank, stream and recording order.
//   * kVirtual (a run on the virtual clock): nothing of the host. WallNow() is 0 without reading
//     any clock and Record() keeps no wall stamp, exports order events by modeled start, then rank,
//     stream and recording order (each buffer's order is its one thread's program order), and the
//     Chrome JSON holds the modeled layout alone (measured = emulated on that clock). So two runs
//     that record the same events per (device, stream) in the same order export the same bytes,
//     however the threads interleaved.
// Port events (RecordPort) are exported sorted by (modeled start, port, src, dst, ready, end, bytes)
// on either clock, whatever order the fabric committed them in.
//
// Memory is bounded: a tracer built with `max_events` keeps at most that many events in all (each
// (device, stream) buffer at most its share, in chunks of at most kChunkEvents); later events of a
// full buffer are dropped and counted (capped()), so a long run's trace cannot exhaust memory.
//
// Export (Events, StreamChromeJson, ToChromeJson, ToCsv) reads every buffer and must run when no thread records any
// more (after rp::Cluster::Run returned: the joins order the writes before the reads).
//
// Chrome JSON (opens in Perfetto / chrome://tracing):
//   * one process per node ("node n", pid n); one thread track per device stream
//     ("rank r compute" tid 2r, "rank r comm" tid 2r+1);
//   * each op is a complete event ("ph":"X") with measured ts/dur (µs) and, in args, modeled
//     start/end (µs), wall start/end (µs), kind, bytes, peer, micro_batch, step;
//   * with ChromeTraceOptions::modeled_tracks, the same ops again on processes "node n (modeled)"
//     (pid num_nodes + n) placed at their modeled times;
//   * kVirtual: only the modeled processes, "node n (modeled)" with pid n, and no wall args;
//   * each send → receive pair sharing a flow_id gets flow events ("ph":"s" on the send,
//     "ph":"f","bp":"e" on the receive, same "id");
//   * faults are instant events ("ph":"i");
//   * with port events (RecordPort), a process "fabric ports (modeled)" (the pid after the nodes')
//     with one track per port showing, in modeled time, which message occupies it (src → dst,
//     bytes, time queued).
//
// Example:
//   rp::Tracer tracer(/*num_devices=*/4, /*devices_per_node=*/8);
//   int64_t t0 = tracer.WallNow();
//   ... work ...
//   tracer.Record({.wall_start_ns = t0, .wall_end_ns = tracer.WallNow(), .model_start_ns = 0,
//                  .model_end_ns = 50'000'000, .name = "F", .rank = 0, .micro_batch = 3,
//                  .kind = rp::OpKind::kCompute});
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "runtime/text_sink.h"

namespace rp {

enum class OpKind : uint8_t { kCompute, kSend, kRecv, kCollective, kWait, kFault };
enum class Stream : uint8_t { kCompute = 0, kComm = 1 };
const char* OpKindName(OpKind kind);
const char* StreamName(Stream stream);

// The clock of the run a tracer records (see the header comment).
enum class TraceClock : uint8_t {
  kWall,     // real clock: wall stamps kept, exports ordered by them
  kVirtual,  // virtual clock: no host time anywhere, exports ordered by modeled time
};

struct TraceEvent {
  int64_t wall_start_ns = 0;  // Tracer::WallNow() at start (0 on a TraceClock::kVirtual tracer)
  int64_t wall_end_ns = 0;
  int64_t model_start_ns = 0;  // modeled time (rp::Nanos count)
  int64_t model_end_ns = 0;
  uint64_t bytes = 0;
  uint64_t flow_id = 0;       // 0: none. A send and its receive carry the same non-zero id.
  const char* name = "";      // static storage (a literal): events outlive the caller's strings
  const char* detail = "";    // static storage; e.g. the fault that shaped this op
  int32_t rank = 0;
  int32_t peer = -1;
  int32_t micro_batch = -1;
  int32_t step = -1;
  OpKind kind = OpKind::kCompute;
  Stream stream = Stream::kCompute;
};

// One fabric port busy with one message, in modeled time (the "fabric ports" tracks).
struct PortEvent {
  int32_t port = 0;
  int32_t src = 0, dst = 0;  // device ids
  uint64_t bytes = 0;        // modeled
  int64_t ready_ns = 0;      // when the message was ready (start − ready: queued for a busy port)
  int64_t start_ns = 0;
  int64_t end_ns = 0;        // last byte: the port is free again
};

struct ChromeTraceOptions {
  // kWall: add "node n (modeled)" processes laid out in modeled time beside the measured ones.
  // A kVirtual tracer writes the modeled processes alone, whatever this says.
  bool modeled_tracks = true;
};

class Tracer {
 public:
  static constexpr int kStreams = 2;
  static constexpr size_t kChunkEvents = 4096;

  static constexpr size_t kUnbounded = ~size_t{0};

  // `num_devices` >= 1 and `devices_per_node` >= 1 (smaller values are clamped to 1). `max_events`:
  // the most events kept in all (see the header comment). `clock`: the clock of the traced run.
  Tracer(int num_devices, int devices_per_node, size_t max_events = kUnbounded,
         TraceClock clock = TraceClock::kWall);
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // steady_clock nanoseconds since this tracer was built; 0 on kVirtual (no clock read). Any thread.
  int64_t WallNow() const;
  TraceClock clock() const { return clock_; }
  // A fresh non-zero flow id (relaxed atomic counter). Any thread.
  uint64_t NewFlowId() { return next_flow_.fetch_add(1, std::memory_order_relaxed); }

  // Names the fabric's ports (index = PortEvent::port). Before any RecordPort.
  void SetPorts(std::vector<std::string> names) { port_names_ = std::move(names); }
  // Appends a port event (kept up to max_events). Any thread, but calls must be serialized by the
  // caller (rp::Fabric calls it under its lock, from FabricOptions::on_commit).
  void RecordPort(const PortEvent& e) {
    if (port_events_.size() >= max_port_events_) {
      ++port_capped_;
      return;
    }
    port_events_.push_back(e);
  }
  // In the order recorded (the fabric's commit order); the exports sort them. Only after the
  // recording threads were joined.
  const std::vector<PortEvent>& port_events() const { return port_events_; }

  // Appends `e` to the buffer of (e.rank, e.stream). Only the thread that runs that stream may call
  // it. Events with a rank outside [0, num_devices) are dropped and counted (dropped()). On
  // kVirtual the wall stamps are not kept (stored as 0).
  void Record(const TraceEvent& e) {
    if (e.rank < 0 || e.rank >= num_devices_) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    Buffer& b = buffers_[static_cast<size_t>(e.rank) * kStreams + static_cast<size_t>(e.stream)];
    if (clock_ == TraceClock::kVirtual) {
      TraceEvent modeled = e;
      modeled.wall_start_ns = modeled.wall_end_ns = 0;
      b.Append(modeled);
    } else {
      b.Append(e);
    }
  }

  int num_devices() const { return num_devices_; }
  int devices_per_node() const { return devices_per_node_; }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  // Events dropped because their buffer was full (max_events). Only after the recording threads
  // were joined.
  uint64_t capped() const;

  // --- Export: only after every recording thread has been joined. ---
  // All events, ordered by (wall start, rank, stream, recording order) on kWall, by (modeled start,
  // rank, stream, recording order) on kVirtual.
  std::vector<TraceEvent> Events() const;
  // The port events sorted by (start, port, src, dst, ready, end, bytes): the exports' order.
  std::vector<PortEvent> SortedPortEvents() const;
  // The Chrome JSON handed to `sink` in pieces of about 1 MiB, in order, so the text is never held
  // whole (one event's JSON document at a time); the first error `sink` returns stops the pieces
  // and is returned. ToChromeJson is the same bytes in one string.
  absl::Status StreamChromeJson(TextSink sink, const ChromeTraceOptions& options = {}) const;
  std::string ToChromeJson(const ChromeTraceOptions& options = {}) const;
  std::string ToCsv() const;
  [[nodiscard]] absl::Status WriteChromeJson(const std::string& path,
                                             const ChromeTraceOptions& options = {}) const;
  [[nodiscard]] absl::Status WriteCsv(const std::string& path) const;

 private:
  // Single-writer append-only storage: chunks of `chunk_events` events, at most `max_events` kept.
  class alignas(64) Buffer {
   public:
    void Configure(size_t chunk_events, size_t max_events) {
      chunk_events_ = chunk_events;
      max_events_ = max_events;
    }
    void Append(const TraceEvent& e) {
      if (kept_ >= max_events_) {
        ++capped_;
        return;
      }
      if (used_ == chunk_events_ || chunks_.empty()) {
        chunks_.push_back(std::make_unique<TraceEvent[]>(chunk_events_));
        used_ = 0;
      }
      chunks_.back()[used_++] = e;
      ++kept_;
    }
    template <typename F>
    void ForEach(F&& f) const {
      for (size_t c = 0; c < chunks_.size(); ++c) {
        const size_t n = c + 1 == chunks_.size() ? used_ : chunk_events_;
        for (size_t i = 0; i < n; ++i) f(chunks_[c][i]);
      }
    }
    uint64_t capped() const { return capped_; }
    size_t size() const { return kept_; }

   private:
    std::vector<std::unique_ptr<TraceEvent[]>> chunks_;
    size_t chunk_events_ = kChunkEvents;
    size_t max_events_ = kUnbounded;
    size_t used_ = 0;
    size_t kept_ = 0;
    uint64_t capped_ = 0;  // written by the recording thread only
  };

  const int num_devices_;
  const int devices_per_node_;
  const TraceClock clock_;
  const int64_t epoch_ns_;
  std::unique_ptr<Buffer[]> buffers_;
  std::vector<std::string> port_names_;
  std::vector<PortEvent> port_events_;  // serialized by the caller (RecordPort)
  size_t max_port_events_ = kUnbounded;
  uint64_t port_capped_ = 0;
  std::atomic<uint64_t> next_flow_{1};
  std::atomic<uint64_t> dropped_{0};
};

}  // namespace rp
