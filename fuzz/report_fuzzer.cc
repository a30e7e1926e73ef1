// libFuzzer target: arbitrary bytes as the report that `ringpipe timeline --from_report=FILE` draws
// (apps/report_reader.h), then the chart it draws.
//
// Properties (a violation aborts, which libFuzzer reports as a crash with the input saved):
//   * no crash, no sanitizer report, no hang, no unbounded allocation (libFuzzer's limits);
//   * a rejection is InvalidArgument with a non-empty, one-line, printable message;
//   * an accepted report has at least one panel, finite non-negative times, and draws an SVG.
//
// Run: scripts/fuzz.sh (docs/fuzzing.md).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "apps/flags.h"
#include "apps/report_reader.h"
#include "apps/svg.h"

namespace {

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "report_fuzzer: %s\n  %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto report = rp::apps::ReadTimelineReport(text);
  if (!report.ok()) {
    const std::string msg(report.status().message());
    if (report.status().code() != absl::StatusCode::kInvalidArgument) Fail("rejection is not InvalidArgument", msg);
    if (msg.empty() || rp::apps::OneLine(msg) != msg) Fail("message is not one printable line", msg);
    return 0;
  }
  if (report->panels.empty()) Fail("accepted a report with no panel", report->title);
  for (const rp::apps::svg::GanttPanel& p : report->panels) {
    if (!std::isfinite(p.span_ms) || p.span_ms < 0) Fail("bad span", p.title);
    for (const rp::apps::svg::GanttBar& b : p.bars) {
      if (!(b.start_ms >= 0 && b.end_ms >= b.start_ms && std::isfinite(b.end_ms))) Fail("bad bar", p.title);
      if (b.row < 0 || static_cast<size_t>(b.row) >= p.rows.size()) Fail("bar outside the rows", p.title);
    }
  }
  const std::string svg = rp::apps::svg::RenderGantt(report->title, report->panels);
  if (svg.find("<svg") == std::string::npos) Fail("no SVG drawn", report->title);
  return 0;
}
