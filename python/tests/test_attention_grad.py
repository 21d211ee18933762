"""The backward of every la.attention variant, derived by the compiler
(``la-derive-backward`` -> ``la.attention_grad`` -> ``la.recurrence_grad``
-> checkpointed token loops) and called through ``la.attention_backward``,
against two independent fp64 references:

* central finite differences of the fp64 forward reference
  (``la.testing.reference_for``) on small shapes, for every variant and every
  differentiable input;
* a reverse mode written by hand (``la.testing.reference_gradients``): the
  level-1 adjoint recurrence ``la.reference.dplr_recurrence_vjp`` (itself
  checked against finite differences) with the level-0 maps (L2 norm, the
  delta rule's and Gated DeltaNet-2's encodings, gate broadcasts,
  allow_neg_eigval) chained in NumPy, on the forward tests' shape list.

The torch side (autograd, gradcheck, a segmented backward, a residual
block against a pure-torch layer) runs when torch is installed."""

import numpy as np
import pytest

import la
from la import reference, runner
from la import testing as lt
from la.variants import VARIANTS

# f32 limits of the issue: q, k, v and the state; gates, beta, erase, write.
MAIN_LIMIT, GATE_LIMIT, BF16_LIMIT = 1e-5, 1e-4, 1e-2
MAIN = ("q", "k", "v", "initial_state")
DIFFERENTIABLE = ("q", "k", "v", "g", "beta", "erase", "write", "a", "b", "initial_state")


def _limit(name):
    return MAIN_LIMIT if name in MAIN else GATE_LIMIT


def _inputs(variant, B, T, H, K, V, HV, seed, cu_seqlens=None, **kwargs):
    inputs = lt.make_inputs(variant, B, T, H, K, V, HV=HV, seed=seed, with_initial_state=True,
                            cu_seqlens=cu_seqlens, **kwargs)
    N = B if cu_seqlens is None else len(cu_seqlens) - 1
    rng = np.random.default_rng(seed + 1000)
    do = rng.standard_normal((B, T, HV, V)).astype(np.float32)
    d_final = rng.standard_normal((N, HV, K, V)).astype(np.float32)
    return inputs, do, d_final


def _la_gradients(variant, inputs, do, d_final, **attrs):
    kwargs = {key: inputs[key] for key in ("g", "beta", "erase", "write", "a", "b", "log_decay",
                                           "initial_state", "cu_seqlens") if key in inputs}
    before = {name: np.array(x, copy=True) for name, x in inputs.items()}
    before_do = np.array(do, copy=True)
    grads = la.attention_backward(variant, inputs["q"], inputs["k"], inputs["v"], do=do,
                                  d_final_state=d_final, **kwargs, **attrs)
    # The kernel reads its inputs and the cotangents, and writes none of them.
    for name, x in before.items():
        np.testing.assert_array_equal(inputs[name], x, err_msg=f"{name} was written")
    np.testing.assert_array_equal(do, before_do, err_msg="do was written")
    return grads


def _reference_forward(variant, inputs, allow_neg_eigval=False, **attrs):
    """The fp64 forward reference; allow_neg_eigval is the delta rule at 2 beta."""
    if allow_neg_eigval:
        inputs = dict(inputs, beta=2.0 * np.asarray(inputs["beta"], np.float64))
    return lt.reference_for(variant, inputs, **attrs)


# --------------------------------------------------------------------------
# finite differences of the forward reference
# --------------------------------------------------------------------------

