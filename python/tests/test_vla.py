"""la.family.variational_linear_attention (VLA) against its fp64
token-by-token reference (``la.reference.variational_linear_attention``,
written in the paper's orientation, independent of the composition) on the
forward tests' shape list, packed sequences, a carried state, bf16 inputs;
against la's delta rule where VLA reduces to it; gradients through torch
autograd against central finite differences of the reference; the errors."""

import numpy as np
import pytest

from la import family, ops, reference
from la.testing import central_differences, rel_rms

#: (B, T, H, HV, K, V, chunk) as in test_cpu_exec's shape list
CASES = {
    "T<C": (1, 5, 1, 1, 8, 8, 16),
    "T%C!=0,B=2,HV=2H,K!=V": (2, 37, 2, 4, 16, 8, 16),
    "C=64,T=150": (1, 150, 2, 2, 16, 16, 64),
}


def _elu1(x):
    return np.where(x > 0, x + 1, np.exp(np.minimum(x, 0)))


def _inputs(B, T, H, HV, K, V, seed=0):
    """VLA's operands as its layer makes them: ELU + 1 features for q and k,
    penalty directions of norm 1 / sqrt(K)."""
    rng = np.random.default_rng(seed)
    q = _elu1(rng.standard_normal((B, T, H, K))).astype(np.float32)
    k = _elu1(rng.standard_normal((B, T, H, K))).astype(np.float32)
    v = rng.standard_normal((B, T, HV, V)).astype(np.float32)
    u = rng.standard_normal((B, T, H, K))
    u = (u / np.linalg.norm(u, axis=-1, keepdims=True) / np.sqrt(K)).astype(np.float32)
    return q, k, v, u


def _state(N, H, HV, K, V, seed):
    """A carried state: a memory, a symmetric positive definite penalty."""
    rng = np.random.default_rng(seed)
    basis = rng.standard_normal((N, H, K, K)) / np.sqrt(K)
    penalty = np.eye(K) * 2.0 + basis @ np.swapaxes(basis, -1, -2)
    return family.VLAState((0.3 * rng.standard_normal((N, HV, K, V))).astype(np.float32),
                           penalty.astype(np.float32),
                           _elu1(rng.standard_normal((N, H, K))).astype(np.float32),
                           np.arange(N, dtype=np.int64) * 3 + 1)


def _check_state(expected, got, tol=1e-5):
    for name, a, b in zip(family.VLAState._fields[:3], expected[:3], got[:3]):
        assert rel_rms(a, b) <= tol, (name, rel_rms(a, b))
    assert np.array_equal(np.asarray(expected[3]), np.asarray(got[3]))


@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("case", sorted(CASES))
def test_against_reference(case, with_state):
    B, T, H, HV, K, V, C = CASES[case]
    q, k, v, u = _inputs(B, T, H, HV, K, V, seed=len(case))
    state = _state(B, H, HV, K, V, seed=4) if with_state else None
    o, final = family.variational_linear_attention(
        q, k, v, u, period=7, initial_state=state, output_final_state=True, chunk_size=C)
    o_ref, final_ref = reference.variational_linear_attention(
        q, k, v, u, period=7, initial_state=state)
    assert o.shape == (B, T, HV, V) and final.state.shape == (B, HV, K, V)
    assert rel_rms(o_ref, o) <= 1e-5
    _check_state(final_ref, final)


def test_packed_sequences_with_an_empty_one():
    q, k, v, u = _inputs(1, 45, 2, 2, 16, 8, seed=9)
    cu = np.array([0, 12, 12, 40, 45])
    state = _state(4, 2, 2, 16, 8, seed=5)
    o, final = family.variational_linear_attention(
        q, k, v, u, period=5, cu_seqlens=cu, initial_state=state, output_final_state=True,
        chunk_size=16)
    o_ref, final_ref = reference.variational_linear_attention(
        q, k, v, u, period=5, cu_seqlens=cu, initial_state=state)
    assert rel_rms(o_ref, o) <= 1e-5
    _check_state(final_ref, final)
    # the empty sequence keeps its state
    for got, given in zip(final[:3], state[:3]):
        assert np.array_equal(got[1], given[1])


