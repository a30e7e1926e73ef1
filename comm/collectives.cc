// Ring collectives: validation and the four public operations; the algorithms are in
// comm/ring_runner.h (untimed: lending protocol; timed: comm/ring_machine.h).
#include "comm/collectives.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "comm/ring_runner.h"
#include "comm/ring_steps.h"
#include "runtime/status_macros.h"

namespace rp::comm {

absl::Status ValidateCollectiveOptions(const CollectiveOptions& options) {
  if (static_cast<int>(options.codec) > 3) {
    return absl::InvalidArgumentError("codec: unknown value");
  }
  if (options.segment_bytes < 4 || options.segment_bytes % 4 != 0 ||
      options.segment_bytes > (size_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat("segment_bytes: ", options.segment_bytes,
                                                   " (must be a multiple of 4 in [4, 1 GiB])"));
  }
  if (options.feedback_slot < 0 || options.feedback_slot > (1 << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("feedback_slot: ", options.feedback_slot, " (must be in [0, 2^20])"));
  }
  if (!(options.model.reduce_gbps >= 0) || !std::isfinite(options.model.reduce_gbps)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.reduce_gbps: ", options.model.reduce_gbps, " (must be finite and >= 0)"));
  }
  if (options.timeout.count() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeout: ", options.timeout.count(), " ns (must be > 0)"));
  }
  return absl::OkStatus();
}


namespace {

using internal::OpKind;
using internal::RingRunner;

absl::Status CheckComm(const RankComm* comm) {
  if (comm == nullptr) return absl::InvalidArgumentError("comm: null");
  return absl::OkStatus();
}

// Segments are numbered with ints (and carried as int32 in messages): a chunk of more than
// kMaxSegmentsPerChunk segments — real, or modeled on a timed communicator — is refused instead of
// wrapping (a modeled all-reduce of 2^33 elements in 4-byte segments on 2 ranks had 2^32 segments per
// chunk, which wrapped to 0: it returned OK without sending anything; 2^31 + 3 threw
// std::length_error). `parts` is n for the ring's chunks, 1 for a broadcast's chain.
constexpr uint64_t kMaxSegmentsPerChunk = 0x7fffffff;

uint64_t CeilDiv(uint64_t a, uint64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

absl::Status CheckSegmentCount(RankComm* comm, const CollectiveOptions& options, size_t count,
                               int parts) {
  const uint64_t seg = options.segment_bytes / sizeof(float);
  const uint64_t p = static_cast<uint64_t>(parts < 1 ? 1 : parts);
  if (CeilDiv(CeilDiv(count, p), seg) > kMaxSegmentsPerChunk) {
    return absl::InvalidArgumentError(absl::StrCat(
        "segment_bytes: ", options.segment_bytes, " B cuts a chunk of ", CeilDiv(count, p),
        " elements into more than ", kMaxSegmentsPerChunk, " segments"));
  }
  if (comm->group().options().fabric != nullptr &&
      options.model.elements != WireModel::kRealCount &&
      CeilDiv(CeilDiv(options.model.elements, p), seg) > kMaxSegmentsPerChunk) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.elements: ", options.model.elements, " modeled elements in segments of ",
        options.segment_bytes, " B give more than ", kMaxSegmentsPerChunk,
        " segments per chunk"));
  }
  return absl::OkStatus();
}

void CopyIfDistinct(const float* src, float* dst, size_t n) {
  if (src != dst && n > 0) std::memcpy(dst, src, n * sizeof(float));
}

}  // namespace

// ---- RingAllReduce ----

absl::StatusOr<RingAllReduce> RingAllReduce::Create(RankComm* comm, std::span<const float> in,
                                                    std::span<float> out,
                                                    const CollectiveOptions& options) {
  RP_RETURN_IF_ERROR(CheckComm(comm));
  RP_RETURN_IF_ERROR(ValidateCollectiveOptions(options));
  if (in.size() != out.size()) {
    return absl::InvalidArgumentError(absl::StrCat("out: all-reduce on rank ", comm->rank(),
                                                   " has ", in.size(), " input elements but ",
                                                   out.size(), " output elements"));
  }
  RP_RETURN_IF_ERROR(CheckSegmentCount(comm, options, in.size(), comm->size()));
  return RingAllReduce(comm, in, out, options);
}

absl::Status RingAllReduce::Run(Nanos start) {
  RingRunner run(comm_, OpKind::kAllReduce, options_, in_.size(), start);
  RP_RETURN_IF_ERROR(run.Begin());
  const int n = comm_->size();
  if (n == 1) {
    CopyIfDistinct(in_.data(), out_.data(), in_.size());
  } else {
    const ring::Range own = ring::ChunkRange(in_.size(), n, comm_->rank());
    if (run.timed()) {
      RP_RETURN_IF_ERROR(run.RunTimed({.in = in_.data(), .out = out_.data(), .work = out_.data(),
                                       .own_out = out_.data() + own.begin}));
    } else {
      RP_RETURN_IF_ERROR(run.AllReducePhases(in_.data(), out_.data(), out_.data() + own.begin));
    }
  }
  RP_RETURN_IF_ERROR(run.Finish());
  result_ = run.result();
  return absl::OkStatus();
}

// ---- RingReduceScatter ----

