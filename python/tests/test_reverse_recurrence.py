"""`la.recurrence {reverse}`: the recurrence run backward in time (the
adjoint recurrences of the backward are of this kind), through the fused
schedule (the T tiles visit the tokens from the end, each chunk is the
forward chunk program on its tokens flipped), the materialised one
(`la-chunk`), packed sequences, the GPU schedule and emulator, and the token
loops, against the fp64 reference run backward; and its gradient
(la-derive-backward), against the hand-written fp64 reverse mode run
backward (`dplr_recurrence_vjp(reverse=True)`, checked against finite
differences in test_reference_grad.py)."""

import subprocess

import numpy as np
import pytest

from la import reference, runner
from la import testing as lt

from test_value_gate import _inputs, _la_run, _type


def _mlir(B, T, H, HV, K, V, *, gate, value_gate=False, delta=False, N=None,
          dynamic=False):
    qk, vt = _type((B, T, H, K)), _type((B, T, HV, V))
    dyn_qk = _type((B, "?", H, K)) if dynamic else qk
    dyn_vt = _type((B, "?", HV, V)) if dynamic else vt
    ht = _type((B, T, H))
    st = _type((N or B, HV, K, V))
    args = [f"%q: {qk}", f"%k: {qk}", f"%v: {vt}"]
    operands = ""
    gate_type = {"channel": qk, "scalar": ht}.get(gate)
    if gate_type:
        args.append(f"%g: {gate_type}")
        operands += f"g(%g : {gate_type if not dynamic else gate_type.replace(f'x{T}x', 'x?x')}) "
    if value_gate:
        args.append(f"%gv: {vt}")
        operands += f"gv(%gv : {dyn_vt}) "
    if delta:
        args.append(f"%beta: {ht}")
        operands += f"beta(%beta : {_type((B, '?', H)) if dynamic else ht}) "
    args.append(f"%s0: {st}")
    if N:
        args.append(f"%cu: {_type((N + 1,), 'i32')}")
        operands += f"cu_seqlens(%cu : {_type((N + 1,), 'i32')}) "
    casts = ""
    if dynamic:
        names = ["q", "k", "v"] + (["g"] if gate_type else []) + (["gv"] if value_gate else []) \
            + (["beta"] if delta else [])
        for arg in args:
            name, ty = arg[1:].split(": ")
            if name in names:
                casts += f"  %{name}_d = tensor.cast %{name} : {ty} to {ty.replace(f'x{T}x', 'x?x')}\n"
        for name in names:
            operands = operands.replace(f"(%{name} :", f"(%{name}_d :")
    q_, k_, v_ = ("%q_d", "%k_d", "%v_d") if dynamic else ("%q", "%k", "%v")
    return (
        f"func.func @f({', '.join(args)}) -> ({vt}, {st}) {{\n{casts}"
        f"  %o0 = tensor.empty() : {vt}\n"
        + (f"  %o0_d = tensor.cast %o0 : {vt} to {dyn_vt}\n" if dynamic else "")
        + f"  %o, %s = la.recurrence decay({gate or 'none'}) "
        f"low_rank({'delta' if delta else 'none'}) {q_}, {k_}, {v_} {operands}"
        f"outs({'%o0_d' if dynamic else '%o0'}, %s0 : {dyn_vt}, {st}) "
        f"{{reverse, scale = 0.25 : f32}} : {dyn_qk}, {dyn_qk}, {dyn_vt} -> {dyn_vt}, {st}\n"
        + (f"  %o_s = tensor.cast %o : {dyn_vt} to {vt}\n" if dynamic else "")
        + f"  return {'%o_s' if dynamic else '%o'}, %s : {vt}, {st}\n}}\n"
    )


