// The rows' shared loops (apps/rank_threads.h).
#include "apps/rank_threads.h"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <limits>

#include "runtime/fabric.h"
#include "runtime/status_macros.h"

namespace rp::apps {

void RunWallIterations(RowState& sh, comm::Communicator& comm, const MakeRankEngine& make) {
  using Steady = std::chrono::steady_clock;
  const size_t n = static_cast<size_t>(sh.n), total = static_cast<size_t>(sh.total);
  std::vector<std::vector<Steady::time_point>> starts(total, std::vector<Steady::time_point>(n));
  std::vector<std::vector<Steady::time_point>> ends = starts;
  std::barrier sync(sh.n);
  RunThreads(sh.n, [&](int r) {
    const size_t ri = static_cast<size_t>(r);
    const std::unique_ptr<RankEngine> e = make(r);
    for (size_t it = 0; it < total; ++it) {
      e->BeforeCall();
      sync.arrive_and_wait();
      starts[it][ri] = Steady::now();
      absl::StatusOr<comm::CollectiveResult> res = e->Call(comm.rank(r), kZeroTime);
      ends[it][ri] = Steady::now();
      if (!res.ok()) {
        sh.status[ri] = res.status();
        comm.Abort(res.status());
        sync.arrive_and_drop();
        return;
      }
      sh.wire[ri] = res->wire_bytes;
    }
    sh.wrong[ri] = e->Wrong();
  });
  for (size_t it = 0; it < total; ++it) {
    const Steady::time_point t0 = *std::min_element(starts[it].begin(), starts[it].end());
    for (size_t r = 0; r < n; ++r) {
      sh.time_ns[it][r] = std::chrono::duration<double, std::nano>(ends[it][r] - t0).count();
    }
  }
}

absl::Status RunModeledIterations(RowState& sh, const LinkSpec& spec, const MakeRankEngine& make) {
  const int n = sh.n;
  std::vector<uint64_t> tie(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) tie[static_cast<size_t>(r)] = static_cast<uint64_t>(r);
  RP_ASSIGN_OR_RETURN(auto fabric, Fabric::Create({.links = spec, .num_devices = n, .faults = {},
                                                   .tie_rank = tie, .on_commit = {}}));
  comm::CommunicatorOptions co;
  co.devices = Iota(n);
  co.fabric = fabric.get();  // outlives the communicator: declared first, destroyed last
  co.lps.assign(co.devices.begin(), co.devices.end());
  RP_ASSIGN_OR_RETURN(auto comm, comm::Communicator::Create(co));
  const RendezvousId next_iteration = fabric->AddRendezvous(n);
  RunThreads(n, [&](int r) {
    const size_t ri = static_cast<size_t>(r);
    const std::unique_ptr<RankEngine> e = make(r);
    Nanos start{0};  // every iteration starts at the same modeled time on every rank
    for (size_t it = 0; it < static_cast<size_t>(sh.total); ++it) {
      e->BeforeCall();
      absl::StatusOr<comm::CollectiveResult> res = e->Call(comm->rank(r), start);
      if (!res.ok()) {
        sh.status[ri] = res.status();
        comm->Abort(res.status());
        fabric->Abort(res.status());
        return;
      }
      sh.time_ns[it][ri] = static_cast<double>((res->end - start).count());
      sh.wire[ri] = res->wire_bytes;
      // The last rank to arrive hands everyone the latest end: the next common start.
      auto next = fabric->Arrive(r, next_iteration, res->end, {.rank = r, .op = "next iteration"},
                                 [](Nanos latest) -> absl::StatusOr<Nanos> { return latest; });
      if (!next.ok()) {
        sh.status[ri] = next.status();
        return;
      }
      start = *next;
    }
    fabric->Finish(r);
    sh.wrong[ri] = e->Wrong();
  });
  return absl::OkStatus();
}

absl::StatusOr<allreduce::Row> FinishRow(const allreduce::Settings& s, const RowState& sh,
                                         double busbw_factor) {
  for (const absl::Status& st : sh.status) RP_RETURN_IF_ERROR(st);
  std::vector<double> times;
  for (int it = s.warmup; it < sh.total; ++it) {
    const auto& t = sh.time_ns[static_cast<size_t>(it)];
    times.push_back(*std::max_element(t.begin(), t.end()) / 1e3);
  }
  std::nth_element(times.begin(), times.begin() + static_cast<ptrdiff_t>(times.size() / 2),
                   times.end());
  allreduce::Row row;
  row.count = sh.count;
  row.bytes = sh.count * sizeof(float);
  row.time_us = times[times.size() / 2];
  row.formula_us = std::numeric_limits<double>::quiet_NaN();
  row.algbw = row.time_us > 0 ? static_cast<double>(row.bytes) / (row.time_us * 1e3) : 0;
  row.busbw = row.algbw * busbw_factor;
  for (uint64_t w : sh.wrong) row.wrong += w;
  row.wire_bytes_per_rank = *std::max_element(sh.wire.begin(), sh.wire.end());
  return row;
}

}  // namespace rp::apps
