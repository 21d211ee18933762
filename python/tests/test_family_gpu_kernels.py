"""The newer compositions' la calls through la's GPU kernels, without a GPU:
VLA (the dplr rule), HOLA (Gated DeltaNet, twice) and Momentum DeltaNet
(the dplr rule with a channel gate on the stacked state) with every la call
they make compiled by la-lower-to-nvvm and run on the CPU by
la-emulate-gpu (``la.runner.run_attention(target="gpu-emulator")``), against
the same fp64 references as their CPU tests. The compositions' own NumPy
work (VLA's penalty pass, HOLA's cache read, Momentum DeltaNet's basis
changes) stays on the host."""

import numpy as np
import pytest

import la.ops
from la import family, reference, runner
from la.testing import rel_rms

pytestmark = pytest.mark.skipif(runner.find_la_run() is None, reason="la-run is not built")

#: f32, as the compositions' CPU tests (the emulator's exp is the host's)
TOL = 1e-5


@pytest.fixture
def gpu_kernels(monkeypatch):
    """la.ops.attention replaced by la-run with the emulated GPU kernels;
    the calls it served, by variant."""
    calls = []

    def emulated(variant, q, k, v, g=None, beta=None, *, a=None, b=None, scale=None,
                 initial_state=None, output_final_state=False, cu_seqlens=None,
                 chunk_size=64, num_threads=None):
        inputs = {"q": q, "k": k, "v": v}
        for name, x in (("g", g), ("beta", beta), ("a", a), ("b", b),
                        ("initial_state", initial_state), ("cu_seqlens", cu_seqlens)):
            if x is not None:
                inputs[name] = np.asarray(x, np.float32)
        o, state, _ = runner.run_attention(variant, inputs, chunk_size=16, scale=scale,
                                           target="gpu-emulator")
        calls.append(variant)
        return o, state

    monkeypatch.setattr(la.ops, "attention", emulated)
    return calls


def _unit(x):
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def test_vla(gpu_kernels):
    rng = np.random.default_rng(1)
    B, T, H, K, V = 1, 37, 2, 16, 16
    q, k = (np.exp(rng.standard_normal((B, T, H, K)) / 4).astype(np.float32) for _ in range(2))
    v = rng.standard_normal((B, T, H, V)).astype(np.float32)
    u = (_unit(rng.standard_normal((B, T, H, K))) / np.sqrt(K)).astype(np.float32)
    o = family.variational_linear_attention(q, k, v, u, period=7)
    o_ref, _ = reference.variational_linear_attention(q, k, v, u, period=7)
    assert gpu_kernels == ["dplr"]
    assert rel_rms(o_ref, o) <= TOL


def test_hola(gpu_kernels):
    rng = np.random.default_rng(2)
    B, T, H, K, V = 1, 40, 2, 16, 16
    q, k = _unit(rng.standard_normal((B, T, H, K))), _unit(rng.standard_normal((B, T, H, K)))
    v = rng.standard_normal((B, T, H, V)).astype(np.float32)
    g = (-np.log1p(np.exp(-rng.standard_normal((B, T, H)))) / 4).astype(np.float32)
    beta = rng.uniform(0.1, 0.9, (B, T, H)).astype(np.float32)
    weight = np.full(H, 0.5, np.float32)
    o = family.hola_attention(q, k, v, g, beta, weight, cache_size=4, block_size=8)
    o_ref, _ = reference.hola_attention(q, k, v, g, beta, weight, cache_size=4, block_size=8)
    assert gpu_kernels == ["gated_deltanet", "gated_deltanet"]
    assert rel_rms(o_ref, o) <= TOL


def test_momentum_delta_rule(gpu_kernels):
    """alpha = mu and a small beta keep the basis coefficient small: the
    40 tokens are two segments (max_segment 20), two la calls."""
    rng = np.random.default_rng(3)
    B, T, H, K, V = 1, 40, 2, 8, 16
    q, k, p = (_unit(rng.standard_normal((B, T, H, K))) for _ in range(3))
    v = rng.standard_normal((B, T, H, V)).astype(np.float32)
    log_alpha = (-rng.uniform(0.0, 0.1, (B, T, H))).astype(np.float32)
    beta = rng.uniform(0.01, 0.05, (B, T, H)).astype(np.float32)
    eta = rng.uniform(0.1, 0.9, (B, T, H)).astype(np.float32)
    args = (q, k, v, p, log_alpha, log_alpha.copy(), beta, eta)
    o = family.momentum_delta_rule(*args, max_segment=20)
    o_ref, _ = reference.momentum_delta_rule(*args)
    assert gpu_kernels == ["rwkv7", "rwkv7"]
    assert rel_rms(o_ref, o) <= TOL
