"""la.nn's layers (fla's GatedLinearAttention, GatedDeltaNet,
KimiDeltaAttention on la's kernels): fla 0.6.0's state_dict keys and shapes,
and forward and parameter gradients against a pure-torch implementation of
the same layer written here (token-by-token recurrences in float64, fla's
formulas for the convolutions, gates and norms), reading the same
parameters."""

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from la import nn as lann  # noqa: E402


def _conv(layer, name, x):
    """Depthwise causal conv1d + SiLU (fla's ShortConvolution)."""
    conv = getattr(layer, name)
    w = conv.weight.double()
    W = w.shape[-1]
    padded = F.pad(x.transpose(1, 2), (W - 1, 0))
    y = F.conv1d(padded, w, None if conv.bias is None else conv.bias.double(),
                 groups=w.shape[0])
    return F.silu(y).transpose(1, 2)


def _rms(x, weight, eps):
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps) * weight.double()


def _l2(x):
    return x / torch.sqrt(x.square().sum(-1, keepdim=True) + 1e-6)


def _linear(module, x):
    return F.linear(x, module.weight.double(),
                    None if module.bias is None else module.bias.double())


def _recurrence(q, k, v, log_gate, beta=None):
    """S_t = Diag(exp(g_t)) S_{t-1} (+ delta rule), o_t = S_t^T (q_t / sqrt(K));
    q, k [B,T,HV,K] (already repeated), v [B,T,HV,V], log_gate [B,T,HV,K]."""
    B, T, HV, K = q.shape
    S = q.new_zeros(B, HV, K, v.shape[-1])
    out = []
    for t in range(T):
        S = S * log_gate[:, t].exp()[..., None]
        if beta is None:
            S = S + torch.einsum("bhk,bhv->bhkv", k[:, t], v[:, t])
        else:
            u = v[:, t] - torch.einsum("bhk,bhkv->bhv", k[:, t], S)
            S = S + torch.einsum("bhk,bhv->bhkv", k[:, t], beta[:, t, :, None] * u)
        out.append(torch.einsum("bhk,bhkv->bhv", q[:, t] * K ** -0.5, S))
    return torch.stack(out, 1)


def _reference_gla(layer, x):
    q, k, v = (_linear(getattr(layer, n), x) for n in ("q_proj", "k_proj", "v_proj"))
    if layer.use_short_conv:
        q, k, v = (_conv(layer, n, t) for n, t in (("q_conv1d", q), ("k_conv1d", k),
                                                     ("v_conv1d", v)))
    gk = _linear(layer.gk_proj[1], _linear(layer.gk_proj[0], x))
    H, K, V = layer.num_heads, layer.head_k_dim, layer.head_v_dim
    q, k, gk, v = (t.unflatten(-1, (-1, d)) for t, d in ((q, K), (k, K), (gk, K), (v, V)))
    G = layer.num_kv_groups
    k, gk, v = (t.repeat_interleave(G, 2) for t in (k, gk, v))
    o = _recurrence(q, k, v, F.logsigmoid(gk) / layer.gate_logit_normalizer)
    g = _linear(layer.g_proj, x).unflatten(-1, (-1, V))
    o = _rms(o, layer.g_norm_swish_gate.weight, 1e-5) * F.silu(g)
    return _linear(layer.o_proj, o.flatten(2))


def _reference_delta(layer, x, kda):
    q, k, v = (_linear(getattr(layer, n), x) for n in ("q_proj", "k_proj", "v_proj"))
    q, k, v = (_conv(layer, n, t) for n, t in (("q_conv1d", q), ("k_conv1d", k),
                                                 ("v_conv1d", v)))
    K, V, HV = layer.head_k_dim, layer.head_v_dim, layer.num_v_heads
    G = HV // layer.num_heads
    q, k = (_l2(t.unflatten(-1, (-1, K))).repeat_interleave(G, 2) for t in (q, k))
    v = v.unflatten(-1, (-1, V))
    beta = torch.sigmoid(_linear(layer.b_proj, x))
    A = layer.A_log.double().exp()
    if kda:
        raw = _linear(layer.f_proj[1], _linear(layer.f_proj[0], x)).unflatten(-1, (-1, K))
        gate = -A[:, None] * F.softplus(raw + layer.dt_bias.double().view(HV, K))
        g_out = _linear(layer.g_proj[1], _linear(layer.g_proj[0], x))
        act = torch.sigmoid
    else:
        raw = _linear(layer.a_proj, x)
        gate = (-A * F.softplus(raw + layer.dt_bias.double()))[..., None].expand(-1, -1, -1, K)
        g_out = _linear(layer.g_proj, x)
        act = F.silu
    o = _recurrence(q, k, v, gate, beta)
    o = _rms(o, layer.o_norm.weight, 1e-5) * act(g_out.unflatten(-1, (-1, V)))
    return _linear(layer.o_proj, o.flatten(2))


