#include "schedule/ep_wire.h"

#include <algorithm>
#include <span>

namespace rp::schedule {

comm::a2a::AllToAllWireModel EpWireModel(const ExecutionPlan& plan, int64_t width, int step) {
  return comm::a2a::AllToAllWireModel{
      .unit_elements = static_cast<uint64_t>(std::max<int64_t>(width, 1)),
      .modeled_unit_elements = plan.EpRowElements(static_cast<int>(width)),
      .step = step};
}

comm::a2a::BlockShape EpBlockShape(const ExecutionPlan& plan, int64_t width, int64_t rows) {
  // An all-to-all-v sends no message for an empty block (the counts carried its header).
  return comm::a2a::BlockShape{
      .modeled_elems = static_cast<uint64_t>(rows) * plan.EpRowElements(static_cast<int>(width)),
      .segment_elems = plan.ring_segment_bytes / 4,
      .codec = plan.options.ep_codec,
      .empty_block_message = false};
}

EpWireFn EpWireOracle(const ExecutionPlan& plan) {
  if (plan.options.ep_codec == comm::Codec::kFp32) return nullptr;
  return [&plan](const EpExchange& sent, int, int, std::span<float> block) {
    return comm::a2a::RoundTripTimedBlock(plan.options.ep_codec,
                                          EpWireModel(plan, sent.row_width, /*step=*/0),
                                          plan.ring_segment_bytes / 4,
                                          /*empty_block_message=*/false, block);
  };
}

}  // namespace rp::schedule
