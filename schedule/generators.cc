#include "schedule/generators.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace rp::schedule {
namespace {

// A compute op before wiring: kind, micro-batch, chunk.
struct Compute {
  OpKind kind;
  int mb;
  int chunk;
};
using Order = std::vector<std::vector<Compute>>;  // per pipeline rank

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

// Elements [0, n) split into `parts` contiguous parts, the first n % parts one longer.
uint64_t PartSize(uint64_t n, uint64_t parts, uint64_t i) { return n / parts + (i < n % parts ? 1 : 0); }

// Adds sends, receives, TP all-reduces, gradient buckets and the optimizer step around the compute
// order.
Program Wire(ScheduleKind kind, const PipelineOptions& o, int v, bool split, const Order& order) {
  Program prog;
  prog.kind = kind;
  prog.num_ranks = o.num_ranks;
  prog.num_chunks = v;
  prog.num_micro_batches = o.num_micro_batches;
  prog.split_backward = split;
  prog.ranks.resize(o.num_ranks);
  const int p = o.num_ranks;
  const int K = p * v;
  const uint64_t grad_elems = o.gradient_bytes / 4;
  for (int s = 0; s < p; ++s) {
    std::vector<Op>& ops = prog.ranks[s];
    ops.reserve(order[s].size() * 3 + 8);
    // The index in order[s] of each chunk's last backward (the op after which its gradients are final).
    std::vector<int> last_grad(v, -1);
    const OpKind grad_kind = split ? OpKind::kWeightGrad : OpKind::kBackward;
    for (int i = 0; i < static_cast<int>(order[s].size()); ++i) {
      if (order[s][i].kind == grad_kind) last_grad[order[s][i].chunk] = i;
    }
    int bucket = 0;
    auto add_buckets = [&](int chunk) {
      const uint64_t chunk_elems = PartSize(grad_elems, v, chunk);
      for (int b = 0; b < o.buckets_per_chunk; ++b) {
        Op ar{.kind = OpKind::kAllReduce, .micro_batch = -1, .chunk = chunk, .peer = -1,
              .bucket = bucket++, .bytes = 4 * PartSize(chunk_elems, o.buckets_per_chunk, b)};
        ops.push_back(ar);
      }
    };
    for (int i = 0; i < static_cast<int>(order[s].size()); ++i) {
      const Compute& c = order[s][i];
      const int k = c.chunk * p + s;
      const int prev_rank = (k - 1 + p) % p;  // rank of model stage k−1
      const int next_rank = (k + 1) % p;      // rank of model stage k+1
      const bool has_prev = k > 0 && prev_rank != s;
      const bool has_next = k < K - 1 && next_rank != s;
      Op op{.kind = c.kind, .micro_batch = c.mb, .chunk = c.chunk};
      auto tp = [&] {
        if (o.tp_allreduce_bytes > 0) {
          ops.push_back(Op{.kind = OpKind::kTpAllReduce, .micro_batch = c.mb, .chunk = c.chunk,
                           .bytes = o.tp_allreduce_bytes});
        }
      };
      switch (c.kind) {
        case OpKind::kForward:
          if (has_prev) {
            ops.push_back(Op{.kind = OpKind::kRecvAct, .micro_batch = c.mb, .chunk = c.chunk,
                             .peer = prev_rank, .bytes = o.activation_bytes});
          }
          ops.push_back(op);
          tp();
          if (has_next) {
            ops.push_back(Op{.kind = OpKind::kSendAct, .micro_batch = c.mb, .chunk = c.chunk,
                             .peer = next_rank, .bytes = o.activation_bytes});
          }
          break;
        case OpKind::kBackward:
        case OpKind::kBackwardInput:
          if (has_next) {
            ops.push_back(Op{.kind = OpKind::kRecvGrad, .micro_batch = c.mb, .chunk = c.chunk,
                             .peer = next_rank, .bytes = o.activation_bytes});
          }
          ops.push_back(op);
          tp();
          if (has_prev) {
            ops.push_back(Op{.kind = OpKind::kSendGrad, .micro_batch = c.mb, .chunk = c.chunk,
                             .peer = prev_rank, .bytes = o.activation_bytes});
          }
          break;
        default:
          ops.push_back(op);
          break;
      }
      if (grad_elems > 0 && o.overlap_grad_allreduce && last_grad[c.chunk] == i) add_buckets(c.chunk);
    }
    if (grad_elems > 0 && !o.overlap_grad_allreduce) {
      for (int c = v - 1; c >= 0; --c) add_buckets(c);
    }
    ops.push_back(Op{.kind = OpKind::kOptimizerStep});
  }
  return prog;
}

Order OneFOneBOrder(int p, int m, OpKind backward) {
  Order order(p);
  for (int s = 0; s < p; ++s) {
    const int warmup = std::min(p - s - 1, m);
    auto& o = order[s];
    for (int j = 0; j < warmup; ++j) o.push_back({OpKind::kForward, j, 0});
    for (int i = 0; i < m - warmup; ++i) {
      o.push_back({OpKind::kForward, warmup + i, 0});
      o.push_back({backward, i, 0});
    }
    for (int j = m - warmup; j < m; ++j) o.push_back({backward, j, 0});
  }
  return order;
}

}  // namespace

