"""Gates, beta and erase given per value head (HV > H), as
flash-linear-attention's Gated DeltaNet and KDA take them: la.attention takes
them directly and la-lower-to-recurrence repeats the key side. Forward
against the fp64 reference (chunked, token by token, packed sequences),
gradients against central differences of the fp64 reference, and the
reference itself against the per-key-head form it generalises."""

import numpy as np
import pytest

import la
from la import reference
from la.testing import rel_rms

CHUNK = 8
B, T, H, HV, K, V = 2, 29, 2, 4, 8, 6


def _inputs(seed, B=B, T=T, H=H, HV=HV, K=K, V=V):
    rng = np.random.default_rng(seed)
    f32 = np.float32
    return dict(
        q=rng.standard_normal((B, T, H, K)).astype(f32),
        k=rng.standard_normal((B, T, H, K)).astype(f32),
        v=rng.standard_normal((B, T, HV, V)).astype(f32),
        g_scalar=(-0.4 * rng.random((B, T, HV))).astype(f32),
        g_channel=(-0.4 * rng.random((B, T, HV, K))).astype(f32),
        beta=rng.uniform(0.1, 0.9, (B, T, HV)).astype(f32),
        beta_key=rng.uniform(0.1, 0.9, (B, T, H)).astype(f32),
        erase=rng.uniform(0.1, 0.9, (B, T, HV, K)).astype(f32),
        write=rng.uniform(0.1, 0.9, (B, T, HV, V)).astype(f32),
        s0=rng.standard_normal((B, HV, K, V)).astype(f32),
    )


#: name -> (la call, fp64 reference call), on _inputs() and keyword options.
CASES = {
    "mamba2": (
        lambda x, **kw: la.simple_gla(x["q"], x["k"] / 3, x["v"], x["g_scalar"], **kw),
        lambda x, **kw: reference.recurrence(x["q"], x["k"] / 3, x["v"], update="additive",
                                             gate="scalar", g=x["g_scalar"], **kw)),
    "gla": (
        lambda x, **kw: la.gla(x["q"], x["k"] / 3, x["v"], x["g_channel"], **kw),
        lambda x, **kw: reference.recurrence(x["q"], x["k"] / 3, x["v"], update="additive",
                                             gate="channel", g=x["g_channel"], **kw)),
    "gated_deltanet": (
        lambda x, **kw: la.gated_delta_rule(x["q"], x["k"], x["v"], x["g_scalar"], x["beta"],
                                            use_qk_l2norm_in_kernel=True, **kw),
        lambda x, **kw: reference.recurrence(x["q"], x["k"], x["v"], update="delta",
                                             gate="scalar", g=x["g_scalar"], beta=x["beta"],
                                             qk_l2norm=True, **kw)),
    # a per-value-head gate with a per-key-head beta
    "gated_deltanet_key_beta": (
        lambda x, **kw: la.gated_delta_rule(x["q"], x["k"], x["v"], x["g_scalar"],
                                            x["beta_key"], use_qk_l2norm_in_kernel=True, **kw),
        lambda x, **kw: reference.recurrence(x["q"], x["k"], x["v"], update="delta",
                                             gate="scalar", g=x["g_scalar"], beta=x["beta_key"],
                                             qk_l2norm=True, **kw)),
    "kda": (
        lambda x, **kw: la.kda(x["q"], x["k"], x["v"], x["g_channel"], x["beta"],
                               use_qk_l2norm_in_kernel=True, **kw),
        lambda x, **kw: reference.recurrence(x["q"], x["k"], x["v"], update="delta",
                                             gate="channel", g=x["g_channel"], beta=x["beta"],
                                             qk_l2norm=True, **kw)),
    "gated_deltanet2": (
        lambda x, **kw: la.gated_delta_rule2(x["q"], x["k"], x["v"], x["g_channel"], x["erase"],
                                             x["write"], use_qk_l2norm_in_kernel=True, **kw),
        lambda x, **kw: reference.gated_delta_rule2(x["q"], x["k"], x["v"], x["g_channel"],
                                                    x["erase"], x["write"], qk_l2norm=True,
                                                    **kw)),
}


