"""fla's value-side gate ``gv`` at level 0 and its gradient.

``la.attention(..., gv=)`` (``S_t = alpha_t S_{t-1} Diag(exp(gv_t)) + k_t
v_t^T``, additive variants) and the backward the compiler derives for it
(``la.attention_grad`` / ``la.recurrence_grad`` with ``gv``; chunked by
``la-expand-recurrence-grad`` or token loops), against independent fp64
references: the forward ``la.reference.dplr_recurrence(log_value_gate=)``,
the hand-written reverse mode ``la.reference.dplr_recurrence_vjp`` (itself
checked against finite differences in test_reference_grad.py) through
``la.testing.reference_gradients``, and central finite differences of the
fp64 forward. Then fla's API (``la.fla.fused_recurrent_gla(gk, gv)``),
autograd, grouped query heads, hard resets and the error paths.
"""

import numpy as np
import pytest

import la
import la.fla
from la import reference
from la import testing as lt
from la.variants import VARIANTS

MAIN_LIMIT, GATE_LIMIT, EXTREME_GATE_LIMIT = 1e-5, 1e-4, 5e-3
MAIN = ("q", "k", "v", "initial_state")


def _limit(name):
    return MAIN_LIMIT if name in MAIN else GATE_LIMIT


def _inputs(variant, B, T, H, K, V, HV, seed, cu_seqlens=None, gv_scale=1.0, gv_min=None,
            **make):
    """make_inputs plus gv = gv_scale * log_sigmoid(x) [B,T,HV,V], the
    cotangents do and d_final."""
    inputs = lt.make_inputs(variant, B, T, H, K, V, HV=HV, seed=seed, with_initial_state=True,
                            cu_seqlens=cu_seqlens, **make)
    rng = np.random.default_rng(seed + 500)
    gv = gv_scale * -np.logaddexp(0.0, -rng.standard_normal((B, T, HV, V)))
    if gv_min is not None:
        gv = np.maximum(gv, gv_min)
    inputs["gv"] = gv.astype(np.float32)
    N = B if cu_seqlens is None else len(cu_seqlens) - 1
    do = rng.standard_normal((B, T, HV, V)).astype(np.float32)
    d_final = rng.standard_normal((N, HV, K, V)).astype(np.float32)
    return inputs, do, d_final


def _log_alpha(variant, inputs):
    """The [B,T,H,K] key-side log-gate of the variant (None without one)."""
    gate = VARIANTS[variant][1]
    shape = np.shape(inputs["q"])
    if gate == "channel":
        return inputs["g"]
    if gate == "scalar":
        return np.broadcast_to(np.asarray(inputs["g"])[..., None], shape)
    if gate == "fixed":
        return np.broadcast_to(np.asarray(inputs["log_decay"])[None, None, :, None], shape)
    return None


def _reference_forward(variant, inputs, scale=None):
    return reference.dplr_recurrence(
        inputs["q"], inputs["k"], inputs["v"], _log_alpha(variant, inputs), scale=scale,
        initial_state=inputs["initial_state"], cu_seqlens=inputs.get("cu_seqlens"),
        log_value_gate=inputs["gv"])


def _kwargs(inputs):
    return {key: inputs[key] for key in ("g", "gv", "log_decay", "initial_state", "cu_seqlens")
            if key in inputs}


#: (variant, B, T, H, HV, K, V, chunk, extra make_inputs / la keywords)
CASES = [
    ("gla", 1, 5, 2, 2, 8, 8, 16, {}),                                  # T < C
    ("gla", 2, 37, 2, 4, 8, 6, 8, {}),                                  # T % C, GQA values
    ("gla", 1, 40, 2, 4, 8, 6, 8, {"cu_seqlens": [0, 13, 13, 29, 40]}),
    ("mamba2", 1, 23, 2, 2, 4, 4, 4, {"cu_seqlens": [0, 1, 23]}),
    ("mamba2", 2, 1, 2, 4, 4, 4, 16, {}),                               # T = 1
    ("retention", 2, 9, 2, 2, 4, 6, 4, {}),
    ("linear", 1, 7, 1, 3, 6, 5, 4, {"scale": 0.3}),
    ("linear", 2, 65, 2, 4, 8, 8, 16, {"qk_l2norm": True}),             # T = 4 C + 1
    ("gla", 1, 32, 2, 2, 8, 8, 8, {"gv_scale": 30.0, "gv_min": -30.0}),  # strong gv
]
_MAKE_KEYS = ("cu_seqlens", "gv_scale", "gv_min")


