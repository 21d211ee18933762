"""A fast subset of the random-configuration stress suite (``la.stress``).

24 configurations from a fixed seed (chosen so that the subset holds every
variant twice, every chunk size and the sequential program, f16 and bf16,
T = 1, T % C != 0, a varlen run with an empty sequence, segmented runs
(chunked, sequential, bf16, erase_write), the normaliser, beta near 0 / near 1 /
allow_neg_eigval, every erase/write mode, varlen erase_write, qk_l2norm and
log-gates down to -30, at a low total cost) are run with la-run
and compared with the fp64 reference: rel_rms within 1e-5 (f32) or 5e-3
(f16/bf16) and finite outputs. The configurations with non-finite inputs
(``value_events``) are checked against the reference before the first of
them and against the sequential program from it on. The full set is
``scripts/stress.py``.

The generator and checker tests run without la-run.
"""

import json

import numpy as np
import pytest

from la import runner
from la import stress
from la import testing as lt

SEED = 2539
COUNT = 24
CONFIGS = stress.generate_configs(COUNT, SEED)

needs_la_run = pytest.mark.skipif(
    runner.find_la_run() is None,
    reason="la-run is not built (build/bin/la-run missing; set LA_RUN to the executable)",
)


@needs_la_run
@pytest.mark.parametrize("cfg", CONFIGS, ids=[c["id"] for c in CONFIGS])
def test_stress_config(cfg):
    result = stress.run_config(cfg)
    tol = stress.TOL[cfg["dtype"]]
    detail = stress.format_result(result) + "\n    " + "\n    ".join(result["commands"])
    assert "exception" not in result, detail + "\n" + result.get("exception", "")
    if cfg["value_events"]:
        first = min(t for _, t, _, _ in cfg["value_events"])
        names = (["o_before"] if first > 0 else []) + ["o_after", "state_after"]
    else:
        names = ["o", "state"] + (["o_seg", "state_seg"] if cfg["mode"] == "segmented" else [])
    for name in names:
        err = result["errors"][name]
        assert err <= tol, f"{name}: rel_rms {err:.3e} > {tol:.0e}\n{detail}"
    assert result["finite"], f"non-finite outputs\n{detail}"
    assert result["passed"], detail


# --------------------------------------------------------------------------
# generator and checker (no la-run needed)
# --------------------------------------------------------------------------

def test_generate_configs_is_stable_and_covers_the_space():
    configs = stress.generate_configs(120, 0)
    assert [c["id"] for c in configs[:COUNT]] == [c["id"] for c in
                                                  stress.generate_configs(COUNT, 0)]
    assert stress.generate_configs(120, 0) == configs
    assert len({c["id"] for c in configs}) == len(configs)
    json.dumps(configs)
    assert {c["variant"] for c in configs} == set(lt.VARIANTS)
    assert {c["dtype"] for c in configs} == {"f32", "f16", "bf16"}
    assert {c["chunk_size"] for c in configs} == {None, 8, 16, 32, 64}
    assert {c["mode"] for c in configs} == {"plain", "varlen", "segmented"}
    assert {c["gate_scale"] for c in configs if c["variant"] in ("mamba2", "gla")} == set(
        stress.GATE_SCALES)
    assert {c["beta_mode"] for c in configs if c["beta_mode"]} == set(stress.BETA_MODES)
    assert {c["erase_write_mode"] for c in configs if c["erase_write_mode"]} == set(
        stress.ERASE_WRITE_MODES)
    assert any(c["T"] == 1 for c in configs)
    assert any(c["chunk_size"] and c["T"] > c["chunk_size"] and c["T"] % c["chunk_size"]
               for c in configs)
    assert any(c["K"] != c["V"] for c in configs)
    assert any(c["normalizer"] for c in configs)
    assert any(c["cu_seqlens"] and 0 in np.diff(c["cu_seqlens"]) for c in configs)
    for c in configs:
        update, _ = lt.VARIANTS[c["variant"]]
        assert (c["beta_mode"] is not None) == (update == "delta")
        assert (c["erase_write_mode"] is not None) == (update == "erase_write")
        assert not (c["allow_neg_eigval"] and update != "delta")
        assert c["B"] * c["T"] * c["HV"] * c["K"] * c["V"] <= stress.MAX_ELEMENTS
        assert 1 <= c["T"] <= stress.MAX_T and c["HV"] % c["H"] == 0
        assert not (c["normalizer"] and update != "additive")
        assert not (c["normalizer"] and c["mode"] == "segmented")
        if c["mode"] == "varlen":
            cu = c["cu_seqlens"]
            assert c["B"] == 1 and cu[0] == 0 and cu[-1] == c["T"] and 3 <= len(cu) <= 5
            assert np.all(np.diff(cu) >= 0)
        if c["mode"] == "segmented":
            assert 0 < c["split"] < c["T"]


