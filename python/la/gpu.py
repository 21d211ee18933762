"""Ahead-of-time GPU kernels: ``la.attention`` compiled into a shared library
that runs without MLIR.

``la-lower-to-nvvm`` turns a ``func.func`` holding ``la.attention`` into
LLVM-dialect host code with the kernels embedded as a cubin; the host
function takes *device* memory (its tensors became memrefs, its results
trailing out-parameters: ``o``, then ``final_state`` if present) and calls the
``mgpu*`` functions of ``libla_cuda_runtime.so``. :func:`compile_library`
finishes the job ahead of time, in this process through la's C API (the same
path as ``la.ops`` on the CPU), then with clang::

    la.ir.Module.parse(text)
    la.ir.PassManager.parse("builtin.module(func.func(llvm-request-c-wrappers),
                                            la-lower-to-nvvm{...})").run(module)
    module.to_llvm_ir()
    clang-22 -shared -fPIC -O2 ... -L<runtime dir> -lla_cuda_runtime -Wl,-rpath,$ORIGIN

The result is a self-contained ``.so`` (the cubin inside; its only la
dependency is ``libla_cuda_runtime.so``, found next to it through
``$ORIGIN``, or already loaded in the process) that exports
``_mlir_ciface_<entry>``, a function of one pointer per memref argument and
out-parameter, each to a ranked memref descriptor (allocated pointer, aligned
pointer, int64 offset, int64 sizes[rank], int64 strides[rank]). Loading it
loads the kernels (a global constructor calls ``mgpuModuleLoad``); so a
machine that runs it needs the NVIDIA driver, numpy and this module, but
neither LLVM nor MLIR.

:func:`load_library` wraps such a library in a :class:`GpuFunction` that
takes raw device pointers (ints, or objects with ``data_ptr()`` such as CUDA
``torch.Tensor``), builds contiguous descriptors, calls the function (which
launches on its own stream and waits for it) and raises
:class:`GpuRuntimeError` when the runtime reports an error
(``laCudaSynchronize``, ``laCudaLastError``).

For one attention layer, :func:`compile_attention` writes the library and a
JSON manifest beside it (variant, shapes, dtypes, the parameter list), and
:func:`load_attention` reads both back into an :class:`AttentionKernel`,
which can also run on NumPy arrays (:meth:`AttentionKernel.run`: device
buffers through the runtime's own allocator, no PyTorch needed).

clang is looked up in ``$LA_CLANG``, ``PATH`` (``clang-22``), then
``/usr/lib/llvm-22/bin/clang``; la-lower-to-nvvm finds the CUDA toolkit's
ptxas itself (:func:`find_ptxas` looks where it does). :func:`missing_tools`
says what is missing.

Only NumPy is needed (torch tensors are accepted where pointers are, but
torch is never imported here).
"""

import ctypes
import hashlib
import json
import os
import shutil
import subprocess
import tempfile

import numpy as np

from . import _capi, cuda, ir, runner
from ._capi import LaError
from .variants import DIFFERENTIABLE as _DIFFERENTIABLE
from .variants import VARIANTS, token_operand_shapes

__all__ = [
    "GpuCompileError",
    "GpuRuntimeError",
    "GpuFunction",
    "AttentionKernel",
    "DeviceBuffer",
    "Param",
    "attention_params",
    "compile_attention",
    "compile_library",
    "find_clang",
    "find_ptxas",
    "load_attention",
    "load_library",
    "missing_tools",
    "pipeline_spec",
]

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(os.path.dirname(_HERE))
_LLVM_BIN = "/usr/lib/llvm-22/bin"
_RUNTIME_NAME = "libla_cuda_runtime.so"
_CLANG_FLAGS = ("-shared", "-fPIC", "-O2", "-Wno-override-module")
#: bump when the manifest or the library's calling convention changes.
_MANIFEST_FORMAT = 1
#: the most of a step's diagnostics kept in an exception's message (some
#: errors print the whole module); the full text is in ``.stderr``.
_MESSAGE_LIMIT = 6000

#: element size in bytes and NumPy dtype of each element type name.
_ELEMENT = {
    "f32": (4, np.dtype(np.float32)),
    "f16": (2, np.dtype(np.float16)),
    "bf16": (2, np.dtype(np.uint16)),  # raw bits on the device side
    "i32": (4, np.dtype(np.int32)),
}

# torch dtype names (str(tensor.dtype)) of each element type name.
_TORCH_DTYPE = {"f32": "torch.float32", "f16": "torch.float16", "bf16": "torch.bfloat16",
                "i32": "torch.int32"}


