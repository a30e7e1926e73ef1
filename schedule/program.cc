#include "schedule/program.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace rp::schedule {

const char* OpKindName(OpKind k) {
  switch (k) {
    case OpKind::kForward: return "F";
    case OpKind::kBackward: return "B";
    case OpKind::kBackwardInput: return "Bi";
    case OpKind::kWeightGrad: return "W";
    case OpKind::kSendAct: return "SendAct";
    case OpKind::kRecvAct: return "RecvAct";
    case OpKind::kSendGrad: return "SendGrad";
    case OpKind::kRecvGrad: return "RecvGrad";
    case OpKind::kTpAllReduce: return "TpAR";
    case OpKind::kAllReduce: return "AR";
    case OpKind::kOptimizerStep: return "Opt";
    case OpKind::kForwardBackward: return "F&B";
  }
  return "?";
}

const char* ScheduleName(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::kGPipe: return "gpipe";
    case ScheduleKind::kOneFOneB: return "1f1b";
    case ScheduleKind::kInterleaved: return "interleaved";
    case ScheduleKind::kZeroBubbleH1: return "zb-h1";
    case ScheduleKind::kZeroBubbleH2: return "zb-h2";
    case ScheduleKind::kZeroBubbleV: return "zb-v";
    case ScheduleKind::kDualPipeV: return "dualpipev";
    case ScheduleKind::kDualPipe: return "dualpipe";
    case ScheduleKind::kCustom: return "custom";
  }
  return "?";
}

std::string ToString(const Op& op, int num_chunks) {
  const std::string chunk = num_chunks > 1 ? absl::StrCat(".", op.chunk) : "";
  switch (op.kind) {
    case OpKind::kForward:
    case OpKind::kBackward:
    case OpKind::kBackwardInput:
    case OpKind::kWeightGrad:
    case OpKind::kTpAllReduce:
      return absl::StrCat(OpKindName(op.kind), op.micro_batch, chunk);
    case OpKind::kSendAct:
    case OpKind::kSendGrad:
      return absl::StrCat(OpKindName(op.kind), op.micro_batch, chunk, "->", op.peer);
    case OpKind::kRecvAct:
    case OpKind::kRecvGrad:
      return absl::StrCat(OpKindName(op.kind), op.micro_batch, chunk, "<-", op.peer);
    case OpKind::kAllReduce:
      return absl::StrCat("AR#", op.bucket, "(", op.bytes, "B)");
    case OpKind::kOptimizerStep:
      return "Opt";
    case OpKind::kForwardBackward:
      return absl::StrCat("F", op.micro_batch, chunk, "&B", op.backward_micro_batch,
                          num_chunks > 1 ? absl::StrCat(".", op.backward_chunk) : "");
  }
  return "?";
}

StagePlacement::StagePlacement(int num_ranks, int num_chunks, int num_directions,
                               std::vector<StageId> stage_of)
    : num_ranks_(num_ranks),
      num_chunks_(num_chunks),
      num_directions_(num_directions),
      stage_of_(std::move(stage_of)),
      holder_of_(stage_of_.size()) {
  for (int r = 0; r < num_ranks; ++r) {
    for (int c = 0; c < num_chunks; ++c) {
      const StageId id = stage_of_[r * num_chunks + c];
      holder_of_[id.direction * stages_per_direction() + id.stage] = ChunkRef{r, c};
    }
  }
}

StagePlacement StagePlacement::Loop(int num_ranks, int num_chunks) {
  std::vector<StageId> table(static_cast<size_t>(num_ranks) * num_chunks);
  for (int r = 0; r < num_ranks; ++r) {
    for (int c = 0; c < num_chunks; ++c) table[r * num_chunks + c] = {0, c * num_ranks + r};
  }
  return StagePlacement(num_ranks, num_chunks, 1, std::move(table));
}

StagePlacement StagePlacement::V(int num_ranks) {
  std::vector<StageId> table(static_cast<size_t>(num_ranks) * 2);
  for (int r = 0; r < num_ranks; ++r) {
    table[2 * r] = {0, r};
    table[2 * r + 1] = {0, 2 * num_ranks - 1 - r};
  }
  return StagePlacement(num_ranks, 2, 1, std::move(table));
}

StagePlacement StagePlacement::Bidirectional(int num_ranks) {
  std::vector<StageId> table(static_cast<size_t>(num_ranks) * 2);
  for (int r = 0; r < num_ranks; ++r) {
    table[2 * r] = {0, r};
    table[2 * r + 1] = {1, num_ranks - 1 - r};
  }
  return StagePlacement(num_ranks, 2, 2, std::move(table));
}

absl::StatusOr<StagePlacement> StagePlacement::FromTable(int num_ranks, int num_chunks,
                                                         int num_directions,
                                                         std::vector<StageId> stage_of_chunk) {
  if (num_ranks < 1 || num_chunks < 1 || num_directions < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "placement: num_ranks=", num_ranks, ", num_chunks=", num_chunks,
        ", num_directions=", num_directions, " must all be >= 1"));
  }
  const int64_t chunks = int64_t{num_ranks} * num_chunks;
  if (chunks % num_directions != 0) {
    return absl::InvalidArgumentError(absl::StrCat("placement: ", chunks,
                                                   " chunks do not split into num_directions=",
                                                   num_directions, " equal directions"));
  }
  if (static_cast<int64_t>(stage_of_chunk.size()) != chunks) {
    return absl::InvalidArgumentError(absl::StrCat("placement: stage_of_chunk has ",
                                                   stage_of_chunk.size(), " entries for ", chunks,
                                                   " chunks (num_ranks x num_chunks)"));
  }
  const int64_t per_direction = chunks / num_directions;
  std::vector<int> seen(static_cast<size_t>(chunks), -1);
  for (int64_t i = 0; i < chunks; ++i) {
    const StageId id = stage_of_chunk[static_cast<size_t>(i)];
    const std::string where = absl::StrCat("placement: rank ", i / num_chunks, " chunk ",
                                           i % num_chunks, " holds direction ", id.direction,
                                           " stage ", id.stage);
    if (id.direction < 0 || id.direction >= num_directions || id.stage < 0 ||
        id.stage >= per_direction) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": out of range (", num_directions,
                                                     " directions of ", per_direction, " stages)"));
    }
    int& slot = seen[static_cast<size_t>(id.direction * per_direction + id.stage)];
    if (slot >= 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, ", already held by rank ",
                                                     slot / num_chunks, " chunk ", slot % num_chunks));
    }
    slot = static_cast<int>(i);
  }
  return StagePlacement(num_ranks, num_chunks, num_directions, std::move(stage_of_chunk));
}

std::optional<ChunkRef> Program::NextHolder(int rank, int chunk) const {
  const StageId id = StageOf(rank, chunk);
  if (id.stage + 1 >= num_model_stages()) return std::nullopt;
  return HolderOf({id.direction, id.stage + 1});
}

std::optional<ChunkRef> Program::PrevHolder(int rank, int chunk) const {
  const StageId id = StageOf(rank, chunk);
  if (id.stage == 0) return std::nullopt;
  return HolderOf({id.direction, id.stage - 1});
}

size_t Program::num_ops() const {
  size_t n = 0;
  for (const auto& r : ranks) n += r.size();
  return n;
}

}  // namespace rp::schedule
