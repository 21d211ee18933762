"""Adversarial inputs at the edges (issue: hardening): hard resets and very
negative log-gates, positive gates, huge chunk sizes, pipeline and option
errors, and the IR the package shows. Each numeric case is checked against
the fp64 reference (la.reference, an independent NumPy recurrence) and
against la's own sequential program."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import la
from la import _capi, ir, testing

pytestmark = pytest.mark.skipif(_capi.library_path() is None, reason="libLaCAPI.so is not built")

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _inputs(variant, T=40, seed=0):
    return testing.make_inputs(variant, B=1, T=T, H=2, K=16, V=16, seed=seed)


def _call(variant, inputs, **kwargs):
    function = getattr(la, {"gla": "gla", "mamba2": "simple_gla",
                            "gated_deltanet": "gated_delta_rule", "kda": "kda"}[variant])
    args = [inputs["q"], inputs["k"], inputs["v"], inputs["g"]]
    if "beta" in inputs:
        args.append(inputs["beta"])
    o, _ = function(*args, **kwargs)
    return np.asarray(o, np.float64)


_GATED = ("gla", "mamba2", "gated_deltanet", "kda")


@pytest.mark.parametrize("variant", _GATED)
@pytest.mark.parametrize("value", [-np.inf, -1e30, -1e4, -1e3, -104.0])
def test_very_negative_log_gate_at_one_token(variant, value):
    """One token's log-gate at -inf (a hard reset: decay exactly 0) or far
    below any useful decay: the chunked program gives the recurrence's
    answer, finite, to f32 accuracy."""
    name = variant
    inputs = _inputs(name)
    g = np.array(inputs["g"], copy=True)
    g[0, 21, ...] = value  # in the middle of the second chunk of 16
    inputs["g"] = g
    ref, _ = testing.reference_for(name, inputs)
    chunked = _call(variant, inputs, chunk_size=16)
    sequential = _call(variant, inputs, sequential=True)
    assert np.all(np.isfinite(chunked))
    assert testing.rel_rms(ref, sequential) < 1e-5
    assert testing.rel_rms(ref, chunked) < 1e-5, testing.rel_rms(ref, chunked)


@pytest.mark.parametrize("variant", ["gla", "gated_deltanet"])
def test_hard_reset_every_few_tokens(variant):
    """Several hard resets in one chunk, and one at a chunk's first token."""
    inputs = _inputs(variant)
    g = np.array(inputs["g"], copy=True)
    for t in (0, 5, 16, 17, 30):
        g[0, t, ...] = -np.inf
    inputs["g"] = g
    ref, _ = testing.reference_for(variant, inputs)
    chunked = _call(variant, inputs, chunk_size=16)
    assert np.all(np.isfinite(chunked))
    assert testing.rel_rms(ref, chunked) < 1e-5


@pytest.mark.parametrize("variant", _GATED)
def test_positive_log_gate_is_an_error(variant):
    inputs = _inputs(variant)
    g = np.array(inputs["g"], copy=True)
    g[0, 3, 1, ...] = 0.25
    inputs["g"] = g
    with pytest.raises(ValueError, match=r"must be <= 0 .* g\[0, 3, 1.*0\.25"):
        _call(variant, inputs)


@pytest.mark.parametrize("chunk_size", [17, 4096, 65536])
def test_chunk_size_above_t_is_clamped(chunk_size):
    inputs = _inputs("gla", T=16)
    ref, _ = testing.reference_for("gla", inputs)
    assert testing.rel_rms(ref, _call("gla", inputs, chunk_size=chunk_size)) < 1e-5


@pytest.mark.parametrize("chunk_size", [2**31, 2**40, 2**63 - 1])
def test_huge_chunk_size_is_an_error(chunk_size):
    inputs = _inputs("gla", T=16)
    with pytest.raises(la.LaError, match=r"'chunk-size' must be in \[1, 65536\]"):
        _call("gla", inputs, chunk_size=chunk_size)


def _module():
    return ir.Module.parse(la.lower(la.gla, *(np.zeros((1, 16, 1, 8), np.float32),) * 4,
                                    stage="attention"))


# (la-lower-to-gpu-emulator is a test device of la-opt and la-run, not in the
# C API: test/Pipelines/pipeline-errors.mlir checks it.)
@pytest.mark.parametrize("pipeline", ["la-lower-to-cpu", "la-lower-to-gpu", "la-lower-to-nvvm"])
def test_nested_pipeline_is_an_error(pipeline):
    with pytest.raises(la.LaError, match=f"{pipeline}: runs on 'builtin.module', not on "
                                         "'func.func'"):
        ir.PassManager.parse(f"builtin.module(func.func({pipeline}))").run(_module())