class GpuCompileError(LaError):
    """A step of :func:`compile_library` (or :func:`compile_attention`) failed.

    ``step`` is ``'parse'`` (the MLIR text), ``'derive'`` (la-derive-backward,
    for a backward kernel), ``'lower'`` (la-lower-to-nvvm and
    the translation to LLVM IR, in this process), ``'check'`` (the entry
    function) or ``'clang'``; ``stderr`` holds the full diagnostics (or
    clang's standard error), ``command`` and ``returncode`` clang's command
    line and status."""

    def __init__(self, message, *, step=None, command=None, returncode=None, stderr=""):
        super().__init__(message)
        self.step = step
        self.command = command
        self.returncode = returncode
        self.stderr = stderr


class GpuRuntimeError(LaError):
    """The CUDA runtime reported an error: no GPU, a module that does not
    load, a failed launch or an asynchronous kernel fault."""


# --------------------------------------------------------------------------
# tools
# --------------------------------------------------------------------------

def _executable(path):
    return bool(path) and os.path.isfile(path) and os.access(path, os.X_OK)


def find_clang():
    """Path of ``clang-22``, or None."""
    env = os.environ.get("LA_CLANG")
    if env:
        return env
    path = shutil.which("clang-22")
    if path:
        return path
    path = os.path.join(_LLVM_BIN, "clang")
    return path if _executable(path) else None


def find_ptxas():
    """Path of the CUDA toolkit's ``ptxas``, looked up like la-lower-to-nvvm's
    ``cuda-toolkit`` default (``$CUDA_ROOT``, ``$CUDA_HOME``, ``$CUDA_PATH``,
    else /usr/local/cuda), or None."""
    root = next((os.environ[v] for v in ("CUDA_ROOT", "CUDA_HOME", "CUDA_PATH")
                 if os.environ.get(v)), "/usr/local/cuda")
    path = os.path.join(root, "bin", "ptxas")
    return path if _executable(path) else None


def missing_tools():
    """What :func:`compile_library` needs with its default options and cannot
    find, as a list of sentences (empty when everything is there)."""
    missing = []
    if _capi.library_path() is None:
        missing.append("la's C API library is not built (build/lib/libLaCAPI.so; set "
                       "LA_CAPI_LIB)")
    if find_clang() is None:
        missing.append("clang-22 not found (Debian's clang-22 package; or set LA_CLANG)")
    if find_ptxas() is None:
        missing.append("the CUDA toolkit's ptxas not found (/usr/local/cuda/bin/ptxas; or set "
                       "CUDA_HOME), which la-lower-to-nvvm's format=bin needs")
    if cuda.library_path() is None:
        missing.append(f"{_RUNTIME_NAME} not found (build it: ninja -C build "
                       "la_cuda_runtime; or set LA_CUDA_RUNTIME_LIB)")
    return missing


# --------------------------------------------------------------------------
# compiling
# --------------------------------------------------------------------------

def _option_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    if any(c in text for c in " \t{}\"'"):
        if '"' in text:
            raise ValueError(f"pipeline option values cannot contain '\"': {text!r}")
        return f'"{text}"'
    return text


def pipeline_spec(pipeline_options=None, *, c_wrappers=True):
    """The pass pipeline text (for la.ir.PassManager, or la-opt's
    ``--pass-pipeline``): ``la-lower-to-nvvm`` with
    ``pipeline_options`` (e.g. ``{"chunk-size": 16, "value-tile": 16,
    "threads-per-block": 256, "chip": "sm_90a", "format": "bin",
    "cuda-toolkit": "/usr/local/cuda", "ptxas-options": "-v"}``; keys may
    use ``_`` for ``-``), preceded by ``llvm-request-c-wrappers`` (which
    marks every ``func.func`` with ``llvm.emit_c_interface``, as la-run does
    for its entry) unless ``c_wrappers`` is False."""
    parts = []
    for key, value in (pipeline_options or {}).items():
        if value is None:
            continue
        parts.append(f"{str(key).replace('_', '-')}={_option_value(value)}")
    nvvm = "la-lower-to-nvvm" + ("{" + " ".join(parts) + "}" if parts else "")
    passes = (["func.func(llvm-request-c-wrappers)"] if c_wrappers else []) + [nvvm]
    return "builtin.module(" + ",".join(passes) + ")"


