"""Linear-attention layers compiled by la, called from NumPy or PyTorch.

The functions follow flash-linear-attention's conventions:

* ``q, k : [B, T, H, K]``, ``v : [B, T, HV, V]`` with HV a multiple of H
  (grouped value heads: value head ``hv`` reads key head ``hv // (HV // H)``);
* gates ``g`` in natural-log space: ``[B, T, H]`` (scalar, Mamba-2 style) or
  ``[B, T, H, K]`` (channel, GLA/KDA); ``beta : [B, T, H]``; with HV > H,
  ``g``, ``beta`` and ``erase`` may be given per value head instead (HV in
  place of H, as fla's Gated DeltaNet and KDA take them); Gated
  DeltaNet-2's ``erase : [B, T, H, K]`` and ``write : [B, T, HV, V]``;
* ``initial_state`` / final state ``[N, HV, K, V]`` float32, N = B or the
  number of packed sequences given by ``cu_seqlens`` (then B == 1);
* every function returns ``(o, final_state)``, ``o : [B, T, HV, V]`` and
  ``final_state`` None unless ``output_final_state=True``;
* q may have more heads than k (``HQ``, a multiple of H, with HV == H:
  ONNX's grouped query heads, head ``h`` reading the state of key and value
  head ``h // (HQ // H)``); o is then ``[B, T, HQ, V]``.

Each call builds the MLIR of one ``la.attention`` function for the inputs'
heads, sizes and dtype (:func:`la.runner.attention_mlir`; the batch, the
length and the number of sequences are dynamic), lowers it with the
``la-lower-to-cpu`` pipeline through the C API (:mod:`la.ir`), compiles the
LLVM IR with clang into a shared library and calls it with ctypes. So one
kernel serves every B, T and ``cu_seqlens``; calls whose sequences are all
shorter than ``chunk_size`` (decoding) take a kernel with the smallest power
of two chunk size that holds them (at most log2(chunk_size) more kernels).
Kernels are cached in memory (per process) and on disk
(``$LA_CACHE_DIR``, default ``$XDG_CACHE_HOME/la`` or ``~/.cache/la``): a
second call with the same heads, sizes, dtype and options does not
recompile; see :func:`cache_info`. The backward (:func:`attention_backward`,
autograd) is compiled and cached the same way.

dtypes: q, k, v are float32 or float16 (NumPy or torch), or bf16 (torch
``bfloat16`` tensors; NumPy: ``dtype="bf16"`` rounds float inputs to bf16 and
returns ``o`` as float32 holding bf16 values). ``g``, ``beta``, ``erase``,
``write`` and the states are float32 (other float dtypes are converted).

:func:`lower` returns the IR of a call at one stage of the pipeline.
"""

import collections
import contextlib
import ctypes
import errno
import fcntl
import hashlib
import inspect
import itertools
import json
import logging
import math
import os
import platform
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
import warnings

import numpy as np

from . import _capi, ir, runner
from ._capi import LaError
from ._checks import check_cu_seqlens as _check_cu_seqlens
from .variants import DIFFERENTIABLE, VARIANTS

__all__ = [
    "attention",
    "attention_backward",
    "linear_attention",
    "retention",
    "simple_gla",
    "gla",
    "delta_rule",
    "gated_delta_rule",
    "kda",
    "gated_delta_rule2",
    "rwkv7",
    "sliding_window_hybrid",
    "HybridState",
    "HedgehogMap",
    "sliding_window_hybrid_backward",
    "lower",
    "STAGES",
    "cache_info",
    "clear_cache",
    "cache_dir",
    "LaError",
]

#: bump when the generated library's calling convention, the key or the disk
#: cache's layout (library, sidecar, lock) changes.
_FORMAT_VERSION = 3
_ENTRY = "attention"
_CLANG_FLAGS = ("-O3", "-march=native", "-shared", "-fPIC", "-Wno-override-module")
_LLVM_LIB = "/usr/lib/llvm-22/lib"
_LINK_FLAGS = (f"-L{_LLVM_LIB}", "-lmlir_c_runner_utils", f"-Wl,-rpath,{_LLVM_LIB}",
               "-Wl,-Bsymbolic")
#: what a threaded kernel (``parallel=1``: OpenMP regions, lowered to calls
#: of LLVM's OpenMP runtime) links in addition.
_OPENMP_LINK_FLAGS = ("-lomp",)

#: the stages :func:`lower` can return.
STAGES = ("attention", "recurrence", "chunked", "linalg", "tiled", "llvm", "llvm-ir", "all")

#: where each stage of la-lower-to-cpu is taken: the module after (or
#: before) the last run of one pass of the pipeline that compiles the kernel.
_STAGE_CAPTURE = {
    "recurrence": ("after", "la-lower-to-recurrence"),
    "chunked": ("after", "la-chunk"),
    "linalg": ("after", "convert-la-to-linalg"),
    "tiled": ("before", "one-shot-bufferize"),
}

_TARGETS = ("cpu", "cuda")
_GPU_UNAVAILABLE = (
    "the GPU path is not available in these layer functions (GPU kernels are "
    "built with la.gpu, see docs/python.md); use target='cpu' with NumPy arrays "
    "or CPU tensors (tensor.cpu())"
)


# --------------------------------------------------------------------------
# inputs: NumPy / torch, dtypes, shapes
# --------------------------------------------------------------------------

def _torch():
    """The torch module when it is already imported (tensors imply it is)."""
    return sys.modules.get("torch")


def _is_tensor(x):
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


def _compute_dtype(dtype):
    """Normalise the ``dtype`` keyword to 'f32', 'f16' or 'bf16'."""
    if dtype is None:
        return None
    if isinstance(dtype, str):
        name = dtype
    elif _torch() is not None and isinstance(dtype, _torch().dtype):
        name = str(dtype).replace("torch.", "")
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            raise TypeError(f"dtype must be 'f32', 'f16' or 'bf16', got {dtype!r}") from None
    name = {"float32": "f32", "float16": "f16", "half": "f16", "float": "f32",
            "bfloat16": "bf16"}.get(name, name)
    if name not in runner.DTYPES:
        raise TypeError(f"dtype must be 'f32', 'f16' or 'bf16', got {dtype!r}")
    return name


def _device_check(name, x):
    if _is_tensor(x) and x.device.type != "cpu":
        raise LaError(f"{name} is on device {x.device}: {_GPU_UNAVAILABLE}")


def _qkv_array(name, x):
    """(array, kind) for q, k or v: kind is 'f32', 'f16', 'bf16' (array holds
    the bf16 bits as uint16) or None for any other dtype (array as given)."""
    if _is_tensor(x):
        torch = _torch()
        x = x.detach()
        if x.dtype == torch.bfloat16:
            return x.contiguous().view(torch.int16).numpy().view(np.uint16), "bf16"
        if x.dtype in (torch.float32, torch.float16):
            arr = x.contiguous().numpy()
            return arr, ("f32" if x.dtype == torch.float32 else "f16")
        return x.contiguous().numpy(), None
    arr = np.asarray(x)
    if arr.dtype == np.float32:
        return arr, "f32"
    if arr.dtype == np.float16:
        return arr, "f16"
    if arr.dtype.name == "bfloat16" and arr.dtype.itemsize == 2:  # ml_dtypes
        return arr.view(np.uint16), "bf16"
    return arr, None


def _bf16_bits(x):
    """Round float values to bf16 (nearest, ties to even); the bits as uint16."""
    return runner.bf16_upper_bits(x).astype(np.uint16)


def _bf16_to_f32(bits):
    wide = np.asarray(bits, dtype=np.uint16).astype(np.uint32)
    wide <<= 16
    return wide.view(np.float32)


def _to_compute(name, arr, kind, dtype):
    """q, k or v converted to the compute dtype ('f32', 'f16' or 'bf16' bits)."""
    if kind is None and (arr.dtype == object or not (
            np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer))):
        raise TypeError(f"{name} must be a float array, got dtype {arr.dtype}")
    if kind == dtype:
        return arr
    if kind == "bf16":
        arr = _bf16_to_f32(arr)
    if dtype == "f32":
        return arr.astype(np.float32)
    if dtype == "f16":
        return arr.astype(np.float16)
    return _bf16_bits(arr)


def _f32_array(name, x, what):
    """g, beta, initial_state: any real float array or tensor -> float32."""
    if _is_tensor(x):
        x = x.detach().float().contiguous().numpy()
    arr = np.asarray(x)
    if arr.dtype.name == "bfloat16" and arr.dtype.itemsize == 2:
        arr = _bf16_to_f32(arr.view(np.uint16))
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.floating)
                                   or np.issubdtype(arr.dtype, np.integer)):
        raise TypeError(f"{name} must be a float array {what}, got dtype {arr.dtype}")
    return arr.astype(np.float32, copy=False)


def _shape_error(name, expected, got, what=""):
    extra = f" {what}" if what else ""
    return ValueError(f"{name} must have shape {expected}{extra}, got {tuple(got)}")


def _check_log_gates(name, g):
    """Log-space decays must be <= 0 (a decay in [0, 1]); -inf (a hard reset)
    and NaN are allowed. The kernels would treat a positive exponent as 0."""
    with np.errstate(invalid="ignore"):
        positive = g > 0
    if positive.any():
        index = tuple(int(i) for i in np.argwhere(positive)[0])
        raise ValueError(f"{name} holds log-space decays, which must be <= 0 (-inf is a "
                         f"hard reset), but {name}{list(index)} = {float(g[index])!r}")


def _cu_seqlens_array(cu, B, T):
    """cu_seqlens checked (1-D, integer non-bool dtype, B == 1, first offset
    0, every value in [0, T], non-decreasing, last offset T, T within int32;
    see :func:`la._checks.check_cu_seqlens`, which works in int64 so that
    unsigned dtypes cannot wrap) and converted to the kernel's int32."""
    if _is_tensor(cu):
        cu = cu.detach().cpu().numpy()
    return _check_cu_seqlens(cu, T, B).astype(np.int32)


#: the most tokens a sequence can have (cu_seqlens holds int32 offsets).
_MAX_TOKENS = 2**31 - 1


class _Call:
    """One prepared call: the MLIR text, the pipeline, the argument arrays and
    what to allocate for the results."""

    def __init__(self, **fields):
        self.__dict__.update(fields)


def _host_runtime():
    """libla_host_runtime.so (the kernels' caching allocator), or None (also
    with ``LA_HOST_ALLOCATOR=0``: malloc and free)."""
    if os.environ.get("LA_HOST_ALLOCATOR") == "0":
        return None
    return _capi.find_library("libla_host_runtime.so", "LA_HOST_RUNTIME_LIB")


_vector_bits = None


def _host_vector_bits():
    """This machine's vector width in bits (512, 256 or 128): the kernels
    are compiled for it (-march=native), so la-tile's register tile is
    chosen for its registers (la-lower-to-cpu's ``vector-bits``)."""
    global _vector_bits
    if _vector_bits is None:
        _vector_bits = int(_capi.lib().laHostVectorBits())
    return _vector_bits


def _lower_to_cpu(chunk_size, sequential, threads):
    """la-lower-to-cpu with the call's options: on more than one thread its
    thread loops become OpenMP regions (``parallel=1``), the fusion cost
    rule plans for ``threads``, the register tile fits this machine's
    vector registers (``vector-bits``), and buffers come from la's caching
    allocator (``host-allocator=1``) where its library is built."""
    options = "sequential=1" if sequential else f"chunk-size={chunk_size} sequential=0"
    options += f" vector-bits={_host_vector_bits()}"
    if threads > 1:
        options += f" parallel=1 threads={threads}"
    if _host_runtime():
        options += " host-allocator=1"
    return f"la-lower-to-cpu{{{options}}}"


def _pipeline(chunk_size, sequential, threads=1):
    return f"builtin.module({_lower_to_cpu(chunk_size, sequential, threads)})"


def _link_flags(pipeline):
    """clang's link flags for a kernel lowered by ``pipeline``."""
    flags = _LINK_FLAGS
    if "parallel=1" in pipeline:
        flags += _OPENMP_LINK_FLAGS
    runtime = _host_runtime() if "host-allocator=1" in pipeline else None
    if runtime:
        flags += (runtime, f"-Wl,-rpath,{os.path.dirname(runtime)}")
    return flags


def _thread_count(num_threads, torch_inputs):
    """The threads a call runs on: ``num_threads``, or by default
    ``torch.get_num_threads()`` for torch tensors and 1 for NumPy arrays."""
    if num_threads is None:
        return max(1, int(_torch().get_num_threads())) if torch_inputs else 1
    if isinstance(num_threads, bool) or not isinstance(num_threads, (int, np.integer)) \
            or num_threads < 1:
        raise ValueError(f"num_threads must be a positive integer or None, got {num_threads!r}")
    return int(num_threads)


def _check_target(target):
    if not isinstance(target, str) or target not in _TARGETS:
        raise ValueError(f"target must be 'cpu' (or 'cuda', not available yet), got {target!r}")
    if target == "cuda":
        raise LaError(f"target='cuda': {_GPU_UNAVAILABLE}")


