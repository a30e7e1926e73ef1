// `ringpipe allreduce` and `ringpipe alltoall` as a demanding user drives them (the hunt of branch
// hunt-comm2): each test is a defect found that way, held to README's contract — bad input prints one
// line naming the field and exits 2 before any row runs, without writing or damaging a file.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "apps/allreduce.h"
#include "apps/alltoall.h"
#include "apps/cli.h"
#include "apps/collective_bench.h"
#include "gtest/gtest.h"
#include "tests/apps/binary_runner.h"

namespace rp::apps {
namespace {

namespace fs = std::filesystem;
using Result = rp::apps::testing::BinaryResult;
using rp::apps::testing::ExpectBadInput;
using rp::apps::testing::ReadFile;
using rp::apps::testing::RunBinary;

fs::path TempDir(const std::string& name) { return rp::apps::testing::TempDir("ringpipe_bench", name); }

// Messages per rank per call, in closed form (docs/collectives.md): the ring's 2(n − 1) steps × the
// segments of its largest chunk; the all-to-all's n − 1 blocks × their segments; at least one each.
TEST(CollectiveBench, MessagesPerRankFollowTheDocs) {
  EXPECT_EQ(allreduce::RankMessages(4, uint64_t{64} << 20, 4), 6.0 * (4 << 20));
  EXPECT_EQ(allreduce::RankMessages(4, uint64_t{64} << 20, 256 << 10), 6.0 * 64);
  EXPECT_EQ(allreduce::RankMessages(1, uint64_t{64} << 20, 4), 0);
  EXPECT_EQ(allreduce::RankMessages(3, 40, 4), 4.0 * 4);       // 10 elements: chunks 4, 3, 3
  EXPECT_EQ(allreduce::RankMessages(8, 4, 4), 14.0);           // empty chunks still send one message
  EXPECT_EQ(allreduce::RankMessages(2, 4096, 1 << 30), 2.0);
  EXPECT_EQ(alltoall::RankMessages(4, uint64_t{64} << 20, 4), 3.0 * (4 << 20));
  EXPECT_EQ(alltoall::RankMessages(3, 64, 4), 2.0 * 5);        // 16 elements round down to 15: blocks of 5
  EXPECT_EQ(alltoall::RankMessages(3, 64, 8), 2.0 * 3);
  EXPECT_EQ(alltoall::RankMessages(1, 64, 4), 0);
}

// The segment CheckMessages suggests is the smallest that fits the budget.
TEST(CollectiveBench, TheSuggestedSegmentIsTheSmallestThatFits) {
  collective_bench::Settings s;
  s.ranks = 4;
  s.segments = {4};
  collective_bench::Command c;
  c.rank_messages = [](uint64_t bytes, uint64_t segment) { return allreduce::RankMessages(4, bytes, segment); };
  const std::vector<uint64_t> sizes = {uint64_t{64} << 20};
  const absl::Status st = collective_bench::CheckMessages(s, c, sizes);
  ASSERT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  const std::string why(st.message());
  const std::string at_least = "use segments of at least ";
  ASSERT_NE(why.find(at_least), std::string::npos) << why;
  const uint64_t suggested = std::stoull(why.substr(why.find(at_least) + at_least.size()));
  const double calls = s.warmup + s.iters;
  EXPECT_LE(allreduce::RankMessages(4, sizes[0], suggested) * calls, collective_bench::kMaxRankMessagesPerRow);
  EXPECT_GT(allreduce::RankMessages(4, sizes[0], suggested - 4) * calls, collective_bench::kMaxRankMessagesPerRow);
  s.segments = {suggested};
  EXPECT_TRUE(collective_bench::CheckMessages(s, c, sizes).ok());
}

// `allreduce --segment_bytes=4` on 64 MiB is 25165824 messages per rank per call: it ran for minutes
// without printing a row (23 calls). Now bad input naming --segment_bytes and the smallest segment
// that fits; the --json file is not written, and an existing one is left as it was.
TEST(CollectiveBench, RowsOfTooManyMessagesAreRefusedNamingTheSegment) {
  const fs::path dir = TempDir("messages");
  const fs::path rows = dir / "rows.json";
  for (const std::string cmd : {"allreduce", "alltoall"}) {
    std::ofstream(rows) << "keep";
    ExpectBadInput(RunBinary(cmd + " --segment_bytes=4 --min_bytes=64M --max_bytes=64M --json=" + rows.string(), dir),
                   "--segment_bytes: a row of 67108864 B on 4 ranks cut into 4 B segments is", cmd);
    EXPECT_EQ(ReadFile(rows), "keep") << cmd;
    // One segment of a list is enough to refuse the command before any row runs.
    const Result list = RunBinary(cmd + " --segment_bytes=256K,4 --min_bytes=64M --max_bytes=64M", dir);
    ExpectBadInput(list, "use segments of at least", cmd + " list");
    // Timed, the fabric times every message too.
    ExpectBadInput(RunBinary(cmd + " --segment_bytes=4 --min_bytes=64M --max_bytes=64M --link=dgx-a100", dir),
                   "--segment_bytes:", cmd + " timed");
    // So many calls that one message per chunk is too many: --iters is named.
    ExpectBadInput(RunBinary(cmd + " --ranks=2 --min_bytes=4K --max_bytes=4K --iters=16777216", dir), "--iters: ",
                   cmd + " iters");
  }
  // Tiny segments on a small buffer still run.
  const Result small = RunBinary("allreduce --ranks=3 --segment_bytes=4 --min_bytes=60 --max_bytes=60 --iters=1 "
                                 "--warmup=0",
                                 dir);
  EXPECT_EQ(small.exit_code, 0) << small.err;
  fs::remove_all(dir);
}

// The header and every --json row said "all-gather forwarding on" / "forward": true for rings that
// never forward: comm/ring_runner.cc forwards FP32 lends on 3 or more ranks only, so 2 ranks or a
// lossy codec ran without it while the output claimed it.
TEST(CollectiveBench, ForwardingIsReportedOnlyWhereTheRingForwards) {
  const fs::path dir = TempDir("forward");
  const fs::path rows = dir / "rows.json";
  struct Case {
    std::string flags;
    bool forward;
    std::string note;
  };
  for (const Case& c : {Case{"--ranks=2", false, "all-gather forwarding off (2 ranks"},
                        Case{"--ranks=4 --codec=bf16", false, "all-gather forwarding off (only FP32"},
                        Case{"--ranks=3 --forward=false", false, "all-gather forwarding off\n"},
                        Case{"--ranks=3 --link=dgx-a100", false, "all-gather forwarding off (timed"},
                        Case{"--ranks=3", true, "all-gather forwarding on (streaming"}}) {
    const Result r = RunBinary("allreduce " + c.flags + " --min_bytes=4K --max_bytes=4K --iters=1 --warmup=0 --json=" +
                                   rows.string(),
                               dir);
    ASSERT_EQ(r.exit_code, 0) << c.flags << "\n" << r.err;
    EXPECT_NE(r.out.find(c.note), std::string::npos) << c.flags << "\n" << r.out;
    EXPECT_NE(ReadFile(rows).find(c.forward ? "\"forward\": true" : "\"forward\": false"), std::string::npos)
        << c.flags << "\n" << ReadFile(rows);
  }
  fs::remove_all(dir);
}

// The all-to-all's memory estimate counted its buffers but not its links, one per ordered pair of
// ranks: `alltoall --ranks=256 --link=dgx-a100` with 1 KiB rows was estimated at 67 MB and peaked at
// 1.14 GB, so --ranks=1024 (about 18 GB of links) was let run towards the OOM killer. Such a row is
// now refused naming --ranks (the size is not what makes it large). A timed link no longer reserves
// 17 KiB of queue nodes up front (comm/unbounded_queue.h; tests/comm/channel_test.cc): timed and
// untimed links take about 2 KiB each, so 256 timed ranks (121 MB peak) fit in 500 MB and run.
TEST(CollectiveBench, TheAllToAllsLinksCountInItsMemoryEstimate) {
  const fs::path dir = TempDir("a2a_links");
  ASSERT_EQ(::setenv("RINGPIPE_MEMORY_LIMIT_BYTES", "500000000", 1), 0);
  for (const char* link : {" --link=dgx-a100", ""}) {
    const Result fits =
        RunBinary(std::string("alltoall --ranks=256 --min_bytes=1K --max_bytes=1K --iters=1 --warmup=0") + link, dir);
    EXPECT_EQ(fits.exit_code, 0) << link << ": " << fits.err;
    ExpectBadInput(
        RunBinary(std::string("alltoall --ranks=1024 --min_bytes=4K --max_bytes=4K --iters=1 --warmup=0") + link, dir),
        "--ranks: a row of 4096 B on 1024 ranks", link);
  }
  ::unsetenv("RINGPIPE_MEMORY_LIMIT_BYTES");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rp::apps