def _clip(text, limit=_MESSAGE_LIMIT):
    text = text.rstrip()
    if len(text) <= limit:
        return text
    head = text[: limit * 2 // 3]
    tail = text[-(limit // 3):]
    return f"{head}\n  [... {len(text) - len(head) - len(tail)} characters cut ...]\n{tail}"


def _run_step(step, cmd, timeout, stdin=None):
    try:
        proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True,
                              timeout=timeout)
    except FileNotFoundError as error:
        raise GpuCompileError(f"{step}: cannot run {cmd[0]!r}: {error}", step=step,
                              command=cmd) from None
    except subprocess.TimeoutExpired:
        raise GpuCompileError(f"{step} did not finish in {timeout} s:\n  command: "
                              f"{' '.join(cmd)}", step=step, command=cmd) from None
    if proc.returncode != 0:
        raise GpuCompileError(
            f"{step} failed with exit status {proc.returncode}:\n"
            f"  command: {' '.join(cmd)}\n  stderr:\n{_clip(proc.stderr)}",
            step=step, command=cmd, returncode=proc.returncode, stderr=proc.stderr)
    return proc


def _same_file(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _copy_runtime(runtime, directory):
    """Puts a copy of the runtime library in ``directory`` (atomically; kept
    when an identical file is there already)."""
    target = os.path.join(directory, _RUNTIME_NAME)
    if _same_file(runtime, target):
        return target
    if os.path.isfile(target):
        with open(runtime, "rb") as f1, open(target, "rb") as f2:
            if f1.read() == f2.read():
                return target
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".so", dir=directory)
    os.close(fd)
    try:
        shutil.copy2(runtime, tmp)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return target


def _lower(mlir_text, pipeline_options):
    """LLVM IR text of ``mlir_text`` after la-lower-to-nvvm, compiled in this
    process through la's C API; also returns the lowered module's text."""
    try:
        module = ir.Module.parse(mlir_text)
    except LaError as error:
        raise GpuCompileError(f"parsing the MLIR failed:\n{_clip(str(error))}",
                              step="parse", stderr=str(error)) from None
    spec = pipeline_spec(pipeline_options)
    try:
        ir.PassManager.parse(spec).run(module)
        return module.to_llvm_ir(), module.to_text()
    except LaError as error:
        raise GpuCompileError(f"lowering failed:\n  pipeline: {spec}\n  diagnostics:\n"
                              f"{_clip(str(error))}", step="lower", stderr=str(error)) from None


def compile_library(mlir_text, output_path, *, entry="attention", pipeline_options=None,
                    clang=None, runtime_library=None, copy_runtime=True, keep_dir=None,
                    timeout=600):
    """Compiles the MLIR module ``mlir_text`` (a ``func.func @entry`` holding
    ``la.attention``, e.g. from :func:`la.runner.attention_mlir`) into the
    shared library ``output_path`` and returns that path.

    ``pipeline_options`` are la-lower-to-nvvm's options (see
    :func:`pipeline_spec`; its own defaults: chunk-size 16, value-tile 16,
    256 threads per block, chip sm_90a, format bin, the CUDA toolkit from
    ``$CUDA_ROOT``/``$CUDA_HOME``/``$CUDA_PATH`` or /usr/local/cuda).
    ``runtime_library`` is the ``libla_cuda_runtime.so`` to link against
    (default: :func:`la.cuda.library_path`); with ``copy_runtime`` (the
    default) a copy is put next to the output, where the library's
    ``$ORIGIN`` run path finds it. ``keep_dir`` keeps the intermediate files
    (``<name>.llvm.mlir``, the lowered module, and ``<name>.ll``) there.
    ``timeout`` bounds clang's run.

    Raises :class:`GpuCompileError` with the diagnostics of the failing step,
    or when the result does not define ``_mlir_ciface_<entry>`` (no such
    function). The output is written under a temporary name and renamed, so
    a failed or concurrent compile never leaves a half-written library.
    """
    clang = clang or find_clang()
    runtime = runtime_library or cuda.library_path()
    missing = [name for name, path in (("la's C API library", _capi.library_path()),
                                       ("clang-22", clang), (_RUNTIME_NAME, runtime))
               if not path]
    if missing:
        reasons = "; ".join(missing_tools()) or ", ".join(missing) + " not found"
        raise GpuCompileError(f"cannot compile a GPU library: {reasons}", step="tools")
    output_path = os.path.abspath(output_path)
    out_dir = os.path.dirname(output_path)
    os.makedirs(out_dir, exist_ok=True)
    stem = os.path.splitext(os.path.basename(output_path))[0]

    ir_text, lowered = _lower(mlir_text, pipeline_options)
    if f"@_mlir_ciface_{entry}(" not in ir_text:
        raise GpuCompileError(
            f"the compiled module has no function _mlir_ciface_{entry}: is there a "
            f"func.func @{entry} in the input?", step="check")

    def run_in(directory):
        llvm_ir = os.path.join(directory, stem + ".ll")
        with open(os.path.join(directory, stem + ".llvm.mlir"), "w") as f:
            f.write(lowered)
        with open(llvm_ir, "w") as f:
            f.write(ir_text)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".so", dir=out_dir)
        os.close(fd)
        try:
            _run_step("clang", [clang, *_CLANG_FLAGS, llvm_ir, "-o", tmp,
                                f"-L{os.path.dirname(os.path.abspath(runtime))}",
                                "-lla_cuda_runtime", "-Wl,-rpath,$ORIGIN"], timeout)
            os.chmod(tmp, 0o755)
            os.replace(tmp, output_path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)

    if keep_dir is not None:
        os.makedirs(keep_dir, exist_ok=True)
        run_in(keep_dir)
    else:
        with tempfile.TemporaryDirectory(prefix="la-gpu-") as directory:
            run_in(directory)
    if copy_runtime:
        _copy_runtime(runtime, out_dir)
    return output_path


# --------------------------------------------------------------------------
# the runtime library
# --------------------------------------------------------------------------

_runtime_ready = False


def _runtime(near=None):
    """la.cuda's runtime handle with the memory functions declared. When
    la.cuda finds no runtime of its own (no build tree, as on a machine that
    only got the compiled kernels) and one lies next to ``near``, that one is
    used (through ``$LA_CUDA_RUNTIME_LIB``). Kernel libraries link the runtime
    by its soname, so they bind to the copy loaded here."""
    global _runtime_ready
    if cuda.lib() is None and near is not None:
        sibling = os.path.join(os.path.dirname(os.path.abspath(near)), _RUNTIME_NAME)
        if os.path.isfile(sibling):
            os.environ["LA_CUDA_RUNTIME_LIB"] = sibling
    handle = cuda.lib()
    if handle is None:
        raise GpuRuntimeError(f"{_RUNTIME_NAME} not found: build it (ninja -C build "
                              "la_cuda_runtime), put it next to the kernel library or set "
                              "LA_CUDA_RUNTIME_LIB")
    if not _runtime_ready:
        sigs = {
            "mgpuMemAlloc": (ctypes.c_void_p, [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_int8]),
            "mgpuMemFree": (None, [ctypes.c_void_p, ctypes.c_void_p]),
            "mgpuMemcpy": (None, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                  ctypes.c_void_p]),
        }
        for name, (restype, argtypes) in sigs.items():
            function = getattr(handle, name)
            function.restype = restype
            function.argtypes = argtypes
        _runtime_ready = True
    return handle


