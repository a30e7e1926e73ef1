// Helpers of the timed-communicator tests (timed_collectives_test.cc, timed_limits_test.cc): a link
// spec, a fabric whose LP i is driven by thread i, a timed communicator on it, and threads that run a
// body per rank.
#pragma once

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "gtest/gtest.h"
#include "runtime/fabric.h"
#include "tests/comm/collectives_helpers.h"

namespace rp::comm {

constexpr Nanos kStart{1000};

inline LinkSpec Spec(int nics_per_node = 0) {
  LinkSpec s;
  s.intra_node = {.alpha = Nanos(3000), .bandwidth_gbps = 300, .overhead = Nanos(400)};
  s.inter_node = {.alpha = Nanos(5000), .bandwidth_gbps = 25, .overhead = Nanos(3000)};
  s.devices_per_node = 8;
  s.nics_per_node = nics_per_node;
  return s;
}

// A fabric whose LP i is driven by thread i, ties by LP id.
inline std::unique_ptr<Fabric> MakeFabric(int lps, int devices, const LinkSpec& spec) {
  std::vector<uint64_t> tie;
  for (int i = 0; i < lps; ++i) tie.push_back(static_cast<uint64_t>(i));
  auto f = Fabric::Create({.links = spec, .num_devices = devices, .tie_rank = tie});
  EXPECT_TRUE(f.ok()) << f.status();
  return std::move(f).value();
}

inline std::unique_ptr<Communicator> MakeTimed(Fabric* fabric, std::vector<int> devices,
                                        std::vector<LpId> lps) {
  CommunicatorOptions o;
  o.devices = std::move(devices);
  o.fabric = fabric;
  o.lps = std::move(lps);
  auto c = Communicator::Create(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return std::move(c).value();
}

// A thread per rank running body(rank); each rank's Status (collectives_helpers.h's RankThreads).
inline std::vector<absl::Status> RunThreads(int n, const std::function<absl::Status(int)>& body) {
  return testing::RankThreads::Run(n, body);
}

}  // namespace rp::comm
