#include "schedule/generators.h"

#include <numeric>

#include <algorithm>
#include <array>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "runtime/status_macros.h"
#include "schedule/orders.h"

namespace rp::schedule {
namespace {

using Order = ComputeOrder;
using Compute = ComputeOp;

absl::Status CheckCommon(const PipelineOptions& o, const char* who) {
  if (o.num_ranks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": num_ranks (p) must be >= 1, got ", o.num_ranks));
  }
  if (o.num_micro_batches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": num_micro_batches (m) must be >= 1, got ", o.num_micro_batches));
  }
  if (o.num_chunks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": num_chunks (v) must be >= 1, got ", o.num_chunks));
  }
  if (o.gradient_bytes % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": gradient_bytes must be a multiple of 4 (fp32 gradients), got ", o.gradient_bytes));
  }
  for (uint64_t g : o.stage_gradient_bytes) {
    if (g % 4 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          who, ": stage_gradient_bytes must be multiples of 4 (fp32 gradients), got ", g));
    }
  }
  if (o.buckets_per_chunk < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": buckets_per_chunk must be >= 1, got ", o.buckets_per_chunk));
  }
  const int64_t ops = int64_t{o.num_micro_batches} * o.num_chunks;
  if (ops > (int64_t{1} << 24) || o.num_ranks > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": program too large (p=", o.num_ranks,
                                                   ", m·v=", ops, ")"));
  }
  return absl::OkStatus();
}

// The chunk count a schedule needs: InvalidArgument naming num_chunks otherwise.
absl::Status NeedChunks(const PipelineOptions& o, const char* who, int chunks, const char* why) {
  if (o.num_chunks == chunks) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(who, ": num_chunks (v) must be ", chunks, " (", why,
                                                 "), got ", o.num_chunks));
}

// Elements [0, n) split into `parts` contiguous parts, the first n % parts one longer.
uint64_t PartSize(uint64_t n, uint64_t parts, uint64_t i) { return n / parts + (i < n % parts ? 1 : 0); }

// The chunk whose weight gradients of one micro-batch `c` finalizes (B, W, or F&B's backward), or −1.
int GradientChunk(const Compute& c) {
  switch (c.kind) {
    case OpKind::kBackward:
    case OpKind::kWeightGrad: return c.chunk;
    case OpKind::kForwardBackward: return c.backward_chunk;
    default: return -1;
  }
}

// Adds sends, receives, TP all-reduces, gradient buckets and the optimizer step around the compute
// order. A hand-off to a chunk of the same rank needs no message.
// The index in `ops` (a rank's compute order) of each of its v chunks' last gradient-finalizing op.
std::vector<int> LastGradientOps(const std::vector<Compute>& ops, int v) {
  std::vector<int> last(static_cast<size_t>(v), -1);
  for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
    if (const int c = GradientChunk(ops[static_cast<size_t>(i)]); c >= 0) last[static_cast<size_t>(c)] = i;
  }
  return last;
}

