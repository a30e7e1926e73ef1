#include "comm/data_lane.h"

#include <exception>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "comm/ring_machine.h"
#include "runtime/status_macros.h"
#include "runtime/thread_probe.h"

namespace rp::comm {
namespace {

// The worker sleeps when it has caught up, and is woken once this many items wait (or by a
// WaitFor): a wake-up per few messages cost more system time than the lane saved.
constexpr size_t kWakeAt = 8192;

}  // namespace

DataLane::DataLane() : thread_([this] { Loop(); }) { queued_.reserve(kBatch); }

DataLane::~DataLane() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    work_cv_.Signal();
  }
  thread_.join();
  for (const Item& it : queued_) {  // never handed over: dropped like the worker's (Loop)
    if (it.op == Item::Op::kDecode || it.op == Item::Op::kDecodeAdd) delete it.payload;
  }
  for (SegmentPayload* p : ready_payloads_) delete p;
  MutexLock lock(&mu_);
  for (SegmentPayload* p : returned_) delete p;
}

void DataLane::Push(const Item& item) {
  ++pushed_;
  queued_.push_back(item);
  if (queued_.size() >= kBatch) Flush();
}

void DataLane::Flush() {
  if (queued_.empty()) return;
  MutexLock lock(&mu_);
  flushed_ += queued_.size();
  if (items_.empty()) {
    items_.swap(queued_);
  } else {
    items_.insert(items_.end(), queued_.begin(), queued_.end());
    queued_.clear();
  }
  if (sleeping_ && (items_.size() >= kWakeAt || wanted_ > completed())) {
    sleeping_ = false;
    work_cv_.Signal();
  }
}

std::unique_ptr<SegmentPayload> DataLane::TakePayload() {
  if (ready_payloads_.empty()) {
    MutexLock lock(&mu_);
    ready_payloads_.swap(returned_);
  }
  if (ready_payloads_.empty()) return nullptr;
  std::unique_ptr<SegmentPayload> p(ready_payloads_.back());
  ready_payloads_.pop_back();
  return p;
}

absl::Status DataLane::WaitFor(uint64_t seq, int device, int* tag) {
  MutexLock lock(&mu_);
  RP_RETURN_IF_ERROR(Await(seq));
  const auto it = errors_.find(device);
  if (it == errors_.end()) return absl::OkStatus();
  if (tag != nullptr) *tag = it->second.tag;
  return it->second.status;
}

absl::Status DataLane::WaitFor(uint64_t seq) {
  MutexLock lock(&mu_);
  RP_RETURN_IF_ERROR(Await(seq));
  for (const auto& [device, e] : errors_) {
    if (e.root) return e.status;
  }
  return errors_.empty() ? absl::OkStatus() : errors_.begin()->second.status;
}

absl::Status DataLane::Await(uint64_t seq) {
  if (completed() >= seq) return absl::OkStatus();
  // Items not handed over would never run: a wait for them would never end.
  if (seq > flushed_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "DataLane::WaitFor(", seq, ") beyond the ", flushed_,
        " items flushed: Flush before reading pushed()"));
  }
  if (seq > wanted_) wanted_ = seq;
  if (sleeping_) {
    sleeping_ = false;
    work_cv_.Signal();
  }
  while (completed() < seq) done_cv_.Wait(&mu_);
  return absl::OkStatus();
}

// An exception (an allocation of the payload's wire bytes that fails) is the item's error, as a
// data error: its collective fails with the rank, peer and ring step named, and the lane goes on —
// it would otherwise end the process with no report.
absl::Status DataLane::RunItemCatching(const Item& it) {
  const auto failed = [&it](absl::Status s) {
    // An encode that threw wrote no valid bytes: its receiver must not decode them.
    if (it.op == Item::Op::kEncode || it.op == Item::Op::kEncodeFeedback) it.payload->poisoned = true;
    return s;
  };
  try {
    return RunItem(it);
  } catch (const std::bad_alloc& e) {
    return failed(absl::ResourceExhaustedError(absl::StrCat("out of memory on the data lane (", e.what(), ")")));
  } catch (const std::exception& e) {
    return failed(absl::InternalError(absl::StrCat("exception on the data lane: ", e.what())));
  } catch (...) {
    return failed(absl::InternalError("exception on the data lane: unknown exception"));
  }
}