def _finite_differences(variant, inputs, do, d_final, names, step=1e-6, **attrs):
    base = {key: (np.asarray(x, np.float64) if key in DIFFERENTIABLE else x)
            for key, x in inputs.items()}

    def loss(values):
        o, s = _reference_forward(variant, values, **attrs)
        return float((o * do).sum() + (s * d_final).sum())

    grads = {}
    for name in names:
        grad = np.zeros_like(base[name])
        for index in np.ndindex(grad.shape):
            plus = dict(base, **{name: base[name].copy()})
            minus = dict(base, **{name: base[name].copy()})
            plus[name][index] += step
            minus[name][index] -= step
            grad[index] = (loss(plus) - loss(minus)) / (2 * step)
        grads[name] = grad
    return grads


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_finite_differences_every_variant(variant):
    update, _ = VARIANTS[variant]
    attrs = {"scale": 0.7}
    if update != "additive":
        attrs["qk_l2norm"] = True
    inputs, do, d_final = _inputs(variant, B=1, T=6, H=1, K=4, V=3, HV=2, seed=3)
    d_final_before = d_final.copy()
    got = _la_gradients(variant, inputs, do, d_final, chunk_size=4, **attrs)
    np.testing.assert_array_equal(d_final, d_final_before, err_msg="d_final_state was written")
    names = [n for n in DIFFERENTIABLE if n in inputs]
    assert sorted(got) == sorted(names)
    expected = _finite_differences(variant, inputs, do, d_final, names, **attrs)
    for name in names:
        err = lt.rel_rms(expected[name], got[name])
        assert err <= _limit(name), f"{variant} d{name}: rel_rms {err:.3e}"


@pytest.mark.parametrize("variant", ["linear", "retention", "mamba2", "gla"])
def test_finite_differences_normalizer(variant):
    """o = S^T q' / (z . q' + eps): positive features keep z . q' away from 0."""
    inputs, do, d_final = _inputs(variant, B=1, T=7, H=1, K=4, V=3, HV=2, seed=6,
                                  positive_qk=True)
    attrs = {"normalizer": True, "eps": 1e-3}
    got = _la_gradients(variant, inputs, do, d_final, chunk_size=3, normalize=True, eps=1e-3)
    names = [n for n in DIFFERENTIABLE if n in inputs]
    expected = _finite_differences(variant, inputs, do, d_final, names, **attrs)
    for name in names:
        err = lt.rel_rms(expected[name], got[name])
        assert err <= _limit(name), f"{variant} d{name}: rel_rms {err:.3e}"


@pytest.mark.parametrize("variant", ["deltanet", "gated_deltanet", "kda"])
def test_finite_differences_allow_neg_eigval(variant):
    inputs, do, d_final = _inputs(variant, B=1, T=5, H=1, K=4, V=3, HV=1, seed=4)
    got = _la_gradients(variant, inputs, do, d_final, allow_neg_eigval=True, chunk_size=2)
    expected = _finite_differences(variant, inputs, do, d_final, ["k", "beta"],
                                   allow_neg_eigval=True)
    for name in ("k", "beta"):
        err = lt.rel_rms(expected[name], got[name])
        assert err <= _limit(name), f"{variant} d{name}: rel_rms {err:.3e}"


def test_finite_differences_detect_a_wrong_gradient():
    """The check fails when the gradient is off by 0.1%."""
    inputs, do, d_final = _inputs("gla", B=1, T=4, H=1, K=3, V=2, HV=1, seed=5)
    got = _la_gradients("gla", inputs, do, d_final)
    expected = _finite_differences("gla", inputs, do, d_final, ["g"])
    assert lt.rel_rms(expected["g"], got["g"]) <= GATE_LIMIT
    assert lt.rel_rms(expected["g"], got["g"] * 1.001) > GATE_LIMIT


# --------------------------------------------------------------------------
# an independent reverse mode: the level-1 adjoint and the level-0 maps
# --------------------------------------------------------------------------

def _reverse_mode(variant, inputs, do, d_final, **attrs):
    return lt.reference_gradients(variant, inputs, do, d_final, **attrs)


