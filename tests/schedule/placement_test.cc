// Stage placement (loop, V, two directions) and what the validator checks with it: local hand-offs,
// directions of micro-batches, fused F&B ops, B vs Bi + W.
#include <algorithm>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedule/generators.h"
#include "schedule/program.h"
#include "schedule/validator.h"

namespace rp::schedule {
namespace {

using ::testing::HasSubstr;

TEST(StagePlacement, LoopIsMegatronsAndTheDefaultOfAProgram) {
  const StagePlacement loop = StagePlacement::Loop(3, 2);
  Program prog;  // empty placement: the loop one
  prog.num_ranks = 3;
  prog.num_chunks = 2;
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 2; ++c) {
      EXPECT_EQ(loop.StageOf(r, c), (StageId{0, c * 3 + r}));
      EXPECT_EQ(prog.StageOf(r, c), loop.StageOf(r, c));
      EXPECT_EQ(loop.HolderOf(loop.StageOf(r, c)), (ChunkRef{r, c}));
    }
  }
  EXPECT_EQ(prog.num_model_stages(), 6);
  EXPECT_EQ(prog.RankOfModelStage(4), 1);
  EXPECT_EQ(prog.ChunkOfModelStage(4), 1);
  // Stage 2 (rank 2, chunk 0) hands over to stage 3 on rank 0.
  EXPECT_EQ(prog.NextHolder(2, 0), (ChunkRef{0, 1}));
  EXPECT_EQ(prog.PrevHolder(0, 0), std::nullopt);
  EXPECT_EQ(prog.NextHolder(2, 1), std::nullopt);
}

TEST(StagePlacement, VPutsStagesRAnd2PMinus1MinusROnRankR) {
  const int p = 3;
  Program prog;
  prog.num_ranks = p;
  prog.num_chunks = 2;
  prog.placement = StagePlacement::V(p);
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(prog.ModelStage(r, 0), r);
    EXPECT_EQ(prog.ModelStage(r, 1), 2 * p - 1 - r);
    EXPECT_EQ(prog.RankOfModelStage(2 * p - 1 - r), r);
  }
  EXPECT_EQ(prog.num_model_stages(), 2 * p);
  EXPECT_EQ(prog.chunks_per_direction(), 2);
  // The turn of the V is local: stage p − 1 (last rank, chunk 0) feeds stage p (last rank, chunk 1).
  EXPECT_EQ(prog.NextHolder(p - 1, 0), (ChunkRef{p - 1, 1}));
  EXPECT_EQ(prog.PrevHolder(p - 1, 1), (ChunkRef{p - 1, 0}));
  // On the way back chunk 1 of rank r feeds chunk 1 of rank r − 1; rank 0's chunk 1 is the last stage.
  EXPECT_EQ(prog.NextHolder(1, 1), (ChunkRef{0, 1}));
  EXPECT_EQ(prog.NextHolder(0, 1), std::nullopt);
}

TEST(StagePlacement, BidirectionalHoldsEachStageTwiceOneCopyPerDirection) {
  const int p = 4;
  Program prog;
  prog.num_ranks = p;
  prog.num_chunks = 2;
  prog.num_micro_batches = 8;
  prog.placement = StagePlacement::Bidirectional(p);
  EXPECT_EQ(prog.num_directions(), 2);
  EXPECT_EQ(prog.num_model_stages(), p);
  EXPECT_EQ(prog.chunks_per_direction(), 1);
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(prog.StageOf(r, 0), (StageId{0, r}));
    EXPECT_EQ(prog.StageOf(r, 1), (StageId{1, p - 1 - r}));
    EXPECT_EQ(prog.RankOfModelStage(r, 0), r);
    EXPECT_EQ(prog.RankOfModelStage(r, 1), p - 1 - r);
  }
  // Direction 1 enters at rank p − 1 and flows towards rank 0.
  EXPECT_EQ(prog.NextHolder(p - 1, 1), (ChunkRef{p - 2, 1}));
  EXPECT_EQ(prog.NextHolder(0, 1), std::nullopt);
  EXPECT_EQ(prog.PrevHolder(p - 1, 1), std::nullopt);
  // Micro-batches: the first half flows in direction 0, the second in direction 1.
  EXPECT_EQ(prog.DirectionOfMicroBatch(3), 0);
  EXPECT_EQ(prog.DirectionOfMicroBatch(4), 1);
  EXPECT_EQ(prog.FirstMicroBatch(1), 4);
  EXPECT_EQ(prog.NumMicroBatches(1), 4);
}

TEST(StagePlacement, FromTableAcceptsAnyBijectionAndNamesTheBadChunk) {
  auto ok = StagePlacement::FromTable(2, 2, 1, {{0, 3}, {0, 0}, {0, 1}, {0, 2}});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->HolderOf({0, 3}), (ChunkRef{0, 0}));
  auto dup = StagePlacement::FromTable(2, 2, 1, {{0, 3}, {0, 0}, {0, 3}, {0, 2}});
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(dup.status().message()),
              HasSubstr("rank 1 chunk 0 holds direction 0 stage 3, already held by rank 0 chunk 0"));
  auto range = StagePlacement::FromTable(2, 1, 2, {{0, 0}, {2, 0}});
  EXPECT_THAT(std::string(range.status().message()), HasSubstr("rank 1 chunk 0"));
  EXPECT_THAT(std::string(range.status().message()), HasSubstr("out of range"));
  auto size = StagePlacement::FromTable(2, 2, 1, {{0, 0}});
  EXPECT_THAT(std::string(size.status().message()), HasSubstr("stage_of_chunk has 1 entries"));
}

