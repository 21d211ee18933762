"""Execution tests of the CPU path: la-run's outputs against the fp64 reference.

Every test builds one ``la.attention`` function (``la.runner.attention_mlir``),
compiles and runs it with ``build/bin/la-run`` -- chunked (``--chunk-size``)
or token by token (``--sequential``) -- and compares ``o`` and the final state
with ``la.reference.recurrence`` in float64 on the very same (rounded) inputs:

* f32 inputs: ``rel_rms(ref, out) <= 1e-5``;
* f16/bf16 q, k, v (g, beta, erase, write and states stay f32): ``<= 5e-3``.

Gates use ``gate_scale=1/16`` by default: with make_inputs' default scale the
state forgets everything within ~30 tokens, which would hide errors in the
state passed between chunks. Identical runs are cached, so e.g. the
chunked == sequential test reuses the runs of the other tests.

The whole module is skipped when la-run is not built. ``pytest -rA`` (or
``-v``) lists every comparison in the terminal summary.
"""

import functools
import time

import numpy as np
import pytest

from la import runner
from la import testing as lt

LA_RUN = runner.find_la_run()
pytestmark = pytest.mark.skipif(
    LA_RUN is None,
    reason="la-run is not built (build/bin/la-run missing; build the project "
    "or set LA_RUN to the executable)",
)

TOL = {"f32": 1e-5, "f16": 5e-3, "bf16": 5e-3}

ADDITIVE = ("linear", "retention", "mamba2", "gla")
DELTA = ("deltanet", "decayed_deltanet", "gated_deltanet", "kda")
#: Gated DeltaNet-2 (erase_write rule, channel gate); its other gate kinds are
#: covered by test_low_rank_general.py and the stress subset.
ERASE_WRITE = ("gated_deltanet2",)
#: the dplr rule (RWKV-7, channel gate; its other gate kinds: test_low_rank_general.py)
DPLR = ("rwkv7",)
ALL = ADDITIVE + DELTA + ERASE_WRITE + DPLR
#: every variant has a chunked path (the delta rule through the WY form, the
#: erase_write and dplr rules through the general low-rank form)
CHUNKED = ALL

#: shape cases: (B, T, H, HV, K, V, chunk size, with initial state)
CASES = {
    "T<C": (1, 10, 1, 1, 8, 16, 16, False),
    "T=C,B=2": (2, 16, 2, 2, 16, 8, 16, False),
    "T%C!=0,B=2,HV=2H,K!=V,state": (2, 37, 2, 4, 16, 8, 16, True),
    "T=1,B=2,state": (2, 1, 1, 1, 8, 8, 16, True),
    # decode's one-pass state update with grouped value heads and no state
    "T=1,B=3,HV=2H,K!=V": (3, 1, 2, 4, 16, 8, 16, False),
    "C=64,T=150,state": (1, 150, 2, 2, 16, 16, 64, True),
}
MAIN = "T%C!=0,B=2,HV=2H,K!=V,state"

#: statistics for the terminal summary (see conftest.py)
RECORDS = []


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------

def _inputs(variant, case, *, seed=0, gate_scale=1 / 16, gate_min=None, positive_qk=False,
            cu_seqlens=None):
    B, T, H, HV, K, V, _, state = CASES[case]
    return lt.make_inputs(
        variant, B, T, H, K, V, HV=HV, seed=seed, gate_scale=gate_scale, gate_min=gate_min,
        with_initial_state=state, positive_qk=positive_qk, cu_seqlens=cu_seqlens,
    )


def _run(variant, inputs, *, dtype="f32", chunk=16, sequential=False, fuse=None, **attrs):
    """run_attention on inputs; returns (prepared inputs, o, state, timing)."""
    prepared = runner.prepare_inputs(inputs, dtype)
    start = time.perf_counter()
    o, s, timing = runner.run_attention(
        variant, prepared, dtype=dtype, chunk_size=chunk, sequential=sequential,
        fuse=fuse, **attrs
    )
    timing["wall_s"] = time.perf_counter() - start
    return prepared, o, s, timing


