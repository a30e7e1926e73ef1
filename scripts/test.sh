#!/usr/bin/env bash
# The whole test suite, from a fresh machine (this is what CI runs):
#   1. install dependencies (Debian packages, scripts/setup.sh)
#   2. release build; every unit test, the model checks (ctest)
#   3. tsan build; the tests labelled `concurrency` again under ThreadSanitizer
#   4. reliability: 200 seeded stress configurations + fault/mismatch tests under TSan and under
#      ASan+UBSan (scripts/reliability.sh)
#   5. fuzz smoke: 20000 libFuzzer executions each of the config, report and flag parsers under
#      ASan+UBSan (scripts/fuzz.sh)
#   6. clang -Wthread-safety -Werror compile check of the libraries (tsa preset)
#
#   scripts/test.sh           # everything (about 20 minutes on 2 cores)
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

section "reliability: stress under TSan and ASan+UBSan"
RELIABILITY_JOBS="$jobs" bash scripts/reliability.sh

section "fuzz: config, report and flag parsers smoke run"
RINGPIPE_JOBS="$jobs" bash scripts/fuzz.sh

section "tsa: clang -Wthread-safety -Werror on the libraries"
cmake --preset tsa >/dev/null
cmake --build --preset tsa -j "$jobs" --target ringpipe_runtime ringpipe_comm ringpipe_schedule ringpipe_apps

section "all passed"
