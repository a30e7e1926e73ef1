// What a `ringpipe run` will allocate, estimated from its config before anything is allocated, and
// the check against what the machine has (MemAvailable), so that a run too big for the host is bad
// input (exit 2, naming the field that makes it big and the estimate) instead of an abort midway.
//
// The estimate adds, in bytes (in double: the products of huge fields must not overflow):
//   data set      DatasetPeakBytes (both splits, labels, the teacher's logits while labelling);
//   model         dp replicas of the model's fp32 weights, gradients and optimizer state (SGD 1, Adam 2
//                 copies; DualPipe two of each, every stage living on two ranks), the reference
//                 trainer's copy, the held-out evaluation's copy of replica 0 (virtual clock: weights
//                 and gradients) — both once per EP rank with MoE — and the all-reduce buffers
//                 (3 × gradients);
//   activations   per device, the activations of the micro-batches in flight (GPipe: all of them;
//                 other schedules: at most pp × virtual_stages, or the schedule's larger peak — ZB-H2
//                 2·pp − 1, interleaved its warm-up + 1 chunks), 3 tensors of microbatch_size rows
//                 per layer and width;
//   experts       (MoE) the blocks' routers and experts, which the dense count above misses: per
//                 replica tp copies of each device's router and E/ep experts (a block is never
//                 TP-sharded), the reference trainer's full model per EP rank, the evaluation copy;
//   expert activations  (MoE) per micro-batch in flight and block, the router's and the combine's
//                 tensors and the expert rows of d + 2h it received — top_k × microbatch_size per
//                 device on the whole (an EP group receives exactly what it sends, however skewed
//                 the routing), doubled for exchange buffers and backward temporaries; the reference
//                 trainer's micro-batch of each EP rank; the held-out evaluation's batch once;
//   step records  what the run keeps of every step until its end: each device's figures on two
//                 timelines (and EP byte counters), and with MoE the step's routing — kept slots per
//                 block, replica, micro-batch and expert — and per-expert token totals;
//   trace         the tracer's event buffers at their cap (kMaxTraceEvents events), their sorted
//                 copy and the export's piece of text when --trace is written (streamed to the file);
//   devices       a thread stack's resident part and the report entry per device.
// It is an upper-bound estimate, not a measurement: it errs on the large side.
//
// Thread safety: pure functions (AvailableMemoryBytes reads /proc/meminfo).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "apps/config_fields.h"

namespace rp::apps {

// Most trace events a run keeps (runtime/tracer.h max_events); ~90 MB of events.
inline constexpr size_t kMaxTraceEvents = size_t{1} << 20;

struct MemoryEstimate {
  struct Part {
    std::string what;   // "data set"
    std::string field;  // the config field that makes it big ("train_size")
    double bytes = 0;
  };
  std::vector<Part> parts;
  std::string subject = "the run";  // what allocates it, in CheckMemory's line ("the prediction")
  double total() const;
};

MemoryEstimate EstimateRunMemory(const RunConfig& cfg);
// The buffers of a run that do not grow with its devices' number: the data set and the replicas'
// weights, gradients and optimizer state (the estimate's "data set" and "model" parts). The host
// section of the report subtracts them from the peak RSS to give the RSS per device.
double ModelBufferBytes(const RunConfig& cfg);
// `predict`: the predictor's per-device state and the report of every device (measured: about 3 kB per
// device at DP = 65536, report written), the schedule program, and the timelines of the devices it
// plays and, with --report_json only, of the report's timeline rows.
MemoryEstimate EstimatePredictMemory(const RunConfig& cfg);

// MemAvailable of /proc/meminfo in bytes; +infinity when it cannot be read. The environment variable
// RINGPIPE_MEMORY_LIMIT_BYTES, when set to a number, replaces it (tests, and users who share a host).
double AvailableMemoryBytes();

// FieldError naming the largest part's field when the estimate is above `available`:
// "train_size: the run would allocate about 160 GB (data set 159 GB, ...); 7.5 GB available" (the
// estimate's subject: "the prediction" for `predict`).
absl::Status CheckMemory(const MemoryEstimate& estimate, double available = AvailableMemoryBytes());

}  // namespace rp::apps
