"""la.gpu: ahead-of-time GPU libraries, compiled and called without a GPU.

The library that :func:`la.gpu.compile_library` writes must export
``_mlir_ciface_attention``, link ``libla_cuda_runtime.so`` and find it next
to itself (``$ORIGIN``). Calls go through the fake CUDA driver of
test/Runtime/Inputs/mock-cuda-driver.cpp (selected with LA_CUDA_DRIVER): it
accepts the cubin and prints each launch instead of running it, and its
"device memory" is host memory, so the copies of :meth:`AttentionKernel.run`
round-trip. The runtime loads its driver once per process, so each call runs
in a subprocess.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from la import gpu, runner
from la.testing import VARIANTS

_PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_REPO = os.path.dirname(_PYTHON_DIR)
_MOCK_SOURCE = os.path.join(_REPO, "test", "Runtime", "Inputs", "mock-cuda-driver.cpp")

MISSING = gpu.missing_tools()
needs_tools = pytest.mark.skipif(
    bool(MISSING), reason="cannot compile GPU libraries: " + "; ".join(MISSING))


def _tool(*names):
    for name in names:
        path = shutil.which(name) or (os.path.join("/usr/lib/llvm-22/bin", name)
                                      if os.path.isfile(os.path.join("/usr/lib/llvm-22/bin", name))
                                      else None)
        if path:
            return path
    return None


READELF = _tool("llvm-readelf-22", "llvm-readelf", "readelf")
NM = _tool("llvm-nm-22", "llvm-nm", "nm")
CXX = os.environ.get("CXX") or _tool("clang++-22", "clang++", "g++")


@pytest.fixture(scope="module")
def gla_library(tmp_path_factory):
    """A GLA layer (B=2, T=128, H=2, K=V=64, initial state) as f32 and bf16
    libraries in one directory."""
    if MISSING:
        pytest.skip("cannot compile GPU libraries: " + "; ".join(MISSING))
    directory = tmp_path_factory.mktemp("gpu-aot")
    paths = {}
    for dtype in ("f32", "bf16"):
        path = str(directory / f"gla-{dtype}.so")
        gpu.compile_attention(path, "gla", 2, 128, 2, 64, 64, dtype=dtype,
                              has_initial_state=True)
        paths[dtype] = path
    return paths


@pytest.fixture(scope="module")
def mock_driver(tmp_path_factory):
    """The fake libcuda.so.1, built for this session."""
    if CXX is None:
        pytest.skip("no C++ compiler to build the fake CUDA driver")
    if not os.path.isfile(_MOCK_SOURCE):
        pytest.skip(f"{_MOCK_SOURCE} is missing")
    directory = tmp_path_factory.mktemp("mock-driver")
    path = str(directory / "libcuda.so.1")
    subprocess.run([CXX, "-std=c++17", "-shared", "-fPIC", "-o", path, _MOCK_SOURCE],
                   check=True, capture_output=True, text=True)
    return path


def _python(code, driver, **env):
    """Runs ``code`` in a fresh interpreter with the fake driver; returns the
    CompletedProcess."""
    environment = dict(os.environ, LA_CUDA_DRIVER=driver,
                       PYTHONPATH=_PYTHON_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
    environment.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=environment,
                          capture_output=True, text=True, timeout=300)


# --------------------------------------------------------------------------
# without tools
# --------------------------------------------------------------------------

def test_pipeline_spec():
    assert gpu.pipeline_spec() == (
        "builtin.module(func.func(llvm-request-c-wrappers),la-lower-to-nvvm)")
    spec = gpu.pipeline_spec({"chunk_size": 16, "value-tile": 64, "ptxas-options": "-v -O3",
                              "format": None}, c_wrappers=False)
    assert spec == 'builtin.module(la-lower-to-nvvm{chunk-size=16 value-tile=64 ' \
                   'ptxas-options="-v -O3"})'
    with pytest.raises(ValueError):
        gpu.pipeline_spec({"ptxas-options": 'a "b"'})


_ARG_RE = re.compile(r"%(\w+): tensor<([0-9x]+)x(f32|f16|bf16|i32)>")


def _signature(mlir):
    """The (shape, element type) of the function's arguments and results."""
    header, results = mlir.split("->", 1)
    args = [(tuple(int(d) for d in shape.split("x")), elt)
            for _, shape, elt in _ARG_RE.findall(header)]
    outs = [(tuple(int(d) for d in m[0].split("x")), m[1])
            for m in re.findall(r"tensor<([0-9x]+)x(f32|f16|bf16|i32)>",
                                results.split("{", 1)[0])]
    return args, outs


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("state", [False, True])
def test_attention_params_follow_the_mlir_signature(variant, state):
    # The parameters, in order, are the function's arguments and then its
    # results (out-parameters), with the same shapes and element types.
    kwargs = dict(dtype="bf16", has_initial_state=state, output_final_state=state)
    args, outs = _signature(runner.attention_mlir(variant, 2, 8, 2, 4, 6, 4, **kwargs))
    params = gpu.attention_params(variant, 2, 8, 2, 4, 6, 4, **kwargs)
    assert [(p.shape, p.dtype) for p in params if not p.output] == args
    assert [(p.shape, p.dtype) for p in params if p.output] == outs
    assert [p.name for p in params if p.output] == ["o"] + (["final_state"] if state else [])


