#include "runtime/fabric_model.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/timing.h"

namespace rp {
namespace {

absl::Status CheckParams(const LinkParams& p, const char* field) {
  if (p.alpha < Nanos(0) || p.overhead < Nanos(0) || !(p.bandwidth_gbps >= 0) ||
      !std::isfinite(p.bandwidth_gbps)) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": alpha and overhead must be >= 0 and bandwidth finite and >= 0 (got alpha ",
        p.alpha.count(), " ns, overhead ", p.overhead.count(), " ns, bandwidth ",
        p.bandwidth_gbps, " GB/s)"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string DescribeNics(const LinkSpec& spec) {
  if (spec.nics_per_node == 0 || spec.nics_per_node == spec.devices_per_node) {
    return "one NIC per device";
  }
  if (spec.nics_per_node == 1) return "one NIC per node (shared)";
  return absl::StrCat(spec.nics_per_node, " NICs per node (", spec.devices_per_node / spec.nics_per_node,
                      " devices each)");
}

absl::StatusOr<FabricModel> FabricModel::Create(const LinkSpec& spec, int num_devices,
                                                std::vector<LinkFault> faults) {
  if (spec.devices_per_node < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("devices_per_node: must be >= 1, got ", spec.devices_per_node));
  }
  if (spec.nics_per_node < 0 || (spec.nics_per_node > 0 &&
                                 spec.devices_per_node % spec.nics_per_node != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "nics_per_node: ", spec.nics_per_node, " must be 0 (one per device) or divide devices_per_node ",
        spec.devices_per_node));
  }
  if (absl::Status s = CheckParams(spec.intra_node, "intra_node"); !s.ok()) return s;
  if (absl::Status s = CheckParams(spec.inter_node, "inter_node"); !s.ok()) return s;
  if (num_devices < 1) {
    return absl::InvalidArgumentError(absl::StrCat("num_devices: must be >= 1, got ", num_devices));
  }
  for (const LinkFault& f : faults) {
    if (f.src < 0 || f.src >= num_devices || f.dst < 0 || f.dst >= num_devices || f.src == f.dst) {
      return absl::InvalidArgumentError(absl::StrCat("link fault ", f.src, " -> ", f.dst,
                                                     ": devices must differ and be in [0, ",
                                                     num_devices, ")"));
    }
    if (!(f.factor >= 1.0) || !std::isfinite(f.factor) || f.from_step < 0) {
      return absl::InvalidArgumentError(absl::StrCat("link fault ", f.src, " -> ", f.dst,
                                                     ": factor must be finite and >= 1, step >= 0"));
    }
  }
  return FabricModel(spec, num_devices, std::move(faults));
}

FabricModel::FabricModel(const LinkSpec& spec, int num_devices, std::vector<LinkFault> faults)
    : spec_(spec), num_devices_(num_devices) {
  const int nodes = (num_devices + spec.devices_per_node - 1) / spec.devices_per_node;
  num_nics_ = nodes * NicsPerNode();
  free_at_.assign(static_cast<size_t>(2 * num_devices + 2 * num_nics_), Nanos(0));
  for (const LinkFault& f : faults) {
    faults_[int64_t{f.src} * num_devices + f.dst].push_back({f.from_step, f.factor});
  }
}

int FabricModel::NicsPerNode() const {
  return spec_.nics_per_node == 0 ? spec_.devices_per_node : spec_.nics_per_node;
}

int FabricModel::EgressPort(int device, LinkClass c) const {
  if (c == LinkClass::kIntraNode) return 2 * device;
  const int node = device / spec_.devices_per_node;
  const int local = device % spec_.devices_per_node;
  const int nic = node * NicsPerNode() + local * NicsPerNode() / spec_.devices_per_node;
  return 2 * num_devices_ + 2 * nic;
}

int FabricModel::IngressPort(int device, LinkClass c) const { return EgressPort(device, c) + 1; }

double FabricModel::FactorOf(int src, int dst, int step) const {
  if (faults_.empty()) return 1.0;
  auto it = faults_.find(int64_t{src} * num_devices_ + dst);
  if (it == faults_.end()) return 1.0;
  double f = 1.0;
  for (const auto& [from, factor] : it->second) {
    if (from <= step) f *= factor;
  }
  return f;
}

MessageTiming FabricModel::Time(const FabricMessage& m, Nanos egress_free,
                                Nanos ingress_free) const {
  MessageTiming t;
  t.ready = m.ready;
  t.link_class = spec_.ClassOf(m.src, m.dst);
  if (t.link_class == LinkClass::kSelf) {
    t.start = t.last_byte = t.arrival = m.ready;
    return t;
  }
  const LinkParams& p =
      t.link_class == LinkClass::kIntraNode ? spec_.intra_node : spec_.inter_node;
  const double f = FactorOf(m.src, m.dst, m.step);
  t.egress_port = EgressPort(m.src, t.link_class);
  t.ingress_port = IngressPort(m.dst, t.link_class);
  t.start = std::max({m.ready, egress_free, ingress_free});
  t.last_byte = SaturatingAdd(t.start, PortOccupancy(p, m.bytes, f));
  t.arrival = SaturatingAdd(t.last_byte, LinkLatency(p, f));
  return t;
}

MessageTiming FabricModel::CommitOn(const FabricMessage& m, LinkClass c, int egress, int ingress) {
  const LinkParams& p = c == LinkClass::kIntraNode ? spec_.intra_node : spec_.inter_node;
  const double f = FactorOf(m.src, m.dst, m.step);
  Nanos occupancy;
  if (f == 1.0) {
    Occupancy& last = last_occupancy_[c == LinkClass::kIntraNode ? 0 : 1];
    if (last.bytes != m.bytes) last = {m.bytes, PortOccupancy(p, m.bytes, 1.0)};
    occupancy = last.time;
  } else {
    occupancy = PortOccupancy(p, m.bytes, f);
  }
  Nanos& out = free_at_[static_cast<size_t>(egress)];
  Nanos& in = free_at_[static_cast<size_t>(ingress)];
  MessageTiming t;
  t.ready = m.ready;
  t.link_class = c;
  t.egress_port = egress;
  t.ingress_port = ingress;
  t.start = std::max({m.ready, out, in});
  t.last_byte = SaturatingAdd(t.start, occupancy);
  t.arrival = SaturatingAdd(t.last_byte, LinkLatency(p, f));
  out = in = t.last_byte;
  return t;
}

MessageTiming FabricModel::Commit(const FabricMessage& m) {
  const LinkClass c = spec_.ClassOf(m.src, m.dst);
  if (c == LinkClass::kSelf) return Time(m, Nanos(0), Nanos(0));
  return CommitOn(m, c, EgressPort(m.src, c), IngressPort(m.dst, c));
}

MessageTiming FabricModel::CommitThrough(const FabricMessage& m, int ingress_device) {
  const LinkClass c = spec_.ClassOf(m.src, m.dst);
  if (c == LinkClass::kSelf) return Time(m, Nanos(0), Nanos(0));
  return CommitOn(m, c, EgressPort(m.src, c), IngressPort(ingress_device, c));
}

MessageTiming FabricModel::Uncontended(const FabricMessage& m) const {
  return Time(m, Nanos(0), Nanos(0));
}

void FabricModel::Reset() { std::fill(free_at_.begin(), free_at_.end(), Nanos(0)); }

std::string FabricModel::PortName(int port) const {
  if (port < 0 || port >= num_ports()) return "no port";
  const char* dir = port % 2 == 0 ? "out" : "in";
  if (port < 2 * num_devices_) return absl::StrCat("dev ", port / 2, " nvlink ", dir);
  const int nic = (port - 2 * num_devices_) / 2;
  return absl::StrCat("node ", nic / NicsPerNode(), " nic ", nic % NicsPerNode(), " ", dir);
}

}  // namespace rp
