"""cu_seqlens validation in every Python path that hands it to a kernel or
to the reference: la.gla & co. (and la.lower), la.runner.prepare_inputs /
run_attention / attention_mlir, la.testing.make_inputs / reference_for.

The offsets must be a 1-D array of N+1 >= 2 values of an integer (not bool)
dtype, start at 0, stay in [0, T], never decrease and end at T; the checks
work in int64 so that unsigned dtypes cannot wrap around (np.diff of a
decreasing uint32 array is positive). The error cases need no build; the
valid packed case against the fp64 reference needs libLaCAPI.so (la.gla &
co.) or la-run (run_attention).
"""

import numpy as np
import pytest

import la
from la import _capi, runner
from la import testing as lt

B, T, H, K, V = 1, 8, 1, 4, 4

#: name -> (cu_seqlens, error type, message pattern)
BAD = {
    "uint32-decreasing": (np.array([0, 5, 3, 8], np.uint32), ValueError,
                          r"cu_seqlens\[2\] = 3 is smaller than cu_seqlens\[1\] = 5"),
    "uint64-decreasing": (np.array([0, 5, 3, 8], np.uint64), ValueError,
                          r"cu_seqlens\[2\] = 3 is smaller than cu_seqlens\[1\] = 5"),
    "uint8-decreasing": (np.array([0, 6, 2, 8], np.uint8), ValueError,
                         r"cu_seqlens\[2\] = 2 is smaller than cu_seqlens\[1\] = 6"),
    "int64-decreasing": (np.array([0, 5, 3, 8], np.int64), ValueError,
                         r"cu_seqlens\[2\] = 3 is smaller than cu_seqlens\[1\] = 5"),
    "negative": (np.array([0, -2, 8], np.int32), ValueError,
                 r"cu_seqlens\[1\] = -2 is outside \[0, T=8\]"),
    "past-T": (np.array([0, 9, 8], np.int64), ValueError,
               r"cu_seqlens\[1\] = 9 is outside \[0, T=8\]"),
    "uint64-huge": (np.array([0, 2**64 - 1, 8], np.uint64), ValueError,
                    r"cu_seqlens\[1\] = 18446744073709551615 is outside \[0, T=8\]"),
    "beyond-int32": (np.array([0, 2**32 + 3, 8], np.int64), ValueError,
                     r"cu_seqlens\[1\] = 4294967299 is outside \[0, T=8\]"),
    "last-not-T": (np.array([0, 3, 7], np.int32), ValueError,
                   r"from 0 to T=8, got \[0, 3, 7\]: the last offset cu_seqlens\[2\] = 7 "
                   r"is not T=8"),
    "first-not-0": (np.array([1, 8], np.int32), ValueError,
                    r"the first offset cu_seqlens\[0\] = 1 is not 0"),
    "first-negative": (np.array([-1, 8], np.int32), ValueError,
                       r"the first offset cu_seqlens\[0\] = -1 is not 0"),
    "float": (np.array([0.0, 8.0]), TypeError,
              r"cu_seqlens must have an integer dtype .* got float64"),
    "bool": (np.array([False, True]), TypeError,
             r"cu_seqlens must have an integer dtype \(int32 or int64; not bool\), got bool"),
    "object": (np.array([0, 2**70, 8], dtype=object), TypeError,
               r"cu_seqlens must have an integer dtype"),
    "2-D": (np.array([[0, 8]], np.int32), ValueError,
            r"cu_seqlens must be a 1-D array of N\+1 >= 2 offsets, got shape \(1, 2\)"),
    "too-short": (np.array([0], np.int32), ValueError,
                  r"cu_seqlens must be a 1-D array of N\+1 >= 2 offsets, got shape \(1,\)"),
    "list-last-not-T": ([0, 3, 7], ValueError, r"cu_seqlens\[2\] = 7 is not T=8"),
}

#: public function -> variant (one additive, one delta rule)
FUNCTIONS = {"gla": "gla", "gated_delta_rule": "gated_deltanet"}


def _inputs(variant, **kwargs):
    return lt.make_inputs(variant, B, T, H, K, V, seed=1, **kwargs)


