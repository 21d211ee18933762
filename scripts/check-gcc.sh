#!/usr/bin/env bash
# Builds la with GCC (Debian's default compiler) in build-gcc/ (or
# $LA_GCC_BUILD_DIR) and runs the lit suite on it: the IR la emits must not
# depend on the compiler that built it (for example on the order in which
# the host compiler evaluates function arguments), so the same FileCheck
# tests pass with both compilers.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${LA_GCC_BUILD_DIR:-$root/build-gcc}
LA_BUILD_DIR="$build" LA_CC=gcc LA_CXX=g++ "$root/scripts/build.sh"
cmake --build "$build" --target check-la
# FileCheck tests match patterns; the IR itself must be identical. Every
# pipeline on every variant (roundtrip.mlir holds them all) with both
# compilers' la-opt, when the Clang build (build/ or $LA_BUILD_DIR) exists.
clang_opt=${LA_BUILD_DIR:-$root/build}/bin/la-opt
if [ -x "$clang_opt" ]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
  # The gradient ops too (la.attention_grad and la.recurrence_grad of
  # every form), whose chunked and token-loop lowerings build much IR.
  for input in "$root/test/Dialect/La/roundtrip.mlir" \
               "$root/test/Pipelines/Inputs/main-kernels.mlir" \
               "$root/test/Dialect/La/attention-grad.mlir" \
               "$root/test/Dialect/La/recurrence-grad.mlir" \
               "$root/test/Dialect/La/lower-attention-grad.mlir" \
               "$root"/examples/*.mlir; do
    for pipeline in la-lower-to-cpu la-lower-to-cpu=parallel \
                    la-lower-to-cpu=sequential la-lower-to-gpu=tensor-cores \
                    la-lower-to-gpu-emulator; do
      # Diagnostics too (some functions are outside the GPU path's reach,
      # which it reports), so a failing split is compared, not fatal.
      "$clang_opt" "$input" -split-input-file "--$pipeline" \
        > "$out/clang.mlir" 2>&1 || true
      "$build/bin/la-opt" "$input" -split-input-file "--$pipeline" \
        > "$out/gcc.mlir" 2>&1 || true
      if ! cmp -s "$out/clang.mlir" "$out/gcc.mlir"; then
        echo "check-gcc.sh: --$pipeline on $input differs between the Clang" \
             "and the GCC build:" >&2
        diff "$out/clang.mlir" "$out/gcc.mlir" | head -20 >&2
        exit 1
      fi
    done
  done
  echo "check-gcc.sh: identical IR from the Clang and the GCC build"
fi
