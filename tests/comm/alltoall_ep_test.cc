// MoE expert parallelism on real threads with the real all-to-all: EP shards, one thread each,
// exchange tokens through comm::AllToAllV (the adapter below is what the executor implements) and
// end with exactly the bits of the serial EP group (RunStageGroupSerial) — outputs, input gradients
// and every weight gradient, for fused and split (B/W) backward.
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "comm/alltoall.h"
#include "gtest/gtest.h"
#include "runtime/fabric.h"
#include "runtime/model/mlp.h"
#include "runtime/model/stage_group.h"
#include "runtime/status_macros.h"

namespace rp::comm {
namespace {

// The EP exchange over the all-to-all of the EP group: counts in rows -> elements. Each call starts
// when the rank's previous one ended (*cursor; timed communicators need monotone modeled time).
EpExchangeFn OverComm(RankComm* rc, Nanos* cursor) {
  return [rc, cursor](EpExchange& ex) -> absl::Status {
    std::vector<int64_t> elems(ex.send_counts.begin(), ex.send_counts.end());
    for (int64_t& c : elems) c *= ex.row_width;
    std::vector<int64_t> recv_elems;
    RP_ASSIGN_OR_RETURN(auto op, AllToAllV::Create(rc, ex.send, elems, ex.bins, &ex.recv,
                                                   &recv_elems, {.segment_bytes = 256}));
    RP_RETURN_IF_ERROR(op.Run(*cursor));
    *cursor = op.result().end;
    ex.recv_counts.resize(recv_elems.size());
    for (size_t i = 0; i < recv_elems.size(); ++i) {
      ex.recv_counts[i] = recv_elems[i] / ex.row_width;
    }
    return absl::OkStatus();
  };
}

Tensor Random(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Tensor t(rows, cols);
  for (float& v : t.span()) v = u(rng);
  return t;
}

bool SameBits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Shards {
  std::vector<std::unique_ptr<MlpStage>> stages;
  std::vector<MlpStage*> raw() const {
    std::vector<MlpStage*> out;
    for (const auto& s : stages) out.push_back(s.get());
    return out;
  }
};

Shards MakeShards(const MlpConfig& c, const ModelPartition& p, int ep) {
  Shards s;
  for (int q = 0; q < ep; ++q) s.stages.push_back(*MlpStage::Create(c, p, 1, 0, q));
  return s;
}

// (split backward, timed communicator: every message through a fabric)
class AllToAllEp : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(AllToAllEp, ThreadedEpShardsMatchTheSerialGroupBitwise) {
  const auto [split, timed] = GetParam();
  const int ep = 4, rows = 12;
  MlpConfig c;
  c.input_dim = 6;
  c.hidden = {16, 16, 16, 16};
  c.classes = 5;
  c.moe.layers = {1, 3};
  c.moe.experts = 8;
  c.moe.top_k = 2;
  c.moe.expert_hidden = 12;
  c.moe.capacity_factor = 1.0;          // drops
  const std::vector<int> counts{1, 4};  // stage 1: MoE, dense, MoE, dense
  const ModelPartition p = *PartitionMlp(c, 2, 1, counts, ep);
  Shards threaded = MakeShards(c, p, ep), serial = MakeShards(c, p, ep);
  // Inputs per source and micro-batch.
  std::vector<std::vector<Tensor>> x(2), dy(2);
  for (int j = 0; j < 2; ++j) {
    for (int q = 0; q < ep; ++q) {
      x[j].push_back(Random(rows, 16, static_cast<uint32_t>(10 * j + q)));
      dy[j].push_back(Random(rows, 5, static_cast<uint32_t>(100 + 10 * j + q)));
    }
  }
  // Serial: F0 F1 B0 B1 on the group.
  std::vector<std::vector<Tensor>> y_serial(2), dx_serial(2);
  for (int j = 0; j < 2; ++j) {
    std::vector<ConstMatrixView> in(x[j].begin(), x[j].end());
    y_serial[j] = *RunStageGroupSerial(serial.raw(), 1, MlpStage::Pass::kForward, j, in);
  }
  for (int j = 0; j < 2; ++j) {
    std::vector<ConstMatrixView> in(dy[j].begin(), dy[j].end());
    dx_serial[j] = *RunStageGroupSerial(serial.raw(), 1, MlpStage::Pass::kBackward, j, in);
  }
  // Threaded: one thread per EP rank, the same op order.
  std::vector<std::vector<Tensor>> y(2, std::vector<Tensor>(ep)), dx = y;
  std::unique_ptr<Fabric> fabric;
  CommunicatorOptions co;
  co.devices = {0, 1, 2, 3};
  if (timed) {
    LinkSpec spec;
    spec.intra_node = {.alpha = Nanos(3000), .bandwidth_gbps = 300, .overhead = Nanos(400)};
    spec.devices_per_node = 4;
    fabric = *Fabric::Create({.links = spec, .num_devices = 4, .faults = {},
                              .tie_rank = {0, 1, 2, 3}, .on_commit = nullptr});
    co.fabric = fabric.get();
    co.lps = {0, 1, 2, 3};
  }
  auto comm = *Communicator::Create(co);
  std::vector<Nanos> cursor(ep, Nanos(0));
  std::vector<absl::Status> status(ep);
  std::vector<std::thread> threads;
  for (int q = 0; q < ep; ++q) {
    threads.emplace_back([&, q] {
      status[q] = [&]() -> absl::Status {
        MlpStage& st = *threaded.stages[q];
        const EpExchangeFn exchange = OverComm(&comm->rank(q), &cursor[q]);
        for (int j = 0; j < 2; ++j) {
          RP_ASSIGN_OR_RETURN(y[j][q], st.Forward(j, x[j][q], nullptr, exchange));
        }
        for (int j = 0; j < 2; ++j) {
          if (split) {
            RP_ASSIGN_OR_RETURN(dx[j][q], st.BackwardInput(j, dy[j][q], nullptr, exchange));
          } else {
            RP_ASSIGN_OR_RETURN(dx[j][q], st.Backward(j, dy[j][q], nullptr, nullptr, exchange));
          }
        }
        if (split) {
          for (int j = 0; j < 2; ++j) RP_RETURN_IF_ERROR(st.BackwardWeight(j));
        }
        if (fabric) fabric->Finish(q);
        return absl::OkStatus();
      }();
    });
  }
  for (auto& t : threads) t.join();
  for (int q = 0; q < ep; ++q) {
    ASSERT_TRUE(status[q].ok()) << "rank " << q << ": " << status[q];
    for (int j = 0; j < 2; ++j) {
      EXPECT_TRUE(SameBits(y[j][q].span(), y_serial[j][q].span())) << "y rank " << q;
      EXPECT_TRUE(SameBits(dx[j][q].span(), dx_serial[j][q].span())) << "dx rank " << q;
    }
    EXPECT_TRUE(SameBits(threaded.stages[q]->grads(), serial.stages[q]->grads())) << q;
    EXPECT_EQ(threaded.stages[q]->activation_bytes(), 0);
    // Each rank sent something on the wire (tokens reached other ranks' experts).
    EXPECT_GT(comm->rank(q).stats().collective_bytes[0], 0u);
    if (timed) {
      EXPECT_GT(cursor[q], Nanos(0)) << "modeled time passed";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backward, AllToAllEp, ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<bool, bool>>& p) {
                           return std::string(std::get<0>(p.param) ? "split" : "fused") +
                                  (std::get<1>(p.param) ? "_timed" : "_untimed");
                         });

}  // namespace
}  // namespace rp::comm
