"""Serving helpers on la's kernels.

* :func:`attention_in_place`: :func:`la.attention` continuing from a state
  that the kernel then overwrites with the final state (no new state
  array, and the state's memory is read and written once: decode at the
  memory's speed).
* :func:`step_state_pool`: batched decoding over a pool of states: each
  row of the batch reads and writes the pool entry its index names.
* :func:`decode_with_snapshots`: a few tokens per sequence (speculative
  decoding's draft) with the state after every one of them, so that a
  rejected suffix rolls back to the snapshot of the last accepted token.
* :func:`prefill_with_checkpoints`: a prompt's prefill with the state after
  every ``interval`` tokens of each sequence (prefix caching: a later
  request that shares the first ``j * interval`` tokens starts from the
  checkpoint), one kernel call per interval.

It is one kernel call: the prefixes of the draft (lengths 1 to T) are
packed as sequences of their own (``cu_seqlens``), each from the same
initial state, and their final states are the snapshots. That is
``T (T + 1) / 2`` tokens of work instead of T: meant for short drafts.
"""

from typing import NamedTuple

import numpy as np

from . import ops
from .fla import _torch_module

__all__ = ["attention_in_place", "decode_with_snapshots", "prefill_with_checkpoints",
           "step_state_pool", "Prefill"]

#: the per-token inputs of la.attention (sliced along T like q)
_TOKEN_INPUTS = ("g", "beta", "erase", "write", "a", "b")


def decode_with_snapshots(variant, q, k, v, g=None, beta=None, *, initial_state,
                          **kwargs):
    """:func:`la.attention` of ``variant`` on ``T`` tokens per sequence (B
    sequences, no ``cu_seqlens``) from ``initial_state [B, HV, K, V]``,
    returning ``(o [B, T, HV, V], snapshots [B, T, HV, K, V])``:
    ``snapshots[:, t]`` is the state after token t (the last one is the
    final state). One kernel (la.attention's ``checkpoint_every = 1``: T
    tokens of work); with ``normalize``, ``reverse`` or inputs that require
    grad (torch), one call over the T(T+1)/2 tokens of every row's packed
    prefixes, differentiable. ``kwargs`` are :func:`la.attention`'s (``erase``,
    ``write``, ``a``, ``b``, ``scale``, ``qk_l2norm``, ...), except
    ``cu_seqlens`` and ``output_final_state``."""
    for name in ("cu_seqlens", "output_final_state"):
        if name in kwargs:
            raise ValueError(f"decode_with_snapshots takes no {name}")
    B, T = np.shape(q)[:2]
    HV = np.shape(v)[2]
    if initial_state is None:
        raise ValueError("decode_with_snapshots needs initial_state [B, HV, K, V]")
    torch = _torch_module(q, k, v, g, beta, initial_state, *kwargs.values())
    if not (kwargs.get("normalize") or kwargs.get("reverse") or
            _needs_grad(torch, q, k, v, g, beta, initial_state, *kwargs.values())):
        # One kernel over the T tokens: a checkpoint after every token.
        o, _, snapshots = ops.attention(variant, q, k, v, g, beta,
                                        initial_state=initial_state, checkpoint_every=1,
                                        **kwargs)
        return o, snapshots
    # Otherwise one packed call over every prefix (T(T+1)/2 tokens): each
    # prefix's final state is a snapshot.
    # Sequence (b, j) holds tokens 0..j of row b; sequences in (b, j) order.
    rows = np.repeat(np.arange(B), T * (T + 1) // 2)
    cols = np.concatenate([np.arange(j + 1) for j in range(T)] * B)
    lengths = np.tile(np.arange(1, T + 1), B)
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)

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


def _needs_grad(torch, *inputs):
    """Whether autograd would differentiate through any of ``inputs``."""
    return torch is not None and torch.is_grad_enabled() and any(
        isinstance(x, torch.Tensor) and x.requires_grad for x in inputs)


