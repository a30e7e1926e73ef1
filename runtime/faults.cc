#include "runtime/faults.h"

#include <cmath>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "runtime/hash.h"

namespace rp {
namespace {
absl::Status CheckRank(int rank, int n, const char* what) {
  if (rank < 0 || rank >= n) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": rank ", rank, " out of range [0, ", n, ")"));
  }
  return absl::OkStatus();
}
}  // namespace

absl::StatusOr<FaultInjector> FaultInjector::Create(const FaultPlan& plan, int num_devices) {
  if (num_devices < 1) {
    return absl::InvalidArgumentError(absl::StrCat("num_devices must be >= 1, got ", num_devices));
  }
  FaultInjector f;
  f.plan_ = plan;
  f.straggler_.assign(static_cast<size_t>(num_devices), 1.0);
  f.stop_at_.assign(static_cast<size_t>(num_devices), -1);
  for (const Straggler& s : plan.stragglers) {
    if (auto st = CheckRank(s.rank, num_devices, "straggler"); !st.ok()) return st;
    if (!(s.factor >= 1.0) || !std::isfinite(s.factor)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "straggler rank ", s.rank, ": factor must be >= 1 and finite, got ", s.factor));
    }
    if (f.straggler_[static_cast<size_t>(s.rank)] != 1.0) {
      return absl::InvalidArgumentError(absl::StrCat("straggler rank ", s.rank, " named twice"));
    }
    f.straggler_[static_cast<size_t>(s.rank)] = s.factor;
  }
  if (!(plan.jitter.max_fraction >= 0 && plan.jitter.max_fraction <= 10)) {
    return absl::InvalidArgumentError(absl::StrCat("jitter.max_fraction must be in [0, 10], got ",
                                                   plan.jitter.max_fraction));
  }
  for (const DeviceStop& s : plan.stops) {
    if (auto st = CheckRank(s.rank, num_devices, "device stop"); !st.ok()) return st;
    if (s.op_index < 0) {
      return absl::InvalidArgumentError(absl::StrCat("device stop rank ", s.rank,
                                                     ": op_index must be >= 0, got ", s.op_index));
    }
    if (f.stop_at_[static_cast<size_t>(s.rank)] >= 0) {
      return absl::InvalidArgumentError(absl::StrCat("device stop rank ", s.rank, " named twice"));
    }
    f.stop_at_[static_cast<size_t>(s.rank)] = s.op_index;
  }
  for (const OpFault& o : plan.op_faults) {
    const std::string what = absl::StrCat("op fault ", OpFaultKindName(o.kind));
    if (auto st = CheckRank(o.rank, num_devices, what.c_str()); !st.ok()) return st;
    if (o.step < 0 || o.op < 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, " rank ", o.rank,
                                                     ": step and op must be >= 0, got step ",
                                                     o.step, " op ", o.op));
    }
    if (o.kind == OpFaultKind::kSlowLink) {
      if (auto st = CheckRank(o.dst, num_devices, "op fault slow_link dst"); !st.ok()) return st;
      if (o.dst == o.rank || !(o.factor >= 1.0) || !std::isfinite(o.factor)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "op fault slow_link ", o.rank, "->", o.dst,
            ": needs src != dst and a finite factor >= 1, got factor ", o.factor));
      }
    }
  }
  // Degraded links are validated as rp::FabricModel::Create validates link faults.
  for (const DegradedLink& d : plan.degraded_links) {
    if (auto st = CheckRank(d.src, num_devices, "degraded link src"); !st.ok()) return st;
    if (auto st = CheckRank(d.dst, num_devices, "degraded link dst"); !st.ok()) return st;
    if (d.src == d.dst || !(d.factor >= 1.0) || !std::isfinite(d.factor)) {
      return absl::InvalidArgumentError(absl::StrCat("degraded link ", d.src, "->", d.dst,
                                                     ": needs src != dst and factor >= 1, got ",
                                                     d.factor));
    }
  }
  return f;
}

