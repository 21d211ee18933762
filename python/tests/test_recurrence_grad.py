"""`la.recurrence_grad` (level 1) compiled by la-run, against the
hand-written fp64 reverse mode `la.reference.dplr_recurrence_vjp` (itself
checked against finite differences in test_reference_grad.py).

The reference takes the general form (keys w, low-rank a and b, per-channel
log alpha); the delta rule's encoding (b = w = beta k, a = alpha * k) and a
scalar gate's broadcast are mapped onto it here by the chain rule in NumPy,
independently of the compiler's lowering."""

import numpy as np
import pytest

from la import reference, runner
from la import testing as lt

LA_RUN = runner.find_la_run()
pytestmark = pytest.mark.skipif(LA_RUN is None, reason="la-run is not built")

LOG_DECAY = np.array([-0.1, -0.4], np.float32)


def _type(shape, element="f32"):
    return "tensor<" + "x".join(str(d) for d in shape) + "x" + element + ">"


def _inputs(low_rank, gate, B, T, H, HV, K, V, cu_seqlens, seed):
    rng = np.random.default_rng(seed)

    def normal(*shape, s=1.0):
        return (s * rng.standard_normal(shape)).astype(np.float32)

    N = B if cu_seqlens is None else len(cu_seqlens) - 1
    named = [("q", normal(B, T, H, K)), ("k", normal(B, T, H, K, s=0.3)),
             ("v", normal(B, T, HV, V))]
    if gate == "scalar":
        named.append(("g", -np.abs(normal(B, T, H, s=0.3))))
    if gate == "channel":
        named.append(("g", -np.abs(normal(B, T, H, K, s=0.3))))
    if low_rank == "delta":
        named.append(("beta", rng.uniform(0.05, 0.95, (B, T, H)).astype(np.float32)))
    if low_rank == "general":
        named += [("a", normal(B, T, H, K, s=0.2)), ("b", normal(B, T, H, K, s=0.2))]
    state = normal(N, HV, K, V)
    d_o = normal(B, T, HV, V)
    d_final = normal(N, HV, K, V)
    return named, state, d_o, d_final


def _mlir(low_rank, gate, named, state, d_o, d_final, cu_seqlens, scale, checkpoint):
    types = {name: _type(x.shape) for name, x in named}
    args = [f"%{name}: {types[name]}" for name, _ in named]
    args += [f"%s0: {_type(state.shape)}", f"%do: {_type(d_o.shape)}",
             f"%dsf: {_type(d_final.shape)}"]
    optional = " ".join(f"{name}(%{name} : {types[name]})" for name, _ in named[3:])
    if cu_seqlens is not None:
        cu_type = f"tensor<{len(cu_seqlens)}xi32>"
        args.append(f"%cu: {cu_type}")
        optional += f" cu_seqlens(%cu : {cu_type})"
    results = [types["q"], types["k"], types["v"], _type(state.shape)]
    results += [types[name] for name, _ in named[3:]]
    attrs = f"scale = {scale} : f32, checkpoint = {checkpoint} : i64"
    if gate == "fixed":
        H = named[0][1].shape[2]
        attrs += ", log_decay = array<f32: " + ", ".join(map(str, LOG_DECAY[:H])) + ">"
    n = len(results)
    return (
        f"func.func @attention({', '.join(args)}) -> ({', '.join(results)}) {{\n"
        f"  %r:{n} = la.recurrence_grad decay({gate}) low_rank({low_rank}) %q, %k, %v "
        f"{optional} initial_state(%s0 : {_type(state.shape)}) d_o(%do : {_type(d_o.shape)}) "
        f"d_final_state(%dsf : {_type(d_final.shape)}) {{{attrs}}} : "
        f"{types['q']}, {types['k']}, {types['v']} -> {', '.join(results)}\n"
        f"  return {', '.join(f'%r#{i}' for i in range(n))} : {', '.join(results)}\n}}\n"
    )


def _expected(low_rank, gate, named, state, d_o, d_final, cu_seqlens, scale):
    x = {name: value.astype(np.float64) for name, value in named}
    q, k, v = x["q"], x["k"], x["v"]
    B, T, H, K = q.shape
    log_alpha = np.zeros((B, T, H, K))
    if gate == "scalar":
        log_alpha = np.broadcast_to(x["g"][..., None], q.shape)
    elif gate == "channel":
        log_alpha = x["g"]
    elif gate == "fixed":
        log_alpha = np.broadcast_to(LOG_DECAY[:H].astype(np.float64)[None, None, :, None], q.shape)
    alpha = np.exp(log_alpha)
    keys, a, b = k, x.get("a"), x.get("b")
    if low_rank == "delta":
        beta = x["beta"][..., None]
        keys, a, b = beta * k, alpha * k, beta * k
    ref = reference.dplr_recurrence_vjp(
        q, keys, v, d_o, d_final, log_alpha=log_alpha, a=a, b=b, scale=scale,
        initial_state=state, cu_seqlens=cu_seqlens)
    expected = {"q": ref["q"], "k": ref["k"], "v": ref["v"],
                "initial_state": ref["initial_state"]}
    d_log_alpha = ref["log_alpha"]
    if low_rank == "delta":
        beta = x["beta"][..., None]
        expected["k"] = beta * (ref["k"] + ref["b"]) + alpha * ref["a"]
        expected["beta"] = (k * (ref["k"] + ref["b"])).sum(-1)
        d_log_alpha = d_log_alpha + alpha * k * ref["a"]
    if low_rank == "general":
        expected["a"], expected["b"] = ref["a"], ref["b"]
    if gate == "scalar":
        expected["g"] = d_log_alpha.sum(-1)
    if gate == "channel":
        expected["g"] = d_log_alpha
    return expected


