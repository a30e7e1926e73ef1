#include "runtime/link_models.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace rp {

LinkParams NvLink3() {
  return LinkParams{.alpha = FromMicros(3), .bandwidth_gbps = 300.0, .overhead = FromMicros(0.4)};
}
LinkParams NvLink4() {
  return LinkParams{.alpha = FromMicros(3), .bandwidth_gbps = 450.0, .overhead = FromMicros(0.4)};
}
LinkParams InfinibandHdr() {
  return LinkParams{.alpha = FromMicros(5), .bandwidth_gbps = 25.0, .overhead = FromMicros(3)};
}
LinkParams InfinibandNdr() {
  return LinkParams{.alpha = FromMicros(5), .bandwidth_gbps = 50.0, .overhead = FromMicros(3)};
}
LinkSpec DgxA100() {
  return LinkSpec{.intra_node = NvLink3(), .inter_node = InfinibandHdr(), .devices_per_node = 8};
}
LinkSpec DgxH100() {
  return LinkSpec{.intra_node = NvLink4(), .inter_node = InfinibandNdr(), .devices_per_node = 8};
}

absl::StatusOr<LinkSpec> LinkSpecByName(const std::string& name) {
  if (name == "dgx-a100") return DgxA100();
  if (name == "dgx-h100") return DgxH100();
  if (name == "ideal") return LinkSpec{};
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown link preset '", name, "' (known: dgx-a100, dgx-h100, ideal)"));
}

}  // namespace rp
