"""la.family: the family members that enter la as compositions of la ops.
Mixture-of-Memories against its fp64 token-by-token reference
(``la.reference.mixture_of_memories``, independent of the composition: it
loops over memories and skips the unrouted ones), for every memory kind,
packed sequences and states; gradients through torch autograd against
central finite differences of the reference."""

import numpy as np
import pytest

from la import family, reference
from la.testing import rel_rms


def _routing(B, T, M, top_k, seed):
    """Top-k routing weights (a softmax over the chosen memories), zeros
    elsewhere, as MoM's router gives them."""
    rng = np.random.default_rng(seed)
    scores = rng.standard_normal((B, T, M))
    chosen = np.argsort(-scores, axis=-1)[..., :top_k]
    weights = np.zeros((B, T, M))
    top = np.take_along_axis(scores, chosen, -1)
    top = np.exp(top - top.max(-1, keepdims=True))
    np.put_along_axis(weights, chosen, top / top.sum(-1, keepdims=True), -1)
    return weights.astype(np.float32)


def _central_differences(loss, base, name, indices=None, step=1e-6):
    """d loss / d base[name] by central differences, at ``indices`` (all by
    default; zero elsewhere)."""
    grad = np.zeros_like(base[name])
    for index in np.ndindex(grad.shape) if indices is None else indices:
        plus, minus = dict(base), dict(base)
        plus[name], minus[name] = base[name].copy(), base[name].copy()
        plus[name][index] += step
        minus[name][index] -= step
        grad[index] = (loss(plus) - loss(minus)) / (2 * step)
    return grad


def _inputs(memory, B, T, M, H, K, V, seed, top_k=2, N=None):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, T, H, K)).astype(np.float32)
    k = rng.standard_normal((B, T, M, H, K))
    if memory in ("deltanet", "gated_deltanet", "kda"):
        k = k / np.linalg.norm(k, axis=-1, keepdims=True)
    v = rng.standard_normal((B, T, M, H, V)).astype(np.float32)
    kwargs = {}
    if memory in ("mamba2", "gated_deltanet"):
        kwargs["g"] = (-np.log1p(np.exp(-rng.standard_normal((B, T, M, H)))) / 4
                       ).astype(np.float32)
    if memory in ("gla", "kda"):
        kwargs["g"] = (-np.log1p(np.exp(-rng.standard_normal((B, T, M, H, K)))) / 4
                       ).astype(np.float32)
    if memory in ("deltanet", "gated_deltanet", "kda"):
        kwargs["beta"] = (1 / (1 + np.exp(-rng.standard_normal((B, T, M, H))))
                          ).astype(np.float32)
    s0 = (0.1 * rng.standard_normal((N or B, M, H, K, V))).astype(np.float32)
    return q, k.astype(np.float32), v, _routing(B, T, M, top_k, seed + 1), kwargs, s0


@pytest.mark.parametrize("memory", ["linear", "gla", "mamba2", "deltanet",
                                    "gated_deltanet", "kda"])
def test_mixture_of_memories_every_memory_kind(memory):
    q, k, v, routing, kwargs, s0 = _inputs(memory, 2, 37, 4, 2, 8, 6, seed=3)
    o, s = family.mixture_of_memories(q, k, v, routing, memory, **kwargs, initial_state=s0,
                                      output_final_state=True, chunk_size=16)
    o_ref, s_ref = reference.mixture_of_memories(q, k, v, routing, memory, **kwargs,
                                                 initial_state=s0)
    assert o.shape == (2, 37, 2, 6) and s.shape == (2, 4, 2, 8, 6)
    assert rel_rms(o_ref, o) <= 1e-5 and rel_rms(s_ref, s) <= 1e-5


def test_routing_is_data():
    """A memory no token is routed to keeps its initial state; a new routing
    runs the same kernel (no compile)."""
    import la
    q, k, v, routing, kwargs, s0 = _inputs("gated_deltanet", 1, 20, 3, 1, 8, 4, seed=5)
    routing[..., 2] = 0.0
    routing /= routing.sum(-1, keepdims=True)
    _, s = family.mixture_of_memories(q, k, v, routing, **kwargs, initial_state=s0,
                                      output_final_state=True)
    np.testing.assert_array_equal(s[:, 2], s0[:, 2])
    before = la.cache_info()["misses"]
    o, _ = family.mixture_of_memories(q, k, v, _routing(1, 20, 3, 1, seed=9), **kwargs,
                                      initial_state=s0, output_final_state=True)
    assert la.cache_info()["misses"] == before
    o_ref, _ = reference.mixture_of_memories(q, k, v, _routing(1, 20, 3, 1, seed=9),
                                             **kwargs, initial_state=s0)
    assert rel_rms(o_ref, o) <= 1e-5


