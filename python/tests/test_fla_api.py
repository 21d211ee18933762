"""la.fla: flash-linear-attention 0.6.0's op API on la's kernels, called
with fla's own argument conventions (positional order, keywords, defaults)
and checked against fla's naive reference functions (fla-core 0.6.0,
installed with ``pip install --no-deps``; its naive.py files are loaded by
path, without triton) and against la's fp64 reference where fla's naive
code does not cover a case (grouped value heads in Gated DeltaNet).

fla's in-kernel gate activations are written out here from fla's formulas
(gated_delta_rule/gate.py, kda/gate.py), and gradients of the gate
parameters are compared with torch autograd through fla's naive code."""

import importlib.util
import os

import numpy as np
import pytest

import la
from la import fla as lafla
from la import reference
from la.testing import rel_rms

torch = pytest.importorskip("torch")
pytest.importorskip("einops")  # fla's naive files import it

F = torch.nn.functional


def _naive(op):
    """fla.ops.<op>.naive, loaded by path (importing fla would import triton)."""
    spec = importlib.util.find_spec("fla")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("fla-core is not installed (pip install --no-deps fla-core==0.6.0)")
    path = os.path.join(spec.submodule_search_locations[0], "ops", op, "naive.py")
    module_spec = importlib.util.spec_from_file_location(f"fla_naive_{op}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def _randn(*shape, seed, scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    return scale * torch.randn(*shape, generator=gen)


def _rand(*shape, seed, low=0.0, high=1.0):
    gen = torch.Generator().manual_seed(seed)
    return low + (high - low) * torch.rand(*shape, generator=gen)


def _unit(x):
    return F.normalize(x, dim=-1)


def _err(expected, got):
    return rel_rms(expected.detach().double().numpy(), got.detach().double().numpy())


B, T, H, HV, K, V = 2, 37, 2, 4, 16, 8
F32 = 1e-5


# --------------------------------------------------------------------------
# linear attention, retention, simple GLA, GLA
# --------------------------------------------------------------------------

def test_linear_attn_defaults_and_normaliser():
    naive = _naive("linear_attn").naive_recurrent_linear_attn
    q, k, v = _randn(B, T, H, K, seed=1), _randn(B, T, H, K, seed=2), _randn(B, T, H, V, seed=3)
    q, k = q.abs(), k.abs()  # a positive feature map, as a layer would apply
    s0 = _randn(B, H, K, V, seed=4)
    # chunk_linear_attn normalises by default (fla: normalize=True, eps 1e-10)
    o, (s, z) = lafla.chunk_linear_attn(q, k, v, None, s0, True)
    o_ref, (s_ref, z_ref) = naive(q, k, v, None, s0, True, True)
    assert _err(o_ref, o) <= F32 and _err(s_ref, s) <= F32
    assert z.shape == (B, 1, H, K) and _err(z_ref, z) <= F32
    # fused_recurrent_linear_attn does not, and returns (o, state)
    o, s = lafla.fused_recurrent_linear_attn(q, k, v, output_final_state=True)
    o_ref, s_ref = naive(q, k, v, output_final_state=True)
    assert _err(o_ref, o) <= F32 and _err(s_ref, s) <= F32
    # with normalize, the state pair comes back even without output_final_state
    _, (s, z) = lafla.chunk_linear_attn(q, k, v)
    assert s is None and z.shape == (B, 1, H, K)


def test_retention():
    naive = _naive("retention").naive_retention  # head-first [B, H, T, D]
    q, k, v = _randn(B, T, H, K, seed=5), _randn(B, T, H, K, seed=6), _randn(B, T, H, V, seed=7)
    o, s = lafla.chunk_retention(q, k, v)
    assert s is None
    o_ref = naive(*(x.transpose(1, 2) for x in (q, k, v))).transpose(1, 2)
    assert _err(o_ref, o) <= F32
    o2, _ = lafla.fused_recurrent_retention(q, k, v)
    assert _err(o_ref, o2) <= F32


def test_simple_gla_g_and_g_gamma():
    naive = _naive("simple_gla").naive_recurrent_simple_gla
    q, k, v = _randn(B, T, H, K, seed=8), _randn(B, T, H, K, seed=9), _randn(B, T, H, V, seed=10)
    g = F.logsigmoid(_randn(B, T, H, seed=11)) / 4
    g_gamma = torch.tensor([-0.05, -0.2])
    s0 = _randn(B, H, K, V, seed=12)
    for gate, gamma in ((g, None), (None, g_gamma), (g, g_gamma)):
        total = (gate if gate is not None else 0) + \
            (g_gamma.view(1, 1, H) if gamma is not None else 0) + torch.zeros(B, T, H)
        o_ref, s_ref = naive(q, k, v, total, None, s0, True)
        for function in (lafla.chunk_simple_gla, lafla.fused_recurrent_simple_gla):
            o, s = function(q, k, v, gate, gamma, None, s0, True)
            assert _err(o_ref, o) <= F32 and _err(s_ref, s) <= F32, function.__name__
    # state_v_first: the states as [N, H, V, K]
    o, s = lafla.chunk_simple_gla(q, k, v, g, initial_state=s0.transpose(-1, -2).contiguous(),
                                  output_final_state=True, state_v_first=True)
    o_ref, s_ref = naive(q, k, v, g, None, s0, True)
    assert _err(o_ref, o) <= F32 and _err(s_ref.transpose(-1, -2), s) <= F32


def test_gla():
    naive = _naive("gla").naive_recurrent_gla
    q, k, v = _randn(B, T, H, K, seed=13), _randn(B, T, H, K, seed=14), _randn(B, T, H, V, seed=15)
    g = F.logsigmoid(_randn(B, T, H, K, seed=16)) / 8
    s0 = _randn(B, H, K, V, seed=17)
    o_ref, s_ref = naive(q, k, v, g, s0, True)
    o, s = lafla.chunk_gla(q, k, v, g, None, s0, True)
    assert _err(o_ref, o) <= F32 and _err(s_ref, s) <= F32
    o, s = lafla.fused_recurrent_gla(q, k, v, g, None, None, s0, True)
    assert _err(o_ref, o) <= F32 and _err(s_ref, s) <= F32
    # A zero value-side gate changes nothing (test_value_gate_grad.py checks
    # others against the fp64 reference; test_reverse below with reverse).
    o, s = lafla.fused_recurrent_gla(q, k, v, g, torch.zeros(B, T, H, V), None, s0, True)
    assert _err(o_ref, o) <= F32 and _err(s_ref, s) <= F32


def _reverse_recurrence(q, k, v, gk, scale, s0, cu, gv=None):
    """fla's fused_recurrent kernel with REVERSE, written out in float64
    torch: per sequence, from its last token to its first,
    ``S = exp(gk_t) * S * exp(gv_t) + k_t v_t^T``, ``o_t = S^T (scale q_t)``."""
    q, k, v, gk = (x.double() for x in (q, k, v, gk))
    o = torch.zeros(*v.shape, dtype=torch.float64)
    offsets = cu.tolist() if cu is not None else None
    spans = [(n, 0, q.shape[1]) for n in range(q.shape[0])] if cu is None else \
        [(n, a, b) for n, (a, b) in enumerate(zip(offsets[:-1], offsets[1:]))]
    states = []
    for n, a, b in spans:
        row = 0 if cu is not None else n
        S = s0[n].double().clone()
        for t in range(b - 1, a - 1, -1):
            S = torch.exp(gk[row, t])[..., None] * S
            if gv is not None:
                S = S * torch.exp(gv[row, t].double())[:, None, :]
            S = S + k[row, t][..., None] * v[row, t][:, None, :]
            o[row, t] = torch.einsum("hk,hkv->hv", scale * q[row, t], S)
        states.append(S)
    return o, torch.stack(states)


@pytest.mark.parametrize("packed", [False, True], ids=["batch", "cu_seqlens"])
def test_reverse(packed):
    """reverse=True runs every sequence from its last token to its first, as
    fla's fused_recurrent kernels do: against a float64 token loop, forward
    and gradients (autograd through la's flips and derived backward)."""
    Bn, Tn = (1, 29) if packed else (2, 21)
    cu = torch.tensor([0, 11, 12, 29], dtype=torch.int32) if packed else None
    N = 3 if packed else Bn
    q, k = _randn(Bn, Tn, H, K, seed=41), _unit(_randn(Bn, Tn, H, K, seed=42))
    v = _randn(Bn, Tn, H, V, seed=43)
    gk = F.logsigmoid(_randn(Bn, Tn, H, K, seed=44)) / 4
    g = F.logsigmoid(_randn(Bn, Tn, H, seed=45)) / 4
    s0 = _randn(N, H, K, V, seed=46)
    gv = F.logsigmoid(_randn(Bn, Tn, H, V, seed=48)) / 4
    scale = K ** -0.5
    cases = {
        "gla": (lambda *a: lafla.fused_recurrent_gla(*a[:3], a[3], None, None, *a[4:]), gk),
        "gla_gv": (lambda *a: lafla.fused_recurrent_gla(*a[:3], a[3], gv, None, *a[4:]), gk),
        "simple_gla": (lambda *a: lafla.fused_recurrent_simple_gla(*a[:3], a[3], None, None,
                                                                   *a[4:]), g),
        "linear": (lambda *a: lafla.fused_recurrent_linear_attn(*a[:3], None, *a[4:]), None),
    }
    for name, (fn, gate) in cases.items():
        full = torch.zeros(Bn, Tn, H, K) if gate is None else \
            (gate if gate.dim() == 4 else gate[..., None].expand(Bn, Tn, H, K))
        inputs = [x.clone().requires_grad_() for x in (q, k, v)]
        o, s = fn(*inputs, gate, s0, True, True, False, cu)
        value_gate = gv if name == "gla_gv" else None
        o_ref, s_ref = _reverse_recurrence(q, k, v, full, scale, s0, cu, value_gate)
        assert _err(o_ref, o) <= F32 and _err(s_ref, s) <= F32, name
        # Gradients of a weighted sum: against autograd through the loop.
        w = _randn(*o.shape, seed=47)
        (o * w).sum().backward()
        ref_inputs = [x.double().clone().requires_grad_() for x in (q, k, v)]
        o_ref, _ = _reverse_recurrence(*ref_inputs, full, scale, s0, cu, value_gate)
        (o_ref * w.double()).sum().backward()
        for x, x_ref in zip(inputs, ref_inputs):
            assert _err(x_ref.grad, x.grad) <= F32, name
    # Retention: its per-head decay, reversed.
    o, _ = lafla.fused_recurrent_retention(q, k, v, None, None, False, True, False, cu)
    decay = torch.log(1 - 2.0 ** (-5.0 - torch.arange(H, dtype=torch.float64)))
    o_ref, _ = _reverse_recurrence(q, k, v, decay[None, None, :, None].expand(Bn, Tn, H, K),
                                   scale, torch.zeros(N, H, K, V), cu)
    assert _err(o_ref, o) <= F32


# --------------------------------------------------------------------------
# the delta rule family
# --------------------------------------------------------------------------

def test_delta_rule():
    naive = _naive("delta_rule").delta_rule_recurrence  # head-first
    q, v = _randn(B, T, H, K, seed=18), _randn(B, T, H, V, seed=19)
    k = _unit(_randn(B, T, H, K, seed=20))
    beta = _rand(B, T, H, seed=21, low=0.1, high=0.9)
    s0 = _randn(B, H, K, V, seed=22)
    o_ref, s_ref = naive(*(x.transpose(1, 2) for x in (q, k, v, beta)), s0, True)
    o_ref = o_ref.transpose(1, 2)
    for function in (lafla.chunk_delta_rule, lafla.fused_recurrent_delta_rule):
        o, s = function(q, k, v, beta, None, s0, True)
        assert _err(o_ref, o) <= F32 and _err(s_ref, s) <= F32, function.__name__
    # the fused form's beta=None is beta = 1
    o_ref, _ = naive(*(x.transpose(1, 2) for x in (q, k, v, torch.ones(B, T, H))))
    o, _ = lafla.fused_recurrent_delta_rule(q, k, v)
    assert _err(o_ref.transpose(1, 2), o) <= F32
    with pytest.raises(la.LaError, match="beta per value channel"):
        lafla.fused_recurrent_delta_rule(q, k, v, torch.ones(B, T, H, V))


def _gdn_gate(g, A_log, dt_bias):
    """fla/ops/gated_delta_rule/gate.py: -exp(A_log) * softplus(g + dt_bias)."""
    return -A_log.float().exp() * F.softplus(g.float() + dt_bias.float())


def test_gated_delta_rule_against_fla():
    naive = _naive("gated_delta_rule").naive_recurrent_gated_delta_rule  # beta before g
    q, k, v = _randn(B, T, H, K, seed=23), _randn(B, T, H, K, seed=24), _randn(B, T, H, V, seed=25)
    g = F.logsigmoid(_randn(B, T, H, seed=26))
    beta = _rand(B, T, H, seed=27, low=0.1, high=0.9)
    s0 = _randn(B, H, K, V, seed=28)
    o_ref, s_ref = naive(_unit(q), _unit(k), v, beta, g, None, s0, True)
    o, s = lafla.chunk_gated_delta_rule(q, k, v, g, beta, None, s0, True, True)
    assert _err(o_ref, o) <= F32 and _err(s_ref, s) <= F32
    o, s = lafla.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta, initial_state=s0,
                                                  output_final_state=True,
                                                  use_qk_l2norm_in_kernel=True)
    assert _err(o_ref, o) <= F32 and _err(s_ref, s) <= F32


