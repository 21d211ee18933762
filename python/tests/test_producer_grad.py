"""Gradients through element-wise producers inside a function.

la-derive-backward differentiates the element-wise linalg.generic maps
between a function's arguments and its la ops (feature maps, fla's
in-kernel gate activations ``g = -exp(A_log) * softplus(a + dt_bias)``, a
sigmoid beta): each input's gradient is a generic that runs the map's scalar
body backwards. Checked, through la-run (chunked, token loops and the GPU
schedule on the CPU), against the independent fp64 reverse mode of the
recurrence (``la.testing.reference_gradients``) with the producers'
derivatives written by hand in NumPy, and that chain rule itself against
central finite differences of the fp64 forward.
"""

import subprocess

import numpy as np
import pytest

from la import reference, runner
from la import testing as lt
from test_low_rank_general import _la_run, _type

LA_OPT = runner.find_tool("la-opt", "LA_OPT")
pytestmark = pytest.mark.skipif(LA_OPT is None or runner.find_la_run() is None,
                                reason="la-opt / la-run are not built")

# softplus(x) = x above this (fla's threshold), log1p(exp(x)) below.
SOFTPLUS_THRESHOLD = 20.0


def _mlir(B, T, H, K, V):
    """Gated DeltaNet with fla's in-kernel activations as producers: the
    feature map 1 + elu(q), the gate -exp(A_log) * softplus(a + dt_bias)
    (A_log and dt_bias per head, broadcast over B and T) and beta =
    sigmoid(b)."""
    qk, vt, gt, st = (_type((B, T, H, K)), _type((B, T, H, V)), _type((B, T, H)),
                      _type((B, H, K, V)))
    ht = _type((H,))
    return f"""
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#h = affine_map<(d0, d1, d2) -> (d2)>
func.func @attention(%q: {qk}, %k: {qk}, %v: {vt}, %a: {gt}, %alog: {ht}, %dtb: {ht},
                     %b: {gt}, %s0: {st}) -> ({vt}, {st}) {{
  %eq = tensor.empty() : {qk}
  %phi = linalg.generic {{indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}}
      ins(%q : {qk}) outs(%eq : {qk}) {{
  ^bb0(%x: f32, %out: f32):
    %zero = arith.constant 0.0 : f32
    %one = arith.constant 1.0 : f32
    %pos = arith.cmpf ogt, %x, %zero : f32
    %shifted = arith.addf %x, %one : f32
    %ex = math.exp %x : f32
    %y = arith.select %pos, %shifted, %ex : f32
    linalg.yield %y : f32
  }} -> {qk}
  %eg = tensor.empty() : {gt}
  %g = linalg.generic {{indexing_maps = [#id3, #h, #h, #id3], iterator_types = ["parallel", "parallel", "parallel"]}}
      ins(%a, %alog, %dtb : {gt}, {ht}, {ht}) outs(%eg : {gt}) {{
  ^bb0(%x: f32, %l: f32, %bias: f32, %out: f32):
    %threshold = arith.constant {SOFTPLUS_THRESHOLD} : f32
    %s = arith.addf %x, %bias : f32
    %large = arith.cmpf ogt, %s, %threshold : f32
    %ex = math.exp %s : f32
    %soft = math.log1p %ex : f32
    %sp = arith.select %large, %s, %soft : f32
    %el = math.exp %l : f32
    %m = arith.mulf %el, %sp : f32
    %n = arith.negf %m : f32
    linalg.yield %n : f32
  }} -> {gt}
  %eb = tensor.empty() : {gt}
  %beta = linalg.generic {{indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}}
      ins(%b : {gt}) outs(%eb : {gt}) {{
  ^bb0(%x: f32, %out: f32):
    %one = arith.constant 1.0 : f32
    %nx = arith.negf %x : f32
    %e = math.exp %nx : f32
    %d = arith.addf %one, %e : f32
    %y = arith.divf %one, %d : f32
    linalg.yield %y : f32
  }} -> {gt}
  %o, %s = la.attention gated_deltanet %phi, %k, %v g(%g : {gt}) beta(%beta : {gt})
      initial_state(%s0 : {st}) : {qk}, {qk}, {vt} -> {vt}, {st}
  return %o, %s : {vt}, {st}
}}
"""


def _producers(q, a, A_log, dt_bias, b):
    """The producers in fp64: (phi, g, beta) and their local derivatives."""
    q, a, A_log, dt_bias, b = (np.asarray(x, np.float64) for x in (q, a, A_log, dt_bias, b))
    phi = np.where(q > 0, q + 1, np.exp(q))
    s = a + dt_bias
    softplus = np.where(s > SOFTPLUS_THRESHOLD, s, np.log1p(np.exp(np.minimum(s, 50))))
    d_softplus = np.where(s > SOFTPLUS_THRESHOLD, 1.0, 1 / (1 + np.exp(-s)))
    g = -np.exp(A_log) * softplus
    beta = 1 / (1 + np.exp(-b))
    return phi, g, beta, {
        "phi": np.where(q > 0, 1.0, np.exp(q)),
        "g_s": -np.exp(A_log) * d_softplus,    # dg / da = dg / d dt_bias
        "g_alog": g,                           # dg / dA_log
        "beta": beta * (1 - beta),
    }


