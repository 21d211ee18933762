"""fp64 NumPy reference for linear attention: the plain token-by-token recurrence.

This module is the ground truth that the compiler's outputs are compared
against, so it is written for clarity, not speed: a loop over sequences, a loop
over value heads, and a loop over time, with the [K, V] state updated by plain
matrix operations in float64. It never uses a chunkwise form.

Conventions (see docs/math.md)
-------------------------------
* ``q, k : [B, T, H, K]``; ``v : [B, T, HV, V]`` with ``HV`` a multiple of
  ``H``. Value head ``hv`` reads key head ``h = hv // (HV // H)``: that head's
  q, k, gate and beta. ``g``, ``beta`` (and Gated DeltaNet-2's ``erase``) may
  instead be given per value head (``HV`` in place of ``H``, as
  flash-linear-attention's Gated DeltaNet and KDA take them): value head
  ``hv`` then reads its own.
* One state ``S : [K, V]`` per (sequence, value head).
  ``initial_state`` and ``final_state`` are ``[N, HV, K, V]`` where ``N = B``,
  or the number of sequences when ``cu_seqlens`` is given (then ``B == 1``).
* Gates are in natural-log space (``g <= 0`` in practice; not enforced); the
  decay factor is ``exp(g)``. Gate kinds:

  - ``'none'``    no decay;
  - ``'fixed'``   ``log_decay : [H]``, the same decay at every step (RetNet);
  - ``'scalar'``  ``g : [B, T, H]`` (Mamba-2 / simple GLA / Gated DeltaNet);
  - ``'channel'`` ``g : [B, T, H, K]``, decays the K rows of S (GLA / KDA).

  Internally every gate kind is turned into a per-channel log decay vector of
  length K, so one code path serves all of them.
* Update rules, with ``D_t = Diag(exp(g_t))``:

  - ``'additive'``: ``S_t = D_t S_{t-1} + k_t v_t^T``
  - ``'delta'``:    ``S_t = (I - beta_t k_t k_t^T) D_t S_{t-1} + beta_t k_t v_t^T``
    with ``beta : [B, T, H]``.

* Output includes token t: ``o_t = S_t^T (scale * q_t)``; ``scale`` defaults to
  ``K ** -0.5``. ``o : [B, T, HV, V]``.
* ``qk_l2norm=True`` replaces q and k by ``x / sqrt(sum(x^2) + 1e-6)`` (over K)
  before anything else, in particular before ``scale``.
* ``normalizer=True`` (additive only): ``z_t = exp(g_t) * z_{t-1} + k_t`` with
  ``z_0 = 0`` (z is never part of the passed-in or returned state) and
  ``o_t = (S_t^T q'_t) / (z_t . q'_t + eps)``, ``q' = scale * q``.

Every function returns ``(o, final_state)`` as float64 arrays. Inputs of any
float dtype are converted to float64 first.
"""

import numpy as np

__all__ = [
    "UPDATES",
    "GATES",
    "L2NORM_EPS",
    "l2norm",
    "retnet_log_decay",
    "recurrence",
    "dplr_recurrence",
    "dplr_recurrence_vjp",
    "linear_attention",
    "retention",
    "simple_gla",
    "gla",
    "delta_rule",
    "gated_delta_rule",
    "kda",
]

UPDATES = ("additive", "delta")
GATES = ("none", "fixed", "scalar", "channel")

#: epsilon inside the square root of the q/k L2 normalisation.
L2NORM_EPS = 1e-6


# --------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------

def l2norm(x):
    """``x / sqrt(sum(x**2, axis=-1) + 1e-6)`` in float64."""
    x = np.asarray(x, dtype=np.float64)
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + L2NORM_EPS)


def retnet_log_decay(H):
    """RetNet's per-head log decay ``log(1 - 2**(-5 - h))`` for h in 0..H-1."""
    return np.log1p(-(2.0 ** (-5.0 - np.arange(H, dtype=np.float64))))


def _f64(x, name):
    """Convert a float (or integer) array to float64; reject other dtypes."""
    arr = np.asarray(x)
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
    ):
        raise ValueError(f"{name} must be a real numeric array, got dtype {arr.dtype}")
    return arr.astype(np.float64)


def _check_shape(arr, expected, name, what=""):
    if arr.shape != tuple(expected):
        extra = f" ({what})" if what else ""
        raise ValueError(
            f"{name} must have shape {tuple(expected)}{extra}, got {arr.shape}"
        )


def _check_qkv(q, k, v):
    """Convert q, k, v and return them with (B, T, H, K, HV, V)."""
    q = _f64(q, "q")
    k = _f64(k, "k")
    v = _f64(v, "v")
    if q.ndim != 4:
        raise ValueError(f"q must be 4-D [B, T, H, K], got shape {q.shape}")
    if k.ndim != 4:
        raise ValueError(f"k must be 4-D [B, T, H, K], got shape {k.shape}")
    if v.ndim != 4:
        raise ValueError(f"v must be 4-D [B, T, HV, V], got shape {v.shape}")
    if q.shape != k.shape:
        raise ValueError(f"q and k must have the same shape, got {q.shape} and {k.shape}")
    B, T, H, K = q.shape
    if v.shape[:2] != (B, T):
        raise ValueError(
            f"v must share [B, T] = {(B, T)} with q and k, got v shape {v.shape}"
        )
    HV, V = v.shape[2], v.shape[3]
    if H == 0 or HV % H != 0:
        raise ValueError(
            f"the number of value heads HV={HV} must be a multiple of the "
            f"number of key heads H={H}"
        )
    return q, k, v, (B, T, H, K, HV, V)


def _check_scale(scale, K):
    if scale is None:
        return float(K) ** -0.5
    if isinstance(scale, (bool, np.bool_)) or not np.isscalar(scale) or not np.isreal(scale):
        raise ValueError(f"scale must be a real number or None, got {scale!r}")
    return float(scale)


