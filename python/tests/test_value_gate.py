"""`la.recurrence`'s value-side gate `gv` (fla's `gv`; the gate of the
adjoint recurrences of a channel-gated one), alone and with a key-side
channel gate: the chunked path (both forms of the value-gated intra-chunk
product: one pre-scaled product where a chunk's gates stay near its first
row, an exponential per term elsewhere) and the token loops, against the
fp64 reference."""

import numpy as np
import pytest

from la import reference, runner
from la import testing as lt

from test_low_rank_general import _la_run, _type

LA_RUN = runner.find_la_run()
pytestmark = pytest.mark.skipif(LA_RUN is None, reason="la-run is not built")


def _mlir(B, T, H, HV, K, V, key_gate, N=None):
    qk, vt = _type((B, T, H, K)), _type((B, T, HV, V))
    st = _type((N or B, HV, K, V))
    gate_arg = f"%g: {qk}, " if key_gate else ""
    gate = f"g(%g : {qk}) " if key_gate else ""
    cu = f", %cu: {_type((N + 1,), 'i32')}" if N else ""
    cu_group = f"cu_seqlens(%cu : {_type((N + 1,), 'i32')}) " if N else ""
    decay = "channel" if key_gate else "none"
    return (
        f"func.func @f(%q: {qk}, %k: {qk}, %v: {vt}, {gate_arg}%gv: {vt}, "
        f"%s0: {st}{cu}) -> ({vt}, {st}) {{\n"
        f"  %o0 = tensor.empty() : {vt}\n"
        f"  %o, %s = la.recurrence decay({decay}) low_rank(none) %q, %k, %v {gate}"
        f"gv(%gv : {vt}) {cu_group}outs(%o0, %s0 : {vt}, {st}) {{scale = 0.25 : f32}} "
        f": {qk}, {qk}, {vt} -> {vt}, {st}\n"
        f"  return %o, %s : {vt}, {st}\n}}\n"
    )


def _inputs(B, T, H, HV, K, V, N, seed, strong=False):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, T, H, K)).astype(np.float32)
    k = (rng.standard_normal((B, T, H, K)) / np.sqrt(K)).astype(np.float32)
    v = rng.standard_normal((B, T, HV, V)).astype(np.float32)
    g = (-np.log1p(np.exp(-rng.standard_normal((B, T, H, K)))) / 16).astype(np.float32)
    gv = (-np.log1p(np.exp(-rng.standard_normal((B, T, HV, V)))) / 8).astype(np.float32)
    if strong:
        # Gates far from a chunk's first row: the per-term form, with
        # log-gates down to -30 and a hard reset (-inf).
        gv[:, ::5] = rng.uniform(-30, -1, gv[:, ::5].shape).astype(np.float32)
        gv[:, 7, :, 0] = -np.inf
    s0 = (0.1 * rng.standard_normal((N, HV, K, V))).astype(np.float32)
    return q, k, v, g, gv, s0


@pytest.mark.parametrize("key_gate", [False, True])
@pytest.mark.parametrize("strong", [False, True])
@pytest.mark.parametrize("chunk", [16, 32])
def test_value_gate(key_gate, strong, chunk):
    B, T, H, HV, K, V = 2, 70, 2, 4, 16, 8
    q, k, v, g, gv, s0 = _inputs(B, T, H, HV, K, V, B, seed=5, strong=strong)
    ref_o, ref_s = reference.dplr_recurrence(
        q, k, v, log_alpha=g if key_gate else None, scale=0.25, initial_state=s0,
        log_value_gate=gv)
    args = [q, k, v] + ([g] if key_gate else []) + [gv, s0]
    mlir = _mlir(B, T, H, HV, K, V, key_gate)
    o, s = _la_run(mlir, args, 2, chunk=chunk)
    assert lt.rel_rms(ref_o, o) <= 1e-5
    assert lt.rel_rms(ref_s, s) <= 1e-5
    o_seq, s_seq = _la_run(mlir, args, 2, sequential=True)
    assert lt.rel_rms(ref_o, o_seq) <= 1e-5
    assert lt.rel_rms(ref_s, s_seq) <= 1e-5


def test_value_gate_packed_sequences():
    B, T, H, HV, K, V, N = 1, 90, 1, 2, 16, 16, 3
    q, k, v, g, gv, s0 = _inputs(B, T, H, HV, K, V, N, seed=9)
    cu = np.array([0, 17, 60, 90], dtype=np.int32)
    ref_o, ref_s = reference.dplr_recurrence(
        q, k, v, log_alpha=g, scale=0.25, initial_state=s0, cu_seqlens=cu,
        log_value_gate=gv)
    mlir = _mlir(B, T, H, HV, K, V, True, N=N)
    for options in ({"chunk": 16}, {"sequential": True}):
        o, s = _la_run(mlir, [q, k, v, g, gv, s0, cu], 2, **options)
        assert lt.rel_rms(ref_o, o) <= 1e-5
        assert lt.rel_rms(ref_s, s) <= 1e-5


def test_value_gate_nonfinite_value_stays_later():
    """A NaN value at token t leaves every earlier output exact."""
    B, T, H, HV, K, V = 1, 48, 1, 1, 16, 8
    q, k, v, g, gv, s0 = _inputs(B, T, H, HV, K, V, B, seed=3)
    v[0, 37, 0, 2] = np.nan
    ref_o, _ = reference.dplr_recurrence(q, k, v, scale=0.25, initial_state=s0,
                                         log_value_gate=gv)
    o, _ = _la_run(_mlir(B, T, H, HV, K, V, False), [q, k, v, gv, s0], 2, chunk=16)
    assert lt.rel_rms(ref_o[:, :37], o[:, :37]) <= 1e-5
    assert np.isnan(o[0, 37:, 0, 2]).all()


@pytest.mark.parametrize(
    "extra",
    [("--fuse=fused",), ("--fuse=materialized",), ("--gpu-schedule",),
     ("--target=gpu-emulator",)],
    ids=["fused", "materialized", "gpu-schedule", "gpu-emulator"],
)
def test_value_gate_schedules(extra):
    # T a multiple of the chunk: the GPU path's requirement.
    B, T, H, HV, K, V = 1, 64, 2, 4, 16, 16
    q, k, v, g, gv, s0 = _inputs(B, T, H, HV, K, V, B, seed=21, strong=True)
    ref_o, ref_s = reference.dplr_recurrence(
        q, k, v, log_alpha=g, scale=0.25, initial_state=s0, log_value_gate=gv)
    o, s = _la_run(_mlir(B, T, H, HV, K, V, True), [q, k, v, g, gv, s0], 2,
                   chunk=16, extra=extra)
    assert lt.rel_rms(ref_o, o) <= 1e-5
    assert lt.rel_rms(ref_s, s) <= 1e-5
