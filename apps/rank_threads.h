// Internal to `ringpipe allreduce` and `ringpipe alltoall` (apps/allreduce_run.cc,
// apps/alltoall_run.cc): ranks 0..n-1 on one std::thread each, and the two ways a row's iterations
// run — on the host's wall clock behind a barrier, or on a fabric in modeled time — with the row
// they make. Each command brings its rank's buffers, its call and its check (RankEngine).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "apps/allreduce.h"
#include "comm/communicator.h"
#include "runtime/link.h"
#include "runtime/time.h"

namespace rp::apps {

inline std::vector<int> Iota(int n) {
  std::vector<int> v(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) v[static_cast<size_t>(r)] = r;
  return v;
}

// Runs body(r) for r in [0, n) on n threads and joins them all.
inline void RunThreads(int n, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) threads.emplace_back(body, r);
  for (auto& th : threads) th.join();
}

// One rank of a row, on its own thread: its buffers, one call of the collective and the check of
// the last call's output.
class RankEngine {
 public:
  virtual ~RankEngine() = default;
  // Before each iteration's barrier (an in-place all-reduce refills its buffer).
  virtual void BeforeCall() {}
  // One call, starting at modeled `start` (kZeroTime untimed).
  virtual absl::StatusOr<comm::CollectiveResult> Call(comm::RankComm& me, Nanos start) = 0;
  // Elements of the last call's output outside the codec's bound.
  virtual uint64_t Wrong() const = 0;
};
using MakeRankEngine = std::function<std::unique_ptr<RankEngine>(int rank)>;

// What the rank threads of one row fill: a status, wrong elements and wire bytes per rank, and
// the time of every iteration on every rank.
struct RowState {
  RowState(const allreduce::Settings& s, uint64_t elements)
      : n(s.ranks), count(elements), total(s.warmup + s.iters), status(static_cast<size_t>(n)),
        wrong(static_cast<size_t>(n), 0), wire(static_cast<size_t>(n), 0),
        time_ns(static_cast<size_t>(total), std::vector<double>(static_cast<size_t>(n), 0)) {}
  int n;
  uint64_t count;  // elements of a rank's buffer
  int total;       // --warmup + --iters
  std::vector<absl::Status> status;
  std::vector<uint64_t> wrong, wire;
  // [iteration][rank]: untimed, the call's wall end − the earliest wall start of the iteration;
  // timed, the modeled end − the common start.
  std::vector<std::vector<double>> time_ns;
};

// Untimed: every iteration starts behind a barrier of all ranks and is timed by steady_clock. A
// rank whose call fails aborts `comm` and leaves (its status in `sh`).
void RunWallIterations(RowState& sh, comm::Communicator& comm, const MakeRankEngine& make);

// Timed: a fabric over `spec` (one device and one LP per rank) and a communicator on it; every
// iteration starts on every rank at the latest end of the previous one (a rendezvous).
absl::Status RunModeledIterations(RowState& sh, const LinkSpec& spec, const MakeRankEngine& make);

// The row of `sh` (its first failed rank's status if any): the median over the measured iterations
// of the slowest rank's time, algbw = bytes / time and busbw = algbw × `busbw_factor`.
absl::StatusOr<allreduce::Row> FinishRow(const allreduce::Settings& s, const RowState& sh,
                                         double busbw_factor);

}  // namespace rp::apps
