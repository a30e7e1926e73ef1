// MoE blocks on one device (routing, capacity and config errors: moe_routing_test.cc): gradients against finite differences
// (with drops and the auxiliary loss), the bit-level properties the MLP stage already has
// (Infer == Forward, split == fused backward, micro-batches accumulate), memory and gradient
// groups.
#include "runtime/model/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/model/mlp.h"
#include "tests/runtime/model/moe_helpers.h"

namespace rp {
namespace {

double Objective(MlpStage& s, const Tensor& x, const Tensor& r, double aux_weight) {
  s.ResetMoeStats();
  Tensor y = *s.Forward(0, x, nullptr);
  double f = 0;
  for (int64_t i = 0; i < y.size(); ++i) f += static_cast<double>(y.data()[i]) * r.data()[i];
  f += aux_weight * s.aux_loss_sum();
  EXPECT_TRUE(s.Backward(0, r, nullptr).ok());  // ends the micro-batch
  return f;
}

struct FdCase {
  int top_k;
  double capacity;
  double aux;
};
class MoeGradient : public ::testing::TestWithParam<FdCase> {};

// Every parameter's and input's gradient against a central difference of the objective.
TEST_P(MoeGradient, MatchesFiniteDifferences) {
  const FdCase fc = GetParam();
  const MlpConfig c = MoeModel(fc.top_k, fc.capacity, fc.aux);
  const std::vector<int> counts{1, 3};  // stage 1 = MoE, MoE, dense: its input gradient exists
  auto p = *PartitionMlp(c, 2, 1, counts);
  auto s = Make(c, p, 1), probe = Make(c, p, 1);
  const double aux_weight = 0.5;
  s->SetAuxLossWeight(aux_weight);
  const Tensor x = Random(9, 6, 21), r = Random(9, 3, 22);
  s->ZeroGrads();
  ASSERT_TRUE(s->Forward(0, x, nullptr).ok());
  if (fc.capacity > 0) {
    int64_t dropped = 0;
    for (int l = 0; l < 2; ++l) dropped += s->moe(l)->stats().dropped;
    EXPECT_GT(dropped, 0) << "the case must drop tokens";
  }
  Tensor dx = *s->Backward(0, r, nullptr);
  const double eps = 1e-3;
  int checked = 0;
  auto check = [&](float* v, float analytic, const std::string& what) {
    const float saved = *v;
    *v = saved + static_cast<float>(eps);
    const double up = Objective(*probe, x, r, aux_weight);
    *v = saved - static_cast<float>(eps);
    const double down = Objective(*probe, x, r, aux_weight);
    *v = saved;
    const double fd = (up - down) / (2 * eps);
    EXPECT_NEAR(fd, analytic, 2e-3 * std::max(1.0, std::abs(fd))) << what;
    ++checked;
  };
  std::copy(s->params().begin(), s->params().end(), probe->params().begin());
  for (size_t i = 0; i < s->params().size(); ++i) {
    check(&probe->params()[i], s->grads()[i], absl::StrCat("param ", i));
  }
  Tensor xp = x;
  for (int64_t i = 0; i < x.size(); ++i) {
    const float saved = xp.data()[i];
    xp.data()[i] = saved + static_cast<float>(eps);
    const double up = Objective(*probe, xp, r, aux_weight);
    xp.data()[i] = saved - static_cast<float>(eps);
    const double down = Objective(*probe, xp, r, aux_weight);
    xp.data()[i] = saved;
    EXPECT_NEAR((up - down) / (2 * eps), dx.data()[i], 2e-3) << "input " << i;
  }
  EXPECT_EQ(checked, static_cast<int>(s->params().size()));
  // The router gradient is not zero (the gates are trained) in every case.
  double router = 0;
  for (int64_t i = 0; i < s->layers()[0].in * 4; ++i) router += std::abs(s->grads()[i]);
  EXPECT_GT(router, 0);
}

INSTANTIATE_TEST_SUITE_P(Moe, MoeGradient,
                         ::testing::Values(FdCase{1, 0, 0}, FdCase{2, 0, 0}, FdCase{1, 1.0, 0},
                                           FdCase{2, 0.75, 0}, FdCase{1, 0, 0.3},
                                           FdCase{2, 1.0, 0.3}),
                         [](const ::testing::TestParamInfo<FdCase>& p) {
                           return absl::StrCat("top", p.param.top_k, "_capacity",
                                               static_cast<int>(p.param.capacity * 100), "_aux",
                                               static_cast<int>(p.param.aux * 10));
                         });

// The whole model (5 -> MoE -> MoE -> 3 with a first dense layer) on one stage.
struct OneStage {
  MlpConfig config;
  ModelPartition partition;
  std::unique_ptr<MlpStage> stage;
  explicit OneStage(MlpConfig c, int ep = 1, int ep_rank = 0)
      : config(std::move(c)),
        partition(*PartitionMlp(config, 1, 1, {}, ep)),
        stage(Make(config, partition, 0, 0, ep_rank)) {}
};

TEST(MoeStage, InferEqualsForwardAndStoresNothing) {
  OneStage a(MoeModel(2, 1.0, 0.1));
  const Tensor x = Random(7, 5, 31);
  Tensor inferred = *a.stage->Infer(x, nullptr);
  EXPECT_EQ(a.stage->activation_bytes(), 0);
  EXPECT_EQ(a.stage->aux_loss_sum(), 0.0) << "Infer does not count the auxiliary loss";
  Tensor y = *a.stage->Forward(0, x, nullptr);
  EXPECT_TRUE(SameBits(inferred.span(), y.span()));
  EXPECT_GT(a.stage->aux_loss_sum(), 0.0);
}

TEST(MoeStage, SplitBackwardEqualsFusedBackwardBitwise) {
  OneStage fused(MoeModel(2, 0.75, 0.1)), split(MoeModel(2, 0.75, 0.1));
  const Tensor x = Random(8, 5, 32), dy = Random(8, 3, 33);
  ASSERT_TRUE(fused.stage->Forward(2, x, nullptr).ok());
  ASSERT_TRUE(split.stage->Forward(2, x, nullptr).ok());
  ASSERT_TRUE(fused.stage->Backward(2, dy, nullptr).ok());
  ASSERT_TRUE(split.stage->BackwardInput(2, dy, nullptr).ok());
  for (float g : split.stage->grads()) ASSERT_EQ(g, 0.0f) << "B must not touch weight gradients";
  std::vector<int> seen;
  ASSERT_TRUE(split.stage->BackwardWeight(2, [&](int l) { seen.push_back(l); }).ok());
  EXPECT_EQ(seen, (std::vector<int>{3, 2, 1, 0}));
  EXPECT_TRUE(SameBits(fused.stage->grads(), split.stage->grads()));
  EXPECT_EQ(split.stage->activation_bytes(), 0);
  EXPECT_EQ(fused.stage->activation_bytes(), 0);
}

// Dropless routing is per token, and each expert accumulates its tokens in token order, so two
// micro-batches accumulate to exactly the bits of their concatenation.
TEST(MoeStage, DroplessMicroBatchesAccumulateToTheFullBatchBitwise) {
  OneStage whole(MoeModel(2, 0, 0)), parts(MoeModel(2, 0, 0));
  const Tensor x = Random(10, 5, 34), dy = Random(10, 3, 35);
  Tensor y = *whole.stage->Forward(0, x, nullptr);
  ASSERT_TRUE(whole.stage->Backward(0, dy, nullptr).ok());
  Tensor y0 = *parts.stage->Forward(0, ConstMatrixView(x.data(), 6, 5), nullptr);
  Tensor y1 = *parts.stage->Forward(1, ConstMatrixView(x.data() + 30, 4, 5), nullptr);
  ASSERT_TRUE(parts.stage->Backward(0, ConstMatrixView(dy.data(), 6, 3), nullptr).ok());
  ASSERT_TRUE(parts.stage->Backward(1, ConstMatrixView(dy.data() + 18, 4, 3), nullptr).ok());
  EXPECT_TRUE(SameBits(y0.span(), y.span().subspan(0, 18)));
  EXPECT_TRUE(SameBits(y1.span(), y.span().subspan(18)));
  EXPECT_TRUE(SameBits(parts.stage->grads(), whole.stage->grads()));
}

TEST(MoeStage, AnExchangeFunctionGivesTheLocalBits) {
  OneStage local(MoeModel(1, 1.0, 0)), hooked(MoeModel(1, 1.0, 0));
  const Tensor x = Random(6, 5, 36), dy = Random(6, 3, 37);
  int calls = 0;
  const EpExchangeFn exchange = [&](EpExchange& ex) {
    ++calls;
    EXPECT_EQ(ex.kind, calls % 2 == 1 ? EpExchange::Kind::kDispatch : EpExchange::Kind::kCombine);
    ExchangeLocally(ex);
    return absl::OkStatus();
  };
  Tensor a = *local.stage->Forward(0, x, nullptr);
  Tensor b = *hooked.stage->Forward(0, x, nullptr, exchange);
  EXPECT_EQ(calls, hooked.stage->ep_exchanges());
  ASSERT_TRUE(local.stage->Backward(0, dy, nullptr).ok());
  ASSERT_TRUE(hooked.stage->Backward(0, dy, nullptr, nullptr, exchange).ok());
  EXPECT_EQ(calls, 2 * hooked.stage->ep_exchanges());
  EXPECT_TRUE(SameBits(a.span(), b.span()));
  EXPECT_TRUE(SameBits(local.stage->grads(), hooked.stage->grads()));
  // A failing exchange fails the pass with its status.
  const EpExchangeFn failing = [](EpExchange&) { return absl::DeadlineExceededError("peer"); };
  EXPECT_EQ(hooked.stage->Forward(1, x, nullptr, failing).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST(MoeStage, ParamRangesSeparateExpertsFromEverythingElse) {
  OneStage ep2(MoeModel(1, 0, 0), /*ep=*/2, /*ep_rank=*/1);
  const MlpStage& s = *ep2.stage;
  // Layer 0 dense (5 x 6 + 6), layer 1: router 6 x 4 then 2 local experts, layer 2 the same,
  // layer 3 dense (6 x 3 + 3).
  const int64_t expert = 2 * 6 * 5 + 5 + 6, router = 6 * 4;
  ASSERT_EQ(s.param_ranges().size(), 5u);
  const std::vector<int64_t> sizes{36 + router, 2 * expert, router, 2 * expert, 21};
  int64_t offset = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const ParamRange& r = s.param_ranges()[i];
    EXPECT_EQ(r.offset, offset);
    EXPECT_EQ(r.size, sizes[i]) << i;
    EXPECT_EQ(r.group, i % 2 == 1 ? ReduceGroup::kExpertDataParallel : ReduceGroup::kDataParallel);
    offset += r.size;
  }
  EXPECT_EQ(offset, static_cast<int64_t>(s.params().size()));
  EXPECT_EQ(s.layers()[1].first_expert, 2);
  EXPECT_EQ(s.layers()[1].local_experts, 2);
}

// Every EP shard holds exactly its experts' slice of the single-device block.
TEST(MoeStage, ExpertShardsInitialiseTheirSliceOfTheFullBlock) {
  OneStage full(MoeModel(1, 0, 0));
  EXPECT_EQ(static_cast<int64_t>(full.stage->params().size()), full.config.num_params());
  for (int ep : {2, 4}) {
    for (int q = 0; q < ep; ++q) {
      OneStage shard(MoeModel(1, 0, 0), ep, q);
      for (size_t l = 0; l < shard.stage->layers().size(); ++l) {
        const MlpStage::LayerInfo& a = shard.stage->layers()[l];
        const MlpStage::LayerInfo& b = full.stage->layers()[l];
        const auto p = shard.stage->params(), f = full.stage->params();
        const int64_t head =
            (a.kind == ShardKind::kMoe ? a.expert_offset : a.end_offset) - a.weight_offset;
        EXPECT_TRUE(SameBits(p.subspan(a.weight_offset, head), f.subspan(b.weight_offset, head)));
        if (a.kind != ShardKind::kMoe) continue;
        EXPECT_TRUE(SameBits(p.subspan(a.expert_offset, a.local_experts * a.expert_size),
                             f.subspan(b.expert_offset + a.first_expert * b.expert_size,
                                       a.local_experts * a.expert_size)))
            << "ep " << ep << " rank " << q << " layer " << l;
      }
    }
  }
}

// The all-to-all of EP shards driven in lockstep: receiver r takes from every sender, in rank
// order, the block the sender addressed to r (peer-major, bin-major rows).
void DeliverInLockstep(std::vector<EpExchange*>& ex) {
  const int bins = ex[0]->bins;
  const int64_t width = ex[0]->row_width;
  for (size_t r = 0; r < ex.size(); ++r) {
    ex[r]->recv.clear();
    ex[r]->recv_counts.clear();
    for (EpExchange* from : ex) {
      int64_t begin = 0, rows = 0;
      for (size_t i = 0; i < from->send_counts.size(); ++i) {
        if (i < r * static_cast<size_t>(bins)) begin += from->send_counts[i];
        if (i / static_cast<size_t>(bins) == r) rows += from->send_counts[i];
      }
      for (int b = 0; b < bins; ++b) {
        ex[r]->recv_counts.push_back(from->send_counts[r * static_cast<size_t>(bins) + b]);
      }
      ex[r]->recv.insert(ex[r]->recv.end(), from->send.begin() + begin * width,
                         from->send.begin() + (begin + rows) * width);
    }
  }
}

// PassSteps with ep > 1 is the order of the real passes' exchange points: two EP shards driven in
// lockstep record EP exchanges (-2 dispatch, -3 combine), TP all-reduces (-1) and final layer
// gradients, for forward, backward, backward-input and weight.
TEST(PassSteps, CutsMoeBlocksAtTheirExchangesAsTheRealPassesDo) {
  MlpConfig c = MoeModel(2, 0.0, 0.0);
  c.hidden = {6, 6, 6, 6};
  for (int tp : {1, 2}) {
    auto p = PartitionMlp(c, 1, tp, {}, /*ep=*/2);
    ASSERT_TRUE(p.ok()) << p.status();
    auto layers = StageLayers(c, *p, 0);
    ASSERT_TRUE(layers.ok());
    std::vector<std::unique_ptr<MlpStage>> shards;  // [q * tp + t]
    for (int q = 0; q < 2; ++q) {
      for (int t = 0; t < tp; ++t) shards.push_back(Make(c, *p, 0, t, q));
    }
    auto run = [&](MlpStage::Pass pass, int mb, const Tensor& in) {
      std::vector<int> events;
      for (auto& s : shards) EXPECT_TRUE(s->BeginPass(pass, mb, in).ok());
      while (true) {
        std::vector<StageExchange> ex;
        for (size_t i = 0; i < shards.size(); ++i) {
          auto e = shards[i]->RunToExchange(mb, [&, i](int l) {
            if (i == 0) events.push_back(l);
          });
          EXPECT_TRUE(e.ok()) << e.status();
          ex.push_back(*e);
        }
        if (ex[0].kind == StageExchange::Kind::kDone) break;
        if (ex[0].kind == StageExchange::Kind::kTpAllReduce) {
          events.push_back(-1);
          continue;  // a stand-in sum: only the order is checked
        }
        events.push_back(ex[0].ep->kind == EpExchange::Kind::kDispatch ? -2 : -3);
        for (int t = 0; t < tp; ++t) {
          std::vector<EpExchange*> group = {ex[static_cast<size_t>(t)].ep,
                                            ex[static_cast<size_t>(tp + t)].ep};
          DeliverInLockstep(group);
        }
      }
      for (auto& s : shards) EXPECT_TRUE(s->EndPass(mb).ok());
      return events;
    };
    auto expected = [&](PassKind pass) {
      std::vector<int> ev;
      for (const PassStep& st : PassSteps(*layers, tp, pass, /*ep=*/2)) {
        if (st.kind == PassStep::Kind::kTpAllReduce) ev.push_back(-1);
        if (st.kind == PassStep::Kind::kEpAllToAll) ev.push_back(st.moe_phase == 0 ? -2 : -3);
        if (st.kind == PassStep::Kind::kLayer && st.grads_final) ev.push_back(st.local_layer);
      }
      return ev;
    };
    const Tensor x = Random(4, c.input_dim, 3), dy = Random(4, c.classes, 4);
    const std::vector<int> fwd = expected(PassKind::kForward);
    EXPECT_EQ(std::count(fwd.begin(), fwd.end(), -2), 2);  // two MoE blocks, one dispatch each
    EXPECT_EQ(run(MlpStage::Pass::kForward, 0, x), expected(PassKind::kForward)) << "tp " << tp;
    EXPECT_EQ(run(MlpStage::Pass::kBackward, 0, dy), expected(PassKind::kBackward)) << "tp " << tp;
    EXPECT_EQ(run(MlpStage::Pass::kForward, 1, x), expected(PassKind::kForward)) << "tp " << tp;
    EXPECT_EQ(run(MlpStage::Pass::kBackwardInput, 1, dy), expected(PassKind::kBackwardInput))
        << "tp " << tp;
    std::vector<int> w;
    EXPECT_TRUE(shards[0]->BackwardWeight(1, [&](int l) { w.push_back(l); }).ok());
    EXPECT_EQ(w, expected(PassKind::kWeight)) << "tp " << tp;
    // With ep == 1 a MoE block is one layer step with no exchange.
    for (const PassStep& st : PassSteps(*layers, tp, PassKind::kForward, 1)) {
      EXPECT_NE(st.kind, PassStep::Kind::kEpAllToAll);
      EXPECT_EQ(st.moe_phase, -1);
    }
  }
}

// router_skew moves the token slots towards low expert indices (deterministically), and leaves the
// gradients' bits to the same kernels (Infer == Forward still holds).
TEST(MoeStage, RouterSkewFavoursLowExperts) {
  MlpConfig c = MoeModel(1, 0.0, 0.0);
  const Tensor x = Random(64, c.input_dim, 11);
  std::vector<int64_t> kept[2];
  for (int i = 0; i < 2; ++i) {
    c.moe.router_skew = i == 0 ? 0.0 : 8.0;
    auto p = PartitionMlp(c, 1, 1);
    ASSERT_TRUE(p.ok());
    auto s = Make(c, *p, 0);
    auto y = s->Forward(0, x, nullptr);
    ASSERT_TRUE(y.ok()) << y.status();
    auto inferred = s->Infer(x, nullptr);
    ASSERT_TRUE(inferred.ok());
    EXPECT_TRUE(SameBits(y->span(), inferred->span()));
    kept[i] = s->moe(1)->stats().kept;
    EXPECT_EQ(s->moe(1)->stats().kept_by_key.at(0), kept[i]) << "one micro-batch: its own counts";
  }
  EXPECT_GT(kept[1][0], kept[0][0]);
  EXPECT_GT(kept[1][0], 48) << "most of 64 slots on expert 0";
  EXPECT_LT(kept[1][3], kept[0][3] + 1);
}

TEST(MoeStage, MisuseIsAnErrorNotACrash) {
  OneStage ep2(MoeModel(1, 0, 0), 2, 0);
  const Tensor x = Random(4, 5, 38);
  EXPECT_EQ(ep2.stage->Forward(0, x, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);  // ep = 2 needs an exchange function
  EXPECT_EQ(MlpStage::Create(ep2.config, ep2.partition, 0, 0, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A TP-only driver cannot run an EP shard.
  ASSERT_TRUE(ep2.stage->BeginPass(MlpStage::Pass::kForward, 1, x).ok());
  EXPECT_EQ(ep2.stage->RunToAllReduce(1).status().code(), absl::StatusCode::kFailedPrecondition);
  // An exchange that delivers rows inconsistent with its counts.
  OneStage one(MoeModel(1, 0, 0));
  const EpExchangeFn bad = [](EpExchange& ex) {
    ExchangeLocally(ex);
    ex.recv.push_back(1.0f);
    return absl::OkStatus();
  };
  EXPECT_EQ(one.stage->Forward(0, x, nullptr, bad).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace rp
