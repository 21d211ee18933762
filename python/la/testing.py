"""Helpers for execution tests: accuracy metric, input generators, references.

bf16 is not a NumPy dtype. ``make_inputs`` supports ``np.float32`` and
``np.float16``; callers that test bf16 kernels round the float32 inputs to bf16
themselves (e.g. with ml_dtypes or torch) and pass the rounded values, widened
back to float32, to the reference, so that reference and kernel see the same
numbers.
"""

import numpy as np

from . import reference
from . import variants as _variants
from ._checks import check_cu_seqlens as _check_cu_seqlens  # noqa: F401 (tests use it)
from .variants import token_operand_shapes, token_operands  # noqa: F401 (re-exported)

__all__ = ["VARIANTS", "rel_rms", "make_inputs", "reference_for", "reference_gradients",
           "token_operands"]

#: variant name -> (update rule, gate kind), from la's registry
#: (:data:`la.variants.VARIANTS`).
VARIANTS = _variants.VARIANTS

#: update rules whose keys are L2-normalised by :func:`make_inputs`.
_UNIT_KEY_UPDATES = ("delta", "erase_write")

_SUPPORTED_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))


def rel_rms(ref, out):
    """``rms(ref - out) / rms(ref)`` computed in float64.

    Returns 0.0 when both are identically zero and ``inf`` when only ``ref``
    is. Shapes must match exactly (no broadcasting). NaN in either input gives
    NaN.
    """
    ref = np.asarray(ref, dtype=np.float64)
    out = np.asarray(out, dtype=np.float64)
    if ref.shape != out.shape:
        raise ValueError(f"shape mismatch: ref {ref.shape} vs out {out.shape}")
    num = np.sqrt(np.mean((ref - out) ** 2))
    den = np.sqrt(np.mean(ref ** 2))
    if den == 0.0:
        if np.isnan(num):
            return float("nan")
        return 0.0 if num == 0.0 else float("inf")
    return float(num / den)


def central_differences(loss, x, step=1e-6):
    """``d loss / d x`` by central differences of ``loss`` (a function of one
    float64 array of ``x``'s shape), one entry at a time: the independent
    check of a gradient on small shapes."""
    x = np.asarray(x, dtype=np.float64)
    grad = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        plus, minus = x.copy(), x.copy()
        plus[index] += step
        minus[index] -= step
        grad[index] = (loss(plus) - loss(minus)) / (2 * step)
    return grad


def _log_sigmoid(x):
    return -np.logaddexp(0.0, -x)


def _sigmoid(x):
    return np.exp(_log_sigmoid(x))


def _elu_plus_one(x):
    return np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))


