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

TEST(RenderTimeline, RejectsZeroSlotAndMismatchedTimelines) {
  auto prog = BuildGPipe({.num_ranks = 2, .num_micro_batches = 1});
  ASSERT_TRUE(prog.ok());
  EXPECT_EQ(RenderTimeline(*prog, {{}, {}}, Nanos(0)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RenderTimeline(*prog, {{}, {}}, Nanos(1)).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rp::schedule