def _sequences(cu_seqlens, B, T):
    """List of (batch index, start, end) for every sequence, and N."""
    if cu_seqlens is None:
        return [(b, 0, T) for b in range(B)]
    cu = np.asarray(cu_seqlens)
    if cu.ndim != 1 or cu.size < 2:
        raise ValueError(
            f"cu_seqlens must be a 1-D array of N+1 >= 2 offsets, got shape {cu.shape}"
        )
    if not np.issubdtype(cu.dtype, np.integer):
        raise ValueError(f"cu_seqlens must have an integer dtype, got {cu.dtype}")
    if B != 1:
        raise ValueError(f"cu_seqlens requires B == 1 (packed sequences), got B={B}")
    if cu[0] != 0:
        raise ValueError(f"cu_seqlens must start at 0, got {int(cu[0])}")
    if cu[-1] != T:
        raise ValueError(f"cu_seqlens must end at T={T}, got {int(cu[-1])}")
    if np.any(np.diff(cu) < 0):
        raise ValueError(f"cu_seqlens must be non-decreasing, got {cu.tolist()}")
    return [(0, int(cu[i]), int(cu[i + 1])) for i in range(cu.size - 1)]


def _check_initial_state(initial_state, N, HV, K, V):
    if initial_state is None:
        return np.zeros((N, HV, K, V), dtype=np.float64)
    s0 = _f64(initial_state, "initial_state")
    _check_shape(s0, (N, HV, K, V), "initial_state", "[N, HV, K, V]")
    return s0


def _gate_heads(x, H, HV):
    """The heads a gate-like input is given for: HV when its third dim says
    so (per value head), else H (per key head; the shape check follows)."""
    shape = np.shape(x)
    return HV if len(shape) >= 3 and shape[2] == HV else H


def _log_gate(gate, g, log_decay, B, T, H, K, HV=None):
    """Per-channel log decay, as a read-only [B, T, H, K] float64 view
    ([B, T, HV, K] for a g given per value head, with HV)."""
    if HV is not None and g is not None:
        H = _gate_heads(g, H, HV)
    if gate not in GATES:
        raise ValueError(f"gate must be one of {GATES}, got {gate!r}")
    if gate in ("none", "fixed") and g is not None:
        raise ValueError(f"g must be None for gate={gate!r} (got an array)")
    if gate != "fixed" and log_decay is not None:
        raise ValueError(f"log_decay is only used with gate='fixed', not gate={gate!r}")
    if gate == "none":
        return np.broadcast_to(np.zeros((), dtype=np.float64), (B, T, H, K))
    if gate == "fixed":
        if log_decay is None:
            raise ValueError("gate='fixed' requires log_decay of shape [H]")
        ld = _f64(log_decay, "log_decay")
        _check_shape(ld, (H,), "log_decay", "[H] for gate='fixed'")
        return np.broadcast_to(ld[None, None, :, None], (B, T, H, K))
    if g is None:
        raise ValueError(f"gate={gate!r} requires g")
    g = _f64(g, "g")
    if gate == "scalar":
        _check_shape(g, (B, T, H), "g", "[B, T, H] for gate='scalar'")
        return np.broadcast_to(g[..., None], (B, T, H, K))
    _check_shape(g, (B, T, H, K), "g", "[B, T, H, K] for gate='channel'")
    return g


# --------------------------------------------------------------------------
# the general recurrence
# --------------------------------------------------------------------------

def recurrence(
    q,
    k,
    v,
    *,
    update="additive",
    gate="none",
    g=None,
    log_decay=None,
    beta=None,
    scale=None,
    initial_state=None,
    normalizer=False,
    eps=1e-6,
    qk_l2norm=False,
    cu_seqlens=None,
):
    """Token-by-token linear-attention recurrence in float64.

    See the module docstring for the conventions. Returns ``(o, final_state)``
    with ``o : [B, T, HV, V]`` and ``final_state : [N, HV, K, V]``.
    """
    q, k, v, (B, T, H, K, HV, V) = _check_qkv(q, k, v)
    if update not in UPDATES:
        raise ValueError(f"update must be one of {UPDATES}, got {update!r}")
    log_gate = _log_gate(gate, g, log_decay, B, T, H, K, HV)
    gate_per_value_head = log_gate.shape[2] == HV and HV != H

    beta_per_value_head = False
    if update == "delta":
        if beta is None:
            raise ValueError("update='delta' requires beta of shape [B, T, H]")
        beta = _f64(beta, "beta")
        beta_per_value_head = _gate_heads(beta, H, HV) == HV and HV != H
        _check_shape(beta, (B, T, HV if beta_per_value_head else H), "beta",
                     "[B, T, H] or [B, T, HV]")
        if normalizer:
            raise ValueError("normalizer=True is only supported with update='additive'")
    elif beta is not None:
        raise ValueError("beta is only used with update='delta'")

    scale = _check_scale(scale, K)
    if normalizer and not (np.isscalar(eps) and np.isreal(eps)):
        raise ValueError(f"eps must be a real number, got {eps!r}")
    seqs = _sequences(cu_seqlens, B, T)
    N = len(seqs)
    s0 = _check_initial_state(initial_state, N, HV, K, V)

    if qk_l2norm:
        q = l2norm(q)
        k = l2norm(k)
    q = scale * q

    group = HV // H
    o = np.zeros((B, T, HV, V), dtype=np.float64)
    final_state = np.zeros((N, HV, K, V), dtype=np.float64)

    for n, (b, start, end) in enumerate(seqs):
        for hv in range(HV):
            h = hv // group                      # key head used by this value head
            S = s0[n, hv].copy()                 # [K, V]
            z = np.zeros(K, dtype=np.float64)    # normaliser, starts at 0
            for t in range(start, end):
                q_t = q[b, t, h]                 # [K], already scaled
                k_t = k[b, t, h]                 # [K]
                v_t = v[b, t, hv]                # [V]
                # [K], decays the rows of S
                decay = np.exp(log_gate[b, t, hv if gate_per_value_head else h])

                S = decay[:, None] * S           # Diag(exp g_t) S_{t-1}
                if update == "additive":
                    S = S + np.outer(k_t, v_t)
                else:
                    beta_t = beta[b, t, hv if beta_per_value_head else h]
                    # (I - beta k k^T) S + beta k v^T
                    S = S - beta_t * np.outer(k_t, k_t @ S) + beta_t * np.outer(k_t, v_t)

                o_t = S.T @ q_t                  # [V]
                if normalizer:
                    z = decay * z + k_t
                    o_t = o_t / (z @ q_t + eps)
                o[b, t, hv] = o_t
            final_state[n, hv] = S
    return o, final_state


