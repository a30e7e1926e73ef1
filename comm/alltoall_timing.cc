#include "comm/alltoall_timing.h"

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "comm/ring_timing.h"
#include "runtime/status_macros.h"

namespace rp::comm::a2a {

absl::Status RoundTripTimedBlock(Codec codec, const AllToAllWireModel& wire,
                                 uint64_t segment_elems, bool empty_block_message,
                                 std::span<float> block) {
  if (codec == Codec::kFp32 || block.empty()) return absl::OkStatus();
  const BlockShape shape{.modeled_elems = wire.ModeledElements(block.size()),
                         .segment_elems = segment_elems < 1 ? 1 : segment_elems,
                         .codec = codec,
                         .empty_block_message = empty_block_message};
  const int pieces = shape.messages();
  std::vector<std::byte> bytes;
  for (int k = 0; k < pieces; ++k) {
    const ring::Range g = ring::SplitSegment(ring::Range{0, block.size()}, pieces, k);
    if (g.size == 0) continue;
    // Encode wants 4-byte alignment: a vector of std::byte from operator new is.
    bytes.resize(SegmentWireBytes(codec, g.size));
    RP_RETURN_IF_ERROR(Encode(codec, block.data() + g.begin, g.size, bytes.data(), g.begin));
    Decode(codec, bytes.data(), g.size, block.data() + g.begin);
  }
  return absl::OkStatus();
}

PairwiseTimer::PairwiseTimer(Nanos start, std::vector<std::vector<uint64_t>> send_bytes,
                             std::vector<int> recv_messages)
    : send_bytes_(std::move(send_bytes)),
      recv_messages_(std::move(recv_messages)),
      ready_(start),
      next_ready_(start),
      progress_(start) {}

void PairwiseTimer::Open(std::vector<Post>* posts) {
  while (step_ <= steps()) {
    const std::vector<uint64_t>& bytes = send_bytes_[static_cast<size_t>(step_ - 1)];
    for (size_t k = 0; k < bytes.size(); ++k) {
      posts->push_back({.step = step_, .message = static_cast<int>(k), .bytes = bytes[k],
                        .ready = ready_});
      posted_bytes_ += bytes[k];
      ++posted_messages_;
    }
    if (recv_messages_[static_cast<size_t>(step_ - 1)] > 0) return;
    ++step_;  // nothing to receive: the next step is ready at once
  }
}

std::vector<PairwiseTimer::Post> PairwiseTimer::Begin() {
  std::vector<Post> posts;
  Open(&posts);
  return posts;
}

void PairwiseTimer::OnReceive(Nanos arrival, Nanos ready, std::vector<Post>* posts) {
  if (arrival > progress_) {
    const Nanos split = std::clamp(ready, progress_, arrival);
    if (split > progress_) {
      peer_wait_ += split - progress_;
      spans_.push_back({progress_, split, true});
    }
    if (arrival > split) {
      transfer_ += arrival - split;
      spans_.push_back({split, arrival, false});
    }
    progress_ = arrival;
  }
  next_ready_ = std::max(next_ready_, arrival);
  if (++received_ < recv_messages_[static_cast<size_t>(step_ - 1)]) return;
  ++step_;
  received_ = 0;
  ready_ = next_ready_;
  Open(posts);
}

}  // namespace rp::comm::a2a