#: name -> (constructor, the keys and shapes of fla 0.6.0's state_dict for
#: it, as fla builds them, and the reference forward).
CASES = {
    "gla": (lambda: lann.GatedLinearAttention(hidden_size=64, num_heads=2,
                                              use_short_conv=True),
            {"q_proj.weight": (32, 64), "k_proj.weight": (32, 64), "v_proj.weight": (64, 64),
             "g_proj.weight": (64, 64), "q_conv1d.weight": (32, 1, 4),
             "k_conv1d.weight": (32, 1, 4), "v_conv1d.weight": (64, 1, 4),
             "gk_proj.0.weight": (16, 64), "gk_proj.1.weight": (32, 16),
             "gk_proj.1.bias": (32,), "o_proj.weight": (64, 64),
             "g_norm_swish_gate.weight": (32,)},
            _reference_gla),
    "gated_deltanet": (
        lambda: lann.GatedDeltaNet(hidden_size=64, head_dim=16, num_heads=2, num_v_heads=4),
        {"A_log": (4,), "dt_bias": (4,), "q_proj.weight": (32, 64), "k_proj.weight": (32, 64),
         "v_proj.weight": (128, 64), "a_proj.weight": (4, 64), "b_proj.weight": (4, 64),
         "q_conv1d.weight": (32, 1, 4), "k_conv1d.weight": (32, 1, 4),
         "v_conv1d.weight": (128, 1, 4), "g_proj.weight": (128, 64), "o_norm.weight": (32,),
         "o_proj.weight": (64, 128)},
        lambda layer, x: _reference_delta(layer, x, kda=False)),
    "kda": (
        lambda: lann.KimiDeltaAttention(hidden_size=64, head_dim=16, num_heads=2),
        {"A_log": (2,), "dt_bias": (32,), "q_proj.weight": (32, 64), "k_proj.weight": (32, 64),
         "v_proj.weight": (32, 64), "q_conv1d.weight": (32, 1, 4),
         "k_conv1d.weight": (32, 1, 4), "v_conv1d.weight": (32, 1, 4),
         "f_proj.0.weight": (16, 64), "f_proj.1.weight": (32, 16), "b_proj.weight": (2, 64),
         "g_proj.0.weight": (16, 64), "g_proj.1.weight": (32, 16), "g_proj.1.bias": (32,),
         "o_norm.weight": (16,), "o_proj.weight": (64, 32)},
        lambda layer, x: _reference_delta(layer, x, kda=True)),
}


def _rel(expected, got):
    return float((expected.detach() - got.detach().double()).norm() / expected.detach().norm())


@pytest.mark.parametrize("case", sorted(CASES))
def test_state_dict_has_fla_keys(case):
    make, keys, _ = CASES[case]
    layer = make()
    got = {name: tuple(t.shape) for name, t in layer.state_dict().items()}
    assert got == keys
    # a state_dict saved from one loads into another (strictly)
    make().load_state_dict(layer.state_dict(), strict=True)


@pytest.mark.parametrize("case", sorted(CASES))
def test_forward_and_gradients_match_pure_torch(case):
    make, _, reference = CASES[case]
    torch.manual_seed(0)
    layer = make()
    with torch.no_grad():  # non-trivial norms and biases
        for name, p in layer.named_parameters():
            if name.endswith("norm.weight") or name.endswith("gate.weight"):
                p.add_(0.1 * torch.randn_like(p))
    x = torch.randn(2, 23, 64)
    o, none, cache = layer(x)
    assert none is None and cache is None and o.shape == x.shape
    expected = reference(layer, x.double())
    assert _rel(expected, o) <= 1e-5
    do = torch.randn_like(o)
    params = dict(layer.named_parameters())
    grads = torch.autograd.grad((o * do).sum(), list(params.values()))
    expected_grads = torch.autograd.grad((expected * do.double()).sum(), list(params.values()))
    for name, got, want in zip(params, grads, expected_grads):
        assert _rel(want, got) <= 1e-4, name


def _layer(case, seed=0):
    torch.manual_seed(seed)
    layer = CASES[case][0]()
    layer.layer_idx = 0
    return layer


