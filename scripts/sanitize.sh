#!/usr/bin/env bash
# Builds la with AddressSanitizer + UndefinedBehaviorSanitizer (and the
# libFuzzer target) in build-asan/, then runs the lit suite and the Python
# execution tests against that build. The JIT-compiled kernels and Debian's
# libMLIR are not instrumented; everything compiled from this repository is.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${LA_ASAN_BUILD_DIR:-$root/build-asan}
"$root/scripts/setup.sh"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit \
    -DPython3_EXECUTABLE="$(command -v "${PYTHON:-python3}")" \
    -DLA_SANITIZE=address,undefined -DLA_ENABLE_FUZZER=ON
fi
cmake --build "$build" -j "${LA_JOBS:-$(nproc)}"
# allow_user_poisoning=0: LLVM's BumpPtrAllocator poisons its slabs from the
# instrumented inline code in our objects, while Debian's uninstrumented
# libMLIR allocates from the same slabs without unpoisoning them; the reports
# that follow are false positives of mixing the two, not bugs.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allow_user_poisoning=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/scripts/lsan.supp}
cmake --build "$build" --target check-la
# The regression corpus of the fuzzer, every input once.
"$build/bin/la-fuzz" -runs=0 "$root/test/Fuzz/corpus" >/dev/null 2>&1 ||
  { echo "sanitize.sh: la-fuzz failed on the regression corpus" >&2; exit 1; }
# The Python tests with the sanitized la-run: every test function, on every
# LA_SANITIZE_SAMPLE-th (default 2nd) of its parameter sets. The sanitizers
# watch la's C++ code, whose paths depend on the variant and the options,
# which each function's first parameter sets already vary; the full grid of
# shapes ran in the uninstrumented pass. Every 4th took 5.4 minutes on CI's
# kind of 2-core machine with two workers. LA_SANITIZE_SAMPLE=1 runs
# everything.
LA_RUN="$build/bin/la-run" "${PYTHON:-python3}" -m pytest -q "$root/python/tests" \
  -n "${LA_TEST_JOBS:-$(nproc)}" --la-sample "${LA_SANITIZE_SAMPLE:-2}" ${LA_SANITIZE_PYTEST_ARGS:-}