#: the forward tests' shape list, each case on one variant
#: (variant, B, T, H, HV, K, V, chunk, extra make_inputs / la keywords)
CASES = [
    ("gla", 1, 5, 2, 2, 8, 8, 16, {}),                        # T < C
    ("gated_deltanet", 2, 21, 2, 4, 8, 6, 8, {"qk_l2norm": True}),  # T % C, B > 1, GQA
    ("kda", 1, 24, 1, 2, 8, 4, 8, {"qk_l2norm": True}),       # K != V, T = 3 C
    ("mamba2", 1, 16, 2, 2, 4, 4, 4, {"gate_scale": 30.0, "gate_min": -30.0}),
    ("retention", 2, 9, 2, 2, 4, 6, 4, {}),
    ("linear", 1, 7, 1, 3, 6, 5, 4, {"scale": 0.3}),
    ("deltanet", 1, 12, 2, 2, 8, 8, 4, {"allow_neg_eigval": True}),
    ("decayed_deltanet", 1, 10, 2, 4, 4, 8, 4, {}),
    ("gated_deltanet2", 1, 19, 1, 2, 4, 6, 4, {"cu_seqlens": [0, 5, 5, 19],
                                               "qk_l2norm": True}),
    ("scalar_gated_deltanet2", 1, 11, 2, 2, 4, 4, 4, {}),
    ("decayed_deltanet2", 1, 8, 1, 1, 4, 4, 4, {}),
    ("deltanet2", 1, 8, 1, 2, 4, 4, 4, {}),
    ("mamba2", 2, 1, 2, 4, 4, 4, 16, {}),                     # T = 1
    ("linear", 2, 65, 2, 4, 8, 8, 16, {"qk_l2norm": True}),   # T = 4 C + 1
    ("gla", 2, 37, 2, 4, 8, 6, 8, {}),                        # channel gate, GQA
    ("gla", 1, 32, 2, 2, 8, 8, 8, {"gate_scale": 30.0, "gate_min": -30.0}),
    ("gla", 1, 40, 2, 4, 8, 6, 8, {"cu_seqlens": [0, 13, 13, 29, 40]}),
    ("mamba2", 1, 23, 2, 2, 4, 4, 4, {"cu_seqlens": [0, 1, 23]}),
    # the delta rule's chunked backward (six recurrences)
    ("gated_deltanet", 1, 32, 2, 2, 8, 8, 8, {"gate_scale": 30.0, "gate_min": -30.0}),
    ("kda", 1, 32, 2, 2, 8, 8, 8, {"gate_scale": 30.0, "gate_min": -30.0}),
    ("kda", 1, 40, 2, 4, 8, 6, 8, {"cu_seqlens": [0, 13, 13, 29, 40],
                                   "qk_l2norm": True}),
    ("gated_deltanet", 1, 23, 2, 2, 4, 4, 4, {"cu_seqlens": [0, 1, 23]}),
    ("deltanet", 2, 65, 2, 4, 8, 8, 16, {"qk_l2norm": True}),  # T = 4 C + 1
    ("decayed_deltanet", 1, 37, 1, 2, 8, 4, 8, {"cu_seqlens": [0, 37]}),
    # the dplr rule (RWKV-7): general low-rank, a and b differentiable
    ("rwkv7", 1, 40, 2, 4, 8, 6, 8, {"cu_seqlens": [0, 13, 13, 29, 40], "qk_l2norm": True}),
    ("scalar_gated_dplr", 2, 21, 2, 2, 8, 8, 8, {"scale": 1.0}),
]
_MAKE_KEYS = ("gate_scale", "gate_min", "cu_seqlens")


#: The chunked backward's gate gradient, dg_t = sum_{u >= t} (q_u . dq_u -
#: k_u . dk_u) + <S_T, dS_T> (la-expand-recurrence-grad), sums terms of
#: order one that cancel to almost nothing when nearly every log-gate is
#: near -30: there it keeps about 3 digits (measured 2.3e-3), the token
#: loops (sequential=True) about 7. With ordinary gates it is ~1e-6.
EXTREME_GATE_DG_LIMIT = 5e-3