def _call(name, inputs, **kwargs):
    d = inputs
    if name == "gla":
        return la.gla(d["q"], d["k"], d["v"], d["g"], **kwargs)
    return la.gated_delta_rule(d["q"], d["k"], d["v"], d["g"], d["beta"], **kwargs)


def _lower(name, inputs, **kwargs):
    d = inputs
    args = (d["q"], d["k"], d["v"], d["g"]) + ((d["beta"],) if name != "gla" else ())
    return la.lower(getattr(la, name), *args, stage="attention", **kwargs)


# --------------------------------------------------------------------------
# every bad case through every entry point
# --------------------------------------------------------------------------

ENTRY_POINTS = {
    # la.gla & co.: checked before anything is compiled (no build needed)
    "ops.call": lambda name, variant, cu: _call(name, _inputs(variant), cu_seqlens=cu),
    "ops.lower": lambda name, variant, cu: _lower(name, _inputs(variant), cu_seqlens=cu),
    "ops.attention": lambda name, variant, cu: la.attention(
        variant, *(_inputs(variant)[k] for k in ("q", "k", "v", "g")),
        **({"beta": _inputs(variant)["beta"]} if variant != "gla" else {}), cu_seqlens=cu),
    "testing.make_inputs": lambda name, variant, cu: _inputs(variant, cu_seqlens=cu),
    "testing.reference_for": lambda name, variant, cu: lt.reference_for(
        variant, dict(_inputs(variant), cu_seqlens=cu)),
    "testing.reference_for-attr": lambda name, variant, cu: lt.reference_for(
        variant, _inputs(variant), cu_seqlens=cu),
    "runner.prepare_inputs": lambda name, variant, cu: runner.prepare_inputs(
        dict(_inputs(variant), cu_seqlens=cu)),
    # checked before la-run is looked up or run
    "runner.run_attention": lambda name, variant, cu: runner.run_attention(
        variant, dict(_inputs(variant), cu_seqlens=cu), la_run="/nonexistent/la-run"),
}


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
@pytest.mark.parametrize("name", list(FUNCTIONS))
@pytest.mark.parametrize("case", list(BAD))
def test_bad_cu_seqlens(case, name, entry):
    cu, error, pattern = BAD[case]
    with pytest.raises(error, match=pattern) as info:
        ENTRY_POINTS[entry](name, FUNCTIONS[name], cu)
    assert "cu_seqlens" in str(info.value)


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_cu_seqlens_requires_batch_one(entry):
    """B > 1 with cu_seqlens (q of shape [2, T, H, K])."""
    cu = np.array([0, 4, 8], np.int32)
    variant = "gla"
    with pytest.raises(ValueError, match=r"cu_seqlens requires B == 1.*B=2"):
        if entry == "testing.make_inputs":
            lt.make_inputs(variant, 2, T, H, K, V, cu_seqlens=cu)
            return
        inputs = lt.make_inputs(variant, 2, T, H, K, V, seed=1)
        d = dict(inputs, cu_seqlens=cu)
        if entry == "ops.call":
            la.gla(d["q"], d["k"], d["v"], d["g"], cu_seqlens=cu)
        elif entry == "ops.lower":
            la.lower(la.gla, d["q"], d["k"], d["v"], d["g"], cu_seqlens=cu, stage="attention")
        elif entry == "ops.attention":
            la.attention("gla", d["q"], d["k"], d["v"], d["g"], cu_seqlens=cu)
        elif entry == "testing.reference_for":
            lt.reference_for(variant, d)
        elif entry == "testing.reference_for-attr":
            lt.reference_for(variant, inputs, cu_seqlens=cu)
        elif entry == "runner.prepare_inputs":
            runner.prepare_inputs(d)
        else:
            runner.run_attention(variant, d, la_run="/nonexistent/la-run")


def test_t_beyond_int32():
    """The kernels take int32 offsets: T must fit (checked without building
    such an input)."""
    big = 2**31
    with pytest.raises(ValueError, match=r"T=2147483648 does not fit in int32"):
        lt._check_cu_seqlens(np.array([0, big], np.int64), big)
    assert lt._check_cu_seqlens(np.array([0, 2**31 - 1], np.int64), 2**31 - 1).dtype == np.int64


