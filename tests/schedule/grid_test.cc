#include "schedule/grid.h"

#include <vector>

#include "gtest/gtest.h"

namespace rp::schedule {
namespace {

TEST(ParallelGrid, RankAndCoordinatesRoundTrip) {
  auto grid = ParallelGrid::Create({.dp = 3, .pp = 4, .tp = 2});
  ASSERT_TRUE(grid.ok()) << grid.status();
  EXPECT_EQ(grid->world_size(), 24);
  for (int r = 0; r < 24; ++r) {
    EXPECT_EQ(grid->RankOf(grid->CoordOf(r)), r);
    EXPECT_EQ(grid->RankAtDevice(grid->DeviceOf(r)), r);
  }
  EXPECT_EQ(grid->RankOf({.dp = 1, .pp = 2, .tp = 0}), 12);
  EXPECT_EQ(grid->CoordOf(13), (Coord{.dp = 1, .pp = 2, .tp = 1}));
}

TEST(ParallelGrid, GroupsAreOrderedByTheirDimension) {
  auto grid = ParallelGrid::Create({.dp = 2, .pp = 4, .tp = 2});
  ASSERT_TRUE(grid.ok());
  EXPECT_EQ(grid->DpGroup(12), (std::vector<int>{4, 12}));
  EXPECT_EQ(grid->PpGroup(12), (std::vector<int>{8, 10, 12, 14}));
  EXPECT_EQ(grid->TpGroup(12), (std::vector<int>{12, 13}));
  EXPECT_EQ(grid->StageRank(12, 3), 14);
}

TEST(ParallelGrid, DefaultPlacementPutsTpInnermostThenPpThenDp) {
  auto grid = ParallelGrid::Create({.dp = 2, .pp = 2, .tp = 4}, {.devices_per_node = 8});
  ASSERT_TRUE(grid.ok());
  // Rank numbering equals device order with the Megatron placement.
  for (int r = 0; r < 16; ++r) EXPECT_EQ(grid->DeviceOf(r), r);
  EXPECT_EQ(grid->num_nodes(), 2);
  EXPECT_EQ(grid->ClassOf(0, 3), LinkClass::kIntraNode);   // TP group: one node
  EXPECT_EQ(grid->ClassOf(0, 4), LinkClass::kIntraNode);   // PP hop inside a replica
  EXPECT_EQ(grid->ClassOf(0, 8), LinkClass::kInterNode);   // DP peers on different nodes
  EXPECT_EQ(grid->ClassOf(5, 5), LinkClass::kSelf);
}

TEST(ParallelGrid, ConfigurableOrderPutsDpInnermost) {
  auto grid = ParallelGrid::Create({.dp = 4, .pp = 2, .tp = 1},
                                   {.order = {Dim::kDp, Dim::kTp, Dim::kPp}, .devices_per_node = 4});
  ASSERT_TRUE(grid.ok());
  // DP replicas of stage 0 fill node 0; stage 1 fills node 1.
  const int r = grid->RankOf({.dp = 3, .pp = 0, .tp = 0});
  EXPECT_EQ(grid->DeviceOf(r), 3);
  EXPECT_EQ(grid->DeviceOf(grid->RankOf({.dp = 0, .pp = 1, .tp = 0})), 4);
  EXPECT_EQ(grid->ClassOf(grid->RankOf({0, 0, 0}), grid->RankOf({3, 0, 0})), LinkClass::kIntraNode);
  EXPECT_EQ(grid->ClassOf(grid->RankOf({0, 0, 0}), grid->RankOf({0, 1, 0})), LinkClass::kInterNode);
  LinkSpec spec{.intra_node = {.alpha = Nanos(1)}, .inter_node = {.alpha = Nanos(2)}};
  EXPECT_EQ(grid->ParamsOf(grid->RankOf({0, 0, 0}), grid->RankOf({0, 1, 0}), spec).alpha, Nanos(2));
}

TEST(ParallelGrid, RejectsBadShapesAndOrders) {
  EXPECT_EQ(ParallelGrid::Create({.dp = 0}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParallelGrid::Create({.tp = -1}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParallelGrid::Create({}, {.devices_per_node = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto bad = ParallelGrid::Create({}, {.order = {Dim::kTp, Dim::kTp, Dim::kDp}});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("permutation"), std::string::npos);
}

}  // namespace
}  // namespace rp::schedule
