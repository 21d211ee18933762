"""Serving helpers on la's kernels.

* :func:`step_state_pool`: batched decoding over a pool of states: each
  row of the batch reads and writes the pool entry its index names.
* :func:`decode_with_snapshots`: a few tokens per sequence (speculative
  decoding's draft) with the state after every one of them, so that a
  rejected suffix rolls back to the snapshot of the last accepted token.

It is one kernel call: the prefixes of the draft (lengths 1 to T) are
packed as sequences of their own (``cu_seqlens``), each from the same
initial state, and their final states are the snapshots. That is
``T (T + 1) / 2`` tokens of work instead of T: meant for short drafts.
"""

import numpy as np

from . import ops
from .fla import _torch_module

__all__ = ["decode_with_snapshots", "step_state_pool"]

#: the per-token inputs of la.attention (sliced along T like q)
_TOKEN_INPUTS = ("g", "beta", "erase", "write", "a", "b")


def decode_with_snapshots(variant, q, k, v, g=None, beta=None, *, initial_state,
                          **kwargs):
    """:func:`la.attention` of ``variant`` on ``T`` tokens per sequence (B
    sequences, no ``cu_seqlens``) from ``initial_state [B, HV, K, V]``,
    returning ``(o [B, T, HV, V], snapshots [B, T, HV, K, V])``:
    ``snapshots[:, t]`` is the state after token t (the last one is the
    final state). ``kwargs`` are :func:`la.attention`'s (``erase``,
    ``write``, ``a``, ``b``, ``scale``, ``qk_l2norm``, ...), except
    ``cu_seqlens`` and ``output_final_state``."""
    for name in ("cu_seqlens", "output_final_state"):
        if name in kwargs:
            raise ValueError(f"decode_with_snapshots takes no {name}")
    B, T = np.shape(q)[:2]
    HV = np.shape(v)[2]
    if initial_state is None:
        raise ValueError("decode_with_snapshots needs initial_state [B, HV, K, V]")
    # Sequence (b, j) holds tokens 0..j of row b; sequences in (b, j) order.
    rows = np.repeat(np.arange(B), T * (T + 1) // 2)
    cols = np.concatenate([np.arange(j + 1) for j in range(T)] * B)
    lengths = np.tile(np.arange(1, T + 1), B)
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    torch = _torch_module(q, k, v, g, beta, initial_state, *kwargs.values())

    def packed(x):
        if x is None:
            return None
        if torch is not None:
            x = x if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x))
            return x[torch.as_tensor(rows), torch.as_tensor(cols)][None]
        return np.asarray(x)[rows, cols][None]

    inputs = {name: packed(kwargs.pop(name)) for name in _TOKEN_INPUTS
              if kwargs.get(name) is not None}
    seq_rows = np.repeat(np.arange(B), T)
    if torch is not None:
        s0 = initial_state[torch.as_tensor(seq_rows)]
        cu = torch.as_tensor(cu)
    else:
        s0 = np.asarray(initial_state)[seq_rows]
    o, states = ops.attention(variant, packed(q), packed(k), packed(v), packed(g),
                              packed(beta), **inputs, initial_state=s0, cu_seqlens=cu,
                              output_final_state=True, **kwargs)
    snapshots = states.reshape((B, T) + tuple(states.shape[1:]))
    # o of every token: the longest prefix of each row holds them all.
    last = np.cumsum(lengths)[T - 1::T] - T                    # its first token
    take = (last[:, None] + np.arange(T)[None, :]).reshape(-1)
    if torch is not None:
        o = o[0][torch.as_tensor(take)]
    else:
        o = o[0][take]
    return o.reshape((B, T) + tuple(o.shape[1:])), snapshots


def step_state_pool(variant, pool, indices, q, k, v, g=None, beta=None, **kwargs):
    """:func:`la.attention` of ``variant`` on a batch whose row ``b`` continues
    the sequence whose state is ``pool[indices[b]]`` (``pool : [P, HV, K,
    V]`` float32, NumPy or torch; ``indices : [B]`` distinct integers in
    ``[0, P)``): the states are gathered, the kernel runs, and the final
    states are written back into ``pool`` in place. Returns ``o``.
    ``kwargs`` are :func:`la.attention`'s, except ``initial_state``,
    ``output_final_state`` and ``cu_seqlens``."""
    for name in ("initial_state", "output_final_state", "cu_seqlens"):
        if name in kwargs:
            raise ValueError(f"step_state_pool takes no {name}")
    torch = _torch_module(pool, q)
    index = np.asarray(indices.cpu() if torch is not None and isinstance(indices, torch.Tensor)
                       else indices)
    if index.ndim != 1 or index.shape[0] != np.shape(q)[0] or \
            not np.issubdtype(index.dtype, np.integer):
        raise ValueError(f"indices must be {np.shape(q)[0]} integers (one per row of q), "
                         f"got {index.dtype} of shape {index.shape}")
    P = np.shape(pool)[0]
    if index.size and (index.min() < 0 or index.max() >= P):
        raise ValueError(f"indices must be in [0, {P}) (the pool's entries), got "
                         f"{index.min()}..{index.max()}")
    if len(np.unique(index)) != index.size:
        raise ValueError("indices must be distinct: two rows cannot write one pool entry")
    if torch is not None:
        rows = torch.as_tensor(index)
        o, state = ops.attention(variant, q, k, v, g, beta, initial_state=pool[rows],
                                 output_final_state=True, **kwargs)
        with torch.no_grad():
            pool[rows] = state.to(pool.dtype)
        return o
    o, state = ops.attention(variant, q, k, v, g, beta, initial_state=pool[index],
                             output_final_state=True, **kwargs)
    pool[index] = state
    return o
