"""flash-linear-attention 0.6.0's op API on la's kernels.

``from la import fla`` gives the ``chunk_*`` and ``fused_recurrent_*``
functions of ``fla.ops`` with fla's names, positional order, defaults and
conventions, so that replacing ``fla.ops.X`` calls by ``la.fla.X`` calls
needs no other change (docs/fla.md). Both names run la's compiled kernel
(the chunkwise-parallel program; ``fused_recurrent_*`` runs the same
numbers); inputs are CPU torch tensors (or NumPy arrays), gradients come
from la's derived backward through autograd.

fla's in-kernel gate activations (``use_gate_in_kernel`` with ``A_log``,
``dt_bias``, ``lower_bound``; ``use_beta_sigmoid_in_kernel``) run in la's
kernel too: element-wise producers of the gate and beta in the kernel's
function (``la.attention``'s ``gate_activation``, ``beta_sigmoid``), fused
into the chunked program and differentiated by the compiler, so ``A_log``
and ``dt_bias`` get their gradients from la's derived backward. (Only
``fused_recurrent_gated_delta_rule`` with both ``g`` and ``gk`` applies the
scalar gate's activation with torch first, since the two gates merge into
one channel gate.) What la cannot express raises :class:`la.LaError` with the
reason (never a silently different result): a value-side gate ``gv`` with
the delta rule (``fused_recurrent_gated_delta_rule``; GLA's ``gv`` runs),
per-value-channel beta ``[B, T, HV, V]``, an initial
normaliser state for linear attention, context parallelism. Gated
DeltaNet-2 (``chunk_gdn2``) runs la's erase_write rule with
``erase_read_key``: fla's erase gate acts on the key the state is read
with, ``(I - k (b * k)^T)``. The DPLR delta rule and RWKV-7
(``chunk_dplr_delta_rule``, ``chunk_rwkv7``) run la's dplr rule, whose
transition ``Diag(exp(gk)) - b a^T`` has the opposite sign of fla's ``b``
(negated here).
"""

import numpy as np

from . import ops
from ._capi import LaError

__all__ = [
    "chunk_linear_attn", "fused_recurrent_linear_attn",
    "chunk_retention", "fused_recurrent_retention",
    "chunk_simple_gla", "fused_recurrent_simple_gla",
    "chunk_gla", "fused_recurrent_gla",
    "chunk_delta_rule", "fused_recurrent_delta_rule",
    "chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule",
    "chunk_kda", "fused_recurrent_kda",
    "chunk_gdn2", "fused_recurrent_gdn2",
    "chunk_dplr_delta_rule", "fused_recurrent_dplr_delta_rule",
    "chunk_rwkv7", "fused_recurrent_rwkv7",
    "chunk_gated_delta_product",
    "chunk_log_linear_attn",
    "chunk_momentum_delta_rule", "fused_recurrent_momentum_delta_rule",
]

#: fla's normaliser epsilon (fla/ops/linear_attn/utils.py).
LINEAR_ATTN_EPS = 1e-10


# --------------------------------------------------------------------------
# element-wise helpers on torch tensors or NumPy arrays
# --------------------------------------------------------------------------

def _torch_module(*xs):
    torch = ops._torch()
    if torch is not None and any(isinstance(x, torch.Tensor) for x in xs):
        return torch
    return None


def _float(x):
    """x as float32 (torch: keeps autograd; NumPy: a copy)."""
    torch = _torch_module(x)
    if torch is not None:
        return x.float()
    return np.asarray(x, dtype=np.float32)


def _exp(x):
    torch = _torch_module(x)
    return torch.exp(x) if torch is not None else np.exp(x)


def _softplus(x):
    """log(1 + exp(x)), as torch.nn.functional.softplus (threshold 20)."""
    torch = _torch_module(x)
    if torch is not None:
        return torch.nn.functional.softplus(x)
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0)))).astype(np.float32)


def _ones_like_heads(q):
    """beta = 1 per (B, T, H): fla's ``torch.ones_like(q[..., 0])``."""
    torch = _torch_module(q)
    if torch is not None:
        return torch.ones(q.shape[:3], dtype=torch.float32)
    return np.ones(np.shape(q)[:3], np.float32)


def _transpose_state(state):
    """[N, HV, V, K] <-> [N, HV, K, V] (fla's ``state_v_first``)."""
    if state is None:
        return None
    torch = _torch_module(state)
    if torch is not None:
        return state.transpose(-1, -2).contiguous()
    return np.ascontiguousarray(np.swapaxes(state, -1, -2))


def _unsupported(what):
    return LaError(f"la.fla: {what} is not supported by la yet")


def _check_scale(scale):
    if scale is not None and not (isinstance(scale, (int, float, np.floating, np.integer))
                                  and not isinstance(scale, bool) and scale > 0):
        raise ValueError(f"scale must be a positive number, got {scale!r}")


