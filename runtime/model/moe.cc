// MoeBlock: see moe.h for the math, the words and the reduction-order contract.
//
// Layouts. The dispatch send buffer holds the kept (token, slot)s ordered by (expert, token):
// since EP rank p owns a contiguous range of experts this is destination-major, and a (token,
// slot)'s row index there is its `position`. The owner receives source-major, then local expert,
// then token; it gathers each local expert's rows in canonical (source, token) order, runs the
// expert, and writes the outputs back at the positions they arrived at, so the combine's send
// layout is the dispatch's receive layout and every source gets its rows back where it sent them.
#include "runtime/model/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <utility>

#include "absl/strings/str_format.h"
#include "runtime/model/init.h"
#include "runtime/model/moe_internal.h"
#include "runtime/status_macros.h"

namespace rp {

namespace {
void CopyRow(const float* src, int64_t width, float* dst) {
  std::memcpy(dst, src, static_cast<size_t>(width) * sizeof(float));
}
}  // namespace

namespace moe_internal {

std::vector<int64_t> BlockOffsets(std::span<const int64_t> counts) {
  std::vector<int64_t> offsets(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i) offsets[i + 1] = offsets[i] + counts[i];
  return offsets;
}

Tensor GatherExpertRows(std::span<const float> rows, std::span<const int64_t> offsets, int bins,
                        int b, int64_t width) {
  const size_t blocks = offsets.size() - 1;
  int64_t total = 0;
  for (size_t blk = static_cast<size_t>(b); blk < blocks; blk += bins) total += offsets[blk + 1] - offsets[blk];
  Tensor out(total, width);
  int64_t r = 0;
  for (size_t blk = static_cast<size_t>(b); blk < blocks; blk += bins) {
    for (int64_t i = offsets[blk]; i < offsets[blk + 1]; ++i) {
      CopyRow(rows.data() + i * width, width, out.data() + r++ * width);
    }
  }
  return out;
}

void ScatterExpertRows(ConstMatrixView expert_rows, std::span<const int64_t> offsets, int bins,
                       int b, float* rows) {
  const int64_t width = expert_rows.cols;
  int64_t r = 0;
  for (size_t blk = static_cast<size_t>(b); blk < offsets.size() - 1; blk += bins) {
    for (int64_t i = offsets[blk]; i < offsets[blk + 1]; ++i) {
      CopyRow(expert_rows.data + r++ * width, width, rows + i * width);
    }
  }
}

EpExchange SendSide(EpExchange::Kind kind, int64_t row_width, int bins, std::span<const float> send,
                    std::span<const int64_t> send_counts) {
  EpExchange ex;
  ex.kind = kind;
  ex.row_width = row_width;
  ex.bins = bins;
  ex.send = send;
  ex.send_counts = send_counts;
  return ex;
}

}  // namespace moe_internal

using moe_internal::BlockOffsets;
using moe_internal::GatherExpertRows;
using moe_internal::ScatterExpertRows;

MoeRouting RouteTokens(ConstMatrixView probs, int top_k, int64_t capacity) {
  const int64_t T = probs.rows, E = probs.cols, k = top_k;
  MoeRouting r;
  r.top_k = top_k;
  r.expert.assign(static_cast<size_t>(T * k), 0);
  r.gate.assign(static_cast<size_t>(T * k), 0.0f);
  r.position.assign(static_cast<size_t>(T * k), -1);
  r.kept.assign(static_cast<size_t>(E), 0);
  r.chosen.assign(static_cast<size_t>(E), 0);
  for (int64_t t = 0; t < T; ++t) {
    const float* row = probs.data + t * E;
    for (int64_t j = 0; j < k; ++j) {
      int32_t best = -1;
      for (int32_t i = 0; i < E; ++i) {
        if (j == 1 && i == r.expert[static_cast<size_t>(t * k)]) continue;
        if (best < 0 || row[i] > row[best]) best = i;
      }
      const size_t tj = static_cast<size_t>(t * k + j), e = static_cast<size_t>(best);
      r.expert[tj] = best;
      r.gate[tj] = row[best];
      ++r.chosen[e];
      if (capacity < 0 || r.kept[e] < capacity) {
        r.position[tj] = r.kept[e]++;  // within the expert; made absolute below
      } else {
        ++r.dropped;
      }
    }
  }
  const std::vector<int64_t> first_row = BlockOffsets(r.kept);
  for (size_t tj = 0; tj < r.position.size(); ++tj) {
    if (r.position[tj] >= 0) r.position[tj] += first_row[static_cast<size_t>(r.expert[tj])];
  }
  return r;
}

const char* MoeInitName(MoeInit init) { return init == MoeInit::kScaled ? "scaled" : "he"; }

int64_t ExpertCapacity(double capacity_factor, int top_k, int64_t tokens, int experts) {
  if (capacity_factor <= 0) return -1;
  const double exact = capacity_factor * top_k * static_cast<double>(tokens) / experts;
  const double capacity = std::ceil(exact * (1.0 - 1e-12));
  // A huge C (any finite C >= 0 is valid) is beyond every token count: no limit. Converting a double
  // outside int64's range is undefined behaviour (x86 gave INT64_MIN, other targets saturate).
  if (!(capacity < 0x1p62)) return -1;
  return static_cast<int64_t>(capacity);
}

void ExchangeLocally(EpExchange& exchange) {
  exchange.recv.assign(exchange.send.begin(), exchange.send.end());
  exchange.recv_counts.assign(exchange.send_counts.begin(), exchange.send_counts.end());
}

absl::StatusOr<std::unique_ptr<MoeBlock>> MoeBlock::Create(const MoeConfig& config, int layer,
                                                           int width, Activation activation, int ep,
                                                           int ep_rank, uint64_t seed,
                                                           std::span<float> params,
                                                           std::span<float> grads) {
  if (config.experts < 1 || config.top_k < 1 || config.top_k > 2 || config.top_k > config.experts ||
      config.expert_hidden < 1 || width < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "MoE layer %d: experts %d, top_k %d, expert_hidden %d, width %d (see ValidateMlpConfig)",
        layer, config.experts, config.top_k, config.expert_hidden, width));
  }
  if (ep < 1 || config.experts % ep != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "ep: %d does not divide experts (%d) of MoE layer %d", ep, config.experts, layer));
  }
  if (ep_rank < 0 || ep_rank >= ep) {
    return absl::InvalidArgumentError(
        absl::StrFormat("ep_rank: %d is outside [0, %d)", ep_rank, ep));
  }
  auto block = std::unique_ptr<MoeBlock>(new MoeBlock());
  Layout& lay = block->layout_;
  lay = Layout{width, config.experts, config.top_k, config.expert_hidden, ep, ep_rank};
  if (static_cast<int64_t>(params.size()) != lay.params() ||
      (!grads.empty() && grads.size() != params.size())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("MoE layer %d: params/grads hold %d/%d values, the shard has %d", layer,
                        params.size(), grads.size(), lay.params()));
  }
  block->layer_ = layer;
  block->activation_ = activation;
  block->capacity_factor_ = config.capacity_factor;
  block->aux_loss_ = config.aux_loss;
  block->router_skew_ = config.router_skew;
  block->params_ = params;
  block->grads_ = grads;
  block->stats_.kept.assign(static_cast<size_t>(config.experts), 0);
  // Init: a pure function of the index in the unsharded block (router, then experts 0..E-1).
  const int64_t d = width, h = lay.hidden, E = lay.experts;
  const float router_limit = static_cast<float>(std::sqrt(6.0 / static_cast<double>(d)));
  // kScaled: GPT-2's 1/√N over the N residual layers (the model's MoE blocks) on the branch's last
  // weights: E[y²] ≈ (1 + 2·Σ g²/B)·E[x²] per block, at most e² over all B blocks.
  const double w2_var = config.init == MoeInit::kScaled
                            ? 6.0 / static_cast<double>(h) /
                                  static_cast<double>(std::max<size_t>(1, config.layers.size()))
                            : 6.0 / static_cast<double>(h);
  const float w2_limit = static_cast<float>(std::sqrt(w2_var));
  for (int64_t i = 0; i < d * E; ++i) params[i] = InitUniform(seed, layer, i) * router_limit;
  for (int b = 0; b < lay.local_experts(); ++b) {
    const int64_t base = d * E + (lay.first_expert() + b) * lay.expert_params();
    float* w = block->expert(b);
    for (int64_t i = 0; i < d * h; ++i) w[i] = InitUniform(seed, layer, base + i) * router_limit;
    std::fill_n(w + d * h, h, 0.0f);
    const int64_t w2 = d * h + h;
    for (int64_t i = 0; i < h * d; ++i) {
      w[w2 + i] = InitUniform(seed, layer, base + w2 + i) * w2_limit;
    }
    std::fill_n(w + w2 + h * d, d, 0.0f);
  }
  return block;
}