@pytest.mark.parametrize("cut", [1, 13, 20])
def test_carried_state_equals_one_pass(cut):
    """Two calls chained through the returned state (the refresh keeps its
    phase through ``position``) equal one call."""
    q, k, v, u = _inputs(2, 33, 1, 2, 8, 8, seed=11)
    whole, final = family.variational_linear_attention(q, k, v, u, period=4,
                                                       output_final_state=True, chunk_size=16)
    first, middle = family.variational_linear_attention(
        q[:, :cut], k[:, :cut], v[:, :cut], u[:, :cut], period=4, output_final_state=True,
        chunk_size=16)
    second, end = family.variational_linear_attention(
        q[:, cut:], k[:, cut:], v[:, cut:], u[:, cut:], period=4, initial_state=middle,
        output_final_state=True, chunk_size=16)
    assert rel_rms(whole, np.concatenate([first, second], 1)) <= 1e-6
    _check_state(final, end, tol=1e-6)


@pytest.mark.parametrize("packed", [False, True])
def test_blocked_penalty_pass_equals_the_sequential_one(packed):
    """The penalty pass by blocks (Woodbury between refreshes, the rows
    padded to the refresh's phase) against the token-by-token one, with
    carried positions that put the refreshes at different tokens per row."""
    B = 1 if packed else 3
    q, k, v, u = _inputs(B, 90, 2, 2, 16, 8, seed=21)
    options = dict(period=7, eta=0.05, chunk_size=16)
    if packed:
        options["cu_seqlens"] = np.array([0, 5, 5, 61, 90])
    state = _state(4 if packed else B, 2, 2, 16, 8, seed=6)
    blocked, end_b = family.variational_linear_attention(
        q, k, v, u, initial_state=state, output_final_state=True, **options)
    sequential, end_s = family.variational_linear_attention(
        q, k, v, u, initial_state=state, output_final_state=True, penalty_pass="sequential",
        **options)
    assert rel_rms(sequential, blocked) <= 1e-5
    _check_state(end_s, end_b)


def test_penalty_that_is_not_positive_definite_takes_the_sequential_pass():
    """A carried penalty that is not positive definite: the blocked pass's
    factorisation fails and the sequential one (with the eps clamp, which
    then acts) runs, as the reference does."""
    q, k, v, u = _inputs(1, 4, 1, 1, 8, 8, seed=22)
    state = family.VLAState(np.zeros((1, 1, 8, 8), np.float32),
                            (-10 * np.eye(8, dtype=np.float32))[None, None],
                            np.zeros((1, 1, 8), np.float32), np.zeros(1, np.int64))
    o, final = family.variational_linear_attention(q, k, v, u, initial_state=state, eps=0.5,
                                                   output_final_state=True, chunk_size=16)
    o_ref, final_ref = reference.variational_linear_attention(q, k, v, u, initial_state=state,
                                                              eps=0.5)
    assert np.isfinite(o_ref).all()
    assert np.isfinite(o).all()
    assert rel_rms(o_ref, o) <= 1e-5
    _check_state(final_ref, final)


def test_without_penalty_updates_it_is_the_delta_rule():
    """u = 0 and no refresh keep P = I / lambda0, so w = k / |k| and the
    memory is DeltaNet with beta = 1 on the unit keys: la's deltanet kernel
    (another lowering), divided by the key sums."""
    q, k, v, u = _inputs(1, 40, 2, 2, 16, 16, seed=3)
    o = family.variational_linear_attention(q, k, v, np.zeros_like(u), eta=0.0, chunk_size=16)
    unit = k / np.linalg.norm(k, axis=-1, keepdims=True)
    o_delta, _ = ops.delta_rule(q, unit, v, np.ones((1, 40, 2), np.float32), scale=1.0,
                                chunk_size=16)
    den = np.maximum((np.cumsum(k, 1) * q).sum(-1), 1e-4)
    assert rel_rms(o_delta / den[..., None], o) <= 1e-6


def test_bf16_inputs():
    torch = pytest.importorskip("torch")
    q, k, v, u = _inputs(1, 37, 2, 2, 16, 16, seed=6)
    q16, k16, v16, u16 = (torch.from_numpy(x).bfloat16() for x in (q, k, v, u))
    o = family.variational_linear_attention(q16, k16, v16, u16, chunk_size=16)
    assert o.dtype == torch.bfloat16
    o_ref, _ = reference.variational_linear_attention(
        *(x.float().numpy() for x in (q16, k16, v16, u16)))
    assert rel_rms(o_ref, o.float().numpy()) <= 1e-2


def test_torch_matches_numpy():
    torch = pytest.importorskip("torch")
    q, k, v, u = _inputs(1, 29, 1, 1, 8, 8, seed=8)
    o_np = family.variational_linear_attention(q, k, v, u, period=6, chunk_size=16)
    o_t = family.variational_linear_attention(*(torch.from_numpy(x) for x in (q, k, v, u)),
                                              period=6, chunk_size=16)
    assert rel_rms(o_np, o_t.numpy()) <= 1e-6


