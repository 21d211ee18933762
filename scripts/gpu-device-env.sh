# Sourced by the scripts that run ON THE MACHINE WITH THE GPU
# (gpu-device-check.sh, gpu-device-profile.sh): the repository root, the log
# copied to $OUT/<name>.log when the device tool sets OUT, `say`, and the
# environment that lets the package run the ahead-of-time kernels in .gpu/
# without la's build (no libMLIR there). Usage: . gpu-device-env.sh NAME
gpu_device_name=$1
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  exec > >(tee "$OUT/$gpu_device_name.log") 2>&1
fi
say() { echo "$gpu_device_name: $*"; }
if [ ! -d .gpu/kernels ] || ! ls .gpu/kernels/*.json >/dev/null 2>&1 || [ ! -f .gpu/variants.json ]; then
  say "error: .gpu is missing or incomplete: run scripts/gpu-device-prepare.sh on the" \
      "build machine first and carry .gpu in the device run" >&2
  exit 2
fi
export PYTHONUNBUFFERED=1
# /tmp/site: where gpu-device-check.sh installs the carried fla wheel.
export PYTHONPATH="$ROOT/python:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
export LA_CUDA_RUNTIME_LIB="$ROOT/.gpu/kernels/libla_cuda_runtime.so"
export LD_LIBRARY_PATH="$ROOT/.gpu/kernels${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# No libMLIR there, so no libLaCAPI.so: the package reads the variant
# registry from the snapshot the prepare script wrote.
export LA_VARIANTS_FILE="$ROOT/.gpu/variants.json"
