"""The chunked linear-attention forward in NumPy (OpenBLAS), and in PyTorch.

A baseline for ``bench_cpu.py``: the same chunkwise-parallel algorithm that la
compiles (docs/chunking.md),
written with batched matrix products so that the work lands in the BLAS:

* diagonal gates (linear, retention, mamba2 / simple GLA, GLA): per chunk
  ``O = (Q * exp(G)) S_n + ((Q K^T) * D * M) V`` and
  ``S_{n+1} = exp(G_C) S_n + (K * exp(G_C - G))^T V``. The intra-chunk parts
  and the per-chunk state contributions are computed for all chunks at once;
  only the ``[K, V]`` state scan is sequential (element-wise), then the
  inter-chunk outputs ``(Q * exp(G)) S_n`` are one batched product
  (the "materialised states" schedule);
* delta rule (deltanet, decayed_deltanet, Gated DeltaNet, KDA): the WY form,
  ``A = strictly_lower(diag(beta) (K K^T * D))``, ``T = (I + A)^{-1}`` (unit
  lower triangular, inverted on 16 x 16 diagonal blocks by forward
  substitution and merged by block products), ``W = T (beta * exp(G) * K)``,
  ``U = T (beta * V)`` for all chunks at once; then a sequential pass over
  chunks computes ``V' = U - W S_n``, ``(Q * exp(G)) S_n`` and
  ``S_{n+1} = exp(G_C) S_n + (K * exp(G_C - G))^T V'``, batched over
  (batch, head); finally ``O += ((Q K^T) * D * M) V'`` for all chunks at once.

Channel-wise gates (GLA, KDA) put the decay on Q and K per channel. The
``[C, C]`` score matrices are built per column block of ``sub_chunk`` (16)
keys, ``(Q * exp(G - G_r)) (K_blk * exp(G_r - G_blk))^T`` with ``r`` the
block's first row, only for the rows at or below the block (the blocks above
the diagonal are skipped): every kept factor is finite as long as the log-gate
range inside 16 tokens stays below about 87 (fp32's exponent range), which
holds for any realistic gate; the masked (j > i) entries are discarded with
``where``, so an overflow there never turns into NaN. Scalar and fixed gates
build ``D`` from masked exponent differences and are finite for any gate.

Everything is float32 (as la's fp32 kernels). T need not be a multiple of the
chunk size (the sequence is padded with zeros, which is exact: a padded token
has k = v = 0, g = 0, beta = 0). Grouped value heads (HV a multiple of H) are
supported by repeating the key-side inputs. ``initial_state`` is optional;
``cu_seqlens`` is not supported.

The same code runs on NumPy arrays or torch tensors through a small backend
object (:data:`NUMPY`, :func:`torch_backend`), so the PyTorch baseline is the
same algorithm, not a different one.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "python"))
from la.testing import VARIANTS as _LA_VARIANTS  # noqa: E402

__all__ = [
    "VARIANTS",
    "NUMPY",
    "torch_backend",
    "prepare",
    "chunked_forward",
]

#: variant -> (update rule, gate kind): the variants of la.testing.VARIANTS
#: this module implements (not the erase_write family).
VARIANTS = {name: kinds for name, kinds in _LA_VARIANTS.items()
            if kinds[0] in ("additive", "delta")}


# --------------------------------------------------------------------------
# backends: the few operations whose spelling differs between NumPy and torch
# --------------------------------------------------------------------------

class _NumpyBackend:
    name = "numpy"
    #: write no array in place (torch autograd needs it; NumPy does not)
    functional = False

    def asarray(self, x):
        return np.ascontiguousarray(x, dtype=np.float32)

    def asmask(self, m):
        return np.asarray(m, dtype=bool)

    def to_numpy(self, x):
        return np.asarray(x)

    exp = staticmethod(np.exp)
    zeros_like = staticmethod(np.zeros_like)
    contiguous = staticmethod(np.ascontiguousarray)

    def zeros(self, shape, like):
        return np.zeros(shape, dtype=like.dtype)

    def mT(self, x):
        return x.swapaxes(-1, -2)

    def permute(self, x, axes):
        return x.transpose(axes)

    def keep(self, mask, x, value=0.0):
        """x where mask, else value."""
        return np.where(mask, x, np.float32(value))

    def concat(self, xs, axis):
        return np.concatenate(xs, axis=axis)

    def stack(self, xs, axis):
        return np.stack(xs, axis=axis)

    def repeat(self, x, n, axis):
        return np.repeat(x, n, axis=axis)


class _TorchBackend:
    name = "torch"

    def __init__(self, torch, functional=False):
        self.torch = torch
        self.functional = functional
        self.exp = torch.exp
        self.zeros_like = torch.zeros_like

    def asarray(self, x):
        x = np.ascontiguousarray(x, dtype=np.float32)
        if not x.flags.writeable:  # torch.from_numpy wants a writable array
            x = x.copy()
        return self.torch.from_numpy(x)

    def asmask(self, m):
        return self.torch.from_numpy(np.ascontiguousarray(m, dtype=bool))

    def to_numpy(self, x):
        return x.detach().cpu().numpy()

    def contiguous(self, x):
        return x.contiguous()

    def zeros(self, shape, like):
        return like.new_zeros(tuple(shape))

    def mT(self, x):
        return x.transpose(-1, -2)

    def permute(self, x, axes):
        return x.permute(*axes)

    def keep(self, mask, x, value=0.0):
        return x.masked_fill(~mask, value)

    def concat(self, xs, axis):
        return self.torch.cat(xs, dim=axis)

    def stack(self, xs, axis):
        return self.torch.stack(xs, dim=axis)

    def repeat(self, x, n, axis):
        return self.torch.repeat_interleave(x, n, dim=axis)


#: the NumPy backend (the arrays' products go to NumPy's BLAS, OpenBLAS).
NUMPY = _NumpyBackend()


def torch_backend(functional=False):
    """The PyTorch (CPU) backend, or None when ``import torch`` fails.
    ``functional=True`` writes no tensor in place, so that torch autograd
    can differentiate the forward (``bench_backward.py``)."""
    try:
        import torch
    except Exception:  # ImportError, or a broken install
        return None
    return _TorchBackend(torch, functional)


# --------------------------------------------------------------------------
# the algorithm
# --------------------------------------------------------------------------

_INPUT_KEYS = ("q", "k", "v", "g", "log_decay", "beta", "initial_state")


def prepare(inputs, xp=NUMPY):
    """Convert a la.testing.make_inputs-style dict to ``xp`` float32 arrays
    (outside the timed region; ``log_decay`` stays a NumPy array)."""
    unknown = set(k for k, v in inputs.items() if v is not None) - set(_INPUT_KEYS)
    if unknown:
        raise ValueError(f"unsupported inputs {sorted(unknown)}")
    out = {}
    for key in ("q", "k", "v", "g", "beta", "initial_state"):
        if inputs.get(key) is not None:
            out[key] = xp.asarray(inputs[key])
    if inputs.get("log_decay") is not None:
        out["log_decay"] = np.asarray(inputs["log_decay"], dtype=np.float64)
    return out


def _inv_unit_lower(A, xp, base=16):
    """``(I + A)^{-1}`` for strictly lower-triangular ``A : [..., n, n]``."""
    n = A.shape[-1]
    if n <= base and xp.functional:
        # The same rows, each stacked from the final rows above it.
        eye = xp.zeros_like(A) + xp.asarray(np.eye(n))
        rows = [eye[..., 0, :]]
        for i in range(1, n):
            above = xp.stack(rows, -2)[..., :i]        # T[:i, :i]
            left = -(A[..., i, :i, None] * above).sum(-2)
            rows.append(xp.concat([left, eye[..., i, i:]], -1))
        return xp.stack(rows, -2)
    if n <= base:
        T = xp.zeros_like(A) + xp.asarray(np.eye(n))
        for i in range(1, n):
            # row i of T: -A[i, :i] @ T[:i, :i] (rows < i are final)
            T[..., i, :i] = -(A[..., i, :i, None] * T[..., :i, :i]).sum(-2)
        return T
    h = n // 2
    T11 = _inv_unit_lower(A[..., :h, :h], xp, base)
    T22 = _inv_unit_lower(A[..., h:, h:], xp, base)
    if xp.functional:
        T21 = -((T22 @ A[..., h:, :h]) @ T11)
        top = xp.concat([T11, xp.zeros_like(A[..., :h, h:])], -1)
        return xp.concat([top, xp.concat([T21, T22], -1)], -2)
    T = xp.zeros_like(A)
    T[..., :h, :h] = T11
    T[..., h:, h:] = T22
    T[..., h:, :h] = -((T22 @ A[..., h:, :h]) @ T11)
    return T


def _heads_first(x, n_chunks, C, xp):
    """[B, Tp, HV, D] -> [B*HV, n_chunks, C, D] (a copy)."""
    B, Tp, HV, D = x.shape
    return xp.contiguous(xp.permute(x, (0, 2, 1, 3))).reshape(B * HV, n_chunks, C, D)


def chunked_forward(variant, inputs, *, chunk_size=64, scale=None, sub_chunk=16, xp=NUMPY):
    """Chunked forward of ``variant`` on :func:`prepare`'d ``inputs``.

    Returns ``(o, final_state)`` as ``xp`` float32 arrays,
    ``o : [B, T, HV, V]``, ``final_state : [B, HV, K, V]``.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unsupported variant {variant!r}; expected one of {tuple(VARIANTS)}")
    update, gate = VARIANTS[variant]
    C = int(chunk_size)
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if HV % H:
        raise ValueError(f"HV={HV} must be a multiple of H={H}")
    group = HV // H
    if scale is None:
        scale = K ** -0.5
    g = inputs.get("g")
    beta = inputs.get("beta")
    if gate in ("scalar", "channel") and g is None:
        raise ValueError(f"{variant} needs g")
    if update == "delta" and beta is None:
        raise ValueError(f"{variant} needs beta")

    # ---- layout: [B, T, H, *] -> [N = B*HV, NC, C, *] (padded to NC*C) ----
    NC = -(-T // C)
    Tp = NC * C
    pad = Tp - T

    def padded(x):  # pad the time axis (axis 1) with zeros
        if pad == 0:
            return x
        return xp.concat([x, xp.zeros((x.shape[0], pad) + tuple(x.shape[2:]), like=x)], 1)

    def key_side(x):  # [B, T, H, D] -> [N, NC, C, D], repeated over value heads
        x = padded(x)
        if group > 1:
            x = xp.repeat(x, group, 2)
        return _heads_first(x, NC, C, xp)

    N = B * HV
    Q = key_side(q * scale)
    Kc = key_side(k)
    Vc = _heads_first(padded(v), NC, C, xp)

    # cumulative log gate inside each chunk: [N, NC, C, 1] (scalar/fixed) or
    # [N, NC, C, K] (channel); None for no gate.
    if gate == "none":
        G = None
    elif gate == "fixed":
        ld = inputs["log_decay"].reshape(-1)
        if ld.shape != (H,):
            raise ValueError(f"log_decay must have shape ({H},)")
        gtok = np.zeros((HV, Tp), dtype=np.float32)   # 0 on padded tokens
        gtok[:, :T] = np.repeat(ld, group)[:, None]    # per value head
        Gnp = gtok.reshape(HV, NC, C).cumsum(-1, dtype=np.float32)
        Gnp = np.broadcast_to(Gnp[None, ..., None], (B, HV, NC, C, 1))
        G = xp.asarray(Gnp.reshape(N, NC, C, 1))
    elif gate == "scalar":
        G = key_side(g[..., None]).cumsum(2)
    else:
        G = key_side(g).cumsum(2)

    mask_incl = xp.asmask(np.tril(np.ones((C, C), dtype=bool)))       # j <= i
    mask_strict = xp.asmask(np.tril(np.ones((C, C), dtype=bool), -1))  # j < i
    sub = max(1, min(int(sub_chunk), C))

    def decay_matrix(G, mask):
        """exp(G_i - G_j) where mask, else 0 (scalar gates): [N, NC, C, C]."""
        Gs = G[..., 0]
        diff = Gs[..., :, None] - Gs[..., None, :]
        return xp.exp(xp.keep(mask, diff, -np.inf))

    def gated_scores(Aside, Bside, mask):
        """((Aside Bside^T) * D), masked: [N, NC, C, C]."""
        if G is None:
            return xp.keep(mask, Aside @ xp.mT(Bside))
        if gate == "channel":
            # per column block [b0, b1) of `sub` keys, reference row r = b0:
            # exp(G_i - G_j) = exp(G_i - G_r) exp(G_r - G_j); for the kept
            # entries (i >= j >= r) the first factor is <= 1 and the second
            # at most exp(the log-gate range inside one block). Blocks above
            # the diagonal (i < b0) are never computed.
            out = xp.zeros(tuple(Aside.shape[:-1]) + (C,), like=Aside)
            for b0 in range(0, C, sub):
                b1 = min(b0 + sub, C)
                Gr = G[..., b0:b0 + 1, :]
                a = Aside[..., b0:, :] * xp.exp(G[..., b0:, :] - Gr)
                b = Bside[..., b0:b1, :] * xp.exp(Gr - G[..., b0:b1, :])
                out[..., b0:, b0:b1] = a @ xp.mT(b)
            return xp.keep(mask, out)
        return (Aside @ xp.mT(Bside)) * decay_matrix(G, mask)

    if G is None:
        Qg, Kd, last = Q, Kc, None
    else:
        G_last = G[..., C - 1:C, :]                    # [N, NC, 1, 1 or K]
        Qg = Q * xp.exp(G)
        Kd = Kc * xp.exp(G_last - G)
        last = xp.exp(xp.mT(G_last))                   # [N, NC, 1 or K, 1]

    S0 = inputs.get("initial_state")
    S = (xp.zeros((N, K, V), like=Q) if S0 is None
         else xp.contiguous(S0.reshape(N, K, V)) + 0.0)

    Aqk = gated_scores(Q, Kc, mask_incl)               # [N, NC, C, C]

    if update == "additive":
        dS = xp.mT(Kd) @ Vc                            # [N, NC, K, V]
        entering = []
        for n in range(NC):
            entering.append(S)
            S = S + dS[:, n] if last is None else last[:, n] * S + dS[:, n]
        states = xp.stack(entering, 1)
        O = Aqk @ Vc + Qg @ states
    else:
        bcol = key_side(beta[..., None])               # [N, NC, C, 1]
        Kb = Kc * bcol
        A = gated_scores(Kb, Kc, mask_strict)
        Tinv = _inv_unit_lower(A, xp)
        W = Tinv @ (Kb if G is None else Kb * xp.exp(G))
        U = Tinv @ (Vc * bcol)
        inter, corrected = [], []
        for n in range(NC):
            inter.append(Qg[:, n] @ S)
            vp = U[:, n] - W[:, n] @ S
            corrected.append(vp)
            upd = xp.mT(Kd[:, n]) @ vp
            S = S + upd if last is None else last[:, n] * S + upd
        Oi, Vp = xp.stack(inter, 1), xp.stack(corrected, 1)
        O = Oi + Aqk @ Vp

    o = O.reshape(B, HV, Tp, V)[:, :, :T]
    o = xp.contiguous(xp.permute(o, (0, 2, 1, 3)))
    return o, S.reshape(B, HV, K, V)
