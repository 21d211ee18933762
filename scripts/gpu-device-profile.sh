#!/usr/bin/env bash
# Where la's GPU kernels spend their time: runs ON THE MACHINE WITH THE GPU
# after scripts/gpu-device-prepare.sh here (device tool: command
# 'bash scripts/gpu-device-profile.sh', carry [".gpu"]). Under 5 minutes:
#
#   1. bench/gpu_profile.py: small forward kernels as T and the heads grow,
#      with and without tensor cores; the kernels each call launched;
#   2. where Nsight Compute (ncu) is installed: one launch of GLA's kernel at
#      (1,1024,16,128,128) f32, its throughput, warp-state and memory
#      sections.
#
# 'bash scripts/gpu-device-profile.sh sweep' runs, instead, the schedule sweep
# (bench/gpu_profile.py --sweep: threads per block, value tile and chunk
# size, each case timed and checked against the fp64 reference; 4 minutes).
#
# Writes its log to $OUT when it is set. Exits non-zero when a step failed.
set -euo pipefail
. "$(dirname "$0")/gpu-device-env.sh" gpu-device-profile
status=0
if [ "${1:-}" = sweep ]; then
  say "== gpu_profile --sweep (limit 240 s)"
  timeout --kill-after=10 240 python3 bench/gpu_profile.py --kernels .gpu/kernels --sweep \
    --budget 200 || status=1
  say "done ($SECONDS s, status $status)"
  exit "$status"
fi
say "== gpu_profile (limit 150 s)"
timeout --kill-after=10 150 python3 bench/gpu_profile.py --kernels .gpu/kernels || status=1
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1 || true)
if [ -n "$ncu" ]; then
  say "== ncu ($ncu) on gla-1x1024x16x128x128-f32 (limit 150 s)"
  timeout --kill-after=10 150 "$ncu" --target-processes all -k regex:attention -c 1 \
    --section SpeedOfLight --section LaunchStats --section Occupancy \
    --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats \
    python3 bench/gpu_profile.py --kernels .gpu/kernels --ncu gla-1x1024x16x128x128-f32 \
    || status=1
else
  say "== ncu: not installed here; skipped"
fi
say "done ($SECONDS s, status $status)"
exit "$status"