def _forward64(q, k, v, a, A_log, dt_bias, b, s0):
    phi, g, beta, _ = _producers(q, a, A_log, dt_bias, b)
    return reference.gated_delta_rule(phi, k, v, g, beta, initial_state=s0)


def _expected(q, k, v, a, A_log, dt_bias, b, s0, do, ds):
    """The gradients of sum(o * do) + sum(s * ds) in the function's argument
    order: the recurrence's fp64 reverse mode, chained through the
    producers' hand-written derivatives."""
    phi, g, beta, local = _producers(q, a, A_log, dt_bias, b)
    inputs = {"q": phi, "k": k, "v": v, "g": g, "beta": beta, "initial_state": s0}
    ref = lt.reference_gradients("gated_deltanet", inputs, do, ds)
    dg = ref["g"]
    return [
        ref["q"] * local["phi"],
        ref["k"],
        ref["v"],
        dg * local["g_s"],                          # a: through the gate
        (dg * local["g_alog"]).sum(axis=(0, 1)),    # A_log: summed over B, T
        (dg * local["g_s"]).sum(axis=(0, 1)),       # dt_bias
        ref["beta"] * local["beta"],
        ref["initial_state"],
    ]


def _case(B, T, H, K, V, seed):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, T, H, K)).astype(np.float32)
    k = rng.standard_normal((B, T, H, K))
    k = (k / np.linalg.norm(k, axis=-1, keepdims=True)).astype(np.float32)
    v = rng.standard_normal((B, T, H, V)).astype(np.float32)
    a = rng.standard_normal((B, T, H)).astype(np.float32)
    # A_log as in fla's layers (log of 1..16), dt_bias around softplus^-1(0.01).
    A_log = np.log(rng.uniform(1, 16, H)).astype(np.float32)
    dt_bias = (rng.uniform(-6, -3, H)).astype(np.float32)
    b = rng.standard_normal((B, T, H)).astype(np.float32)
    s0 = (0.1 * rng.standard_normal((B, H, K, V))).astype(np.float32)
    do = rng.standard_normal((B, T, H, V)).astype(np.float32)
    ds = rng.standard_normal((B, H, K, V)).astype(np.float32)
    return [q, k, v, a, A_log, dt_bias, b, s0], do, ds


