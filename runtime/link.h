// rp::LinkModel: the seam every emulated transfer passes through.
//
// comm/ channels and collectives ask the link model when a message put on the wire arrives; the
// receiver may not use a message before its modeled arrival (it waits on an rp::Clock until then).
// Leaves behind this seam: IdealLinkModel (here: arrival = ready time, so collectives run as fast as
// the host allows) and the α–β models with presets and contention (runtime/link_models.h).
//
// Thread safety: Transmit may be called from any thread concurrently.
#pragma once

#include <cstdint>

#include "runtime/time.h"

namespace rp {

class LinkModel {
 public:
  virtual ~LinkModel() = default;

  // A message of `bytes` from device `src` to device `dst` (global device ids) is ready to leave at
  // modeled time `ready_at`. Reserves the link it uses (transfers sharing a link serialize) and
  // returns its modeled arrival at `dst`, >= ready_at.
  virtual Nanos Transmit(int src, int dst, Nanos ready_at, uint64_t bytes) = 0;

  // True when Transmit always returns `ready_at` (no modeled time: callers may skip clock waits).
  virtual bool is_ideal() const { return false; }
};

// Adds no time: arrival = ready_at.
class IdealLinkModel final : public LinkModel {
 public:
  Nanos Transmit(int, int, Nanos ready_at, uint64_t) override { return ready_at; }
  bool is_ideal() const override { return true; }
};

}  // namespace rp

namespace rp {

// The class of the link between two devices: the same device, two devices of one node (NVLink-like),
// or two nodes (InfiniBand-like).
enum class LinkClass { kSelf, kIntraNode, kInterNode };

// α–β parameters of one link class: a message of b bytes takes alpha + b / bandwidth.
struct LinkParams {
  Nanos alpha{0};             // per-message latency
  double bandwidth_gbps = 0;  // GB/s (1e9 bytes per second); 0 means infinite
  // Modeled time for one message of `bytes` alone on the link.
  Nanos Duration(uint64_t bytes) const {
    if (bandwidth_gbps <= 0) return alpha;
    return alpha + Nanos(static_cast<int64_t>(static_cast<double>(bytes) / bandwidth_gbps + 0.5));
  }
};

// Two link classes and the node size. Device d lives on node d / devices_per_node (device ids are
// assigned in placement order by the caller, e.g. schedule::ParallelGrid).
struct LinkSpec {
  LinkParams intra_node;
  LinkParams inter_node;
  int devices_per_node = 8;
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
