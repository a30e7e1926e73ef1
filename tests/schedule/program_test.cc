// Generators and validator: every generated program validates, holds the published activation peaks,
// and broken programs are rejected with a Status that names the problem.
#include <algorithm>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedule/generators.h"
#include "schedule/program.h"
#include "schedule/validator.h"

namespace rp::schedule {
namespace {

using ::testing::HasSubstr;

struct Case {
  ScheduleKind kind;
  int p, m, v;
  int group = 0;       // interleaved microbatch_group (0: p)
  bool fused = true;   // DualPipe(V) fused_fb
};

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (int p = 1; p <= 6; ++p) {
    for (int m = 1; m <= 12; ++m) {
      cases.push_back({ScheduleKind::kGPipe, p, m, 1});
      cases.push_back({ScheduleKind::kOneFOneB, p, m, 1});
      cases.push_back({ScheduleKind::kZeroBubbleH1, p, m, 1});
      cases.push_back({ScheduleKind::kZeroBubbleV, p, m, 2});
      if (m >= 2 * p) {
        cases.push_back({ScheduleKind::kZeroBubbleH2, p, m, 1});
        cases.push_back({ScheduleKind::kDualPipeV, p, m, 2, 0, true});
        cases.push_back({ScheduleKind::kDualPipeV, p, m, 2, 0, false});
        if (p % 2 == 0 && m % 2 == 0) {
          cases.push_back({ScheduleKind::kDualPipe, p, m, 2, 0, true});
          cases.push_back({ScheduleKind::kDualPipe, p, m, 2, 0, false});
        }
      }
      // Megatron's groups: every N in [p, m] with m mod N in {0} ∪ [p, N).
      for (int n = p; n <= m; ++n) {
        if (m % n != 0 && m % n < p) continue;
        for (int v = 1; v <= 3; ++v) cases.push_back({ScheduleKind::kInterleaved, p, m, v, n});
      }
    }
  }
  return cases;
}

TEST(Generators, EveryProgramValidatesForAnyPAndM) {
  for (const Case& c : AllCases()) {
    SCOPED_TRACE(::testing::Message() << ScheduleName(c.kind) << " p=" << c.p << " m=" << c.m
                                      << " v=" << c.v << " N=" << c.group << " fused=" << c.fused);
    auto prog = BuildSchedule(c.kind, {.num_ranks = c.p, .num_micro_batches = c.m, .num_chunks = c.v,
                                       .activation_bytes = 64, .tp_allreduce_bytes = 16,
                                       .gradient_bytes = 4000, .buckets_per_chunk = 2,
                                       .microbatch_group = c.group, .fused_fb = c.fused});
    ASSERT_TRUE(prog.ok()) << prog.status();
    auto rep = Validate(*prog);
    ASSERT_TRUE(rep.ok()) << rep.status();
    for (int s = 0; s < c.p; ++s) {
      EXPECT_EQ(rep->num_buckets[s], 2 * c.v);
      const int peak = rep->peak_in_flight[s];
      const int awaiting = rep->peak_awaiting_backward[s];
      switch (c.kind) {
        case ScheduleKind::kGPipe: EXPECT_EQ(peak, c.m) << "rank " << s; break;
        case ScheduleKind::kOneFOneB:
          EXPECT_EQ(peak, std::min(c.p - s, c.m)) << "rank " << s;
          EXPECT_EQ(awaiting, peak);
          break;
        case ScheduleKind::kZeroBubbleH1:
          // Same F/B order as 1F1B; deferred W's keep activations, up to 1F1B's peak min(p, m).
          EXPECT_EQ(awaiting, std::min(c.p - s, c.m)) << "rank " << s;
          EXPECT_EQ(peak, std::min(c.p, c.m)) << "rank " << s;
          break;
        case ScheduleKind::kZeroBubbleH2:  // SCHEDULES.md: 2p − 1 in flight (on every rank)
          EXPECT_EQ(peak, 2 * c.p - 1) << "rank " << s;
          break;
        case ScheduleKind::kZeroBubbleV:  // 1F1B's memory: 2p chunks (p micro-batches of 2 chunks)
          if (c.m >= 2 * c.p - 1) {
            EXPECT_EQ(peak, 2 * c.p) << "rank " << s;
          }
          break;
        case ScheduleKind::kDualPipeV:  // DeepSeek's README: PP + 1 chunks, PP = 2p stages
          EXPECT_EQ(peak, 2 * c.p + 1) << "rank " << s;
          break;
        case ScheduleKind::kDualPipe:  // PP + 1 with PP = p stages
          EXPECT_EQ(peak, c.p + 1) << "rank " << s;
          break;
        default: {
          // Megatron interleaved: rank s holds its warm-up forwards, 2(p − s − 1) + (v − 1)N chunks
          // (at most all m·v), plus the one of its first steady-state forward.
          const int warmup = 2 * (c.p - s - 1) + (c.v - 1) * c.group;
          EXPECT_EQ(peak, std::min(c.m * c.v, warmup + 1)) << "rank " << s;
          break;
        }
      }
    }
  }
}

TEST(Generators, OneFOneBHasTheDocumentedOrder) {
  auto prog = BuildOneFOneB({.num_ranks = 2, .num_micro_batches = 2});
  ASSERT_TRUE(prog.ok());
  auto str = [&](int s) {
    std::string out;
    for (const Op& op : prog->ranks[s]) out += ToString(op) + " ";
    return out;
  };
  EXPECT_EQ(str(0), "F0 SendAct0->1 F1 SendAct1->1 RecvGrad0<-1 B0 RecvGrad1<-1 B1 Opt ");
  EXPECT_EQ(str(1), "RecvAct0<-0 F0 B0 SendGrad0->0 RecvAct1<-0 F1 B1 SendGrad1->0 Opt ");
}

TEST(Generators, SplitGradientBucketsAcrossChunksAndBuckets) {
  auto prog = BuildInterleaved({.num_ranks = 2, .num_micro_batches = 2, .num_chunks = 2,
                                .gradient_bytes = 4 * 7, .buckets_per_chunk = 2});
  ASSERT_TRUE(prog.ok());
  std::vector<uint64_t> bytes;
  for (const Op& op : prog->ranks[0]) {
    if (op.kind == OpKind::kAllReduce) bytes.push_back(op.bytes);
  }
  // 7 elements: chunk 0 gets 4, chunk 1 gets 3; chunk 1's backward finishes first.
  EXPECT_EQ(bytes, (std::vector<uint64_t>{8, 4, 8, 8}));
}

TEST(Generators, RejectBadSizesNamingTheField) {
  auto st = BuildOneFOneB({.num_ranks = 0}).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("num_ranks"));
  st = BuildGPipe({.num_ranks = 2, .num_micro_batches = 0}).status();
  EXPECT_THAT(std::string(st.message()), HasSubstr("num_micro_batches"));
  st = BuildZeroBubble({.num_ranks = 2, .gradient_bytes = 6}).status();
  EXPECT_THAT(std::string(st.message()), HasSubstr("multiple of 4"));
}