def _gradient_mlir(mlir):
    result = subprocess.run([LA_OPT, "--la-derive-backward=keep-forward=0"], input=mlir,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout


NAMES = ["q", "k", "v", "a", "A_log", "dt_bias", "b", "initial_state"]


def test_chain_rule_matches_finite_differences():
    """The hand-written chain rule (the test's expectation) against central
    differences of the fp64 forward, for the per-head A_log and dt_bias and
    a few entries of a, b and q."""
    B, T, H, K, V = 1, 12, 2, 4, 3
    args, do, ds = _case(B, T, H, K, V, seed=3)
    args = [np.asarray(x, np.float64) for x in args]
    expected = _expected(*args, do, ds)

    def loss(values):
        o, s = _forward64(*values)
        return float((o * do).sum() + (s * ds).sum())

    eps = 1e-6
    for index, entries in ((4, [(0,), (1,)]), (5, [(0,), (1,)]), (3, [(0, 3, 1)]),
                           (6, [(0, 5, 0)]), (0, [(0, 2, 1, 3), (0, 7, 0, 0)])):
        for entry in entries:
            plus = [x.copy() for x in args]
            minus = [x.copy() for x in args]
            plus[index][entry] += eps
            minus[index][entry] -= eps
            numeric = (loss(plus) - loss(minus)) / (2 * eps)
            assert abs(numeric - expected[index][entry]) <= 1e-6 * max(1, abs(numeric)), \
                (NAMES[index], entry, numeric, expected[index][entry])


@pytest.mark.parametrize("options", [
    {"chunk": 16}, {"sequential": True}, {"chunk": 16, "extra": ("--gpu-schedule",)},
], ids=["chunked", "tokens", "gpu-schedule"])
def test_in_kernel_activations_gradient(options):
    B, T, H, K, V = 2, 37, 2, 8, 6
    args, do, ds = _case(B, T, H, K, V, seed=5)
    expected = _expected(*args, do, ds)
    got = _la_run(_gradient_mlir(_mlir(B, T, H, K, V)), args + [do, ds], len(expected),
                  **options)
    for name, ref, out in zip(NAMES, expected, got):
        assert out.shape == ref.shape, (name, out.shape, ref.shape)
        limit = 1e-5 if name in ("q", "k", "v", "initial_state") else 1e-4
        assert lt.rel_rms(ref, out) <= limit, (name, lt.rel_rms(ref, out))


def test_forward_with_producers_matches_reference():
    """The forward of the same function (producers fused into the chunked
    kernel) against the fp64 reference on the producers' fp64 values."""
    B, T, H, K, V = 2, 37, 2, 8, 6
    args, _, _ = _case(B, T, H, K, V, seed=7)
    o_ref, s_ref = _forward64(*args)
    o, s = _la_run(_mlir(B, T, H, K, V), args, 2, chunk=16)
    assert lt.rel_rms(o_ref, o) <= 1e-5
    assert lt.rel_rms(s_ref, s) <= 1e-5


def test_gradient_compiles_for_the_gpu(tmp_path):
    """The gradient function (the producers' gradient generics, two of them
    reductions over B and T, beside the recurrences) builds for sm_90a:
    la-lower-to-nvvm, ptxas and clang."""
    from la import gpu
    if gpu.missing_tools():
        pytest.skip("needs " + ", ".join(gpu.missing_tools()))
    mlir = _gradient_mlir(_mlir(2, 37, 2, 8, 6)).replace("@attention_grad", "@attention")
    path = tmp_path / "producers-grad.so"
    gpu.compile_library(mlir, str(path), pipeline_options={"chunk-size": 16})
    assert path.exists() and path.stat().st_size > 0


def test_in_kernel_activation_options():
    """la.attention's in-kernel activations: the NumPy path's forward and
    gradients against the activations applied outside (the kernel's fused
    producers and their derived gradients against la's own unfused kernel,
    chained by hand), and the option errors."""
    import la
    B, T, H, K, V = 1, 20, 2, 8, 4
    rng = np.random.default_rng(9)
    q, k = rng.standard_normal((2, B, T, H, K)).astype(np.float32)
    v = rng.standard_normal((B, T, H, V)).astype(np.float32)
    raw = rng.standard_normal((B, T, H, K)).astype(np.float32)
    raw_beta = rng.standard_normal((B, T, H)).astype(np.float32)
    A_log = np.log(rng.uniform(1, 4, H)).astype(np.float32)
    dt_bias = rng.uniform(-1, 1, H * K).astype(np.float32)   # fla's flat [H * K]
    lower = -5.0
    fused = dict(A_log=A_log, dt_bias=dt_bias, gate_activation="sigmoid",
                 gate_lower_bound=lower, beta_sigmoid=True, chunk_size=16)
    o, _ = la.attention("kda", q, k, v, raw, raw_beta, **fused)
    z = np.exp(A_log)[:, None] * (raw + dt_bias.reshape(H, K))
    sig = 1 / (1 + np.exp(-z))
    g, beta = (lower * sig).astype(np.float32), (1 / (1 + np.exp(-raw_beta))).astype(np.float32)
    o_ref, _ = la.attention("kda", q, k, v, g, beta, chunk_size=16)
    assert lt.rel_rms(o_ref, o) <= 1e-6
    do = rng.standard_normal(o.shape).astype(np.float32)
    got = la.attention_backward("kda", q, k, v, raw, raw_beta, do=do, **fused)
    ref = la.attention_backward("kda", q, k, v, g, beta, do=do, chunk_size=16)
    dz = ref["g"] * lower * sig * (1 - sig)
    assert got["dt_bias"].shape == (H * K,)
    assert lt.rel_rms(dz * np.exp(A_log)[:, None], got["g"]) <= 1e-5
    assert lt.rel_rms((dz * z).sum(axis=(0, 1, 3)), got["A_log"]) <= 1e-5
    assert lt.rel_rms((dz * np.exp(A_log)[:, None]).sum(axis=(0, 1)).reshape(-1),
                      got["dt_bias"]) <= 1e-5
    assert lt.rel_rms(ref["beta"] * beta * (1 - beta), got["beta"]) <= 1e-5

    with pytest.raises(ValueError, match="used by an in-kernel gate activation only"):
        la.attention("kda", q, k, v, g, beta, A_log=A_log)
    with pytest.raises(ValueError, match="needs a finite gate_lower_bound"):
        la.attention("kda", q, k, v, raw, beta, gate_activation="sigmoid")
    with pytest.raises(ValueError, match="gate_activation must be None"):
        la.attention("kda", q, k, v, raw, beta, gate_activation="relu")
    with pytest.raises(ValueError, match="needs a data-dependent gate g"):
        la.attention("deltanet", q, k, v, None, beta, gate_activation="softplus")
    with pytest.raises(ValueError, match="beta_sigmoid needs the delta rule"):
        la.attention("gla", q, k, v, g, beta_sigmoid=True)
    with pytest.raises(ValueError, match="dt_bias"):
        la.attention("kda", q, k, v, raw, beta, gate_activation="softplus",
                     dt_bias=dt_bias[:-1])