def _prepare(variant, q, k, v, g=None, beta=None, *, gv=None, erase=None, write=None, a=None,
             b=None, log_decay=None, scale=None,
             initial_state=None, output_final_state=False, cu_seqlens=None, normalize=False,
             eps=None, qk_l2norm=False, allow_neg_eigval=False, chunk_size=64,
             sequential=False, dtype=None, target="cpu", num_threads=None,
             erase_read_key=False, reverse=False, A_log=None, dt_bias=None,
             gate_activation=None, gate_lower_bound=None, beta_sigmoid=False,
             inplace_final_state=False, state_indices=None, checkpoint_every=None):
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; expected one of {tuple(VARIANTS)}")
    _check_target(target)
    named = {"q": q, "k": k, "v": v, "g": g, "gv": gv, "beta": beta, "erase": erase,
             "write": write, "a": a, "b": b, "A_log": A_log, "dt_bias": dt_bias,
             "initial_state": initial_state, "cu_seqlens": cu_seqlens}
    for name, x in named.items():
        _device_check(name, x)
    update, gate = VARIANTS[variant]
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)) \
            or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")

    # q, k, v: shapes first (clear messages), then dtypes.
    torch_out = _is_tensor(q)
    threads = _thread_count(num_threads, torch_out)
    arrays = {}
    for name in ("q", "k", "v"):
        arrays[name] = _qkv_array(name, named[name])
    qa, ka, va = (arrays[n][0] for n in ("q", "k", "v"))
    if qa.ndim != 4:
        raise ValueError(f"q must be 4-D [B, T, H, K], got shape {tuple(qa.shape)}")
    B, T, HQ, K = qa.shape
    H = HQ
    if ka.ndim == 4 and ka.shape != qa.shape and ka.shape[:2] == (B, T) and \
            ka.shape[3] == K and 0 < ka.shape[2] < HQ and HQ % ka.shape[2] == 0:
        H = ka.shape[2]  # grouped query heads: HQ query heads over H key heads
    elif ka.shape != qa.shape:
        raise _shape_error("k", f"[B, T, H, K] = {(B, T, H, K)} (the shape of q)", ka.shape)
    if va.ndim != 4 or va.shape[:2] != (B, T):
        raise _shape_error("v", f"[B, T, HV, V] with B={B}, T={T}", va.shape)
    HV, V = va.shape[2], va.shape[3]
    if min(B, T, H, K, HV, V) < 1:
        raise ValueError(f"every dimension must be >= 1, got q {tuple(qa.shape)} and "
                         f"v {tuple(va.shape)}")
    if HV % H != 0:
        raise ValueError(f"v has HV={HV} value heads, which is not a multiple of the "
                         f"H={H} key heads of q and k")
    if HQ != H and HV != H:
        raise ValueError(f"q has HQ={HQ} heads over H={H} key heads (grouped query heads), "
                         f"which needs v with HV = H = {H} heads, got HV={HV}")

    kinds = {n: arrays[n][1] for n in ("q", "k", "v")}
    compute = _compute_dtype(dtype)
    if compute is None:
        for name in ("q", "k", "v"):
            if kinds[name] is None:
                raise TypeError(
                    f"{name} has dtype {arrays[name][0].dtype}; la computes with float32, "
                    "float16 or bf16 q, k, v: convert it (x.astype(np.float32), tensor.float()) or "
                    "pass dtype='f32', 'f16' or 'bf16'")
        if len(set(kinds.values())) != 1:
            raise TypeError("q, k and v must have the same dtype, got "
                            + ", ".join(f"{n}: {kinds[n]}" for n in ("q", "k", "v"))
                            + " (or pass dtype= to convert them)")
        compute = kinds["q"]
    qkv = [_to_compute(n, arrays[n][0], kinds[n], compute) for n in ("q", "k", "v")]
    inputs = list(qkv)
    names = ["q", "k", "v"]

    # Gate, beta (per key head, or per value head: HV in place of H).
    value_heads = []

    def heads_of(name, x):
        if HV != H and np.ndim(x) >= 3 and np.shape(x)[2] == HV:
            value_heads.append(name)
            return HV
        return H

    if gate in ("scalar", "channel"):
        if g is None:
            raise ValueError(f"{variant} needs the gate g")
        g = _f32_array("g", g, "[B, T, H]" if gate == "scalar" else "[B, T, H, K]")
        G = heads_of("g", g)
        shape, what = ((B, T, G), "[B, T, H] or [B, T, HV]") if gate == "scalar" else \
            ((B, T, G, K), "[B, T, H, K] or [B, T, HV, K]")
        if g.shape != shape:
            raise _shape_error("g", f"{what} = {shape}",
                               g.shape, f"({gate} gate of {variant})")
        if gate_activation is None:
            _check_log_gates("g", g)
        inputs.append(g)
        names.append("g")
    elif g is not None:
        raise ValueError(f"{variant} takes no gate g")
    # In-kernel activations: g (and beta) are pre-activations, activated by
    # element-wise producers in the kernel's function.
    activation_inputs = []
    grad_shapes = {}  # inputs reshaped for the kernel: their shapes as given
    if gate_activation not in (None, "softplus", "sigmoid"):
        raise ValueError(f"gate_activation must be None, 'softplus' or 'sigmoid', got "
                         f"{gate_activation!r}")
    if gate_activation is None:
        for name, x in (("A_log", A_log), ("dt_bias", dt_bias),
                        ("gate_lower_bound", gate_lower_bound)):
            if x is not None:
                raise ValueError(f"{name} is used by an in-kernel gate activation only "
                                 "(gate_activation='softplus' or 'sigmoid')")
    else:
        if gate not in ("scalar", "channel"):
            raise ValueError(f"gate_activation needs a data-dependent gate g, not {variant!r}")
        if gate_activation == "sigmoid":
            if gate_lower_bound is None or not math.isfinite(float(gate_lower_bound)):
                raise ValueError("gate_activation='sigmoid' needs a finite gate_lower_bound, "
                                 f"got {gate_lower_bound!r}")
        elif gate_lower_bound is not None:
            raise ValueError("gate_lower_bound is used by gate_activation='sigmoid' only")
        G = g.shape[2]
        if A_log is not None:
            A_log = _f32_array("A_log", A_log, "[G]")
            if A_log.shape != (G,):
                raise _shape_error("A_log", f"[G] = ({G},) (the gate's heads)", A_log.shape)
            activation_inputs.append(("A_log", A_log))
        if dt_bias is not None:
            dt_bias = _f32_array("dt_bias", dt_bias, "[G]" if gate == "scalar" else "[G, K]")
            shape = (G,) if gate == "scalar" else (G, K)
            if gate == "channel" and dt_bias.shape == (G * K,):
                dt_bias = dt_bias.reshape(G, K)  # fla's [H * K]
                grad_shapes["dt_bias"] = (G * K,)
            if dt_bias.shape != shape:
                raise _shape_error("dt_bias", f"{shape}" + (" or (G * K,)" if gate == "channel"
                                                            else ""), dt_bias.shape)
            activation_inputs.append(("dt_bias", dt_bias))
    if gv is not None:
        if update != "additive" or normalize:
            raise ValueError(f"the value-side gate gv needs an additive variant (linear, "
                             f"retention, mamba2, gla) without normalize, not {variant!r}"
                             + (" with normalize" if normalize else ""))
        gv = _f32_array("gv", gv, "[B, T, HV, V]")
        if gv.shape != (B, T, HV, V):
            raise _shape_error("gv", f"[B, T, HV, V] = {(B, T, HV, V)} (the shape of v)",
                               gv.shape, "(the value-side gate)")
        _check_log_gates("gv", gv)
        inputs.append(gv)
        names.append("gv")
    if update == "delta":
        if beta is None:
            raise ValueError(f"{variant} needs beta [B, T, H]")
        beta = _f32_array("beta", beta, "[B, T, H]")
        shape = (B, T, heads_of("beta", beta))
        if beta.shape != shape:
            raise _shape_error("beta", f"[B, T, H] or [B, T, HV] = {shape}", beta.shape)
        inputs.append(beta)
        names.append("beta")
    else:
        if beta is not None:
            raise ValueError(f"{variant} takes no beta (only the delta rule does)")
        if beta_sigmoid:
            raise ValueError(f"beta_sigmoid needs the delta rule, not {variant!r}")
        if allow_neg_eigval:
            raise ValueError(f"allow_neg_eigval needs the delta rule, not {variant!r}")
    if update == "erase_write":
        for name, x, shape, what in (("erase", erase, (B, T, H, K), "[B, T, H, K]"),
                                     ("write", write, (B, T, HV, V), "[B, T, HV, V]")):
            if x is None:
                raise ValueError(f"{variant} needs {name} {what}")
            x = _f32_array(name, x, what)
            if name == "erase" and heads_of(name, x) != H:
                shape, what = (B, T, HV, K), "[B, T, HV, K]"
            if x.shape != shape:
                raise _shape_error(name, f"{what} = {shape}", x.shape)
            inputs.append(x)
            names.append(name)
    elif erase is not None or write is not None:
        raise ValueError(f"{variant} takes no erase or write (only the erase_write rule, "
                         "Gated DeltaNet-2, does)")
    if update == "dplr":
        for name, x in (("a", a), ("b", b)):
            if x is None:
                raise ValueError(f"{variant} needs {name} [B, T, H, K] (the low-rank "
                                 "vectors of the transition Diag(alpha) - b a^T)")
            x = _f32_array(name, x, "[B, T, H, K]")
            if x.shape != (B, T, H, K):
                raise _shape_error(name, f"[B, T, H, K] = {(B, T, H, K)}", x.shape)
            inputs.append(x)
            names.append(name)
    elif a is not None or b is not None:
        raise ValueError(f"{variant} takes no a or b (only the dplr rule, RWKV-7, does)")
    for name, x in activation_inputs:
        inputs.append(x)
        names.append(name)
    if normalize and update != "additive":
        raise ValueError(f"normalize is only supported by additive variants, not {variant!r}")
    if gate == "fixed":
        if log_decay is not None:
            log_decay = _f32_array("log_decay", log_decay, "[H]")
            if log_decay.shape != (H,):
                raise _shape_error("log_decay", f"[H] = ({H},)", log_decay.shape)
    elif log_decay is not None:
        raise ValueError(f"log_decay is only used by fixed-decay variants, not {variant!r}")

    # Packed sequences, states.
    cu = None
    N = B
    if cu_seqlens is not None:
        cu = _cu_seqlens_array(cu_seqlens, B, T)
        N = cu.size - 1
    if inplace_final_state:
        # The kernel writes the final state over the caller's buffer: it
        # must be that buffer, as the kernel reads it (no converted copy).
        if not (isinstance(initial_state, np.ndarray) and initial_state.dtype == np.float32
                and initial_state.flags.c_contiguous and initial_state.flags.aligned
                and initial_state.flags.writeable):
            raise ValueError("inplace_final_state needs initial_state as a writable, "
                             "C-contiguous float32 NumPy array [N, HV, K, V], got "
                             + (f"{initial_state.dtype} array (flags {initial_state.flags})"
                                if isinstance(initial_state, np.ndarray)
                                else type(initial_state).__name__))
        for name, given in (("sequential=True", sequential), ("cu_seqlens", cu_seqlens is not None),
                            ("normalize=True", normalize)):
            if given:
                # (their programs write the state elsewhere: the compiler
                # would refuse the kernel, la-in-place-arguments)
                raise ValueError(f"inplace_final_state is not available with {name}")
        output_final_state = True
    pool = None
    if state_indices is not None:
        # A state pool (la.serving): row state_indices[n] holds sequence n's
        # state; the kernel slices the rows (la.recurrence's state_indices)
        # and trusts the indices, so they are checked here.
        if not inplace_final_state:
            raise ValueError("state_indices needs inplace_final_state")
        index = np.asarray(state_indices)
        if index.ndim != 1 or index.shape[0] != N or not np.issubdtype(index.dtype, np.integer):
            raise ValueError(f"state_indices must be {N} integers (one per sequence), got "
                             f"{index.dtype} of shape {index.shape}")
        pool = np.shape(initial_state)[0] if np.ndim(initial_state) == 4 else 0
        if index.size and (index.min() < 0 or index.max() >= pool):
            raise ValueError(f"state_indices must be in [0, {pool}) (the pool's rows), got "
                             f"{index.min()}..{index.max()}")
        if np.unique(index).size != index.size:
            raise ValueError("state_indices must be distinct: two sequences cannot write "
                             "one pool row")
        state_indices = np.ascontiguousarray(index, dtype=np.int32)
    if initial_state is not None:
        initial_state = _f32_array("initial_state", initial_state, "[N, HV, K, V]")
        if pool is not None:
            if initial_state.shape[1:] != (HV, K, V) or pool < 1:
                raise _shape_error("initial_state", f"[P, HV, K, V] = (P, {HV}, {K}, {V})",
                                   initial_state.shape, "(a pool of P >= 1 states)")
        elif initial_state.shape != (N, HV, K, V):
            what = "N = number of sequences in cu_seqlens" if cu is not None else "N = B"
            raise _shape_error("initial_state", f"[N, HV, K, V] = {(N, HV, K, V)}",
                               initial_state.shape, f"({what})")
        inputs.append(initial_state)
        names.append("initial_state")
    if cu is not None:
        inputs.append(cu)
        names.append("cu_seqlens")
    if state_indices is not None:
        inputs.append(state_indices)
        names.append("state_indices")
    if scale is not None:
        if isinstance(scale, bool) or not np.isscalar(scale) or not np.isreal(scale) \
                or not math.isfinite(float(scale)):
            raise ValueError(f"scale must be a finite real number or None, got {scale!r}")

    if checkpoint_every is not None:
        if isinstance(checkpoint_every, (bool, np.bool_)) or \
                not isinstance(checkpoint_every, (int, np.integer)) or \
                not 1 <= checkpoint_every <= _MAX_TOKENS:
            raise ValueError(f"checkpoint_every must be a positive number of tokens, at "
                             f"most {_MAX_TOKENS}, got {checkpoint_every!r}")
        refused = {"state_indices": state_indices is not None,
                   "reverse": bool(reverse), "normalize": bool(normalize),
                   "grouped query heads": HQ != H}
        for what, given in refused.items():
            if given:
                raise ValueError(f"checkpoint_every does not take {what}")
        checkpoint_every = int(checkpoint_every)

    def mlir(dynamic):
        return runner.attention_mlir(
            variant, B, T, H, K, V, HV, dtype=compute,
            has_initial_state=initial_state is not None,
            output_final_state=bool(output_final_state),
            cu_seqlens_len=None if cu is None else cu.size,
            qk_l2norm=bool(qk_l2norm), normalizer=bool(normalize), scale=scale, eps=eps,
            log_decay=log_decay, allow_neg_eigval=bool(allow_neg_eigval),
            value_head_operands=tuple(value_heads), erase_read_key=bool(erase_read_key),
            dynamic=dynamic, HQ=HQ, value_gate=gv is not None, reverse=bool(reverse),
            gate_activation=gate_activation,
            gate_lower_bound=None if gate_lower_bound is None else float(gate_lower_bound),
            has_A_log=A_log is not None, has_dt_bias=dt_bias is not None,
            beta_sigmoid=bool(beta_sigmoid), state_in_place=bool(inplace_final_state),
            state_pool=None if pool is None else pool,
            checkpoint_every=checkpoint_every, name=_ENTRY)

    # The forward kernel takes any batch, length and number of sequences
    # (one compile per variant, heads, sizes, dtype and options). Sequences
    # shorter than a chunk (decoding) take the kernel of the power of two
    # of chunk sizes that holds them, since its chunk is padded to full size.
    chunk_size = int(chunk_size)
    longest = T if cu is None else int(np.diff(cu).max(initial=1))
    if checkpoint_every is not None:  # one recurrence per segment
        longest = min(longest, checkpoint_every)
    kernel_chunk = chunk_size
    if longest < chunk_size <= _MAX_CHUNK_SIZE:  # (a larger one: the pipeline says so)
        kernel_chunk = min(chunk_size, 1 << (max(longest, 1) - 1).bit_length())
    o_np = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}[compute]
    outputs = [((B, T, HQ if HQ != H else HV, V), o_np)]
    if output_final_state and not inplace_final_state:
        outputs.append(((N, HV, K, V), np.float32))
    if checkpoint_every is not None and cu is not None:
        rows = int((np.diff(cu) // checkpoint_every).sum())
        outputs.append(((1, rows, HV, K, V), np.float32))
    elif checkpoint_every is not None:
        outputs.append(((B, T // checkpoint_every, HV, K, V), np.float32))
    return _Call(text=mlir(dynamic=True),
                 pipeline=_pipeline(kernel_chunk, bool(sequential), threads),
                 # The static MLIR of this shape (bench/bench_dynamic.py), built on demand.
                 static_text=lambda: mlir(dynamic=False),
                 inputs=inputs, input_names=names, outputs=outputs, entry=_ENTRY,
                 dims=(B, T, H, K, HV, V, N),
                 dtype=compute, torch_out=torch_out,
                 numpy_bf16=(np.asarray(q).dtype if not torch_out and
                             kinds["q"] == "bf16" else None),
                 chunk_size=chunk_size, sequential=bool(sequential), threads=threads,
                 grad_shapes=grad_shapes,
                 state_in_place=initial_state if inplace_final_state else None,
                 checkpoint_every=checkpoint_every)


# --------------------------------------------------------------------------
# compilation and caches
# --------------------------------------------------------------------------
#
# The disk cache holds, per kernel, ``la-<key>.so`` (the library),
# ``la-<key>.json`` (its sidecar: what the entry is, and the size and sha256
# of the library) and ``la-<key>.lock`` (an flock taken around
# check-compile-store, so that concurrent processes compile an entry once).
# Files are written under a temporary name and renamed into place
# (os.replace), the sidecar first; they are never rewritten in place. A
# library is trusted only when its sidecar matches the call and the bytes
# read from the file have the recorded size and sha256; those verified bytes
# are then written to a private file with a name used once per process,
# dlopened and unlinked at once. So the cache file itself is never mapped
# (truncating or replacing it later cannot fault a process that uses it),
# what runs is what was checked, and dlopen's per-path cache never hands back
# an older library. The library also carries its key (the symbol
# ``la_kernel_key``), checked after loading. Any entry that fails a check (a
# truncated or foreign library, a missing symbol, bad JSON, a directory, a
# FIFO or symlink, an unreadable file) is discarded and compiled again.

#: the largest chunk size la-lower-to-cpu takes (kMaxChunkSize).
_MAX_CHUNK_SIZE = 65536

#: compiles that take longer than this (seconds) are logged as warnings on
#: the ``la`` logger (every compile is logged at INFO).
COMPILE_LOG_SECONDS = 1.0
_log = logging.getLogger("la")

_lock = threading.RLock()
_kernels = {}
_stats = {"hits": 0, "misses": 0, "disk_hits": 0, "compiles": 0, "discarded": 0,
          "compile_seconds": 0.0}

#: the global in every cached library holding its key.
_KEY_SYMBOL = "la_kernel_key"
#: the largest sidecar and library read back from the cache.
_MAX_SIDECAR_BYTES = 1 << 16
_MAX_LIBRARY_BYTES = 1 << 30
#: the names of the cache's entries (what clear_cache(disk=True) removes).
_ENTRY_NAME = re.compile(r"^la-[0-9a-f]{64}\.(so|json|lock)$")
#: temporary files: being written (.tmp-) or about to be loaded (.load-).
_TEMP_PREFIXES = (".tmp-", ".load-")
#: temporary files older than this are leftovers of a dead process.
_STALE_TEMP_SECONDS = 3600
_load_serial = itertools.count()


class _BadEntry(Exception):
    """A disk cache entry that fails a check; the message says which."""


def cache_dir():
    """The disk cache: ``$LA_CACHE_DIR``, else ``$XDG_CACHE_HOME/la``, else
    ``~/.cache/la`` (read at every compile)."""
    if os.environ.get("LA_CACHE_DIR"):
        return os.environ["LA_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "la")


def cache_info():
    """Counters of this process: ``hits`` (kernel found in memory), ``misses``
    (not in memory), ``disk_hits`` (misses loaded from the disk cache),
    ``compiles`` (misses compiled), ``discarded`` (damaged or foreign disk
    entries thrown away and compiled again), ``compile_seconds``, ``entries``
    (kernels in memory) and ``dir`` (the disk cache)."""
    with _lock:
        info = dict(_stats)
        info["entries"] = len(_kernels)
    info["dir"] = cache_dir()
    return info


def _remove(path, tree=False):
    """Removes the file, link or (empty, or with ``tree`` any) directory
    ``path``; True when nothing is left there. Never raises."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        if stat.S_ISDIR(st.st_mode):
            if tree:
                shutil.rmtree(path)
            else:
                os.rmdir(path)
        else:
            os.remove(path)
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return not os.path.lexists(path)


def clear_cache(disk=False):
    """Forgets the kernels held in memory and resets the counters; with
    ``disk=True`` also deletes the disk cache's entries in :func:`cache_dir`
    (``la-<key>.so``, its ``.json`` sidecar and ``.lock`` file) and temporary
    files left by dead processes. Kernels already loaded keep working (each
    process runs a private copy of the library)."""
    with _lock:
        _kernels.clear()
        for key in _stats:
            _stats[key] = 0.0 if key == "compile_seconds" else 0
    if not disk:
        return
    directory = cache_dir()
    try:
        names = os.listdir(directory)
    except OSError:
        return
    now = time.time()
    for name in names:
        path = os.path.join(directory, name)
        if _ENTRY_NAME.match(name):
            _remove(path, tree=True)
        elif name.startswith(_TEMP_PREFIXES):
            # Another process may be writing this one right now.
            try:
                stale = now - os.lstat(path).st_mtime > _STALE_TEMP_SECONDS
            except OSError:
                continue
            if stale:
                _remove(path)


def _find_clang():
    path = shutil.which("clang-22")
    if path:
        return path
    if os.path.isfile("/usr/lib/llvm-22/bin/clang"):
        return "/usr/lib/llvm-22/bin/clang"
    raise LaError("clang-22 not found (neither clang-22 on PATH nor "
                  "/usr/lib/llvm-22/bin/clang): install Debian's clang-22 package "
                  "(scripts/setup.sh does)")


_host = None


def _host_id():
    """The CPU the kernels are compiled for (-march=native), so that a cache
    directory shared between different machines never hands one a kernel
    with instructions it lacks."""
    global _host
    if _host is None:
        lines = []
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith(("model name", "flags")) and line not in lines:
                        lines.append(line.strip())
                    if len(lines) >= 2:
                        break
        except OSError:
            pass
        _host = [platform.machine()] + lines
    return _host


def _disk_key(text, pipeline, clang):
    path = _capi.library_path()
    if path is None:
        _capi.lib()  # raises LaError with the build hint
    st = os.stat(path)
    blob = json.dumps([_FORMAT_VERSION, text, pipeline, st.st_size, st.st_mtime_ns,
                       os.path.realpath(clang), _CLANG_FLAGS, _link_flags(pipeline),
                       _host_id()])
    return hashlib.sha256(blob.encode()).hexdigest()


def _sha256(data):
    return hashlib.sha256(data).hexdigest()


def _log_compile(call, seconds):
    """Logs one compile: a warning past COMPILE_LOG_SECONDS, INFO otherwise."""
    shapes = ", ".join("x".join(str(d) for d in np.shape(a)) for a in call.inputs)
    level = logging.WARNING if seconds > COMPILE_LOG_SECONDS else logging.INFO
    _log.log(level, "la: compiled %s (first inputs %s; %s) in %.2f s", call.entry, shapes,
             call.pipeline, seconds)


def _describe(call, key):
    """What the entry ``key`` must be for ``call``: the sidecar's fields
    (less the library's size and sha256)."""
    return {
        "format": _FORMAT_VERSION,
        "key": key,
        "entry": "_mlir_ciface_" + call.entry,
        "key_symbol": _KEY_SYMBOL,
        "mlir_sha256": _sha256(call.text.encode()),
        "pipeline": call.pipeline,
        # Ranks and dtypes: the forward kernels take any B, T and N.
        "inputs": [[np.ndim(a), np.asarray(a).dtype.str] for a in call.inputs],
        "outputs": [[len(shape), np.dtype(dt).str] for shape, dt in call.outputs],
    }


def _read_regular(path, max_size, size=None):
    """The bytes of the regular file ``path``, read (never mapped); raises
    _BadEntry when it is missing, not a regular file (a directory, FIFO,
    device or symbolic link), larger than ``max_size``, not ``size`` bytes
    long, or unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise _BadEntry(f"{path} is missing") from None
    except OSError as error:
        raise _BadEntry(f"cannot open {path}: {error.strerror or error}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _BadEntry(f"{path} is not a regular file")
        if st.st_size > max_size:
            raise _BadEntry(f"{path} has {st.st_size} bytes, more than {max_size}")
        if size is not None and st.st_size != size:
            raise _BadEntry(f"{path} has {st.st_size} bytes, its sidecar says {size}")
        with os.fdopen(fd, "rb") as f:
            fd = None
            data = f.read(max_size + 1)
    except OSError as error:
        raise _BadEntry(f"cannot read {path}: {error.strerror or error}") from None
    finally:
        if fd is not None:
            os.close(fd)
    if size is not None and len(data) != size:
        raise _BadEntry(f"{path}: read {len(data)} bytes, its sidecar says {size}")
    return data


def _check_entry(so_path, meta_path, expected):
    """The verified bytes of the library ``so_path``: its sidecar
    ``meta_path`` must be valid JSON matching ``expected`` field by field,
    and the library must have the recorded size and sha256. Raises
    _BadEntry otherwise. Nothing here maps the library."""
    raw = _read_regular(meta_path, _MAX_SIDECAR_BYTES)
    try:
        meta = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise _BadEntry(f"{meta_path} is not valid JSON") from None
    if not isinstance(meta, dict):
        raise _BadEntry(f"{meta_path} does not hold a JSON object")
    for name, value in expected.items():
        if meta.get(name) != value:
            raise _BadEntry(f"{meta_path}: {name!r} does not match the call")
    size, digest = meta.get("so_size"), meta.get("so_sha256")
    if isinstance(size, bool) or not isinstance(size, int) or \
            not 0 < size <= _MAX_LIBRARY_BYTES or not isinstance(digest, str):
        raise _BadEntry(f"{meta_path}: no valid so_size and so_sha256")
    data = _read_regular(so_path, _MAX_LIBRARY_BYTES, size)
    if _sha256(data) != digest:
        raise _BadEntry(f"{so_path}: sha256 does not match its sidecar")
    return data


class _Kernel:
    """A loaded kernel library: ``function`` is its C interface, checked to
    carry ``key``; raises _BadEntry when the library lacks either symbol or
    holds another key."""

    def __init__(self, library, key, n_args, path=None, entry=_ENTRY):
        self.path = path
        self.library = library
        try:
            function = getattr(library, "_mlir_ciface_" + entry)
        except AttributeError:
            raise _BadEntry(f"the library has no symbol _mlir_ciface_{entry}") from None
        expected = key.encode()
        try:
            stamp = (ctypes.c_char * (len(expected) + 1)).in_dll(library, _KEY_SYMBOL).value
        except ValueError:
            raise _BadEntry(f"the library has no symbol {_KEY_SYMBOL}") from None
        if stamp != expected:
            raise _BadEntry("the library was compiled for another kernel (its key differs)")
        function.restype = None
        function.argtypes = [ctypes.c_void_p] * n_args
        self.function = function
        # A threaded kernel's OpenMP runtime (dlsym through the library
        # finds its dependencies' symbols).
        self.set_threads = getattr(library, "omp_set_num_threads", None)
        if self.set_threads is not None:
            self.set_threads.restype = None
            self.set_threads.argtypes = [ctypes.c_int]


def _load(data, key, n_args, directories, path=None, entry=_ENTRY):
    """A _Kernel from the library bytes ``data``: written to a private file
    (a name used once per process: dlopen would return an earlier library
    loaded under the same name) in the first of ``directories`` that takes
    it, dlopened, unlinked. Raises _BadEntry when the bytes do not load or
    are not the kernel ``key``; OSError when no directory takes the file."""
    error = OSError("no directory to write the library to")
    for directory in directories:
        private = os.path.join(
            directory, f".load-{os.getpid()}-{next(_load_serial)}-{key[:16]}.so")
        try:
            fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o700)
        except OSError as e:
            error = e
            continue
        try:
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
            except OSError as e:
                error = e
                continue
            try:
                library = ctypes.CDLL(private)
            except OSError as e:
                raise _BadEntry(f"the library does not load: {e}") from None
        finally:
            _remove(private)
        return _Kernel(library, key, n_args, path, entry)
    raise error


def _llvm_ir(text, pipeline):
    module = ir.Module.parse(text)
    module.emit_c_interface(_ENTRY)
    ir.PassManager.parse(pipeline).run(module)
    return module.to_llvm_ir()


def _check_clang(cmd, returncode, stderr):
    if returncode != 0:
        raise LaError(f"clang failed with exit status {returncode}:\n"
                      f"  command: {' '.join(cmd)}\n{stderr.strip()}")


def _run_clang(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    _check_clang(cmd, proc.returncode, proc.stderr)


def _compile_jobs():
    """How many clang processes may compile one kernel's parts at once:
    ``$LA_COMPILE_JOBS``, else the cores this process may run on (at most
    8)."""
    value = os.environ.get("LA_COMPILE_JOBS")
    if value is not None:
        try:
            jobs = int(value)
        except ValueError:
            raise LaError(f"LA_COMPILE_JOBS must be a positive integer, got {value!r}") from None
        if jobs < 1:
            raise LaError(f"LA_COMPILE_JOBS must be a positive integer, got {value!r}")
        return jobs
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, 8))


def _llvm_tool(clang, name):
    """The tool ``name`` of clang's LLVM installation, or None."""
    path = os.path.join(os.path.dirname(os.path.realpath(clang)), name)
    return path if os.access(path, os.X_OK) else None


def _llvm_split(clang):
    """llvm-split of clang's LLVM installation, or None."""
    return _llvm_tool(clang, "llvm-split")


def _llvm_link(clang):
    """llvm-link of clang's LLVM installation, or None."""
    return _llvm_tool(clang, "llvm-link")


def _balance(sizes, bins):
    """The parts' indices in at most ``bins`` groups of nearly equal total
    size: each part, largest first, joins the group with the least so far
    (longest processing time first)."""
    totals = [0] * bins
    groups = [[] for _ in range(bins)]
    for index in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        least = totals.index(min(totals))
        totals[least] += sizes[index]
        groups[least].append(index)
    return [group for group in groups if group]


def _compile_split(clang, llvm_ir, ll_path, so_path, pipeline):
    """Compiles a kernel of several functions as parts in parallel: the
    OpenMP regions of a threaded kernel are functions of their own, and so
    are a one-thread kernel's task loops where it has several
    (la-outline-tasks).

    llvm-split puts each function into a module of its own; on one thread
    only the external ones (``--preserve-locals``: the internal functions of
    each task's chunk, la-outline-chunk-parts, stay with their caller and
    keep their call sites' constants; made external, GLA's forward took
    0.86 s of clang instead of 0.47 s). The modules are grouped by size into
    one group per job (a threaded backward's largest region holds half its
    code, so a round robin over the jobs left one clang with most of it),
    llvm-link joins each group into one module (a clang given several runs
    a compiler process for each), one clang compiles each group, and the
    objects are linked into ``so_path``. Returns False, having done nothing,
    where that cannot help (one job; one task, or one OpenMP region: a
    forward) or llvm-split or llvm-link is missing or fails; clang's
    failures raise."""
    jobs = _compile_jobs()  # a bad $LA_COMPILE_JOBS is an error whatever the kernel
    threaded = "parallel=1" in pipeline
    functions = llvm_ir.count("\ndefine ")
    if threaded:
        # One OpenMP region (a forward) holds all the work: set apart from
        # its caller it only loses their constants (GLA: 0.96 s against 0.92).
        if len(re.findall(r"\ndefine [^\n]*\.\.omp_par[.(]", llvm_ir)) < 2:
            return False
    else:
        functions -= llvm_ir.count("\ndefine internal ")
        # A forward is one task: its C-interface wrapper alone is no part.
        if functions - llvm_ir.count("\ndefine void @_mlir_ciface_") < 2:
            return False
    jobs = min(jobs, functions)
    split = _llvm_split(clang) if jobs > 1 else None
    link = _llvm_link(clang) if split else None
    if link is None:
        return False
    # The parts in a directory of their own.
    work = tempfile.mkdtemp(prefix=os.path.basename(ll_path)[:-3] + ".parts-",
                            dir=os.path.dirname(ll_path))
    try:
        mode = "--round-robin" if threaded else "--preserve-locals"
        proc = subprocess.run([split, "-j", str(functions), mode, "-o",
                               os.path.join(work, "part"), ll_path],
                              capture_output=True, text=True)
        paths = [os.path.join(work, f"part{i}") for i in range(functions)]
        if proc.returncode != 0 or not all(os.path.exists(path) for path in paths):
            return False
        modules = []
        for index, group in enumerate(_balance([os.path.getsize(p) for p in paths], jobs)):
            if len(group) == 1:
                modules.append(paths[group[0]])
                continue
            modules.append(os.path.join(work, f"group{index}.bc"))
            proc = subprocess.run([link, *(paths[i] for i in group), "-o", modules[-1]],
                                  capture_output=True, text=True)
            if proc.returncode != 0 or not os.path.exists(modules[-1]):
                return False
        compile_flags = [f for f in _CLANG_FLAGS if f != "-shared"]
        commands = [[clang, *compile_flags, "-c", "-x", "ir", module, "-o", module + ".o"]
                    for module in modules]
        procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for cmd in commands]
        errors = [proc.communicate()[1] for proc in procs]  # all finished
        for cmd, proc, stderr in zip(commands, procs, errors):
            _check_clang(cmd, proc.returncode, stderr)
        _run_clang([clang, "-shared", "-fPIC", *(module + ".o" for module in modules), "-o",
                    so_path, *_link_flags(pipeline)])
        return True
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _write_error(directory, error):
    return LaError(f"cannot write into the kernel cache {directory!r}: {error}; "
                   "set LA_CACHE_DIR to a writable directory")


def _compile_library(directory, text, pipeline, clang, key):
    """Lowers ``text``, compiles it with clang in temporary files of
    ``directory`` (removed afterwards) and returns the library's bytes. The
    library carries ``key`` in the global ``la_kernel_key``."""
    llvm_ir = _llvm_ir(text, pipeline)
    llvm_ir += (f'\n@{_KEY_SYMBOL} = constant [{len(key) + 1} x i8] c"{key}\\00"\n')
    try:
        fd, ll_path = tempfile.mkstemp(prefix=f".tmp-{os.getpid()}-", suffix=".ll",
                                       dir=directory)
    except OSError as error:
        raise _write_error(directory, error) from None
    so_path = ll_path[:-3] + ".so"
    try:
        try:
            with os.fdopen(fd, "w") as f:
                f.write(llvm_ir)
        except OSError as error:
            raise _write_error(directory, error) from None
        if not _compile_split(clang, llvm_ir, ll_path, so_path, pipeline):
            _run_clang([clang, *_CLANG_FLAGS, ll_path, "-o", so_path, *_link_flags(pipeline)])
        try:
            with open(so_path, "rb") as f:
                return f.read()
        except OSError as error:
            raise _write_error(directory, error) from None
    finally:
        _remove(ll_path)
        _remove(so_path)


def _store(so_path, meta_path, data, meta):
    """Writes the entry: the sidecar, then the library, each to a temporary
    file renamed into place (os.replace: readers see the old file or the new
    one, never a partial one; the library is always checked against the
    sidecar, so a crash between the two renames only costs a compile).
    Returns False, with a RuntimeWarning, when the entry cannot be written
    (typically a non-empty directory in its place; the directory was
    writable a moment ago, as the compile wrote there): the kernel just
    loaded works, uncached."""
    directory = os.path.dirname(so_path)
    payloads = ((meta_path, json.dumps(meta, sort_keys=True).encode()),
                (so_path, data))
    for path, payload in payloads:
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".tmp-{os.getpid()}-", suffix=".part",
                                       dir=directory)
            with os.fdopen(fd, "wb") as f:
                f.write(payload)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except OSError as error:
            if tmp is not None:
                _remove(tmp)
            _remove(meta_path)  # a sidecar without its library is of no use
            in_the_way = error.errno in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST,
                                         errno.ENOTDIR)
            warnings.warn(f"la: cannot store the kernel in the disk cache: "
                          + (f"{path!r} is in the way" if in_the_way else f"{path!r}")
                          + f" ({error.strerror or error}); the kernel works but is compiled "
                          "again in every process until that is fixed",
                          RuntimeWarning, stacklevel=5)
            return False
    return True


@contextlib.contextmanager
def _entry_lock(path):
    """Holds an exclusive flock on ``path`` (created when missing). When the
    lock cannot be had (a read-only cache, a file system without flock)
    this runs unlocked: the atomic writes and the checks keep that correct,
    concurrent processes may then compile the same kernel twice."""
    fd = None
    for flags in (os.O_RDWR | os.O_CREAT, os.O_RDONLY):
        try:
            fd = os.open(path, flags | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
            break
        except OSError:
            continue
    try:
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:
                pass
        yield
    finally:
        if fd is not None:
            os.close(fd)  # releases the lock


def _kernel(call):
    key = (call.text, call.pipeline)
    n_args = len(call.inputs) + len(call.outputs)
    with _lock:
        kernel = _kernels.get(key)
        if kernel is not None:
            _stats["hits"] += 1
            return kernel
        _stats["misses"] += 1
        clang = _find_clang()
        directory = cache_dir()
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as error:
            raise LaError(f"cannot create the kernel cache {directory!r}: {error}; "
                          "set LA_CACHE_DIR to a writable directory") from None
        disk_key = _disk_key(call.text, call.pipeline, clang)
        base = os.path.join(directory, f"la-{disk_key}")
        so_path, meta_path = base + ".so", base + ".json"
        expected = _describe(call, disk_key)
        # Where the verified bytes are loaded from: the cache (a file system
        # that allows executable mappings), else the temporary directory.
        load_dirs = [directory, tempfile.gettempdir()]
        with _entry_lock(base + ".lock"):
            kernel = None
            if os.path.lexists(so_path) or os.path.lexists(meta_path):
                try:
                    data = _check_entry(so_path, meta_path, expected)
                    kernel = _load(data, disk_key, n_args, load_dirs, so_path, call.entry)
                    _stats["disk_hits"] += 1
                except _BadEntry:
                    _stats["discarded"] += 1
                    _remove(so_path)
                    _remove(meta_path)
                except OSError as error:
                    raise LaError(f"cannot write the kernel library to load it (to "
                                  f"{load_dirs}): {error}") from None
            if kernel is None:
                start = time.perf_counter()
                data = _compile_library(directory, call.text, call.pipeline, clang, disk_key)
                try:
                    kernel = _load(data, disk_key, n_args, load_dirs, so_path, call.entry)
                except _BadEntry as error:
                    raise LaError(f"the compiled kernel library is not usable: {error}") \
                        from None
                except OSError as error:
                    raise _write_error(directory, error) from None
                meta = dict(expected, so_size=len(data), so_sha256=_sha256(data))
                _store(so_path, meta_path, data, meta)
                _stats["compiles"] += 1
                seconds = time.perf_counter() - start
                _stats["compile_seconds"] += seconds
                _log_compile(call, seconds)
        _kernels[key] = kernel
        return kernel


# --------------------------------------------------------------------------
# calling a kernel
# --------------------------------------------------------------------------

_descriptor_types = {}


def _descriptor_type(rank):
    """ctypes layout of MLIR's ``StridedMemRefType<T, rank>``."""
    if rank not in _descriptor_types:
        class MemRefDescriptor(ctypes.Structure):
            _fields_ = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p),
                        ("offset", ctypes.c_int64), ("sizes", ctypes.c_int64 * rank),
                        ("strides", ctypes.c_int64 * rank)]
        MemRefDescriptor.__name__ = f"MemRefDescriptor{rank}D"
        _descriptor_types[rank] = MemRefDescriptor
    return _descriptor_types[rank]


def _descriptor(array):
    """A descriptor of a C-contiguous array (strides in elements)."""
    shape = array.shape
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    desc = _descriptor_type(len(shape))()
    desc.allocated = desc.aligned = array.ctypes.data
    desc.offset = 0
    desc.sizes[:] = list(shape)
    desc.strides[:] = strides
    return desc


def _c_array(array):
    if array.flags.c_contiguous and array.flags.aligned:
        return array
    return np.ascontiguousarray(array)


def _run(call):
    """Runs the kernel of ``call``; returns its output arrays."""
    kernel = _kernel(call)
    inputs = [_c_array(a) for a in call.inputs]
    outputs = [np.empty(shape, dtype=dt) for shape, dt in call.outputs]
    descriptors = [_descriptor(a) for a in inputs + outputs]
    if kernel.set_threads is not None:
        # The team size of this thread's next OpenMP regions (ctypes calls
        # release the GIL: the kernel runs on the calling thread's team).
        kernel.set_threads(call.threads)
    kernel.function(*[ctypes.addressof(d) for d in descriptors])
    del descriptors, inputs  # the arrays had to live until here
    return outputs


def _execute(call):
    """Runs ``call``: ``(o, final_state)`` (the state None when not asked
    for), and the checkpoints third when the call has ``checkpoint_every``."""
    outputs = _run(call)
    o = outputs.pop(0)
    checkpoints = outputs.pop() if call.checkpoint_every is not None else None
    state = outputs[0] if outputs else call.state_in_place
    if call.torch_out:
        torch = _torch()
        if call.dtype == "bf16":
            o = torch.from_numpy(o.view(np.int16)).view(torch.bfloat16)
        else:
            o = torch.from_numpy(o)
        if state is not None:
            state = torch.from_numpy(state)
        if checkpoints is not None:
            checkpoints = torch.from_numpy(checkpoints)
    elif call.dtype == "bf16":
        o = o.view(call.numpy_bf16) if call.numpy_bf16 is not None else _bf16_to_f32(o)
    return (o, state) if call.checkpoint_every is None else (o, state, checkpoints)


# --------------------------------------------------------------------------
# the backward: la-derive-backward's gradient function of the same kernel
# --------------------------------------------------------------------------

#: the inputs that have gradients, in the order of the gradient function's
#: results (la.attention_grad's).
_DIFFERENTIABLE = DIFFERENTIABLE


def _backward_pipeline(chunk_size, sequential, threads=1):
    """The forward's module, differentiated by the compiler and lowered: the
    gradient function replaces the forward (keep-forward=0); its
    la.recurrence_grad becomes chunked adjoint recurrences
    (la-expand-recurrence-grad: two, four for the delta rule, five for the
    general low-rank form), and checkpointed token loops with
    ``sequential`` (a checkpoint every ``chunk_size`` tokens)."""
    lower = _lower_to_cpu(chunk_size, sequential, threads)
    return (f"builtin.module(la-derive-backward{{checkpoint={chunk_size} keep-forward=0}}, "
            f"{lower})")


def _backward_call(call, do, d_final_state):
    """The call of the gradient kernel of the forward ``call``: its inputs,
    then the cotangents of its results (``do`` and, when the forward returns
    it, ``d_final_state``; None is zero); one f32 output per differentiable
    input."""
    B, T, H, K, HV, V, N = call.dims
    _device_check("do", do)
    _device_check("d_final_state", d_final_state)
    if do is None:
        raise ValueError("do, the gradient of o [B, T, HV, V], is required")
    do_arr, kind = _qkv_array("do", do)
    o_shape = call.outputs[0][0]
    if do_arr.shape != o_shape:
        raise _shape_error("do", f"[B, T, HV, V] = {o_shape} (the shape of o)",
                           do_arr.shape)
    inputs = list(call.inputs) + [_to_compute("do", do_arr, kind, call.dtype)]
    if len(call.outputs) > 1:
        if d_final_state is None:
            d_final_state = np.zeros((N, HV, K, V), np.float32)
        d_final_state = _f32_array("d_final_state", d_final_state, "[N, HV, K, V]")
        if d_final_state.shape != (N, HV, K, V):
            raise _shape_error("d_final_state", f"[N, HV, K, V] = {(N, HV, K, V)}",
                               d_final_state.shape)
        inputs.append(d_final_state)
    names = [n for n in call.input_names if n in _DIFFERENTIABLE]
    outputs = [(np.shape(a), np.float32)
               for a, n in zip(call.inputs, call.input_names) if n in _DIFFERENTIABLE]
    return _Call(text=call.text,
                 pipeline=_backward_pipeline(call.chunk_size, call.sequential, call.threads),
                 inputs=inputs, outputs=outputs, entry=_ENTRY + "_grad", grad_names=names,
                 torch_out=call.torch_out, threads=call.threads)


def _gradients(call, do, d_final_state):
    backward = _backward_call(call, do, d_final_state)
    grads = dict(zip(backward.grad_names, _run(backward)))
    for name, shape in getattr(call, "grad_shapes", {}).items():
        grads[name] = grads[name].reshape(shape)
    if call.torch_out:
        torch = _torch()
        grads = {name: torch.from_numpy(x) for name, x in grads.items()}
    return grads


def register_torch_ops():
    """Registers la's PyTorch custom operators ``torch.ops.la.attention`` and
    ``torch.ops.la.attention_backward`` (imports torch; once per process).
    ``import la`` does it, or right after ``import torch`` when torch is
    imported later (so nothing is registered inside a trace)."""
    from . import _torch_ops
    _torch_ops.register()


def _torch_attention(options, named, checkpoint_every=None):
    """``attention`` on torch tensors: the custom operator (autograd,
    torch.compile, torch.export, meta tensors)."""
    from . import _torch_ops
    torch = _torch()
    log_decay = options["log_decay"]
    if _is_tensor(log_decay) and log_decay.requires_grad and torch.is_grad_enabled():
        raise LaError("log_decay is compiled into the kernel as constants and has no "
                      "gradient; pass it detached (or use a data-dependent gate g)")
    if log_decay is not None:
        named = dict(named, log_decay=log_decay)
    scale = options["scale"]
    if scale is not None and not isinstance(scale, bool) and np.isscalar(scale) \
            and np.isreal(scale):
        scale = float(scale)
    chunk_size = options["chunk_size"]
    if isinstance(chunk_size, np.integer):
        chunk_size = int(chunk_size)
    operator_options = dict(
        scale=scale, output_final_state=bool(options["output_final_state"]),
        normalize=bool(options["normalize"]),
        eps=None if options["eps"] is None else float(options["eps"]),
        qk_l2norm=bool(options["qk_l2norm"]),
        allow_neg_eigval=bool(options["allow_neg_eigval"]), chunk_size=chunk_size,
        sequential=bool(options["sequential"]), dtype=_compute_dtype(options["dtype"]),
        erase_read_key=bool(options["erase_read_key"]),
        reverse=bool(options["reverse"]),
        gate_activation=options["gate_activation"],
        gate_lower_bound=(None if options["gate_lower_bound"] is None
                          else float(options["gate_lower_bound"])),
        beta_sigmoid=bool(options["beta_sigmoid"]),
        # 0: torch.get_num_threads() when the kernel runs (not when traced).
        num_threads=(0 if options["num_threads"] is None
                     else _thread_count(options["num_threads"], True)))
    _check_target(options["target"])
    if options["cu_seqlens"] is not None:
        named = dict(named, cu_seqlens=options["cu_seqlens"])
    if checkpoint_every is not None:
        if torch.is_grad_enabled() and any(
                _is_tensor(x) and x.requires_grad for x in named.values()):
            raise LaError("la.attention with checkpoint_every has no gradient: run it "
                          "under torch.no_grad(), or use la.serving.prefill_with_checkpoints "
                          "(differentiable, one call per interval)")
        if isinstance(checkpoint_every, (bool, np.bool_)) or \
                not isinstance(checkpoint_every, (int, np.integer)):
            raise ValueError(f"checkpoint_every must be a positive number of tokens, got "
                             f"{checkpoint_every!r}")
        return _torch_ops.call_checkpoints(options["variant"], named, operator_options,
                                           int(checkpoint_every))
    return _torch_ops.call(options["variant"], named, operator_options)


# --------------------------------------------------------------------------
# public functions
# --------------------------------------------------------------------------

def attention(variant, q, k, v, g=None, beta=None, *, gv=None, erase=None, write=None,
              a=None, b=None, log_decay=None, scale=None, initial_state=None, output_final_state=False,
              cu_seqlens=None, normalize=False, eps=None, qk_l2norm=False,
              allow_neg_eigval=False, chunk_size=64, sequential=False, dtype=None,
              target="cpu", num_threads=None, erase_read_key=False, reverse=False,
              A_log=None, dt_bias=None, gate_activation=None, gate_lower_bound=None,
              beta_sigmoid=False, checkpoint_every=None):
    """Any ``la.attention`` variant (``linear``, ``retention``, ``mamba2``,
    ``gla``, ``deltanet``, ``decayed_deltanet``, ``gated_deltanet``, ``kda``,
    Gated DeltaNet-2's ``deltanet2``, ``decayed_deltanet2``,
    ``scalar_gated_deltanet2``, ``gated_deltanet2``, and the dplr rule's
    ``dplr``, ``decayed_dplr``, ``scalar_gated_dplr``, ``rwkv7``).

    The named functions below are thin wrappers; this one also reaches
    ``decayed_deltanet`` (the delta rule with a fixed per-head ``log_decay``),
    the erase_write variants with another gate than the channel gate
    (``erase : [B, T, H, K]`` and ``write : [B, T, HV, V]`` are keywords),
    the dplr variants (``a, b : [B, T, H, K]``, keywords: the transition
    ``Diag(exp(g)) - b a^T``; :func:`rwkv7` names the channel-gated one)
    and every attribute of the op:

    * ``gv`` ``[B, T, HV, V]`` (additive variants without ``normalize``): a
      log-gate on the value side of the state, flash-linear-attention's
      ``gv``: ``S_t = alpha_t S_{t-1} Diag(exp(gv_t)) + k_t v_t^T``;
    * ``log_decay`` ``[H]`` (fixed-decay variants; None: RetNet's schedule);
    * ``scale`` (default ``K ** -0.5``), ``qk_l2norm`` (L2-normalise q and k
      over K first), ``normalize`` and ``eps`` (additive variants: divide by
      ``z_t . q_t + eps``; z starts at 0 in every call), ``allow_neg_eigval``
      (delta rule: beta is doubled, so (0, 1) becomes (0, 2));
    * ``chunk_size`` of the chunkwise-parallel program, or
      ``sequential=True`` for the token-by-token program;
    * ``dtype`` (None: from q, k, v; 'f32', 'f16' or 'bf16' converts them);
    * ``target``: 'cpu' ('cuda' raises LaError: no GPU path yet);
    * ``num_threads``: the threads the kernel runs on (OpenMP; default
      ``torch.get_num_threads()`` for torch tensors, 1 for NumPy arrays);
    * ``erase_read_key`` (erase_write variants): the erase gate multiplies
      the key the state is read with, ``(I - k (e * k)^T)`` (fla's
      ``chunk_gdn2``), instead of the written key, ``(I - (e * k) k^T)``;
    * ``reverse``: every sequence runs from its last token to its first,
      starting from ``initial_state`` (fla's ``reverse=True``), in the kernel
      (la.recurrence's ``reverse``; its gradient too);
    * in-kernel activations (fla's ``use_gate_in_kernel`` and
      ``use_beta_sigmoid_in_kernel``), element-wise producers in the
      kernel's function, fused into it and differentiated by the compiler:
      ``gate_activation='softplus'`` makes ``g`` the pre-activation of
      ``-exp(A_log) * softplus(g + dt_bias)`` and ``'sigmoid'`` of
      ``gate_lower_bound * sigmoid(exp(A_log) * (g + dt_bias))``, with
      ``A_log [G]`` and ``dt_bias`` (``[G]`` for a scalar gate, ``[G, K]`` or
      ``[G * K]`` for a channel gate; G the gate's heads; each optional);
      ``beta_sigmoid`` applies ``sigmoid`` to ``beta``.

    * ``checkpoint_every=n``: the state after every n tokens of each
      sequence too (the op's checkpoints, one kernel; prefix caching):
      ``[B, T // n, HV, K, V]``, or with ``cu_seqlens`` ``[1, C, HV, K, V]``,
      each sequence's ``len_i // n`` after the last one's. Not with
      ``normalize``, ``reverse`` or grouped query heads, and without a
      gradient (:func:`la.serving.prefill_with_checkpoints` is
      differentiable).

    With torch tensors the call is the custom operator
    ``torch.ops.la.attention`` (autograd, ``torch.compile(fullgraph=True)``,
    ``torch.export``, meta tensors; ``torch.ops.la.attention_checkpoints``
    with ``checkpoint_every``, no autograd); see :mod:`la._torch_ops`.

    Returns ``(o, final_state)``, and ``(o, final_state, checkpoints)`` with
    ``checkpoint_every``.
    """
    named = {"q": q, "k": k, "v": v, "g": g, "gv": gv, "beta": beta, "erase": erase,
             "write": write, "a": a, "b": b, "A_log": A_log, "dt_bias": dt_bias,
             "initial_state": initial_state}
    named = {name: x for name, x in named.items() if x is not None}
    options = dict(variant=variant, log_decay=log_decay, scale=scale,
                   output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                   normalize=normalize, eps=eps, qk_l2norm=qk_l2norm,
                   allow_neg_eigval=allow_neg_eigval, chunk_size=chunk_size,
                   sequential=sequential, dtype=dtype, target=target, num_threads=num_threads,
                   erase_read_key=erase_read_key, reverse=reverse,
                   gate_activation=gate_activation, gate_lower_bound=gate_lower_bound,
                   beta_sigmoid=beta_sigmoid)
    if any(_is_tensor(x) for x in named.values()):
        return _torch_attention(options, named, checkpoint_every)
    return _execute(_prepare(**options, **named, checkpoint_every=checkpoint_every))


def attention_backward(variant, q, k, v, g=None, beta=None, *, do, d_final_state=None,
                       gv=None, erase=None, write=None, a=None, b=None, log_decay=None, scale=None,
                       initial_state=None, cu_seqlens=None, normalize=False, eps=None,
                       qk_l2norm=False, allow_neg_eigval=False, chunk_size=64,
                       sequential=False, dtype=None, target="cpu", num_threads=None,
                       erase_read_key=False, reverse=False, A_log=None, dt_bias=None,
                       gate_activation=None, gate_lower_bound=None, beta_sigmoid=False):
    """The gradients of :func:`attention` with the same arguments: of
    ``sum(o * do) + sum(final_state * d_final_state)`` with respect to every
    differentiable input given (``q``, ``k``, ``v``, ``g``, ``gv``, ``beta``,
    ``erase``, ``write``, ``a``, ``b``, ``A_log``, ``dt_bias``,
    ``initial_state``; with an in-kernel activation ``g`` and ``beta`` are
    the pre-activations), for NumPy users (torch tensors
    that require grad get these through autograd from :func:`attention` and
    every layer function).

    The gradient kernel is derived by the compiler from the forward kernel's
    MLIR (``la-derive-backward``: ``la.attention_grad``, lowered to the
    adjoint recurrence run backward in time). Except for the general
    low-rank form (Gated DeltaNet-2, the dplr rule), the adjoint is chunked
    recurrences like the
    forward (three, six with the delta rule); for it, and with
    ``sequential=True``,
    a token-by-token program that stores the state every ``chunk_size``
    tokens and recomputes it in between. ``d_final_state``
    ``[N, HV, K, V]`` is the gradient of the final state (None: zero).
    ``log_decay`` and ``cu_seqlens`` get no gradient.

    Returns a dict from input name to its gradient, float32 of the input's
    shape (torch tensors for torch inputs).
    """
    call = _prepare(variant, q, k, v, g, beta, gv=gv, erase=erase, write=write, a=a, b=b,
                    log_decay=log_decay, scale=scale, initial_state=initial_state,
                    output_final_state=d_final_state is not None, cu_seqlens=cu_seqlens,
                    normalize=normalize, eps=eps, qk_l2norm=qk_l2norm,
                    allow_neg_eigval=allow_neg_eigval, chunk_size=chunk_size,
                    sequential=sequential, dtype=dtype, target=target, num_threads=num_threads,
                    erase_read_key=erase_read_key, reverse=reverse, A_log=A_log,
                    dt_bias=dt_bias, gate_activation=gate_activation,
                    gate_lower_bound=gate_lower_bound, beta_sigmoid=beta_sigmoid)
    return _gradients(call, do, d_final_state)


def linear_attention(q, k, v, *, scale=None, initial_state=None, output_final_state=False,
                     cu_seqlens=None, normalize=False, eps=None, chunk_size=64,
                     sequential=False, dtype=None, target="cpu", num_threads=None):
    """Linear attention ``S_t = S_{t-1} + k_t v_t^T``, ``o_t = S_t^T (scale q_t)``.

    Feature maps (elu + 1, ...) are applied by the caller. ``normalize=True``
    divides by ``z_t . (scale q_t) + eps`` with ``z_t = z_{t-1} + k_t``, ``z_0 = 0``
    in every call (z is not part of the state). Returns ``(o, final_state)``.
    """
    return attention("linear", q, k, v, scale=scale, initial_state=initial_state,
                     output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                     normalize=normalize, eps=eps, chunk_size=chunk_size,
                     sequential=sequential, dtype=dtype, target=target, num_threads=num_threads)


def retention(q, k, v, *, log_decay=None, scale=None, initial_state=None,
              output_final_state=False, cu_seqlens=None, chunk_size=64, sequential=False,
              dtype=None, target="cpu", num_threads=None):
    """RetNet: fixed decay ``exp(log_decay[h])`` per key head.

    ``log_decay`` ``[H]`` (values <= 0) defaults to RetNet's ``log(1 - 2**(-5-h))``;
    the values are compiled into the kernel. Returns ``(o, final_state)``.
    """
    return attention("retention", q, k, v, log_decay=log_decay, scale=scale,
                     initial_state=initial_state, output_final_state=output_final_state,
                     cu_seqlens=cu_seqlens, chunk_size=chunk_size, sequential=sequential,
                     dtype=dtype, target=target, num_threads=num_threads)


def simple_gla(q, k, v, g, *, scale=None, initial_state=None, output_final_state=False,
               cu_seqlens=None, chunk_size=64, sequential=False, dtype=None, target="cpu",
               num_threads=None):
    """Scalar data-dependent decay (Mamba-2 SSD, simple GLA): ``g : [B, T, H]`` log
    gates, ``S_t = exp(g_t) S_{t-1} + k_t v_t^T``. Returns ``(o, final_state)``."""
    return attention("mamba2", q, k, v, g, scale=scale, initial_state=initial_state,
                     output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                     chunk_size=chunk_size, sequential=sequential, dtype=dtype,
                     target=target, num_threads=num_threads)


def gla(q, k, v, g, *, scale=None, initial_state=None, output_final_state=False,
        cu_seqlens=None, chunk_size=64, sequential=False, dtype=None, target="cpu",
        num_threads=None):
    """GLA: channel-wise log gate ``g : [B, T, H, K]`` decaying the K rows of the
    state. Returns ``(o, final_state)``."""
    return attention("gla", q, k, v, g, scale=scale, initial_state=initial_state,
                     output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                     chunk_size=chunk_size, sequential=sequential, dtype=dtype,
                     target=target, num_threads=num_threads)


def delta_rule(q, k, v, beta, *, scale=None, initial_state=None, output_final_state=False,
               cu_seqlens=None, use_qk_l2norm_in_kernel=False, allow_neg_eigval=False,
               chunk_size=64, sequential=False, dtype=None, target="cpu", num_threads=None):
    """DeltaNet: ``S_t = (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T``,
    ``beta : [B, T, H]``. Keys should be L2-normalised (or pass
    ``use_qk_l2norm_in_kernel=True``). Returns ``(o, final_state)``."""
    return attention("deltanet", q, k, v, None, beta, scale=scale,
                     initial_state=initial_state, output_final_state=output_final_state,
                     cu_seqlens=cu_seqlens, qk_l2norm=use_qk_l2norm_in_kernel,
                     allow_neg_eigval=allow_neg_eigval, chunk_size=chunk_size,
                     sequential=sequential, dtype=dtype, target=target, num_threads=num_threads)


def gated_delta_rule(q, k, v, g, beta, *, scale=None, initial_state=None,
                     output_final_state=False, cu_seqlens=None, use_qk_l2norm_in_kernel=False,
                     allow_neg_eigval=False, chunk_size=64, sequential=False, dtype=None,
                     target="cpu", num_threads=None):
    """Gated DeltaNet: scalar log gate ``g : [B, T, H]`` and ``beta : [B, T, H]``,
    ``S_t = (I - beta_t k_t k_t^T) exp(g_t) S_{t-1} + beta_t k_t v_t^T``.
    Returns ``(o, final_state)``."""
    return attention("gated_deltanet", q, k, v, g, beta, scale=scale,
                     initial_state=initial_state, output_final_state=output_final_state,
                     cu_seqlens=cu_seqlens, qk_l2norm=use_qk_l2norm_in_kernel,
                     allow_neg_eigval=allow_neg_eigval, chunk_size=chunk_size,
                     sequential=sequential, dtype=dtype, target=target, num_threads=num_threads)


def kda(q, k, v, g, beta, *, scale=None, initial_state=None, output_final_state=False,
        cu_seqlens=None, use_qk_l2norm_in_kernel=False, allow_neg_eigval=False,
        chunk_size=64, sequential=False, dtype=None, target="cpu", num_threads=None):
    """Kimi Delta Attention: channel log gate ``g : [B, T, H, K]`` and
    ``beta : [B, T, H]``. Returns ``(o, final_state)``."""
    return attention("kda", q, k, v, g, beta, scale=scale, initial_state=initial_state,
                     output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                     qk_l2norm=use_qk_l2norm_in_kernel, allow_neg_eigval=allow_neg_eigval,
                     chunk_size=chunk_size, sequential=sequential, dtype=dtype,
                     target=target, num_threads=num_threads)


def gated_delta_rule2(q, k, v, g, erase, write, *, scale=None, initial_state=None,
                      output_final_state=False, cu_seqlens=None,
                      use_qk_l2norm_in_kernel=False, chunk_size=64, sequential=False,
                      dtype=None, target="cpu", num_threads=None, erase_read_key=False):
    """Gated DeltaNet-2: channel log gate ``g : [B, T, H, K]``, a channel-wise
    erase gate ``erase : [B, T, H, K]`` on the key side and a write gate
    ``write : [B, T, HV, V]`` on the value side in place of beta,
    ``S_t = (I - (e_t * k_t) k_t^T) Diag(exp(g_t)) S_{t-1} + k_t (w_t * v_t)^T``;
    with ``erase_read_key=True`` the erase gate multiplies the key the state
    is read with, ``(I - k_t (e_t * k_t)^T)`` (flash-linear-attention's
    ``chunk_gdn2``; the two agree when ``e_t`` is constant over K).
    With ``erase`` and ``write`` equal to one beta per token this is
    :func:`kda`. Keys should be L2-normalised (or pass
    ``use_qk_l2norm_in_kernel=True``). Returns ``(o, final_state)``."""
    return attention("gated_deltanet2", q, k, v, g, erase=erase, write=write, scale=scale,
                     initial_state=initial_state, output_final_state=output_final_state,
                     cu_seqlens=cu_seqlens, qk_l2norm=use_qk_l2norm_in_kernel,
                     chunk_size=chunk_size, sequential=sequential, dtype=dtype,
                     target=target, num_threads=num_threads, erase_read_key=erase_read_key)


def rwkv7(q, k, v, g, a, b, *, scale=1.0, initial_state=None, output_final_state=False,
          cu_seqlens=None, chunk_size=64, sequential=False, dtype=None, target="cpu",
          num_threads=None):
    """RWKV-7's time mixing (Peng et al., 2025): channel log decay ``g : [B,
    T, H, K]`` and the low-rank vectors ``a, b : [B, T, H, K]`` of the
    transition, ``S_t = (Diag(exp(g_t)) - b_t a_t^T) S_{t-1} + k_t v_t^T``,
    ``o_t = S_t^T (scale q_t)`` (q is RWKV's receptance r). RWKV-7 takes
    ``a = kappa`` (the normalised removal key) and ``b = kappa * iclr``;
    fla's ``chunk_rwkv7(r, w, k, v, a, b)`` writes ``+ b a^T`` and passes
    ``a = -kappa`` (``la.fla.chunk_rwkv7`` takes fla's convention). The
    scale defaults to 1, as fla's RWKV-7. Returns ``(o, final_state)``."""
    return attention("rwkv7", q, k, v, g, a=a, b=b, scale=scale,
                     initial_state=initial_state, output_final_state=output_final_state,
                     cu_seqlens=cu_seqlens, chunk_size=chunk_size, sequential=sequential,
                     dtype=dtype, target=target, num_threads=num_threads)


#: named function -> (variant, {its keyword -> attention's keyword})
_WRAPPERS = {
    linear_attention: ("linear", {}),
    retention: ("retention", {}),
    simple_gla: ("mamba2", {}),
    gla: ("gla", {}),
    delta_rule: ("deltanet", {"use_qk_l2norm_in_kernel": "qk_l2norm"}),
    gated_delta_rule: ("gated_deltanet", {"use_qk_l2norm_in_kernel": "qk_l2norm"}),
    kda: ("kda", {"use_qk_l2norm_in_kernel": "qk_l2norm"}),
    gated_delta_rule2: ("gated_deltanet2", {"use_qk_l2norm_in_kernel": "qk_l2norm"}),
    rwkv7: ("rwkv7", {}),
}


#: the largest window la.sliding_window_hybrid takes (its kMaxWindow).
_MAX_WINDOW = 1 << 20


def _hybrid_mlir(H, K, V, F, window, scale, dtype, packed=False, stateful=False,
                 feature_maps=None):
    """The kernel of la.sliding_window_hybrid, for any B and T (any number
    of packed sequences with ``packed``); ``stateful``: keys with any number
    of context tokens before the queries, an initial and a final state.
    ``feature_maps``: ``(bias_q, bias_k)`` (whether each map has a bias)
    when the kernel computes the features itself from Hedgehog maps
    (:class:`HedgehogMap`, ``F`` features from ``F / 2`` columns of their
    weights) instead of taking them as arguments."""
    element = dtype  # f32, f16 or bf16: the MLIR names
    batch = "1" if packed else "?"  # packed sequences: B = 1

    def tensor(d, e=element):
        return f"tensor<{batch}x?x{H}x{d}x{e}>"
    state = f"tensor<?x{H}x{F}x{V + 1}xf32>"
    attrs = f"window = {window} : i64"
    if scale is not None:
        attrs += f", scale = {float(scale)!r} : f32"
    extra_args = ", %cu: tensor<?xi32>" if packed else ""
    operands = " cu_seqlens(%cu : tensor<?xi32>)" if packed else ""
    results, names = tensor(V), "%o"
    if stateful:
        extra_args += f", %s0: {state}"
        operands += f" initial_state(%s0 : {state})"
        results, names = f"{tensor(V)}, {state}", "%o, %s"
    header, body = "", ""
    if feature_maps is None:
        feature_args = f"%fq: {tensor(F)}, %fk: {tensor(F)}"
    else:
        half = F // 2
        feature_args = []
        for name, has_bias in zip(("q", "k"), feature_maps):
            feature_args.append(f"%w{name}: tensor<{H}x{K}x{half}xf32>")
            if has_bias:
                feature_args.append(f"%b{name}: tensor<{H}x{half}xf32>")
        feature_args = ", ".join(feature_args)
        header = _HEDGEHOG_MAPS
        body = "".join(_hedgehog_mlir(name, H, K, half, element, batch, has_bias)
                       for name, has_bias in zip(("q", "k"), feature_maps))
    return (f"{header}func.func @{_ENTRY}(%q: {tensor(K)}, %k: {tensor(K)}, %v: {tensor(V)},\n"
            f"    {feature_args}{extra_args}) -> ({results}) {{\n{body}"
            f"  {names} = la.sliding_window_hybrid %q, %k, %v\n"
            f"      features(%fq : {tensor(F)}, %fk : {tensor(F)}){operands} {{{attrs}}}\n"
            f"      : {tensor(K)}, {tensor(K)}, {tensor(V)} -> {results}\n"
            f"  return {names} : {results}\n}}\n")


#: The affine maps of :func:`_hedgehog_mlir`'s ops: the contraction x W
#: over (b, t, h, f, d), element-wise maps over (b, t, h, f) and the bias's
#: broadcast over (b, t).
_HEDGEHOG_MAPS = """#hedgehog_x = affine_map<(b, t, h, f, d) -> (b, t, h, d)>
#hedgehog_w = affine_map<(b, t, h, f, d) -> (h, d, f)>
#hedgehog_z = affine_map<(b, t, h, f, d) -> (b, t, h, f)>
#hedgehog_id = affine_map<(b, t, h, f) -> (b, t, h, f)>
#hedgehog_bias = affine_map<(b, t, h, f) -> (h, f)>
"""


def _hedgehog_mlir(name, H, K, half, element, batch, has_bias):
    """Hedgehog's feature map of ``%{name}`` as linalg ops on tensors:
    ``%f{name} = [softmax(z), softmax(-z)]``, ``z = x W (+ c)`` in f32
    (``%w{name}``, ``%b{name}``), converted to the kernel's element type.
    la-lower-to-recurrence decomposes the softmaxes; the contraction and the
    maps are tiled like the kernel's other producers."""
    def t(d, e="f32"):
        return f"tensor<{batch}x?x{H}x{d}x{e}>"
    zt, ft, xt = t(half), t(2 * half, element), t(K, element)
    x = f"%{name}"
    # tensor.empty's dynamic sizes: B and T, or T alone for packed sequences
    dynamic = f"%{name}_b, %{name}_t" if batch == "?" else f"%{name}_t"
    rows = f"%{name}_b" if batch == "?" else batch
    read = ("%a" if element == "f32" else "%ax") + ", %wv"
    extend = "" if element == "f32" else "    %ax = arith.extf %a : " + element + " to f32\n"
    text = f"""  %{name}_b = tensor.dim {x}, %c0_{name} : {xt}
  %{name}_t = tensor.dim {x}, %c1_{name} : {xt}
  %{name}_empty = tensor.empty({dynamic}) : {zt}
  %{name}_zero = linalg.fill ins(%zero_{name} : f32) outs(%{name}_empty : {zt}) -> {zt}
  %{name}_z0 = linalg.generic {{indexing_maps = [#hedgehog_x, #hedgehog_w, #hedgehog_z],
      iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}}
      ins({x}, %w{name} : {xt}, tensor<{H}x{K}x{half}xf32>) outs(%{name}_zero : {zt}) {{
  ^bb0(%a: {element}, %wv: f32, %acc: f32):
{extend}    %m = arith.mulf {read} : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }} -> {zt}
"""
    z = f"%{name}_z0"
    if has_bias:
        text += f"""  %{name}_z = linalg.generic {{indexing_maps = [#hedgehog_id, #hedgehog_bias, #hedgehog_id],
      iterator_types = ["parallel", "parallel", "parallel", "parallel"]}}
      ins({z}, %b{name} : {zt}, tensor<{H}x{half}xf32>) outs(%{name}_empty : {zt}) {{
  ^bb0(%a: f32, %c: f32, %out: f32):
    %s = arith.addf %a, %c : f32
    linalg.yield %s : f32
  }} -> {zt}
"""
        z = f"%{name}_z"
    text += f"""  %{name}_neg = linalg.generic {{indexing_maps = [#hedgehog_id, #hedgehog_id],
      iterator_types = ["parallel", "parallel", "parallel", "parallel"]}}
      ins({z} : {zt}) outs(%{name}_empty : {zt}) {{
  ^bb0(%a: f32, %out: f32):
    %n = arith.negf %a : f32
    linalg.yield %n : f32
  }} -> {zt}
  %{name}_p0 = linalg.softmax dimension(3) ins({z} : {zt}) outs(%{name}_empty : {zt}) -> {zt}
  %{name}_n0 = linalg.softmax dimension(3) ins(%{name}_neg : {zt}) outs(%{name}_empty : {zt}) -> {zt}
"""
    parts = [f"%{name}_p0", f"%{name}_n0"]
    part_type = zt
    if element != "f32":
        part_type = t(half, element)
        text += f"  %{name}_half = tensor.empty({dynamic}) : {part_type}\n"
        for index, part in enumerate(parts):
            text += f"""  %{name}_c{index} = linalg.generic {{indexing_maps = [#hedgehog_id, #hedgehog_id],
      iterator_types = ["parallel", "parallel", "parallel", "parallel"]}}
      ins({part} : {zt}) outs(%{name}_half : {part_type}) {{
  ^bb0(%a: f32, %out: {element}):
    %r = arith.truncf %a : f32 to {element}
    linalg.yield %r : {element}
  }} -> {part_type}
"""
            parts[index] = f"%{name}_c{index}"
    text += f"""  %{name}_features = tensor.empty({dynamic}) : {ft}
  %{name}_f0 = tensor.insert_slice {parts[0]} into %{name}_features[0, 0, 0, 0]
      [{rows}, %{name}_t, {H}, {half}] [1, 1, 1, 1] : {part_type} into {ft}
  %f{name} = tensor.insert_slice {parts[1]} into %{name}_f0[0, 0, 0, {half}]
      [{rows}, %{name}_t, {H}, {half}] [1, 1, 1, 1] : {part_type} into {ft}
"""
    constants = (f"  %c0_{name} = arith.constant 0 : index\n"
                 f"  %c1_{name} = arith.constant 1 : index\n"
                 f"  %zero_{name} = arith.constant 0.0 : f32\n")
    return constants + text


#: What a sliding-window hybrid carries from one call to the next (see
#: :func:`sliding_window_hybrid`): ``state : [B, H, F, V + 1]`` float32, the
#: far part's ``sum_s feature_k[s] [v_s, 1]^T`` over the tokens before the
#: context, and the context, the sequence's last tokens (at most
#: ``window``): ``k : [B, L, H, K]``, ``v : [B, L, H, V]``, ``feature_k :
#: [B, L, H, F]``.
HybridState = collections.namedtuple("HybridState", "state k v feature_k")

#: Hedgehog's learned feature map (Zhang et al., ICLR 2024), which
#: :func:`sliding_window_hybrid` computes inside its kernel when it is passed
#: as ``feature_q`` / ``feature_k``: ``phi(x) = [softmax(x W + c),
#: softmax(-(x W + c))]`` over the features, ``weight : [H, K, F/2]``,
#: ``bias : [H, F/2]`` or None (``F`` features; as
#: :func:`la.family.hedgehog_features`).
HedgehogMap = collections.namedtuple("HedgehogMap", "weight bias", defaults=(None,))


def _given_maps(feature_q, feature_k):
    """Whether the features are HedgehogMaps (both) rather than arrays."""
    is_map = [isinstance(x, HedgehogMap) for x in (feature_q, feature_k)]
    if any(is_map) and not all(is_map):
        raise TypeError("feature_q and feature_k must both be arrays or both be "
                        "HedgehogMap(weight, bias)")
    return all(is_map)


def _hedgehog_maps(feature_q, feature_k, H, K):
    """``None`` when the features are arrays, else the two maps' float32
    ``(weight, bias)`` pairs, checked, and ``F``."""
    if not _given_maps(feature_q, feature_k):
        return None
    maps, half = [], None
    for name, feature_map in (("feature_q", feature_q), ("feature_k", feature_k)):
        _device_check(f"{name}.weight", feature_map.weight)
        weight = _f32_array(f"{name}.weight", feature_map.weight, "[H, K, F/2]")
        if weight.ndim != 3 or weight.shape[:2] != (H, K) or weight.shape[2] < 1:
            raise _shape_error(f"{name}.weight", f"[H, K, F/2] with (H, K) = {(H, K)}",
                               weight.shape)
        if half is not None and weight.shape[2] != half:
            raise ValueError("feature_q.weight and feature_k.weight must have one number of "
                             f"columns (F/2), got {half} and {weight.shape[2]}")
        half = weight.shape[2]
        bias = None
        if feature_map.bias is not None:
            _device_check(f"{name}.bias", feature_map.bias)
            bias = _f32_array(f"{name}.bias", feature_map.bias, "[H, F/2]")
            if bias.shape != (H, half):
                raise _shape_error(f"{name}.bias", f"[H, F/2] = {(H, half)}", bias.shape)
            bias = np.ascontiguousarray(bias)
        maps.append((np.ascontiguousarray(weight), bias))
    return maps, 2 * half


def _hedgehog_features_np(x, weight, bias):
    """The map in NumPy (f32), for the context a stateful call returns."""
    from . import family  # family imports this module
    return family.hedgehog_features(x, weight, bias)


def _hybrid_call(q, k, v, feature_q, feature_k, window, scale, initial_state,
                 output_final_state, cu_seqlens, chunk_size, dtype, num_threads):
    """The checked arguments of :func:`sliding_window_hybrid` as one call of
    its kernel, and what converts its results back (``call.returned``)."""
    named = {"q": q, "k": k, "v": v}
    if not _given_maps(feature_q, feature_k):
        named.update(feature_q=feature_q, feature_k=feature_k)
    for name, x in {**named, "cu_seqlens": cu_seqlens}.items():
        _device_check(name, x)
    if isinstance(window, (bool, np.bool_)) or not isinstance(window, (int, np.integer)) \
            or not 1 <= window <= _MAX_WINDOW:
        raise ValueError(f"window must be an integer in [1, {_MAX_WINDOW}], got {window!r}")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)) \
            or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    if scale is not None and (isinstance(scale, bool) or not np.isscalar(scale)
                              or not np.isreal(scale) or not math.isfinite(float(scale))):
        raise ValueError(f"scale must be a finite real number or None, got {scale!r}")
    stateful = initial_state is not None or bool(output_final_state)
    if stateful and cu_seqlens is not None:
        raise ValueError("sliding_window_hybrid: packed sequences (cu_seqlens) take no "
                         "initial_state and return no final state")
    if initial_state is not None and not (isinstance(initial_state, tuple)
                                          and len(initial_state) == 4):
        raise TypeError("initial_state must be the HybridState (state, k, v, feature_k) "
                        f"of an earlier call, got {type(initial_state).__name__}")
    torch_out = _is_tensor(q)
    threads = _thread_count(num_threads, torch_out)
    arrays = {name: _qkv_array(name, x) for name, x in named.items()}
    qa = arrays["q"][0]
    if qa.ndim != 4:
        raise ValueError(f"q must be 4-D [B, T, H, K], got shape {tuple(qa.shape)}")
    B, T, H, K = qa.shape
    V = np.shape(arrays["v"][0])[-1] if np.ndim(arrays["v"][0]) == 4 else None
    maps = _hedgehog_maps(feature_q, feature_k, H, K)
    if maps is not None:
        maps, F = maps
    else:
        F = np.shape(arrays["feature_q"][0])[-1] if np.ndim(arrays["feature_q"][0]) == 4 \
            else None
    expected = {"k": ((B, T, H, K), "[B, T, H, K] (the shape of q)"),
                "v": ((B, T, H, V), "[B, T, H, V]")}
    if maps is None:
        expected.update(feature_q=((B, T, H, F), "[B, T, H, F]"),
                        feature_k=((B, T, H, F), "[B, T, H, F] (the shape of feature_q)"))
    for name, (shape, what) in expected.items():
        if None in shape or arrays[name][0].shape != shape:
            raise _shape_error(name, what, arrays[name][0].shape)
    if min(B, T, H, K, V, F) < 1:
        raise ValueError(f"every dimension must be >= 1, got q {(B, T, H, K)}, v "
                         f"{(B, T, H, V)} and features {(B, T, H, F)}")
    kinds = {name: arrays[name][1] for name in named}
    compute = _compute_dtype(dtype)
    if compute is None:
        for name in named:
            if kinds[name] is None:
                raise TypeError(f"{name} has dtype {arrays[name][0].dtype}; pass float32, "
                                "float16 or bf16 arrays, or dtype='f32', 'f16' or 'bf16'")
        if len(set(kinds.values())) != 1:
            raise TypeError("q, k, v and the features must have one dtype, got "
                            + ", ".join(f"{n}: {kinds[n]}" for n in named)
                            + " (or pass dtype= to convert them)")
        compute = kinds["q"]
    inputs = [_to_compute(name, arrays[name][0], kinds[name], compute) for name in named]
    names = list(named)
    if maps is not None:
        # The maps' weights (and biases) where the features were.
        for name, (weight, bias) in zip(("q", "k"), maps):
            inputs.append(weight)
            names.append(f"weight_{name}")
            if bias is not None:
                inputs.append(bias)
                names.append(f"bias_{name}")
    if cu_seqlens is not None:
        inputs.append(_cu_seqlens_array(cu_seqlens, B, T))
        names.append("cu_seqlens")
    if stateful:
        state = np.zeros((B, H, F, V + 1), np.float32)
        if initial_state is not None:
            state = _f32_array("initial_state.state", initial_state[0], "[B, H, F, V + 1]")
            if state.shape != (B, H, F, V + 1):
                raise _shape_error("initial_state.state", f"[B, H, F, V + 1] = "
                                   f"{(B, H, F, V + 1)}", state.shape)
            # The context: the keys, values and key features of the
            # sequences' last tokens, before this call's.
            context = {}
            for index, (name, dim) in enumerate((("k", K), ("v", V), ("feature_k", F))):
                if maps is not None and name == "feature_k":
                    continue  # the kernel maps the context's keys itself
                arr, kind = _qkv_array(f"initial_state.{name}", initial_state[1 + index])
                if arr.ndim != 4 or arr.shape[0] != B or arr.shape[2:] != (H, dim):
                    raise _shape_error(f"initial_state.{name}", f"[B, L, H, {dim}] with "
                                       f"B = {B}, H = {H}", arr.shape)
                context[name] = _to_compute(f"initial_state.{name}", arr, kind, compute)
            if len({x.shape[1] for x in context.values()}) != 1:
                raise ValueError("initial_state's k, v and feature_k must hold one number "
                                 "of tokens, got " + ", ".join(
                                     f"{n}: {x.shape[1]}" for n, x in context.items()))
            for position, name in ((1, "k"), (2, "v"), (4, "feature_k")):
                if name not in context:
                    continue
                inputs[position] = np.ascontiguousarray(
                    np.concatenate([context[name], inputs[position]], 1))
        inputs.append(np.ascontiguousarray(state))
        names.append("initial_state")
    o_np = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}[compute]
    outputs = [((B, T, H, V), o_np)]
    if stateful:
        outputs.append(((B, H, F, V + 1), np.float32))
    feature_maps = None if maps is None else tuple(bias is not None for _, bias in maps)
    call = _Call(text=_hybrid_mlir(H, K, V, F, int(window), scale, compute,
                                   packed=cu_seqlens is not None, stateful=stateful,
                                   feature_maps=feature_maps),
                 pipeline=_pipeline(int(chunk_size), False, threads),
                 inputs=inputs, input_names=names, outputs=outputs,
                 entry=_ENTRY, threads=threads)

    def returned(x):
        """A result in the inputs' kind (torch or NumPy) and dtype."""
        if torch_out:
            torch = _torch()
            if compute == "bf16" and x.dtype == np.uint16:
                return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
            return torch.from_numpy(x)
        if compute == "bf16" and x.dtype == np.uint16:
            return x.view(qa.dtype) if kinds["q"] == "bf16" else _bf16_to_f32(x)
        return x

    call.returned = returned
    call.stateful = stateful
    call.context = inputs[1].shape[1] - T
    call.chunk_size = int(chunk_size)
    call.window = int(window)
    call.feature_maps = maps
    return call


