// Helpers of the executor tests: a run setup, its options (small MLP, uniform costs, α–β links,
// virtual clock) and create-and-run.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "schedule/executor.h"
#include "schedule/generators.h"

namespace rp::schedule {

struct RunSetup {
  ScheduleKind kind = ScheduleKind::kOneFOneB;
  int dp = 2, pp = 3, tp = 2, m = 4, v = 1;
  bool fused = true;
};

// Creates an executor for `o` and runs it; the first error of either.
inline absl::StatusOr<RunResult> CreateAndRun(const ExecutorOptions& o) {
  absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
  if (!ex.ok()) return ex.status();
  return (*ex)->Run();
}

inline ExecutorOptions MakeOptions(const RunSetup& s, int steps) {
  PipelineOptions po{.num_ranks = s.pp, .num_micro_batches = s.m, .num_chunks = s.v,
                     .activation_bytes = 1 << 16, .tp_allreduce_bytes = s.tp > 1 ? 4096u : 0u,
                     .gradient_bytes = 1 << 20, .buckets_per_chunk = 2, .fused_fb = s.fused};
  absl::StatusOr<Program> prog = BuildSchedule(s.kind, po);
  EXPECT_TRUE(prog.ok()) << prog.status();
  ExecutorOptions o;
  o.grid = {.dp = s.dp, .pp = s.pp, .tp = s.tp};
  o.program = *prog;
  o.model.hidden = std::vector<int>(s.v > 1 ? 11 : 5, 32);  // 12 layers: 2 per model stage at K = 6
  o.microbatch_size = 8;
  o.cost = CostModel::Uniform({.forward = FromMillis(5), .backward = FromMillis(8),
                               .weight_grad = FromMillis(4), .optimizer = FromMillis(1)});
  o.links.intra_node = {.alpha = FromMicros(20), .bandwidth_gbps = 100};
  o.links.inter_node = {.alpha = FromMicros(50), .bandwidth_gbps = 25};
  o.placement.devices_per_node = 4;
  o.virtual_time = true;
  o.steps = steps;
  o.eval_every = 0;
  o.eval_samples = 512;
  return o;
}

inline std::string Name(const RunSetup& s) {
  std::string kind = ScheduleName(s.kind);
  for (char& ch : kind) {
    if (ch == '-') ch = '_';
  }
  return kind + "_dp" + std::to_string(s.dp) + "_pp" +
         std::to_string(s.pp) + "_tp" + std::to_string(s.tp) + "_m" + std::to_string(s.m) + "_v" +
         std::to_string(s.v) + (s.fused ? "" : "_apart");
}

}  // namespace rp::schedule
