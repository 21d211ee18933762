"""la.family.momentum_delta_rule (Momentum DeltaNet through la's dplr rule
on the stacked state [S + c M; M], in segments) against its fp64
token-by-token reference (``la.reference.momentum_delta_rule``, on S and M
themselves) and fla's naive reference (``recurrent_momentum_delta_rule_ref``
through ``la.fla.chunk_momentum_delta_rule``): the forward tests' shape list,
a fast-decaying momentum (many segments), hard resets, packed sequences, a
carried state, bf16; gradients through torch autograd against central finite
differences of the reference; the errors."""

import importlib.util
import os

import numpy as np
import pytest

from la import family, fla, reference
from la.testing import central_differences, rel_rms

#: (B, T, H, K, V, chunk) as in test_cpu_exec's shape list (one value head
#: per key head: Momentum DeltaNet has no grouped value heads)
CASES = {
    "T<C": (1, 5, 1, 8, 8, 16),
    "T%C!=0,B=2,K!=V": (2, 37, 2, 16, 8, 16),
    "C=64,T=150": (1, 150, 2, 16, 16, 64),
}


def _unit(x):
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def _inputs(B, T, H, K, V, seed=0, momentum_decay=0.3):
    """q, k, p unit vectors; alpha in [0.9, 1], mu in [exp(-momentum_decay), 1]."""
    rng = np.random.default_rng(seed)
    q, k, p = (_unit(rng.standard_normal((B, T, H, K))) for _ in range(3))
    v = rng.standard_normal((B, T, H, V)).astype(np.float32)
    log_alpha = (-rng.uniform(0.0, 0.1, (B, T, H))).astype(np.float32)
    log_mu = (-rng.uniform(0.0, momentum_decay, (B, T, H))).astype(np.float32)
    beta = rng.uniform(0.1, 0.9, (B, T, H)).astype(np.float32)
    eta = rng.uniform(0.1, 0.9, (B, T, H)).astype(np.float32)
    state = (0.3 * rng.standard_normal((2, B, H, K, V))).astype(np.float32)
    return (q, k, v, p, log_alpha, log_mu, beta, eta), state


def _compare(args, tol=1e-5, **kwargs):
    chunk = kwargs.pop("chunk_size", 16)
    o, s = family.momentum_delta_rule(*args, output_final_state=True, chunk_size=chunk,
                                      **kwargs)
    kwargs.pop("max_segment", None)
    o_ref, s_ref = reference.momentum_delta_rule(*args, **kwargs)
    assert o.shape == o_ref.shape and s.shape == s_ref.shape
    assert rel_rms(o_ref, o) <= tol, rel_rms(o_ref, o)
    assert rel_rms(s_ref, s) <= tol, rel_rms(s_ref, s)
    return o, s


@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("case", sorted(CASES))
def test_against_reference(case, with_state):
    B, T, H, K, V, C = CASES[case]
    args, state = _inputs(B, T, H, K, V, seed=len(case))
    _compare(args, chunk_size=C, initial_state=state if with_state else None)


@pytest.mark.parametrize("momentum_decay", [3.0, 30.0])
def test_fast_decaying_momentum(momentum_decay):
    """mu << alpha: c grows like (alpha / mu)^t, the segments are short
    (one token where mu ~ exp(-30)); as accurate as slow momentum."""
    args, state = _inputs(1, 40, 2, 8, 8, seed=3, momentum_decay=momentum_decay)
    _compare(args, initial_state=state)


@pytest.mark.parametrize("max_segment", [1, 7])
def test_segment_length_does_not_change_the_result(max_segment):
    args, state = _inputs(2, 30, 1, 8, 8, seed=4, momentum_decay=0.02)
    one, s_one = family.momentum_delta_rule(*args, initial_state=state,
                                            output_final_state=True, chunk_size=16)
    short, s_short = family.momentum_delta_rule(*args, initial_state=state,
                                                output_final_state=True, chunk_size=16,
                                                max_segment=max_segment)
    assert rel_rms(one, short) <= 1e-5 and rel_rms(s_one, s_short) <= 1e-5