def test_mixture_of_memories_packed_sequences():
    q, k, v, routing, kwargs, s0 = _inputs("kda", 1, 40, 3, 2, 8, 4, seed=7, N=3)
    cu = np.array([0, 13, 13, 40], dtype=np.int32)
    o, s = family.mixture_of_memories(q, k, v, routing, "kda", **kwargs, initial_state=s0,
                                      output_final_state=True, cu_seqlens=cu, chunk_size=8)
    o_ref, s_ref = reference.mixture_of_memories(q, k, v, routing, "kda", **kwargs,
                                                 initial_state=s0, cu_seqlens=cu)
    assert rel_rms(o_ref, o) <= 1e-5 and rel_rms(s_ref, s) <= 1e-5


def test_mixture_of_memories_unrouted_tokens():
    """Tokens routed to no memory (zero output, every memory kept), a
    routing that sends every token everywhere, and one that routes nothing
    (no la call: zeros and the initial state)."""
    q, k, v, routing, kwargs, s0 = _inputs("gated_deltanet", 2, 30, 3, 2, 8, 4, seed=15)
    routing[:, 5:9] = 0.0
    routing[1, 20:] = 0.0
    o, s = family.mixture_of_memories(q, k, v, routing, **kwargs, initial_state=s0,
                                      output_final_state=True, chunk_size=8)
    o_ref, s_ref = reference.mixture_of_memories(q, k, v, routing, **kwargs,
                                                 initial_state=s0)
    assert rel_rms(o_ref, o) <= 1e-5 and rel_rms(s_ref, s) <= 1e-5
    assert np.all(o[:, 5:9] == 0) and np.all(o[1, 20:] == 0)
    dense = np.full_like(routing, 1.0 / 3)
    o, s = family.mixture_of_memories(q, k, v, dense, **kwargs, initial_state=s0,
                                      output_final_state=True)
    o_ref, s_ref = reference.mixture_of_memories(q, k, v, dense, **kwargs, initial_state=s0)
    assert rel_rms(o_ref, o) <= 1e-5 and rel_rms(s_ref, s) <= 1e-5
    o, s = family.mixture_of_memories(q, k, v, np.zeros_like(routing), **kwargs,
                                      initial_state=s0, output_final_state=True)
    assert np.all(o == 0) and np.array_equal(s, s0)


def test_mixture_of_memories_gradients():
    """Autograd through the composition (la's derived backward and torch's
    products) against central differences of the fp64 reference."""
    torch = pytest.importorskip("torch")
    q, k, v, routing, kwargs, _ = _inputs("gated_deltanet", 1, 7, 3, 1, 4, 3, seed=11)
    leaves = {"q": q, "k": k, "v": v, "routing": routing, **kwargs}
    tensors = {n: torch.tensor(x, dtype=torch.float32, requires_grad=True)
               for n, x in leaves.items()}
    do = np.random.default_rng(12).standard_normal((1, 7, 1, 3))
    o, _ = family.mixture_of_memories(tensors["q"], tensors["k"], tensors["v"],
                                      tensors["routing"], "gated_deltanet",
                                      g=tensors["g"], beta=tensors["beta"])
    (o * torch.tensor(do, dtype=torch.float32)).sum().backward()
    base = {n: np.asarray(x, np.float64) for n, x in leaves.items()}

    def loss(values):
        out, _ = reference.mixture_of_memories(values["q"], values["k"], values["v"],
                                               values["routing"], "gated_deltanet",
                                               g=values["g"], beta=values["beta"])
        return float((out * do).sum())

    for name in ("q", "k", "v", "g", "beta"):
        expected = _central_differences(loss, base, name)
        assert rel_rms(expected, tensors[name].grad.numpy()) <= 1e-4, name
    # the routing weights of the chosen memories (the others' are not
    # differentiable through the mask: the mask is data)
    chosen = routing != 0
    expected = _central_differences(loss, base, "routing", zip(*np.nonzero(chosen)))
    got = tensors["routing"].grad.numpy()
    assert rel_rms(expected[chosen], got[chosen]) <= 1e-4


def test_errors():
    q, k, v, routing, kwargs, _ = _inputs("gated_deltanet", 1, 5, 2, 1, 4, 4, seed=13)
    with pytest.raises(ValueError, match="unknown memory kind"):
        family.mixture_of_memories(q, k, v, routing, "rwkv7")
    with pytest.raises(ValueError, match="routing must be"):
        family.mixture_of_memories(q, k, v, routing[:, :, :1], **kwargs)
    with pytest.raises(ValueError, match="need beta"):
        family.mixture_of_memories(q, k, v, routing, g=kwargs["g"])
    with pytest.raises(ValueError, match="k must be"):
        family.mixture_of_memories(q, k[:, :, 0], v, routing, **kwargs)