@pytest.mark.parametrize("sequential", [False, True], ids=["chunked", "tokens"])
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-T{c[2]}" for c in CASES])
def test_reverse_mode_reference(case, sequential):
    variant, B, T, H, HV, K, V, chunk, extra = case
    make = {key: val for key, val in extra.items() if key in _MAKE_KEYS}
    attrs = {key: val for key, val in extra.items() if key not in _MAKE_KEYS}
    inputs, do, d_final = _inputs(variant, B, T, H, K, V, HV, seed=7, **make)
    got = _la_gradients(variant, inputs, do, d_final, chunk_size=chunk,
                        sequential=sequential, **attrs)
    expected = _reverse_mode(variant, inputs, do, d_final, **attrs)
    assert sorted(got) == sorted(expected)
    extreme = make.get("gate_scale", 1.0) > 10 and not sequential
    for name, value in expected.items():
        limit = EXTREME_GATE_DG_LIMIT if extreme and name == "g" else _limit(name)
        err = lt.rel_rms(value, got[name])
        assert err <= limit, f"{variant} d{name}: rel_rms {err:.3e}"


def test_one_backward_kernel_serves_every_length():
    """The gradient kernel has a dynamic B and T (la-expand-recurrence-grad
    reads T from q): a new sequence length or batch size reuses it, and
    each length's gradients match the reverse mode."""
    first = True
    for B, T in ((2, 21), (1, 37), (3, 8)):
        inputs, do, d_final = _inputs("gated_deltanet", B, T, 2, 8, 6, 4, seed=T)
        before = la.cache_info()
        got = _la_gradients("gated_deltanet", inputs, do, d_final, chunk_size=8)
        after = la.cache_info()
        if not first:
            assert after["misses"] == before["misses"], f"B={B}, T={T} compiled again"
        first = False
        for name, value in _reverse_mode("gated_deltanet", inputs, do, d_final).items():
            err = lt.rel_rms(value, got[name])
            assert err <= _limit(name), f"B={B}, T={T} d{name}: rel_rms {err:.3e}"


# --------------------------------------------------------------------------
# the GPU pipeline's backward kernels, run on the CPU by la-emulate-gpu
# --------------------------------------------------------------------------

def _emulated_gradients(variant, inputs, do, d_final, chunk, chunk_parallel=False, **attrs):
    """The gradient function that la-derive-backward makes of the forward's
    module, lowered by la-lower-to-gpu (the adjoint recurrences as the
    forward's task kernels, the products between them as kernels of their
    own) and run by la-run --target=gpu-emulator."""
    import os
    import tempfile

    from la import ir
    from la.variants import token_operands

    B, T, H, K = inputs["q"].shape
    HV, V = inputs["v"].shape[2:]
    cu_seqlens = inputs.get("cu_seqlens")
    text = runner.attention_mlir(variant, B, T, H, K, V, HV, has_initial_state=True,
                                 output_final_state=True, log_decay=inputs.get("log_decay"),
                                 cu_seqlens_len=None if cu_seqlens is None else len(cu_seqlens),
                                 **attrs)
    module = ir.Module.parse(text)
    ir.PassManager.parse(f"builtin.module(la-derive-backward{{checkpoint={chunk} "
                         "keep-forward=0})").run(module)
    order = token_operands(variant) + ["initial_state"]
    names = [name for name in order if name in DIFFERENTIABLE]
    if cu_seqlens is not None:
        order.append("cu_seqlens")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "grad.mlir")
        with open(path, "w") as f:
            f.write(str(module))
        values = lt.run_la_run_file(
            runner.find_la_run(), path, [inputs[name] for name in order] + [do, d_final], tmp,
            flags=["--entry=attention_grad", "--target=gpu-emulator",
                   f"--chunk-size={chunk}"] + (["--chunk-parallel"] if chunk_parallel else []),
            results=names)
    return dict(zip(names, values))


#: The forward tests' shapes, all of which the GPU path takes: T < C,
#: T % C != 0, B > 1, grouped value heads, K != V, strong gates, packed
#: sequences (an empty one, one of one token, one alone: blocks of their own,
#: each sequence's edges and gate sums in kernels of one block); the general
#: low-rank form (Gated DeltaNet-2's and the dplr rule's) too, its adjoint
#: chunked like the delta rule's.
GPU_CASES = CASES


