#!/usr/bin/env bash
# Fuzzes, with libFuzzer under ASan + UBSan (docs/fuzzing.md):
#   config_fuzzer  the config file of `run` / `predict` (parser, validation, plan);
#   report_fuzzer  the report `timeline --from_report` reads, and the chart it draws;
#   flags_fuzzer   the command line of every subcommand (flag parser, grammars, LoadConfig).
# Builds `cmake --preset fuzz` (clang) into build/fuzz first.
#
#   scripts/fuzz.sh                 # CI smoke: 20000 executions of each target from its seed corpus,
#                                   # -seed=1, capped at 90 + 40 + 40 s (~70 s in all on this machine);
#                                   # fails on any crash, hang, OOM or sanitizer report
#   scripts/fuzz.sh --long [SECS]   # long run of each (default 3600 s); grows build/fuzz/corpus-*
#
# A failing input is written to build/fuzz/artifacts/; replay it with
#   build/fuzz/fuzz/<target> build/fuzz/artifacts/crash-...
# then add it to the target's corpus as regress-* and to its regression test
# (tests/apps/config_fuzz_regress_test.cc, tests/apps/fuzz_seeds_test.cc).
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
common=(-max_len=4096 -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$out/artifacts/" -print_final_stats=1)
# target, seed corpus, dictionary, smoke time cap (s)
targets=("config_fuzzer fuzz/corpus fuzz/config.dict 90"
         "report_fuzzer fuzz/report_corpus - 40"
         "flags_fuzzer fuzz/flags_corpus fuzz/flags.dict 40")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for t in "${targets[@]}"; do
  read -r name seeds dict cap <<<"$t"
  flags=("${common[@]}")
  [[ $dict != - ]] && flags+=(-dict="$dict")
  echo "fuzz: $name ($mode)" >&2
  if [[ $mode == smoke ]]; then
    # A fresh working corpus each time: the run depends only on the seed corpus and -seed.
    mkdir -p "$work/$name"
    "$out/fuzz/$name" "${flags[@]}" -seed=1 -runs=20000 -max_total_time="$cap" "$work/$name" "$seeds" </dev/null
  else
    mkdir -p "$out/corpus-$name"
    "$out/fuzz/$name" "${flags[@]}" -max_total_time="$secs" "$out/corpus-$name" "$seeds" </dev/null
  fi
done
echo "fuzz: $mode run of config_fuzzer, report_fuzzer, flags_fuzzer finished with no crash" >&2
