#!/usr/bin/env bash
# The virtual clock's watchdog on a busy host (issue 13 §5: a stall is "no device made progress for
# the timeout", never elapsed wall time). Healthy virtual-clock runs with a short watchdog timeout
# while LOAD busy loops keep every core busy, current binary against a baseline built from git in
# the same run, interleaved; then true stalls (an injected one) under the same load must still be
# reported, naming the stalled rank.
#
#   bash bench/watchdog_load.sh                    # baseline BASE_REF (default d4fcbb8: before the
#                                                  # monitor's look at what the host runs), 20 runs
#   RUNS=40 LOAD=8 TIMEOUT=0.05 bash bench/watchdog_load.sh
#   BASE_REF=none bash bench/watchdog_load.sh      # current binary only
#   BASE=/path/to/ringpipe bash bench/watchdog_load.sh  # a baseline binary already built
#
# Layout: 256 replicas (`--dp=256 --pp=1 --tp=1`, 3 steps): every replica's optimizer waits for the
# data lane's reductions, and 256 device threads share the cores with the load.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-20}
LOAD=${LOAD:-8}
TIMEOUT=${TIMEOUT:-0.05}
BASE_REF=${BASE_REF:-d4fcbb8}
NEW=${NEW:-build/release/apps/ringpipe}
BASE_DIR=${BASE_DIR:-/tmp/ringpipe-watchdog-baseline}

[ -x "$NEW" ] || { echo "watchdog_load: build the release preset first ($NEW missing)" >&2; exit 2; }
# shellcheck source=bench/baseline.sh
. bench/baseline.sh
BINS=("$NEW")
if [ -n "${BASE:-}" ]; then BINS+=("$BASE")  # a baseline binary already built
elif [ "$BASE_REF" != none ]; then BINS+=("$(baseline_binary "$BASE_REF" "$BASE_DIR")"); fi

WORK=$(mktemp -d)
LOADERS=()
cleanup() {
  [ ${#LOADERS[@]} -eq 0 ] || kill "${LOADERS[@]}" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
for _ in $(seq "$LOAD"); do ( while :; do :; done ) & LOADERS+=($!); done

args=(run --virtual_time --dp=256 --pp=1 --tp=1 --steps=3 --watchdog_timeout="$TIMEOUT"
      --report_json="$WORK/r.json")
declare -A ok stalls
for _ in $(seq "$RUNS"); do
  for b in "${BINS[@]}"; do
    if "$b" "${args[@]}" >/dev/null 2>"$WORK/err"; then
      ok[$b]=$((${ok[$b]:-0} + 1))
    elif grep -q "no device made progress" "$WORK/err"; then
      stalls[$b]=$((${stalls[$b]:-0} + 1))
    else
      echo "watchdog_load: $b failed otherwise: $(tail -1 "$WORK/err")" >&2
    fi
  done
done
echo "healthy runs under a load of $LOAD busy loops on $(nproc) cores, --watchdog_timeout=$TIMEOUT, $RUNS each:"
printf '| binary | completed | false stalls |\n|---|---|---|\n'
for b in "${BINS[@]}"; do printf '| %s | %d | %d |\n' "$b" "${ok[$b]:-0}" "${stalls[$b]:-0}"; done

echo "true stalls (stall:rank=7,step=1,op=2) under the same load, current binary:"
for _ in 1 2 3; do
  t0=$(date +%s.%N)
  code=0
  "$NEW" "${args[@]}" --fault='stall:rank=7,step=1,op=2' >/dev/null 2>"$WORK/err" || code=$?
  t1=$(date +%s.%N)
  # The monitor's report, or (if the host kept the monitor's looks from counting that long) the
  # stalled device's own, after twice the monitor's deadline.
  printf '  exit %d after %.2f s: %s; %s\n' "$code" "$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')" \
    "$(grep -o 'no device made progress for [0-9.]* ms ([^)]*)\|injected fault: stall [^:]*: no progress for [0-9.]* ms' "$WORK/err" | head -1)" \
    "$(grep -o 'running without progress: rank [0-9]*\|rank [0-9]* in op .stalled by injected fault' "$WORK/err" | head -1)"
done