@pytest.mark.parametrize("sequential", [False, True], ids=["chunked", "tokens"])
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-T{c[2]}-{i}" for i, c in enumerate(CASES)])
def test_forward_and_reverse_mode_reference(case, sequential):
    variant, B, T, H, HV, K, V, chunk, extra = case
    make = {key: val for key, val in extra.items() if key in _MAKE_KEYS}
    attrs = {key: val for key, val in extra.items() if key not in _MAKE_KEYS}
    inputs, do, d_final = _inputs(variant, B, T, H, K, V, HV, seed=7, **make)
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    o, s = la.attention(variant, q, k, v, output_final_state=True, chunk_size=chunk,
                        sequential=sequential, **_kwargs(inputs), **attrs)
    ref_inputs = inputs
    if attrs.get("qk_l2norm"):
        ref_inputs = dict(inputs, q=reference.l2norm(q), k=reference.l2norm(k))
    ref_o, ref_s = _reference_forward(variant, ref_inputs, scale=attrs.get("scale"))
    assert lt.rel_rms(ref_o, o) <= MAIN_LIMIT
    assert lt.rel_rms(ref_s, s) <= MAIN_LIMIT

    before = {name: np.array(x, copy=True) for name, x in inputs.items()}
    got = la.attention_backward(variant, q, k, v, do=do, d_final_state=d_final,
                                chunk_size=chunk, sequential=sequential, **_kwargs(inputs),
                                **attrs)
    for name, x in before.items():
        np.testing.assert_array_equal(inputs[name], x, err_msg=f"{name} was written")
    expected = lt.reference_gradients(variant, inputs, do, d_final, **attrs)
    assert sorted(got) == sorted(expected)
    assert "gv" in got
    # As for g (test_attention_grad.py, EXTREME_GATE_DG_LIMIT): the chunked
    # gate gradient sums terms that cancel when nearly every gate is near
    # -30 (measured 1.3e-4 here); the token loops keep ~1e-7.
    extreme = make.get("gv_scale", 1.0) > 10 and not sequential
    for name, value in expected.items():
        limit = EXTREME_GATE_LIMIT if extreme and name == "gv" else _limit(name)
        err = lt.rel_rms(value, got[name])
        assert err <= limit, f"{variant} d{name}: rel_rms {err:.3e}"


@pytest.mark.parametrize("variant", ["linear", "retention", "mamba2", "gla"])
def test_finite_differences(variant):
    """Every input's gradient against central differences of the fp64
    forward, on a small shape (T % C != 0, grouped value heads)."""
    B, T, H, HV, K, V = 1, 6, 1, 2, 3, 2
    inputs, do, d_final = _inputs(variant, B, T, H, K, V, HV, seed=3)
    got = la.attention_backward(variant, inputs["q"], inputs["k"], inputs["v"], do=do,
                                d_final_state=d_final, chunk_size=4, **_kwargs(inputs))
    base = {n: np.asarray(x, np.float64) for n, x in inputs.items() if n != "log_decay"}
    base["log_decay"] = inputs.get("log_decay")

    def loss(values):
        o, s = _reference_forward(variant, values)
        return float((o * do).sum() + (s * d_final).sum())

    step = 1e-6
    for name in got:
        expected = np.zeros_like(base[name])
        for index in np.ndindex(expected.shape):
            plus = dict(base, **{name: base[name].copy()})
            minus = dict(base, **{name: base[name].copy()})
            plus[name][index] += step
            minus[name][index] -= step
            expected[index] = (loss(plus) - loss(minus)) / (2 * step)
        err = lt.rel_rms(expected, got[name])
        assert err <= _limit(name), f"{variant} d{name}: rel_rms {err:.3e}"


def test_a_wrong_value_gate_gradient_is_detected():
    """The comparison can fail: a gradient off by 0.1% is beyond the limit."""
    inputs, do, d_final = _inputs("gla", 1, 16, 1, 4, 4, 1, seed=11)
    got = la.attention_backward("gla", inputs["q"], inputs["k"], inputs["v"], do=do,
                                d_final_state=d_final, chunk_size=8, **_kwargs(inputs))
    expected = lt.reference_gradients("gla", inputs, do, d_final)
    assert lt.rel_rms(expected["gv"], got["gv"]) <= GATE_LIMIT
    assert lt.rel_rms(expected["gv"], got["gv"] * 1.001) > GATE_LIMIT


