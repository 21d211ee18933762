#!/usr/bin/env bash
# The GPU device check: runs ON THE MACHINE WITH THE GPU, in the repository
# root, with .gpu/ carried from scripts/gpu-device-prepare.sh (device tool:
# command 'bash scripts/gpu-device-check.sh', carry [".gpu"]). Under 8
# minutes (each step has a time limit):
#
#   1. installs the carried wheels (flash-linear-attention) into /tmp/site;
#   2. .gpu/bin/la-cuda-info --check: la's CUDA runtime on this GPU;
#   3. bench/gpu_check.py: la's ahead-of-time kernels against the fp64
#      reference on small shapes (every chunked variant, f32 and bf16);
#   4. python/tests/test_gpu_exec.py, only where la-run works (it needs
#      libMLIR, which the device machine lacks);
#   5. bench/bench_gpu.py: la vs fla vs a GEMM at the benchmark's shapes
#      (LA_GPU_BENCH=0 skips it: a correctness-only run of about a minute;
#      LA_GPU_BENCH_BUDGET, default 230 s, bounds it). fla runs in bf16 only
#      (LA_GPU_FLA_DTYPES=bf16,f32 adds f32): its first call per variant,
#      dtype and shape autotunes for up to two minutes on a fresh machine, and
#      in f32 that left the first run time for GLA alone.
#      LA_GPU_BENCH_ARGS passes further arguments (e.g. "--la-dtypes bf16
#      --impls la,la-cp32"); the step's limit is the budget plus 60 s.
#
# Writes the log (and the two JSON results) to $OUT when it is set. Exits
# non-zero when a check failed; the benchmark's numbers are reported, not
# judged. Idempotent: it only writes to /tmp/site and $OUT.
set -euo pipefail
. "$(dirname "$0")/gpu-device-env.sh" gpu-device-check

status=0
# step NAME SECONDS COMMAND...: runs COMMAND under a time limit, reports, and
# records a failure without stopping the script.
step() {
  local name=$1 limit=$2 started=$SECONDS rc=0
  shift 2
  echo
  say "== $name (limit ${limit} s)"
  timeout --kill-after=10 "$limit" "$@" || rc=$?
  if [ "$rc" -eq 0 ]; then
    say "== $name: ok ($((SECONDS - started)) s)"
  else
    [ "$rc" -eq 124 ] && say "== $name: stopped at its ${limit} s limit"
    say "== $name: FAILED (exit $rc, $((SECONDS - started)) s)"
    status=1
  fi
}

say "$(date -u +%FT%TZ) on $(hostname); python3 is $(command -v python3)"
command -v nvidia-smi >/dev/null && nvidia-smi -L || say "nvidia-smi not found"
python3 -c 'import sys, torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
  "gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)' \
  || say "PyTorch is not usable here: the benchmark will say why"

# 1. wheels
if ls .gpu/wheels/*.whl >/dev/null 2>&1; then
  if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
       --target /tmp/site .gpu/wheels/*.whl; then
    say "installed into /tmp/site: $(cd .gpu/wheels && ls *.whl | tr '\n' ' ')"
  else
    say "warning: the wheels did not install: the benchmark runs without fla"
  fi
else
  say "warning: no wheels in .gpu/wheels: the benchmark runs without fla"
fi

# 2.-5.
step "la-cuda-info --check" 30 .gpu/bin/la-cuda-info --check
step "gpu_check (la's AOT kernels vs the fp64 reference)" 90 \
  python3 bench/gpu_check.py --kernels .gpu/kernels ${OUT:+--json "$OUT/gpu_check.json"}
if [ -x build/bin/la-run ] && build/bin/la-run --help >/dev/null 2>&1; then
  step "pytest test_gpu_exec.py (la-run --target=gpu)" 120 \
    python3 -m pytest -q python/tests/test_gpu_exec.py
else
  echo
  say "== pytest test_gpu_exec.py: skipped: la-run is not available here (it needs" \
      "libMLIR); gpu_check covered the kernels"
fi
if [ "${LA_GPU_BENCH:-1}" != 0 ]; then
  budget=${LA_GPU_BENCH_BUDGET:-230}
  # shellcheck disable=SC2086 # LA_GPU_BENCH_ARGS is a list of arguments
  step "bench_gpu (la vs fla vs GEMM)" $((budget + 60)) \
    python3 bench/bench_gpu.py --kernels .gpu/kernels --budget "$budget" \
    --fla-dtypes "${LA_GPU_FLA_DTYPES:-bf16}" ${LA_GPU_BENCH_ARGS:-} \
    ${OUT:+--json "$OUT/bench_gpu.json"}
else
  echo
  say "== bench_gpu: skipped (LA_GPU_BENCH=0)"
fi

echo
if [ "$status" -eq 0 ]; then
  say "all checks passed ($SECONDS s)"
else
  say "some checks FAILED ($SECONDS s)"
fi
exit "$status"