# --------------------------------------------------------------------------
# diagonal-plus-low-rank recurrence (the compiler's canonical level-1 op)
# --------------------------------------------------------------------------

def _check_low_rank(a, b, B, T, H, K):
    """The low-rank vectors ``a, b : [B, T, H, K]`` of the DPLR recurrence as
    float64, both given or both None."""
    if (a is None) != (b is None):
        raise ValueError("a and b must be given together (the low-rank term is b a^T)")
    if a is None:
        return None, None
    a = _f64(a, "a")
    b = _f64(b, "b")
    _check_shape(a, (B, T, H, K), "a", "[B, T, H, K]")
    _check_shape(b, (B, T, H, K), "b", "[B, T, H, K]")
    return a, b


def dplr_recurrence(
    q, k, v, log_alpha=None, a=None, b=None, scale=None, initial_state=None, cu_seqlens=None,
    log_value_gate=None, reverse=False,
):
    """``S_t = (Diag(alpha_t) - b_t a_t^T) S_{t-1} Diag(gamma_t) + k_t v_t^T``,
    ``o_t = S_t^T (scale q_t)``.

    ``alpha_t = exp(log_alpha_t)`` with ``log_alpha : [B, T, H, K]`` (None means
    alpha = 1); ``gamma_t = exp(log_value_gate_t)`` with ``log_value_gate :
    [B, T, HV, V]`` (fla's ``gv``; None means gamma = 1); ``a, b : [B, T, H,
    K]``, both given or both None (None means no low-rank term). Grouped value
    heads, ``initial_state`` and ``cu_seqlens`` follow the same conventions as
    :func:`recurrence`. With ``reverse`` each sequence runs from its last
    token to its first (``S_t`` follows ``S_{t+1}``).

    The delta rule is the special case ``alpha = exp(g)``, ``b = beta k``,
    ``a = exp(g) * k`` with write key ``beta k``.
    """
    q, k, v, (B, T, H, K, HV, V) = _check_qkv(q, k, v)
    if log_alpha is None:
        log_alpha = np.broadcast_to(np.zeros((), dtype=np.float64), (B, T, H, K))
    else:
        log_alpha = _f64(log_alpha, "log_alpha")
        _check_shape(log_alpha, (B, T, H, K), "log_alpha", "[B, T, H, K]")
    a, b = _check_low_rank(a, b, B, T, H, K)
    low_rank = a is not None
    if log_value_gate is not None:
        log_value_gate = _f64(log_value_gate, "log_value_gate")
        _check_shape(log_value_gate, (B, T, HV, V), "log_value_gate", "[B, T, HV, V]")
    scale = _check_scale(scale, K)
    seqs = _sequences(cu_seqlens, B, T)
    N = len(seqs)
    s0 = _check_initial_state(initial_state, N, HV, K, V)
    q = scale * q

    group = HV // H
    o = np.zeros((B, T, HV, V), dtype=np.float64)
    final_state = np.zeros((N, HV, K, V), dtype=np.float64)
    for n, (bi, start, end) in enumerate(seqs):
        for hv in range(HV):
            h = hv // group
            S = s0[n, hv].copy()
            for t in (range(end - 1, start - 1, -1) if reverse else range(start, end)):
                alpha_t = np.exp(log_alpha[bi, t, h])
                S_new = alpha_t[:, None] * S                 # Diag(alpha) S
                if low_rank:
                    S_new = S_new - np.outer(b[bi, t, h], a[bi, t, h] @ S)  # - b (a^T S)
                if log_value_gate is not None:
                    S_new = S_new * np.exp(log_value_gate[bi, t, hv])[None, :]
                S = S_new + np.outer(k[bi, t, h], v[bi, t, hv])
                o[bi, t, hv] = S.T @ q[bi, t, h]
            final_state[n, hv] = S
    return o, final_state


def _log_gate_or_zero(x, name, shape, what):
    """``x`` as a checked float64 array of ``shape``, or zeros when None."""
    if x is None:
        return np.zeros(shape, dtype=np.float64)
    x = _f64(x, name)
    _check_shape(x, shape, name, what)
    return x


