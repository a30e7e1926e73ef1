#include "schedule/orders.h"

#include <algorithm>
#include <array>
#include <deque>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "runtime/status_macros.h"

namespace rp::schedule {
namespace {

using Order = ComputeOrder;
using Compute = ComputeOp;

// ZB-V as PyTorch's ScheduleZBVZeroBubble, for rank r of p in the V placement (chunk 0: stage r,
// chunk 1: stage 2p − 1 − r). It plans n = max(2p − 1, m) micro-batches and drops those >= m.
std::vector<Compute> ZeroBubbleVRank(int p, int m, int r) {
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
    // 1: nF0.
    for (int i = 0; i < 2 * (n - r - 1); ++i) F(0);
    // 2: nF0F1.
    for (int i = 0; i < r + 1; ++i) {
      F(0);
      F(1);
    }
    // 3: nB1W1F1 (zero bubble: input gradient, then the oldest queued W).
    for (int i = 0; i < n - r - 1; ++i) {
      B(1, true);
      W();
      F(1);
    }
    // 4 (main): nF0B1F1B0; the turning rank does not overlap its first pair.
    for (int i = 0; i < m_ - 2 * n + r + 1; ++i) {
      if (i == 0 && r == n - 1) {
        F(0);
        B(1, false);
      } else {
        FB(0, 1);
      }
      FB(1, 0);
    }
    // 5: nB1F1B0.
    for (int i = 0; i < n - r - 1; ++i) {
      B(1, false);
      FB(1, 0);
    }
    // 6: nB1B0, zero bubble from iteration (r + 1) / 2 on: before B1 on odd r, before B0 on even r.
    bool zb = false;
    for (int i = 0; i < r + 1; ++i) {
      if (i == (r + 1) / 2 && r % 2 == 1) zb = true;
      B(1, zb);
      if (i == (r + 1) / 2 && r % 2 == 0) zb = true;
      B(0, zb);
    }
    // 7: nWB0.
    for (int i = 0; i < n - r - 1; ++i) {
      W();
      B(0, true);
    }
    // 8: nW.
    for (int i = 0; i < r + 1; ++i) W();
    if (!pending_w_.empty() || forward_[0] != m_ || forward_[1] != m_ || backward_[0] != m_ ||
        backward_[1] != m_) {
      return absl::InternalError(absl::StrCat("DualPipe order of rank index ", r, " of ", n,
                                              " is incomplete"));
    }
    return std::move(ord_);
  }

 private:
  Compute Fwd(int phase) {
    return {OpKind::kForward, first_mb_[phase] + forward_[phase]++, chunk_[phase]};
  }
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

Order GPipeOrder(int p, int m) {
  Order order(p);
  for (auto& r : order) {
    for (int j = 0; j < m; ++j) r.push_back({OpKind::kForward, j, 0});
    for (int j = 0; j < m; ++j) r.push_back({OpKind::kBackward, j, 0});
  }
  return order;
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

Order ZeroBubbleH1Order(int p, int m) {
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
  return order;
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

Order InterleavedOrder(int p, int m, int v, int group) {
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
  return order;
}

Order ZeroBubbleVOrder(int p, int m) {
  Order order(p);
  for (int r = 0; r < p; ++r) order[r] = ZeroBubbleVRank(p, m, r);
  return order;
}

absl::StatusOr<Order> DualPipeVOrder(int p, int m, bool fused) {
  Order order(p);
  for (int r = 0; r < p; ++r) {
    DualPipeRank rank(p, r, m, {0, 1}, {0, 0}, fused);
    RP_ASSIGN_OR_RETURN(order[r], rank.Build());
  }
  return order;
}

absl::StatusOr<Order> DualPipeOrder(int p, int m, bool fused) {
  Order order(p);
  for (int r = 0; r < p; ++r) {
    // In the second half of the ranks phase 0 (the nearer entry) is direction 1: chunk = phase ^ 1.
    const int flip = r >= p / 2 ? 1 : 0;
    const std::array<int, 2> chunk{flip, 1 - flip};
    DualPipeRank rank(p / 2, std::min(r, p - 1 - r), m / 2, chunk,
                      {chunk[0] == 0 ? 0 : m / 2, chunk[1] == 0 ? 0 : m / 2}, fused);
    RP_ASSIGN_OR_RETURN(order[r], rank.Build());
  }
  return order;
}

}  // namespace rp::schedule
