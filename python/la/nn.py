"""PyTorch layers on la's kernels, with flash-linear-attention 0.6.0's
structure and parameter names (``fla.layers``), so that fla's state_dicts
load unchanged (docs/torch.md):

* :class:`GatedLinearAttention` (``fla.layers.gla``),
* :class:`GatedDeltaNet` (``fla.layers.gated_deltanet``),
* :class:`KimiDeltaAttention` (``fla.layers.kda``).

Each layer has fla's projections, short convolutions (depthwise causal
conv1d + SiLU), gates, output norm and output gate; the recurrence is la's
compiled kernel through :mod:`la.fla` (a ``torch.library`` custom operator,
differentiable). Prefill/training path only: no cache (``past_key_values``)
and no ``attention_mask``; options of fla's layers that la does not
implement raise ``NotImplementedError``. ``forward`` returns fla's
``(o, None, past_key_values)``.

Importing this module imports torch.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from . import fla as _fla

__all__ = ["GatedLinearAttention", "GatedDeltaNet", "KimiDeltaAttention", "ShortConvolution",
           "RMSNorm", "FusedRMSNormGated"]


class ShortConvolution(nn.Conv1d):
    """fla's ShortConvolution without a cache: a depthwise causal conv1d over
    time (weight ``[D, 1, W]``) followed by SiLU, on ``[B, T, D]``."""

    def __init__(self, hidden_size, kernel_size, bias=False):
        super().__init__(hidden_size, hidden_size, kernel_size, groups=hidden_size,
                         padding=kernel_size - 1, bias=bias)

    def forward(self, x):
        y = F.conv1d(x.transpose(1, 2).float(), self.weight.float(),
                     None if self.bias is None else self.bias.float(),
                     padding=self.kernel_size[0] - 1, groups=self.groups)
        return F.silu(y[..., :x.shape[1]]).transpose(1, 2).to(x.dtype)


class RMSNorm(nn.Module):
    """``x * rsqrt(mean(x^2) + eps) * weight`` over the last dim, in f32."""

    def __init__(self, hidden_size, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size, dtype=torch.float32))

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + self.eps) * self.weight
        return y.to(x.dtype)


class FusedRMSNormGated(RMSNorm):
    """fla's FusedRMSNormGated: ``rmsnorm(x) * weight * act(g)``, act swish
    (``g * sigmoid(g)``) or sigmoid."""

    def __init__(self, hidden_size, eps=1e-5, activation="swish"):
        super().__init__(hidden_size, eps)
        if activation not in ("swish", "silu", "sigmoid"):
            raise ValueError(f"activation must be 'swish', 'silu' or 'sigmoid', got "
                             f"{activation!r}")
        self.activation = activation

    def forward(self, x, g):
        gf = g.float()
        gate = torch.sigmoid(gf) if self.activation == "sigmoid" else F.silu(gf)
        return (super().forward(x).float() * gate).to(x.dtype)


def _check_forward_options(attention_mask, past_key_values, use_cache):
    _require(attention_mask is None, "attention_mask (padding)")
    _require(past_key_values is None and not use_cache, "the decoding cache")


def _require(condition, what):
    if not condition:
        raise NotImplementedError(f"la.nn: {what} is not supported yet")


def _heads(x, head_dim):
    """[B, T, H * D] -> [B, T, H, D]."""
    return x.unflatten(-1, (-1, head_dim))


def _init_gates(A_log, dt_bias, a_range, dt_min=0.001, dt_max=0.1, dt_floor=1e-4):
    """fla's initialisation: A_log = log(U(a_range)), dt_bias the inverse
    softplus of a log-uniform dt in [dt_min, dt_max]."""
    with torch.no_grad():
        A_log.copy_(torch.empty_like(A_log).uniform_(*a_range).log())
        dt = torch.exp(torch.rand_like(dt_bias) * (math.log(dt_max) - math.log(dt_min))
                       + math.log(dt_min)).clamp(min=dt_floor)
        dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))


class GatedLinearAttention(nn.Module):
    """fla.layers.gla.GatedLinearAttention on la's GLA kernel."""

    def __init__(self, mode="chunk", hidden_size=1024, expand_k=0.5, expand_v=1.0, num_heads=4,
                 num_kv_heads=None, feature_map=None, use_short_conv=False, conv_size=4,
                 conv_bias=False, use_output_gate=True, gate_fn="swish",
                 elementwise_affine=True, norm_eps=1e-5, gate_logit_normalizer=16,
                 gate_low_rank_dim=16, clamp_min=None, fuse_norm=True, layer_idx=None):
        super().__init__()
        _require(feature_map is None, "a feature map")
        _require(elementwise_affine, "elementwise_affine=False")
        _require(gate_fn == "swish", f"gate_fn={gate_fn!r}")
        self.hidden_size, self.num_heads = hidden_size, num_heads
        self.num_kv_heads = num_kv_heads or num_heads
        self.num_kv_groups = num_heads // self.num_kv_heads
        self.key_dim, self.value_dim = round(hidden_size * expand_k), round(hidden_size * expand_v)
        key_dim_per_group = self.key_dim // self.num_kv_groups
        value_dim_per_group = self.value_dim // self.num_kv_groups
        self.head_k_dim = self.key_dim // num_heads
        self.head_v_dim = self.value_dim // num_heads
        self.use_short_conv, self.use_output_gate = use_short_conv, use_output_gate
        self.gate_logit_normalizer, self.clamp_min = gate_logit_normalizer, clamp_min
        self.fuse_norm_and_gate = use_output_gate and fuse_norm
        self.layer_idx = layer_idx

        self.q_proj = nn.Linear(hidden_size, self.key_dim, bias=False)
        self.k_proj = nn.Linear(hidden_size, key_dim_per_group, bias=False)
        self.v_proj = nn.Linear(hidden_size, value_dim_per_group, bias=False)
        if use_output_gate:
            self.g_proj = nn.Linear(hidden_size, self.value_dim, bias=False)
        if use_short_conv:
            self.q_conv1d = ShortConvolution(self.key_dim, conv_size, conv_bias)
            self.k_conv1d = ShortConvolution(key_dim_per_group, conv_size, conv_bias)
            self.v_conv1d = ShortConvolution(value_dim_per_group, conv_size, conv_bias)
        self.gk_proj = nn.Sequential(nn.Linear(hidden_size, gate_low_rank_dim, bias=False),
                                     nn.Linear(gate_low_rank_dim, key_dim_per_group, bias=True))
        self.o_proj = nn.Linear(self.value_dim, hidden_size, bias=False)
        if self.fuse_norm_and_gate:
            self.g_norm_swish_gate = FusedRMSNormGated(self.head_v_dim, norm_eps, "swish")
        else:
            self.g_norm = RMSNorm(self.head_v_dim, norm_eps)

    def forward(self, hidden_states, attention_mask=None, past_key_values=None,
                use_cache=False, output_attentions=False, **kwargs):
        _check_forward_options(attention_mask, past_key_values, use_cache)
        x = hidden_states
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if self.use_short_conv:
            q, k, v = self.q_conv1d(q), self.k_conv1d(k), self.v_conv1d(v)
        gk = self.gk_proj(x)
        q = _heads(q, self.head_k_dim)
        k, gk = _heads(k, self.head_k_dim), _heads(gk, self.head_k_dim)
        v = _heads(v, self.head_v_dim)
        if self.num_kv_groups > 1:
            k, gk, v = (t.repeat_interleave(self.num_kv_groups, dim=2) for t in (k, gk, v))
        gk = F.logsigmoid(gk.float()) / self.gate_logit_normalizer
        if self.clamp_min is not None:
            gk = torch.clamp_min(gk, self.clamp_min)
        o, _ = _fla.chunk_gla(q, k, v, gk)
        if self.fuse_norm_and_gate:
            o = self.g_norm_swish_gate(o, _heads(self.g_proj(x), self.head_v_dim)).flatten(2)
        else:
            o = self.g_norm(o).flatten(2)
            if self.use_output_gate:
                o = o * F.silu(self.g_proj(x))
        return self.o_proj(o), None, past_key_values


