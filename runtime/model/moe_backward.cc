// MoeBlock's backward phases (see moe.h; the forward and the layouts are in moe.cc).
#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "runtime/model/moe.h"
#include "runtime/model/moe_internal.h"
#include "runtime/status_macros.h"

namespace rp {

// ---- Backward ----

absl::Status MoeBlock::BeginBackward(int key, ConstMatrixView dy, bool fused) {
  RP_ASSIGN_OR_RETURN(KeyState * stp, Find(key, 3, "BeginBackward"));
  KeyState& st = *stp;
  const int64_t T = st.tokens, k = layout_.top_k, d = layout_.width;
  if (dy.rows != T || dy.cols != d) {
    return absl::InvalidArgumentError(
        absl::StrFormat("MoE layer %d micro-batch %d: output gradient is %dx%d, forward had %dx%d",
                        layer_, key, dy.rows, dy.cols, T, d));
  }
  st.fused = fused;
  // Each kept slot's share of dy goes to its expert: d(o_j) = g_j·dy; dg_j = dy · o_j.
  st.send = Tensor(st.out.rows(), d);
  st.dgate.assign(static_cast<size_t>(T * k), 0.0);
  for (int64_t t = 0; t < T; ++t) {
    const float* dyt = dy.data + t * d;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t pos = st.routing.position[static_cast<size_t>(t * k + j)];
      if (pos < 0) continue;
      const float g = st.routing.gate[static_cast<size_t>(t * k + j)];
      const float* o = st.out.data() + pos * d;
      float* dst = st.send.data() + pos * d;
      double dot = 0;
      for (int64_t c = 0; c < d; ++c) {
        dst[c] = g * dyt[c];
        dot += static_cast<double>(dyt[c]) * static_cast<double>(o[c]);
      }
      st.dgate[static_cast<size_t>(t * k + j)] = dot;
    }
  }
  Free(&st.out);
  Keep(&st.dy, Tensor(T, d, std::vector<float>(dy.data, dy.data + dy.size())));
  st.exchange = moe_internal::SendSide(EpExchange::Kind::kDispatch, d, layout_.local_experts(),
                                       st.send.span(), st.routing.kept);
  st.phase = 4;
  return absl::OkStatus();
}

absl::Status MoeBlock::AccumulateExpertGrads(int local, KeyState& st) {
  const size_t b = static_cast<size_t>(local);
  const int64_t d = layout_.width, h = layout_.hidden;
  float* g = expert_grad(local);
  RP_RETURN_IF_ERROR(
      MatMulTransposedAAccumulate(st.ex_h[b], st.ex_dout[b], MatrixView{g + d * h + h, h, d}));
  RP_RETURN_IF_ERROR(AccumulateBiasGrad(st.ex_dout[b], std::span<float>(g + d * h + h + h * d, d)));
  RP_RETURN_IF_ERROR(MatMulTransposedAAccumulate(st.ex_x[b], st.ex_dpre[b], MatrixView{g, d, h}));
  RP_RETURN_IF_ERROR(AccumulateBiasGrad(st.ex_dpre[b], std::span<float>(g + d * h, h)));
  for (Tensor* t : {&st.ex_x[b], &st.ex_h[b], &st.ex_dout[b], &st.ex_dpre[b]}) Free(t);
  return absl::OkStatus();
}

absl::Status MoeBlock::BackwardExperts(int key) {
  RP_ASSIGN_OR_RETURN(KeyState * stp, Find(key, 4, "BackwardExperts"));
  KeyState& st = *stp;
  RP_RETURN_IF_ERROR(CheckRecv(st, "BackwardExperts"));
  EpExchange& ex = st.exchange;
  if (ex.recv_counts != st.from_counts) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "BackwardExperts: MoE layer %d (ep rank %d) micro-batch %d: the backward dispatch brought "
        "other counts than the forward one",
        layer_, layout_.ep_rank, key));
  }
  const int B = layout_.local_experts();
  const int64_t d = layout_.width, h = layout_.hidden;
  st.send = Tensor(static_cast<int64_t>(ex.recv.size()) / d, d);  // dx where dy arrived
  st.ex_dout.resize(static_cast<size_t>(B));
  st.ex_dpre.resize(static_cast<size_t>(B));
  const std::vector<int64_t> offsets = moe_internal::BlockOffsets(ex.recv_counts);
  for (int b = 0; b < B; ++b) {
    const size_t ub = static_cast<size_t>(b);
    Tensor dout = moe_internal::GatherExpertRows(ex.recv, offsets, B, b, d);
    const int64_t rows = dout.rows();
    const float* w = expert(b);
    Tensor dh(rows, h), dx(rows, d);
    RP_RETURN_IF_ERROR(
        MatMulTransposedB(dout, ConstMatrixView(w + d * h + h, h, d), dh, &scratch_));
    RP_RETURN_IF_ERROR(ActivationBackward(activation_, st.ex_pre[ub], dh, dh));
    Free(&st.ex_pre[ub]);
    RP_RETURN_IF_ERROR(MatMulTransposedB(dh, ConstMatrixView(w, d, h), dx, &scratch_));
    Keep(&st.ex_dout[ub], std::move(dout));
    Keep(&st.ex_dpre[ub], std::move(dh));
    if (st.fused) RP_RETURN_IF_ERROR(AccumulateExpertGrads(b, st));
    moe_internal::ScatterExpertRows(dx, offsets, B, b, st.send.data());
  }
  ex = moe_internal::SendSide(EpExchange::Kind::kCombine, d, 1, st.send.span(), st.send_counts);
  st.phase = 5;
  return absl::OkStatus();
}