@functools.lru_cache(maxsize=None)
def _cached(variant, case, dtype="f32", sequential=False, chunk=None, attrs=(), fuse=None,
            **gen):
    """A cached (inputs, o, state, timing, ref_o, ref_state) for a shape case."""
    inputs = _inputs(variant, case, **gen)
    chunk = CASES[case][6] if chunk is None else chunk
    prepared, o, s, timing = _run(variant, inputs, dtype=dtype, chunk=chunk,
                                  sequential=sequential, fuse=fuse, **dict(attrs))
    ref_o, ref_s = lt.reference_for(variant, prepared, **dict(attrs))
    return prepared, o, s, timing, ref_o, ref_s


def _describe(inputs):
    return ", ".join(
        f"{k}{list(np.shape(v))}:{np.asarray(v).dtype}" for k, v in inputs.items()
    )


def check(name, ref, out, tol, *, label, inputs=None, timing=None):
    """Assert rel_rms(ref, out) <= tol with a message that helps debugging."""
    ref = np.asarray(ref, dtype=np.float64)
    out = np.asarray(out, dtype=np.float64)
    assert ref.shape == out.shape, f"{label}: {name} shape {out.shape}, expected {ref.shape}"
    err = lt.rel_rms(ref, out)
    RECORDS.append((label, name, err, tol, timing))
    finite = bool(np.all(np.isfinite(out)))
    if finite and err <= tol:
        return err
    diff = np.abs(ref - out)
    diff = np.where(np.isnan(diff), np.inf, diff)
    idx = np.unravel_index(int(np.argmax(diff)), diff.shape)
    lines = [
        f"{label}: {name} rel_rms = {err:.3e} > {tol:.1e}" if finite else
        f"{label}: {name} has {int(np.sum(~np.isfinite(out)))} non-finite values "
        f"(rel_rms = {err:.3e})",
        f"  worst element {tuple(int(i) for i in idx)}: expected {ref[idx]!r}, got {out[idx]!r}",
        f"  rms(ref) = {np.sqrt(np.mean(ref ** 2)):.4g}, max|ref - out| = {diff[idx]:.4g}",
    ]
    if inputs is not None:
        lines.append(f"  inputs: {_describe(inputs)}")
    if timing is not None:
        lines.append(f"  command: {timing['command']}")
        lines.append("  MLIR:\n" + timing["mlir"])
    pytest.fail("\n".join(lines))


def check_both(label, prepared, o, s, ref_o, ref_s, dtype="f32", timing=None):
    tol = TOL[dtype]
    check("o", ref_o, o, tol, label=label, inputs=prepared, timing=timing)
    if ref_s is not None:
        check("final_state", ref_s, s, tol, label=label, inputs=prepared, timing=timing)


def _slice_time(inputs, start, stop, initial_state):
    part = {}
    for key, value in inputs.items():
        if key in ("q", "k", "v", "g", "beta", "erase", "write", "a", "b"):
            part[key] = value[:, start:stop]
        elif key == "initial_state":
            continue
        else:
            part[key] = value
    part["initial_state"] = initial_state
    return part


def _label(*parts):
    return " ".join(str(p) for p in parts if p)


# --------------------------------------------------------------------------
# the chunked path
# --------------------------------------------------------------------------

@pytest.mark.parametrize("fuse", ["fused", "materialized"])
@pytest.mark.parametrize("case", ["T%C!=0,B=2,HV=2H,K!=V,state", "C=64,T=150,state"])
@pytest.mark.parametrize("variant", CHUNKED)
def test_chunked_schedules(variant, case, fuse):
    """Both schedules of la-fuse-recurrence, forced: the program fused per
    (batch, value head) with the state carried over chunks, and the one with
    materialised per-chunk states (la-run's default on one thread is fused)."""
    prepared, o, s, timing, ref_o, ref_s = _cached(variant, case, fuse=fuse)
    check_both(_label(variant, "chunked", fuse, case), prepared, o, s, ref_o, ref_s,
               timing=timing)