absl::StatusOr<Program> BuildGPipe(const PipelineOptions& o) {
  if (auto st = CheckCommon(o, "BuildGPipe"); !st.ok()) return st;
  Order order(o.num_ranks);
  for (auto& r : order) {
    for (int j = 0; j < o.num_micro_batches; ++j) r.push_back({OpKind::kForward, j, 0});
    for (int j = 0; j < o.num_micro_batches; ++j) r.push_back({OpKind::kBackward, j, 0});
  }
  return Wire(ScheduleKind::kGPipe, o, 1, false, order);
}

absl::StatusOr<Program> BuildOneFOneB(const PipelineOptions& o) {
  if (auto st = CheckCommon(o, "BuildOneFOneB"); !st.ok()) return st;
  return Wire(ScheduleKind::kOneFOneB, o, 1, false,
              OneFOneBOrder(o.num_ranks, o.num_micro_batches, OpKind::kBackward));
}

absl::StatusOr<Program> BuildInterleaved(const PipelineOptions& o) {
  if (auto st = CheckCommon(o, "BuildInterleaved"); !st.ok()) return st;
  const int p = o.num_ranks, m = o.num_micro_batches, v = o.num_chunks;
  if (m % p != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BuildInterleaved: num_micro_batches (m=", m, ") must be a multiple of num_ranks (p=", p,
        "): micro-batches pass through the ", v, " chunks in groups of p"));
  }
  // Megatron-LM's order: the k-th forward of a rank is micro-batch (k / (p·v))·p + k % p of chunk
  // (k / p) % v; the k-th backward the same micro-batch of chunk v − 1 − (k / p) % v.
  const int total = m * v;
  auto mb_of = [&](int k) { return (k / (p * v)) * p + k % p; };
  Order order(p);
  for (int s = 0; s < p; ++s) {
    int warmup = m == p ? total : std::min(total, (p - s - 1) * 2 + (v - 1) * p);
    auto& ord = order[s];
    auto fwd = [&](int k) { ord.push_back({OpKind::kForward, mb_of(k), (k / p) % v}); };
    auto bwd = [&](int k) { ord.push_back({OpKind::kBackward, mb_of(k), v - 1 - (k / p) % v}); };
    for (int k = 0; k < warmup; ++k) fwd(k);
    for (int k = 0; k < total - warmup; ++k) {
      fwd(warmup + k);
      bwd(k);
    }
    for (int k = total - warmup; k < total; ++k) bwd(k);
  }
  return Wire(ScheduleKind::kInterleaved, o, v, false, order);
}

absl::StatusOr<Program> BuildZeroBubble(const PipelineOptions& o) {
  if (auto st = CheckCommon(o, "BuildZeroBubble"); !st.ok()) return st;
  const int p = o.num_ranks, m = o.num_micro_batches;
  // ZB-H1: 1F1B's order of F and B (B = input gradient only); rank s defers its weight gradients by s
  // micro-batches — W(k − s) right after B(k) — and runs the last min(s + 1, m) W's after its last B.
  // The last rank thus runs F B F B ... while the gradient chain goes up the pipeline without waiting
  // for any W, and the deferred W's fill the drain (Qi et al., 2023, Fig. 3).
  Order order = OneFOneBOrder(p, m, OpKind::kBackwardInput);
  for (int s = 0; s < p; ++s) {
    std::vector<Compute> with_w;
    int next_w = 0;
    for (const Compute& c : order[s]) {
      with_w.push_back(c);
      if (c.kind == OpKind::kBackwardInput && c.mb - s >= 0) {
        with_w.push_back({OpKind::kWeightGrad, next_w++, 0});
      }
    }
    while (next_w < m) with_w.push_back({OpKind::kWeightGrad, next_w++, 0});
    order[s] = std::move(with_w);
  }
  return Wire(ScheduleKind::kZeroBubbleH1, o, 1, true, order);
}

absl::StatusOr<Program> BuildSchedule(ScheduleKind kind, const PipelineOptions& o) {
  switch (kind) {
    case ScheduleKind::kGPipe: return BuildGPipe(o);
    case ScheduleKind::kOneFOneB: return BuildOneFOneB(o);
    case ScheduleKind::kInterleaved: return BuildInterleaved(o);
    case ScheduleKind::kZeroBubbleH1: return BuildZeroBubble(o);
    case ScheduleKind::kCustom: break;
  }
  return absl::InvalidArgumentError("BuildSchedule: no generator for a custom schedule");
}

}  // namespace rp::schedule
