"""Tests of the fp64 reference recurrences (la.reference) and la.testing.

Hand-computed cases pin the conventions (scale, output includes token t,
order of decay and delta projection, normaliser); the property tests tie the
variants to each other and check the bookkeeping (cu_seqlens, segments,
grouped value heads).
"""

import time

import numpy as np
import pytest

from la import reference as ref
from la import testing as lt

TIGHT = dict(rtol=1e-12, atol=1e-12)


def arr(x):
    return np.asarray(x, dtype=np.float64)


def rand(rng, *shape):
    return rng.standard_normal(shape)


def gates_for(kind, rng, B, T, H, K):
    """kwargs for recurrence() for a gate kind, random strictly negative gates."""
    if kind == "none":
        return {}
    if kind == "fixed":
        return {"log_decay": -rng.uniform(0.01, 1.0, size=H)}
    if kind == "scalar":
        return {"g": -rng.uniform(0.01, 1.0, size=(B, T, H))}
    return {"g": -rng.uniform(0.01, 1.0, size=(B, T, H, K))}


def random_problem(update, gate, B=2, T=7, H=2, K=4, V=3, HV=None, seed=0,
                   with_state=True, N=None):
    rng = np.random.default_rng(seed)
    HV = H if HV is None else HV
    N = B if N is None else N
    kw = dict(update=update, gate=gate, **gates_for(gate, rng, B, T, H, K))
    k = rand(rng, B, T, H, K)
    if update == "delta":
        k = k / np.linalg.norm(k, axis=-1, keepdims=True)
        kw["beta"] = rng.uniform(0.05, 0.95, size=(B, T, H))
    if with_state:
        kw["initial_state"] = rand(rng, N, HV, K, V)
    return rand(rng, B, T, H, K), k, rand(rng, B, T, HV, V), kw


ALL_KINDS = [(u, g) for u in ref.UPDATES for g in ref.GATES]


# --------------------------------------------------------------------------
# T = 1, by hand formulas
# --------------------------------------------------------------------------

@pytest.mark.parametrize("update,gate", ALL_KINDS)
def test_t1_zero_state_hand_formula(update, gate):
    # With S_0 = 0: additive S_1 = k v^T, o = scale (q.k) v;
    # delta S_1 = beta k v^T, o = beta scale (q.k) v. The gate plays no role.
    q, k, v, kw = random_problem(update, gate, B=1, T=1, H=1, K=4, V=3, with_state=False)
    o, s = ref.recurrence(q, k, v, **kw)
    scale = 4 ** -0.5  # = 0.5, default K ** -0.5
    w = kw["beta"][0, 0, 0] if update == "delta" else 1.0
    q1, k1, v1 = q[0, 0, 0], k[0, 0, 0], v[0, 0, 0]
    np.testing.assert_allclose(o[0, 0, 0], w * scale * (q1 @ k1) * v1, **TIGHT)
    np.testing.assert_allclose(s[0, 0], w * np.outer(k1, v1), **TIGHT)


@pytest.mark.parametrize("update,gate", ALL_KINDS)
def test_t1_with_state_hand_formula(update, gate):
    q, k, v, kw = random_problem(update, gate, B=1, T=1, H=1, K=4, V=3)
    o, s = ref.recurrence(q, k, v, **kw)
    q1, k1, v1 = q[0, 0, 0], k[0, 0, 0], v[0, 0, 0]
    S0 = kw["initial_state"][0, 0]
    if gate == "none":
        a = np.ones(4)
    elif gate == "fixed":
        a = np.full(4, np.exp(kw["log_decay"][0]))
    elif gate == "scalar":
        a = np.full(4, np.exp(kw["g"][0, 0, 0]))
    else:
        a = np.exp(kw["g"][0, 0, 0])
    DS = a[:, None] * S0
    if update == "additive":
        S1 = DS + np.outer(k1, v1)
    else:
        b = kw["beta"][0, 0, 0]
        S1 = DS + b * np.outer(k1, v1 - k1 @ DS)
    np.testing.assert_allclose(s[0, 0], S1, **TIGHT)
    np.testing.assert_allclose(o[0, 0, 0], S1.T @ (0.5 * q1), **TIGHT)


def test_default_scale_is_k_to_minus_half():
    rng = np.random.default_rng(1)
    q, k, v = rand(rng, 1, 3, 1, 9), rand(rng, 1, 3, 1, 9), rand(rng, 1, 3, 1, 2)
    o_default, _ = ref.recurrence(q, k, v)
    o_explicit, _ = ref.recurrence(q, k, v, scale=1.0 / 3.0)
    o_one, _ = ref.recurrence(q, k, v, scale=1.0)
    np.testing.assert_allclose(o_default, o_explicit, **TIGHT)
    np.testing.assert_allclose(o_default, o_one / 3.0, **TIGHT)


# --------------------------------------------------------------------------
# tiny cases with literal expected numbers (worked out by hand)
# --------------------------------------------------------------------------

# Shared tiny problem: B=1, T=3, H=1, K=2, V=2, scale=1, S0 = [[2,0],[0,2]]
# (rows = K index, columns = V index).
TINY_Q = arr([[1, 0], [1, 1], [0, 1]])
TINY_V = arr([[1, 2], [3, 4], [1, -1]])
TINY_S0 = arr([[2, 0], [0, 2]])
TINY_DECAY = arr([0.5, 1.0, 0.25])


def tiny(x):
    """[T, D] -> [1, T, 1, D]"""
    return arr(x)[None, :, None, :]


def test_tiny_scalar_gate_additive_by_hand():
    # k1=[1,0] k2=[0,1] k3=[1,1]; decays 0.5, 1, 0.25.
    # t1: S1 = 0.5*S0 + k1 v1^T = [[1,0],[0,1]] + [[1,2],[0,0]] = [[2,2],[0,1]]
    #     o1 = S1^T [1,0] = row0 = [2,2]
    # t2: S2 = S1 + k2 v2^T = [[2,2],[0,1]] + [[0,0],[3,4]] = [[2,2],[3,5]]
    #     o2 = S2^T [1,1] = row0+row1 = [5,7]
    # t3: S3 = 0.25*S2 + k3 v3^T = [[0.5,0.5],[0.75,1.25]] + [[1,-1],[1,-1]]
    #        = [[1.5,-0.5],[1.75,0.25]]
    #     o3 = S3^T [0,1] = row1 = [1.75,0.25]
    k = arr([[1, 0], [0, 1], [1, 1]])
    g = np.log(TINY_DECAY)[None, :, None]
    o, s = ref.recurrence(tiny(TINY_Q), tiny(k), tiny(TINY_V), gate="scalar", g=g,
                          scale=1.0, initial_state=TINY_S0[None, None])
    np.testing.assert_allclose(o[0, :, 0], [[2, 2], [5, 7], [1.75, 0.25]], **TIGHT)
    np.testing.assert_allclose(s[0, 0], [[1.5, -0.5], [1.75, 0.25]], **TIGHT)
    # the same numbers through the named wrapper
    o2, s2 = ref.simple_gla(tiny(TINY_Q), tiny(k), tiny(TINY_V), g, scale=1.0,
                            initial_state=TINY_S0[None, None])
    np.testing.assert_array_equal(o2, o)
    np.testing.assert_array_equal(s2, s)


