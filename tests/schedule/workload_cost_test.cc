// schedule/workload_cost: the FLOPs model, message sizes and predicted wire bytes against closed forms.
#include "schedule/workload_cost.h"

#include <cstdint>

#include "gtest/gtest.h"
#include "schedule/generators.h"
#include "tests/schedule/predict_helpers.h"

namespace rp::schedule {
namespace {

TEST(WorkloadCost, TransformerForwardFlopsIsNarayanansFormula) {
  const TransformerModel m{.device = "a100", .efficiency = 0.5, .layers = 4, .hidden = 1024, .seq_len = 512,
                           .microbatch_size = 2};
  // 24·b·s·h²·(1 + s/(6h)) = 24·2·512·1024²·(1 + 512/6144).
  EXPECT_DOUBLE_EQ(TransformerLayerForwardFlops(m), 24.0 * 2 * 512 * 1024.0 * 1024 * (1 + 512.0 / 6144));
  EXPECT_EQ(*DevicePeakTflops("a100"), 312.0);
  EXPECT_EQ(*DevicePeakTflops("h100"), 989.0);
  EXPECT_EQ(DevicePeakTflops("tpu").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(WorkloadCost, TransformerCostSplitsLayersAndShardsOverPipelineAndTensorRanks) {
  const TransformerModel m{.device = "a100", .efficiency = 0.5, .layers = 5, .hidden = 1024, .seq_len = 512,
                           .microbatch_size = 2};
  auto c = CostOfTransformer(m, /*pp=*/2, /*virtual_stages=*/1, /*tp=*/2);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->cost.stages.size(), 2u);
  const double per_layer_ns = TransformerLayerForwardFlops(m) / 2 / (312e12 * 0.5) * 1e9;
  // Rank 0 holds 3 layers, rank 1 two (5 balanced over 2); each TP shard half of their FLOPs.
  EXPECT_NEAR(static_cast<double>(c->cost.stages[0].forward.count()), 3 * per_layer_ns, 1);
  EXPECT_NEAR(static_cast<double>(c->cost.stages[1].forward.count()), 2 * per_layer_ns, 1);
  EXPECT_NEAR(static_cast<double>(c->cost.stages[0].backward.count()), 6 * per_layer_ns, 1);
  EXPECT_EQ(c->bytes.activation_message, uint64_t{2} * 512 * 1024 * 2);  // b·s·h bf16
  // fp32 gradients of 3 layers of 12h² + 13h parameters, halved by TP.
  EXPECT_EQ(c->bytes.gradient, uint64_t{3} * (12ull * 1024 * 1024 + 13 * 1024) / 2 * 4);
  // Two all-reduces of b·s·h bf16 values per layer, the busiest chunk holding 3 layers.
  EXPECT_EQ(c->bytes.tp_allreduce, uint64_t{3} * 2 * (2 * 512) * 1024 * 2);
  // Stored activations s·b·h·(10 + 24/t) per layer.
  EXPECT_EQ(c->bytes.stored[1], static_cast<uint64_t>(2 * 512.0 * 2 * 1024 * (10 + 12)));
}

TEST(WorkloadCost, TransformerCostRefusesTimesBeyondTheTimeBase) {
  const TransformerModel huge{.device = "a100", .efficiency = 0.01, .layers = 1 << 20, .hidden = 1 << 24,
                              .seq_len = 1 << 24, .microbatch_size = 1 << 20};
  EXPECT_EQ(CostOfTransformer(huge, 1, 1, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CostOfTransformer({.layers = 2}, 4, 1, 1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(WorkloadCost, MlpBytesAreTheRealStagesSizes) {
  MlpConfig mlp;
  mlp.input_dim = 8;
  mlp.hidden = {16, 32, 16};
  mlp.classes = 4;
  auto b = MlpWorkloadBytes(mlp, /*pp=*/2, /*virtual_stages=*/1, /*tp=*/1, {}, /*microbatch_size=*/5);
  ASSERT_TRUE(b.ok()) << b.status();
  // 4 layers over 2 stages: stage 0 = 8->16->32, it sends 5 rows of 32 floats.
  EXPECT_EQ(b->activation_message, uint64_t{5} * 32 * 4);
  EXPECT_EQ(b->tp_allreduce, 0u);
  // Gradients of the busiest stage: max(8·16+16 + 16·32+32, 32·16+16 + 16·4+4) floats.
  EXPECT_EQ(b->gradient, uint64_t{8 * 16 + 16 + 16 * 32 + 32} * 4);
  ASSERT_EQ(b->stored.size(), 2u);
  EXPECT_GT(b->stored[0], 0u);
}

TEST(WorkloadCost, PredictedWireBytesFollowTheRingFormula) {
  PipelineOptions po{.num_ranks = 2, .num_micro_batches = 3, .num_chunks = 1, .activation_bytes = 1000,
                     .gradient_bytes = 4096};
  auto prog = BuildSchedule(ScheduleKind::kOneFOneB, po);
  ASSERT_TRUE(prog.ok()) << prog.status();
  for (comm::Codec codec : {comm::Codec::kFp32, comm::Codec::kBf16}) {
    absl::StatusOr<ExecutionPlan> plan = PlanOf(*prog, CostModel::Uniform({}), {.dp = 4, .pp = 2});
    ASSERT_TRUE(plan.ok()) << plan.status();
    plan->options.codec = codec;
    const std::vector<PredictedWire> w = PredictWireBytes(*plan);
    ASSERT_EQ(w.size(), 2u);
    // Rank 0 sends 3 activations, rank 1 three gradients back (same size).
    EXPECT_EQ(w[0].p2p, 3000u);
    EXPECT_EQ(w[1].p2p, 3000u);
    for (int s = 0; s < 2; ++s) {
      // Each ring member sends 2(n − 1) modeled chunks of ceil(E / n) elements per bucket, in one
      // message each (no segment size): 4 bytes per FP32 element, 2 per BF16 one.
      uint64_t expect = 0;
      for (const BucketPlan& b : plan->Chunk(s, 0).buckets) {
        expect += 2 * 3 * ((b.modeled_elements + 3) / 4) * (codec == comm::Codec::kFp32 ? 4 : 2);
      }
      EXPECT_GT(expect, 0u);
      EXPECT_EQ(w[static_cast<size_t>(s)].dp, expect) << "rank " << s;
      EXPECT_EQ(w[static_cast<size_t>(s)].tp, 0u);
      EXPECT_EQ(w[static_cast<size_t>(s)].total(), w[static_cast<size_t>(s)].p2p + expect);
    }
  }
}

}  // namespace
}  // namespace rp::schedule