@pytest.mark.parametrize("bad", [True, 3.0, "4", None])
def test_attention_mlir_cu_seqlens_len(bad):
    if bad is None:
        with pytest.raises(ValueError, match=r"cu_seqlens_len must be >= 2"):
            runner.attention_mlir("gla", 1, T, H, K, V, cu_seqlens_len=1)
        return
    with pytest.raises(TypeError, match=r"cu_seqlens_len must be an integer"):
        runner.attention_mlir("gla", 1, T, H, K, V, cu_seqlens_len=bad)


def test_long_offsets_are_abbreviated():
    cu = np.concatenate([np.arange(20), [3, 30]]).astype(np.int64)
    with pytest.raises(ValueError, match=r"got \[0, 1, 2, 3, 4, \.\.\., 17, 18, 19, 3, 30\] "
                                         r"\(22 offsets\)") as info:
        lt._check_cu_seqlens(cu, 30)
    assert "cu_seqlens[20] = 3 is smaller than cu_seqlens[19] = 19" in str(info.value)


# --------------------------------------------------------------------------
# valid offsets
# --------------------------------------------------------------------------

VALID_T = 16
VALID_CU = [0, 5, 5, 16]  # an empty sequence in the middle, one straddling a chunk


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32, np.uint64, np.int16])
def test_valid_offsets_accepted_as_int32(dtype):
    cu = np.array(VALID_CU, dtype)
    inputs = lt.make_inputs("gla", 1, VALID_T, 1, 16, 16, cu_seqlens=cu)
    assert inputs["cu_seqlens"].dtype == np.int32
    np.testing.assert_array_equal(inputs["cu_seqlens"], VALID_CU)
    prepared = runner.prepare_inputs(dict(inputs, cu_seqlens=cu))
    assert prepared["cu_seqlens"].dtype == np.int32
    np.testing.assert_array_equal(prepared["cu_seqlens"], VALID_CU)
    text = la.lower(la.gla, inputs["q"], inputs["k"], inputs["v"], inputs["g"],
                    cu_seqlens=cu, stage="attention")
    assert "cu_seqlens(%cu : tensor<?xi32>)" in text  # any number of sequences


def _valid(variant):
    return lt.make_inputs(variant, 1, VALID_T, 1, 16, 16, seed=4, gate_scale=1 / 16,
                          with_initial_state=True, cu_seqlens=VALID_CU)


@pytest.mark.skipif(_capi.library_path() is None, reason="libLaCAPI.so is not built")
@pytest.mark.parametrize("cu_dtype", [np.int32, np.uint32])
@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_valid_packed_matches_reference(name, cu_dtype, tmp_path, monkeypatch):
    monkeypatch.setenv("LA_CACHE_DIR", str(tmp_path / "cache"))
    la.clear_cache()
    variant = FUNCTIONS[name]
    inputs = _valid(variant)
    cu = np.array(VALID_CU, cu_dtype)
    o, s = _call(name, inputs, cu_seqlens=cu, initial_state=inputs["initial_state"],
                 output_final_state=True, chunk_size=8)
    assert s.shape == (3, 1, 16, 16)
    ref_o, ref_s = lt.reference_for(variant, inputs)
    assert lt.rel_rms(ref_o, o) < 1e-5
    assert lt.rel_rms(ref_s, s) < 1e-5
    # the empty sequence keeps its initial state
    np.testing.assert_allclose(s[1], inputs["initial_state"][1], rtol=1e-6, atol=1e-7)
    la.clear_cache()


@pytest.mark.skipif(runner.find_la_run() is None, reason="la-run is not built")
def test_valid_packed_run_attention_matches_reference():
    inputs = dict(_valid("gated_deltanet"), cu_seqlens=np.array(VALID_CU, np.uint64))
    o, s, _ = runner.run_attention("gated_deltanet", inputs, chunk_size=8)
    ref_o, ref_s = lt.reference_for("gated_deltanet", inputs)
    assert lt.rel_rms(ref_o, o) < 1e-5
    assert lt.rel_rms(ref_s, s) < 1e-5
