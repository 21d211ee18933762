#!/usr/bin/env bash
# Sets up, builds and runs every test: the lit suite (check-la), the Python
# tests (fp64 reference, CPU execution, delta rule, stress subset), a
# time-boxed stress campaign, the lit suite on a GCC build, both suites
# again on a sanitizer build, then a pip install of the Python package.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${LA_BUILD_DIR:-$root/build}
# Each stage's end, in minutes since the start (CI allows 90 on 2 cores).
stage_done() { echo "test.sh: $1 done at minute $((SECONDS / 60))"; }
"$root/scripts/build.sh"
stage_done "setup and build"
# torch for the autograd tests (the CPU side of PyPI's wheel); without it
# they skip. LA_SKIP_TORCH=1 leaves it out.
if [ "${LA_SKIP_TORCH:-0}" != 1 ] && ! "${PYTHON:-python3}" -c "import torch" 2>/dev/null; then
  echo "test.sh: installing torch with pip (for the autograd tests)"
  "${PYTHON:-python3}" -m pip install -q torch
fi
# ONNX and onnxruntime for la.onnx's tests (they skip without onnx).
if [ "${LA_SKIP_TORCH:-0}" != 1 ] && ! "${PYTHON:-python3}" -c "import onnx, onnxruntime" 2>/dev/null; then
  echo "test.sh: installing onnx and onnxruntime with pip (for la.onnx's tests)"
  "${PYTHON:-python3}" -m pip install -q "onnx>=1.22" onnxruntime || \
    echo "test.sh: onnx not installed; la.onnx's tests skip"
fi
# fla's naive reference code for la.fla's tests (fla-core without its
# dependencies: the naive files load by path with torch and einops).
if [ "${LA_SKIP_TORCH:-0}" != 1 ] && ! "${PYTHON:-python3}" -c \
    "import importlib.util as u, sys; sys.exit(u.find_spec('fla') is None or u.find_spec('einops') is None)" 2>/dev/null; then
  echo "test.sh: installing fla-core 0.6.0 (--no-deps) and einops with pip (for la.fla's tests)"
  "${PYTHON:-python3}" -m pip install -q --no-deps fla-core==0.6.0 einops || \
    echo "test.sh: fla-core not installed; la.fla's comparisons with fla skip"
fi
stage_done "Python packages"
cmake --build "$build" --target check-la
stage_done "lit"
# One pytest worker per core (pytest-xdist; LA_TEST_JOBS=0 runs them in this
# process): the tests are single-threaded compiles and runs, and each has its
# own kernel cache directory or shares the file-locked default one.
"${PYTHON:-python3}" -m pytest -q -n "${LA_TEST_JOBS:-$(nproc)}" "$root/python/tests"
stage_done "pytest"
# A time-boxed kernel fuzz campaign beyond pytest's fixed subset: the
# configurations of one seed (random shapes, chunk sizes, cu_seqlens,
# adversarial gates, non-finite inputs) in order for LA_STRESS_SECONDS
# (default 60; a configuration started before then finishes), each against
# the fp64 reference and the sequential program. At most seed 12's first 48,
# all of which passed when this was written (a faster machine runs no
# configuration nobody has seen pass). LA_STRESS_SECONDS=0 skips.
if [ "${LA_STRESS_SECONDS:-60}" != 0 ]; then
  "${PYTHON:-python3}" "$root/scripts/stress.py" --count 48 \
    --seed "${LA_STRESS_SEED:-12}" --seconds "${LA_STRESS_SECONDS:-60}"
  stage_done "stress"
fi
# The lit suite on a GCC build (build-gcc/): la's IR must be the same
# whichever compiler built it. LA_SKIP_GCC=1 skips this stage.
if [ "${LA_SKIP_GCC:-0}" != 1 ]; then
  "$root/scripts/check-gcc.sh"
  stage_done "GCC build and lit"
fi
# The same suites on an AddressSanitizer + UndefinedBehaviorSanitizer build
# (build-asan/), plus the fuzzer's regression corpus. LA_SKIP_SANITIZERS=1
# skips this stage for a quick local run.
if [ "${LA_SKIP_SANITIZERS:-0}" != 1 ]; then
  "$root/scripts/sanitize.sh"
  stage_done "sanitizers"
fi
# pip install of the Python package into a fresh virtual environment.
if [ "${LA_SKIP_PIP:-0}" != 1 ]; then
  "$root/scripts/test-pip-install.sh"
  stage_done "pip install"
fi