def _chunk_size(kwargs, default=64):
    """fla's ``chunk_size`` keyword (a tuning hint there; la's chunk size)."""
    return int(kwargs.get("chunk_size", default))


def _run(variant, q, k, v, g=None, beta=None, *, scale, initial_state, output_final_state,
         state_v_first=False, cu_seqlens=None, qk_l2norm=False, chunk_size=64,
         reverse=False, **options):
    """la.attention with fla's state layout option and ``reverse``: the
    recurrence run from the last token to the first in the kernel (the op's
    ``reverse``: every sequence's tokens visited from its end; fla's reverse
    decay between tokens t < s is ``g_t + ... + g_{s-1}``, as la's)."""
    _check_scale(scale)
    if state_v_first:
        initial_state = _transpose_state(initial_state)
    o, state = ops.attention(variant, q, k, v, g, beta, scale=scale,
                             initial_state=initial_state,
                             output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                             qk_l2norm=qk_l2norm, chunk_size=chunk_size, reverse=bool(reverse),
                             **options)
    if state_v_first:
        state = _transpose_state(state)
    return o, state


# --------------------------------------------------------------------------
# linear attention
# --------------------------------------------------------------------------

def _linear_attn(q, k, v, scale, initial_state, output_final_state, normalize, cu_seqlens,
                 chunk_size, reverse=False):
    if normalize and isinstance(initial_state, tuple):
        kv_state, z_state = initial_state
        if z_state is not None:
            raise _unsupported("an initial normaliser state z (la's normaliser starts at "
                               "zero in every call)")
        initial_state = kv_state
    o, state = _run("linear", q, k, v, scale=scale, initial_state=initial_state,
                    output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                    normalize=bool(normalize), eps=LINEAR_ATTN_EPS if normalize else None,
                    chunk_size=chunk_size, reverse=reverse)
    if not normalize:
        return o, state
    # fla returns the normaliser's state, sum_t k_t per sequence ([N, 1, H, K],
    # k's dtype), whenever normalize is set.
    torch = _torch_module(k)
    if cu_seqlens is None:
        z = k.sum(1, keepdim=True) if torch is not None else np.sum(k, 1, keepdims=True)
    else:
        offsets = [int(x) for x in (cu_seqlens.tolist() if hasattr(cu_seqlens, "tolist")
                                    else cu_seqlens)]
        parts = [k[:, a:b].sum(1, keepdim=True) if torch is not None
                 else np.sum(k[:, a:b], 1, keepdims=True)
                 for a, b in zip(offsets[:-1], offsets[1:])]
        z = torch.cat(parts, 0) if torch is not None else np.concatenate(parts, 0)
    return o, (state, z)


def chunk_linear_attn(q, k, v, scale=None, initial_state=None, output_final_state=False,
                      normalize=True, cu_seqlens=None):
    """fla.ops.linear_attn.chunk_linear_attn: ``S_t = S_{t-1} + k_t v_t^T``,
    ``o_t = S_t^T (scale q_t)``, with ``normalize`` (default True) dividing
    by ``(scale q_t) . sum_{s<=t} k_s + 1e-10``. Returns ``(o, final_state)``,
    or with ``normalize`` ``(o, (final_state, z))``, z = ``sum_t k_t``
    ``[N, 1, H, K]``."""
    return _linear_attn(q, k, v, scale, initial_state, output_final_state, normalize,
                        cu_seqlens, 64)


def fused_recurrent_linear_attn(q, k, v, scale=None, initial_state=None,
                                output_final_state=False, reverse=False, normalize=False,
                                cu_seqlens=None):
    """fla.ops.linear_attn.fused_recurrent_linear_attn (``normalize``
    defaults to False here, as in fla; ``reverse`` runs from the last token,
    the normaliser's sums too)."""
    return _linear_attn(q, k, v, scale, initial_state, output_final_state, normalize,
                        cu_seqlens, 64, reverse=bool(reverse))


# --------------------------------------------------------------------------
# retention and simple GLA
# --------------------------------------------------------------------------

def _retention_decay(H):
    """fla's (and RetNet's) per-head decay: ``log(1 - 2^(-5-h))``."""
    return np.log(1 - 2.0 ** (-5.0 - np.arange(H, dtype=np.float32))).astype(np.float32)


def chunk_retention(q, k, v, scale=None, initial_state=None, output_final_state=False,
                    cu_seqlens=None, **kwargs):
    """fla.ops.retention.chunk_retention: fixed decay ``1 - 2^(-5-h)`` per head."""
    return _run("retention", q, k, v, scale=scale, initial_state=initial_state,
                output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                log_decay=_retention_decay(np.shape(q)[2]), chunk_size=_chunk_size(kwargs))