def _case(B, T, H, HV, K, V, N, gate, value_gate, delta, seed):
    q, k, v, g, gv, s0 = _inputs(B, T, H, HV, K, V, N, seed=seed)
    rng = np.random.default_rng(seed + 1)
    if gate == "scalar":
        g = g[..., 0].copy()
    beta = rng.uniform(0.1, 0.9, (B, T, H)).astype(np.float32)
    args = [q, k, v] + ([g] if gate else []) + ([gv] if value_gate else []) \
        + ([beta] if delta else []) + [s0]
    log_alpha = None
    if gate == "channel":
        log_alpha = g
    elif gate == "scalar":
        log_alpha = np.repeat(g[..., None], K, axis=-1)
    low_rank = {}
    if delta:
        # The delta rule as the general form: b = beta k, a = alpha k, w = beta k.
        alpha = np.exp(log_alpha) if log_alpha is not None else np.ones_like(k)
        low_rank = {"a": alpha * k, "b": beta[..., None] * k}
    return args, dict(log_alpha=log_alpha, log_value_gate=gv if value_gate else None,
                      initial_state=s0, **low_rank), (q, k, v, beta)


CASES = [
    # (gate, value_gate, delta)
    (None, False, False),
    ("scalar", False, False),
    ("channel", False, False),
    (None, True, False),
    ("channel", False, True),
]


@pytest.mark.parametrize("gate,value_gate,delta", CASES)
@pytest.mark.parametrize("options", [
    {"chunk": 16}, {"chunk": 16, "extra": ("--fuse=fused",)},
    {"chunk": 16, "extra": ("--fuse=materialized",)}, {"sequential": True},
], ids=["auto", "fused", "materialized", "tokens"])
def test_reverse(gate, value_gate, delta, options):
    B, T, H, HV, K, V = 2, 45, 2, 4, 16, 8
    args, ref_args, (q, k, v, beta) = _case(B, T, H, HV, K, V, B, gate, value_gate, delta, 4)
    w = beta[..., None] * k if delta else k
    ref_o, ref_s = reference.dplr_recurrence(q, w, v, scale=0.25, reverse=True, **ref_args)
    o, s = _la_run(_mlir(B, T, H, HV, K, V, gate=gate, value_gate=value_gate, delta=delta),
                   args, 2, **options)
    assert lt.rel_rms(ref_o, o) <= 1e-5
    assert lt.rel_rms(ref_s, s) <= 1e-5


@pytest.mark.parametrize("sequential", [False, True])
def test_reverse_packed_sequences(sequential):
    B, T, H, HV, K, V, N = 1, 70, 1, 2, 16, 8, 3
    args, ref_args, (q, k, v, _) = _case(B, T, H, HV, K, V, N, "channel", False, False, 6)
    cu = np.array([0, 9, 40, 70], dtype=np.int32)
    ref_o, ref_s = reference.dplr_recurrence(q, k, v, scale=0.25, cu_seqlens=cu,
                                             reverse=True, **ref_args)
    o, s = _la_run(_mlir(B, T, H, HV, K, V, gate="channel", N=N), args + [cu], 2,
                   chunk=16, sequential=sequential)
    assert lt.rel_rms(ref_o, o) <= 1e-5
    assert lt.rel_rms(ref_s, s) <= 1e-5


def test_reverse_dynamic_time():
    B, T, H, HV, K, V = 1, 37, 2, 2, 16, 8
    args, ref_args, (q, k, v, _) = _case(B, T, H, HV, K, V, B, "channel", False, False, 8)
    ref_o, ref_s = reference.dplr_recurrence(q, k, v, scale=0.25, reverse=True, **ref_args)
    mlir = _mlir(B, T, H, HV, K, V, gate="channel", dynamic=True)
    for options in ({"chunk": 16}, {"chunk": 16, "extra": ("--fuse=materialized",)}):
        o, s = _la_run(mlir, args, 2, **options)
        assert lt.rel_rms(ref_o, o) <= 1e-5
        assert lt.rel_rms(ref_s, s) <= 1e-5


@pytest.mark.parametrize("extra", [("--gpu-schedule",), ("--target=gpu-emulator",)],
                         ids=["gpu-schedule", "gpu-emulator"])
