"""Denormal states on x86: la-flush-denormals.

A state that decays through a stretch of tokens without writes reaches the
denormal range (below 1.2e-38), where each x86 operation takes a microcode
assist: a Gated DeltaNet call whose values were zero in its second half ran
8x slower than the same call on full values (docs/performance.md). The CPU
kernels therefore run with MXCSR's flush-to-zero and denormals-are-zero
bits set, and restore the caller's. These tests check the numbers (the
flushed values are far below the tolerances) and that the caller's
floating-point mode is left as it was, on one thread and on two.
"""

import platform

import numpy as np
import pytest

import la
from la import testing as lt

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                                reason="la-flush-denormals is x86's")

TINY = np.float32(1e-39)  # a denormal float32


def _denormals_work():
    """Whether this thread's float32 arithmetic keeps denormals (MXCSR's
    FTZ/DAZ bits clear): numpy's float32 multiply runs on SSE here."""
    return bool(np.multiply(TINY, np.float32(1.0)) != 0)


@pytest.mark.parametrize("variant", ["gated_deltanet", "gla", "mamba2"])
@pytest.mark.parametrize("num_threads", [1, 2])
def test_decayed_state_matches_reference_and_mode_is_restored(variant, num_threads):
    assert _denormals_work()
    # Strong gates and values only in the first half: the state decays by
    # about e^-0.5 per token through the second half, into the denormal range
    # and on to zero; o there is the decayed state read by q.
    x = lt.make_inputs(variant, 1, 400, 2, 32, 32, seed=3)
    x["v"][:, 200:] = 0
    x["g"] = np.full_like(x["g"], -0.5)
    o_ref, s_ref = lt.reference_for(variant, x)
    gates = {name: x[name] for name in ("g", "beta") if name in x}
    o, s = la.attention(variant, x["q"], x["k"], x["v"], **gates, output_final_state=True,
                        num_threads=num_threads)
    assert lt.rel_rms(o_ref[:, :250], o[:, :250]) < 1e-5
    # Where the reference's o is itself below float32's normal range, la's
    # is exactly zero or as tiny.
    assert np.all(np.abs(o[:, 350:]) < 1e-30)
    assert np.all(np.abs(s) < 1e-30) and np.all(np.abs(s_ref) < 1e-30)
    assert _denormals_work(), "the kernel left FTZ/DAZ set in the caller's thread"