def _check(low_rank, gate, *, B=2, T=21, H=2, HV=4, K=8, V=6, checkpoint=8,
           cu_seqlens=None, scale=0.5, seed=0, flags=()):
    named, state, d_o, d_final = _inputs(low_rank, gate, B, T, H, HV, K, V, cu_seqlens, seed)
    mlir = _mlir(low_rank, gate, named, state, d_o, d_final, cu_seqlens, scale, checkpoint)
    names = ["q", "k", "v", "initial_state"] + [name for name, _ in named[3:]]
    arrays = [value for _, value in named] + [state, d_o, d_final]
    if cu_seqlens is not None:
        arrays.append(np.array(cu_seqlens, np.int32))
    values = lt.run_la_run_text(LA_RUN, mlir, arrays, flags=flags, results=names)
    outputs = dict(zip(names, values))
    expected = _expected(low_rank, gate, named, state, d_o, d_final, cu_seqlens, scale)
    for name in names:
        limit = 1e-5 if name in ("q", "k", "v", "initial_state") else 1e-4
        err = lt.rel_rms(expected[name], outputs[name])
        assert err <= limit, f"d{name}: rel_rms {err:.3e} > {limit:.0e}"


@pytest.mark.parametrize("gate", ["none", "fixed", "scalar", "channel"])
@pytest.mark.parametrize("low_rank", ["none", "delta", "general"])
def test_every_gate_and_low_rank(low_rank, gate):
    _check(low_rank, gate)


def test_one_block_longer_than_the_sequence():
    _check("delta", "channel", T=5, H=1, HV=1, checkpoint=64)


def test_checkpoint_of_one_token():
    _check("general", "scalar", T=7, checkpoint=1)


@pytest.mark.parametrize("low_rank,gate", [("delta", "scalar"), ("general", "channel")])
def test_packed_sequences_with_an_empty_one(low_rank, gate):
    _check(low_rank, gate, B=1, T=19, cu_seqlens=[0, 5, 5, 19], checkpoint=4)


@pytest.mark.parametrize("gate", ["none", "fixed", "scalar", "channel"])
@pytest.mark.parametrize("cu_seqlens", [[0, 5, 5, 19], [0, 1, 18, 19], [0, 19]],
                         ids=["empty", "single-token", "one"])
def test_packed_sequences_chunked(gate, cu_seqlens):
    # No low-rank part: la-expand-recurrence-grad chunks the gradient per
    # sequence (the gates shifted within each sequence, the gate gradient
    # summed from each sequence's end, dS_0 from its first token's gate).
    _check("none", gate, B=1, T=19, cu_seqlens=cu_seqlens)




@pytest.mark.parametrize("gate", ["scalar", "channel"])
def test_delta_rule_over_several_chunks(gate):
    # la-expand-recurrence-grad's six recurrences over chunks of 64 (T % C
    # != 0), the state and its adjoint carried across chunk boundaries.
    _check("delta", gate, B=1, T=150, H=2, HV=4)


@pytest.mark.parametrize("gate", ["none", "scalar", "channel"])
def test_general_low_rank_over_several_chunks(gate):
    # The general form's five recurrences (two general, three over 3, 3 and
    # 2 sub-steps per token: 450, 450 and 300 steps in chunks of 64), the
    # states and adjoints carried across chunk boundaries.
    _check("general", gate, B=1, T=150, H=2, HV=4)


def test_general_low_rank_packed_sequences_chunked():
    # The sub-steps' offsets are the sequences' times 3 (or 2): an empty
    # sequence, one of one token, and a boundary inside a chunk.
    _check("general", "scalar", B=1, T=140, cu_seqlens=[0, 1, 70, 70, 140])


def test_general_low_rank_sequential_token_loops():
    # `--sequential` keeps the checkpointed token loops: the same gradients.
    _check("general", "channel", T=21, flags=["--sequential"])


def test_delta_rule_packed_sequences_chunked():
    # (no gate and a fixed one over several chunks: test_attention_grad's
    # DeltaNet T = 65 and decayed DeltaNet cases)
    _check("delta", "channel", B=1, T=140, cu_seqlens=[0, 1, 70, 70, 140])


@pytest.mark.parametrize("gate", ["none", "fixed", "scalar", "channel"])
@pytest.mark.parametrize("low_rank", ["none", "delta", "general"])
def test_gpu_emulated_kernels(low_rank, gate):
    # la-lower-to-gpu's kernels run by la-emulate-gpu: the adjoint recurrences
    # as the forward's task kernels (chunks of 8 over T = 21, so the last
    # is padded by kernels outside the tasks), the per-token products, head
    # sums, shifts and the gate gradient's reverse sum over tokens as kernels
    # of their own.
    _check(low_rank, gate, flags=["--target=gpu-emulator", "--chunk-size=8"])


def test_gpu_emulated_kernels_over_many_chunks():
    # la-lower-to-nvvm's default chunks (32) and value tiles (32): V = 64 in
    # two value tiles, five chunks with a padded last one.
    _check("delta", "channel", B=1, T=150, H=2, HV=4, K=16, V=64,
           flags=["--target=gpu-emulator"])
