// Op order per rank against each source's rule, restated here (and, for small cases, spelled out by
// hand from the source), and the conditions each generator refuses, naming the field.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedule/generators.h"
#include "schedule/orders.h"
#include "schedule/program.h"

namespace rp::schedule {
namespace {

using ::testing::HasSubstr;

// A rank's compute ops without micro-batch ids: F<chunk>, B<chunk> (whole), I<chunk> (input gradient),
// W<chunk> (or W when `w_chunk` is false), F<c>&B<c'>.
std::vector<std::string> Tokens(const Program& prog, int rank, bool w_chunk = true) {
  std::vector<std::string> out;
  for (const Op& op : prog.ranks[rank]) {
    const std::string c = std::to_string(op.chunk);
    switch (op.kind) {
      case OpKind::kForward: out.push_back("F" + c); break;
      case OpKind::kBackward: out.push_back("B" + c); break;
      case OpKind::kBackwardInput: out.push_back("I" + c); break;
      case OpKind::kWeightGrad: out.push_back(w_chunk ? "W" + c : "W"); break;
      case OpKind::kForwardBackward:
        out.push_back("F" + c + "&B" + std::to_string(op.backward_chunk));
        break;
      default: break;
    }
  }
  return out;
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    const size_t j = s.find(' ', i);
    const size_t end = j == std::string::npos ? s.size() : j;
    if (end > i) out.push_back(s.substr(i, end - i));
    i = end + 1;
  }
  return out;
}

// Appends `n` copies of `seq` (a space-separated token list) to `out`.
void Repeat(std::vector<std::string>& out, int n, const std::string& seq) {
  for (int i = 0; i < n; ++i) {
    for (const std::string& t : Split(seq)) out.push_back(t);
  }
}

// Every F (and every backward: B, Bi or F&B's B) of a chunk takes the chunk's micro-batches in order,
// from its direction's first; the W's of a chunk follow its Bi's, and with `fifo_w` (DeepSeek's
// WeightGradStore) all W's of the rank come in the order of the Bi's.
void ExpectMicroBatchOrder(const Program& prog, int rank, bool fifo_w = false) {
  std::vector<std::vector<int>> f(prog.num_chunks), b(prog.num_chunks);
  std::vector<std::pair<int, int>> bi, w;
  for (const Op& op : prog.ranks[rank]) {
    if (op.kind == OpKind::kForward || op.kind == OpKind::kForwardBackward) {
      f[op.chunk].push_back(op.micro_batch);
    }
    if (op.kind == OpKind::kBackward || op.kind == OpKind::kBackwardInput) {
      b[op.chunk].push_back(op.micro_batch);
    }
    if (op.kind == OpKind::kForwardBackward) b[op.backward_chunk].push_back(op.backward_micro_batch);
    if (op.kind == OpKind::kBackwardInput) bi.push_back({op.chunk, op.micro_batch});
    if (op.kind == OpKind::kWeightGrad) w.push_back({op.chunk, op.micro_batch});
  }
  for (int c = 0; c < prog.num_chunks; ++c) {
    const int d = prog.DirectionOf(rank, c);
    std::vector<int> want(prog.NumMicroBatches(d));
    for (size_t i = 0; i < want.size(); ++i) want[i] = prog.FirstMicroBatch(d) + static_cast<int>(i);
    EXPECT_EQ(f[c], want) << "rank " << rank << " chunk " << c << " forwards";
    EXPECT_EQ(b[c], want) << "rank " << rank << " chunk " << c << " backwards";
  }
  if (fifo_w) {
    EXPECT_EQ(w, bi) << "rank " << rank << ": W's in Bi order";
    return;
  }
  for (int c = 0; c < prog.num_chunks; ++c) {
    std::vector<int> wc, bic;
    for (auto [chunk, mb] : w) {
      if (chunk == c) wc.push_back(mb);
    }
    for (auto [chunk, mb] : bi) {
      if (chunk == c) bic.push_back(mb);
    }
    EXPECT_EQ(wc, bic) << "rank " << rank << " chunk " << c << ": W's in Bi order";
  }
}

TEST(ScheduleOrder, ZeroBubbleH2IsSailSgsHandSchedule) {
  // Spelled out from get_hand_schedule(p = 2, n = 4, warmup_c = 2).
  auto small = BuildZeroBubbleH2({.num_ranks = 2, .num_micro_batches = 4});
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(Tokens(*small, 0), Split("F0 F0 F0 I0 W0 F0 I0 W0 I0 W0 I0 W0"));
  EXPECT_EQ(Tokens(*small, 1), Split("F0 I0 F0 I0 F0 I0 W0 F0 I0 W0 W0 W0"));
  // The rule: (p − 1 − r)·2 warm-up F's; per micro-batch i: F while warm-up + i < m, I, and W once
  // warm-up + i >= 2(p − 1); then the remaining W's.
  for (int p = 1; p <= 6; ++p) {
    for (int m = 2 * p; m <= 2 * p + 5; ++m) {
      auto prog = BuildZeroBubbleH2({.num_ranks = p, .num_micro_batches = m});
      ASSERT_TRUE(prog.ok()) << prog.status();
      for (int r = 0; r < p; ++r) {
        const int warm = 2 * (p - 1 - r);
        std::vector<std::string> want;
        Repeat(want, warm, "F0");
        int ws = 0;
        for (int i = 0; i < m; ++i) {
          if (warm + i < m) want.push_back("F0");
          want.push_back("I0");
          if (warm + i >= 2 * (p - 1)) want.push_back("W0"), ++ws;
        }
        Repeat(want, m - ws, "W0");
        EXPECT_EQ(Tokens(*prog, r), want) << "p=" << p << " m=" << m << " rank " << r;
        ExpectMicroBatchOrder(*prog, r);
      }
    }
  }
}

TEST(ScheduleOrder, ZeroBubbleH1IsTheHandScheduleWithOneWarmUpForwardPerRank) {
  // get_hand_schedule(warmup_c = 1) asserts n >= 2p; our ZB-H1 (1F1B's order, W(k − r) after Bi(k))
  // is the same list there and also serves m < p.
  for (int p = 1; p <= 6; ++p) {
    for (int m = p; m <= 3 * p; ++m) {
      const ComputeOrder h1 = ZeroBubbleH1Order(p, m), hand = HandZeroBubbleOrder(p, m, 1);
      for (int r = 0; r < p; ++r) {
        ASSERT_EQ(h1[r].size(), hand[r].size()) << "p=" << p << " m=" << m << " rank " << r;
        for (size_t i = 0; i < h1[r].size(); ++i) {
          EXPECT_EQ(h1[r][i].kind, hand[r][i].kind);
          EXPECT_EQ(h1[r][i].mb, hand[r][i].mb);
        }
      }
    }
  }
}

TEST(ScheduleOrder, ZeroBubbleVIsPyTorchsScheduleZBVZeroBubble) {
  // Spelled out from ScheduleZBVZeroBubble._calculate_single_rank_operations, p = 2, m = 3.
  auto small = BuildZeroBubbleV({.num_ranks = 2, .num_micro_batches = 3, .num_chunks = 2});
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(Tokens(*small, 0), Split("F0 F0 F0 F1 I1 W1 F1 I1 W1 I0 W0 F1 I1 W1 I0 W0 I0 W0"));
  EXPECT_EQ(Tokens(*small, 1), Split("F0 F1 F0 F1 I1 W1 F0 I0 W0 F1 I1 W1 I0 I1 I0 W0 W1 W0"));
  // SCHEDULES.md's rule with m >= 2p − 1 (nothing skipped): (2(p − r) − 1)×F0; r×[F1 F0];
  // (p − r)×[F1 I1 W1]; the steady [F0] I0 W0 F1 I1 W1 until every F1 is done (F0 while any is left);
  // r×[I0 I1]; (p − r)×[I0 W0]; then the remaining W1's, then W0's.
  for (int p = 1; p <= 5; ++p) {
    for (int m = 2 * p - 1; m <= 2 * p + 4; ++m) {
      auto prog = BuildZeroBubbleV({.num_ranks = p, .num_micro_batches = m, .num_chunks = 2});
      ASSERT_TRUE(prog.ok()) << prog.status();
      for (int r = 0; r < p; ++r) {
        std::vector<std::string> want;
        Repeat(want, 2 * (p - r) - 1, "F0");
        Repeat(want, r, "F1 F0");
        Repeat(want, p - r, "F1 I1 W1");
        // The warm-up ran 2p − r − 1 F0's and p F1's; the steady phase adds one F1 per iteration until
        // F1 reaches m (m − p iterations), with an F0 while F0 has not reached m.
        const int f0_left = m - (2 * p - r - 1);
        const int steady = m - p;
        for (int i = 0; i < steady; ++i) {
          if (i < f0_left) want.push_back("F0");
          Repeat(want, 1, "I0 W0 F1 I1 W1");
        }
        Repeat(want, r, "I0 I1");
        Repeat(want, p - r, "I0 W0");
        Repeat(want, r, "W1");  // the W's of the r×[I0 I1] phase
        Repeat(want, r, "W0");
        EXPECT_EQ(Tokens(*prog, r), want) << "p=" << p << " m=" << m << " rank " << r;
        ExpectMicroBatchOrder(*prog, r);
      }
    }
  }
  // m < 2p − 1: PyTorch plans 2p − 1 micro-batches and drops the ops of the missing ones.
  auto few = BuildZeroBubbleV({.num_ranks = 4, .num_micro_batches = 3, .num_chunks = 2});
  ASSERT_TRUE(few.ok()) << few.status();
  for (int r = 0; r < 4; ++r) ExpectMicroBatchOrder(*few, r);
}

// DeepSeek's eight steps (dualpipev.py) for index r of a V of n ranks, m micro-batches per phase, in
// phase tokens (0: the chunk nearer the entry). W pops the oldest queued W.
std::vector<std::string> DualPipeSteps(int n, int r, int m, bool fused) {
  const std::string f0b1 = fused ? "F0&B1" : "F0 B1", f1b0 = fused ? "F1&B0" : "F1 B0";
  std::vector<std::string> want;
  Repeat(want, 2 * (n - r - 1), "F0");                  // 1
  Repeat(want, r + 1, "F0 F1");                         // 2
  Repeat(want, n - r - 1, "I1 W F1");                   // 3
  for (int i = 0; i < m - 2 * n + r + 1; ++i) {         // 4 (the turning rank's first pair apart)
    Repeat(want, 1, i == 0 && r == n - 1 ? "F0 B1" : f0b1);
    Repeat(want, 1, f1b0);
  }
  Repeat(want, n - r - 1, "B1 " + f1b0);                // 5
  const int split = (r + 1) / 2;                        // 6: zero bubble from iteration (r + 1) / 2
  for (int i = 0; i < r + 1; ++i) {
    const bool b1_split = i > split || (i == split && r % 2 == 1);
    const bool b0_split = i >= split;
    Repeat(want, 1, std::string(b1_split ? "I1 " : "B1 ") + (b0_split ? "I0" : "B0"));
  }
  Repeat(want, n - r - 1, "W I0");                      // 7
  Repeat(want, r + 1, "W");                             // 8
  return want;
}

std::vector<std::string> FlipChunks(std::vector<std::string> tokens) {
  for (std::string& t : tokens) {
    for (char& ch : t) ch = ch == '0' ? '1' : ch == '1' ? '0' : ch;
  }
  return tokens;
}

TEST(ScheduleOrder, DualPipeVIsDeepSeeksEightSteps) {
  // Spelled out from dualpipev.py, P = 2, 4 micro-batches, overlapped pairs fused.
  auto small = BuildDualPipeV({.num_ranks = 2, .num_micro_batches = 4, .num_chunks = 2});
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(Tokens(*small, 0, false),
            Split("F0 F0 F0 F1 I1 W F1 F0&B1 F1&B0 B1 F1&B0 B1 I0 W I0 W"));
  EXPECT_EQ(Tokens(*small, 1, false), Split("F0 F1 F0 F1 F0 B1 F1&B0 F0&B1 F1&B0 B1 B0 I1 I0 W W"));
  for (bool fused : {true, false}) {
    for (int p = 1; p <= 6; ++p) {
      for (int m = 2 * p; m <= 2 * p + 5; ++m) {
        auto prog = BuildDualPipeV({.num_ranks = p, .num_micro_batches = m, .num_chunks = 2,
                                    .fused_fb = fused});
        ASSERT_TRUE(prog.ok()) << prog.status();
        for (int r = 0; r < p; ++r) {
          EXPECT_EQ(Tokens(*prog, r, false), DualPipeSteps(p, r, m, fused))
              << "p=" << p << " m=" << m << " rank " << r << " fused=" << fused;
          ExpectMicroBatchOrder(*prog, r, /*fifo_w=*/true);
        }
      }
    }
  }
}

TEST(ScheduleOrder, DualPipeRunsTheStepsOnHalfRanksWithPhasesFlippedInTheSecondHalf) {
  // dualpipe.py: n = P/2, index min(r, P − 1 − r), m/2 micro-batches per direction; on ranks >= P/2
  // phase 0 is direction 1 (chunk 1). Direction 0 takes micro-batches [0, m/2), direction 1 the rest.
  for (bool fused : {true, false}) {
    for (int p = 2; p <= 8; p += 2) {
      for (int m = 2 * p; m <= 2 * p + 6; m += 2) {
        auto prog = BuildDualPipe({.num_ranks = p, .num_micro_batches = m, .num_chunks = 2,
                                   .fused_fb = fused});
        ASSERT_TRUE(prog.ok()) << prog.status();
        for (int r = 0; r < p; ++r) {
          std::vector<std::string> want = DualPipeSteps(p / 2, std::min(r, p - 1 - r), m / 2, fused);
          if (r >= p / 2) want = FlipChunks(want);
          EXPECT_EQ(Tokens(*prog, r, false), want) << "p=" << p << " m=" << m << " rank " << r;
          ExpectMicroBatchOrder(*prog, r, /*fifo_w=*/true);
        }
      }
    }
  }
}

std::vector<std::string> Named(const Program& prog, int rank) {
  std::vector<std::string> out;
  for (const Op& op : prog.ranks[rank]) {
    if (IsCompute(op.kind)) out.push_back(ToString(op, prog.num_chunks));
  }
  return out;
}

TEST(ScheduleOrder, InterleavedGroupsFollowMegatronsTable) {
  // Megatron's own example (get_schedule_table's comment): PP = 2, N = 3, M = 5, VP = 2 gives
  // micro-batches 0 1 2 0 1 2 3 4 3 4 on chunks 0 0 0 1 1 1 0 0 1 1. Warm-up 2(p − 1 − r) + (v − 1)N:
  // 5 on rank 0, 3 on rank 1; the k-th backward takes the k-th entry, chunk mirrored.
  auto prog = BuildInterleaved({.num_ranks = 2, .num_micro_batches = 5, .num_chunks = 2,
                                .microbatch_group = 3});
  ASSERT_TRUE(prog.ok()) << prog.status();
  EXPECT_EQ(Named(*prog, 0), Split("F0.0 F1.0 F2.0 F0.1 F1.1 F2.1 B0.1 F3.0 B1.1 F4.0 B2.1 F3.1 B0.0 "
                                   "F4.1 B1.0 B2.0 B3.1 B4.1 B3.0 B4.0"));
  EXPECT_EQ(Named(*prog, 1), Split("F0.0 F1.0 F2.0 F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3.0 B0.0 F4.0 B1.0 "
                                   "F3.1 B2.0 F4.1 B3.1 B4.1 B3.0 B4.0"));
  // The default N = p is the classic table: micro-batch ⌊k/(pv)⌋p + k mod p on chunk ⌊k/p⌋ mod v.
  auto classic = BuildInterleaved({.num_ranks = 2, .num_micro_batches = 4, .num_chunks = 2});
  auto explicit_n = BuildInterleaved({.num_ranks = 2, .num_micro_batches = 4, .num_chunks = 2,
                                      .microbatch_group = 2});
  ASSERT_TRUE(classic.ok() && explicit_n.ok());
  EXPECT_EQ(Named(*classic, 0), Named(*explicit_n, 0));
  // Warm-up on rank 0: 2(p − 1) + (v − 1)p = 4.
  EXPECT_EQ(Named(*classic, 0), Split("F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 "
                                      "B2.1 B3.1 B2.0 B3.0"));
}

TEST(ScheduleOrder, PyTorchRoundsRelaxMegatronsConditionOnM) {
  // PyTorch: rounds = max(1, m / p), N = m / rounds; p = 4, m = 3 is one round of N = 3 < p, which
  // Megatron refuses; p = 4, m = 10: N = 5.
  EXPECT_EQ(*PyTorchMicrobatchGroup(4, 3), 3);
  EXPECT_EQ(*PyTorchMicrobatchGroup(4, 10), 5);
  EXPECT_EQ(*PyTorchMicrobatchGroup(4, 8), 4);
  auto few = BuildInterleaved({.num_ranks = 4, .num_micro_batches = 3, .num_chunks = 2,
                               .pytorch_rounds = true});
  ASSERT_TRUE(few.ok()) << few.status();
  EXPECT_FALSE(BuildInterleaved({.num_ranks = 4, .num_micro_batches = 3, .num_chunks = 2}).ok());
  auto ten = BuildInterleaved({.num_ranks = 4, .num_micro_batches = 10, .num_chunks = 2,
                               .pytorch_rounds = true});
  auto ten_n5 = BuildInterleaved({.num_ranks = 4, .num_micro_batches = 10, .num_chunks = 2,
                                  .microbatch_group = 5});
  ASSERT_TRUE(ten.ok() && ten_n5.ok());
  for (int r = 0; r < 4; ++r) EXPECT_EQ(Named(*ten, r), Named(*ten_n5, r));
}

struct Refusal {
  std::function<absl::StatusOr<Program>()> build;
  std::string field;
  std::string rule;
};

TEST(ScheduleOrder, EachConditionIsRefusedNamingTheField) {
  const std::vector<Refusal> cases = {
      {[] { return BuildZeroBubbleH2({.num_ranks = 4, .num_micro_batches = 7}); },
       "num_micro_batches (m=7)", ">= 2 x num_ranks"},
      {[] { return BuildZeroBubbleH2({.num_ranks = 2, .num_micro_batches = 8, .num_chunks = 2}); },
       "num_chunks", "must be 1"},
      {[] { return BuildZeroBubbleV({.num_ranks = 2, .num_micro_batches = 8}); },
       "num_chunks", "must be 2"},
      {[] { return BuildDualPipeV({.num_ranks = 2, .num_micro_batches = 8, .num_chunks = 3}); },
       "num_chunks", "must be 2"},
      {[] { return BuildDualPipeV({.num_ranks = 4, .num_micro_batches = 7, .num_chunks = 2}); },
       "num_micro_batches (m=7)", ">= 2 x num_ranks"},
      {[] { return BuildDualPipe({.num_ranks = 3, .num_micro_batches = 12, .num_chunks = 2}); },
       "num_ranks (p=3)", "even"},
      {[] { return BuildDualPipe({.num_ranks = 4, .num_micro_batches = 9, .num_chunks = 2}); },
       "num_micro_batches (m=9)", "even"},
      {[] { return BuildDualPipe({.num_ranks = 4, .num_micro_batches = 6, .num_chunks = 2}); },
       "num_micro_batches (m=6)", ">= 2 x num_ranks"},
      {[] { return BuildDualPipe({.num_ranks = 4, .num_micro_batches = 8, .num_chunks = 1}); },
       "num_chunks", "must be 2"},
      {[] { return BuildInterleaved({.num_ranks = 4, .num_micro_batches = 8, .num_chunks = 2,
                                     .microbatch_group = 3}); },
       "microbatch_group (N=3)", "in [p, m]"},
      {[] { return BuildInterleaved({.num_ranks = 4, .num_micro_batches = 8, .num_chunks = 2,
                                     .microbatch_group = 9}); },
       "microbatch_group (N=9)", "in [p, m]"},
      {[] { return BuildInterleaved({.num_ranks = 4, .num_micro_batches = 9, .num_chunks = 2,
                                     .microbatch_group = 6}); },
       "num_micro_batches (m=9) mod microbatch_group (N=6) is 3", "0 or at least num_ranks"},
      {[] { return BuildInterleaved({.num_ranks = 4, .num_micro_batches = 8, .num_chunks = 2,
                                     .microbatch_group = 4, .pytorch_rounds = true}); },
       "microbatch_group (N=4)", "must be 0 with pytorch_rounds"},
      {[] { return BuildInterleaved({.num_ranks = 4, .num_micro_batches = 9, .num_chunks = 2,
                                     .pytorch_rounds = true}); },
       "num_micro_batches (m=9)", "multiple of the number of rounds"},
  };
  for (const Refusal& c : cases) {
    const absl::Status st = c.build().status();
    SCOPED_TRACE(c.field);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_THAT(std::string(st.message()), HasSubstr(c.field));
    EXPECT_THAT(std::string(st.message()), HasSubstr(c.rule));
  }
  // The same through BuildSchedule, by kind.
  EXPECT_EQ(BuildSchedule(ScheduleKind::kDualPipe, {.num_ranks = 3, .num_micro_batches = 12,
                                                     .num_chunks = 2})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rp::schedule
