"""A NaN or an infinity in one token's input stays where the recurrence puts it.

In the recurrence, output t depends on tokens 0..t only: a non-finite input
at token t leaves every earlier output as it was, and makes later outputs
non-finite only where the state carries it. The chunked program computes a
chunk's rows together, through causal products whose masked terms are exact
zeros; 0 * NaN would still be NaN, so the products read their operands with
non-finite elements zeroed and mark the rows from the first non-finite one
on (ChunkedToLinalg's applyScores). These tests check that, for every
variant and every per-token operand:

* the outputs before the bad token are bit-for-bit those of the same inputs
  with that token finite (to f32 rounding for a NaN log-gate, which may
  change the form of a chunk's channel-gate product), and match the fp64
  reference;
* from the bad token on, the outputs and the final state are non-finite
  exactly where the sequential (token-by-token) program's are, and agree
  with it where both are finite.
"""

import numpy as np
import pytest

import la
from la import _capi, runner, testing

pytestmark = pytest.mark.skipif(_capi.library_path() is None, reason="libLaCAPI.so is not built")

#: the bad token: in the middle of the second chunk of 16
BAD = 21
T = 40


def _inputs(variant, T=T, seed=1, **kwargs):
    return testing.make_inputs(variant, B=1, T=T, H=2, K=16, V=16, seed=seed, **kwargs)


def _copy(inputs):
    return {k: (np.array(v, copy=True) if isinstance(v, np.ndarray) else v)
            for k, v in inputs.items()}


def _run(variant, inputs, **kwargs):
    args = {k: inputs[k] for k in ("g", "beta", "erase", "write", "a", "b", "log_decay",
                                   "cu_seqlens") if k in inputs}
    o, s = la.attention(variant, inputs["q"], inputs["k"], inputs["v"], **args,
                        output_final_state=True, **kwargs)
    return np.asarray(o, np.float64), np.asarray(s, np.float64)


def _poison(inputs, name, token, value, whole):
    bad = _copy(inputs)
    x = bad[name]
    if whole or x.ndim == 3:
        x[0, token, ...] = value
    else:
        x[0, token, 1, 3] = value
    return bad


def _check(variant, clean, bad, token, chunk_size=16, bitwise=True):
    o_clean, _ = _run(variant, clean, chunk_size=chunk_size)
    o, s = _run(variant, bad, chunk_size=chunk_size)
    o_seq, s_seq = _run(variant, bad, sequential=True)
    ref, _ = testing.reference_for(variant, clean)
    # Before the bad token: exact, finite, and the fp64 reference's.
    assert np.all(np.isfinite(o[:, :token]))
    if bitwise:
        assert np.array_equal(o[:, :token], o_clean[:, :token])
    elif token > 0:
        assert testing.rel_rms(o_clean[:, :token], o[:, :token]) < 1e-6
    if token > 0:
        assert testing.rel_rms(ref[:, :token], o[:, :token]) < 1e-5
    # From it on: non-finite where the recurrence is, equal elsewhere.
    assert np.array_equal(np.isfinite(o), np.isfinite(o_seq)), (
        f"{(~np.isfinite(o)).sum()} non-finite outputs, the recurrence has "
        f"{(~np.isfinite(o_seq)).sum()}")
    assert np.array_equal(np.isfinite(s), np.isfinite(s_seq))
    both = np.isfinite(o) & np.isfinite(o_seq)
    assert testing.rel_rms(o_seq[both], o[both]) < 1e-5
    assert np.any(~np.isfinite(o[:, token:]))


def _operands(variant):
    cases = []
    for name in testing.token_operands(variant):
        # A log-gate of -inf is a hard reset (test_hardening); +inf is a
        # positive gate, an error. NaN is the non-finite gate left.
        if name == "g":
            cases += [(name, np.nan, False), (name, np.nan, True)]
        else:
            # NaN and both infinities, in one element and in a whole token.
            cases += [(name, np.nan, False), (name, np.inf, True), (name, -np.inf, False),
                      (name, np.nan, True)]
    return cases


_CASES = [(variant, *case) for variant in testing.VARIANTS for case in _operands(variant)]


@pytest.mark.parametrize(
    "variant,name,value,whole", _CASES,
    ids=[f"{v}-{n}-{x}-{'token' if w else 'element'}" for v, n, x, w in _CASES])
