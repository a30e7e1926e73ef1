// The clock choice's warnings, as a library (apps/clock_choice.h): the scale it suggests against the
// watchdog, the scale it names however far the host missed, never one the run refuses, and which
// choices say whether the calibration sustained their scale. Through the binary: clock_test.cc.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "apps/clock_choice.h"
#include "apps/report.h"
#include "tests/apps/binary_runner.h"

namespace rp::apps {
namespace {

// The clock choice of a run whose time scale was forced to `scale`.
ClockChoice Forced(double scale) {
  ClockChoice c;
  c.mode = ClockChoice::Mode::kForced;
  c.scale = scale;
  return c;
}

// A forced scale the host did not keep gets a warning naming a scale it would keep; when that scale
// would make the longest op (or message wait) outlast the watchdog, the run refuses it, so the
// warning says which watchdog it needs (run --steps=3 --time_scale=0.05 --watchdog_timeout=0.005
// missed by +73.5 %: time scale 5 (0.05 × 73.5 × 1.25, rounded up) would likely keep up, and run
// --time_scale=5 --watchdog_timeout=0.005 exits 2: its 4 ms op takes 0.02 s).
TEST(Clock, ASuggestedScaleOverTheWatchdogSaysWhichWatchdogItNeeds) {
  ClockChoice forced = Forced(0.05);
  const HostVerdict v = JudgeHostFidelity(forced, 0.735, 0.005, /*watchdog_scale_limit=*/1.25);
  EXPECT_FALSE(v.trusted);
  EXPECT_EQ(v.suggested_scale, 5);
  EXPECT_NE(v.warning.find("time scale 5 would likely keep up with watchdog_timeout raised above 0.02 s"),
            std::string::npos)
      << v.warning;
  EXPECT_DOUBLE_EQ(v.suggested_watchdog_s, 0.02);
  EXPECT_DOUBLE_EQ(ClockJson(forced, v)["suggested_watchdog_timeout"].get<double>(), 0.02);
  // Below the limit (or without one) the suggestion stands alone.
  for (const double limit : {5.5, std::numeric_limits<double>::infinity()}) {
    const HostVerdict w = JudgeHostFidelity(forced, 0.735, 0.005, limit);
    EXPECT_EQ(w.warning.find("watchdog_timeout"), std::string::npos) << w.warning;
    EXPECT_TRUE(ClockJson(forced, w)["suggested_watchdog_timeout"].is_null());
    EXPECT_NE(w.warning.find("time scale 5 would likely keep up (or omit --time_scale"), std::string::npos)
        << w.warning;
  }
}

// The suggestion is the scale the estimate says keeps up, however far the host missed: run
// --time_scale=0.01 missed by +8292 % and its warning said "time scale 0.8 would likely keep up"
// (the estimate was capped at × 64), on a host that missed by +16 to +90 % at scale 1.
TEST(Clock, TheWarningNamesAScaleTheEstimateSaysKeepsUpHoweverFarTheHostMissed) {
  ClockChoice forced = Forced(0.01);
  const HostVerdict v = JudgeHostFidelity(forced, 82.92);
  EXPECT_FALSE(v.trusted);
  // fidelity ∝ 1 / scale: within 1 % from 0.01 × 8292 = 82.92 on; with the estimate's 1.25 margin.
  EXPECT_GE(v.suggested_scale, 0.01 * 82.92 / 0.01 * 1.25);
  EXPECT_NE(v.warning.find("time scale 150 would likely keep up"), std::string::npos) << v.warning;
}

// A suggestion past the largest scale time_scale takes (1000) would name a value the run refuses: the
// warning says no scale up to 1000 keeps up and points at the virtual clock (a forced 500 missing by
// +500 % said "time scale 400000 would likely keep up").
TEST(Clock, TheWarningNeverSuggestsAScaleTheRunRefuses) {
  ClockChoice forced = Forced(500);
  const HostVerdict v = JudgeHostFidelity(forced, 5.0);
  EXPECT_FALSE(v.trusted);
  EXPECT_GT(v.suggested_scale, kMaxTimeScale);
  EXPECT_EQ(v.warning.find("time scale 400000 would likely keep up"), std::string::npos) << v.warning;
  EXPECT_NE(v.warning.find("no time scale up to 1000 (the largest time_scale takes) would likely keep up"),
            std::string::npos)
      << v.warning;
  EXPECT_NE(v.warning.find("--virtual_time"), std::string::npos) << v.warning;
  // At the bound itself the scale is named as before.
  const HostVerdict w = JudgeHostFidelity(forced, 0.015);
  EXPECT_EQ(w.suggested_scale, 1000);
  EXPECT_NE(w.warning.find("time scale 1000 would likely keep up"), std::string::npos) << w.warning;
}

// A forced scale is not calibrated: the report's sustained_in_calibration is null, not true (as it
// said, with empty calibration_trials), and so on the virtual clock; auto's says what its trials found.
TEST(Clock, OnlyAutoSaysWhetherTheCalibrationSustainedItsScale) {
  ClockChoice forced = Forced(2);
  EXPECT_TRUE(ClockJson(forced, JudgeHostFidelity(forced, 0))["sustained_in_calibration"].is_null());
  EXPECT_TRUE(ClockJson(ClockChoice{}, HostVerdict{})["sustained_in_calibration"].is_null());
  ClockChoice automatic;
  automatic.mode = ClockChoice::Mode::kAuto;
  automatic.sustained = false;
  EXPECT_EQ(ClockJson(automatic, JudgeHostFidelity(automatic, 0))["sustained_in_calibration"], false);
}

}  // namespace
}  // namespace rp::apps
