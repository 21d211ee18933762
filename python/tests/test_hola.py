"""la.family.hola_attention (HOLA: a Gated DeltaNet state and a bounded
exact cache of the tokens that wrote most into it) against its fp64
token-by-token reference (``la.reference.hola_attention``: the residuals
from the state update itself, the cache chosen by sorting each token's
whole history, independent of the composition's two la calls and blockwise
merge) on the forward tests' shape list, packed sequences, a hard reset,
bf16 inputs; the two limits where the cache is everything or nothing
against la's Gated DeltaNet plus a causal softmax; gradients through torch
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


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _inputs(B, T, H, HV, K, V, seed=0, value_head_gates=False):
    rng = np.random.default_rng(seed)
    G = HV if value_head_gates else H
    q = _unit(rng.standard_normal((B, T, H, K))).astype(np.float32)
    k = _unit(rng.standard_normal((B, T, H, K))).astype(np.float32)
    v = rng.standard_normal((B, T, HV, V)).astype(np.float32)
    g = (-np.log1p(np.exp(-rng.standard_normal((B, T, G)))) / 4).astype(np.float32)
    beta = rng.uniform(0.05, 0.95, (B, T, G)).astype(np.float32)
    options = dict(cache_weight=rng.uniform(0.2, 1.0, HV).astype(np.float32),
                   sink=rng.standard_normal(HV).astype(np.float32),
                   gamma_q=rng.uniform(0.5, 2.0, K).astype(np.float32),
                   gamma_k=rng.uniform(0.5, 2.0, K).astype(np.float32))
    state = (0.3 * rng.standard_normal((B, HV, K, V))).astype(np.float32)
    return (q, k, v, g, beta), options, state


def _compare(args, options, tol=1e-5, **kwargs):
    o, final = family.hola_attention(*args, **options, output_final_state=True, **kwargs)
    kwargs.pop("chunk_size", None)
    o_ref, s_ref = reference.hola_attention(*args, **options, **kwargs)
    assert rel_rms(o_ref, o) <= tol, rel_rms(o_ref, o)
    assert rel_rms(s_ref, final.state) <= tol, rel_rms(s_ref, final.state)
    return o


@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("case", sorted(CASES))
def test_against_reference(case, with_state):
    B, T, H, HV, K, V, C = CASES[case]
    args, options, state = _inputs(B, T, H, HV, K, V, seed=len(case),
                                   value_head_gates=with_state)
    _compare(args, options, cache_size=6, block_size=8, chunk_size=C,
             initial_state=state if with_state else None)


@pytest.mark.parametrize("cuts", [(), (9,)])
def test_recent_cache(cuts):
    """cache='recent': the latest tokens of the earlier blocks (the paper's
    recency control), in one call and carried across two."""
    args, options, _ = _inputs(2, 37, 1, 2, 8, 8, seed=18)
    sizes = dict(cache_size=5, block_size=4, chunk_size=16, cache="recent")
    o, _ = _chained(args, options, cuts, **sizes)
    o_ref, _ = reference.hola_attention(*args, **options, cache_size=5, block_size=4,
                                        cache="recent")
    assert rel_rms(o_ref, o) <= 1e-5
    surprise = family.hola_attention(*args, **options, cache_size=5, block_size=4,
                                     chunk_size=16)
    assert rel_rms(surprise, o) > 1e-3  # a different choice


def test_without_sink_and_default_scales():
    args, options, _ = _inputs(2, 30, 1, 1, 8, 8, seed=3)
    _compare(args, dict(cache_weight=options["cache_weight"]), cache_size=3, block_size=4,
             chunk_size=16)


def test_packed_sequences_with_an_empty_one():
    args, options, _ = _inputs(1, 45, 2, 2, 16, 8, seed=9)
    cu = np.array([0, 12, 12, 40, 45])
    state = (0.3 * np.random.default_rng(1).standard_normal((4, 2, 16, 8))).astype(np.float32)
    _compare(args, options, cache_size=4, block_size=5, chunk_size=16, cu_seqlens=cu,
             initial_state=state)


def test_hard_reset():
    """A -inf gate forgets the state (its residual is the value itself)."""
    args, options, _ = _inputs(1, 40, 1, 1, 8, 8, seed=5)
    args[3][0, 17] = -np.inf
    _compare(args, options, cache_size=4, block_size=6, chunk_size=16)


def _causal_softmax(args, options):
    q, k, v = args[:3]
    qn = options["gamma_q"] * q / np.sqrt((q * q).mean(-1, keepdims=True) + 1e-6)
    kn = options["gamma_k"] * k / np.sqrt((k * k).mean(-1, keepdims=True) + 1e-6)
    T, K = q.shape[1], q.shape[3]
    logits = np.einsum("bthk,bshk->bhts", qn, kn) / np.sqrt(K)
    logits = np.where(np.tril(np.ones((T, T), bool)), logits, -np.inf)
    sink = options["sink"][None, :, None, None] * np.ones(logits.shape[:3] + (1,))
    logits = np.concatenate([logits, sink], -1)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return np.einsum("bhts,bshv->bthv", weights[..., :T], v)


@pytest.mark.parametrize("cache_size, block_size", [(64, 4), (1, 64)])
def test_limits_are_state_plus_causal_softmax(cache_size, block_size):
    """A cache that holds every earlier token, or one block that holds the
    whole sequence: the read is causal softmax attention over all tokens
    up to t, added to la's Gated DeltaNet output."""
    args, options, _ = _inputs(1, 30, 2, 2, 8, 8, seed=7)
    o = family.hola_attention(*args, **options, cache_size=cache_size, block_size=block_size,
                              chunk_size=16)
    o_state, _ = ops.gated_delta_rule(*args, chunk_size=16)
    expected = o_state + options["cache_weight"][:, None] * _causal_softmax(args, options)
    assert rel_rms(expected, o) <= 1e-5