def test_gated_delta_rule_value_heads_and_in_kernel_gates():
    """Grouped value heads with g and beta per value head, the in-kernel
    gate (A_log, dt_bias) and sigmoid beta with allow_neg_eigval, against
    la's fp64 reference (fla's naive GDN has no grouped value heads); the
    gate parameters' gradients against torch autograd through the same
    formulas and a float64 pure-torch recurrence."""
    q, k, v = _randn(B, T, H, K, seed=29), _randn(B, T, H, K, seed=30), _randn(B, T, HV, V, seed=31)
    raw_g, raw_beta = _randn(B, T, HV, seed=32), _randn(B, T, HV, seed=33)
    A_log = _randn(HV, seed=34, scale=0.5).requires_grad_()
    dt_bias = _randn(HV, seed=35, scale=0.5).requires_grad_()
    o, _ = lafla.chunk_gated_delta_rule(q, k, v, raw_g, raw_beta, use_qk_l2norm_in_kernel=True,
                                        use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True,
                                        use_gate_in_kernel=True, A_log=A_log, dt_bias=dt_bias)
    g = _gdn_gate(raw_g, A_log, dt_bias).detach().numpy()
    beta = (2 * torch.sigmoid(raw_beta)).numpy()
    o_ref, _ = reference.recurrence(q.numpy(), k.numpy(), v.numpy(), update="delta",
                                    gate="scalar", g=g, beta=beta, qk_l2norm=True)
    assert rel_rms(o_ref, o.detach().numpy()) <= F32
    # gradients of the gate parameters: through la's backward and autograd
    o.square().sum().backward()
    A64, dt64 = (x.detach().double().requires_grad_() for x in (A_log, dt_bias))
    g64 = _gdn_gate(raw_g.double(), A64, dt64)
    o64 = _torch_gated_delta(_unit(q.double()), _unit(k.double()), v.double(), g64,
                             2 * torch.sigmoid(raw_beta.double()))
    o64.square().sum().backward()
    assert _err(A64.grad, A_log.grad) <= 1e-4 and _err(dt64.grad, dt_bias.grad) <= 1e-4


