// The EP all-to-alls' wire format (ExecutorOptions::ep_codec, schedule/ep_wire.h): with a lossy
// codec the emulator and the predictor still agree to the nanosecond; the EP bytes each device puts
// on the wire follow the closed form of docs/collectives.md "All-to-all" (counts metadata and INT8
// scales included) for the run's own routing; and the run is bit-identical to the serial reference
// whose wire round-trips exactly the blocks that cross EP ranks (EpWireOracle) — while it differs
// from the exact reference, so the codec is really applied.
#include <cstdio>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/model/reference_trainer.h"
#include "schedule/ep_wire.h"
#include "schedule/executor.h"
#include "tests/schedule/ep_helpers.h"

namespace rp::schedule {
namespace {

using comm::Codec;

struct CodecCase {
  EpSetup setup;
  Codec codec = Codec::kFp32;
  uint64_t segment_bytes = 4096;
};

std::string CaseName(const CodecCase& c) {
  return absl::StrCat(comm::CodecName(c.codec), "_", Name(c.setup), "_seg", c.segment_bytes);
}

void PrintTo(const CodecCase& c, std::ostream* os) { *os << CaseName(c); }

ExecutorOptions CodecOptions(const CodecCase& c, int steps) {
  ExecutorOptions o = MakeOptions(c.setup, steps);
  o.ep_codec = c.codec;
  o.segment_bytes = c.segment_bytes;
  return o;
}

class ExecutorEpCodecTiming : public ::testing::TestWithParam<CodecCase> {};

// Every step's emulated time equals its prediction (the run's routing, the EP messages in the
// codec) to the nanosecond, and so do exposed communication and peer wait per device.
TEST_P(ExecutorEpCodecTiming, EmulatedEqualsPredicted) {
  const CodecCase c = GetParam();
  absl::StatusOr<RunResult> r = CreateAndRun(CodecOptions(c, 3));
  ASSERT_TRUE(r.ok()) << r.status();
  for (const StepRecord& st : r->steps) {
    EXPECT_EQ(st.emulated_ms, st.predicted_ms) << "step " << st.step;
    EXPECT_EQ(st.replica_divergence, 0.0) << "step " << st.step;
  }
  EXPECT_EQ(r->emulated_step_ms, r->predicted_step_ms);
  for (const DeviceReport& d : r->devices) {
    EXPECT_GT(d.modeled_ep_bytes, 0u) << "rank " << d.rank;
    EXPECT_EQ(d.emulated.exposed_comm_ms, d.predicted.exposed_comm_ms) << "rank " << d.rank;
    EXPECT_EQ(d.emulated.peer_wait_ms, d.predicted.peer_wait_ms) << "rank " << d.rank;
  }
  std::printf("[figures] %s: step %.6f ms (predicted %.6f)\n", CaseName(c).c_str(),
              r->emulated_step_ms, r->predicted_step_ms);
}

INSTANTIATE_TEST_SUITE_P(
    Codecs, ExecutorEpCodecTiming,
    ::testing::Values(
        CodecCase{{}, Codec::kFp16},
        CodecCase{{}, Codec::kBf16, 100},
        CodecCase{{}, Codec::kInt8},
        CodecCase{{.dp = 4, .pp = 2, .tp = 2, .ep = 2, .top_k = 2}, Codec::kBf16},
        CodecCase{{.dp = 4, .pp = 1, .tp = 1, .ep = 4, .capacity = 1.0}, Codec::kInt8, 100},
        CodecCase{{.dp = 4, .pp = 2, .tp = 1, .ep = 4, .top_k = 2,
                   .kind = ScheduleKind::kZeroBubbleH1},
                  Codec::kFp16}),
    [](const ::testing::TestParamInfo<CodecCase>& p) { return CaseName(p.param); });

// Bytes of one block of z FP32 elements in messages of at most g (docs/collectives.md: W(z)).
uint64_t BlockWireBytes(Codec codec, uint64_t z, uint64_t g) {
  switch (codec) {
    case Codec::kFp32: return 4 * z;
    case Codec::kFp16:
    case Codec::kBf16: return 2 * z;
    case Codec::kInt8: return z + 4 * ((z + g - 1) / g);  // one 4-byte scale per message
  }
  return 0;
}

class ExecutorEpCodecBytes : public ::testing::TestWithParam<Codec> {};

// One step of dp 4 × ep 4 (pp 1, top-2, a real row timed as itself): every device's EP bytes, real
// and modeled, equal Σ over MoE blocks, micro-batches, the forward and the backward pass of
//   Σ_{p ≠ q} (8·E/ep + W(d·rows(q → p)))   dispatch (counts per local expert of p, then rows)
// + Σ_{p ≠ q} (8 + W(d·rows(p → q)))        combine (one count, the rows p received back)
// with rows from the step's recorded routing and W(z) = 4z (FP32), 2z (FP16, BF16),
// z + 4⌈z/g⌉ (INT8, g = segment_bytes / 4 = 25 elements: rows of 32 straddle messages).
TEST_P(ExecutorEpCodecBytes, FollowTheClosedForm) {
  const Codec codec = GetParam();
  const CodecCase c{{.dp = 4, .pp = 1, .tp = 1, .ep = 4, .top_k = 2}, codec, 100};
  const ExecutorOptions o = CodecOptions(c, 1);
  absl::StatusOr<RunResult> r = CreateAndRun(o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->steps.size(), 1u);
  const StepRouting& routing = r->steps[0].routing;
  ASSERT_FALSE(routing.empty());
  const int ep = 4, experts = o.model.moe.experts, per = experts / ep, width = 32;
  const uint64_t g = c.segment_bytes / 4;
  std::vector<int> group;
  for (int q = 0; q < ep; ++q) group.push_back(q);  // dp 4 = one EP group, EP rank = replica
  uint64_t all = 0, fp32_all = 0;
  for (const DeviceReport& d : r->devices) {
    const int q = d.rank;  // pp = tp = 1: rank = replica
    uint64_t want = 0, fp32 = 0;
    for (int block = 0; block < routing.blocks; ++block) {
      for (int mb = 0; mb < o.program.num_micro_batches; ++mb) {
        for (int p = 0; p < ep; ++p) {
          if (p == q) continue;
          const uint64_t out = static_cast<uint64_t>(EpRows(routing, block, mb, group, per, q, p));
          const uint64_t back = static_cast<uint64_t>(EpRows(routing, block, mb, group, per, p, q));
          const uint64_t counts = 8 * static_cast<uint64_t>(per) + 8;
          // Forward and backward: the same blocks each way.
          want += 2 * (counts + BlockWireBytes(codec, width * out, g) +
                       BlockWireBytes(codec, width * back, g));
          fp32 += 2 * (counts + 4 * width * (out + back));
        }
      }
    }
    EXPECT_EQ(d.ep_bytes, want) << "rank " << q;
    EXPECT_EQ(d.modeled_ep_bytes, want) << "rank " << q;
    all += want;
    fp32_all += fp32;
  }
  EXPECT_GT(all, 0u);
  if (codec != Codec::kFp32) {
    EXPECT_LT(all, fp32_all) << "a lossy codec shrinks the EP bytes";
  }
  std::printf("[figures] %s: EP wire bytes %llu (FP32 would be %llu, %.3f)\n", comm::CodecName(codec),
              static_cast<unsigned long long>(all), static_cast<unsigned long long>(fp32_all),
              static_cast<double>(all) / static_cast<double>(fp32_all));
}

INSTANTIATE_TEST_SUITE_P(Codecs, ExecutorEpCodecBytes, ::testing::ValuesIn(comm::kAllCodecs),
                         [](const ::testing::TestParamInfo<Codec>& p) {
                           return std::string(comm::CodecName(p.param));
                         });

class ExecutorEpCodecExact : public ::testing::TestWithParam<CodecCase> {};

// Whether the run's loss of every step and every device's parameters equal the reference's bit
// for bit (replica dp of EP rank dp % ep compared with the reference's shard of that EP rank).
struct Match {
  bool losses = true, params = true;
  size_t compared = 0;
};
Match CompareToReference(const ExecutorOptions& o, Executor& ex, const RunResult& run,
                         const ReferenceOptions& ro) {
  Match m;
  absl::StatusOr<Dataset> data = Dataset::Create(o.dataset);
  EXPECT_TRUE(data.ok());
  absl::StatusOr<std::unique_ptr<ReferenceTrainer>> ref = ReferenceTrainer::Create(ro, &*data);
  EXPECT_TRUE(ref.ok()) << ref.status();
  if (!data.ok() || !ref.ok()) return {false, false, 0};
  for (size_t i = 0; i < run.steps.size(); ++i) {
    absl::StatusOr<StepResult> e = (*ref)->Step();
    EXPECT_TRUE(e.ok()) << e.status();
    if (!e.ok()) return {false, false, 0};
    m.losses = m.losses && std::memcmp(&run.steps[i].loss, &e->loss, sizeof(double)) == 0;
  }
  const ParallelGrid& grid = ex.grid();
  for (int rank = 0; rank < grid.world_size(); ++rank) {
    const Coord co = grid.CoordOf(rank);
    for (int ch = 0; ch < o.program.num_chunks; ++ch) {
      absl::StatusOr<std::vector<float>> w = ex.Parameters(rank, ch);
      EXPECT_TRUE(w.ok()) << w.status();
      const std::span<const float> want =
          (*ref)->stage(o.program.ModelStage(co.pp, ch), co.tp, co.dp % o.ep).params();
      m.params = m.params && w.ok() && w->size() == want.size() &&
                 std::memcmp(w->data(), want.data(), want.size() * sizeof(float)) == 0;
      m.compared += want.size();
    }
  }
  return m;
}

// A lossy EP run is bit-identical to the reference that round-trips exactly the blocks crossing EP
// ranks through the codec in the run's messages (EpWireOracle), and NOT to the exact reference.
TEST_P(ExecutorEpCodecExact, TrainsBitIdenticallyToTheReferenceWithTheSameWire) {
  const CodecCase c = GetParam();
  constexpr int kSteps = 3;
  const ExecutorOptions o = CodecOptions(c, kSteps);
  absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(o);
  ASSERT_TRUE(ex.ok()) << ex.status();
  absl::StatusOr<RunResult> r = (*ex)->Run();
  ASSERT_TRUE(r.ok()) << r.status();
  for (const StepRecord& st : r->steps) EXPECT_EQ(st.replica_divergence, 0.0) << st.step;

  absl::StatusOr<ExecutionPlan> plan = BuildPlan(PlanOptionsFor(o));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ReferenceOptions with_wire = ReferenceFor(o, *plan);
  with_wire.ep_wire = EpWireOracle(*plan);
  ASSERT_TRUE(with_wire.ep_wire != nullptr);
  const Match same = CompareToReference(o, **ex, *r, with_wire);
  EXPECT_TRUE(same.losses) << "every step's loss, bit for bit";
  EXPECT_TRUE(same.params) << "every parameter of every device, bit for bit";
  EXPECT_GT(same.compared, 0u);

  const Match exact = CompareToReference(o, **ex, *r, ReferenceFor(o, *plan));
  EXPECT_FALSE(exact.losses && exact.params) << "the codec changed nothing: is it applied?";
  std::printf("[figures] %s: loss %.6f -> %.6f bit-identical to the wire reference over %d steps "
              "(%zu parameters); exact reference: losses %s, parameters %s\n",
              CaseName(c).c_str(), r->steps.front().loss, r->steps.back().loss, kSteps,
              same.compared, exact.losses ? "equal" : "differ", exact.params ? "equal" : "differ");
}

INSTANTIATE_TEST_SUITE_P(
    Codecs, ExecutorEpCodecExact,
    ::testing::Values(
        CodecCase{{.dp = 2, .pp = 2, .tp = 1, .ep = 2, .top_k = 1}, Codec::kFp16},
        CodecCase{{.dp = 4, .pp = 2, .tp = 2, .ep = 2, .top_k = 2}, Codec::kBf16},
        CodecCase{{.dp = 4, .pp = 1, .tp = 1, .ep = 4, .top_k = 2, .capacity = 1.0},
                  Codec::kInt8},
        // Messages of 25 elements: rows straddle them, INT8 takes a scale per message.
        CodecCase{{.dp = 4, .pp = 2, .tp = 1, .ep = 4, .top_k = 2}, Codec::kInt8, 100},
        CodecCase{{.dp = 2, .pp = 2, .tp = 1, .ep = 2, .top_k = 2, .capacity = 1.0,
                   .kind = ScheduleKind::kZeroBubbleH1},
                  Codec::kInt8, 100}),
    [](const ::testing::TestParamInfo<CodecCase>& p) { return CaseName(p.param); });

TEST(ExecutorEpCodec, Fp32HasNoOracleAndKeepsTheExactReference) {
  const ExecutorOptions o = CodecOptions({{}, Codec::kFp32}, 1);
  absl::StatusOr<ExecutionPlan> plan = BuildPlan(PlanOptionsFor(o));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(EpWireOracle(*plan) == nullptr);
}

}  // namespace
}  // namespace rp::schedule
