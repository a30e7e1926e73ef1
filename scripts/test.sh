#!/usr/bin/env bash
# The whole test suite, from a fresh machine: install dependencies, build release and tsan, run every
# unit test (release), then the concurrency-labelled tests again under ThreadSanitizer.
#   scripts/test.sh            # everything
#   scripts/test.sh --no-tsan  # release only
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
bash scripts/setup.sh
run_tsan=1; [[ "${1:-}" == "--no-tsan" ]] && run_tsan=0

cmake --preset release >/dev/null
cmake --build --preset release -j "$jobs"
ctest --preset release -j "$jobs"

if ((run_tsan)); then
  cmake --preset tsan >/dev/null
  cmake --build --preset tsan -j "$jobs"
  # Some kernels map memory where TSan cannot run; setarch -R (no ASLR) avoids that.
  setarch "$(uname -m)" -R ctest --preset tsan -j "$jobs"
fi