def test_tiny_gated_delta_by_hand():
    # k1=[1,0] k2=[0,1] k3=[0.6,0.8] (unit); beta = 0.5, 1, 0.5; decays 0.5, 1, 0.25.
    # S_t = D S + beta k (v - k^T D S)^T
    # t1: DS = [[1,0],[0,1]]; k1^T DS = [1,0]; v1 - . = [0,2]; *0.5 = [0,1] -> row0
    #     S1 = [[1,1],[0,1]]; o1 = row0 = [1,1]
    # t2: DS = S1; k2^T DS = row1 = [0,1]; v2 - . = [3,3]; *1 -> row1
    #     S2 = [[1,1],[3,4]]; o2 = row0+row1 = [4,5]
    # t3: DS = 0.25*S2 = [[0.25,0.25],[0.75,1]]
    #     k3^T DS = 0.6*[0.25,0.25] + 0.8*[0.75,1] = [0.15,0.15]+[0.6,0.8] = [0.75,0.95]
    #     v3 - . = [1-0.75, -1-0.95] = [0.25,-1.95]; *0.5 = [0.125,-0.975]
    #     row0 += 0.6*[0.125,-0.975] = [0.075,-0.585] -> [0.325,-0.335]
    #     row1 += 0.8*[0.125,-0.975] = [0.1,-0.78]    -> [0.85,0.22]
    #     S3 = [[0.325,-0.335],[0.85,0.22]]; o3 = row1 = [0.85,0.22]
    # check: k3^T S3 = (1-beta) k3^T DS + beta v3 = 0.5*[0.75,0.95]+0.5*[1,-1]
    #        = [0.875,-0.025];  0.6*0.325+0.8*0.85 = 0.195+0.68 = 0.875,
    #        0.6*-0.335+0.8*0.22 = -0.201+0.176 = -0.025. ok.
    k = arr([[1, 0], [0, 1], [0.6, 0.8]])
    g = np.log(TINY_DECAY)[None, :, None]
    beta = arr([0.5, 1.0, 0.5])[None, :, None]
    o, s = ref.gated_delta_rule(tiny(TINY_Q), tiny(k), tiny(TINY_V), g, beta, scale=1.0,
                                initial_state=TINY_S0[None, None])
    np.testing.assert_allclose(o[0, :, 0], [[1, 1], [4, 5], [0.85, 0.22]], **TIGHT)
    np.testing.assert_allclose(s[0, 0], [[0.325, -0.335], [0.85, 0.22]], **TIGHT)


def test_tiny_channel_gate_additive_by_hand():
    # K=2, V=1, scale=1, S0 = [[1],[1]].
    # t1: decay [0.5,1], k1=[1,1], v1=2: S1 = [[0.5+2],[1+2]] = [[2.5],[3]]
    #     q1=[1,0]: o1 = 2.5
    # t2: decay [1,0.5], k2=[0,2], v2=1: S2 = [[2.5],[1.5+2]] = [[2.5],[3.5]]
    #     q2=[1,1]: o2 = 6
    q = tiny([[1, 0], [1, 1]])
    k = tiny([[1, 1], [0, 2]])
    v = tiny([[2], [1]])
    g = np.log(arr([[0.5, 1.0], [1.0, 0.5]]))[None, :, None, :]
    o, s = ref.gla(q, k, v, g, scale=1.0, initial_state=arr([[1], [1]])[None, None])
    np.testing.assert_allclose(o[0, :, 0, 0], [2.5, 6.0], **TIGHT)
    np.testing.assert_allclose(s[0, 0], [[2.5], [3.5]], **TIGHT)


def test_tiny_kda_decays_before_the_delta_projection():
    # K=2, V=1, scale=1, S0 = [[1],[1]], decay [0.5,1], k=[1,0], beta=1, v=3, q=[1,1].
    # Correct (decay first): DS = [[0.5],[1]]; k^T DS = 0.5;
    #   S1 = DS + k (3 - 0.5) = [[3],[1]]; o = 3 + 1 = 4.
    # (Projecting first and decaying after would give [[1.5],[1]], o = 2.5.)
    q, k, v = tiny([[1, 1]]), tiny([[1, 0]]), tiny([[3]])
    g = np.log(arr([[0.5, 1.0]]))[None, :, None, :]
    beta = arr([[[1.0]]])
    o, s = ref.kda(q, k, v, g, beta, scale=1.0, initial_state=arr([[1], [1]])[None, None])
    np.testing.assert_allclose(o[0, 0, 0], [4.0], **TIGHT)
    np.testing.assert_allclose(s[0, 0], [[3.0], [1.0]], **TIGHT)