MoeBlock::~MoeBlock() = default;

void MoeBlock::ResetStats() {
  std::fill(stats_.kept.begin(), stats_.kept.end(), 0);
  stats_.dropped = 0;
  stats_.aux_loss_sum = 0;
  stats_.kept_by_key.clear();
}

void MoeBlock::Keep(Tensor* slot, Tensor value) {
  Free(slot);
  activation_bytes_ += value.bytes();
  *slot = std::move(value);
}

void MoeBlock::Free(Tensor* slot) {
  activation_bytes_ -= slot->bytes();
  *slot = Tensor();
}

void MoeBlock::Release(int key) {
  auto it = states_.find(key);
  if (it == states_.end()) return;
  KeyState& st = *it->second;
  for (Tensor* t : {&st.x, &st.probs, &st.out, &st.dy, &st.dlogits}) Free(t);
  for (auto* v : {&st.ex_x, &st.ex_pre, &st.ex_h, &st.ex_dout, &st.ex_dpre}) {
    for (Tensor& t : *v) Free(&t);
  }
  states_.erase(it);
}

EpExchange& MoeBlock::exchange(int key) { return states_.at(key)->exchange; }

absl::StatusOr<MoeBlock::KeyState*> MoeBlock::Find(int key, int phase, const char* op) {
  auto it = states_.find(key);
  if (it == states_.end() || it->second->phase != phase) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: MoE layer %d (ep rank %d) micro-batch %d is not at that phase (%s)", op, layer_,
        layout_.ep_rank, key,
        it == states_.end() ? "no pass" : absl::StrFormat("phase %d", it->second->phase)));
  }
  return it->second.get();
}

