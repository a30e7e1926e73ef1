#!/usr/bin/env bash
# Reliability harness (issue 7, docs/reliability.md): builds ringpipe under ThreadSanitizer and under
# AddressSanitizer + UndefinedBehaviorSanitizer (-fno-sanitize-recover=all), then runs `ringpipe
# stress` — seeded random configurations, every DESIGN.md invariant each step, injected faults —
# under each, plus the fault and mismatched-collective tests. Zero sanitizer reports allowed
# (halt_on_error). Prints one summary line and exits non-zero on any failure or report.
#
#   scripts/reliability.sh                 # CI: 200 configurations under each sanitizer
#   scripts/reliability.sh --soak          # 2000 configurations under each (~10x longer)
#   scripts/reliability.sh --configs=50 --seed=7 --only=tsan
#   scripts/reliability.sh --no-comm-empty # comm checks draw 1 element instead of 0
#
# Environment: RELIABILITY_TSAN_DIR / RELIABILITY_ASAN_DIR (build directories; default build/tsan and
# build/asan, the presets' directories, so a CI that already built the tsan preset reuses it; CI
# passes RELIABILITY_ASAN_DIR=build/fuzz, the clang ASan + UBSan build it makes for the fuzzers),
# RELIABILITY_JOBS (default 2). Logs: <build dir>/reliability-stress.log.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

configs=200
seed=1
only=""
stress_extra=()
for arg in "$@"; do
  case "$arg" in
    --soak) configs=2000 ;;
    --configs=*) configs="${arg#*=}" ;;
    --seed=*) seed="${arg#*=}" ;;
    --only=*) only="${arg#*=}" ;;
    --no-comm-empty) stress_extra+=(--comm_empty=false) ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "reliability.sh: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done
jobs="${RELIABILITY_JOBS:-2}"
tsan_dir="${RELIABILITY_TSAN_DIR:-build/tsan}"
asan_dir="${RELIABILITY_ASAN_DIR:-build/asan}"
targets=(ringpipe executor_faults_test comm_mismatch_test)

# Sanitizer report markers (each report prints exactly one of these headers).
report_pattern='WARNING: ThreadSanitizer|ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:|ERROR: ThreadSanitizer'

total_reports=0
total_failed=0
total_configs=0
faults_injected=0
faults_detected=0
summary=()

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", b - a }'; }

# has_sanitizers CONFIGURED WANTED: every comma-separated sanitizer of WANTED is in CONFIGURED.
has_sanitizers() {
  local s
  [[ -n "$1" ]] || return 1
  for s in ${2//,/ }; do [[ ",$1," == *",$s,"* ]] || return 1; done
}

# run_one NAME DIR SANITIZE BASE_SEED ENV_PREFIX...
run_one() {
  local name=$1 dir=$2 sanitize=$3 base=$4
  shift 4
  local t0 t1 t2
  t0=$(now)
  # A directory already configured with these sanitizers (e.g. build/fuzz, whose clang build adds
  # libFuzzer's coverage instrumentation to ASan + UBSan) is built as it is; otherwise configure it
  # with the same cache variables as the CMakePresets.json preset of that name. (The compiler only on
  # a fresh directory: changing it on an existing cache forces a rebuild.)
  local configured
  configured=$(sed -n 's/^RINGPIPE_SANITIZE:STRING=//p' "$dir/CMakeCache.txt" 2>/dev/null || true)
  if ! has_sanitizers "$configured" "$sanitize"; then
    local compiler=()
    [[ -f "$dir/CMakeCache.txt" ]] || compiler=(-DCMAKE_CXX_COMPILER=g++)
    cmake -S "$root" -B "$dir" -G Ninja "${compiler[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DRINGPIPE_SANITIZE="$sanitize" -DRINGPIPE_BUILD_BENCH=OFF -DRINGPIPE_BUILD_TESTS=ON >/dev/null
  fi
  cmake --build "$dir" --target "${targets[@]}" -j "$jobs" >/dev/null
  t1=$(now)
  local log="$dir/reliability-stress.log"
  local status=0
  # The stress driver, then the fault and mismatch tests (each a separate process: a sanitizer
  # report halts it and is counted).
  {
    env "$@" "${run_prefix[@]}" "$dir/apps/ringpipe" stress --seed="$base" --configs="$configs" \
      --list "${stress_extra[@]}" || status=$?
    env "$@" "${run_prefix[@]}" "$dir/tests/stress/executor_faults_test" --gtest_brief=1 || status=$?
    env "$@" "${run_prefix[@]}" "$dir/tests/stress/comm_mismatch_test" --gtest_brief=1 || status=$?
  } >"$log" 2>&1 || true
  t2=$(now)
  local reports line failed injected detected
  reports=$(grep -cE "$report_pattern" "$log" || true)
  line=$(grep -E '^stress: ' "$log" | tail -1 || true)
  if [[ -z "$line" ]]; then
    echo "reliability.sh: $name: the stress run did not finish (see $log):" >&2
    tail -20 "$log" >&2
    failed=$configs
    status=1
  else
    failed=$(sed -E 's/.* ([0-9]+) failed;.*/\1/' <<<"$line")
    injected=$(sed -E 's/.*faults injected ([0-9]+).*/\1/' <<<"$line")
    detected=$(sed -E 's/.*detected ([0-9]+),.*/\1/' <<<"$line")
    faults_injected=$((faults_injected + injected))
    faults_detected=$((faults_detected + detected))
    echo "$name: $line"
  fi
  grep -E '^FAIL |^  replay:' "$log" | head -20 || true
  if ((reports > 0)); then
    echo "reliability.sh: $name: $reports sanitizer report(s), first:" >&2
    grep -m1 -A30 -E "$report_pattern" "$log" >&2 || true
    local at
    at=$(grep -oE '^running seed=[0-9]+' "$log" | tail -1 | cut -d= -f2 || true)
    [[ -n "$at" ]] && echo "  replay: $dir/apps/ringpipe stress --seed=$at --configs=1" >&2
  fi
  if ((status != 0)) && ((failed == 0)) && ((reports == 0)); then
    echo "reliability.sh: $name: a test failed (see $log)" >&2
    grep -E 'FAILED|Failure' "$log" | head -10 >&2 || true
    failed=1
  fi
  total_reports=$((total_reports + reports))
  total_failed=$((total_failed + failed))
  total_configs=$((total_configs + configs))
  summary+=("$name build $(elapsed "$t0" "$t1") s, run $(elapsed "$t1" "$t2") s")
}

if [[ -z "$only" || "$only" == tsan ]]; then
  # Some kernels map memory where TSan cannot run; setarch -R (no ASLR) avoids that.
  run_prefix=(setarch "$(uname -m)" -R)
  run_one tsan "$tsan_dir" thread "$seed" \
    TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$root/tsan.supp"
fi
if [[ -z "$only" || "$only" == asan ]]; then
  run_prefix=()
  # Different seeds than the tsan run: more configurations covered per CI run.
  run_one asan "$asan_dir" "address,undefined" "$((seed + 100000))" \
    ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:halt_on_error=1" \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
fi

echo "reliability: configurations run $total_configs, failed $total_failed; sanitizer reports" \
  "$total_reports; faults injected $faults_injected, detected $faults_detected;" \
  "$(IFS=';'; echo "${summary[*]}")"
((total_failed == 0 && total_reports == 0))