def _raise_on_error(what, ok=True):
    error = cuda.last_error()
    if error or not ok:
        raise GpuRuntimeError(f"{what}: {error or 'the CUDA runtime reported a failure'}")


def synchronize():
    """Waits for the GPU (``laCudaSynchronize``) and raises
    :class:`GpuRuntimeError` when it, or any runtime call since the last
    check, failed."""
    handle = _runtime()
    _raise_on_error("CUDA error", bool(handle.laCudaSynchronize()))


class DeviceBuffer:
    """Device memory from the runtime's allocator (``mgpuMemAlloc``), for
    callers without PyTorch. ``ptr`` is the device address; use as a context
    manager or call :meth:`free`."""

    def __init__(self, nbytes):
        self._handle = _runtime()
        self.nbytes = int(nbytes)
        self.ptr = None
        if self.nbytes:
            cuda.last_error()
            ptr = self._handle.mgpuMemAlloc(self.nbytes, None, 0)
            if not ptr:
                _raise_on_error(f"cannot allocate {self.nbytes} bytes on the GPU", False)
            self.ptr = ptr

    @classmethod
    def from_array(cls, array):
        """A buffer holding a copy of the C-contiguous bytes of ``array``."""
        array = np.ascontiguousarray(array)
        buffer = cls(array.nbytes)
        buffer.copy_from(array)
        return buffer

    def copy_from(self, array):
        """Copies ``array`` (its bytes, C order) into the buffer and waits."""
        array = np.ascontiguousarray(array)
        if array.nbytes != self.nbytes:
            raise ValueError(f"size mismatch: {array.nbytes} bytes into {self.nbytes}")
        if self.nbytes:
            self._handle.mgpuMemcpy(self.ptr, array.ctypes.data, self.nbytes, None)
            synchronize()

    def to_array(self, shape, dtype):
        """The buffer's bytes as a new NumPy array of ``shape`` and ``dtype``."""
        out = np.empty(shape, dtype=dtype)
        if out.nbytes != self.nbytes:
            raise ValueError(f"size mismatch: {self.nbytes} bytes into {out.nbytes}")
        if self.nbytes:
            self._handle.mgpuMemcpy(out.ctypes.data, self.ptr, self.nbytes, None)
            synchronize()
        return out

    def free(self):
        if self.ptr:
            self._handle.mgpuMemFree(self.ptr, None)
            self.ptr = None

    def data_ptr(self):
        return self.ptr or 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()


