"""libla_host_runtime.so: the caching allocator that CPU kernels lowered with
``la-lower-to-cpu{host-allocator}`` call (la-run's and the Python package's
kernels), and its effect on a kernel called twice."""

import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest

import la
from la import _capi
from la import testing as lt

PATH = _capi.find_library("libla_host_runtime.so", "LA_HOST_RUNTIME_LIB")
pytestmark = pytest.mark.skipif(PATH is None, reason="libla_host_runtime.so is not built")

MIB = 1 << 20


def _lib():
    lib = ctypes.CDLL(PATH)
    lib._mlir_memref_to_llvm_alloc.restype = ctypes.c_void_p
    lib._mlir_memref_to_llvm_alloc.argtypes = [ctypes.c_size_t]
    lib._mlir_memref_to_llvm_free.argtypes = [ctypes.c_void_p]
    lib.laHostCachedBytes.restype = ctypes.c_size_t
    return lib


def test_large_blocks_are_kept_and_reused():
    lib = _lib()
    lib.laHostReleaseCached()
    assert lib.laHostCachedBytes() == 0
    block = lib._mlir_memref_to_llvm_alloc(3 * MIB)
    assert block
    ctypes.memset(block, 7, 3 * MIB)  # the whole block is usable
    lib._mlir_memref_to_llvm_free(block)
    assert lib.laHostCachedBytes() == 3 * MIB
    # The same size gets the same block back; another size a new one.
    again = lib._mlir_memref_to_llvm_alloc(3 * MIB)
    assert again == block and lib.laHostCachedBytes() == 0
    other = lib._mlir_memref_to_llvm_alloc(2 * MIB)
    assert other not in (0, None, block)
    lib._mlir_memref_to_llvm_free(again)
    lib._mlir_memref_to_llvm_free(other)
    assert lib.laHostCachedBytes() == 5 * MIB
    lib.laHostReleaseCached()
    assert lib.laHostCachedBytes() == 0


def test_small_blocks_and_null():
    lib = _lib()
    lib.laHostReleaseCached()
    small = lib._mlir_memref_to_llvm_alloc(4096)
    assert small
    lib._mlir_memref_to_llvm_free(small)
    lib._mlir_memref_to_llvm_free(None)  # like free(NULL)
    assert lib.laHostCachedBytes() == 0


def test_the_limit_bounds_what_is_kept():
    # LA_HOST_CACHE_BYTES is read when the library first allocates: a fresh
    # process holds at most that many bytes; an invalid value keeps the
    # default.
    script = (
        "import ctypes, sys\n"
        f"lib = ctypes.CDLL({PATH!r})\n"
        "lib._mlir_memref_to_llvm_alloc.restype = ctypes.c_void_p\n"
        "lib._mlir_memref_to_llvm_alloc.argtypes = [ctypes.c_size_t]\n"
        "lib._mlir_memref_to_llvm_free.argtypes = [ctypes.c_void_p]\n"
        "lib.laHostCachedBytes.restype = ctypes.c_size_t\n"
        "blocks = [lib._mlir_memref_to_llvm_alloc((1 << 20) * (i + 1)) for i in range(3)]\n"
        "for b in blocks: lib._mlir_memref_to_llvm_free(b)\n"
        "print(lib.laHostCachedBytes())\n")
    def cached(limit):
        env = dict(os.environ, LA_HOST_CACHE_BYTES=limit)
        out = subprocess.run([sys.executable, "-c", script], env=env, check=True,
                             capture_output=True, text=True).stdout
        return int(out)
    assert cached("0") == 0
    assert cached(str(3 * MIB)) == 3 * MIB  # 1 MiB + 2 MiB fit, 3 MiB does not
    assert cached("lots") == 6 * MIB


def test_a_backward_called_twice_reuses_its_buffers():
    lib = _lib()
    lib.laHostReleaseCached()
    inputs = lt.make_inputs("gated_deltanet", 1, 2048, 4, 32, 32, seed=3)
    do = np.random.default_rng(4).standard_normal((1, 2048, 4, 32)).astype(np.float32)
    args = [inputs[n] for n in ("q", "k", "v", "g", "beta")]
    first = la.attention_backward("gated_deltanet", *args, do=do, chunk_size=32)
    kept = lib.laHostCachedBytes()
    assert kept >= MIB  # its temporaries of T * H * K floats stayed
    second = la.attention_backward("gated_deltanet", *args, do=do, chunk_size=32)
    assert lib.laHostCachedBytes() == kept
    for name in first:
        np.testing.assert_array_equal(first[name], second[name])
    # and the values are the gradients (finite, against a forward difference
    # of the fp64 reference in one direction)
    direction = np.random.default_rng(5).standard_normal(args[2].shape)
    def loss(v):
        x = dict(inputs, v=v)
        return (lt.reference_for("gated_deltanet", x)[0] * do).sum()
    eps = 1e-4
    numeric = (loss(inputs["v"] + eps * direction) - loss(inputs["v"] - eps * direction)) / (2 * eps)
    analytic = (first["v"] * direction).sum()
    assert abs(numeric - analytic) <= 1e-3 * abs(numeric)
