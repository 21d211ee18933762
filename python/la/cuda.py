"""ctypes bindings of la's CUDA runtime (include/la-c/CudaRuntime.h).

``libla_cuda_runtime.so`` implements the ``mgpu*`` functions that host code
lowered by MLIR's ``gpu-to-llvm`` calls, on the CUDA driver API, which it
loads at run time: it is there (and loads) on machines without a GPU, where
``available()`` says why there is none.

The library is looked up in this order: ``$LA_CUDA_RUNTIME_LIB``; next to
this file (an installed wheel); ``$LA_BUILD_DIR/lib``; ``<repo>/build/lib``.
It is loaded with ``RTLD_GLOBAL``, so that code JIT-compiled in this process
finds its ``mgpu*`` symbols.
"""

import ctypes
import os

from ._capi import find_library

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(os.path.dirname(_HERE))
_NAME = "libla_cuda_runtime.so"
_TEXT_SIZE = 1024

_lib = None


def library_path():
    """Path of libla_cuda_runtime.so, or None when it cannot be found."""
    return find_library(_NAME, "LA_CUDA_RUNTIME_LIB", _HERE, _REPO)


def lib():
    """The loaded runtime library, or None when it is not built."""
    global _lib
    if _lib is not None:
        return _lib
    path = library_path()
    if path is None:
        return None
    handle = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    text = [ctypes.c_char_p, ctypes.c_size_t]
    sigs = {
        "laCudaAvailable": (ctypes.c_int, text),
        "laCudaDeviceName": (ctypes.c_int, text),
        "laCudaComputeCapability": (ctypes.c_int, [ctypes.POINTER(ctypes.c_int)] * 2),
        "laCudaLastError": (ctypes.c_int, text),
        "laCudaSetErrorPrinting": (None, [ctypes.c_int]),
        "laCudaSynchronize": (ctypes.c_int, []),
    }
    for name, (restype, argtypes) in sigs.items():
        function = getattr(handle, name)
        function.restype = restype
        function.argtypes = argtypes
    _lib = handle
    return _lib


def _text_call(function):
    buffer = ctypes.create_string_buffer(_TEXT_SIZE)
    ok = function(buffer, _TEXT_SIZE)
    return bool(ok), buffer.value.decode("utf-8", "replace")


def available():
    """``(True, device name)`` when the runtime finds a CUDA driver and a GPU,
    else ``(False, reason)`` -- e.g. the library is not built, libcuda.so.1 is
    missing or cuInit failed."""
    handle = lib()
    if handle is None:
        return False, (
            f"{_NAME} not found: build the project (ninja -C build la_cuda_runtime) "
            "or set LA_CUDA_RUNTIME_LIB"
        )
    ok, reason = _text_call(handle.laCudaAvailable)
    if not ok:
        return False, reason or "no CUDA device"
    name = device_name()
    return True, name or "CUDA device"


def device_name():
    """The default device's name and compute capability, e.g.
    ``"NVIDIA H200 (sm_90)"``; None when there is no GPU."""
    handle = lib()
    if handle is None:
        return None
    ok, name = _text_call(handle.laCudaDeviceName)
    return name if ok else None


def compute_capability():
    """``(major, minor)`` of the default device, or None without a GPU."""
    handle = lib()
    if handle is None:
        return None
    major, minor = ctypes.c_int(), ctypes.c_int()
    if not handle.laCudaComputeCapability(ctypes.byref(major), ctypes.byref(minor)):
        return None
    return major.value, minor.value


def last_error():
    """The text of the runtime calls that failed since the previous query
    (which clears it), or None when none failed."""
    handle = lib()
    if handle is None:
        return None
    ok, text = _text_call(handle.laCudaLastError)
    return text if ok else None