@pytest.mark.skipif(runner.find_la_run() is None, reason="la-run is not built")
@pytest.mark.parametrize("case", GPU_CASES, ids=[f"{c[0]}-T{c[2]}" for c in GPU_CASES])
@pytest.mark.parametrize("schedule", ["fused", "chunk-parallel"])
def test_gpu_emulated_backward(case, schedule):
    variant, B, T, H, HV, K, V, chunk, extra = case
    make = {key: val for key, val in extra.items() if key in _MAKE_KEYS}
    attrs = {key: val for key, val in extra.items() if key not in _MAKE_KEYS}
    inputs, do, d_final = _inputs(variant, B, T, H, K, V, HV, seed=7, **make)
    got = _emulated_gradients(variant, inputs, do, d_final, chunk,
                              chunk_parallel=schedule == "chunk-parallel", **attrs)
    expected = _reverse_mode(variant, inputs, do, d_final, **attrs)
    assert sorted(got) == sorted(expected)
    extreme = make.get("gate_scale", 1.0) > 10
    for name, value in expected.items():
        limit = EXTREME_GATE_DG_LIMIT if extreme and name == "g" else _limit(name)
        err = lt.rel_rms(value, got[name])
        assert err <= limit, f"{variant} d{name}: rel_rms {err:.3e}"


@pytest.mark.parametrize("beta_range", [(1e-3, 1e-2), (0.99, 0.999)], ids=["near0", "near1"])
def test_beta_near_zero_and_one(beta_range):
    inputs, do, d_final = _inputs("gated_deltanet", 1, 13, 2, 4, 6, 2, seed=8)
    inputs["beta"] = np.random.default_rng(9).uniform(*beta_range, (1, 13, 2)).astype(np.float32)
    got = _la_gradients("gated_deltanet", inputs, do, d_final, chunk_size=4)
    expected = _reverse_mode("gated_deltanet", inputs, do, d_final)
    for name, value in expected.items():
        err = lt.rel_rms(value, got[name])
        assert err <= _limit(name), f"d{name}: rel_rms {err:.3e}"


@pytest.mark.parametrize("sequential", [False, True], ids=["chunked", "tokens"])
@pytest.mark.parametrize("variant", ["mamba2", "gla", "gated_deltanet", "gated_deltanet2",
                                     "rwkv7"])
def test_hard_resets(variant, sequential):
    """-inf log-gates (a state reset) give finite gradients, those of the
    reverse mode (where alpha = 0 the gate's gradient is 0)."""
    inputs, do, d_final = _inputs(variant, 1, 40, 2, 4, 4, 2, seed=16)
    g = inputs["g"].copy()
    g[0, 10] = -np.inf
    g[0, 25, 1] = -np.inf
    inputs["g"] = g
    got = _la_gradients(variant, inputs, do, d_final, chunk_size=8, sequential=sequential)
    with np.errstate(invalid="ignore"):
        expected = _reverse_mode(variant, inputs, do, d_final)
    for name, value in expected.items():
        assert np.isfinite(got[name]).all(), f"d{name} is not finite"
        err = lt.rel_rms(np.nan_to_num(value), got[name])
        assert err <= _limit(name), f"{variant} d{name}: rel_rms {err:.3e}"


@pytest.mark.parametrize("variant", ["gla", "gated_deltanet", "kda", "gated_deltanet2"])
def test_bf16_inputs(variant):
    """bf16 q, k, v (and d_o): the fp64 reference takes the rounded values."""
    inputs, do, d_final = _inputs(variant, 1, 16, 2, 8, 8, 2, seed=10)
    got = _la_gradients(variant, inputs, do, d_final, dtype="bf16", chunk_size=8)
    rounded = dict(inputs, **{n: runner.round_to_bf16(inputs[n]) for n in ("q", "k", "v")})
    expected = _reverse_mode(variant, rounded, runner.round_to_bf16(do), d_final)
    for name, value in expected.items():
        err = lt.rel_rms(value, got[name])
        assert err <= BF16_LIMIT, f"{variant} d{name}: rel_rms {err:.3e}"


