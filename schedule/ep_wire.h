// The wire of the EP all-to-alls, written once for the three places that must agree on it: the
// emulator (schedule/runner_ep.cc: the real AllToAllV), the predictor (schedule/predictor_ep.cc:
// the modeled message sizes) and the serial reference of a lossy EP run (EpWireOracle).
//
// Words as in comm/alltoall_steps.h and docs/collectives.md "All-to-all": a real token row of
// width d is one unit of d real elements that stands for ExecutionPlan::EpRowElements(d) modeled
// FP32 elements; blocks are cut into messages of ring_segment_bytes / 4 modeled elements; the
// token rows travel in PlanOptions::ep_codec (the counts are metadata, 8 bytes each, whatever the
// codec). A block a rank addresses to itself never travels and is never encoded.
//
// Exactness: with FP32 the EP run is bit-identical to the serial reference; with a lossy ep_codec
// every row that crosses EP ranks arrives as Decode(Encode(piece)) of the message piece it rode in
// (comm/codec.h), in the forward passes and the backward ones alike, and EpWireOracle reproduces
// exactly that, so the reference with ReferenceOptions::ep_wire = EpWireOracle(plan) is again
// bit-identical (tests/schedule/executor_ep_codec_test.cc).
//
// Example (a reference for an executor run with a lossy ep_codec):
//   RP_ASSIGN_OR_RETURN(ExecutionPlan plan, BuildPlan(PlanOptionsFor(options)));
//   ReferenceOptions ro{... .ep = options.ep, .shard_experts = true ...};
//   ro.ep_wire = EpWireOracle(plan);
#pragma once

#include <cstdint>

#include "comm/alltoall_timing.h"
#include "runtime/model/moe.h"
#include "schedule/plan.h"

namespace rp::schedule {

// The modeled sizes of an EP all-to-all of rows of `width` floats at training step `step`.
comm::a2a::AllToAllWireModel EpWireModel(const ExecutionPlan& plan, int64_t width, int step);

// The modeled messages of an EP block of `rows` rows of `width` floats.
comm::a2a::BlockShape EpBlockShape(const ExecutionPlan& plan, int64_t width, int64_t rows);

// What a block crossing EP ranks becomes on the wire (EpWireFn for ReferenceOptions::ep_wire):
// comm::a2a::RoundTripTimedBlock with the plan's ep_codec, row model and segment. Null for FP32
// (the wire is exact). The plan must outlive the function.
EpWireFn EpWireOracle(const ExecutionPlan& plan);

}  // namespace rp::schedule
