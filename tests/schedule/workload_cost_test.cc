// schedule/workload_cost: the FLOPs model, message sizes and predicted wire bytes against closed forms.
#include "schedule/workload_cost.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/model/mlp.h"
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

// Model stage k holds its own balanced share of the layers and is timed and sized by it; a rank is
// the sum of the stages its program's placement gives it. 14 layers over 8 stages (pp 4 × v 2):
// stages 0–5 hold 2 layers, 6 and 7 one. The loop placement puts stages r and r + 4 on rank r
// (4, 4, 3, 3 layers), a V stages r and 7 − r (3, 3, 4, 4).
TEST(WorkloadCost, TransformerStagesKeepTheirOwnLayersAndFollowThePlacement) {
  const TransformerModel m{.device = "a100", .efficiency = 0.5, .layers = 14, .hidden = 1024, .seq_len = 512};
  auto c = CostOfTransformer(m, /*pp=*/4, /*virtual_stages=*/2, /*tp=*/1);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->cost.model_stages.size(), 8u);
  ASSERT_EQ(c->cost.stage_stored.size(), 8u);
  const double layer_ns = TransformerLayerForwardFlops(m) / (312e12 * 0.5) * 1e9;
  const std::vector<int> layers = {2, 2, 2, 2, 2, 2, 1, 1};
  for (size_t k = 0; k < 8; ++k) {
    EXPECT_NEAR(static_cast<double>(c->cost.model_stages[k].forward.count()), layers[k] * layer_ns, 1) << k;
    EXPECT_EQ(c->bytes.stage_gradient[k], static_cast<uint64_t>(layers[k]) * (12ull * 1024 * 1024 + 13 * 1024) * 4);
    EXPECT_EQ(c->cost.stage_stored[k].after_forward, c->cost.stage_stored[7].after_forward * static_cast<uint64_t>(layers[k]));
  }
  const double loop[] = {4, 4, 3, 3}, vee[] = {3, 3, 4, 4};
  for (int r = 0; r < 4; ++r) {
    EXPECT_NEAR(static_cast<double>(c->cost.stages[static_cast<size_t>(r)].forward.count()), loop[r] * layer_ns, 2) << r;
  }
  auto prog = BuildZeroBubbleV({.num_ranks = 4, .num_micro_batches = 8, .num_chunks = 2});
  ASSERT_TRUE(prog.ok()) << prog.status();
  CostModel placed = c->cost;
  ASSERT_TRUE(PlaceStageCosts(*prog, placed).ok());
  for (int r = 0; r < 4; ++r) {
    EXPECT_NEAR(static_cast<double>(placed.stages[static_cast<size_t>(r)].forward.count()), vee[r] * layer_ns, 2) << r;
    EXPECT_EQ(placed.stages[static_cast<size_t>(r)].activation_bytes,
              c->cost.stage_stored[7].after_forward * static_cast<uint64_t>(vee[r]));
  }
  // Two directions count per direction: a DualPipe rank's two stages' mean.
  auto dual = CostOfTransformer(m, 4, 1, 1);
  ASSERT_TRUE(dual.ok());
  auto dprog = BuildDualPipe({.num_ranks = 4, .num_micro_batches = 8, .num_chunks = 2});
  ASSERT_TRUE(dprog.ok()) << dprog.status();
  CostModel dplaced = dual->cost;
  ASSERT_TRUE(PlaceStageCosts(*dprog, dplaced).ok());
  for (int r = 0; r < 4; ++r) {  // stages r and 3 − r; 14 layers over 4: 4, 4, 3, 3
    EXPECT_EQ(dplaced.stages[static_cast<size_t>(r)].forward,
              (dual->cost.model_stages[static_cast<size_t>(r)].forward +
               dual->cost.model_stages[static_cast<size_t>(3 - r)].forward) / 2) << r;
  }
  // A per-stage list of the wrong length is refused.
  placed.model_stages.pop_back();
  EXPECT_EQ(PlaceStageCosts(*prog, placed).code(), absl::StatusCode::kInvalidArgument);
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

