// Helpers of the executor's fault tests (executor_faults_test.cc, executor_slow_test.cc): a small
// 1F1B layout on the virtual clock, and a healthy run of it.
#pragma once

#include <algorithm>
#include <chrono>
#include <memory>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "schedule/executor.h"
#include "schedule/generators.h"

namespace rp::schedule::faults_testing {

// 1F1B over `pp` ranks, m = 2, a tiny MLP, α–β–o links (replicas on separate nodes), virtual clock.
inline ExecutorOptions Small(int steps, int dp = 2, int pp = 2) {
  PipelineOptions po{.num_ranks = pp, .num_micro_batches = 2, .activation_bytes = 1 << 14,
                     .gradient_bytes = 1 << 16};
  absl::StatusOr<Program> prog = BuildOneFOneB(po);
  EXPECT_TRUE(prog.ok()) << prog.status();
  ExecutorOptions o;
  o.grid = {.dp = dp, .pp = pp, .tp = 1};
  o.placement.devices_per_node = pp;
  o.links.devices_per_node = pp;
  o.program = *prog;
  o.model.hidden = std::vector<int>(static_cast<size_t>(std::max(pp, 3)), 16);
  o.microbatch_size = 4;
  o.dataset.train_size = 256;
  o.dataset.test_size = 64;
  o.cost = CostModel::Uniform({.forward = FromMillis(2), .backward = FromMillis(3),
                               .optimizer = FromMillis(1)});
  o.links.intra_node = {.alpha = FromMicros(20), .bandwidth_gbps = 10, .overhead = FromMicros(1)};
  o.links.inter_node = {.alpha = FromMicros(50), .bandwidth_gbps = 5, .overhead = FromMicros(3)};
  o.virtual_time = true;
  o.steps = steps;
  o.eval_every = 0;
  o.eval_samples = 64;
  o.run_reference = false;
  o.watchdog_timeout = std::chrono::milliseconds(300);
  return o;
}

// A healthy run of `o`: its parameters after the run and its result.
struct Healthy {
  std::unique_ptr<Executor> executor;
  RunResult result;
};
inline Healthy RunHealthy(const ExecutorOptions& o) {
  absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
  EXPECT_TRUE(ex.ok()) << ex.status();
  if (!ex.ok()) return {};
  absl::StatusOr<RunResult> r = (*ex)->Run();
  EXPECT_TRUE(r.ok()) << r.status();
  return {std::move(*ex), r.ok() ? *std::move(r) : RunResult{}};
}

}  // namespace rp::schedule::faults_testing
