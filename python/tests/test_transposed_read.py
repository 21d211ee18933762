"""`la.recurrence`'s read from the state's value side (`transposed_query`,
`ot_t = S_t (scale x_t)`), compiled by la-run under every CPU schedule
(fused chunks, materialised chunks, token loops, packed sequences, a
partial last chunk, reverse time), with and without a low-rank part
(the delta rule, the general form), against an fp64 token-by-token
recurrence written here."""

import numpy as np
import pytest

from la import runner
from la import testing as lt

LA_RUN = runner.find_la_run()
pytestmark = pytest.mark.skipif(LA_RUN is None, reason="la-run is not built")


def _type(shape):
    return "tensor<" + "x".join(str(d) for d in shape) + "xf32>"


def _inputs(gate, value_gate, low_rank, B, T, H, HV, K, V, sequences, seed):
    rng = np.random.default_rng(seed)

    def normal(*shape, s=1.0):
        return (s * rng.standard_normal(shape)).astype(np.float32)

    x = {"q": normal(B, T, H, K), "k": normal(B, T, H, K, s=0.3), "v": normal(B, T, HV, V)}
    if gate == "scalar":
        x["g"] = -np.abs(normal(B, T, H, s=0.3))
    if gate == "channel":
        x["g"] = -np.abs(normal(B, T, H, K, s=0.3))
    if value_gate:
        x["gv"] = -np.abs(normal(B, T, HV, V, s=0.3))
    if low_rank == "delta":
        x["beta"] = rng.uniform(0.05, 0.95, (B, T, H)).astype(np.float32)
    if low_rank == "general":
        x["a"], x["b"] = normal(B, T, H, K, s=0.2), normal(B, T, H, K, s=0.2)
    x["x"] = normal(B, T, HV, V)
    x["s0"] = normal(sequences, HV, K, V)
    return x


NAMES = ("q", "k", "v", "g", "gv", "beta", "a", "b", "x", "s0")


def _mlir(gate, low_rank, x, scale, reverse, cu_seqlens):
    names = [n for n in NAMES if n in x]
    args = [f"%{n}: {_type(x[n].shape)}" for n in names]
    optional = "".join(f" {n}(%{n} : {_type(x[n].shape)})"
                       for n in ("g", "gv", "beta", "a", "b") if n in x)
    if cu_seqlens is not None:
        cu_type = f"tensor<{len(cu_seqlens)}xi32>"
        args.append(f"%cu: {cu_type}")
        optional += f" cu_seqlens(%cu : {cu_type})"
    B, T, H, K = x["q"].shape
    HV, V = x["v"].shape[2:]
    o, ot, s = _type((B, T, HV, V)), _type((B, T, HV, K)), _type(x["s0"].shape)
    attrs = f"scale = {scale} : f32" + (", reverse" if reverse else "")
    return (
        f"func.func @attention({', '.join(args)}) -> ({o}, {s}, {ot}) {{\n"
        f"  %oi = tensor.empty() : {o}\n"
        f"  %ti = tensor.empty() : {ot}\n"
        f"  %o, %s, %t = la.recurrence decay({gate}) low_rank({low_rank}) %q, %k, %v{optional}"
        f" transposed_query(%x : {_type(x['x'].shape)}) outs(%oi, %s0, %ti : {o}, {s}, {ot})"
        f" {{{attrs}}} : {_type(x['q'].shape)}, {_type(x['k'].shape)}, {_type(x['v'].shape)}"
        f" -> {o}, {s}, {ot}\n"
        f"  return %o, %s, %t : {o}, {s}, {ot}\n}}\n")


def _reference(gate, x, scale, reverse, cu_seqlens):
    """o_t = S_t^T (scale q_t) and ot_t = S_t (scale x_t), token by token in
    fp64, each sequence from its own initial state."""
    f = {n: a.astype(np.float64) for n, a in x.items()}
    q, k, v, xq = f["q"], f["k"], f["v"], f["x"]
    B, T, H, K = q.shape
    HV = v.shape[2]
    group = HV // H
    o = np.zeros(v.shape)
    ot = np.zeros(xq.shape[:3] + (K,))
    bounds = [(b, 0, T) for b in range(B)] if cu_seqlens is None else \
        [(0, cu_seqlens[n], cu_seqlens[n + 1]) for n in range(len(cu_seqlens) - 1)]
    finals = np.zeros(f["s0"].shape)
    for n, (b, start, end) in enumerate(bounds):
        S = f["s0"][n].copy()
        order = range(end - 1, start - 1, -1) if reverse else range(start, end)
        for t in order:
            for hv in range(HV):
                h = hv // group
                decay = np.ones(K)
                if gate == "scalar":
                    decay = np.full(K, np.exp(f["g"][b, t, h]))
                if gate == "channel":
                    decay = np.exp(f["g"][b, t, h])
                previous = S[hv].copy()
                S[hv] *= decay[:, None]
                if "gv" in f:
                    S[hv] *= np.exp(f["gv"][b, t, hv])[None, :]
                if "beta" in f:  # S += beta k (v - k^T S)^T, after the decay
                    error = v[b, t, hv] - k[b, t, h] @ S[hv]
                    S[hv] += f["beta"][b, t, h] * np.outer(k[b, t, h], error)
                else:
                    if "a" in f:  # - b (a^T S_{t-1}), the state before the decay
                        S[hv] -= np.outer(f["b"][b, t, h], f["a"][b, t, h] @ previous)
                    S[hv] += np.outer(k[b, t, h], v[b, t, hv])
                o[b, t, hv] = S[hv].T @ (scale * q[b, t, h])
                ot[b, t, hv] = S[hv] @ (scale * xq[b, t, hv])
        finals[n] = S
    return o, finals, ot