# --------------------------------------------------------------------------
# the NumPy function's errors
# --------------------------------------------------------------------------

def test_backward_argument_errors():
    inputs, do, d_final = _inputs("gla", 1, 4, 1, 4, 3, 1, seed=11)
    q, k, v, g = (inputs[n] for n in ("q", "k", "v", "g"))
    with pytest.raises(ValueError, match=r"do must have shape \[B, T, HV, V\]"):
        la.attention_backward("gla", q, k, v, g, do=do[:, :3])
    with pytest.raises(ValueError, match=r"d_final_state must have shape"):
        la.attention_backward("gla", q, k, v, g, do=do, d_final_state=d_final[..., :2])
    with pytest.raises(ValueError, match="do, the gradient of o"):
        la.attention_backward("gla", q, k, v, g, do=None)
    with pytest.raises(ValueError, match="log-space decays"):
        la.attention_backward("gla", q, k, v, -g, do=do)


# --------------------------------------------------------------------------
# torch: autograd
# --------------------------------------------------------------------------

def _torch():
    return pytest.importorskip("torch")


def test_gradcheck():
    torch = _torch()
    gen = torch.Generator().manual_seed(0)
    B, T, H, HV, K, V = 1, 7, 1, 2, 4, 3

    def leaf(*shape, kind="normal"):
        x = torch.randn(*shape, generator=gen, dtype=torch.float64)
        if kind == "gate":
            x = -0.3 * x.abs()
        if kind == "unit":
            x = 0.1 + 0.8 * torch.rand(*shape, generator=gen, dtype=torch.float64)
        return x.requires_grad_()

    q, k, v = leaf(B, T, H, K), leaf(B, T, H, K), leaf(B, T, HV, V)
    g, beta, s0 = leaf(B, T, H, K, kind="gate"), leaf(B, T, H, kind="unit"), leaf(B, HV, K, V)
    erase, write = leaf(B, T, H, K, kind="unit"), leaf(B, T, HV, V, kind="unit")
    options = dict(initial_state=s0, output_final_state=True, dtype="f32", chunk_size=3)

    def kda(q, k, v, g, beta, s0):
        return la.kda(q, k, v, g, beta, use_qk_l2norm_in_kernel=True,
                      **dict(options, initial_state=s0))

    def gdn2(q, k, v, g, erase, write, s0):
        return la.gated_delta_rule2(q, k, v, g, erase, write, **dict(options, initial_state=s0))

    # la computes in f32: finite differences of its forward carry ~1e-4 of
    # rounding at this step (a wrong gradient is off by O(1)).
    def mamba2(q, k, v, g, s0):  # the chunked backward
        return la.simple_gla(q, k, v, g, **dict(options, initial_state=s0))

    tolerances = dict(eps=3e-3, atol=2e-3, rtol=2e-3)
    assert torch.autograd.gradcheck(kda, (q, k, v, g, beta, s0), **tolerances)
    assert torch.autograd.gradcheck(gdn2, (q, k, v, g, erase, write, s0), **tolerances)
    scalar_g = leaf(B, T, H, kind="gate")
    assert torch.autograd.gradcheck(mamba2, (q, k, v, scalar_g, s0), **tolerances)


def test_autograd_matches_the_numpy_gradients():
    """Only the inputs that require grad get one, in their dtype."""
    torch = _torch()
    inputs, do, _ = _inputs("gated_deltanet", 1, 9, 1, 4, 4, 2, seed=12)
    t = {n: torch.from_numpy(inputs[n]) for n in ("q", "k", "v", "g", "beta")}
    t["q"].requires_grad_()
    t["g"].requires_grad_()
    o, s = la.gated_delta_rule(t["q"], t["k"], t["v"], t["g"], t["beta"], chunk_size=4)
    assert s is None and o.requires_grad
    o.backward(torch.from_numpy(do))
    expected = _reverse_mode("gated_deltanet", dict(inputs, initial_state=np.zeros((1, 2, 4, 4))),
                             do, np.zeros((1, 2, 4, 4)))
    for name in ("q", "g"):
        assert t[name].grad.dtype == torch.float32
        assert lt.rel_rms(expected[name], t[name].grad.numpy()) <= _limit(name)
    assert t["k"].grad is None and t["v"].grad is None