// Rank s's op list: its compute ops in `order`, each with the messages, TP all-reduces and (once a
// chunk's gradients are final) DP buckets around it, then the optimizer step.
// `grad_elems`: the gradient elements of a replica (all stages).
void WireRank(const PipelineOptions& o, Program& prog, const Order& order, int s, uint64_t grad_elems) {
  const int v = prog.num_chunks;
  const bool per_stage = !o.stage_gradient_bytes.empty();
  const auto stage = [&](int chunk) { return static_cast<size_t>(prog.ModelStage(s, chunk)); };
  // The message between model stages k and k + 1, one micro-batch.
  const auto boundary = [&](int k) {
    return o.stage_activation_bytes.empty() ? o.activation_bytes : o.stage_activation_bytes[static_cast<size_t>(k)];
  };
  std::vector<Op>& ops = prog.ranks[s];
  ops.reserve(order[s].size() * 3 + 8);
  const std::vector<int> last_grad = LastGradientOps(order[s], v);
  int bucket = 0;
  auto add_buckets = [&](int chunk) {
    const uint64_t chunk_elems =
        per_stage ? o.stage_gradient_bytes[stage(chunk)] / 4 : PartSize(grad_elems, v, chunk);
    for (int b = 0; b < o.buckets_per_chunk; ++b) {
      ops.push_back(Op{.kind = OpKind::kAllReduce, .micro_batch = -1, .chunk = chunk, .peer = -1,
                       .bucket = bucket++,
                       .bytes = 4 * PartSize(chunk_elems, o.buckets_per_chunk, b)});
    }
  };
  // A message of `kind` for (mb, chunk) to or from the holder `other`, unless it is this rank.
  // The message's boundary: after this chunk's stage (activations out, gradients in) or before
  // it (activations in, gradients out).
  auto message = [&](OpKind msg_kind, int mb, int chunk, const std::optional<ChunkRef>& other) {
    if (other.has_value() && other->rank != s) {
      const int k = prog.ModelStage(s, chunk);
      const bool after = msg_kind == OpKind::kSendAct || msg_kind == OpKind::kRecvGrad;
      ops.push_back(Op{.kind = msg_kind, .micro_batch = mb, .chunk = chunk, .peer = other->rank,
                       .bytes = boundary(after ? k : k - 1)});
    }
  };
  auto recv_act = [&](int mb, int c) { message(OpKind::kRecvAct, mb, c, prog.PrevHolder(s, c)); };
  auto send_act = [&](int mb, int c) { message(OpKind::kSendAct, mb, c, prog.NextHolder(s, c)); };
  auto recv_grad = [&](int mb, int c) { message(OpKind::kRecvGrad, mb, c, prog.NextHolder(s, c)); };
  auto send_grad = [&](int mb, int c) { message(OpKind::kSendGrad, mb, c, prog.PrevHolder(s, c)); };
  auto tp = [&](int mb, int c, int pass) {  // pass 0: after an F, 1: after a B(-input)
    const uint64_t bytes = o.stage_tp_bytes.empty() ? o.tp_allreduce_bytes
                                                     : o.stage_tp_bytes[stage(c)][static_cast<size_t>(pass)];
    if (o.tp_allreduce_bytes > 0 || !o.stage_tp_bytes.empty()) {
      ops.push_back(Op{.kind = OpKind::kTpAllReduce, .micro_batch = mb, .chunk = c, .bytes = bytes});
    }
  };
  for (int i = 0; i < static_cast<int>(order[s].size()); ++i) {
    const Compute& c = order[s][i];
    const Op op{.kind = c.kind, .micro_batch = c.mb, .chunk = c.chunk,
                .backward_micro_batch = c.backward_mb, .backward_chunk = c.backward_chunk};
    switch (c.kind) {
      case OpKind::kForward:
        recv_act(c.mb, c.chunk);
        ops.push_back(op);
        tp(c.mb, c.chunk, 0);
        send_act(c.mb, c.chunk);
        break;
      case OpKind::kBackward:
      case OpKind::kBackwardInput:
        recv_grad(c.mb, c.chunk);
        ops.push_back(op);
        tp(c.mb, c.chunk, 1);
        send_grad(c.mb, c.chunk);
        break;
      case OpKind::kForwardBackward:
        recv_act(c.mb, c.chunk);
        recv_grad(c.backward_mb, c.backward_chunk);
        ops.push_back(op);
        tp(c.mb, c.chunk, 0);
        tp(c.backward_mb, c.backward_chunk, 1);
        send_act(c.mb, c.chunk);
        send_grad(c.backward_mb, c.backward_chunk);
        break;
      default:
        ops.push_back(op);
        break;
    }
    if (grad_elems > 0 && o.overlap_grad_allreduce) {
      if (const int g = GradientChunk(c); g >= 0 && last_grad[g] == i) add_buckets(g);
    }
  }
  if (grad_elems > 0 && !o.overlap_grad_allreduce) {
    for (int c = v - 1; c >= 0; --c) add_buckets(c);
  }
  ops.push_back(Op{.kind = OpKind::kOptimizerStep});
}

absl::StatusOr<Program> Wire(ScheduleKind kind, const PipelineOptions& o, StagePlacement placement, bool split,
                             const Order& order) {
  const size_t stages = static_cast<size_t>(placement.stages_per_direction());
  for (const auto& [name, size] : {std::pair{"stage_activation_bytes", o.stage_activation_bytes.size()},
                                   std::pair{"stage_tp_bytes", o.stage_tp_bytes.size()},
                                   std::pair{"stage_gradient_bytes", o.stage_gradient_bytes.size()}}) {
    if (size != 0 && size != stages) {
      return absl::InvalidArgumentError(absl::StrCat(ScheduleName(kind), ": ", name, " has ", size,
                                                     " entries, not one per model stage (", stages, ")"));
    }
  }
  Program prog;
  prog.kind = kind;
  prog.num_ranks = o.num_ranks;
  prog.num_chunks = placement.num_chunks();
  prog.num_micro_batches = o.num_micro_batches;
  prog.split_backward = split;
  prog.placement = std::move(placement);
  prog.ranks.resize(o.num_ranks);
  const uint64_t grad_elems =
      o.stage_gradient_bytes.empty()
          ? o.gradient_bytes / 4
          : std::accumulate(o.stage_gradient_bytes.begin(), o.stage_gradient_bytes.end(), uint64_t{0}) / 4;
  for (int s = 0; s < o.num_ranks; ++s) WireRank(o, prog, order, s, grad_elems);
  return prog;
}

