// Named starting configurations of `ringpipe run` / `predict` (docs/config.md lists each one).
//
//   default  DP=2 x PP=2 x TP=2 (8 devices on 2 nodes of 4, DGX A100 links), 1F1B, 4 micro-batches of
//            32, F 2 ms / B 4 ms, 80 steps of SGD: a few seconds, held-out accuracy ~0.6 (chance ~0.15).
//   s1       docs/scenarios.md S1: PP=2, DP=2, m=8 (global batch 256), F 50 ms, B 80 ms, 1F1B; every
//            transfer between replicas (each ring step) takes 20 ms, a replica's two stages share a node
//            and talk for free: step 1170 + 40 = 1210 ms, T1 4160 ms, speedup 3.44.
//   s2       docs/scenarios.md S2: K=3 stages, D=4 replicas, M=6, INT8 ring all-reduce, lr 0.01.
//   s3-0d .. s3-4d  the N-D ladder of S3: one workload (8 micro-batches of 32 per step, a described
//            16-layer transformer on A100s via the FLOPs cost model) on 1 device, DP=2, DP=2 x PP=2,
//            DP=2 x PP=2 x TP=2; s3-4d the same with MoE blocks (layers 2 and 4: 4 experts, top-2,
//            capacity 1.25) and EP=2 carved out of DP=2 (DP x PP x TP x EP).
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "apps/config_fields.h"

namespace rp::apps {

// The preset's config (not yet validated: flags may still change it). NotFound naming the presets
// otherwise.
absl::StatusOr<RunConfig> PresetByName(const std::string& name);

// Every preset name, in documentation order.
std::vector<std::string> PresetNames();

}  // namespace rp::apps
