#include "schedule/grid.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace rp::schedule {
namespace {
const char* DimName(Dim d) {
  switch (d) {
    case Dim::kDp: return "dp";
    case Dim::kPp: return "pp";
    case Dim::kTp: return "tp";
  }
  return "?";
}
}  // namespace

absl::StatusOr<ParallelGrid> ParallelGrid::Create(GridShape shape, Placement placement) {
  if (shape.dp < 1 || shape.pp < 1 || shape.tp < 1) {
    return absl::InvalidArgumentError(absl::StrCat("ParallelGrid: dp, pp and tp must be >= 1, got dp=",
                                                   shape.dp, " pp=", shape.pp, " tp=", shape.tp));
  }
  if (placement.devices_per_node < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ParallelGrid: devices_per_node must be >= 1, got ", placement.devices_per_node));
  }
  bool seen[3] = {false, false, false};
  for (Dim d : placement.order) {
    const int i = static_cast<int>(d);
    if (i < 0 || i > 2 || seen[i]) {
      return absl::InvalidArgumentError(
          "ParallelGrid: placement.order must be a permutation of {dp, pp, tp}");
    }
    seen[i] = true;
  }
  const int64_t world = int64_t{shape.dp} * shape.pp * shape.tp;
  if (world > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat("ParallelGrid: world size ", world, " too large"));
  }
  return ParallelGrid(shape, placement);
}

ParallelGrid::ParallelGrid(GridShape s, Placement p) : shape_(s), placement_(p) {
  int stride = 1;
  for (Dim d : placement_.order) {
    stride_[static_cast<int>(d)] = stride;
    stride *= SizeOf(d);
  }
}

int ParallelGrid::SizeOf(Dim d) const {
  switch (d) {
    case Dim::kDp: return shape_.dp;
    case Dim::kPp: return shape_.pp;
    case Dim::kTp: return shape_.tp;
  }
  return 1;
}

int ParallelGrid::Get(const Coord& c, Dim d) const {
  switch (d) {
    case Dim::kDp: return c.dp;
    case Dim::kPp: return c.pp;
    case Dim::kTp: return c.tp;
  }
  return 0;
}

int ParallelGrid::num_nodes() const {
  return (world_size() + placement_.devices_per_node - 1) / placement_.devices_per_node;
}

Coord ParallelGrid::CoordOf(int rank) const {
  Coord c;
  c.tp = rank % shape_.tp;
  rank /= shape_.tp;
  c.pp = rank % shape_.pp;
  c.dp = rank / shape_.pp;
  return c;
}

int ParallelGrid::DeviceOf(int rank) const {
  const Coord c = CoordOf(rank);
  return c.dp * stride_[static_cast<int>(Dim::kDp)] + c.pp * stride_[static_cast<int>(Dim::kPp)] +
         c.tp * stride_[static_cast<int>(Dim::kTp)];
}

int ParallelGrid::RankAtDevice(int device) const {
  Coord c;
  for (Dim d : placement_.order) {
    const int v = device % SizeOf(d);
    device /= SizeOf(d);
    switch (d) {
      case Dim::kDp: c.dp = v; break;
      case Dim::kPp: c.pp = v; break;
      case Dim::kTp: c.tp = v; break;
    }
  }
  return RankOf(c);
}

std::vector<int> ParallelGrid::DpGroup(int rank) const {
  Coord c = CoordOf(rank);
  std::vector<int> g(shape_.dp);
  for (int i = 0; i < shape_.dp; ++i) {
    c.dp = i;
    g[i] = RankOf(c);
  }
  return g;
}

std::vector<int> ParallelGrid::PpGroup(int rank) const {
  Coord c = CoordOf(rank);
  std::vector<int> g(shape_.pp);
  for (int i = 0; i < shape_.pp; ++i) {
    c.pp = i;
    g[i] = RankOf(c);
  }
  return g;
}

std::vector<int> ParallelGrid::TpGroup(int rank) const {
  Coord c = CoordOf(rank);
  std::vector<int> g(shape_.tp);
  for (int i = 0; i < shape_.tp; ++i) {
    c.tp = i;
    g[i] = RankOf(c);
  }
  return g;
}

int ParallelGrid::StageRank(int rank, int stage) const {
  Coord c = CoordOf(rank);
  c.pp = stage;
  return RankOf(c);
}

LinkClass ParallelGrid::ClassOf(int a, int b) const {
  if (a == b) return LinkClass::kSelf;
  return NodeOf(a) == NodeOf(b) ? LinkClass::kIntraNode : LinkClass::kInterNode;
}

LinkParams ParallelGrid::ParamsOf(int a, int b, const LinkSpec& spec) const {
  switch (ClassOf(a, b)) {
    case LinkClass::kSelf: return LinkParams{};
    case LinkClass::kIntraNode: return spec.intra_node;
    case LinkClass::kInterNode: return spec.inter_node;
  }
  return LinkParams{};
}

std::string ParallelGrid::ToString() const {
  return absl::StrCat("DP=", shape_.dp, " x PP=", shape_.pp, " x TP=", shape_.tp, " on ", num_nodes(),
                      " node(s) of ", placement_.devices_per_node, " (order ",
                      DimName(placement_.order[0]), ",", DimName(placement_.order[1]), ",",
                      DimName(placement_.order[2]), ")");
}

}  // namespace rp::schedule
