#!/usr/bin/env bash
# Installs the Python package with pip into a fresh virtual environment
# (scikit-build-core builds libLaCAPI.so through CMake) and runs a compiled
# attention call from outside the repository.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=$(mktemp -d)
trap 'rm -rf "$venv"' EXIT
"${PYTHON:-python3}" -m venv "$venv"
"$venv/bin/pip" install -q "$root"
cd "$venv"
LA_CACHE_DIR="$venv/cache" "$venv/bin/python" - <<'PY'
import numpy as np
import la
from la import reference
rng = np.random.default_rng(0)
B, T, H, K, V = 1, 50, 2, 16, 16
q, k = rng.standard_normal((2, B, T, H, K)).astype(np.float32)
v = rng.standard_normal((B, T, H, V)).astype(np.float32)
g = (-np.log1p(np.exp(-rng.standard_normal((B, T, H, K)))) / 16).astype(np.float32)
o, s = la.gla(q, k, v, g, output_final_state=True, chunk_size=16)
ref_o, ref_s = reference.gla(q, k, v, g)
err = np.sqrt(np.mean((ref_o - o) ** 2) / np.mean(ref_o ** 2))
assert la.__file__.startswith(__import__("sys").prefix), la.__file__
assert err < 1e-5, err
# la.gpu's runtime library is in the wheel too (next to the package).
from la import cuda
runtime = cuda.library_path()
assert runtime and runtime.startswith(__import__("sys").prefix), runtime
# The kernels' caching allocator is installed too, and the kernel used it.
from la import ops
host = ops._host_runtime()
assert host and host.startswith(__import__("sys").prefix), host
print(f"pip-installed la: gla rel_rms {err:.2e} ({la.__file__})")
PY
