// Link presets: documented α (latency), β (bandwidth) and o (per-message overhead) per link class
// for the hardware ringpipe's defaults model (SCENARIOS: 8-GPU nodes, NVLink inside, InfiniBand
// between nodes). Sources and reasoning in docs/runtime.md ("Link presets").
//
//   α   wire latency: last byte out -> arrival at the peer; back-to-back messages overlap it.
//   β   per-direction bandwidth of one device's port (NVLink) or NIC (InfiniBand), GB/s.
//   o   per-message overhead that occupies the port (not pipelined): what makes very small
//       segments lose. Taken from NCCL's tuning model (src/graph/tuning.cc, NVIDIA/nccl commit
//       5067397, 2026-06): its per-ring-step hardware latency for the Simple protocol is 3.4 µs
//       over NVLink, of which we model α = 3 µs as latency and o = 0.4 µs as occupancy; over the
//       network NCCL charges a per-step "net overhead" of 1 µs × 3 for Simple (Intel hosts) on top
//       of latency: o = 3 µs with α = 5 µs (GPU-to-GPU over the NIC).
//
// Example:
//   RP_ASSIGN_OR_RETURN(LinkSpec spec, LinkSpecByName("dgx-a100"));
//   spec.nics_per_node = 1;  // a what-if: one shared NIC per node
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "runtime/link.h"
#include "runtime/time.h"

namespace rp {

// NVLink 3 (A100 SXM): 12 links × 25 GB/s per direction = 300 GB/s; α 3 µs, o 0.4 µs.
LinkParams NvLink3();
// NVLink 4 (H100 SXM): 18 links, 900 GB/s bidirectional = 450 GB/s per direction; α 3 µs, o 0.4 µs.
LinkParams NvLink4();
// InfiniBand HDR (200 Gb/s per port) = 25 GB/s; α 5 µs, o 3 µs.
LinkParams InfinibandHdr();
// InfiniBand NDR (400 Gb/s per port) = 50 GB/s; α 5 µs, o 3 µs.
LinkParams InfinibandNdr();
// DGX A100: 8 GPUs per node, NVLink 3 inside, HDR between nodes, one NIC per GPU.
LinkSpec DgxA100();
// DGX H100: 8 GPUs per node, NVLink 4 inside, NDR between nodes, one NIC per GPU.
LinkSpec DgxH100();
// Looks a preset up by name: "dgx-a100", "dgx-h100", "ideal" (α = o = 0, infinite bandwidth).
[[nodiscard]] absl::StatusOr<LinkSpec> LinkSpecByName(const std::string& name);

// A fault: the directed link src→dst (ranks) takes `factor` times longer (occupancy and latency),
// factor >= 1.
struct DegradedLink {
  int src = 0;
  int dst = 0;
  double factor = 1.0;
};

}  // namespace rp