def test_hard_resets():
    """log_alpha = -inf forgets S, log_mu = -inf forgets M (at one token)."""
    args, state = _inputs(1, 33, 1, 8, 8, seed=5)
    args[4][0, 10] = -np.inf
    args[5][0, 20] = -np.inf
    _compare(args, initial_state=state)


def test_packed_sequences_with_an_empty_one():
    args, _ = _inputs(1, 45, 2, 8, 8, seed=6)
    cu = np.array([0, 12, 12, 40, 45])
    state = (0.3 * np.random.default_rng(1).standard_normal((2, 4, 2, 8, 8))).astype(np.float32)
    _, s = _compare(args, cu_seqlens=cu, initial_state=state)
    assert np.array_equal(s[:, 1], state[:, 1])


@pytest.mark.parametrize("cut", [1, 16, 29])
def test_carried_state_equals_one_pass(cut):
    args, state = _inputs(2, 40, 1, 8, 8, seed=7)
    whole, final = family.momentum_delta_rule(*args, initial_state=state,
                                              output_final_state=True, chunk_size=16)
    first, middle = family.momentum_delta_rule(*(x[:, :cut] for x in args), initial_state=state,
                                               output_final_state=True, chunk_size=16)
    second, end = family.momentum_delta_rule(*(x[:, cut:] for x in args), initial_state=middle,
                                             output_final_state=True, chunk_size=16)
    assert rel_rms(whole, np.concatenate([first, second], 1)) <= 1e-5
    assert rel_rms(final, end) <= 1e-5


def test_bf16_inputs():
    torch = pytest.importorskip("torch")
    args, state = _inputs(1, 37, 2, 16, 16, seed=8)
    tensors = [torch.from_numpy(x).bfloat16() if i in (0, 1, 2, 3) else torch.from_numpy(x)
               for i, x in enumerate(args)]
    o = family.momentum_delta_rule(*tensors, chunk_size=16)
    assert o.dtype == torch.bfloat16
    o_ref, _ = reference.momentum_delta_rule(*(x.float().numpy() for x in tensors))
    assert rel_rms(o_ref, o.float().numpy()) <= 1e-2


def _naive():
    spec = importlib.util.find_spec("fla")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("fla-core is not installed (pip install --no-deps fla-core==0.6.0)")
    pytest.importorskip("einops")
    path = os.path.join(spec.submodule_search_locations[0], "ops", "momentum_delta_rule",
                        "naive.py")
    module_spec = importlib.util.spec_from_file_location("fla_naive_momentum", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("fla_options", [dict(), dict(use_qk_l2norm_in_kernel=False,
                                                      use_p_times_alpha=False)])
def test_la_fla_against_fla_naive_reference(fla_options):
    """la.fla's functions with fla's conventions (q, k, p L2-normalised, the
    read key p * alpha, p = k when None) against fla's token-by-token
    reference and its chunked one."""
    torch = pytest.importorskip("torch")
    naive = _naive()
    gen = torch.Generator().manual_seed(9)
    B, T, H, K, V = 2, 45, 2, 16, 16
    q, k, p = (torch.randn(B, T, H, K, generator=gen) for _ in range(3))
    v = torch.randn(B, T, H, V, generator=gen)
    log_alpha = -0.1 * torch.rand(B, T, H, generator=gen)
    log_mu = -0.3 * torch.rand(B, T, H, generator=gen)
    beta, eta = (0.1 + 0.8 * torch.rand(B, T, H, generator=gen) for _ in range(2))
    s0 = 0.3 * torch.randn(2, B, H, K, V, generator=gen)
    o, s = fla.chunk_momentum_delta_rule(q, k, v, log_alpha, log_mu, p, beta, eta,
                                         initial_state=s0, output_final_state=True,
                                         **fla_options)
    l2 = fla_options.get("use_qk_l2norm_in_kernel", True)
    qn, kn, pn = ((x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)) if l2 else x
                  for x in (q, k, p))
    if fla_options.get("use_p_times_alpha", True):
        pn = pn * log_alpha.exp()[..., None]
    o_ref, s_ref = naive.recurrent_momentum_delta_rule_ref(
        qn, kn, v, log_alpha, log_mu, pn, beta, eta, initial_S=s0[0], initial_M=s0[1],
        output_final_state=True)
    assert rel_rms(o_ref.numpy(), o.numpy()) <= 1e-5
    assert rel_rms(s_ref.numpy(), s.numpy()) <= 1e-5
    o_chunk, _ = naive.chunk_momentum_delta_rule_ref(
        qn, kn, v, pn, log_alpha, log_mu, beta, eta, initial_S=s0[0], initial_M=s0[1],
        chunk_size=16)
    assert rel_rms(o_chunk.numpy(), o.numpy()) <= 1e-4
    o2, none = fla.fused_recurrent_momentum_delta_rule(q, k, v, log_alpha, log_mu, p, beta,
                                                       eta, initial_state=s0, **fla_options)
    assert none is None and rel_rms(o.numpy(), o2.numpy()) <= 1e-6