struct StageLayout {
  int pp, v, tp;
  std::vector<int> layers_per_stage;
};

// Every stage's stored bytes in MlpWorkloadBytes equal those a forward (and a Bi) of the whole
// micro-batch stores on a fresh stage — what MlpWorkloadBytes measured before it fitted them from a
// few small row counts.
void ExpectStoredBytesOfAWholeMicroBatch(const MlpConfig& mlp, const StageLayout& l, int rows,
                                         const std::string& config) {
  const TpAllReduceFn identity = [](std::span<float>) { return absl::OkStatus(); };
  absl::StatusOr<WorkloadBytes> b = MlpWorkloadBytes(mlp, l.pp, l.v, l.tp, l.layers_per_stage, rows);
  ASSERT_TRUE(b.ok()) << b.status();
  absl::StatusOr<ModelPartition> part = PartitionMlp(mlp, l.pp * l.v, l.tp, l.layers_per_stage);
  ASSERT_TRUE(part.ok()) << part.status();
  ASSERT_EQ(b->stage_stored.size(), static_cast<size_t>(l.pp * l.v));
  std::vector<uint64_t> stored(static_cast<size_t>(l.pp), 0);
  for (int k = 0; k < l.pp * l.v; ++k) {
    absl::StatusOr<std::unique_ptr<MlpStage>> stage = MlpStage::Create(mlp, *part, k, /*tp_rank=*/0);
    ASSERT_TRUE(stage.ok()) << stage.status();
    const Tensor x(rows, (*stage)->input_dim());
    ASSERT_TRUE((*stage)->Forward(0, x, identity).ok());
    const auto after_forward = static_cast<uint64_t>((*stage)->activation_bytes());
    const Tensor dy(rows, (*stage)->output_dim());
    ASSERT_TRUE((*stage)->BackwardInput(0, dy, identity).ok());
    const auto after_input_grad = static_cast<uint64_t>((*stage)->activation_bytes());
    const std::string where = config + " pp " + std::to_string(l.pp) + " v " + std::to_string(l.v) +
                              " tp " + std::to_string(l.tp) + " rows " + std::to_string(rows) +
                              " stage " + std::to_string(k);
    EXPECT_GT(after_forward, 0u) << where;
    EXPECT_EQ(b->stage_stored[static_cast<size_t>(k)].after_forward, after_forward) << where;
    EXPECT_EQ(b->stage_stored[static_cast<size_t>(k)].after_input_grad, after_input_grad) << where;
    stored[static_cast<size_t>(k % l.pp)] += after_forward;
  }
  EXPECT_EQ(b->stored, stored) << config << " rows " << rows;
}

// Dense stages keep tensors of `rows` rows only: over partitions with TP shards, uneven layer
// counts, virtual stages and several row counts.
TEST(WorkloadCost, DenseStoredBytesEqualAWholeMicroBatchsForward) {
  MlpConfig mlp;
  mlp.input_dim = 12;
  mlp.hidden = {32, 48, 32, 64, 32};
  mlp.classes = 6;
  for (const StageLayout& l : {StageLayout{1, 1, 1, {}}, StageLayout{2, 1, 2, {}}, StageLayout{3, 1, 1, {1, 2, 3}},
                               StageLayout{2, 2, 2, {}}, StageLayout{2, 1, 1, {5, 1}}}) {
    for (int rows : {1, 7, 64}) ExpectStoredBytesOfAWholeMicroBatch(mlp, l, rows, "dense");
  }
}