def dplr_recurrence_vjp(
    q, k, v, do, d_final_state=None, log_alpha=None, a=None, b=None, scale=None,
    initial_state=None, cu_seqlens=None, log_value_gate=None, reverse=False,
):
    """The gradients of :func:`dplr_recurrence` (``reverse`` as there), by
    hand-written reverse mode
    in float64 (the adjoint recurrence, token by token, backward in time):
    the vector-Jacobian product of ``(o, final_state)`` with ``(do,
    d_final_state)`` (``d_final_state`` None means zero).

    Returns a dict with ``q, k, v`` and, as given, ``log_alpha``, ``a``,
    ``b``, ``log_value_gate`` and ``initial_state``: each the gradient of
    ``sum(o * do) + sum(final_state * d_final_state)`` with respect to that
    input. Per step, with ``P = Diag(alpha) S' - b (a^T S')`` and ``S = P +
    k v^T``::

        dS += (scale q) do^T           dq = scale S do
        dk = dS v   dv = dS^T k        dP = dS
        u = a^T S'  du = -dP^T b       db = -dP u   da = S' du
        dlog_alpha = alpha * rowsum(dP * S')
        dS' = Diag(alpha) dP + a du^T

    so the adjoint of a diagonal-plus-low-rank recurrence is one again, with
    the transposed transition ``Diag(alpha) - a b^T``. A value-side gate
    (``S = P Diag(gamma) + k v^T``, ``gamma = exp(log_value_gate)``) gives
    ``dlog_gamma = colsum(dS * P Diag(gamma))`` and ``dP = dS Diag(gamma)``. Grouped value heads
    sum their gradients into their key head. It is the independent
    reference the compiler's derived backward is tested against; it is
    itself checked against central finite differences
    (``python/tests/test_reference_grad.py``).
    """
    q, k, v, (B, T, H, K, HV, V) = _check_qkv(q, k, v)
    do = _f64(do, "do")
    _check_shape(do, (B, T, HV, V), "do", "[B, T, HV, V]")
    given_log_alpha = log_alpha is not None
    log_alpha = _log_gate_or_zero(log_alpha, "log_alpha", (B, T, H, K), "[B, T, H, K]")
    a, b = _check_low_rank(a, b, B, T, H, K)
    low_rank = a is not None
    given_value_gate = log_value_gate is not None
    log_value_gate = _log_gate_or_zero(log_value_gate, "log_value_gate", (B, T, HV, V),
                                       "[B, T, HV, V]")
    scale = _check_scale(scale, K)
    seqs = _sequences(cu_seqlens, B, T)
    N = len(seqs)
    s0 = _check_initial_state(initial_state, N, HV, K, V)
    if d_final_state is None:
        d_final_state = np.zeros((N, HV, K, V), dtype=np.float64)
    else:
        d_final_state = _f64(d_final_state, "d_final_state")
        _check_shape(d_final_state, (N, HV, K, V), "d_final_state", "[N, HV, K, V]")

    grads = {name: np.zeros(x.shape, dtype=np.float64)
             for name, x in (("q", q), ("k", k), ("v", v), ("log_alpha", log_alpha),
                             ("log_value_gate", log_value_gate))}
    if low_rank:
        grads["a"] = np.zeros(a.shape, dtype=np.float64)
        grads["b"] = np.zeros(b.shape, dtype=np.float64)
    d_s0 = np.zeros((N, HV, K, V), dtype=np.float64)
    group = HV // H
    for n, (bi, start, end) in enumerate(seqs):
        for hv in range(HV):
            h = hv // group
            # Forward, keeping every state: states[i] is S before the i-th
            # token of `order` (the processing order).
            order = list(range(end - 1, start - 1, -1) if reverse else range(start, end))
            states = [s0[n, hv].copy()]
            for t in order:
                S = states[-1]
                alpha_t = np.exp(log_alpha[bi, t, h])
                P = alpha_t[:, None] * S
                if low_rank:
                    P = P - np.outer(b[bi, t, h], a[bi, t, h] @ S)
                P = P * np.exp(log_value_gate[bi, t, hv])[None, :]
                states.append(P + np.outer(k[bi, t, h], v[bi, t, hv]))
            # Backward in time.
            dS = d_final_state[n, hv].copy()
            for i, t in reversed(list(enumerate(order))):
                S, S_prev = states[i + 1], states[i]
                qs = scale * q[bi, t, h]
                dS = dS + np.outer(qs, do[bi, t, hv])
                grads["q"][bi, t, h] += scale * (S @ do[bi, t, hv])
                grads["k"][bi, t, h] += dS @ v[bi, t, hv]
                grads["v"][bi, t, hv] += dS.T @ k[bi, t, h]
                # S = P Diag(gamma) + k v^T: dlog_gamma = colsum(dS * (S - k v^T)),
                # and P's adjoint is dS Diag(gamma).
                gamma_t = np.exp(log_value_gate[bi, t, hv])
                decayed = S - np.outer(k[bi, t, h], v[bi, t, hv])
                grads["log_value_gate"][bi, t, hv] += np.sum(dS * decayed, axis=0)
                dS = dS * gamma_t[None, :]
                alpha_t = np.exp(log_alpha[bi, t, h])
                grads["log_alpha"][bi, t, h] += alpha_t * np.sum(dS * S_prev, axis=1)
                d_prev = alpha_t[:, None] * dS
                if low_rank:
                    u = a[bi, t, h] @ S_prev
                    du = -(dS.T @ b[bi, t, h])
                    grads["b"][bi, t, h] += -(dS @ u)
                    grads["a"][bi, t, h] += S_prev @ du
                    d_prev = d_prev + np.outer(a[bi, t, h], du)
                dS = d_prev
            d_s0[n, hv] = dS
    if not given_log_alpha:
        del grads["log_alpha"]
    if not given_value_gate:
        del grads["log_value_gate"]
    if initial_state is not None:
        grads["initial_state"] = d_s0
    return grads


# --------------------------------------------------------------------------
# named wrappers, flash-linear-attention style
# --------------------------------------------------------------------------

def linear_attention(
    q, k, v, *, scale=None, initial_state=None, normalizer=False, eps=1e-6,
    qk_l2norm=False, cu_seqlens=None,
):
    """Plain linear attention: ``S_t = S_{t-1} + k_t v_t^T`` (optionally normalised).

    Feature maps (elu+1, ...) are applied by the caller to q and k.
    """
    return recurrence(
        q, k, v, update="additive", gate="none", scale=scale, initial_state=initial_state,
        normalizer=normalizer, eps=eps, qk_l2norm=qk_l2norm, cu_seqlens=cu_seqlens,
    )


def retention(
    q, k, v, log_decay=None, *, scale=None, initial_state=None, normalizer=False,
    eps=1e-6, qk_l2norm=False, cu_seqlens=None,
):
    """RetNet / TNL / Lightning: fixed per-head decay ``log_decay : [H]``.

    ``log_decay=None`` uses RetNet's schedule ``log(1 - 2**(-5 - h))``.
    """
    if log_decay is None:
        log_decay = retnet_log_decay(np.shape(q)[2] if np.ndim(q) == 4 else 0)
    return recurrence(
        q, k, v, update="additive", gate="fixed", log_decay=log_decay, scale=scale,
        initial_state=initial_state, normalizer=normalizer, eps=eps,
        qk_l2norm=qk_l2norm, cu_seqlens=cu_seqlens,
    )


def simple_gla(
    q, k, v, g, *, scale=None, initial_state=None, normalizer=False, eps=1e-6,
    qk_l2norm=False, cu_seqlens=None,
):
    """Scalar data-dependent decay (Mamba-2 SSD, simple GLA): ``g : [B, T, H]``."""
    return recurrence(
        q, k, v, update="additive", gate="scalar", g=g, scale=scale,
        initial_state=initial_state, normalizer=normalizer, eps=eps,
        qk_l2norm=qk_l2norm, cu_seqlens=cu_seqlens,
    )


