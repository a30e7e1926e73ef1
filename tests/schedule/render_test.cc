#include "schedule/render.h"

#include <string>

#include "gtest/gtest.h"
#include "schedule/generators.h"

namespace rp::schedule {
namespace {

TEST(RenderSlots, OneFOneBTwoRanksTwoMicroBatches) {
  auto prog = BuildOneFOneB({.num_ranks = 2, .num_micro_batches = 2});
  ASSERT_TRUE(prog.ok());
  auto txt = RenderSlots(*prog);
  ASSERT_TRUE(txt.ok()) << txt.status();
  EXPECT_EQ(*txt,
            "rank\\slot  0  1  2  3  4  5\n"
            "rank 0    F0 F1  . B0  . B1\n"
            "rank 1     . F0 B0 F1 B1  .\n");
}

TEST(RenderSlots, TheLastStageNeverShowsABackwardBeforeItsForward) {
  // SCENARIOS.md S2: K = 3, M = 6. The prototype drew B0 on the last stage at step 0.
  auto prog = BuildOneFOneB({.num_ranks = 3, .num_micro_batches = 6});
  ASSERT_TRUE(prog.ok());
  auto txt = RenderSlots(*prog);
  ASSERT_TRUE(txt.ok());
  const size_t row = txt->find("rank 2");
  ASSERT_NE(row, std::string::npos);
  const std::string last = txt->substr(row, txt->find('\n', row) - row);
  EXPECT_EQ(last.substr(0, 22), "rank 2     .  . F0 B0 ");
}

TEST(RenderSlots, InterleavedAndZeroBubbleCellsNameChunkAndKind) {
  auto il = BuildInterleaved({.num_ranks = 2, .num_micro_batches = 2, .num_chunks = 2});
  ASSERT_TRUE(il.ok());
  auto txt = RenderSlots(*il);
  ASSERT_TRUE(txt.ok());
  EXPECT_NE(txt->find("F0a"), std::string::npos);
  EXPECT_NE(txt->find("B1b"), std::string::npos);
  auto zb = BuildZeroBubble({.num_ranks = 2, .num_micro_batches = 2});
  ASSERT_TRUE(zb.ok());
  auto z = RenderSlots(*zb);
  ASSERT_TRUE(z.ok());
  EXPECT_NE(z->find("W1"), std::string::npos);
}

TEST(RenderSlots, AVShowsBothChunksAndTurnsWithoutALinkOnTheLastRank) {
  auto zbv = BuildZeroBubbleV({.num_ranks = 2, .num_micro_batches = 3, .num_chunks = 2});
  ASSERT_TRUE(zbv.ok()) << zbv.status();
  auto txt = RenderSlots(*zbv);
  ASSERT_TRUE(txt.ok()) << txt.status();
  // Unit costs, F = I = W: rank 0 (stages 0 and 3) runs without a gap — ZB-V's zero bubble in the
  // per-rank span; the last rank (stages 1 and 2) turns the V locally, F0a right before F0b.
  EXPECT_EQ(*txt,
            "rank\\slot   0   1   2   3   4   5   6   7   8   9  10  11  12  13  14  15  16  17  18\n"
            "rank 0    F0a F1a F2a F0b B0b W0b F1b B1b W1b B0a W0a F2b B2b W2b B1a W1a B2a W2a   .\n"
            "rank 1      . F0a F0b F1a F1b B0b W0b F2a B0a W0a F2b B1b W1b B1a B2b B2a W1a W2b W2a\n");
}

TEST(RenderSlots, FusedPairsAndBothDirectionsAreLabelled) {
  auto dp = BuildDualPipe({.num_ranks = 4, .num_micro_batches = 8, .num_chunks = 2});
  ASSERT_TRUE(dp.ok()) << dp.status();
  auto txt = RenderSlots(*dp);
  ASSERT_TRUE(txt.ok()) << txt.status();
  auto row = [&](int r) {
    const size_t at = txt->find("rank " + std::to_string(r));
    return txt->substr(at, txt->find('\n', at) - at);
  };
  // Direction 0 (chunk a, micro-batches 0..3) enters at rank 0, direction 1 (chunk b, 4..7) at rank 3.
  EXPECT_EQ(row(0).substr(0, 20), "rank 0     F0a  F1a ");
  EXPECT_EQ(row(3).substr(0, 20), "rank 3     F4b  F5b ");
  // A fused pair: its forward's cell, then "&" and its backward in the following cells.
  EXPECT_NE(row(0).find(" F3a &B5b &B5b "), std::string::npos) << *txt;
  auto apart = BuildDualPipe({.num_ranks = 4, .num_micro_batches = 8, .num_chunks = 2,
                              .fused_fb = false});
  ASSERT_TRUE(apart.ok());
  auto txt2 = RenderSlots(*apart);
  ASSERT_TRUE(txt2.ok());
  EXPECT_EQ(txt2->find('&'), std::string::npos);
}

TEST(RenderTimeline, RejectsZeroSlotAndMismatchedTimelines) {
  auto prog = BuildGPipe({.num_ranks = 2, .num_micro_batches = 1});
  ASSERT_TRUE(prog.ok());
  EXPECT_EQ(RenderTimeline(*prog, {{}, {}}, Nanos(0)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RenderTimeline(*prog, {{}}, Nanos(1)).status().code(), absl::StatusCode::kInvalidArgument);
  const std::vector<std::vector<OpInterval>> bad_op = {
      {{.kind = IntervalKind::kCompute, .op = 99, .end = Nanos(1)}}, {}};
  EXPECT_EQ(RenderTimeline(*prog, bad_op, Nanos(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(RenderTimeline(*prog, {{}, {}}, Nanos(1)).ok());  // nothing to draw is no error
}

}  // namespace
}  // namespace rp::schedule