def fused_recurrent_retention(q, k, v, scale=None, initial_state=None,
                              output_final_state=False, reverse=False, state_v_first=False,
                              cu_seqlens=None, **kwargs):
    """fla.ops.retention.fused_recurrent_retention."""
    return _run("retention", q, k, v, scale=scale, initial_state=initial_state,
                output_final_state=output_final_state, state_v_first=state_v_first,
                cu_seqlens=cu_seqlens, log_decay=_retention_decay(np.shape(q)[2]),
                reverse=bool(reverse))


def _simple_gla(q, k, v, g, g_gamma, scale, initial_state, output_final_state, state_v_first,
                cu_seqlens, chunk_size, reverse=False):
    common = dict(scale=scale, initial_state=initial_state,
                  output_final_state=output_final_state, state_v_first=state_v_first,
                  cu_seqlens=cu_seqlens, chunk_size=chunk_size, reverse=reverse)
    if g is None and g_gamma is None:
        return _run("linear", q, k, v, **common)
    if g is None:
        # A constant decay per head: compiled into the kernel (fla gives
        # g_gamma no gradient either).
        return _run("retention", q, k, v, log_decay=g_gamma, **common)
    if g_gamma is not None:
        # exp(g_t) exp(gamma_h) = exp(g_t + gamma_h): one scalar gate.
        torch = _torch_module(g_gamma)
        gamma = g_gamma.detach().float() if torch is not None else _float(g_gamma)
        g = _float(g) + gamma.reshape(1, 1, -1)
    return _run("mamba2", q, k, v, g, **common)


def chunk_simple_gla(q, k, v, g=None, g_gamma=None, scale=None, initial_state=None,
                     output_final_state=False, state_v_first=False, cu_seqlens=None,
                     cu_seqlens_cpu=None, **kwargs):
    """fla.ops.simple_gla.chunk_simple_gla: scalar log gate ``g [B, T, H]``
    and/or a constant log decay ``g_gamma [H]`` (both: both apply)."""
    return _simple_gla(q, k, v, g, g_gamma, scale, initial_state, output_final_state,
                       state_v_first, cu_seqlens, _chunk_size(kwargs))


def fused_recurrent_simple_gla(q, k, v, g=None, g_gamma=None, scale=None, initial_state=None,
                               output_final_state=False, reverse=False, state_v_first=False,
                               cu_seqlens=None, **kwargs):
    """fla.ops.simple_gla.fused_recurrent_simple_gla."""
    return _simple_gla(q, k, v, g, g_gamma, scale, initial_state, output_final_state,
                       state_v_first, cu_seqlens, 64, reverse=bool(reverse))


# --------------------------------------------------------------------------
# GLA
# --------------------------------------------------------------------------

def chunk_gla(q, k, v, g, scale=None, initial_state=None, output_final_state=False,
              state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None):
    """fla.ops.gla.chunk_gla: channel log gate ``g [B, T, H, K]``."""
    return _run("gla", q, k, v, g, scale=scale, initial_state=initial_state,
                output_final_state=output_final_state, state_v_first=state_v_first,
                cu_seqlens=cu_seqlens)


def fused_recurrent_gla(q, k, v, gk=None, gv=None, scale=None, initial_state=None,
                        output_final_state=False, reverse=False, state_v_first=False,
                        cu_seqlens=None, **kwargs):
    """fla.ops.gla.fused_recurrent_gla: key-side gate ``gk [B, T, H, K]``
    and value-side gate ``gv [B, T, HV, V]`` (log space, each optional):
    ``S_t = Diag(exp(gk_t)) S_{t-1} Diag(exp(gv_t)) + k_t v_t^T``."""
    variant = "linear" if gk is None else "gla"
    extra = {} if gv is None else {"gv": gv}
    return _run(variant, q, k, v, gk, scale=scale, initial_state=initial_state,
                output_final_state=output_final_state, state_v_first=state_v_first,
                cu_seqlens=cu_seqlens, reverse=bool(reverse), **extra)


# --------------------------------------------------------------------------
# the delta rule family
# --------------------------------------------------------------------------

def _check_beta(beta, v):
    if beta is not None and np.ndim(beta) == np.ndim(v):
        raise _unsupported("beta per value channel ([B, T, HV, V])")


def _gdn_gate(g, A_log, dt_bias):
    """Gated DeltaNet's in-kernel gate: ``-exp(A_log) * softplus(g + dt_bias)``."""
    HV = np.shape(g)[2]
    return -_exp(_float(A_log)).reshape(1, 1, HV) * _softplus(
        _float(g) + (_float(dt_bias).reshape(1, 1, HV) if dt_bias is not None else 0.0))