# --------------------------------------------------------------------------
# loading and calling
# --------------------------------------------------------------------------

_descriptor_types = {}


def _descriptor_type(rank):
    """ctypes layout of MLIR's ``StridedMemRefType<T, rank>``."""
    if rank not in _descriptor_types:
        fields = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p),
                  ("offset", ctypes.c_int64)]
        if rank:  # a rank-0 descriptor has no sizes or strides
            fields += [("sizes", ctypes.c_int64 * rank), ("strides", ctypes.c_int64 * rank)]

        class MemRefDescriptor(ctypes.Structure):
            _fields_ = fields
        MemRefDescriptor.__name__ = f"MemRefDescriptor{rank}D"
        _descriptor_types[rank] = MemRefDescriptor
    return _descriptor_types[rank]


def _contiguous_strides(shape):
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    return strides


class GpuFunction:
    """``_mlir_ciface_<entry>`` of a library from :func:`compile_library`.

    ``arg_shapes`` holds one shape per memref parameter, arguments then
    out-parameters, in the function's order. ``arg_dtypes`` (optional,
    ``'f32'``, ``'f16'``, ``'bf16'``, ``'i32'``) and ``arg_names`` are used to
    check torch tensors passed in and in messages.

    Loading runs the library's constructor, which loads the kernels on the
    GPU; :class:`GpuRuntimeError` is raised when there is no GPU or that
    fails.
    """

    def __init__(self, path, entry, arg_shapes, arg_dtypes=None, arg_names=None):
        self.path = os.path.abspath(path)
        self.entry = entry
        self.arg_shapes = [tuple(int(d) for d in s) for s in arg_shapes]
        n = len(self.arg_shapes)
        self.arg_dtypes = list(arg_dtypes) if arg_dtypes is not None else [None] * n
        self.arg_names = list(arg_names) if arg_names is not None else [f"arg{i}" for i in range(n)]
        if len(self.arg_dtypes) != n or len(self.arg_names) != n:
            raise ValueError("arg_shapes, arg_dtypes and arg_names must have the same length")
        _runtime(near=self.path)
        ok, reason = cuda.available()
        if not ok:
            raise GpuRuntimeError(f"no CUDA GPU: {reason}")
        cuda.last_error()  # clear older failures
        self.library = ctypes.CDLL(self.path)
        _raise_on_error(f"loading the kernels of {self.path} failed")
        try:
            self.function = getattr(self.library, "_mlir_ciface_" + entry)
        except AttributeError:
            raise GpuRuntimeError(f"{self.path} has no function _mlir_ciface_{entry}") from None
        self.function.restype = None
        self.function.argtypes = [ctypes.c_void_p] * n
        self._types = [_descriptor_type(len(s)) for s in self.arg_shapes]

    def _pointer(self, index, value):
        if isinstance(value, (int, np.integer)):
            return int(value)
        if isinstance(value, DeviceBuffer):
            return value.data_ptr()
        data_ptr = getattr(value, "data_ptr", None)
        if data_ptr is None:
            raise TypeError(f"{self.arg_names[index]}: expected a device pointer (int) or an "
                            f"object with data_ptr(), got {type(value).__name__}")
        name = self.arg_names[index]
        shape = getattr(value, "shape", None)
        if shape is not None and tuple(shape) != self.arg_shapes[index]:
            raise ValueError(f"{name}: shape {tuple(shape)}, expected {self.arg_shapes[index]}")
        expected = _TORCH_DTYPE.get(self.arg_dtypes[index])
        dtype = getattr(value, "dtype", None)
        if expected and dtype is not None and str(dtype) != expected:
            raise ValueError(f"{name}: dtype {dtype}, expected {expected}")
        if getattr(value, "is_cuda", True) is False:
            raise ValueError(f"{name}: a CPU tensor; the function takes device memory")
        is_contiguous = getattr(value, "is_contiguous", None)
        if is_contiguous is not None and not is_contiguous():
            raise ValueError(f"{name}: not contiguous")
        return int(data_ptr())

    def __call__(self, *pointers, check=True):
        """Calls the function on device pointers, one per parameter
        (arguments, then out-parameters). The call launches on the runtime's
        own stream and waits for it: work that produces the inputs on other
        streams (e.g. PyTorch's) must be finished before (``torch.cuda.
        synchronize()``). With ``check`` (the default) it then synchronises
        the device and raises :class:`GpuRuntimeError` on any runtime error."""
        if len(pointers) != len(self.arg_shapes):
            raise TypeError(f"{self.entry} takes {len(self.arg_shapes)} pointers "
                            f"({', '.join(self.arg_names)}), got {len(pointers)}")
        descriptors = []
        for index, (value, shape, type_) in enumerate(zip(pointers, self.arg_shapes,
                                                          self._types)):
            ptr = self._pointer(index, value)
            desc = type_()
            desc.allocated = desc.aligned = ptr
            desc.offset = 0
            if shape:
                desc.sizes[:] = list(shape)
                desc.strides[:] = _contiguous_strides(shape)
            descriptors.append(desc)
        self.function(*[ctypes.addressof(d) for d in descriptors])
        if check:
            self.check()

    def check(self):
        """Synchronises the device; raises :class:`GpuRuntimeError` when a
        runtime call failed since the last check (a failed launch, a kernel
        fault)."""
        handle = _runtime()
        ok = bool(handle.laCudaSynchronize())
        _raise_on_error(f"{self.entry} ({os.path.basename(self.path)}) failed", ok)