def test_nonfinite_input_stays_at_its_token(variant, name, value, whole):
    clean = _inputs(variant)
    # A NaN log-gate may change which form of the channel-gate product a
    # chunk takes (the run-time spread check), so its earlier rows are
    # checked to f32 rounding rather than bit for bit.
    _check(variant, clean, _poison(clean, name, BAD, value, whole), BAD,
           bitwise=name != "g")


@pytest.mark.parametrize("variant", ["gla", "gated_deltanet", "kda", "gated_deltanet2"])
@pytest.mark.parametrize("token", [0, 15, 16, 31, 39])
def test_nonfinite_value_at_chunk_edges(variant, token):
    """First and last token of a chunk, of the sequence, and token 0."""
    clean = _inputs(variant)
    _check(variant, clean, _poison(clean, "v", token, np.nan, False), token)


@pytest.mark.parametrize("variant,name", [
    ("gated_deltanet", "k"), ("gated_deltanet", "beta"), ("kda", "v"), ("kda", "beta"),
    ("gated_deltanet2", "k"), ("gated_deltanet2", "erase"), ("linear", "k")])
def test_nonfinite_input_in_a_later_block_of_the_chunk(variant, name):
    # Chunks of 32: the WY inverse works in two blocks of 16 and the block
    # substitution multiplies by the diagonal block's inverse; token 53 is
    # in the second block of the second chunk.
    clean = _inputs(variant, T=80)
    _check(variant, clean, _poison(clean, name, 53, np.inf, False), 53, chunk_size=32)


@pytest.mark.parametrize("variant", ["gla", "gated_deltanet"])
def test_nonfinite_input_stays_in_its_sequence(variant):
    """Packed sequences: a NaN in the second leaves the other two exact."""
    cu = np.array([0, 13, 27, 40], np.int32)
    clean = _inputs(variant, cu_seqlens=cu)
    clean["cu_seqlens"] = cu
    bad = _poison(clean, "v", 20, np.nan, True)
    o_clean, s_clean = _run(variant, clean, chunk_size=16)
    o, s = _run(variant, bad, chunk_size=16)
    for first, last, n in ((0, 13, 0), (27, 40, 2)):
        assert np.array_equal(o[:, first:last], o_clean[:, first:last])
        assert np.array_equal(s[n], s_clean[n])
    assert np.array_equal(o[:, 13:20], o_clean[:, 13:20])
    assert np.all(~np.isfinite(o[:, 20:27]))
    assert np.all(~np.isfinite(s[1]))


_LA_RUN = runner.find_la_run()


@pytest.mark.skipif(_LA_RUN is None, reason="la-run is not built")
@pytest.mark.parametrize("variant,schedule", [
    ("gla", {"gpu_schedule": True}),
    ("gated_deltanet", {"gpu_schedule": True, "tensor_cores": True}),
    ("kda", {"target": "gpu-emulator"}),
    ("gated_deltanet", {"fuse": "fused", "value_tile": 8}),
], ids=["gla-gpu-schedule", "gated_deltanet-gpu-schedule-tensor-cores", "kda-gpu-emulator",
        "gated_deltanet-fused-value-tiles"])
def test_nonfinite_input_on_the_other_schedules(variant, schedule):
    """The GPU's tiled schedule (run on the CPU, with and without its
    tensor-core tiles), the emulated GPU kernels and the CPU's value tiles
    lower the same guarded products. (Each la-run call compiles its kernel:
    one clean run and one with a NaN in v and an infinity in k.)"""
    bad_token = 37  # T = 64: the emulator needs whole chunks
    clean = testing.make_inputs(variant, 1, 64, 2, 16, 32, seed=3)
    bad = _poison(_poison(clean, "v", bad_token, np.nan, False), "k", bad_token, np.inf, False)
    o_clean, _, _ = runner.run_attention(variant, clean, chunk_size=16, **schedule)
    o, _, _ = runner.run_attention(variant, bad, chunk_size=16, **schedule)
    o = np.asarray(o, np.float64)
    assert np.array_equal(o[:, :bad_token], np.asarray(o_clean, np.float64)[:, :bad_token])
    assert np.any(~np.isfinite(o[:, bad_token]))