def test_reverse_gpu_schedules(extra):
    B, T, H, HV, K, V = 1, 64, 2, 2, 16, 16
    args, ref_args, (q, k, v, _) = _case(B, T, H, HV, K, V, B, "channel", False, False, 10)
    ref_o, ref_s = reference.dplr_recurrence(q, k, v, scale=0.25, reverse=True, **ref_args)
    o, s = _la_run(_mlir(B, T, H, HV, K, V, gate="channel"), args, 2, chunk=16, extra=extra)
    assert lt.rel_rms(ref_o, o) <= 1e-5
    assert lt.rel_rms(ref_s, s) <= 1e-5


# --------------------------------------------------------------------------
# the gradient of a reverse recurrence (la-derive-backward: the forward
# recurrence's gradient on the flipped tokens, flipped back)
# --------------------------------------------------------------------------

LA_OPT = runner.find_tool("la-opt", "LA_OPT")


def _gradient_mlir(mlir):
    """The gradient function that la-derive-backward derives from `mlir`'s
    function (the forward dropped, so it is the module's only function)."""
    result = subprocess.run([LA_OPT, "--la-derive-backward=keep-forward=0"], input=mlir,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "la.recurrence_grad" in result.stdout
    return result.stdout


def _expected_gradients(gate, value_gate, delta, ref_args, q, k, v, beta, do, ds, cu=None):
    """The hand-written fp64 reverse mode of the reverse recurrence, mapped
    back from the general form (w = b = beta k, a = alpha k) by the chain
    rule; the gradients in the order of the function's float arguments."""
    w = beta[..., None] * k if delta else k
    ref = reference.dplr_recurrence_vjp(q, w, v, do, ds, scale=0.25, cu_seqlens=cu,
                                        reverse=True, **ref_args)
    dk, d_log_alpha = ref["k"], ref.get("log_alpha")
    if delta:
        alpha = np.exp(ref_args["log_alpha"]) if ref_args["log_alpha"] is not None \
            else np.ones_like(k)
        dk = beta[..., None] * (ref["k"] + ref["b"]) + alpha * ref["a"]
        dbeta = (k * (ref["k"] + ref["b"])).sum(-1)
        if d_log_alpha is not None:
            d_log_alpha = d_log_alpha + alpha * k * ref["a"]
    grads = [ref["q"], dk, ref["v"]]
    if gate == "channel":
        grads.append(d_log_alpha)
    elif gate == "scalar":
        grads.append(d_log_alpha.sum(-1))
    if value_gate:
        grads.append(ref["log_value_gate"])
    if delta:
        grads.append(dbeta)
    grads.append(ref["initial_state"])
    return grads


@pytest.mark.skipif(LA_OPT is None, reason="la-opt is not built")
@pytest.mark.parametrize("gate,value_gate,delta", CASES)
@pytest.mark.parametrize("options", [{"chunk": 16}, {"sequential": True}],
                         ids=["chunked", "tokens"])
def test_reverse_gradient(gate, value_gate, delta, options):
    B, T, H, HV, K, V = 2, 37, 2, 4, 8, 6
    args, ref_args, (q, k, v, beta) = _case(B, T, H, HV, K, V, B, gate, value_gate, delta, 12)
    rng = np.random.default_rng(13)
    do = rng.standard_normal((B, T, HV, V)).astype(np.float32)
    ds = rng.standard_normal((B, HV, K, V)).astype(np.float32)
    expected = _expected_gradients(gate, value_gate, delta, ref_args, q, k, v, beta, do, ds)
    mlir = _gradient_mlir(_mlir(B, T, H, HV, K, V, gate=gate, value_gate=value_gate,
                                delta=delta))
    got = _la_run(mlir, args + [do, ds], len(expected), **options)
    for index, (ref, out) in enumerate(zip(expected, got)):
        limit = 1e-5 if index < 3 or index == len(expected) - 1 else 1e-4
        assert lt.rel_rms(ref, out) <= limit, (index, lt.rel_rms(ref, out))


@pytest.mark.skipif(LA_OPT is None, reason="la-opt is not built")
@pytest.mark.parametrize("sequential", [False, True], ids=["chunked", "tokens"])
def test_reverse_gradient_packed_sequences(sequential):
    """Each sequence backward in time: the flipped problem takes the
    sequences in reverse order (offsets T - cu[N - i], states flipped)."""
    B, T, H, HV, K, V, N = 1, 45, 1, 2, 8, 6, 3
    args, ref_args, (q, k, v, beta) = _case(B, T, H, HV, K, V, N, "channel", True, False, 14)
    cu = np.array([0, 9, 9, 45], dtype=np.int32)
    rng = np.random.default_rng(15)
    do = rng.standard_normal((B, T, HV, V)).astype(np.float32)
    ds = rng.standard_normal((N, HV, K, V)).astype(np.float32)
    expected = _expected_gradients("channel", True, False, ref_args, q, k, v, beta, do, ds,
                                   cu=cu)
    mlir = _gradient_mlir(_mlir(B, T, H, HV, K, V, gate="channel", value_gate=True, N=N))
    got = _la_run(mlir, args + [cu, do, ds], len(expected), chunk=16, sequential=sequential)
    for index, (ref, out) in enumerate(zip(expected, got)):
        assert lt.rel_rms(ref, out) <= 1e-4, (index, lt.rel_rms(ref, out))


@pytest.mark.parametrize("variant,extra", [
    ("gated_deltanet", {"cu_seqlens": [0, 9, 9, 30], "qk_l2norm": True}),
    ("kda", {}),
    ("gated_deltanet2", {}),   # the general low-rank form: token-loop backward
], ids=["gated_deltanet-packed", "kda", "gated_deltanet2"])
@pytest.mark.parametrize("sequential", [False, True], ids=["chunked", "tokens"])
def test_attention_reverse_gradient(variant, extra, sequential):
    """la.attention(reverse=True) (level 0, lowered to the forward gradient
    on flipped tokens with the level-0 maps around it) against the
    hand-written fp64 reverse mode run backward."""
    import la

    make = {key: val for key, val in extra.items() if key == "cu_seqlens"}
    attrs = {key: val for key, val in extra.items() if key != "cu_seqlens"}
    B, T, H, HV, K, V = 1, 30, 1, 2, 8, 6
    inputs = lt.make_inputs(variant, B, T, H, K, V, HV=HV, seed=21, with_initial_state=True,
                            **make)
    N = B if "cu_seqlens" not in make else len(make["cu_seqlens"]) - 1
    rng = np.random.default_rng(22)
    do = rng.standard_normal((B, T, HV, V)).astype(np.float32)
    d_final = rng.standard_normal((N, HV, K, V)).astype(np.float32)
    kwargs = {key: inputs[key] for key in ("g", "beta", "erase", "write", "initial_state",
                                           "cu_seqlens") if key in inputs}
    # The forward: the fp64 reference on each sequence's tokens in reverse
    # order (token t of a sequence [a, b) at a + b - 1 - t), flipped back.
    cu = make.get("cu_seqlens", [0, T])
    order = np.concatenate([np.arange(b - 1, a - 1, -1) for a, b in zip(cu[:-1], cu[1:])])
    flipped = {key: (np.asarray(x)[:, order] if key in ("q", "k", "v", "g", "beta", "erase",
                                                        "write") else x)
               for key, x in inputs.items()}
    ref_o, ref_s = lt.reference_for(variant, flipped, **attrs)
    o, s = la.attention(variant, inputs["q"], inputs["k"], inputs["v"], output_final_state=True,
                        chunk_size=8, sequential=sequential, reverse=True, **kwargs, **attrs)
    assert lt.rel_rms(ref_o[:, order], o) <= 1e-5 and lt.rel_rms(ref_s, s) <= 1e-5

    got = la.attention_backward(variant, inputs["q"], inputs["k"], inputs["v"], do=do,
                                d_final_state=d_final, chunk_size=8, sequential=sequential,
                                reverse=True, **kwargs, **attrs)
    expected = lt.reference_gradients(variant, inputs, do, d_final, reverse=True, **attrs)
    assert sorted(got) == sorted(expected)
    for name, value in expected.items():
        limit = 1e-5 if name in ("q", "k", "v", "initial_state") else 1e-4
        assert lt.rel_rms(value, got[name]) <= limit, (name, lt.rel_rms(value, got[name]))