def sliding_window_hybrid(q, k, v, feature_q, feature_k, window, *, scale=None,
                          initial_state=None, output_final_state=False,
                          cu_seqlens=None, chunk_size=64, dtype=None, num_threads=None):
    """LoLCATs' hybrid as one la kernel (the op ``la.sliding_window_hybrid``):
    softmax attention on the last ``window`` tokens (the current one
    included) and linear attention on the features before them, under one
    normalisation,

        o_t = (sum_{t-w < s <= t} exp(scale q_t . k_s) v_s
               + sum_{s <= t-w} (feature_q[t] . feature_k[s]) v_s)
              / (the same sums without v_s)

    ``q, k : [B, T, H, K]``, ``v : [B, T, H, V]``, ``feature_q, feature_k :
    [B, T, H, F]`` (NumPy arrays or torch tensors on the CPU; ``dtype``
    converts them as :func:`attention` does, the features too);
    ``cu_seqlens`` packs sequences (B = 1, fla's convention): neither part
    reaches across a sequence's first token. Returns ``o : [B, T, H, V]``,
    and with ``output_final_state=True`` ``(o, state)``: a
    :class:`HybridState` with which a later call continues the sequences
    (decoding, a prompt in pieces; not with ``cu_seqlens``):
    ``initial_state=state`` gives the tokens the same outputs as one call
    over the whole sequence. With torch tensors that need gradients the
    call is differentiable: its backward is the gradient kernel that
    la-derive-backward derives from the op (:func:`sliding_window_hybrid_backward`).

    ``feature_q`` and ``feature_k`` may instead both be a
    :class:`HedgehogMap` ``(weight [H, K, F/2], bias [H, F/2] or None)``:
    the kernel then computes Hedgehog's features of q and k itself (the
    map's contraction and softmaxes are linalg ops in front of the op, in
    the same kernel; a continued call maps its context's keys again and
    does not read ``initial_state.feature_k``). The gradient kernel then
    also gives the maps' weights and biases theirs (la-derive-backward
    differentiates the contraction and the softmaxes)."""
    tensors = (q, k, v, feature_q, feature_k) + (
        tuple(initial_state) if isinstance(initial_state, tuple) else ())
    if _given_maps(feature_q, feature_k):
        tensors += tuple(feature_q) + tuple(feature_k)
    if any(_is_tensor(x) for x in tensors) and _torch().is_grad_enabled() and any(
            _is_tensor(x) and x.requires_grad for x in tensors):
        return _hybrid_autograd(q, k, v, feature_q, feature_k, window, scale, initial_state,
                                output_final_state, cu_seqlens, chunk_size, dtype,
                                num_threads)
    call = _hybrid_call(q, k, v, feature_q, feature_k, window, scale, initial_state,
                        output_final_state, cu_seqlens, chunk_size, dtype, num_threads)
    results = _run(call)
    o = call.returned(results[0])
    if not output_final_state:
        return o
    return o, _hybrid_state(call, results[1])


