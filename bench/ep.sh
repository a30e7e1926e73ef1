#!/usr/bin/env bash
# Wide expert parallelism on the virtual clock: what the EP all-to-alls cost the host. Virtual-clock
# MoE runs (every block MoE, experts spread over ep ranks) of the current ringpipe against a
# baseline binary built from git in the same run, in interleaved pairs (baseline, current, ...)
# so both sides of each ratio see the same phase of the host; medians of the pairs.
#
#   bash bench/ep.sh                     # baseline = BASE_REF (default: 6312741^, the EP
#                                        # all-to-all before it ran as fabric handlers)
#   PAIRS=7 STEPS=4 bash bench/ep.sh
#   BASE_REF=none bash bench/ep.sh       # current binary only
#
# Layouts (LAYOUTS, one per line): dp × pp 1 × tp 1, --hidden=64x4, every block MoE of 64 experts,
# ep 16 and ep 64 on 64 devices, ep 64 on 256 devices. Per layout: wall seconds, system CPU
# seconds and voluntary context switches (/usr/bin/time), for both binaries, and the speed-up
# (baseline wall ÷ current wall) — the median of the pairs' own ratios. Both binaries must print
# the same losses and step times (checked: the change is in how the host runs the emulation).
set -euo pipefail
cd "$(dirname "$0")/.."

PAIRS=${PAIRS:-5}
STEPS=${STEPS:-4}
BASE_REF=${BASE_REF:-6312741^}
NEW=${NEW:-build/release/apps/ringpipe}
BASE_DIR=${BASE_DIR:-/tmp/ringpipe-ep-baseline}
LAYOUTS=${LAYOUTS:-"--dp=64 --ep=16
--dp=64 --ep=64
--dp=256 --ep=64"}

[ -x "$NEW" ] || { echo "ep: build the release preset first ($NEW missing)" >&2; exit 2; }
BASE=
# shellcheck source=bench/baseline.sh
. bench/baseline.sh
[ "$BASE_REF" = none ] || BASE=$(baseline_binary "$BASE_REF" "$BASE_DIR")

OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

# run BINARY LAYOUT TAG → "wall_s sys_s voluntary_switches"; stdout kept in $OUT/TAG.txt.
run() {
  local bin=$1 layout=$2 tag=$3 out
  # shellcheck disable=SC2086  # the layout is a list of flags
  out=$( { /usr/bin/time -f "TIME %x %e %S %w" "$bin" run $layout --pp=1 --tp=1 --hidden=64x4 \
             --moe_layers=all --experts=64 --microbatches=4 --virtual_time --steps="$STEPS" \
             >"$OUT/$tag.txt"; } 2>&1 | grep '^TIME' || true )
  read -r _ code wall sys vcs <<<"$out"
  [ "${code:-1}" = 0 ] || { echo "ep: $bin failed on $layout" >&2; exit 1; }
  echo "$wall $sys $vcs"
}


printf '| layout | wall s | sys s | voluntary switches | baseline wall s | baseline sys s | baseline switches | speed-up (median of %s pairs) |\n' "$PAIRS"
printf '|---|---|---|---|---|---|---|---|\n'
while IFS= read -r layout; do
  [ -n "$layout" ] || continue
  nw=() ns=() nv=() bw=() bs=() bv=() ratios=()
  for _ in $(seq "$PAIRS"); do
    if [ -n "$BASE" ]; then
      read -r w s v < <(run "$BASE" "$layout" base)
      bw+=("$w"); bs+=("$s"); bv+=("$v")
    fi
    read -r w s v < <(run "$NEW" "$layout" new)
    nw+=("$w"); ns+=("$s"); nv+=("$v")
    if [ -n "$BASE" ]; then
      # Same emulation: every line but the host's (wall, rates, RSS) is identical.
      if ! diff -q <(grep -v '^host ' "$OUT/base.txt") <(grep -v '^host ' "$OUT/new.txt") >/dev/null; then
        echo "ep: the binaries disagree on $layout (beyond the host line)" >&2
        diff <(grep -v '^host ' "$OUT/base.txt") <(grep -v '^host ' "$OUT/new.txt") | head >&2
        exit 1
      fi
      ratios+=("$(awk -v b="${bw[-1]}" -v x="$w" 'BEGIN {printf "%.3f", b / x}')")
    fi
  done
  m() { printf '%s\n' "$@" | median; }
  if [ -n "$BASE" ]; then
    printf '| %s | %s | %s | %s | %s | %s | %s | ×%s |\n' "$layout" "$(m "${nw[@]}")" "$(m "${ns[@]}")" \
      "$(m "${nv[@]}")" "$(m "${bw[@]}")" "$(m "${bs[@]}")" "$(m "${bv[@]}")" "$(m "${ratios[@]}")"
  else
    printf '| %s | %s | %s | %s | — | — | — | — |\n' "$layout" "$(m "${nw[@]}")" "$(m "${ns[@]}")" \
      "$(m "${nv[@]}")"
  fi
done <<<"$LAYOUTS"
