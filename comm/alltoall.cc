// All-to-all collectives: validation and the two classes (the protocols are AllToAllRunner's,
// comm/alltoall_runner.h). Words (block, bins, step, segment) as defined in comm/alltoall_steps.h.
#include "comm/alltoall.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "comm/alltoall_runner.h"
#include "comm/alltoall_steps.h"
#include "comm/collectives.h"
#include "runtime/status_macros.h"

namespace rp::comm {

namespace a2a {
uint64_t AllToAllVWireBytes(Codec codec, std::span<const int64_t> send_counts, int bins, int r,
                            size_t segment_elems) {
  const int n = static_cast<int>(send_counts.size()) / bins;
  uint64_t bytes = 0;
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    const auto first = send_counts.begin() + static_cast<ptrdiff_t>(p) * bins;
    const int64_t block = std::accumulate(first, first + bins, int64_t{0});
    bytes += kCountBytes * static_cast<uint64_t>(bins) +
             ring::ChunkWireBytes(codec, static_cast<size_t>(block), segment_elems);
  }
  return bytes;
}
}  // namespace a2a

namespace {

using internal::AllToAllRunner;
using internal::OpKind;

absl::Status CheckCommon(const RankComm* comm, const CollectiveOptions& options,
                         const AllToAllWireModel& wire) {
  if (comm == nullptr) return absl::InvalidArgumentError("comm: null");
  RP_RETURN_IF_ERROR(ValidateCollectiveOptions(options));
  if (options.error_feedback) {
    return absl::InvalidArgumentError(
        "error_feedback: not supported by the all-to-all (it moves data, it does not sum it)");
  }
  if (wire.unit_elements < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("wire.unit_elements: ", wire.unit_elements, " (must be >= 1)"));
  }
  return absl::OkStatus();
}

// Messages are numbered with ints: a block of more than kMaxBlockMessages segments, real or (timed)
// modeled, is refused instead of wrapping (a wrapped count sent nothing, or threw), and so is a
// modeled size that overflows 64 bits.
constexpr uint64_t kMaxBlockMessages = 0x7fffffff;

absl::Status CheckBlockMessages(RankComm* comm, const CollectiveOptions& options,
                                const AllToAllWireModel& wire, uint64_t block, int peer) {
  const std::string what = peer < 0 ? "each block" : absl::StrCat("the block for rank ", peer);
  const uint64_t seg = options.segment_bytes / sizeof(float);
  auto ceil_div = [](uint64_t a, uint64_t b) { return a / b + (a % b != 0 ? 1 : 0); };
  if (ceil_div(block, seg) > kMaxBlockMessages) {
    return absl::InvalidArgumentError(absl::StrCat(
        "segment_bytes: ", options.segment_bytes, " B cuts ", what, " (", block,
        " elements) into more than ", kMaxBlockMessages, " segments"));
  }
  if (comm->group().options().fabric == nullptr) return absl::OkStatus();
  const uint64_t units = ceil_div(block, wire.unit_elements);
  if (wire.modeled_unit_elements != 0 && units > ~uint64_t{0} / wire.modeled_unit_elements) {
    return absl::InvalidArgumentError(absl::StrCat(
        "wire.modeled_unit_elements: ", wire.modeled_unit_elements, " x ", units, " units (",
        what, ") overflows 64 bits"));
  }
  if (ceil_div(units * wire.modeled_unit_elements, seg) > kMaxBlockMessages) {
    return absl::InvalidArgumentError(absl::StrCat(
        "wire.modeled_unit_elements: ", what, " is ", units * wire.modeled_unit_elements, " modeled elements, more than ", kMaxBlockMessages,
        " segments of ", options.segment_bytes, " B"));
  }
  return absl::OkStatus();
}

bool Overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto* pa = static_cast<const std::byte*>(a);
  const auto* pb = static_cast<const std::byte*>(b);
  return a_bytes > 0 && b_bytes > 0 && pa < pb + b_bytes && pb < pa + a_bytes;
}

}  // namespace

// ---- AllToAll ----

absl::StatusOr<AllToAll> AllToAll::Create(RankComm* comm, std::span<const float> send,
                                          std::span<float> recv, const CollectiveOptions& options,
                                          const AllToAllWireModel& wire) {
  RP_RETURN_IF_ERROR(CheckCommon(comm, options, wire));
  const size_t n = static_cast<size_t>(comm->size());
  if (send.size() != recv.size() || send.size() % n != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "recv: all-to-all on rank ", comm->rank(), " of ", n, " ranks has ", send.size(),
        " send and ", recv.size(), " recv elements (must be equal and a multiple of ", n, ")"));
  }
  if (Overlap(send.data(), send.size_bytes(), recv.data(), recv.size_bytes())) {
    return absl::InvalidArgumentError("recv: overlaps send");
  }
  RP_RETURN_IF_ERROR(CheckBlockMessages(comm, options, wire, send.size() / n, -1));
  return AllToAll(comm, send, recv, options, wire);
}