absl::Status MoeBlock::CheckRecv(const KeyState& st, const char* op) const {
  const EpExchange& ex = st.exchange;
  const int64_t total = std::accumulate(ex.recv_counts.begin(), ex.recv_counts.end(), int64_t{0});
  const bool negative =
      std::any_of(ex.recv_counts.begin(), ex.recv_counts.end(), [](int64_t c) { return c < 0; });
  if (ex.recv_counts.empty() || ex.recv_counts.size() % static_cast<size_t>(ex.bins) != 0 ||
      negative || total * ex.row_width != static_cast<int64_t>(ex.recv.size())) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: MoE layer %d (ep rank %d): the exchange delivered %d floats with %d counts "
        "(bins %d, total %d rows of %d)",
        op, layer_, layout_.ep_rank, ex.recv.size(), ex.recv_counts.size(), ex.bins, total,
        ex.row_width));
  }
  return absl::OkStatus();
}

// ---- Forward ----

absl::Status MoeBlock::BeginForward(int key, ConstMatrixView x, bool store) {
  const Layout& lay = layout_;
  if (x.rows < 1 || x.cols != lay.width) {
    return absl::InvalidArgumentError(
        absl::StrFormat("MoE layer %d: input is %dx%d, expected rows >= 1 and %d columns", layer_,
                        x.rows, x.cols, lay.width));
  }
  auto [it, inserted] = states_.try_emplace(key, nullptr);
  if (!inserted) {
    return absl::FailedPreconditionError(
        absl::StrFormat("MoE layer %d already holds micro-batch %d", layer_, key));
  }
  it->second = std::make_unique<KeyState>();
  KeyState& st = *it->second;
  st.store = store;
  const int64_t T = x.rows, E = lay.experts, k = lay.top_k, d = lay.width;
  st.tokens = T;
  // Router and softmax (per row in double, rounded once).
  Tensor probs(T, E);
  RP_RETURN_IF_ERROR(MatMul(x, ConstMatrixView(router(), d, E), probs));
  std::vector<double> e(static_cast<size_t>(E));
  if (router_skew_ > 0 && E > 1) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t i = 0; i < E; ++i) {
        probs.data()[t * E + i] -=
            static_cast<float>(router_skew_ * static_cast<double>(i) / static_cast<double>(E - 1));
      }
    }
  }
  for (int64_t t = 0; t < T; ++t) {
    float* row = probs.data() + t * E;
    const double top = *std::max_element(row, row + E);
    double sum = 0;
    for (int64_t i = 0; i < E; ++i) sum += (e[i] = std::exp(static_cast<double>(row[i]) - top));
    for (int64_t i = 0; i < E; ++i) row[i] = static_cast<float>(e[i] / sum);
  }
  st.routing =
      RouteTokens(probs, lay.top_k, ExpertCapacity(capacity_factor_, lay.top_k, T, lay.experts));
  const MoeRouting& rt = st.routing;
  // The dispatch: token rows at their positions.
  st.send = Tensor(std::accumulate(rt.kept.begin(), rt.kept.end(), int64_t{0}), d);
  for (size_t tj = 0; tj < rt.position.size(); ++tj) {
    if (rt.position[tj] < 0) continue;
    CopyRow(x.data + static_cast<int64_t>(tj) / k * d, d, st.send.data() + rt.position[tj] * d);
  }
  if (store) {
    for (size_t i = 0; i < rt.kept.size(); ++i) stats_.kept[i] += rt.kept[i];
    stats_.dropped += rt.dropped;
    stats_.kept_by_key[key] = rt.kept;
    if (aux_loss_ > 0) {
      double dot = 0;
      for (int64_t i = 0; i < E; ++i) {
        double p_mean = 0;
        for (int64_t t = 0; t < T; ++t) p_mean += probs.at(t, i);
        dot += static_cast<double>(rt.chosen[static_cast<size_t>(i)]) / static_cast<double>(k * T) *
               (p_mean / static_cast<double>(T));
      }
      stats_.aux_loss_sum += aux_loss_ * static_cast<double>(E) * dot;
    }
    Keep(&st.probs, std::move(probs));
  }
  // The input: the residual in EndForward (also for Infer), the router's gradient in backward.
  Keep(&st.x, Tensor(T, d, std::vector<float>(x.data, x.data + x.size())));
  st.exchange = moe_internal::SendSide(EpExchange::Kind::kDispatch, d, lay.local_experts(),
                                       st.send.span(), rt.kept);
  st.phase = 1;
  return absl::OkStatus();
}