def make_inputs(
    variant,
    B,
    T,
    H,
    K,
    V,
    HV=None,
    dtype=np.float32,
    seed=0,
    gate_min=None,
    with_initial_state=False,
    cu_seqlens=None,
    gate_scale=1.0,
    positive_qk=False,
):
    """Realistic random inputs for ``variant`` (a key of :data:`VARIANTS`).

    Returns a dict with ``q, k : [B, T, H, K]`` and ``v : [B, T, HV, V]`` (all
    ``dtype``), plus, depending on the variant:

    * ``log_decay : [H]`` float32 (retention, decayed_deltanet, decayed_deltanet2):
      RetNet's ``log(1 - 2**(-5-h))``;
    * ``g : [B, T, H]`` (mamba2, gated_deltanet, scalar_gated_deltanet2) or
      ``[B, T, H, K]`` (gla, kda, gated_deltanet2),
      ``dtype``: ``gate_scale * log_sigmoid(x)`` with ``x ~ N(0, 1)``, clamped
      below at ``gate_min`` when given. With the default ``gate_scale=1`` the
      mean log decay is about -0.8 per step, so after ~30 steps the state has
      forgotten everything; use e.g. ``gate_scale=1/16`` (GLA's normaliser) to
      test long memory and state passing across chunks, or a large gate_scale
      with ``gate_min=-30`` for very strong decays;
    * ``beta : [B, T, H]`` (delta variants), ``dtype``, ``sigmoid(x)`` in (0, 1);
    * ``erase : [B, T, H, K]`` and ``write : [B, T, HV, V]`` (erase_write
      variants, Gated DeltaNet-2), ``dtype``, ``sigmoid(x)`` in (0, 1);
    * ``a, b : [B, T, H, K]`` (dplr variants, RWKV-7), ``dtype``, as RWKV-7
      builds them: ``a`` a unit-norm removal key ``kappa``, ``b = kappa *
      sigmoid(x)`` (an in-context learning rate per channel), so that the
      transition ``Diag(alpha) - b a^T`` is at most a contraction.

    q, k, v are standard normal; for the delta and erase_write variants k is L2-normalised
    over K (in float64, before the cast). ``positive_qk=True`` maps q and k
    through ``elu(x) + 1`` (positive features, as normalised linear attention
    needs so that ``z . q`` stays away from 0).

    ``with_initial_state=True`` adds ``initial_state : [N, HV, K, V]`` float32,
    ``0.1 * N(0, 1)``. ``cu_seqlens`` (requires ``B == 1`` and
    ``cu_seqlens[-1] == T``) is returned as int32 and sets N.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; expected one of {tuple(VARIANTS)}")
    dtype = np.dtype(dtype)
    if dtype not in _SUPPORTED_DTYPES:
        raise ValueError(
            f"dtype must be float32 or float16, got {dtype} (bf16 is handled by callers)"
        )
    HV = H if HV is None else HV
    if HV % H != 0:
        raise ValueError(f"HV={HV} must be a multiple of H={H}")
    if cu_seqlens is not None:
        cu = _check_cu_seqlens(cu_seqlens, T, B).astype(np.int32)
        N = cu.size - 1
    else:
        cu = None
        N = B

    update, gate = VARIANTS[variant]
    rng = np.random.default_rng(seed)
    # Drawn in la.attention's operand order, shapes from the registry.
    raw = {name: rng.standard_normal(shape)
           for name, shape in token_operand_shapes(variant, B, T, H, K, V, HV)}
    q, k = raw["q"], raw["k"]
    if positive_qk:
        q = _elu_plus_one(q)
        k = _elu_plus_one(k)
    if update in _UNIT_KEY_UPDATES:
        k = k / np.linalg.norm(k, axis=-1, keepdims=True)

    inputs = {"q": q.astype(dtype), "k": k.astype(dtype), "v": raw["v"].astype(dtype)}
    if gate == "fixed":
        inputs["log_decay"] = reference.retnet_log_decay(H).astype(np.float32)
    if "g" in raw:
        g = gate_scale * _log_sigmoid(raw["g"])
        if gate_min is not None:
            g = np.maximum(g, gate_min)
        inputs["g"] = g.astype(dtype)
    for name in ("beta", "erase", "write"):
        if name in raw:
            inputs[name] = _sigmoid(raw[name]).astype(dtype)
    if update == "dplr":
        kappa = raw["a"] / np.linalg.norm(raw["a"], axis=-1, keepdims=True)
        inputs["a"] = kappa.astype(dtype)
        inputs["b"] = (kappa * _sigmoid(raw["b"])).astype(dtype)

    if with_initial_state:
        inputs["initial_state"] = (0.1 * rng.standard_normal((N, HV, K, V))).astype(np.float32)
    if cu is not None:
        inputs["cu_seqlens"] = cu
    return inputs


_INPUT_KEYS = ("g", "log_decay", "beta", "initial_state", "cu_seqlens")
_ERASE_WRITE_KEYS = ("g", "log_decay", "erase", "write", "initial_state", "cu_seqlens")
_DPLR_KEYS = ("g", "log_decay", "a", "b", "initial_state", "cu_seqlens")


def _channel_gate(gate, kwargs, shape):
    """The erase_write and dplr variants' gate as the ``[B, T, H, K]`` log
    gate (or None) that :func:`reference.gated_delta_rule2` and
    :func:`reference.dplr` take."""
    g = kwargs.pop("g", None)
    log_decay = kwargs.pop("log_decay", None)
    if gate == "none":
        return None
    if gate == "fixed":
        if log_decay is None:
            log_decay = reference.retnet_log_decay(shape[2])
        ld = np.asarray(log_decay, dtype=np.float64).reshape(-1)
        return np.broadcast_to(ld[None, None, :, None], shape)
    g = np.asarray(g, dtype=np.float64)
    if gate == "scalar":
        return np.broadcast_to(g[..., None], g.shape + (shape[3],))
    return g


def _checked_offsets(mapping, q_shape=None):
    """``mapping`` with its ``cu_seqlens`` (when present and not None)
    checked by :func:`_check_cu_seqlens` against q's B and T."""
    if mapping.get("cu_seqlens") is None:
        return mapping
    shape = np.shape(mapping["q"]) if q_shape is None else q_shape
    if len(shape) != 4:
        raise ValueError(f"q must be 4-D [B, T, H, K] with cu_seqlens, got shape {tuple(shape)}")
    return dict(mapping, cu_seqlens=_check_cu_seqlens(mapping["cu_seqlens"], shape[1], shape[0]))


