// rp::schedule::ParallelGrid: the DP × PP × TP arrangement of ranks and their placement on nodes.
//
// A rank is identified by its coordinates (dp, pp, tp): dp the data-parallel replica, pp the pipeline
// stage, tp the tensor-parallel shard. The global rank number is the row-major index
// rank = (dp · PP + pp) · TP + tp, fixed, independent of placement.
//
// Placement assigns every rank a device id (its position in the cluster, 0 .. world−1); device d
// lives on node d / devices_per_node. The default order puts TP innermost, then PP, then DP (as
// Megatron-LM does: tensor-parallel shards share NVLink, the pipeline comes next, replicas are
// outermost). `Placement::order` lists the dimensions from innermost to outermost and may be any
// permutation. Device ids are what runtime/link.h's LinkSpec classifies.
//
// Groups: the DP group of a rank is the ranks with the same (pp, tp), ordered by dp (this is the ring
// order of the gradient all-reduce); the PP group the ranks with the same (dp, tp), ordered by pp; the
// TP group the ranks with the same (dp, pp), ordered by tp.
//
// Guarantees: Create validates every size (>= 1) and the order (a permutation); all accessors are
// O(1) (groups O(group size)) and never fail on ranks in [0, world). Out-of-range ranks are a
// precondition violation (use IsValidRank first when the rank comes from input).
// Thread safety: immutable after Create; any thread may call const methods concurrently.
//
// Example:
//   RP_ASSIGN_OR_RETURN(ParallelGrid grid, ParallelGrid::Create({.dp = 2, .pp = 4, .tp = 2}));
//   int r = grid.RankOf({.dp = 1, .pp = 2, .tp = 0});     // 12
//   std::vector<int> ring = grid.DpGroup(r);               // {4, 12}
//   rp::LinkClass c = grid.ClassOf(r, grid.NextInPipeline(r));
#pragma once

#include <array>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/link.h"

namespace rp::schedule {

enum class Dim { kDp, kPp, kTp };

struct GridShape {
  int dp = 1;
  int pp = 1;
  int tp = 1;
};

struct Coord {
  int dp = 0;
  int pp = 0;
  int tp = 0;
  bool operator==(const Coord&) const = default;
};

struct Placement {
  // Innermost first. Default: TP, then PP, then DP (Megatron).
  std::array<Dim, 3> order = {Dim::kTp, Dim::kPp, Dim::kDp};
  int devices_per_node = 8;  // G
};

class ParallelGrid {
 public:
  // InvalidArgument if a size or devices_per_node is < 1 or `order` is not a permutation.
  [[nodiscard]] static absl::StatusOr<ParallelGrid> Create(GridShape shape, Placement placement = {});

  const GridShape& shape() const { return shape_; }
  const Placement& placement() const { return placement_; }
  int world_size() const { return shape_.dp * shape_.pp * shape_.tp; }
  int num_nodes() const;  // ceil(world / devices_per_node)
  bool IsValidRank(int rank) const { return rank >= 0 && rank < world_size(); }

  int RankOf(Coord c) const { return (c.dp * shape_.pp + c.pp) * shape_.tp + c.tp; }
  Coord CoordOf(int rank) const;

  // Placement: the device id (cluster position) of a rank, its inverse, and the node of a rank.
  int DeviceOf(int rank) const;
  int RankAtDevice(int device) const;
  int NodeOf(int rank) const { return DeviceOf(rank) / placement_.devices_per_node; }

  std::vector<int> DpGroup(int rank) const;
  std::vector<int> PpGroup(int rank) const;
  std::vector<int> TpGroup(int rank) const;

  // The rank holding pipeline stage `stage` in `rank`'s (dp, tp) pipeline.
  int StageRank(int rank, int stage) const;

  // Link class between two ranks' devices (kSelf when a == b), with this grid's devices_per_node.
  LinkClass ClassOf(int a, int b) const;
  // The α–β parameters of that class taken from `spec` (spec.devices_per_node is not used: the grid's
  // placement decides the class).
  LinkParams ParamsOf(int a, int b, const LinkSpec& spec) const;

  // "DP=2 x PP=4 x TP=2 on 2 nodes of 8 (order tp,pp,dp)".
  std::string ToString() const;

 private:
  ParallelGrid(GridShape s, Placement p);
  int SizeOf(Dim d) const;
  int Get(const Coord& c, Dim d) const;

  GridShape shape_;
  Placement placement_;
  std::array<int, 3> stride_{};  // device-id stride of dp, pp, tp (indexed by Dim)
};

}  // namespace rp::schedule