@pytest.mark.parametrize("options, message", [
    ("la-lower-to-cpu{fuse=bogus}", "for the --fuse option: Cannot find option named 'bogus'"),
    ("la-lower-to-cpu{chunk-size=abc}",
     "la-lower-to-cpu: invalid options 'chunk-size=abc': for the --chunk-size option: "
     "'abc' value invalid for long argument"),
    ("la-lower-to-cpu{gate-spread-limit=wide}", "'wide' value invalid for floating point"),
    ("la-lower-to-cpu{no-such-option=1}", "la-lower-to-cpu: invalid options"),
    ("la-lower-to-nvvm{format=bogus}", "'format' must be bin, isa or fatbin"),
    ("la-lower-to-gpu{mma-precision=fp8}",
     "for the --mma-precision option: Cannot find option named 'fp8'"),
])
def test_option_errors_reach_the_exception(options, message):
    """Option errors, syntax errors included, are in LaError's text (not only
    on stderr), and nothing runs."""
    module = _module()
    before = str(module)
    with pytest.raises(la.LaError, match=message):
        ir.PassManager.parse(f"builtin.module({options})").run(module)
    assert str(module) == before


@pytest.mark.parametrize("V", [32, 33])
@pytest.mark.parametrize("chunk_size", [8, 64])
def test_partial_register_tiles_keep_their_destination(V, chunk_size):
    """The normaliser's extra value column makes V + 1 columns: a register
    tile of 32 lanes and a remainder. The remainder's accumulator must read
    the state (one-shot bufferization once gave the full tile's write a
    fresh buffer without it: NaN or garbage from the second chunk on)."""
    inputs = testing.make_inputs("linear", B=1, T=227, H=1, K=8, V=V, seed=1, positive_qk=True)
    ref, ref_state = testing.reference_for("linear", inputs, normalizer=True)
    o, s = la.linear_attention(inputs["q"], inputs["k"], inputs["v"], normalize=True,
                               output_final_state=True, chunk_size=chunk_size)
    assert testing.rel_rms(ref, np.asarray(o, np.float64)) < 1e-5
    assert testing.rel_rms(ref_state, np.asarray(s, np.float64)) < 1e-5


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("V", [9, 17])
def test_half_precision_values_of_any_width_compile(dtype, V):
    """bf16 and f16 values whose V is not a power of two: the chunk's
    non-finite guard once selected <9 x bfloat> vectors, which LLVM's x86
    backend cannot legalise (clang aborted). It tests the bits now."""
    inputs = testing.make_inputs("gla", B=1, T=70, H=1, K=8, V=V, seed=2)
    ref, _ = testing.reference_for("gla", inputs)
    o, _ = la.gla(inputs["q"], inputs["k"], inputs["v"], inputs["g"], dtype=dtype)
    assert testing.rel_rms(ref, np.asarray(o, np.float64)) < 1e-2


def test_translation_errors_reach_the_exception():
    """A module that is not in the LLVM dialect: the translation's own
    diagnostic, with its location, is in LaError's text."""
    module = _module()
    with pytest.raises(la.LaError, match=r"(?s)translation to LLVM IR failed.*"
                       r"loc\(.*\): cannot be converted to LLVM IR"):
        module.to_llvm_ir()


def test_lower_stages_come_from_the_kernel_pipeline(tmp_path):
    """la.lower's stages are the IR of the pipeline that compiles the kernel:
    the same as la-opt prints after the same passes of the same pipeline."""
    inputs = _inputs("gla", T=40)
    args = (la.gla, inputs["q"], inputs["k"], inputs["v"], inputs["g"])
    text = la.lower(*args, stage="attention", chunk_size=16)
    source = tmp_path / "gla.mlir"
    source.write_text(text)
    la_opt = os.path.join(_ROOT, "build", "bin", "la-opt")
    if not os.path.exists(la_opt):
        pytest.skip("la-opt is not built")
    # The package compiles for this machine: its vector width (la-opt's
    # default is 512 whatever the host).
    bits = _capi.lib().laHostVectorBits()
    pipeline = f"builtin.module(la-lower-to-cpu{{chunk-size=16 sequential=0 vector-bits={bits}}})"
    for stage, flag in (("linalg", "-mlir-print-ir-after=convert-la-to-linalg"),
                        ("tiled", "-mlir-print-ir-before=one-shot-bufferize")):
        shown = la.lower(*args, stage=stage, chunk_size=16)
        proc = subprocess.run([la_opt, str(source), f"--pass-pipeline={pipeline}", flag,
                               "-mlir-print-ir-module-scope", "-mlir-disable-threading",
                               "-o", os.devnull], capture_output=True, text=True, check=True)
        dumps = [d for d in re.split(r"^// -----// IR Dump .*$", proc.stderr, flags=re.M)
                 if d.strip()]
        expected = dumps[-1].strip()
        # The kernel's function also carries llvm.emit_c_interface.
        got = shown.replace(" attributes {llvm.emit_c_interface}", "").strip()
        assert got == expected, stage
    # The CPU options that used to be missing from la.lower's partial
    # pipeline are in what it shows now (the chunk's cumulative gates as a
    # scan over rows, the run-time choice of the channel-gate form).
    linalg = la.lower(*args, stage="linalg", chunk_size=16)
    assert "scf.if" in linalg and "scf.for" in linalg


