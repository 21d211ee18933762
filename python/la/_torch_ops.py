"""la's layers as PyTorch custom operators (``torch.library``).

Every layer function called with torch tensors runs the operator
``torch.ops.la.attention`` (one operator for every variant: the variant is
its first argument), so that ``torch.compile(fullgraph=True)`` and
``torch.export`` trace models that call la, meta and fake tensors give the
outputs' shapes without running anything, and autograd differentiates it:
its backward is the operator ``torch.ops.la.attention_backward``, whose
kernel ``la-derive-backward`` derives from the forward's MLIR.

The operators are registered once per process (:func:`register`): by
``import la`` when torch is imported already, otherwise right after
``import torch`` runs, so that no trace ever meets an unregistered
operator.
"""

import sys

import numpy as np

#: the inputs with a gradient, in the order of attention_backward's results.
from .ops import _DIFFERENTIABLE as DIFFERENTIABLE

#: the inputs that are tensors, in the operators' argument order.
TENSOR_INPUTS = ("q", "k", "v", "g", "gv", "beta", "erase", "write", "a", "b",
                 "A_log", "dt_bias", "initial_state", "cu_seqlens", "log_decay")


_OPTIONS = ("scale", "output_final_state", "normalize", "eps", "qk_l2norm",
            "allow_neg_eigval", "chunk_size", "sequential", "dtype", "num_threads",
            "erase_read_key", "reverse", "gate_activation", "gate_lower_bound",
            "beta_sigmoid")

_INPUT_SCHEMA = ("str variant, Tensor q, Tensor k, Tensor v, Tensor? g, Tensor? gv, "
                 "Tensor? beta, "
                 "Tensor? erase, Tensor? write, Tensor? a, Tensor? b, Tensor? A_log, "
                 "Tensor? dt_bias, Tensor? initial_state, "
                 "Tensor? cu_seqlens, Tensor? log_decay, float? scale, "
                 "bool output_final_state, bool normalize, float? eps, bool qk_l2norm, "
                 "bool allow_neg_eigval, int chunk_size, bool sequential, str? dtype, "
                 "int num_threads, bool erase_read_key, bool reverse, "
                 "str? gate_activation, float? gate_lower_bound, bool beta_sigmoid")
FORWARD_SCHEMA = f"({_INPUT_SCHEMA}) -> (Tensor, Tensor)"
CHECKPOINTS_SCHEMA = f"({_INPUT_SCHEMA}, int checkpoint_every) -> (Tensor, Tensor, Tensor)"
BACKWARD_SCHEMA = f"({_INPUT_SCHEMA}, Tensor do, Tensor? d_final_state) -> Tensor[]"

_registered = False


def _names():
    return ("variant",) + TENSOR_INPUTS + _OPTIONS


def _ops():
    from . import ops
    return ops


def _prepare(arguments):
    """la.ops' prepared call of the operator's arguments (a dict)."""
    named = dict(arguments)
    if named["num_threads"] == 0:
        named["num_threads"] = None  # torch.get_num_threads()
    log_decay = named.pop("log_decay")
    if log_decay is not None:
        named["log_decay"] = log_decay.detach().cpu().numpy()
    return _ops()._prepare(target="cpu", **named)


def _forward(*args):
    arguments = dict(zip(_names(), args))
    torch = sys.modules["torch"]
    o, state = _ops()._execute(_prepare(arguments))
    if state is None:
        # The operator always returns two tensors; the layer function gives
        # None for this one.
        state = torch.empty(0, dtype=torch.float32)
    return o, state


def _forward_checkpoints(*args):
    """la::attention_checkpoints: o, the final state (or an empty tensor) and
    the checkpoints (the op's checkpoint_every)."""
    arguments = dict(zip(_names() + ("checkpoint_every",), args))
    torch = sys.modules["torch"]
    o, state, checkpoints = _ops()._execute(_prepare(arguments))
    if state is None:
        state = torch.empty(0, dtype=torch.float32)
    return o, state, checkpoints


def _fake_checkpoints(*args):
    """The checkpoints' shape: [B, T // n, HV, K, V], or with cu_seqlens
    [1, C, HV, K, V] with C data-dependent (a dynamic size)."""
    o, state = _fake_forward(*args[:-1])
    a = dict(zip(_names(), args[:-1]))
    torch = sys.modules["torch"]
    every = args[-1]
    if every < 1:
        raise ValueError(f"checkpoint_every must be a positive number of tokens, got {every}")
    q, v = a["q"], a["v"]
    B, T, _, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if a["cu_seqlens"] is None:
        rows = T // every
    else:
        B, rows = 1, torch.library.get_ctx().new_dynamic_size()
    return o, state, q.new_empty((B, rows, HV, K, V), dtype=torch.float32)


_DTYPE_NAMES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


def _output_dtype(torch, q, dtype):
    if dtype is not None:
        return getattr(torch, _DTYPE_NAMES[dtype])
    if q.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"q has dtype {q.dtype}; la computes with float32, float16 or "
                        "bf16 q, k, v: convert it (tensor.float()) or pass dtype=")
    return q.dtype


