#!/usr/bin/env bash
# Configures and builds `la` in ./build (or $LA_BUILD_DIR) with Debian's LLVM 22
# and clang-22 (or $LA_CC / $LA_CXX, e.g. gcc / g++).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${LA_BUILD_DIR:-$root/build}
"$root/scripts/setup.sh"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER="${LA_CC:-clang-22}" \
    -DCMAKE_CXX_COMPILER="${LA_CXX:-clang++-22}" \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit \
    -DPython3_EXECUTABLE="$(command -v "${PYTHON:-python3}")"
fi
cmake --build "$build" -j "${LA_JOBS:-$(nproc)}" "$@"
