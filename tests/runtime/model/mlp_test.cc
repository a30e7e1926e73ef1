#include "runtime/model/mlp.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace rp {
namespace {

Tensor Random(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Tensor t(rows, cols);
  for (float& v : t.span()) v = u(rng);
  return t;
}

bool SameBits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

double MaxRelDiff(std::span<const float> a, std::span<const float> b) {
  double scale = 1e-30, diff = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::abs(b[i])));
    diff = std::max(diff, static_cast<double>(std::abs(a[i] - b[i])));
  }
  return diff / scale;
}

MlpConfig SmallConfig() {
  MlpConfig c;
  c.input_dim = 12;
  c.hidden = {16, 8, 24, 12, 8};
  c.classes = 6;
  return c;
}

std::unique_ptr<MlpStage> MakeStage(const MlpConfig& c, const ModelPartition& p, int stage,
                                    int rank) {
  auto s = MlpStage::Create(c, p, stage, rank);
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(s).value();
}

const TpAllReduceFn kNoAllReduce = nullptr;

TEST(PartitionMlp, BalancedGivesExtraLayersToTheFirstStages) {
  const MlpConfig c = SmallConfig();  // 6 layers
  auto p = PartitionMlp(c, 4, 1);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->stage_begin, (std::vector<int>{0, 2, 4, 5, 6}));
  // Pairs inside stages: (0,1) (2,3) column/row; 4 and 5 alone: replicated.
  EXPECT_EQ(p->layer_kind,
            (std::vector<ShardKind>{ShardKind::kColumnParallel, ShardKind::kRowParallel,
                                    ShardKind::kColumnParallel, ShardKind::kRowParallel,
                                    ShardKind::kReplicated, ShardKind::kReplicated}));
}

TEST(PartitionMlp, ExplicitLayerCounts) {
  const std::vector<int> counts{1, 3, 2};
  auto p = PartitionMlp(SmallConfig(), 3, 2, counts);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->stage_begin, (std::vector<int>{0, 1, 4, 6}));
  EXPECT_EQ(p->layer_kind[0], ShardKind::kReplicated);
  EXPECT_EQ(p->layer_kind[1], ShardKind::kColumnParallel);
  EXPECT_EQ(p->layer_kind[2], ShardKind::kRowParallel);
  EXPECT_EQ(p->layer_kind[3], ShardKind::kReplicated);
}

TEST(PartitionMlp, ErrorsNameTheField) {
  const MlpConfig c = SmallConfig();
  auto expect_error = [](const absl::StatusOr<ModelPartition>& p, const char* needle) {
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find(needle), std::string_view::npos) << p.status();
  };
  expect_error(PartitionMlp(c, 7, 1), "num_stages");
  expect_error(PartitionMlp(c, 0, 1), "num_stages");
  expect_error(PartitionMlp(c, 2, 0), "tp");
  expect_error(PartitionMlp(c, 2, 1, std::vector<int>{6}), "layers_per_stage has 1 entries");
  expect_error(PartitionMlp(c, 2, 1, std::vector<int>{6, 0}), "layers_per_stage[1]");
  expect_error(PartitionMlp(c, 2, 1, std::vector<int>{2, 2}), "sums to 4");
  // tp = 3: layer 0 (width 16) is the column half of stage 0's first pair.
  expect_error(PartitionMlp(c, 2, 3), "layer 0 (output width 16) is not divisible by tp=3");
  MlpConfig bad = c;
  bad.hidden[2] = 0;
  expect_error(PartitionMlp(bad, 1, 1), "hidden[2]");
  bad = c;
  bad.classes = 1;
  expect_error(PartitionMlp(bad, 1, 1), "classes");
}

