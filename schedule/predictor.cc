#include "schedule/predictor.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/status_macros.h"
#include "schedule/predictor_sim.h"
#include "schedule/validator.h"

namespace rp::schedule {
namespace {

absl::Status CheckFactors(const ExecutionPlan& plan, const PredictOptions& opts) {
  if (opts.compute_factor.empty()) return absl::OkStatus();
  if (static_cast<int>(opts.compute_factor.size()) != plan.grid.world_size()) {
    return absl::InvalidArgumentError(absl::StrCat("Predict: compute_factor has ",
                                                   opts.compute_factor.size(),
                                                   " entries, expected the world size ",
                                                   plan.grid.world_size()));
  }
  for (size_t r = 0; r < opts.compute_factor.size(); ++r) {
    if (!(opts.compute_factor[r] >= 1.0) || !std::isfinite(opts.compute_factor[r])) {
      return absl::InvalidArgumentError(
          absl::StrCat("Predict: compute_factor of rank ", r, " must be a finite number >= 1"));
    }
  }
  return absl::OkStatus();
}

// Whether a routing repeats every `period` replicas: replica d's kept slots are replica d mod
// period's, in every block, micro-batch and expert (balanced routing does; a run's seldom).
bool RoutingRepeats(const StepRouting& r, int period) {
  const size_t row = static_cast<size_t>(r.microbatches) * static_cast<size_t>(r.experts);
  const size_t replica_rows = static_cast<size_t>(r.dp) * row;
  for (size_t b = 0; b < static_cast<size_t>(r.blocks); ++b) {
    const int64_t* block = r.kept.data() + b * replica_rows;
    for (size_t d = static_cast<size_t>(period); d < static_cast<size_t>(r.dp); ++d) {
      if (!std::equal(block + d * row, block + (d + 1) * row,
                      block + (d % static_cast<size_t>(period)) * row)) {
        return false;
      }
    }
  }
  return true;
}

struct Fold {
  FoldBlocker blocker = FoldBlocker::kNone;
  int period = 0;  // replicas played when it folds: 1, ep with EP exchanges, or a multiple
};

// Whether a NIC carries devices of two replicas.
bool ReplicasShareANic(const ExecutionPlan& plan) {
  const ParallelGrid& g = plan.grid;
  const LinkSpec& links = plan.options.links;
  const int nics = links.nics_per_node == 0 ? links.devices_per_node : links.nics_per_node;
  std::vector<int> replica_of_nic;  // by NIC index; -1: no device seen on it yet
  for (int r = 0; r < g.world_size(); ++r) {
    const int dev = g.DeviceOf(r);
    const size_t nic = static_cast<size_t>((dev / links.devices_per_node) * nics +
                                           (dev % links.devices_per_node) * nics / links.devices_per_node);
    if (nic >= replica_of_nic.size()) replica_of_nic.resize(std::max(nic + 1, 2 * replica_of_nic.size()), -1);
    int& replica = replica_of_nic[nic];
    const int dp = g.CoordOf(r).dp;
    if (replica >= 0 && replica != dp) return true;
    replica = dp;
  }
  return false;
}

// Whether the DP replicas fold (see "Replica folding"): every replica has the timeline of replica
// d mod period — period a multiple of ep with EP exchanges, whose all-to-alls couple an EP group's
// replicas — when the layout repeats every `period` replicas (the link class of every hop a rank's
// messages take is that of the same hop `period` replicas back, no NIC carries two replicas; with two
// directions the gradient rings' hops from a replica's mirror copy too), and so do the factors and
// the routing. Else the first reason found.
Fold FoldOf(const ExecutionPlan& plan, const PredictOptions& opts) {
  const ParallelGrid& g = plan.grid;
  const GridShape s = g.shape();
  if (s.dp == 1) return {FoldBlocker::kOneReplica};
  if (!opts.fold_replicas) return {FoldBlocker::kDisabled};
  if (opts.compute_op_factor) return {FoldBlocker::kPerOpFactors};
  if (!plan.link_faults.empty()) return {FoldBlocker::kLinkFaults};
  const bool ep = plan.has_ep_exchanges();
  const bool two_directions = plan.options.program.num_directions() > 1;
  const int e = ep ? plan.ep() : 1;  // the period is a multiple of the EP group
  // One EP group of every replica: nothing repeats. A run's routing: its own replica by replica.
  if (ep && (e == s.dp || (opts.routing != nullptr && !RoutingRepeats(*opts.routing, e)))) {
    return {FoldBlocker::kExpertParallel};
  }
  auto at = [&](int dp, int pp, int tp) { return g.RankOf({dp, pp, tp}); };
  if (!opts.compute_factor.empty()) {
    for (int r = 0; r < g.world_size(); ++r) {
      const Coord c = g.CoordOf(r);
      if (opts.compute_factor[static_cast<size_t>(r)] !=
          opts.compute_factor[static_cast<size_t>(at(0, c.pp, c.tp))]) {
        return {FoldBlocker::kStraggler};
      }
    }
  }
  if (ReplicasShareANic(plan)) return {FoldBlocker::kLayout};  // it couples them
  // Every rank's node, once: a check compares about 2·(1 + pp + tp + ep) link classes a rank
  // (ParallelGrid::ClassOf's, from these nodes), 27 M of them for 2^20 devices without EP.
  std::vector<int> node(static_cast<size_t>(g.world_size()));
  for (int r = 0; r < g.world_size(); ++r) node[static_cast<size_t>(r)] = g.NodeOf(r);
  auto class_of = [&node](int a, int b) {
    if (a == b) return LinkClass::kSelf;
    return node[static_cast<size_t>(a)] == node[static_cast<size_t>(b)] ? LinkClass::kIntraNode
                                                                          : LinkClass::kInterNode;
  };
  // Whether every replica's hops have the link classes of its stand-in's, replica dp mod period.
  auto repeats = [&](int period) {
    for (int pp = 0; pp < s.pp; ++pp) {
      for (int tp = 0; tp < s.tp; ++tp) {
        for (int dp = period; dp < s.dp; ++dp) {
          const int d0 = dp % period;
          const int r = at(dp, pp, tp), r0 = at(d0, pp, tp);
          // The DP ring's hop to the next replica, and with EP the expert ring's to the next group.
          if (class_of(r, at((dp + 1) % s.dp, pp, tp)) != class_of(r0, at((d0 + 1) % s.dp, pp, tp))) return false;
          if (ep && class_of(r, at((dp + e) % s.dp, pp, tp)) != class_of(r0, at((d0 + e) % s.dp, pp, tp))) {
            return false;
          }
          for (int q = 0; q < s.pp; ++q) {
            if (class_of(r, at(dp, q, tp)) != class_of(r0, at(d0, q, tp))) return false;
            // Two directions: a gradient ring goes from a replica's mirror copy (another pipeline
            // rank) to the next replica, or the next EP group.
            if (!two_directions) continue;
            if (class_of(r, at((dp + 1) % s.dp, q, tp)) != class_of(r0, at((d0 + 1) % s.dp, q, tp)) ||
                (ep && class_of(r, at((dp + e) % s.dp, q, tp)) != class_of(r0, at((d0 + e) % s.dp, q, tp)))) {
              return false;
            }
          }
          for (int t = 0; t < s.tp; ++t) {
            if (class_of(r, at(dp, pp, t)) != class_of(r0, at(d0, pp, t))) return false;
          }
          for (int q = 0; ep && q < e; ++q) {  // the EP group
            if (class_of(r, at(dp - dp % e + q, pp, tp)) != class_of(r0, at(d0 - d0 % e + q, pp, tp))) return false;
          }
        }
      }
    }
    return true;
  };
  // The period the layout repeats with: one replica or one EP group, else as many replicas (or EP
  // groups) as it takes the nodes to repeat — consecutive replicas lie `stride` devices apart, so the
  // node pattern repeats every devices_per_node / gcd(devices_per_node, stride) replicas (nodes of 8
  // holding two replicas of 4 devices: 2). At most two full checks, whatever dp's divisors.
  if (repeats(e)) return {FoldBlocker::kNone, e};
  const int dpn = plan.options.placement.devices_per_node;
  const int stride = std::abs(g.DeviceOf(at(1, 0, 0)) - g.DeviceOf(at(0, 0, 0)));
  const int node_period = dpn / std::gcd(dpn, std::max(1, stride));
  const int period = std::lcm(e, node_period);
  if (period > e && period < s.dp && s.dp % period == 0 && repeats(period)) return {FoldBlocker::kNone, period};
  return {FoldBlocker::kLayout};
}

}  // namespace

bool ReplicasFold(const ExecutionPlan& plan, const PredictOptions& opts) {
  return FoldOf(plan, opts).blocker == FoldBlocker::kNone;
}

FoldBlocker ReplicasFoldBlocker(const ExecutionPlan& plan, const PredictOptions& opts) {
  return FoldOf(plan, opts).blocker;
}

const char* FoldBlockerText(FoldBlocker blocker) {
  switch (blocker) {
    case FoldBlocker::kNone: return "";
    case FoldBlocker::kOneReplica: return "there is one replica";
    case FoldBlocker::kDisabled: return "folding is off";
    case FoldBlocker::kPerOpFactors: return "seeded jitter gives every op of every replica its own factor";
    case FoldBlocker::kLinkFaults: return "a slow link slows one replica's messages only";
    case FoldBlocker::kExpertParallel:
      return "the EP all-to-alls couple the replicas (one EP group of all of them, or a routing that differs "
             "between EP groups)";
    case FoldBlocker::kStraggler: return "a straggler slows one replica only";
    case FoldBlocker::kLayout: return "the replicas sit on nodes or NICs out of step with one another";
  }
  return "";
}

int ReplicasPlayed(const ExecutionPlan& plan, const PredictOptions& opts) {
  return ReplicaFold(plan, opts).replicas_played;
}

ReplicaFoldResult ReplicaFold(const ExecutionPlan& plan, const PredictOptions& opts) {
  const Fold f = FoldOf(plan, opts);
  return {.blocker = f.blocker,
          .replicas_played = f.blocker == FoldBlocker::kNone ? f.period : plan.grid.shape().dp};
}

absl::StatusOr<Prediction> Predict(const ExecutionPlan& plan, const PredictOptions& opts) {
  RP_RETURN_IF_ERROR(CheckFactors(plan, opts));
  const GridShape shape = plan.grid.shape();
  const int world = plan.grid.world_size();
  // Replicas 0 .. played − 1 are simulated; replica d's timeline is replica d mod played's.
  const Fold f = FoldOf(plan, opts);  // once: its layout check reads every rank
  const int played = f.blocker == FoldBlocker::kNone ? f.period : shape.dp;
  const bool fold = played < shape.dp;
  std::vector<int> ranks;
  for (int r = 0; r < world; ++r) {
    if (plan.grid.CoordOf(r).dp < played) ranks.push_back(r);
  }
  internal::Simulation sim(plan, opts, ranks, fold ? played : 0);
  RP_RETURN_IF_ERROR(sim.Run());

  Prediction pred;
  pred.tp = shape.tp;
  pred.folded = fold;
  pred.replicas_played = played;
  pred.fold_blocker = f.blocker;
  pred.balanced_routing_assumed = sim.balanced_routing_assumed();
  pred.longest_transit = sim.transits().longest_transit();
  pred.transit_bound = sim.transits().transit_bound();
  if (const FabricMessage& m = sim.transits().longest_message(); m.src >= 0) {
    pred.longest_transit_src = plan.grid.RankAtDevice(m.src);
    pred.longest_transit_dst = plan.grid.RankAtDevice(m.dst);
  }
  pred.class_of_replica.resize(static_cast<size_t>(shape.dp));
  for (int d = 0; d < shape.dp; ++d) pred.class_of_replica[static_cast<size_t>(d)] = d % played;
  pred.timelines.assign(static_cast<size_t>(played),
                        std::vector<std::vector<OpInterval>>(static_cast<size_t>(shape.pp * shape.tp)));
  std::vector<int> sim_of_rank(static_cast<size_t>(world), -1);
  for (size_t i = 0; i < ranks.size(); ++i) {
    const Coord c = plan.grid.CoordOf(ranks[i]);
    pred.timelines[static_cast<size_t>(c.dp)][static_cast<size_t>(c.pp * shape.tp + c.tp)] =
        sim.TakeIntervals(static_cast<int>(i));  // moved: a full play's copy was a tenth of its mallocs
    pred.step_time = std::max(pred.step_time, sim.end(static_cast<int>(i)));
    sim_of_rank[static_cast<size_t>(ranks[i])] = static_cast<int>(i);
  }
  RP_ASSIGN_OR_RETURN(const ValidationReport report,
                      Validate(plan.options.program, {.stage_stored = plan.options.cost.stage_stored}));
  pred.devices.resize(static_cast<size_t>(world));
  pred.modeled_wire_bytes.resize(static_cast<size_t>(world));
  pred.peak_in_flight.resize(static_cast<size_t>(world));
  pred.peak_activation_bytes.resize(static_cast<size_t>(world));
  std::vector<DeviceMetrics> metrics_of_sim(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) {
    const Coord c = plan.grid.CoordOf(ranks[i]);
    metrics_of_sim[i] = ComputeDeviceMetrics(
        pred.timelines[static_cast<size_t>(c.dp)][static_cast<size_t>(c.pp * shape.tp + c.tp)],
        pred.step_time, Timeline::kEmulated);
  }
  for (int r = 0; r < world; ++r) {
    const Coord c = plan.grid.CoordOf(r);
    const int rep = plan.grid.RankOf({c.dp % played, c.pp, c.tp});
    const size_t i = static_cast<size_t>(sim_of_rank[static_cast<size_t>(rep)]);
    pred.devices[static_cast<size_t>(r)] = metrics_of_sim[i];
    pred.modeled_wire_bytes[static_cast<size_t>(r)] = sim.modeled_bytes(static_cast<int>(i));
    const int peak = report.peak_in_flight[static_cast<size_t>(c.pp)];
    pred.peak_in_flight[static_cast<size_t>(r)] = peak;
    // Stage by stage where the model's stages have their own sizes; else the rank's mean per chunk.
    pred.peak_activation_bytes[static_cast<size_t>(r)] =
        !report.peak_stored_bytes.empty()
            ? report.peak_stored_bytes[static_cast<size_t>(c.pp)]
            : static_cast<uint64_t>(peak) * (plan.options.cost.Of(c.pp).activation_bytes /
                                             static_cast<uint64_t>(plan.options.program.chunks_per_direction()));
  }
  const PipelineFigures pf = ComputePipelineFigures(pred.devices);
  pred.makespan = pf.makespan;
  pred.max_span = pf.max_span;
  pred.makespan_bubble = pf.makespan_bubble;
  pred.span_bubble = pf.span_bubble;
  RP_ASSIGN_OR_RETURN(pred.single_device_time,
                      SingleDeviceTime(plan.options.program, shape, plan.options.cost));
  const Scaling sc = ComputeScaling(pred.single_device_time, pred.step_time, world);
  pred.speedup = sc.speedup;
  pred.efficiency = sc.efficiency;
  return pred;
}

}  // namespace rp::schedule