@pytest.mark.parametrize("sequential", [False, True], ids=["chunked", "tokens"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_forward_matches_the_reference(case, sequential):
    x = _inputs(seed=1)
    run, ref = CASES[case]
    o, s = run(x, initial_state=x["s0"], output_final_state=True, chunk_size=CHUNK,
               sequential=sequential)
    o_ref, s_ref = ref(x, initial_state=x["s0"])
    assert rel_rms(o_ref, o) <= 1e-5
    assert rel_rms(s_ref, s) <= 1e-5


@pytest.mark.parametrize("case", ["gated_deltanet", "kda"])
def test_packed_sequences(case):
    x = _inputs(seed=2, B=1)
    cu = np.array([0, 5, 17, T], np.int32)
    s0 = np.random.default_rng(3).standard_normal((3, HV, K, V)).astype(np.float32)
    run, ref = CASES[case]
    o, s = run(x, initial_state=s0, cu_seqlens=cu, output_final_state=True,
               chunk_size=CHUNK)
    o_ref, s_ref = ref(x, initial_state=s0, cu_seqlens=cu)
    assert rel_rms(o_ref, o) <= 1e-5
    assert rel_rms(s_ref, s) <= 1e-5


def test_reference_generalises_the_key_head_form():
    """Per-value-head gates that are equal within each key head's group give
    the per-key-head recurrence (the fp64 reference, both forms)."""
    x = _inputs(seed=4)
    group = HV // H
    g_key = x["g_channel"][:, :, ::group]
    beta_key = x["beta"][:, :, ::group]
    g_value = np.repeat(g_key, group, axis=2)
    beta_value = np.repeat(beta_key, group, axis=2)
    per_key = reference.kda(x["q"], x["k"], x["v"], g_key, beta_key, qk_l2norm=True)
    per_value = reference.kda(x["q"], x["k"], x["v"], g_value, beta_value, qk_l2norm=True)
    np.testing.assert_allclose(per_value[0], per_key[0], rtol=1e-12, atol=1e-12)
    # and la agrees with itself across the two forms
    o_key, _ = la.kda(x["q"], x["k"], x["v"], g_key, beta_key,
                      use_qk_l2norm_in_kernel=True, chunk_size=CHUNK)
    o_value, _ = la.kda(x["q"], x["k"], x["v"], g_value, beta_value,
                        use_qk_l2norm_in_kernel=True, chunk_size=CHUNK)
    assert rel_rms(o_key, o_value) <= 1e-6


def _central_differences(loss, x, eps=1e-6):
    grad = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[index] = eps
        grad[index] = (loss(x + e) - loss(x - e)) / (2 * eps)
    return grad


@pytest.mark.parametrize("sequential", [False, True], ids=["chunked", "tokens"])
@pytest.mark.parametrize("variant, gate, delta", [
    ("mamba2", "scalar", False), ("gla", "channel", False),
    ("gated_deltanet", "scalar", True), ("kda", "channel", True)])
def test_gradients_against_finite_differences(variant, gate, delta, sequential):
    """la.attention_backward against central differences of the fp64
    reference for every input, gates and beta per value head (f32 kernel:
    1e-5 for q, k, v; 1e-4 for gates and beta)."""
    rng = np.random.default_rng(5)
    b, t, h, hv, k_dim, v_dim = 1, 9, 1, 2, 4, 3
    x = dict(q=rng.standard_normal((b, t, h, k_dim)), k=rng.standard_normal((b, t, h, k_dim)),
             v=rng.standard_normal((b, t, hv, v_dim)),
             g=-0.3 * rng.random((b, t, hv) if gate == "scalar" else (b, t, hv, k_dim)))
    if delta:
        x["beta"] = rng.uniform(0.1, 0.9, (b, t, hv))
    do = rng.standard_normal((b, t, hv, v_dim))

    def loss(**changed):
        a = dict(x, **changed)
        o, _ = reference.recurrence(a["q"], a["k"], a["v"], update="delta" if delta else
                                    "additive", gate=gate, g=a["g"], beta=a.get("beta"),
                                    qk_l2norm=delta)
        return float((o * do).sum())

    f32 = {n: a.astype(np.float32) for n, a in x.items()}
    grads = la.attention_backward(variant, f32["q"], f32["k"], f32["v"], f32["g"],
                                  f32.get("beta"), do=do.astype(np.float32), qk_l2norm=delta,
                                  chunk_size=4, sequential=sequential)
    assert set(grads) == set(x)
    for name, value in x.items():
        expected = _central_differences(lambda y: loss(**{name: y}), value)
        assert grads[name].shape == value.shape
        limit = 1e-5 if name in ("q", "k", "v") else 1e-4
        assert rel_rms(expected, grads[name]) <= limit, name


def test_torch_gradients_have_the_value_head_shapes():
    torch = pytest.importorskip("torch")
    x = _inputs(seed=6)
    t = {n: torch.from_numpy(x[n]).requires_grad_() for n in ("q", "k", "v", "g_scalar",
                                                                "beta")}
    o, _ = la.gated_delta_rule(t["q"], t["k"], t["v"], t["g_scalar"], t["beta"],
                               use_qk_l2norm_in_kernel=True, chunk_size=CHUNK)
    o.square().sum().backward()
    assert t["g_scalar"].grad.shape == (B, T, HV) and t["beta"].grad.shape == (B, T, HV)
    assert t["q"].grad.shape == (B, T, H, K)


def test_bad_head_counts():
    x = _inputs(seed=7)
    g_wrong = x["g_scalar"][:, :, :3]
    with pytest.raises(ValueError, match=r"g must have shape \[B, T, H\] or \[B, T, HV\]"):
        la.simple_gla(x["q"], x["k"], x["v"], g_wrong)
    with pytest.raises(ValueError, match=r"beta must have shape \[B, T, H\] or \[B, T, HV\]"):
        la.delta_rule(x["q"], x["k"], x["v"], x["beta"][:, :, :3])
    with pytest.raises(ValueError, match="erase must have shape"):
        la.gated_delta_rule2(x["q"], x["k"], x["v"], x["g_channel"], x["erase"][:, :, :3],
                             x["write"])
    # the reference rejects them too
    with pytest.raises(ValueError, match="g must have shape"):
        reference.recurrence(x["q"], x["k"], x["v"], gate="scalar", g=g_wrong)


@pytest.mark.parametrize("sequential", [False, True], ids=["chunked", "tokens"])
@pytest.mark.parametrize("variant", ["gated_deltanet2", "scalar_gated_deltanet2", "deltanet2"])
def test_erase_read_key_gradients(variant, sequential):
    """Gated DeltaNet-2 with the erase gate on the read key
    (``erase_read_key``, fla's chunk_gdn2): forward against the fp64
    reference, every gradient against its central differences."""
    rng = np.random.default_rng(8)
    b, t, h, hv, k_dim, v_dim = 1, 7, 1, 2, 4, 3
    gate = {"gated_deltanet2": (b, t, h, k_dim), "scalar_gated_deltanet2": (b, t, hv),
            "deltanet2": None}[variant]
    x = dict(q=rng.standard_normal((b, t, h, k_dim)), k=rng.standard_normal((b, t, h, k_dim)),
             v=rng.standard_normal((b, t, hv, v_dim)),
             erase=rng.uniform(0.1, 0.9, (b, t, hv, k_dim)),
             write=rng.uniform(0.1, 0.9, (b, t, hv, v_dim)))
    if gate is not None:
        x["g"] = -0.3 * rng.random(gate)
    do = rng.standard_normal((b, t, hv, v_dim))

    def channel_gate(g):
        if g is None:
            return None
        return np.repeat(g[..., None], k_dim, -1) if g.ndim == 3 else g

    def loss(**changed):
        a = dict(x, **changed)
        o, _ = reference.gated_delta_rule2(a["q"], a["k"], a["v"], channel_gate(a.get("g")),
                                           a["erase"], a["write"], qk_l2norm=True,
                                           erase_read_key=True)
        return float((o * do).sum())

    f32 = {n: a.astype(np.float32) for n, a in x.items()}
    o, _ = la.attention(variant, f32["q"], f32["k"], f32["v"], f32.get("g"), erase=f32["erase"],
                        write=f32["write"], qk_l2norm=True, erase_read_key=True, chunk_size=4,
                        sequential=sequential)
    o_ref, _ = reference.gated_delta_rule2(x["q"], x["k"], x["v"], channel_gate(x.get("g")),
                                           x["erase"], x["write"], qk_l2norm=True,
                                           erase_read_key=True)
    assert rel_rms(o_ref, o) <= 1e-5
    grads = la.attention_backward(variant, f32["q"], f32["k"], f32["v"], f32.get("g"),
                                  erase=f32["erase"], write=f32["write"],
                                  do=do.astype(np.float32), qk_l2norm=True,
                                  erase_read_key=True, chunk_size=4, sequential=sequential)
    for name, value in x.items():
        expected = _central_differences(lambda y: loss(**{name: y}), value)
        limit = 1e-5 if name in ("q", "k", "v") else 1e-4
        assert rel_rms(expected, grads[name]) <= limit, name


def test_erase_read_key_needs_the_erase_write_rule():
    x = _inputs(seed=9)
    with pytest.raises(ValueError, match="erase_read_key needs the erase_write rule"):
        la.attention("kda", x["q"], x["k"], x["v"], x["g_channel"], x["beta"],
                     erase_read_key=True)


def test_dplr_rule_with_value_head_gates():
    """RWKV-7's gate per value head (HV = 2H): a and b stay per key head and
    are repeated with q and k; against the reference on explicitly repeated
    key-side operands."""
    rng = np.random.default_rng(41)
    B, T, H, HV, K, V = 1, 21, 2, 4, 8, 6
    q, k = (rng.standard_normal((B, T, H, K)).astype(np.float32) for _ in range(2))
    v = rng.standard_normal((B, T, HV, V)).astype(np.float32)
    kappa = rng.standard_normal((B, T, H, K))
    a = (kappa / np.linalg.norm(kappa, axis=-1, keepdims=True)).astype(np.float32)
    b = (a * rng.uniform(0, 1, (B, T, H, K))).astype(np.float32)
    g = (-np.log1p(np.exp(-rng.standard_normal((B, T, HV, K)))) / 4).astype(np.float32)
    s0 = (0.1 * rng.standard_normal((B, HV, K, V))).astype(np.float32)
    o, s = la.rwkv7(q, k, v, g, a, b, initial_state=s0, output_final_state=True,
                    chunk_size=8)
    repeat = lambda x: np.repeat(x, HV // H, axis=2)  # noqa: E731
    o_ref, s_ref = reference.dplr(repeat(q), repeat(k), v, repeat(a), repeat(b), g, scale=1.0,
                                  initial_state=s0)
    assert rel_rms(o_ref, o) <= 1e-5 and rel_rms(s_ref, s) <= 1e-5