absl::StatusOr<Tensor> MoeBlock::EndBackward(int key) {
  RP_ASSIGN_OR_RETURN(KeyState * stp, Find(key, 5, "EndBackward"));
  KeyState& st = *stp;
  RP_RETURN_IF_ERROR(CheckCombine(st, "EndBackward"));
  const int64_t T = st.tokens, k = layout_.top_k, d = layout_.width, E = layout_.experts;
  const std::vector<float> dxe = std::move(st.exchange.recv);
  // dL/dp: the gates' gradients plus the auxiliary loss's α·E·f_i·weight / T (f_i from the
  // choices before drops); then the softmax backward dz_i = p_i (dp_i − Σ_m p_m dp_m).
  std::vector<double> aux(static_cast<size_t>(E), 0.0);
  if (aux_loss_ > 0) {
    for (int64_t i = 0; i < E; ++i) {
      aux[static_cast<size_t>(i)] =
          aux_loss_ * static_cast<double>(E) *
          (static_cast<double>(st.routing.chosen[static_cast<size_t>(i)]) /
           static_cast<double>(k * T)) *
          aux_weight_ / static_cast<double>(T);
    }
  }
  Tensor dz(T, E);
  std::vector<double> dp(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    std::copy(aux.begin(), aux.end(), dp.begin());
    for (int64_t j = 0; j < k; ++j) {
      const size_t tj = static_cast<size_t>(t * k + j);
      if (st.routing.position[tj] >= 0)
        dp[static_cast<size_t>(st.routing.expert[tj])] += st.dgate[tj];
    }
    const float* p = st.probs.data() + t * E;
    double mean = 0;
    for (int64_t i = 0; i < E; ++i) mean += static_cast<double>(p[i]) * dp[static_cast<size_t>(i)];
    for (int64_t i = 0; i < E; ++i) {
      dz.at(t, i) =
          static_cast<float>(static_cast<double>(p[i]) * (dp[static_cast<size_t>(i)] - mean));
    }
  }
  // dx = ((dy + dz·Wrᵀ) + dx_0) + dx_1 over kept slots.
  Tensor dx = std::move(st.dy), router_dx(T, d);
  activation_bytes_ -= dx.bytes();
  RP_RETURN_IF_ERROR(MatMulTransposedB(dz, ConstMatrixView(router(), d, E), router_dx, &scratch_));
  RP_RETURN_IF_ERROR(Accumulate(dx.span(), router_dx.span()));
  for (int64_t t = 0; t < T; ++t) {
    float* dxt = dx.data() + t * d;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t pos = st.routing.position[static_cast<size_t>(t * k + j)];
      if (pos < 0) continue;
      const float* src = dxe.data() + pos * d;
      for (int64_t c = 0; c < d; ++c) dxt[c] += src[c];
    }
  }
  Free(&st.probs);
  st.exchange = EpExchange{};
  st.send = Tensor();
  if (st.fused) {
    RP_RETURN_IF_ERROR(MatMulTransposedAAccumulate(st.x, dz, MatrixView{grads_.data(), d, E}));
    Release(key);
    return dx;
  }
  Keep(&st.dlogits, std::move(dz));
  st.phase = 6;
  return dx;
}

absl::Status MoeBlock::BackwardWeight(int key) {
  RP_ASSIGN_OR_RETURN(KeyState * stp, Find(key, 6, "BackwardWeight"));
  KeyState& st = *stp;
  for (int b = 0; b < layout_.local_experts(); ++b) {
    RP_RETURN_IF_ERROR(AccumulateExpertGrads(b, st));
  }
  RP_RETURN_IF_ERROR(MatMulTransposedAAccumulate(
      st.x, st.dlogits, MatrixView{grads_.data(), layout_.width, layout_.experts}));
  Release(key);
  return absl::OkStatus();
}

}  // namespace rp
