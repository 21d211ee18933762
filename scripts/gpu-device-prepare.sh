#!/usr/bin/env bash
# Prepares the GPU device check (scripts/gpu-device-check.sh) on THIS machine.
#
# The machine with the GPU has neither LLVM/MLIR nor a network, so everything
# it needs from here travels in the ignored folder .gpu/ (name it in the
# device tool's `carry`):
#
#   .gpu/kernels/   la's kernels compiled ahead of time (bench/gpu_cases.py:
#                   the correctness cases of bench/gpu_check.py and the
#                   benchmark cases of bench/bench_gpu.py), each a .so with a
#                   .json manifest, and libla_cuda_runtime.so beside them;
#   .gpu/bin/       la-cuda-info;
#   .gpu/variants.json  la's variant registry (the package reads it through
#                   LA_VARIANTS_FILE where libLaCAPI.so, which needs libMLIR,
#                   is missing);
#   .gpu/wheels/    flash-linear-attention's kernels (the fla-core wheel, for
#                   Python 3.12; its only other need, einops, is on the device).
#
# Needs the build (build/bin/la-opt, build/bin/la-cuda-info,
# build/lib/libla_cuda_runtime.so; scripts/build.sh makes them), Debian's
# mlir-translate and clang-22, the CUDA toolkit's ptxas (/usr/local/cuda or
# $CUDA_HOME) and pip with access to PyPI. Idempotent: kernels that are up to
# date are not compiled again and a wheel already there is not downloaded
# again. FLA_VERSION selects fla-core's version (default 0.6.0). Exits
# non-zero when a kernel does not compile (after preparing everything else).
#
# Then, with the device tool: run `bash scripts/gpu-device-check.sh` with
# carry [".gpu"].
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
FLA_VERSION=${FLA_VERSION:-0.6.0}
LIMIT_MIB=64

say() { echo "gpu-device-prepare: $*"; }
die() { echo "gpu-device-prepare: error: $*" >&2; exit 1; }

# 1. .gpu/ is ignored (by this checkout only: .git/info/exclude).
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
if ! grep -qxF '/.gpu/' "$exclude" 2>/dev/null; then
  echo '/.gpu/' >>"$exclude"
  say "added /.gpu/ to $exclude"
fi

# 2. What the build must provide.
for f in build/bin/la-opt build/bin/la-cuda-info build/lib/libla_cuda_runtime.so; do
  [ -e "$f" ] || die "$f is missing: build the project first (scripts/build.sh)"
done
mkdir -p .gpu/kernels .gpu/bin .gpu/wheels

# 3. la's kernels (and the runtime beside them), compiled ahead of time.
say "compiling la's GPU kernels into .gpu/kernels"
compiled=ok
PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}" \
  python3 bench/gpu_cases.py --out .gpu/kernels --prune || compiled=failed
cmp -s build/lib/libla_cuda_runtime.so .gpu/kernels/libla_cuda_runtime.so \
  || cp -p build/lib/libla_cuda_runtime.so .gpu/kernels/
cmp -s build/bin/la-cuda-info .gpu/bin/la-cuda-info || cp -p build/bin/la-cuda-info .gpu/bin/
# The variant registry as JSON: the device has no libMLIR, hence no C API.
PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}" \
  python3 -c 'import sys, la.variants; la.variants.write_snapshot(sys.argv[1])' .gpu/variants.json

# 4. flash-linear-attention's kernels for Python 3.12 (one version only).
wheel=$(ls .gpu/wheels/fla_core-"$FLA_VERSION"-*.whl 2>/dev/null | head -n 1 || true)
if [ -z "$wheel" ]; then
  say "downloading fla-core==$FLA_VERSION"
  find .gpu/wheels -name 'fla_core-*.whl' -delete
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 -d .gpu/wheels "fla-core==$FLA_VERSION" \
    || die "pip could not download fla-core==$FLA_VERSION"
  wheel=$(ls .gpu/wheels/fla_core-"$FLA_VERSION"-*.whl | head -n 1)
fi
say "fla wheel: $wheel"
if command -v unzip >/dev/null; then
  needs=$(unzip -p "$wheel" '*/METADATA' | grep '^Requires-Dist' | grep -v 'extra ==' \
          | sed 's/^Requires-Dist: //' | tr '\n' ' ' || true)
  say "fla-core needs (besides torch and triton): ${needs:-nothing} -- on the device already"
fi

# 5. Sizes: .gpu and the whole working tree that travels (tracked and
#    untracked-not-ignored files, plus .gpu).
gpu_bytes=$(du -sb .gpu | cut -f1)
tree_bytes=$(git ls-files -z --cached --others --exclude-standard \
             | xargs -0 -r stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
total=$((gpu_bytes + tree_bytes))
say "$(ls .gpu/kernels/*.so | grep -vc libla_cuda_runtime) kernels; .gpu is $(du -sh .gpu | cut -f1)" \
    "($gpu_bytes bytes); with the working tree $((total / 1024 / 1024)) MiB of the" \
    "${LIMIT_MIB} MiB that a device run carries"
[ "$total" -lt $((LIMIT_MIB * 1024 * 1024)) ] \
  || die "the working tree and .gpu exceed ${LIMIT_MIB} MiB"
if [ "$compiled" != ok ]; then
  die "some kernels did not compile (see above); the rest of .gpu is ready, and the" \
      "device check would report the missing ones as failures"
fi
say "ready. Device run: command 'bash scripts/gpu-device-check.sh', carry [\".gpu\"]"
