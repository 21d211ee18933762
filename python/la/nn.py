"""PyTorch layers on la's kernels, with flash-linear-attention 0.6.0's
structure and parameter names (``fla.layers``), so that fla's state_dicts
load unchanged (docs/torch.md):

* :class:`GatedLinearAttention` (``fla.layers.gla``),
* :class:`GatedDeltaNet` (``fla.layers.gated_deltanet``),
* :class:`KimiDeltaAttention` (``fla.layers.kda``).

Each layer has fla's projections, short convolutions (depthwise causal
conv1d + SiLU), gates, output norm and output gate; the recurrence is la's
compiled kernel through :mod:`la.fla` (a ``torch.library`` custom operator,
differentiable). ``forward(hidden_states, attention_mask=None,
past_key_values=None, use_cache=False)`` follows fla's layers and returns
``(o, None, past_key_values)``:

* ``attention_mask`` ``[B, T]`` (1 for tokens, 0 for padding, as fla's
  layers take it; its last T columns are used): the tokens of each row are
  packed into one sequence of a ``cu_seqlens`` call and the outputs put back
  in place (0 at padding);
* ``past_key_values`` with ``use_cache=True``: a decoding cache with fla's
  layer-state protocol (:class:`Cache`, or fla's own ``Cache``): the layer
  (which needs its ``layer_idx``) starts from its entry's
  ``recurrent_state`` ``[B, HV, K, V]`` and ``conv_state`` (one ``[B, D, W]``
  window of inputs per short convolution, fla's layout) and stores the new
  ones, so that a prefill followed by calls of one token continues the
  sequence exactly.

Options of fla's layers that la does not implement raise
``NotImplementedError``.

Importing this module imports torch.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from . import fla as _fla

__all__ = ["GatedLinearAttention", "GatedDeltaNet", "KimiDeltaAttention", "ShortConvolution",
           "RMSNorm", "FusedRMSNormGated", "Cache"]


class Cache:
    """A decoding cache with the layer-state protocol of fla's
    ``fla.models.utils.Cache``: ``cache[layer_idx]`` is the layer's dict
    (``recurrent_state``, ``attn_state``, ``conv_state``, ``ffn_state``),
    ``cache.update(recurrent_state=..., conv_state=..., layer_idx=...,
    offset=T)`` stores a layer's new states (layers in order, as a model
    calls them), ``len(cache)`` counts the layers that have one and
    ``get_seq_length()`` the tokens seen (counted at layer 0)."""

    def __init__(self):
        self.states = []
        self._seen_tokens = 0

    def __getitem__(self, layer_idx):
        return self.states[layer_idx]

    def __len__(self):
        return len(self.states)

    def update(self, recurrent_state=None, attn_state=None, conv_state=None, ffn_state=None,
               layer_idx=0, offset=1, **kwargs):
        if attn_state is not None:
            raise NotImplementedError("la.nn.Cache: attention (KV) states are not supported")
        if layer_idx > len(self.states):
            raise ValueError(f"la.nn.Cache: layer {layer_idx} updated before layer "
                             f"{len(self.states)}")
        if layer_idx == len(self.states):
            self.states.append(dict(recurrent_state=None, attn_state=None, conv_state=None,
                                    ffn_state=None))
        state = self.states[layer_idx]
        for name, value in (("recurrent_state", recurrent_state), ("conv_state", conv_state),
                            ("ffn_state", ffn_state)):
            if value is not None:
                state[name] = value
        if layer_idx == 0:
            self._seen_tokens += offset
        return state

    def get_seq_length(self, layer_idx=0):
        return self._seen_tokens if len(self.states) > layer_idx else 0


class ShortConvolution(nn.Conv1d):
    """fla's ShortConvolution: a depthwise causal conv1d over time (weight
    ``[D, 1, W]``) followed by SiLU, on ``[B, T, D]``.

    ``forward(x, cache=None, output_final_state=False, cu_seqlens=None)``
    returns ``(y, final_cache)`` as fla's does: ``cache`` ``[N, D, W]`` holds
    the last W inputs of each sequence before ``x`` (zeros: none),
    ``final_cache`` those after it (None unless ``output_final_state``), and
    with ``cu_seqlens`` (B = 1) every packed sequence is convolved on its
    own."""

    def __init__(self, hidden_size, kernel_size, bias=False):
        super().__init__(hidden_size, hidden_size, kernel_size, groups=hidden_size,
                         padding=kernel_size - 1, bias=bias)

    def _one(self, x, cache):
        """x [B, T, D], cache [B, D, W] or None -> (y, the new cache)."""
        W = self.kernel_size[0]
        xt = x.transpose(1, 2).float()
        if cache is None:
            cache = xt.new_zeros(xt.shape[0], xt.shape[1], W)
        window = torch.cat([cache.float(), xt], dim=-1)
        if x.shape[1] == 0:  # an empty packed sequence keeps its window
            return x, window[..., -W:]
        y = F.conv1d(window[..., 1:], self.weight.float(),
                     None if self.bias is None else self.bias.float(), groups=self.groups)
        return F.silu(y).transpose(1, 2).to(x.dtype), window[..., -W:]

    def forward(self, x, cache=None, output_final_state=False, cu_seqlens=None, **kwargs):
        if cu_seqlens is None:
            y, final = self._one(x, cache)
        else:
            offsets = [int(n) for n in cu_seqlens.tolist()]
            parts, finals = [], []
            for n, (start, end) in enumerate(zip(offsets[:-1], offsets[1:])):
                y_n, final_n = self._one(x[:, start:end],
                                         None if cache is None else cache[n:n + 1])
                parts.append(y_n)
                finals.append(final_n)
            y = torch.cat(parts, dim=1) if parts else x[:, :0]
            final = torch.cat(finals, dim=0) if finals else None
        return y, (final.to(x.dtype) if output_final_state else None)


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


class _Step:
    """One forward call's packing and cache: the hidden states with the
    padding removed (``attention_mask``), the ``cu_seqlens`` of the packed
    rows, and the layer's cached states."""

    def __init__(self, layer, hidden_states, attention_mask, past_key_values, use_cache,
                 cu_seqlens=None):
        self.batch, self.tokens = hidden_states.shape[:2]
        self.layer, self.cache, self.use_cache = layer, past_key_values, bool(use_cache)
        if past_key_values is not None and layer.layer_idx is None:
            raise ValueError("la.nn: a layer with a decoding cache needs its layer_idx")
        self.last = None
        if past_key_values is not None and len(past_key_values) > layer.layer_idx:
            self.last = past_key_values[layer.layer_idx]
        self.indices, self.cu_seqlens, self.x = None, cu_seqlens, hidden_states
        if attention_mask is not None:
            if attention_mask.dim() != 2:
                raise ValueError("la.nn: attention_mask must be a [batch_size, seq_len] 0-1 "
                                 f"padding mask, got shape {tuple(attention_mask.shape)}")
            mask = attention_mask[:, -self.tokens:].bool()
            self.indices = torch.nonzero(mask.flatten(), as_tuple=False).flatten()
            lengths = mask.sum(-1, dtype=torch.int32)
            self.cu_seqlens = F.pad(torch.cumsum(lengths, 0, dtype=torch.int32), (1, 0))
            self.x = hidden_states.flatten(0, 1)[self.indices].unsqueeze(0)

    def state(self, name):
        return None if self.last is None else self.last[name]

    def convs(self, convs, inputs):
        """The short convolutions on their inputs, from and into the cache."""
        cached = self.state("conv_state") or (None,) * len(convs)
        outputs, finals = [], []
        for conv, x, cache in zip(convs, inputs, cached):
            y, final = conv(x, cache=cache, output_final_state=self.use_cache,
                            cu_seqlens=self.cu_seqlens)
            outputs.append(y)
            finals.append(final)
        self.conv_state = tuple(finals)
        return outputs

    def finish(self, o, recurrent_state, conv_state=None):
        """Stores the new states in the cache; puts the outputs back in place."""
        if self.cache is not None and self.use_cache:
            self.cache.update(recurrent_state=recurrent_state, conv_state=conv_state,
                              layer_idx=self.layer.layer_idx, offset=self.tokens)
        if self.indices is None:
            return o
        padded = o.new_zeros(self.batch * self.tokens, *o.shape[2:])
        padded[self.indices] = o[0]
        return padded.unflatten(0, (self.batch, self.tokens))


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
        step = _Step(self, hidden_states, attention_mask, past_key_values, use_cache,
                     kwargs.get("cu_seqlens"))
        x = step.x
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        conv_state = None
        if self.use_short_conv:
            q, k, v = step.convs((self.q_conv1d, self.k_conv1d, self.v_conv1d), (q, k, v))
            conv_state = step.conv_state
        gk = self.gk_proj(x)
        q = _heads(q, self.head_k_dim)
        k, gk = _heads(k, self.head_k_dim), _heads(gk, self.head_k_dim)
        v = _heads(v, self.head_v_dim)
        if self.num_kv_groups > 1:
            k, gk, v = (t.repeat_interleave(self.num_kv_groups, dim=2) for t in (k, gk, v))
        gk = F.logsigmoid(gk.float()) / self.gate_logit_normalizer
        if self.clamp_min is not None:
            gk = torch.clamp_min(gk, self.clamp_min)
        o, state = _fla.chunk_gla(q, k, v, gk, initial_state=step.state("recurrent_state"),
                                  output_final_state=step.use_cache,
                                  cu_seqlens=step.cu_seqlens)
        if self.fuse_norm_and_gate:
            o = self.g_norm_swish_gate(o, _heads(self.g_proj(x), self.head_v_dim)).flatten(2)
        else:
            o = self.g_norm(o).flatten(2)
            if self.use_output_gate:
                o = o * F.silu(self.g_proj(x))
        return step.finish(self.o_proj(o), state, conv_state), None, past_key_values


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

    def _qkv(self, x, step):
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        step.conv_state = None
        if self.use_short_conv:
            q, k, v = step.convs((self.q_conv1d, self.k_conv1d, self.v_conv1d), (q, k, v))
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
        step = _Step(self, hidden_states, attention_mask, past_key_values, use_cache,
                     kwargs.get("cu_seqlens"))
        x = step.x
        q, k, v = self._qkv(x, step)
        o, state = _fla.chunk_gated_delta_rule(
            q, k, v, self.a_proj(x), self.b_proj(x), use_qk_l2norm_in_kernel=True,
            use_beta_sigmoid_in_kernel=True, allow_neg_eigval=self.allow_neg_eigval,
            use_gate_in_kernel=True, A_log=self.A_log, dt_bias=self.dt_bias,
            initial_state=step.state("recurrent_state"), output_final_state=step.use_cache,
            cu_seqlens=step.cu_seqlens)
        if self.use_gate:
            o = self.o_norm(o, _heads(self.g_proj(x), self.head_v_dim))
        else:
            o = self.o_norm(o)
        return (step.finish(self.o_proj(o.flatten(2)), state, step.conv_state), None,
                past_key_values)


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
        step = _Step(self, hidden_states, attention_mask, past_key_values, use_cache,
                     kwargs.get("cu_seqlens"))
        x = step.x
        q, k, v = self._qkv(x, step)
        g = _heads(self.f_proj(x), self.head_k_dim)
        o, state = _fla.chunk_kda(
            q, k, v, g, self.b_proj(x), use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
            use_beta_sigmoid_in_kernel=True, allow_neg_eigval=self.allow_neg_eigval,
            safe_gate=self.safe_gate, lower_bound=self.lower_bound, A_log=self.A_log,
            dt_bias=self.dt_bias, initial_state=step.state("recurrent_state"),
            output_final_state=step.use_cache, cu_seqlens=step.cu_seqlens)
        o = self.o_norm(o, _heads(self.g_proj(x), self.head_v_dim))
        return (step.finish(self.o_proj(o.flatten(2)), state, step.conv_state), None,
                past_key_values)