class _DeltaLayer(nn.Module):
    """What GatedDeltaNet and KimiDeltaAttention share: q, k, v projections
    with short convolutions (or SiLU), the beta projection, o_proj."""

    def _init_delta(self, hidden_size, expand_v, head_dim, num_heads, num_v_heads,
                    use_short_conv, conv_size, conv_bias, allow_neg_eigval, layer_idx):
        self.hidden_size, self.num_heads = hidden_size, num_heads
        self.num_v_heads = num_v_heads or num_heads
        if self.num_v_heads % num_heads:
            raise ValueError(f"num_v_heads={self.num_v_heads} must be a multiple of "
                             f"num_heads={num_heads}")
        self.head_k_dim, self.head_v_dim = head_dim, int(head_dim * expand_v)
        self.key_dim = num_heads * head_dim
        self.value_dim = self.num_v_heads * self.head_v_dim
        self.use_short_conv, self.allow_neg_eigval = use_short_conv, allow_neg_eigval
        self.layer_idx = layer_idx
        self.q_proj = nn.Linear(hidden_size, self.key_dim, bias=False)
        self.k_proj = nn.Linear(hidden_size, self.key_dim, bias=False)
        self.v_proj = nn.Linear(hidden_size, self.value_dim, bias=False)

    def _init_convs(self, conv_size, conv_bias):
        if self.use_short_conv:
            self.q_conv1d = ShortConvolution(self.key_dim, conv_size, conv_bias)
            self.k_conv1d = ShortConvolution(self.key_dim, conv_size, conv_bias)
            self.v_conv1d = ShortConvolution(self.value_dim, conv_size, conv_bias)

    def _qkv(self, x):
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if self.use_short_conv:
            q, k, v = self.q_conv1d(q), self.k_conv1d(k), self.v_conv1d(v)
        else:
            q, k, v = F.silu(q), F.silu(k), F.silu(v)
        return (_heads(q, self.head_k_dim), _heads(k, self.head_k_dim),
                _heads(v, self.head_v_dim))


