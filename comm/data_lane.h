// rp::comm::DataLane: a worker thread that runs the data plane of event-driven ring collectives —
// each message's encode, decode and reduce — in commit order, off the fabric's lock.
//
// Why: on a virtual clock every message of the data-parallel rings is handled under the fabric's
// one lock, in whichever thread commits it (comm/comm_stream.h), so at thousands of devices the
// rings' copies and sums (a cold gradient line and a cold payload a message) ran one after another
// with the commit loop. The timing of a message does not depend on its data, only on its size, so
// the commit loop keeps the timing (the ring machine's timer, the posts) and hands the data work
// to this lane: the other core does it meanwhile. Same operations on the same buffers in the same
// order — the lane runs items in the order they were pushed, and a message's send item is pushed
// before its receive item (the post precedes the commit) — so the bits do not change.
//
// Who may read a buffer: the results of a collective whose data runs here are there once the lane
// has run every item pushed up to its end (WaitFor(seq) with seq = pushed() read in the
// collective's `done`). The executor waits so before its optimizer reads the gradients.
//
// Payloads: a received payload goes to the lane with its item and comes back, once read, through
// TakePayload, so a run allocates about as many payloads as messages in flight.
//
// Errors: a codec or FP32-sum overflow found by the lane is reported through its collective's
// Context (the same message as when the data ran under the lock, naming rank, collective, peer
// and ring step; the context's `done` gets it under the fabric's lock), and from then on the lane
// skips the data work; WaitFor returns that first error. The first error is the first in push
// order, so it does not depend on thread timing.
//
// Thread safety: Push, pushed and TakePayload from one thread at a time (under the fabric's
// lock); WaitFor and completed from any thread. The destructor drops the items not run yet (no
// one waits for them: whoever pushed them is gone) and joins the worker; the buffers of items it
// may still be running must outlive it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/codec.h"
#include "comm/communicator.h"
#include "comm/ring_timing.h"
#include "runtime/fabric.h"
#include "runtime/mutex.h"

namespace rp::comm {

struct SegmentPayload;

class DataLane {
 public:
  // What a data error of one collective names, and whom it tells (EventCommStream fills it).
  struct Context {
    Fabric* fabric = nullptr;
    int rank = 0, device = 0, n = 1, peer = -1;
    ring::TimedKind kind{};
    Codec codec = Codec::kFp32;
    uint64_t op_id = 0;
    uint64_t count = 0;          // the collective's elements (a segment's header)
    float* residual = nullptr;   // error feedback: the residual of element 0
    // The collective's `done`, called with the error under the fabric's lock.
    std::function<void(Fabric::Scope&, absl::StatusOr<CollectiveResult>&)> done;
  };
  // One segment's data work (64 bytes). An encode writes the segment's header (the context's
  // collective, step, chunk, segment, n elements) and its wire bytes; a decode checks the header
  // against the same fields (CheckSegment) and decodes, or decodes and adds.
  struct Item {
    enum class Op : uint8_t { kEncode, kEncodeFeedback, kDecode, kDecodeAdd };
    Op op = Op::kEncode;
    Codec codec = Codec::kFp32;
    bool starting = false;  // an encode of the collective's first sends (error wording)
    uint32_t n = 0;         // elements
    int32_t ring_step = 0;  // named by an error
    int32_t step = 0, chunk = 0, segment = 0;  // the segment's header
    uint64_t first = 0;     // index of the first element in the collective's buffer
    const float* src = nullptr;  // encode: the source; decode-add: the addend
    float* dst = nullptr;        // decode: the destination; encode: the adopt target or null
    SegmentPayload* payload = nullptr;  // encode: written; decode: read, then kept for reuse
    const Context* context = nullptr;
  };
  static_assert(sizeof(Item) == 64);

  DataLane();
  ~DataLane();
  DataLane(const DataLane&) = delete;
  DataLane& operator=(const DataLane&) = delete;

  // Queues `item`; it reaches the worker with the next Flush (at the latest once kBatch items
  // are queued).
  void Push(const Item& item);
  // Hands the queued items to the worker. Before reading pushed() for a WaitFor (a collective's
  // end: EventCommStream flushes before its `done`).
  void Flush();
  uint64_t pushed() const { return pushed_; }
  // A payload the lane has read and handed back, or null.
  std::unique_ptr<SegmentPayload> TakePayload();

  // Waits until the first `seq` items ran; the first data error, if any.
  [[nodiscard]] absl::Status WaitFor(uint64_t seq);
  uint64_t completed() const { return completed_.load(std::memory_order_acquire); }

 private:
  void Loop();
  absl::Status RunItem(const Item& it);
  void Report(const Item& it, const absl::Status& s);

  // Producer side (under the fabric's lock): items not handed over yet, in a block of their own
  // so that the worker's mutex is taken once per kBatch items, not twice a message.
  static constexpr size_t kBatch = 256;
  std::vector<Item> queued_;
  uint64_t pushed_ = 0;
  std::vector<SegmentPayload*> ready_payloads_;
  Mutex mu_;
  CondVar work_cv_, done_cv_;
  std::vector<Item> items_ ABSL_GUARDED_BY(mu_);
  std::vector<SegmentPayload*> returned_ ABSL_GUARDED_BY(mu_);
  bool sleeping_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t wanted_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> completed_{0};
  bool failed_ = false;  // worker only
  std::thread thread_;
};

}  // namespace rp::comm