def chunk_delta_rule(q, k, v, beta, scale=None, initial_state=None, output_final_state=False,
                     use_qk_l2norm_in_kernel=False, cu_seqlens=None, cu_seqlens_cpu=None,
                     **kwargs):
    """fla.ops.delta_rule.chunk_delta_rule (la also takes float32 inputs)."""
    _check_beta(beta, v)
    return _run("deltanet", q, k, v, None, beta, scale=scale, initial_state=initial_state,
                output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                qk_l2norm=use_qk_l2norm_in_kernel, chunk_size=_chunk_size(kwargs))


def fused_recurrent_delta_rule(q, k, v, beta=None, scale=None, initial_state=None,
                               output_final_state=False, use_qk_l2norm_in_kernel=False,
                               cu_seqlens=None):
    """fla.ops.delta_rule.fused_recurrent_delta_rule (``beta=None``: 1)."""
    _check_beta(beta, v)
    if beta is None:
        beta = _ones_like_heads(q)
    return _run("deltanet", q, k, v, None, beta, scale=scale, initial_state=initial_state,
                output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                qk_l2norm=use_qk_l2norm_in_kernel)


def _in_kernel_beta(use_beta_sigmoid_in_kernel, allow_neg_eigval):
    """fla's beta options as la's: ``beta_sigmoid`` (the sigmoid in the
    kernel) and ``allow_neg_eigval`` (la doubles beta)."""
    if allow_neg_eigval and not use_beta_sigmoid_in_kernel:
        raise ValueError("allow_neg_eigval=True requires use_beta_sigmoid_in_kernel=True")
    return {"beta_sigmoid": bool(use_beta_sigmoid_in_kernel),
            "allow_neg_eigval": bool(allow_neg_eigval)}


def _gated_delta(q, k, v, g, gk, beta, *, scale, initial_state, output_final_state,
                 use_qk_l2norm_in_kernel, use_gate_in_kernel, A_log, dt_bias,
                 use_beta_sigmoid_in_kernel, allow_neg_eigval, state_v_first, cu_seqlens,
                 chunk_size):
    _check_beta(beta, v)
    options = {}
    if use_gate_in_kernel:
        if A_log is None:
            raise ValueError("A_log must be provided when use_gate_in_kernel=True")
        if g is None:
            raise ValueError("g must be provided when use_gate_in_kernel=True")
        if gk is None:
            options = {"gate_activation": "softplus", "A_log": A_log, "dt_bias": dt_bias}
        else:
            g = _gdn_gate(g, A_log, dt_bias)
    if beta is None:
        if use_beta_sigmoid_in_kernel:
            raise ValueError("use_beta_sigmoid_in_kernel=True needs beta")
        beta = _ones_like_heads(q)
    options.update(_in_kernel_beta(use_beta_sigmoid_in_kernel, allow_neg_eigval))
    if gk is not None:
        # A scalar and a channel gate multiply: one channel gate.
        variant, gate = "kda", _float(gk) + (_float(g)[..., None] if g is not None else 0.0)
    elif g is not None:
        variant, gate = "gated_deltanet", g
    else:
        variant, gate = "deltanet", None
    return _run(variant, q, k, v, gate, beta, scale=scale, initial_state=initial_state,
                output_final_state=output_final_state, state_v_first=state_v_first,
                cu_seqlens=cu_seqlens, qk_l2norm=use_qk_l2norm_in_kernel,
                chunk_size=chunk_size, **options)


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None,
                           output_final_state=False, use_qk_l2norm_in_kernel=False,
                           use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                           state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None,
                           chunk_indices=None, cp_context=None, **kwargs):
    """fla.ops.gated_delta_rule.chunk_gated_delta_rule: scalar log gate ``g``
    and ``beta`` per value head ``[B, T, HV]`` (or per key head);
    ``use_gate_in_kernel``, ``A_log [HV]``, ``dt_bias [HV]`` as keywords."""
    if cp_context is not None:
        raise _unsupported("cp_context (context parallelism)")
    return _gated_delta(
        q, k, v, g, None, beta, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
        use_gate_in_kernel=kwargs.get("use_gate_in_kernel", False), A_log=kwargs.get("A_log"),
        dt_bias=kwargs.get("dt_bias"), use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel,
        allow_neg_eigval=allow_neg_eigval, state_v_first=state_v_first, cu_seqlens=cu_seqlens,
        chunk_size=_chunk_size(kwargs))


