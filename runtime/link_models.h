// α–β link models with contention, and documented hardware presets.
//
// rp::AlphaBetaLinkModel implements rp::LinkModel (runtime/link.h) over an rp::LinkSpec: a message
// of b bytes on a link of class c takes α_c + b / β_c (LinkParams::Duration).
//
// Contention (which transfers share a link, and so serialize):
//   * intra-node: one link per DIRECTED device pair (src→dst). NVSwitch systems (DGX A100/H100) give
//     every GPU pair full NVLink bandwidth, so only transfers between the same two devices in the
//     same direction compete.
//   * inter-node: one NIC per device (rail-optimised DGX: 8 GPUs, 8 HCAs). A transfer occupies the
//     source device's NIC egress and the destination device's NIC ingress; it serializes with
//     every other inter-node transfer that leaves the same device or enters the same device.
//   * self (src == dst): free and instantaneous (arrival = ready_at).
// A link is busy for the serialization time b / β only; the latency α overlaps (pipelined wire):
//   start   = max(ready_at, link free)        (every link the transfer occupies)
//   arrival = start + factor × (α + b / β)
//   link free ← start + factor × b / β
// where factor is the degradation of that directed device pair (1 unless a DegradedLink fault
// names it). Two messages of b bytes ready at t on one link therefore arrive at t + α + b/β and
// t + α + 2b/β. Reservations are first come, first served in Transmit call order.
//
// Thread safety: Transmit may be called from any thread; reservations are under one mutex (a few
// hash-map operations per message).
//
// Example:
//   RP_ASSIGN_OR_RETURN(auto links, rp::AlphaBetaLinkModel::Create(rp::DgxA100(), 16));
//   rp::Nanos arrival = links->Transmit(0, 9, t, 1 << 20);  // inter-node: 5 µs + 1 MiB / 25 GB/s
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "runtime/link.h"
#include "runtime/mutex.h"
#include "runtime/time.h"

namespace rp {

// --- Presets (sources and reasoning in docs/runtime.md) -------------------------------------
// NVLink 3 (A100 SXM): 12 links × 25 GB/s per direction = 300 GB/s per direction; α = 3 µs.
LinkParams NvLink3();
// NVLink 4 (H100 SXM): 18 links, 900 GB/s bidirectional = 450 GB/s per direction; α = 3 µs.
LinkParams NvLink4();
// InfiniBand HDR (200 Gb/s per port) = 25 GB/s; α = 5 µs (GPU-to-GPU over the NIC).
LinkParams InfinibandHdr();
// InfiniBand NDR (400 Gb/s per port) = 50 GB/s; α = 5 µs.
LinkParams InfinibandNdr();
// DGX A100: 8 GPUs per node, NVLink 3 inside, HDR between nodes.
LinkSpec DgxA100();
// DGX H100: 8 GPUs per node, NVLink 4 inside, NDR between nodes.
LinkSpec DgxH100();
// Looks a preset up by name: "dgx-a100", "dgx-h100", "ideal" (α = 0, infinite bandwidth).
[[nodiscard]] absl::StatusOr<LinkSpec> LinkSpecByName(const std::string& name);

// A fault: the directed link src→dst takes `factor` times longer (α and b/β), factor >= 1.
struct DegradedLink {
  int src = 0;
  int dst = 0;
  double factor = 1.0;
};

class AlphaBetaLinkModel final : public LinkModel {
 public:
  // Validates `spec` (devices_per_node >= 1, α >= 0, bandwidth >= 0), `num_devices` >= 1 and each
  // degraded link (ranks in [0, num_devices), src != dst, factor >= 1 and finite).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<AlphaBetaLinkModel>> Create(
      const LinkSpec& spec, int num_devices, std::vector<DegradedLink> degraded = {});

  // See the header comment. Requires 0 <= src, dst < num_devices (ids out of range are clamped
  // into a separate "unknown" link rather than aborting; callers validate ranks).
  Nanos Transmit(int src, int dst, Nanos ready_at, uint64_t bytes) override;

  // The modeled time of one `bytes` message alone on src→dst (degradation included).
  Nanos UncontendedTime(int src, int dst, uint64_t bytes) const;
  // The degradation factor of src→dst (1 when healthy).
  double FactorOf(int src, int dst) const;
  const LinkSpec& spec() const { return spec_; }
  int num_devices() const { return num_devices_; }

 private:
  AlphaBetaLinkModel(const LinkSpec& spec, int num_devices, std::vector<DegradedLink> degraded);
  // Resource keys: directed pair (intra), NIC egress of a device, NIC ingress of a device.
  static uint64_t PairKey(int src, int dst) {
    return (uint64_t{uint32_t(src)} << 31) | uint32_t(dst);
  }
  static uint64_t EgressKey(int dev) { return (uint64_t{1} << 62) | uint32_t(dev); }
  static uint64_t IngressKey(int dev) { return (uint64_t{2} << 62) | uint32_t(dev); }

  const LinkSpec spec_;
  const int num_devices_;
  absl::flat_hash_map<uint64_t, double> factors_;  // PairKey → degradation; immutable
  Mutex mu_;
  absl::flat_hash_map<uint64_t, int64_t> free_at_ ABSL_GUARDED_BY(mu_);  // resource → modeled ns
};

}  // namespace rp