@pytest.mark.parametrize("case", sorted(CASES))
def test_decoding_cache_continues_the_sequence(case):
    # A prefill of 9 tokens, then four calls of one token with the cache
    # (recurrent state and the convolutions' windows): the outputs of one
    # pass over all 13 tokens.
    layer = _layer(case)
    x = torch.randn(2, 13, 64)
    with torch.no_grad():
        full, _, _ = layer(x)
        cache = lann.Cache()
        parts = [layer(x[:, :9], past_key_values=cache, use_cache=True)[0]]
        assert len(cache) == 1 and cache.get_seq_length() == 9
        state = cache[0]["recurrent_state"]
        assert state.shape[0] == 2 and state.dtype == torch.float32
        assert len(cache[0]["conv_state"]) == 3
        for t in range(9, 13):
            o, _, returned = layer(x[:, t:t + 1], past_key_values=cache, use_cache=True)
            assert returned is cache
            parts.append(o)
    assert cache.get_seq_length() == 13
    assert _rel(full.double(), torch.cat(parts, 1)) <= 1e-5


@pytest.mark.parametrize("case", sorted(CASES))
def test_attention_mask_packs_the_rows(case):
    # Left padding (fla's convention: 0 marks padding): each row's tokens run
    # as one sequence, as if alone; the padded positions give 0.
    layer = _layer(case)
    x = torch.randn(3, 11, 64)
    mask = torch.ones(3, 11, dtype=torch.long)
    mask[1, :4] = 0
    mask[2, :10] = 0
    with torch.no_grad():
        o, _, _ = layer(x, attention_mask=mask)
        for row, start in ((0, 0), (1, 4), (2, 10)):
            alone, _, _ = layer(x[row:row + 1, start:])
            assert _rel(alone[0].double(), o[row, start:]) <= 1e-5, row
            assert torch.all(o[row, :start] == 0)


def test_padded_prefill_then_decoding():
    # A padded batch prefilled with the cache, then decoded a token at a time
    # with the mask growing as a model passes it (its last T columns apply).
    layer = _layer("gated_deltanet")
    x = torch.randn(2, 10, 64)
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[0, :3] = 0
    with torch.no_grad():
        cache = lann.Cache()
        layer(x[:, :7], attention_mask=mask, past_key_values=cache, use_cache=True)
        outputs = []
        for t in range(7, 10):
            mask = torch.cat([mask, torch.ones(2, 1, dtype=torch.long)], 1)
            outputs.append(layer(x[:, t:t + 1], attention_mask=mask, past_key_values=cache,
                                 use_cache=True)[0])
        decoded = torch.cat(outputs, 1)
        for row, start in ((0, 3), (1, 0)):
            alone, _, _ = layer(x[row:row + 1, start:])
            assert _rel(alone[0, -3:].double(), decoded[row]) <= 1e-5, row


def test_short_convolution_cache_and_packed_sequences():
    torch.manual_seed(1)
    conv = lann.ShortConvolution(8, 4)
    x = torch.randn(1, 9, 8)
    y, final = conv(x, output_final_state=True)
    assert final.shape == (1, 8, 4)
    # in two pieces, the cache carrying the window
    y1, c1 = conv(x[:, :5], output_final_state=True)
    y2, c2 = conv(x[:, 5:], cache=c1, output_final_state=True)
    assert torch.allclose(torch.cat([y1, y2], 1), y, atol=1e-6)
    assert torch.allclose(c2, final)
    # packed: each sequence on its own
    cu = torch.tensor([0, 2, 2, 9], dtype=torch.int32)
    yp, cp = conv(x, cu_seqlens=cu, output_final_state=True)
    assert torch.allclose(yp[:, :2], conv(x[:, :2])[0], atol=1e-6)
    assert torch.allclose(yp[:, 2:], conv(x[:, 2:])[0], atol=1e-6)
    assert cp.shape == (3, 8, 4) and torch.all(cp[1] == 0)
    assert conv(x)[1] is None


def test_unsupported_options():
    with pytest.raises(NotImplementedError, match="feature map"):
        lann.GatedLinearAttention(hidden_size=64, num_heads=2, feature_map="relu")
    layer = lann.KimiDeltaAttention(hidden_size=64, head_dim=16, num_heads=2)
    with pytest.raises(ValueError, match="padding mask"):
        layer(torch.zeros(1, 4, 64), attention_mask=torch.ones(1, 4, 4))
    with pytest.raises(ValueError, match="layer_idx"):
        layer(torch.zeros(1, 4, 64), past_key_values=lann.Cache(), use_cache=True)
