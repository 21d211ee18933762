"""Python side of the ``la`` linear-attention compiler.

* ``la.linear_attention``, ``la.retention``, ``la.simple_gla``, ``la.gla``,
  ``la.delta_rule``, ``la.gated_delta_rule``, ``la.kda``,
  ``la.gated_delta_rule2`` (Gated DeltaNet-2) (and the generic
  ``la.attention``): layers in flash-linear-attention's conventions on NumPy
  arrays or CPU torch tensors, compiled by la through its C API and cached
  (``la.cache_info``); ``la.lower`` returns the IR of a call at one stage of
  the pipeline (see ``la.ops``); torch tensors that require grad are
  differentiated through autograd by a gradient kernel the compiler derives
  (``la-derive-backward``), and ``la.attention_backward`` returns every
  gradient for NumPy inputs;
* ``la.onnx`` (``import la.onnx``): ONNX's LinearAttention models imported
  into la's MLIR and run (docs/onnx.md); ``la.nn`` (``import la.nn``): fla's
  GLA, Gated DeltaNet and KDA layers (docs/torch.md);
* ``la.fla``: flash-linear-attention 0.6.0's ``chunk_*`` /
  ``fused_recurrent_*`` op API on la's kernels (docs/fla.md);
* ``la.ir``: the compiler from Python (Context, Module, PassManager,
  ExecutionEngine), and ``la.LaError`` for the errors it reports;
* ``la.cuda``: whether a CUDA GPU is there (libla_cuda_runtime, through
  ctypes; no GPU is needed to import it);
* ``la.variants``: the named variants (``la.variants.VARIANTS``), read from
  la's one registry through the C API;
* ``la.reference``: the fp64 NumPy reference recurrences that every execution
  test compares against; ``la.testing``: input generators and the accuracy
  metric.

Importing ``la`` does not need the compiled C API library (libLaCAPI.so): it
is loaded on first use, and a missing library raises LaError then.
"""

#: la's version (CMake's project version and pyproject.toml's; a test checks).
__version__ = "0.1.0"

from . import cuda, family, fla, ir, reference, serving, testing, variants
from ._capi import LaError
from .ops import (
    STAGES,
    register_torch_ops,
    attention,
    attention_backward,
    cache_dir,
    cache_info,
    clear_cache,
    delta_rule,
    gated_delta_rule,
    gated_delta_rule2,
    gla,
    kda,
    linear_attention,
    lower,
    retention,
    rwkv7,
    simple_gla,
)

__all__ = [
    "__version__",
    "LaError",
    "STAGES",
    "attention",
    "attention_backward",
    "cache_dir",
    "cache_info",
    "clear_cache",
    "delta_rule",
    "family",
    "fla",
    "gated_delta_rule",
    "gated_delta_rule2",
    "gla",
    "ir",
    "kda",
    "linear_attention",
    "lower",
    "reference",
    "register_torch_ops",
    "retention",
    "rwkv7",
    "serving",
    "simple_gla",
    "testing",
    "variants",
]

# The torch operators exist before any trace (torch.compile, torch.export)
# meets la's functions: now, or right after `import torch`.
from ._torch_ops import register_when_torch_is_imported as _register_torch_ops

_register_torch_ops()