absl::Status DataLane::RunItem(const Item& it) {
  SegmentPayload& p = *it.payload;
  const Context& c = *it.context;
  switch (it.op) {
    case Item::Op::kEncode:
    case Item::Op::kEncodeFeedback: {
      p.op_id = c.op_id;
      p.count = c.count;
      p.elems = it.n;
      p.step = it.step;
      p.chunk = it.chunk;
      p.segment = it.segment;
      p.kind = c.kind;
      p.codec = it.codec;
      p.poisoned = c.failed;
      if (it.n == 0 || c.failed) return absl::OkStatus();
      absl::Status s = EncodeSegment(it.codec, it.src, it.n,
                                     it.op == Item::Op::kEncodeFeedback ? c.residual + it.first : nullptr,
                                     p.Reserve(SegmentWireBytes(it.codec, it.n)), it.first, it.dst);
      if (!s.ok()) p.poisoned = true;  // its bytes are not the segment's
      return s;
    }
    case Item::Op::kDecode:
    case Item::Op::kDecodeAdd: {
      if (c.failed) return absl::OkStatus();
      absl::Status s = CheckSegment(p, c.op_id, c.kind, c.count, it.codec, it.step, it.chunk,
                                    it.segment, it.n);
      if (!s.ok()) return s;
      if (p.poisoned) {
        return absl::AbortedError("its data came from a collective whose data had failed");
      }
      if (it.n == 0) return absl::OkStatus();
      return DecodeSegment(it.codec, it.op == Item::Op::kDecodeAdd ? it.src : nullptr, p.data(),
                           it.n, it.dst, it.first);
    }
  }
  return absl::OkStatus();
}

// Keeps a data error for the collective's device, with the message EventCommStream::Fail gives
// one found under the lock; the collective's data stops (Context::failed).
void DataLane::Report(const Item& it, const absl::Status& s) {
  const Context& c = *it.context;
  c.failed = true;
  const bool encode = it.op == Item::Op::kEncode || it.op == Item::Op::kEncodeFeedback;
  const bool root = !absl::IsAborted(s);
  const char* what = encode && it.starting                             ? "starting, next"
                     : s.code() == absl::StatusCode::kFailedPrecondition || !root ? "receiving from"
                                                                         : "reducing data of";
  const absl::Status out =
      RingRankError(s, c.rank, c.n, c.device, c.kind, c.op_id, what, c.peer, it.ring_step);
  MutexLock lock(&mu_);
  auto [at, inserted] = errors_.try_emplace(c.device);
  DeviceError& e = at->second;
  // A root error beats a consequence; among roots, and among consequences, the device's earliest
  // collective (its items reach the lane in its own order, so the first error found in a
  // collective is its first; different collectives' items reach it in host order).
  if (inserted || (root && !e.root) || (root == e.root && c.sequence < e.sequence)) {
    e = DeviceError{.status = out, .root = root, .sequence = c.sequence, .tag = c.tag};
  }
}

void DataLane::Loop() {
  worker_tid_.store(CurrentThreadId(), std::memory_order_relaxed);
  std::vector<Item> batch;
  std::vector<SegmentPayload*> read;
  uint64_t done = 0;
  while (true) {
    {
      MutexLock lock(&mu_);
      returned_.insert(returned_.end(), read.begin(), read.end());
      read.clear();
      completed_.store(done, std::memory_order_release);
      if (done >= wanted_) done_cv_.SignalAll();
      while (items_.empty() && !stop_) {
        sleeping_ = true;
        work_cv_.Wait(&mu_);
      }
      sleeping_ = false;
      if (stop_) {
        // Whoever pushed is gone (a run that failed before its optimizer waited): nothing reads
        // these buffers any more, so their items are dropped; their payloads are freed.
        for (const Item& it : items_) {
          if (it.op == Item::Op::kDecode || it.op == Item::Op::kDecodeAdd) delete it.payload;
        }
        items_.clear();
        return;
      }
      batch.swap(items_);
    }
    for (const Item& it : batch) {
      if (const absl::Status s = RunItemCatching(it); !s.ok()) Report(it, s);
      if (it.op == Item::Op::kDecode || it.op == Item::Op::kDecodeAdd) read.push_back(it.payload);
      // Item by item, not batch by batch: a stall monitor reads it as progress (a batch of a
      // 256-replica ring's reductions outlasted a 50 ms watchdog on a busy host).
      completed_.store(++done, std::memory_order_release);
    }
    batch.clear();
  }
}

}  // namespace rp::comm