def _check(gate="scalar", value_gate=False, low_rank="none", *, B=2, T=37, H=2,
           HV=2, K=8, V=6, scale=0.5, reverse=False, cu_seqlens=None, flags=(),
           seed=0):
    sequences = B if cu_seqlens is None else len(cu_seqlens) - 1
    x = _inputs(gate, value_gate, low_rank, B, T, H, HV, K, V, sequences, seed)
    mlir = _mlir(gate, low_rank, x, scale, reverse, cu_seqlens)
    arrays = [x[n] for n in NAMES if n in x]
    if cu_seqlens is not None:
        arrays.append(np.array(cu_seqlens, np.int32))
    got = lt.run_la_run_text(LA_RUN, mlir, arrays, flags=flags, results=("o", "s", "t"))
    expected = _reference(gate, x, scale, reverse, cu_seqlens)
    for name, want, have in zip(("o", "final_state", "transposed_o"), expected, got):
        err = lt.rel_rms(want, have)
        assert err <= 1e-5, f"{name}: rel_rms {err:.3e} > 1e-5"


SCHEDULES = {
    "fused": ("--chunk-size=16",),
    "materialized": ("--chunk-size=16", "--fuse=materialized"),
    "tokens": ("--sequential",),
}


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("gate,value_gate", [("none", False), ("scalar", False),
                                             ("channel", False), ("none", True),
                                             ("scalar", True), ("channel", True)])
def test_every_gate_and_schedule(schedule, gate, value_gate):
    _check(gate, value_gate, flags=SCHEDULES[schedule])


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
def test_reverse_grouped_value_heads_k_not_v(schedule):
    _check("channel", True, H=1, HV=2, K=8, V=12, reverse=True,
           flags=SCHEDULES[schedule])


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
def test_packed_sequences(schedule):
    _check("channel", False, B=1, T=40, cu_seqlens=[0, 5, 5, 23, 40],
           flags=SCHEDULES[schedule])


def test_packed_sequences_as_tasks_in_reverse():
    _check("scalar", True, B=1, T=40, cu_seqlens=[0, 17, 40], reverse=True,
           flags=("--chunk-size=16", "--sequence-tasks"))


def test_one_chunk_shorter_than_the_chunk_size():
    _check("channel", True, T=5, flags=("--chunk-size=16",))


def test_two_threads():
    _check("channel", True, B=2, H=2, HV=4, flags=("--chunk-size=16", "--parallel"))


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("low_rank", ["delta", "general"])
@pytest.mark.parametrize("gate", ["none", "scalar", "channel"])
def test_low_rank(schedule, low_rank, gate):
    _check(gate, False, low_rank, H=1, HV=2, reverse=True, flags=SCHEDULES[schedule])


@pytest.mark.parametrize("low_rank", ["delta", "general"])
def test_low_rank_packed_sequences(low_rank):
    _check("channel", False, low_rank, B=1, T=40, cu_seqlens=[0, 5, 23, 40],
           flags=("--chunk-size=16",))


@pytest.mark.parametrize("schedule", [(), ("--chunk-parallel",)], ids=["fused", "chunk-parallel"])
@pytest.mark.parametrize("gate,value_gate,low_rank", [("channel", True, "none"),
                                                      ("scalar", False, "delta"),
                                                      ("channel", False, "general")])
def test_gpu_emulated_kernels(schedule, gate, value_gate, low_rank):
    """The GPU pipeline's kernels run on the CPU by la-emulate-gpu (its
    la-expand-recurrence-grad keeps G^T: a value-side read needs all of V
    in one block, where the GPU's blocks take tiles of V)."""
    _check(gate, value_gate, low_rank, H=1, HV=2, reverse=True,
           flags=("--target=gpu-emulator", "--chunk-size=16") + schedule)


@pytest.mark.parametrize("low_rank", ["none", "delta"])
def test_value_tiles_are_not_taken(low_rank):
    """A value-side read sums over V: la-fuse-recurrence gives such a
    recurrence whole-V tasks even when value tiles are asked for."""
    _check("channel", low_rank == "none", low_rank, H=1, HV=2, V=12,
           flags=("--chunk-size=16", "--value-tile=4", "--fuse=fused"))