double FaultInjector::StragglerFactor(int rank) const {
  if (rank < 0 || static_cast<size_t>(rank) >= straggler_.size()) return 1.0;
  return straggler_[static_cast<size_t>(rank)];
}

double FaultInjector::ComputeFactor(int rank, int64_t op_index) const {
  double factor = StragglerFactor(rank);
  if (plan_.jitter.max_fraction > 0) {
    const uint64_t h = SplitMix64(plan_.jitter.seed ^ SplitMix64(
        (static_cast<uint64_t>(static_cast<uint32_t>(rank)) << 40) ^ static_cast<uint64_t>(op_index)));
    const double u = static_cast<double>(h >> 11) * 0x1.0p-53;  // [0, 1)
    factor *= 1.0 + u * plan_.jitter.max_fraction;
  }
  return factor;
}

Nanos FaultInjector::ComputeDuration(int rank, int64_t op_index, Nanos base) const {
  const double f = ComputeFactor(rank, op_index);
  if (f == 1.0) return base;
  return Nanos(static_cast<int64_t>(std::llround(static_cast<double>(base.count()) * f)));
}

bool FaultInjector::StopsAt(int rank, int64_t op_index) const {
  if (rank < 0 || static_cast<size_t>(rank) >= stop_at_.size()) return false;
  return stop_at_[static_cast<size_t>(rank)] == op_index;
}

const char* OpFaultKindName(OpFaultKind kind) {
  switch (kind) {
    case OpFaultKind::kThrow: return "throw";
    case OpFaultKind::kStall: return "stall";
    case OpFaultKind::kSlowLink: return "slow_link";
  }
  return "?";
}

const OpFault* FaultInjector::OpFaultAt(int rank, int step, int op) const {
  for (const OpFault& f : plan_.op_faults) {
    if (f.kind != OpFaultKind::kSlowLink && f.rank == rank && f.step == step && f.op == op) {
      return &f;
    }
  }
  return nullptr;
}

double FaultInjector::SlowLinkFactor(int src, int dst, int step) const {
  double factor = 1.0;
  for (const OpFault& f : plan_.op_faults) {
    if (f.kind == OpFaultKind::kSlowLink && f.rank == src && f.dst == dst && f.step <= step) {
      factor *= f.factor;
    }
  }
  return factor;
}

std::vector<std::string> FaultInjector::DescribeRank(int rank) const {
  std::vector<std::string> out;
  for (const Straggler& s : plan_.stragglers)
    if (s.rank == rank) out.push_back(absl::StrCat("rank ", rank, ": straggler x", s.factor));
  if (plan_.jitter.max_fraction > 0)
    out.push_back(absl::StrCat("rank ", rank, ": jitter up to +", plan_.jitter.max_fraction * 100,
                               "% (seed ", plan_.jitter.seed, ")"));
  for (const DegradedLink& d : plan_.degraded_links)
    if (d.src == rank) out.push_back(absl::StrCat("link ", d.src, "->", d.dst, ": degraded x", d.factor));
  for (const DeviceStop& s : plan_.stops)
    if (s.rank == rank) out.push_back(absl::StrCat("rank ", rank, ": stops at compute op ", s.op_index));
  for (const OpFault& f : plan_.op_faults) {
    if (f.rank != rank) continue;
    if (f.kind == OpFaultKind::kSlowLink) {
      out.push_back(absl::StrCat("link ", f.rank, "->", f.dst, ": slow x", f.factor, " from step ",
                                 f.step));
    } else {
      out.push_back(absl::StrCat("rank ", rank, ": ", OpFaultKindName(f.kind), " at step ", f.step,
                                 " op ", f.op));
    }
  }
  return out;
}

std::vector<std::string> FaultInjector::Describe() const {
  std::vector<std::string> out;
  for (size_t r = 0; r < straggler_.size(); ++r) {
    for (std::string& s : DescribeRank(static_cast<int>(r))) out.push_back(std::move(s));
  }
  return out;
}

}  // namespace rp
