"""la's GPU kernels, run on a GPU, against the fp64 reference.

Two paths, both through ``la-lower-to-nvvm`` (chunk size 32, value tiles of
32, 128 threads per block):

* ``la-run --target=gpu`` (:func:`la.runner.run_attention` with
  ``target="gpu"``), which needs la-run and so libMLIR;
* the ahead-of-time libraries of :mod:`la.gpu` (compiled with la-opt,
  mlir-translate and clang-22), called on NumPy inputs.

Every test is skipped where there is no GPU (the reason comes from
:func:`la.cuda.available`), or where the fake driver of the runtime tests
stands in for one. On a machine with a GPU but no LLVM/MLIR (the device
machine), ``bench/gpu_check.py`` runs the same comparisons on libraries
compiled beforehand. The CPU-side twin of these tests, the GPU's schedule
run on the CPU, is test_gpu_schedule.py.

f32 kernels must be within rel_rms 1e-4 of the reference (the GPU's exp
comes from libdevice), bf16 inputs within 5e-3. T is a multiple of the
chunk size here; a partial last chunk is checked on the emulator
(test_gpu_schedule.py) and on the device by ``bench/gpu_check.py``.
"""

import numpy as np
import pytest

from la import cuda, gpu, runner
from la import testing as lt

AVAILABLE, REASON = cuda.available()
_NAME = cuda.device_name() or ""
pytestmark = [
    pytest.mark.skipif(not AVAILABLE, reason=f"no CUDA GPU: {REASON}"),
    pytest.mark.skipif(_NAME.startswith("Mock"),
                       reason="LA_CUDA_DRIVER selects the fake driver, which runs no kernel"),
]

LA_RUN = runner.find_la_run()
needs_la_run = pytest.mark.skipif(LA_RUN is None, reason="la-run is not built")
MISSING = gpu.missing_tools()
needs_tools = pytest.mark.skipif(bool(MISSING), reason="; ".join(MISSING) or "-")

TOL = {"f32": 1e-4, "bf16": 5e-3}
VARIANTS = ["gla", "gated_deltanet", "kda", "retention", "mamba2", "deltanet"]
SHAPE = (2, 128, 2, 64, 64)  # B, T, H, K, V


def _inputs(variant, shape=SHAPE, HV=None, state=False, seed=1, gate_scale=1 / 16):
    return lt.make_inputs(variant, *shape, HV=HV, seed=seed, with_initial_state=state,
                          gate_scale=gate_scale)


def _check(variant, inputs, o, s, dtype="f32"):
    prepared = runner.prepare_inputs(inputs, dtype)
    o_ref, s_ref = lt.reference_for(variant, prepared)
    assert np.isfinite(o).all() and np.isfinite(s).all()
    assert lt.rel_rms(o_ref, o) < TOL[dtype]
    assert lt.rel_rms(s_ref, s) < TOL[dtype]


# --------------------------------------------------------------------------
# la-run --target=gpu
# --------------------------------------------------------------------------

@needs_la_run
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("state", [False, True])
def test_la_run_gpu_matches_reference(variant, state):
    inputs = _inputs(variant, state=state)
    o, s, _ = runner.run_attention(variant, inputs, target="gpu")
    _check(variant, inputs, o, s)


@needs_la_run
@pytest.mark.parametrize("variant", ["gla", "gated_deltanet", "kda"])
def test_la_run_gpu_strong_gates(variant):
    # Gates of -0.8 per step on average: the state forgets within a chunk.
    inputs = _inputs(variant, state=True, seed=2, gate_scale=1.0)
    o, s, _ = runner.run_attention(variant, inputs, target="gpu")
    _check(variant, inputs, o, s)


@needs_la_run
@pytest.mark.parametrize("variant", ["gla", "gated_deltanet"])
@pytest.mark.parametrize("chunk_size,value_tile", [(16, 64), (64, 16)])
def test_la_run_gpu_tiles(variant, chunk_size, value_tile):
    inputs = _inputs(variant, state=True, seed=3)
    o, s, _ = runner.run_attention(variant, inputs, target="gpu", chunk_size=chunk_size,
                                   value_tile=value_tile)
    _check(variant, inputs, o, s)


@needs_la_run
@pytest.mark.parametrize("variant", ["gated_deltanet", "kda"])
def test_la_run_gpu_grouped_heads_and_k_ne_v(variant):
    inputs = _inputs(variant, shape=(1, 64, 2, 32, 64), HV=4, state=True, seed=4)
    o, s, _ = runner.run_attention(variant, inputs, target="gpu")
    _check(variant, inputs, o, s)


@needs_la_run
@pytest.mark.parametrize("variant", ["gla", "gated_deltanet", "kda"])
def test_la_run_gpu_bf16(variant):
    inputs = _inputs(variant, state=True, seed=5)
    o, s, _ = runner.run_attention(variant, inputs, target="gpu", dtype="bf16")
    _check(variant, inputs, o, s, dtype="bf16")


# --------------------------------------------------------------------------
# ahead-of-time libraries (la.gpu)
# --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def aot_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("gpu-exec-aot")


@needs_tools
@pytest.mark.parametrize("variant,dtype", [("gla", "f32"), ("gated_deltanet", "f32"),
                                           ("kda", "f32"), ("kda", "bf16")])
def test_aot_library_matches_reference(aot_dir, variant, dtype):
    path = str(aot_dir / f"{variant}-{dtype}.so")
    gpu.compile_attention(path, variant, *SHAPE, dtype=dtype, has_initial_state=True)
    kernel = gpu.load_attention(path)
    inputs = _inputs(variant, state=True, seed=6)
    prepared = runner.prepare_inputs(inputs, dtype)
    o, s = kernel.run(prepared)
    _check(variant, inputs, o, s, dtype=dtype)
    # Every output element is written, whatever the buffers held.
    o2, s2 = kernel.run(prepared, fill=float("nan"))
    assert np.array_equal(o, o2) and np.array_equal(s, s2)
