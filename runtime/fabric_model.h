// rp::FabricModel: the modeled network every inter-device byte crosses (DESIGN.md "The fabric").
//
// Ports. Each device has an egress and an ingress port per link class:
//   * intra-node (NVSwitch-like): every device its own pair of ports;
//   * inter-node: traffic leaves and enters through NICs. A node has `nics_per_node` NICs (0 =
//     one per device, rail-optimized as in DGX; 1 = one NIC shared by the whole node); device with
//     local index l (= device % devices_per_node) uses NIC l · nics / devices_per_node of its node.
//     A NIC has one egress and one ingress port.
// Self-messages (src == dst) use no port and arrive when ready.
//
// A message of b bytes on link class (α, β, o), ready at t, with fault factor f (1 when healthy):
//   start     = max(t, egress free, ingress free)
//   last byte = start + PortOccupancy = start + f·(o + b/β)      (both ports busy until then)
//   arrival   = last byte + LinkLatency = last byte + f·α           (latencies pipeline)
// A port serves messages one at a time in the order Commit is called; callers commit in modeled
// ready-time order, ties broken by a deterministic rank (rp::Fabric does, the predictor does), so
// a port is FIFO in modeled time — the serialization congestion-aware analytical simulators use.
// Contention is a result, never an input.
//
// Faults are factors on a directed device pair (src → dst): a degraded link from step 0, a slow-link
// fault from its step on (factors of several faults multiply).
//
// Thread safety: none (thread-compatible). rp::Fabric serializes its calls; the predictor is
// single-threaded.
//
// Example (golden case: two messages into one shared NIC):
//   LinkSpec spec = DgxA100(); spec.nics_per_node = 1;
//   RP_ASSIGN_OR_RETURN(FabricModel f, FabricModel::Create(spec, /*num_devices=*/16));
//   MessageTiming a = f.Commit({.src = 0, .dst = 8, .bytes = S, .ready = t});
//   MessageTiming b = f.Commit({.src = 1, .dst = 9, .bytes = S, .ready = t});
//   // b.arrival == t + 2 (o + S/β) + α: the second waits for the first on node 0's NIC.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "runtime/link.h"
#include "runtime/time.h"

namespace rp {

// A link fault: messages src → dst (device ids) take `factor` (>= 1) times longer, from training
// step `from_step` on (0: always — a degraded link).
struct LinkFault {
  int src = 0;
  int dst = 0;
  double factor = 1.0;
  int from_step = 0;
};

// One message as its sender posts it.
struct FabricMessage {
  int src = 0;            // device ids
  int dst = 0;
  uint64_t bytes = 0;     // modeled wire bytes (codec metadata included)
  Nanos ready{0};         // modeled time its data is ready to leave
  int step = 0;           // training step (slow-link faults); 0 outside training
};

// What the fabric decided for one message.
struct MessageTiming {
  Nanos ready{0};
  Nanos start{0};      // first byte leaves (both ports free)
  Nanos last_byte{0};  // ports free again
  Nanos arrival{0};    // the receiver may use it
  LinkClass link_class = LinkClass::kSelf;
  int egress_port = -1;  // -1 for self-messages
  int ingress_port = -1;
  // Time the message waited for a busy port: start − ready.
  Nanos queued() const { return start - ready; }
};

class FabricModel {
 public:
  // Validates the spec (devices_per_node >= 1; nics_per_node 0 or a divisor of devices_per_node;
  // α, o >= 0; β >= 0), num_devices >= 1 and every fault (devices in range, src != dst, factor >= 1
  // and finite, from_step >= 0). InvalidArgument naming the field.
  [[nodiscard]] static absl::StatusOr<FabricModel> Create(const LinkSpec& spec, int num_devices,
                                                          std::vector<LinkFault> faults = {});

  // Reserves the ports of `m` and returns its timing (see the header comment). Precondition:
  // devices in range (callers validate ranks).
  MessageTiming Commit(const FabricMessage& m);
  // As Commit, but the message enters through `ingress_device`'s ingress port (of the class of
  // src → dst) instead of dst's: a symmetric stand-in for dst (the predictor's replica folding).
  MessageTiming CommitThrough(const FabricMessage& m, int ingress_device);
  // Every port free again at time 0 (a new run).
  void Reset();

  // The timing `m` would get on an idle fabric (no other traffic).
  MessageTiming Uncontended(const FabricMessage& m) const;
  // The fault factor of src → dst during `step` (1 when healthy).
  double FactorOf(int src, int dst, int step) const;

  const LinkSpec& spec() const { return spec_; }
  int num_devices() const { return num_devices_; }
  int num_ports() const { return static_cast<int>(free_at_.size()); }
  // "dev 3 nvlink out", "node 1 nic 0 in", ... for traces.
  std::string PortName(int port) const;

 private:
  FabricModel(const LinkSpec& spec, int num_devices, std::vector<LinkFault> faults);
  int NicsPerNode() const;
  int EgressPort(int device, LinkClass c) const;
  int IngressPort(int device, LinkClass c) const;
  MessageTiming Time(const FabricMessage& m, Nanos egress_free, Nanos ingress_free) const;
  // Commits `m` on class `c` (not self) between the given ports.
  MessageTiming CommitOn(const FabricMessage& m, LinkClass c, int egress, int ingress);

  LinkSpec spec_;
  int num_devices_ = 1;
  int num_nics_ = 0;
  // Faults by directed pair (src · num_devices + dst): (from_step, factor) pairs.
  absl::flat_hash_map<int64_t, std::vector<std::pair<int, double>>> faults_;
  // Free time per port: [0, 2N) intra ports (2d out, 2d + 1 in), then 2 per NIC.
  std::vector<Nanos> free_at_;
  // The healthy port occupancy of the last size committed per link class (intra, inter): a
  // collective's messages have one size, and o + b/β costs a division and a rounding call.
  struct Occupancy {
    uint64_t bytes = ~uint64_t{0};
    Nanos time{0};
  };
  Occupancy last_occupancy_[2];
};

// Rail-optimized by default (0): one NIC per device. Validated by FabricModel::Create.
std::string DescribeNics(const LinkSpec& spec);

}  // namespace rp
