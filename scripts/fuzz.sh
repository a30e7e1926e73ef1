#!/usr/bin/env bash
# Fuzzes the config parser and validator (fuzz/config_fuzzer.cc) with libFuzzer under ASan + UBSan.
# Builds `cmake --preset fuzz` (clang) into build/fuzz first. See docs/fuzzing.md.
#
#   scripts/fuzz.sh                 # CI smoke: 20000 executions from the seed corpus, -seed=1,
#                                   # capped at 300 s; fails on any crash, hang, OOM or sanitizer report
#   scripts/fuzz.sh --long [SECS]   # long run (default 3600 s); grows build/fuzz/corpus across runs
#
# A failing input is written to build/fuzz/artifacts/; replay it with
#   build/fuzz/fuzz/config_fuzzer build/fuzz/artifacts/crash-...
# then add it to fuzz/corpus/regress-*.json and tests/apps/config_fuzz_regress_test.cc.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=smoke
secs=3600
case "${1:-}" in
  "") ;;
  --long) mode=long; secs=${2:-3600} ;;
  *) echo "usage: scripts/fuzz.sh [--long [SECS]]" >&2; exit 2 ;;
esac

cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "${RINGPIPE_JOBS:-2}"

out=build/fuzz
mkdir -p "$out/artifacts"
flags=(-dict=fuzz/config.dict -max_len=4096 -timeout=10 -rss_limit_mb=2048
       -artifact_prefix="$out/artifacts/" -print_final_stats=1)
if [[ $mode == smoke ]]; then
  # A fresh working corpus each time: the run depends only on the seed corpus and -seed.
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  "$out/fuzz/config_fuzzer" "${flags[@]}" -seed=1 -runs=20000 -max_total_time=300 "$work" fuzz/corpus
else
  mkdir -p "$out/corpus"
  "$out/fuzz/config_fuzzer" "${flags[@]}" -max_total_time="$secs" "$out/corpus" fuzz/corpus
fi
echo "fuzz: $mode run finished with no crash" >&2