def _hybrid_state(call, final_state):
    """The HybridState after ``call``: the final state and the last
    ``window`` keys (the final state holds the tokens before them)."""
    keys = call.inputs[1]
    kept = min(call.window, keys.shape[1])
    tail = [np.ascontiguousarray(call.inputs[i][:, keys.shape[1] - kept:]) for i in (1, 2)]
    if call.feature_maps is None:
        tail.append(np.ascontiguousarray(call.inputs[4][:, keys.shape[1] - kept:]))
    else:
        # The kernel mapped the keys itself; the state's feature_k (which a
        # call with the maps does not read) is that map of the kept keys.
        keys_f32 = tail[0] if tail[0].dtype != np.uint16 else _bf16_to_f32(tail[0])
        features = _hedgehog_features_np(keys_f32, *call.feature_maps[1])
        tail.append(_to_compute("feature_k", features, "f32",
                                {np.float32: "f32", np.float16: "f16",
                                 np.uint16: "bf16"}[tail[0].dtype.type]))
    return HybridState(call.returned(final_state), *(call.returned(x) for x in tail))


def sliding_window_hybrid_backward(q, k, v, feature_q, feature_k, window, do, *, scale=None,
                                   initial_state=None, d_final_state=None, cu_seqlens=None,
                                   chunk_size=64, dtype=None, num_threads=None):
    """The gradients of ``sum(o * do) (+ sum(final_state * d_final_state))``
    for :func:`sliding_window_hybrid` with the same arguments: the kernel of
    the gradient function that la-derive-backward derives from the op (the
    far part's la.recurrence_grad, chunked as every recurrence's adjoint,
    and the window's block products). Returns float32 ``(dq, dk, dv,
    dfeature_q, dfeature_k)``, and with ``initial_state`` a sixth, the
    HybridState of its gradients (the far state's and the context's k, v
    and feature_k). With :class:`HedgehogMap` features, ``dfeature_q`` and
    ``dfeature_k`` are HedgehogMaps of the maps' gradients (weight, bias or
    None), derived through the maps' contraction and softmaxes too."""
    call = _hybrid_call(q, k, v, feature_q, feature_k, window, scale, initial_state,
                        d_final_state is not None, cu_seqlens, chunk_size, dtype, num_threads)
    _device_check("do", do)
    _device_check("d_final_state", d_final_state)
    do_arr, kind = _qkv_array("do", do)
    o_shape = call.outputs[0][0]
    if do_arr.shape != o_shape:
        raise _shape_error("do", f"[B, T, H, V] = {o_shape} (the shape of o)", do_arr.shape)
    compute = {np.float32: "f32", np.float16: "f16", np.uint16: "bf16"}[call.outputs[0][1]]
    inputs = list(call.inputs) + [_to_compute("do", do_arr, kind, compute)]
    if call.stateful:
        state_shape = call.outputs[1][0]
        d_state = (np.zeros(state_shape, np.float32) if d_final_state is None else
                   _f32_array("d_final_state", d_final_state, "[B, H, F, V + 1]"))
        if d_state.shape != state_shape:
            raise _shape_error("d_final_state", f"[B, H, F, V + 1] = {state_shape}",
                               d_state.shape)
        inputs.append(np.ascontiguousarray(d_state))
    outputs = [(np.shape(x), np.float32)
               for x, name in zip(call.inputs, call.input_names) if name != "cu_seqlens"]
    grad_call = _Call(text=call.text,
                      pipeline=_backward_pipeline(call.chunk_size, False, call.threads),
                      inputs=inputs, input_names=call.input_names + ["do"]
                      + (["d_final_state"] if call.stateful else []),
                      outputs=outputs, entry=f"{_ENTRY}_grad", threads=call.threads)
    grads = list(_run(grad_call))
    torch_out = _is_tensor(q)

    def out(x):
        return _torch().from_numpy(x) if torch_out else x

    dq, dk, dv = grads[:3]
    L = call.context
    result = [out(dq), out(dk[:, L:]), out(dv[:, L:])]
    if call.feature_maps is None:
        dfq, dfk = grads[3:5]
        result += [out(dfq), out(dfk[:, L:])]
        rest = grads[5:]
    else:
        # One HedgehogMap of gradients per map: the weight's, the bias's
        # (None without a bias).
        rest = grads[3:]
        for _, bias in call.feature_maps:
            weight_grad, rest = rest[0], rest[1:]
            bias_grad = None
            if bias is not None:
                bias_grad, rest = rest[0], rest[1:]
            result.append(HedgehogMap(out(weight_grad),
                                      None if bias_grad is None else out(bias_grad)))
    if initial_state is not None:
        # With maps, the state's feature_k is not read: a zero gradient.
        context_features = (out(dfk[:, :L]) if call.feature_maps is None else
                            out(np.zeros(np.shape(initial_state[3]), np.float32)))
        result.append(HybridState(out(rest[0]), out(dk[:, :L]), out(dv[:, :L]),
                                  context_features))
    return tuple(result)


