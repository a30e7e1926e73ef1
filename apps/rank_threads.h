// Internal to `ringpipe allreduce` and `ringpipe alltoall` (apps/allreduce_run.cc,
// apps/alltoall_run.cc): ranks 0..n-1 and one std::thread per rank running a body to completion.
#pragma once

#include <functional>
#include <thread>
#include <vector>

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

}  // namespace rp::apps
