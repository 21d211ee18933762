"""The Python package: la.gla & co. compiled through the C API, against the
fp64 reference (``rel_rms`` <= 1e-5 for f32, 5e-3 for f16/bf16 q, k, v), the
kernel caches, IR access (``la.lower``, ``la.ir``) and the errors.

Skipped when libLaCAPI.so is not built. Kernels are compiled with clang-22
into a temporary cache directory (``LA_CACHE_DIR``), never into ~/.cache/la.
The torch tests run only when torch is installed.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import la
from la import _capi, runner
from la import testing as lt

if _capi.library_path() is None:
    pytest.skip("libLaCAPI.so is not built (build the project or set LA_CAPI_LIB)",
                allow_module_level=True)

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOL = {"f32": 1e-5, "f16": 5e-3, "bf16": 5e-3}

#: public function -> (variant of la.attention, needs g, needs beta); the
#: erase_write variants (Gated DeltaNet-2) take erase and write after them,
#: the dplr variant (RWKV-7) a and b.
FUNCTIONS = {
    "linear_attention": ("linear", False, False),
    "retention": ("retention", False, False),
    "simple_gla": ("mamba2", True, False),
    "gla": ("gla", True, False),
    "delta_rule": ("deltanet", False, True),
    "gated_delta_rule": ("gated_deltanet", True, True),
    "kda": ("kda", True, True),
    "gated_delta_rule2": ("gated_deltanet2", True, False),
    "rwkv7": ("rwkv7", True, False),
}

# B, T, H, HV, K, V: T % chunk != 0, grouped value heads (HV = 2H), K != V
SHAPE = (2, 37, 2, 4, 16, 8)
CHUNK = 16


@pytest.fixture(scope="module", autouse=True)
def _cache_dir(tmp_path_factory):
    """Every test of this module compiles into a fresh temporary cache."""
    path = str(tmp_path_factory.mktemp("la-cache"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LA_CACHE_DIR", path)
        la.clear_cache()
        yield path
    la.clear_cache()


def _make(variant, *, shape=SHAPE, seed=0, state=True, cu_seqlens=None, dtype=np.float32):
    B, T, H, HV, K, V = shape
    return lt.make_inputs(variant, B, T, H, K, V, HV=HV, seed=seed, gate_scale=1 / 16,
                          with_initial_state=state, cu_seqlens=cu_seqlens, dtype=dtype)


def _call(name, inputs, **kwargs):
    """la.<name>(q, k, v, [g], [beta], [erase, write], initial_state=...,
    cu_seqlens=..., **kwargs)."""
    variant, has_g, has_beta = FUNCTIONS[name]
    args = [inputs["q"], inputs["k"], inputs["v"]]
    if has_g:
        args.append(inputs["g"])
    if has_beta:
        args.append(inputs["beta"])
    if lt.VARIANTS[variant][0] == "erase_write":
        args += [inputs["erase"], inputs["write"]]
    if lt.VARIANTS[variant][0] == "dplr":
        args += [inputs["a"], inputs["b"]]
        kwargs.setdefault("scale", None)  # la.rwkv7's default is RWKV's 1; K^-0.5 here
    for key in ("initial_state", "cu_seqlens"):
        if key in inputs:
            kwargs.setdefault(key, inputs[key])
    return getattr(la, name)(*args, **kwargs)


def _check(ref, out, tol, what):
    out = np.asarray(out, dtype=np.float64)
    assert out.shape == ref.shape, f"{what}: shape {out.shape}, expected {ref.shape}"
    assert np.all(np.isfinite(out)), f"{what}: non-finite values"
    err = lt.rel_rms(ref, out)
    assert err <= tol, f"{what}: rel_rms {err:.3e} > {tol:.0e}"


def _check_both(variant, prepared, o, s, dtype="f32", what="", **attrs):
    ref_o, ref_s = lt.reference_for(variant, prepared, **attrs)
    _check(ref_o, o, TOL[dtype], f"{what} o")
    if s is not None:
        _check(ref_s, s, TOL[dtype], f"{what} final_state")


# --------------------------------------------------------------------------
# every variant against the reference
# --------------------------------------------------------------------------

@pytest.mark.parametrize("sequential", [False, True], ids=["chunked", "sequential"])
@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_variant_matches_reference(name, sequential):
    variant = FUNCTIONS[name][0]
    inputs = _make(variant)
    o, s = _call(name, inputs, output_final_state=True, chunk_size=CHUNK,
                 sequential=sequential)
    assert o.dtype == np.float32 and s.dtype == np.float32
    assert o.shape == inputs["v"].shape and s.shape == inputs["initial_state"].shape
    _check_both(variant, inputs, o, s, what=f"{name} sequential={sequential}")


@pytest.mark.parametrize("sequential", [False, True], ids=["chunked", "sequential"])
def test_generic_attention_decayed_deltanet(sequential):
    """la.attention reaches every variant, e.g. the delta rule with a fixed decay."""
    inputs = _make("decayed_deltanet")
    o, s = la.attention("decayed_deltanet", inputs["q"], inputs["k"], inputs["v"],
                        beta=inputs["beta"], log_decay=inputs["log_decay"],
                        initial_state=inputs["initial_state"], output_final_state=True,
                        chunk_size=CHUNK, sequential=sequential)
    _check_both("decayed_deltanet", inputs, o, s, what="decayed_deltanet")


def test_generic_attention_scalar_gated_deltanet2():
    """la.attention takes erase and write as keywords: Gated DeltaNet-2 with a
    scalar gate (the reference broadcasts it over K)."""
    inputs = _make("scalar_gated_deltanet2")
    o, s = la.attention("scalar_gated_deltanet2", inputs["q"], inputs["k"], inputs["v"],
                        inputs["g"], erase=inputs["erase"], write=inputs["write"],
                        initial_state=inputs["initial_state"], output_final_state=True,
                        chunk_size=CHUNK)
    _check_both("scalar_gated_deltanet2", inputs, o, s, what="scalar_gated_deltanet2")


@pytest.mark.parametrize(
    "name,dtype,sequential",
    [("gla", "bf16", False), ("gated_delta_rule", "f16", False), ("kda", "bf16", True),
     ("linear_attention", "f16", False)],
)
def test_low_precision(name, dtype, sequential):
    """f16 arrays, or dtype='bf16' on float32 arrays (o: float32 holding bf16 values)."""
    variant = FUNCTIONS[name][0]
    inputs = _make(variant)
    prepared = runner.prepare_inputs(inputs, dtype)  # the rounded values la computes with
    if dtype == "f16":
        o, s = _call(name, prepared, output_final_state=True, chunk_size=CHUNK,
                     sequential=sequential)
        assert o.dtype == np.float16
    else:
        o, s = _call(name, inputs, output_final_state=True, chunk_size=CHUNK,
                     sequential=sequential, dtype="bf16")
        assert o.dtype == np.float32
        np.testing.assert_array_equal(runner.round_to_bf16(o), o)
    assert s.dtype == np.float32
    _check_both(variant, prepared, o, s, dtype, what=f"{name} {dtype}")


# --------------------------------------------------------------------------
# packed sequences, segments, options
# --------------------------------------------------------------------------

CU = [0, 5, 22, 40]  # three sequences: shorter than a chunk, straddling chunk boundaries


@pytest.mark.parametrize("name,sequential,cu_dtype",
                         [("gla", False, np.int32), ("gated_delta_rule", False, np.int64),
                          ("kda", True, np.int32)])
def test_cu_seqlens(name, sequential, cu_dtype):
    variant = FUNCTIONS[name][0]
    inputs = _make(variant, shape=(1, 40, 2, 4, 16, 8), seed=3, cu_seqlens=CU)
    inputs["cu_seqlens"] = np.array(CU, dtype=cu_dtype)  # int64 is converted silently
    o, s = _call(name, inputs, output_final_state=True, chunk_size=CHUNK,
                 sequential=sequential)
    assert s.shape == (3, 4, 16, 8)
    _check_both(variant, inputs, o, s, what=f"{name} cu_seqlens")


@pytest.mark.parametrize("name,sequential", [("gated_delta_rule", False), ("kda", True)])
def test_segmented_calls_equal_one_pass(name, sequential):
    """Two halves, the first's final state passed as the second's initial state."""
    variant = FUNCTIONS[name][0]
    inputs = _make(variant, shape=(2, 40, 2, 4, 16, 8), seed=5)
    split = 19  # not a chunk boundary
    o_full, s_full = _call(name, inputs, output_final_state=True, chunk_size=CHUNK,
                           sequential=sequential)

    def half(start, stop, state):
        part = {key: (val[:, start:stop] if key in ("q", "k", "v", "g", "beta", "erase",
                                                    "write", "a", "b") else val)
                for key, val in inputs.items()}
        part["initial_state"] = state
        return _call(name, part, output_final_state=True, chunk_size=CHUNK,
                     sequential=sequential)

    o1, s1 = half(0, split, inputs["initial_state"])
    o2, s2 = half(split, 40, s1)
    o_seg = np.concatenate([o1, o2], axis=1)
    _check(o_full.astype(np.float64), o_seg, TOL["f32"], "segmented o vs one pass")
    _check(s_full.astype(np.float64), s2, TOL["f32"], "segmented state vs one pass")
    _check_both(variant, inputs, o_seg, s2, what=f"{name} segmented")


def test_output_final_state_default_is_none():
    inputs = _make("mamba2", seed=6)
    o, s = la.simple_gla(inputs["q"], inputs["k"], inputs["v"], inputs["g"],
                         initial_state=inputs["initial_state"], chunk_size=CHUNK)
    assert s is None
    _check_both("mamba2", inputs, o, None, what="simple_gla without final state")
    o2, s2 = la.simple_gla(inputs["q"], inputs["k"], inputs["v"], inputs["g"],
                           initial_state=inputs["initial_state"], chunk_size=CHUNK,
                           output_final_state=True)
    assert s2 is not None
    np.testing.assert_allclose(o, o2, rtol=1e-6, atol=1e-7)


def test_inputs_are_not_modified_and_views_are_accepted():
    """Non-contiguous q (a transposed [B, H, T, K] array) works; no input changes."""
    inputs = _make("gla", seed=7)
    before = {key: val.copy() for key, val in inputs.items()}
    q_bhtk = np.ascontiguousarray(inputs["q"].transpose(0, 2, 1, 3))
    q_view = q_bhtk.transpose(0, 2, 1, 3)
    assert not q_view.flags.c_contiguous
    o, s = la.gla(q_view, inputs["k"], inputs["v"], inputs["g"],
                  initial_state=inputs["initial_state"], output_final_state=True,
                  chunk_size=CHUNK)
    for key, val in inputs.items():
        np.testing.assert_array_equal(val, before[key], err_msg=key)
    _check_both("gla", inputs, o, s, what="gla with a strided q")


@pytest.mark.parametrize(
    "name,kwargs,ref_attrs",
    [
        ("linear_attention", {"normalize": True}, {"normalizer": True}),
        ("retention", {"log_decay": np.log([0.9, 0.5])}, {}),
        ("gla", {"scale": 0.375}, {"scale": 0.375}),
        ("gated_delta_rule", {"use_qk_l2norm_in_kernel": True}, {"qk_l2norm": True}),
        ("delta_rule", {"allow_neg_eigval": True}, {}),
    ],
    ids=["normalize", "log_decay", "scale", "qk_l2norm", "allow_neg_eigval"],
)
def test_options(name, kwargs, ref_attrs):
    variant = FUNCTIONS[name][0]
    B, T, H, HV, K, V = SHAPE
    inputs = lt.make_inputs(variant, B, T, H, K, V, HV=HV, seed=9, gate_scale=1 / 16,
                            with_initial_state=True, positive_qk=bool(kwargs.get("normalize")))
    o, s = _call(name, inputs, output_final_state=True, chunk_size=CHUNK, **kwargs)
    ref_inputs = dict(inputs)
    if "log_decay" in kwargs:
        ref_inputs["log_decay"] = kwargs["log_decay"].astype(np.float32)
    if kwargs.get("allow_neg_eigval"):
        ref_inputs["beta"] = 2.0 * inputs["beta"].astype(np.float64)  # beta in (0, 2)
    _check_both(variant, ref_inputs, o, s, what=f"{name} {kwargs}", **ref_attrs)


# --------------------------------------------------------------------------
# caches
# --------------------------------------------------------------------------

def _small(variant="gla", seed=11, T=12):
    return lt.make_inputs(variant, 1, T, 1, 8, 8, seed=seed, gate_scale=1 / 16)


def test_memory_cache_does_not_recompile():
    inputs = _small(T=13)
    args = (inputs["q"], inputs["k"], inputs["v"], inputs["g"])
    before = la.cache_info()
    o1, _ = la.gla(*args, chunk_size=8)
    mid = la.cache_info()
    assert mid["compiles"] == before["compiles"] + 1
    assert mid["misses"] == before["misses"] + 1
    o2, _ = la.gla(*args, chunk_size=8)
    after = la.cache_info()
    assert after["compiles"] == mid["compiles"] and after["disk_hits"] == mid["disk_hits"]
    assert after["misses"] == mid["misses"] and after["hits"] == mid["hits"] + 1
    np.testing.assert_array_equal(o1, o2)
    # Other options are another kernel.
    la.gla(*args, chunk_size=4)
    assert la.cache_info()["compiles"] == after["compiles"] + 1
    # After forgetting the in-memory kernels, the disk cache answers.
    la.clear_cache()
    o3, _ = la.gla(*args, chunk_size=8)
    info = la.cache_info()
    assert (info["disk_hits"], info["compiles"], info["hits"]) == (1, 0, 0)
    np.testing.assert_array_equal(o1, o3)


def test_one_kernel_for_any_batch_and_length():
    """The forward's kernel has a dynamic B, T and number of sequences: other
    B and T (multiples of the chunk or not; cu_seqlens of any count, in the
    kernel that takes them) reuse it and stay correct; sequences shorter than a chunk take the kernel of
    the smallest power-of-two chunk that holds them."""
    la.clear_cache()
    cases = [(1, 13, None), (3, 40, None), (2, 8, None), (1, 57, [0, 20, 21, 57]),
             (1, 30, [0, 9, 30])]
    for B, T, cu in cases:
        d = lt.make_inputs("gated_deltanet", B, T, 2, 8, 8, seed=T, gate_scale=1 / 16,
                           cu_seqlens=cu)
        o, s = la.gated_delta_rule(d["q"], d["k"], d["v"], d["g"], d["beta"], chunk_size=8,
                                   cu_seqlens=d.get("cu_seqlens"), output_final_state=True)
        ref_o, ref_s = lt.reference_for("gated_deltanet", d)
        assert lt.rel_rms(ref_o, o) < 1e-5 and lt.rel_rms(ref_s, s) < 1e-5, (B, T, cu)
    # One kernel without cu_seqlens and one with it (an operand more).
    info = la.cache_info()
    assert (info["compiles"] + info["disk_hits"], info["hits"]) == (2, len(cases) - 2), info
    # Short sequences: chunk 4 holds 3 tokens (and packed ones of at most 4),
    # chunk 1 one token; each such kernel again serves any B.
    for B, T, cu, chunk in ((2, 3, None, 4), (1, 7, [0, 4, 7], 4), (5, 1, None, 1),
                            (1, 3, [0, 1, 2, 3], 1)):
        d = lt.make_inputs("gated_deltanet", B, T, 2, 8, 8, seed=B + T, gate_scale=1 / 16,
                           cu_seqlens=cu)
        call = la.ops._prepare("gated_deltanet", d["q"], d["k"], d["v"], d["g"], d["beta"],
                            chunk_size=8, cu_seqlens=d.get("cu_seqlens"))
        assert f"chunk-size={chunk} " in call.pipeline, call.pipeline
        o, _ = la.gated_delta_rule(d["q"], d["k"], d["v"], d["g"], d["beta"], chunk_size=8,
                                   cu_seqlens=d.get("cu_seqlens"))
        assert lt.rel_rms(lt.reference_for("gated_deltanet", d)[0], o) < 1e-5, (B, T, cu)
    info = la.cache_info()
    assert info["compiles"] + info["disk_hits"] == 6, info


def test_token_loops_on_threads():
    """sequential=True on two threads runs one token loop per (batch, head)
    task in an OpenMP region: the numbers of one thread (to rounding: the
    task's loop is vectorised over its own slices)."""
    d = lt.make_inputs("kda", 2, 11, 2, 8, 8, seed=3, gate_scale=1 / 16)
    args = (d["q"], d["k"], d["v"], d["g"], d["beta"])
    one, s1 = la.kda(*args, sequential=True, output_final_state=True, num_threads=1)
    two, s2 = la.kda(*args, sequential=True, output_final_state=True, num_threads=2)
    assert lt.rel_rms(one, two) < 1e-6 and lt.rel_rms(s1, s2) < 1e-6
    assert "__kmpc_fork_call" in la.lower(la.kda, *args, stage="llvm-ir", sequential=True,
                                          num_threads=2)
    assert lt.rel_rms(lt.reference_for("kda", d)[0], one) < 1e-5


_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import la
    from la import testing as lt
    inputs = lt.make_inputs("gated_deltanet", 1, 21, 2, 8, 8, seed=12, gate_scale=1 / 16)
    o, s = la.gated_delta_rule(inputs["q"], inputs["k"], inputs["v"], inputs["g"],
                               inputs["beta"], chunk_size=8, output_final_state=True)
    np.save(sys.argv[1], o)
    print(json.dumps(la.cache_info()))
""")


def _child(tmp_path, cache, name):
    env = dict(os.environ, LA_CACHE_DIR=str(cache),
               PYTHONPATH=os.pathsep.join([PYTHON_DIR, os.environ.get("PYTHONPATH", "")]))
    out = tmp_path / f"{name}.npy"
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(out)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), np.load(out)


def test_disk_cache_across_processes(tmp_path):
    cache = tmp_path / "cache"
    first, o1 = _child(tmp_path, cache, "first")
    assert (first["compiles"], first["disk_hits"]) == (1, 0)
    assert first["dir"] == str(cache)
    assert len([f for f in os.listdir(cache) if f.endswith(".so")]) == 1
    assert not [f for f in os.listdir(cache) if f.startswith(".tmp-")]  # no leftovers
    second, o2 = _child(tmp_path, cache, "second")
    assert (second["compiles"], second["disk_hits"], second["misses"]) == (0, 1, 1)
    np.testing.assert_array_equal(o1, o2)


def test_import_without_the_library(tmp_path):
    """`import la` loads no library; a call that must compile raises LaError."""
    code = textwrap.dedent("""
        import ctypes
        loaded = []
        real = ctypes.CDLL
        ctypes.CDLL = lambda *a, **k: loaded.append(a[0]) or real(*a, **k)
        import numpy as np
        import la
        assert loaded == [], loaded
        la._capi.library_path = lambda: None
        x = np.ones((1, 3, 1, 4), np.float32)
        try:
            la.linear_attention(x, x, x)
        except la.LaError as e:
            print("LaError:", e)
    """)
    env = dict(os.environ, LA_CACHE_DIR=str(tmp_path),
               PYTHONPATH=os.pathsep.join([PYTHON_DIR, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "LaError: libLaCAPI.so not found" in proc.stdout


# --------------------------------------------------------------------------
# IR access
# --------------------------------------------------------------------------

def test_lower_stages():
    inputs = _small("kda", T=10)
    args = (la.kda, inputs["q"], inputs["k"], inputs["v"], inputs["g"], inputs["beta"])
    text = {stage: la.lower(*args, stage=stage, chunk_size=8, output_final_state=True)
            for stage in la.STAGES}
    assert "la.attention kda" in text["attention"]
    assert "la.recurrence" in text["recurrence"] and "la.attention" not in text["recurrence"]
    assert "la.chunk_wy" in text["chunked"] and "la.chunk_intra" in text["chunked"]
    assert "linalg.generic" in text["linalg"] and "la.chunk_" not in text["linalg"]
    assert "llvm.func @_mlir_ciface_attention" in text["llvm"]
    assert "define void @_mlir_ciface_attention" in text["llvm-ir"]
    for marker in ("IR Dump After LaLowerToRecurrencePass", "IR Dump After LaFuseRecurrencePass",
                   "IR Dump After ConvertToLLVMPass", "la.chunk_", "llvm.func"):
        assert marker in text["all"], marker
    # The sequential program has no chunked stage but a token-by-token loop.
    seq = la.lower(*args, stage="linalg", sequential=True)
    assert "la.chunk_" not in seq and "scf.for" in seq
    seq_all = la.lower(*args, stage="all", sequential=True)
    assert "LaFuseRecurrencePass" not in seq_all and "la.chunk_" not in seq_all
    with pytest.raises(ValueError, match="sequential"):
        la.lower(*args, stage="chunked", sequential=True)
    with pytest.raises(ValueError, match="stage must be one of"):
        la.lower(*args, stage="ptx")
    # Gated DeltaNet-2: erase and write follow g in the op and the arguments.
    gdn2 = la.lower(la.gated_delta_rule2, inputs["q"], inputs["k"], inputs["v"], inputs["g"],
                    inputs["k"], inputs["v"], stage="attention")
    assert "la.attention gated_deltanet2" in gdn2
    assert gdn2.index("g(%g") < gdn2.index("erase(%erase") < gdn2.index("write(%write")
    # A variant name goes to la.attention.
    assert "la.attention gla" in la.lower("gla", inputs["q"], inputs["k"], inputs["v"],
                                          inputs["g"], stage="attention")


def test_ir_module_pipeline():
    """la.ir directly: parse, run a pipeline printing every stage, translate."""
    text = runner.attention_mlir("gla", 1, 10, 1, 8, 8, name="f")
    module = la.ir.Module.parse(text)
    module.emit_c_interface("f")
    stages = la.ir.PassManager.parse(
        "builtin.module(la-lower-to-cpu{chunk-size=8})").run(module, print_ir_after_all=True)
    assert "la.chunk_intra" in stages and "llvm.func" in stages
    assert "llvm.func @_mlir_ciface_f" in str(module)
    assert "define void @_mlir_ciface_f" in module.to_llvm_ir()


# --------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------

def _err_inputs():
    return lt.make_inputs("gated_deltanet", 2, 6, 2, 4, 4, HV=4, seed=1, with_initial_state=True)


def _gdn(inputs, **kwargs):
    args = dict(inputs, **kwargs)
    return la.gated_delta_rule(args.pop("q"), args.pop("k"), args.pop("v"), args.pop("g"),
                               args.pop("beta"), **args)


@pytest.mark.parametrize(
    "change,error,pattern",
    [
        (lambda d: d.update(q=d["q"][0]), ValueError, r"q must be 4-D \[B, T, H, K\]"),
        (lambda d: d.update(k=d["k"][:, :5]), ValueError, r"k must have shape \[B, T, H, K\]"),
        (lambda d: d.update(v=d["v"][:, :5]), ValueError, r"v must have shape \[B, T, HV, V\]"),
        (lambda d: d.update(v=d["v"][:, :, :3]), ValueError, r"HV=3 .* not a multiple .* H=2"),
        (lambda d: d.update(g=d["g"][..., None].repeat(4, -1)), ValueError,
         r"g must have shape \[B, T, H\] or \[B, T, HV\] = \(2, 6, 2\)"),
        (lambda d: d.update(beta=d["beta"][:, :, :1]), ValueError,
         r"beta must have shape \[B, T, H\]"),
        (lambda d: d.update(initial_state=d["initial_state"][:, :2]), ValueError,
         r"initial_state must have shape \[N, HV, K, V\] = \(2, 4, 4, 4\)"),
        (lambda d: d.update(cu_seqlens=np.array([0, 6], np.int32)), ValueError,
         r"cu_seqlens requires B == 1"),
        (lambda d: d.update(q=d["q"].astype(np.float64)), TypeError, r"q has dtype float64"),
        (lambda d: d.update(k=d["k"].astype(np.float16)), TypeError, r"same dtype"),
        (lambda d: d.update(v=d["v"].astype(np.int32)), TypeError, r"v has dtype int32"),
        (lambda d: d.update(dtype="f64"), TypeError, r"dtype must be 'f32', 'f16' or 'bf16'"),
        (lambda d: d.update(g=d["g"].astype(np.complex64)), TypeError, r"g must be a float"),
        (lambda d: d.update(target="tpu"), ValueError, r"target must be 'cpu'"),
        (lambda d: d.update(target="cuda"), la.LaError, r"GPU path is not available in these layer functions"),
        (lambda d: d.update(chunk_size=0), ValueError, r"chunk_size must be a positive"),
    ],
    ids=["q-rank", "k-shape", "v-T", "HV", "g-shape", "beta-shape", "state-shape",
         "cu-B>1", "f64", "mixed", "int", "dtype", "g-dtype", "target", "cuda", "chunk"],
)
def test_errors(change, error, pattern):
    inputs = _err_inputs()
    change(inputs)
    with pytest.raises(error, match=pattern):
        _gdn(inputs)


def test_cu_seqlens_errors():
    inputs = lt.make_inputs("gla", 1, 8, 1, 4, 4, seed=1)
    args = (inputs["q"], inputs["k"], inputs["v"], inputs["g"])
    with pytest.raises(ValueError, match=r"from 0 to T=8"):
        la.gla(*args, cu_seqlens=np.array([0, 3, 7]))
    with pytest.raises(TypeError, match=r"integer dtype"):
        la.gla(*args, cu_seqlens=np.array([0.0, 8.0]))
    with pytest.raises(ValueError, match=r"initial_state must have shape .* = \(2, 1, 4, 4\)"):
        la.gla(*args, cu_seqlens=np.array([0, 3, 8]),
               initial_state=np.zeros((1, 1, 4, 4), np.float32))


def test_missing_or_extra_inputs():
    x = np.ones((1, 4, 1, 4), np.float32)
    with pytest.raises(ValueError, match="needs the gate g"):
        la.attention("gla", x, x, x)
    with pytest.raises(ValueError, match="takes no beta"):
        la.attention("linear", x, x, x, beta=np.ones((1, 4, 1), np.float32))
    with pytest.raises(ValueError, match="unknown variant"):
        la.attention("softmax", x, x, x)
    with pytest.raises(TypeError):
        la.gla(x, x, x)  # g is required
    e, w = np.ones((1, 4, 1, 4), np.float32), np.ones((1, 4, 1, 4), np.float32)
    g = -x  # log-space decays are <= 0
    with pytest.raises(ValueError, match=r"needs write \[B, T, HV, V\]"):
        la.attention("gated_deltanet2", x, x, x, g, erase=e)
    with pytest.raises(ValueError, match=r"erase must have shape \[B, T, H, K\]"):
        la.gated_delta_rule2(x, x, x, g, e[..., :2], w)
    with pytest.raises(ValueError, match="takes no erase or write"):
        la.attention("kda", x, x, x, g, np.ones((1, 4, 1), np.float32), erase=e, write=w)
    with pytest.raises(ValueError, match="takes no beta"):
        la.attention("gated_deltanet2", x, x, x, g, np.ones((1, 4, 1), np.float32),
                     erase=e, write=w)


def test_compiler_errors_surface_as_la_error():
    x = np.ones((1, 4, 2, 4), np.float32)
    with pytest.raises(la.LaError, match=r"<source>:\d+:\d+: error: .*log_decay"):
        la.retention(x, x, x, log_decay=np.array([-0.1, 0.5]))  # the verifier: <= 0
    with pytest.raises(la.LaError, match=r"<source>:1:\d+: error: custom op 'la.foo'"):
        la.ir.Module.parse("func.func @f() { la.foo }")
    with pytest.raises(la.LaError, match="does not refer to a registered pass"):
        la.ir.PassManager.parse("builtin.module(no-such-pass)").run(
            la.ir.Module.parse("module {}"))


# --------------------------------------------------------------------------
# torch
# --------------------------------------------------------------------------

def test_torch_tensors():
    torch = pytest.importorskip("torch")
    inputs = _make("gated_deltanet", shape=(1, 20, 2, 4, 16, 8), seed=13)
    t = {key: torch.from_numpy(val) for key, val in inputs.items()}
    # f32: the same numbers as NumPy, returned as tensors.
    o, s = la.gated_delta_rule(t["q"], t["k"], t["v"], t["g"], t["beta"],
                               initial_state=t["initial_state"], output_final_state=True,
                               chunk_size=CHUNK)
    assert isinstance(o, torch.Tensor) and o.dtype == torch.float32
    assert isinstance(s, torch.Tensor) and s.dtype == torch.float32
    o_np, s_np = _call("gated_delta_rule", inputs, output_final_state=True, chunk_size=CHUNK)
    np.testing.assert_array_equal(o.numpy(), o_np)
    np.testing.assert_array_equal(s.numpy(), s_np)
    # bf16 q, k, v (and a bf16 gate, converted to f32), requires_grad, a strided view,
    # int64 cu_seqlens.
    q = t["q"].bfloat16().transpose(1, 2).contiguous().transpose(1, 2).requires_grad_()
    cu = torch.tensor([0, 7, 20])
    s0 = torch.zeros(2, 4, 16, 8)
    o, s = la.gated_delta_rule(q, t["k"].bfloat16(), t["v"].bfloat16(), t["g"].bfloat16(),
                               t["beta"], initial_state=s0, cu_seqlens=cu,
                               output_final_state=True, chunk_size=CHUNK)
    assert o.dtype == torch.bfloat16 and s.dtype == torch.float32
    # q requires grad: the results are attached to autograd (test_autograd.py
    # checks the gradients).
    assert o.requires_grad and s.requires_grad
    o, s = o.detach(), s.detach()
    prepared = runner.prepare_inputs(
        dict(q=inputs["q"], k=inputs["k"], v=inputs["v"], beta=inputs["beta"],
             g=runner.round_to_bf16(inputs["g"]), initial_state=s0.numpy(),
             cu_seqlens=cu.numpy()), "bf16")
    _check_both("gated_deltanet", prepared, o.float().numpy(), s.numpy(), "bf16",
                what="torch bf16")
    # f16 tensors give f16 results.
    o16, _ = la.gla(t["q"].half(), t["k"].half(), t["v"].half(),
                    torch.zeros(1, 20, 2, 16), chunk_size=CHUNK)
    assert o16.dtype == torch.float16


def test_torch_device_errors():
    torch = pytest.importorskip("torch")
    x = torch.ones(1, 4, 1, 4, device="meta")  # any non-CPU device, e.g. cuda
    y = torch.ones(1, 4, 1, 4)
    # (The layer functions take meta tensors: test_torch_ops.py.)
    with pytest.raises(la.LaError, match="GPU path is not available in these layer functions"):
        la.attention_backward("linear", x, y, y, do=y)
    with pytest.raises(la.LaError, match="GPU path is not available in these layer functions"):
        la.ops._prepare("linear", x, y, y)
    with pytest.raises(la.LaError, match="GPU path is not available in these layer functions"):
        la.linear_attention(y, y, y, target="cuda")


def test_ml_dtypes_bfloat16():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    inputs = _make("gla", shape=(1, 20, 1, 1, 8, 8), seed=14, state=False)
    bf = {key: inputs[key].astype(ml_dtypes.bfloat16) for key in ("q", "k", "v")}
    o, _ = la.gla(bf["q"], bf["k"], bf["v"], inputs["g"], chunk_size=CHUNK)
    assert o.dtype == ml_dtypes.bfloat16
    prepared = runner.prepare_inputs(inputs, "bf16")
    _check_both("gla", prepared, o.astype(np.float32), None, "bf16", what="ml_dtypes")