absl::Status MoeBlock::ForwardExperts(int key) {
  RP_ASSIGN_OR_RETURN(KeyState * stp, Find(key, 1, "ForwardExperts"));
  KeyState& st = *stp;
  RP_RETURN_IF_ERROR(CheckRecv(st, "ForwardExperts"));
  EpExchange& ex = st.exchange;
  const int B = layout_.local_experts();
  const int64_t d = layout_.width, h = layout_.hidden;
  const size_t sources = ex.recv_counts.size() / static_cast<size_t>(B);
  const std::vector<int64_t> offsets = BlockOffsets(ex.recv_counts);
  st.send = Tensor(offsets.back(), d);  // the combine: outputs where their inputs arrived
  st.ex_x.resize(static_cast<size_t>(B));
  st.ex_pre.resize(static_cast<size_t>(B));
  st.ex_h.resize(static_cast<size_t>(B));
  for (int b = 0; b < B; ++b) {
    Tensor xb = GatherExpertRows(ex.recv, offsets, B, b, d);
    const int64_t rows = xb.rows();
    const float* w = expert(b);
    Tensor pre(rows, h), act(rows, h), out(rows, d);
    RP_RETURN_IF_ERROR(MatMul(xb, ConstMatrixView(w, d, h), pre));
    RP_RETURN_IF_ERROR(AddBias(pre, std::span<const float>(w + d * h, h)));
    RP_RETURN_IF_ERROR(ActivationForward(activation_, pre, act));
    RP_RETURN_IF_ERROR(MatMul(act, ConstMatrixView(w + d * h + h, h, d), out));
    RP_RETURN_IF_ERROR(AddBias(out, std::span<const float>(w + d * h + h + h * d, d)));
    ScatterExpertRows(out, offsets, B, b, st.send.data());
    if (st.store) {
      Keep(&st.ex_x[static_cast<size_t>(b)], std::move(xb));
      Keep(&st.ex_pre[static_cast<size_t>(b)], std::move(pre));
      Keep(&st.ex_h[static_cast<size_t>(b)], std::move(act));
    }
  }
  st.from_counts = std::move(ex.recv_counts);
  st.send_counts.assign(sources, 0);
  for (size_t s = 0; s < sources; ++s) {
    for (int b = 0; b < B; ++b) st.send_counts[s] += st.from_counts[s * B + b];
  }
  ex = moe_internal::SendSide(EpExchange::Kind::kCombine, d, 1, st.send.span(), st.send_counts);
  st.phase = 2;
  return absl::OkStatus();
}

