"""la.recurrence tiled by upstream MLIR (TilingInterface), then run.

A user's transform script tiles the recurrence with
`transform.structured.tile_using_forall` (batches, value heads, value
columns) and `transform.structured.tile_using_for` (tokens: the state is
carried from tile to tile as a reduction's accumulator); `la-run` then
compiles the tiled IR (each tile chunked, or run token by token). The
results must match the fp64 reference: this checks the tiles' semantics
(slices, grouped heads, the carried state, partial last tiles), not only
the IR's shape, which test/Dialect/La/tiling.mlir checks.
"""

import os
import subprocess
import tempfile

import numpy as np
import pytest

from la import reference, runner

LA_OPT = runner.find_tool("la-opt", "LA_OPT")
LA_RUN = runner.find_la_run()
pytestmark = pytest.mark.skipif(
    not (LA_OPT and LA_RUN and os.path.exists(LA_OPT) and os.path.exists(LA_RUN)),
    reason="needs la-opt and la-run (build the project)")


def _type(shape, element="f32"):
    return "tensor<" + "x".join(str(d) for d in shape) + f"x{element}>"


def _recurrence_mlir(B, T, H, HV, K, V, low_rank):
    qk, vt, st = _type((B, T, H, K)), _type((B, T, HV, V)), _type((B, HV, K, V))
    if low_rank == "general":
        args = f"%a: {qk}, %b: {qk}, "
        groups = f"a(%a : {qk}) b(%b : {qk})"
    else:
        args = f"%beta: {_type((B, T, H))}, "
        groups = f"beta(%beta : {_type((B, T, H))})"
    return (
        f"func.func @f(%q: {qk}, %k: {qk}, %v: {vt}, %g: {qk}, {args}%s0: {st}) "
        f"-> ({vt}, {st}) {{\n"
        f"  %o0 = tensor.empty() : {vt}\n"
        f"  %o, %s = la.recurrence decay(channel) low_rank({low_rank}) %q, %k, %v "
        f"g(%g : {qk}) {groups} outs(%o0, %s0 : {vt}, {st}) {{scale = 0.25 : f32}} "
        f": {qk}, {qk}, {vt} -> {vt}, {st}\n"
        f"  return %o, %s : {vt}, {st}\n}}\n"
    )


def _schedule(tasks, tokens, decompose=False):
    """Tiles the recurrence into tasks (an scf.forall) and token tiles (an
    scf.for inside each task); with `decompose`, each token tile becomes the
    chunk program (AggregatedOpInterface)."""
    sizes = ", ".join(str(s) for s in tasks)
    decomposition = (
        "%chunk = transform.la.decompose %tile"
        " : (!transform.any_op) -> !transform.any_op" if decompose else "")
    return f"""
module attributes {{transform.with_named_sequence}} {{
  transform.named_sequence @__transform_main(%root: !transform.any_op {{transform.readonly}}) {{
    %r = transform.structured.match ops{{["la.recurrence"]}} in %root
        : (!transform.any_op) -> !transform.any_op
    %task, %forall = transform.structured.tile_using_forall %r tile_sizes [{sizes}]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %tile, %loop = transform.structured.tile_using_for %task tile_sizes [0, {tokens}]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    {decomposition}
    transform.yield
  }}
}}
"""