# --------------------------------------------------------------------------
# Hedgehog features and the sliding-window hybrid (LoLCATs)
# --------------------------------------------------------------------------

def _hybrid_inputs(B, T, H, K, V, F, seed):
    rng = np.random.default_rng(seed)
    q, k = (rng.standard_normal((B, T, H, K)).astype(np.float32) for _ in range(2))
    v = rng.standard_normal((B, T, H, V)).astype(np.float32)
    weight = (rng.standard_normal((H, K, F)) / np.sqrt(K)).astype(np.float32)
    bias = (0.1 * rng.standard_normal((H, F))).astype(np.float32)
    return q, k, v, weight, bias


def test_hedgehog_features_are_two_softmaxes():
    q, _, _, weight, bias = _hybrid_inputs(1, 5, 2, 8, 4, 6, seed=20)
    phi = family.hedgehog_features(q, weight, bias)
    assert phi.shape == (1, 5, 2, 12) and np.all(phi > 0)
    np.testing.assert_allclose(phi[..., :6].sum(-1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(phi[..., 6:].sum(-1), 1.0, rtol=1e-6)
    z = np.einsum("bthd,hdf->bthf", q.astype(np.float64), weight) + bias
    np.testing.assert_allclose(phi[..., :6], np.exp(z) / np.exp(z).sum(-1, keepdims=True),
                               rtol=1e-5)


@pytest.mark.parametrize("window,T", [(4, 37), (16, 37), (1, 20), (64, 20)])
def test_sliding_window_hybrid_against_reference(window, T):
    """Windows shorter and longer than T, and of one token."""
    q, k, v, weight, bias = _hybrid_inputs(2, T, 2, 8, 6, 8, seed=21)
    fq = family.hedgehog_features(q, weight, bias)
    fk = family.hedgehog_features(k, weight, bias)
    o = family.sliding_window_hybrid(q, k, v, fq, fk, window, chunk_size=16)
    o_ref = reference.sliding_window_hybrid(q, k, v, fq, fk, window)
    assert o.shape == (2, T, 2, 6)
    assert rel_rms(o_ref, o) <= 1e-5


def test_sliding_window_hybrid_large_scores_do_not_overflow():
    q, k, v, weight, bias = _hybrid_inputs(1, 24, 1, 8, 4, 8, seed=22)
    q, k = 12 * q, 12 * k  # window scores up to ~ +-300
    fq = family.hedgehog_features(q, weight, bias)
    fk = family.hedgehog_features(k, weight, bias)
    o = family.sliding_window_hybrid(q, k, v, fq, fk, 3, chunk_size=8)
    assert np.all(np.isfinite(o))
    o_ref = reference.sliding_window_hybrid(q.astype(np.float64), k, v, fq, fk, 3)
    finite = np.isfinite(o_ref)
    assert rel_rms(o_ref[finite], o[finite]) <= 1e-4


@pytest.mark.parametrize("T,window", [(9, 3), (40, 20), (40, 1), (30, 40), (70, 18)])
def test_sliding_window_hybrid_gradients(T, window):
    """torch autograd through the composition (la's derived backward for the
    linear part, torch for the window over blocks of 16 to 64 tokens and for
    the feature map) against central differences of the fp64 reference with
    the feature map in NumPy: windows inside one block, reaching the block
    before, of one token, longer than T, and blocks past the first two."""
    torch = pytest.importorskip("torch")
    q, k, v, weight, bias = _hybrid_inputs(1, T, 1, 4, 3, 4, seed=23)
    leaves = {"q": q, "k": k, "v": v, "weight": weight}
    t = {n: torch.tensor(x, requires_grad=True) for n, x in leaves.items()}
    bias_t = torch.tensor(bias)
    fq = family.hedgehog_features(t["q"], t["weight"], bias_t)
    fk = family.hedgehog_features(t["k"], t["weight"], bias_t)
    o = family.sliding_window_hybrid(t["q"], t["k"], t["v"], fq, fk, window, chunk_size=4)
    do = np.random.default_rng(24).standard_normal(o.shape)
    (o * torch.tensor(do, dtype=torch.float32)).sum().backward()

    def features(x, w):
        z = np.einsum("bthd,hdf->bthf", x, w) + bias
        ez, emz = np.exp(z - z.max(-1, keepdims=True)), np.exp(-z + z.min(-1, keepdims=True))
        return np.concatenate([ez / ez.sum(-1, keepdims=True),
                               emz / emz.sum(-1, keepdims=True)], -1)

    def loss(x):
        out = reference.sliding_window_hybrid(x["q"], x["k"], x["v"], features(x["q"], x["weight"]),
                                              features(x["k"], x["weight"]), window)
        return float((out * do).sum())

    base = {n: np.asarray(x, np.float64) for n, x in leaves.items()}
    for name in leaves:
        expected = _central_differences(loss, base, name)
        assert rel_rms(expected, t[name].grad.numpy()) <= 1e-4, name


# --------------------------------------------------------------------------
# log-linear attention
# --------------------------------------------------------------------------

def _log_linear_inputs(B, T, H, HV, K, V, seed, levels=None):
    rng = np.random.default_rng(seed)
    q, k = (rng.standard_normal((B, T, H, K)).astype(np.float32) for _ in range(2))
    v = rng.standard_normal((B, T, HV, V)).astype(np.float32)
    g = (-np.log1p(np.exp(-rng.standard_normal((B, T, HV)))) / 4).astype(np.float32)
    L = levels or int(np.ceil(np.log2(T))) + 1
    level_scales = rng.uniform(0.2, 1.5, (B, T, HV, L)).astype(np.float32)
    return q, k, v, g, level_scales


@pytest.mark.parametrize("T", [1, 2, 5, 37, 64])
def test_log_linear_attention_against_reference(T):
    """T of one token, a power of two and not; grouped value heads; extra
    levels ignored."""
    q, k, v, g, lam = _log_linear_inputs(2, T, 2, 4, 8, 6, seed=30 + T,
                                         levels=int(np.ceil(np.log2(max(T, 2)))) + 2)
    o = family.log_linear_attention(q, k, v, g, lam, scale=0.5, chunk_size=16)
    o_ref = reference.log_linear_attention(q, k, v, g, lam, scale=0.5)
    assert o.shape == (2, T, 4, 6)
    assert rel_rms(o_ref, o) <= 1e-5
    o = family.log_linear_attention(q, k, v, None, lam, chunk_size=16)
    assert rel_rms(reference.log_linear_attention(q, k, v, None, lam), o) <= 1e-5


def test_log_linear_attention_levels_one_by_one():
    """Each level alone (the others' scales zero) reads exactly its Fenwick
    bucket: the composition's blocks and masks against the pairwise
    reference, level by level."""
    q, k, v, g, lam = _log_linear_inputs(1, 23, 1, 1, 4, 3, seed=40)
    for level in range(lam.shape[-1]):
        only = np.zeros_like(lam)
        only[..., level] = lam[..., level]
        o = family.log_linear_attention(q, k, v, g, only, chunk_size=8)
        o_ref = reference.log_linear_attention(q, k, v, g, only)
        assert rel_rms(o_ref, o) <= 1e-5, level


def test_log_linear_attention_errors():
    q, k, v, g, lam = _log_linear_inputs(1, 9, 1, 1, 4, 3, seed=41)
    with pytest.raises(ValueError, match="L >= 5 levels"):
        family.log_linear_attention(q, k, v, g, lam[..., :4])
    with pytest.raises(ValueError, match="g must be"):
        family.log_linear_attention(q, k, v, g[:, :, :, None], lam)
    with pytest.raises(ValueError, match="variant must be one of"):
        family.log_linear_attention(q, k, v, g, lam, variant="dplr")
    beta = np.full((1, 9, 1), 0.5, np.float32)
    with pytest.raises(ValueError, match="gated_deltanet needs beta"):
        family.log_linear_attention(q, k, v, g, lam, variant="gated_deltanet")
    with pytest.raises(ValueError, match="mamba2 takes no beta"):
        family.log_linear_attention(q, k, v, g, lam, beta=beta)
    with pytest.raises(ValueError, match="kda needs a gate g"):
        family.log_linear_attention(q, k, v, None, lam, variant="kda", beta=beta)
    with pytest.raises(ValueError, match=r"g must be \[B, T, H, K\]"):
        family.log_linear_attention(q, k, v, g, lam, variant="kda", beta=beta)
    with pytest.raises(ValueError, match="beta must be"):
        family.log_linear_attention(q, k, v, g, lam, variant="gated_deltanet",
                                    beta=beta[:, :5])
    with pytest.raises(ValueError, match="cu_seqlens must rise from 0 to T = 9"):
        family.log_linear_attention(q, k, v, g, lam, cu_seqlens=[0, 4, 8])
    with pytest.raises(ValueError, match="cu_seqlens must rise"):
        family.log_linear_attention(q, k, v, g, lam, cu_seqlens=[0, 6, 4, 9])
    q2, k2, v2, g2, lam2 = _log_linear_inputs(2, 9, 1, 1, 4, 3, seed=42)
    with pytest.raises(ValueError, match="cu_seqlens needs B = 1"):
        family.log_linear_attention(q2, k2, v2, g2, lam2, cu_seqlens=[0, 9])


# --------------------------------------------------------------------------
# log-linear attention over the other bases (Gated DeltaNet, KDA, ...)
# --------------------------------------------------------------------------

def _log_linear_base_inputs(variant, B, T, H, HV, K, V, seed, per_value_head=False):
    """q, k (L2-normalised: the delta rule's keys), v, g, beta and
    level_scales for log-linear attention over ``variant``."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, T, H, K)).astype(np.float32)
    k = rng.standard_normal((B, T, H, K))
    k = (k / np.linalg.norm(k, axis=-1, keepdims=True)).astype(np.float32)
    v = rng.standard_normal((B, T, HV, V)).astype(np.float32)
    heads = HV if per_value_head else H
    delta, gate = family._LOG_LINEAR[variant]
    g = None
    if gate is not None:
        shape = (B, T, heads) + ((K,) if gate == "channel" else ())
        g = (-np.log1p(np.exp(-rng.standard_normal(shape))) / 4).astype(np.float32)
    beta = rng.uniform(0.05, 0.95, (B, T, heads)).astype(np.float32) if delta else None
    levels = int(np.ceil(np.log2(max(T, 2)))) + 1
    level_scales = rng.uniform(0.2, 1.5, (B, T, HV, levels)).astype(np.float32)
    return q, k, v, g, beta, level_scales


LOG_LINEAR_BASES = ["linear", "mamba2", "gla", "deltanet", "gated_deltanet", "kda"]


@pytest.mark.parametrize("variant", LOG_LINEAR_BASES)
@pytest.mark.parametrize("T", [1, 6, 37, 64])
def test_log_linear_over_every_base(variant, T):
    """Log-linear attention over each base recurrence against the pairwise
    fp64 reference (the transitions carried from t back to s one token at a
    time): T of one token, below, across and at a power of two, B = 2,
    grouped value heads, K != V, gates and beta per key head."""
    q, k, v, g, beta, lam = _log_linear_base_inputs(variant, 2, T, 2, 4, 8, 6, seed=60 + T)
    o = family.log_linear_attention(q, k, v, g, lam, variant=variant, beta=beta, scale=0.5,
                                    chunk_size=16)
    o_ref = reference.log_linear_attention(q, k, v, g, lam, scale=0.5, beta=beta)
    assert o.shape == (2, T, 4, 6)
    assert rel_rms(o_ref, o) <= 1e-5


@pytest.mark.parametrize("variant", LOG_LINEAR_BASES)
def test_log_linear_across_blocks(variant):
    """T = 150 spans three aligned blocks of 64 tokens (their levels 1-6 as
    one masked product per block, levels 7 and 8 as la calls), the last
    one partial; B = 2, grouped value heads, K != V. Against the pairwise
    fp64 reference, and torch's path against NumPy's."""
    q, k, v, g, beta, lam = _log_linear_base_inputs(variant, 2, 150, 2, 4, 8, 6, seed=80)
    o = family.log_linear_attention(q, k, v, g, lam, variant=variant, beta=beta, scale=0.5,
                                    chunk_size=16)
    o_ref = reference.log_linear_attention(q, k, v, g, lam, scale=0.5, beta=beta)
    assert rel_rms(o_ref, o) <= 1e-5
    torch = pytest.importorskip("torch")
    as_tensor = (lambda x: None if x is None else torch.tensor(x))
    o_torch = family.log_linear_attention(*map(as_tensor, (q, k, v, g, lam)), variant=variant,
                                          beta=as_tensor(beta), scale=0.5, chunk_size=16)
    assert rel_rms(o, o_torch.numpy()) <= 1e-6


@pytest.mark.parametrize("variant", ["gated_deltanet", "mamba2", "gla"])
def test_log_linear_carried_across_blocks(variant):
    """Pieces cut on block boundaries (64, 128: those pieces take the block
    products; the last one, 172 tokens from 128, opens levels 7 and 8 whose
    blocks began in earlier pieces) and inside one (100), the state
    carried: equal to the whole sequence's reference."""
    q, k, v, g, beta, lam = _log_linear_base_inputs(variant, 1, 300, 1, 2, 8, 6, seed=81)
    o_ref = reference.log_linear_attention(q, k, v, g, lam, beta=beta)
    bounds = [0, 64, 100, 128, 300]
    outputs, state = [], None
    for start, end in zip(bounds[:-1], bounds[1:]):
        piece = [None if x is None else x[:, start:end] for x in (q, k, v, g, beta, lam)]
        o, state = family.log_linear_attention(*piece[:4], piece[5], variant=variant,
                                               beta=piece[4], start=start,
                                               initial_state=state, output_final_state=True)
        outputs.append(o)
    assert rel_rms(o_ref, np.concatenate(outputs, 1)) <= 1e-5


@pytest.mark.parametrize("variant", ["gated_deltanet", "kda"])
def test_log_linear_gates_per_value_head(variant):
    """fla's Gated DeltaNet and KDA take g and beta per value head."""
    q, k, v, g, beta, lam = _log_linear_base_inputs(variant, 1, 29, 1, 3, 8, 4, seed=70,
                                                    per_value_head=True)
    o = family.log_linear_attention(q, k, v, g, lam, variant=variant, beta=beta, chunk_size=8)
    o_ref = reference.log_linear_attention(q, k, v, g, lam, beta=beta)
    assert rel_rms(o_ref, o) <= 1e-5


@pytest.mark.parametrize("variant", ["gated_deltanet", "kda", "deltanet"])
def test_log_linear_with_unit_scales_is_the_base(variant):
    """Every level weighted 1 is the base recurrence itself (the Fenwick
    buckets partition the tokens before t): against la.reference's plain
    token-by-token delta rule, independent of the level arithmetic."""
    q, k, v, g, beta, lam = _log_linear_base_inputs(variant, 2, 45, 2, 2, 8, 5, seed=71)
    o = family.log_linear_attention(q, k, v, g, np.ones_like(lam), variant=variant, beta=beta,
                                    scale=0.3, chunk_size=16)
    gate = family._LOG_LINEAR[variant][1] or "none"
    o_ref, _ = reference.recurrence(q, k, v, update="delta", gate=gate, g=g, beta=beta,
                                    scale=0.3)
    assert rel_rms(o_ref, o) <= 1e-5


def test_log_linear_gated_deltanet_levels_one_by_one():
    """Each level alone reads exactly its bucket through the delta rule's
    transitions (its tokens' erases and decays up to t)."""
    q, k, v, g, beta, lam = _log_linear_base_inputs("gated_deltanet", 1, 23, 1, 1, 4, 3,
                                                    seed=72)
    for level in range(lam.shape[-1]):
        only = np.zeros_like(lam)
        only[..., level] = lam[..., level]
        o = family.log_linear_attention(q, k, v, g, only, variant="gated_deltanet",
                                        beta=beta, chunk_size=8)
        o_ref = reference.log_linear_attention(q, k, v, g, only, beta=beta)
        assert rel_rms(o_ref, o) <= 1e-5, level


@pytest.mark.parametrize("variant", ["mamba2", "gated_deltanet"])
def test_log_linear_packed_sequences(variant):
    """cu_seqlens: each sequence's buckets counted from its own first token
    (an empty sequence, one of one token, lengths across powers of two),
    against the reference and against each sequence run alone."""
    q, k, v, g, beta, lam = _log_linear_base_inputs(variant, 1, 40, 2, 4, 8, 6, seed=73)
    cu = np.array([0, 9, 9, 10, 27, 40])
    o = family.log_linear_attention(q, k, v, g, lam, variant=variant, beta=beta,
                                    cu_seqlens=cu, chunk_size=8)
    o_ref = reference.log_linear_attention(q, k, v, g, lam, beta=beta, cu_seqlens=cu)
    assert rel_rms(o_ref, o) <= 1e-5
    for start, end in zip(cu[:-1], cu[1:]):
        if start == end:
            continue
        part = [None if x is None else x[:, start:end] for x in (q, k, v, g, beta)]
        alone = family.log_linear_attention(*part[:4], lam[:, start:end], variant=variant,
                                            beta=part[4], chunk_size=8)
        assert rel_rms(alone, o[:, start:end]) <= 1e-6


def test_log_linear_gated_deltanet_gradients():
    """Autograd through the composition (la's derived delta-rule backward
    per level) against central differences of the fp64 pairwise reference,
    for every input, packed sequences included."""
    torch = pytest.importorskip("torch")
    q, k, v, g, beta, lam = _log_linear_base_inputs("gated_deltanet", 1, 11, 1, 2, 4, 3,
                                                    seed=74)
    cu = np.array([0, 4, 11])
    leaves = {"q": q, "k": k, "v": v, "g": g, "beta": beta, "level_scales": lam}
    tensors = {n: torch.tensor(x, requires_grad=True) for n, x in leaves.items()}
    do = np.random.default_rng(75).standard_normal((1, 11, 2, 3))
    o = family.log_linear_attention(tensors["q"], tensors["k"], tensors["v"], tensors["g"],
                                    tensors["level_scales"], variant="gated_deltanet",
                                    beta=tensors["beta"], cu_seqlens=cu, chunk_size=4)
    (o * torch.tensor(do, dtype=torch.float32)).sum().backward()
    base = {n: np.asarray(x, np.float64) for n, x in leaves.items()}

    def loss(values):
        out = reference.log_linear_attention(values["q"], values["k"], values["v"],
                                             values["g"], values["level_scales"],
                                             beta=values["beta"], cu_seqlens=cu)
        return float((out * do).sum())

    for name in leaves:
        expected = _central_differences(loss, base, name)
        assert rel_rms(expected, tensors[name].grad.numpy()) <= 1e-4, name


@pytest.mark.parametrize("variant", ["mamba2", "gated_deltanet", "kda"])
@pytest.mark.parametrize("cuts", [[13], [16, 17], list(range(1, 45))],
                         ids=["two-pieces", "at-a-boundary", "token-by-token"])
def test_log_linear_carried_state(variant, cuts):
    """A sequence in pieces (``start``, the Fenwick-tree state carried from
    piece to piece): a cut mid-block, cuts on a block boundary and one token
    after it, and decoding token by token, against the pairwise reference of
    the whole sequence. The state grows a level when the sequence passes a
    power of two (its top level stands for every level above)."""
    q, k, v, g, beta, lam = _log_linear_base_inputs(variant, 2, 45, 1, 2, 8, 6, seed=76)
    o_ref = reference.log_linear_attention(q, k, v, g, lam, beta=beta)
    bounds = [0] + cuts + [45]
    outputs, state = [], None
    for start, end in zip(bounds[:-1], bounds[1:]):
        piece = [None if x is None else x[:, start:end] for x in (q, k, v, g, beta, lam)]
        o, state = family.log_linear_attention(*piece[:4], piece[5], variant=variant,
                                               beta=piece[4], start=start,
                                               initial_state=state, output_final_state=True,
                                               chunk_size=8)
        levels = int(np.ceil(np.log2(end))) + 1 if end > 1 else 1
        assert state.shape == (2, levels, 2, 8, 6)
        outputs.append(o)
    assert rel_rms(o_ref, np.concatenate(outputs, 1)) <= 1e-5


def test_log_linear_final_state_levels():
    """After 32 tokens every level's block of 2, ..., 32 is closed (zero
    state) and the top level (blocks of 64) holds the plain recurrence's
    state; after 12 tokens the blocks of 2 and 4 are closed, and level 3's
    block [8, 16) holds its tokens 8..11, written from a zero state."""
    q, k, v, g, beta, lam = _log_linear_base_inputs("gated_deltanet", 1, 32, 1, 1, 4, 3,
                                                    seed=77)
    _, state = family.log_linear_attention(q, k, v, g, lam, variant="gated_deltanet",
                                           beta=beta, output_final_state=True)
    assert state.shape == (1, 6, 1, 4, 3)
    assert not state[:, :5].any()
    _, plain = reference.recurrence(q, k, v, update="delta", gate="scalar", g=g, beta=beta,
                                    scale=1.0)
    assert rel_rms(plain, state[:, 5]) <= 1e-5
    _, state = family.log_linear_attention(q[:, :12], k[:, :12], v[:, :12], g[:, :12],
                                           lam[:, :12], variant="gated_deltanet",
                                           beta=beta[:, :12], output_final_state=True)
    assert not state[:, :2].any() and state[:, 2].any()
    # level 3's block [8, 16): tokens 8..11 written, from a zero state
    _, block = reference.recurrence(q[:, 8:12], k[:, 8:12], v[:, 8:12], update="delta",
                                    gate="scalar", g=g[:, 8:12], beta=beta[:, 8:12], scale=1.0)
    assert rel_rms(block, state[:, 2]) <= 1e-5


def test_log_linear_carried_state_errors():
    q, k, v, g, lam = _log_linear_inputs(1, 9, 1, 1, 4, 3, seed=43)
    for bad in (-1, 2.0, True):
        with pytest.raises(ValueError, match="start must be a token position"):
            family.log_linear_attention(q, k, v, g, lam, start=bad)
    with pytest.raises(ValueError, match=r"L >= 6 levels"):
        family.log_linear_attention(q, k, v, g, lam, start=20)
    with pytest.raises(ValueError, match="initial_state must be"):
        family.log_linear_attention(q, k, v, g, lam, initial_state=np.zeros((1, 1, 4, 3)))
    with pytest.raises(ValueError, match=r"one per packed sequence \(2\)"):
        family.log_linear_attention(q, k, v, g, lam, cu_seqlens=[0, 4, 9], start=[0, 1, 2])
    with pytest.raises(ValueError, match="start must be a token position"):
        family.log_linear_attention(q, k, v, g, lam, cu_seqlens=[0, 4, 9], start=[0, -1])
    with pytest.raises(ValueError, match=r"initial_state must be \[N, L', HV, K, V\]"):
        family.log_linear_attention(q, k, v, g, lam, cu_seqlens=[0, 4, 9],
                                    initial_state=np.zeros((1, 2, 1, 4, 3), np.float32))
    with pytest.raises(ValueError, match=r"L >= 6 levels"):
        family.log_linear_attention(q, k, v, g, lam, cu_seqlens=[0, 4, 9], start=[0, 20])


@pytest.mark.parametrize("variant", ["mamba2", "gated_deltanet"])
def test_log_linear_packed_carried_state(variant):
    """Packed sequences in pieces: each sequence's Fenwick-tree state
    carried from call to call (``start`` per sequence, ``initial_state``
    [N, L', ...]), sequences at different positions and of different
    lengths (one empty in a piece, one passing a power of two), then
    decoding one token per sequence, against the pairwise reference of
    every whole sequence; and one call with a carried state equal to the
    sequences run alone."""
    lengths = [[5, 0, 3], [9, 4, 1], [1, 1, 1], [1, 1, 1]]
    total = np.sum(lengths, 0)
    rng_inputs = _log_linear_base_inputs(variant, 3, int(total.max()), 1, 2, 8, 6, seed=78)
    q, k, v, g, beta, lam = rng_inputs
    # each sequence's own whole-sequence reference
    refs = [reference.log_linear_attention(*[None if x is None else x[i:i + 1, :total[i]]
                                             for x in (q, k, v, g)],
                                           lam[i:i + 1, :total[i]],
                                           beta=None if beta is None else
                                           beta[i:i + 1, :total[i]])
            for i in range(3)]
    done = np.zeros(3, int)
    state, outputs = None, [[] for _ in range(3)]
    for piece in lengths:
        cu = np.concatenate([[0], np.cumsum(piece)])

        def pack(x):
            return None if x is None else np.concatenate(
                [x[i:i + 1, done[i]:done[i] + piece[i]] for i in range(3)], 1)

        o, state = family.log_linear_attention(pack(q), pack(k), pack(v), pack(g), pack(lam),
                                               variant=variant, beta=pack(beta),
                                               cu_seqlens=cu, start=list(done),
                                               initial_state=state, output_final_state=True,
                                               chunk_size=4)
        assert state.shape[:3] == (3, int(np.ceil(np.log2((done + piece).max()))) + 1, 2)
        for i in range(3):
            outputs[i].append(o[:, cu[i]:cu[i + 1]])
        done += piece
    for i in range(3):
        assert rel_rms(refs[i], np.concatenate(outputs[i], 1)) <= 1e-5, i
    # a carried state with one call: each sequence as if alone
    cu = np.array([0, 6, 6, 10])
    starts = [3, 7, 0]
    s0 = np.random.default_rng(79).standard_normal((3, 3, 2, 8, 6)).astype(np.float32)
    o, s1 = family.log_linear_attention(q[:1, :10], k[:1, :10], v[:1, :10],
                                        None if g is None else g[:1, :10], lam[:1, :10],
                                        variant=variant,
                                        beta=None if beta is None else beta[:1, :10],
                                        cu_seqlens=cu, start=starts, initial_state=s0,
                                        output_final_state=True, chunk_size=4)
    # the empty sequence keeps its state, its top level repeated up to the others'
    assert s1.shape == (3, 5, 2, 8, 6)
    assert np.array_equal(s1[1], np.concatenate([s0[1]] + [s0[1, -1:]] * 2, 0))
    for i in (0, 2):
        part = [None if x is None else x[:1, cu[i]:cu[i + 1]] for x in (q, k, v, g, beta, lam)]
        alone, alone_state = family.log_linear_attention(
            *part[:4], part[5], variant=variant, beta=part[4], start=starts[i],
            initial_state=s0[i:i + 1], output_final_state=True, chunk_size=4)
        assert rel_rms(alone, o[:, cu[i]:cu[i + 1]]) <= 1e-6
        assert rel_rms(alone_state[0], s1[i, :alone_state.shape[1]]) <= 1e-6