def _torch_gated_delta(q, k, v, g, beta):
    """Gated DeltaNet with per-value-head g and beta, token by token in torch
    (differentiated by torch's autograd)."""
    B_, T_, H_, K_ = q.shape
    HV_ = v.shape[2]
    q = q.repeat_interleave(HV_ // H_, dim=2) * K_ ** -0.5
    k = k.repeat_interleave(HV_ // H_, dim=2)
    S = q.new_zeros(B_, HV_, K_, v.shape[-1])
    out = []
    for t in range(T_):
        S = S * g[:, t].exp()[..., None, None]
        u = v[:, t] - torch.einsum("bhk,bhkv->bhv", k[:, t], S)
        S = S + torch.einsum("bhk,bhv->bhkv", k[:, t], beta[:, t, :, None] * u)
        out.append(torch.einsum("bhk,bhkv->bhv", q[:, t], S))
    return torch.stack(out, 1)


def _kda_gate(g, A_log, dt_bias, lower_bound=None):
    """fla/ops/kda/gate.py's naive gates (dt_bias flat [HV * K])."""
    HV_, K_ = g.shape[2], g.shape[3]
    x = g.float() + dt_bias.float().view(HV_, K_)
    a = A_log.float().exp().view(HV_, 1)
    if lower_bound is None:
        return -a * F.softplus(x)
    return lower_bound * torch.sigmoid(a * x)


@pytest.mark.parametrize("lower_bound", [None, -5.0])
def test_kda_against_fla(lower_bound):
    naive = _naive("kda").naive_recurrent_kda  # grouped value heads, g [B, T, HV, K]
    q, k, v = _randn(B, T, H, K, seed=36), _randn(B, T, H, K, seed=37), _randn(B, T, HV, V, seed=38)
    raw_g, raw_beta = _randn(B, T, HV, K, seed=39), _randn(B, T, HV, seed=40)
    A_log, dt_bias = _randn(HV, seed=41, scale=0.3), _randn(HV * K, seed=42, scale=0.3)
    s0 = _randn(B, HV, K, V, seed=43)
    g = _kda_gate(raw_g, A_log, dt_bias, lower_bound)
    o_ref, s_ref = naive(_unit(q), _unit(k), v, g, torch.sigmoid(raw_beta), None, s0, True)
    o, s = lafla.chunk_kda(q, k, v, raw_g, raw_beta, None, s0, True, True, True, True,
                           lower_bound=lower_bound, A_log=A_log, dt_bias=dt_bias)
    assert _err(o_ref, o) <= F32 and _err(s_ref, s) <= F32
    o, s = lafla.fused_recurrent_kda(q, k, v, raw_g, raw_beta, A_log, dt_bias, None, s0, True,
                                     True, True, True, lower_bound=lower_bound)
    assert _err(o_ref, o) <= F32 and _err(s_ref, s) <= F32


def test_kda_gradients_against_fla_autograd():
    """Gradients of every input and gate parameter: la's derived backward
    (through autograd) against torch autograd through fla's naive KDA."""
    naive = _naive("kda").naive_recurrent_kda
    b, t, h, hv, k_dim, v_dim = 1, 13, 1, 2, 8, 4
    leaves = dict(q=_randn(b, t, h, k_dim, seed=44), k=_randn(b, t, h, k_dim, seed=45),
                  v=_randn(b, t, hv, v_dim, seed=46), g=_randn(b, t, hv, k_dim, seed=47),
                  beta=_randn(b, t, hv, seed=48), A_log=_randn(hv, seed=49, scale=0.3),
                  dt_bias=_randn(hv * k_dim, seed=50, scale=0.3))
    ours = {n: x.clone().requires_grad_() for n, x in leaves.items()}
    o, _ = lafla.chunk_kda(ours["q"], ours["k"], ours["v"], ours["g"], ours["beta"],
                           use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                           use_beta_sigmoid_in_kernel=True, A_log=ours["A_log"],
                           dt_bias=ours["dt_bias"])
    do = _randn(*o.shape, seed=51)
    (o * do).sum().backward()
    theirs = {n: x.double().clone().requires_grad_() for n, x in leaves.items()}
    gate = _kda_gate(theirs["g"], theirs["A_log"], theirs["dt_bias"]).double()
    o_ref, _ = naive(_unit(theirs["q"]), _unit(theirs["k"]), theirs["v"], gate,
                     torch.sigmoid(theirs["beta"]))
    (o_ref * do.double()).sum().backward()
    for name in leaves:
        assert _err(theirs[name].grad, ours[name].grad) <= 1e-4, name


def test_option_errors():
    q = k = _randn(1, 4, 1, 4, seed=52)
    v = _randn(1, 4, 1, 4, seed=53)
    beta = _rand(1, 4, 1, seed=54)
    g = -_rand(1, 4, 1, seed=55)
    with pytest.raises(ValueError, match="allow_neg_eigval=True requires use_beta_sigmoid"):
        lafla.chunk_gated_delta_rule(q, k, v, g, beta, allow_neg_eigval=True)
    with pytest.raises(ValueError, match="A_log must be provided"):
        lafla.chunk_gated_delta_rule(q, k, v, g, beta, use_gate_in_kernel=True)
    with pytest.raises(ValueError, match="A_log must be provided"):
        lafla.chunk_kda(q, k, v, g[..., None].expand(1, 4, 1, 4), beta, use_gate_in_kernel=True)
    with pytest.raises(la.LaError, match="initial normaliser state"):
        lafla.chunk_linear_attn(q, k, v, initial_state=(None, torch.zeros(1, 1, 1, 4)))
    with pytest.raises(la.LaError, match="return_intermediate_states"):
        lafla.chunk_kda(q, k, v, g[..., None].expand(1, 4, 1, 4), beta,
                        return_intermediate_states=True)


# --------------------------------------------------------------------------
# Gated DeltaNet-2 (the erase gate on the read key: la's erase_read_key)
# --------------------------------------------------------------------------

def test_gdn2_against_fla():
    naive = _naive("gdn2").naive_recurrent_gdn2  # no grouped value heads
    q, k, v = _randn(B, T, H, K, seed=60), _randn(B, T, H, K, seed=61), _randn(B, T, H, V, seed=62)
    g = F.logsigmoid(_randn(B, T, H, K, seed=63)) / 4
    b, w = _rand(B, T, H, K, seed=64, low=0.1, high=0.9), _rand(B, T, H, V, seed=65)
    s0 = _randn(B, H, K, V, seed=66)
    o_ref, s_ref = naive(_unit(q), _unit(k), v, g, b, w, None, s0, True)
    o, s = lafla.chunk_gdn2(q, k, v, g, b, w, None, s0, True, True)
    assert _err(o_ref, o) <= F32 and _err(s_ref, s) <= F32
    o, s = lafla.fused_recurrent_gdn2(q, k, v, g, b, w, initial_state=s0,
                                      output_final_state=True, use_qk_l2norm_in_kernel=True)
    assert _err(o_ref, o) <= F32 and _err(s_ref, s) <= F32
    # la's own placement (the erase gate on the written key) is another layer
    o_write, _ = la.gated_delta_rule2(q, k, v, g, b, w, initial_state=s0,
                                      use_qk_l2norm_in_kernel=True)
    assert _err(o_ref, o_write) > 1e-3


def test_gdn2_value_heads_and_gate_against_la_reference():
    """Grouped value heads (g and b per value head) and the in-kernel gate,
    against la's fp64 reference of the read-key placement."""
    q, k, v = _randn(B, T, H, K, seed=67), _randn(B, T, H, K, seed=68), _randn(B, T, HV, V, seed=69)
    raw_g = _randn(B, T, HV, K, seed=70)
    b, w = _rand(B, T, HV, K, seed=71, low=0.1, high=0.9), _rand(B, T, HV, V, seed=72)
    A_log, dt_bias = _randn(HV, seed=73, scale=0.3), _randn(HV * K, seed=74, scale=0.3)
    o, _ = lafla.fused_recurrent_gdn2(q, k, v, raw_g, b, w, A_log, dt_bias,
                                      use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True)
    g = _kda_gate(raw_g, A_log, dt_bias).numpy()
    o_ref, _ = reference.gated_delta_rule2(q.numpy(), k.numpy(), v.numpy(), g, b.numpy(),
                                           w.numpy(), qk_l2norm=True, erase_read_key=True)
    assert rel_rms(o_ref, o.numpy()) <= F32


# --------------------------------------------------------------------------
# the DPLR delta rule and RWKV-7
# --------------------------------------------------------------------------

def _rwkv7_inputs(b, t, h, k_dim, v_dim, seed):
    """RWKV-7's time-mixing inputs as its layer builds them: receptance r,
    log decay w = -exp(-0.5) * sigmoid(.) (fla's rwkv7 layer), the
    normalised removal key kappa, a = -kappa and b = kappa * iclr (fla's
    signs)."""
    r, k = _randn(b, t, h, k_dim, seed=seed), _randn(b, t, h, k_dim, seed=seed + 1)
    v = _randn(b, t, h, v_dim, seed=seed + 2)
    w = -np.exp(-0.5) * torch.sigmoid(_randn(b, t, h, k_dim, seed=seed + 3))
    kappa = _unit(_randn(b, t, h, k_dim, seed=seed + 4))
    iclr = _rand(b, t, h, k_dim, seed=seed + 5)
    return r, w, k, v, -kappa, kappa * iclr


def _naive_dplr(q, k, v, a, b, gk, s0, scale):
    """fla's naive dplr_recurrence (head-first layout, scale K^-0.5 built in:
    q is rescaled for another scale)."""
    naive = _naive("generalized_delta_rule/dplr").dplr_recurrence
    heads_first = [x.transpose(1, 2) for x in (q * scale * q.shape[-1] ** 0.5, k, v, a, b, gk)]
    o, s = naive(*heads_first, initial_state=s0, output_final_state=True)
    return o.transpose(1, 2), s


def test_rwkv7_and_dplr_against_fla():
    r, w, k, v, a, b = _rwkv7_inputs(B, T, H, K, V, seed=80)
    s0 = _randn(B, H, K, V, seed=86, scale=0.1)
    o_ref, s_ref = _naive_dplr(r, k, v, a, b, w, s0, scale=1.0)
    o, s = lafla.chunk_rwkv7(r, w, k, v, a, b, 1.0, s0, True)
    assert _err(o_ref, o) <= F32 and _err(s_ref, s) <= F32
    o, s = lafla.chunk_dplr_delta_rule(r, k, v, a, b, w, 1.0, s0, True, chunk_size=16)
    assert _err(o_ref, o) <= F32 and _err(s_ref, s) <= F32
    # fused_recurrent_rwkv7: scale K^-0.5 and the final state by default
    o_ref, s_ref = _naive_dplr(r, k, v, a, b, w, s0, scale=K ** -0.5)
    o, s = lafla.fused_recurrent_rwkv7(r, w, k, v, a, b, initial_state=s0)
    assert _err(o_ref, o) <= F32 and _err(s_ref, s) <= F32


def test_dplr_packed_reverse_and_ungated():
    """cu_seqlens and reverse against la's fp64 reference (fla's naive code
    has neither); gk=None is the ungated dplr variant."""
    r, w, k, v, a, b = _rwkv7_inputs(1, T, H, K, V, seed=90)
    cu = torch.tensor([0, 11, 11, 30, T])
    s0 = _randn(4, H, K, V, seed=96, scale=0.1)
    o, s = lafla.fused_recurrent_dplr_delta_rule(r, k, v, a, b, w, 0.5, s0, True,
                                                  reverse=True, cu_seqlens=cu)
    flip = lambda x: np.ascontiguousarray(x.numpy()[:, ::-1])  # noqa: E731
    o_ref, s_ref = reference.dplr(flip(r), flip(k), flip(v), flip(a), -flip(b), flip(w),
                                  scale=0.5, initial_state=s0.numpy()[::-1].copy(),
                                  cu_seqlens=T - cu.numpy()[::-1])
    assert rel_rms(o_ref[:, ::-1], o.numpy()) <= F32
    assert rel_rms(s_ref[::-1], s.numpy()) <= F32
    o, _ = lafla.chunk_dplr_delta_rule(r, k, v, a, b, None, 0.5)
    o_ref, _ = reference.dplr(r.numpy(), k.numpy(), v.numpy(), a.numpy(), -b.numpy(),
                              scale=0.5)
    assert rel_rms(o_ref, o.numpy()) <= F32


def test_rwkv7_gradients_against_fla_autograd():
    """Every input's gradient, la's derived backward (the general low-rank
    form's token loops) through autograd, against torch autograd through
    fla's naive DPLR recurrence."""
    leaves = dict(zip(("r", "w", "k", "v", "a", "b"), _rwkv7_inputs(1, 13, 2, 8, 4, seed=100)))
    leaves["s0"] = _randn(1, 2, 8, 4, seed=107, scale=0.1)
    ours = {n: x.clone().requires_grad_() for n, x in leaves.items()}
    o, s = lafla.chunk_rwkv7(ours["r"], ours["w"], ours["k"], ours["v"], ours["a"], ours["b"],
                             1.0, ours["s0"], True)
    do, ds = _randn(*o.shape, seed=108), _randn(*s.shape, seed=109)
    ((o * do).sum() + (s * ds).sum()).backward()
    # fla's naive code computes in float32 (it casts its inputs)
    theirs = {n: x.clone().requires_grad_() for n, x in leaves.items()}
    o_ref, s_ref = _naive_dplr(theirs["r"], theirs["k"], theirs["v"], theirs["a"],
                               theirs["b"], theirs["w"], theirs["s0"], scale=1.0)
    ((o_ref * do).sum() + (s_ref * ds).sum()).backward()
    for name in leaves:
        assert _err(theirs[name].grad, ours[name].grad) <= 1e-5, name


# --------------------------------------------------------------------------
# Gated DeltaProduct (a composition of la's delta rule)
# --------------------------------------------------------------------------

def _delta_product_inputs(b, t, h, k_dim, v_dim, n, seed):
    q = _randn(b, t, h, k_dim, seed=seed)
    k = _unit(_randn(b, t * n, h, k_dim, seed=seed + 1))
    v = _randn(b, t * n, h, v_dim, seed=seed + 2)
    g = F.logsigmoid(_randn(b, t, h, seed=seed + 3))
    beta = _rand(b, t * n, h, seed=seed + 4)
    return q, k, v, g, beta


@pytest.mark.parametrize("n", [2, 3])
def test_gated_delta_product_against_fla(n):
    naive = _naive("gated_delta_product").naive_recurrent_gated_delta_product
    q, k, v, g, beta = _delta_product_inputs(B, T, H, K, V, n, seed=110)
    s0 = _randn(B, H, K, V, seed=115, scale=0.1)
    o_ref, s_ref = naive(q, k, v, g, beta, K ** -0.5, initial_state=s0.clone(),
                         output_final_state=True, num_householder=n)
    o, s = lafla.chunk_gated_delta_product(q, k, v, g, beta, n, initial_state=s0,
                                           output_final_state=True)
    assert o.shape == (B, T, H, V)
    assert _err(o_ref, o) <= F32 and _err(s_ref, s) <= F32
    # without a gate, and packed sequences
    cu = torch.tensor([0, 11, 11, T])
    qp, kp, vp, _, betap = (x[:1] for x in (q, k, v, g, beta))
    s0p = _randn(3, H, K, V, seed=116, scale=0.1)
    o_ref, s_ref = naive(qp, kp, vp, None, betap, 0.5, cu_seqlens=cu,
                         initial_state=s0p, output_final_state=True, num_householder=n)
    o, s = lafla.chunk_gated_delta_product(qp, kp, vp, None, betap, n, 0.5, s0p, True,
                                           cu_seqlens=cu)
    assert _err(o_ref, o) <= F32 and _err(s_ref, s) <= F32


def test_gated_delta_product_gradients_against_fla_autograd():
    naive = _naive("gated_delta_product").naive_recurrent_gated_delta_product
    leaves = dict(zip(("q", "k", "v", "g", "beta"),
                      _delta_product_inputs(1, 9, 2, 8, 4, 2, seed=120)))
    ours = {n: x.clone().requires_grad_() for n, x in leaves.items()}
    o, _ = lafla.chunk_gated_delta_product(*ours.values(), 2)
    do = _randn(*o.shape, seed=126)
    (o * do).sum().backward()
    theirs = {n: x.clone().requires_grad_() for n, x in leaves.items()}
    o_ref, _ = naive(*theirs.values(), 8 ** -0.5, num_householder=2)
    (o_ref * do).sum().backward()
    for name in leaves:
        assert _err(theirs[name].grad, ours[name].grad) <= 1e-5, name


def test_gated_delta_product_errors():
    q, k, v, g, beta = _delta_product_inputs(1, 4, 1, 4, 4, 2, seed=130)
    with pytest.raises(ValueError, match="T \\* num_householder = 12"):
        lafla.chunk_gated_delta_product(q, k, v, g, beta, 3)
    with pytest.raises(ValueError, match="num_householder must be >= 1"):
        lafla.chunk_gated_delta_product(q, k, v, g, beta, 0)


# --------------------------------------------------------------------------
# log-linear attention (a composition of O(log T) la calls)
# --------------------------------------------------------------------------

def test_log_linear_attn_against_fla():
    naive = _naive("log_linear_attn").naive_log_linear_attn
    q, k = _randn(B, T, H, K, seed=140), _randn(B, T, H, K, seed=141)
    v = _randn(B, T, HV, V, seed=142)
    g = F.logsigmoid(_randn(B, T, HV, seed=143)) / 2
    levels = int(np.ceil(np.log2(T))) + 1
    level_scales = _rand(B, T, HV, levels, seed=144, low=0.2, high=1.5)
    o_ref = naive(q, k, v, g, level_scales)
    o, state = lafla.chunk_log_linear_attn(q, k, v, g, level_scales)
    assert state is None and _err(o_ref, o) <= F32
    o_ref = naive(q, k, v, g, level_scales, scale=None)
    o, _ = lafla.chunk_log_linear_attn(q, k, v, g, level_scales, scale=None)
    assert _err(o_ref, o) <= F32
    with pytest.raises(la.LaError, match="not supported"):
        lafla.chunk_log_linear_attn(q, k, v, g, level_scales, output_final_state=True)


def test_log_linear_attn_packed_against_fla():
    """cu_seqlens (torch int offsets, as fla takes them): each sequence
    against fla's naive reference on that sequence alone."""
    naive = _naive("log_linear_attn").naive_log_linear_attn
    t_total = 45
    cu = torch.tensor([0, 13, 13, 30, 45], dtype=torch.int64)
    q, k = _randn(1, t_total, H, K, seed=160), _randn(1, t_total, H, K, seed=161)
    v = _randn(1, t_total, HV, V, seed=162)
    g = F.logsigmoid(_randn(1, t_total, HV, seed=163)) / 2
    level_scales = _rand(1, t_total, HV, 7, seed=164, low=0.2, high=1.5)
    o, _ = lafla.chunk_log_linear_attn(q, k, v, g, level_scales, cu_seqlens=cu)
    for start, end in zip(cu[:-1].tolist(), cu[1:].tolist()):
        if start < end:
            part = [x[:, start:end] for x in (q, k, v, g, level_scales)]
            assert _err(naive(*part), o[:, start:end]) <= F32


@pytest.mark.parametrize("t", [19, 300], ids=["one-block", "levels-above-the-block"])
def test_log_linear_attn_gradients_against_fla_autograd(t):
    """T = 300 spans five blocks of 64: levels 1-6 as block products (torch
    autograd through the one-hot call and the masked products), levels 7-9
    as la calls."""
    naive = _naive("log_linear_attn").naive_log_linear_attn
    b, h, k_dim, v_dim = 1, 1, 8, 4
    levels = int(np.ceil(np.log2(t))) + 1
    leaves = dict(q=_randn(b, t, h, k_dim, seed=150), k=_randn(b, t, h, k_dim, seed=151),
                  v=_randn(b, t, h, v_dim, seed=152),
                  g=F.logsigmoid(_randn(b, t, h, seed=153)),
                  level_scales=_rand(b, t, h, levels, seed=154, low=0.2, high=1.5))
    ours = {n: x.clone().requires_grad_() for n, x in leaves.items()}
    o, _ = lafla.chunk_log_linear_attn(*ours.values())
    do = _randn(*o.shape, seed=155)
    (o * do).sum().backward()
    theirs = {n: x.double().clone().requires_grad_() for n, x in leaves.items()}
    (naive(*theirs.values()) * do.double()).sum().backward()
    for name in leaves:
        assert _err(theirs[name].grad, ours[name].grad) <= 1e-5, name
