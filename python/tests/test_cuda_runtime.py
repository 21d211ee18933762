"""la.cuda: the CUDA runtime library (libla_cuda_runtime.so) through ctypes.

``available()`` must answer on every machine -- with a GPU, without a driver,
or without the library built; the device checks run only where there is a
GPU. None of these tests needs libLaCAPI.so.
"""

import os
import subprocess
import sys

import pytest

from la import cuda

AVAILABLE, REASON = cuda.available()
needs_gpu = pytest.mark.skipif(not AVAILABLE, reason=f"no CUDA GPU: {REASON}")
needs_library = pytest.mark.skipif(
    cuda.library_path() is None, reason="libla_cuda_runtime.so is not built"
)


def test_available_answers():
    ok, reason = cuda.available()
    assert isinstance(ok, bool)
    assert isinstance(reason, str) and reason
    assert (ok, reason) == (AVAILABLE, REASON)


@needs_library
def test_library_path_override(monkeypatch):
    path = cuda.library_path()
    assert os.path.basename(path) == "libla_cuda_runtime.so"
    monkeypatch.setenv("LA_CUDA_RUNTIME_LIB", path)
    assert cuda.library_path() == path


def test_missing_library_is_a_reason():
    # A fresh interpreter that cannot find the library at all.
    env = dict(os.environ, LA_CUDA_RUNTIME_LIB="", LA_BUILD_DIR="/nonexistent")
    code = (
        "import la.cuda as c; c._REPO = '/nonexistent'; c._HERE = '/nonexistent';"
        "print(c.library_path()); print(c.available())"
    )
    python_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=python_dir, capture_output=True,
        text=True, check=True,
    ).stdout.splitlines()
    assert out[0] == "None"
    assert out[1].startswith("(False, 'libla_cuda_runtime.so not found")


@needs_library
def test_no_gpu_reason_names_the_driver():
    if AVAILABLE:
        pytest.skip("a GPU is available")
    assert "libcuda" in REASON or "cuInit" in REASON or "device" in REASON
    assert cuda.device_name() is None
    assert cuda.compute_capability() is None


@needs_library
def test_last_error_clears():
    cuda.last_error()
    assert cuda.last_error() is None


@needs_gpu
def test_device_name():
    name = cuda.device_name()
    assert isinstance(name, str) and name
    assert "(sm_" in name
    assert REASON == name


@needs_gpu
def test_compute_capability():
    major, minor = cuda.compute_capability()
    assert major >= 5 and minor >= 0
    assert f"(sm_{major}{minor})" in cuda.device_name()