@pytest.mark.parametrize("tile", [(3, 5), (1, 7)])
@pytest.mark.parametrize("fuse", ["fused", "materialized"])
@pytest.mark.parametrize("variant", ["gla", "gated_deltanet", "kda", "retention"])
def test_tile_sizes_that_do_not_divide(variant, fuse, tile):
    """Register tiles of 3 x 5 and 1 x 7 divide none of C, K, V, H: every
    tiled loop has a peeled partial tile (C=64, K=16, V=8, T=150, HV=2H)."""
    inputs = lt.make_inputs(variant, 2, 150, 2, 16, 8, HV=4, seed=11, gate_scale=1 / 16)
    prepared = runner.prepare_inputs(inputs, "f32")
    o, s, timing = runner.run_attention(variant, prepared, chunk_size=64, fuse=fuse,
                                        tile=tile)
    ref_o, ref_s = lt.reference_for(variant, prepared)
    check_both(_label(variant, fuse, f"tile {tile[0]}x{tile[1]}"), prepared, o, s,
               ref_o, ref_s, timing=timing)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("variant", CHUNKED)
def test_chunked(variant, case):
    """Chunked path on every shape case: T<C, T=C, T%C!=0, T=1, C=64."""
    prepared, o, s, timing, ref_o, ref_s = _cached(variant, case)
    check_both(_label(variant, "chunked", case), prepared, o, s, ref_o, ref_s, timing=timing)


@pytest.mark.parametrize(
    "variant,case",
    [("linear", MAIN), ("linear", "C=64,T=150,state"), ("mamba2", MAIN), ("gla", MAIN)],
)
def test_chunked_normalizer(variant, case):
    """normalizer=True with positive (elu+1) q and k, so z . q stays away from 0."""
    prepared, o, s, timing, ref_o, ref_s = _cached(
        variant, case, attrs=(("normalizer", True),), positive_qk=True
    )
    check_both(_label(variant, "chunked normalizer", case), prepared, o, s, ref_o, ref_s,
               timing=timing)


@pytest.mark.parametrize("variant,chunk", [("gla", 5), ("mamba2", 1)])
def test_chunked_odd_chunk_sizes(variant, chunk):
    """A chunk size that is not a power of two, and chunks of one token."""
    prepared, o, s, timing, ref_o, ref_s = _cached(variant, MAIN, chunk=chunk)
    check_both(_label(variant, f"chunk={chunk}", MAIN), prepared, o, s, ref_o, ref_s,
               timing=timing)


# --------------------------------------------------------------------------
# the sequential path
# --------------------------------------------------------------------------

@pytest.mark.parametrize("variant", ALL)
def test_sequential(variant):
    prepared, o, s, timing, ref_o, ref_s = _cached(variant, MAIN, sequential=True)
    check_both(_label(variant, "sequential", MAIN), prepared, o, s, ref_o, ref_s, timing=timing)


def test_sequential_single_token():
    prepared, o, s, timing, ref_o, ref_s = _cached("kda", "T=1,B=2,state", sequential=True)
    check_both("kda sequential T=1", prepared, o, s, ref_o, ref_s, timing=timing)


@pytest.mark.parametrize("variant", CHUNKED)
def test_chunked_equals_sequential(variant):
    """The chunked and the sequential program agree (both f32)."""
    _, o_c, s_c, t_c, _, _ = _cached(variant, MAIN)
    prepared, o_s, s_s, t_s, _, _ = _cached(variant, MAIN, sequential=True)
    label = _label(variant, "chunked vs sequential", MAIN)
    check("o", o_s, o_c, TOL["f32"], label=label, inputs=prepared, timing=t_c)
    check("final_state", s_s, s_c, TOL["f32"], label=label, inputs=prepared, timing=t_c)