// The one-chunk schedules refuse num_chunks != 1 as ZB-H2 does: BuildOneFOneB({.num_chunks = 2})
// built a one-chunk program while the caller's per-stage sizes counted two chunks per rank.
TEST(Generators, OneChunkSchedulesRefuseMoreChunksNamingNumChunks) {
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::kOneFOneB, ScheduleKind::kZeroBubbleH1,
                            ScheduleKind::kZeroBubbleH2}) {
    SCOPED_TRACE(ScheduleName(kind));
    auto prog = BuildSchedule(kind, {.num_ranks = 2, .num_micro_batches = 4, .num_chunks = 2});
    ASSERT_FALSE(prog.ok());
    EXPECT_EQ(prog.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(prog.status().message()), HasSubstr("num_chunks (v) must be 1"));
    EXPECT_TRUE(BuildSchedule(kind, {.num_ranks = 2, .num_micro_batches = 4, .num_chunks = 1}).ok());
  }
}

TEST(Generators, InterleavedStatesItsConditionOnM) {
  auto st = BuildInterleaved({.num_ranks = 4, .num_micro_batches = 6, .num_chunks = 2}).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("m=6"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("multiple of num_ranks (p=4)"));
}

TEST(Validator, RejectsTheS2TableWhereTheLastStageRunsB0First) {
  // SCENARIOS.md S2: K = 3 stages, M = 6; the prototype's last stage ran B0 at step 0.
  auto prog = BuildOneFOneB({.num_ranks = 3, .num_micro_batches = 6});
  ASSERT_TRUE(prog.ok());
  auto& last = prog->ranks[2];
  auto b0 = std::find_if(last.begin(), last.end(), [](const Op& op) { return op.kind == OpKind::kBackward; });
  const Op b = *b0;
  last.erase(b0);
  last.insert(last.begin(), b);
  auto st = Validate(*prog).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("dependency violated: rank 2 op #0 B0"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("its own F"));
}

