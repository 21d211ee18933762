#!/usr/bin/env bash
# Installs what `la` needs on a fresh Debian 12 machine. Idempotent: it only
# installs what is missing.
set -euo pipefail

apt_packages=(libmlir-22-dev mlir-22-tools llvm-22-dev llvm-22-tools clang-22
              ninja-build libomp-22-dev cmake g++)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}"
fi

python=${PYTHON:-python3}
if ! "$python" -c "import numpy, pytest, xdist" 2>/dev/null; then
  echo "setup: installing numpy, pytest and pytest-xdist with pip"
  "$python" -m pip install -q numpy pytest pytest-xdist
fi