def _run_tiled(mlir, schedule, args, *, chunk=None, decomposed=False):
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "f.mlir")
        script = os.path.join(tmp, "schedule.mlir")
        tiled = os.path.join(tmp, "tiled.mlir")
        with open(source, "w") as f:
            f.write(mlir)
        with open(script, "w") as f:
            f.write(schedule)
        result = subprocess.run(
            [LA_OPT, source,
             f"--transform-preload-library=transform-library-paths={script}",
             "--transform-interpreter", "-canonicalize", "-o", tiled],
            capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        with open(tiled) as f:
            text = f.read()
        # The recurrence now runs on tiles inside the two loops.
        assert "scf.forall" in text and "scf.for" in text, text
        assert ("la.recurrence" not in text) == decomposed, text
        command = [LA_RUN, tiled]
        for index, array in enumerate(args):
            path = os.path.join(tmp, f"in{index}.npy")
            np.save(path, array)
            command.append(f"--input={path}")
        outputs = [os.path.join(tmp, f"out{i}.npy") for i in range(2)]
        command += [f"--output={o}" for o in outputs]
        command += [f"--chunk-size={chunk}"] if chunk else ["--sequential"]
        result = subprocess.run(command, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        return [np.load(o) for o in outputs]


def _rel(ref, out):
    return float(np.sqrt(np.mean((ref - out) ** 2)) / np.sqrt(np.mean(ref**2)))


def _inputs(B, T, H, HV, K, V, seed):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, T, H, K)).astype(np.float32)
    k = rng.standard_normal((B, T, H, K))
    k = (k / np.linalg.norm(k, axis=-1, keepdims=True)).astype(np.float32)
    v = rng.standard_normal((B, T, HV, V)).astype(np.float32)
    g = (-np.log1p(np.exp(-rng.standard_normal((B, T, H, K)))) / 8).astype(np.float32)
    s0 = (0.1 * rng.standard_normal((B, HV, K, V))).astype(np.float32)
    return rng, q, k, v, g, s0


# (B, T, H, HV, K, V), forall tile sizes over (B, T, HV, V), token tile.
CASES = [
    ((2, 64, 2, 2, 16, 16), [1, 0, 1, 8], 16),
    # 70 = 32 + 32 + 6: a partial last token tile of dynamic size.
    ((1, 70, 2, 4, 8, 16), [1, 0, 1, 0], 32),
    # Two value heads per tile, one key head each (grouped heads, G = 2).
    ((2, 48, 2, 4, 8, 8), [1, 0, 2, 4], 16),
]


@pytest.mark.parametrize("shape,tasks,tokens", CASES)
@pytest.mark.parametrize("lowering", ["chunked", "sequential", "decomposed"])
def test_tiled_kda(shape, tasks, tokens, lowering):
    """Each tile chunked by la-chunk, run token by token, or decomposed into
    the chunk program by the transform script."""
    B, T, H, HV, K, V = shape
    rng, q, k, v, g, s0 = _inputs(*shape, seed=31)
    beta = rng.uniform(0.1, 0.9, (B, T, H)).astype(np.float32)
    ref_o, ref_s = reference.kda(q, k, v, g, beta, scale=0.25, initial_state=s0)
    decomposed = lowering == "decomposed"
    o, s = _run_tiled(_recurrence_mlir(*shape, "delta"),
                      _schedule(tasks, tokens, decompose=decomposed),
                      [q, k, v, g, beta, s0],
                      chunk=None if lowering == "sequential" else 16,
                      decomposed=decomposed)
    assert _rel(ref_o, o) < 1e-5
    assert _rel(ref_s, s) < 1e-5


@pytest.mark.parametrize("shape,tasks,tokens", CASES[:2])
@pytest.mark.parametrize("decomposed", [False, True])
def test_tiled_general_low_rank(shape, tasks, tokens, decomposed):
    B, T, H, HV, K, V = shape
    rng, q, k, v, g, s0 = _inputs(*shape, seed=32)
    a = (0.5 * rng.standard_normal((B, T, H, K)) / np.sqrt(K)).astype(np.float32)
    b = (0.5 * rng.standard_normal((B, T, H, K)) / np.sqrt(K)).astype(np.float32)
    ref_o, ref_s = reference.dplr_recurrence(q, k, v, log_alpha=g, a=a, b=b, scale=0.25,
                                             initial_state=s0)
    o, s = _run_tiled(_recurrence_mlir(*shape, "general"),
                      _schedule(tasks, tokens, decompose=decomposed),
                      [q, k, v, g, a, b, s0], chunk=16, decomposed=decomposed)
    assert _rel(ref_o, o) < 1e-5
    assert _rel(ref_s, s) < 1e-5
