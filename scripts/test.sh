#!/usr/bin/env bash
# The whole test suite, from a fresh machine (this is what CI runs):
#   1. install dependencies (Debian packages, scripts/setup.sh)
#   2. release build; every unit test, the model checks (ctest)
#   3. tsan build; the tests labelled `concurrency` again under ThreadSanitizer
#   4. clang build (fuzz preset): ASan + UBSan + libFuzzer coverage, and -Wthread-safety -Werror on
#      every library (the check the tsa preset makes), in one build
#   5. reliability: 200 seeded stress configurations + fault/mismatch tests under TSan (tsan build)
#      and under ASan+UBSan (the clang build of step 4) (scripts/reliability.sh)
#   6. fuzz smoke: 20000 libFuzzer executions each of the config, report and flag parsers under
#      ASan+UBSan (scripts/fuzz.sh)
#
#   scripts/test.sh           # everything (about 35 minutes on 2 cores from a fresh clone: README)
#   scripts/test.sh --quick   # steps 1-2 only
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
quick=0; [[ "${1:-}" == "--quick" ]] && quick=1
section() { printf '\n=== %s (%s)\n' "$1" "$(date +%T)"; }

section "setup"
bash scripts/setup.sh

section "release: build and run every test"
cmake --preset release >/dev/null
cmake --build --preset release -j "$jobs"
ctest --preset release -j "$jobs"
((quick)) && exit 0

section "tsan: concurrency tests under ThreadSanitizer"
cmake --preset tsan >/dev/null
cmake --build --preset tsan -j "$jobs"
# Some kernels map memory where TSan cannot run; setarch -R (no ASLR) avoids that.
setarch "$(uname -m)" -R ctest --preset tsan -j "$jobs"

section "clang: ASan+UBSan+libFuzzer build with -Wthread-safety -Werror (fuzz preset)"
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$jobs"

section "reliability: stress under TSan and ASan+UBSan"
RELIABILITY_JOBS="$jobs" RELIABILITY_ASAN_DIR=build/fuzz bash scripts/reliability.sh

section "fuzz: config, report and flag parsers smoke run"
RINGPIPE_JOBS="$jobs" bash scripts/fuzz.sh

section "all passed"
