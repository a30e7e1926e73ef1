// Ring collectives on real FP32 buffers: one small class per algorithm.
//
//   RingAllReduce      reduce-scatter then all-gather; out = sum over ranks of in.
//   RingReduceScatter  out = chunk rank() of the sum.
//   RingAllGather      out[chunk c] = rank c's in.
//   RingBroadcast      a pipelined chain root -> root + 1 -> ... -> root - 1; out = root's in.
//
// Each class: static Create(...) validates (InvalidArgument naming the field; also a chunk of more
// than 2^31 - 1 segments, real or modeled) and returns the operation; Run(start) executes it on the calling rank's thread and must be called on every rank
// of the group. Words (chunk, segment, step) as defined in comm/ring_steps.h.
//
// Pipelining: a rank sends segment k of its step-s chunk before it receives and reduces segment k
// of its step-s receive chunk, and up to CommunicatorOptions::channel_capacity segments are in
// flight per link, so segment k + 1 travels while segment k is reduced.
//
// Zero copy for large messages: with FP32 a message is a view of the sender's buffer (lent until
// the receiver acknowledges it; Run returns only after every lend is acknowledged). Lossy codecs
// encode into the sender's pool of wire buffers, which the receiver hands back in its
// acknowledgement. Small messages (<= CommunicatorOptions::inline_bytes on the wire) are copied or
// encoded into a fixed slot of the link and need no acknowledgement (the small-message path).
//
// Bit-identical replicas: each chunk is reduced in one order (along the ring) and then copied; with
// a lossy codec the owner of a reduced chunk encodes it and adopts the decoded value exactly as the
// receivers do, and a forwarding rank re-encodes the decoded value, which yields the same bytes
// (codec idempotence, comm/codec.h). With n == 1 nothing is sent and no codec is applied.
//
// Modeled time (timed communicators, see comm/communicator.h): every segment is a message on the
// fabric with its modeled size (CollectiveOptions::model, comm/ring_timing.h), ready when its data
// is (start for the sender's own data; when the segment it depends on was received and consumed
// otherwise). Run's result.end is when the last received segment was consumed, so a collective
// ends when its own messages say so: on an uncontended fabric the all-reduce equals the closed
// form of docs/collectives.md to the nanosecond; contention with other traffic shows up by
// itself. Untimed communicators: result.end == start.
//
// Errors: OutOfRange (FP16/BF16 overflow, FP32 sum overflow; names rank and element),
// FailedPrecondition (mismatched count/op/codec across ranks; names both sides), DeadlineExceeded
// (a peer did not arrive within options.timeout; names waiting rank, peer and step), Aborted
// (another rank failed first). Any error aborts the group (see comm/communicator.h).
//
// Example (in rank r's thread):
//   RP_ASSIGN_OR_RETURN(auto op, RingAllReduce::Create(&comm->rank(r), in, out, options));
//   RP_RETURN_IF_ERROR(op.Run(start));
//   Nanos end = op.result().end;
#pragma once

#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "runtime/time.h"

namespace rp::comm {

// What every ring collective holds: its rank's communicator, its buffers and options, and the result
// Run fills in.
class RingCollective {
 public:
  const CollectiveResult& result() const { return result_; }

 protected:
  RingCollective(RankComm* comm, std::span<const float> in, std::span<float> out,
                 const CollectiveOptions& options, int root = 0)
      : comm_(comm), root_(root), in_(in), out_(out), options_(options) {}
  RankComm* comm_;
  int root_;  // RingBroadcast's root; 0 for the others
  std::span<const float> in_;
  std::span<float> out_;
  CollectiveOptions options_;
  CollectiveResult result_;
};

class RingAllReduce : public RingCollective {
 public:
  // in.size() == out.size(); in-place when in.data() == out.data(). `comm` must outlive the op.
  static absl::StatusOr<RingAllReduce> Create(RankComm* comm, std::span<const float> in,
                                              std::span<float> out,
                                              const CollectiveOptions& options);
  [[nodiscard]] absl::Status Run(Nanos start = kZeroTime);

 private:
  using RingCollective::RingCollective;
};

class RingReduceScatter : public RingCollective {
 public:
  // out.size() == ring::ChunkRange(in.size(), n, rank).size. In-place when out.data() ==
  // in.data() + ChunkRange(...).begin (then `in` is used as the work buffer and modified).
  static absl::StatusOr<RingReduceScatter> Create(RankComm* comm, std::span<const float> in,
                                                  std::span<float> out,
                                                  const CollectiveOptions& options);
  [[nodiscard]] absl::Status Run(Nanos start = kZeroTime);

 private:
  using RingCollective::RingCollective;
};

class RingAllGather : public RingCollective {
 public:
  // in.size() == ring::ChunkRange(out.size(), n, rank).size. In-place when in.data() ==
  // out.data() + ChunkRange(...).begin.
  static absl::StatusOr<RingAllGather> Create(RankComm* comm, std::span<const float> in,
                                              std::span<float> out,
                                              const CollectiveOptions& options);
  [[nodiscard]] absl::Status Run(Nanos start = kZeroTime);

 private:
  using RingCollective::RingCollective;
};

class RingBroadcast : public RingCollective {
 public:
  // 0 <= root < n. Root: in.size() == out.size(), or in empty (in-place: out holds the data).
  // Other ranks: `in` is ignored.
  static absl::StatusOr<RingBroadcast> Create(RankComm* comm, int root, std::span<const float> in,
                                              std::span<float> out,
                                              const CollectiveOptions& options);
  [[nodiscard]] absl::Status Run(Nanos start = kZeroTime);

 private:
  using RingCollective::RingCollective;
};

// InvalidArgument naming the field when `options` are not usable.
[[nodiscard]] absl::Status ValidateCollectiveOptions(const CollectiveOptions& options);

}  // namespace rp::comm
