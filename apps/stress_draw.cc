// `ringpipe stress`: the seeded configurations (apps/stress.h).
#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "apps/stress.h"
#include "schedule/generators.h"

namespace rp::apps::stress {
namespace {

using schedule::ScheduleKind;

const comm::Codec kCodecs[] = {comm::Codec::kFp32, comm::Codec::kFp16, comm::Codec::kBf16, comm::Codec::kInt8};

// The schedule and its sizes: every generator's conditions hold (schedule/generators.h).
struct ScheduleDraw {
  ScheduleKind kind = ScheduleKind::kOneFOneB;
  int v = 1;  // chunks per rank
  int m = 1;  // micro-batches
  int model_stages = 1;
  bool fused_fb = true;
};

ScheduleDraw DrawSchedule(Draw& g, int pp) {
  ScheduleDraw d;
  d.kind = g.Pick<ScheduleKind>({ScheduleKind::kGPipe, ScheduleKind::kOneFOneB, ScheduleKind::kInterleaved,
                                 ScheduleKind::kZeroBubbleH1, ScheduleKind::kZeroBubbleH2, ScheduleKind::kZeroBubbleV,
                                 ScheduleKind::kDualPipeV, ScheduleKind::kDualPipe});
  if (d.kind == ScheduleKind::kDualPipe && pp % 2 != 0) d.kind = ScheduleKind::kDualPipeV;  // needs an even pp
  d.m = g.Int(1, 4);
  switch (d.kind) {
    case ScheduleKind::kInterleaved: d.v = 2, d.m = pp * g.Int(1, 2); break;  // Megatron: m % p == 0
    case ScheduleKind::kZeroBubbleH2: d.m = 2 * pp + g.Int(0, 2); break;
    case ScheduleKind::kZeroBubbleV: d.v = 2; break;
    case ScheduleKind::kDualPipeV: d.v = 2, d.m = 2 * pp + g.Int(0, 2); break;
    case ScheduleKind::kDualPipe: d.v = 2, d.m = 2 * pp + 2 * g.Int(0, 1); break;
    default: break;
  }
  d.model_stages = d.kind == ScheduleKind::kDualPipe ? pp : pp * d.v;
  d.fused_fb = g.Chance(0.5);
  return d;
}

// Links, collectives, clock, workload of `o` (the layout and program already set).
void DrawRun(Draw& g, uint64_t seed, int width, int layers, schedule::ExecutorOptions& o) {
  o.model.input_dim = 8;
  o.model.classes = 4;
  o.model.hidden.assign(static_cast<size_t>(layers - 1), width);
  o.model.seed = seed;
  o.dataset.input_dim = 8;
  o.dataset.classes = 4;
  o.dataset.train_size = 512;
  o.dataset.test_size = 32;
  o.dataset.teacher_hidden = 8;
  o.dataset.seed = seed + 1;
  o.microbatch_size = g.Int(1, 4);
  o.optimizer.kind = g.Chance(0.5) ? OptimizerKind::kSgdMomentum : OptimizerKind::kAdam;
  o.optimizer.lr = o.optimizer.kind == OptimizerKind::kAdam ? 1e-3f : 0.05f;
  const double f_ms = g.Real(0.5, 3), b_ms = f_ms * g.Real(1.5, 2.5);
  o.cost = schedule::CostModel::Uniform({.forward = FromMillis(f_ms), .backward = FromMillis(b_ms),
                                         .weight_grad = FromMillis(b_ms / 2), .optimizer = FromMillis(g.Real(0, 0.5))});
  if (!g.Chance(0.3)) {  // else ideal links
    o.links.intra_node = {.alpha = FromMicros(g.Real(1, 20)), .bandwidth_gbps = g.Real(20, 300),
                          .overhead = FromMicros(g.Real(0, 1))};
    o.links.inter_node = {.alpha = FromMicros(g.Real(5, 50)), .bandwidth_gbps = g.Real(5, 50),
                          .overhead = FromMicros(g.Real(0, 5))};
  }
  o.placement.devices_per_node = g.Pick<int>({1, 2, 4, 8});
  o.links.devices_per_node = o.placement.devices_per_node;
  o.links.nics_per_node = g.Pick<int>({0, 0, 1});
  o.codec = g.Pick<comm::Codec>({kCodecs[0], kCodecs[1], kCodecs[2], kCodecs[3]});
  o.segment_bytes = g.Chance(0.3) ? 0 : uint64_t{4} * g.Int(64, 16384);
  o.bucket_bytes = g.Chance(0.3) ? uint64_t{25} << 20 : uint64_t{4} * g.Int(256, 32768);
  o.overlap_grad_allreduce = g.Chance(0.8);
  o.reduce_gbps = g.Pick<double>({0, 0, 10, 100});
  o.virtual_time = g.Chance(0.6);
  o.time_scale = o.virtual_time ? 1.0 : g.Pick<double>({0.01, 0.02, 0.05});
  o.faults.jitter = {.seed = g.Raw(), .max_fraction = g.Pick<double>({0, 0, 0.1, 0.5})};
  o.eval_every = 0;
  o.eval_samples = 32;
  o.run_reference = o.codec == comm::Codec::kFp32;
  o.watchdog_timeout = std::chrono::seconds(20);  // healthy runs: a hang guard (sanitizers are slow)
}

void DrawComm(Draw& g, uint64_t seed, bool comm_empty, Drawn& c) {
  c.comm_ranks = g.Int(1, 8);
  c.comm_count = g.Pick<size_t>({0, 1, 7, 97, static_cast<size_t>(g.Int(2, 5000))});
  if (c.comm_count == 0 && !comm_empty) c.comm_count = 1;
  c.comm_segment_bytes = size_t{4} * g.Int(1, 512);
  c.comm_codec = g.Pick<comm::Codec>({kCodecs[0], kCodecs[1], kCodecs[2], kCodecs[3]});
  Draw h(seed ^ 0x9e3779b97f4a7c15ULL);
  c.comm_inline_bytes = h.Chance(0.5) ? 0 : comm::kDefaultInlineBytes;
  c.comm_max_held = h.Pick<size_t>({0, 1, comm::kDefaultMaxHeldSegments});
}

OpFault DrawFault(Draw& g, int dp, int pp, int tp, int steps, schedule::ExecutorOptions& o) {
  OpFault f;
  std::vector<OpFaultKind> kinds = {OpFaultKind::kThrow, OpFaultKind::kStall};
  if (pp > 1) kinds.push_back(OpFaultKind::kSlowLink);
  f.kind = g.Pick(kinds);
  f.step = g.Int(0, steps - 1);
  if (f.kind == OpFaultKind::kSlowLink) {
    // A pipeline link: (dp, s, tp) → (dp, s + 1, tp).
    const int s = g.Int(0, pp - 2), d = g.Int(0, dp - 1), t = g.Int(0, tp - 1);
    f.rank = (d * pp + s) * tp + t;
    f.dst = (d * pp + s + 1) * tp + t;
    f.factor = g.Pick<double>({2, 10, 100});
  } else {
    f.rank = g.Int(0, dp * pp * tp - 1);
    const int stage = (f.rank / tp) % pp;
    f.op = g.Int(0, static_cast<int>(o.program.ranks[static_cast<size_t>(stage)].size()) - 1);
    o.watchdog_timeout = std::chrono::milliseconds(400);  // the detection bound under test
  }
  return f;
}

// MoE blocks and expert parallelism, in about a third of the configurations whose model has a
// hidden layer between two equal widths (every hidden width is the same): a random set of those
// layers, E 2 or 4, top-1 or -2, drops or not, an auxiliary loss, a skewed router, an EP degree
// dividing both dp and E, an EP wire format. Drawn after everything else, so a seed's other draws
// are those it had before MoE was drawn.
void DrawMoe(Draw& g, int dp, int layers, schedule::ExecutorOptions& o) {
  if (layers < 3 || !g.Chance(0.35)) return;
  MoeConfig& moe = o.model.moe;
  for (int l = 1; l <= layers - 2; ++l) {
    if (g.Chance(0.5)) moe.layers.push_back(l);
  }
  if (moe.layers.empty()) moe.layers.push_back(g.Int(1, layers - 2));
  moe.experts = g.Pick<int>({2, 4});
  moe.top_k = g.Int(1, 2);
  moe.expert_hidden = g.Pick<int>({4, 8, 16});
  moe.capacity_factor = g.Pick<double>({0, 0, 1.0, 1.25});
  moe.aux_loss = g.Pick<double>({0, 0, 0.01});
  moe.router_skew = g.Pick<double>({0, 0, 2});
  std::vector<int> eps;
  for (int e : {1, 2, 4}) {
    if (dp % e == 0 && moe.experts % e == 0) eps.push_back(e);
  }
  o.ep = g.Pick(eps);
  o.ep_codec = g.Pick<comm::Codec>({kCodecs[0], kCodecs[0], kCodecs[1], kCodecs[2], kCodecs[3]});
  // The reference is exact only with exact rows on the wire.
  o.run_reference = o.run_reference && o.ep_codec == comm::Codec::kFp32;
}

std::string MoeSummary(const schedule::ExecutorOptions& o) {
  const MoeConfig& moe = o.model.moe;
  if (!moe.enabled()) return "";
  return absl::StrFormat(", MoE layers %s: E %d top-%d h %d capacity %g aux %g skew %g, ep %d (%s)",
                         absl::StrJoin(moe.layers, ","), moe.experts, moe.top_k, moe.expert_hidden,
                         moe.capacity_factor, moe.aux_loss, moe.router_skew, o.ep, comm::CodecName(o.ep_codec));
}

std::string Summary(const Drawn& c, const ScheduleDraw& sd, int layers) {
  const schedule::ExecutorOptions& o = c.options;
  const bool ideal = o.links.intra_node.bandwidth_gbps == 0;
  std::string fault;
  if (c.fault) {
    fault = absl::StrFormat(", fault %s rank %d step %d %s", OpFaultKindName(c.fault->kind), c.fault->rank,
                            c.fault->step,
                            c.fault->kind == OpFaultKind::kSlowLink ? absl::StrFormat("-> %d x%g", c.fault->dst,
                                                                                      c.fault->factor)
                                                                    : absl::StrCat("op ", c.fault->op));
  }
  return absl::StrFormat(
      "dp %d pp %d tp %d m %d %s%s%s, bucket %d B%s, codec %s, segment %d B, reduce %g GB/s, %s, nics %d, %s, "
      "jitter %.1f, steps %d, mb %d, widths %dx%d%s, comm %d ranks x %d (%s, segment %d B, %s, hold %d)%s",
      o.grid.dp, o.grid.pp, o.grid.tp, sd.m, schedule::ScheduleName(sd.kind), sd.v > 1 ? " v 2" : "",
      sd.kind == schedule::ScheduleKind::kDualPipe || sd.kind == schedule::ScheduleKind::kDualPipeV
          ? (sd.fused_fb ? " fused" : " apart")
          : "",
      o.bucket_bytes, o.overlap_grad_allreduce ? "" : " no overlap", comm::CodecName(o.codec), o.segment_bytes,
      o.reduce_gbps, ideal ? "ideal links" : "alpha-beta-o links", o.links.nics_per_node,
      o.virtual_time ? "virtual clock" : absl::StrCat("time scale ", o.time_scale), o.faults.jitter.max_fraction,
      o.steps, o.microbatch_size, o.model.hidden.empty() ? 0 : o.model.hidden[0], layers - 1, MoeSummary(o),
      c.comm_ranks,
      c.comm_count, comm::CodecName(c.comm_codec), c.comm_segment_bytes,
      c.comm_inline_bytes == 0 ? "lent" : "inline", c.comm_max_held, fault);
}

}  // namespace

absl::StatusOr<Drawn> DrawConfig(uint64_t seed, int fault_every, int max_devices, bool comm_empty) {
  Draw g(seed);
  Drawn c;
  schedule::ExecutorOptions& o = c.options;
  // Layout: world <= max_devices.
  int dp = 1, pp = 1, tp = 1;
  do {
    dp = g.Int(1, 4);
    pp = g.Int(1, 4);
    tp = g.Pick<int>({1, 1, 2, 4});
  } while (dp * pp * tp > max_devices);
  const ScheduleDraw sd = DrawSchedule(g, pp);
  const int steps = g.Int(2, 3);
  const int width = 8 * tp * g.Int(1, 2);
  const int layers = std::max(sd.model_stages, g.Int(2, 4));  // >= model stages
  schedule::PipelineOptions po{.num_ranks = pp, .num_micro_batches = sd.m, .num_chunks = sd.v,
                               .activation_bytes = static_cast<uint64_t>(g.Int(1, 64)) << 10,
                               .tp_allreduce_bytes = tp > 1 ? 4096u : 0u,
                               .gradient_bytes = static_cast<uint64_t>(g.Int(1, 256)) << 10,
                               .fused_fb = sd.fused_fb};
  absl::StatusOr<schedule::Program> prog = schedule::BuildSchedule(sd.kind, po);
  if (!prog.ok()) return prog.status();
  o.grid = {.dp = dp, .pp = pp, .tp = tp};
  o.program = *prog;
  o.steps = steps;
  DrawRun(g, seed, width, layers, o);
  DrawComm(g, seed, comm_empty, c);
  // One fault in `fault_every` configurations (decided by the seed alone, so a replay agrees).
  if (fault_every > 0 && g.Raw() % static_cast<uint64_t>(fault_every) == 0) {
    const OpFault f = DrawFault(g, dp, pp, tp, steps, o);
    o.faults.op_faults.push_back(f);
    c.fault = f;
  }
  DrawMoe(g, dp, layers, o);
  c.summary = Summary(c, sd, layers);
  return c;
}

}  // namespace rp::apps::stress
