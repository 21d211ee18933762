"""Members of the linear-attention family that enter la as compositions of
la ops rather than as a variant of their own (docs/family.md).

* :func:`mixture_of_memories`: Mixture-of-Memories (Du et al., 2025, "MoM:
  Linear Sequence Modeling with Mixture-of-Memories"). Each token is routed
  to some of ``M`` memories, each a linear-attention or delta-rule state of
  its own; a memory that a token is not routed to is left as it is (no
  write, no decay), and the output mixes the memories' reads with the
  router's weights.
* :func:`log_linear_attention`: log-linear attention (Guo et al., 2025)
  over Mamba-2, Gated DeltaNet and la's other additive and delta-rule
  recurrences: a Fenwick-tree hierarchy of O(log T) bucket states, each
  level one la call over aligned blocks.
* :func:`hedgehog_features` and :func:`sliding_window_hybrid`: Hedgehog's
  learned feature map, and LoLCATs' softmax-in-a-window plus linear
  attention outside it, one normalisation over both (the forward is one la
  op, ``la.sliding_window_hybrid``).
* :func:`variational_linear_attention`: VLA (Pandey and Singh, 2026), a
  Sherman-Morrison penalty pass that gives each token its write direction,
  then la's dplr recurrence with those directions.

The routing is data: the memories are ``M`` more heads of one la kernel
whose writes and decays are masked where a token is not routed, so a new
routing never recompiles (the cost is that of ``M`` memories at every
token, not of the ``top_k`` a token uses).
"""

import collections

import numpy as np

from . import ops
from .fla import _torch_module

__all__ = ["mixture_of_memories", "hedgehog_features", "sliding_window_hybrid",
           "log_linear_attention", "variational_linear_attention", "VLAState",
           "hola_attention", "HOLAState", "momentum_delta_rule"]

#: the memory kinds: la variants whose key and gate operands a routing mask
#: can zero (no write, no decay)
_MEMORIES = ("linear", "gla", "mamba2", "deltanet", "gated_deltanet", "kda")


def mixture_of_memories(q, k, v, routing, memory="gated_deltanet", g=None, beta=None, *,
                        scale=None, initial_state=None, output_final_state=False,
                        cu_seqlens=None, chunk_size=64, num_threads=None):
    """Mixture-of-Memories over ``M`` memories of one kind.

    ``q : [B, T, H, K]`` is shared by the memories; each memory has its own
    keys and values, ``k : [B, T, M, H, K]`` and ``v : [B, T, M, H, V]``
    (and, for gated or delta-rule memories, its own ``g : [B, T, M, H]``
    (scalar gate) or ``[B, T, M, H, K]`` (channel gate) and ``beta : [B,
    T, M, H]``). ``routing : [B, T, M]`` holds the router's weights after
    its top-k: a token is routed to the memories whose weight is not zero.
    ``memory`` is the memories' rule: ``linear``, ``gla``, ``mamba2``,
    ``deltanet``, ``gated_deltanet`` or ``kda`` (delta-rule memories want
    L2-normalised keys, as la's delta rule does).

    Memory ``m`` at token ``t``: routed, its state takes the rule's step
    with ``k[t, m]``, ``v[t, m]`` (and its gate and beta); not routed, it is
    kept (no write, no decay). The output is ``o_t = sum_m routing[t, m]
    S^m_t^T (scale q_t)``. States are ``[N, M, H, K, V]``.

    One la call: each (sequence, memory) pair's routed tokens, in time
    order, are a packed sequence of it (``T * top_k`` tokens in all), and
    each pair's read is added to its token's output with its weight.

    Returns ``(o [B, T, H, V], final_state or None)``; differentiable with
    torch through la's derived backward and torch's gathers and products
    around it.
    """
    if memory not in _MEMORIES:
        raise ValueError(f"unknown memory kind {memory!r}; expected one of {_MEMORIES}")
    variant = memory
    B, T, H, K = np.shape(q)
    if np.ndim(k) != 5 or np.shape(k)[:2] != (B, T) or np.shape(k)[3:] != (H, K):
        raise ValueError(f"k must be [B, T, M, H, K] with B={B}, T={T}, H={H}, K={K}, "
                         f"got shape {tuple(np.shape(k))}")
    M = np.shape(k)[2]
    if np.ndim(v) != 5 or np.shape(v)[:4] != (B, T, M, H):
        raise ValueError(f"v must be [B, T, M, H, V] with M={M}, got shape "
                         f"{tuple(np.shape(v))}")
    if tuple(np.shape(routing)) != (B, T, M):
        raise ValueError(f"routing must be [B, T, M] = {(B, T, M)}, got shape "
                         f"{tuple(np.shape(routing))}")
    V = np.shape(v)[4]
    torch = _torch_module(q, k, v, routing, g, beta, initial_state)
    if torch is None:
        q, k, v, routing = (np.asarray(x, dtype=np.float32) for x in (q, k, v, routing))
        g = None if g is None else np.asarray(g, dtype=np.float32)
        beta = None if beta is None else np.asarray(beta, dtype=np.float32)
    update, gate = ops.VARIANTS[variant]
    if gate in ("scalar", "channel"):
        if g is None:
            raise ValueError(f"{memory} memories need the gate g")
    elif g is not None:
        raise ValueError(f"{memory} memories take no gate g")
    if update == "delta":
        if beta is None:
            raise ValueError(f"{memory} memories need beta [B, T, M, H]")
    elif beta is not None:
        raise ValueError(f"{memory} memories take no beta")
    # A memory changes only at the tokens routed to it, so memory m of
    # sequence n is the rule over those tokens alone: packed sequences (n, m)
    # of one la call, T * top_k tokens in all instead of T * M. The routing
    # is data (the offsets): a new routing never recompiles.
    routed = np.asarray((routing.detach() if torch is not None else routing) != 0)
    routed = routed.reshape(B * T, M)
    if cu_seqlens is None:
        N = B
        sequence_of = np.repeat(np.arange(B), T)
    else:
        offsets = np.asarray(cu_seqlens.detach().cpu() if torch is not None else cu_seqlens,
                             np.int64)
        if B != 1 or offsets.ndim != 1 or len(offsets) < 2 or offsets[0] != 0 \
                or offsets[-1] != T or np.any(np.diff(offsets) < 0):
            raise ValueError("cu_seqlens must be non-decreasing offsets from 0 to T with B = 1, "
                             f"got {offsets.tolist()} for B = {B}, T = {T}")
        N = len(offsets) - 1
        sequence_of = np.repeat(np.arange(N), np.diff(offsets))
    token, which = np.nonzero(routed)              # in token order, then memory
    order = np.lexsort((token, which, sequence_of[token]))
    token, which = token[order], which[order]
    counts = np.bincount(sequence_of[token] * M + which, minlength=N * M)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    s0 = None
    if initial_state is not None:
        s0 = initial_state.reshape((N * M, H, K, V))
    if torch is not None:
        token_t = torch.as_tensor(token, device=q.device)
        which_t = torch.as_tensor(which, device=q.device)

    def gathered(x, per_memory=True):
        """The routed (token, memory) pairs' rows of x ([B, T, M, ...] or,
        without ``per_memory``, [B, T, ...]), as one packed row [1, P, ...]."""
        flat = x.reshape((B * T,) + tuple(x.shape[2:]))
        if torch is not None:
            rows = flat[token_t, which_t] if per_memory else flat[token_t]
        else:
            rows = flat[token, which] if per_memory else flat[token]
        return rows[None]

    P = len(token)
    if P == 0:
        # No token is routed anywhere: every memory is kept, the output zero.
        o = (q.new_zeros((B, T, H, V)) if torch is not None
             else np.zeros((B, T, H, V), np.float32))
        state = None
        if output_final_state:
            state = (initial_state if initial_state is not None else
                     (q.new_zeros((N, M, H, K, V)) if torch is not None
                      else np.zeros((N, M, H, K, V), np.float32)))
        return o, state
    o_pairs, state = ops.attention(
        variant, gathered(q, per_memory=False), gathered(k), gathered(v),
        None if g is None else gathered(g), None if beta is None else gathered(beta),
        scale=scale, initial_state=s0, output_final_state=output_final_state,
        cu_seqlens=offsets, chunk_size=chunk_size, num_threads=num_threads)
    # o_t = sum over t's memories of routing[t, m] (its read at t).
    weights = gathered(routing[..., None])[0]                        # [P, 1]
    weighted = o_pairs[0] * weights[:, :, None]                      # [P, H, V]
    if torch is not None:
        o = torch.zeros((B * T, H, V), dtype=weighted.dtype, device=weighted.device)
        o = o.index_add(0, token_t, weighted)
    else:
        # One memory at a time: its pairs' tokens are distinct, so a plain
        # indexed add sums them (np.add.at and reduceat are far slower).
        o = np.zeros((B * T, H, V), np.float32)
        for m in range(M):
            pairs = which == m
            o[token[pairs]] += weighted[pairs]
    o = o.reshape((B, T, H, V))
    if state is not None:
        state = state.reshape((N, M, H, K, V))
    return o, state


# --------------------------------------------------------------------------
# learned feature maps and the sliding-window hybrid
# --------------------------------------------------------------------------

