// Shared set-up of the expert-parallel executor tests (executor_ep_test.cc,
// executor_ep_codec_test.cc): a small MoE model, its executor options per layout, and the
// single-device reference in the run's partition and ring order.
#pragma once

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/model/reference_trainer.h"
#include "schedule/executor.h"
#include "schedule/generators.h"

namespace rp::schedule {

struct EpSetup {
  int dp = 2, pp = 2, tp = 1, ep = 2, m = 4;
  int top_k = 1;
  double capacity = 0;
  ScheduleKind kind = ScheduleKind::kOneFOneB;
};

inline std::string Name(const EpSetup& s) {
  std::string kind = ScheduleName(s.kind);
  for (char& ch : kind) {
    if (ch == '-') ch = '_';
  }
  return absl::StrCat(kind, "_dp", s.dp, "_pp", s.pp, "_tp", s.tp, "_ep", s.ep, "_top", s.top_k,
                      "_cap", static_cast<int>(s.capacity * 100));
}

// 16 -> 32 x 5 -> 10 (6 layers); layers 2 and 4 are MoE blocks of 4 experts (d 32 -> 16 -> 32).
inline ExecutorOptions MakeOptions(const EpSetup& s, int steps) {
  const bool two_chunks = s.kind == ScheduleKind::kZeroBubbleV || s.kind == ScheduleKind::kDualPipeV ||
                          s.kind == ScheduleKind::kDualPipe;  // a V, or one chunk per direction
  PipelineOptions po{.num_ranks = s.pp, .num_micro_batches = s.m, .num_chunks = two_chunks ? 2 : 1,
                     .activation_bytes = 1 << 16, .tp_allreduce_bytes = s.tp > 1 ? 4096u : 0u,
                     .gradient_bytes = 1 << 20};
  absl::StatusOr<Program> prog = BuildSchedule(s.kind, po);
  EXPECT_TRUE(prog.ok()) << prog.status();
  ExecutorOptions o;
  o.grid = {.dp = s.dp, .pp = s.pp, .tp = s.tp};
  o.program = *prog;
  o.model.hidden = {32, 32, 32, 32, 32};
  o.model.moe.layers = {2, 4};
  o.model.moe.experts = 4;
  o.model.moe.top_k = s.top_k;
  o.model.moe.expert_hidden = 16;
  o.model.moe.capacity_factor = s.capacity;
  o.ep = s.ep;
  o.microbatch_size = 8;
  o.cost = CostModel::Uniform({.forward = FromMillis(5), .backward = FromMillis(8),
                               .weight_grad = FromMillis(4), .optimizer = FromMillis(1)});
  o.links.intra_node = {.alpha = FromMicros(20), .bandwidth_gbps = 100,
                        .overhead = FromMicros(2)};
  o.links.inter_node = {.alpha = FromMicros(50), .bandwidth_gbps = 25, .overhead = FromMicros(5)};
  o.placement.devices_per_node = 4;
  o.segment_bytes = 4096;
  o.bucket_bytes = 64 << 10;
  o.virtual_time = true;
  o.steps = steps;
  o.eval_every = 0;
  o.eval_samples = 256;
  o.run_reference = false;
  return o;
}

inline absl::StatusOr<RunResult> CreateAndRun(const ExecutorOptions& o) {
  absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
  if (!ex.ok()) return ex.status();
  return (*ex)->Run();
}

// The reference of a run with options `o` and plan `plan` (which must outlive it): the run's
// partition, EP shards and ring order (its gradient buckets).
inline ReferenceOptions ReferenceFor(const ExecutorOptions& o, const ExecutionPlan& plan) {
  const int stages = o.program.num_model_stages();
  ReferenceOptions ro{.model = o.model,
                      .layout = {.dp = o.grid.dp, .microbatches = o.program.num_micro_batches,
                                 .microbatch_size = o.microbatch_size},
                      .optimizer = o.optimizer,
                      .num_stages = stages,
                      .tp = o.grid.tp,
                      .layers_per_stage = {},
                      .ep = o.ep,
                      .shard_experts = true,
                      .ring_buckets = {}};
  for (int k = 0; k < stages; ++k) {
    ro.ring_buckets.emplace_back();
    const ChunkPlan& chunk = plan.Chunk(o.program.RankOfModelStage(k), o.program.ChunkOfModelStage(k));
    for (const BucketPlan& b : chunk.buckets) {
      ro.ring_buckets.back().push_back({static_cast<int64_t>(b.grad_offset),
                                        static_cast<int64_t>(b.grad_count)});
    }
  }
  return ro;
}

}  // namespace rp::schedule