def gla(
    q, k, v, g, *, scale=None, initial_state=None, normalizer=False, eps=1e-6,
    qk_l2norm=False, cu_seqlens=None,
):
    """GLA: channel-wise gate ``g : [B, T, H, K]``."""
    return recurrence(
        q, k, v, update="additive", gate="channel", g=g, scale=scale,
        initial_state=initial_state, normalizer=normalizer, eps=eps,
        qk_l2norm=qk_l2norm, cu_seqlens=cu_seqlens,
    )


def delta_rule(
    q, k, v, beta, *, scale=None, initial_state=None, qk_l2norm=False, cu_seqlens=None,
):
    """DeltaNet: ``S_t = (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T``."""
    return recurrence(
        q, k, v, update="delta", gate="none", beta=beta, scale=scale,
        initial_state=initial_state, qk_l2norm=qk_l2norm, cu_seqlens=cu_seqlens,
    )


def gated_delta_rule(
    q, k, v, g, beta, *, scale=None, initial_state=None, qk_l2norm=False, cu_seqlens=None,
):
    """Gated DeltaNet: scalar gate ``g : [B, T, H]`` and ``beta : [B, T, H]``."""
    return recurrence(
        q, k, v, update="delta", gate="scalar", g=g, beta=beta, scale=scale,
        initial_state=initial_state, qk_l2norm=qk_l2norm, cu_seqlens=cu_seqlens,
    )


def kda(
    q, k, v, g, beta, *, scale=None, initial_state=None, qk_l2norm=False, cu_seqlens=None,
):
    """Kimi Delta Attention: channel gate ``g : [B, T, H, K]``, ``beta : [B, T, H]``."""
    return recurrence(
        q, k, v, update="delta", gate="channel", g=g, beta=beta, scale=scale,
        initial_state=initial_state, qk_l2norm=qk_l2norm, cu_seqlens=cu_seqlens,
    )


def gated_delta_rule2(
    q, k, v, g, erase, write, *, scale=None, initial_state=None, qk_l2norm=False,
    cu_seqlens=None, erase_read_key=False,
):
    """Gated DeltaNet-2: a channel-wise erase gate on the key side and a write
    gate on the value side in place of KDA's scalar beta,
    ``S_t = (I - (e_t * k_t) k_t^T) Diag(exp(g_t)) S_{t-1} + k_t (w_t * v_t)^T``,
    ``o_t = S_t^T (scale q_t)``. ``g, erase : [B, T, H, K]`` (``g`` may be
    None: no decay), ``write : [B, T, HV, V]``. With ``erase`` and ``write``
    equal to one scalar beta per token this is :func:`kda`. With
    ``erase_read_key`` the erase gate multiplies the key the state is read
    with instead: ``S_t = (I - k_t (e_t * k_t)^T) Diag(exp(g_t)) S_{t-1} +
    k_t (w_t * v_t)^T`` (flash-linear-attention's ``chunk_gdn2``).
    """
    q, k, v, (B, T, H, K, HV, V) = _check_qkv(q, k, v)
    if qk_l2norm:
        q, k = l2norm(q), l2norm(k)
    g = np.zeros((B, T, H, K)) if g is None else _f64(g, "g")
    erase = _f64(erase, "erase")
    write = _f64(write, "write")
    g_heads, erase_heads = _gate_heads(g, H, HV), _gate_heads(erase, H, HV)
    _check_shape(g, (B, T, g_heads, K), "g", "[B, T, H, K] or [B, T, HV, K]")
    _check_shape(erase, (B, T, erase_heads, K), "erase", "[B, T, H, K] or [B, T, HV, K]")
    _check_shape(write, (B, T, HV, V), "write", "[B, T, HV, V]")
    scale = _check_scale(scale, K)
    seqs = _sequences(cu_seqlens, B, T)
    N = len(seqs)
    s0 = _check_initial_state(initial_state, N, HV, K, V)
    group = HV // H
    o = np.zeros((B, T, HV, V), dtype=np.float64)
    final_state = np.zeros((N, HV, K, V), dtype=np.float64)
    for n, (bi, start, end) in enumerate(seqs):
        for hv in range(HV):
            h = hv // group
            S = s0[n, hv].copy()
            for t in range(start, end):
                kt = k[bi, t, h]
                S = np.exp(g[bi, t, hv if g_heads != H else h])[:, None] * S
                e_t = erase[bi, t, hv if erase_heads != H else h]
                if erase_read_key:
                    S = S - np.outer(kt, (e_t * kt) @ S)
                else:
                    S = S - np.outer(e_t * kt, kt @ S)
                S = S + np.outer(kt, write[bi, t, hv] * v[bi, t, hv])
                o[bi, t, hv] = S.T @ (scale * q[bi, t, h])
            final_state[n, hv] = S
    return o, final_state


def dplr(
    q, k, v, a, b, g=None, *, scale=None, initial_state=None, qk_l2norm=False,
    cu_seqlens=None,
):
    """The dplr rule (la.attention's ``dplr`` variants; RWKV-7 with a
    channel gate): ``S_t = (Diag(exp(g_t)) - b_t a_t^T) S_{t-1} + k_t v_t^T``,
    ``o_t = S_t^T (scale q_t)``, the state read with ``a`` before the decay.
    ``a, b, g : [B, T, H, K]`` (``g`` None: no decay). flash-linear-attention's
    ``chunk_dplr_delta_rule(q, k, v, a, b, gk)`` is this with ``-b``.
    """
    q, k, v, _ = _check_qkv(q, k, v)
    if qk_l2norm:
        q, k = l2norm(q), l2norm(k)
    return dplr_recurrence(q, k, v, log_alpha=g, a=a, b=b, scale=scale,
                           initial_state=initial_state, cu_seqlens=cu_seqlens)