absl::StatusOr<RingReduceScatter> RingReduceScatter::Create(RankComm* comm,
                                                            std::span<const float> in,
                                                            std::span<float> out,
                                                            const CollectiveOptions& options) {
  RP_RETURN_IF_ERROR(CheckComm(comm));
  RP_RETURN_IF_ERROR(ValidateCollectiveOptions(options));
  const ring::Range own = ring::ChunkRange(in.size(), comm->size(), comm->rank());
  if (out.size() != own.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "out: reduce-scatter of ", in.size(), " elements gives rank ", comm->rank(), " ",
        own.size, " elements, but out has ", out.size()));
  }
  RP_RETURN_IF_ERROR(CheckSegmentCount(comm, options, in.size(), comm->size()));
  return RingReduceScatter(comm, in, out, options);
}

absl::Status RingReduceScatter::Run(Nanos start) {
  RingRunner run(comm_, OpKind::kReduceScatter, options_, in_.size(), start);
  RP_RETURN_IF_ERROR(run.Begin());
  const int n = comm_->size();
  const ring::Range own = ring::ChunkRange(in_.size(), n, comm_->rank());
  if (n == 1) {
    CopyIfDistinct(in_.data(), out_.data(), in_.size());
  } else {
    const bool in_place = out_.data() == in_.data() + own.begin;
    float* work;
    if (in_place) {
      work = const_cast<float*>(in_.data());  // the caller's buffer: out aliases it
    } else {
      work = run.Scratch(in_.size());
    }
    if (run.timed()) {
      RP_RETURN_IF_ERROR(run.RunTimed({.in = in_.data(), .work = work, .own_out = out_.data()}));
    } else {
      RP_RETURN_IF_ERROR(run.ReduceScatterPhase(in_.data(), work, out_.data()));
    }
  }
  RP_RETURN_IF_ERROR(run.Finish());
  result_ = run.result();
  return absl::OkStatus();
}

// ---- RingAllGather ----

absl::StatusOr<RingAllGather> RingAllGather::Create(RankComm* comm, std::span<const float> in,
                                                    std::span<float> out,
                                                    const CollectiveOptions& options) {
  RP_RETURN_IF_ERROR(CheckComm(comm));
  RP_RETURN_IF_ERROR(ValidateCollectiveOptions(options));
  const ring::Range own = ring::ChunkRange(out.size(), comm->size(), comm->rank());
  if (in.size() != own.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "in: all-gather of ", out.size(), " elements takes ", own.size, " elements from rank ",
        comm->rank(), ", but in has ", in.size()));
  }
  RP_RETURN_IF_ERROR(CheckSegmentCount(comm, options, out.size(), comm->size()));
  return RingAllGather(comm, in, out, options);
}

absl::Status RingAllGather::Run(Nanos start) {
  RingRunner run(comm_, OpKind::kAllGather, options_, out_.size(), start);
  RP_RETURN_IF_ERROR(run.Begin());
  const int n = comm_->size();
  const ring::Range own = ring::ChunkRange(out_.size(), n, comm_->rank());
  CopyIfDistinct(in_.data(), out_.data() + own.begin, own.size);
  if (n > 1 && run.timed()) {
    RP_RETURN_IF_ERROR(run.RunTimed({.out = out_.data()}));
  } else if (n > 1) {
    RP_RETURN_IF_ERROR(run.AllGatherPhase(out_.data()));
  }
  RP_RETURN_IF_ERROR(run.Finish());
  result_ = run.result();
  return absl::OkStatus();
}

// ---- RingBroadcast ----

absl::StatusOr<RingBroadcast> RingBroadcast::Create(RankComm* comm, int root,
                                                    std::span<const float> in,
                                                    std::span<float> out,
                                                    const CollectiveOptions& options) {
  RP_RETURN_IF_ERROR(CheckComm(comm));
  RP_RETURN_IF_ERROR(ValidateCollectiveOptions(options));
  if (root < 0 || root >= comm->size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("root: ", root, " is not a rank of a group of ", comm->size()));
  }
  if (comm->rank() == root && !in.empty() && in.size() != out.size()) {
    return absl::InvalidArgumentError(absl::StrCat("in: broadcast root ", root, " has ",
                                                   in.size(), " input elements but ", out.size(),
                                                   " output elements"));
  }
  RP_RETURN_IF_ERROR(CheckSegmentCount(comm, options, out.size(), 1));
  return RingBroadcast(comm, in, out, options, root);
}

absl::Status RingBroadcast::Run(Nanos start) {
  RingRunner run(comm_, OpKind::kBroadcast, options_, out_.size(), start);
  run.set_broadcast_root(root_);
  RP_RETURN_IF_ERROR(run.Begin());
  const bool root = comm_->rank() == root_;
  const float* src = root && !in_.empty() ? in_.data() : out_.data();
  if (comm_->size() == 1) {
    CopyIfDistinct(src, out_.data(), out_.size());
  } else {
    if (run.timed()) {
      RP_RETURN_IF_ERROR(run.RunTimed({.in = src, .out = out_.data()}));
    } else {
      RP_RETURN_IF_ERROR(run.BroadcastChain(root_, src, out_.data()));
    }
  }
  RP_RETURN_IF_ERROR(run.Finish());
  result_ = run.result();
  return absl::OkStatus();
}

}  // namespace rp::comm