def test_tiny_normalizer_by_hand():
    # K=2, V=1, scale=1, no gate, eps=0.
    # t1: k1=[1,0], v1=2: S1=[[2],[0]], z1=[1,0]; q1=[1,1]: o1 = 2/1 = 2
    # t2: k2=[1,1], v2=4: S2=[[6],[4]], z2=[2,1]; q2=[1,0]: o2 = 6/2 = 3
    q, k, v = tiny([[1, 1], [1, 0]]), tiny([[1, 0], [1, 1]]), tiny([[2], [4]])
    o, s = ref.linear_attention(q, k, v, scale=1.0, normalizer=True, eps=0.0)
    np.testing.assert_allclose(o[0, :, 0, 0], [2.0, 3.0], **TIGHT)
    np.testing.assert_allclose(s[0, 0], [[6.0], [4.0]], **TIGHT)  # state unaffected
    # default eps = 1e-6 enters the denominator
    o, _ = ref.linear_attention(q, k, v, scale=1.0, normalizer=True)
    np.testing.assert_allclose(o[0, :, 0, 0], [2 / (1 + 1e-6), 6 / (2 + 1e-6)], **TIGHT)
    # scalar gate: decay 1 at t1, 0.5 at t2 (z decays like S):
    # S2 = 0.5*[[2],[0]] + [[4],[4]] = [[5],[4]], z2 = 0.5*[1,0] + [1,1] = [1.5,1]
    # o2 = 5/1.5 = 10/3
    g = np.log(arr([1.0, 0.5]))[None, :, None]
    o, _ = ref.simple_gla(q, k, v, g, scale=1.0, normalizer=True, eps=0.0)
    np.testing.assert_allclose(o[0, :, 0, 0], [2.0, 10.0 / 3.0], **TIGHT)
    # z starts at 0 even with an initial state: S0=[[1],[1]]
    # S1 = [[3],[1]], z1 = [1,0], q1=[1,1]: o1 = 4/1 = 4
    o, _ = ref.linear_attention(q, k, v, scale=1.0, normalizer=True, eps=0.0,
                                initial_state=arr([[1], [1]])[None, None])
    np.testing.assert_allclose(o[0, 0, 0, 0], 4.0, **TIGHT)
    # the scale is inside both numerator and denominator (q' = scale q):
    o, _ = ref.linear_attention(q, k, v, scale=0.5, normalizer=True, eps=0.0)
    np.testing.assert_allclose(o[0, :, 0, 0], [2.0, 3.0], **TIGHT)
    o, _ = ref.linear_attention(q, k, v, scale=0.5, normalizer=True, eps=0.5)
    # t1: num = 0.5*2 = 1, den = 0.5*1 + 0.5 = 1 -> 1
    np.testing.assert_allclose(o[0, 0, 0, 0], 1.0, **TIGHT)


def test_qk_l2norm_by_hand():
    # q = [3,4], k = [0,2]: normalised q = [3,4]/sqrt(25+1e-6), k = [0,2]/sqrt(4+1e-6)
    # o = scale * (qn . kn) v with scale = 2**-0.5 applied after normalising
    q, k, v = tiny([[3, 4]]), tiny([[0, 2]]), tiny([[1, -2]])
    o, s = ref.linear_attention(q, k, v, qk_l2norm=True)
    qk = (4 * 2) / np.sqrt(25 + 1e-6) / np.sqrt(4 + 1e-6)
    np.testing.assert_allclose(o[0, 0, 0], 2 ** -0.5 * qk * arr([1, -2]), **TIGHT)
    np.testing.assert_allclose(s[0, 0], np.outer(arr([0, 2]) / np.sqrt(4 + 1e-6), [1, -2]),
                               **TIGHT)


# --------------------------------------------------------------------------
# independent formulations on random data
# --------------------------------------------------------------------------

@pytest.mark.parametrize("gate", ref.GATES)
def test_additive_equals_parallel_attention_form(gate):
    # o_t = sum_{s<=t} (q'_t * exp(G_t - G_s)) . k_s v_s + (q'_t * exp(G_t))^T S0,
    # G_t = cumulative sum of the per-channel log gates up to and including t.
    B, T, H, K, V = 2, 9, 2, 3, 4
    q, k, v, kw = random_problem("additive", gate, B=B, T=T, H=H, K=K, V=V, seed=3)
    o, s = ref.recurrence(q, k, v, scale=0.7, **kw)
    if gate == "none":
        lg = np.zeros((B, T, H, K))
    elif gate == "fixed":
        lg = np.broadcast_to(kw["log_decay"][None, None, :, None], (B, T, H, K))
    elif gate == "scalar":
        lg = np.broadcast_to(kw["g"][..., None], (B, T, H, K))
    else:
        lg = kw["g"]
    G = np.cumsum(lg, axis=1)
    S0 = kw["initial_state"]
    for b in range(B):
        for h in range(H):
            for t in range(T):
                qt = 0.7 * q[b, t, h]
                expect = (qt * np.exp(G[b, t, h])) @ S0[b, h]
                for j in range(t + 1):
                    w = np.sum(qt * np.exp(G[b, t, h] - G[b, j, h]) * k[b, j, h])
                    expect = expect + w * v[b, j, h]
                np.testing.assert_allclose(o[b, t, h], expect, **TIGHT)
            S_T = np.exp(G[b, -1, h])[:, None] * S0[b, h]
            for j in range(T):
                S_T = S_T + np.outer(np.exp(G[b, -1, h] - G[b, j, h]) * k[b, j, h], v[b, j, h])
            np.testing.assert_allclose(s[b, h], S_T, **TIGHT)


@pytest.mark.parametrize("gate", ref.GATES)
def test_delta_equals_explicit_transition_matrices(gate):
    # S_t = A_t S_{t-1} + beta k v^T with A_t = (I - beta k k^T) Diag(exp g_t)
    # written out as a K x K matrix; S_t for all t and o_t = S_t^T (scale q_t).
    B, T, H, K, V = 1, 6, 2, 3, 2
    q, k, v, kw = random_problem("delta", gate, B=B, T=T, H=H, K=K, V=V, seed=4)
    o, s = ref.recurrence(q, k, v, **kw)
    for h in range(H):
        S = kw["initial_state"][0, h]
        for t in range(T):
            if gate == "none":
                a = np.ones(K)
            elif gate == "fixed":
                a = np.full(K, np.exp(kw["log_decay"][h]))
            elif gate == "scalar":
                a = np.full(K, np.exp(kw["g"][0, t, h]))
            else:
                a = np.exp(kw["g"][0, t, h])
            kt, bt = k[0, t, h], kw["beta"][0, t, h]
            A = (np.eye(K) - bt * np.outer(kt, kt)) @ np.diag(a)
            S = A @ S + bt * np.outer(kt, v[0, t, h])
            np.testing.assert_allclose(o[0, t, h], S.T @ (q[0, t, h] / np.sqrt(K)), **TIGHT)
        np.testing.assert_allclose(s[0, h], S, **TIGHT)


# --------------------------------------------------------------------------
# relations between variants
# --------------------------------------------------------------------------

@pytest.mark.parametrize("update", ref.UPDATES)
@pytest.mark.parametrize("gate", ["fixed", "scalar", "channel"])
def test_zero_gate_equals_no_gate(update, gate):
    q, k, v, kw = random_problem(update, "none", seed=5)
    o0, s0 = ref.recurrence(q, k, v, **kw)
    B, T, H, K = q.shape
    kw["gate"] = gate
    if gate == "fixed":
        kw["log_decay"] = np.zeros(H)
    elif gate == "scalar":
        kw["g"] = np.zeros((B, T, H))
    else:
        kw["g"] = np.zeros((B, T, H, K))
    o1, s1 = ref.recurrence(q, k, v, **kw)
    np.testing.assert_array_equal(o1, o0)
    np.testing.assert_array_equal(s1, s0)
    # and a non-zero gate really changes the result
    kw[("log_decay" if gate == "fixed" else "g")] -= 0.5
    o2, _ = ref.recurrence(q, k, v, **kw)
    assert lt.rel_rms(o0, o2) > 1e-3


