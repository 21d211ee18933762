"""The CPU pipeline as a user's transform script, run for every variant.

test/Dialect/La/Inputs/cpu-tile-decompose-schedule.mlir tiles each
la.recurrence with upstream `transform.structured.tile_using_forall` (tasks
over batch and value head) and `tile_using_for` (chunks of 16 tokens, the
state carried as the accumulator), decomposes each chunk with
`transform.la.decompose` into the chunk program, lowers it to linalg and
applies la's CPU register tiles. `la-run` then compiles the result (nothing
of la is left for its passes) and the outputs must match the fp64
reference, for every variant of the registry, a partial last chunk and a
normalised linear attention included.
"""

import os
import subprocess
import tempfile

import pytest

from la import runner
from la import testing as lt
from la.variants import VARIANTS

LA_OPT = runner.find_tool("la-opt", "LA_OPT")
LA_RUN = runner.find_la_run()
SCHEDULE = os.path.join(os.path.dirname(__file__), "..", "..", "test", "Dialect", "La",
                        "Inputs", "cpu-tile-decompose-schedule.mlir")
pytestmark = pytest.mark.skipif(
    not (LA_OPT and LA_RUN and os.path.exists(LA_OPT) and os.path.exists(LA_RUN)),
    reason="needs la-opt and la-run (build the project)")

# The operands of la.attention after q, k, v, in runner.attention_mlir's order.
_OPERANDS = ("g", "beta", "erase", "write", "a", "b", "initial_state")


def _scheduled(text, directory):
    source = os.path.join(directory, "f.mlir")
    scheduled = os.path.join(directory, "scheduled.mlir")
    with open(source, "w") as f:
        f.write(text)
    proc = subprocess.run(
        [LA_OPT, source, f"--transform-preload-library=transform-library-paths={SCHEDULE}",
         "--transform-interpreter", "-canonicalize", "-cse", "-o", scheduled],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    with open(scheduled) as f:
        lowered = f.read()
    # Tiled and decomposed by the script: no la op is left for la-run.
    assert "la.recurrence" not in lowered and "la.attention" not in lowered, lowered
    assert "scf.forall" in lowered and "vector.fma" in lowered, lowered
    return scheduled


def _run(path, arrays, directory):
    return lt.run_la_run_file(LA_RUN, path, arrays, directory, ["--sequential"])


def _check(variant, T, normalizer=False):
    B, H, K, V = 2, 2, 16, 16
    inputs = lt.make_inputs(variant, B, T, H, K, V, seed=23, with_initial_state=True,
                            positive_qk=normalizer)
    attrs = {"normalizer": True} if normalizer else {}
    text = runner.attention_mlir(variant, B, T, H, K, V, has_initial_state=True,
                                 log_decay=inputs.get("log_decay"), **attrs)
    arrays = [inputs["q"], inputs["k"], inputs["v"]] + [
        inputs[name] for name in _OPERANDS if name in inputs]
    ref_o, ref_s = lt.reference_for(variant, inputs, **attrs)
    with tempfile.TemporaryDirectory() as d:
        o, s = _run(_scheduled(text, d), arrays, d)
    assert lt.rel_rms(ref_o, o) <= 1e-5, (variant, lt.rel_rms(ref_o, o))
    assert lt.rel_rms(ref_s, s) <= 1e-5, (variant, lt.rel_rms(ref_s, s))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_variant_through_the_transform_script(variant):
    _check(variant, T=64)


@pytest.mark.parametrize("variant", ["gla", "gated_deltanet", "gated_deltanet2"])
def test_partial_last_chunk(variant):
    # 40 = 16 + 16 + 8: the last tile is a chunk of 8 tokens.
    _check(variant, T=40)


def test_normalized_linear_attention():
    _check("linear", T=48, normalizer=True)