def mixture_of_memories(
    q, k, v, routing, memory="gated_deltanet", g=None, beta=None, *, scale=None,
    initial_state=None, cu_seqlens=None,
):
    """Mixture-of-Memories (Du et al., 2025), token by token: ``q : [B, T, H,
    K]``; per memory ``k : [B, T, M, H, K]``, ``v : [B, T, M, H, V]``, ``g :
    [B, T, M, H]`` (scalar gate: ``mamba2``, ``gated_deltanet``) or ``[B, T,
    M, H, K]`` (``gla``, ``kda``), ``beta : [B, T, M, H]`` (delta rule);
    ``routing : [B, T, M]``. A memory whose weight is not zero at token t
    takes its rule's step (decay, then ``+ k v^T`` or the delta rule's
    ``(I - beta k k^T) S + beta k v^T``); the others are kept. ``o_t =
    sum_m routing[t, m] S^m_t^T (scale q_t)``. States ``[N, M, H, K, V]``.
    Returns ``(o, final_state)`` in float64."""
    q = _f64(q, "q")
    k = _f64(k, "k")
    v = _f64(v, "v")
    routing = _f64(routing, "routing")
    B, T, H, K = q.shape
    M, V = k.shape[2], v.shape[-1]
    _check_shape(k, (B, T, M, H, K), "k", "[B, T, M, H, K]")
    _check_shape(v, (B, T, M, H, V), "v", "[B, T, M, H, V]")
    _check_shape(routing, (B, T, M), "routing", "[B, T, M]")
    delta = memory in ("deltanet", "gated_deltanet", "kda")
    channel = memory in ("gla", "kda")
    gated = memory not in ("linear", "deltanet")
    if gated:
        g = _f64(g, "g")
        _check_shape(g, (B, T, M, H, K) if channel else (B, T, M, H), "g",
                     "[B, T, M, H, K]" if channel else "[B, T, M, H]")
    if delta:
        beta = _f64(beta, "beta")
        _check_shape(beta, (B, T, M, H), "beta", "[B, T, M, H]")
    scale = _check_scale(scale, K)
    seqs = _sequences(cu_seqlens, B, T)
    N = len(seqs)
    s0 = np.zeros((N, M, H, K, V)) if initial_state is None else _f64(initial_state,
                                                                       "initial_state")
    _check_shape(s0, (N, M, H, K, V), "initial_state", "[N, M, H, K, V]")
    o = np.zeros((B, T, H, V))
    final_state = np.zeros((N, M, H, K, V))
    for n, (bi, start, end) in enumerate(seqs):
        for h in range(H):
            states = [s0[n, m, h].copy() for m in range(M)]
            for t in range(start, end):
                for m in range(M):
                    S = states[m]
                    if routing[bi, t, m] != 0:
                        if gated:
                            S = np.exp(g[bi, t, m, h]) * S if not channel else \
                                np.exp(g[bi, t, m, h])[:, None] * S
                        kt, vt = k[bi, t, m, h], v[bi, t, m, h]
                        if delta:
                            bt = beta[bi, t, m, h]
                            S = S - bt * np.outer(kt, kt @ S) + bt * np.outer(kt, vt)
                        else:
                            S = S + np.outer(kt, vt)
                        states[m] = S
                    o[bi, t, h] += routing[bi, t, m] * (S.T @ (scale * q[bi, t, h]))
            for m in range(M):
                final_state[n, m, h] = states[m]
    return o, final_state


def sliding_window_hybrid(q, k, v, feature_q, feature_k, window, scale=None):
    """Softmax attention on the last ``window`` tokens (the current one
    included) plus linear attention on features for the tokens before them,
    one normalisation: ``o_t = (sum_{t-w < s <= t} exp(scale q_t . k_s) v_s +
    sum_{s <= t-w} (phi_q(t) . phi_k(s)) v_s) / (the same without v_s)``,
    token by token in float64."""
    q, k, v = _f64(q, "q"), _f64(k, "k"), _f64(v, "v")
    fq, fk = _f64(feature_q, "feature_q"), _f64(feature_k, "feature_k")
    B, T, H, K = q.shape
    scale = _check_scale(scale, K)
    o = np.zeros(v.shape)
    for bi in range(B):
        for h in range(H):
            for t in range(T):
                num = np.zeros(v.shape[-1])
                den = 0.0
                for s in range(t + 1):
                    weight = (np.exp(scale * q[bi, t, h] @ k[bi, s, h]) if s > t - window
                              else fq[bi, t, h] @ fk[bi, s, h])
                    num += weight * v[bi, s, h]
                    den += weight
                o[bi, t, h] = num / den
    return o


def sliding_window_hybrid_backward(q, k, v, feature_q, feature_k, window, do, scale=None):
    """The gradients of ``sum(o * do)`` for :func:`sliding_window_hybrid`,
    ``(dq, dk, dv, dfeature_q, dfeature_k)``, by hand in float64, pair by
    pair: with ``w_ts = exp(scale q_t . k_s)`` in the window and ``f_ts =
    fq_t . fk_s`` before it, ``D_t`` their sum and ``o_t = sum w v / D_t``,
    each pair's weight has the cotangent ``do_t . (v_s - o_t) / D_t``;
    ``dv_s`` sums ``weight * do_t / D_t``, a window pair passes its
    cotangent times ``w_ts scale`` to ``q_t`` and ``k_s``, a far pair to
    ``fq_t`` and ``fk_s`` through the product."""
    q, k, v = _f64(q, "q"), _f64(k, "k"), _f64(v, "v")
    fq, fk = _f64(feature_q, "feature_q"), _f64(feature_k, "feature_k")
    do = _f64(do, "do")
    B, T, H, K = q.shape
    scale = _check_scale(scale, K)
    grads = [np.zeros_like(x) for x in (q, k, v, fq, fk)]
    dq, dk, dv, dfq, dfk = grads
    for bi in range(B):
        for h in range(H):
            for t in range(T):
                s = np.arange(t + 1)
                near = s > t - window
                scores = scale * k[bi, s, h] @ q[bi, t, h]
                weight = np.where(near, np.exp(np.where(near, scores, 0.0)),
                                  fk[bi, s, h] @ fq[bi, t, h])
                total = weight.sum()
                o = weight @ v[bi, s, h] / total
                dweight = (v[bi, s, h] - o) @ do[bi, t, h] / total
                dv[bi, s, h] += np.outer(weight, do[bi, t, h]) / total
                dscore = np.where(near, weight * dweight, 0.0) * scale
                dq[bi, t, h] += dscore @ k[bi, s, h]
                dk[bi, s, h] += np.outer(dscore, q[bi, t, h])
                dfar = np.where(near, 0.0, dweight)
                dfq[bi, t, h] += dfar @ fk[bi, s, h]
                dfk[bi, s, h] += np.outer(dfar, fq[bi, t, h])
    return tuple(grads)