def hedgehog_features(x, weight, bias=None):
    """Hedgehog's learned feature map (Zhang et al., ICLR 2024, "The
    Hedgehog & the Porcupine"): ``phi(x) = [softmax(x W + c), softmax(-(x W + c))]``
    over the features, ``x : [B, T, H, D]``, ``weight : [H, D, F]``,
    ``bias : [H, F]``; returns ``[B, T, H, 2F]``, positive features whose
    dot products stand in for ``exp(q . k)``. torch or NumPy (torch keeps
    autograd for the map's parameters)."""
    torch = _torch_module(x, weight, bias)
    if torch is not None:
        z = torch.einsum("bthd,hdf->bthf", x, weight)
        if bias is not None:
            z = z + bias
        return torch.cat([torch.softmax(z, -1), torch.softmax(-z, -1)], -1)
    z = np.einsum("bthd,hdf->bthf", np.asarray(x, np.float32), np.asarray(weight, np.float32))
    if bias is not None:
        z = z + np.asarray(bias, np.float32)

    def softmax(y):
        e = np.exp(y - y.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    return np.concatenate([softmax(z), softmax(-z)], -1).astype(np.float32)


def sliding_window_hybrid(q, k, v, feature_q, feature_k, window, *, scale=None,
                          initial_state=None, output_final_state=False,
                          cu_seqlens=None, chunk_size=64, num_threads=None):
    """Softmax attention inside a sliding window and linear attention on
    learned features outside it, one normalisation over both (LoLCATs'
    hybrid; Zhang et al., ICLR 2025, "LoLCATs: On Low-Rank Linearizing of
    Large Language Models"):

        o_t = (sum_{t-w < s <= t} exp(scale q_t . k_s) v_s
               + sum_{s <= t-w} (phi_q(t) . phi_k(s)) v_s)
              / (the same sums without v)

    ``q, k : [B, T, H, K]``, ``v : [B, T, H, V]``, ``feature_q, feature_k :
    [B, T, H, F]`` (e.g. :func:`hedgehog_features`), ``window`` w >= 1;
    ``feature_q`` and ``feature_k`` may both be :class:`la.ops.HedgehogMap`
    ``(weight, bias)``: the kernel then computes the features (this map)
    itself. ``cu_seqlens`` packs sequences (B = 1). ``initial_state`` /
    ``output_final_state``: decoding or a prompt in pieces, as
    :func:`la.ops.sliding_window_hybrid` (a :class:`la.ops.HybridState`).

    One la kernel, the op ``la.sliding_window_hybrid``
    (:func:`la.ops.sliding_window_hybrid`); with torch tensors that need
    gradients its backward is the kernel la-derive-backward derives from
    the op. NumPy arrays compute in their dtype when they share one that la
    takes (float32, float16, bfloat16), in float32 otherwise. Returns ``o :
    [B, T, H, V]`` (and the state with ``output_final_state``)."""
    window = int(window)
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    # HedgehogMaps (the features computed in the kernel) carry f32 weights.
    inputs = (q, k, v) + tuple(x for x in (feature_q, feature_k)
                               if not isinstance(x, ops.HedgehogMap))
    dtype = None
    if _torch_module(*inputs) is None:
        names = {np.asarray(x).dtype.name for x in inputs}
        if len(names) != 1 or not names <= {"float32", "float16", "bfloat16"}:
            dtype = "f32"
    return ops.sliding_window_hybrid(q, k, v, feature_q, feature_k, window, scale=scale,
                                     initial_state=initial_state,
                                     output_final_state=output_final_state,
                                     cu_seqlens=cu_seqlens, chunk_size=chunk_size,
                                     dtype=dtype, num_threads=num_threads)


# --------------------------------------------------------------------------
# log-linear attention
# --------------------------------------------------------------------------

def _pad_time(x, length):
    """x with zero tokens appended up to ``length`` (torch: keeps autograd)."""
    extra = length - x.shape[1]
    if extra == 0:
        return x
    torch = _torch_module(x)
    if torch is not None:
        return torch.cat([x, x.new_zeros((x.shape[0], extra) + tuple(x.shape[2:]))], 1)
    return np.concatenate([x, np.zeros((x.shape[0], extra) + x.shape[2:], x.dtype)], 1)


#: log-linear attention's base recurrences: the la variant, and whether its
#: write is scaled by beta (the delta rule) and its gate is per channel
_LOG_LINEAR = {"linear": (False, None), "mamba2": (False, "scalar"),
               "gla": (False, "channel"), "deltanet": (True, None),
               "gated_deltanet": (True, "scalar"), "kda": (True, "channel")}


#: log-linear attention's levels inside one aligned block of this many
#: tokens come from one masked product per block (below) instead of one la
#: call per level
_LOG_LINEAR_BLOCK = 64


def _block_levels(size):
    """``[size, size]`` Fenwick levels ``floor(log2(t xor s)) + 1`` of the
    pairs s < t of one aligned block (0 where s >= t)."""
    t, s = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
    xor = np.bitwise_xor(t, s)
    levels = np.zeros((size, size), np.int64)
    below = s < t
    levels[below] = np.floor(np.log2(xor[below])).astype(np.int64) + 1
    return levels


def _check_log_linear_operand(x, name, B, T, H, HV, K, per_channel):
    """g or beta: ``[B, T, H]`` or ``[B, T, HV]``, with K last per channel."""
    shape = tuple(np.shape(x))
    tail = (K,) if per_channel else ()
    if shape not in ((B, T, H) + tail, (B, T, HV) + tail):
        what = "[B, T, H, K] or [B, T, HV, K]" if per_channel else "[B, T, H] or [B, T, HV]"
        raise ValueError(f"{name} must be {what} = {(B, T, H) + tail} or {(B, T, HV) + tail}, "
                         f"got {shape}")


def _unpack_sequences(cu_seqlens, T):
    """(index [N, Tmax] of each sequence's tokens, clamped past its end;
    sequence and position of every packed token) for packed sequences."""
    offsets = np.asarray(cu_seqlens, dtype=np.int64).reshape(-1)
    if offsets.size < 2 or offsets[0] != 0 or offsets[-1] != T or np.any(np.diff(offsets) < 0):
        raise ValueError(f"cu_seqlens must rise from 0 to T = {T}, got {offsets.tolist()}")
    lengths = np.diff(offsets)
    longest = max(int(lengths.max()), 1)
    index = np.minimum(offsets[:-1, None] + np.arange(longest)[None, :], max(T - 1, 0))
    sequence = np.repeat(np.arange(lengths.size), lengths)
    position = np.arange(T) - offsets[sequence]
    return index, sequence, position


def _is_position(x):
    return not isinstance(x, bool) and isinstance(x, (int, np.integer)) and x >= 0


def _packed_starts(start, cu_seqlens, T):
    """One start position per packed sequence, from one for all or a list."""
    count = len(_unpack_sequences(cu_seqlens, T)[0])
    if _is_position(start):
        return [int(start)] * count
    starts = list(np.asarray(start).reshape(-1)) if np.ndim(start) == 1 else None
    if starts is None or len(starts) != count or not all(_is_position(x) for x in starts):
        raise ValueError(f"start must be a token position >= 0, or one per packed sequence "
                         f"({count}), got {start!r}")
    return [int(x) for x in starts]


def _log_linear_packed_pieces(q, k, v, g, level_scales, variant, beta, scale, cu_seqlens,
                              starts, initial_state, output_final_state, chunk_size,
                              num_threads):
    """log_linear_attention with cu_seqlens and a carried state: each packed
    sequence its own call from its own start and state."""
    T = np.shape(q)[1]
    HV, V, K = np.shape(v)[2], np.shape(v)[3], np.shape(k)[3]
    offsets = np.asarray(cu_seqlens, dtype=np.int64).reshape(-1)
    count = offsets.size - 1
    if initial_state is not None and (np.ndim(initial_state) != 5 or
                                      np.shape(initial_state)[0] != count or
                                      tuple(np.shape(initial_state)[2:]) != (HV, K, V)):
        raise ValueError(f"initial_state must be [N, L', HV, K, V] = {count} x L' x "
                         f"{(HV, K, V)} with cu_seqlens (one state per sequence), got "
                         f"{tuple(np.shape(initial_state))}")
    torch = _torch_module(q, k, v, g, beta, level_scales, initial_state)
    outputs, states = [], []
    for i in range(count):
        first, last = int(offsets[i]), int(offsets[i + 1])
        carried = None if initial_state is None else initial_state[i:i + 1]
        if first == last:
            # No token: the state stays (zero without one).
            if carried is None:
                carried = (torch.zeros((1, 1, HV, K, V)) if torch is not None
                           else np.zeros((1, 1, HV, K, V), np.float32))
            states.append(carried)
            continue
        piece = [None if x is None else x[:, first:last] for x in (q, k, v, g, beta,
                                                                   level_scales)]
        o, state = log_linear_attention(*piece[:4], piece[5], variant=variant, beta=piece[4],
                                        scale=scale, start=starts[i], initial_state=carried,
                                        output_final_state=True, chunk_size=chunk_size,
                                        num_threads=num_threads)
        outputs.append(o)
        states.append(state)
    if torch is not None:
        o = torch.cat(outputs, 1) if outputs else torch.zeros((1, T, HV, V))
    else:
        o = np.concatenate(outputs, 1) if outputs else np.zeros((1, T, HV, V), np.float32)
    if not output_final_state:
        return o
    levels = max(x.shape[1] for x in states)
    padded = []
    for state in states:
        top = state[:, -1:]
        extra = levels - state.shape[1]
        if extra:
            state = (torch.cat([state] + [top] * extra, 1) if torch is not None
                     else np.concatenate([state] + [top] * extra, 1))
        padded.append(state)
    return o, (torch.cat(padded, 0) if torch is not None else np.concatenate(padded, 0))


def log_linear_attention(q, k, v, g, level_scales, *, variant=None, beta=None, scale=1.0,
                         cu_seqlens=None, start=0, initial_state=None,
                         output_final_state=False, chunk_size=64, num_threads=None):
    """Log-linear attention (Guo et al., 2025, "Log-Linear Attention") over
    la's recurrences: the tokens before t fall into the Fenwick-tree buckets
    of t, level ``l(t, s) = floor(log2(t xor s)) + 1`` for ``s < t`` (a
    bucket of ``2^(l-1)`` tokens, present when bit ``l-1`` of t is set) and
    level 0 for ``s = t``, and each bucket is read with its own weight:

        o_t = sum_{s <= t} level_scales[t, l(t, s)] scale q_t^T P(t, s) w_s v_s^T

    where ``P(t, s) = A_t ... A_{s+1}`` are the base recurrence's transitions
    and ``w_s`` its write key: the paper's ``(A ⊙ M^H) V`` with ``A`` the base
    model's attention matrix. ``variant`` (default ``mamba2``, or ``linear``
    without ``g``) is the base: ``linear``, ``mamba2`` (``g [B, T, HV]``),
    ``gla`` (``g [B, T, H, K]``), or the delta rule's ``deltanet``,
    ``gated_deltanet`` (log-linear Gated DeltaNet) and ``kda`` with
    ``beta`` (``A_s = (I - beta_s k_s k_s^T) Diag(exp(g_s))``, ``w_s =
    beta_s k_s``); g and beta may be per key head or per value head.

    ``q, k : [B, T, H, K]``, ``v : [B, T, HV, V]`` (HV a multiple of H),
    ``level_scales : [B, T, HV, L]`` with ``L >= ceil(log2 T) + 1`` levels.
    ``scale`` defaults to 1 (fla's ``chunk_log_linear_attn``). With
    ``cu_seqlens`` (B = 1) each packed sequence has its own buckets, counted
    from its first token.

    A composition of O(log T) la calls: the bucket of level l is the first
    half of the aligned block of ``2^l`` tokens that holds t, so level l is
    the base recurrence over those blocks as sequences of their own (a
    reshape, no reset), with the values zeroed in each block's second half
    (its tokens still apply their transitions: the delta rule's erase and
    the decay) and the output read there; level 0 is the diagonal ``scale
    (q_t . w_t) v_t``. Work O(T log T). Returns ``o : [B, T, HV, V]``.

    The Fenwick-tree state carries a sequence across calls (decoding, or a
    prompt in pieces): ``start`` is the position of the call's first token
    (the tokens before it were in earlier calls; the buckets are counted
    from position 0, and ``level_scales`` needs ``L >= ceil(log2(start +
    T)) + 1``), ``initial_state [B, L', HV, K, V]`` the state those calls
    ended with, and ``output_final_state=True`` returns ``(o,
    final_state)`` with ``final_state [B, L - 1, HV, K, V]``: for each level
    l >= 1, the base recurrence's state over the tokens of the open block
    of ``2^l`` (zero when the call ends on the block's boundary), which the
    next call continues; levels beyond ``L'`` start at zero. With
    ``cu_seqlens`` the state is per sequence: ``start`` one position per
    sequence (or one for all), ``initial_state [N, L', HV, K, V]`` and the
    final state ``[N, L'', HV, K, V]``, a sequence with fewer levels than
    the longest padded with copies of its top level (which stands for every
    level above it); each sequence is then its own composition (one per
    sequence: O(N log T) la calls), an empty one keeps its state."""
    if variant is None:
        variant = "mamba2" if g is not None else "linear"
    if variant not in _LOG_LINEAR:
        raise ValueError(f"log-linear attention's variant must be one of {sorted(_LOG_LINEAR)}, "
                         f"got {variant!r}")
    delta, gate = _LOG_LINEAR[variant]
    B, T, H, K = np.shape(q)
    HV, V = np.shape(v)[2], np.shape(v)[3]
    if np.shape(k) != (B, T, H, K) or np.shape(v)[:2] != (B, T) or HV % H:
        raise ValueError(f"k must be {(B, T, H, K)} like q and v [B, T, HV, V] with HV a "
                         f"multiple of H, got {tuple(np.shape(k))} and {tuple(np.shape(v))}")
    if cu_seqlens is not None and B != 1:
        raise ValueError(f"cu_seqlens needs B = 1 (packed sequences), got B = {B}")
    if cu_seqlens is not None and (not _is_position(start) or start or
                                   initial_state is not None or output_final_state):
        starts = _packed_starts(start, cu_seqlens, T)
        return _log_linear_packed_pieces(q, k, v, g, level_scales, variant, beta, scale,
                                         cu_seqlens, starts, initial_state, output_final_state,
                                         chunk_size, num_threads)
    if not _is_position(start):
        raise ValueError(f"start must be a token position >= 0, got {start!r}")
    start = int(start)
    end = start + T
    levels = int(np.ceil(np.log2(end))) + 1 if end > 1 else 1
    if np.ndim(level_scales) != 4 or tuple(np.shape(level_scales)[:3]) != (B, T, HV) or \
            np.shape(level_scales)[3] < levels:
        raise ValueError(f"level_scales must be [B, T, HV, L] = {(B, T, HV)} x L with "
                         f"L >= {levels} levels, got {tuple(np.shape(level_scales))}")
    if initial_state is not None and (np.ndim(initial_state) != 5 or
                                      tuple(np.shape(initial_state)[2:]) != (HV, K, V) or
                                      np.shape(initial_state)[0] != B):
        raise ValueError(f"initial_state must be [B, L', HV, K, V] = {B} x L' x {(HV, K, V)} "
                         f"(one state per level >= 1), got {tuple(np.shape(initial_state))}")
    if (g is None) != (gate is None):
        raise ValueError(f"{variant} {'takes no' if gate is None else 'needs a'} gate g")
    if g is not None:
        _check_log_linear_operand(g, "g", B, T, H, HV, K, gate == "channel")
    if (beta is None) == delta:
        raise ValueError(f"{variant} {'needs' if delta else 'takes no'} beta")
    if beta is not None:
        _check_log_linear_operand(beta, "beta", B, T, H, HV, K, False)
    torch = _torch_module(q, k, v, g, beta, level_scales, initial_state)
    if torch is None:
        q, k, v, level_scales = (np.asarray(x, np.float32) for x in (q, k, v, level_scales))
        g = None if g is None else np.asarray(g, np.float32)
        beta = None if beta is None else np.asarray(beta, np.float32)
        if initial_state is not None:
            initial_state = np.asarray(initial_state, np.float32)
    if cu_seqlens is not None:
        # Each sequence a batch row of its own, padded at its end (causal:
        # the padding never reaches a sequence's tokens), then packed back.
        index, sequence, position = _unpack_sequences(cu_seqlens, T)
        if torch is not None:
            index = torch.as_tensor(index, device=q.device)
        rows = [None if x is None else x[0][index] for x in (q, k, v, g, level_scales, beta)]
        o = log_linear_attention(*rows[:5], variant=variant, beta=rows[5], scale=scale,
                                 chunk_size=chunk_size, num_threads=num_threads)
        if torch is not None:
            sequence = torch.as_tensor(sequence, device=q.device)
            position = torch.as_tensor(position, device=q.device)
        return o[sequence, position][None]

    group = HV // H

    def per_value_head(x):
        """[B, T, H or HV] -> [B, T, HV]."""
        if x.shape[2] == HV:
            return x
        return x.repeat_interleave(group, 2) if torch is not None else np.repeat(x, group, 2)

    positions = start + np.arange(T)
    # Level 0: the token itself, scale (q_t . w_t) v_t.
    diagonal = per_value_head((q * k).sum(-1)) * scale              # [B, T, HV]
    if beta is not None:
        diagonal = diagonal * per_value_head(beta)
    o = (level_scales[..., 0] * diagonal)[..., None] * v
    zero_state = (torch.zeros((B, HV, K, V), dtype=torch.float32) if torch is not None
                  else np.zeros((B, HV, K, V), np.float32))
    final_states = []

    def call(qs, ks, vs, gs, betas, state, want_state):
        # A final state only where it is kept: a level's blocks are rows of
        # their own, so their states alone would be B * T / 2^l * HV * K * V
        # floats (1 GiB for level 1 at T = 4096, H = 8, K = V = 128).
        return ops.attention(variant, qs, ks, vs, gs, betas, scale=scale,
                             initial_state=state, output_final_state=want_state,
                             chunk_size=chunk_size, num_threads=num_threads)

    # The levels whose buckets lie inside one aligned block of
    # _LOG_LINEAR_BLOCK tokens (the call starting on a block boundary, so
    # that every block's earlier tokens are in this call): the base
    # recurrence over each block with one-hot values gives the block's
    # attention matrix A[t, s] = scale q_t^T P(t, s) w_s (its output row t,
    # column s), and those levels' outputs are one product per block,
    # (A * level_scales[t, l(t, s)]) v, instead of one la call per level
    # (whose rows of 2^l tokens each carry a K x V state).
    block = _LOG_LINEAR_BLOCK
    in_block = 0
    if start % block == 0 and T > 1:
        in_block = min(block.bit_length() - 1, levels - 1)
        count = -(-T // block)
        padded = count * block

        def rows(x):
            x = _pad_time(x, padded)
            return x.reshape((B * count, block) + tuple(x.shape[2:]))

        one_hot = np.zeros((B * count, block, HV, block), np.float32)
        one_hot[:, np.arange(block), :, np.arange(block)] = 1.0
        if torch is not None:
            one_hot = torch.as_tensor(one_hot, device=v.device)
        scores, _ = call(rows(q), rows(k), one_hot, None if g is None else rows(g),
                         None if beta is None else rows(beta), None, False)
        # per pair the weight of its level (pairs of the diagonal are level 0,
        # done above; those past a sequence's end are padding)
        pair_levels = _block_levels(block)
        scales = rows(level_scales)                                   # [R, C, HV, L]
        index = np.minimum(pair_levels, scales.shape[3] - 1)[None, :, None, :]
        below = (pair_levels > 0).astype(np.float32)[None, :, None, :]
        if torch is not None:
            index = torch.as_tensor(index, device=v.device).expand(
                scales.shape[0], block, HV, block)
            weights = torch.gather(scales, 3, index) * torch.as_tensor(below, device=v.device)
            o_block = torch.matmul((scores * weights).transpose(1, 2), rows(v).transpose(1, 2))
            o_block = o_block.transpose(1, 2).reshape((B, padded, HV, V))[:, :T]
        else:
            weights = np.take_along_axis(scales, np.broadcast_to(
                index, (scales.shape[0], block, HV, block)), 3) * below
            o_block = np.matmul((scores * weights).transpose(0, 2, 1, 3),
                                rows(v).transpose(0, 2, 1, 3))
            o_block = o_block.transpose(0, 2, 1, 3).reshape((B, padded, HV, V))[:, :T]
        o = o + o_block

    # With a state to return, one level more: the tokens so far are all in
    # the first half of its block, so its state (every token written) is
    # that of every level above it, which the next call may open.
    top = levels + 1 if output_final_state else levels
    for level in range(1, top):
        size, half = 1 << level, 1 << (level - 1)
        if level <= in_block and not output_final_state:
            final_states.append(None)  # (not returned)
            continue
        written = (positions % size) < half                          # values of the first half
        read = (positions % size) >= half                            # queries of the second
        if torch is not None:
            written_t = torch.tensor(written, dtype=v.dtype, device=v.device)
            read_t = torch.tensor(read, dtype=level_scales.dtype, device=v.device)
        else:
            written_t, read_t = written.astype(np.float32), read.astype(np.float32)
        values = v * written_t[None, :, None, None]
        # The tokens before the first block boundary continue the carried
        # block (from the level's state); the rest are whole blocks.
        head = min((-start) % size, T)
        carried = None
        if initial_state is not None and initial_state.shape[1]:
            # levels above the carried ones share its top level's state
            carried = initial_state[:, min(level, initial_state.shape[1]) - 1]
        parts, state = [], zero_state
        if head:
            o_head, state = call(q[:, :head], k[:, :head], values[:, :head],
                                 None if g is None else g[:, :head],
                                 None if beta is None else beta[:, :head], carried,
                                 output_final_state)
            parts.append(o_head)
        if head < T:
            rest = T - head
            padded = -(-rest // size) * size
            count = padded // size

            def blocks(x):
                x = _pad_time(x[:, head:], padded)
                return x.reshape((B * count, size) + tuple(x.shape[2:]))

            def last_block(x):
                return None if x is None else blocks(x)[count - 1::count]

            if level > in_block:
                o_tail, _ = call(blocks(q), blocks(k), blocks(values),
                                 None if g is None else blocks(g),
                                 None if beta is None else blocks(beta), None, False)
                parts.append(o_tail.reshape((B, padded, HV, V))[:, :rest])
            if output_final_state:
                # the last block's state (its padding is after its tokens),
                # from that block of each row alone
                _, state = call(last_block(q), last_block(k), last_block(values),
                                last_block(g), last_block(beta), None, True)
        if level <= in_block:
            # (its output came from the block products; here only its state)
            final_states.append(zero_state if end % size == 0 else state)
            continue
        o_level = parts[0] if len(parts) == 1 else (
            torch.cat(parts, 1) if torch is not None else np.concatenate(parts, 1))
        if level < levels:
            weight = level_scales[..., level] * read_t[None, :, None]   # [B, T, HV]
            o = o + weight[..., None] * o_level
        # A call that ends on the level's block boundary leaves no open block.
        final_states.append(zero_state if end % size == 0 else state)
    if not output_final_state:
        return o
    # (never empty: with a state to return the loop runs level 1 at least)
    stack = torch.stack if torch is not None else np.stack
    return o, stack(final_states, 1)


# --------------------------------------------------------------------------
# Variational Linear Attention
# --------------------------------------------------------------------------

def _cumsum_rows(x, block=64):
    """np.cumsum(x, 1) of a float32 [N, L, ...] array by blocks of tokens:
    a lower-triangular product per block (BLAS) plus the blocks' running
    totals; NumPy's own accumulate along a middle axis is about ten times
    slower (60 ms for 4M floats)."""
    N, L = x.shape[:2]
    if x.size == 0:
        return np.cumsum(x, 1, dtype=np.float32)
    flat = np.asarray(x, np.float32).reshape(N, L, -1)
    pad = (-L) % block
    if pad:
        flat = np.concatenate([flat, np.zeros((N, pad, flat.shape[2]), np.float32)], 1)
    blocks = flat.reshape(N, -1, block, flat.shape[2])
    within = np.tril(np.ones((block, block), np.float32)) @ blocks
    totals = within[:, :, -1]
    within += (np.cumsum(totals, 1) - totals)[:, :, None]
    return within.reshape(N, -1, flat.shape[2])[:, :L].reshape(x.shape)


def _penalty_pass_sequential(P, u_rows, k_unit, valid, position0, period, eta, eps, eye,
                             unit, torch):
    """VLA's penalty pass token by token (Sherman-Morrison with the eps
    clamp): the write directions [N, L, H, K] and the last P."""
    N, L, H, K = u_rows.shape
    refresh = valid & ((position0[:, None] + np.arange(L)[None, :] + 1) % period == 0)
    directions = []
    for t in range(L):
        ut = u_rows[:, t]                                            # [N, H, K]
        x = (P @ ut[..., None])[..., 0]
        delta = 1.0 + (ut * x).sum(-1)
        delta = np.maximum(delta, eps) if torch is None else delta.clamp_min(eps)
        P = P - x[..., :, None] * x[..., None, :] / delta[..., None, None]
        if refresh[:, t].any():
            mask = refresh[:, t].astype(np.float32)[:, None, None, None] * np.float32(eta)
            P = P + (torch.as_tensor(mask) if torch is not None else mask) * eye
        directions.append(unit((P @ k_unit[:, t][..., None])[..., 0]))
    if not directions:
        zeros = torch.zeros if torch is not None else (lambda shape: np.zeros(shape, np.float32))
        return zeros((N, 0, H, K)), P
    return (torch.stack(directions, 1) if torch is not None else np.stack(directions, 1)), P


#: the longest block of the blocked penalty pass: a refresh period longer
#: than this is split into blocks of this many tokens
_PENALTY_BLOCK = 64


def _penalty_pass_blocked(P, u_rows, k_unit, valid, position0, period, eta, eye, unit,
                          torch):
    """VLA's penalty pass a block of tokens at a time (Woodbury). Between
    two refreshes, ``P_t = (P_r^{-1} + U_t U_t^T)^{-1}`` with ``U_t = [u_{r+1}
    .. u_t]``, so with the Cholesky factor ``L L^T = I + U^T P_r U`` of the
    block, ``Q = P_r U L^{-T}`` and ``W = L^{-1} U^T P_r Kh``, every token's
    ``P_t kh_t = P_r kh_t - sum_{s <= t} Q_s W_{s t}`` (the leading blocks of
    L are the factors of the leading blocks of ``I + U^T P_r U``), and the
    block ends with ``P_r - Q Q^T``: matrix products in place of a step per
    token. The rows are padded in front to the refresh's phase, so that the
    refreshes fall on block ends in every row. It takes no eps clamp: with P
    positive definite, as every update keeps it, ``1 + u^T P u >= 1``; a
    factorisation that fails (P not positive definite) raises, and the caller
    runs the sequential pass."""
    N, L, H, K = u_rows.shape
    pad = position0 % period                                         # [N]
    width = L + int(pad.max()) if N else L
    source = np.arange(width)[None, :] - pad[:, None]               # [N, width]
    inside = (source >= 0) & (source < L)
    inside &= np.take_along_axis(valid, np.clip(source, 0, max(L - 1, 0)), 1) if L else inside
    gather = np.clip(source, 0, max(L - 1, 0))
    rows = np.arange(N)[:, None]
    if torch is not None:
        mask = torch.as_tensor(inside, dtype=torch.float32)[..., None, None]
        u_pad = u_rows[torch.as_tensor(rows), torch.as_tensor(gather)] * mask if L else \
            torch.zeros((N, width, H, K))
        k_pad = k_unit[torch.as_tensor(rows), torch.as_tensor(gather)] * mask if L else u_pad
        transpose = lambda x: x.transpose(-1, -2)                    # noqa: E731
        solve = lambda a, b: torch.linalg.solve_triangular(a, b, upper=False)  # noqa: E731
        cholesky = torch.linalg.cholesky
    else:
        mask = inside[..., None, None].astype(np.float32)
        u_pad = u_rows[rows, gather] * mask if L else np.zeros((N, width, H, K), np.float32)
        k_pad = k_unit[rows, gather] * mask if L else u_pad
        transpose = lambda x: np.swapaxes(x, -1, -2)                 # noqa: E731
        solve = np.linalg.solve
        cholesky = np.linalg.cholesky
    step = period if period <= _PENALTY_BLOCK else _PENALTY_BLOCK
    bounds = sorted(set(range(0, width, step)) | set(range(0, width, period)) | {width})
    directions = []
    for start, stop in zip(bounds[:-1], bounds[1:]):
        size = stop - start
        U = u_pad[:, start:stop].transpose(1, 2) if torch is not None else \
            np.swapaxes(u_pad[:, start:stop], 1, 2)                  # [N, H, p, K]
        Kh = k_pad[:, start:stop].transpose(1, 2) if torch is not None else \
            np.swapaxes(k_pad[:, start:stop], 1, 2)
        PU = P @ transpose(U)                                        # [N, H, K, p]
        identity = eye[:size, :size] if size <= eye.shape[0] else (
            torch.eye(size) if torch is not None else np.eye(size, dtype=np.float32))
        factor = cholesky(identity + U @ PU)                         # [N, H, p, p]
        if torch is None and not np.isfinite(factor).all():
            raise np.linalg.LinAlgError("not positive definite")
        Qt = solve(factor, transpose(PU))                            # Q^T [N, H, p, K]
        W = solve(factor, transpose(PU) @ transpose(Kh))             # [N, H, p, p]
        causal = np.triu(np.ones((size, size), np.float32))          # s <= t
        if torch is not None:
            causal = torch.as_tensor(causal)
        x = transpose(P @ transpose(Kh) - transpose(Qt) @ (W * causal))  # [N, H, p, K]
        P = P - transpose(Qt) @ Qt
        if stop % period == 0:
            # the refresh comes before the last token's direction is read
            hit = inside[:, stop - 1].astype(np.float32)[:, None, None, None] * np.float32(eta)
            hit = torch.as_tensor(hit) if torch is not None else hit
            P = P + hit * eye
            last = (np.arange(size) == size - 1).astype(np.float32)[:, None]
            x = x + hit * (torch.as_tensor(last) if torch is not None else last) * Kh
        directions.append(unit(x))                                   # [N, H, p, K]
    if directions:
        cat = torch.cat if torch is not None else np.concatenate
        padded = cat(directions, 2)                                  # [N, H, width, K]
        padded = padded.transpose(1, 2) if torch is not None else np.swapaxes(padded, 1, 2)
        back = np.arange(L)[None, :] + pad[:, None]
        w_rows = padded[torch.as_tensor(rows), torch.as_tensor(back)] if torch is not None \
            else padded[rows, back]
    else:
        w_rows = torch.zeros((N, L, H, K)) if torch is not None else \
            np.zeros((N, L, H, K), np.float32)
    return w_rows, P


#: VLA's carried state per sequence: la's memory ``state [N, HV, K, V]``, the
#: inverse penalty ``penalty [N, H, K, K]``, the key sum ``normalizer [N, H,
#: K]`` and ``position [N]``, the tokens seen (the refresh's phase).
VLAState = collections.namedtuple("VLAState", "state penalty normalizer position")


def _positive_float(value, name, allow_zero=False):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) \
            or not np.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}")
    return float(value)


def _check_vla_state(state, N, H, HV, K, V):
    if not isinstance(state, tuple) or len(state) != 4:
        raise ValueError("initial_state must be a VLAState (state, penalty, normalizer, "
                         f"position), got {type(state).__name__}")
    state = VLAState(*state)
    for name, shape in (("state", (N, HV, K, V)), ("penalty", (N, H, K, K)),
                        ("normalizer", (N, H, K)), ("position", (N,))):
        got = tuple(np.shape(getattr(state, name)))
        if got != shape:
            raise ValueError(f"initial_state.{name} must have shape {shape}, got {got}")
    position = np.asarray(state.position.cpu() if hasattr(state.position, "cpu")
                          else state.position)
    if not np.issubdtype(position.dtype, np.integer) or np.any(position < 0):
        raise ValueError(f"initial_state.position must hold token counts >= 0, got "
                         f"{position.tolist()}")
    return state, position.astype(np.int64)


def variational_linear_attention(q, k, v, u, *, lambda0=0.1, eta=1e-3, period=20, eps=1e-4,
                                 initial_state=None, output_final_state=False,
                                 cu_seqlens=None, chunk_size=64, num_threads=None,
                                 penalty_pass="blocked"):
    """Variational Linear Attention (Pandey and Singh, 2026, "Variational
    Linear Attention: Stable Associative Memory for Long-Context
    Transformers"; the recurrence of the authors' code, docs/family.md):
    the memory update is an online regularised least-squares step whose
    inverse penalty ``P`` follows Sherman-Morrison rank-one updates. Per
    sequence and head, from ``P_0 = I / lambda0``, token t (n its position
    in the sequence, counted from 1):

        x = P u_t;  P = P - x x^T / max(1 + u_t . x, eps)
        P = P + eta I                                when n % period == 0
        kh_t = k_t / |k_t|;  w_t = P kh_t / |P kh_t|
        S_t = (I - w_t kh_t^T) S_{t-1} + w_t v_t^T   (S : [K, V], la's layout)
        z_t = z_{t-1} + k_t;  o_t = S_t^T q_t / max(z_t . q_t, eps)

    ``q, k : [B, T, H, K]`` are the feature-mapped queries and keys (VLA's
    ``ELU + 1``: positive), ``v : [B, T, HV, V]`` (HV a multiple of H),
    ``u : [B, T, H, K]`` the penalty directions (VLA's ``normalize(W_u
    k_raw) / sqrt(K)``). Defaults are the authors' (lambda0 0.1, eta 1e-3
    every 20 tokens, eps 1e-4).

    A composition: ``P`` depends on the u's only, so a penalty pass (NumPy
    or torch, O(T K^2) per head) gives every token its write direction
    ``w_t``, and the memory is then la's ``dplr`` recurrence with ``a =
    kh``, ``b = w``, write key ``w`` (chunked, in la's kernel); the
    normaliser is a cumulative sum. The penalty pass runs by blocks between
    refreshes (``penalty_pass='blocked'``: Woodbury, matrix products per
    block; the refresh ``+ eta I`` adds to ``P``, not to its inverse, so a
    block cannot span one) and falls back to the token-by-token pass
    (``'sequential'``, with the eps clamp) when a block's ``I + U^T P U`` is
    not positive definite (a carried P that is not).

    ``cu_seqlens`` (B = 1): each packed sequence starts from the initial
    state (its own row of it). ``initial_state`` a :class:`VLAState` (rows
    per sequence), ``output_final_state=True`` returns ``(o, VLAState)``;
    a call continued from the state it returned equals one call. torch
    tensors keep autograd (the penalty pass through torch, the memory
    through la's derived gradient). Returns ``o : [B, T, HV, V]``."""
    B, T, H, K = np.shape(q)
    if np.ndim(v) != 4 or tuple(np.shape(v)[:2]) != (B, T) or np.shape(v)[2] % H:
        raise ValueError(f"v must be [B, T, HV, V] with (B, T) = {(B, T)} and HV a multiple "
                         f"of H = {H}, got {tuple(np.shape(v))}")
    HV, V = np.shape(v)[2], np.shape(v)[3]
    for name, x in (("k", k), ("u", u)):
        if tuple(np.shape(x)) != (B, T, H, K):
            raise ValueError(f"{name} must be [B, T, H, K] = {(B, T, H, K)} like q, got "
                             f"{tuple(np.shape(x))}")
    lambda0 = _positive_float(lambda0, "lambda0")
    eta = _positive_float(eta, "eta", allow_zero=True)
    eps = _positive_float(eps, "eps")
    if isinstance(period, bool) or not isinstance(period, (int, np.integer)) or period < 1:
        raise ValueError(f"period must be an integer >= 1, got {period!r}")
    if penalty_pass not in ("blocked", "sequential"):
        raise ValueError(f"penalty_pass must be 'blocked' or 'sequential', got {penalty_pass!r}")
    if cu_seqlens is not None:
        if B != 1:
            raise ValueError(f"cu_seqlens needs B = 1 (packed sequences), got B = {B}")
        index, sequence, position = _unpack_sequences(cu_seqlens, T)
        N, L = index.shape[0], index.shape[1]
        lengths = np.diff(np.asarray(cu_seqlens, dtype=np.int64).reshape(-1))
    else:
        N, L, lengths = B, T, np.full(B, T, np.int64)
    torch = _torch_module(q, k, v, u, *(initial_state or ()))
    if initial_state is not None:
        initial_state, position0 = _check_vla_state(initial_state, N, H, HV, K, V)
    else:
        position0 = np.zeros(N, np.int64)
    if torch is None:
        q, k, v, u = (np.asarray(x, np.float32) for x in (q, k, v, u))

    def unit(x):
        """x / |x| over the last axis (zero stays zero; torch: no NaN gradient)."""
        square = (x * x).sum(-1, keepdims=True) if torch is None else \
            (x * x).sum(-1, keepdim=True)
        if torch is None:
            return x / np.sqrt(np.maximum(square, 1e-30))
        return x * torch.rsqrt(square.clamp_min(1e-30))

    # The penalty pass, one row per sequence (padded with u = 0 after its end:
    # no update; the refresh masked there too).
    valid = np.arange(L)[None, :] < lengths[:, None]                 # [N, L]
    if torch is not None:
        u32, k32 = u.float(), k.float()
        if cu_seqlens is not None:
            index_t = torch.as_tensor(index)
            u_rows = u32[0][index_t] * torch.as_tensor(valid, dtype=torch.float32)[..., None, None]
            k_rows = k32[0][index_t]
        else:
            u_rows, k_rows = u32, k32
        eye = torch.eye(K, dtype=torch.float32)
        if initial_state is None:
            P = (eye / lambda0).expand(N, H, K, K)
        else:
            P = initial_state.penalty.float()
    else:
        u_rows = u[0][index] * valid[..., None, None] if cu_seqlens is not None else u
        k_rows = k[0][index] if cu_seqlens is not None else k
        eye = np.eye(K, dtype=np.float32)
        P = (np.broadcast_to(eye / np.float32(lambda0), (N, H, K, K)) if initial_state is None
             else np.asarray(initial_state.penalty, np.float32))
    k_unit = unit(k_rows)
    if penalty_pass == "blocked":
        try:
            w_rows, P = _penalty_pass_blocked(P, u_rows, k_unit, valid, position0, period,
                                              eta, eye, unit, torch)
        except (np.linalg.LinAlgError, RuntimeError):
            penalty_pass = "sequential"  # I + U^T P U not positive definite
    if penalty_pass == "sequential":
        w_rows, P = _penalty_pass_sequential(P, u_rows, k_unit, valid, position0, period,
                                             eta, eps, eye, unit, torch)
    # The key sums, and both packed back.
    z0 = (initial_state.normalizer if initial_state is not None else
          (torch.zeros((N, H, K)) if torch is not None else np.zeros((N, H, K), np.float32)))
    z0 = z0.float() if torch is not None else np.asarray(z0, np.float32)
    k_masked = k_rows * (torch.as_tensor(valid, dtype=torch.float32)[..., None, None]
                         if torch is not None else valid[..., None, None])
    z_rows = (torch.cumsum(k_masked, 1) if torch is not None else _cumsum_rows(k_masked)) \
        + z0[:, None]
    z_final = z_rows[:, -1] if L else z0
    if cu_seqlens is not None:
        if torch is not None:
            sequence_t, position_t = torch.as_tensor(sequence), torch.as_tensor(position)
        else:
            sequence_t, position_t = sequence, position
        w, z = w_rows[sequence_t, position_t][None], z_rows[sequence_t, position_t][None]
    else:
        w, z = w_rows, z_rows
    kh = unit(k.float() if torch is not None else k)
    if torch is not None and q.dtype != torch.float32:
        w, kh = w.to(q.dtype), kh.to(q.dtype)
    state0 = None if initial_state is None else initial_state.state
    o, state = ops.attention("dplr", q, w, v, a=kh, b=w, scale=1.0, initial_state=state0,
                             output_final_state=True, cu_seqlens=cu_seqlens,
                             chunk_size=chunk_size, num_threads=num_threads)
    qf = q.float() if torch is not None else q
    den = (z * qf).sum(-1)
    den = np.maximum(den, eps) if torch is None else den.clamp_min(eps)   # [B, T, H]
    group = HV // H
    if group > 1:
        den = den.repeat_interleave(group, 2) if torch is not None else np.repeat(den, group, 2)
    o = o / den[..., None] if torch is None else (o / den[..., None]).to(o.dtype)
    if not output_final_state:
        return o
    return o, VLAState(state, P, z_final, position0 + lengths)


# --------------------------------------------------------------------------
# HOLA: a Gated DeltaNet state and a bounded exact cache
# --------------------------------------------------------------------------

def _shifted_one_token(x, starts, torch):
    """x moved one token later, with zeros at every sequence's first token."""
    zeros = (x.new_zeros((x.shape[0], 1) + tuple(x.shape[2:])) if torch is not None
             else np.zeros((x.shape[0], 1) + x.shape[2:], x.dtype))
    cat = torch.cat if torch is not None else np.concatenate
    out = cat([zeros, x[:, :-1]], 1) if x.shape[1] else x
    keep = np.ones(x.shape[1], np.float32)
    keep[starts[starts < x.shape[1]]] = 0.0
    keep = keep.reshape((1, -1) + (1,) * (x.ndim - 2))
    return out * (torch.as_tensor(keep, dtype=x.dtype) if torch is not None else keep)


#: HOLA's carried state per sequence, for decoding: the recurrent ``state
#: [N, HV, K, V]``; the cache, ``cache_keys [N, HV, w, K]``, ``cache_values
#: [N, HV, w, V]`` and the sizes m of its tokens ``cache_sizes [N, HV, w]``
#: (-inf in an empty slot); the open block's tokens, ``block_keys [N, HV, C,
#: K]``, ``block_values [N, HV, C, V]``, ``block_sizes [N, HV, C]`` (the
#: first ``position % C`` slots); and ``position [N]``, the tokens seen.
HOLAState = collections.namedtuple(
    "HOLAState", "state cache_keys cache_values cache_sizes block_keys block_values "
    "block_sizes position")


def _check_hola_state(state, N, HV, K, V, w, C):
    if len(state) != 8:
        raise ValueError("initial_state must be a recurrent state [N, HV, K, V] or a "
                         f"HOLAState, got a tuple of {len(state)}")
    state = HOLAState(*state)
    for name, shape in (("state", (N, HV, K, V)), ("cache_keys", (N, HV, w, K)),
                        ("cache_values", (N, HV, w, V)), ("cache_sizes", (N, HV, w)),
                        ("block_keys", (N, HV, C, K)), ("block_values", (N, HV, C, V)),
                        ("block_sizes", (N, HV, C)), ("position", (N,))):
        got = tuple(np.shape(getattr(state, name)))
        if got != shape:
            raise ValueError(f"initial_state.{name} must have shape {shape} (cache_size "
                             f"{w}, block_size {C}), got {got}")
    position = np.asarray(state.position.cpu() if hasattr(state.position, "cpu")
                          else state.position)
    if not np.issubdtype(position.dtype, np.integer) or np.any(position < 0):
        raise ValueError(f"initial_state.position must hold token counts >= 0, got "
                         f"{position.tolist()}")
    sizes = [np.asarray(x.detach().cpu() if hasattr(x, "detach") else x, np.float64)
             for x in (state.cache_sizes, state.block_sizes)]
    if any(np.isnan(x).any() or np.isposinf(x).any() for x in sizes):
        raise ValueError("initial_state's cache_sizes and block_sizes must be finite or -inf")
    return state._replace(cache_sizes=sizes[0], block_sizes=sizes[1],
                          position=position.astype(np.int64))


def hola_attention(q, k, v, g, beta, cache_weight, *, cache_size=64, block_size=256,
                   gamma_q=None, gamma_k=None, sink=None, scale=None, initial_state=None,
                   output_final_state=False, cu_seqlens=None, chunk_size=64,
                   num_threads=None, cache="surprise"):
    """HOLA (Cui, 2026, "A Hippocampus for Linear Attention: An Exact Memory
    for What the Recurrent State Forgets"): a Gated DeltaNet state read
    together with a bounded exact cache of the tokens that wrote most into
    it. Per value head:

        e_t = v_t - exp(g_t) S_{t-1}^T k_t     (the delta rule's residual)
        m_t = beta_t |e_t|                     (the write's size)
        o_t = S_t^T (scale q_t) + cache_weight sum_j softmax_j(qn_t . kn_j / sqrt(K)) v_j

    where the softmax runs over the cache of token t: the ``cache_size``
    tokens with the largest m among the blocks (``block_size`` tokens from
    the sequence's start) before t's block (ties: the earlier token), the
    tokens of t's block up to t, and a null sink (logit ``sink [HV]``,
    value 0) when given; ``qn, kn`` are RMSNorm with scales ``gamma_q,
    gamma_k [K]`` (shared by the heads; default ones). The paper's defaults:
    64 tokens, blocks of 256; ``cache_weight [HV]`` is the per-head mixing
    coefficient after whatever activation the model gives it (the paper
    learns it from a per-head parameter initialised at -4 and does not
    state the map). ``cache='recent'`` keeps the ``cache_size`` latest
    tokens of the blocks before t's instead (the paper's recency control: a
    sliding window over whole blocks, plus t's block).

    ``q, k : [B, T, H, K]`` (L2-normalised, as Gated DeltaNet takes them),
    ``v : [B, T, HV, V]``, ``g, beta : [B, T, H] or [B, T, HV]``. A
    composition of two la calls and a blocked softmax: the state's read is
    la's ``gated_deltanet``; the residuals come from a second la call on
    the same recurrence shifted one token later and read with the keys
    (``S_{t-1}^T k_t``: la's state includes token t); the cache is chosen
    per block from the detached m (a top-k: no gradient through the choice)
    and read with torch or NumPy. ``cu_seqlens`` (B = 1) gives each
    sequence its own cache and blocks.

    ``initial_state``: the recurrent state ``[N, HV, K, V]`` alone (the
    cache starts empty), or a :class:`HOLAState`, which also carries the
    cache, the open block's tokens and the position (decoding, or a prompt
    in pieces: a call continued from the state another returned equals one
    call). ``output_final_state=True`` returns ``(o, HOLAState)``;
    otherwise ``o``."""
    B, T, H, K = np.shape(q)
    if np.ndim(v) != 4 or tuple(np.shape(v)[:2]) != (B, T) or np.shape(v)[2] % H:
        raise ValueError(f"v must be [B, T, HV, V] with (B, T) = {(B, T)} and HV a multiple "
                         f"of H = {H}, got {tuple(np.shape(v))}")
    HV, V = np.shape(v)[2], np.shape(v)[3]
    if tuple(np.shape(k)) != (B, T, H, K):
        raise ValueError(f"k must be [B, T, H, K] = {(B, T, H, K)} like q, got "
                         f"{tuple(np.shape(k))}")
    for name, x in (("g", g), ("beta", beta)):
        _check_log_linear_operand(x, name, B, T, H, HV, K, False)
    for name, x, shape in (("cache_weight", cache_weight, (HV,)), ("sink", sink, (HV,)),
                           ("gamma_q", gamma_q, (K,)), ("gamma_k", gamma_k, (K,))):
        if x is not None and tuple(np.shape(x)) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(np.shape(x))}")
    for name, value in (("cache_size", cache_size), ("block_size", block_size)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if cache not in ("surprise", "recent"):
        raise ValueError(f"cache must be 'surprise' or 'recent', got {cache!r}")
    recent = cache == "recent"
    if cu_seqlens is not None and B != 1:
        raise ValueError(f"cu_seqlens needs B = 1 (packed sequences), got B = {B}")
    N = B if cu_seqlens is None else np.asarray(cu_seqlens).reshape(-1).size - 1
    carried = None
    if isinstance(initial_state, tuple):
        carried = _check_hola_state(initial_state, N, HV, K, V, cache_size, block_size)
        initial_state = carried.state
    torch = _torch_module(q, k, v, g, beta, cache_weight, gamma_q, gamma_k, sink,
                          initial_state, *(carried or ()))
    if torch is None:
        q, k, v, g, beta, cache_weight = (np.asarray(x, np.float32)
                                          for x in (q, k, v, g, beta, cache_weight))
        xp = np
    else:
        xp = torch

    def as_float(x):
        if x is None:
            return None
        return torch.as_tensor(x).float() if torch is not None else np.asarray(x, np.float32)

    scale = K ** -0.5 if scale is None else float(scale)
    common = dict(cu_seqlens=cu_seqlens, chunk_size=chunk_size, num_threads=num_threads)
    o_state, final = ops.attention("gated_deltanet", q, k, v, g, beta, scale=scale,
                                   initial_state=initial_state, output_final_state=True,
                                   **common)
    # e_t from S_{t-1}^T k_t: the same recurrence one token later, read with k.
    if cu_seqlens is not None:
        index, sequence, position = _unpack_sequences(cu_seqlens, T)
        starts = np.asarray(cu_seqlens, np.int64).reshape(-1)[:-1]
        lengths = np.diff(np.asarray(cu_seqlens, np.int64).reshape(-1))
    else:
        starts, lengths = np.zeros(1, np.int64), np.full(B, T, np.int64)
    shifted = [_shifted_one_token(x, starts, torch) for x in (k, v, g, beta)]
    previous, _ = ops.attention("gated_deltanet", k, *shifted, scale=1.0,
                                initial_state=initial_state, **common)
    group = HV // H

    def per_value_head(x):
        if x.shape[2] == HV:
            return x
        return x.repeat_interleave(group, 2) if torch is not None else np.repeat(x, group, 2)

    gf, betaf = per_value_head(as_float(g)), per_value_head(as_float(beta))
    vf = as_float(v)
    residual = vf - xp.exp(gf)[..., None] * as_float(previous)
    size = betaf * (residual * residual).sum(-1) ** 0.5              # m [B, T, HV]
    m = (size.detach().numpy() if torch is not None else size).astype(np.float64)

    def rms_normalized(x, gamma):
        """RMSNorm over the last axis, times ``gamma`` (Qwen3's, eps 1e-6)."""
        square = (x * x).mean(-1, keepdims=True) if torch is None else \
            (x * x).mean(-1, keepdim=True)
        y = x / (square + 1e-6) ** 0.5
        return y if gamma is None else y * gamma

    # The cache read, one row per sequence. A row's sources are the carried
    # cache (slots 0..w-1), the carried open block (w..w+C-1) and the call's
    # tokens; its extended positions are the open block's tokens and then the
    # call's, so that its blocks start at the row's first position.
    w, C = cache_size, block_size
    if cu_seqlens is not None:
        rows = torch.as_tensor(index) if torch is not None else index
        q_rows, k_rows = per_value_head(as_float(q))[0][rows], per_value_head(as_float(k))[0][rows]
        v_rows, m_rows = vf[0][rows], m[0][index]
    else:
        q_rows, k_rows = per_value_head(as_float(q)), per_value_head(as_float(k))
        v_rows, m_rows = vf, m
    N, L = q_rows.shape[0], q_rows.shape[1]
    if carried is None:
        zeros = torch.zeros if torch is not None else (lambda shape: np.zeros(shape, np.float32))
        carried = HOLAState(None, zeros((N, HV, w, K)), zeros((N, HV, w, V)),
                            np.full((N, HV, w), -np.inf), zeros((N, HV, C, K)),
                            zeros((N, HV, C, V)), np.full((N, HV, C), -np.inf),
                            np.zeros(N, np.int64))

    def rows_first(x):
        """[N, HV, S, D] -> [N, S, HV, D]."""
        return as_float(x).transpose(1, 2) if torch is not None else np.swapaxes(x, 1, 2)

    source_k = xp.concatenate([rows_first(carried.cache_keys), rows_first(carried.block_keys),
                               k_rows], 1)                           # [N, w + C + L, HV, K]
    source_v = xp.concatenate([rows_first(carried.cache_values),
                               rows_first(carried.block_values), v_rows], 1)
    source_m = np.concatenate([np.swapaxes(np.asarray(carried.cache_sizes, np.float64), 1, 2),
                               np.swapaxes(np.asarray(carried.block_sizes, np.float64), 1, 2),
                               np.where((np.arange(L)[None, :] < lengths[:, None])[..., None],
                                        m_rows, -np.inf)], 1)        # [N, w + C + L, HV]
    source_q = xp.concatenate([xp.zeros((N, w + C, HV, K)), q_rows], 1)
    opened = np.asarray(carried.position, np.int64) % C             # open block's tokens
    ends = opened + lengths                                          # extended row lengths
    width = int(ends.max()) if N else 0
    extended = np.arange(width)[None, :]
    ext_index = np.where(extended < opened[:, None], w + extended,
                         np.minimum(w + C + extended - opened[:, None], w + C + L - 1))
    ext_valid = extended < ends[:, None]
    batch_rows = np.arange(N)[:, None]
    heads = np.arange(HV)[None, :, None]
    batch = np.arange(N)[:, None, None]

    def index(x, *indices):
        return x[tuple(torch.as_tensor(np.array(i, np.int64)) for i in indices)] \
            if torch is not None else x[indices]

    source_kn = rms_normalized(source_k, as_float(gamma_k))
    ext_q = rms_normalized(index(source_q, batch_rows, ext_index), as_float(gamma_q))
    ext_k, ext_v = index(source_kn, batch_rows, ext_index), index(source_v, batch_rows, ext_index)

    def merged(cache, block_start):
        """Top w of the cache and the block at ``block_start`` (extended
        positions; for each row only if it is complete there), in token order."""
        stop = block_start + C
        block = np.broadcast_to(ext_index[:, None, block_start:stop],
                                (N, HV, min(stop, width) - block_start))
        candidates = np.concatenate([cache, block], 2)
        scores = np.take_along_axis(np.swapaxes(source_m, 1, 2), candidates, 2)
        if recent:  # the latest tokens (source order is time order)
            scores = np.where(np.isfinite(scores), candidates.astype(np.float64), -np.inf)
        complete = (stop <= ends)[:, None, None]
        scores[..., w:] = np.where(complete, scores[..., w:], -np.inf)
        order = np.lexsort((candidates, -scores), axis=2)[..., :w]
        return np.sort(np.take_along_axis(candidates, order, 2), axis=2)

    reads = []
    cache = np.broadcast_to(np.arange(w), (N, HV, w))               # source indices
    for start in range(0, width, C):
        stop = min(start + C, width)
        if start:
            cache = merged(cache, start - C)
        cached_m = np.take_along_axis(np.swapaxes(source_m, 1, 2), cache, 2)   # [N, HV, w]
        ck = index(source_kn, batch, cache, heads)                   # [N, HV, w, K]
        cv = index(source_v, batch, cache, heads)
        bq, bk, bv = (x[:, start:stop].transpose(1, 2) if torch is not None
                      else np.swapaxes(x[:, start:stop], 1, 2) for x in (ext_q, ext_k, ext_v))
        size = stop - start

        def transposed(x):
            return x.transpose(-1, -2) if torch is not None else np.swapaxes(x, -1, -2)

        logits = xp.concatenate([bq @ transposed(ck), bq @ transposed(bk)], -1) / np.sqrt(K)
        allowed = np.concatenate(
            [np.broadcast_to(np.isfinite(cached_m)[:, :, None, :], (N, HV, size, w)),
             np.broadcast_to(np.tril(np.ones((size, size), bool))
                             & ext_valid[:, None, None, start:stop], (N, HV, size, size))], -1)
        values = xp.concatenate([cv, bv], 2)
        if sink is not None:
            column = as_float(sink)[None, :, None, None] * xp.ones((N, HV, size, 1))
            logits = xp.concatenate([logits, column], -1)
            allowed = np.concatenate([allowed, np.ones((N, HV, size, 1), bool)], -1)
            values = xp.concatenate([values, xp.zeros((N, HV, 1, V))], 2)
        # a query with nothing visible (a carried prefix position) reads zero
        allowed = allowed | ~allowed.any(-1, keepdims=True) & (np.arange(allowed.shape[-1]) ==
                                                               allowed.shape[-1] - 1)
        mask = torch.as_tensor(allowed) if torch is not None else allowed
        logits = xp.where(mask, logits, -np.inf)
        if torch is not None:
            weights = torch.softmax(logits, -1)
        else:
            weights = np.exp(logits - logits.max(-1, keepdims=True))
            weights = weights / weights.sum(-1, keepdims=True)
        read = weights @ values                                      # [N, HV, size, V]
        reads.append(read.transpose(1, 2) if torch is not None else np.swapaxes(read, 1, 2))
    ext_read = xp.concatenate(reads, 1) if reads else xp.zeros((N, 1, HV, V))
    # the call's tokens: extended position opened + i
    out_index = np.minimum(opened[:, None] + np.arange(max(L, 1))[None, :],
                           max(ext_read.shape[1] - 1, 0))
    read = index(ext_read, batch_rows, out_index)[:, :L]            # [N, L, HV, V]
    if cu_seqlens is not None:
        read = index(read, sequence, position)[None]
    o = as_float(o_state) + as_float(cache_weight)[:, None] * read
    if torch is not None:
        o = o.to(o_state.dtype)
    if not output_final_state:
        return o
    # The final cache (every complete block merged) and open block.
    if width:
        cache = merged(cache, ((width - 1) // C) * C)
    kept = np.isfinite(np.take_along_axis(np.swapaxes(source_m, 1, 2), cache, 2))
    keep = torch.as_tensor(kept, dtype=torch.float32)[..., None] if torch is not None \
        else kept[..., None]
    block_start = (ends // C) * C
    slots = block_start[:, None] + np.arange(C)[None, :]             # extended positions
    in_block = slots < ends[:, None]
    slot_index = np.where(in_block, np.take_along_axis(
        ext_index, np.minimum(slots, max(width - 1, 0)), 1) if width else 0, 0)
    block_keep = torch.as_tensor(in_block[:, None, :, None], dtype=torch.float32) \
        if torch is not None else in_block[:, None, :, None]
    slot_heads = np.broadcast_to(slot_index[:, None, :], (N, HV, C))
    state = HOLAState(
        final,
        index(source_k, batch, cache, heads) * keep,
        index(source_v, batch, cache, heads) * keep,
        np.where(kept, np.take_along_axis(np.swapaxes(source_m, 1, 2), cache, 2), -np.inf),
        index(source_k, batch, slot_heads, heads) * block_keep,
        index(source_v, batch, slot_heads, heads) * block_keep,
        np.where(in_block[:, None, :],
                 np.take_along_axis(np.swapaxes(source_m, 1, 2), slot_heads, 2), -np.inf),
        np.asarray(carried.position, np.int64) + lengths)
    return o, state


# --------------------------------------------------------------------------
# Momentum DeltaNet
# --------------------------------------------------------------------------

#: the largest basis coefficient |c| a segment of momentum_delta_rule may
#: reach (its state is recovered as S = Y - c M: about log10 of this many
#: digits are lost to cancellation)
_MOMENTUM_BASIS_BOUND = 4.0


def _momentum_segments(beta, log_ratio, valid, longest):
    """Segment starts (token indices of the rows) such that within each
    segment the basis coefficient ``c_t = beta_t + (alpha_t / mu_t)
    c_{t-1}``, from 0 at the segment's start, stays within the bound in every
    row and head, and no segment is longer than ``longest``."""
    L = beta.shape[1]
    ratio = np.exp(np.minimum(log_ratio, 60.0))
    starts, c, length = [0], np.zeros(beta[:, 0].shape), 0
    for t in range(L):
        grown = beta[:, t] + ratio[:, t] * c
        if length and (length >= longest or
                       np.abs(np.where(valid[:, t, None], grown, 0.0)).max() > _MOMENTUM_BASIS_BOUND):
            starts.append(t)
            grown, length = beta[:, t].copy(), 0
        c, length = grown, length + 1
    return starts


def momentum_delta_rule(q, k, v, p, log_alpha, log_mu, beta=None, eta=None, *, scale=None,
                        initial_state=None, output_final_state=False, cu_seqlens=None,
                        max_segment=64, chunk_size=64, num_threads=None):
    """Momentum DeltaNet (flash-linear-attention's momentum delta rule): a
    momentum state ``M`` beside the fast weights ``S``, per head,

        w_t = S_{t-1}^T p_t - v_t
        M_t = mu_t M_{t-1} + eta_t k_t w_t^T
        S_t = alpha_t S_{t-1} - beta_t M_t,     o_t = S_t^T (scale q_t)

    ``q, k, p : [B, T, H, K]``, ``v : [B, T, H, V]``, ``log_alpha, log_mu,
    beta, eta : [B, T, H]`` (``alpha = exp(log_alpha)``, ``mu =
    exp(log_mu)``, log-space decays <= 0; beta and eta default to 1).
    ``initial_state [2, N, H, K, V]`` holds S then M (fla's layout);
    ``output_final_state=True`` returns ``(o, final_state)``.

    The stacked transition of ``[S; M]`` is ``[[alpha, -beta mu], [0, mu]]``
    per channel plus a rank-one part: not la's diagonal-plus-low-rank form.
    In the basis ``Y = S + c M`` with ``c_t = beta_t + (alpha_t / mu_t)
    c_{t-1}`` it is: ``[Y; M]`` takes one step of the dplr rule (the
    ``rwkv7`` variant on a ``2K x V`` state) with the channel gate ``[log
    alpha; log mu]``, ``a = [p; -c_{t-1} p]``, ``b = -[(alpha c_{t-1} / mu)
    eta k; eta k]`` and write key ``b``, read with ``[q; -c_t q]``
    (docs/family.md). ``c`` grows like ``(alpha / mu)^t``, so the sequence is
    cut into segments, each one la call from ``c = 0`` with the state
    converted back to ``[S; M]`` between them; a segment ends before ``|c|``
    would pass 4 in any row and head (``S = Y - c M`` loses at most about
    half a digit) or after ``max_segment`` tokens. With ``alpha <= mu``
    one segment takes ``max_segment`` tokens; a strongly decaying momentum
    (``mu << alpha``) makes segments short and the call slower, not less
    accurate. One value head per key head. torch tensors keep autograd (la's
    derived dplr gradient per segment). Returns ``o : [B, T, H, V]``."""
    B, T, H, K = np.shape(q)
    for name, x in (("k", k), ("p", p)):
        if tuple(np.shape(x)) != (B, T, H, K):
            raise ValueError(f"{name} must be [B, T, H, K] = {(B, T, H, K)} like q, got "
                             f"{tuple(np.shape(x))}")
    if np.ndim(v) != 4 or tuple(np.shape(v)[:3]) != (B, T, H):
        raise ValueError(f"v must be [B, T, H, V] with (B, T, H) = {(B, T, H)}, got "
                         f"{tuple(np.shape(v))}")
    V = np.shape(v)[3]
    torch = _torch_module(q, k, v, p, log_alpha, log_mu, beta, eta, initial_state)
    xp = torch if torch is not None else np

    def as_float(x):
        return torch.as_tensor(x).float() if torch is not None else np.asarray(x, np.float32)

    def zeros(shape):
        return torch.zeros(shape) if torch is not None else np.zeros(shape, np.float32)

    ones = as_float(np.ones((B, T, H), np.float32))
    beta = ones if beta is None else beta
    eta = ones if eta is None else eta
    for name, x in (("log_alpha", log_alpha), ("log_mu", log_mu), ("beta", beta),
                    ("eta", eta)):
        if tuple(np.shape(x)) != (B, T, H):
            raise ValueError(f"{name} must be [B, T, H] = {(B, T, H)}, got "
                             f"{tuple(np.shape(x))}")
    for name, x in (("log_alpha", log_alpha), ("log_mu", log_mu)):
        ops._check_log_gates(name, np.asarray(x.detach() if hasattr(x, "detach") else x,
                                              np.float32))
    if isinstance(max_segment, bool) or not isinstance(max_segment, (int, np.integer)) \
            or max_segment < 1:
        raise ValueError(f"max_segment must be an integer >= 1, got {max_segment!r}")
    if cu_seqlens is not None and B != 1:
        raise ValueError(f"cu_seqlens needs B = 1 (packed sequences), got B = {B}")
    scale = K ** -0.5 if scale is None else float(scale)
    if cu_seqlens is not None:
        index, sequence, position = _unpack_sequences(cu_seqlens, T)
        lengths = np.diff(np.asarray(cu_seqlens, np.int64).reshape(-1))
        N, L = index.shape
    else:
        N, L, lengths = B, T, np.full(B, T, np.int64)
    if initial_state is not None and tuple(np.shape(initial_state)) != (2, N, H, K, V):
        raise ValueError(f"initial_state must be [2, N, H, K, V] = {(2, N, H, K, V)} (S, then "
                         f"M), got {tuple(np.shape(initial_state))}")
    valid = np.arange(L)[None, :] < lengths[:, None]                 # [N, L]
    keep = torch.as_tensor(valid, dtype=torch.float32) if torch is not None \
        else valid.astype(np.float32)

    def rows(x):
        """[B, T, ...] -> [N, L, ...], zero past each row's end."""
        x = as_float(x)
        if cu_seqlens is not None:
            x = x[0][torch.as_tensor(index) if torch is not None else index]
        return x * keep.reshape(keep.shape + (1,) * (x.ndim - 2))

    qr, kr, vr, pr = (rows(x) for x in (q, k, v, p))
    la_r, lm_r, beta_r, eta_r = (rows(x) for x in (log_alpha, log_mu, beta, eta))
    # past a row's end: alpha = mu = 1, beta = eta = 0 (c and the state kept)
    detached = [np.asarray(x.detach() if hasattr(x, "detach") else x, np.float64)
                for x in (la_r, lm_r, beta_r)]
    log_ratio = np.minimum(detached[0] - detached[1], 60.0)
    starts = _momentum_segments(detached[2], log_ratio, valid, int(max_segment))
    ratio = xp.exp(xp.clip(la_r - lm_r, None, 60.0) if torch is None
                   else (la_r - lm_r).clamp(max=60.0))
    # c before and after every token, from 0 at every segment's start
    c_before, c_after = [], []
    c = zeros((N, H))
    cut = set(starts)
    for t in range(L):
        if t in cut:
            c = zeros((N, H))
        c_before.append(c)
        c = beta_r[:, t] + ratio[:, t] * c
        c_after.append(c)
    stack = torch.stack if torch is not None else np.stack
    cat = torch.cat if torch is not None else np.concatenate
    if L:
        c_before, c_after = stack(c_before, 1)[..., None], stack(c_after, 1)[..., None]
    if initial_state is None:
        S = zeros((N, H, K, V))
        M = zeros((N, H, K, V))
    else:
        S, M = as_float(initial_state[0]), as_float(initial_state[1])
    outputs = []
    for start, stop in zip(starts, starts[1:] + [L]):
        if stop <= start:
            continue
        part = slice(start, stop)
        cb, ca = c_before[:, part], c_after[:, part]
        alpha_over_mu = ratio[:, part][..., None]
        ek = eta_r[:, part][..., None] * kr[:, part]
        gate = cat([la_r[:, part][..., None] * as_float(np.ones((1, 1, 1, K), np.float32)),
                    lm_r[:, part][..., None] * as_float(np.ones((1, 1, 1, K), np.float32))], -1)
        a = cat([pr[:, part], -cb * pr[:, part]], -1)
        b = -cat([alpha_over_mu * cb * ek, ek], -1)
        query = cat([qr[:, part], -ca * qr[:, part]], -1)
        o, X = ops.attention("rwkv7", query, b, vr[:, part], gate, a=a, b=b, scale=scale,
                             initial_state=cat([S, M], 2), output_final_state=True,
                             chunk_size=chunk_size, num_threads=num_threads)
        outputs.append(o)
        c_end = c_after[:, stop - 1][..., None]                      # [N, H, 1, 1]
        Y, M = X[:, :, :K], X[:, :, K:]
        S = Y - c_end * M
    o = cat(outputs, 1) if outputs else zeros((N, L, H, V))
    if cu_seqlens is not None:
        if torch is not None:
            o = o[torch.as_tensor(sequence), torch.as_tensor(position)][None]
        else:
            o = o[sequence, position][None]
    if torch is not None and q.dtype != torch.float32:
        o = o.to(q.dtype)
    if not output_final_state:
        return o
    return o, stack([S, M], 0)