def _hybrid_autograd(q, k, v, feature_q, feature_k, window, scale, initial_state,
                     output_final_state, cu_seqlens, chunk_size, dtype, num_threads):
    """:func:`sliding_window_hybrid` for torch tensors that need gradients:
    the forward kernel, and the derived gradient kernel as its backward. An
    initial state's tensors (the far state and the context's k, v and
    feature_k) are inputs of the graph like q: a sequence continued over
    several calls gets the gradients of the whole sequence. HedgehogMaps'
    weights and biases are inputs too (their gradients from the same
    kernel)."""
    torch = _torch()
    options = dict(scale=scale, cu_seqlens=cu_seqlens, chunk_size=chunk_size, dtype=dtype,
                   num_threads=num_threads)
    stateful = initial_state is not None
    maps = isinstance(feature_q, HedgehogMap)
    feature_args = tuple(feature_q) + tuple(feature_k) if maps else (feature_q, feature_k)
    state_at = 3 + len(feature_args)

    def features(inputs):
        f = inputs[3:state_at]
        return (HedgehogMap(*f[:2]), HedgehogMap(*f[2:])) if maps else tuple(f)

    def detached(ctx, saved):
        # The arguments of apply, tensors detached (an initial state's NumPy
        # parts are constants of the graph).
        saved = iter(saved)
        return [next(saved).detach() if tensor else other
                for tensor, other in zip(ctx.is_tensor, ctx.others)]

    class Hybrid(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            ctx.is_tensor = [_is_tensor(x) for x in args]
            ctx.others = [None if tensor else x for tensor, x in zip(ctx.is_tensor, args)]
            tensors = [x for x in args if _is_tensor(x)]
            ctx.save_for_backward(*tensors)
            inputs = detached(ctx, tensors)
            state = HybridState(*inputs[state_at:]) if stateful else None
            with torch.no_grad():
                result = sliding_window_hybrid(*inputs[:3], *features(inputs), window,
                                               initial_state=state,
                                               output_final_state=output_final_state,
                                               **options)
            if not output_final_state:
                return result
            o, final = result
            return o, final.state

        @staticmethod
        def backward(ctx, do, d_state=None):
            inputs = detached(ctx, ctx.saved_tensors)
            grads = sliding_window_hybrid_backward(
                *inputs[:3], *features(inputs), window, do.contiguous(),
                initial_state=HybridState(*inputs[state_at:]) if stateful else None,
                d_final_state=None if d_state is None else d_state.contiguous(),
                **options)
            flat = list(grads[:3]) + (list(grads[3]) + list(grads[4]) if maps
                                      else list(grads[3:5]))
            flat += list(grads[5]) if stateful else []
            return tuple(torch.as_tensor(g).to(x.dtype) if needed else None
                         for g, x, needed in zip(flat, inputs, ctx.needs_input_grad))

    result = Hybrid.apply(q, k, v, *feature_args, *(initial_state if stateful else ()))
    if not output_final_state:
        return result
    o, far = result
    return o, HybridState(far, *_hybrid_context(k, v, feature_k, window, initial_state))


def _hybrid_context(k, v, feature_k, window, initial_state):
    """The context a differentiable call returns: the last ``window`` keys,
    values and key features (the call's own, after any earlier context;
    with a HedgehogMap, the map of the kept keys, outside the graph)."""
    torch = _torch()
    parts = []
    for index, x in ((1, k), (2, v)):
        if initial_state is not None:
            x = torch.cat([torch.as_tensor(initial_state[index]).to(x.dtype), x], 1)
        parts.append(x[:, max(x.shape[1] - window, 0):])
    if isinstance(feature_k, HedgehogMap):
        weight, bias = (None if y is None else np.asarray(
            y.detach().float() if _is_tensor(y) else y, np.float32) for y in feature_k)
        kept = parts[0].detach().float().numpy()
        parts.append(torch.from_numpy(_hedgehog_features_np(kept, weight, bias))
                     .to(parts[0].dtype))
        return parts
    x = feature_k
    if initial_state is not None:
        x = torch.cat([torch.as_tensor(initial_state[3]).to(x.dtype), x], 1)
    parts.append(x[:, max(x.shape[1] - window, 0):])
    return parts


def lower(op, *args, stage, ir_dir=None, **kwargs):
    """The IR of one call at one stage of the CPU pipeline, as text.

    ``op`` is one of the functions of this module (``la.gla``, ...) or a variant
    name for :func:`attention`; ``args``/``kwargs`` are what you would pass to
    it (arrays give only their shapes and dtypes; nothing is run). Every stage
    is taken from one run of the pipeline that compiles the kernel
    (``la-lower-to-cpu``, built by C++'s ``buildLowerToCPUPipeline``), so it
    is the IR the kernel is compiled from. ``stage``:

    * ``'attention'``: the input, one ``la.attention`` op;
    * ``'recurrence'``: after ``la-lower-to-recurrence`` (``la.recurrence``);
    * ``'chunked'``: after ``la-fuse-recurrence`` and ``la-chunk``
      (``la.chunk_*`` ops; the program fused per (batch, value head) unless
      it has ``cu_seqlens``; with ``sequential=True`` there is no chunked
      stage);
    * ``'linalg'``: after ``convert-la-to-linalg`` (linalg/scf on tensors);
    * ``'tiled'``: the tensor program bufferization starts from (after
      ``la-tile``: thread loops, register tiles, vectors);
    * ``'llvm'``: after the whole pipeline (LLVM dialect);
    * ``'llvm-ir'``: the LLVM IR that clang compiles;
    * ``'all'``: the module after every pass, as one string; with
      ``ir_dir`` the same is written into a tree of files under that
      directory (one per pass, as ``la-opt --mlir-print-ir-tree-dir``) and
      the directory is returned.

    Compiler errors raise LaError.
    """
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")
    if isinstance(op, str):
        bound = inspect.signature(attention).bind(op, *args, **kwargs)
        arguments = dict(bound.arguments)
    elif op in _WRAPPERS or op is attention:
        bound = inspect.signature(op).bind(*args, **kwargs)
        arguments = dict(bound.arguments)
        if op is not attention:
            variant, renames = _WRAPPERS[op]
            arguments = {renames.get(name, name): value for name, value in arguments.items()}
            arguments["variant"] = variant
    else:
        raise TypeError(f"op must be a function of la.ops or a variant name, got {op!r}")
    if ir_dir is not None and stage != "all":
        raise ValueError("ir_dir is for stage='all'")
    call = _prepare(**arguments)
    if stage == "attention":
        return call.text
    if stage == "chunked" and call.sequential:
        raise ValueError("stage='chunked' does not exist with sequential=True "
                         "(the recurrence is lowered to a token-by-token loop)")
    module = ir.Module.parse(call.text)
    module.emit_c_interface(_ENTRY)
    pm = ir.PassManager.parse(call.pipeline)
    if stage in _STAGE_CAPTURE:
        where, pass_name = _STAGE_CAPTURE[stage]
        captured = pm.run(module, **{f"capture_{where}": pass_name})
        if not captured:
            raise LaError(f"the pipeline {call.pipeline!r} has no {pass_name} pass")
        return captured[-1]
    if stage == "all":
        if ir_dir is not None:
            pm.run(module, ir_tree_dir=ir_dir)
            return os.fspath(ir_dir)
        return pm.run(module, print_ir_after_all=True)
    pm.run(module)
    return str(module) if stage == "llvm" else module.to_llvm_ir()