def test_no_gate_equals_linear_attention_wrapper():
    q, k, v, kw = random_problem("additive", "none", seed=6)
    o0, s0 = ref.linear_attention(q, k, v, initial_state=kw["initial_state"])
    o1, s1 = ref.retention(q, k, v, np.zeros(q.shape[2]), initial_state=kw["initial_state"])
    np.testing.assert_array_equal(o1, o0)
    np.testing.assert_array_equal(s1, s0)


@pytest.mark.parametrize("gate", ref.GATES)
def test_beta_zero_leaves_state_unchanged_but_decayed(gate):
    q, k, v, kw = random_problem("delta", gate, seed=7)
    kw["beta"] = np.zeros_like(kw["beta"])
    S0 = kw["initial_state"]
    o, s = ref.recurrence(q, k, v, **kw)
    if gate == "none":
        # state never changes: final == initial, o_t = S0^T (scale q_t)
        np.testing.assert_array_equal(s, S0)
        expect = np.einsum("bhkv,bthk->bthv", S0, q) / 2.0  # K=4: scale 0.5
        np.testing.assert_allclose(o, expect, **TIGHT)
    else:
        # only the decay acts: S_T = exp(sum_t g_t) S0
        B, T, H, K = q.shape
        if gate == "fixed":
            G = np.broadcast_to(T * kw["log_decay"][None, :, None], (B, H, K))
        elif gate == "scalar":
            G = np.broadcast_to(kw["g"].sum(axis=1)[..., None], (B, H, K))
        else:
            G = kw["g"].sum(axis=1)
        np.testing.assert_allclose(s, np.exp(G)[..., None] * S0, **TIGHT)


def test_beta_one_writes_v_exactly_along_k():
    # beta = 1, unit k: k_t^T S_t = v_t after every step (the delta rule's defining property)
    q, k, v, kw = random_problem("delta", "channel", seed=8)
    kw["beta"] = np.ones_like(kw["beta"])
    B, T, H, K = q.shape
    for t_end in range(1, T + 1):
        _, s = ref.recurrence(q[:, :t_end], k[:, :t_end], v[:, :t_end],
                              update="delta", gate="channel", g=kw["g"][:, :t_end],
                              beta=kw["beta"][:, :t_end], initial_state=kw["initial_state"])
        kS = np.einsum("bhk,bhkv->bhv", k[:, t_end - 1], s)
        np.testing.assert_allclose(kS, v[:, t_end - 1], **TIGHT)


@pytest.mark.parametrize("update", ref.UPDATES)
def test_scalar_gate_equals_channel_gate_broadcast(update):
    # GDN == KDA with the scalar gate broadcast over K (and Mamba-2 == GLA likewise)
    q, k, v, kw = random_problem(update, "scalar", seed=9)
    o0, s0 = ref.recurrence(q, k, v, **kw)
    kw["gate"] = "channel"
    kw["g"] = np.repeat(kw["g"][..., None], q.shape[-1], axis=-1)
    o1, s1 = ref.recurrence(q, k, v, **kw)
    np.testing.assert_allclose(o1, o0, **TIGHT)
    np.testing.assert_allclose(s1, s0, **TIGHT)
    if update == "delta":
        o2, s2 = ref.gated_delta_rule(q, k, v, kw["g"][..., 0], kw["beta"],
                                      initial_state=kw["initial_state"])
        o3, s3 = ref.kda(q, k, v, kw["g"], kw["beta"], initial_state=kw["initial_state"])
        np.testing.assert_allclose(o2, o3, **TIGHT)
        np.testing.assert_allclose(s2, s3, **TIGHT)


def test_fixed_gate_equals_scalar_gate_constant_in_time():
    q, k, v, kw = random_problem("additive", "fixed", seed=10)
    B, T, H, K = q.shape
    o0, s0 = ref.retention(q, k, v, kw["log_decay"], initial_state=kw["initial_state"])
    g = np.broadcast_to(kw["log_decay"][None, None, :], (B, T, H))
    o1, s1 = ref.simple_gla(q, k, v, g, initial_state=kw["initial_state"])
    np.testing.assert_allclose(o1, o0, **TIGHT)
    np.testing.assert_allclose(s1, s0, **TIGHT)


def test_retention_default_decay_is_retnet_schedule():
    rng = np.random.default_rng(11)
    q, k, v = rand(rng, 1, 5, 3, 4), rand(rng, 1, 5, 3, 4), rand(rng, 1, 5, 3, 2)
    expected = np.log(1 - 2.0 ** -np.array([5.0, 6.0, 7.0]))
    np.testing.assert_allclose(ref.retnet_log_decay(3), expected, **TIGHT)
    o0, _ = ref.retention(q, k, v)
    o1, _ = ref.retention(q, k, v, expected)
    np.testing.assert_array_equal(o0, o1)


@pytest.mark.parametrize("gate", ref.GATES)
def test_delta_equals_dplr(gate):
    # (I - beta k k^T) Diag(e^g) S + beta k v^T
    #   = (Diag(e^g) - (beta k)(e^g * k)^T) S + (beta k) v^T
    B, T, H, K, V = 2, 6, 2, 4, 3
    q, k, v, kw = random_problem("delta", gate, B=B, T=T, H=H, K=K, V=V, HV=4, seed=12)
    o0, s0 = ref.recurrence(q, k, v, **kw)
    if gate == "none":
        lg = np.zeros((B, T, H, K))
    elif gate == "fixed":
        lg = np.broadcast_to(kw["log_decay"][None, None, :, None], (B, T, H, K))
    elif gate == "scalar":
        lg = np.broadcast_to(kw["g"][..., None], (B, T, H, K))
    else:
        lg = kw["g"]
    beta = kw["beta"][..., None]
    o1, s1 = ref.dplr_recurrence(q, beta * k, v, log_alpha=lg, a=np.exp(lg) * k, b=beta * k,
                                 initial_state=kw["initial_state"])
    np.testing.assert_allclose(o1, o0, **TIGHT)
    np.testing.assert_allclose(s1, s0, **TIGHT)