def _fake_forward(*args):
    """The outputs' shapes and dtypes (fake and meta tensors): o
    [B, T, HV, V] in the compute dtype, the final state [N, HV, K, V] float32
    (N = B, or the sequences of cu_seqlens) or an empty tensor."""
    a = dict(zip(_names(), args))
    torch = sys.modules["torch"]
    q, v = a["q"], a["v"]
    if q.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q and v must be 4-D ([B, T, H, K], [B, T, HV, V]), got "
                         f"{tuple(q.shape)} and {tuple(v.shape)}")
    B, T, HQ, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    # Grouped query heads (more heads in q than in k): o has q's heads.
    heads = HQ if a["k"].dim() == 4 and HQ != a["k"].shape[2] else HV
    o = q.new_empty((B, T, heads, V), dtype=_output_dtype(torch, q, a["dtype"]))
    if not a["output_final_state"]:
        return o, q.new_empty((0,), dtype=torch.float32)
    N = B if a["cu_seqlens"] is None else a["cu_seqlens"].shape[0] - 1
    return o, q.new_empty((N, HV, K, V), dtype=torch.float32)


def _backward(*args):
    arguments = dict(zip(_names() + ("do", "d_final_state"), args))
    do = arguments.pop("do")
    d_final_state = arguments.pop("d_final_state")
    call = _prepare(arguments)
    grads = _ops()._gradients(call, do, d_final_state)
    return [grads[name] for name in DIFFERENTIABLE if arguments[name] is not None]


def _fake_backward(*args):
    arguments = dict(zip(_names(), args))
    torch = sys.modules["torch"]
    return [torch.empty_like(arguments[name], dtype=torch.float32)
            for name in DIFFERENTIABLE if arguments[name] is not None]


def _setup_context(ctx, inputs, output):
    arguments = dict(zip(_names(), inputs))
    ctx.arguments = {n: x for n, x in arguments.items() if n not in TENSOR_INPUTS}
    ctx.given = tuple(n for n in TENSOR_INPUTS if arguments[n] is not None)
    ctx.save_for_backward(*(arguments[n] for n in ctx.given))


def _autograd_backward(ctx, do, d_state):
    torch = sys.modules["torch"]
    arguments = dict(ctx.arguments)
    arguments.update({n: None for n in TENSOR_INPUTS})
    arguments.update(zip(ctx.given, ctx.saved_tensors))
    q, v = arguments["q"], arguments["v"]
    if do is None:
        do = q.new_zeros(q.shape[:2] + v.shape[2:], dtype=torch.float32)
    if not arguments["output_final_state"]:
        d_state = None
    values = [arguments[n] for n in _names()]
    grads = iter(torch.ops.la.attention_backward(*values, do, d_state))
    result = []
    for name in _names():
        x = arguments.get(name)
        if name in DIFFERENTIABLE and x is not None:
            grad = next(grads)
            index = len(result)
            result.append(grad.to(x.dtype) if ctx.needs_input_grad[index] else None)
        else:
            result.append(None)
    return tuple(result)


def register():
    """Registers ``la::attention``, ``la::attention_backward`` and
    ``la::attention_checkpoints`` (once)."""
    global _registered
    if _registered:
        return
    import torch
    forward = torch.library.custom_op("la::attention", _forward, mutates_args=(),
                                      schema=FORWARD_SCHEMA)
    forward.register_fake(_fake_forward)
    backward = torch.library.custom_op("la::attention_backward", _backward,
                                       mutates_args=(), schema=BACKWARD_SCHEMA)
    backward.register_fake(_fake_backward)
    forward.register_autograd(_autograd_backward, setup_context=_setup_context)
    # No autograd: la-derive-backward refuses checkpoints (the layer function
    # raises before a call with inputs that require grad).
    checkpoints = torch.library.custom_op("la::attention_checkpoints", _forward_checkpoints,
                                          mutates_args=(), schema=CHECKPOINTS_SCHEMA)
    checkpoints.register_fake(_fake_checkpoints)
    _registered = True


class _RegisterAfterTorchImport:
    """A ``sys.meta_path`` finder that registers the operators as soon as
    ``import torch`` has run (la imported first, as isort orders imports):
    a trace never has to register them, which it cannot do."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        import importlib.util
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_register(module):
            exec_module(module)
            try:
                register()
            except Exception as error:  # never break `import torch`
                import warnings
                warnings.warn(f"la could not register its torch operators: {error}")

        spec.loader.exec_module = exec_and_register
        return spec


def register_when_torch_is_imported():
    """Registers now when torch is imported, else right after it is."""
    if "torch" in sys.modules:
        register()
    elif not any(isinstance(f, _RegisterAfterTorchImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegisterAfterTorchImport())


def _operator_values(variant, named, options):
    torch = sys.modules["torch"]
    register()
    tensors = {}
    for name in TENSOR_INPUTS:
        x = named.get(name)
        if x is not None and not isinstance(x, torch.Tensor):
            x = torch.as_tensor(np.asarray(x))
        tensors[name] = x
    return [variant] + [tensors[n] for n in TENSOR_INPUTS] + [options[n] for n in _OPTIONS]


def call_checkpoints(variant, named, options, checkpoint_every):
    """:func:`call` with the op's checkpoints: ``(o, final_state or None,
    checkpoints)`` through ``torch.ops.la.attention_checkpoints``."""
    torch = sys.modules["torch"]
    values = _operator_values(variant, named, options)
    o, state, checkpoints = torch.ops.la.attention_checkpoints(*values, checkpoint_every)
    return o, (state if options["output_final_state"] else None), checkpoints


def call(variant, named, options):
    """The layer functions' torch path: ``named`` holds the tensor inputs
    given (NumPy arrays among them are converted), ``options`` the rest.
    Returns ``(o, final_state or None)``."""
    torch = sys.modules["torch"]
    values = _operator_values(variant, named, options)
    o, state = torch.ops.la.attention(*values)
    return o, (state if options["output_final_state"] else None)