// The combine must return, from each dispatch destination, exactly the rows sent to it.
absl::Status MoeBlock::CheckCombine(const KeyState& st, const char* op) const {
  RP_RETURN_IF_ERROR(CheckRecv(st, op));
  const EpExchange& ex = st.exchange;
  const int B = layout_.local_experts();
  bool same = ex.recv_counts.size() == static_cast<size_t>(layout_.ep);
  for (int p = 0; same && p < layout_.ep; ++p) {
    int64_t sent = 0;
    for (int b = 0; b < B; ++b) sent += st.routing.kept[static_cast<size_t>(p * B + b)];
    same = ex.recv_counts[static_cast<size_t>(p)] == sent;
  }
  if (!same) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: MoE layer %d (ep rank %d): the combine did not return the dispatched rows", op, layer_,
        layout_.ep_rank));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> MoeBlock::EndForward(int key) {
  RP_ASSIGN_OR_RETURN(KeyState * stp, Find(key, 2, "EndForward"));
  KeyState& st = *stp;
  RP_RETURN_IF_ERROR(CheckCombine(st, "EndForward"));
  const int64_t T = st.tokens, k = layout_.top_k, d = layout_.width;
  const int64_t rows = static_cast<int64_t>(st.exchange.recv.size()) / d;  // before the move
  Tensor out(rows, d, std::move(st.exchange.recv));
  Tensor y(T, d);
  std::vector<float> sum(static_cast<size_t>(d));
  for (int64_t t = 0; t < T; ++t) {
    std::fill(sum.begin(), sum.end(), 0.0f);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t pos = st.routing.position[static_cast<size_t>(t * k + j)];
      if (pos < 0) continue;
      const float g = st.routing.gate[static_cast<size_t>(t * k + j)];
      const float* o = out.data() + pos * d;
      for (int64_t c = 0; c < d; ++c) sum[static_cast<size_t>(c)] += g * o[c];
    }
    const float* xt = st.x.data() + t * d;
    float* yt = y.data() + t * d;
    for (int64_t c = 0; c < d; ++c) yt[c] = xt[c] + sum[static_cast<size_t>(c)];
  }
  st.exchange = EpExchange{};
  st.send = Tensor();
  if (!st.store) {
    Release(key);
    return y;
  }
  Keep(&st.out, std::move(out));
  st.phase = 3;
  return y;
}

}  // namespace rp