@pytest.mark.parametrize("gate", ref.GATES)
def test_additive_equals_dplr_without_low_rank(gate):
    B, T, H, K, V = 1, 5, 2, 3, 2
    q, k, v, kw = random_problem("additive", gate, B=B, T=T, H=H, K=K, V=V, seed=13)
    o0, s0 = ref.recurrence(q, k, v, scale=0.3, **kw)
    if gate == "none":
        lg = None
    elif gate == "fixed":
        lg = np.broadcast_to(kw["log_decay"][None, None, :, None], (B, T, H, K))
    elif gate == "scalar":
        lg = np.broadcast_to(kw["g"][..., None], (B, T, H, K))
    else:
        lg = kw["g"]
    o1, s1 = ref.dplr_recurrence(q, k, v, log_alpha=lg, scale=0.3,
                                 initial_state=kw["initial_state"])
    np.testing.assert_allclose(o1, o0, **TIGHT)
    np.testing.assert_allclose(s1, s0, **TIGHT)


def test_dplr_by_hand():
    # K=2, V=1, scale=1, S0=[[1],[2]], alpha=[0.5,1], b=[1,0], a=[0,1], k=[0,1], v=3, q=[1,1]
    # (Diag(alpha) - b a^T) = [[0.5,-1],[0,1]]; times S0 = [[0.5-2],[2]] = [[-1.5],[2]]
    # + k v^T = [[0],[3]] -> S1 = [[-1.5],[5]]; o = -1.5 + 5 = 3.5
    o, s = ref.dplr_recurrence(tiny([[1, 1]]), tiny([[0, 1]]), tiny([[3]]),
                               log_alpha=np.log(tiny([[0.5, 1]])), a=tiny([[0, 1]]),
                               b=tiny([[1, 0]]), scale=1.0,
                               initial_state=arr([[1], [2]])[None, None])
    np.testing.assert_allclose(o[0, 0, 0], [3.5], **TIGHT)
    np.testing.assert_allclose(s[0, 0], [[-1.5], [5.0]], **TIGHT)


# --------------------------------------------------------------------------
# bookkeeping: cu_seqlens, segments, grouped value heads, dtypes
# --------------------------------------------------------------------------

@pytest.mark.parametrize("update,gate", ALL_KINDS)
def test_cu_seqlens_equals_separate_runs(update, gate):
    lens = [3, 1, 0, 5]  # includes a length-1 and an empty sequence
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    T = int(cu[-1])
    q, k, v, kw = random_problem(update, gate, B=1, T=T, H=2, K=3, V=2, HV=4,
                                 N=len(lens), seed=14)
    o, s = ref.recurrence(q, k, v, cu_seqlens=cu, **kw)
    for n in range(len(lens)):
        lo, hi = cu[n], cu[n + 1]
        part = dict(kw)
        part["initial_state"] = kw["initial_state"][n:n + 1]
        for name in ("g", "beta"):
            if name in kw:
                part[name] = kw[name][:, lo:hi]
        o_n, s_n = ref.recurrence(q[:, lo:hi], k[:, lo:hi], v[:, lo:hi], **part)
        np.testing.assert_allclose(o[:, lo:hi], o_n, **TIGHT)
        np.testing.assert_allclose(s[n:n + 1], s_n, **TIGHT)
    # the empty sequence returns its initial state untouched
    np.testing.assert_array_equal(s[2], kw["initial_state"][2])


def test_cu_seqlens_no_leakage():
    cu = np.array([0, 4, 9], dtype=np.int32)
    q, k, v, kw = random_problem("delta", "channel", B=1, T=9, N=2, seed=15)
    o0, s0 = ref.recurrence(q, k, v, cu_seqlens=cu, **kw)
    v2 = v.copy()
    v2[:, :4] += 10.0  # perturb only the first sequence
    o1, s1 = ref.recurrence(q, k, v2, cu_seqlens=cu, **kw)
    np.testing.assert_array_equal(o1[:, 4:], o0[:, 4:])
    np.testing.assert_array_equal(s1[1], s0[1])
    assert not np.allclose(o1[:, :4], o0[:, :4])
    # and the same data without cu_seqlens does leak
    kw1 = dict(kw, initial_state=kw["initial_state"][:1])
    o2, _ = ref.recurrence(q, k, v, **kw1)
    assert not np.allclose(o2[:, 4:], o0[:, 4:])


@pytest.mark.parametrize("update,gate", ALL_KINDS)
@pytest.mark.parametrize("split", [0, 1, 4, 8])
def test_two_segments_equal_one_pass(update, gate, split):
    T = 8
    q, k, v, kw = random_problem(update, gate, T=T, HV=4, seed=16)
    o, s = ref.recurrence(q, k, v, **kw)

    def seg(lo, hi, state):
        part = dict(kw, initial_state=state)
        for name in ("g", "beta"):
            if name in kw:
                part[name] = kw[name][:, lo:hi]
        return ref.recurrence(q[:, lo:hi], k[:, lo:hi], v[:, lo:hi], **part)

    o_a, s_a = seg(0, split, kw["initial_state"])
    o_b, s_b = seg(split, T, s_a)
    np.testing.assert_allclose(np.concatenate([o_a, o_b], axis=1), o, **TIGHT)
    np.testing.assert_allclose(s_b, s, **TIGHT)


@pytest.mark.parametrize("update,gate", ALL_KINDS)
def test_grouped_value_heads_equal_repeated_heads(update, gate):
    B, T, H, K, V, G = 2, 5, 2, 3, 2, 3
    HV = H * G
    q, k, v, kw = random_problem(update, gate, B=B, T=T, H=H, K=K, V=V, HV=HV, seed=17)
    o, s = ref.recurrence(q, k, v, **kw)
    rep = dict(kw)
    if "log_decay" in kw:
        rep["log_decay"] = np.repeat(kw["log_decay"], G, axis=0)
    for name in ("g", "beta"):
        if name in kw:
            rep[name] = np.repeat(kw[name], G, axis=2)
    o_r, s_r = ref.recurrence(np.repeat(q, G, axis=2), np.repeat(k, G, axis=2), v, **rep)
    np.testing.assert_allclose(o, o_r, **TIGHT)
    np.testing.assert_allclose(s, s_r, **TIGHT)
    # value head hv uses key head hv // G (not hv % H): check head 1 against key head 0
    one = dict(kw, initial_state=kw["initial_state"][:, 1:2])
    if "log_decay" in kw:
        one["log_decay"] = kw["log_decay"][:1]
    for name in ("g", "beta"):
        if name in kw:
            one[name] = kw[name][:, :, :1]
    o_1, _ = ref.recurrence(q[:, :, :1], k[:, :, :1], v[:, :, 1:2], **one)
    np.testing.assert_allclose(o[:, :, 1:2], o_1, **TIGHT)