def fused_recurrent_gated_delta_rule(q, k, v, g=None, gk=None, gv=None, beta=None, scale=None,
                                     initial_state=None, output_final_state=False,
                                     use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False,
                                     A_log=None, dt_bias=None, use_beta_sigmoid_in_kernel=False,
                                     allow_neg_eigval=False, state_v_first=False,
                                     cu_seqlens=None, **kwargs):
    """fla.ops.gated_delta_rule.fused_recurrent_gated_delta_rule (positional
    order q, k, v, g, gk, gv, beta as in fla; ``gv`` raises LaError)."""
    if gv is not None:
        raise _unsupported("gv (a gate on the value side of the state)")
    return _gated_delta(
        q, k, v, g, gk, beta, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
        use_gate_in_kernel=use_gate_in_kernel, A_log=A_log, dt_bias=dt_bias,
        use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel,
        allow_neg_eigval=allow_neg_eigval, state_v_first=state_v_first, cu_seqlens=cu_seqlens,
        chunk_size=64)


def _kda(q, k, v, g, beta, *, A_log, dt_bias, scale, initial_state, output_final_state,
         use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel,
         allow_neg_eigval, lower_bound, state_v_first, cu_seqlens, chunk_size):
    _check_beta(beta, v)
    options = _in_kernel_gate(A_log, dt_bias, lower_bound) if use_gate_in_kernel else {}
    options.update(_in_kernel_beta(use_beta_sigmoid_in_kernel, allow_neg_eigval))
    return _run("kda", q, k, v, g, beta, scale=scale, initial_state=initial_state,
                output_final_state=output_final_state, state_v_first=state_v_first,
                cu_seqlens=cu_seqlens, qk_l2norm=use_qk_l2norm_in_kernel,
                chunk_size=chunk_size, **options)


def _in_kernel_gate(A_log, dt_bias, lower_bound):
    """KDA's and Gated DeltaNet-2's in-kernel channel gate on ``g [B, T, HV,
    K]`` as la's ``gate_activation``: ``-exp(A_log) * softplus(g +
    dt_bias)``, or with ``lower_bound`` ``lower_bound * sigmoid(exp(A_log) *
    (g + dt_bias))`` (``A_log [HV]``, ``dt_bias [HV * K]``; A_log None: a
    factor 1)."""
    if lower_bound is None:
        return {"gate_activation": "softplus", "A_log": A_log, "dt_bias": dt_bias}
    return {"gate_activation": "sigmoid", "gate_lower_bound": float(lower_bound),
            "A_log": A_log, "dt_bias": dt_bias}


def _chunk_gate_options(kwargs, use_gate_in_kernel, safe_gate, lower_bound,
                        return_intermediate_states, cp_context):
    """The checks chunk_kda and chunk_gdn2 share; their ``A_log`` and
    ``dt_bias``, which fla reads from the keywords."""
    if return_intermediate_states:
        raise _unsupported("return_intermediate_states")
    if cp_context is not None:
        raise _unsupported("cp_context (context parallelism)")
    A_log, dt_bias = kwargs.get("A_log"), kwargs.get("dt_bias")
    if use_gate_in_kernel:
        if A_log is None and lower_bound is None:
            raise ValueError("A_log must be provided when use_gate_in_kernel=True "
                             "(or a lower_bound)")
        if safe_gate and (lower_bound is None or not -5 <= lower_bound < 0):
            raise ValueError(f"safe_gate needs a lower_bound in [-5, 0), got {lower_bound!r}")
    return A_log, dt_bias


def chunk_kda(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
              use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False,
              use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, safe_gate=False,
              lower_bound=None, disable_recompute=False, return_intermediate_states=False,
              state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None, cp_context=None,
              use_graph=False, max_num_seqs=None, **kwargs):
    """fla.ops.kda.chunk_kda: channel log gate ``g [B, T, HV, K]`` and
    ``beta [B, T, HV]`` (or per key head); ``A_log [HV]`` and
    ``dt_bias [HV * K]`` as keywords with ``use_gate_in_kernel``."""
    A_log, dt_bias = _chunk_gate_options(kwargs, use_gate_in_kernel, safe_gate, lower_bound,
                                         return_intermediate_states, cp_context)
    return _kda(q, k, v, g, beta, A_log=A_log, dt_bias=dt_bias, scale=scale,
                initial_state=initial_state, output_final_state=output_final_state,
                use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                use_gate_in_kernel=use_gate_in_kernel,
                use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel,
                allow_neg_eigval=allow_neg_eigval, lower_bound=lower_bound,
                state_v_first=state_v_first, cu_seqlens=cu_seqlens,
                chunk_size=_chunk_size(kwargs))


def fused_recurrent_kda(q, k, v, g, beta, A_log=None, dt_bias=None, scale=None,
                        initial_state=None, output_final_state=False,
                        use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False,
                        use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                        lower_bound=None, state_v_first=False, cu_seqlens=None, **kwargs):
    """fla.ops.kda.fused_recurrent_kda (``A_log``, ``dt_bias`` positional
    after beta, as in fla)."""
    return _kda(q, k, v, g, beta, A_log=A_log, dt_bias=dt_bias, scale=scale,
                initial_state=initial_state, output_final_state=output_final_state,
                use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                use_gate_in_kernel=use_gate_in_kernel,
                use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel,
                allow_neg_eigval=allow_neg_eigval, lower_bound=lower_bound,
                state_v_first=state_v_first, cu_seqlens=cu_seqlens, chunk_size=64)


