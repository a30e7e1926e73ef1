#!/usr/bin/env bash
# What writing a large trace and a large report costs the host: peak resident memory and wall time
# of the current ringpipe against a baseline binary built from git in the same run, in interleaved
# pairs (baseline, current, ...); medians of the pairs. Both binaries must write the same bytes.
#
#   bash bench/outputs.sh                # baseline = BASE_REF (default: f320aa5, before the trace
#                                        # and the report were streamed into their files; b504e1d:
#                                        # before the report's devices were made one at a time)
#   PAIRS=5 bash bench/outputs.sh
#   BASE_REF=none bash bench/outputs.sh  # current binary only
#
# Jobs (JOBS, one per line: the ringpipe arguments; OUT_FILE is replaced by the output's path):
#   a 1024-device virtual-clock run with --trace (a 155 MB Chrome JSON), and `predict` of pp 64 ×
#   2048 micro-batches with --report_json (an 84 MB report), and `predict` of 2^20 devices with
#   --report_json (a 769 MB report of one object per device). Per job: peak RSS (MB) and wall seconds
#   (/usr/bin/time) of both binaries, and the median of the pairs' ratios (baseline ÷ current). Each
#   job is also timed once without its output file, for the memory and time the output adds.
set -euo pipefail
cd "$(dirname "$0")/.."

PAIRS=${PAIRS:-3}
BASE_REF=${BASE_REF:-f320aa5}
NEW=${NEW:-build/release/apps/ringpipe}
BASE_DIR=${BASE_DIR:-/tmp/ringpipe-outputs-baseline}
JOBS=${JOBS:-"run --dp=64 --pp=8 --hidden=64x16 --microbatches=4 --virtual_time --steps=40 --trace=OUT_FILE
predict --pp=64 --microbatches=2048 --tp=1 --hidden=64x255 --report_json=OUT_FILE
predict --dp=32768 --pp=8 --tp=4 --hidden=64x16 --report_json=OUT_FILE"}

[ -x "$NEW" ] || { echo "outputs: build the release preset first ($NEW missing)" >&2; exit 2; }
BASE=
# shellcheck source=bench/baseline.sh
. bench/baseline.sh
[ "$BASE_REF" = none ] || BASE=$(baseline_binary "$BASE_REF" "$BASE_DIR")

OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

# job BINARY ARGS TAG → "peak_rss_mb wall_s"; the output file kept as $OUT/TAG.out (both binaries
# write to the same path first: a report names its own path).
job() {
  local bin=$1 args=$2 tag=$3 out
  # shellcheck disable=SC2086  # the job is a list of arguments (its own stdout and stderr dropped)
  /usr/bin/time -o "$OUT/time.txt" -f "TIME %x %M %e" "$bin" ${args//OUT_FILE/$OUT/file.json} >/dev/null 2>&1 || true
  out=$(grep '^TIME' "$OUT/time.txt" || true)
  read -r _ code rss wall <<<"$out"
  [ "${code:-1}" = 0 ] || { echo "outputs: $bin failed on: $args" >&2; exit 1; }
  [ ! -e "$OUT/file.json" ] || mv "$OUT/file.json" "$OUT/$tag.out"
  awk -v r="$rss" -v w="$wall" 'BEGIN {printf "%.1f %s\n", r / 1024, w}'
}

m() { printf '%s\n' "$@" | median; }

printf '| job | peak RSS MB | wall s | baseline peak RSS MB | baseline wall s | RSS ratio | wall ratio (medians of %s pairs) |\n' "$PAIRS"
printf '|---|---|---|---|---|---|---|\n'
while IFS= read -r args; do
  [ -n "$args" ] || continue
  nr=() nw=() br=() bw=() rr=() wr=()
  for _ in $(seq "$PAIRS"); do
    if [ -n "$BASE" ]; then
      read -r r w < <(job "$BASE" "$args" base)
      br+=("$r"); bw+=("$w")
    fi
    read -r r w < <(job "$NEW" "$args" new)
    nr+=("$r"); nw+=("$w")
    if [ -n "$BASE" ]; then
      cmp -s "$OUT/base.out" "$OUT/new.out" || { echo "outputs: the binaries wrote different bytes for: $args" >&2; exit 1; }
      rr+=("$(awk -v b="${br[-1]}" -v x="$r" 'BEGIN {printf "%.3f", b / x}')")
      wr+=("$(awk -v b="${bw[-1]}" -v x="$w" 'BEGIN {printf "%.3f", b / x}')")
    fi
  done
  if [ -n "$BASE" ]; then
    printf '| %s | %s | %s | %s | %s | ×%s | ×%s |\n' "$args" "$(m "${nr[@]}")" "$(m "${nw[@]}")" \
      "$(m "${br[@]}")" "$(m "${bw[@]}")" "$(m "${rr[@]}")" "$(m "${wr[@]}")"
  else
    printf '| %s | %s | %s | — | — | — | — |\n' "$args" "$(m "${nr[@]}")" "$(m "${nw[@]}")"
  fi
  bare=$(sed -E 's/ --(trace|report_json)=OUT_FILE//g' <<<"$args")
  read -r r w < <(job "$NEW" "$bare" bare)
  printf '| the same without its output file (current binary, once) | %s | %s | — | — | — | — |\n' "$r" "$w"
done <<<"$JOBS"
