"""Execution tests of producer fusion (la-fuse-recurrence{fuse-producers}).

A user's attention graph computes the operands with ordinary ops: here a
feature map (elu + 1) on q and k, a log-sigmoid gate scaled by 1/16, and a
sigmoid on beta, as ``linalg.generic`` ops around ``la.attention`` (with
``qk_l2norm`` for the delta rule, whose L2 norm joins the chain). When T is
a multiple of the chunk size those producers are computed per chunk inside
the fused loop; otherwise the operands are materialised first. Both must give
the fp64 reference's numbers on the transformed inputs.
"""

import os
import tempfile

import numpy as np
import pytest

from la import runner
from la import testing as lt

LA_RUN = runner.find_la_run()
pytestmark = pytest.mark.skipif(LA_RUN is None, reason="la-run is not built")

_MAP = "affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>"
_MAP3 = "affine_map<(d0, d1, d2) -> (d0, d1, d2)>"

#: elu(x) + 1, log-sigmoid(x) / 16, sigmoid(x): the bodies of the producers
_BODIES = {
    "elu1": """
    %pos = arith.cmpf ogt, %a, %zero : f32
    %ex = math.exp %a : f32
    %em1 = arith.subf %ex, %one : f32
    %f = arith.select %pos, %a, %em1 : f32
    %r = arith.addf %f, %one : f32""",
    "logsigmoid16": """
    %n = arith.negf %a : f32
    %ex = math.exp %n : f32
    %l = math.log1p %ex : f32
    %ls = arith.negf %l : f32
    %r = arith.mulf %ls, %sixteenth : f32""",
    "sigmoid": """
    %n = arith.negf %a : f32
    %ex = math.exp %n : f32
    %d = arith.addf %ex, %one : f32
    %r = arith.divf %one, %d : f32""",
}


def _elu1(x):
    return np.where(x > 0, x, np.expm1(np.minimum(x, 0))) + 1


def _producer(name, arg, shape):
    rank = len(shape)
    ty = "tensor<" + "x".join(map(str, shape)) + "xf32>"
    m = _MAP if rank == 4 else _MAP3
    iters = ", ".join(['"parallel"'] * rank)
    return ty, f"""
  %{name}_e = tensor.empty() : {ty}
  %{name} = linalg.generic {{indexing_maps = [{m}, {m}], iterator_types = [{iters}]}} ins(%{arg} : {ty}) outs(%{name}_e : {ty}) {{
  ^bb0(%a: f32, %o: f32):{_BODIES[name.split('_')[0]]}
    linalg.yield %r : f32
  }} -> {ty}"""


def _function(variant, B, T, H, K, V):
    qk = (B, T, H, K)
    parts = []
    ty_qk, q = _producer("elu1_q", "xq", qk)
    _, k = _producer("elu1_k", "xk", qk)
    parts += [q, k]
    ty_v = f"tensor<{B}x{T}x{H}x{V}xf32>"
    operands = "%elu1_q, %elu1_k, %v"
    args = [f"%xq: {ty_qk}", f"%xk: {ty_qk}", f"%v: {ty_v}"]
    if variant == "gla":
        ty_g, g = _producer("logsigmoid16_g", "xg", qk)
        parts.append(g)
        args.append(f"%xg: {ty_g}")
        operands += f" g(%logsigmoid16_g : {ty_g})"
    else:  # gated_deltanet: scalar gate [B,T,H], beta [B,T,H]
        ty_g, g = _producer("logsigmoid16_g", "xg", (B, T, H))
        ty_b, beta = _producer("sigmoid_b", "xb", (B, T, H))
        parts += [g, beta]
        args += [f"%xg: {ty_g}", f"%xb: {ty_b}"]
        # The delta rule wants unit-norm keys: the L2 norm that
        # la-lower-to-recurrence emits is one more producer in the chain.
        operands += f" g(%logsigmoid16_g : {ty_g}) beta(%sigmoid_b : {ty_b}) {{qk_l2norm}}"
    ty_s = f"tensor<{B}x{H}x{K}x{V}xf32>"
    return f"""func.func @attention({", ".join(args)}) -> ({ty_v}, {ty_s}) {{
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %sixteenth = arith.constant 0.0625 : f32
{"".join(parts)}
  %o, %s = la.attention {variant} {operands} : {ty_qk}, {ty_qk}, {ty_v} -> {ty_v}, {ty_s}
  return %o, %s : {ty_v}, {ty_s}
}}
"""