# --------------------------------------------------------------------------
# Gated DeltaNet-2
# --------------------------------------------------------------------------

def _gdn2(q, k, v, g, b, w, *, A_log, dt_bias, scale, initial_state, output_final_state,
          use_qk_l2norm_in_kernel, use_gate_in_kernel, lower_bound, state_v_first, cu_seqlens,
          chunk_size):
    options = _in_kernel_gate(A_log, dt_bias, lower_bound) if use_gate_in_kernel else {}
    _check_scale(scale)
    if state_v_first:
        initial_state = _transpose_state(initial_state)
    o, state = ops.attention("gated_deltanet2", q, k, v, g, erase=b, write=w, scale=scale,
                             **options,
                             initial_state=initial_state,
                             output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                             qk_l2norm=use_qk_l2norm_in_kernel, chunk_size=chunk_size,
                             erase_read_key=True)
    if state_v_first:
        state = _transpose_state(state)
    return o, state


def chunk_gdn2(q, k, v, g, b, w, scale=None, initial_state=None, output_final_state=False,
               use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, cu_seqlens=None,
               cu_seqlens_cpu=None, safe_gate=False, lower_bound=None, disable_recompute=False,
               return_intermediate_states=False, state_v_first=False, cp_context=None,
               **kwargs):
    """fla.ops.gdn2.chunk_gdn2: ``S_t = (I - k_t (b_t * k_t)^T) Diag(exp(g_t))
    S_{t-1} + k_t (w_t * v_t)^T`` with the erase gate ``b [B, T, H, K]`` on
    the key the state is read with and the write gate ``w [B, T, HV, V]``;
    KDA's gate options (``A_log``, ``dt_bias`` as keywords)."""
    A_log, dt_bias = _chunk_gate_options(kwargs, use_gate_in_kernel, safe_gate, lower_bound,
                                         return_intermediate_states, cp_context)
    return _gdn2(q, k, v, g, b, w, A_log=A_log, dt_bias=dt_bias, scale=scale,
                 initial_state=initial_state, output_final_state=output_final_state,
                 use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                 use_gate_in_kernel=use_gate_in_kernel, lower_bound=lower_bound,
                 state_v_first=state_v_first, cu_seqlens=cu_seqlens,
                 chunk_size=_chunk_size(kwargs))


def fused_recurrent_gdn2(q, k, v, g, b, w, A_log=None, dt_bias=None, scale=None,
                         initial_state=None, output_final_state=False,
                         use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False,
                         lower_bound=None, state_v_first=False, cu_seqlens=None, **kwargs):
    """fla.ops.gdn2.fused_recurrent_gdn2 (grouped value heads: ``g``, ``b``
    ``[B, T, HV, K]``)."""
    return _gdn2(q, k, v, g, b, w, A_log=A_log, dt_bias=dt_bias, scale=scale,
                 initial_state=initial_state, output_final_state=output_final_state,
                 use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                 use_gate_in_kernel=use_gate_in_kernel, lower_bound=lower_bound,
                 state_v_first=state_v_first, cu_seqlens=cu_seqlens, chunk_size=64)


# --------------------------------------------------------------------------
# the DPLR delta rule and RWKV-7
# --------------------------------------------------------------------------

def _negated(x):
    """-x (torch: keeps autograd)."""
    if _torch_module(x) is not None:
        return -x
    return -np.asarray(x, dtype=np.float32)


def _dplr(q, k, v, a, b, gk, *, scale, initial_state, output_final_state, reverse,
          cu_seqlens, chunk_size):
    """fla's ``S_t = (Diag(exp(gk_t)) + b_t a_t^T) S_{t-1} + k_t v_t^T`` as
    la's dplr rule, ``Diag(exp(g_t)) - b_t a_t^T``, with ``-b``."""
    variant = "dplr" if gk is None else "rwkv7"
    return _run(variant, q, k, v, gk, scale=scale, initial_state=initial_state,
                output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                chunk_size=chunk_size, reverse=reverse, a=a, b=_negated(b))