TEST(Validator, ReportsTheStuckOpsOfASwappedSendRecvDeadlock) {
  Program prog;
  prog.num_ranks = 2;
  prog.num_micro_batches = 1;
  // Rank 0 waits for the gradient before sending the activation that produces it.
  prog.ranks = {
      {{.kind = OpKind::kForward, .micro_batch = 0},
       {.kind = OpKind::kRecvGrad, .micro_batch = 0, .peer = 1},
       {.kind = OpKind::kSendAct, .micro_batch = 0, .peer = 1},
       {.kind = OpKind::kBackward, .micro_batch = 0},
       {.kind = OpKind::kOptimizerStep}},
      {{.kind = OpKind::kRecvAct, .micro_batch = 0, .peer = 0},
       {.kind = OpKind::kForward, .micro_batch = 0},
       {.kind = OpKind::kBackward, .micro_batch = 0},
       {.kind = OpKind::kSendGrad, .micro_batch = 0, .peer = 0},
       {.kind = OpKind::kOptimizerStep}}};
  auto st = Validate(prog).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(st.message()), HasSubstr("deadlock"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("rank 0 op #1 RecvGrad0<-1 waits for rank 1"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("rank 1 op #0 RecvAct0<-0 waits for rank 0"));
  // Restoring the order makes it valid.
  std::swap(prog.ranks[0][1], prog.ranks[0][2]);
  EXPECT_TRUE(Validate(prog).ok());
}

TEST(Validator, RendezvousSendsDeadlockOneFOneBThatBufferedChannelsRun) {
  // 1F1B's rank 0 sends two activations before receiving a gradient; with blocking (rendezvous) sends
  // rank 1 is stuck sending gradient 0. Buffered channels (the Executor's) run it.
  auto prog = BuildOneFOneB({.num_ranks = 2, .num_micro_batches = 2});
  ASSERT_TRUE(prog.ok());
  EXPECT_TRUE(Validate(*prog).ok());
  auto st = Validate(*prog, {.rendezvous_sends = true}).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(st.message()), HasSubstr("rank 0 op #3 SendAct1->1"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("rank 1 op #3 SendGrad0->0"));
  // GPipe with m = 1 alternates strictly and passes even the rendezvous check.
  auto g = BuildGPipe({.num_ranks = 3, .num_micro_batches = 1});
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(Validate(*g, {.rendezvous_sends = true}).ok());
}

TEST(Validator, RejectsReceivesOutOfChannelOrder) {
  auto prog = BuildGPipe({.num_ranks = 2, .num_micro_batches = 2});
  ASSERT_TRUE(prog.ok());
  auto& r1 = prog->ranks[1];  // RecvAct0 F0 RecvAct1 F1 ...: receive 1 before 0
  std::swap(r1[0], r1[2]);
  std::swap(r1[1], r1[3]);
  auto st = Validate(*prog).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("channel order: rank 1 op #0 RecvAct1<-0"));
}

TEST(Validator, RejectsDuplicatesMissingOpsAndBadPeers) {
  auto prog = BuildGPipe({.num_ranks = 2, .num_micro_batches = 2});
  ASSERT_TRUE(prog.ok());
  Program dup = *prog;
  dup.ranks[0].insert(dup.ranks[0].begin(), Op{.kind = OpKind::kForward, .micro_batch = 0});
  EXPECT_THAT(std::string(Validate(dup).status().message()), HasSubstr("appears 2 times"));

  Program bad_peer = *prog;
  bad_peer.ranks[0][1].peer = 0;
  EXPECT_THAT(std::string(Validate(bad_peer).status().message()), HasSubstr("peer must be rank 1"));

  Program no_opt = *prog;
  no_opt.ranks[1].pop_back();
  EXPECT_THAT(std::string(Validate(no_opt).status().message()), HasSubstr("exactly one optimizer"));

  Program bad_mb = *prog;
  bad_mb.ranks[0][0].micro_batch = 5;
  EXPECT_THAT(std::string(Validate(bad_mb).status().message()), HasSubstr("micro_batch out of range"));
}

TEST(Validator, RejectsAGradientBucketBeforeItsChunksLastBackward) {
  auto prog = BuildOneFOneB({.num_ranks = 2, .num_micro_batches = 2, .gradient_bytes = 64});
  ASSERT_TRUE(prog.ok());
  auto& r0 = prog->ranks[0];
  auto ar = std::find_if(r0.begin(), r0.end(), [](const Op& op) { return op.kind == OpKind::kAllReduce; });
  const Op op = *ar;
  r0.erase(ar);
  r0.insert(r0.begin() + 2, op);
  auto st = Validate(*prog).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("starts before every backward of chunk 0"));
}

}  // namespace
}  // namespace rp::schedule