def _run(text, arrays, chunk, flags, directory):
    """la-run on the function `text` with `arrays` as f32 inputs and extra
    `flags`; returns its two outputs."""
    path = os.path.join(directory, "f.mlir")
    with open(path, "w") as f:
        f.write(text)
    return lt.run_la_run_file(LA_RUN, path, arrays, directory,
                              [f"--chunk-size={chunk}"] + flags)


@pytest.mark.parametrize("fuse", ["fused", "materialized"])
@pytest.mark.parametrize("T", [64, 70])
@pytest.mark.parametrize("variant", ["gla", "gated_deltanet"])
def test_producers(variant, T, fuse):
    B, H, K, V, chunk = 2, 2, 16, 8, 16
    rng = np.random.default_rng(7)
    xq = rng.standard_normal((B, T, H, K)).astype(np.float32)
    xk = rng.standard_normal((B, T, H, K)).astype(np.float32)
    v = rng.standard_normal((B, T, H, V)).astype(np.float32)
    gshape = (B, T, H, K) if variant == "gla" else (B, T, H)
    xg = rng.standard_normal(gshape).astype(np.float32)
    arrays = [xq, xk, v, xg]
    inputs = {"q": _elu1(xq.astype(np.float64)), "k": _elu1(xk.astype(np.float64)),
              "v": v.astype(np.float64), "g": -np.log1p(np.exp(-xg.astype(np.float64))) / 16}
    if variant == "gated_deltanet":
        xb = rng.standard_normal((B, T, H)).astype(np.float32)
        arrays.append(xb)
        inputs["beta"] = 1 / (1 + np.exp(-xb.astype(np.float64)))
        attrs = {"qk_l2norm": True}
    else:
        attrs = {}
    text = _function(variant, B, T, H, K, V)
    with tempfile.TemporaryDirectory() as d:
        o, s = _run(text, arrays, chunk, [f"--fuse={fuse}"], d)
    ref_o, ref_s = lt.reference_for(variant, inputs, **attrs)
    assert lt.rel_rms(ref_o, o) <= 1e-5, (variant, T, fuse, lt.rel_rms(ref_o, o))
    assert lt.rel_rms(ref_s, s) <= 1e-5, (variant, T, fuse, lt.rel_rms(ref_s, s))


# ---------------------------------------------------------------------------
# Consumers: the output's RMSNorm (a reduction over V, then a scale by the
# weight) and its gating (o * silu(gate)), fused into the chunk loop.

_ID4 = "affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>"
_ROW = "affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>"
_COL = "affine_map<(d0, d1, d2, d3) -> (d3)>"
_EPS = 1e-6


