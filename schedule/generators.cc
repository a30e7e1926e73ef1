#include "schedule/generators.h"

#include <algorithm>
#include <array>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "runtime/status_macros.h"

namespace rp::schedule {
namespace {

// A compute op before wiring: kind, micro-batch, chunk (kForwardBackward: of the forward part, and the
// backward part's micro-batch and chunk).
struct Compute {
  OpKind kind;
  int mb;
  int chunk;
  int backward_mb = -1;
  int backward_chunk = -1;
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
Program Wire(ScheduleKind kind, const PipelineOptions& o, StagePlacement placement, bool split,
             const Order& order) {
  Program prog;
  prog.kind = kind;
  prog.num_ranks = o.num_ranks;
  prog.num_chunks = placement.num_chunks();
  prog.num_micro_batches = o.num_micro_batches;
  prog.split_backward = split;
  prog.placement = std::move(placement);
  prog.ranks.resize(o.num_ranks);
  const int p = o.num_ranks, v = prog.num_chunks;
  const uint64_t grad_elems = o.gradient_bytes / 4;
  for (int s = 0; s < p; ++s) {
    std::vector<Op>& ops = prog.ranks[s];
    ops.reserve(order[s].size() * 3 + 8);
    // The index in order[s] of each chunk's last gradient-finalizing op.
    std::vector<int> last_grad(v, -1);
    for (int i = 0; i < static_cast<int>(order[s].size()); ++i) {
      if (const int c = GradientChunk(order[s][i]); c >= 0) last_grad[c] = i;
    }
    int bucket = 0;
    auto add_buckets = [&](int chunk) {
      const uint64_t chunk_elems = PartSize(grad_elems, v, chunk);
      for (int b = 0; b < o.buckets_per_chunk; ++b) {
        ops.push_back(Op{.kind = OpKind::kAllReduce, .micro_batch = -1, .chunk = chunk, .peer = -1,
                         .bucket = bucket++,
                         .bytes = 4 * PartSize(chunk_elems, o.buckets_per_chunk, b)});
      }
    };
    // A message of `kind` for (mb, chunk) to or from the holder `other`, unless it is this rank.
    auto message = [&](OpKind msg_kind, int mb, int chunk, const std::optional<ChunkRef>& other) {
      if (other.has_value() && other->rank != s) {
        ops.push_back(Op{.kind = msg_kind, .micro_batch = mb, .chunk = chunk, .peer = other->rank,
                         .bytes = o.activation_bytes});
      }
    };
    auto recv_act = [&](int mb, int c) { message(OpKind::kRecvAct, mb, c, prog.PrevHolder(s, c)); };
    auto send_act = [&](int mb, int c) { message(OpKind::kSendAct, mb, c, prog.NextHolder(s, c)); };
    auto recv_grad = [&](int mb, int c) { message(OpKind::kRecvGrad, mb, c, prog.NextHolder(s, c)); };
    auto send_grad = [&](int mb, int c) { message(OpKind::kSendGrad, mb, c, prog.PrevHolder(s, c)); };
    auto tp = [&](int mb, int c) {
      if (o.tp_allreduce_bytes > 0) {
        ops.push_back(Op{.kind = OpKind::kTpAllReduce, .micro_batch = mb, .chunk = c,
                         .bytes = o.tp_allreduce_bytes});
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
          tp(c.mb, c.chunk);
          send_act(c.mb, c.chunk);
          break;
        case OpKind::kBackward:
        case OpKind::kBackwardInput:
          recv_grad(c.mb, c.chunk);
          ops.push_back(op);
          tp(c.mb, c.chunk);
          send_grad(c.mb, c.chunk);
          break;
        case OpKind::kForwardBackward:
          recv_act(c.mb, c.chunk);
          recv_grad(c.backward_mb, c.backward_chunk);
          ops.push_back(op);
          tp(c.mb, c.chunk);
          tp(c.backward_mb, c.backward_chunk);
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
    return absl::InvalidArgumentError(absl::StrCat(
        "BuildInterleaved: microbatch_group (N=", n, ") must be in [p, m] = [", p, ", ", m,
        "] (Megatron: num_micro_batches (m=", m, ") must be >= p", o.microbatch_group == 0 ? "" : " and >= N",
        ")"));
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

// ZB-H1/H2 as sail-sg's get_hand_schedule: rank r runs (p − 1 − r)·c warm-up forwards, then for each
// micro-batch i an F (while any is left), Bi(i), and the oldest pending W once (p − 1)·c ops have warmed
// up; then the remaining W's. c = 2 gives ZB-H2 (needs m >= 2(p − 1)).
Order HandZeroBubbleOrder(int p, int m, int c) {
  Order order(p);
  for (int r = 0; r < p; ++r) {
    auto& ord = order[r];
    const int warm = (p - 1 - r) * c;
    int f = 0, w = 0;
    for (int j = 0; j < warm; ++j) ord.push_back({OpKind::kForward, f++, 0});
    for (int i = 0; i < m; ++i) {
      if (warm + i < m) ord.push_back({OpKind::kForward, f++, 0});
      ord.push_back({OpKind::kBackwardInput, i, 0});
      if (warm + i >= (p - 1) * c) ord.push_back({OpKind::kWeightGrad, w++, 0});
    }
    while (w < m) ord.push_back({OpKind::kWeightGrad, w++, 0});
  }
  return order;
}

}  // namespace

namespace {

// ZB-V as PyTorch's ScheduleZBVZeroBubble, for rank r of p in the V placement (chunk 0: stage r,
// chunk 1: stage 2p − 1 − r). It plans n = max(2p − 1, m) micro-batches and drops those >= m.
std::vector<Compute> ZeroBubbleVOrder(int p, int m, int r) {
  const int n = std::max(2 * p - 1, m);
  std::vector<Compute> ord;
  auto emit = [&](OpKind kind, int chunk, int mb) {
    if (mb < m) ord.push_back({kind, mb, chunk});
  };
  int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
  for (int i = 0; i < 2 * (p - r) - 1; ++i) emit(OpKind::kForward, 0, f0++);
  for (int i = 0; i < r; ++i) {
    emit(OpKind::kForward, 1, f1++);
    emit(OpKind::kForward, 0, f0++);
  }
  for (int i = 0; i < p - r; ++i) {
    emit(OpKind::kForward, 1, f1++);
    emit(OpKind::kBackwardInput, 1, b1);
    emit(OpKind::kWeightGrad, 1, b1++);
  }
  while (f1 < f0 || f0 < n) {
    if (f0 < n) emit(OpKind::kForward, 0, f0++);
    emit(OpKind::kBackwardInput, 0, b0);
    emit(OpKind::kWeightGrad, 0, b0++);
    emit(OpKind::kForward, 1, f1++);
    emit(OpKind::kBackwardInput, 1, b1);
    emit(OpKind::kWeightGrad, 1, b1++);
  }
  int w0 = b0, w1 = b1;
  for (int i = 0; i < r; ++i) {
    emit(OpKind::kBackwardInput, 0, b0++);
    emit(OpKind::kBackwardInput, 1, b1++);
  }
  for (int i = 0; i < p - r; ++i) {
    emit(OpKind::kBackwardInput, 0, b0++);
    emit(OpKind::kWeightGrad, 0, w0++);
  }
  while (w1 < b1) emit(OpKind::kWeightGrad, 1, w1++);
  while (w0 < b0) emit(OpKind::kWeightGrad, 0, w0++);
  return ord;
}

// One rank of DeepSeek's DualPipe family (dualpipe/dualpipev.py, dualpipe/dualpipe.py). The steps are
// written for a V of `n` ranks, this one at index `r`, each of its two phases running `m` micro-batches:
// DualPipeV uses (p, r, m); DualPipe (p/2, min(r, p − 1 − r), m/2). Phase 0 is the chunk nearer the
// entry of its micro-batches, phase 1 the other; `chunk_of_phase` and `first_mb` map them to the
// program's chunks and micro-batch ids.
class DualPipeRank {
 public:
  DualPipeRank(int n, int r, int m, std::array<int, 2> chunk_of_phase, std::array<int, 2> first_mb,
               bool fused)
      : n_(n), r_(r), m_(m), chunk_(chunk_of_phase), first_mb_(first_mb), fused_(fused) {}

  absl::StatusOr<std::vector<Compute>> Build() {
    const int n = n_, r = r_;
    for (int i = 0; i < 2 * (n - r - 1); ++i) F(0);                 // 1: nF0
    for (int i = 0; i < r + 1; ++i) {                               // 2: nF0F1
      F(0);
      F(1);
    }
    for (int i = 0; i < n - r - 1; ++i) {                           // 3: nB1W1F1 (zero bubble)
      B(1, true);
      W();
      F(1);
    }
    for (int i = 0; i < m_ - 2 * n + r + 1; ++i) {                  // 4: nF0B1F1B0 (main)
      if (i == 0 && r == n - 1) {
        F(0);  // the turning rank does not overlap its first pair
        B(1, false);
      } else {
        FB(0, 1);
      }
      FB(1, 0);
    }
    for (int i = 0; i < n - r - 1; ++i) {                           // 5: nB1F1B0
      B(1, false);
      FB(1, 0);
    }
    bool zb = false;                                                 // 6: nB1B0, the second half
    for (int i = 0; i < r + 1; ++i) {                                //    split (zero bubble)
      if (i == (r + 1) / 2 && r % 2 == 1) zb = true;
      B(1, zb);
      if (i == (r + 1) / 2 && r % 2 == 0) zb = true;
      B(0, zb);
    }
    for (int i = 0; i < n - r - 1; ++i) {                           // 7: nWB0
      W();
      B(0, true);
    }
    for (int i = 0; i < r + 1; ++i) W();                            // 8: nW
    if (!pending_w_.empty() || forward_[0] != m_ || forward_[1] != m_ || backward_[0] != m_ ||
        backward_[1] != m_) {
      return absl::InternalError(absl::StrCat("DualPipe order of rank index ", r, " of ", n,
                                              " is incomplete"));
    }
    return std::move(ord_);
  }

 private:
  Compute Fwd(int phase) { return {OpKind::kForward, first_mb_[phase] + forward_[phase]++, chunk_[phase]}; }
  void F(int phase) { ord_.push_back(Fwd(phase)); }
  // The backward of `phase`'s next micro-batch; zero bubble: its input gradient, the W queued.
  void B(int phase, bool zero_bubble) {
    const int mb = first_mb_[phase] + backward_[phase]++;
    if (zero_bubble) pending_w_.push_back({OpKind::kWeightGrad, mb, chunk_[phase]});
    ord_.push_back({zero_bubble ? OpKind::kBackwardInput : OpKind::kBackward, mb, chunk_[phase]});
  }
  void W() {  // the oldest queued weight gradient (DeepSeek's WeightGradStore is FIFO)
    if (pending_w_.empty()) return;
    ord_.push_back(pending_w_.front());
    pending_w_.pop_front();
  }
  // The overlapped pair F(forward_phase) & B(backward_phase), fused or as two ops.
  void FB(int forward_phase, int backward_phase) {
    if (!fused_) {
      F(forward_phase);
      B(backward_phase, false);
      return;
    }
    Compute c = Fwd(forward_phase);
    c.kind = OpKind::kForwardBackward;
    c.backward_mb = first_mb_[backward_phase] + backward_[backward_phase]++;
    c.backward_chunk = chunk_[backward_phase];
    ord_.push_back(c);
  }

  const int n_, r_, m_;
  const std::array<int, 2> chunk_, first_mb_;
  const bool fused_;
  std::array<int, 2> forward_{0, 0}, backward_{0, 0};
  std::deque<Compute> pending_w_;
  std::vector<Compute> ord_;
};

}  // namespace

absl::StatusOr<Program> BuildGPipe(const PipelineOptions& o) {
  RP_RETURN_IF_ERROR(CheckCommon(o, "BuildGPipe"));
  Order order(o.num_ranks);
  for (auto& r : order) {
    for (int j = 0; j < o.num_micro_batches; ++j) r.push_back({OpKind::kForward, j, 0});
    for (int j = 0; j < o.num_micro_batches; ++j) r.push_back({OpKind::kBackward, j, 0});
  }
  return Wire(ScheduleKind::kGPipe, o, StagePlacement::Loop(o.num_ranks, 1), false, order);
}

absl::StatusOr<Program> BuildOneFOneB(const PipelineOptions& o) {
  RP_RETURN_IF_ERROR(CheckCommon(o, "BuildOneFOneB"));
  return Wire(ScheduleKind::kOneFOneB, o, StagePlacement::Loop(o.num_ranks, 1), false,
              OneFOneBOrder(o.num_ranks, o.num_micro_batches, OpKind::kBackward));
}

absl::StatusOr<Program> BuildInterleaved(const PipelineOptions& o) {
  RP_RETURN_IF_ERROR(CheckCommon(o, "BuildInterleaved"));
  RP_ASSIGN_OR_RETURN(const int group, InterleavedGroup(o));
  const int p = o.num_ranks, m = o.num_micro_batches, v = o.num_chunks;
  // Megatron-LM's forward table: per group of `group` micro-batches (the last may be shorter), every
  // chunk in order, the group's micro-batches in order within a chunk. The k-th backward takes the
  // k-th entry with its chunk mirrored (c → v − 1 − c).
  std::vector<Compute> table;
  for (int first = 0; first < m; first += group) {
    const int end = std::min(first + group, m);
    for (int c = 0; c < v; ++c) {
      for (int mb = first; mb < end; ++mb) table.push_back({OpKind::kForward, mb, c});
    }
  }
  const int total = m * v;
  Order order(p);
  for (int s = 0; s < p; ++s) {
    const int warmup = std::min(total, 2 * (p - s - 1) + (v - 1) * group);
    auto& ord = order[s];
    auto fwd = [&](int k) { ord.push_back(table[k]); };
    auto bwd = [&](int k) { ord.push_back({OpKind::kBackward, table[k].mb, v - 1 - table[k].chunk}); };
    for (int k = 0; k < warmup; ++k) fwd(k);
    for (int k = 0; k < total - warmup; ++k) {
      fwd(warmup + k);
      bwd(k);
    }
    for (int k = total - warmup; k < total; ++k) bwd(k);
  }
  return Wire(ScheduleKind::kInterleaved, o, StagePlacement::Loop(p, v), false, order);
}

absl::StatusOr<Program> BuildZeroBubble(const PipelineOptions& o) {
  RP_RETURN_IF_ERROR(CheckCommon(o, "BuildZeroBubble"));
  const int p = o.num_ranks, m = o.num_micro_batches;
  // ZB-H1: 1F1B's order of F and B (B = input gradient only); rank s defers its weight gradients by s
  // micro-batches — W(k − s) right after B(k) — and runs the last min(s + 1, m) W's after its last B.
  // The last rank thus runs F B F B ... while the gradient chain goes up the pipeline without waiting
  // for any W, and the deferred W's fill the drain (Qi et al., 2023, Fig. 3). For m >= p this is
  // sail-sg's get_hand_schedule with one warm-up forward per rank distance; it also serves m < p.
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
  return Wire(ScheduleKind::kZeroBubbleH1, o, StagePlacement::Loop(p, 1), true, order);
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
  Order order(o.num_ranks);
  for (int r = 0; r < o.num_ranks; ++r) order[r] = ZeroBubbleVOrder(o.num_ranks, o.num_micro_batches, r);
  return Wire(ScheduleKind::kZeroBubbleV, o, StagePlacement::V(o.num_ranks), true, order);
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
  Order order(p);
  for (int r = 0; r < p; ++r) {
    DualPipeRank rank(p, r, m, {0, 1}, {0, 0}, o.fused_fb);
    RP_ASSIGN_OR_RETURN(order[r], rank.Build());
  }
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
  Order order(p);
  for (int r = 0; r < p; ++r) {
    // In the second half of the ranks phase 0 (the nearer entry) is direction 1: chunk = phase ^ 1.
    const int flip = r >= p / 2 ? 1 : 0;
    const std::array<int, 2> chunk{flip, 1 - flip};
    DualPipeRank rank(p / 2, std::min(r, p - 1 - r), m / 2, chunk,
                      {chunk[0] == 0 ? 0 : m / 2, chunk[1] == 0 ? 0 : m / 2}, o.fused_fb);
    RP_ASSIGN_OR_RETURN(order[r], rank.Build());
  }
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