def test_missing_tools_is_a_list_of_reasons():
    assert isinstance(MISSING, list)
    assert all(isinstance(m, str) and m for m in MISSING)


def test_missing_clang_is_a_clear_error(tmp_path, monkeypatch):
    """The lowering runs in this process (la's C API); clang is the one
    external tool, and a bad LA_CLANG says so, leaving no output."""
    monkeypatch.setenv("LA_CLANG", str(tmp_path / "no-clang"))
    if gpu.cuda.library_path() is None or gpu.find_ptxas() is None:
        pytest.skip("needs the runtime and ptxas to reach clang")
    mlir = runner.attention_mlir("gla", 1, 32, 1, 16, 16)
    with pytest.raises(gpu.GpuCompileError, match="clang: cannot run") as info:
        gpu.compile_library(mlir, str(tmp_path / "x.so"))
    assert info.value.step == "clang"
    assert not os.path.exists(tmp_path / "x.so")


# --------------------------------------------------------------------------
# compiling
# --------------------------------------------------------------------------

@needs_tools
def test_library_exports_the_entry_and_links_the_runtime(gla_library):
    path = gla_library["f32"]
    if NM is None or READELF is None:
        pytest.skip("needs llvm-nm/nm and llvm-readelf/readelf")
    symbols = subprocess.run([NM, "-D", "--defined-only", path], capture_output=True,
                             text=True, check=True).stdout
    assert re.search(r"\bT _mlir_ciface_attention$", symbols, re.M), symbols
    dynamic = subprocess.run([READELF, "-d", path], capture_output=True, text=True,
                             check=True).stdout
    assert re.search(r"NEEDED.*\[libla_cuda_runtime\.so\]", dynamic), dynamic
    assert re.search(r"(RUNPATH|RPATH).*\[\$ORIGIN\]", dynamic), dynamic
    # No LLVM or MLIR library is needed at run time.
    assert "libMLIR" not in dynamic and "libLLVM" not in dynamic
    undefined = subprocess.run([NM, "-D", "--undefined-only", path], capture_output=True,
                               text=True, check=True).stdout
    assert "mgpuLaunchKernel" in undefined and "mgpuModuleLoad" in undefined
    # The runtime is copied next to the library, where $ORIGIN finds it.
    assert os.path.isfile(os.path.join(os.path.dirname(path), "libla_cuda_runtime.so"))


@needs_tools
def test_manifest(gla_library):
    path = gla_library["bf16"]
    with open(os.path.splitext(path)[0] + ".json") as f:
        manifest = json.load(f)
    assert manifest["variant"] == "gla" and manifest["dtype"] == "bf16"
    assert manifest["library"] == os.path.basename(path)
    names = [p["name"] for p in manifest["params"]]
    assert names == ["q", "k", "v", "g", "initial_state", "o", "final_state"]
    assert [p["dtype"] for p in manifest["params"]] == \
        ["bf16", "bf16", "bf16", "f32", "f32", "bf16", "f32"]
    # A second compile with the same inputs is skipped (same key, same file).
    mtime = os.stat(path).st_mtime_ns
    again = gpu.compile_attention(path, "gla", 2, 128, 2, 64, 64, dtype="bf16",
                                  has_initial_state=True)
    assert again["key"] == manifest["key"]
    assert os.stat(path).st_mtime_ns == mtime