def chunk_dplr_delta_rule(q, k, v, a, b, gk, scale=None, initial_state=None,
                          output_final_state=False, cu_seqlens=None, cu_seqlens_cpu=None,
                          safe_gate=False, chunk_size=None, disable_recompute=False,
                          cp_context=None, lower_bound=None, **kwargs):
    """fla.ops.generalized_delta_rule.chunk_dplr_delta_rule: ``S_t =
    (Diag(exp(gk_t)) + b_t a_t^T) S_{t-1} + k_t v_t^T`` with ``a, b, gk :
    [B, T, H, K]`` (fla's diagonal-plus-low-rank delta rule; ``gk`` may be
    None here: no decay). ``safe_gate``, ``lower_bound`` and
    ``disable_recompute`` are tuning hints of fla's kernels."""
    if cp_context is not None:
        raise _unsupported("context parallelism (cp_context)")
    return _dplr(q, k, v, a, b, gk, scale=scale, initial_state=initial_state,
                 output_final_state=output_final_state, reverse=False,
                 cu_seqlens=cu_seqlens, chunk_size=64 if chunk_size is None else int(chunk_size))


def fused_recurrent_dplr_delta_rule(q, k, v, a, b, gk, scale=None, initial_state=None,
                                    output_final_state=False, reverse=False, cu_seqlens=None):
    """fla.ops.generalized_delta_rule.fused_recurrent_dplr_delta_rule (with
    ``reverse``: every sequence run from its last token to its first)."""
    return _dplr(q, k, v, a, b, gk, scale=scale, initial_state=initial_state,
                 output_final_state=output_final_state, reverse=reverse,
                 cu_seqlens=cu_seqlens, chunk_size=64)


def chunk_rwkv7(r, w, k, v, a, b, scale=1.0, initial_state=None, output_final_state=False,
                cu_seqlens=None, cu_seqlens_cpu=None, safe_gate=False, chunk_size=None,
                disable_recompute=False, cp_context=None, lower_bound=None):
    """fla.ops.rwkv7.chunk_rwkv7: RWKV-7's time mixing, the DPLR delta rule
    with receptance ``r`` as the query and log decay ``w``; ``scale``
    defaults to 1 (as fla's)."""
    return chunk_dplr_delta_rule(r, k, v, a, b, w, scale=scale, initial_state=initial_state,
                                 output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                                 chunk_size=chunk_size, cp_context=cp_context)


def fused_recurrent_rwkv7(r, w, k, v, a, b, scale=None, initial_state=None,
                          output_final_state=True, cu_seqlens=None):
    """fla.ops.rwkv7.fused_recurrent_rwkv7 (fla's defaults: ``scale`` None
    is ``K ** -0.5``, the final state is returned)."""
    return fused_recurrent_dplr_delta_rule(r, k, v, a, b, w, scale=scale,
                                           initial_state=initial_state,
                                           output_final_state=output_final_state,
                                           cu_seqlens=cu_seqlens)


# --------------------------------------------------------------------------
# Gated DeltaProduct: n Householder steps per token
# --------------------------------------------------------------------------

def _interleave(x, n, position):
    """``[B, T, ...] -> [B, T*n, ...]`` with ``x[:, t]`` at token ``t*n +
    position`` and zeros at the others (torch: keeps autograd)."""
    torch = _torch_module(x)
    if torch is not None:
        zeros = torch.zeros_like(x)
        parts = [x if i == position else zeros for i in range(n)]
        stacked = torch.stack(parts, dim=2)
        return stacked.reshape(x.shape[0], x.shape[1] * n, *x.shape[2:])
    x = np.asarray(x)
    out = np.zeros((x.shape[0], x.shape[1] * n) + x.shape[2:], dtype=x.dtype)
    out[:, position::n] = x
    return out


def chunk_gated_delta_product(q, k, v, g, beta, num_householder, scale=None,
                              initial_state=None, output_final_state=False,
                              use_qk_l2norm_in_kernel=False, cu_seqlens=None,
                              cu_seqlens_cpu=None, cp_context=None):
    """fla.ops.gated_delta_product.chunk_gated_delta_product: per token
    ``t``, the decay ``exp(g_t)`` then ``n = num_householder`` delta-rule
    steps ``S <- (I - beta_j k_j k_j^T) S + beta_j k_j v_j^T`` (``k, v,
    beta`` hold ``T * n`` tokens, ``q`` and ``g [B, T, H]`` hold ``T``), and
    the read ``o_t = S^T (scale q_t)`` after the last step.

    A composition of la's delta rule: the ``T * n`` steps run as one
    (Gated) DeltaNet over ``T * n`` tokens, with ``g_t`` on each token's
    first step, zero (no decay) on the others, and ``q_t`` on its last step,
    zero on the others, whose outputs are dropped. The state transition is
    the product of the ``n`` Householder-like factors exactly; the cost is
    the delta rule's over ``T * n`` tokens (fla's kernel skips the dropped
    outputs)."""
    if cp_context is not None:
        raise _unsupported("context parallelism (cp_context)")
    n = int(num_householder)
    if n < 1:
        raise ValueError(f"num_householder must be >= 1, got {num_householder!r}")
    B, T = np.shape(q)[:2]
    for name, x in (("k", k), ("v", v), ("beta", beta)):
        if np.shape(x)[:2] != (B, T * n):
            raise ValueError(f"{name} must have T * num_householder = {T * n} tokens "
                             f"(B = {B}), got shape {tuple(np.shape(x))}")
    if cu_seqlens is not None:
        torch = _torch_module(cu_seqlens)
        cu_seqlens = cu_seqlens * n if torch is not None else np.asarray(cu_seqlens) * n
    q_steps = _interleave(q, n, n - 1)
    g_steps = None if g is None else _interleave(g, n, 0)
    variant = "deltanet" if g is None else "gated_deltanet"
    o, state = ops.attention(variant, q_steps, k, v, g_steps, beta, scale=scale,
                             initial_state=initial_state,
                             output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                             qk_l2norm=use_qk_l2norm_in_kernel)
    return o[:, n - 1::n], state