def test_lower_all_into_a_directory(tmp_path):
    inputs = _inputs("gla", T=16)
    out = la.lower(la.gla, inputs["q"], inputs["k"], inputs["v"], inputs["g"], stage="all",
                   ir_dir=tmp_path / "ir")
    files = [os.path.join(d, f) for d, _, fs in os.walk(out) for f in fs]
    assert len(files) > 20
    assert any("la-lower-to-recurrence" in f for f in files)
    with pytest.raises(ValueError, match="ir_dir is for stage='all'"):
        la.lower(la.gla, inputs["q"], inputs["k"], inputs["v"], inputs["g"], stage="llvm",
                 ir_dir=tmp_path / "other")


def test_crash_reproducer(tmp_path):
    """A failing pipeline writes a reproducer (the module and the pipeline)."""
    # Packed sequences' checkpoints under the GPU's chunk-parallel schedule:
    # la-lower-to-gpu fails (a partial segment's run-time length).
    module = ir.Module.parse(la.runner.attention_mlir("linear", 1, 40, 2, 16, 16,
                                                      cu_seqlens_len=3, checkpoint_every=8,
                                                      checkpoint_rows=4))
    reproducer = tmp_path / "repro.mlir"
    with pytest.raises(la.LaError, match="needs static shapes for the chunk-parallel GPU "
                                         "schedule"):
        ir.PassManager.parse("builtin.module(la-lower-to-gpu{chunk-size=16 "
                             "schedule=chunk-parallel})").run(
            module, crash_reproducer=reproducer)
    text = reproducer.read_text()
    assert "mlir_reproducer" in text and "la-lower-to-recurrence" in text


def test_version():
    with open(os.path.join(_ROOT, "pyproject.toml")) as f:
        pyproject = re.search(r'^version = "([^"]+)"', f.read(), re.M).group(1)
    with open(os.path.join(_ROOT, "CMakeLists.txt")) as f:
        cmake = re.search(r"project\(la .*VERSION ([0-9.]+)\)", f.read()).group(1)
    assert la.__version__ == pyproject == cmake
    la_opt = os.path.join(_ROOT, "build", "bin", "la-opt")
    if os.path.exists(la_opt):
        out = subprocess.run([la_opt, "--version"], capture_output=True, text=True).stdout
        assert f"la version {cmake}" in out


@pytest.mark.parametrize("flags", [(), ("--parallel",), ("--sequential",),
                                   ("--target=gpu-emulator",)],
                         ids=["cpu", "parallel", "sequential", "gpu-emulator"])
def test_a_result_returned_twice(flags):
    """A function that returns one tensor in two results (here the final
    state) used to crash la-lower-to-cpu and the GPU pipelines (upstream
    buffer-results-to-out-params erased the shared allocation); each result
    now gets a buffer of its own (la-distinct-results), both correct."""
    from la import reference, runner
    from test_low_rank_general import _la_run

    if runner.find_la_run() is None:
        pytest.skip("la-run is not built")
    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 24, 2, 8)).astype(np.float32)
    v = rng.standard_normal((1, 24, 2, 6)).astype(np.float32)
    qt, vt, st = "tensor<1x24x2x8xf32>", "tensor<1x24x2x6xf32>", "tensor<1x2x8x6xf32>"
    mlir = (f"func.func @twice(%q: {qt}, %v: {vt}) -> ({vt}, {st}, {st}) {{\n"
            f"  %o, %s = la.attention linear %q, %q, %v : {qt}, {qt}, {vt} -> {vt}, {st}\n"
            f"  return %o, %s, %s : {vt}, {st}, {st}\n}}\n")
    extra = tuple(f for f in flags if f != "--sequential")
    o, s1, s2 = _la_run(mlir, [q, v], 3, chunk=8, sequential="--sequential" in flags,
                        extra=extra)
    ref_o, ref_s = reference.recurrence(q, q, v, update="additive", gate="none")
    assert testing.rel_rms(ref_o, o) <= 1e-5
    assert testing.rel_rms(ref_s, s1) <= 1e-5
    np.testing.assert_array_equal(s1, s2)
