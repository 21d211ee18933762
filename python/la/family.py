"""Members of the linear-attention family that enter la as compositions of
la ops rather than as a variant of their own (docs/family.md).

* :func:`mixture_of_memories`: Mixture-of-Memories (Du et al., 2025, "MoM:
  Linear Sequence Modeling with Mixture-of-Memories"). Each token is routed
  to some of ``M`` memories, each a linear-attention or delta-rule state of
  its own; a memory that a token is not routed to is left as it is (no
  write, no decay), and the output mixes the memories' reads with the
  router's weights.

The routing is data: the memories are ``M`` more heads of one la kernel
whose writes and decays are masked where a token is not routed, so a new
routing never recompiles (the cost is that of ``M`` memories at every
token, not of the ``top_k`` a token uses).
"""

import numpy as np

from . import ops
from .fla import _torch_module

__all__ = ["mixture_of_memories"]

#: memory kind -> la variant (and which of g, beta it takes)
_MEMORIES = {
    "linear": "linear",
    "gla": "gla",
    "mamba2": "mamba2",
    "deltanet": "deltanet",
    "gated_deltanet": "gated_deltanet",
    "kda": "kda",
}


def _merge_memories(x):
    """``[B, T, M, H, ...] -> [B, T, M*H, ...]`` (memory-major heads)."""
    shape = tuple(x.shape)
    return x.reshape(shape[:2] + (shape[2] * shape[3],) + shape[4:])


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

    Returns ``(o [B, T, H, V], final_state or None)``; differentiable with
    torch through la's derived backward and torch's products around it.
    """
    if memory not in _MEMORIES:
        raise ValueError(f"unknown memory kind {memory!r}; expected one of {tuple(_MEMORIES)}")
    variant = _MEMORIES[memory]
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
    routed = routing != 0
    routed = routed.to(q.dtype) if torch is not None else routed.astype(np.float32)

    def masked(x):
        """x ([B, T, M, H, ...]) with the entries of unrouted tokens zeroed."""
        mask = routed.reshape((B, T, M) + (1,) * (x.ndim - 3))
        return x * mask

    # Keys and values per memory head; the query repeated per memory.
    q_memories = (q[:, :, None].expand(B, T, M, H, K) if torch is not None
                  else np.broadcast_to(q[:, :, None], (B, T, M, H, K)))
    update, gate = ops.VARIANTS[variant]
    if update == "additive":
        # No write: a zero key. No decay: a zero log-gate.
        k_in = masked(k)
    else:
        k_in = k  # the delta rule's write is beta k (v - k^T S): beta = 0
    args = {}
    if gate in ("scalar", "channel"):
        if g is None:
            raise ValueError(f"{memory} memories need the gate g")
        args["g"] = _merge_memories(masked(g))
    elif g is not None:
        raise ValueError(f"{memory} memories take no gate g")
    if update == "delta":
        if beta is None:
            raise ValueError(f"{memory} memories need beta [B, T, M, H]")
        args["beta"] = _merge_memories(masked(beta))
    elif beta is not None:
        raise ValueError(f"{memory} memories take no beta")
    s0 = None
    if initial_state is not None:
        s0 = initial_state.reshape((-1, M * H, K, V))
    qm = _merge_memories(q_memories)
    if torch is None:
        qm = np.ascontiguousarray(qm)
    o, state = ops.attention(variant, qm, _merge_memories(k_in), _merge_memories(v),
                             args.get("g"), args.get("beta"), scale=scale,
                             initial_state=s0, output_final_state=output_final_state,
                             cu_seqlens=cu_seqlens, chunk_size=chunk_size,
                             num_threads=num_threads)
    o = o.reshape((B, T, M, H, V))
    o = (o * routing[..., None, None]).sum(2)
    if state is not None:
        state = state.reshape((-1, M, H, K, V))
    return o, state