def _l2normalized(x):
    """fla's l2norm_fwd: ``x / sqrt(sum(x^2) + 1e-6)`` over the last axis."""
    torch = _torch_module(x)
    if torch is not None:
        x = x.float()
        return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)
    x = np.asarray(x, np.float32)
    return x / np.sqrt((x * x).sum(-1, keepdims=True) + np.float32(1e-6))


def chunk_momentum_delta_rule(q, k, v, log_alpha, log_mu, p=None, beta=None, eta=None,
                              scale=None, initial_state=None, output_final_state=False,
                              cu_seqlens=None, use_qk_l2norm_in_kernel=True,
                              use_p_times_alpha=True, chunk_size=64):
    """fla.ops.momentum_delta_rule.chunk_momentum_delta_rule: Momentum
    DeltaNet with fla's conventions (q, k and p L2-normalised in the kernel by
    default, ``p = k`` when None, the read key ``p * alpha`` with
    ``use_p_times_alpha``, beta and eta 1 when None, ``initial_state`` and
    the final state stacked ``[2, B, H, K, V]``: S, then M). la runs it as
    :func:`la.family.momentum_delta_rule`; it also takes float32 and
    ``cu_seqlens`` (fla's raises for both)."""
    p = k if p is None else p
    if use_qk_l2norm_in_kernel:
        q, k, p = (_l2normalized(x) for x in (q, k, p))
    if use_p_times_alpha:
        p = _float(p) * _exp(_float(log_alpha))[..., None]
    from . import family
    result = family.momentum_delta_rule(
        _float(q), _float(k), v, _float(p), log_alpha, log_mu, beta, eta, scale=scale,
        initial_state=initial_state, output_final_state=True, cu_seqlens=cu_seqlens,
        chunk_size=chunk_size)
    o, state = result
    torch = _torch_module(v)
    if torch is not None and o.dtype != v.dtype:
        o = o.to(v.dtype)
    return o, (state if output_final_state else None)


def fused_recurrent_momentum_delta_rule(q, k, v, log_alpha, log_mu, p=None, beta=None,
                                        eta=None, scale=None, initial_state=None,
                                        output_final_state=False, cu_seqlens=None,
                                        use_qk_l2norm_in_kernel=True,
                                        use_p_times_alpha=True):
    """fla.ops.momentum_delta_rule.fused_recurrent_momentum_delta_rule (the
    same function as :func:`chunk_momentum_delta_rule` in la)."""
    return chunk_momentum_delta_rule(
        q, k, v, log_alpha, log_mu, p, beta, eta, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state, cu_seqlens=cu_seqlens,
        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, use_p_times_alpha=use_p_times_alpha)


# --------------------------------------------------------------------------
# log-linear attention
# --------------------------------------------------------------------------

def chunk_log_linear_attn(q, k, v, g, level_scales, initial_state=None,
                          output_final_state=False, cu_seqlens=None, scale=1.0):
    """fla.ops.log_linear_attn.chunk_log_linear_attn: log-linear attention
    over Mamba-2 (``g : [B, T, H]`` per value head, ``level_scales : [B, T,
    H, L]``), as :func:`la.family.log_linear_attention` composes it from
    O(log T) la calls; ``cu_seqlens`` gives each packed sequence buckets of
    its own. fla's Fenwick-tree states (``initial_state``,
    ``output_final_state``) are not supported yet."""
    from . import family
    if initial_state is not None or output_final_state:
        raise _unsupported("log-linear attention's Fenwick-tree state "
                           "(initial_state, output_final_state)")
    return family.log_linear_attention(q, k, v, g, level_scales, cu_seqlens=cu_seqlens,
                                       scale=scale if scale is not None
                                       else np.shape(q)[-1] ** -0.5), None