@needs_tools
def test_compile_errors_carry_the_tool_output(tmp_path):
    with pytest.raises(gpu.GpuCompileError) as info:
        gpu.compile_library("func.func @attention( {", str(tmp_path / "bad.so"))
    assert info.value.step == "parse"
    assert "parsing the MLIR failed" in str(info.value) and info.value.stderr
    assert not os.path.exists(tmp_path / "bad.so")

    mlir = runner.attention_mlir("gla", 1, 32, 1, 16, 16)
    with pytest.raises(gpu.GpuCompileError) as info:
        gpu.compile_library(mlir, str(tmp_path / "x.so"), pipeline_options={"chunk-size": "abc"})
    assert info.value.step == "lower" and "chunk-size" in info.value.stderr
    assert "lowering failed" in str(info.value)

    with pytest.raises(gpu.GpuCompileError) as info:
        gpu.compile_library(mlir, str(tmp_path / "y.so"), entry="other")
    assert info.value.step == "check" and "_mlir_ciface_other" in str(info.value)
    assert not os.path.exists(tmp_path / "y.so")


@needs_tools
def test_pipeline_options_reach_the_kernels(tmp_path, mock_driver):
    # value-tile=64 on V=64: one block per (batch, head); 64 threads.
    path = str(tmp_path / "gdn.so")
    gpu.compile_attention(path, "gated_deltanet", 1, 64, 3, 32, 64,
                          pipeline_options={"value-tile": 64, "threads-per-block": 64,
                                            "chunk-size": 16})
    proc = _python(f"""
        import numpy as np
        from la import gpu
        kernel = gpu.load_attention({path!r})
        kernel(*[np.zeros(p.shape, np.float32).ctypes.data for p in kernel.params])
        """, mock_driver)
    assert proc.returncode == 0, proc.stderr
    assert "mock launch: attention_kernel grid 1x3x1 block 64x1x1" in proc.stderr


# --------------------------------------------------------------------------
# calling, through the fake driver
# --------------------------------------------------------------------------

@needs_tools
def test_call_with_pointers_launches_the_kernel(gla_library, mock_driver):
    # The fake driver never reads kernel arguments, so host buffers stand in
    # for device memory. B = 2, HV = 2, V = 64 in value tiles of 16 (the
    # default): a grid of 2 x 2 x 4 blocks of 256 threads.
    proc = _python(f"""
        import numpy as np
        from la import gpu
        shapes = [(2, 128, 2, 64)] * 4 + [(2, 2, 64, 64), (2, 128, 2, 64), (2, 2, 64, 64)]
        fn = gpu.load_library({gla_library["f32"]!r}, "attention", shapes)
        buffers = [np.zeros(s, np.float32) for s in shapes]
        fn(*[b.ctypes.data for b in buffers])
        try:
            fn(1, 2, 3)
        except TypeError as error:
            print("TypeError:", error)
        print("done")
        """, mock_driver)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^mock launch: attention_kernel grid 2x2x4 block 256x1x1 shared \d+$",
                     proc.stderr, re.M), proc.stderr
    assert "TypeError: attention takes 7 pointers" in proc.stdout
    assert proc.stdout.rstrip().endswith("done")


@needs_tools
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_run_on_numpy_round_trips_device_buffers(gla_library, mock_driver, dtype):
    # The fake driver runs no kernel: the outputs come back as they were
    # filled, through mgpuMemAlloc / mgpuMemcpy and the bf16 conversion.
    proc = _python(f"""
        import numpy as np
        from la import gpu, testing
        kernel = gpu.load_attention({gla_library[dtype]!r})
        inputs = testing.make_inputs("gla", 2, 128, 2, 64, 64, with_initial_state=True)
        o, s = kernel.run(inputs, fill=1.5)
        assert o.shape == (2, 128, 2, 64) and o.dtype == np.float32, (o.shape, o.dtype)
        assert s.shape == (2, 2, 64, 64) and s.dtype == np.float32
        assert np.all(o == 1.5) and np.all(s == 1.5)
        try:
            kernel.run({{"q": inputs["q"]}})
        except ValueError as error:
            print("ValueError:", error)
        print("ok", kernel.variant, kernel.dtype)
        """, mock_driver)
    assert proc.returncode == 0, proc.stderr
    assert f"ok gla {dtype}" in proc.stdout
    assert "ValueError: gla needs input 'k'" in proc.stdout
    assert proc.stderr.count("mock launch: attention_kernel grid 2x2x4") == 1


