// Internals of rp::MoeBlock shared by moe.cc (routing, forward) and moe_backward.cc: the per-key
// state and the row layouts of the exchanges (moe.cc's file comment). Include nowhere else.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/model/moe.h"
#include "runtime/model/tensor.h"

namespace rp {

// Per-key state. Phases (the next call expected): 1 ForwardExperts, 2 EndForward, 3 BeginBackward,
// 4 BackwardExperts, 5 EndBackward, 6 BackwardWeight.
struct MoeBlock::KeyState {
  int phase = 0;
  bool store = false, fused = false;
  int64_t tokens = 0;
  // Token side (the source).
  Tensor x, probs, out, dy, dlogits;
  MoeRouting routing;
  std::vector<double> dgate;  // T·k
  // Expert side (the owner): the forward dispatch's receive counts and, per local expert, its
  // rows in canonical order.
  std::vector<int64_t> from_counts;
  std::vector<Tensor> ex_x, ex_pre, ex_h, ex_dout, ex_dpre;
  // The pending exchange and the buffers its send side points to.
  EpExchange exchange;
  Tensor send;
  std::vector<int64_t> send_counts;
};

namespace moe_internal {

// An exchange with its send side set and an empty receive side.
EpExchange SendSide(EpExchange::Kind kind, int64_t row_width, int bins, std::span<const float> send,
                    std::span<const int64_t> send_counts);

// Row offset of each (peer, bin) block of a peer-major, then bin-major layout (counts.size() + 1
// entries).
std::vector<int64_t> BlockOffsets(std::span<const int64_t> counts);

// The rows of bin (local expert) `b` from every peer of a layout with `bins` bins per peer, in
// canonical (peer, token) order. `offsets` = BlockOffsets of the blocks' row counts, computed once
// for all bins by the caller (per bin it made the gather quadratic in the experts: 4096 experts
// took 16 s to set up).
Tensor GatherExpertRows(std::span<const float> rows, std::span<const int64_t> offsets, int bins,
                        int b, int64_t width);

// The inverse: writes bin `b`'s canonical rows back to their places in `rows`.
void ScatterExpertRows(ConstMatrixView expert_rows, std::span<const int64_t> offsets, int bins,
                       int b, float* rows);

}  // namespace moe_internal
}  // namespace rp