// Megatron's group size N for BuildInterleaved, checked (see PipelineOptions).
absl::StatusOr<int> InterleavedGroup(const PipelineOptions& o) {
  const int p = o.num_ranks, m = o.num_micro_batches;
  if (o.pytorch_rounds) {
    if (o.microbatch_group != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "BuildInterleaved: microbatch_group (N=", o.microbatch_group,
          ") must be 0 with pytorch_rounds (PyTorch derives N = m / max(1, m / p))"));
    }
    return PyTorchMicrobatchGroup(p, m);
  }
  const int n = o.microbatch_group == 0 ? p : o.microbatch_group;
  if (n < p || n > m) {
    return absl::InvalidArgumentError(
        absl::StrCat("BuildInterleaved: microbatch_group (N=", n, ") must be in [p, m] = [", p, ", ",
                     m, "] (Megatron: num_micro_batches (m=", m, ") must be >= p",
                     o.microbatch_group == 0 ? "" : " and >= N", ")"));
  }
  const int rest = m % n;
  if (rest != 0 && rest < p) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BuildInterleaved: num_micro_batches (m=", m, ") mod microbatch_group (N=", n, ") is ", rest,
        "; it must be 0 or at least num_ranks (p=", p, "): a last group shorter than p stalls the ",
        "pipeline (Megatron); with N = p, m must be a multiple of num_ranks (p=", p, ")"));
  }
  return n;
}

}  // namespace

absl::StatusOr<Program> BuildGPipe(const PipelineOptions& o) {
  RP_RETURN_IF_ERROR(CheckCommon(o, "BuildGPipe"));
  RP_RETURN_IF_ERROR(NeedChunks(o, "BuildGPipe", 1, "one stage per rank"));
  return Wire(ScheduleKind::kGPipe, o, StagePlacement::Loop(o.num_ranks, 1), false,
              GPipeOrder(o.num_ranks, o.num_micro_batches));
}

absl::StatusOr<Program> BuildOneFOneB(const PipelineOptions& o) {
  RP_RETURN_IF_ERROR(CheckCommon(o, "BuildOneFOneB"));
  RP_RETURN_IF_ERROR(NeedChunks(o, "BuildOneFOneB", 1, "one stage per rank"));
  return Wire(ScheduleKind::kOneFOneB, o, StagePlacement::Loop(o.num_ranks, 1), false,
              OneFOneBOrder(o.num_ranks, o.num_micro_batches, OpKind::kBackward));
}

absl::StatusOr<Program> BuildInterleaved(const PipelineOptions& o) {
  RP_RETURN_IF_ERROR(CheckCommon(o, "BuildInterleaved"));
  RP_ASSIGN_OR_RETURN(const int group, InterleavedGroup(o));
  return Wire(ScheduleKind::kInterleaved, o, StagePlacement::Loop(o.num_ranks, o.num_chunks), false,
              InterleavedOrder(o.num_ranks, o.num_micro_batches, o.num_chunks, group));
}

absl::StatusOr<Program> BuildZeroBubble(const PipelineOptions& o) {
  RP_RETURN_IF_ERROR(CheckCommon(o, "BuildZeroBubble"));
  RP_RETURN_IF_ERROR(NeedChunks(o, "BuildZeroBubble", 1, "one stage per rank"));
  return Wire(ScheduleKind::kZeroBubbleH1, o, StagePlacement::Loop(o.num_ranks, 1), true,
              ZeroBubbleH1Order(o.num_ranks, o.num_micro_batches));
}

absl::StatusOr<Program> BuildZeroBubbleH2(const PipelineOptions& o) {
  RP_RETURN_IF_ERROR(CheckCommon(o, "BuildZeroBubbleH2"));
  RP_RETURN_IF_ERROR(NeedChunks(o, "BuildZeroBubbleH2", 1, "one stage per rank"));
  const int p = o.num_ranks, m = o.num_micro_batches;
  if (m < 2 * p) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BuildZeroBubbleH2: num_micro_batches (m=", m, ") must be >= 2 x num_ranks (2p=", 2 * p,
        "): rank 0 warms up with 2(p - 1) forwards (sail-sg get_hand_schedule asserts m >= 2p)"));
  }
  return Wire(ScheduleKind::kZeroBubbleH2, o, StagePlacement::Loop(p, 1), true,
              HandZeroBubbleOrder(p, m, 2));
}