@needs_tools
def test_library_runs_with_only_its_own_runtime_copy(gla_library, mock_driver, tmp_path):
    # As on a machine without the build tree: the library and its runtime
    # copy in one folder, la.cuda finding no runtime of its own.
    folder = tmp_path / "kernels"
    folder.mkdir()
    source = os.path.dirname(gla_library["f32"])
    for name in ("gla-f32.so", "gla-f32.json", "libla_cuda_runtime.so"):
        shutil.copy2(os.path.join(source, name), folder / name)
    proc = _python(f"""
        import numpy as np
        import la.cuda as c
        c._REPO = "/nonexistent"; c._HERE = "/nonexistent"
        assert c.library_path() is None
        from la import gpu
        kernel = gpu.load_attention({str(folder / "gla-f32.so")!r})
        kernel(*[np.zeros(p.shape, np.float32).ctypes.data for p in kernel.params])
        print(c.library_path())
        """, mock_driver, LA_CUDA_RUNTIME_LIB="", LA_BUILD_DIR="/nonexistent")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(folder / "libla_cuda_runtime.so")
    assert "mock launch: attention_kernel" in proc.stderr


@needs_tools
def test_no_driver_is_a_clear_error(gla_library, tmp_path):
    proc = _python(f"""
        from la import gpu
        try:
            gpu.load_attention({gla_library["f32"]!r})
        except gpu.GpuRuntimeError as error:
            print("GpuRuntimeError:", error)
        """, str(tmp_path / "nothing.so"))
    assert proc.returncode == 0, proc.stderr
    assert "GpuRuntimeError: no CUDA GPU:" in proc.stdout
    assert "nothing.so" in proc.stdout


@needs_tools
def test_backward_library(tmp_path, mock_driver):
    # The gradient function of a Gated DeltaNet layer (grouped value heads, T
    # not a multiple of the chunk): its parameters, then a call through the
    # fake driver, which launches the adjoint recurrences' task kernels and
    # the kernels between them and runs none (the gradients come back as
    # their buffers were filled).
    path = str(tmp_path / "gdn-grad.so")
    manifest = gpu.compile_attention(path, "gated_deltanet", 1, 40, 2, 32, 32, HV=4,
                                     has_initial_state=True, backward=True, qk_l2norm=True)
    assert manifest["entry"] == "attention_grad" and manifest["backward"]
    assert [(p["name"], p["output"]) for p in manifest["params"]] == [
        ("q", False), ("k", False), ("v", False), ("g", False), ("beta", False),
        ("initial_state", False), ("do", False), ("d_final_state", False),
        ("dq", True), ("dk", True), ("dv", True), ("dg", True), ("dbeta", True),
        ("dinitial_state", True)]
    proc = _python(f"""
        import numpy as np
        from la import gpu, testing
        kernel = gpu.load_attention({path!r})
        inputs = testing.make_inputs("gated_deltanet", 1, 40, 2, 32, 32, HV=4,
                                     with_initial_state=True)
        inputs["do"] = np.ones((1, 40, 4, 32), np.float32)
        inputs["d_final_state"] = np.ones((1, 4, 32, 32), np.float32)
        grads = kernel.run(inputs, fill=1.5)
        assert all(np.all(x == 1.5) for x in grads.values())
        print(sorted((name, x.shape) for name, x in grads.items()))
        """, mock_driver)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(sorted(
        [("beta", (1, 40, 2)), ("g", (1, 40, 2)), ("initial_state", (1, 4, 32, 32)),
         ("k", (1, 40, 2, 32)), ("q", (1, 40, 2, 32)), ("v", (1, 40, 4, 32))]))
    # Six adjoint recurrences, each its own task kernel, and more than as many
    # element-wise kernels around them.
    launches = re.findall(r"^mock launch: attention_grad_kernel\S* grid", proc.stderr, re.M)
    assert len(launches) > 12, proc.stderr