def test_the_choice_matters():
    """A small cache changes the output (the selection is exercised)."""
    args, options, _ = _inputs(1, 40, 1, 1, 8, 8, seed=2)
    small = family.hola_attention(*args, **options, cache_size=2, block_size=4, chunk_size=16)
    whole = family.hola_attention(*args, **options, cache_size=40, block_size=4, chunk_size=16)
    assert rel_rms(whole, small) > 1e-2


def test_bf16_inputs():
    torch = pytest.importorskip("torch")
    args, options, _ = _inputs(1, 37, 2, 2, 16, 16, seed=6)
    args16 = [torch.from_numpy(x).bfloat16() for x in args[:3]] + \
        [torch.from_numpy(x) for x in args[3:]]
    o = family.hola_attention(*args16, **options, cache_size=64, block_size=8, chunk_size=16)
    assert o.dtype == torch.bfloat16
    rounded = [x.float().numpy() for x in args16]
    o_ref, _ = reference.hola_attention(*rounded, **options, cache_size=64, block_size=8)
    assert rel_rms(o_ref, o.float().numpy()) <= 1e-2


def test_torch_matches_numpy():
    torch = pytest.importorskip("torch")
    args, options, state = _inputs(1, 29, 1, 2, 8, 8, seed=8)
    o_np = family.hola_attention(*args, **options, initial_state=state, cache_size=3,
                                 block_size=5, chunk_size=16)
    o_t = family.hola_attention(*(torch.from_numpy(x) for x in args), initial_state=state,
                                **{n: torch.from_numpy(x) for n, x in options.items()},
                                cache_size=3, block_size=5, chunk_size=16)
    assert rel_rms(o_np, o_t.numpy()) <= 1e-6


