#include "runtime/model/stage_group.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_format.h"
#include "runtime/model/moe_internal.h"
#include "runtime/status_macros.h"

namespace rp {
namespace {

absl::Status CheckGroup(std::span<MlpStage* const> shards, int tp, size_t inputs) {
  if (tp < 1 || shards.empty() || shards.size() % static_cast<size_t>(tp) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "RunStageGroupSerial: %d shards do not form groups of tp=%d", shards.size(), tp));
  }
  const int sources = static_cast<int>(shards.size()) / tp;
  if (inputs != static_cast<size_t>(sources)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("RunStageGroupSerial: %d inputs for %d sources", inputs, sources));
  }
  const MlpStage* first = shards[0];
  for (int q = 0; q < sources; ++q) {
    for (int t = 0; t < tp; ++t) {
      const MlpStage* s = shards[static_cast<size_t>(q * tp + t)];
      const bool ep_ok = s != nullptr && first != nullptr && s->ep() == first->ep() &&
                         (s->ep() == 1 || (s->ep() == sources && s->ep_rank() == q));
      if (!ep_ok || s->tp_rank() != t || s->tp() != tp || s->stage() != first->stage()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "RunStageGroupSerial: shards[%d] is not source %d, tp rank %d of stage %d with tp=%d "
            "and ep 1 or %d",
            q * tp + t, q, t, first ? first->stage() : -1, tp, sources));
      }
    }
  }
  return absl::OkStatus();
}

