"""The hand-written fp64 reverse mode of the DPLR recurrence
(``la.reference.dplr_recurrence_vjp``) against central finite differences of
the forward (``la.reference.dplr_recurrence``).

It is the independent reference the compiler's derived backward will be
tested against (issue 18), so it is checked here on its own, element by
element: every input (q, k, v, the log-decays, the low-rank vectors a and b,
the value-side gate, the initial state), grouped value heads, packed sequences, and a transition
without a low-rank part.
"""

import numpy as np
import pytest

from la import reference as ref


def _inputs(B, T, H, K, V, HV, low_rank, seed, N=None, value_gate=False):
    rng = np.random.default_rng(seed)
    N = B if N is None else N
    x = {
        "q": rng.standard_normal((B, T, H, K)),
        "k": rng.standard_normal((B, T, H, K)) / np.sqrt(K),
        "v": rng.standard_normal((B, T, HV, V)),
        "log_alpha": -np.abs(rng.standard_normal((B, T, H, K))),
        "initial_state": 0.5 * rng.standard_normal((N, HV, K, V)),
    }
    if low_rank:
        x["a"] = 0.5 * rng.standard_normal((B, T, H, K))
        x["b"] = 0.5 * rng.standard_normal((B, T, H, K))
    if value_gate:
        x["log_value_gate"] = -np.abs(rng.standard_normal((B, T, HV, V)))
    return x


def _loss(x, do, ds, scale, cu_seqlens, reverse=False):
    o, s = ref.dplr_recurrence(x["q"], x["k"], x["v"], x.get("log_alpha"), x.get("a"),
                               x.get("b"), scale=scale, initial_state=x["initial_state"],
                               cu_seqlens=cu_seqlens, log_value_gate=x.get("log_value_gate"),
                               reverse=reverse)
    return np.sum(o * do) + np.sum(s * ds)


def _finite_differences(x, do, ds, scale, cu_seqlens, step=1e-6, reverse=False):
    grads = {}
    for name, value in x.items():
        g = np.zeros_like(value)
        for index in np.ndindex(value.shape):
            saved = value[index]
            value[index] = saved + step
            up = _loss(x, do, ds, scale, cu_seqlens, reverse)
            value[index] = saved - step
            down = _loss(x, do, ds, scale, cu_seqlens, reverse)
            value[index] = saved
            g[index] = (up - down) / (2 * step)
        grads[name] = g
    return grads


@pytest.mark.parametrize("case", [
    dict(B=1, T=5, H=1, K=3, V=2, HV=1, low_rank=True),
    dict(B=2, T=4, H=1, K=2, V=3, HV=2, low_rank=True),   # grouped value heads
    dict(B=1, T=6, H=2, K=3, V=2, HV=2, low_rank=False),  # diagonal only
    # fla's gv: a value-side gate, with grouped value heads
    dict(B=2, T=5, H=1, K=2, V=3, HV=2, low_rank=False, value_gate=True),
    # run backward in time (la.recurrence {reverse})
    dict(B=1, T=5, H=1, K=3, V=2, HV=2, low_rank=True, reverse=True),
    dict(B=1, T=4, H=1, K=2, V=2, HV=1, low_rank=False, value_gate=True, reverse=True),
], ids=["dplr", "grouped", "diagonal", "value-gate", "reverse", "reverse-value-gate"])
def test_vjp_matches_finite_differences(case):
    low_rank = case.pop("low_rank")
    value_gate = case.pop("value_gate", False)
    reverse = case.pop("reverse", False)
    B, T, H, K, V, HV = (case[n] for n in ("B", "T", "H", "K", "V", "HV"))
    x = _inputs(B, T, H, K, V, HV, low_rank, seed=3, value_gate=value_gate)
    rng = np.random.default_rng(4)
    do = rng.standard_normal((B, T, HV, V))
    ds = rng.standard_normal((B, HV, K, V))
    scale = 0.7
    grads = ref.dplr_recurrence_vjp(x["q"], x["k"], x["v"], do, ds, x["log_alpha"],
                                    x.get("a"), x.get("b"), scale=scale,
                                    initial_state=x["initial_state"],
                                    log_value_gate=x.get("log_value_gate"), reverse=reverse)
    expected = _finite_differences(x, do, ds, scale, None, reverse=reverse)
    assert set(grads) == set(expected)
    for name in expected:
        err = np.max(np.abs(grads[name] - expected[name]))
        assert err <= 1e-7 * max(1.0, np.max(np.abs(expected[name]))), (name, err)


def test_vjp_with_packed_sequences():
    """cu_seqlens: each sequence starts from its own initial state, and the
    gradients do not cross a sequence boundary."""
    cu = np.array([0, 2, 5, 7], dtype=np.int32)
    x = _inputs(1, 7, 1, 2, 2, 1, True, seed=5, N=3)
    rng = np.random.default_rng(6)
    do = rng.standard_normal((1, 7, 1, 2))
    ds = rng.standard_normal((3, 1, 2, 2))
    grads = ref.dplr_recurrence_vjp(x["q"], x["k"], x["v"], do, ds, x["log_alpha"], x["a"],
                                    x["b"], scale=1.0, initial_state=x["initial_state"],
                                    cu_seqlens=cu)
    expected = _finite_differences(x, do, ds, 1.0, cu)
    for name in expected:
        np.testing.assert_allclose(grads[name], expected[name], rtol=1e-6, atol=1e-7,
                                   err_msg=name)
    # Each sequence run backward in time.
    grads = ref.dplr_recurrence_vjp(x["q"], x["k"], x["v"], do, ds, x["log_alpha"], x["a"],
                                    x["b"], scale=1.0, initial_state=x["initial_state"],
                                    cu_seqlens=cu, reverse=True)
    expected = _finite_differences(x, do, ds, 1.0, cu, reverse=True)
    for name in expected:
        np.testing.assert_allclose(grads[name], expected[name], rtol=1e-6, atol=1e-7,
                                   err_msg=name)


def test_vjp_detects_a_wrong_gradient():
    """The comparison can fail: a perturbed do changes the gradients beyond
    the tolerance."""
    x = _inputs(1, 4, 1, 2, 2, 1, True, seed=7)
    rng = np.random.default_rng(8)
    do = rng.standard_normal((1, 4, 1, 2))
    ds = rng.standard_normal((1, 1, 2, 2))
    grads = ref.dplr_recurrence_vjp(x["q"], x["k"], x["v"], 1.001 * do, ds, x["log_alpha"],
                                    x["a"], x["b"], initial_state=x["initial_state"])
    expected = _finite_differences(x, do, ds, None, None)
    assert max(np.max(np.abs(grads[n] - expected[n])) for n in expected) > 1e-5


def test_vjp_without_optional_inputs():
    """No log-decays, no low-rank part, no initial state: only q, k and v
    have gradients, and they match the finite differences."""
    rng = np.random.default_rng(9)
    q, k, v = (rng.standard_normal((1, 4, 1, 2)) for _ in range(3))
    do = rng.standard_normal((1, 4, 1, 2))
    grads = ref.dplr_recurrence_vjp(q, k, v, do)
    assert set(grads) == {"q", "k", "v"}
    x = {"q": q, "k": k, "v": v, "initial_state": np.zeros((1, 1, 2, 2))}
    expected = _finite_differences(x, do, np.zeros((1, 1, 2, 2)), None, None)
    for name in ("q", "k", "v"):
        np.testing.assert_allclose(grads[name], expected[name], rtol=1e-6, atol=1e-8)