@needs_tools
def test_packed_sequences_library(tmp_path, mock_driver):
    # Packed sequences: a kernel that zero-fills the output, then one block
    # per (sequence, value head, value tile) = 3 x 2 x 2, each reading its
    # offsets from cu_seqlens (the library's parameter after the initial
    # state).
    path = str(tmp_path / "gdn-packed.so")
    manifest = gpu.compile_attention(path, "gated_deltanet", 1, 50, 2, 32, 32,
                                     has_initial_state=True, cu_seqlens_len=4)
    assert [p["name"] for p in manifest["params"]] == [
        "q", "k", "v", "g", "beta", "initial_state", "cu_seqlens", "o", "final_state"]
    proc = _python(f"""
        import numpy as np
        from la import gpu, testing
        kernel = gpu.load_attention({path!r})
        inputs = testing.make_inputs("gated_deltanet", 1, 50, 2, 32, 32,
                                     with_initial_state=True, cu_seqlens=[0, 7, 7, 50])
        o, s = kernel.run(inputs, fill=1.5)
        print(o.shape, s.shape)
        """, mock_driver)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "(1, 50, 2, 32) (3, 2, 32, 32)"
    assert re.search(r"^mock launch: attention_kernel grid 3x2x2 block 256x1x1 shared \d+$",
                     proc.stderr, re.M), proc.stderr


@needs_tools
def test_checkpoints_library(tmp_path, mock_driver):
    # Checkpoints every 8 tokens of 32: a host loop over the 4 segments
    # launches each segment's tasks (and the copies of its state into the
    # checkpoints); the library builds and ptxas accepts it.
    mlir = runner.attention_mlir("gla", 1, 32, 1, 16, 16, checkpoint_every=8)
    path = str(tmp_path / "checkpoints.so")
    shapes = [(1, 32, 1, 16)] * 4 + [(1, 32, 1, 16), (1, 1, 16, 16), (1, 4, 1, 16, 16)]
    gpu.compile_library(mlir, path)
    proc = _python(f"""
        import numpy as np
        from la import gpu
        fn = gpu.load_library({path!r}, "attention", {shapes!r})
        buffers = [np.zeros(s, np.float32) for s in {shapes!r}]
        fn(*[b.ctypes.data for b in buffers])
        print("done")
        """, mock_driver)
    assert proc.returncode == 0, proc.stderr
    launches = re.findall(r"^mock launch: attention_kernel\S* grid 1x1x1 ", proc.stderr, re.M)
    assert len(launches) >= 4, proc.stderr


@needs_tools
def test_packed_checkpoints_library(tmp_path, mock_driver):
    # Packed sequences' checkpoints: the host copies cu_seqlens from the
    # device once (mgpuMemcpy through the runtime; the fake driver's device
    # memory is host memory) to bound its loops over each sequence's
    # segments.
    mlir = runner.attention_mlir("gla", 1, 32, 1, 16, 16, cu_seqlens_len=3,
                                 checkpoint_every=8, checkpoint_rows=3)
    path = str(tmp_path / "packed-checkpoints.so")
    shapes = [(1, 32, 1, 16)] * 4 + [(3,), (1, 32, 1, 16), (2, 1, 16, 16), (1, 3, 1, 16, 16)]
    gpu.compile_library(mlir, path)
    proc = _python(f"""
        import numpy as np
        from la import gpu
        shapes = {shapes!r}
        fn = gpu.load_library({path!r}, "attention", shapes)
        buffers = [np.zeros(s, np.float32) for s in shapes]
        buffers[4] = np.array([0, 11, 32], np.int32)
        fn(*[b.ctypes.data for b in buffers])
        print("done")
        """, mock_driver)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "done"
    # The loops followed the offsets read on the host: sequence 0 (11
    # tokens) one segment of 8 and a tail, sequence 1 (21) two and a tail:
    # five launches of the tasks (the kernels with shared memory).
    tasks = re.findall(r"^mock launch: attention_kernel\S* grid 1x1x1 block 256x1x1 "
                       r"shared [1-9]\d*$", proc.stderr, re.M)
    assert len(tasks) == 5, proc.stderr


