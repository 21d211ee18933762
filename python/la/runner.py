"""Run one ``la.attention`` on the CPU through the ``la-run`` tool.

``la-run`` (built into ``build/bin``) parses an MLIR file, lowers it with the
``la-lower-to-cpu`` pipeline, JIT-compiles it and calls one function on
``.npy`` inputs. This module writes that MLIR file for one attention layer
(:func:`attention_mlir`), and drives ``la-run`` from NumPy arrays
(:func:`run_attention`).

Inputs use the dict layout of :func:`la.testing.make_inputs`: ``q``, ``k``,
``v`` and, depending on the variant, ``g``, ``log_decay``, ``beta``,
``erase``, ``write``, ``initial_state``, ``cu_seqlens``.

bf16 is not a NumPy dtype. :func:`run_attention` rounds q, k and v to bf16 with
:func:`round_to_bf16` (round to nearest, ties to even) and hands la-run the
rounded values as float32, which la-run converts to bf16 exactly. Callers that
compare against the fp64 reference should feed it the same rounded values:
:func:`prepare_inputs` returns them (and is what :func:`run_attention` uses).
"""

import os
import re
import shutil
import subprocess
import tempfile

import numpy as np

from . import reference
from ._checks import check_cu_seqlens as _check_cu_seqlens
from .variants import VARIANTS, token_operand_shapes, token_operands

__all__ = [
    "DTYPES",
    "LaRunError",
    "attention_mlir",
    "find_la_run",
    "prepare_inputs",
    "round_to_bf16",
    "run_attention",
]

#: element types of q, k, v and o that ``la.attention`` accepts.
DTYPES = ("f32", "f16", "bf16")

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class LaRunError(RuntimeError):
    """``la-run`` exited with a non-zero status; the message holds its stderr."""

    def __init__(self, message, *, returncode=None, stdout="", stderr="", command=None,
                 mlir=None):
        super().__init__(message)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.command = command
        self.mlir = mlir


# --------------------------------------------------------------------------
# bf16 rounding
# --------------------------------------------------------------------------

def round_to_bf16(x):
    """Round to the nearest bf16 value (ties to even); return float32.

    The input is first converted to float32 (so float64 inputs are rounded
    twice, f64 -> f32 -> bf16, which can differ from a direct rounding only on
    exact f32 ties, never for values that are already float32). Infinities
    stay infinite, finite values above bf16's range become infinite, NaNs stay
    (quiet) NaNs.
    """
    upper = bf16_upper_bits(x)
    upper <<= 16
    return upper.view(np.float32)


