#!/usr/bin/env bash
# Sets up (Debian packages), builds the release `ringpipe` binary, and runs it.
#   scripts/run.sh                      # the emulator's main job with its defaults
#   scripts/run.sh <subcommand> [flags] # any subcommand, e.g. `allreduce --ranks 8`
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release --target ringpipe -j "$(nproc)" >/dev/null
if [[ $# -eq 0 ]]; then set -- ${RINGPIPE_DEFAULT_JOB:-run}; fi
exec ./build/release/apps/ringpipe "$@"