def log_linear_attention(q, k, v, g, level_scales, scale=1.0, *, beta=None, cu_seqlens=None):
    """Log-linear attention, pair by pair in float64:

        o_t = sum_{s <= t} level_scales[t, l] scale q_t^T A_t ... A_{s+1} w_s v_s^T

    with ``l = 0`` for ``s = t`` and ``l = floor(log2(t xor s)) + 1`` for
    ``s < t`` (the Fenwick-tree level of s seen from t, positions counted
    from the sequence's first token). The transitions are those of la's
    recurrences: ``A_s = Diag(exp(g_s))`` and ``w_s = k_s`` (additive), or
    with ``beta`` the delta rule's ``A_s = (I - beta_s k_s k_s^T)
    Diag(exp(g_s))`` and ``w_s = beta_s k_s``. ``q, k : [B, T, H, K]``,
    ``v : [B, T, HV, V]``, ``g``: None, ``[B, T, H or HV]`` (scalar) or
    ``[B, T, H or HV, K]`` (per channel), ``beta : [B, T, H or HV]``,
    ``level_scales : [B, T, HV, L]``; ``cu_seqlens`` packs sequences (B = 1).

    The product ``q_t^T A_t ... A_{s+1}`` is carried from s = t down to the
    sequence's first token, one transition at a time."""
    q, k, v = _f64(q, "q"), _f64(k, "k"), _f64(v, "v")
    lam = _f64(level_scales, "level_scales")
    B, T, H, K = q.shape
    HV = v.shape[2]
    group = HV // H
    g = np.zeros((B, T, HV)) if g is None else _f64(g, "g")
    beta = None if beta is None else _f64(beta, "beta")
    o = np.zeros(v.shape)
    for bi, start, end in _sequences(cu_seqlens, B, T):
        for hv in range(HV):
            h = hv // group
            hg = hv if g.shape[2] == HV else h
            hb = None if beta is None else (hv if beta.shape[2] == HV else h)
            for t in range(start, end):
                row = scale * q[bi, t, h]            # q_t^T A_t ... A_{s+1}
                for s in range(t, start - 1, -1):
                    level = 0 if s == t else int(np.floor(np.log2((t - start) ^ (s - start)))) + 1
                    written = k[bi, s, h] if hb is None else beta[bi, s, hb] * k[bi, s, h]
                    o[bi, t, hv] += lam[bi, t, hv, level] * (row @ written) * v[bi, s, hv]
                    if hb is not None:                 # row (I - beta k k^T)
                        row = row - beta[bi, s, hb] * (row @ k[bi, s, h]) * k[bi, s, h]
                    row = row * np.exp(g[bi, s, hg])   # Diag(exp(g_s)), scalar or [K]
    return o


