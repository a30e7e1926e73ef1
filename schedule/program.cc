#include "schedule/program.h"

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
  }
  return "?";
}

const char* ScheduleName(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::kGPipe: return "gpipe";
    case ScheduleKind::kOneFOneB: return "1f1b";
    case ScheduleKind::kInterleaved: return "interleaved";
    case ScheduleKind::kZeroBubbleH1: return "zb-h1";
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
  }
  return "?";
}

size_t Program::num_ops() const {
  size_t n = 0;
  for (const auto& r : ranks) n += r.size();
  return n;
}

}  // namespace rp::schedule
