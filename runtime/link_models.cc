#include "runtime/link_models.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace rp {

LinkParams NvLink3() { return LinkParams{FromMicros(3), 300.0}; }
LinkParams NvLink4() { return LinkParams{FromMicros(3), 450.0}; }
LinkParams InfinibandHdr() { return LinkParams{FromMicros(5), 25.0}; }
LinkParams InfinibandNdr() { return LinkParams{FromMicros(5), 50.0}; }
LinkSpec DgxA100() { return LinkSpec{NvLink3(), InfinibandHdr(), 8}; }
LinkSpec DgxH100() { return LinkSpec{NvLink4(), InfinibandNdr(), 8}; }

absl::StatusOr<LinkSpec> LinkSpecByName(const std::string& name) {
  if (name == "dgx-a100") return DgxA100();
  if (name == "dgx-h100") return DgxH100();
  if (name == "ideal") return LinkSpec{LinkParams{}, LinkParams{}, 8};
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown link preset '", name, "' (known: dgx-a100, dgx-h100, ideal)"));
}

namespace {
absl::Status CheckParams(const LinkParams& p, const char* field) {
  if (p.alpha < Nanos(0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("LinkSpec.", field, ".alpha must be >= 0, got ", p.alpha.count(), " ns"));
  }
  if (!(p.bandwidth_gbps >= 0) || !std::isfinite(p.bandwidth_gbps)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LinkSpec.", field, ".bandwidth_gbps must be >= 0 and finite, got ", p.bandwidth_gbps));
  }
  return absl::OkStatus();
}

Nanos Scale(Nanos t, double factor) {
  if (factor == 1.0) return t;
  return Nanos(static_cast<int64_t>(std::llround(static_cast<double>(t.count()) * factor)));
}

// Serialization time b / β of one message (0 for infinite bandwidth).
Nanos Serialization(const LinkParams& p, uint64_t bytes) { return p.Duration(bytes) - p.alpha; }
}  // namespace

absl::StatusOr<std::unique_ptr<AlphaBetaLinkModel>> AlphaBetaLinkModel::Create(
    const LinkSpec& spec, int num_devices, std::vector<DegradedLink> degraded) {
  if (spec.devices_per_node < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("LinkSpec.devices_per_node must be >= 1, got ", spec.devices_per_node));
  }
  if (auto s = CheckParams(spec.intra_node, "intra_node"); !s.ok()) return s;
  if (auto s = CheckParams(spec.inter_node, "inter_node"); !s.ok()) return s;
  if (num_devices < 1) {
    return absl::InvalidArgumentError(absl::StrCat("num_devices must be >= 1, got ", num_devices));
  }
  for (const DegradedLink& d : degraded) {
    if (d.src < 0 || d.src >= num_devices || d.dst < 0 || d.dst >= num_devices || d.src == d.dst) {
      return absl::InvalidArgumentError(absl::StrCat("degraded link ", d.src, "->", d.dst,
                                                     ": ranks must be distinct and in [0, ",
                                                     num_devices, ")"));
    }
    if (!(d.factor >= 1.0) || !std::isfinite(d.factor)) {
      return absl::InvalidArgumentError(absl::StrCat("degraded link ", d.src, "->", d.dst,
                                                     ": factor must be >= 1 and finite, got ",
                                                     d.factor));
    }
  }
  return std::unique_ptr<AlphaBetaLinkModel>(
      new AlphaBetaLinkModel(spec, num_devices, std::move(degraded)));
}

AlphaBetaLinkModel::AlphaBetaLinkModel(const LinkSpec& spec, int num_devices,
                                       std::vector<DegradedLink> degraded)
    : spec_(spec), num_devices_(num_devices) {
  for (const DegradedLink& d : degraded) factors_[PairKey(d.src, d.dst)] = d.factor;
}

double AlphaBetaLinkModel::FactorOf(int src, int dst) const {
  auto it = factors_.find(PairKey(src, dst));
  return it == factors_.end() ? 1.0 : it->second;
}

Nanos AlphaBetaLinkModel::UncontendedTime(int src, int dst, uint64_t bytes) const {
  return Scale(spec_.ParamsOf(src, dst).Duration(bytes), FactorOf(src, dst));
}

Nanos AlphaBetaLinkModel::Transmit(int src, int dst, Nanos ready_at, uint64_t bytes) {
  const LinkClass cls = spec_.ClassOf(src, dst);
  if (cls == LinkClass::kSelf) return ready_at;
  const LinkParams params = spec_.ParamsOf(src, dst);
  const double factor = FactorOf(src, dst);
  const Nanos busy = Scale(Serialization(params, bytes), factor);
  const Nanos total = Scale(params.Duration(bytes), factor);
  MutexLock lock(&mu_);
  if (cls == LinkClass::kIntraNode) {
    int64_t& free_at = free_at_[PairKey(src, dst)];
    const int64_t start = std::max(ready_at.count(), free_at);
    free_at = start + busy.count();
    return Nanos(start) + total;
  }
  // Insert both keys first: a flat_hash_map insertion may rehash and invalidate references.
  free_at_.try_emplace(EgressKey(src), 0);
  free_at_.try_emplace(IngressKey(dst), 0);
  int64_t& out = free_at_.find(EgressKey(src))->second;
  int64_t& in = free_at_.find(IngressKey(dst))->second;
  const int64_t start = std::max({ready_at.count(), out, in});
  out = start + busy.count();
  in = start + busy.count();
  return Nanos(start) + total;
}

}  // namespace rp