absl::StatusOr<Program> BuildZeroBubbleV(const PipelineOptions& o) {
  RP_RETURN_IF_ERROR(CheckCommon(o, "BuildZeroBubbleV"));
  RP_RETURN_IF_ERROR(NeedChunks(o, "BuildZeroBubbleV", 2, "two stages per rank in a V"));
  return Wire(ScheduleKind::kZeroBubbleV, o, StagePlacement::V(o.num_ranks), true,
              ZeroBubbleVOrder(o.num_ranks, o.num_micro_batches));
}

absl::StatusOr<Program> BuildDualPipeV(const PipelineOptions& o) {
  RP_RETURN_IF_ERROR(CheckCommon(o, "BuildDualPipeV"));
  RP_RETURN_IF_ERROR(NeedChunks(o, "BuildDualPipeV", 2, "two stages per rank in a V"));
  const int p = o.num_ranks, m = o.num_micro_batches;
  if (m < 2 * p) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BuildDualPipeV: num_micro_batches (m=", m, ") must be >= 2 x num_ranks (2p=", 2 * p,
        "), as DeepSeek's DualPipeV asserts"));
  }
  RP_ASSIGN_OR_RETURN(const Order order, DualPipeVOrder(p, m, o.fused_fb));
  return Wire(ScheduleKind::kDualPipeV, o, StagePlacement::V(p), true, order);
}

absl::StatusOr<Program> BuildDualPipe(const PipelineOptions& o) {
  RP_RETURN_IF_ERROR(CheckCommon(o, "BuildDualPipe"));
  RP_RETURN_IF_ERROR(NeedChunks(o, "BuildDualPipe", 2, "one stage per direction on every rank"));
  const int p = o.num_ranks, m = o.num_micro_batches;
  if (p % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BuildDualPipe: num_ranks (p=", p, ") must be even (the two directions meet in the middle)"));
  }
  if (m % 2 != 0 || m < 2 * p) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BuildDualPipe: num_micro_batches (m=", m, ") must be even and >= 2 x num_ranks (2p=", 2 * p,
        "), as DeepSeek's DualPipe asserts (half of them flow each way)"));
  }
  RP_ASSIGN_OR_RETURN(const Order order, DualPipeOrder(p, m, o.fused_fb));
  return Wire(ScheduleKind::kDualPipe, o, StagePlacement::Bidirectional(p), true, order);
}

absl::StatusOr<Program> BuildSchedule(ScheduleKind kind, const PipelineOptions& o) {
  switch (kind) {
    case ScheduleKind::kGPipe: return BuildGPipe(o);
    case ScheduleKind::kOneFOneB: return BuildOneFOneB(o);
    case ScheduleKind::kInterleaved: return BuildInterleaved(o);
    case ScheduleKind::kZeroBubbleH1: return BuildZeroBubble(o);
    case ScheduleKind::kZeroBubbleH2: return BuildZeroBubbleH2(o);
    case ScheduleKind::kZeroBubbleV: return BuildZeroBubbleV(o);
    case ScheduleKind::kDualPipeV: return BuildDualPipeV(o);
    case ScheduleKind::kDualPipe: return BuildDualPipe(o);
    case ScheduleKind::kCustom: break;
  }
  return absl::InvalidArgumentError("BuildSchedule: no generator for a custom schedule");
}

absl::StatusOr<int> PyTorchMicrobatchGroup(int num_ranks, int num_micro_batches) {
  if (num_ranks < 1 || num_micro_batches < 1) {
    return absl::InvalidArgumentError(absl::StrCat("PyTorchMicrobatchGroup: num_ranks (p=", num_ranks,
                                                   ") and num_micro_batches (m=", num_micro_batches,
                                                   ") must be >= 1"));
  }
  const int rounds = std::max(1, num_micro_batches / num_ranks);
  if (num_micro_batches % rounds != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BuildInterleaved: num_micro_batches (m=", num_micro_batches,
        ") must be a multiple of the number of rounds max(1, m / p) = ", rounds,
        " (PyTorch ScheduleInterleaved1F1B)"));
  }
  return num_micro_batches / rounds;
}

}  // namespace rp::schedule
