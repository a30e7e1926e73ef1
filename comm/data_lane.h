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
// Errors: a codec or FP32-sum overflow, a mismatched header, or an exception the item's work
// threw (ResourceExhausted for a payload it could not allocate, else Internal; the lane goes on)
// found by the lane fails that collective's data (with the message the stream gives it when the data runs under the lock,
// naming rank, collective, peer and ring step) and is kept for its device. The collective's later
// items do no data work: its encodes still write their headers but mark their payloads poisoned,
// and a peer that decodes a poisoned payload fails too — as a consequence (Aborted), not a root.
// So what fails is decided by the data alone, item by item in each collective's own order, never
// by the order in which different collectives' items reached the lane (host order): the same
// every run. Nothing is reported meanwhile — the timing runs on — and a device learns its own
// collectives' verdict with WaitFor(seq, device) before its optimizer reads the gradients (the
// executor then orders the devices' failures in modeled time, docs/executor.md).
//
// Thread safety: Push, pushed and TakePayload from one thread at a time (under the fabric's
// lock); WaitFor and completed from any thread. The destructor drops the items not run yet (no
// one waits for them: whoever pushed them is gone) and joins the worker; the buffers of items it
// may still be running must outlive it.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/codec.h"
#include "comm/communicator.h"
#include "comm/ring_timing.h"
#include "runtime/mutex.h"

namespace rp::comm {

struct SegmentPayload;

class DataLane {
 public:
  // What a data error of one collective names (EventCommStream fills it; reused for a later
  // collective only once the lane ran every item pushed for this one).
  struct Context {
    int rank = 0, device = 0, n = 1, peer = -1;
    ring::TimedKind kind{};
    Codec codec = Codec::kFp32;
    uint64_t op_id = 0;
    uint64_t count = 0;          // the collective's elements (a segment's header)
    float* residual = nullptr;   // error feedback: the residual of element 0
    uint64_t sequence = 0;       // the collective's place among its device's (stream order)
    int32_t tag = -1;            // the caller's name for it (EventCommStream::Collective::tag)
    mutable bool failed = false;  // written by the lane only: its data failed
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

  // Waits until the first `seq` items ran. Returns the data error of `device`'s collectives: a
  // root error (its own data overflowed or mismatched) of its earliest failed collective, else
  // the Aborted status of its earliest collective whose data only came from a failed one, else
  // OK — the same whatever order different collectives' items reached the lane in. `tag`
  // (optional) gets the failed collective's Context::tag. FailedPrecondition at once if `seq`
  // counts items not flushed yet (they would never run: the wait would never end).
  [[nodiscard]] absl::Status WaitFor(uint64_t seq, int device, int* tag = nullptr);
  // As WaitFor(seq, device), over every device: the root error of the lowest device that has
  // one, else the lowest consequence, else OK.
  [[nodiscard]] absl::Status WaitFor(uint64_t seq);
  uint64_t completed() const { return completed_.load(std::memory_order_acquire); }
  // The worker thread's kernel id (0 until it starts): a stall monitor's look at whether the host
  // runs it (runtime/thread_probe.h). Any thread.
  int worker_thread_id() const { return worker_tid_.load(std::memory_order_relaxed); }

 private:
  void Loop();
  absl::Status RunItemCatching(const Item& it);
  absl::Status RunItem(const Item& it);
  void Report(const Item& it, const absl::Status& s);
  absl::Status Await(uint64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

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
  uint64_t flushed_ ABSL_GUARDED_BY(mu_) = 0;  // items handed to the worker so far
  // A device's data error: the root error of its earliest failed collective (by sequence), else
  // the consequence of its earliest poisoned one.
  struct DeviceError {
    absl::Status status;
    bool root = false;
    uint64_t sequence = 0;
    int32_t tag = -1;
  };
  std::map<int, DeviceError> errors_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> completed_{0};
  std::atomic<int> worker_tid_{0};  // before thread_: set by the worker it starts
  std::thread thread_;
};

}  // namespace rp::comm
