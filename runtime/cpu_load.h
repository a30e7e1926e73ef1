// rp::CpuLoad: how much of the host's CPU time other processes use, from /proc/stat and this
// process's own CPU clock. RealClock uses it to stop precise waiting (short timer slack, spinning)
// when the host is busy with other work: every microsecond a waiter spins is then taken from the
// threads being woken, and the waits' tail grows past a plain sleep's (docs/runtime.md).
//
// External load over an interval = (CPU time all CPUs were busy − CPU time of this process) /
// (CPU time of all CPUs, busy or idle), in [0, 1]. "Busy" counts user, nice, system, irq, softirq
// and steal (a hypervisor running other guests on our CPUs is load too); idle and iowait are idle.
// The kernel counts in ticks (USER_HZ, usually 100 per second), so an interval of 200 ms on 2 CPUs
// resolves the fraction to 1/40.
//
// Example:
//   RP_ASSIGN_OR_RETURN(LoadSample a, ReadLoadSample());
//   ... 200 ms later ...
//   RP_ASSIGN_OR_RETURN(LoadSample b, ReadLoadSample());
//   LoadShares s = MeasureShares(a, b);  // s.external 0.5: others kept one of two CPUs busy
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace rp {

// Cumulative ticks of all CPUs (the aggregate "cpu" line of /proc/stat).
struct CpuTicks {
  uint64_t busy = 0;   // user + nice + system + irq + softirq + steal
  uint64_t total = 0;  // busy + idle + iowait
};

// Parses the first line of /proc/stat ("cpu  user nice system idle iowait irq softirq steal ...";
// at least the first four fields; missing later ones count as 0). InvalidArgument naming what is
// wrong otherwise.
absl::StatusOr<CpuTicks> ParseProcStatCpu(std::string_view proc_stat);

struct LoadSample {
  CpuTicks cpu;
  int64_t process_cpu_ns = 0;  // this process's CPU time (all threads)
};

// Reads /proc/stat and CLOCK_PROCESS_CPUTIME_ID. Unimplemented off Linux; Unavailable when
// /proc/stat cannot be read.
absl::StatusOr<LoadSample> ReadLoadSample();

// Shares of all CPUs' time between two samples, each in [0, 1].
struct LoadShares {
  double external = 0;  // busy outside this process
  double own = 0;       // this process
};

// Shares between samples a and b (a taken first); zeros when no tick elapsed. `ns_per_tick` is
// 1e9 / USER_HZ (default: this host's). The process's CPU time is counted in ns, the CPUs' in
// ticks, so `own` is capped at the busy share and `external` is what is left of it.
LoadShares MeasureShares(const LoadSample& a, const LoadSample& b, int64_t ns_per_tick = 0);

}  // namespace rp