@pytest.mark.parametrize("sequential", [False, True], ids=["chunked", "tokens"])
def test_grouped_query_heads(sequential):
    """ONNX's grouped query heads (q has G times k's heads, v and gv k's):
    the same as every query head with its own copy of k, v and gv, whose
    gradients sum over the group."""
    B, T, H, G, K, V = 1, 13, 2, 2, 4, 4
    rng = np.random.default_rng(5)
    q = rng.standard_normal((B, T, H * G, K)).astype(np.float32)
    k, g = (rng.standard_normal((B, T, H, K)).astype(np.float32) for _ in range(2))
    g = -np.logaddexp(0.0, -g).astype(np.float32)
    v = rng.standard_normal((B, T, H, V)).astype(np.float32)
    gv = (-np.logaddexp(0.0, -rng.standard_normal((B, T, H, V)))).astype(np.float32)
    s0 = (0.1 * rng.standard_normal((B, H, K, V))).astype(np.float32)
    do = rng.standard_normal((B, T, H * G, V)).astype(np.float32)
    o, s = la.attention("gla", q, k, v, g, gv=gv, initial_state=s0, output_final_state=True,
                        chunk_size=4, sequential=sequential)
    rep = {n: np.repeat(x, G, axis=2) for n, x in (("k", k), ("g", g), ("v", v), ("gv", gv))}
    s0_rep = np.repeat(s0, G, axis=1)
    ref_o, ref_s = reference.dplr_recurrence(q, rep["k"], rep["v"], rep["g"],
                                             initial_state=s0_rep, log_value_gate=rep["gv"])
    assert lt.rel_rms(ref_o, o) <= MAIN_LIMIT
    assert lt.rel_rms(ref_s[:, ::G], s) <= MAIN_LIMIT

    got = la.attention_backward("gla", q, k, v, g, gv=gv, initial_state=s0, do=do,
                                chunk_size=4, sequential=sequential)
    ref = reference.dplr_recurrence_vjp(q, rep["k"], rep["v"], do, log_alpha=rep["g"],
                                        initial_state=s0_rep, log_value_gate=rep["gv"])
    summed = {"k": "k", "v": "v", "g": "log_alpha", "gv": "log_value_gate"}
    for name, key in summed.items():
        expected = ref[key].reshape(ref[key].shape[:2] + (H, G) + ref[key].shape[3:]).sum(3)
        assert lt.rel_rms(expected, got[name]) <= _limit(name), name
    assert lt.rel_rms(ref["q"], got["q"]) <= MAIN_LIMIT
    expected_s0 = ref["initial_state"].reshape(B, H, G, K, V).sum(2)
    assert lt.rel_rms(expected_s0, got["initial_state"]) <= MAIN_LIMIT


@pytest.mark.parametrize("sequential", [False, True], ids=["chunked", "tokens"])
def test_hard_resets_on_the_value_side(sequential):
    """gv = -inf at some tokens resets those columns of the state exactly:
    outputs and gradients stay finite and match the reference (the -inf
    gate's own gradient is 0: exp(gv) has none there)."""
    inputs, do, d_final = _inputs("gla", 1, 24, 1, 4, 4, 1, seed=13)
    gv = inputs["gv"].copy()
    gv[0, 5, 0, :2] = -np.inf
    gv[0, 17, 0, :] = -np.inf
    inputs["gv"] = gv
    o, s = la.attention("gla", inputs["q"], inputs["k"], inputs["v"], output_final_state=True,
                        chunk_size=8, sequential=sequential, **_kwargs(inputs))
    ref_o, ref_s = _reference_forward("gla", inputs)
    assert lt.rel_rms(ref_o, o) <= MAIN_LIMIT and lt.rel_rms(ref_s, s) <= MAIN_LIMIT
    got = la.attention_backward("gla", inputs["q"], inputs["k"], inputs["v"], do=do,
                                d_final_state=d_final, chunk_size=8, sequential=sequential,
                                **_kwargs(inputs))
    expected = lt.reference_gradients("gla", inputs, do, d_final)
    for name, value in expected.items():
        assert np.all(np.isfinite(got[name])), name
        assert lt.rel_rms(value, got[name]) <= _limit(name), name