@pytest.mark.parametrize("gate", ref.GATES)
def test_normalizer_equals_ones_column_ratio(gate):
    # Append a column of ones to v: that column of S is exactly z, so the plain
    # output's last column is z_t . q'_t and o_norm = o[:, :-1] / (o[:, -1] + eps).
    B, T, H, K, V = 2, 6, 2, 3, 2
    q, k, v, kw = random_problem("additive", gate, B=B, T=T, H=H, K=K, V=V, seed=18,
                                 with_state=False)
    q, k = np.abs(q) + 0.1, np.abs(k) + 0.1
    v1 = np.concatenate([v, np.ones((B, T, H, 1))], axis=-1)
    o_plain, _ = ref.recurrence(q, k, v1, **kw)
    o_norm, s_norm = ref.recurrence(q, k, v, normalizer=True, eps=1e-3, **kw)
    np.testing.assert_allclose(o_norm, o_plain[..., :V] / (o_plain[..., V:] + 1e-3), **TIGHT)
    # the returned state is the ordinary S (normaliser does not touch it)
    _, s_plain = ref.recurrence(q, k, v, **kw)
    np.testing.assert_array_equal(s_norm, s_plain)


def test_qk_l2norm_equals_prenormalised_inputs():
    q, k, v, kw = random_problem("delta", "scalar", seed=19)
    o0, s0 = ref.recurrence(q, k, v, qk_l2norm=True, scale=0.9, **kw)
    qn = q / np.sqrt(np.sum(q * q, axis=-1, keepdims=True) + 1e-6)
    kn = k / np.sqrt(np.sum(k * k, axis=-1, keepdims=True) + 1e-6)
    o1, s1 = ref.recurrence(qn, kn, v, scale=0.9, **kw)
    np.testing.assert_allclose(o0, o1, **TIGHT)
    np.testing.assert_allclose(s0, s1, **TIGHT)


def test_inputs_of_any_float_dtype_give_float64():
    q, k, v, kw = random_problem("delta", "channel", seed=20)
    o64, s64 = ref.recurrence(q, k, v, **kw)
    cast = {n: (x.astype(np.float32) if isinstance(x, np.ndarray) else x) for n, x in kw.items()}
    o32, s32 = ref.recurrence(q.astype(np.float32), k.astype(np.float32),
                              v.astype(np.float16), **cast)
    assert o32.dtype == np.float64 and s32.dtype == np.float64
    # computed on the rounded values, so close but not identical
    assert 0 < lt.rel_rms(o64, o32) < 1e-2
    # and exactly equal to running on the same rounded values widened to float64
    o_w, s_w = ref.recurrence(q.astype(np.float32).astype(np.float64),
                              k.astype(np.float32).astype(np.float64),
                              v.astype(np.float16).astype(np.float64),
                              **{n: (x.astype(np.float64) if isinstance(x, np.ndarray) else x)
                                 for n, x in cast.items()})
    np.testing.assert_array_equal(o32, o_w)
    np.testing.assert_array_equal(s32, s_w)


def test_inputs_are_not_modified():
    q, k, v, kw = random_problem("delta", "channel", seed=21)
    saved = [x.copy() for x in (q, k, v, kw["g"], kw["beta"], kw["initial_state"])]
    ref.recurrence(q, k, v, qk_l2norm=True, **kw)
    for a, b in zip(saved, (q, k, v, kw["g"], kw["beta"], kw["initial_state"])):
        np.testing.assert_array_equal(a, b)


def test_named_wrappers_match_recurrence():
    rng = np.random.default_rng(22)
    B, T, H, K, V = 1, 4, 2, 3, 2
    q, k, v = rand(rng, B, T, H, K), rand(rng, B, T, H, K), rand(rng, B, T, H, V)
    gs, gc = -rng.random((B, T, H)), -rng.random((B, T, H, K))
    beta, ld = rng.random((B, T, H)), -rng.random(H)
    R = ref.recurrence
    pairs = [
        (ref.linear_attention(q, k, v), R(q, k, v)),
        (ref.retention(q, k, v, ld), R(q, k, v, gate="fixed", log_decay=ld)),
        (ref.simple_gla(q, k, v, gs), R(q, k, v, gate="scalar", g=gs)),
        (ref.gla(q, k, v, gc), R(q, k, v, gate="channel", g=gc)),
        (ref.delta_rule(q, k, v, beta), R(q, k, v, update="delta", beta=beta)),
        (ref.gated_delta_rule(q, k, v, gs, beta),
         R(q, k, v, update="delta", gate="scalar", g=gs, beta=beta)),
        (ref.kda(q, k, v, gc, beta), R(q, k, v, update="delta", gate="channel", g=gc, beta=beta)),
    ]
    outs = []
    for (o_w, s_w), (o_r, s_r) in pairs:
        np.testing.assert_array_equal(o_w, o_r)
        np.testing.assert_array_equal(s_w, s_r)
        outs.append(o_w)
    # the seven variants really are different computations
    for i in range(len(outs)):
        for j in range(i):
            assert lt.rel_rms(outs[i], outs[j]) > 1e-3


# --------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------

def _valid():
    rng = np.random.default_rng(23)
    B, T, H, K, V = 1, 4, 2, 3, 2
    return dict(q=rand(rng, B, T, H, K), k=rand(rng, B, T, H, K), v=rand(rng, B, T, H, V))