def _consumer_function(variant, B, T, H, K, V):
    qk = f"tensor<{B}x{T}x{H}x{K}xf32>"
    tv = f"tensor<{B}x{T}x{H}x{V}xf32>"
    rows = f"tensor<{B}x{T}x{H}xf32>"
    ts = f"tensor<{B}x{H}x{K}x{V}xf32>"
    if variant == "gla":
        gate_arg, gate_use = f"%g: {qk}", f"g(%g : {qk})"
    else:
        gate_arg = f"%g: {rows}, %beta: {rows}"
        gate_use = f"g(%g : {rows}) beta(%beta : {rows})"
    return f"""func.func @attention(%q: {qk}, %k: {qk}, %v: {tv}, {gate_arg},
    %weight: tensor<{V}xf32>, %gate: {tv}) -> ({tv}, {ts}) {{
  %o, %s = la.attention {variant} %q, %k, %v {gate_use} : {qk}, {qk}, {tv} -> {tv}, {ts}
  %zero = arith.constant 0.0 : f32
  %e3 = tensor.empty() : {rows}
  %z3 = linalg.fill ins(%zero : f32) outs(%e3 : {rows}) -> {rows}
  %ss = linalg.generic {{indexing_maps = [{_ID4}, {_ROW}], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}}
      ins(%o : {tv}) outs(%z3 : {rows}) {{
  ^bb0(%x: f32, %acc: f32):
    %sq = arith.mulf %x, %x : f32
    %sum = arith.addf %acc, %sq : f32
    linalg.yield %sum : f32
  }} -> {rows}
  %e4 = tensor.empty() : {tv}
  %r = linalg.generic {{indexing_maps = [{_ID4}, {_ROW}, {_COL}, {_ID4}, {_ID4}], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}}
      ins(%o, %ss, %weight, %gate : {tv}, {rows}, tensor<{V}xf32>, {tv}) outs(%e4 : {tv}) {{
  ^bb0(%x: f32, %sum: f32, %w: f32, %gt: f32, %out: f32):
    %inv = arith.constant {1.0 / V:.9e} : f32
    %eps = arith.constant {_EPS:e} : f32
    %one = arith.constant 1.0 : f32
    %mean = arith.mulf %sum, %inv : f32
    %me = arith.addf %mean, %eps : f32
    %rs = math.rsqrt %me : f32
    %y = arith.mulf %x, %rs : f32
    %yw = arith.mulf %y, %w : f32
    %ng = arith.negf %gt : f32
    %ex = math.exp %ng : f32
    %den = arith.addf %ex, %one : f32
    %sig = arith.divf %one, %den : f32
    %silu = arith.mulf %gt, %sig : f32
    %res = arith.mulf %yw, %silu : f32
    linalg.yield %res : f32
  }} -> {tv}
  return %r, %s : {tv}, {ts}
}}
"""


@pytest.mark.parametrize("schedule", ["fused", "materialized", "gpu-schedule", "gpu-emulator"])
@pytest.mark.parametrize("variant", ["gla", "gated_deltanet"])
def test_consumers(variant, schedule):
    B, T, H, K, V, chunk = 2, 64, 2, 16, 32, 16
    inputs = lt.make_inputs(variant, B, T, H, K, V, seed=11)
    rng = np.random.default_rng(12)
    weight = rng.standard_normal(V).astype(np.float32)
    gate = rng.standard_normal((B, T, H, V)).astype(np.float32)
    order = ["q", "k", "v", "g"] + (["beta"] if variant == "gated_deltanet" else [])
    arrays = [inputs[n] for n in order] + [weight, gate]
    ref_o, ref_s = lt.reference_for(variant, inputs)
    g64 = gate.astype(np.float64)
    ref = (ref_o / np.sqrt(np.mean(ref_o**2, axis=-1, keepdims=True) + _EPS)
           * weight.astype(np.float64) * g64 / (1 + np.exp(-g64)))
    flags = {"fused": ["--fuse=fused"], "materialized": ["--fuse=materialized"],
             "gpu-schedule": ["--gpu-schedule"],
             "gpu-emulator": ["--target=gpu-emulator", "--value-tile=0"]}[schedule]
    with tempfile.TemporaryDirectory() as d:
        r, s = _run(_consumer_function(variant, B, T, H, K, V), arrays, chunk, flags, d)
    assert lt.rel_rms(ref, r) <= 1e-5, (variant, schedule, lt.rel_rms(ref, r))
    assert lt.rel_rms(ref_s, s) <= 1e-5, (variant, schedule, lt.rel_rms(ref_s, s))
