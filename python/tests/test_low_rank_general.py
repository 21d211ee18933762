"""The general low-rank form through the chunked path: Gated DeltaNet-2
(level 0, erase and write gates) and `la.recurrence low_rank(general)`
(level 1), against the fp64 reference and the sequential lowering."""

import os
import subprocess
import tempfile

import numpy as np
import pytest

from la import reference, runner
from la import testing as lt

LA_RUN = runner.find_la_run()
pytestmark = pytest.mark.skipif(LA_RUN is None, reason="la-run is not built")


def _type(shape, element="f32"):
    return "tensor<" + "x".join(str(d) for d in shape) + "x" + element + ">"


def _la_run(mlir, args, n_results, *, chunk=16, sequential=False, extra=()):
    """Runs the only function of `mlir` on `args` (name -> array, in order),
    with la-run's options `extra` after the schedule's."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "f.mlir")
        with open(path, "w") as f:
            f.write(mlir)
        command = [LA_RUN, path]
        for index, array in enumerate(args):
            file = os.path.join(tmp, f"in{index}.npy")
            np.save(file, array)
            command.append(f"--input={file}")
        outputs = [os.path.join(tmp, f"out{i}.npy") for i in range(n_results)]
        command += [f"--output={o}" for o in outputs]
        command += ["--sequential"] if sequential else [f"--chunk-size={chunk}"]
        command += list(extra)
        result = subprocess.run(command, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        return [np.load(o) for o in outputs]


def _gdn2_inputs(B, T, H, HV, K, V, seed, dtype=np.float32):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, T, H, K)).astype(dtype)
    k = rng.standard_normal((B, T, H, K))
    k = (k / np.linalg.norm(k, axis=-1, keepdims=True)).astype(dtype)
    v = rng.standard_normal((B, T, HV, V)).astype(dtype)
    g = (-np.log1p(np.exp(-rng.standard_normal((B, T, H, K)))) / 16).astype(np.float32)
    erase = (1 / (1 + np.exp(-rng.standard_normal((B, T, H, K))))).astype(np.float32)
    write = (1 / (1 + np.exp(-rng.standard_normal((B, T, HV, V))))).astype(np.float32)
    s0 = (0.1 * rng.standard_normal((B, HV, K, V))).astype(np.float32)
    return q, k, v, g, erase, write, s0


def _gdn2_mlir(B, T, H, HV, K, V, element="f32"):
    qk, vt = _type((B, T, H, K), element), _type((B, T, HV, V), element)
    gt, wt = _type((B, T, H, K)), _type((B, T, HV, V))
    st = _type((B, HV, K, V))
    return (
        f"func.func @f(%q: {qk}, %k: {qk}, %v: {vt}, %g: {gt}, %e: {gt}, %w: {wt}, "
        f"%s0: {st}) -> ({vt}, {st}) {{\n"
        f"  %o, %s = la.attention gated_deltanet2 %q, %k, %v g(%g : {gt}) erase(%e : {gt}) "
        f"write(%w : {wt}) initial_state(%s0 : {st}) : {qk}, {qk}, {vt} -> {vt}, {st}\n"
        f"  return %o, %s : {vt}, {st}\n}}\n"
    )


def _check(ref, out, tol):
    err = lt.rel_rms(ref, out)
    assert np.all(np.isfinite(out)) and err <= tol, f"rel_rms {err:.3g} > {tol}"
    return err


@pytest.mark.parametrize("shape,chunk", [((1, 37, 2, 4, 16, 8), 16),
                                         ((2, 100, 1, 1, 16, 16), 64),
                                         ((1, 5, 2, 2, 8, 8), 16)])
@pytest.mark.parametrize("sequential", [False, True])
def test_gated_deltanet2(shape, chunk, sequential):
    B, T, H, HV, K, V = shape
    q, k, v, g, e, w, s0 = _gdn2_inputs(*shape, seed=sum(shape))
    o, s = _la_run(_gdn2_mlir(*shape), [q, k, v, g, e, w, s0], 2, chunk=chunk,
                   sequential=sequential)
    ref_o, ref_s = reference.gated_delta_rule2(q, k, v, g, e, w, initial_state=s0)
    _check(ref_o, o, 1e-5)
    _check(ref_s, s, 1e-5)


def test_gated_deltanet2_with_equal_gates_is_kda():
    """erase = write = beta (one scalar per token and head) gives KDA."""
    shape = (1, 40, 2, 2, 16, 8)
    q, k, v, g, _, _, s0 = _gdn2_inputs(*shape, seed=3)
    beta = np.random.default_rng(3).uniform(0.1, 0.9, (1, 40, 2)).astype(np.float32)
    e = np.repeat(beta[..., None], 16, axis=-1)
    w = np.repeat(beta[..., None], 8, axis=-1)
    o, s = _la_run(_gdn2_mlir(*shape), [q, k, v, g, e, w, s0], 2)
    ref_o, ref_s = reference.kda(q, k, v, g, beta, initial_state=s0)
    _check(ref_o, o, 1e-5)
    _check(ref_s, s, 1e-5)


def test_gated_deltanet2_bf16():
    shape = (1, 50, 2, 2, 16, 16)
    q, k, v, g, e, w, s0 = _gdn2_inputs(*shape, seed=5)
    q, k, v = (runner.round_to_bf16(x) for x in (q, k, v))
    o, s = _la_run(_gdn2_mlir(*shape, element="bf16"), [q, k, v, g, e, w, s0], 2)
    ref_o, ref_s = reference.gated_delta_rule2(q, k, v, g, e, w, initial_state=s0)
    _check(ref_o, o, 5e-3)
    _check(ref_s, s, 5e-3)


def _dplr_mlir(B, T, H, HV, K, V, N=None):
    qk, vt = _type((B, T, H, K)), _type((B, T, HV, V))
    st = _type((N or B, HV, K, V))
    cu = f", %cu: {_type((N + 1,), 'i32')}" if N else ""
    cu_group = f" cu_seqlens(%cu : {_type((N + 1,), 'i32')})" if N else ""
    return (
        f"func.func @f(%q: {qk}, %k: {qk}, %v: {vt}, %g: {qk}, %a: {qk}, %b: {qk}, "
        f"%s0: {st}{cu}) -> ({vt}, {st}) {{\n"
        f"  %o0 = tensor.empty() : {vt}\n"
        f"  %o, %s = la.recurrence decay(channel) low_rank(general) %q, %k, %v g(%g : {qk}) "
        f"a(%a : {qk}) b(%b : {qk}){cu_group} outs(%o0, %s0 : {vt}, {st}) {{scale = 0.25 : f32}} "
        f": {qk}, {qk}, {vt} -> {vt}, {st}\n"
        f"  return %o, %s : {vt}, {st}\n}}\n"
    )


def _dplr_inputs(B, T, H, HV, K, V, N, seed):
    q, k, v, g, _, _, _ = _gdn2_inputs(B, T, H, HV, K, V, seed)
    rng = np.random.default_rng(seed + 1)
    # A transition Diag(alpha) - b a^T that stays contractive: a, b small.
    a = (0.5 * rng.standard_normal((B, T, H, K)) / np.sqrt(K)).astype(np.float32)
    b = (0.5 * rng.standard_normal((B, T, H, K)) / np.sqrt(K)).astype(np.float32)
    s0 = (0.1 * rng.standard_normal((N, HV, K, V))).astype(np.float32)
    return q, k, v, g, a, b, s0


@pytest.mark.parametrize("chunk", [16, 32])
def test_general_low_rank_recurrence(chunk):
    shape = (2, 70, 2, 4, 16, 8)
    q, k, v, g, a, b, s0 = _dplr_inputs(*shape, N=2, seed=11)
    ref_o, ref_s = reference.dplr_recurrence(q, k, v, log_alpha=g, a=a, b=b, scale=0.25,
                                             initial_state=s0)
    o, s = _la_run(_dplr_mlir(*shape), [q, k, v, g, a, b, s0], 2, chunk=chunk)
    _check(ref_o, o, 1e-5)
    _check(ref_s, s, 1e-5)
    o_seq, s_seq = _la_run(_dplr_mlir(*shape), [q, k, v, g, a, b, s0], 2, sequential=True)
    _check(ref_o, o_seq, 1e-5)
    _check(o_seq, o, 1e-5)


def test_general_low_rank_varlen():
    shape = (1, 60, 1, 2, 8, 8)
    cu = np.array([0, 7, 33, 60], dtype=np.int32)
    q, k, v, g, a, b, s0 = _dplr_inputs(*shape, N=3, seed=12)
    ref_o, ref_s = reference.dplr_recurrence(q, k, v, log_alpha=g, a=a, b=b, scale=0.25,
                                             initial_state=s0, cu_seqlens=cu)
    o, s = _la_run(_dplr_mlir(*shape, N=3), [q, k, v, g, a, b, s0, cu], 2, chunk=16)
    _check(ref_o, o, 1e-5)
    _check(ref_s, s, 1e-5)


@pytest.mark.parametrize("keyword,gate", [("deltanet2", "none"), ("decayed_deltanet2", "fixed"),
                                          ("scalar_gated_deltanet2", "scalar")])
@pytest.mark.parametrize("sequential", [False, True])
def test_gated_deltanet2_other_gates(keyword, gate, sequential):
    """The erase_write rule with no gate, a fixed per-head decay and a scalar
    gate, each against the reference with the gate broadcast over K."""
    B, T, H, HV, K, V = 1, 30, 2, 2, 8, 8
    q, k, v, g, e, w, s0 = _gdn2_inputs(B, T, H, HV, K, V, seed=21)
    qk, vt, gt, wt = (_type((B, T, H, K)), _type((B, T, HV, V)), _type((B, T, H, K)),
                      _type((B, T, HV, V)))
    st, gs = _type((B, HV, K, V)), _type((B, T, H))
    args, extra_arg, gate_group, attrs = [q, k, v], "", "", ""
    if gate == "scalar":
        g_scalar = g[..., 0].copy()
        args.append(g_scalar)
        extra_arg, gate_group = f"%g: {gs}, ", f"g(%g : {gs}) "
        g_ref = np.repeat(g_scalar[..., None], K, axis=-1)
    elif gate == "fixed":
        decay = np.array([-0.1, -0.3], dtype=np.float32)
        attrs = " {log_decay = array<f32: -0.1, -0.3>}"
        g_ref = np.broadcast_to(decay[None, None, :, None], (B, T, H, K))
    else:
        g_ref = None
    args += [e, w, s0]
    mlir = (
        f"func.func @f(%q: {qk}, %k: {qk}, %v: {vt}, {extra_arg}%e: {gt}, %w: {wt}, "
        f"%s0: {st}) -> ({vt}, {st}) {{\n"
        f"  %o, %s = la.attention {keyword} %q, %k, %v {gate_group}erase(%e : {gt}) "
        f"write(%w : {wt}) initial_state(%s0 : {st}){attrs} : {qk}, {qk}, {vt} -> {vt}, {st}\n"
        f"  return %o, %s : {vt}, {st}\n}}\n"
    )
    o, s = _la_run(mlir, args, 2, sequential=sequential)
    ref_o, ref_s = reference.gated_delta_rule2(q, k, v, g_ref, e, w, initial_state=s0)
    _check(ref_o, o, 1e-5)
    _check(ref_s, s, 1e-5)


@pytest.mark.parametrize("variant,sequential", [
    ("dplr", False), ("decayed_dplr", False), ("scalar_gated_dplr", False),
    ("scalar_gated_dplr", True)])
def test_dplr_rule_every_gate(variant, sequential):
    """la.attention's dplr rule (RWKV-7's transition, explicit a and b) with
    the gate kinds test_cpu_exec.py does not run (it runs rwkv7), grouped
    value heads, T % C != 0 and an initial state, against reference.dplr
    (la.recurrence's general form underneath)."""
    inputs = lt.make_inputs(variant, 2, 45, 2, 8, 6, HV=4, seed=31, with_initial_state=True,
                            gate_scale=1 / 16)
    prepared = runner.prepare_inputs(inputs)
    o, s, _ = runner.run_attention(variant, prepared, chunk_size=16, sequential=sequential)
    ref_o, ref_s = lt.reference_for(variant, prepared)
    _check(ref_o, o, 1e-5)
    _check(ref_s, s, 1e-5)


def test_dplr_rule_with_delta_vectors_is_kda():
    """rwkv7 with a = exp(g) * k, b = beta * k and the written key beta * k
    runs KDA's recurrence: the two compiled kernels agree."""
    inputs = lt.make_inputs("kda", 1, 40, 2, 8, 8, seed=32, with_initial_state=True,
                            gate_scale=1 / 16)
    prepared = runner.prepare_inputs(inputs)
    o_kda, s_kda, _ = runner.run_attention("kda", prepared, chunk_size=16)
    k = prepared["k"].astype(np.float64)
    beta = prepared["beta"].astype(np.float64)[..., None]
    dplr = dict(prepared, k=beta * k, a=np.exp(prepared["g"].astype(np.float64)) * k,
                b=beta * k)
    del dplr["beta"]
    o, s, _ = runner.run_attention("rwkv7", runner.prepare_inputs(dplr), chunk_size=16,
                                   scale=8 ** -0.5)
    _check(o_kda, o, 1e-5)
    _check(s_kda, s, 1e-5)