BAD_CALLS = {
    "q not 4-D": lambda d: ref.recurrence(d["q"][0], d["k"], d["v"]),
    "k shape != q shape": lambda d: ref.recurrence(d["q"], d["k"][..., :2], d["v"]),
    "v batch/time mismatch": lambda d: ref.recurrence(d["q"], d["k"], d["v"][:, :3]),
    "HV not multiple of H": lambda d: ref.recurrence(d["q"], d["k"], np.zeros((1, 4, 3, 2))),
    "unknown update": lambda d: ref.recurrence(d["q"], d["k"], d["v"], update="mul"),
    "unknown gate": lambda d: ref.recurrence(d["q"], d["k"], d["v"], gate="vector"),
    "scalar gate without g": lambda d: ref.recurrence(d["q"], d["k"], d["v"], gate="scalar"),
    "scalar gate with channel g": lambda d: ref.recurrence(
        d["q"], d["k"], d["v"], gate="scalar", g=np.zeros((1, 4, 2, 3))),
    "channel gate with scalar g": lambda d: ref.recurrence(
        d["q"], d["k"], d["v"], gate="channel", g=np.zeros((1, 4, 2))),
    "g given with gate none": lambda d: ref.recurrence(
        d["q"], d["k"], d["v"], g=np.zeros((1, 4, 2))),
    "fixed gate without log_decay": lambda d: ref.recurrence(d["q"], d["k"], d["v"], gate="fixed"),
    "fixed gate wrong shape": lambda d: ref.recurrence(
        d["q"], d["k"], d["v"], gate="fixed", log_decay=np.zeros(3)),
    "log_decay with scalar gate": lambda d: ref.recurrence(
        d["q"], d["k"], d["v"], gate="scalar", g=np.zeros((1, 4, 2)), log_decay=np.zeros(2)),
    "delta without beta": lambda d: ref.recurrence(d["q"], d["k"], d["v"], update="delta"),
    "beta wrong shape": lambda d: ref.recurrence(
        d["q"], d["k"], d["v"], update="delta", beta=np.zeros((1, 4, 2, 1))),
    "beta with additive": lambda d: ref.recurrence(
        d["q"], d["k"], d["v"], beta=np.zeros((1, 4, 2))),
    "normalizer with delta": lambda d: ref.recurrence(
        d["q"], d["k"], d["v"], update="delta", beta=np.zeros((1, 4, 2)), normalizer=True),
    "initial_state wrong shape": lambda d: ref.recurrence(
        d["q"], d["k"], d["v"], initial_state=np.zeros((1, 2, 2, 3))),
    "cu_seqlens with B > 1": lambda d: ref.recurrence(
        np.zeros((2, 4, 2, 3)), np.zeros((2, 4, 2, 3)), np.zeros((2, 4, 2, 2)),
        cu_seqlens=np.array([0, 4])),
    "cu_seqlens not ending at T": lambda d: ref.recurrence(
        d["q"], d["k"], d["v"], cu_seqlens=np.array([0, 3])),
    "cu_seqlens not starting at 0": lambda d: ref.recurrence(
        d["q"], d["k"], d["v"], cu_seqlens=np.array([1, 4])),
    "cu_seqlens decreasing": lambda d: ref.recurrence(
        d["q"], d["k"], d["v"], cu_seqlens=np.array([0, 3, 2, 4])),
    "cu_seqlens float": lambda d: ref.recurrence(
        d["q"], d["k"], d["v"], cu_seqlens=np.array([0.0, 4.0])),
    "cu_seqlens too short": lambda d: ref.recurrence(
        d["q"], d["k"], d["v"], cu_seqlens=np.array([0])),
    "initial_state N != number of sequences": lambda d: ref.recurrence(
        d["q"], d["k"], d["v"], cu_seqlens=np.array([0, 2, 4]),
        initial_state=np.zeros((1, 2, 3, 2))),
    "scale not a number": lambda d: ref.recurrence(d["q"], d["k"], d["v"], scale="0.5"),
    "string input": lambda d: ref.recurrence(d["q"].astype(str), d["k"], d["v"]),
    "dplr a without b": lambda d: ref.dplr_recurrence(d["q"], d["k"], d["v"], a=d["k"]),
    "dplr log_alpha wrong shape": lambda d: ref.dplr_recurrence(
        d["q"], d["k"], d["v"], log_alpha=np.zeros((1, 4, 2))),
    "dplr b wrong shape": lambda d: ref.dplr_recurrence(
        d["q"], d["k"], d["v"], a=d["k"], b=d["k"][..., :1]),
}


@pytest.mark.parametrize("name", list(BAD_CALLS))
def test_validation_errors(name):
    with pytest.raises(ValueError):
        BAD_CALLS[name](_valid())


def test_valid_call_does_not_raise():
    d = _valid()
    ref.recurrence(d["q"], d["k"], d["v"], cu_seqlens=np.array([0, 2, 4]),
                   initial_state=np.zeros((2, 2, 3, 2)))


# --------------------------------------------------------------------------
# la.testing
# --------------------------------------------------------------------------

def test_rel_rms_by_hand():
    # ref = [3, 4]: rms = sqrt((9+16)/2) = sqrt(12.5); diff = [0, 1]: rms = sqrt(0.5)
    # ratio = sqrt(0.5/12.5) = sqrt(0.04) = 0.2
    assert lt.rel_rms(np.array([3.0, 4.0]), np.array([3.0, 3.0], dtype=np.float32)) == \
        pytest.approx(0.2, rel=1e-14)
    assert lt.rel_rms(np.ones(3), np.ones(3)) == 0.0
    assert lt.rel_rms(np.zeros(3), np.zeros(3)) == 0.0
    assert lt.rel_rms(np.zeros(3), np.ones(3)) == float("inf")
    with pytest.raises(ValueError):
        lt.rel_rms(np.ones(3), np.ones(4))


@pytest.mark.parametrize("variant", list(lt.VARIANTS))
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_make_inputs_shapes_and_ranges(variant, dtype):
    B, T, H, K, V, HV = 2, 5, 2, 4, 3, 4
    inp = lt.make_inputs(variant, B, T, H, K, V, HV=HV, dtype=dtype, with_initial_state=True)
    update, gate = lt.VARIANTS[variant]
    assert inp["q"].shape == inp["k"].shape == (B, T, H, K)
    assert inp["v"].shape == (B, T, HV, V)
    assert inp["q"].dtype == inp["k"].dtype == inp["v"].dtype == np.dtype(dtype)
    assert inp["initial_state"].shape == (B, HV, K, V)
    assert inp["initial_state"].dtype == np.float32
    expected_keys = {"q", "k", "v", "initial_state"}
    if gate == "fixed":
        expected_keys.add("log_decay")
        np.testing.assert_allclose(inp["log_decay"], ref.retnet_log_decay(H), rtol=1e-6)
    if gate in ("scalar", "channel"):
        expected_keys.add("g")
        assert inp["g"].shape == ((B, T, H) if gate == "scalar" else (B, T, H, K))
        assert np.all(inp["g"] <= 0) and np.all(np.isfinite(inp["g"]))
    if update == "delta":
        expected_keys.add("beta")
        assert inp["beta"].shape == (B, T, H)
        assert np.all((inp["beta"] > 0) & (inp["beta"] < 1))
        norms = np.linalg.norm(inp["k"].astype(np.float64), axis=-1)
        np.testing.assert_allclose(norms, 1.0, atol=2e-3)
    if update == "erase_write":
        expected_keys |= {"erase", "write"}
        assert inp["erase"].shape == (B, T, H, K) and inp["write"].shape == (B, T, HV, V)
        for key in ("erase", "write"):
            assert inp[key].dtype == np.dtype(dtype)
            assert np.all((inp[key] > 0) & (inp[key] < 1))
        norms = np.linalg.norm(inp["k"].astype(np.float64), axis=-1)
        np.testing.assert_allclose(norms, 1.0, atol=2e-3)
    if update == "dplr":
        expected_keys |= {"a", "b"}
        assert inp["a"].shape == inp["b"].shape == (B, T, H, K)
        a, b = inp["a"].astype(np.float64), inp["b"].astype(np.float64)
        np.testing.assert_allclose(np.linalg.norm(a, axis=-1), 1.0, atol=2e-3)
        rate = b / a  # b = a * rate, rate in (0, 1)
        assert np.all((rate > 0) & (rate < 1 + 1e-2))
    assert set(inp) == expected_keys
    o, s = lt.reference_for(variant, inp)
    assert o.shape == (B, T, HV, V) and s.shape == (B, HV, K, V)
    assert np.all(np.isfinite(o))