// One all-to-all among the exchanges `ex` (one per source, same TP rank): receiver r takes, from
// each of `senders` senders in rank order, the block the sender addressed to r. A receiver past
// every sender's destinations (sources 1..G-1 when the experts all live on source 0, as in the
// reference trainer without shard_experts) takes one empty block: it owns no rows, and `senders` ×
// bins zero counts made that reference hold senders × experts counts per source and block (64 ×
// 1024 of them, 369 MB over 11 blocks at ep 64 and 1024 experts).
// With `wire`, each block from s != r then goes through it (as the receiver got it).
absl::Status DeliverSerial(std::span<EpExchange* const> ex, size_t senders, const EpWireFn& wire) {
  const int bins = ex[0]->bins;
  const int64_t width = ex[0]->row_width;
  std::vector<std::vector<int64_t>> offsets;
  for (const EpExchange* e : ex) {
    RP_CHECK(e->bins == bins && e->row_width == width && e->kind == ex[0]->kind)
        << "the sources reached different EP exchanges";
    offsets.push_back(moe_internal::BlockOffsets(e->send_counts));
  }
  for (size_t r = 0; r < ex.size(); ++r) {
    EpExchange& to = *ex[r];
    to.recv.clear();
    to.recv_counts.clear();
    // Every sender's send side has the same destinations (bins per EP rank of the same ep).
    if (r * static_cast<size_t>(bins) >= ex[0]->send_counts.size()) {
      to.recv_counts.assign(static_cast<size_t>(bins), 0);
      continue;
    }
    for (size_t s = 0; s < senders; ++s) {
      const EpExchange& from = *ex[s];
      const size_t first = r * static_cast<size_t>(bins);
      if (first >= from.send_counts.size()) {
        to.recv_counts.insert(to.recv_counts.end(), static_cast<size_t>(bins), 0);
        continue;
      }
      to.recv_counts.insert(to.recv_counts.end(), from.send_counts.begin() + first,
                            from.send_counts.begin() + first + bins);
      const int64_t begin = offsets[s][first] * width, end = offsets[s][first + bins] * width;
      const size_t at = to.recv.size();
      to.recv.insert(to.recv.end(), from.send.begin() + begin, from.send.begin() + end);
      if (wire && s != r && end > begin) {
        RP_RETURN_IF_ERROR(wire(from, static_cast<int>(s), static_cast<int>(r),
                                std::span<float>(to.recv).subspan(at, static_cast<size_t>(end - begin))));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<Tensor>> RunStageGroupSerial(std::span<MlpStage* const> shards, int tp,
                                                        MlpStage::Pass pass, int micro_batch,
                                                        std::span<const ConstMatrixView> inputs,
                                                        const EpWireFn& wire) {
  RP_RETURN_IF_ERROR(CheckGroup(shards, tp, inputs.size()));
  const size_t n = shards.size(), T = static_cast<size_t>(tp), sources = n / T;
  const size_t dispatch_senders = sources;
  const size_t combine_senders = static_cast<size_t>(shards[0]->ep());  // the experts' owners
  // Only sharded experts put blocks on a wire (ep == 1: every token goes to source 0's experts).
  const EpWireFn no_wire;
  const EpWireFn& block_wire = shards[0]->ep() > 1 ? wire : no_wire;
  for (size_t i = 0; i < n; ++i) {
    RP_RETURN_IF_ERROR(shards[i]->BeginPass(pass, micro_batch, inputs[i / T]));
  }
  std::vector<StageExchange> ex(n);
  while (true) {
    for (size_t i = 0; i < n; ++i) {
      RP_ASSIGN_OR_RETURN(ex[i], shards[i]->RunToExchange(micro_batch));
      RP_CHECK(ex[i].kind == ex[0].kind) << "shard " << i << " reached another exchange kind";
    }
    if (ex[0].kind == StageExchange::Kind::kDone) break;
    if (ex[0].kind == StageExchange::Kind::kTpAllReduce) {
      // The sum b0 + b1 + ... in TP rank 0's buffer (the same operations in the same order as
      // into a copy of b0: no buffer of its own, which an evaluation batch's size would put on
      // fresh pages at every call), then copied to the other ranks'.
      for (size_t q = 0; q < sources; ++q) {
        const std::span<float> b0 = ex[q * T].tp_buffer;
        for (size_t t = 1; t < T; ++t) {
          RP_RETURN_IF_ERROR(Accumulate(b0, ex[q * T + t].tp_buffer));
        }
        for (size_t t = 1; t < T; ++t) std::copy(b0.begin(), b0.end(), ex[q * T + t].tp_buffer.begin());
      }
      continue;
    }
    for (size_t t = 0; t < T; ++t) {
      std::vector<EpExchange*> group;
      for (size_t q = 0; q < sources; ++q) group.push_back(ex[q * T + t].ep);
      const bool dispatch = group[0]->kind == EpExchange::Kind::kDispatch;
      RP_RETURN_IF_ERROR(
          DeliverSerial(group, dispatch ? dispatch_senders : combine_senders, block_wire));
    }
  }
  std::vector<Tensor> results(sources);
  for (size_t i = 0; i < n; ++i) {
    RP_ASSIGN_OR_RETURN(Tensor r, shards[i]->EndPass(micro_batch));
    if (i % T == 0) results[i / T] = std::move(r);
  }
  return results;
}

// Declared in mlp.h (the TP group of one source); here beside its EP × TP generalisation.
absl::StatusOr<Tensor> RunTpGroupSerial(std::span<MlpStage* const> shards, MlpStage::Pass pass,
                                        int micro_batch, ConstMatrixView input) {
  const int T = static_cast<int>(shards.size());
  if (T < 1) return absl::InvalidArgumentError("RunTpGroupSerial: no shards");
  for (int t = 0; t < T; ++t) {
    const MlpStage* s = shards[static_cast<size_t>(t)];
    if (s == nullptr || s->tp_rank() != t || s->tp() != T || s->stage() != shards[0]->stage()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "RunTpGroupSerial: shards[%d] is not tp rank %d of stage %d with tp=%d", t, t,
          shards[0] ? shards[0]->stage() : -1, T));
    }
  }
  for (MlpStage* s : shards) RP_RETURN_IF_ERROR(s->BeginPass(pass, micro_batch, input));
  std::vector<std::span<float>> buffers(static_cast<size_t>(T));
  while (true) {
    for (int t = 0; t < T; ++t) {
      RP_ASSIGN_OR_RETURN(buffers[static_cast<size_t>(t)],
                          shards[static_cast<size_t>(t)]->RunToAllReduce(micro_batch));
    }
    const size_t n = buffers[0].size();
    for (int t = 1; t < T; ++t) {
      RP_CHECK(buffers[static_cast<size_t>(t)].size() == n)
          << "tp rank " << t << " reached an all-reduce of " << buffers[static_cast<size_t>(t)].size()
          << " values, rank 0 one of " << n;
    }
    if (n == 0) break;
    // In rank 0's buffer, as RunStageGroupSerial.
    for (int t = 1; t < T; ++t) RP_RETURN_IF_ERROR(Accumulate(buffers[0], buffers[static_cast<size_t>(t)]));
    for (int t = 1; t < T; ++t) {
      std::copy(buffers[0].begin(), buffers[0].end(), buffers[static_cast<size_t>(t)].begin());
    }
  }
  Tensor result;
  for (int t = 0; t < T; ++t) {
    RP_ASSIGN_OR_RETURN(Tensor r, shards[static_cast<size_t>(t)]->EndPass(micro_batch));
    if (t == 0) result = std::move(r);
  }
  return result;
}

}  // namespace rp