def test_bf16_tensors_get_bf16_gradients():
    torch = _torch()
    inputs, do, _ = _inputs("gla", 1, 8, 1, 4, 4, 1, seed=13)
    q = torch.from_numpy(inputs["q"]).bfloat16().requires_grad_()
    k, v = (torch.from_numpy(inputs[n]).bfloat16() for n in ("k", "v"))
    g = torch.from_numpy(inputs["g"]).requires_grad_()
    o, _ = la.gla(q, k, v, g, chunk_size=4)
    assert o.dtype == torch.bfloat16
    o.float().square().sum().backward()
    assert q.grad.dtype == torch.bfloat16 and g.grad.dtype == torch.float32
    assert torch.isfinite(q.grad.float()).all() and torch.isfinite(g.grad).all()


@pytest.mark.parametrize("variant,sequential",
                         [("gated_deltanet", True), ("gated_deltanet", False),
                          ("mamba2", False)],
                         ids=["gdn-tokens", "gdn-chunked", "mamba2-chunked"])
def test_segmented_backward_equals_one_pass(variant, sequential):
    """Two halves, the state carried forward and its gradient backward,
    give the gradients of one pass (the token-loop backward and the chunked
    one)."""
    torch = _torch()
    T, half = 20, 9
    inputs, do, d_final = _inputs(variant, 1, T, 2, 4, 6, 4, seed=14)
    inputs_of = [n for n in ("q", "k", "v", "g", "beta") if n in inputs]
    names = tuple(inputs_of) + ("initial_state",)

    def leaves():
        return {n: torch.from_numpy(inputs[n]).clone().requires_grad_() for n in names}

    def call(x, start, stop, state):
        return la.attention(
            variant, *(x[n][:, start:stop] for n in ("q", "k", "v", "g")),
            *([x["beta"][:, start:stop]] if "beta" in x else []),
            initial_state=state, output_final_state=True, qk_l2norm=variant != "mamba2",
            chunk_size=4, sequential=sequential)

    whole = leaves()
    o, s = call(whole, 0, T, whole["initial_state"])
    ((o * torch.from_numpy(do)).sum() + (s * torch.from_numpy(d_final)).sum()).backward()

    parts = leaves()
    o1, s1 = call(parts, 0, half, parts["initial_state"])
    o2, s2 = call(parts, half, T, s1)
    o_parts = torch.cat([o1, o2], dim=1)
    ((o_parts * torch.from_numpy(do)).sum() + (s2 * torch.from_numpy(d_final)).sum()).backward()
    for name in names:
        # The chunked gate gradient is a long sum (a reverse cumulative sum
        # over the sequence), summed in a different order by the two halves.
        limit = 1e-5 if name in ("g", "beta") else 1e-6
        err = lt.rel_rms(whole[name].grad.numpy(), parts[name].grad.numpy())
        assert err <= limit, f"d{name}: rel_rms {err:.3e}"


def _torch_gated_delta_rule(q, k, v, g, beta, scale):
    """A pure-torch token loop of Gated DeltaNet with L2-normalised q and k
    (differentiated by torch's own autograd)."""
    import torch
    q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + reference.L2NORM_EPS)
    k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + reference.L2NORM_EPS)
    B, T, H, K = q.shape
    V = v.shape[-1]
    S = q.new_zeros(B, H, K, V)
    outputs = []
    for t in range(T):
        kt, vt, bt = k[:, t], v[:, t], beta[:, t, :, None, None]
        S = torch.exp(g[:, t])[..., None, None] * S
        S = S - bt * kt[..., :, None] * (kt[..., None, :] @ S)
        S = S + bt * kt[..., :, None] * vt[..., None, :]
        outputs.append((S.transpose(-1, -2) @ (scale * q[:, t])[..., None])[..., 0])
    return torch.stack(outputs, dim=1)


