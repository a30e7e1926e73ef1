#include "schedule/plan.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "runtime/status_macros.h"
#include "runtime/timing.h"
#include "schedule/validator.h"

namespace rp::schedule {
namespace {

absl::Status Invalid(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

// `total` split over parts weighted by `weights` (exact: the parts sum to `total`).
std::vector<uint64_t> SplitByWeight(uint64_t total, const std::vector<uint64_t>& weights) {
  uint64_t all = 0;
  for (uint64_t w : weights) all += w;
  std::vector<uint64_t> out;
  uint64_t done = 0, prev = 0;
  for (uint64_t w : weights) {
    done += w;
    const uint64_t end =
        all == 0 ? 0
                 : static_cast<uint64_t>(ShareEnd(Nanos(static_cast<int64_t>(total)), done, all).count());
    out.push_back(end - prev);
    prev = end;
  }
  if (all == 0 && !out.empty()) out.back() = total;
  return out;
}

// Modeled bytes of a pass's TP all-reduces (the program's kTpAllReduce op after F/B/Bi of the
// chunk), and of the chunk's gradients (its kAllReduce ops).
struct ModeledSizes {
  std::array<uint64_t, kNumPasses> tp_bytes{};
  uint64_t grad_bytes = 0;
};

std::vector<ModeledSizes> SizesOf(const Program& prog, int pp) {
  std::vector<ModeledSizes> sizes(static_cast<size_t>(prog.num_chunks));
  const std::vector<Op>& ops = prog.ranks[static_cast<size_t>(pp)];
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    ModeledSizes& s = sizes[static_cast<size_t>(op.chunk)];
    if (op.kind == OpKind::kAllReduce) s.grad_bytes += op.bytes;
    if (op.kind == OpKind::kTpAllReduce && i > 0) {
      const Op& prev = ops[i - 1];
      if (prev.kind == OpKind::kForwardBackward) {
        // An F&B is followed by its F's kTpAllReduce, then its B's (the generators' order); a
        // lone one carries both parts' bytes.
        s.tp_bytes[0] = op.bytes;
        const bool b_follows = i + 1 < ops.size() && ops[i + 1].kind == OpKind::kTpAllReduce;
        sizes[static_cast<size_t>(prev.backward_chunk)].tp_bytes[1] = b_follows ? ops[i + 1].bytes : op.bytes;
      } else if (const int pass = PassIndex(prev.kind); pass >= 0) {
        s.tp_bytes[static_cast<size_t>(pass)] = op.bytes;
      }
    }
  }
  return sizes;
}

// A layer's share of a pass: its parameters; a MoE block's router plus top_k experts (see
// LayerPlan::weight), cut by phase when its pass is (router, experts, combine).
uint64_t MoeWeight(const MlpConfig& m, const MlpStage::LayerInfo& l, int phase) {
  const uint64_t router = static_cast<uint64_t>(l.in) * static_cast<uint64_t>(m.moe.experts);
  const uint64_t experts =
      static_cast<uint64_t>(m.moe.top_k) * static_cast<uint64_t>(l.expert_size);
  if (phase == 0) return router;
  if (phase == 1) return experts;
  if (phase == 2) return 0;
  return router + experts;
}

// Buckets in reverse layer order, closed once they hold at least bucket_bytes; with ep > 1 a MoE
// block's experts form an expert bucket and cut the DP buckets around them (plan.h "bucket").
void FormBuckets(uint64_t bucket_bytes, ChunkPlan& c) {
  const int n = static_cast<int>(c.layers.size());
  c.bucket_of_layer.assign(c.layers.size(), -1);
  c.expert_bucket_of_layer.assign(c.layers.size(), -1);
  BucketPlan cur;
  uint64_t bytes = 0;
  bool open = false;
  auto close = [&] {
    cur.modeled_elements = (bytes + 3) / 4;
    c.bucket_of_layer[static_cast<size_t>(cur.first_layer)] = static_cast<int>(c.buckets.size());
    c.buckets.push_back(cur);
    open = false;
    bytes = 0;
  };
  for (int l = n - 1; l >= 0; --l) {
    const LayerPlan& lp = c.layers[static_cast<size_t>(l)];
    size_t count = lp.grad_count;
    uint64_t piece_bytes = lp.modeled_grad_bytes;
    if (lp.expert_count > 0) {
      if (open) close();
      c.expert_bucket_of_layer[static_cast<size_t>(l)] = static_cast<int>(c.buckets.size());
      c.buckets.push_back({.first_layer = l, .end_layer = l + 1, .grad_offset = lp.expert_offset,
                           .grad_count = lp.expert_count,
                           .modeled_elements = (lp.modeled_expert_bytes + 3) / 4,
                           .expert = true});
      count = lp.expert_offset - lp.grad_offset;  // the router
      piece_bytes -= lp.modeled_expert_bytes;
    }
    if (!open) {
      cur = BucketPlan{.first_layer = l, .end_layer = l + 1, .grad_offset = lp.grad_offset};
      open = true;
    }
    cur.first_layer = l;
    cur.grad_offset = lp.grad_offset;
    cur.grad_count += count;
    bytes += piece_bytes;
    if (l == 0 || (bucket_bytes > 0 && bytes >= bucket_bytes)) close();
  }
}

absl::StatusOr<ChunkPlan> BuildChunk(const PlanOptions& o, const ModelPartition& part, int pp,
                                     int chunk, const ModeledSizes& sizes) {
  ChunkPlan c;
  c.model_stage = o.program.ModelStage(pp, chunk);
  RP_ASSIGN_OR_RETURN(std::vector<MlpStage::LayerInfo> layers,
                      StageLayers(o.model, part, c.model_stage));
  const bool split_experts = part.ep > 1;
  std::vector<uint64_t> params;
  for (const MlpStage::LayerInfo& l : layers) {
    const uint64_t count = static_cast<uint64_t>(l.end_offset - l.weight_offset);
    const bool moe = l.kind == ShardKind::kMoe;
    params.push_back(count);
    c.layers.push_back({.layer = l.layer,
                        .weight = moe ? MoeWeight(o.model, l, -1) : count,
                        .grad_offset = static_cast<size_t>(l.weight_offset),
                        .grad_count = static_cast<size_t>(count),
                        .width = l.in});
    if (moe && split_experts) {
      c.layers.back().expert_offset = static_cast<size_t>(l.expert_offset);
      c.layers.back().expert_count = static_cast<size_t>(l.end_offset - l.expert_offset);
    }
  }
  const std::vector<uint64_t> grad_bytes = SplitByWeight(sizes.grad_bytes, params);
  for (size_t l = 0; l < c.layers.size(); ++l) {
    LayerPlan& lp = c.layers[l];
    lp.modeled_grad_bytes = grad_bytes[l];
    if (lp.expert_count > 0) {
      lp.modeled_expert_bytes =
          SplitByWeight(grad_bytes[l], {lp.expert_offset - lp.grad_offset, lp.expert_count})[1];
    }
  }
  const PassKind kinds[kNumPasses] = {PassKind::kForward, PassKind::kBackward,
                                      PassKind::kBackwardInput, PassKind::kWeight};
  for (int p = 0; p < kNumPasses; ++p) {
    const size_t up = static_cast<size_t>(p);
    c.steps[up] = PassSteps(layers, part.tp, kinds[p], part.ep);
    int ars = 0;
    for (const PassStep& s : c.steps[up]) {
      uint64_t w = 0;
      if (s.kind == PassStep::Kind::kLayer) {
        const MlpStage::LayerInfo& info = layers[static_cast<size_t>(s.local_layer)];
        w = s.moe_phase >= 0 ? MoeWeight(o.model, info, s.moe_phase)
                             : c.layers[static_cast<size_t>(s.local_layer)].weight;
      } else if (s.kind == PassStep::Kind::kTpAllReduce) {
        ++ars;
      }
      c.step_weight[up].push_back(w);
      c.total_weight[up] += w;
    }
    const uint64_t elements = (sizes.tp_bytes[up] + 3) / 4;
    if (ars == 0 && elements > 0 && part.tp > 1 && !c.steps[up].empty()) {  // ChunkPlan::modeled_tp_tail
      c.steps[up].push_back({PassStep::Kind::kTpAllReduce, c.steps[up].back().local_layer, false});
      c.step_weight[up].push_back(0);
      c.modeled_tp_tail[up] = true;
      ars = 1;
    }
    c.tp_elements[up] =
        ars == 0 ? std::vector<uint64_t>{}
                 : SplitByWeight(elements, std::vector<uint64_t>(static_cast<size_t>(ars), 1));
  }
  FormBuckets(o.bucket_bytes, c);
  return c;
}

// EP degree: carved out of DP, dividing the experts; MoE layers needed.
absl::Status CheckEp(const PlanOptions& o) {
  if (o.ep < 1) return Invalid("ep", absl::StrCat(o.ep, " (must be >= 1)"));
  if (o.grid.dp % o.ep != 0) {
    return Invalid("ep", absl::StrCat("dp (", o.grid.dp, ") must be a multiple of ep (", o.ep, ")"));
  }
  if (o.ep_row_bytes % 4 != 0) {
    return Invalid("ep_row_bytes", absl::StrCat(o.ep_row_bytes, " (must be a multiple of 4)"));
  }
  if (o.microbatch_size < 1) {
    return Invalid("microbatch_size", absl::StrCat(o.microbatch_size, " (must be >= 1)"));
  }
  if (o.ep == 1) return absl::OkStatus();
  if (!o.model.moe.enabled()) {
    return Invalid("ep", absl::StrCat(o.ep, " > 1 needs MoE layers (model.moe.layers)"));
  }
  if (o.model.moe.experts % o.ep != 0) {
    return Invalid("ep", absl::StrCat(o.ep, " does not divide experts (", o.model.moe.experts, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

int PassIndex(OpKind kind) {
  switch (kind) {
    case OpKind::kForward: return 0;
    case OpKind::kBackward: return 1;
    case OpKind::kBackwardInput: return 2;
    case OpKind::kWeightGrad: return 3;
    default: return -1;
  }
}

std::vector<int> ExecutionPlan::GradGroup(int rank, int chunk, int* index) const {
  const Program& prog = options.program;
  const Coord c = grid.CoordOf(rank);
  if (prog.num_directions() == 1) {
    if (index != nullptr) *index = c.dp;
    return grid.DpGroup(rank);
  }
  // Replica by replica, each replica's copies in direction order: a ring visits a replica's copies
  // one after the other (on one node when the pipeline fits one, as NCCL orders a ring node by node)
  // before the next replica's, so every replica has the same place in it (the predictor folds them).
  const int stage = prog.ModelStage(c.pp, chunk);
  const int directions = prog.num_directions();
  std::vector<int> group;
  for (int r = 0; r < grid.shape().dp; ++r) {
    for (int d = 0; d < directions; ++d) {
      const ChunkRef holder = prog.HolderOf({d, stage});
      if (index != nullptr && r == c.dp && holder.rank == c.pp && holder.chunk == chunk) {
        *index = static_cast<int>(group.size());
      }
      group.push_back(grid.RankOf({r, holder.rank, c.tp}));
    }
  }
  return group;
}

int ExecutionPlan::num_grad_groups() const {
  const GridShape s = grid.shape();
  const int per = options.program.num_directions() == 1 ? s.pp : options.program.num_model_stages();
  return per * s.tp;
}

int ExecutionPlan::GradGroupId(int rank, int chunk) const {
  const Coord c = grid.CoordOf(rank);
  const int tp = grid.shape().tp;
  if (options.program.num_directions() == 1) return c.pp * tp + c.tp;
  return options.program.ModelStage(c.pp, chunk) * tp + c.tp;
}

std::vector<int> ExecutionPlan::EpGroup(int rank, int* index) const {
  const Coord c = grid.CoordOf(rank);
  const int e = options.ep, first = c.dp / e * e;
  if (index != nullptr) *index = c.dp % e;
  std::vector<int> group;
  for (int q = 0; q < e; ++q) group.push_back(grid.RankOf({first + q, c.pp, c.tp}));
  return group;
}

int ExecutionPlan::num_ep_groups() const {
  const GridShape s = grid.shape();
  return s.dp / options.ep * s.pp * s.tp;
}

int ExecutionPlan::EpGroupId(int rank) const {
  const Coord c = grid.CoordOf(rank);
  const GridShape s = grid.shape();
  return ((c.dp / options.ep) * s.pp + c.pp) * s.tp + c.tp;
}

uint64_t ExecutionPlan::EpRowElements(int width) const {
  return options.ep_row_bytes == 0 ? static_cast<uint64_t>(width) : options.ep_row_bytes / 4;
}

std::vector<int> ExecutionPlan::BucketGroup(int rank, int chunk, const BucketPlan& bucket,
                                            int* index) const {
  if (!bucket.expert) return GradGroup(rank, chunk, index);
  // The expert-data-parallel group: the replicas with this EP rank (the same experts), of every
  // copy of the chunk's model stage (two with two directions: replica by replica, each replica's
  // copies in direction order, as GradGroup).
  const Program& prog = options.program;
  const Coord c = grid.CoordOf(rank);
  const int e = options.ep, per = grid.shape().dp / e;
  const int stage = prog.ModelStage(c.pp, chunk);
  std::vector<int> group;
  for (int g = 0; g < per; ++g) {
    const int replica = g * e + c.dp % e;
    for (int d = 0; d < prog.num_directions(); ++d) {
      const ChunkRef holder = prog.HolderOf({d, stage});
      if (index != nullptr && replica == c.dp && holder.rank == c.pp && holder.chunk == chunk) {
        *index = static_cast<int>(group.size());
      }
      group.push_back(grid.RankOf({replica, holder.rank, c.tp}));
    }
  }
  return group;
}

int ExecutionPlan::BucketGroupId(int rank, int chunk, const BucketPlan& bucket) const {
  if (!bucket.expert) return GradGroupId(rank, chunk);
  const Coord c = grid.CoordOf(rank);
  const int at = options.program.num_directions() == 1 ? c.pp : options.program.ModelStage(c.pp, chunk);
  return num_grad_groups() + (at * grid.shape().tp + c.tp) * options.ep + c.dp % options.ep;
}

int ExecutionPlan::num_bucket_groups() const {
  const GridShape s = grid.shape();
  const int at = options.program.num_directions() == 1 ? s.pp : options.program.num_model_stages();
  return num_grad_groups() + (options.ep > 1 ? at * s.tp * options.ep : 0);
}

std::vector<Nanos> StepDurations(const ChunkPlan& chunk, int pass, Nanos duration) {
  std::vector<Nanos> out;
  StepDurations(chunk, pass, duration, &out);
  return out;
}

void StepDurations(const ChunkPlan& chunk, int pass, Nanos duration, std::vector<Nanos>* durations) {
  const auto& weights = chunk.step_weight[static_cast<size_t>(pass)];
  const uint64_t total = chunk.total_weight[static_cast<size_t>(pass)];
  std::vector<Nanos>& out = *durations;
  out.clear();
  out.reserve(weights.size());
  uint64_t done = 0;
  Nanos prev{0};
  for (size_t i = 0; i < weights.size(); ++i) {
    if (chunk.steps[static_cast<size_t>(pass)][i].kind != PassStep::Kind::kLayer) {
      out.push_back(Nanos(0));
      continue;
    }
    done += weights[i];
    const Nanos end = ShareEnd(duration, done, total);
    out.push_back(end - prev);
    prev = end;
  }
}

namespace {

// The options' own checks (grid, program, costs, reduce_gbps, EP), before anything is built.
absl::Status CheckPlanOptions(const PlanOptions& o) {
  if (o.program.num_ranks != o.grid.pp) {
    return Invalid("program", absl::StrCat("has ", o.program.num_ranks,
                                           " pipeline ranks but grid.pp = ", o.grid.pp));
  }
  if (absl::StatusOr<ValidationReport> r = Validate(o.program); !r.ok()) {
    return Invalid("program", std::string(r.status().message()));
  }
  const int P = o.grid.pp;
  if (o.cost.stages.size() != 1 && static_cast<int>(o.cost.stages.size()) != P) {
    return Invalid("cost", absl::StrCat("has ", o.cost.stages.size(),
                                        " stage entries, expected 1 or pp = ", P));
  }
  const auto check = [](const StageCost& c, const std::string& field) {
    if (c.forward < Nanos(0) || c.backward < Nanos(0) || c.weight_grad < Nanos(0) ||
        c.optimizer < Nanos(0) || c.weight_grad > c.backward) {
      return Invalid(field, "times must be >= 0 and weight_grad <= backward");
    }
    return absl::OkStatus();
  };
  for (int s = 0; s < P; ++s) RP_RETURN_IF_ERROR(check(o.cost.Of(s), absl::StrCat("cost.stages[", s, "]")));
  const int K = o.program.num_model_stages();
  for (const auto& [field, size] : {std::pair{"cost.model_stages", o.cost.model_stages.size()},
                                    std::pair{"cost.stage_stored", o.cost.stage_stored.size()}}) {
    if (size != 0 && size != static_cast<size_t>(K)) {
      return Invalid(field, absl::StrCat("has ", size, " entries, expected one per model stage (", K, ")"));
    }
  }
  for (size_t k = 0; k < o.cost.model_stages.size(); ++k) {
    RP_RETURN_IF_ERROR(check(o.cost.model_stages[k], absl::StrCat("cost.model_stages[", k, "]")));
  }
  if (!(o.reduce_gbps >= 0) || !std::isfinite(o.reduce_gbps)) {
    return Invalid("reduce_gbps", "must be finite and >= 0");
  }
  return CheckEp(o);
}

// Each chunk's last gradient-final op (its last B, W, or F&B whose backward part is that chunk),
// and the rank's bucket order: by that op, or with two directions by model stage (the order every
// member of a mirror group shares: devices k and p - 1 - k hold the same two stages).
void OrderBuckets(const PlanOptions& o, int pp, RankPlan& r) {
  const int V = o.program.num_chunks;
  const std::vector<Op>& ops = o.program.ranks[static_cast<size_t>(pp)];
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    int chunk = -1;
    if (op.kind == OpKind::kBackward || op.kind == OpKind::kWeightGrad) chunk = op.chunk;
    if (op.kind == OpKind::kForwardBackward) chunk = op.backward_chunk;
    if (chunk >= 0) r.chunks[static_cast<size_t>(chunk)].last_grad_op = static_cast<int>(i);
  }
  std::vector<int> chunks(static_cast<size_t>(V));
  for (int ch = 0; ch < V; ++ch) chunks[static_cast<size_t>(ch)] = ch;
  std::sort(chunks.begin(), chunks.end(), [&](int a, int b) {
    return r.chunks[static_cast<size_t>(a)].last_grad_op < r.chunks[static_cast<size_t>(b)].last_grad_op;
  });
  if (o.program.num_directions() > 1) {
    // Mirror groups: in model-stage order (see plan.h "bucket").
    std::sort(chunks.begin(), chunks.end(), [&](int a, int b) {
      return r.chunks[static_cast<size_t>(a)].model_stage < r.chunks[static_cast<size_t>(b)].model_stage;
    });
  }
  for (int ch : chunks) {
    for (size_t b = 0; b < r.chunks[static_cast<size_t>(ch)].buckets.size(); ++b) {
      r.bucket_order.emplace_back(ch, static_cast<int>(b));
    }
  }
}

// Pipeline rank pp's plan: op costs, chunks (layers, sizes, buckets), bucket order.
absl::Status BuildRankPlan(const PlanOptions& o, const ModelPartition& partition, int pp,
                           RankPlan& r) {
  r.optimizer_cost = o.cost.Of(pp).optimizer;
  const std::vector<ModeledSizes> sizes = SizesOf(o.program, pp);
  for (int ch = 0; ch < o.program.num_chunks; ++ch) {
    absl::StatusOr<ChunkPlan> chunk = BuildChunk(o, partition, pp, ch, sizes[static_cast<size_t>(ch)]);
    if (!chunk.ok()) return Invalid("model", std::string(chunk.status().message()));
    // A chunk op costs 1 / (chunks per direction) of the rank's stage cost (a DualPipe chunk is a
    // whole stage of its direction), or its model stage's own cost.
    chunk->op_cost = ChunkOpCosts(o.cost, pp, chunk->model_stage, o.program.chunks_per_direction());
    r.chunks.push_back(*std::move(chunk));
  }
  OrderBuckets(o, pp, r);
  return absl::OkStatus();
}

// The fabric's side of the plan: LP tie ranks (replica-invariant first), link faults by device,
// the ring segment size, and the links checked by building the FabricModel once.
absl::Status PlanFabric(const PlanOptions& o, const ParallelGrid& grid, ExecutionPlan& plan) {
  const int world = grid.world_size();
  plan.num_lps = 2 * world;
  plan.tie_rank.resize(static_cast<size_t>(plan.num_lps));
  for (int rank = 0; rank < world; ++rank) {
    const Coord c = grid.CoordOf(rank);
    for (int stream = 0; stream < 2; ++stream) {
      const uint64_t local = static_cast<uint64_t>((c.pp * o.grid.tp + c.tp) * 2 + stream);
      plan.tie_rank[static_cast<size_t>(2 * rank + stream)] =
          local * static_cast<uint64_t>(o.grid.dp) + static_cast<uint64_t>(c.dp);
    }
  }
  for (const DegradedLink& d : o.faults.degraded_links) {
    if (!grid.IsValidRank(d.src) || !grid.IsValidRank(d.dst)) {
      return Invalid("faults", absl::StrCat("degraded link ", d.src, " -> ", d.dst,
                                            ": ranks out of range"));
    }
    plan.link_faults.push_back(
        {.src = grid.DeviceOf(d.src), .dst = grid.DeviceOf(d.dst), .factor = d.factor});
  }
  for (const OpFault& f : o.faults.op_faults) {
    if (f.kind != OpFaultKind::kSlowLink) continue;
    if (!grid.IsValidRank(f.rank) || !grid.IsValidRank(f.dst)) {
      return Invalid("faults", absl::StrCat("slow link ", f.rank, " -> ", f.dst,
                                            ": ranks out of range"));
    }
    plan.link_faults.push_back({.src = grid.DeviceOf(f.rank), .dst = grid.DeviceOf(f.dst),
                                .factor = f.factor, .from_step = f.step});
  }
  plan.ring_segment_bytes =
      o.segment_bytes == 0 ? size_t{1} << 30 : static_cast<size_t>(o.segment_bytes);
  if (plan.ring_segment_bytes % 4 != 0 || plan.ring_segment_bytes > (size_t{1} << 30)) {
    return Invalid("segment_bytes", "must be 0 (one message per chunk) or a multiple of 4 in [4, 1 GiB]");
  }
  LinkSpec spec = o.links;
  spec.devices_per_node = o.placement.devices_per_node;
  if (absl::StatusOr<FabricModel> m = FabricModel::Create(spec, world, plan.link_faults); !m.ok()) {
    return Invalid("links", std::string(m.status().message()));
  }
  plan.options.links = spec;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ExecutionPlan> BuildPlan(const PlanOptions& o) {
  if (o.grid.dp < 1 || o.grid.pp < 1 || o.grid.tp < 1) {
    return Invalid("grid", "dp, pp and tp must be >= 1");
  }
  absl::StatusOr<ParallelGrid> grid = ParallelGrid::Create(o.grid, o.placement);
  if (!grid.ok()) return Invalid("grid", std::string(grid.status().message()));
  RP_RETURN_IF_ERROR(CheckPlanOptions(o));
  ExecutionPlan plan{.options = o, .grid = *grid, .partition = {}, .ranks = {}, .tie_rank = {},
                     .link_faults = {}};
  plan.v = o.program.num_chunks;
  absl::StatusOr<ModelPartition> part = PartitionMlp(o.model, o.program.num_model_stages(),
                                                     o.grid.tp, o.layers_per_stage, o.ep);
  if (!part.ok()) return Invalid("model", std::string(part.status().message()));
  plan.partition = *std::move(part);
  plan.ranks.resize(static_cast<size_t>(o.grid.pp));
  for (int pp = 0; pp < o.grid.pp; ++pp) {
    RP_RETURN_IF_ERROR(BuildRankPlan(o, plan.partition, pp, plan.ranks[static_cast<size_t>(pp)]));
  }
  RP_RETURN_IF_ERROR(PlanFabric(o, *grid, plan));
  return plan;
}

}  // namespace rp::schedule