def test_build_inputs_follow_the_config():
    by_mode = {}
    for c in stress.generate_configs(120, 0):
        by_mode.setdefault(c["beta_mode"], c)
        if c["gate_scale"] == 40.0 and lt.VARIANTS[c["variant"]][1] in ("scalar", "channel"):
            g = stress.build_inputs(c, value_events=False)["g"]
            # Away from the gate events, the log-gates are clamped at -30.
            event_tokens = sorted({t for t, _, _ in c["gate_events"]})
            plain = np.delete(g, event_tokens, axis=1)
            assert plain.min() >= -30.0 and plain.max() < 0.0
            for t, channel, value in c["gate_events"]:
                at = g[:, t] if channel < 0 else g[:, t, :, channel]
                assert np.any(at <= -104.0)
    events = [c for c in stress.generate_configs(120, 0) if c["gate_events"]]
    assert len(events) > 20
    assert any(v == -np.inf for c in events for _, _, v in c["gate_events"])
    nonfinite = [c for c in stress.generate_configs(120, 0) if c["value_events"]]
    assert 15 < len(nonfinite) < 50
    assert {v for c in nonfinite for *_, v in c["value_events"]} == set(
        stress.VALUE_EVENT_VALUES)
    assert {n for c in nonfinite for n, *_ in c["value_events"]} == {
        "q", "k", "v", "g", "beta", "erase", "write", "a", "b"}
    for c in nonfinite:
        inputs = stress.build_inputs(c)
        clean = stress.build_inputs(c, value_events=False)
        for name, t, element, value in c["value_events"]:
            at = inputs[name][:, t] if element < 0 else inputs[name][0, t]
            assert np.any(np.isnan(at) if value == "nan" else at == float(value))
        touched = {t for _, t, _, _ in c["value_events"]}
        for name in clean:
            if isinstance(clean[name], np.ndarray) and name in ("q", "k", "v", "g"):
                keep = [t for t in range(c["T"]) if t not in touched]
                np.testing.assert_array_equal(inputs[name][:, keep], clean[name][:, keep])
    beta = stress.build_inputs(by_mode["small"])["beta"]
    assert 0.0 < beta.min() and beta.max() < 1e-3
    beta = stress.build_inputs(by_mode["near1"])["beta"]
    np.testing.assert_array_equal(beta, np.float32(1.0 - 1e-4))
    assert by_mode["neg_eigval"]["allow_neg_eigval"]
    by_ew = {}
    for c in stress.generate_configs(120, 0):
        by_ew.setdefault(c["erase_write_mode"], c)
    inputs = stress.build_inputs(by_ew["small"])
    assert "beta" not in inputs
    assert 0.0 < inputs["erase"].min() and inputs["erase"].max() < 1e-3
    assert 0.0 < inputs["write"].min() and inputs["write"].max() < 1e-3
    np.testing.assert_array_equal(stress.build_inputs(by_ew["near1"])["erase"],
                                  np.float32(1.0 - 1e-4))
    wide = stress.build_inputs(by_ew["wide"])["erase"]
    assert wide.min() < 0.05 and wide.max() > 0.95


def test_checker_fails_on_errors_and_non_finite_values():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((2, 5, 3))

    def check(out, tol=1e-5):
        result = dict(errors={}, finite=True, failures=[])
        stress.check_outputs("o", ref, out, tol, result)
        return result

    assert not check(ref.astype(np.float32))["failures"]
    assert check(ref * (1 + 1e-4))["failures"]
    bad = ref.copy()
    bad[1, 2, 0] = np.nan
    result = check(bad)
    assert result["failures"] and not result["finite"]
    bad[1, 2, 0] = np.inf
    assert check(bad, tol=np.inf)["failures"]
    assert check(ref[:1])["failures"]

    def check_nonfinite(out, sequential):
        result = dict(errors={}, failures=[])
        stress.check_nonfinite_outputs("o_after", out, sequential, 1e-5, result)
        return result["failures"]

    seq = ref.copy()
    seq[1, 2:] = np.nan
    assert not check_nonfinite(seq.astype(np.float32), seq)
    out = seq.copy()
    out[1, 1] = np.nan  # one more non-finite value than the recurrence
    assert check_nonfinite(out, seq)
    out = seq.copy()
    out[0, 0, 0] += 1.0  # a finite value off
    assert check_nonfinite(out, seq)