def test_gradients_against_finite_differences():
    """torch autograd through the composition against central finite
    differences of the fp64 reference, for every input but the choice (a
    top-k of m: piecewise constant, no gradient)."""
    torch = pytest.importorskip("torch")
    args, options, state = _inputs(1, 9, 1, 1, 4, 3, seed=12)
    base = dict(zip(("q", "k", "v", "g", "beta"), args), s0=state, **options)
    rng = np.random.default_rng(13)
    do = rng.standard_normal(args[2].shape)
    ds = rng.standard_normal(state.shape)
    sizes = dict(cache_size=2, block_size=3)

    def split(values):
        inputs = [values[n] for n in ("q", "k", "v", "g", "beta")]
        return inputs, {n: values[n] for n in options}, values["s0"]

    def loss(name, x):
        inputs, opts, s0 = split(dict(base, **{name: x}))
        o, s = reference.hola_attention(*inputs, **opts, initial_state=s0, **sizes)
        return float((o * do).sum() + (s * ds).sum())

    tensors = {n: torch.tensor(x, requires_grad=True) for n, x in base.items()}
    inputs, opts, s0 = split(tensors)
    o, final = family.hola_attention(*inputs, **opts, initial_state=s0,
                                     output_final_state=True, chunk_size=16, **sizes)
    ((o.double() * torch.from_numpy(do)).sum()
     + (final.state.double() * torch.from_numpy(ds)).sum()).backward()
    for name, x in base.items():
        expected = central_differences(lambda y: loss(name, y), x)
        got = tensors[name].grad.numpy()
        assert rel_rms(expected, got) <= 1e-4, (name, rel_rms(expected, got))


def _chained(args, options, cuts, **kwargs):
    """The call split at ``cuts`` (token positions), chained through the
    HOLAState each part returns: (outputs joined, last state)."""
    bounds = [0] + list(cuts) + [args[0].shape[1]]
    state, parts = None, []
    for start, stop in zip(bounds[:-1], bounds[1:]):
        piece = [x[:, start:stop] for x in args]
        o, state = family.hola_attention(*piece, **options, initial_state=state,
                                         output_final_state=True, **kwargs)
        parts.append(o)
    cat = np.concatenate if isinstance(parts[0], np.ndarray) else \
        __import__("torch").cat
    return cat(parts, 1), state


def _check_states(expected, got, tol=1e-6):
    for name in family.HOLAState._fields:
        a, b = getattr(expected, name), getattr(got, name)
        a, b = (np.asarray(x.detach() if hasattr(x, "detach") else x, np.float64)
                for x in (a, b))
        finite = np.isfinite(a)
        assert np.array_equal(finite, np.isfinite(b)), name
        assert np.array_equal(a[~finite], b[~finite]), name
        assert rel_rms(a[finite], b[finite]) <= tol if finite.any() else True, name


@pytest.mark.parametrize("cuts", [(1,), (7,), (10,), (3, 4, 15)])
def test_carried_state_equals_one_pass(cuts):
    """A prompt in pieces (through the cache, the open block and the
    position) equals one call: outputs and every part of the state."""
    args, options, _ = _inputs(2, 23, 1, 2, 8, 8, seed=14)
    sizes = dict(cache_size=3, block_size=5, chunk_size=16)
    whole, final = family.hola_attention(*args, **options, output_final_state=True, **sizes)
    pieces, end = _chained(args, options, cuts, **sizes)
    assert rel_rms(whole, pieces) <= 1e-6
    _check_states(final, end)
    assert list(end.position) == [23, 23]


def test_decoding_token_by_token():
    args, options, _ = _inputs(1, 13, 2, 2, 8, 8, seed=15)
    sizes = dict(cache_size=2, block_size=4, chunk_size=16)
    whole, final = family.hola_attention(*args, **options, output_final_state=True, **sizes)
    steps, end = _chained(args, options, range(1, 13), **sizes)
    assert rel_rms(whole, steps) <= 1e-5
    _check_states(final, end, tol=1e-5)
    o_ref, _ = reference.hola_attention(*args, **options, cache_size=2, block_size=4)
    assert rel_rms(o_ref, steps) <= 1e-5