int CountOps(const Program& prog, int rank, OpKind kind, int chunk) {
  const auto& ops = prog.ranks[rank];
  return static_cast<int>(std::count_if(ops.begin(), ops.end(), [&](const Op& op) {
    return op.kind == kind && op.chunk == chunk;
  }));
}

TEST(Validator, TheTurnOfAVNeedsNoMessageAndRejectsOne) {
  auto prog = BuildZeroBubbleV({.num_ranks = 3, .num_micro_batches = 6, .num_chunks = 2});
  ASSERT_TRUE(prog.ok()) << prog.status();
  // The last rank passes stage 2's output to stage 3 on itself: no SendAct of chunk 0, no RecvAct
  // of chunk 1, no gradient messages between its chunks.
  EXPECT_EQ(CountOps(*prog, 2, OpKind::kSendAct, 0), 0);
  EXPECT_EQ(CountOps(*prog, 2, OpKind::kRecvAct, 1), 0);
  EXPECT_EQ(CountOps(*prog, 2, OpKind::kSendGrad, 1), 0);
  EXPECT_EQ(CountOps(*prog, 2, OpKind::kRecvGrad, 0), 0);
  // Every other rank sends chunk 0's activations to the next rank and chunk 1's to the previous.
  EXPECT_EQ(CountOps(*prog, 1, OpKind::kSendAct, 0), 6);
  EXPECT_EQ(CountOps(*prog, 1, OpKind::kSendAct, 1), 6);
  Program bad = *prog;
  auto& r2 = bad.ranks[2];
  auto f = std::find_if(r2.begin(), r2.end(), [](const Op& op) { return op.kind == OpKind::kForward; });
  r2.insert(f + 1, Op{.kind = OpKind::kSendAct, .micro_batch = f->micro_batch, .chunk = 0, .peer = 2});
  auto st = Validate(bad).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("a local hand-off needs no message"));
}

TEST(Validator, RejectsAMicroBatchOnTheOtherDirectionsChunk) {
  auto prog = BuildDualPipe({.num_ranks = 4, .num_micro_batches = 8, .num_chunks = 2});
  ASSERT_TRUE(prog.ok()) << prog.status();
  Program bad = *prog;
  Op& first = bad.ranks[0][0];  // F0 of direction 0 on chunk 0
  ASSERT_EQ(first.kind, OpKind::kForward);
  first.micro_batch = 5;  // a micro-batch of direction 1
  auto st = Validate(bad).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("micro-batch 5 flows in direction 1 but chunk 0 holds a stage of direction 0"));
}

TEST(Validator, AFusedPairWaitsForBothInputs) {
  auto prog = BuildDualPipeV({.num_ranks = 2, .num_micro_batches = 4, .num_chunks = 2});
  ASSERT_TRUE(prog.ok()) << prog.status();
  Program bad = *prog;
  auto& r0 = bad.ranks[0];
  auto fb = std::find_if(r0.begin(), r0.end(),
                         [](const Op& op) { return op.kind == OpKind::kForwardBackward; });
  ASSERT_NE(fb, r0.end());
  const Op pair = *fb;
  r0.erase(fb);
  r0.insert(r0.begin(), pair);  // before the forward its backward part needs
  auto st = Validate(bad).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("dependency violated: rank 0 op #0 F"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("&B"));
}

TEST(Validator, AWholeBackwardTakesNoWAndASplitOneNeedsIt) {
  auto prog = BuildDualPipeV({.num_ranks = 2, .num_micro_batches = 4, .num_chunks = 2});
  ASSERT_TRUE(prog.ok()) << prog.status();
  // DualPipeV mixes whole B's (the fused pairs) and Bi + W (its zero-bubble steps).
  EXPECT_GT(CountOps(*prog, 0, OpKind::kBackward, 1), 0);
  EXPECT_GT(CountOps(*prog, 0, OpKind::kWeightGrad, 1) + CountOps(*prog, 0, OpKind::kWeightGrad, 0), 0);
  Program extra_w = *prog;
  auto& r0 = extra_w.ranks[0];
  auto b = std::find_if(r0.begin(), r0.end(), [](const Op& op) { return op.kind == OpKind::kBackward; });
  ASSERT_NE(b, r0.end());
  r0.insert(b + 1, Op{.kind = OpKind::kWeightGrad, .micro_batch = b->micro_batch, .chunk = b->chunk});
  EXPECT_THAT(std::string(Validate(extra_w).status().message()),
              HasSubstr("but its backward is a whole B (no W expected)"));
}

TEST(Program, FusedOpsPrintBothParts) {
  const Op op{.kind = OpKind::kForwardBackward, .micro_batch = 3, .chunk = 0,
              .backward_micro_batch = 1, .backward_chunk = 1};
  EXPECT_EQ(ToString(op, 2), "F3.0&B1.1");
  EXPECT_STREQ(OpKindName(op.kind), "F&B");
  EXPECT_TRUE(IsCompute(op.kind));
}

}  // namespace
}  // namespace rp::schedule
