#include "comm/ring_timing.h"

#include <algorithm>

namespace rp::comm::ring {

RingTimer::RingTimer(TimedKind kind, const TimedShape& shape, int n, int rank, int root,
                     Nanos start)
    : kind_(kind),
      shape_(shape),
      n_(n),
      rank_(rank),
      root_(root),
      start_(start),
      progress_(start),
      reduce_end_(start),
      last_consumed_(start),
      last_post_ready_(start),
      segments_(shape.segments()) {
  const int K = segments_;
  if (n_ <= 1) return;
  switch (kind_) {
    case TimedKind::kAllReduce: steps_ = 2 * (n_ - 1); break;
    case TimedKind::kReduceScatter:
    case TimedKind::kAllGather: steps_ = n_ - 1; break;
    case TimedKind::kBroadcast:
      steps_ = rank_ == root_ ? 0 : 1;
      forwards_ = Mod(rank_ + 1, n_) != root_;
      break;
  }
  receives_ = steps_ * K;
}

RingTimer::Post RingTimer::MakePost(int step, int k, Nanos ready) {
  // The send queue is FIFO: a message is not ready before the one posted ahead of it.
  last_post_ready_ = std::max(last_post_ready_, ready);
  Post p{.step = step, .segment = k, .bytes = shape_.segment_bytes(k), .ready = last_post_ready_};
  posted_bytes_ += p.bytes;
  return p;
}

absl::InlinedVector<RingTimer::Post, 4> RingTimer::Begin() {
  absl::InlinedVector<Post, 4> out;
  if (n_ <= 1) return out;
  if (kind_ == TimedKind::kBroadcast && rank_ != root_) return out;
  const int K = shape_.segments();
  out.reserve(static_cast<size_t>(K));
  for (int k = 0; k < K; ++k) out.push_back(MakePost(0, k, start_));
  return out;
}

void RingTimer::AddSpan(Nanos start, Nanos end, bool peer) {
  if (!spans_.empty() && spans_.back().end == start && spans_.back().peer == peer) {
    spans_.back().end = end;  // continues the last span: one span, not one per segment
    return;
  }
  spans_.push_back({start, end, peer});
}

bool RingTimer::OnReceive(Nanos arrival, Nanos ready, Post* post) {
  const int K = segments_;
  const int step = K == 1 ? received_ : received_ / K, k = K == 1 ? 0 : received_ % K;
  ++received_;
  if (arrival > progress_) {
    // The wait [progress, arrival]: where the rank's own reduce engine is busy it is reduce
    // (communication: the neighbour's next segment waits on the same reduction step, so calling it
    // peer wait would book the ring's own reductions as a straggler's); elsewhere, before the
    // message was ready at its sender, peer wait, after, transfer.
    const Nanos split = std::clamp(ready, progress_, arrival);
    Nanos t = progress_;
    auto outside = [&](Nanos end) {  // [t, end] with the engine idle
      const Nanos p_end = std::clamp(split, t, end);
      if (p_end > t) {
        peer_wait_ += p_end - t;
        AddSpan(t, p_end, true);
      }
      if (end > p_end) {
        transfer_ += end - p_end;
        AddSpan(p_end, end, false);
      }
      t = end;
    };
    while (busy_next_ < busy_.size() && t < arrival) {
      const Span& b = busy_[busy_next_];
      if (b.end <= t) {
        ++busy_next_;
        continue;
      }
      if (b.start >= arrival) break;
      if (b.start > t) outside(b.start);
      const Nanos r_end = std::min(b.end, arrival);
      reduce_in_waits_ += r_end - t;
      AddSpan(t, r_end, false);
      t = r_end;
    }
    if (arrival > t) outside(arrival);
    progress_ = arrival;
  }
  const bool reduce = kind_ == TimedKind::kReduceScatter ||
                      (kind_ == TimedKind::kAllReduce && step < n_ - 1);
  const Nanos engine_free = reduce_end_;
  const Nanos consumed = shape_.Consume(k, arrival, reduce, &reduce_end_);
  if (const Nanos b0 = std::max(engine_free, arrival); reduce_end_ > b0) {  // this segment's reduction
    if (!busy_.empty() && busy_.back().end == b0) {
      busy_.back().end = reduce_end_;
    } else {
      busy_.push_back({b0, reduce_end_, false});
    }
  }
  last_consumed_ = std::max(last_consumed_, consumed);
  const Nanos next_ready = std::max(start_, consumed);
  if (kind_ == TimedKind::kBroadcast) {
    if (!forwards_) return false;
    *post = MakePost(0, k, next_ready);
    return true;
  }
  if (step + 1 >= steps_) return false;
  *post = MakePost(step + 1, k, next_ready);
  return true;
}

Nanos RingTimer::end() const { return std::max({start_, progress_, reduce_end_, last_consumed_}); }

}  // namespace rp::comm::ring