def _state_buffer(state, torch):
    """The float32 C-contiguous NumPy buffer of ``state`` (a view of a torch
    CPU tensor's storage); ValueError for anything the kernel cannot write
    in place."""
    if torch is not None and isinstance(state, torch.Tensor):
        if state.device.type != "cpu" or state.dtype != torch.float32 or \
                not state.is_contiguous():
            raise ValueError("the state must be a contiguous float32 CPU tensor, got "
                             f"{state.dtype} on {state.device}"
                             f"{'' if state.is_contiguous() else ' (not contiguous)'}")
        if state.requires_grad and torch.is_grad_enabled():
            raise ValueError("a state updated in place has no gradient: pass it detached "
                             "or run under torch.no_grad()")
        return state.detach().numpy()
    if not isinstance(state, np.ndarray) or state.dtype != np.float32 or \
            not state.flags.c_contiguous or not state.flags.writeable:
        raise ValueError("the state must be a writable, C-contiguous float32 NumPy array, got "
                         + (f"{state.dtype} (C-contiguous: {state.flags.c_contiguous}, "
                            f"writable: {state.flags.writeable})"
                            if isinstance(state, np.ndarray) else type(state).__name__))
    return state


def attention_in_place(variant, state, q, k, v, g=None, beta=None, *, state_indices=None,
                       **kwargs):
    """:func:`la.attention` of ``variant`` from ``state [N, HV, K, V]``, which
    the kernel overwrites with the final state; returns ``o``.

    With ``state_indices`` (``[N]`` distinct integers in ``[0, P)``),
    ``state [P, HV, K, V]`` is a pool: sequence ``n`` starts from row
    ``state_indices[n]`` and its final state is written there; the other
    rows are not touched (la.recurrence's ``state_indices``: each task of
    the kernel slices its row of the pool).

    ``state`` is a writable, C-contiguous float32 NumPy array or a contiguous
    float32 CPU torch tensor (no gradient flows through it). The kernel reads
    and writes each (sequence, head) tile of the state once, in place
    (la-in-place-arguments): no final-state array is allocated and
    nothing is copied, which at decode (T = 1) is most of the time.
    ``kwargs`` are :func:`la.attention`'s, except ``initial_state``,
    ``output_final_state`` and those whose programs cannot update the state
    in place: ``cu_seqlens``, ``sequential`` and ``normalize`` (a
    ValueError). With torch tensors ``o`` is a torch tensor (no autograd:
    inputs that require grad raise)."""
    for name in ("initial_state", "output_final_state"):
        if name in kwargs:
            raise ValueError(f"attention_in_place takes no {name}")
    torch = _torch_module(state, q, k, v, g, beta, *kwargs.values())
    if _needs_grad(torch, q, k, v, g, beta, *kwargs.values()):
        raise ValueError("attention_in_place has no gradient: run it under torch.no_grad() "
                         "or pass detached inputs")
    buffer = _state_buffer(state, torch)
    # The kernel writes the state while it reads its other inputs: one that
    # overlaps the state's memory would be read after it changed.
    named = dict(q=q, k=k, v=v, g=g, beta=beta, **kwargs)
    for name, x in named.items():
        if torch is not None and isinstance(x, torch.Tensor) and x.device.type == "cpu":
            x = x.detach()
            x = (x.view(torch.int16) if x.dtype == torch.bfloat16 else x).numpy()
        if isinstance(x, np.ndarray) and np.may_share_memory(x, buffer):
            raise ValueError(f"{name} overlaps the state's memory, which the kernel "
                             "overwrites while it reads the inputs: pass a copy")
    if state_indices is not None and torch is not None and isinstance(state_indices,
                                                                   torch.Tensor):
        state_indices = state_indices.cpu().numpy()
    call = ops._prepare(variant, q, k, v, g, beta, initial_state=buffer,
                        inplace_final_state=True, state_indices=state_indices, **kwargs)
    o, _ = ops._execute(call)
    return o


