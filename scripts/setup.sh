#!/usr/bin/env bash
# Installs ringpipe's build and test dependencies from Debian packages (idempotent; skips what is
# already there). Everything the build needs comes from here; nothing is downloaded at build time.
set -euo pipefail
pkgs=(cmake ninja-build g++ clang libclang-rt-14-dev relacy-dev
      libboost1.81-dev libabsl-dev libgtest-dev libbenchmark-dev nlohmann-json3-dev)
if [[ "${RINGPIPE_WITH_MPI:-0}" == 1 ]]; then pkgs+=(openmpi-bin libopenmpi-dev); fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo_cmd=(); [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