@pytest.mark.parametrize(
    "variant,sequential,attrs",
    [
        ("gated_deltanet", True, (("qk_l2norm", True),)),
        ("kda", True, (("qk_l2norm", True), ("scale", 0.5))),
        ("gla", False, (("qk_l2norm", True), ("scale", 0.375))),
    ],
)
def test_qk_l2norm_and_scale(variant, sequential, attrs):
    prepared, o, s, timing, ref_o, ref_s = _cached(variant, MAIN, sequential=sequential,
                                                   attrs=attrs)
    path = "sequential" if sequential else "chunked"
    check_both(_label(variant, path, dict(attrs), MAIN), prepared, o, s, ref_o, ref_s,
               timing=timing)


# --------------------------------------------------------------------------
# varlen, segments, output options
# --------------------------------------------------------------------------

VARLEN_T = 40
VARLEN_CU = [0, 5, 22, 40]  # lengths 5, 17, 18: T<C, and straddling chunk boundaries


@pytest.mark.parametrize(
    "variant,sequential",
    [(v, False) for v in CHUNKED] + [(v, True) for v in DELTA + ERASE_WRITE],
)
def test_varlen(variant, sequential):
    """Three packed sequences of different lengths (cu_seqlens), initial state."""
    inputs = lt.make_inputs(variant, 1, VARLEN_T, 2, 16, 8, HV=4, seed=3, gate_scale=1 / 16,
                            with_initial_state=True, cu_seqlens=VARLEN_CU)
    prepared, o, s, timing = _run(variant, inputs, chunk=16, sequential=sequential)
    ref_o, ref_s = lt.reference_for(variant, prepared)
    path = "sequential" if sequential else "chunked"
    check_both(_label(variant, path, f"cu_seqlens={VARLEN_CU}"), prepared, o, s, ref_o, ref_s,
               timing=timing)


def test_varlen_empty_sequence():
    """A zero-length sequence in cu_seqlens keeps its initial state."""
    cu = [0, 16, 16, 40]
    inputs = lt.make_inputs("mamba2", 1, VARLEN_T, 2, 8, 8, seed=4, gate_scale=1 / 16,
                            with_initial_state=True, cu_seqlens=cu)
    prepared, o, s, timing = _run("mamba2", inputs, chunk=16)
    ref_o, ref_s = lt.reference_for("mamba2", prepared)
    check_both(_label("mamba2 chunked", f"cu_seqlens={cu}"), prepared, o, s, ref_o, ref_s,
               timing=timing)
    np.testing.assert_array_equal(s[1], prepared["initial_state"][1])


@pytest.mark.parametrize("variant,sequential", [("gla", False), ("gated_deltanet", False),
                                               ("kda", False), ("gated_deltanet", True),
                                               ("gated_deltanet2", False)])
def test_segmented(variant, sequential):
    """Two halves with the final state carried over equal one pass."""
    split = 19  # not a chunk boundary
    full_in = lt.make_inputs(variant, 2, 40, 2, 16, 8, HV=4, seed=5, gate_scale=1 / 16,
                             with_initial_state=True)
    prepared, o_full, s_full, t_full = _run(variant, full_in, sequential=sequential)
    _, o1, s1, _ = _run(variant, _slice_time(prepared, 0, split, prepared["initial_state"]),
                        sequential=sequential)
    _, o2, s2, t2 = _run(variant, _slice_time(prepared, split, 40, s1),
                         sequential=sequential)
    o_seg = np.concatenate([o1, o2], axis=1)
    ref_o, ref_s = lt.reference_for(variant, prepared)
    path = "sequential" if sequential else "chunked"
    label = _label(variant, path, f"segments [0,{split}) + [{split},40)")
    check_both(label + " vs reference", prepared, o_seg, s2, ref_o, ref_s, timing=t2)
    check("o", o_full, o_seg, TOL["f32"], label=label + " vs one pass", inputs=prepared,
          timing=t2)
    check("final_state", s_full, s2, TOL["f32"], label=label + " vs one pass",
          inputs=prepared, timing=t2)


