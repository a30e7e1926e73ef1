// Link classes and their α–β–o parameters: the vocabulary of the modeled network.
//
// Two devices talk over a link class: the same device (free), two devices of one node (NVLink
// through an NVSwitch), or two nodes (InfiniBand through NICs). How messages share ports, queue and
// arrive is rp::FabricModel's (runtime/fabric_model.h); the rounding and fault factors are
// runtime/timing.h's. Presets with their sources: runtime/link_models.h.
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/time.h"

namespace rp {

// The class of the link between two devices: the same device, two devices of one node (NVLink-like),
// or two nodes (InfiniBand-like).
enum class LinkClass { kSelf, kIntraNode, kInterNode };

// Parameters of one link class (DESIGN.md "The fabric"): a message of b bytes holds its sender's
// egress port and its receiver's ingress port for overhead + b / bandwidth, and arrives alpha after
// its last byte left (so the latencies of back-to-back messages overlap). The rounding and fault
// factors live in runtime/timing.h (PortOccupancy, LinkLatency).
struct LinkParams {
  Nanos alpha{0};             // latency α: last byte out -> arrival (pipelines)
  double bandwidth_gbps = 0;  // β in GB/s (1e9 bytes per second); 0 means infinite
  Nanos overhead{0};          // o: per-message time that occupies the ports (not pipelined)
  // Modeled time for one message of `bytes` alone on the link: o + b/β + α (b/β rounded to ns).
  Nanos Duration(uint64_t bytes) const {
    const Nanos transfer =
        bandwidth_gbps <= 0
            ? Nanos(0)
            : Nanos(std::llround(static_cast<double>(bytes) / bandwidth_gbps));
    return overhead + transfer + alpha;
  }
  bool operator==(const LinkParams&) const = default;
};

// Two link classes and the node size. Device d lives on node d / devices_per_node (device ids are
// assigned in placement order by the caller, e.g. schedule::ParallelGrid).
struct LinkSpec {
  LinkParams intra_node;
  LinkParams inter_node;
  int devices_per_node = 8;
  // NICs per node for inter-node traffic (rp::FabricModel): 0 = one per device (rail-optimized,
  // DGX); 1 = one NIC shared by the node; else a divisor of devices_per_node.
  int nics_per_node = 0;
  LinkClass ClassOf(int a, int b) const {
    if (a == b) return LinkClass::kSelf;
    return a / devices_per_node == b / devices_per_node ? LinkClass::kIntraNode
                                                        : LinkClass::kInterNode;
  }
  LinkParams ParamsOf(int a, int b) const {
    switch (ClassOf(a, b)) {
      case LinkClass::kSelf: return LinkParams{};
      case LinkClass::kIntraNode: return intra_node;
      case LinkClass::kInterNode: return inter_node;
    }
    return LinkParams{};
  }
};

}  // namespace rp