def variational_linear_attention(q, k, v, u, *, lambda0=0.1, eta=1e-3, period=20, eps=1e-4,
                                 cu_seqlens=None, initial_state=None):
    """Variational Linear Attention (Pandey and Singh, 2026), token by token
    in float64 in the paper's own orientation (the memory ``M : [V, K]``,
    read as ``M q``). Per sequence and head, from ``P_0 = I / lambda0``,
    ``M_0 = 0``, ``z_0 = 0`` (or ``initial_state = (state [N, HV, K, V] =
    M^T, penalty [N, H, K, K] = P, normalizer [N, H, K] = z, position
    [N])``), token ``t`` (its position ``n`` in the sequence counted from 1,
    plus the carried position):

        x = P u_t;  P = P - x x^T / max(1 + u_t . x, eps)
        P = P + eta I                          when n % period == 0
        kh = k_t / |k_t|;  w = P kh / |P kh|
        M = M + (v_t - M kh) w^T
        z = z + k_t;  o_t = M q_t / max(z . q_t, eps)

    (a zero vector stays zero where it is normalised). Returns ``(o,
    (state, penalty, normalizer, position))`` with ``state`` as ``M^T``, la's
    ``[K, V]`` layout."""
    q, k, v, u = (_f64(x, name) for x, name in ((q, "q"), (k, "k"), (v, "v"), (u, "u")))
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    sequences = _sequences(cu_seqlens, B, T)
    N = len(sequences)
    if initial_state is None:
        memory0 = np.zeros((N, HV, K, V))
        penalty0 = np.broadcast_to(np.eye(K) / lambda0, (N, H, K, K))
        normalizer0, position0 = np.zeros((N, H, K)), np.zeros(N, np.int64)
    else:
        memory0, penalty0, normalizer0, position0 = (np.asarray(x) for x in initial_state)
    o = np.zeros((B, T, HV, V))
    memory_out = np.zeros((N, HV, K, V))
    penalty_out = np.zeros((N, H, K, K))
    normalizer_out = np.zeros((N, H, K))

    def unit(x):
        norm = np.linalg.norm(x)
        return x / norm if norm > 0 else x

    for n, (bi, start, end) in enumerate(sequences):
        for hv in range(HV):
            h = hv // (HV // H)
            P = np.array(penalty0[n, h], dtype=np.float64)
            M = np.array(memory0[n, hv], dtype=np.float64).T
            z = np.array(normalizer0[n, h], dtype=np.float64)
            for t in range(start, end):
                x = P @ u[bi, t, h]
                P = P - np.outer(x, x) / max(1.0 + u[bi, t, h] @ x, eps)
                if (int(position0[n]) + t - start + 1) % period == 0:
                    P = P + eta * np.eye(K)
                kh = unit(k[bi, t, h])
                w = unit(P @ kh)
                M = M + np.outer(v[bi, t, hv] - M @ kh, w)
                z = z + k[bi, t, h]
                o[bi, t, hv] = M @ q[bi, t, h] / max(z @ q[bi, t, h], eps)
            memory_out[n, hv] = M.T
            if hv % (HV // H) == 0:
                penalty_out[n, h], normalizer_out[n, h] = P, z
    lengths = np.array([end - start for _, start, end in sequences], np.int64)
    return o, (memory_out, penalty_out, normalizer_out, np.asarray(position0) + lengths)


def _rms_normalized(x, gamma):
    """Qwen3-style RMSNorm with scale ``gamma`` over the last axis."""
    return gamma * x / np.sqrt(np.mean(x * x) + 1e-6)


def hola_attention(q, k, v, g, beta, cache_weight, *, cache_size=64, block_size=256,
                   gamma_q=None, gamma_k=None, sink=None, scale=None, cu_seqlens=None,
                   initial_state=None, cache="surprise"):
    """HOLA's read (Cui, 2026, "A Hippocampus for Linear Attention"): a Gated
    DeltaNet state plus a softmax read of a bounded exact cache, token by
    token in float64. Per sequence and value head hv (key head h):

        e_t = v_t - exp(g_t) S_{t-1}^T k_t;  S_t = exp(g_t) S_{t-1} + beta_t k_t e_t^T
        m_t = beta_t |e_t|                       (the write's size, fixed once written)

    Token t of block b (``block_size`` tokens, counted from the sequence's
    start) reads the cache: the ``cache_size`` tokens of the blocks before b
    with the largest m (ties: the earlier token), the tokens of block b up to
    t, and a null sink (logit ``sink[hv]``, value 0) when given:

        o_t = S_t^T (scale q_t) + cache_weight[hv] sum_j softmax_j(qn_t . kn_j / sqrt(K)) v_j

    with ``qn = RMSNorm_gamma_q(q)``, ``kn = RMSNorm_gamma_k(k)``; with
    ``cache='recent'`` the cache is the ``cache_size`` latest tokens before
    the block. Returns ``(o, final_state)``."""
    q, k, v = _f64(q, "q"), _f64(k, "k"), _f64(v, "v")
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    scale = _check_scale(scale, K)
    g = _f64(g, "g")
    beta = _f64(beta, "beta")
    g_heads, beta_heads = g.shape[2], beta.shape[2]
    gamma_q = np.ones(K) if gamma_q is None else _f64(gamma_q, "gamma_q")
    gamma_k = np.ones(K) if gamma_k is None else _f64(gamma_k, "gamma_k")
    cache_weight = _f64(cache_weight, "cache_weight")
    sequences = _sequences(cu_seqlens, B, T)
    s0 = _check_initial_state(initial_state, len(sequences), HV, K, V)
    o = np.zeros((B, T, HV, V))
    final = np.zeros_like(s0)
    group = HV // H
    for n, (bi, start, end) in enumerate(sequences):
        for hv in range(HV):
            h = hv // group
            S = s0[n, hv].copy()
            m = np.zeros(end - start)
            keys = [_rms_normalized(k[bi, t, h], gamma_k) for t in range(start, end)]
            for i, t in enumerate(range(start, end)):
                decay = np.exp(g[bi, t, hv if g_heads == HV else h])
                b = beta[bi, t, hv if beta_heads == HV else h]
                e = v[bi, t, hv] - decay * (S.T @ k[bi, t, h])
                S = decay * S + b * np.outer(k[bi, t, h], e)
                m[i] = b * np.linalg.norm(e)
                block = (i // block_size) * block_size
                if cache == "recent":
                    order = list(range(max(block - cache_size, 0), block))
                else:
                    order = sorted(range(block), key=lambda j: (-m[j], j))[:cache_size]
                visible = sorted(order) + list(range(block, i + 1))
                qn = _rms_normalized(q[bi, t, h], gamma_q)
                logits = [qn @ keys[j] / np.sqrt(K) for j in visible]
                values = [v[bi, start + j, hv] for j in visible]
                if sink is not None:
                    logits.append(float(np.asarray(sink, np.float64)[hv]))
                    values.append(np.zeros(V))
                logits = np.array(logits)
                weights = np.exp(logits - logits.max())
                weights /= weights.sum()
                read = sum(w * x for w, x in zip(weights, values))
                o[bi, t, hv] = scale * (S.T @ q[bi, t, h]) + cache_weight[hv] * read
            final[n, hv] = S
    return o, final


def momentum_delta_rule(q, k, v, p, log_alpha, log_mu, beta, eta, *, scale=None,
                        cu_seqlens=None, initial_state=None):
    """Momentum DeltaNet (flash-linear-attention's momentum delta rule), token
    by token in float64: per sequence and head, from ``S_0, M_0`` (``[2, N,
    H, K, V]`` in ``initial_state``, zeros by default),

        w_t = S_{t-1}^T p_t - v_t
        M_t = mu_t M_{t-1} + eta_t k_t w_t^T
        S_t = alpha_t S_{t-1} - beta_t M_t
        o_t = S_t^T (scale q_t)

    with ``alpha = exp(log_alpha)``, ``mu = exp(log_mu)``; ``log_alpha,
    log_mu, beta, eta : [B, T, H]``, ``q, k, p : [B, T, H, K]``. Returns
    ``(o, final_state [2, N, H, K, V])`` (S, then M)."""
    q, k, v, p = (_f64(x, name) for x, name in ((q, "q"), (k, "k"), (v, "v"), (p, "p")))
    log_alpha, log_mu, beta, eta = (_f64(x, name) for x, name in (
        (log_alpha, "log_alpha"), (log_mu, "log_mu"), (beta, "beta"), (eta, "eta")))
    B, T, H, K = q.shape
    V = v.shape[3]
    scale = _check_scale(scale, K)
    sequences = _sequences(cu_seqlens, B, T)
    N = len(sequences)
    start_state = (np.zeros((2, N, H, K, V)) if initial_state is None
                   else np.asarray(initial_state, np.float64))
    o = np.zeros((B, T, H, V))
    final = np.zeros((2, N, H, K, V))
    for n, (bi, start, end) in enumerate(sequences):
        for h in range(H):
            S, M = start_state[0, n, h].copy(), start_state[1, n, h].copy()
            for t in range(start, end):
                w = S.T @ p[bi, t, h] - v[bi, t, h]
                M = np.exp(log_mu[bi, t, h]) * M + eta[bi, t, h] * np.outer(k[bi, t, h], w)
                S = np.exp(log_alpha[bi, t, h]) * S - beta[bi, t, h] * M
                o[bi, t, h] = S.T @ (scale * q[bi, t, h])
            final[0, n, h], final[1, n, h] = S, M
    return o, final