def test_residual_block_trains_its_projections():
    """``x + W_o(la(W_q x, W_k x, W_v x))``: every projection gets the
    gradient of the same block written in pure torch (float64)."""
    torch = _torch()
    gen = torch.Generator().manual_seed(1)
    B, T, D, H, K = 2, 10, 12, 2, 4
    x = torch.randn(B, T, D, generator=gen)
    weights = {n: (0.3 * torch.randn(D, H * K, generator=gen)) for n in ("q", "k", "v")}
    weights["o"] = 0.3 * torch.randn(H * K, D, generator=gen)
    weights["g"] = 0.3 * torch.randn(D, H, generator=gen)
    weights["b"] = 0.3 * torch.randn(D, H, generator=gen)

    def block(w, attention):
        q, k, v = ((x.to(w["q"].dtype) @ w[n]).view(B, T, H, K) for n in ("q", "k", "v"))
        g = torch.nn.functional.logsigmoid(x.to(w["g"].dtype) @ w["g"])
        beta = torch.sigmoid(x.to(w["b"].dtype) @ w["b"])
        o = attention(q, k, v, g, beta)
        return x.to(w["o"].dtype) + o.reshape(B, T, H * K) @ w["o"]

    ours = {n: w.clone().requires_grad_() for n, w in weights.items()}
    y = block(ours, lambda q, k, v, g, beta: la.gated_delta_rule(
        q, k, v, g, beta, use_qk_l2norm_in_kernel=True, chunk_size=4)[0])
    y.square().sum().backward()

    theirs = {n: w.double().clone().requires_grad_() for n, w in weights.items()}
    y_ref = block(theirs, lambda q, k, v, g, beta: _torch_gated_delta_rule(
        q, k, v, g, beta, K ** -0.5))
    y_ref.square().sum().backward()
    assert lt.rel_rms(y_ref.detach().numpy(), y.detach().numpy()) <= 1e-5
    for name in weights:
        assert ours[name].grad is not None, f"W_{name} got no gradient"
        err = lt.rel_rms(theirs[name].grad.numpy(), ours[name].grad.numpy())
        assert err <= 1e-4, f"dW_{name}: rel_rms {err:.3e}"


def test_autograd_errors_instead_of_silent_detach():
    torch = _torch()
    inputs, _, _ = _inputs("linear", 1, 4, 1, 4, 3, 1, seed=15)
    q = torch.from_numpy(inputs["q"]).requires_grad_()
    k, v = torch.from_numpy(inputs["k"]), torch.from_numpy(inputs["v"])
    log_decay = torch.tensor([-0.1], requires_grad=True)
    with pytest.raises(la.LaError, match="log_decay is compiled into the kernel"):
        la.retention(q, k, v, log_decay=log_decay)
    # Without grad mode the same call runs (no graph is recorded).
    with torch.no_grad():
        o, _ = la.retention(q, k, v, log_decay=log_decay)
    assert not o.requires_grad


@pytest.mark.parametrize("variant", ["gla", "gated_deltanet"])
def test_backward_on_two_threads_equals_one(variant):
    """The backward's kernel with OpenMP threads (its large ops distributed,
    the per-token rows of its reverse cumulative sums and time flips kept
    sequential by la-tile) gives the one-thread kernel's gradients exactly."""
    inputs = lt.make_inputs(variant, 2, 150, 2, 16, 8, seed=3)
    kwargs = {name: inputs[name] for name in ("g", "beta") if name in inputs}
    do = np.random.default_rng(1).standard_normal((2, 150, 2, 8)).astype(np.float32)
    grads = [la.attention_backward(variant, inputs["q"], inputs["k"], inputs["v"], do=do,
                                   chunk_size=16, num_threads=threads, **kwargs)
             for threads in (1, 2)]
    for name in grads[0]:
        np.testing.assert_array_equal(grads[0][name], grads[1][name], err_msg=name)