TEST(MlpStage, CreateRejectsBadRanks) {
  const MlpConfig c = SmallConfig();
  auto p = *PartitionMlp(c, 2, 2);
  EXPECT_EQ(MlpStage::Create(c, p, 2, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MlpStage::Create(c, p, 0, 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MlpStage::Create(c, p, -1, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MlpStage, InitIsDeterministicAndSeedDependent) {
  MlpConfig c = SmallConfig();
  auto p = *PartitionMlp(c, 1, 1);
  auto a = MakeStage(c, p, 0, 0), b = MakeStage(c, p, 0, 0);
  EXPECT_TRUE(SameBits(a->params(), b->params()));
  EXPECT_EQ(static_cast<int64_t>(a->params().size()), c.num_params());
  c.seed = 2;
  auto d = MakeStage(c, p, 0, 0);
  EXPECT_FALSE(SameBits(a->params(), d->params()));
  // He-uniform bound of layer 0: sqrt(6 / 12).
  const float bound = std::sqrt(6.0f / 12.0f);
  for (int i = 0; i < 12 * 16; ++i) EXPECT_LE(std::abs(a->params()[i]), bound);
}

// Runs a whole pipeline of stages forward then backward on one micro-batch (tp = 1).
struct PipelineRun {
  Tensor out, dx;
  std::vector<std::vector<float>> grads;
};

PipelineRun RunPipeline(std::vector<std::unique_ptr<MlpStage>>& stages, const Tensor& x,
                        const Tensor& dout) {
  PipelineRun r;
  Tensor act = x;
  for (auto& s : stages) act = *s->Forward(0, act, kNoAllReduce);
  r.out = act;
  Tensor g = dout;
  for (size_t i = stages.size(); i-- > 0;) g = *stages[i]->Backward(0, g, kNoAllReduce);
  r.dx = g;
  for (auto& s : stages) r.grads.emplace_back(s->grads().begin(), s->grads().end());
  return r;
}

TEST(MlpStage, PipelineStagesChainedEqualTheWholeModelBitwise) {
  const MlpConfig c = SmallConfig();
  auto whole_p = *PartitionMlp(c, 1, 1);
  std::vector<std::unique_ptr<MlpStage>> whole;
  whole.push_back(MakeStage(c, whole_p, 0, 0));
  const Tensor x = Random(5, 12, 1), dout = Random(5, 6, 2);
  PipelineRun ref = RunPipeline(whole, x, dout);
  EXPECT_EQ(ref.dx.size(), 0) << "the first stage computes no input gradient";

  for (int S : {2, 3, 6}) {
    auto p = *PartitionMlp(c, S, 1);
    std::vector<std::unique_ptr<MlpStage>> stages;
    std::vector<float> params;
    for (int s = 0; s < S; ++s) {
      stages.push_back(MakeStage(c, p, s, 0));
      params.insert(params.end(), stages.back()->params().begin(), stages.back()->params().end());
    }
    EXPECT_TRUE(SameBits(params, whole[0]->params())) << "S=" << S;
    PipelineRun run = RunPipeline(stages, x, dout);
    EXPECT_TRUE(SameBits(run.out.span(), ref.out.span())) << "S=" << S;
    std::vector<float> grads;
    for (auto& g : run.grads) grads.insert(grads.end(), g.begin(), g.end());
    EXPECT_TRUE(SameBits(grads, ref.grads[0])) << "S=" << S;
  }
}

TEST(MlpStage, MicroBatchesAccumulateToTheFullBatchBitwise) {
  const MlpConfig c = SmallConfig();
  auto p = *PartitionMlp(c, 1, 1);
  auto whole = MakeStage(c, p, 0, 0), split = MakeStage(c, p, 0, 0);
  const Tensor x = Random(8, 12, 3), dout = Random(8, 6, 4);
  Tensor out = *whole->Forward(0, x, kNoAllReduce);
  ASSERT_TRUE(whole->Backward(0, dout, kNoAllReduce).ok());
  // Two micro-batches of 5 and 3 rows, both forwards in flight before the backwards (as in 1F1B).
  Tensor o0 = *split->Forward(0, ConstMatrixView(x.data(), 5, 12), kNoAllReduce);
  Tensor o1 = *split->Forward(1, ConstMatrixView(x.data() + 60, 3, 12), kNoAllReduce);
  EXPECT_EQ(split->micro_batches_in_flight(), 2);
  ASSERT_TRUE(split->Backward(0, ConstMatrixView(dout.data(), 5, 6), kNoAllReduce).ok());
  ASSERT_TRUE(split->Backward(1, ConstMatrixView(dout.data() + 30, 3, 6), kNoAllReduce).ok());
  EXPECT_TRUE(SameBits(o0.span(), out.span().subspan(0, 30)));
  EXPECT_TRUE(SameBits(o1.span(), out.span().subspan(30)));
  EXPECT_TRUE(SameBits(split->grads(), whole->grads()));
}

TEST(MlpStage, SplitBackwardEqualsFusedBackwardBitwise) {
  const MlpConfig c = SmallConfig();
  auto p = *PartitionMlp(c, 2, 1);
  auto fused = MakeStage(c, p, 1, 0), split = MakeStage(c, p, 1, 0);
  const Tensor x = Random(4, fused->input_dim(), 5), dout = Random(4, 6, 6);
  ASSERT_TRUE(fused->Forward(3, x, kNoAllReduce).ok());
  ASSERT_TRUE(split->Forward(3, x, kNoAllReduce).ok());
  Tensor dx_fused = *fused->Backward(3, dout, kNoAllReduce);
  Tensor dx_split = *split->BackwardInput(3, dout, kNoAllReduce);
  EXPECT_TRUE(SameBits(dx_fused.span(), dx_split.span()));
  for (float g : split->grads()) EXPECT_EQ(g, 0.0f) << "B must not touch weight gradients";
  EXPECT_GT(split->activation_bytes(), 0);
  ASSERT_TRUE(split->BackwardWeight(3).ok());
  EXPECT_TRUE(SameBits(fused->grads(), split->grads()));
  EXPECT_EQ(split->activation_bytes(), 0);
  EXPECT_EQ(split->micro_batches_in_flight(), 0);
}

TEST(MlpStage, ActivationBytesFollowTheMicroBatchLifecycle) {
  // One stage of layers 0..1 (12 -> 16 -> 8), tp = 1, relu: stores x0 (12), pre0 (16), x1 (16),
  // pre1 (8) floats per row after forward.
  const MlpConfig c = SmallConfig();
  auto p = *PartitionMlp(c, 3, 1);
  auto s = MakeStage(c, p, 0, 0);
  const int64_t rows = 4, per_mb = rows * (12 + 16 + 16 + 8) * 4;
  ASSERT_TRUE(s->Forward(0, Random(rows, 12, 7), kNoAllReduce).ok());
  EXPECT_EQ(s->activation_bytes(), per_mb);
  ASSERT_TRUE(s->Forward(1, Random(rows, 12, 8), kNoAllReduce).ok());
  EXPECT_EQ(s->activation_bytes(), 2 * per_mb);
  // After B: layer inputs (12 + 16) and pre-activation gradients (16 + 8) remain.
  ASSERT_TRUE(s->BackwardInput(0, Random(rows, 8, 9), kNoAllReduce).ok());
  EXPECT_EQ(s->activation_bytes(), per_mb + rows * (12 + 16 + 16 + 8) * 4);
  ASSERT_TRUE(s->BackwardWeight(0).ok());
  EXPECT_EQ(s->activation_bytes(), per_mb);
  ASSERT_TRUE(s->Backward(1, Random(rows, 8, 10), kNoAllReduce).ok());
  EXPECT_EQ(s->activation_bytes(), 0);
}

TEST(MlpStage, MisuseIsAnErrorNotACrash) {
  const MlpConfig c = SmallConfig();
  auto p = *PartitionMlp(c, 2, 1);
  auto s = MakeStage(c, p, 0, 0);
  const Tensor x = Random(3, 12, 11);
  EXPECT_EQ(s->Backward(0, Random(3, s->output_dim(), 1), kNoAllReduce).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(s->Forward(0, x, kNoAllReduce).ok());
  EXPECT_EQ(s->Forward(0, x, kNoAllReduce).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s->Forward(1, Random(3, 11, 1), kNoAllReduce).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->Forward(-1, x, kNoAllReduce).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->Backward(0, Random(2, s->output_dim(), 1), kNoAllReduce).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->BackwardWeight(0).code(), absl::StatusCode::kFailedPrecondition);
  // A stage with tp > 1 needs the all-reduce function.
  auto p2 = *PartitionMlp(c, 1, 2);
  auto t = MakeStage(c, p2, 0, 0);
  EXPECT_EQ(t->Forward(0, x, kNoAllReduce).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MlpStage, InferEqualsForwardAndStoresNothing) {
  const MlpConfig c = SmallConfig();
  auto p = *PartitionMlp(c, 1, 1);
  auto s = MakeStage(c, p, 0, 0);
  const Tensor x = Random(6, 12, 12);
  Tensor a = *s->Infer(x, kNoAllReduce);
  EXPECT_EQ(s->activation_bytes(), 0);
  EXPECT_EQ(s->micro_batches_in_flight(), 0);
  Tensor b = *s->Forward(0, x, kNoAllReduce);
  EXPECT_TRUE(SameBits(a.span(), b.span()));
}

TEST(MlpStage, AParamsOnlyStageInfersLikeATrainableOneAndRefusesTraining) {
  MlpConfig moe = SmallConfig();
  moe.hidden = {16, 16, 16};  // layer 1 is 16 -> 16: a MoE block
  moe.moe.layers = {1};
  moe.moe.experts = 4;
  moe.moe.expert_hidden = 5;
  for (const MlpConfig& c : {SmallConfig(), moe}) {
    auto p = *PartitionMlp(c, 1, 1);
    auto trainable = MakeStage(c, p, 0, 0);
    auto copy = MlpStage::Create(c, p, 0, 0, 0, MlpStage::Buffers::kParamsOnly);
    ASSERT_TRUE(copy.ok()) << copy.status();
    EXPECT_TRUE((*copy)->grads().empty());
    ASSERT_TRUE(SameBits((*copy)->params(), trainable->params()));  // the same initial weights
    const Tensor x = Random(6, 12, 13);
    const Tensor a = *trainable->Infer(x, kNoAllReduce), b = *(*copy)->Infer(x, kNoAllReduce);
    EXPECT_TRUE(SameBits(a.span(), b.span()));
    EXPECT_EQ((*copy)->Forward(0, x, kNoAllReduce).status().code(),
              absl::StatusCode::kFailedPrecondition);
  }
}

TEST(MlpStage, LayerHookReportsEveryLayerLastToFirst) {
  const MlpConfig c = SmallConfig();
  auto p = *PartitionMlp(c, 2, 1);
  auto s = MakeStage(c, p, 1, 0);
  ASSERT_TRUE(s->Forward(0, Random(2, s->input_dim(), 13), kNoAllReduce).ok());
  std::vector<int> seen;
  ASSERT_TRUE(s->Backward(0, Random(2, 6, 14), kNoAllReduce, [&](int l) { seen.push_back(l); })
                  .ok());
  EXPECT_EQ(seen, (std::vector<int>{2, 1, 0}));
}

// PassSteps is the order in which a real pass reaches its TP all-reduces and finalizes layer
// gradients: record both from the callbacks and compare, for every stage of a TP model.
TEST(PassSteps, IsTheOrderOfTheRealPassesCallbacks) {
  const MlpConfig c = SmallConfig();
  for (int tp : {1, 2, 4}) {
    auto p = PartitionMlp(c, 2, tp);
    ASSERT_TRUE(p.ok()) << p.status();
    for (int stage = 0; stage < 2; ++stage) {
      auto s = MakeStage(c, *p, stage, 0);
      auto layers = StageLayers(c, *p, stage);
      ASSERT_TRUE(layers.ok());
      // Events seen: -1 - l for "TP all-reduce after layer l", l for "layer l's grads final".
      auto record = [&](std::vector<int>* ev) {
        return [ev](std::span<float>) {
          ev->push_back(-1);
          return absl::OkStatus();
        };
      };
      auto expected = [&](PassKind pass) {
        std::vector<int> ev;
        for (const PassStep& st : PassSteps(*layers, tp, pass)) {
          if (st.kind == PassStep::Kind::kTpAllReduce) ev.push_back(-1);
          if (st.kind == PassStep::Kind::kLayer && st.grads_final) ev.push_back(st.local_layer);
        }
        return ev;
      };
      std::vector<int> fwd, bwd, bwd_in, w;
      ASSERT_TRUE(s->Forward(0, Random(2, s->input_dim(), 5), record(&fwd)).ok());
      ASSERT_TRUE(s->Backward(0, Random(2, s->output_dim(), 6), record(&bwd),
                              [&](int l) { bwd.push_back(l); })
                      .ok());
      ASSERT_TRUE(s->Forward(1, Random(2, s->input_dim(), 7), record(&fwd)).ok());
      ASSERT_TRUE(s->BackwardInput(1, Random(2, s->output_dim(), 8), record(&bwd_in)).ok());
      ASSERT_TRUE(s->BackwardWeight(1, [&](int l) { w.push_back(l); }).ok());
      std::vector<int> two_fwd = expected(PassKind::kForward);
      const std::vector<int> one = two_fwd;
      two_fwd.insert(two_fwd.end(), one.begin(), one.end());
      EXPECT_EQ(fwd, two_fwd) << "tp " << tp << " stage " << stage;
      EXPECT_EQ(bwd, expected(PassKind::kBackward)) << "tp " << tp << " stage " << stage;
      EXPECT_EQ(bwd_in, expected(PassKind::kBackwardInput)) << "tp " << tp << " stage " << stage;
      EXPECT_EQ(w, expected(PassKind::kWeight)) << "tp " << tp << " stage " << stage;
      EXPECT_EQ(static_cast<int>(std::count(one.begin(), one.end(), -1)), s->forward_allreduces());
    }
  }
}

// --- Tensor parallelism ---

struct TpCase {
  int tp;
  Activation act;
};
class MlpStageTp : public ::testing::TestWithParam<TpCase> {};

// A TP group of one stage driven serially (RunTpGroupSerial) against the unsharded stage: same
// outputs and input gradients to float tolerance, and every shard's gradient equals its slice of
// the unsharded gradient.
TEST_P(MlpStageTp, ShardedStageMatchesUnsharded) {
  const auto [T, act] = GetParam();
  MlpConfig c;
  c.input_dim = 12;
  c.hidden = {24, 12, 24, 12, 12};  // divisible by 2, 3, 4
  c.classes = 12;
  c.activation = act;
  // Stage 1 of 2 with explicit counts {1, 5}: layers 1..5 = pairs (1,2), (3,4) and a replicated 5.
  const std::vector<int> counts{1, 5};
  auto full_p = *PartitionMlp(c, 2, 1, counts);
  auto tp_p = *PartitionMlp(c, 2, T, counts);
  auto full = MakeStage(c, full_p, 1, 0);
  std::vector<std::unique_ptr<MlpStage>> owned;
  std::vector<MlpStage*> shards;
  for (int t = 0; t < T; ++t) {
    owned.push_back(MakeStage(c, tp_p, 1, t));
    shards.push_back(owned.back().get());
  }
  EXPECT_EQ(shards[0]->forward_allreduces(), 2);
  EXPECT_EQ(shards[0]->backward_allreduces(), 2);

  const Tensor x = Random(7, 24, 15), dout = Random(7, 12, 16);
  for (int mb = 0; mb < 2; ++mb) {  // two micro-batches accumulate
    Tensor y_full = *full->Forward(mb, x, kNoAllReduce);
    auto y = RunTpGroupSerial(shards, MlpStage::Pass::kForward, mb, x);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_LT(MaxRelDiff(y->span(), y_full.span()), 1e-5);
    Tensor dx_full = *full->Backward(mb, dout, kNoAllReduce);
    auto dx = RunTpGroupSerial(shards, MlpStage::Pass::kBackward, mb, dout);
    ASSERT_TRUE(dx.ok()) << dx.status();
    EXPECT_LT(MaxRelDiff(dx->span(), dx_full.span()), 1e-5);
  }
  // Map each shard's gradient to the unsharded layout.
  for (int t = 0; t < T; ++t) {
    const MlpStage& sh = *shards[static_cast<size_t>(t)];
    for (size_t li = 0; li < sh.layers().size(); ++li) {
      const MlpStage::LayerInfo& s = sh.layers()[li];
      const MlpStage::LayerInfo& f = full->layers()[li];
      const int row0 = s.kind == ShardKind::kRowParallel ? t * s.in : 0;
      const int col0 = s.kind == ShardKind::kColumnParallel ? t * s.out : 0;
      std::vector<float> want, got;
      for (int i = 0; i < s.in; ++i) {
        for (int k = 0; k < s.out; ++k) {
          want.push_back(full->grads()[f.weight_offset + (row0 + i) * f.out + col0 + k]);
          got.push_back(sh.grads()[s.weight_offset + i * s.out + k]);
          EXPECT_EQ(sh.params()[s.weight_offset + i * s.out + k],
                    full->params()[f.weight_offset + (row0 + i) * f.out + col0 + k]);
        }
      }
      for (int k = 0; k < s.bias_size; ++k) {
        want.push_back(full->grads()[f.bias_offset + col0 + k]);
        got.push_back(sh.grads()[s.bias_offset + k]);
      }
      EXPECT_LT(MaxRelDiff(got, want), 1e-5) << "layer " << s.layer << " rank " << t;
    }
  }
  // Replicated parameters (row-parallel biases, the replicated layer) get the same gradient bits
  // on every rank.
  for (int t = 1; t < T; ++t) {
    for (const MlpStage::LayerInfo& s : shards[0]->layers()) {
      if (s.kind == ShardKind::kColumnParallel) continue;
      const int64_t begin = s.kind == ShardKind::kReplicated ? s.weight_offset : s.bias_offset;
      const int64_t end = s.bias_offset + s.bias_size;
      EXPECT_TRUE(SameBits(shards[0]->grads().subspan(begin, end - begin),
                           shards[static_cast<size_t>(t)]->grads().subspan(begin, end - begin)))
          << "layer " << s.layer << " rank " << t;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Mlp, MlpStageTp,
                         ::testing::Values(TpCase{2, Activation::kRelu},
                                           TpCase{3, Activation::kGelu},
                                           TpCase{4, Activation::kRelu}),
                         [](const ::testing::TestParamInfo<TpCase>& p) {
                           return "tp" + std::to_string(p.param.tp) + "_" +
                                  std::string(ActivationName(p.param.act));
                         });

// The executor-facing path (Forward with a callback) gives the bits of the serial TP emulation when
// the callback sums the group's buffers the same way.
TEST(MlpStage, CallbackAllReduceMatchesSerialGroup) {
  MlpConfig c = SmallConfig();
  c.hidden = {16, 8, 24, 12, 8};
  auto p = *PartitionMlp(c, 1, 2);
  auto a0 = MakeStage(c, p, 0, 0), a1 = MakeStage(c, p, 0, 1);
  auto b0 = MakeStage(c, p, 0, 0), b1 = MakeStage(c, p, 0, 1);
  const Tensor x = Random(3, 12, 17);
  std::vector<MlpStage*> group{a0.get(), a1.get()};
  Tensor y_serial = *RunTpGroupSerial(group, MlpStage::Pass::kForward, 0, x);

  // Rank 1 runs first and records its partials; rank 0 then "all-reduces" with them, and rank 1's
  // outputs come from replaying the sums. Two-rank sums are order-independent.
  std::vector<std::vector<float>> partials1;
  int calls = 0;
  ASSERT_TRUE(b1->BeginPass(MlpStage::Pass::kForward, 0, x).ok());
  ASSERT_TRUE(b0->BeginPass(MlpStage::Pass::kForward, 0, x).ok());
  std::vector<std::vector<float>> sums;
  while (true) {
    auto s1 = *b1->RunToAllReduce(0);
    auto s0 = *b0->RunToAllReduce(0);
    if (s0.empty()) break;
    std::vector<float> sum(s1.begin(), s1.end());
    for (size_t i = 0; i < sum.size(); ++i) sum[i] = s1[i] + s0[i];  // rank 1 + rank 0
    std::copy(sum.begin(), sum.end(), s0.begin());
    std::copy(sum.begin(), sum.end(), s1.begin());
    ++calls;
  }
  EXPECT_EQ(calls, a0->forward_allreduces());
  Tensor y0 = *b0->EndPass(0);
  EXPECT_TRUE(SameBits(y0.span(), y_serial.span()));
  // And through the callback API: an all-reduce that adds a recorded partial.
  auto c0 = MakeStage(c, p, 0, 0), c1 = MakeStage(c, p, 0, 1);
  ASSERT_TRUE(c1->BeginPass(MlpStage::Pass::kForward, 0, x).ok());
  int k = 0;
  TpAllReduceFn ar = [&](std::span<float> buf) -> absl::Status {
    auto s1 = c1->RunToAllReduce(0);
    if (!s1.ok()) return s1.status();
    for (size_t i = 0; i < buf.size(); ++i) buf[i] += (*s1)[i];
    std::copy(buf.begin(), buf.end(), s1->begin());
    ++k;
    return absl::OkStatus();
  };
  Tensor y_cb = *c0->Forward(0, x, ar);
  EXPECT_EQ(k, c0->forward_allreduces());
  EXPECT_TRUE(SameBits(y_cb.span(), y_serial.span()));
}

TEST(MlpStage, AllReduceErrorsPropagate) {
  const MlpConfig c = SmallConfig();
  auto p = *PartitionMlp(c, 1, 2);
  auto s = MakeStage(c, p, 0, 0);
  auto r = s->Forward(0, Random(2, 12, 18), [](std::span<float>) {
    return absl::DeadlineExceededError("tp all-reduce timed out");
  });
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace rp
