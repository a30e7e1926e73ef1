// Expert parallelism, serially emulated: EP shards (each EP rank owns E/ep experts, tokens
// exchanged by RunStageGroupSerial's all-to-all, expert gradients reduced over the expert-data-
// parallel group) train bit-identically to the single-device reference that visits tokens in the
// canonical (expert, source, token) order — for ep 1, 2, 4, top-1 and top-2, with and without
// drops, with the auxiliary loss, and with PP and TP.
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/model/reference_trainer.h"
#include "runtime/model/stage_group.h"

namespace rp {
namespace {

const Dataset& Data() {
  static const Dataset* d = new Dataset(*Dataset::Create(DatasetConfig{}));
  return *d;
}

bool SameBits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct EpCase {
  int ep, top_k;
  double capacity;
  int groups = 1;  // dp = ep · groups
  int stages = 1, tp = 1;
  double aux = 0;
  OptimizerKind optimizer = OptimizerKind::kSgdMomentum;
};

std::string Name(const EpCase& c) {
  return absl::StrCat("ep", c.ep, "_top", c.top_k, "_cap", static_cast<int>(c.capacity * 100),
                      "_dp", c.ep * c.groups, "_pp", c.stages, "_tp", c.tp, "_aux",
                      static_cast<int>(c.aux * 100), "_", std::string(OptimizerName(c.optimizer)));
}

// 16 -> 32 x 6 -> 10; layers 2 and 4 are MoE blocks of 4 experts. With pp = 2: stage 0 = layers
// 0..3 (TP pair 0/1, MoE 2, replicated 3), stage 1 = layers 4..6 (MoE 4, TP pair 5/6).
ReferenceOptions Options(const EpCase& c, bool shard_experts) {
  ReferenceOptions o;
  o.model.hidden = {32, 32, 32, 32, 32, 32};
  o.model.moe.layers = {2, 4};
  o.model.moe.experts = 4;
  o.model.moe.top_k = c.top_k;
  o.model.moe.expert_hidden = 16;
  o.model.moe.capacity_factor = c.capacity;
  o.model.moe.aux_loss = c.aux;
  o.layout = {.dp = c.ep * c.groups, .microbatches = 2, .microbatch_size = 8};
  o.optimizer.kind = c.optimizer;
  o.optimizer.lr = c.optimizer == OptimizerKind::kAdam ? 0.003f : 0.05f;
  o.num_stages = c.stages;
  o.tp = c.tp;
  o.ep = c.ep;
  o.shard_experts = shard_experts;
  return o;
}

std::unique_ptr<ReferenceTrainer> Make(const ReferenceOptions& o) {
  auto t = ReferenceTrainer::Create(o, &Data());
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(t).value();
}

// Every parameter of the EP shards equals its place in the single-device model.
void ExpectSameParameters(const ReferenceTrainer& sharded, const ReferenceTrainer& single,
                          const EpCase& c) {
  for (int s = 0; s < single.partition().num_stages(); ++s) {
    for (int t = 0; t < c.tp; ++t) {
      const MlpStage& full = single.stage(s, t);
      for (int q = 0; q < c.ep; ++q) {
        const MlpStage& shard = sharded.stage(s, t, q);
        for (size_t l = 0; l < full.layers().size(); ++l) {
          const MlpStage::LayerInfo& a = shard.layers()[l];
          const MlpStage::LayerInfo& b = full.layers()[l];
          const bool moe = a.kind == ShardKind::kMoe;
          const int64_t head = (moe ? a.expert_offset : a.end_offset) - a.weight_offset;
          ASSERT_TRUE(SameBits(shard.params().subspan(a.weight_offset, head),
                               full.params().subspan(b.weight_offset, head)))
              << "stage " << s << " tp " << t << " ep rank " << q << " layer " << a.layer;
          if (!moe) continue;
          const int64_t n = a.local_experts * a.expert_size;
          ASSERT_TRUE(
              SameBits(shard.params().subspan(a.expert_offset, n),
                       full.params().subspan(b.expert_offset + a.first_expert * b.expert_size, n)))
              << "experts of stage " << s << " tp " << t << " ep rank " << q << " layer "
              << a.layer;
        }
      }
    }
  }
}

class EpTraining : public ::testing::TestWithParam<EpCase> {};

TEST_P(EpTraining, ShardedExpertsAreBitIdenticalToTheSingleDeviceReference) {
  const EpCase c = GetParam();
  auto sharded = Make(Options(c, true)), single = Make(Options(c, false));
  double first_loss = 0;
  for (int step = 0; step < 4; ++step) {
    const StepResult a = *sharded->Step(), b = *single->Step();
    EXPECT_EQ(std::memcmp(&a.loss, &b.loss, sizeof(double)), 0) << "step " << step;
    EXPECT_EQ(a.accuracy, b.accuracy) << "step " << step;
    EXPECT_EQ(a.aux_loss, b.aux_loss) << "step " << step;
    EXPECT_EQ(a.aux_loss > 0, c.aux > 0);
    if (step == 0) first_loss = a.loss;
    ASSERT_NO_FATAL_FAILURE(ExpectSameParameters(*sharded, *single, c)) << "step " << step;
    if (step == 3) {
      EXPECT_NE(a.loss, first_loss) << "it trained";
    }
  }
  // The routing was real: tokens reached several experts, and the capacity dropped some.
  int64_t dropped = 0, busy_experts = 0;
  const MlpStage& st = single->stage(0, 0);
  for (size_t l = 0; l < st.layers().size(); ++l) {
    if (const MoeBlock* b = st.moe(static_cast<int>(l))) {
      dropped += b->stats().dropped;
      for (int64_t k : b->stats().kept) busy_experts += k > 0;
    }
  }
  EXPECT_GE(busy_experts, 2);
  EXPECT_EQ(dropped > 0, c.capacity > 0) << "dropped " << dropped;
}

INSTANTIATE_TEST_SUITE_P(
    Moe, EpTraining,
    ::testing::Values(EpCase{1, 1, 0}, EpCase{2, 1, 0}, EpCase{4, 1, 0}, EpCase{1, 2, 0},
                      EpCase{2, 2, 0}, EpCase{4, 2, 0}, EpCase{1, 1, 1.0}, EpCase{2, 1, 1.0},
                      EpCase{4, 1, 1.0}, EpCase{2, 2, 0.75}, EpCase{4, 2, 0.75},
                      EpCase{2, 2, 1.0, /*groups=*/2}, EpCase{2, 1, 0, 1, /*stages=*/2, /*tp=*/2},
                      EpCase{4, 2, 0.75, 1, 2, 2}, EpCase{2, 2, 1.0, 2, 2, 2, /*aux=*/0.01},
                      EpCase{4, 1, 0, 1, 1, 1, 0.01, OptimizerKind::kAdam}),
    [](const ::testing::TestParamInfo<EpCase>& p) { return Name(p.param); });

// The canonical order matters: visiting the replicas one after another (the reference of an
// ep = 1 run) accumulates the experts' gradients in another order and gives other bits.
TEST(EpTraining, ReplicaByReplicaOrderGivesOtherBits) {
  const EpCase c{2, 2, 0};
  ReferenceOptions ep1 = Options(c, false);
  ep1.ep = 1;
  auto grouped = Make(Options(c, false)), serial = Make(ep1);
  for (int step = 0; step < 2; ++step) {
    ASSERT_TRUE(grouped->Step().ok());
    ASSERT_TRUE(serial->Step().ok());
  }
  EXPECT_FALSE(SameBits(grouped->stage(0, 0).params(), serial->stage(0, 0).params()));
}

TEST(EpTraining, ErrorsNameTheField) {
  ReferenceOptions o = Options(EpCase{2, 1, 0}, true);
  o.layout.dp = 3;
  EXPECT_EQ(ReferenceTrainer::Create(o, &Data()).status().message().find("ep"), 0u);
  o = Options(EpCase{2, 1, 0}, true);
  o.model.moe.experts = 3;
  EXPECT_EQ(ReferenceTrainer::Create(o, &Data()).status().message().find("ep"), 0u);
}

TEST(RunStageGroupSerial, RejectsShardsThatAreNotAGroup) {
  MlpConfig c;
  c.hidden = {8, 8, 8};
  c.moe.layers = {1};
  c.moe.experts = 2;
  auto p = *PartitionMlp(c, 1, 1, {}, 2);
  auto a = *MlpStage::Create(c, p, 0, 0, 0), b = *MlpStage::Create(c, p, 0, 0, 1);
  Tensor x(2, 16);
  const std::vector<ConstMatrixView> inputs{x, x};
  std::vector<MlpStage*> swapped{b.get(), a.get()};
  EXPECT_EQ(RunStageGroupSerial(swapped, 1, MlpStage::Pass::kForward, 0, inputs).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<MlpStage*> ok{a.get(), b.get()};
  EXPECT_EQ(RunStageGroupSerial(ok, 1, MlpStage::Pass::kForward, 0,
                                std::span<const ConstMatrixView>(inputs).first(1))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  auto y = RunStageGroupSerial(ok, 1, MlpStage::Pass::kForward, 0, inputs);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->size(), 2u);
}

}  // namespace
}  // namespace rp
