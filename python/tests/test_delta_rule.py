"""The delta-rule family through the chunked (WY) path, against the fp64
reference and against the sequential lowering.

* large shapes: T = 4096 with K = V = 128, and K = 64, V = 128;
* beta close to 1 and beta in (0, 2) (``allow_neg_eigval``), strong decays;
* 60 seeded random configurations where the chunked and the sequential
  programs must agree with each other and with the reference.
"""

import numpy as np
import pytest

from la import runner
from la import testing as lt

pytestmark = pytest.mark.skipif(runner.find_la_run() is None, reason="la-run is not built")

DELTA = ("deltanet", "decayed_deltanet", "gated_deltanet", "kda")
TOL = {"f32": 1e-5, "f16": 5e-3, "bf16": 5e-3}


def _run_and_compare(variant, inputs, *, dtype="f32", chunk=64, sequential=False, **attrs):
    prepared = runner.prepare_inputs(inputs, dtype)
    o, s, _ = runner.run_attention(variant, prepared, dtype=dtype, chunk_size=chunk,
                                   sequential=sequential, **attrs)
    ref_attrs = dict(attrs)
    if ref_attrs.pop("allow_neg_eigval", False):
        prepared = dict(prepared, beta=2.0 * np.asarray(prepared["beta"], dtype=np.float64))
    ref_o, ref_s = lt.reference_for(variant, prepared, **ref_attrs)
    err_o, err_s = lt.rel_rms(ref_o, o), lt.rel_rms(ref_s, s)
    assert np.all(np.isfinite(o)) and np.all(np.isfinite(s))
    assert err_o <= TOL[dtype] and err_s <= TOL[dtype], (
        f"{variant} {dtype} chunk={chunk} sequential={sequential}: "
        f"rel_rms o={err_o:.3g} state={err_s:.3g}"
    )
    return o, s


@pytest.mark.parametrize("variant", ["gated_deltanet", "kda"])
def test_long_sequence_k128(variant):
    """T = 4096, K = V = 128, chunk 64: 64 chunks of state passing."""
    inputs = lt.make_inputs(variant, 1, 4096, 1, 128, 128, seed=11, gate_scale=1 / 16,
                            with_initial_state=True)
    _run_and_compare(variant, inputs)


def test_k64_v128():
    inputs = lt.make_inputs("gated_deltanet", 2, 300, 2, 64, 128, seed=12, gate_scale=1 / 16,
                            with_initial_state=True)
    _run_and_compare("gated_deltanet", inputs)


@pytest.mark.parametrize("variant", DELTA)
def test_beta_close_to_one(variant):
    """beta = 1 - 1e-4: (I - beta k k^T) is nearly a projection, the hardest
    case for the triangular solve."""
    inputs = lt.make_inputs(variant, 1, 200, 2, 32, 32, seed=13, gate_scale=1 / 16,
                            with_initial_state=True)
    inputs["beta"] = np.full_like(inputs["beta"], 1.0 - 1e-4)
    _run_and_compare(variant, inputs)


@pytest.mark.parametrize("variant", ["deltanet", "gated_deltanet", "kda"])
def test_negative_eigenvalues(variant):
    """allow_neg_eigval: beta in (0, 2), so I - beta k k^T can reflect."""
    inputs = lt.make_inputs(variant, 1, 150, 2, 16, 16, seed=14, gate_scale=1 / 16,
                            with_initial_state=True)
    _run_and_compare(variant, inputs, chunk=32, allow_neg_eigval=True)
    _run_and_compare(variant, inputs, sequential=True, allow_neg_eigval=True)


@pytest.mark.parametrize("variant", ["gated_deltanet", "kda"])
def test_qk_l2norm_bf16(variant):
    """In-kernel L2 normalisation of unnormalised bf16 q and k."""
    inputs = lt.make_inputs(variant, 1, 100, 2, 32, 32, seed=15, gate_scale=1 / 16,
                            with_initial_state=True)
    rng = np.random.default_rng(15)
    inputs["k"] = (3.0 * rng.standard_normal(inputs["k"].shape)).astype(np.float32)
    _run_and_compare(variant, inputs, dtype="bf16", qk_l2norm=True)


def _random_configs(count, seed=2026):
    rng = np.random.default_rng(seed)
    for index in range(count):
        variant = DELTA[index % len(DELTA)]
        H = int(rng.choice([1, 2]))
        yield pytest.param(
            dict(
                variant=variant,
                B=int(rng.choice([1, 2])),
                T=int(rng.integers(1, 90)),
                H=H,
                HV=H * int(rng.choice([1, 2])),
                K=int(rng.choice([4, 8, 16])),
                V=int(rng.choice([4, 8, 16])),
                chunk=int(rng.choice([8, 16, 32, 48, 64])),
                gate_scale=float(rng.choice([1 / 16, 1.0, 8.0])),
                beta_max=float(rng.choice([0.5, 0.999])),
                state=bool(rng.integers(0, 2)),
                seed=int(rng.integers(0, 1 << 30)),
            ),
            id=f"cfg{index}-{variant}",
        )


@pytest.mark.parametrize("cfg", list(_random_configs(60)))
def test_random_config_chunked_equals_sequential(cfg):
    inputs = lt.make_inputs(cfg["variant"], cfg["B"], cfg["T"], cfg["H"], cfg["K"], cfg["V"],
                            HV=cfg["HV"], seed=cfg["seed"], gate_scale=cfg["gate_scale"],
                            gate_min=-30.0, with_initial_state=cfg["state"])
    inputs["beta"] = (inputs["beta"] * cfg["beta_max"]).astype(np.float32)
    o_c, s_c = _run_and_compare(cfg["variant"], inputs, chunk=cfg["chunk"])
    o_s, s_s = _run_and_compare(cfg["variant"], inputs, sequential=True)
    assert lt.rel_rms(o_s, o_c) <= 1e-5 and lt.rel_rms(s_s, s_c) <= 1e-5, cfg