@pytest.mark.parametrize("variant,delta_variant", [
    ("deltanet2", "deltanet"), ("decayed_deltanet2", "decayed_deltanet"),
    ("scalar_gated_deltanet2", "gated_deltanet"), ("gated_deltanet2", "kda")])
def test_reference_for_erase_write_with_beta_gates_is_the_delta_rule(variant, delta_variant):
    """erase = write = beta (broadcast over K and V) turns each erase_write
    variant into its delta-rule twin: checks how reference_for maps the gates."""
    inp = lt.make_inputs(delta_variant, 1, 9, 2, 4, 3, HV=4, seed=5, with_initial_state=True,
                         cu_seqlens=[0, 4, 9])
    beta = inp["beta"].astype(np.float64)
    ew = dict(inp, erase=np.repeat(beta[..., None], 4, axis=-1),
              write=np.repeat(np.repeat(beta, 2, axis=2)[..., None], 3, axis=-1))
    del ew["beta"]
    o, s = lt.reference_for(variant, ew, scale=0.7)
    o_ref, s_ref = lt.reference_for(delta_variant, inp, scale=0.7)
    np.testing.assert_allclose(o, o_ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(s, s_ref, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="normalizer"):
        lt.reference_for(variant, ew, normalizer=True)


@pytest.mark.parametrize("variant,delta_variant", [
    ("dplr", "deltanet"), ("decayed_dplr", "decayed_deltanet"),
    ("scalar_gated_dplr", "gated_deltanet"), ("rwkv7", "kda")])
def test_reference_for_dplr_with_delta_vectors_is_the_delta_rule(variant, delta_variant):
    """(I - beta k k^T) Diag(alpha) = Diag(alpha) - (beta k) (alpha k)^T: the
    dplr rule with a = alpha * k, b = beta * k and the written key beta * k
    is the delta rule; checks how reference_for maps a, b and the gates."""
    inp = lt.make_inputs(delta_variant, 1, 9, 2, 4, 3, HV=4, seed=5, with_initial_state=True,
                         cu_seqlens=[0, 4, 9])
    k = inp["k"].astype(np.float64)
    beta = inp["beta"].astype(np.float64)[..., None]
    _, gate = lt.VARIANTS[variant]
    if gate == "fixed":
        log_alpha = inp["log_decay"].astype(np.float64)[None, None, :, None]
    elif gate == "scalar":
        log_alpha = inp["g"].astype(np.float64)[..., None]
    else:
        log_alpha = inp.get("g", np.zeros(k.shape)).astype(np.float64)
    dplr = dict(inp, k=beta * k, a=np.exp(log_alpha) * k, b=beta * k)
    del dplr["beta"]
    o, s = lt.reference_for(variant, dplr, scale=0.7)
    o_ref, s_ref = lt.reference_for(delta_variant, inp, scale=0.7)
    np.testing.assert_allclose(o, o_ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(s, s_ref, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="normalizer"):
        lt.reference_for(variant, dplr, normalizer=True)


def test_make_inputs_seed_gate_min_and_cu_seqlens():
    a = lt.make_inputs("kda", 1, 6, 1, 4, 2, seed=3)
    b = lt.make_inputs("kda", 1, 6, 1, 4, 2, seed=3)
    c = lt.make_inputs("kda", 1, 6, 1, 4, 2, seed=4)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    assert not np.array_equal(a["q"], c["q"])
    strong = lt.make_inputs("gla", 1, 50, 2, 4, 2, gate_scale=100.0, gate_min=-30.0)
    assert strong["g"].min() == np.float32(-30.0)
    weak = lt.make_inputs("gla", 1, 50, 2, 4, 2, gate_scale=1 / 16)
    assert weak["g"].min() > -1.0
    cu = [0, 2, 6]
    inp = lt.make_inputs("gated_deltanet", 1, 6, 2, 4, 2, cu_seqlens=cu, with_initial_state=True)
    assert inp["cu_seqlens"].dtype == np.int32
    assert inp["initial_state"].shape == (2, 2, 4, 2)
    o, s = lt.reference_for("gated_deltanet", inp)
    assert s.shape == (2, 2, 4, 2)
    pos = lt.make_inputs("linear", 1, 6, 1, 4, 2, positive_qk=True)
    assert np.all(pos["q"] > 0) and np.all(pos["k"] > 0)
    with pytest.raises(ValueError):
        lt.make_inputs("softmax", 1, 4, 1, 4, 2)
    with pytest.raises(ValueError):
        lt.make_inputs("linear", 1, 4, 1, 4, 2, dtype=np.float64)
    with pytest.raises(ValueError):
        lt.make_inputs("linear", 2, 4, 1, 4, 2, cu_seqlens=[0, 4])


def test_reference_for_passes_attrs():
    inp = lt.make_inputs("linear", 1, 5, 1, 4, 2, positive_qk=True)
    o, _ = lt.reference_for("linear", inp, scale=1.0, normalizer=True)
    o2, _ = ref.linear_attention(inp["q"], inp["k"], inp["v"], scale=1.0, normalizer=True)
    np.testing.assert_array_equal(o, o2)


# --------------------------------------------------------------------------
# size the later execution tests need
# --------------------------------------------------------------------------

def test_large_problem_runs_in_seconds():
    # T=4096, K=V=128, B*HV=8, the hardest variant (KDA)
    inp = lt.make_inputs("kda", 2, 4096, 4, 128, 128, with_initial_state=True)
    start = time.perf_counter()
    o, s = lt.reference_for("kda", inp)
    elapsed = time.perf_counter() - start
    assert o.shape == (2, 4096, 4, 128) and np.all(np.isfinite(o))
    assert elapsed < 15.0, f"reference too slow: {elapsed:.1f} s"