def bf16_upper_bits(x):
    """The bf16 rounding of ``x`` (as :func:`round_to_bf16`) as its 16 bits,
    held in a uint32 array of x's shape. In place on one uint32 array: no
    wider temporaries (the conversion of a large tensor used to cost more
    than the kernel it fed)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    bits = x.view(np.uint32)
    upper = bits >> 16
    upper &= 1
    upper += 0x7FFF
    upper += bits  # below 2^32 for every non-NaN bit pattern (max 0xFF800000 + 0x8000)
    upper >>= 16
    nan = np.isnan(x)
    if nan.any():  # quiet NaNs (a carry could also have wrapped around)
        upper[nan] = (bits[nan] | 0x00400000) >> 16
    return upper


def _check_dtype(dtype):
    aliases = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
    if not isinstance(dtype, str):
        dtype = np.dtype(dtype).name
    dtype = aliases.get(dtype, dtype)
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    return dtype


def _round_qkv(x, dtype):
    if dtype == "f32":
        return np.asarray(x, dtype=np.float32)
    if dtype == "f16":
        return np.asarray(x).astype(np.float16)
    return round_to_bf16(x)


def prepare_inputs(inputs, dtype="f32"):
    """The values la-run will compute with, as NumPy arrays.

    q, k, v are rounded to ``dtype`` (float16 arrays for f16; float32 arrays
    holding bf16 values for bf16); ``g``, ``beta``, ``erase``, ``write``,
    ``a``, ``b``, ``initial_state`` and ``log_decay`` become float32, ``cu_seqlens`` int32
    after checking it (and ``state_indices``, rows of a pool ``initial_state``, int32) (1-D, integer dtype, from 0 non-decreasing to T, B == 1:
    ValueError/TypeError otherwise). Idempotent. Returns a new dict; feed it to the reference so that both see
    the same numbers.
    """
    dtype = _check_dtype(dtype)
    unknown = set(inputs) - {"q", "k", "v", "g", "log_decay", "beta", "erase", "write",
                             "a", "b", "initial_state", "cu_seqlens", "state_indices"}
    if unknown:
        raise ValueError(f"unknown inputs {sorted(unknown)}")
    out = {}
    for key in ("q", "k", "v"):
        if key not in inputs:
            raise ValueError(f"inputs must contain {key!r}")
        out[key] = _round_qkv(inputs[key], dtype)
    for key in ("g", "log_decay", "beta", "erase", "write", "a", "b", "initial_state"):
        if inputs.get(key) is not None:
            out[key] = np.asarray(inputs[key], dtype=np.float32)
    if inputs.get("cu_seqlens") is not None:
        q = out["q"]
        if q.ndim != 4:
            raise ValueError(f"q must be 4-D [B, T, H, K] with cu_seqlens, got shape {q.shape}")
        # Checked like la.gla & co. do (first 0, non-decreasing, last T, in
        # [0, T], integer dtype); the values then fit int32 exactly.
        out["cu_seqlens"] = _check_cu_seqlens(inputs["cu_seqlens"], q.shape[1],
                                              q.shape[0]).astype(np.int32)
    if inputs.get("state_indices") is not None:
        # Rows of the pool initial_state (the kernels trust them: la.ops
        # checks them for its callers; here a test passes what it means).
        index = np.asarray(inputs["state_indices"])
        if index.ndim != 1 or not np.issubdtype(index.dtype, np.integer):
            raise ValueError(f"state_indices must be 1-D integers, got {index.dtype} "
                             f"of shape {index.shape}")
        out["state_indices"] = index.astype(np.int32)
    return out


# --------------------------------------------------------------------------
# MLIR text
# --------------------------------------------------------------------------

def _float_literal(x):
    """An MLIR float literal for x that parses to exactly float(x)."""
    x = float(x)
    if not np.isfinite(x):
        raise ValueError(f"attribute values must be finite, got {x}")
    return "%.17e" % x  # always has a '.', 17 digits round-trip a double


def _tensor(shape, elt):
    """A tensor type; None in ``shape`` is a dynamic size (``?``)."""
    return "tensor<" + "x".join("?" if d is None else str(int(d)) for d in shape) + \
        "x" + elt + ">"


def attention_mlir(
    variant,
    B,
    T,
    H,
    K,
    V,
    HV=None,
    *,
    dtype="f32",
    has_initial_state=False,
    output_final_state=True,
    cu_seqlens_len=None,
    qk_l2norm=False,
    normalizer=False,
    scale=None,
    eps=None,
    log_decay=None,
    allow_neg_eigval=False,
    value_head_operands=(),
    erase_read_key=False,
    dynamic=False,
    HQ=None,
    value_gate=False,
    reverse=False,
    gate_activation=None,
    gate_lower_bound=None,
    has_A_log=False,
    has_dt_bias=False,
    beta_sigmoid=False,
    state_in_place=False,
    state_pool=None,
    checkpoint_every=None,
    checkpoint_rows=None,
    name="attention",
):
    """MLIR text of one function ``@name`` holding one ``la.attention``.

    The arguments are exactly the present inputs, in the order
    ``q, k, v, [g], [gv], [beta], [erase], [write], [a], [b], [initial_state],
    [cu_seqlens], [state_indices]``;
    the results are ``o`` and, when ``output_final_state``, the f32 final
    state. q, k, v and o have element type ``dtype`` (``'f32'``, ``'f16'`` or
    ``'bf16'``); g, beta, erase (``[B, T, H, K]``), write
    (``[B, T, HV, V]``, the erase_write variants) and a, b (``[B, T, H, K]``,
    the dplr variants) are always f32.
    ``cu_seqlens_len`` is the length N+1 of the ``cu_seqlens`` operand
    (requires B == 1); the state is ``[N, HV, K, V]`` with N = B without it.
    ``value_head_operands`` names those of g, beta and erase given per value
    head (``HV`` in place of ``H``). ``erase_read_key`` (erase_write
    variants) puts the erase gate on the key the state is read with.
    ``reverse`` runs every sequence from its last token to its first (the
    op's ``reverse``; fla's ``reverse=True``). ``state_in_place`` marks the
    initial state ``la.in_place`` (it needs ``has_initial_state`` and
    ``output_final_state``): the compiled kernel writes the final state over
    it and returns ``o`` only.
    ``state_pool`` (P, an integer, with ``has_initial_state``) makes the
    initial state a pool ``[P, HV, K, V]`` indexed by a last argument
    ``state_indices : [N]`` (i32): sequence n starts from pool row
    ``state_indices[n]``, and the final state is the pool with those rows
    updated (P is dynamic with ``dynamic``).
    ``checkpoint_every`` (n, an integer >= 1; not with ``reverse``,
    ``normalizer``, a pool or ``HQ``) adds a last result, the f32 state
    after every n tokens of each sequence ``[B, T // n, HV, K, V]`` (the
    op's ``checkpoints``; prefix caching); with ``cu_seqlens`` it is
    ``[1, C, HV, K, V]``, each sequence's ``len_i // n`` after the last
    one's, and ``checkpoint_rows`` gives C (dynamic with ``dynamic``).
    ``value_gate`` (additive variants) adds the value-side log-gate ``gv``
    (``[B, T, HV, V]``, f32; fla's ``gv``) after ``g``.
    ``HQ`` (a multiple of ``H``, with ``HV == H``) gives q more heads than
    k: ONNX's grouped query heads, each group of ``HQ / H`` query heads
    reading one key and value head's state; o then has ``HQ`` heads.
    ``dynamic`` leaves the batch, the time axis, the number of states and
    the length of ``cu_seqlens`` dynamic (``?``), so that one function
    serves any of them (B, T and ``cu_seqlens_len`` are then only checked;
    B stays 1 with ``cu_seqlens``).
    ``gate_activation`` (gated variants) makes ``g`` the gate's
    pre-activation, activated in the function by an element-wise
    ``linalg.generic`` before the op (fla's in-kernel gate, fused into the
    kernel as a producer and differentiated by la-derive-backward):
    ``'softplus'``: ``g = -exp(A_log) * softplus(g + dt_bias)``;
    ``'sigmoid'``: ``g = gate_lower_bound * sigmoid(exp(A_log) * (g +
    dt_bias))`` (KDA's ``lower_bound`` form). ``has_A_log`` and
    ``has_dt_bias`` add those operands (f32; ``A_log [G]``, ``dt_bias [G]``
    for a scalar gate and ``[G, K]`` for a channel gate, G the gate's heads)
    after the token operands, before the state; without ``A_log`` its factor
    is 1.
    ``beta_sigmoid`` (delta rule) makes ``beta`` a pre-activation too:
    ``sigmoid(beta)`` in the function.
    ``log_decay`` ([H] values) is required by the fixed-gate variants
    (retention, decayed_deltanet, decayed_deltanet2); None there means
    RetNet's schedule rounded to f32. ``scale``/``eps`` None leave the op's
    defaults (``K**-0.5``, 1e-6).
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; expected one of {tuple(VARIANTS)}")
    dtype = _check_dtype(dtype)
    HV = H if HV is None else HV
    HQ = H if HQ is None else HQ
    if HQ != H and (HQ % H or HV != H):
        raise ValueError(f"HQ={HQ} query heads must be a multiple of H={H}, with HV == H "
                         f"(got HV={HV})")
    update, gate = VARIANTS[variant]
    if cu_seqlens_len is not None:
        if isinstance(cu_seqlens_len, (bool, np.bool_)) or \
                not isinstance(cu_seqlens_len, (int, np.integer)):
            raise TypeError(f"cu_seqlens_len must be an integer (the number N+1 of offsets), "
                            f"got {cu_seqlens_len!r}")
        if B != 1:
            raise ValueError(f"cu_seqlens requires B == 1, got B={B}")
        if cu_seqlens_len < 2:
            raise ValueError(f"cu_seqlens_len must be >= 2, got {cu_seqlens_len}")
        N = cu_seqlens_len - 1
    else:
        N = B
    if normalizer and update != "additive":
        raise ValueError(f"normalizer is only supported by additive variants, not {variant!r}")
    if value_gate and (update != "additive" or normalizer):
        raise ValueError(f"the value-side gate gv needs an additive variant without the "
                         f"normalizer, not {variant!r}" + (" with it" if normalizer else ""))

    if dynamic:
        # With cu_seqlens the batch is 1 by contract; it stays static.
        T = N = None
        B = 1 if cu_seqlens_len is not None else None
    if state_pool is not None and not has_initial_state:
        raise ValueError("state_pool needs has_initial_state (the pool)")
    s_t = _tensor((N if state_pool is None or dynamic else state_pool, HV, K, V), "f32")
    # q, k, v in `dtype`; the gates, beta, erase and write always f32.
    args, groups = [], []
    for operand, shape in token_operand_shapes(variant, B, T, H, K, V, HV,
                                               tuple(value_head_operands)):
        t = _tensor(shape, dtype if operand in ("q", "k", "v") else "f32")
        args.append((operand, t))
        if operand not in ("q", "k", "v"):
            groups.append(f"{operand}(%{operand} : {t})")
        if value_gate and operand == ("g" if gate in ("scalar", "channel") else "v"):
            gv_t = _tensor((B, T, HV, V), "f32")
            args.append(("gv", gv_t))
            groups.append(f"gv(%gv : {gv_t})")
    activation = _activation_mlir(variant, gate, update, args, groups, K, gate_activation,
                                  gate_lower_bound, has_A_log, has_dt_bias, beta_sigmoid,
                                  value_head_operands, H, HV)
    if HQ != H:
        args[0] = ("q", _tensor((B, T, HQ, K), dtype))
    q_t, k_t, v_t = args[0][1], args[1][1], args[2][1]
    o_t = v_t if HQ == H else _tensor((B, T, HQ, V), dtype)
    if state_in_place and not (has_initial_state and output_final_state):
        raise ValueError("state_in_place needs has_initial_state and output_final_state")
    if has_initial_state:
        args.append(("s0", s_t + (" {la.in_place}" if state_in_place else "")))
        groups.append(f"initial_state(%s0 : {s_t})")
    if cu_seqlens_len is not None:
        cu_t = _tensor((None if dynamic else cu_seqlens_len,), "i32")
        args.append(("cu", cu_t))
        groups.append(f"cu_seqlens(%cu : {cu_t})")
    if state_pool is not None:
        idx_t = _tensor((N,), "i32")
        args.append(("state_indices", idx_t))
        groups.append(f"state_indices(%state_indices : {idx_t})")

    attrs = []
    if gate == "fixed":
        if log_decay is None:
            log_decay = reference.retnet_log_decay(H).astype(np.float32)
        ld = np.asarray(log_decay, dtype=np.float32).reshape(-1)
        if ld.shape != (H,):
            raise ValueError(f"log_decay must have shape ({H},), got {ld.shape}")
        attrs.append("log_decay = array<f32: " + ", ".join(_float_literal(x) for x in ld) + ">")
    elif log_decay is not None:
        raise ValueError(f"log_decay is only used by fixed-gate variants, not {variant!r}")
    if qk_l2norm:
        attrs.append("qk_l2norm")
    if scale is not None:
        attrs.append(f"scale = {_float_literal(np.float32(scale))} : f32")
    if normalizer:
        attrs.append("normalizer")
    if allow_neg_eigval:
        if update != "delta":
            raise ValueError(f"allow_neg_eigval needs the delta rule, not {variant!r}")
        attrs.append("allow_neg_eigval")
    if eps is not None:
        attrs.append(f"eps = {_float_literal(np.float32(eps))} : f32")
    if erase_read_key:
        if update != "erase_write":
            raise ValueError(f"erase_read_key needs the erase_write rule, not {variant!r}")
        attrs.append("erase_read_key")
    if reverse:
        attrs.append("reverse")

    results = [("o", o_t)] + ([("s", s_t)] if output_final_state else [])
    if checkpoint_every is not None:
        if isinstance(checkpoint_every, (bool, np.bool_)) or \
                not isinstance(checkpoint_every, (int, np.integer)) or checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be an integer >= 1, got "
                             f"{checkpoint_every!r}")
        attrs.append(f"checkpoint_every = {int(checkpoint_every)}")
        if cu_seqlens_len is not None:
            if checkpoint_rows is None and not dynamic:
                raise ValueError("checkpoint_every with cu_seqlens needs checkpoint_rows "
                                 "(C, the number of checkpoints) unless dynamic")
            shape = (1, None if dynamic else int(checkpoint_rows), HV, K, V)
        else:
            shape = (B, None if T is None else T // int(checkpoint_every), HV, K, V)
        results.append(("checkpoints", _tensor(shape, "f32")))
    result_types = ", ".join(t for _, t in results)
    result_names = ", ".join("%" + n for n, _ in results)
    signature = ",\n    ".join(f"%{n}: {t}" for n, t in args)
    op_results = f"({result_types})" if len(results) > 1 else result_types
    op = f"la.attention {variant} %q, %k, %v"
    if groups:
        op += "\n      " + " ".join(groups)
    if attrs:
        op += " {" + ", ".join(attrs) + "}"
    op += f"\n      : {q_t}, {k_t}, {v_t} -> {result_types}"
    return (
        f"func.func @{name}(\n    {signature})\n    -> {op_results} {{\n"
        f"{activation}"
        f"  {result_names} = {op}\n"
        f"  return {result_names} : {result_types}\n"
        "}\n"
    )


def _dims_of(value, t):
    """tensor.dim ops for the dynamic sizes of ``value`` (type text ``t``);
    returns (their MLIR, the operand list of a tensor.empty)."""
    sizes = t[len("tensor<"):-1].split("x")[:-1]
    lines, operands = [], []
    for index, size in enumerate(sizes):
        if size == "?":
            lines.append(f"  %{value}_c{index} = arith.constant {index} : index\n"
                         f"  %{value}_d{index} = tensor.dim %{value}, %{value}_c{index} : {t}\n")
            operands.append(f"%{value}_d{index}")
    return "".join(lines), ", ".join(operands)


def _activation_mlir(variant, gate, update, args, groups, K, gate_activation,
                     gate_lower_bound, has_A_log, has_dt_bias, beta_sigmoid,
                     value_head_operands, H, HV):
    """The element-wise producers of ``attention_mlir``'s activations: adds
    their operands to ``args``, points the op's ``g``/``beta`` groups at
    their results and returns their MLIR."""
    if gate_activation not in (None, "softplus", "sigmoid"):
        raise ValueError(f"gate_activation must be None, 'softplus' or 'sigmoid', got "
                         f"{gate_activation!r}")
    if gate_activation is None:
        if has_A_log or has_dt_bias or gate_lower_bound is not None:
            raise ValueError("A_log, dt_bias and gate_lower_bound need a gate_activation")
    elif gate not in ("scalar", "channel"):
        raise ValueError(f"gate_activation needs a data-dependent gate g, not {variant!r}")
    if gate_activation == "sigmoid" and gate_lower_bound is None:
        raise ValueError("gate_activation='sigmoid' needs gate_lower_bound")
    if gate_activation == "softplus" and gate_lower_bound is not None:
        raise ValueError("gate_lower_bound is used by gate_activation='sigmoid' only")
    if beta_sigmoid and update != "delta":
        raise ValueError(f"beta_sigmoid needs the delta rule, not {variant!r}")
    types = dict(args)
    text = ""
    if gate_activation is not None:
        g_t = types["g"]
        G = HV if "g" in value_head_operands else H
        head_shape = (G,) if gate == "scalar" else (G, K)
        extra = []
        if has_A_log:
            extra.append(("A_log", _tensor((G,), "f32")))
        if has_dt_bias:
            extra.append(("dt_bias", _tensor(head_shape, "f32")))
        # After the token operands (before the state and cu_seqlens).
        position = len(args)
        args[position:position] = extra
        rank = 3 if gate == "scalar" else 4
        dims = ", ".join(f"d{i}" for i in range(rank))
        identity = f"affine_map<({dims}) -> ({dims})>"
        head = f"affine_map<({dims}) -> (d2)>"
        head_channel = f"affine_map<({dims}) -> (d2, d3)>" if rank == 4 else head
        ins, maps, block = ["%g"], [identity], ["%x: f32"]
        if has_A_log:
            ins.append("%A_log")
            maps.append(head)
            block.append("%l: f32")
        if has_dt_bias:
            ins.append("%dt_bias")
            maps.append(head_channel)
            block.append("%bias: f32")
        in_types = [g_t] + [t for _, t in extra]
        body = ["%zero = arith.constant 0.0 : f32", "%one = arith.constant 1.0 : f32"]
        x = "%x"
        if has_dt_bias:
            body.append("%s = arith.addf %x, %bias : f32")
            x = "%s"
        if gate_activation == "softplus":
            # softplus(x) = max(x, 0) + log1p(exp(-|x|)): no overflow, and no
            # 0 * inf in its gradient.
            body += [f"%abs = math.absf {x} : f32", "%nabs = arith.negf %abs : f32",
                     "%e = math.exp %nabs : f32", "%l1p = math.log1p %e : f32",
                     f"%pos = arith.maximumf {x}, %zero : f32",
                     "%sp = arith.addf %pos, %l1p : f32"]
            if has_A_log:
                body += ["%el = math.exp %l : f32", "%m = arith.mulf %el, %sp : f32",
                         "%y = arith.negf %m : f32"]
            else:
                body.append("%y = arith.negf %sp : f32")
        else:
            z = x
            if has_A_log:
                body += ["%el = math.exp %l : f32", f"%z = arith.mulf %el, {x} : f32"]
                z = "%z"
            body += _sigmoid_lines(z, "%sig")
            body += [f"%lb = arith.constant {_float_literal(np.float32(gate_lower_bound))} : f32",
                     "%y = arith.mulf %lb, %sig : f32"]
        dim_text, dim_operands = _dims_of("g", g_t)
        text += dim_text
        text += _generic_text("gate", ins, in_types, maps, identity, g_t, dim_operands, rank,
                              block, body)
        groups[:] = [grp.replace("g(%g :", "g(%gate :") for grp in groups]
    if beta_sigmoid:
        beta_t = types["beta"]
        identity = "affine_map<(d0, d1, d2) -> (d0, d1, d2)>"
        dim_text, dim_operands = _dims_of("beta", beta_t)
        text += dim_text
        body = ["%one = arith.constant 1.0 : f32", "%zero = arith.constant 0.0 : f32"]
        body += _sigmoid_lines("%x", "%y")
        text += _generic_text("beta_act", ["%beta"], [beta_t], [identity], identity, beta_t,
                              dim_operands, 3, ["%x: f32"], body)
        groups[:] = [grp.replace("beta(%beta :", "beta(%beta_act :") for grp in groups]
    return text


def _sigmoid_lines(x, result):
    """sigmoid(x) from exp(-|x|) <= 1: no overflow in it or its gradient."""
    return [f"%sabs = math.absf {x} : f32", "%snabs = arith.negf %sabs : f32",
            "%se = math.exp %snabs : f32", "%sd = arith.addf %one, %se : f32",
            "%spos = arith.divf %one, %sd : f32", "%sneg = arith.divf %se, %sd : f32",
            f"%sc = arith.cmpf oge, {x}, %zero : f32",
            f"{result} = arith.select %sc, %spos, %sneg : f32"]


def _generic_text(result, ins, in_types, maps, out_map, out_t, dim_operands, rank, block,
                  body):
    iterators = ", ".join(['"parallel"'] * rank)
    indent = "\n    "
    return (
        f"  %{result}_init = tensor.empty({dim_operands}) : {out_t}\n"
        f"  %{result} = linalg.generic {{indexing_maps = [{', '.join(maps + [out_map])}], "
        f"iterator_types = [{iterators}]}}\n"
        f"      ins({', '.join(ins)} : {', '.join(in_types)}) outs(%{result}_init : {out_t}) {{\n"
        f"  ^bb0({', '.join(block)}, %out: f32):\n"
        f"    {indent.join(body)}\n"
        f"    linalg.yield %y : f32\n"
        f"  }} -> {out_t}\n"
    )


# --------------------------------------------------------------------------
# running la-run
# --------------------------------------------------------------------------

def find_la_run():
    """Path of the ``la-run`` executable, or None when it is not built.

    Looks at ``$LA_RUN``, then ``$LA_BUILD_DIR/bin/la-run``, then
    ``<repo>/build/bin/la-run``. ``$LA_RUN`` is returned even when it does not
    name an executable file, so that a wrong setting fails loudly.
    """
    return find_tool("la-run", "LA_RUN")


def find_tool(name, env_var):
    """Path of the la tool ``name``: ``$env_var`` (returned even when it does
    not name an executable file, so that a wrong setting fails loudly), then
    ``$LA_BUILD_DIR/bin/name``, then ``<repo>/build/bin/name``; or None."""
    env = os.environ.get(env_var)
    if env:
        return env
    candidates = []
    if os.environ.get("LA_BUILD_DIR"):
        candidates.append(os.path.join(os.environ["LA_BUILD_DIR"], "bin", name))
    candidates.append(os.path.join(_REPO_ROOT, "build", "bin", name))
    for path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


_COMPILE_RE = re.compile(r"^compile:\s*([0-9.eE+-]+)\s*ms", re.M)
_RUN_RE = re.compile(
    r"^run:\s*median\s*([0-9.eE+-]+)\s*ms,\s*min\s*([0-9.eE+-]+)\s*ms\s*over\s*(\d+)\s*runs",
    re.M,
)


def _parse_timing(stdout):
    timing = {}
    m = _COMPILE_RE.search(stdout)
    if m:
        timing["compile_ms"] = float(m.group(1))
    m = _RUN_RE.search(stdout)
    if m:
        timing["run_median_ms"] = float(m.group(1))
        timing["run_min_ms"] = float(m.group(2))
        timing["repeat"] = int(m.group(3))
    return timing


def run_attention(
    variant,
    inputs,
    *,
    dtype="f32",
    chunk_size=None,
    sequential=False,
    fuse=None,
    tile=None,
    vector_bits=None,
    value_tile=None,
    gate_block=None,
    gate_spread_limit=None,
    gpu_schedule=False,
    target="cpu",
    tensor_cores=False,
    mma_precision=None,
    state_in_shared_memory=False,
    chunk_parallel=False,
    repeat=1,
    output_final_state=True,
    la_run=None,
    keep_dir=None,
    timeout=600,
    **attrs,
):
    """Compile and run ``la.attention variant`` on ``inputs`` with la-run.

    ``inputs`` is a :func:`la.testing.make_inputs`-style dict; q, k, v are
    rounded to ``dtype`` first (see :func:`prepare_inputs`). ``attrs`` are the
    op's attributes: ``qk_l2norm``, ``normalizer``, ``scale``, ``eps``,
    ``checkpoint_every`` (``log_decay`` comes from ``inputs`` or may be given here).

    ``chunk_size`` is passed as ``--chunk-size``; ``sequential=True`` passes
    ``--sequential`` instead (the token-by-token recurrence). ``fuse``
    ("auto", "fused" or "materialized") is passed as ``--fuse``: the schedule
    of the chunked program (see la-fuse-recurrence); la-run's default is
    "auto". ``tile=(rows, lanes)`` sets la-tile's register tile
    (``--row-tile``, ``--lane-tile``); ``vector_bits`` (128, 256 or 512)
    the vector width it is chosen for (``--vector-bits``; la-run's default:
    this machine's). ``value_tile`` splits V into fused
    tasks of that many columns (``--value-tile``). ``gate_block`` and
    ``gate_spread_limit`` choose how channel-gate score products are built
    (``--gate-block``, ``--gate-spread-limit``; see la-lower-to-cpu).
    ``gpu_schedule=True`` runs
    the GPU's tiled schedule (blocks and threads as loops) on the CPU
    (``--gpu-schedule``). ``target="gpu"`` compiles with la-lower-to-nvvm
    and runs the kernels on the GPU (``--target=gpu``; la-run stops with the
    reason when there is none, see :func:`la.cuda.available`); there
    ``chunk_size`` and ``value_tile`` default to la-lower-to-nvvm's (32, 32)
    unless given. ``target="gpu-emulator"`` compiles the same kernels and runs
    them on the CPU (la-emulate-gpu; no tensor cores), which checks them
    without a GPU. ``tensor_cores=True`` puts f32 contractions on tensor
    cores (tf32 mma.sync) on the GPU, and runs their warp tiling on the CPU
    with ``gpu_schedule`` (``--tensor-cores``); ``mma_precision`` ("tf32",
    "f16" or "bf16") is the instructions' input type (``--mma-precision``).
    ``state_in_shared_memory=True`` keeps the GPU kernels' running state in
    shared memory (``--state-in-shared-memory``). ``chunk_parallel=True``
    takes the chunk-parallel GPU schedule (``--chunk-parallel``: every chunk
    in parallel, only the state scan in order).

    Returns ``(o, final_state, timing)``: ``o`` as la-run wrote it (float32
    for f32 and bf16, float16 for f16), ``final_state`` float32 or None when
    ``output_final_state`` is False, and ``timing`` a dict with
    ``compile_ms``, ``run_median_ms``, ``run_min_ms``, ``repeat``, plus
    ``command`` (the la-run command line) and ``mlir`` (the function text).
    With ``checkpoint_every=n`` (an attribute of the op) it returns
    ``(o, final_state, checkpoints, timing)``, the checkpoints
    ``[B, T // n, HV, K, V]`` float32.
    Raises :class:`LaRunError` with la-run's stderr when it fails.

    ``keep_dir``: write the files there (and keep them) instead of a
    temporary directory; useful to rerun la-run by hand.
    """
    dtype = _check_dtype(dtype)
    chunk_size_given = chunk_size is not None
    if chunk_size is None:
        chunk_size = 64
    unknown = set(attrs) - {"qk_l2norm", "normalizer", "scale", "eps", "log_decay",
                            "allow_neg_eigval", "checkpoint_every"}
    if unknown:
        raise TypeError(f"unknown attributes {sorted(unknown)}")
    prepared = prepare_inputs(inputs, dtype)  # checks the inputs (cu_seqlens) first
    exe = la_run or find_la_run()
    if exe is None:
        raise FileNotFoundError(
            "la-run is not built (expected build/bin/la-run; set LA_RUN to its path)"
        )
    q, v = prepared["q"], prepared["v"]
    if q.ndim != 4 or v.ndim != 4:
        raise ValueError(f"q and v must be 4-D, got shapes {q.shape} and {v.shape}")
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    log_decay = attrs.pop("log_decay", prepared.get("log_decay"))
    cu = prepared.get("cu_seqlens")
    mlir = attention_mlir(
        variant, B, T, H, K, V, HV, dtype=dtype,
        has_initial_state="initial_state" in prepared,
        output_final_state=output_final_state,
        cu_seqlens_len=None if cu is None else cu.size,
        log_decay=log_decay, name="attention",
        checkpoint_rows=(None if cu is None or attrs.get("checkpoint_every") is None else
                         int((np.diff(cu) // int(attrs["checkpoint_every"])).sum())),
        state_pool=(prepared["initial_state"].shape[0] if "state_indices" in prepared
                    else None), **attrs,
    )
    order = token_operands(variant)
    if "initial_state" in prepared:
        order.append("initial_state")
    if cu is not None:
        order.append("cu_seqlens")
    if "state_indices" in prepared:
        order.append("state_indices")
    for key in order:
        if key not in prepared:
            raise ValueError(f"variant {variant!r} needs input {key!r}")
    extra = set(prepared) - set(order) - {"log_decay"}
    if extra:
        raise ValueError(f"variant {variant!r} does not take inputs {sorted(extra)}")

    def run_in(directory):
        mlir_path = os.path.join(directory, "attention.mlir")
        with open(mlir_path, "w") as f:
            f.write(mlir)
        cmd = [exe, mlir_path, "--entry=attention"]
        for key in order:
            path = os.path.join(directory, f"{key}.npy")
            np.save(path, prepared[key])
            cmd.append(f"--input={path}")
        out_names = ["o"] + (["final_state"] if output_final_state else [])
        if attrs.get("checkpoint_every") is not None:
            out_names.append("checkpoints")
        out_paths = [os.path.join(directory, f"out_{n}.npy") for n in out_names]
        cmd += [f"--output={p}" for p in out_paths]
        if target != "cpu":
            cmd.append(f"--target={target}")
        if sequential:
            cmd.append("--sequential")
        elif target == "cpu" or chunk_size_given:
            cmd.append(f"--chunk-size={int(chunk_size)}")
        if fuse is not None:
            cmd.append(f"--fuse={fuse}")
        if tile is not None:
            rows, lanes = tile
            cmd += [f"--row-tile={int(rows)}", f"--lane-tile={int(lanes)}"]
        if vector_bits is not None:
            cmd.append(f"--vector-bits={int(vector_bits)}")
        if value_tile is not None:
            cmd.append(f"--value-tile={int(value_tile)}")
        if gate_block is not None:
            cmd.append(f"--gate-block={int(gate_block)}")
        if gate_spread_limit is not None:
            cmd.append(f"--gate-spread-limit={float(gate_spread_limit)!r}")
        if gpu_schedule:
            cmd.append("--gpu-schedule")
        if tensor_cores:
            cmd.append("--tensor-cores")
        if mma_precision is not None:
            cmd.append(f"--mma-precision={mma_precision}")
        if state_in_shared_memory:
            cmd.append("--state-in-shared-memory")
        if chunk_parallel:
            cmd.append("--chunk-parallel")
        cmd.append(f"--repeat={int(repeat)}")
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise LaRunError(
                f"la-run failed with exit status {proc.returncode}:\n"
                f"  command: {' '.join(cmd)}\n"
                f"  stderr:\n{proc.stderr.rstrip()}\n"
                + (f"  stdout (tail):\n{proc.stdout[-2000:].rstrip()}\n" if proc.stdout else "")
                + f"  MLIR:\n{mlir}",
                returncode=proc.returncode, stdout=proc.stdout, stderr=proc.stderr,
                command=cmd, mlir=mlir,
            )
        timing = _parse_timing(proc.stdout)
        if "run_median_ms" not in timing:
            raise LaRunError(
                f"cannot parse la-run's timing output:\n{proc.stdout}",
                returncode=0, stdout=proc.stdout, stderr=proc.stderr, command=cmd, mlir=mlir,
            )
        timing["command"] = " ".join(cmd)
        timing["mlir"] = mlir
        results = [np.load(p) for p in out_paths]
        state = results[1] if output_final_state else None
        if attrs.get("checkpoint_every") is not None:
            return results[0], state, results[-1], timing
        return results[0], state, timing

    if keep_dir is not None:
        os.makedirs(keep_dir, exist_ok=True)
        return run_in(keep_dir)
    directory = tempfile.mkdtemp(prefix="la-run-")
    try:
        return run_in(directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
