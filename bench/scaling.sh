#!/usr/bin/env bash
# The time engine's scaling benchmark (issue 13 §3): virtual-clock runs of growing layouts, the
# current ringpipe against a baseline binary built from git in the same run, medians of repeated
# runs, timings as ratios against the baseline.
#
#   bash bench/scaling.sh                  # baseline = BASE_REF (default: 0b37b01, main before the
#                                          # time engine), devices 256 512 1024 (+ 2048 4096 new only)
#   REPS=5 PAIRS=7 STEPS=10 bash bench/scaling.sh
#   BASE_REF=none bash bench/scaling.sh    # current binary only
#
# Layout as the issue: pp 8 × tp 2 × dp, --hidden=64x16 --microbatches=4, default costs, 10 steps.
# Each run prints wall seconds, peak RSS (KB, /usr/bin/time) and device-ops per second (compute ops
# of all devices ÷ wall seconds: devices × steps × ops per device per step, as the report counts
# them). The baseline is skipped above BASE_MAX_DEVICES (it takes minutes there or fails).
#
# Then issue 13's linear-scaling figure: wall time per device-op of the largest layout over that of
# the smallest (target <= 1.5), from PAIRS (default 5) interleaved pairs (small, large, small,
# large, ...) so both sides of each ratio see the same phase of the host — whose speed drifts by
# ±20 % over minutes, more than the sizes' own difference — and the median of the pairs' ratios.
set -euo pipefail
cd "$(dirname "$0")/.."

REPS=${REPS:-3}
PAIRS=${PAIRS:-5}
STEPS=${STEPS:-10}
BASE_REF=${BASE_REF:-0b37b01}
BASE_MAX_DEVICES=${BASE_MAX_DEVICES:-1024}
DEVICES=${DEVICES:-"256 512 1024 2048 4096"}
NEW=${NEW:-build/release/apps/ringpipe}
BASE_DIR=${BASE_DIR:-/tmp/ringpipe-baseline}

[ -x "$NEW" ] || { echo "scaling: build the release preset first ($NEW missing)" >&2; exit 2; }
# shellcheck source=bench/baseline.sh
. bench/baseline.sh
[ "$BASE_REF" = none ] || BASE=$(baseline_binary "$BASE_REF" "$BASE_DIR")

REPORT=$(mktemp -d)/report.json
trap 'rm -rf "$(dirname "$REPORT")"' EXIT

# run BINARY DP [report] → "wall_s rss_kb"; with "report", the current binary's report is kept in
# $REPORT (device-ops/s and RSS per device beyond the model's buffers come from its host section).
run() {
  local bin=$1 dp=$2 extra=() out
  [ "${3:-}" = report ] && extra=(--report_json="$REPORT")
  # A run that fails (the baseline's wall-time watchdog on a busy host) prints "fail <wall>".
  out=$( { /usr/bin/time -f "TIME %x %e %M" "$bin" run --dp="$dp" --pp=8 --tp=2 --hidden=64x16 \
             --microbatches=4 --virtual_time --steps="$STEPS" "${extra[@]}" >/dev/null; } 2>&1 |
         grep '^TIME' || true )
  read -r _ code wall rss <<<"$out"
  if [ "${code:-1}" = 0 ]; then echo "$wall $rss"; else echo "fail ${wall:-0}"; fi
}

# host figures of the last report: "device_ops/s messages/s rss_per_device_kb emulated==predicted"
host_figures() {
  python3 - "$REPORT" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
h = r["host"]
st = r["step_time_ms"]
print("%.0f %.0f %.0f %s" % (h["device_ops_per_second"], h["fabric_messages_per_second"], h["rss_per_device_bytes"] / 1024,
                        "yes" if abs(st["emulated"] - st["predicted"]) < 1e-6 else "NO"))
PY
}


printf '| devices | ringpipe wall s (median of %s) | device-ops/s | µs per device-op | messages/s | µs per message | RSS/device KB (beyond model) | emulated == predicted | baseline wall s | speed-up |\n' "$REPS"
printf '|---|---|---|---|---|---|---|---|---|---|\n'
for n in $DEVICES; do
  dp=$((n / 16))
  new_walls=() base_walls=() base_bounds=() ops=() msgs=() rss=0 same=yes base_failed=0
  for _ in $(seq "$REPS"); do
    read -r w _ < <(run "$NEW" "$dp" report)
    [ "$w" = fail ] && { echo "scaling: ringpipe failed at $n devices" >&2; exit 1; }
    new_walls+=("$w")
    read -r o g k e < <(host_figures)
    ops+=("$o"); msgs+=("$g"); rss=$k; [ "$e" = yes ] || same=NO
    if [ "${BASE:-}" != "" ] && [ "$n" -le "$BASE_MAX_DEVICES" ]; then
      read -r w fw < <(run "$BASE" "$dp")
      if [ "$w" = fail ]; then
        base_failed=$((base_failed + 1)); base_bounds+=("$fw")
      else
        base_walls+=("$w"); base_bounds+=("$w")
      fi
    fi
  done
  nw=$(printf '%s\n' "${new_walls[@]}" | median)
  no=$(printf '%s\n' "${ops[@]}" | median)
  us=$(awk -v o="$no" 'BEGIN {printf "%.1f", 1e6 / o}')
  nm=$(printf '%s\n' "${msgs[@]}" | median)
  usm=$(awk -v o="$nm" 'BEGIN {printf "%.2f", 1e6 / o}')
  if [ ${#base_walls[@]} -gt 0 ]; then
    bw=$(printf '%s\n' "${base_walls[@]}" | median)
    ratio=$(awk -v b="$bw" -v x="$nw" 'BEGIN {printf "%.1f×", b / x}')
  else
    bw="—"; ratio="—"
  fi
  if [ "$base_failed" -gt 0 ]; then
    # A failed run would have taken longer than its wall time at the failure: counted at that
    # time, every value is at most the run's own, so their median is a lower bound of the
    # baseline's median and the ratio a lower bound of the speed-up (dropping the failed runs is
    # neither: they fail when the host is slow).
    bl=$(printf '%s\n' "${base_bounds[@]}" | median)
    bw="$bw ($base_failed of $REPS failed; >= $bl counting them at their failure time)"
    ratio="$ratio (>= $(awk -v b="$bl" -v x="$nw" 'BEGIN {printf "%.1f×", b / x}'))"
  fi
  printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$n" "$nw" "$no" "$us" "$nm" "$usm" "$rss" "$same" "$bw" "$ratio"
done

# Linear scaling: µs per device-op, largest ÷ smallest layout, interleaved pairs.
sizes=($DEVICES)
small=${sizes[0]} large=${sizes[${#sizes[@]}-1]}
if [ "$small" != "$large" ]; then
  ratios=()
  for _ in $(seq "$PAIRS"); do
    read -r w _ < <(run "$NEW" $((small / 16)) report)
    [ "$w" = fail ] && { echo "scaling: ringpipe failed at $small devices" >&2; exit 1; }
    read -r os _ < <(host_figures)
    read -r w _ < <(run "$NEW" $((large / 16)) report)
    [ "$w" = fail ] && { echo "scaling: ringpipe failed at $large devices" >&2; exit 1; }
    read -r ol _ < <(host_figures)
    ratios+=("$(awk -v s="$os" -v l="$ol" 'BEGIN {printf "%.3f", s / l}')")
  done
  printf '\nµs per device-op, %s ÷ %s devices, %s interleaved pairs: %s; median %s (issue 13 target: <= 1.5)\n' \
    "$large" "$small" "$PAIRS" "${ratios[*]}" "$(printf '%s\n' "${ratios[@]}" | median)"
fi