def step_state_pool(variant, pool, indices, q, k, v, g=None, beta=None, **kwargs):
    """:func:`la.attention` of ``variant`` on a batch whose row ``b`` continues
    the sequence whose state is ``pool[indices[b]]`` (``pool : [P, HV, K,
    V]`` float32, NumPy or torch; ``indices : [B]`` distinct integers in
    ``[0, P)``). The kernel updates the states in place
    (:func:`attention_in_place` with ``state_indices``): in ``pool`` itself
    when it is a C-contiguous float32 pool (one kernel call, whose tasks
    read and write the pool rows that the indices name, in any order),
    else in a gathered float32 copy that is written back. With inputs that require grad
    (torch), ``sequential`` or ``normalize``, the states are gathered, the
    kernel returns the final states and they are written back. Returns
    ``o``.
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
    in_place = not _needs_grad(torch, q, k, v, g, beta, *kwargs.values()) and not any(
        kwargs.get(name) for name in ("sequential", "normalize"))
    if in_place:
        # The kernel updates the states in place: the pool's rows themselves
        # (a float32 pool), else a gathered copy that is scattered back.
        f32 = (pool.dtype == torch.float32 and pool.device.type == "cpu"
               and pool.is_contiguous()) if torch is not None else \
            (pool.dtype == np.float32 and pool.flags.c_contiguous and pool.flags.writeable)
        if f32 and index.size:
            return attention_in_place(variant, pool, q, k, v, g, beta, state_indices=index,
                                      **kwargs)
        if torch is not None:
            rows = torch.as_tensor(index)
            states = pool[rows].to(device="cpu", dtype=torch.float32).contiguous()
            o = attention_in_place(variant, states, q, k, v, g, beta, **kwargs)
            pool[rows] = states.to(pool.dtype)
            return o
        states = np.ascontiguousarray(pool[index], dtype=np.float32)
        o = attention_in_place(variant, states, q, k, v, g, beta, **kwargs)
        pool[index] = states
        return o
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


class Prefill(NamedTuple):
    """:func:`prefill_with_checkpoints`'s result. ``checkpoints`` is ``[B,
    T // interval, HV, K, V]`` without ``cu_seqlens``; with it, the
    sequences' checkpoints one after the other, ``[C, HV, K, V]``, sequence
    ``i``'s at rows ``checkpoint_offsets[i]:checkpoint_offsets[i + 1]``
    (``len_i // interval`` of them; ``checkpoint_offsets`` is None without
    ``cu_seqlens``)."""
    o: object
    final_state: object
    checkpoints: object
    checkpoint_offsets: object


def prefill_with_checkpoints(variant, q, k, v, g=None, beta=None, *, interval,
                             initial_state=None, cu_seqlens=None, **kwargs):
    """:func:`la.attention` of ``variant`` with, besides ``o`` and the final
    state, the state after every ``interval`` tokens of each sequence:
    checkpoint ``j`` of a sequence is its state after its first ``(j + 1) *
    interval`` tokens (only complete intervals: the final state covers the
    rest). For prefix caching: a request that shares a cached prefix of
    ``(j + 1) * interval`` tokens continues from checkpoint ``j``.

    One kernel call (la.attention's ``checkpoint_every``: a loop over
    segments of ``interval`` tokens inside the kernel, per sequence with
    ``cu_seqlens``, B = 1). With inputs that require grad (torch), one call
    per interval instead, each continuing from the states the last one
    ended with (the kernels are the package's, compiled once for any T and
    number of sequences); with ``cu_seqlens`` every call packs the
    sequences that still have tokens, from their own positions. Returns a :class:`Prefill`; NumPy or torch (autograd flows
    through every call). ``kwargs`` are :func:`la.attention`'s but
    ``output_final_state``, ``normalize`` (its normaliser starts at zero in
    every call) and ``reverse``."""
    if "output_final_state" in kwargs:
        raise ValueError("prefill_with_checkpoints takes no output_final_state")
    for name in ("normalize", "reverse"):
        if kwargs.get(name):
            raise ValueError(f"prefill_with_checkpoints cannot split a call with {name}=True "
                             "(the normaliser's sum starts at zero in every call; a reverse "
                             "recurrence starts at the end)")
    if isinstance(interval, bool) or not isinstance(interval, (int, np.integer)) or interval < 1:
        raise ValueError(f"interval must be a positive number of tokens, got {interval!r}")
    interval = int(interval)
    B, T, _, K = np.shape(q)
    HV, V = np.shape(v)[2], np.shape(v)[3]
    torch = _torch_module(q, k, v, g, beta, initial_state, *kwargs.values())
    tokens = {name: kwargs.pop(name) for name in _TOKEN_INPUTS if kwargs.get(name) is not None}
    tokens.update({name: x for name, x in (("g", g), ("beta", beta)) if x is not None})

    def cat(parts, axis):
        return torch.cat(parts, axis) if torch is not None else np.concatenate(parts, axis)

    def stack(parts, axis):
        return torch.stack(parts, axis) if torch is not None else np.stack(parts, axis)

    def zeros(shape):
        return torch.zeros(shape, dtype=torch.float32) if torch is not None \
            else np.zeros(shape, np.float32)

    def call(qs, ks, vs, others, state, offsets=None):
        return ops.attention(variant, qs, ks, vs, others.get("g"), others.get("beta"),
                             **{n: x for n, x in others.items() if n not in ("g", "beta")},
                             initial_state=state, cu_seqlens=offsets,
                             output_final_state=True, **kwargs)

    if cu_seqlens is not None:
        if B != 1:
            raise ValueError(f"cu_seqlens needs B = 1 (packed sequences), got B = {B}")
        offsets = np.asarray(cu_seqlens.cpu() if torch is not None and
                             isinstance(cu_seqlens, torch.Tensor) else cu_seqlens, np.int64)
        if offsets.ndim != 1 or offsets.size < 2 or offsets[0] != 0 or offsets[-1] != T or \
                np.any(np.diff(offsets) < 0):
            raise ValueError(f"cu_seqlens must rise from 0 to T = {T}, got {offsets.tolist()}")

    if not _needs_grad(torch, q, k, v, initial_state, *tokens.values()):
        # One kernel: la.attention's checkpoint_every (with packed sequences
        # [1, C, HV, K, V], each sequence's after the last one's).
        o, state, checkpoints = ops.attention(
            variant, q, k, v, tokens.pop("g", None), tokens.pop("beta", None), **tokens,
            initial_state=initial_state, output_final_state=True, cu_seqlens=cu_seqlens,
            checkpoint_every=interval, **kwargs)
        if cu_seqlens is None:
            return Prefill(o, state, checkpoints, None)
        counts = np.diff(offsets) // interval
        checkpoint_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return Prefill(o, state, checkpoints[0], checkpoint_offsets)

    if cu_seqlens is None:
        outputs, checkpoints, state = [], [], initial_state
        for start in range(0, max(T, 1), interval):
            end = min(start + interval, T)
            o, state = call(q[:, start:end], k[:, start:end], v[:, start:end],
                            {n: x[:, start:end] for n, x in tokens.items()}, state)
            outputs.append(o)
            if end - start == interval:
                checkpoints.append(state)
        stacked = stack(checkpoints, 1) if checkpoints else zeros((B, 0, HV, K, V))
        return Prefill(cat(outputs, 1), state, stacked, None)

    lengths = np.diff(offsets)
    N = lengths.size
    states = zeros((N, HV, K, V)) if initial_state is None else initial_state
    # Packed outputs of every call, and the packed token each of them is.
    outputs, order, saved = [], [], []
    for start in range(0, max(int(lengths.max()), 1), interval):
        active = np.nonzero(lengths > start)[0]
        if active.size == 0:
            break
        ends = np.minimum(lengths[active], start + interval)
        take = np.concatenate([offsets[i] + np.arange(start, e) for i, e in zip(active, ends)])
        cu = np.concatenate([[0], np.cumsum(ends - start)]).astype(np.int32)
        index = torch.as_tensor(take) if torch is not None else take
        rows = torch.as_tensor(active) if torch is not None else active
        o, final = call(q[:, index], k[:, index], v[:, index],
                        {n: x[:, index] for n, x in tokens.items()}, states[rows],
                        torch.as_tensor(cu) if torch is not None else cu)
        outputs.append(o)
        order.append(take)
        if torch is not None:
            states = states.index_copy(0, rows, final.to(states.dtype))
        else:
            states = states.copy()
            states[active] = final
        for row, (i, e) in enumerate(zip(active, ends)):
            if e - start == interval:
                saved.append((i, start, final[row]))
    inverse = np.argsort(np.concatenate(order), kind="stable")
    o = cat(outputs, 1)[:, torch.as_tensor(inverse) if torch is not None else inverse]
    saved.sort(key=lambda item: (item[0], item[1]))
    counts = np.bincount([i for i, _, _ in saved], minlength=N)
    checkpoint_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    checkpoints = (stack([state for _, _, state in saved], 0) if saved
                   else zeros((0, HV, K, V)))
    return Prefill(o, states, checkpoints, checkpoint_offsets)