def test_packed_final_state_is_each_sequences():
    args, options, _ = _inputs(1, 30, 1, 1, 8, 8, seed=16)
    cu = np.array([0, 11, 11, 30])
    sizes = dict(cache_size=2, block_size=4, chunk_size=16)
    _, packed = family.hola_attention(*args, **options, cu_seqlens=cu,
                                      output_final_state=True, **sizes)
    for n, (start, stop) in enumerate(zip(cu[:-1], cu[1:])):
        mine = family.HOLAState(*(x[n:n + 1] for x in packed))
        if start == stop:  # the empty sequence: nothing written, nothing cached
            assert not mine.state.any() and mine.position[0] == 0
            assert np.isneginf(mine.cache_sizes).all() and np.isneginf(mine.block_sizes).all()
            continue
        _, alone = family.hola_attention(*(x[:, start:stop] for x in args), **options,
                                         output_final_state=True, **sizes)
        _check_states(alone, mine)


def test_gradients_through_a_carried_state():
    """torch autograd through two chained calls (the cache's keys and values
    carried) equals one call's."""
    torch = pytest.importorskip("torch")
    args, options, _ = _inputs(1, 17, 1, 1, 8, 8, seed=17)
    sizes = dict(cache_size=2, block_size=4, chunk_size=16)
    do = torch.from_numpy(np.random.default_rng(3).standard_normal(args[2].shape))
    grads = []
    for cuts in ((), (6,)):
        tensors = [torch.tensor(x, requires_grad=True) for x in args]
        o, _ = _chained(tensors, options, cuts, **sizes)
        (o.double() * do).sum().backward()
        grads.append([t.grad.numpy() for t in tensors])
    for one, two in zip(*grads):
        assert rel_rms(one, two) <= 1e-5


def test_carried_state_errors():
    args, options, _ = _inputs(1, 6, 1, 1, 4, 4, seed=1)
    _, state = family.hola_attention(*args, **options, cache_size=2, block_size=3,
                                     output_final_state=True)
    with pytest.raises(ValueError, match="a tuple of 3"):
        family.hola_attention(*args, **options, initial_state=state[:3])
    with pytest.raises(ValueError, match=r"initial_state.cache_keys must have shape "
                                         r"\(1, 1, 64, 4\)"):
        family.hola_attention(*args, **options, initial_state=state)
    bad = state._replace(block_sizes=np.full_like(state.block_sizes, np.nan))
    with pytest.raises(ValueError, match="finite or -inf"):
        family.hola_attention(*args, **options, cache_size=2, block_size=3, initial_state=bad)
    bad = state._replace(position=np.array([-1]))
    with pytest.raises(ValueError, match="token counts"):
        family.hola_attention(*args, **options, cache_size=2, block_size=3, initial_state=bad)


@pytest.mark.parametrize("change, message", [
    (dict(k=np.zeros((2, 4, 1, 3), np.float32)), "k must be"),
    (dict(v=np.zeros((1, 4, 1, 4), np.float32)), r"v must be \[B, T, HV, V\]"),
    (dict(g=np.zeros((2, 4, 2), np.float32)), "g must be"),
    (dict(beta=np.zeros((2, 3, 1), np.float32)), "beta must be"),
    (dict(cache_weight=np.ones(2, np.float32)), r"cache_weight must have shape \(1,\)"),
    (dict(sink=np.ones((1, 1), np.float32)), "sink must have shape"),
    (dict(gamma_q=np.ones(3, np.float32)), r"gamma_q must have shape \(4,\)"),
    (dict(cache_size=0), "cache_size must be an integer >= 1"),
    (dict(block_size=2.0), "block_size must be an integer >= 1"),
    (dict(cu_seqlens=np.array([0, 4])), "cu_seqlens needs B = 1"),
    (dict(cache="oldest"), "cache must be 'surprise' or 'recent'"),
])
def test_errors(change, message):
    (q, k, v, g, beta), options, _ = _inputs(2, 4, 1, 1, 4, 4)
    args = dict(q=q, k=k, v=v, g=g, beta=beta, cache_weight=options["cache_weight"])
    args.update({name: change.pop(name) for name in list(change) if name in args})
    with pytest.raises(ValueError, match=message):
        family.hola_attention(**args, **change)