@needs_tools
def test_packed_sequences_backward_library(tmp_path, mock_driver):
    # Packed sequences' backward: the adjoint recurrences as blocks per
    # (sequence, value head), each sequence's edges and gate sums in kernels
    # of one block that read the offsets themselves; the library builds
    # (ptxas accepts it) and launches through the fake driver.
    path = str(tmp_path / "gdn-packed-grad.so")
    manifest = gpu.compile_attention(path, "gated_deltanet", 1, 32, 1, 16, 16,
                                     has_initial_state=True, backward=True, cu_seqlens_len=3)
    assert manifest["entry"] == "attention_grad"
    assert "cu_seqlens" in [p["name"] for p in manifest["params"]]
    proc = _python(f"""
        import numpy as np
        from la import gpu, testing
        kernel = gpu.load_attention({path!r})
        inputs = testing.make_inputs("gated_deltanet", 1, 32, 1, 16, 16,
                                     with_initial_state=True, cu_seqlens=[0, 9, 32])
        inputs["do"] = np.ones((1, 32, 1, 16), np.float32)
        inputs["d_final_state"] = np.ones((2, 1, 16, 16), np.float32)
        grads = kernel.run(inputs, fill=1.5)
        print(grads["initial_state"].shape)
        """, mock_driver)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "(2, 1, 16, 16)"
    assert re.search(r"^mock launch: attention_grad_kernel\S* grid 2x1x1 ", proc.stderr, re.M), \
        proc.stderr


@needs_tools
def test_general_low_rank_backward_compiles_for_the_gpu(tmp_path):
    # Gated DeltaNet-2's adjoint (the general low-rank form: two general
    # recurrences and three diagonal ones over sub-steps) is chunked, so its
    # library builds and ptxas accepts it.
    path = tmp_path / "gdn2-grad.so"
    manifest = gpu.compile_attention(str(path), "gated_deltanet2", 1, 32, 1, 16, 16,
                                     has_initial_state=True, backward=True)
    assert path.exists() and manifest["variant"] == "gated_deltanet2"


@needs_tools
def test_chunk_halved_until_its_buffers_fit(tmp_path):
    """RWKV-7 (the general low-rank form) at K = V = 128 with an initial
    state and without value tiles: the default chunk of 16 needs more shared
    memory than an sm_90a block has; without a chunk size given,
    compile_attention takes 8 and says so in the manifest. A chunk size
    given is kept, and its error raised."""
    path = tmp_path / "rwkv7.so"
    manifest = gpu.compile_attention(str(path), "rwkv7", 1, 64, 1, 128, 128, scale=1.0,
                                     has_initial_state=True,
                                     pipeline_options={"value-tile": 0})
    assert manifest["pipeline_options"] == {"value-tile": 0, "chunk-size": 8}
    assert path.exists()
    with pytest.raises(gpu.GpuCompileError, match="shared memory for a chunk"):
        gpu.compile_attention(str(tmp_path / "rwkv7-32.so"), "rwkv7", 1, 64, 1, 128, 128,
                              scale=1.0, pipeline_options={"chunk-size": 32})
    assert not (tmp_path / "rwkv7-32.so").exists()


@pytest.mark.parametrize("variant", ["gla", "gated_deltanet"])
def test_attention_params_with_grouped_query_heads(variant):
    # q and o have HQ heads; k, v, the gates and the state keep H.
    kwargs = dict(has_initial_state=True, output_final_state=True, HQ=6)
    args, outs = _signature(runner.attention_mlir(variant, 2, 8, 2, 4, 6, **kwargs))
    params = gpu.attention_params(variant, 2, 8, 2, 4, 6, **kwargs)
    assert [(p.shape, p.dtype) for p in params if not p.output] == args
    assert [(p.shape, p.dtype) for p in params if p.output] == outs
    assert params[0].shape == (2, 8, 6, 4) and outs[0][0] == (2, 8, 6, 6)