def test_gradients_against_finite_differences():
    """torch autograd through the composition (la's derived dplr gradient per
    segment, torch for the basis changes) against central finite
    differences of the fp64 reference, for every input."""
    torch = pytest.importorskip("torch")
    args, state = _inputs(1, 8, 1, 3, 2, seed=10, momentum_decay=1.0)
    names = ("q", "k", "v", "p", "log_alpha", "log_mu", "beta", "eta", "s0")
    base = dict(zip(names, list(args) + [state]))
    rng = np.random.default_rng(11)
    do = rng.standard_normal(args[2].shape)
    ds = rng.standard_normal(state.shape)

    def loss(name, x):
        values = dict(base, **{name: x})
        o, s = reference.momentum_delta_rule(*(values[n] for n in names[:-1]),
                                             initial_state=values["s0"])
        return float((o * do).sum() + (s * ds).sum())

    tensors = {n: torch.tensor(x, requires_grad=True) for n, x in base.items()}
    o, s = family.momentum_delta_rule(*(tensors[n] for n in names[:-1]),
                                      initial_state=tensors["s0"], output_final_state=True,
                                      chunk_size=16, max_segment=3)
    ((o.double() * torch.from_numpy(do)).sum()
     + (s.double() * torch.from_numpy(ds)).sum()).backward()
    for name, x in base.items():
        expected = central_differences(lambda y: loss(name, y), x)
        got = tensors[name].grad.numpy()
        assert rel_rms(expected, got) <= 1e-4, (name, rel_rms(expected, got))


@pytest.mark.parametrize("change, message", [
    (dict(k=np.zeros((2, 4, 1, 3), np.float32)), "k must be"),
    (dict(p=np.zeros((2, 4, 2, 4), np.float32)), "p must be"),
    (dict(v=np.zeros((2, 4, 2, 4), np.float32)), r"v must be \[B, T, H, V\]"),
    (dict(beta=np.zeros((2, 3, 1), np.float32)), "beta must be"),
    (dict(log_alpha=np.full((2, 4, 1), 0.5, np.float32)), "log_alpha holds log-space decays"),
    (dict(log_mu=np.full((2, 4, 1), 0.5, np.float32)), "log_mu holds log-space decays"),
    (dict(max_segment=0), "max_segment must be an integer >= 1"),
    (dict(cu_seqlens=np.array([0, 4])), "cu_seqlens needs B = 1"),
    (dict(initial_state=np.zeros((2, 2, 1, 4, 3), np.float32)), "initial_state must be"),
])
def test_errors(change, message):
    args, _ = _inputs(2, 4, 1, 4, 4)
    named = dict(zip(("q", "k", "v", "p", "log_alpha", "log_mu", "beta", "eta"), args))
    named.update({name: change.pop(name) for name in list(change) if name in named})
    with pytest.raises(ValueError, match=message):
        family.momentum_delta_rule(**named, **change)