// A MoE block keeps its experts' rows only for the (token, slot)s the capacity keeps, which rounds
// with the row count (⌈C·k·T/E⌉): the fit from small row counts must still give a whole
// micro-batch's bytes — dropless, capacities that drop from 2 or 3 rows on, ones close to 1 that
// drop only from 100, 200 or 10 000 rows on (C·k/E = 0.99, 0.995, 0.9999), top-1 and top-2, one
// and several blocks per stage next to dense layers, TP-sharded dense layers, a skewed router.
TEST(WorkloadCost, MoeStoredBytesEqualAWholeMicroBatchsForward) {
  struct Moe {
    int experts, top_k;
    double capacity;
    double skew;
  };
  for (const Moe& m : {Moe{4, 1, 0, 0}, Moe{4, 2, 1.25, 0}, Moe{2, 1, 0.5, 0}, Moe{4, 1, 1.0, 0.5},
                       Moe{2, 2, 3.0, 0}, Moe{2, 2, 0.99, 0}, Moe{4, 2, 1.99, 0.5}, Moe{1, 1, 0.7, 0},
                       Moe{2, 2, 0.9999, 0}}) {
    MlpConfig mlp;
    mlp.input_dim = 12;
    mlp.hidden = {24, 24, 24, 24};
    mlp.classes = 6;
    mlp.moe.layers = {1, 3};
    mlp.moe.experts = m.experts;
    mlp.moe.top_k = m.top_k;
    mlp.moe.expert_hidden = 16;
    mlp.moe.capacity_factor = m.capacity;
    mlp.moe.router_skew = m.skew;
    const std::string config = "E " + std::to_string(m.experts) + " k " + std::to_string(m.top_k) +
                               " C " + std::to_string(m.capacity);
    for (const StageLayout& l : {StageLayout{1, 1, 1, {}}, StageLayout{2, 1, 2, {}}, StageLayout{2, 1, 1, {3, 2}}}) {
      for (int rows : {1, 2, 3, 4, 7, 64, 150, 450, 20001}) {
        ExpectStoredBytesOfAWholeMicroBatch(mlp, l, rows, config);
      }
    }
  }
}

// Pricing a layout builds no stage: a model of 2^36 weights (256 GiB of fp32, beyond this host's
// memory: building its stage would throw std::bad_alloc) with a MoE block — and the config fuzzer's
// input that took 45 s under ASan when the stored bytes were measured on real stages (1024 x 3, two
// experts of hidden 9783 on every layer, 30 000 rows: 1.3 GB of stages).
TEST(WorkloadCost, PricesAModelWithoutBuildingIt) {
  MlpConfig huge;
  huge.input_dim = 16;
  huge.hidden = {1 << 18, 1 << 18};
  huge.classes = 4;
  huge.moe.layers = {1};
  huge.moe.experts = 8;
  huge.moe.top_k = 2;
  huge.moe.expert_hidden = 1 << 14;
  huge.moe.capacity_factor = 1.0;
  absl::StatusOr<WorkloadBytes> b = MlpWorkloadBytes(huge, /*pp=*/1, /*v=*/1, /*tp=*/1, {}, /*microbatch_size=*/4);
  ASSERT_TRUE(b.ok()) << b.status();
  // 16·2^18 + 2^18, the block (router 2^18·8, 8 experts of 2·2^18·2^14 + 2^14 + 2^18), 2^18·4 + 4.
  const uint64_t d = 1 << 18, h = 1 << 14;
  EXPECT_EQ(b->gradient, (16 * d + d + d * 8 + 8 * (2 * d * h + h + d) + d * 4 + 4) * sizeof(float));
  // 4 equal rows; capacity ⌈1·2·4/8⌉ = 1 per expert: 2 kept (token, slot)s.
  EXPECT_EQ(b->stored[0], (4 * (16 + d) + 4 * (d + 8) + 2 * (2 * d + 2 * h) + 4 * d) * sizeof(float));

  MlpConfig fuzz;
  fuzz.input_dim = 784;
  fuzz.hidden = {1024, 1024, 1024};
  fuzz.classes = 10;
  fuzz.moe.layers = {1, 2};
  fuzz.moe.experts = 2;
  fuzz.moe.top_k = 2;
  fuzz.moe.expert_hidden = 9783;
  fuzz.moe.capacity_factor = 0.94;
  b = MlpWorkloadBytes(fuzz, /*pp=*/2, /*v=*/1, /*tp=*/1, {}, 30000);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_GT(b->stored[1], 30000u * 1024 * sizeof(float));
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