def load_library(path, entry, arg_shapes, arg_dtypes=None, arg_names=None):
    """A :class:`GpuFunction` for ``_mlir_ciface_<entry>`` of the library
    ``path``; ``arg_shapes`` lists the shapes of its memref parameters
    (arguments, then out-parameters)."""
    return GpuFunction(path, entry, arg_shapes, arg_dtypes, arg_names)


# --------------------------------------------------------------------------
# one attention layer
# --------------------------------------------------------------------------

class Param:
    """One memref parameter of an attention function: ``name``, ``shape``,
    element type ``dtype`` (``'f32'``, ``'f16'``, ``'bf16'``, ``'i32'``) and
    whether it is an ``output`` (out-parameter)."""

    def __init__(self, name, shape, dtype, output=False):
        self.name = name
        self.shape = tuple(int(d) for d in shape)
        self.dtype = dtype
        self.output = bool(output)

    def to_json(self):
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype,
                "output": self.output}

    @classmethod
    def from_json(cls, d):
        return cls(d["name"], d["shape"], d["dtype"], d.get("output", False))

    def __repr__(self):
        kind = "out" if self.output else "in"
        return f"Param({self.name!r}, {self.shape}, {self.dtype!r}, {kind})"


def attention_params(variant, B, T, H, K, V, HV=None, *, dtype="f32", has_initial_state=False,
                     output_final_state=True, cu_seqlens_len=None, backward=False, HQ=None):
    """The parameters of the function that :func:`la.runner.attention_mlir`
    writes for these arguments, in order: ``q, k, v, [g], [beta], [erase],
    [write], [initial_state], [cu_seqlens]``, then the out-parameters ``o``
    and ``[final_state]``. The names are those of
    :func:`la.testing.make_inputs`.

    With ``backward``, those of its gradient function (la-derive-backward):
    the same inputs, the cotangents ``do`` (o's type) and
    ``[d_final_state]``, then one f32 out-parameter ``d<name>`` per
    differentiable input (``dq, dk, dv, [dg], [dbeta], [derase], [dwrite],
    [dinitial_state]``).

    ``HQ`` (grouped query heads, as :func:`la.runner.attention_mlir`) gives q,
    o (and dq, do) ``HQ`` heads."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; expected one of {tuple(VARIANTS)}")
    HV = H if HV is None else HV
    N = B if cu_seqlens_len is None else cu_seqlens_len - 1
    HQ = H if HQ is None else HQ
    shapes = dict(token_operand_shapes(variant, B, T, H, K, V, HV))
    shapes["q"] = (B, T, HQ, K)
    params = [Param(name, shape, dtype if name in ("q", "k", "v") else "f32")
              for name, shape in shapes.items()]
    if has_initial_state:
        params.append(Param("initial_state", (N, HV, K, V), "f32"))
    if cu_seqlens_len is not None:
        params.append(Param("cu_seqlens", (cu_seqlens_len,), "i32"))
    outputs = [Param("o", (B, T, HV if HQ == H else HQ, V), dtype, output=True)]
    if output_final_state:
        outputs.append(Param("final_state", (N, HV, K, V), "f32", output=True))
    if not backward:
        return params + outputs
    cotangents = [Param("do", outputs[0].shape, dtype)]
    if output_final_state:
        cotangents.append(Param("d_final_state", (N, HV, K, V), "f32"))
    gradients = [Param("d" + p.name, p.shape, "f32", output=True)
                 for p in params if p.name in _DIFFERENTIABLE]
    return params + cotangents + gradients


def _manifest_path(library_path):
    return os.path.splitext(library_path)[0] + ".json"


def _tool_stamp(path):
    try:
        st = os.stat(path)
        return [os.path.realpath(path), st.st_size, st.st_mtime_ns]
    except (OSError, TypeError):
        return [path]


def _gradient_mlir(mlir, checkpoint):
    """The gradient function (``@attention_grad``) that la-derive-backward
    makes of the forward module ``mlir``, in place of the forward."""
    module = ir.Module.parse(mlir)
    ir.PassManager.parse(f"builtin.module(la-derive-backward{{checkpoint={int(checkpoint)} "
                         "keep-forward=0})").run(module)
    return module.to_text()


def compile_attention(output_path, variant, B, T, H, K, V, HV=None, *, dtype="f32",
                      has_initial_state=False, output_final_state=True, cu_seqlens_len=None,
                      pipeline_options=None, force=False, backward=False, HQ=None, **attrs):
    """Compiles one ``la.attention`` layer (:func:`la.runner.attention_mlir`
    with these arguments; ``attrs`` are its ``scale``, ``qk_l2norm``, ...)
    into the library ``output_path``, and writes its manifest (same name,
    ``.json``): the variant, the sizes, the dtype, the parameter list (see
    :func:`attention_params`), the pipeline options and a key of everything
    that went in. Skips the work when the library and a manifest with the
    same key are there already, unless ``force``. Returns the manifest.

    With ``backward``, the library holds the layer's gradient function
    instead (entry ``attention_grad``, derived by la-derive-backward and
    lowered by la-lower-to-nvvm: the adjoint recurrences and the kernels
    between them); :meth:`AttentionKernel.run` then returns the gradients.
    Packed sequences (``cu_seqlens_len``) run one block per sequence and
    value head (tile), forward and backward.

    ``HQ`` (a multiple of ``H``, with ``HV == H``) compiles grouped query
    heads: q and o with ``HQ`` heads over ``H`` key/value heads and states.

    Without a ``chunk-size`` in ``pipeline_options``, a default chunk (16)
    whose buffers do not fit the shared memory (the general low-rank form
    of Gated DeltaNet-2 and RWKV-7 at K = V = 128 with an initial state and
    without value tiles) is halved to 8; the manifest's
    ``pipeline_options`` record the chunk size used.
    """
    HV = H if HV is None else HV
    mlir = runner.attention_mlir(variant, B, T, H, K, V, HV, dtype=dtype,
                                 has_initial_state=has_initial_state,
                                 output_final_state=output_final_state,
                                 cu_seqlens_len=cu_seqlens_len, name="attention", HQ=HQ,
                                 **attrs)
    params = attention_params(variant, B, T, H, K, V, HV, dtype=dtype,
                              has_initial_state=has_initial_state,
                              output_final_state=output_final_state,
                              cu_seqlens_len=cu_seqlens_len, backward=backward, HQ=HQ)
    options = dict(pipeline_options or {})
    entry = "attention"
    if backward:
        try:
            mlir = _gradient_mlir(mlir, options.get("chunk-size", DEFAULT_CHUNK))
        except LaError as error:
            raise GpuCompileError(f"deriving the backward failed:\n{_clip(str(error))}",
                                  step="derive", stderr=str(error)) from None
        entry = "attention_grad"
    key = hashlib.sha256(json.dumps(
        [_MANIFEST_FORMAT, mlir, pipeline_spec(options), _tool_stamp(_capi.library_path()),
         _tool_stamp(find_clang()), _tool_stamp(cuda.library_path())],
        sort_keys=True).encode()).hexdigest()
    output_path = os.path.abspath(output_path)
    manifest_path = _manifest_path(output_path)
    if not force and os.path.isfile(output_path) and os.path.isfile(manifest_path):
        try:
            with open(manifest_path) as f:
                old = json.load(f)
            if old.get("key") == key:
                if cuda.library_path():
                    _copy_runtime(cuda.library_path(), os.path.dirname(output_path))
                return old
        except (OSError, ValueError):
            pass
    options = _compile_fitting_chunk(mlir, output_path, entry, options)
    manifest = {
        "format": _MANIFEST_FORMAT,
        "library": os.path.basename(output_path),
        "entry": entry,
        "backward": bool(backward),
        "variant": variant,
        "sizes": {"B": B, "T": T, "H": H, "K": K, "V": V, "HV": HV,
                  "HQ": H if HQ is None else HQ},
        "dtype": dtype,
        "has_initial_state": bool(has_initial_state),
        "output_final_state": bool(output_final_state),
        "attrs": {k: v for k, v in attrs.items()},
        "pipeline_options": options,
        "params": [p.to_json() for p in params],
        "key": key,
        "mlir": mlir,
    }
    tmp = manifest_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1, default=str)
    os.replace(tmp, manifest_path)
    return manifest


#: la-lower-to-nvvm's default chunk size (LowerToNVVMOptions)
DEFAULT_CHUNK = 16

#: chunk sizes tried, in order, when the default chunk's buffers exceed the
#: shared memory (la-map-to-gpu's error)
_FALLBACK_CHUNKS = (8,)


def _compile_fitting_chunk(mlir, output_path, entry, options):
    """compile_library with ``options``; without an explicit chunk size, on
    la-map-to-gpu's shared-memory error, again with the smaller chunks of
    _FALLBACK_CHUNKS. Returns the options that compiled."""
    candidates = [options]
    if "chunk-size" not in options:
        candidates += [dict(options, **{"chunk-size": c}) for c in _FALLBACK_CHUNKS]
    for index, candidate in enumerate(candidates):
        try:
            compile_library(mlir, output_path, entry=entry, pipeline_options=candidate)
            return candidate
        except GpuCompileError as error:
            last = index + 1 == len(candidates)
            if last or "shared memory for a chunk" not in error.stderr:
                raise


def _to_device_bytes(array, dtype):
    """The host bytes that the device holds for ``array`` as ``dtype``."""
    if dtype == "bf16":
        rounded = runner.round_to_bf16(array)
        return (rounded.view(np.uint32) >> 16).astype(np.uint16)
    return np.ascontiguousarray(array, dtype=_ELEMENT[dtype][1])


def _from_device_bytes(raw, dtype):
    """Host values of device bytes: bf16 widened to float32."""
    if dtype == "bf16":
        return (raw.astype(np.uint32) << 16).view(np.float32)
    return raw


class AttentionKernel(GpuFunction):
    """A library from :func:`compile_attention`, loaded with its manifest
    (``self.manifest``; ``self.params``, ``self.inputs``, ``self.outputs``
    are :class:`Param` lists)."""

    def __init__(self, path, manifest=None):
        if manifest is None:
            with open(_manifest_path(path)) as f:
                manifest = json.load(f)
        if manifest.get("format") != _MANIFEST_FORMAT:
            raise LaError(f"{_manifest_path(path)}: manifest format "
                          f"{manifest.get('format')}, expected {_MANIFEST_FORMAT}: recompile")
        self.manifest = manifest
        self.params = [Param.from_json(p) for p in manifest["params"]]
        self.inputs = [p for p in self.params if not p.output]
        self.outputs = [p for p in self.params if p.output]
        self.variant = manifest["variant"]
        self.dtype = manifest["dtype"]
        super().__init__(path, manifest["entry"], [p.shape for p in self.params],
                         [p.dtype for p in self.params], [p.name for p in self.params])

    def run(self, inputs, *, fill=0.0):
        """Runs on NumPy inputs (a :func:`la.testing.make_inputs`-style dict;
        extra keys such as ``log_decay`` are ignored): copies them to device
        buffers (q, k, v rounded to the kernel's dtype, the rest converted to
        f32 / i32), calls the function on output buffers filled with ``fill``,
        and returns ``(o, final_state)`` as NumPy arrays (bf16 widened to
        float32; ``final_state`` None without one).

        A backward kernel (``compile_attention(backward=True)``) also takes
        ``do`` and, when the forward returns it, ``d_final_state`` in
        ``inputs``, and returns a dict from input name to its gradient
        (float32)."""
        buffers = []
        try:
            pointers = []
            for p in self.params:
                if p.output:
                    host = np.full(p.shape, fill, dtype=np.float32)
                else:
                    if p.name not in inputs:
                        raise ValueError(f"{self.variant} needs input {p.name!r}")
                    host = np.asarray(inputs[p.name])
                    if host.shape != p.shape:
                        raise ValueError(f"{p.name}: shape {host.shape}, expected {p.shape}")
                buffer = DeviceBuffer.from_array(_to_device_bytes(host, p.dtype))
                buffers.append(buffer)
                pointers.append(buffer.ptr)
            self(*pointers)
            results = []
            for p, buffer in zip(self.params, buffers):
                if p.output:
                    raw = buffer.to_array(p.shape, _ELEMENT[p.dtype][1])
                    results.append(_from_device_bytes(raw, p.dtype))
        finally:
            for buffer in buffers:
                buffer.free()
        if self.manifest.get("backward"):
            return {p.name[1:]: value for p, value in zip(self.outputs, results)}
        return results[0], (results[1] if len(results) > 1 else None)


def load_attention(path):
    """An :class:`AttentionKernel` for a library written by
    :func:`compile_attention` (its manifest next to it)."""
    return AttentionKernel(path)
