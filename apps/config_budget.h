// The modeled-time and traffic budgets of a config: ValidateConfig's (the cost model's op times, the
// step and T1 within the time base, the messages per device and step), and the same estimates
// behind the run-time checks of faults, of the real clock against the watchdog and of predictions
// (apps/config.h). Internal to apps/ (config_validate.cc, config_budget.cc).
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "apps/config.h"
#include "runtime/link.h"

namespace rp::apps::budget {

// Every modeled time is int64 nanoseconds: a single op may last at most 1e9 ms (1e15 ns), a whole
// step, and T1 (every compute op of the global batch on one device), at most 1e18 ns (~32 years),
// well inside 2^63 ≈ 9.2e18 so that sums of a few of them still fit.
inline constexpr double kMaxOpNs = 1e15;
inline constexpr double kMaxTotalNs = 1e18;
// Modeled messages one device may put on the fabric per step (ring segments, p2p): every one is an
// event of the emulator and of the predictor, so tiny segments on a large modeled gradient would
// run for hours (a few seconds of predictor time per device at this bound).
inline constexpr double kMaxMessagesPerDeviceStep = double{1 << 22};

// A number as its shortest round-trip decimal ("1048576", "1.0000001"), for range messages: absl::StrCat's
// 6 significant digits print an out-of-range 1.0000001 as "1", which reads as inside (0, 1].
std::string Exact(double x);

// Upper bounds of the modeled sizes the fabric will time (schedule/workload_cost.h), for the budgets.
struct ModeledSizes {
  double gradient_bytes = 0;    // fp32 gradients of the busiest device
  double tp_bytes = 0;          // the TP all-reduces of one pass of one chunk
  double activation_bytes = 0;  // one p2p message
  double layers = 1;            // layers of the model
};

// Each entry of a per-stage op time list (forward_ms, backward_ms, weight_grad_ms) in [0, 1e9] ms, else
// FieldError with its 1-based position: "--forward_ms: entry 2 of 3 is -1; must be in [0, 1e9] ms".
absl::Status CheckOpTimesMs(const char* field, const std::vector<double>& list);
// The cost model's checks (fixed: per-stage F/B/W lists; FLOPs: the described transformer) and the
// modeled F + B + optimizer of one micro-batch in ns of the busiest rank. `time_field` receives the
// field that makes the times large, `sizes` the modeled sizes, `longest_op` the longest single
// compute op in ns (an F, a B, a fused F&B, the optimizer; stragglers included).
absl::StatusOr<double> CheckCostModel(const RunConfig& cfg, std::string& time_field, ModeledSizes& sizes,
                                      double& longest_op);
// The step, T1 and the step's communication (times `link_factor`) within the time base.
absl::Status CheckTimeBudget(const RunConfig& cfg, const LinkSpec& links, double op_ns, const std::string& time_field,
                             const ModeledSizes& sizes, double link_factor = 1);
// The step's modeled messages per device within kMaxMessagesPerDeviceStep.
absl::Status CheckMessages(const RunConfig& cfg, const ModeledSizes& sizes);
// A real-clock op of `longest_op_ns` at `time_scale` within the watchdog (FieldError naming `field`).
absl::Status OpsFitTheWatchdog(const RunConfig& cfg, double longest_op_ns, double time_scale,
                               const std::string& field, double op_factor = 1);

}  // namespace rp::apps::budget
