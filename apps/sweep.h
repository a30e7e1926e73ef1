// `ringpipe sweep`'s pieces (apps/sweep_cmd.cc runs them): axes (parsed from --axis), points (one
// config each, run or predicted), and the outputs (CSV, JSON, SVG charts, the text table). Column and
// chart definitions are documented in docs/studies.md.
//
// Thread safety: plain data and functions; single-threaded.
#pragma once

#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "apps/config.h"
#include "apps/svg.h"
#include "nlohmann/json.hpp"

namespace rp::apps::sweep {

inline constexpr size_t kMaxPoints = 4096;
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// One --axis: one field, or several linked ones that move together.
struct Axis {
  std::vector<std::string> fields;               // one, or several linked
  std::vector<std::vector<std::string>> values;  // values[i][f]: the i-th value of field f
  std::string name() const;                      // "pp" or "pp:forward_ms"
};

// "NAME=V1,V2,...", "NAME=A..B", "A:B=1:2,3:4". InvalidArgument naming --axis.
absl::StatusOr<Axis> ParseAxis(const std::string& spec);
// An axis value as its field's JSON value, read by the field's grammar (as its flag would be).
absl::StatusOr<nlohmann::json> ValueJson(const std::string& axis, const std::string& field, const std::string& text);

// One point's figures on one timeline (measured: a run's wall stamps ÷ time scale; predicted: the
// predictor). Bytes and memory are modeled (what the fabric times) on both: measured ones are the run's
// fabric counts.
struct Metrics {
  double step_ms = kNaN, speedup = kNaN, efficiency = kNaN, bubble = kNaN, exposed_ms = kNaN;
  double peer_wait_ms = kNaN;
  double host_late_ms = kNaN;  // a run's only (docs/report.md host_late_ms): the host waking devices late
  // The pipeline's largest bubbles, ms (docs/schedules.md "Makespan and per-rank span"): with the
  // flush (makespan − busy) and in the per-rank span (what zero-bubble papers quote; ZB-H2 and ZB-V
  // close this one, not the other).
  double makespan_bubble_ms = kNaN, span_bubble_ms = kNaN;
  double peak_bytes = kNaN, wire_bytes = kNaN;  // modeled
};

struct Point {
  int index = 0;
  std::vector<size_t> coord;  // value index per axis
  std::vector<FieldOverride> overrides;
  std::string label;          // "pp=2 microbatches=8"
  std::string status = "ok";  // ok | invalid | failed
  std::string error;
  RunConfig cfg;              // valid when status != invalid
  Metrics measured, predicted;
  double emulated_step_ms = kNaN;
  // The real MLP's buffers (a run only): max over devices.
  double real_peak_bytes = kNaN, real_wire_bytes = kNaN;
  double t1_ms = kNaN, fidelity_host = kNaN, fidelity_model = kNaN, wall_seconds = kNaN;
  double time_scale = kNaN;  // the real-clock scale the point ran at (auto: the one it measured)
};

// Runs one valid point: predict, then (unless predict_only) emulate. Sets status/error on failure.
void RunPoint(Point& p, bool predict_only);

struct ChartSpec {
  const char* file;
  const char* title;
  const char* y_label;
  bool bytes;
  double Metrics::*field;
};
// The six metric charts (overview.svg holds them all).
extern const ChartSpec kCharts[6];

// The CSV header (docs/studies.md lists exactly these, in this order).
const std::vector<std::string>& CsvColumns();
std::string BuildCsv(const std::vector<Point>& points);
nlohmann::json BuildJson(const std::vector<Axis>& axes, const std::vector<Point>& points, bool predict_only);
std::vector<svg::Chart> BuildCharts(const std::vector<Axis>& axes, const std::vector<Point>& points,
                                    bool predict_only);
// The table printed on standard output.
std::string Table(const std::vector<Axis>& axes, const std::vector<Point>& points, bool predict_only);

}  // namespace rp::apps::sweep
