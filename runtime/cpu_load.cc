#include "runtime/cpu_load.h"

#include <time.h>
#ifdef __linux__
#include <fcntl.h>
#include <unistd.h>
#endif

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace rp {

absl::StatusOr<CpuTicks> ParseProcStatCpu(std::string_view text) {
  const size_t eol = text.find('\n');
  std::string_view line = text.substr(0, eol);
  if (line.substr(0, 4) != "cpu ") {
    return absl::InvalidArgumentError(
        absl::StrCat("/proc/stat: the first line does not start with \"cpu \": \"",
                     std::string(line.substr(0, 40)), "\""));
  }
  line.remove_prefix(4);
  uint64_t field[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int fields = 0;
  while (fields < 8) {
    while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    if (line.empty()) break;
    const auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), field[fields]);
    if (ec != std::errc() || (end != line.data() + line.size() && *end != ' ')) {
      return absl::InvalidArgumentError(
          absl::StrCat("/proc/stat: cpu field ", fields + 1, " is not a tick count"));
    }
    line.remove_prefix(static_cast<size_t>(end - line.data()));
    ++fields;
  }
  if (fields < 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("/proc/stat: the cpu line has ", fields, " fields, expected at least 4"));
  }
  // user nice system idle iowait irq softirq steal (guest time is already inside user).
  CpuTicks t;
  t.busy = field[0] + field[1] + field[2] + field[5] + field[6] + field[7];
  t.total = t.busy + field[3] + field[4];
  return t;
}

absl::StatusOr<LoadSample> ReadLoadSample() {
#ifdef __linux__
  LoadSample s;
  char buf[512];
  const int fd = ::open("/proc/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("/proc/stat: ", std::strerror(errno)));
  }
  const ssize_t n = ::read(fd, buf, sizeof(buf));  // the first line fits (10 fields)
  ::close(fd);
  if (n <= 0) return absl::UnavailableError("/proc/stat: empty read");
  auto ticks = ParseProcStatCpu(std::string_view(buf, static_cast<size_t>(n)));
  if (!ticks.ok()) return ticks.status();
  s.cpu = *ticks;
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  s.process_cpu_ns = int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
  return s;
#else
  return absl::UnimplementedError("CPU load sampling needs Linux /proc/stat");
#endif
}

LoadShares MeasureShares(const LoadSample& a, const LoadSample& b, int64_t ns_per_tick) {
  if (ns_per_tick <= 0) {
#ifdef __linux__
    static const int64_t host = 1'000'000'000 / std::max<long>(1, sysconf(_SC_CLK_TCK));
    ns_per_tick = host;
#else
    ns_per_tick = 10'000'000;
#endif
  }
  LoadShares shares;
  if (b.cpu.total <= a.cpu.total) return shares;
  const double total_ns = static_cast<double>(b.cpu.total - a.cpu.total) * static_cast<double>(ns_per_tick);
  const double busy_ns = static_cast<double>(b.cpu.busy >= a.cpu.busy ? b.cpu.busy - a.cpu.busy : 0) *
                         static_cast<double>(ns_per_tick);
  const double own_ns =
      std::min(busy_ns, static_cast<double>(std::max<int64_t>(0, b.process_cpu_ns - a.process_cpu_ns)));
  shares.own = std::clamp(own_ns / total_ns, 0.0, 1.0);
  shares.external = std::clamp((busy_ns - own_ns) / total_ns, 0.0, 1.0);
  return shares;
}

}  // namespace rp