def test_gradients_against_finite_differences():
    """torch autograd through the composition (the penalty pass in torch,
    the memory through la's derived dplr gradient) against central finite
    differences of the fp64 reference, for q, k, v, u and the initial memory."""
    torch = pytest.importorskip("torch")
    B, T, H, HV, K, V = 1, 7, 1, 1, 4, 3
    q, k, v, u = _inputs(B, T, H, HV, K, V, seed=12)
    state = _state(B, H, HV, K, V, seed=2)
    rng = np.random.default_rng(13)
    do = rng.standard_normal((B, T, HV, V))
    ds = rng.standard_normal((B, HV, K, V))
    options = dict(period=3, eta=0.05, lambda0=0.5)
    base = {"q": q, "k": k, "v": v, "u": u, "s0": state.state}

    def loss(name, x):
        args = dict(base, **{name: x})
        o, final = reference.variational_linear_attention(
            args["q"], args["k"], args["v"], args["u"],
            initial_state=state._replace(state=args["s0"]), **options)
        return float((o * do).sum() + (final[0] * ds).sum())

    tensors = {name: torch.tensor(x, requires_grad=True) for name, x in base.items()}
    o, final = family.variational_linear_attention(
        tensors["q"], tensors["k"], tensors["v"], tensors["u"],
        initial_state=family.VLAState(tensors["s0"], torch.tensor(state.penalty),
                                      torch.tensor(state.normalizer), state.position),
        output_final_state=True, chunk_size=16, **options)
    ((o.double() * torch.from_numpy(do)).sum()
     + (final.state.double() * torch.from_numpy(ds)).sum()).backward()
    for name, x in base.items():
        expected = central_differences(lambda y: loss(name, y), x)
        got = tensors[name].grad.numpy()
        assert rel_rms(expected, got) <= 1e-4, (name, rel_rms(expected, got))


@pytest.mark.parametrize("change, message", [
    (dict(k=np.zeros((1, 4, 1, 3), np.float32)), "k must be"),
    (dict(u=np.zeros((1, 4, 2, 4), np.float32)), "u must be"),
    (dict(v=np.zeros((1, 4, 3, 4), np.float32)), "HV a multiple"),
    (dict(lambda0=0.0), "lambda0 must be a finite number > 0"),
    (dict(lambda0=float("nan")), "lambda0 must be"),
    (dict(eta=-1e-3), "eta must be a finite number >= 0"),
    (dict(eps=0.0), "eps must be"),
    (dict(period=0), "period must be an integer >= 1"),
    (dict(period=2.5), "period must be"),
    (dict(penalty_pass="fast"), "penalty_pass must be 'blocked' or 'sequential'"),
    (dict(cu_seqlens=np.array([0, 4])), "cu_seqlens needs B = 1"),
    (dict(initial_state=(np.zeros((2, 1, 4, 4)),)), "initial_state must be a VLAState"),
    (dict(initial_state=family.VLAState(np.zeros((2, 1, 4, 4)), np.zeros((2, 1, 4, 4)),
                                        np.zeros((2, 1, 3)), np.zeros(2, np.int64))),
     r"initial_state.normalizer must have shape \(2, 1, 4\)"),
    (dict(initial_state=family.VLAState(np.zeros((2, 1, 4, 4)), np.zeros((2, 1, 4, 4)),
                                        np.zeros((2, 1, 4)), np.array([0, -1]))),
     "position must hold token counts"),
])
def test_errors(change, message):
    q, k, v, u = _inputs(2, 4, 1, 1, 4, 4)
    args = dict(q=q, k=k, v=v, u=u)
    args.update({name: change.pop(name) for name in list(change) if name in args})
    with pytest.raises(ValueError, match=message):
        family.variational_linear_attention(args["q"], args["k"], args["v"], args["u"],
                                            **change)


@pytest.mark.parametrize("shape", [(1, 130, 2, 5), (2, 64, 1, 1), (3, 1, 2, 2), (1, 0, 2, 3)])
def test_blocked_running_sums(shape):
    """The normaliser's running sums by blocks of 64 tokens equal cumsum."""
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    got = family._cumsum_rows(x)
    assert got.shape == x.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, np.cumsum(x.astype(np.float64), 1), rtol=1e-5, atol=1e-5)