absl::Status AllToAll::Run(Nanos start) {
  AllToAllRunner run(comm_, OpKind::kAllToAll, options_, wire_, start);
  RP_RETURN_IF_ERROR(run.Begin());
  const size_t n = static_cast<size_t>(comm_->size()), block = send_.size() / n;
  std::vector<size_t> offsets(n + 1);
  for (size_t p = 0; p <= n; ++p) offsets[p] = p * block;
  RP_RETURN_IF_ERROR(run.ExchangeBlocks(send_.data(), offsets, recv_.data(), offsets,
                                        /*empty_block_message=*/true));
  RP_RETURN_IF_ERROR(run.Finish());
  result_ = run.result();
  return absl::OkStatus();
}

// ---- AllToAllV ----

absl::StatusOr<AllToAllV> AllToAllV::Create(RankComm* comm, std::span<const float> send,
                                            std::span<const int64_t> send_counts, int bins,
                                            std::vector<float>* recv,
                                            std::vector<int64_t>* recv_counts,
                                            const CollectiveOptions& options,
                                            const AllToAllWireModel& wire) {
  RP_RETURN_IF_ERROR(CheckCommon(comm, options, wire));
  const int n = comm->size();
  if (bins < 1) return absl::InvalidArgumentError(absl::StrCat("bins: ", bins, " (must be >= 1)"));
  if (send_counts.size() != static_cast<size_t>(n) * static_cast<size_t>(bins)) {
    return absl::InvalidArgumentError(absl::StrCat("send_counts: ", send_counts.size(),
                                                   " entries, expected ranks (", n, ") x bins (",
                                                   bins, ")"));
  }
  uint64_t total = 0;
  for (size_t i = 0; i < send_counts.size(); ++i) {
    if (send_counts[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("send_counts[", i, "]: ", send_counts[i], " is negative"));
    }
    // Summed without overflow: counts that wrap around to send.size() (4 x 2^62 with an empty
    // send) were accepted, and the exchange then read far outside `send`.
    if (static_cast<uint64_t>(send_counts[i]) > send.size() - std::min<uint64_t>(total, send.size())) {
      return absl::InvalidArgumentError(absl::StrCat("send_counts: sum to more than send's ",
                                                     send.size(), " elements (at entry ", i, ")"));
    }
    total += static_cast<uint64_t>(send_counts[i]);
  }
  if (total != send.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("send_counts: sum to ", total, ", but send has ", send.size(), " elements"));
  }
  if (recv == nullptr || recv_counts == nullptr) {
    return absl::InvalidArgumentError("recv: recv and recv_counts must not be null");
  }
  if (!send.empty() && recv->data() == send.data()) {
    return absl::InvalidArgumentError("recv: is the send buffer");
  }
  if (!send_counts.empty() && recv_counts->data() == send_counts.data()) {
    return absl::InvalidArgumentError("recv_counts: is send_counts");
  }
  for (int p = 0; p < n; ++p) {
    uint64_t block = 0;
    for (int b = 0; b < bins; ++b) {
      block += static_cast<uint64_t>(send_counts[static_cast<size_t>(p) * bins + b]);
    }
    RP_RETURN_IF_ERROR(CheckBlockMessages(comm, options, wire, block, p));
  }
  return AllToAllV(comm, send, send_counts, bins, recv, recv_counts, options, wire);
}

absl::Status AllToAllV::Run(Nanos start) {
  AllToAllRunner run(comm_, OpKind::kAllToAllV, options_, wire_, start);
  RP_RETURN_IF_ERROR(run.Begin());
  const size_t n = static_cast<size_t>(comm_->size()), bins = static_cast<size_t>(bins_);
  recv_counts_->assign(n * bins, 0);
  RP_RETURN_IF_ERROR(run.ExchangeCounts(send_counts_, bins_, *recv_counts_));
  std::vector<size_t> send_off(n + 1, 0), recv_off(n + 1, 0);
  for (size_t p = 0; p < n; ++p) {
    size_t out = 0, in = 0;
    for (size_t b = 0; b < bins; ++b) {
      out += static_cast<size_t>(send_counts_[p * bins + b]);
      in += static_cast<size_t>((*recv_counts_)[p * bins + b]);
    }
    send_off[p + 1] = send_off[p] + out;
    recv_off[p + 1] = recv_off[p] + in;
  }
  recv_->resize(recv_off[n]);
  RP_RETURN_IF_ERROR(run.ExchangeBlocks(send_.data(), send_off, recv_->data(), recv_off,
                                        /*empty_block_message=*/false));
  RP_RETURN_IF_ERROR(run.Finish());
  result_ = run.result();
  return absl::OkStatus();
}

}  // namespace rp::comm