def reference_for(variant, inputs, **attrs):
    """Run the fp64 reference for ``variant`` on a ``make_inputs`` dict:
    :func:`reference.recurrence`, :func:`reference.gated_delta_rule2` for
    the erase_write variants or :func:`reference.dplr` for the dplr ones
    (their fixed or scalar gate broadcast over K).

    ``attrs`` are passed through (``scale``, ``normalizer``, ``eps``,
    ``qk_l2norm``, ...) and override entries of ``inputs``. The erase_write
    variants take no normaliser (``normalizer=False`` and ``eps`` are ignored).
    ``cu_seqlens`` (from either) is checked like the kernels' (first offset
    0, non-decreasing, last T, integer dtype). Returns ``(o, final_state)`` in float64.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; expected one of {tuple(VARIANTS)}")
    update, gate = VARIANTS[variant]
    inputs = _checked_offsets(inputs)
    attrs = _checked_offsets(attrs, np.shape(inputs["q"]))
    if update in ("erase_write", "dplr"):
        keys = _ERASE_WRITE_KEYS if update == "erase_write" else _DPLR_KEYS
        kwargs = {key: inputs[key] for key in keys if key in inputs}
        kwargs.update(attrs)
        if kwargs.pop("normalizer", False):
            raise ValueError(f"{variant} has no normalizer (additive variants only)")
        kwargs.pop("eps", None)
        q, k, v = inputs["q"], inputs["k"], inputs["v"]
        g = _channel_gate(gate, kwargs, np.shape(q))
        if update == "erase_write":
            erase, write = kwargs.pop("erase"), kwargs.pop("write")
            return reference.gated_delta_rule2(q, k, v, g, erase, write, **kwargs)
        a, b = kwargs.pop("a"), kwargs.pop("b")
        return reference.dplr(q, k, v, a, b, g, **kwargs)
    kwargs = {key: inputs[key] for key in _INPUT_KEYS if key in inputs}
    kwargs.update(attrs)
    return reference.recurrence(
        inputs["q"], inputs["k"], inputs["v"], update=update, gate=gate, **kwargs
    )


_DIFFERENTIABLE = _variants.DIFFERENTIABLE


def _l2norm_vjp(x, dy):
    """The adjoint of ``y = x / sqrt(sum(x^2) + eps)``."""
    r = 1.0 / np.sqrt((x * x).sum(-1, keepdims=True) + reference.L2NORM_EPS)
    y = x * r
    return r * (dy - y * (y * dy).sum(-1, keepdims=True))


def reference_gradients(variant, inputs, do, d_final, scale=None, qk_l2norm=False,
                        allow_neg_eigval=False, reverse=False):
    """The gradients of ``sum(o * do) + sum(final_state * d_final)`` with
    respect to every differentiable input of ``variant`` in ``inputs`` (a
    ``make_inputs`` dict with an initial state), in float64: the hand-written
    reverse mode of the canonical recurrence
    (:func:`reference.dplr_recurrence_vjp`, token by token, itself checked
    against finite differences) with the level-0 maps (L2 norm, the delta
    rule's and Gated DeltaNet-2's encodings, the dplr rule's a and b as
    they are, gate broadcasts,
    allow_neg_eigval) chained in NumPy. Independent of the compiler's
    derivation. A value-side gate ``gv`` in ``inputs`` (additive variants)
    is the recurrence's ``log_value_gate``; ``reverse`` runs every sequence
    backward in time. Returns a dict from input name to gradient."""
    update, gate = VARIANTS[variant]
    x = {key: np.asarray(val, np.float64) for key, val in inputs.items()
         if key in _DIFFERENTIABLE or key == "log_decay"}
    q, k, v = x["q"], x["k"], x["v"]
    B, T, H, K = q.shape
    qn, kn = (reference.l2norm(q), reference.l2norm(k)) if qk_l2norm else (q, k)
    if gate == "scalar":
        log_alpha = np.broadcast_to(x["g"][..., None], q.shape)
    elif gate == "channel":
        log_alpha = x["g"]
    elif gate == "fixed":
        log_alpha = np.broadcast_to(x["log_decay"][None, None, :, None], q.shape)
    else:
        log_alpha = np.zeros(q.shape)
    alpha = np.exp(log_alpha)
    keys, values, a, b = kn, v, None, None
    if update == "delta":
        beta = x["beta"][..., None] * (2.0 if allow_neg_eigval else 1.0)
        keys, a, b = beta * kn, alpha * kn, beta * kn
    if update == "erase_write":
        values, a, b = x["write"] * v, alpha * kn, x["erase"] * kn
    if update == "dplr":
        a, b = x["a"], x["b"]
    ref = reference.dplr_recurrence_vjp(
        qn, keys, values, do, d_final, log_alpha=log_alpha, a=a, b=b, scale=scale,
        initial_state=x["initial_state"], cu_seqlens=inputs.get("cu_seqlens"),
        log_value_gate=x.get("gv"), reverse=reverse)
    grads = {"v": ref["v"], "initial_state": ref["initial_state"]}
    if "gv" in x:
        grads["gv"] = ref["log_value_gate"]
    d_kn, d_log_alpha = ref["k"], ref["log_alpha"]
    if update == "delta":
        beta = x["beta"][..., None] * (2.0 if allow_neg_eigval else 1.0)
        d_kn = beta * (ref["k"] + ref["b"]) + alpha * ref["a"]
        d_beta = (kn * (ref["k"] + ref["b"])).sum(-1)
        grads["beta"] = d_beta * (2.0 if allow_neg_eigval else 1.0)
        d_log_alpha = d_log_alpha + alpha * kn * ref["a"]
    if update == "erase_write":
        d_kn = ref["k"] + alpha * ref["a"] + x["erase"] * ref["b"]
        grads["erase"] = kn * ref["b"]
        grads["write"] = v * ref["v"]
        grads["v"] = x["write"] * ref["v"]
        d_log_alpha = d_log_alpha + alpha * kn * ref["a"]
    if update == "dplr":
        grads["a"], grads["b"] = ref["a"], ref["b"]
    if gate == "scalar":
        grads["g"] = d_log_alpha.sum(-1)
    if gate == "channel":
        grads["g"] = d_log_alpha
    grads["q"] = _l2norm_vjp(q, ref["q"]) if qk_l2norm else ref["q"]
    grads["k"] = _l2norm_vjp(k, d_kn) if qk_l2norm else d_kn
    return grads


def run_la_run_text(la_run, text, arrays, flags=(), results=("o", "s")):
    """``run_la_run_file`` on the MLIR ``text``, written with its inputs and
    outputs into a temporary directory that is removed afterwards."""
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.mlir")
        with open(path, "w") as f:
            f.write(text)
        return run_la_run_file(la_run, path, arrays, tmp, flags=flags, results=results)


def run_la_run_file(la_run, path, arrays, directory, flags=(), results=("o", "s")):
    """Runs ``la-run`` on the MLIR file ``path`` (entry ``@attention``) with
    ``arrays`` as its inputs, in order (f32, except that integer arrays such
    as ``cu_seqlens`` go as i32), and extra command-line ``flags``;
    returns its results (one .npy each, named ``results``) as arrays. The
    files go to ``directory``; a failing run fails the calling test with
    la-run's stderr."""
    import os
    import subprocess

    cmd = [la_run, path, "--entry=attention"] + list(flags)
    for i, a in enumerate(arrays):
        p = os.path.join(directory, f"in{i}.npy")
        integer = np.issubdtype(np.asarray(a).dtype, np.integer)
        np.save(p, np.ascontiguousarray(a, dtype=np.int32 if integer else np.float32))
        cmd.append(f"--input={p}")
    outs = [os.path.join(directory, f"{name}.npy") for name in results]
    cmd += [f"--output={p}" for p in outs]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return [np.load(p) for p in outs]