@pytest.mark.parametrize(
    "variant,sequential", [(v, False) for v in CHUNKED] + [("gated_deltanet", True)]
)
def test_repeated_calls_give_the_same_result(variant, sequential):
    """--repeat=3 calls the compiled function three times on the same buffers;
    the result must not change, i.e. the program must not write its inputs
    (e.g. accumulate into the initial_state buffer)."""
    inputs = _inputs(variant, "T=C,B=2", seed=8)
    B, _, _, HV, K, V, _, _ = CASES["T=C,B=2"]
    inputs["initial_state"] = (
        0.1 * np.random.default_rng(8).standard_normal((B, HV, K, V))
    ).astype(np.float32)
    prepared = runner.prepare_inputs(inputs)
    o, s, timing = runner.run_attention(variant, prepared, chunk_size=16,
                                        sequential=sequential, repeat=3)
    ref_o, ref_s = lt.reference_for(variant, prepared)
    path = "sequential" if sequential else "chunked"
    check_both(_label(variant, path, "initial state, --repeat=3"), prepared, o, s, ref_o, ref_s,
               timing=timing)


def test_without_final_state():
    inputs = _inputs("mamba2", MAIN, seed=6)
    prepared = runner.prepare_inputs(inputs)
    o, s, timing = runner.run_attention("mamba2", prepared, chunk_size=16,
                                        output_final_state=False)
    assert s is None
    ref_o, _ = lt.reference_for("mamba2", prepared)
    check("o", ref_o, o, TOL["f32"], label="mamba2 chunked, no final state", inputs=prepared,
          timing=timing)


# --------------------------------------------------------------------------
# f16 / bf16 inputs
# --------------------------------------------------------------------------

@pytest.mark.parametrize(
    "variant,dtype,sequential",
    [
        ("gla", "bf16", False),
        ("retention", "bf16", False),
        ("gated_deltanet", "bf16", True),
        ("gated_deltanet", "bf16", False),
        ("kda", "f16", False),
        ("mamba2", "f16", False),
        ("linear", "f16", False),
        ("kda", "f16", True),
        ("gated_deltanet2", "bf16", False),
        ("gated_deltanet2", "bf16", True),
    ],
)
def test_low_precision(variant, dtype, sequential):
    """f16/bf16 q, k, v; the reference gets the same rounded values."""
    prepared, o, s, timing, ref_o, ref_s = _cached(variant, MAIN, dtype=dtype,
                                                   sequential=sequential)
    expected = np.float16 if dtype == "f16" else np.float32
    assert o.dtype == expected, f"o has dtype {o.dtype}, expected {np.dtype(expected)}"
    if dtype == "bf16":
        np.testing.assert_array_equal(runner.round_to_bf16(o), o)  # o holds bf16 values
    path = "sequential" if sequential else "chunked"
    check_both(_label(variant, path, dtype, MAIN), prepared, o, s, ref_o, ref_s, dtype=dtype,
               timing=timing)


# --------------------------------------------------------------------------
# strong decays
# --------------------------------------------------------------------------

@pytest.mark.parametrize(
    "variant,chunk,sequential",
    [
        ("mamba2", 64, False),
        ("gla", 64, False),
        ("gla", 16, False),
        ("gated_deltanet", 64, True),
        ("kda", 64, True),
        ("gated_deltanet", 64, False),
        ("kda", 64, False),
        ("kda", 16, False),
        ("gated_deltanet2", 64, False),
    ],
)
def test_strong_decay(variant, chunk, sequential):
    """Log-gates down to -30 (gate_scale=40, clamped at -30): cumulative log
    decays reach ~-1000 inside a chunk; outputs must stay finite and exact."""
    inputs = lt.make_inputs(variant, 1, 100, 2, 16, 16, seed=7, gate_scale=40.0,
                            gate_min=-30.0, with_initial_state=True)
    assert inputs["g"].min() == np.float32(-30.0)
    prepared, o, s, timing = _run(variant, inputs, chunk=chunk, sequential=sequential)
    ref_o, ref_s = lt.reference_for(variant, prepared)
    path = "sequential" if sequential else f"chunked C={chunk}"
    check_both(_label(variant, path, "g down to -30"), prepared, o, s, ref_o, ref_s,
               timing=timing)