class GatedDeltaNet(_DeltaLayer):
    """fla.layers.gated_deltanet.GatedDeltaNet on la's Gated DeltaNet kernel
    (gates and beta per value head with ``num_v_heads``)."""

    def __init__(self, hidden_size=2048, expand_v=2, head_dim=256, num_heads=6,
                 num_v_heads=None, mode="chunk", use_gate=True, use_short_conv=True,
                 allow_neg_eigval=False, conv_size=4, conv_bias=False, layer_idx=None,
                 norm_eps=1e-5, output_gate_activation="swish", **kwargs):
        super().__init__()
        self._init_delta(hidden_size, expand_v, head_dim, num_heads, num_v_heads,
                         use_short_conv, conv_size, conv_bias, allow_neg_eigval, layer_idx)
        self.use_gate = use_gate
        HV = self.num_v_heads
        self.A_log = nn.Parameter(torch.empty(HV, dtype=torch.float32))
        self.dt_bias = nn.Parameter(torch.empty(HV, dtype=torch.float32))
        _init_gates(self.A_log, self.dt_bias, (0, 16))
        self.a_proj = nn.Linear(hidden_size, HV, bias=False)
        self.b_proj = nn.Linear(hidden_size, HV, bias=False)
        self._init_convs(conv_size, conv_bias)
        if use_gate:
            self.g_proj = nn.Linear(hidden_size, self.value_dim, bias=False)
            self.o_norm = FusedRMSNormGated(self.head_v_dim, norm_eps, output_gate_activation)
        else:
            self.o_norm = RMSNorm(self.head_v_dim, norm_eps)
        self.o_proj = nn.Linear(self.value_dim, hidden_size, bias=False)

    def forward(self, hidden_states, attention_mask=None, past_key_values=None,
                use_cache=False, output_attentions=False, **kwargs):
        _check_forward_options(attention_mask, past_key_values, use_cache)
        x = hidden_states
        q, k, v = self._qkv(x)
        o, _ = _fla.chunk_gated_delta_rule(
            q, k, v, self.a_proj(x), self.b_proj(x), use_qk_l2norm_in_kernel=True,
            use_beta_sigmoid_in_kernel=True, allow_neg_eigval=self.allow_neg_eigval,
            use_gate_in_kernel=True, A_log=self.A_log, dt_bias=self.dt_bias)
        if self.use_gate:
            o = self.o_norm(o, _heads(self.g_proj(x), self.head_v_dim))
        else:
            o = self.o_norm(o)
        return self.o_proj(o.flatten(2)), None, past_key_values


class KimiDeltaAttention(_DeltaLayer):
    """fla.layers.kda.KimiDeltaAttention on la's KDA kernel."""

    def __init__(self, hidden_size=2048, expand_v=1, head_dim=128, num_heads=16,
                 num_v_heads=None, mode="chunk", use_short_conv=True, allow_neg_eigval=False,
                 safe_gate=False, lower_bound=None, conv_size=4, conv_bias=False,
                 layer_idx=None, norm_eps=1e-5, **kwargs):
        super().__init__()
        self._init_delta(hidden_size, expand_v, head_dim, num_heads, num_v_heads,
                         use_short_conv, conv_size, conv_bias, allow_neg_eigval, layer_idx)
        self.safe_gate, self.lower_bound = safe_gate, lower_bound
        HV = self.num_v_heads
        self._init_convs(conv_size, conv_bias)
        self.f_proj = nn.Sequential(nn.Linear(hidden_size, self.head_v_dim, bias=False),
                                    nn.Linear(self.head_v_dim, HV * head_dim, bias=False))
        self.b_proj = nn.Linear(hidden_size, HV, bias=False)
        self.A_log = nn.Parameter(torch.empty(HV, dtype=torch.float32))
        self.dt_bias = nn.Parameter(torch.empty(HV * head_dim, dtype=torch.float32))
        _init_gates(self.A_log, self.dt_bias, (1, 16))
        if safe_gate:
            with torch.no_grad():
                self.A_log.zero_()
        self.g_proj = nn.Sequential(nn.Linear(hidden_size, self.head_v_dim, bias=False),
                                    nn.Linear(self.head_v_dim, self.value_dim, bias=True))
        self.o_norm = FusedRMSNormGated(self.head_v_dim, norm_eps, "sigmoid")
        self.o_proj = nn.Linear(self.value_dim, hidden_size, bias=False)

    def forward(self, hidden_states, attention_mask=None, past_key_values=None,
                use_cache=False, output_attentions=False, **kwargs):
        _check_forward_options(attention_mask, past_key_values, use_cache)
        x = hidden_states
        q, k, v = self._qkv(x)
        g = _heads(self.f_proj(x), self.head_k_dim)
        o, _ = _fla.chunk_kda(
            q, k, v, g, self.b_proj(x), use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
            use_beta_sigmoid_in_kernel=True, allow_neg_eigval=self.allow_neg_eigval,
            safe_gate=self.safe_gate, lower_bound=self.lower_bound, A_log=self.A_log,
            dt_bias=self.dt_bias)
        o = self.o_norm(o, _heads(self.g_proj(x), self.head_v_dim))
        return self.o_proj(o.flatten(2)), None, past_key_values