def test_fla_fused_recurrent_gla_with_gv():
    """la.fla.fused_recurrent_gla(q, k, v, gk, gv) as fla calls it, with gk
    and without, against the fp64 reference."""
    inputs, _, _ = _inputs("gla", 1, 21, 2, 8, 4, 2, seed=17)
    q, k, v, gk, gv = (inputs[n] for n in ("q", "k", "v", "g", "gv"))
    s0 = inputs["initial_state"]
    o, s = la.fla.fused_recurrent_gla(q, k, v, gk, gv, None, s0, True)
    ref_o, ref_s = reference.dplr_recurrence(q, k, v, gk, initial_state=s0, log_value_gate=gv)
    assert lt.rel_rms(ref_o, o) <= MAIN_LIMIT and lt.rel_rms(ref_s, s) <= MAIN_LIMIT
    o, _ = la.fla.fused_recurrent_gla(q, k, v, gv=gv, scale=0.5)
    ref_o, _ = reference.dplr_recurrence(q, k, v, scale=0.5, log_value_gate=gv)
    assert lt.rel_rms(ref_o, o) <= MAIN_LIMIT


def test_autograd_through_fla_with_gv():
    """torch: gk and gv require grad, and both get the reverse mode's
    gradients through la.fla (the custom operator's backward)."""
    torch = pytest.importorskip("torch")
    inputs, do, _ = _inputs("gla", 1, 19, 1, 4, 4, 2, seed=19)
    t = {n: torch.from_numpy(inputs[n]).requires_grad_() for n in ("q", "k", "v", "g", "gv")}
    o, _ = la.fla.fused_recurrent_gla(t["q"], t["k"], t["v"], t["g"], t["gv"])
    o.backward(torch.from_numpy(do))
    zero = np.zeros((1, 2, 4, 4), np.float32)
    expected = lt.reference_gradients("gla", dict(inputs, initial_state=zero), do, zero)
    for name in ("q", "k", "v", "g", "gv"):
        assert lt.rel_rms(expected[name], t[name].grad.numpy()) <= _limit(name), name


def test_gradcheck_with_gv():
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(1)
    B, T, H, HV, K, V = 1, 7, 1, 2, 3, 3

    def leaf(*shape, gate=False):
        x = torch.randn(*shape, generator=gen, dtype=torch.float64)
        return (-0.3 * x.abs() if gate else x).requires_grad_()

    q, k, v = leaf(B, T, H, K), leaf(B, T, H, K), leaf(B, T, HV, V)
    g, gv, s0 = leaf(B, T, H, gate=True), leaf(B, T, HV, V, gate=True), leaf(B, HV, K, V)

    def mamba2_gv(q, k, v, g, gv, s0):
        return la.attention("mamba2", q, k, v, g, gv=gv, initial_state=s0,
                            output_final_state=True, dtype="f32", chunk_size=3)

    # la computes in f32: finite differences carry ~1e-4 of rounding here.
    assert torch.autograd.gradcheck(mamba2_gv, (q, k, v, g, gv, s0), eps=3e-3, atol=2e-3,
                                    rtol=2e-3)


def test_value_gate_errors():
    inputs, _, _ = _inputs("gla", 1, 8, 1, 4, 4, 2, seed=23)
    q, k, v, g, gv = (inputs[n] for n in ("q", "k", "v", "g", "gv"))
    beta = np.full((1, 8, 1), 0.5, np.float32)
    with pytest.raises(ValueError, match="gv needs an additive variant"):
        la.attention("gated_deltanet", q, k, v, g[..., 0], beta, gv=gv)
    with pytest.raises(ValueError, match="without normalize"):
        la.attention("gla", q, k, v, g, gv=gv, normalize=True)
    with pytest.raises(ValueError, match=r"gv.*\[B, T, HV, V\]"):
        la.attention("gla", q, k, v, g, gv=gv[:, :, :1])
    bad = gv.copy()
    bad[0, 3, 1, 2] = 0.5
    with pytest.raises(ValueError, match=r"gv holds log-space decays.*gv\[0, 3, 1, 2\]"):
        la.attention("gla", q, k, v, g, gv=bad)
    # fla's delta rule with gv is not in the dialect: a clear error.
    with pytest.raises(la.LaError, match="gv"):
        la.fla.fused_recurrent_gated_delta_rule(q, k, v, g[..., 0], gv=gv, beta=beta)
