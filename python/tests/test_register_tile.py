"""la-tile's register tile follows the target's vector registers
(la-lower-to-cpu's ``vector-bits``): la-run and the Python package pass the
host's width, read by LLVM from the CPU. Checked against /proc/cpuinfo, and
every width's kernels against the fp64 reference (partial tiles: K, V and T
not multiples of any tile)."""

import os
import platform

import pytest

from la import _capi, ops, runner
from la.testing import make_inputs, reference_for, rel_rms

LA_RUN = runner.find_la_run()
needs_build = pytest.mark.skipif(_capi.library_path() is None, reason="libLaCAPI.so is not built")


def _cpuinfo_vector_bits():
    """The width /proc/cpuinfo's flags imply (x86 Linux), or None."""
    if platform.machine() not in ("x86_64", "AMD64") or not os.path.exists("/proc/cpuinfo"):
        return None
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                return 512 if "avx512f" in flags else 256 if "avx" in flags else 128
    return None


@needs_build
def test_host_vector_bits_match_the_cpu_flags():
    bits = int(_capi.lib().laHostVectorBits())
    assert bits in (128, 256, 512)
    expected = _cpuinfo_vector_bits()
    if expected is None:
        pytest.skip("not an x86 Linux host: no /proc/cpuinfo flags to compare with")
    assert bits == expected


@needs_build
def test_package_kernels_are_tiled_for_the_host():
    bits = int(_capi.lib().laHostVectorBits())
    for sequential in (False, True):
        assert f"vector-bits={bits}" in ops._lower_to_cpu(64, sequential, 1)
    assert f"vector-bits={bits}" in ops._backward_pipeline(64, False, 2)


@pytest.mark.skipif(not (LA_RUN and os.path.exists(LA_RUN)), reason="needs la-run (build the project)")
@pytest.mark.parametrize("variant", ["gla", "gated_deltanet", "retention"])
@pytest.mark.parametrize("vector_bits,dtype", [(128, "f32"), (256, "f32"), (512, "f32"),
                                               (256, "bf16")])
def test_every_width_matches_fp64(variant, vector_bits, dtype):
    # T, K, V multiples of no tile; grouped value heads; an initial state.
    B, T, H, HV, K, V = 2, 100, 2, 4, 40, 24
    inputs = make_inputs(variant, B, T, H, K, V, HV=HV, seed=3, gate_scale=0.25,
                         with_initial_state=True)
    prepared = runner.prepare_inputs(inputs, dtype)
    o, state, _ = runner.run_attention(variant, prepared, dtype=dtype, chunk_size=32,
                                       vector_bits=vector_bits)
    o_ref, state_ref = reference_for(variant, prepared)
    tol = 1e-5 if dtype == "f32" else 5e-3
    assert rel_rms(o_ref, o) < tol
    assert rel_rms(state_ref, state) < tol