# --------------------------------------------------------------------------
# channel-gate score products: the one-product form and the blocked form
# --------------------------------------------------------------------------

@pytest.mark.parametrize("variant", ["gla", "kda", "gated_deltanet2"])
@pytest.mark.parametrize("gate_scale", [1 / 16, 1.0])
@pytest.mark.parametrize("spread_limit", [0.0, 4.0, 32.0])
def test_channel_gate_forms(variant, gate_scale, spread_limit):
    """Each chunk takes the one-product form where its cumulative gates stay
    within ``spread_limit`` of its first row (0: never), else the blocked
    form. With these gates the limits 4 and 32 split the chunks between the
    two forms differently; every split must give the reference's numbers.
    gated_deltanet2 covers the products whose query side uses the exclusive
    gates."""
    inputs = lt.make_inputs(variant, 1, 200, 2, 16, 16, seed=21, gate_scale=gate_scale,
                            with_initial_state=True)
    prepared = runner.prepare_inputs(inputs, "f32")
    o, s, timing = runner.run_attention(variant, prepared, chunk_size=32, gate_block=8,
                                        gate_spread_limit=spread_limit)
    ref_o, ref_s = lt.reference_for(variant, prepared)
    check_both(_label(variant, "chunked C=32", f"gate scale {gate_scale:g}, "
                      f"spread limit {spread_limit:g}"), prepared, o, s, ref_o, ref_s,
               timing=timing)


# --------------------------------------------------------------------------
# the runner itself
# --------------------------------------------------------------------------

def test_round_to_bf16():
    x = np.array([1.0, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 1.0 + 2.0 ** -8 + 2.0 ** -20,
                  -2.5, 0.0, np.inf, -np.inf, 3.4e38, 1e-40], dtype=np.float32)
    want = np.array([1.0, 1.0, 1.0 + 2.0 ** -6, 1.0 + 2.0 ** -7, -2.5, 0.0, np.inf, -np.inf,
                     np.inf, 1e-40], dtype=np.float64)
    got = runner.round_to_bf16(x)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got[:9], want[:9].astype(np.float32))
    assert abs(got[9] - 1e-40) < 2.0 ** -133  # subnormal, spacing 2^-133
    assert np.isnan(runner.round_to_bf16(np.array([np.nan], dtype=np.float32)))[0]
    np.testing.assert_array_equal(runner.round_to_bf16(got), got)
    # NaNs come back quiet, with their sign and upper payload (an all-ones
    # pattern must not carry out of 32 bits), and the shape is kept
    nans = np.array([0xFFFFFFFF, 0x7F800001, 0xFF80FFFF], np.uint32).view(np.float32)
    np.testing.assert_array_equal(runner.round_to_bf16(nans).view(np.uint32),
                                  np.array([0xFFFF0000, 0x7FC00000, 0xFFC00000], np.uint32))
    grid = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2] / 3
    assert runner.round_to_bf16(grid).shape == (3, 2)


def test_la_run_error_is_raised_with_stderr():
    """A verifier error (a positive log_decay) surfaces as LaRunError with stderr."""
    inputs = lt.make_inputs("retention", 1, 4, 1, 4, 4)
    inputs["log_decay"] = np.array([0.5], dtype=np.float32)
    with pytest.raises(runner.LaRunError) as info:
        runner.run_attention("retention", inputs)
    assert info.value.returncode != 0
    assert info.value.stderr.strip()
    assert info.value.stderr.strip() in str(info.value)
