"""la.serving.prefill_with_checkpoints: the state after every ``interval``
tokens (prefix caching), against the fp64 reference run on each prefix
alone (``la.testing.reference_for``: the checkpoint after ``(j + 1) *
interval`` tokens is the reference's final state of that prefix), and its
output and final state against one la call over the whole prompt."""

import numpy as np
import pytest

import la
from la import serving
from la.testing import make_inputs, reference_for, rel_rms

_TOKEN_KEYS = ("g", "beta", "erase", "write", "a", "b")


def _prefix(inputs, end, start=0):
    return {name: (x[:, start:end] if name in ("q", "k", "v") + _TOKEN_KEYS else x)
            for name, x in inputs.items()}


def _la_kwargs(inputs):
    return {name: inputs[name] for name in _TOKEN_KEYS + ("log_decay",) if name in inputs}


@pytest.mark.parametrize("variant", ["gated_deltanet", "gla", "mamba2", "kda",
                                     "gated_deltanet2", "rwkv7"])
@pytest.mark.parametrize("T,interval", [(37, 8), (32, 16), (5, 8), (20, 1)],
                         ids=["partial-last", "exact", "shorter-than-interval", "every-token"])
def test_checkpoints_against_each_prefix(variant, T, interval):
    B, H, K, V = 2, 2, 8, 6
    inputs = make_inputs(variant, B, T, H, K, V, seed=3)
    s0 = np.random.default_rng(4).standard_normal((B, H, K, V)).astype(np.float32)
    result = serving.prefill_with_checkpoints(
        variant, inputs["q"], inputs["k"], inputs["v"], interval=interval, initial_state=s0,
        chunk_size=4, **_la_kwargs(inputs))
    assert result.checkpoint_offsets is None
    assert result.checkpoints.shape == (B, T // interval, H, K, V)
    for j in range(T // interval):
        _, s_ref = reference_for(variant, _prefix(inputs, (j + 1) * interval), initial_state=s0)
        assert rel_rms(s_ref, result.checkpoints[:, j]) <= 1e-5, j
    o_ref, s_ref = reference_for(variant, inputs, initial_state=s0)
    assert rel_rms(o_ref, result.o) <= 1e-5
    assert rel_rms(s_ref, result.final_state) <= 1e-5
    # the same numbers as one call (chunked the same way within each call)
    o_one, s_one = la.attention(variant, inputs["q"], inputs["k"], inputs["v"],
                                initial_state=s0, output_final_state=True, chunk_size=4,
                                **_la_kwargs(inputs))
    assert rel_rms(o_one, result.o) <= 1e-5 and rel_rms(s_one, result.final_state) <= 1e-5


@pytest.mark.parametrize("variant", ["gated_deltanet", "gla"])
def test_packed_sequences(variant):
    """Each sequence's checkpoints counted from its own first token: an
    empty sequence, one shorter than the interval, one of exactly two
    intervals, one with a partial last interval; initial states per
    sequence."""
    H, K, V, interval = 2, 8, 6, 6
    cu = np.array([0, 0, 4, 16, 31], np.int32)
    T = int(cu[-1])
    N = cu.size - 1
    inputs = make_inputs(variant, 1, T, H, K, V, seed=5)
    s0 = np.random.default_rng(6).standard_normal((N, H, K, V)).astype(np.float32)
    result = serving.prefill_with_checkpoints(
        variant, inputs["q"], inputs["k"], inputs["v"], interval=interval, initial_state=s0,
        cu_seqlens=cu, chunk_size=4, **_la_kwargs(inputs))
    lengths = np.diff(cu)
    assert result.checkpoint_offsets.tolist() == [0, 0, 0, 2, 4]
    assert result.checkpoints.shape == (4, H, K, V)
    o_ref, s_ref = reference_for(variant, inputs, initial_state=s0, cu_seqlens=cu)
    assert rel_rms(o_ref, result.o) <= 1e-5
    assert rel_rms(s_ref, result.final_state) <= 1e-5
    for i in range(N):
        for j in range(lengths[i] // interval):
            seq = _prefix(inputs, cu[i] + (j + 1) * interval, cu[i])
            _, s_ref = reference_for(variant, seq, initial_state=s0[i:i + 1])
            got = result.checkpoints[result.checkpoint_offsets[i] + j]
            assert rel_rms(s_ref[0], got) <= 1e-5, (i, j)


def test_gradients_through_every_call():
    """torch: autograd through the calls gives one call's gradients."""
    torch = pytest.importorskip("torch")
    B, T, H, K, V = 1, 23, 2, 8, 4
    inputs = make_inputs("gated_deltanet", B, T, H, K, V, seed=7)
    s0 = np.random.default_rng(8).standard_normal((B, H, K, V)).astype(np.float32)
    names = ("q", "k", "v", "g", "beta")
    do = torch.tensor(np.random.default_rng(9).standard_normal((B, T, H, V)),
                      dtype=torch.float32)
    grads = []
    for split in (True, False):
        leaves = {n: torch.tensor(inputs[n], requires_grad=True) for n in names}
        state = torch.tensor(s0, requires_grad=True)
        if split:
            result = serving.prefill_with_checkpoints(
                "gated_deltanet", leaves["q"], leaves["k"], leaves["v"], leaves["g"],
                leaves["beta"], interval=5, initial_state=state, chunk_size=4)
            o, final = result.o, result.final_state
            # a checkpoint's cotangent reaches the calls before it
            loss = (o * do).sum() + result.checkpoints[:, 1].sum() + final.sum()
        else:
            o, final = la.attention("gated_deltanet", leaves["q"], leaves["k"], leaves["v"],
                                    leaves["g"], leaves["beta"], initial_state=state,
                                    output_final_state=True, chunk_size=4)
            loss = (o * do).sum() + final.sum()
            # checkpoint 1 (after 10 tokens): the state of the first 10 tokens
            _, mid = la.attention("gated_deltanet", leaves["q"][:, :10], leaves["k"][:, :10],
                                  leaves["v"][:, :10], leaves["g"][:, :10],
                                  leaves["beta"][:, :10], initial_state=state,
                                  output_final_state=True, chunk_size=4)
            loss = loss + mid.sum()
        loss.backward()
        grads.append({n: leaves[n].grad.numpy().copy() for n in names} |
                     {"initial_state": state.grad.numpy().copy()})
    for name in grads[0]:
        assert rel_rms(grads[1][name], grads[0][name]) <= 1e-5, name


def test_no_complete_interval_gives_no_checkpoint():
    inputs = make_inputs("gla", 1, 7, 1, 4, 4, seed=10)
    result = serving.prefill_with_checkpoints("gla", inputs["q"], inputs["k"], inputs["v"],
                                              inputs["g"], interval=8)
    assert result.checkpoints.shape == (1, 0, 1, 4, 4)


def test_errors():
    inputs = make_inputs("gla", 1, 7, 1, 4, 4, seed=11)
    q, k, v, g = inputs["q"], inputs["k"], inputs["v"], inputs["g"]
    for bad in (0, -3, 2.5, True, None):
        with pytest.raises(ValueError, match="interval must be a positive number"):
            serving.prefill_with_checkpoints("gla", q, k, v, g, interval=bad)
    with pytest.raises(ValueError, match="takes no output_final_state"):
        serving.prefill_with_checkpoints("gla", q, k, v, g, interval=2, output_final_state=True)
    with pytest.raises(ValueError, match="normalize=True"):
        serving.prefill_with_checkpoints("linear", q, k, v, interval=2, normalize=True)
    with pytest.raises(ValueError, match="reverse=True"):
        serving.prefill_with_checkpoints("gla", q, k, v, g, interval=2, reverse=True)
    with pytest.raises(ValueError, match="cu_seqlens must rise from 0 to T = 7"):
        serving.prefill_with_checkpoints("gla", q, k, v, g, interval=2, cu_seqlens=[0, 3, 6])
    q2, k2, v2, g2 = (np.concatenate([x, x]) for x in (q, k, v, g))
    with pytest.raises(ValueError, match="cu_seqlens needs B = 1"):
        serving.prefill_with_checkpoints("gla", q2, k2, v2, g2, interval=2, cu_seqlens=[0, 7])


def test_packed_gradients_through_every_call():
    """torch, packed sequences: the calls' gradients are one packed call's
    (the states carried by index_copy, the outputs put back in order)."""
    torch = pytest.importorskip("torch")
    cu = np.array([0, 0, 4, 16, 31], np.int32)
    inputs = make_inputs("gated_deltanet", 1, 31, 2, 8, 6, seed=12)
    s0 = np.random.default_rng(13).standard_normal((4, 2, 8, 6)).astype(np.float32)
    do = torch.tensor(np.random.default_rng(14).standard_normal((1, 31, 2, 6)),
                      dtype=torch.float32)
    names = ("q", "k", "v", "g", "beta")
    grads = []
    for split in (True, False):
        leaves = {n: torch.tensor(inputs[n], requires_grad=True) for n in names}
        state = torch.tensor(s0, requires_grad=True)
        args = [leaves[n] for n in names]
        if split:
            result = serving.prefill_with_checkpoints(
                "gated_deltanet", *args, interval=6, initial_state=state,
                cu_seqlens=torch.tensor(cu), chunk_size=4)
            o, final = result.o, result.final_state
        else:
            o, final = la.attention("gated_deltanet", *args, initial_state=state,
                                    cu_seqlens=torch.tensor(cu), output_final_state=True,
                                    chunk_size=4)
        ((o * do).sum() + final.sum()).backward()
        grads.append({n: leaves[n].grad.numpy().copy() for n in names} |
                     {"initial_state": state.grad.numpy().copy()})
    for name in grads[0]:
        assert rel_rms(grads[1][name], grads[0][name]) <= 1e-5, name


# --------------------------------------------------------------------------
# One kernel: la.attention's checkpoint_every (the NumPy path and torch
# without gradients), against the fp64 reference on each prefix
# --------------------------------------------------------------------------

def _reference_checkpoints(variant, inputs, interval, s0):
    T = np.shape(inputs["q"])[1]
    return np.stack([reference_for(variant, _prefix(inputs, (j + 1) * interval),
                                   initial_state=s0)[1] for j in range(T // interval)], 1)


@pytest.mark.parametrize("variant", ["gated_deltanet", "gla", "kda", "retention",
                                     "deltanet", "linear"])
@pytest.mark.parametrize("options", [{}, {"num_threads": 2}, {"sequential": True},
                                     {"chunk_size": 64}, {"qk_l2norm": True}],
                         ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default")
def test_kernel_checkpoints(variant, options):
    """Grouped value heads (HV = 2H), K != V, B = 3, T = 45 (a partial last
    interval and chunk), an interval that is not a multiple of the chunk."""
    B, T, H, HV, K, V, interval = 3, 45, 2, 4, 8, 6, 12
    inputs = make_inputs(variant, B, T, H, K, V, HV=HV, seed=21, gate_scale=1 / 8)
    s0 = np.random.default_rng(22).standard_normal((B, HV, K, V)).astype(np.float32)
    result = serving.prefill_with_checkpoints(
        variant, inputs["q"], inputs["k"], inputs["v"], interval=interval, initial_state=s0,
        **_la_kwargs(inputs), **{"chunk_size": 8, **options})
    attrs = {"qk_l2norm": True} if options.get("qk_l2norm") else {}
    assert result.checkpoints.shape == (B, 3, HV, K, V)
    expected = np.stack([reference_for(variant, _prefix(inputs, (j + 1) * interval),
                                       initial_state=s0, **attrs)[1] for j in range(3)], 1)
    assert rel_rms(expected, result.checkpoints) <= 1e-5
    o_ref, s_ref = reference_for(variant, inputs, initial_state=s0, **attrs)
    assert rel_rms(o_ref, result.o) <= 1e-5
    assert rel_rms(s_ref, result.final_state) <= 1e-5


def test_kernel_checkpoints_bf16():
    B, T, H, K, V, interval = 2, 33, 2, 16, 16, 8
    inputs = make_inputs("gated_deltanet", B, T, H, K, V, seed=23, gate_scale=1 / 8)
    result = serving.prefill_with_checkpoints(
        "gated_deltanet", inputs["q"], inputs["k"], inputs["v"], inputs["g"], inputs["beta"],
        interval=interval, dtype="bf16", chunk_size=16)
    rounded = dict(inputs, **{n: la.runner.round_to_bf16(inputs[n]) for n in ("q", "k", "v")})
    expected = _reference_checkpoints("gated_deltanet", rounded, interval, None)
    assert result.checkpoints.dtype == np.float32
    assert rel_rms(expected, result.checkpoints) <= 1e-2


def test_kernel_and_composition_agree_in_torch():
    """torch without gradients takes the kernel, with them the calls: the
    same numbers, and the calls' result is differentiable."""
    torch = pytest.importorskip("torch")
    B, T, H, K, V, interval = 2, 30, 2, 8, 8, 7
    inputs = make_inputs("kda", B, T, H, K, V, seed=24, gate_scale=1 / 8)
    names = ("q", "k", "v", "g", "beta")
    results = []
    for grad in (False, True):
        leaves = [torch.tensor(inputs[n], requires_grad=grad) for n in names]
        results.append(serving.prefill_with_checkpoints("kda", *leaves, interval=interval,
                                                        chunk_size=8))
    kernel, calls = results
    assert kernel.checkpoints.grad_fn is None and calls.checkpoints.grad_fn is not None
    for field in ("o", "final_state", "checkpoints"):
        assert rel_rms(getattr(calls, field).detach().numpy(),
                       getattr(kernel, field).numpy()) <= 1e-5, field
    calls.checkpoints.sum().backward()


@pytest.mark.parametrize("kwargs,message", [
    ({"normalize": True}, "does not take normalize"),
    ({"reverse": True}, "does not take reverse"),
    ({"checkpoint_every": 0}, "checkpoint_every must be a positive number of tokens"),
    ({"checkpoint_every": True}, "checkpoint_every must be a positive number of tokens"),
    ({"checkpoint_every": 2**63}, r"at most 2147483647, got 9223372036854775808"),
])
def test_kernel_refusals(kwargs, message):
    inputs = make_inputs("gla", 1, 7, 1, 4, 4, seed=25)
    options = {"checkpoint_every": 2, **kwargs}
    with pytest.raises(ValueError, match=message):
        la.ops._prepare("gla", inputs["q"], inputs["k"], inputs["v"], inputs["g"], **options)


@pytest.mark.parametrize("schedule", [{}, {"fuse": "materialized"}, {"sequential": True},
                                      {"gpu_schedule": True}, {"target": "gpu-emulator"},
                                      {"target": "gpu-emulator", "chunk_parallel": True}],
                         ids=["fused", "materialized", "token-loops", "gpu-schedule", "gpu",
                              "gpu-chunk-parallel"])
def test_every_schedule_through_la_run(schedule):
    """The op's checkpoints through la-run's static pipelines; on the GPU
    (the emulator) a host loop over the segments launches each segment's
    kernels."""
    from la import runner
    B, T, H, K, V, interval = 2, 37, 2, 8, 6, 8
    inputs = make_inputs("gated_deltanet", B, T, H, K, V, seed=26, gate_scale=1 / 8)
    inputs["initial_state"] = np.random.default_rng(27).standard_normal(
        (B, H, K, V)).astype(np.float32)
    o, s, checkpoints, _ = runner.run_attention("gated_deltanet", inputs, chunk_size=4,
                                                checkpoint_every=interval, **schedule)
    tokens = {n: x for n, x in inputs.items() if n != "initial_state"}
    expected = _reference_checkpoints("gated_deltanet", tokens, interval,
                                      inputs["initial_state"])
    assert checkpoints.shape == (B, 4, H, K, V)
    assert rel_rms(expected, checkpoints) <= 1e-5
    o_ref, s_ref = reference_for("gated_deltanet", tokens,
                                 initial_state=inputs["initial_state"])
    assert rel_rms(o_ref, o) <= 1e-5 and rel_rms(s_ref, s) <= 1e-5


@pytest.mark.parametrize("options", [{}, {"num_threads": 2}, {"sequential": True}],
                         ids=["default", "two-threads", "token-loops"])
def test_packed_kernel_against_calls(options):
    """Packed sequences in one kernel (without gradients) against the calls
    per interval (torch with gradients): the same checkpoints, offsets, o and
    final states; an empty sequence, one shorter than the interval, one of
    exactly two, one with a partial last interval."""
    torch = pytest.importorskip("torch")
    H, K, V, interval = 2, 8, 6, 6
    cu = np.array([0, 0, 4, 16, 31], np.int32)
    inputs = make_inputs("kda", 1, 31, H, K, V, seed=30, gate_scale=1 / 8)
    s0 = np.random.default_rng(31).standard_normal((4, H, K, V)).astype(np.float32)
    names = ("q", "k", "v", "g", "beta")
    results = []
    for grad in (False, True):
        leaves = [torch.tensor(inputs[n], requires_grad=grad) for n in names]
        results.append(serving.prefill_with_checkpoints(
            "kda", *leaves, interval=interval, initial_state=torch.tensor(s0),
            cu_seqlens=torch.tensor(cu), chunk_size=4, **options))
    kernel, calls = results
    assert kernel.checkpoints.grad_fn is None
    assert kernel.checkpoint_offsets.tolist() == calls.checkpoint_offsets.tolist() == [0, 0, 0,
                                                                                        2, 4]
    for field in ("o", "final_state", "checkpoints"):
        assert rel_rms(getattr(calls, field).detach().numpy(),
                       getattr(kernel, field).numpy()) <= 1e-5, field


@pytest.mark.parametrize("packed", [False, True], ids=["batched", "packed"])
def test_kernel_leaves_its_inputs_alone(packed):
    """The kernel's loops carry their tensors in place; the caller's arrays
    (the initial states above all) must come back unchanged."""
    H, K, V, interval = 2, 8, 8, 5
    B, T = (1, 23) if packed else (2, 23)
    inputs = make_inputs("gated_deltanet", B, T, H, K, V, seed=32, gate_scale=1 / 8)
    N = 3 if packed else B
    s0 = np.random.default_rng(33).standard_normal((N, H, K, V)).astype(np.float32)
    cu = np.array([0, 9, 9, 23], np.int32) if packed else None
    before = {name: x.copy() for name, x in inputs.items()}
    s0_before, cu_before = s0.copy(), None if cu is None else cu.copy()
    serving.prefill_with_checkpoints("gated_deltanet", inputs["q"], inputs["k"], inputs["v"],
                                     inputs["g"], inputs["beta"], interval=interval,
                                     initial_state=s0, cu_seqlens=cu, chunk_size=4)
    for name, x in inputs.items():
        np.testing.assert_array_equal(x, before[name], err_msg=name)
    np.testing.assert_array_equal(s0, s0_before)
    if cu is not None:
        np.testing.assert_array_equal(cu, cu_before)


@pytest.mark.parametrize("schedule", [{}, {"fuse": "materialized"}, {"sequential": True},
                                      {"gpu_schedule": True}, {"target": "gpu-emulator"}],
                         ids=["fused", "materialized", "token-loops", "gpu-schedule", "gpu"])
def test_packed_every_schedule_through_la_run(schedule):
    """Packed sequences' checkpoints ([1, C, HV, K, V]) through la-run's
    static pipelines, against the fp64 reference on each sequence's
    prefixes; on the GPU (the emulator) the host copies cu_seqlens once to
    bound its loops."""
    from la import runner
    H, K, V, interval = 2, 8, 6, 6
    cu = np.array([0, 0, 4, 16, 31], np.int32)
    inputs = make_inputs("gated_deltanet", 1, 31, H, K, V, seed=34, gate_scale=1 / 8)
    s0 = np.random.default_rng(35).standard_normal((4, H, K, V)).astype(np.float32)
    o, s, checkpoints, _ = runner.run_attention(
        "gated_deltanet", dict(inputs, initial_state=s0, cu_seqlens=cu), chunk_size=4,
        checkpoint_every=interval, **schedule)
    expected = []
    for i in range(4):
        for j in range((cu[i + 1] - cu[i]) // interval):
            _, s_ref = reference_for("gated_deltanet",
                                     _prefix(inputs, cu[i] + (j + 1) * interval, cu[i]),
                                     initial_state=s0[i:i + 1])
            expected.append(s_ref[0])
    assert checkpoints.shape == (1, 4, H, K, V)
    assert rel_rms(np.stack(expected), checkpoints[0]) <= 1e-5
    o_ref, s_ref = reference_for("gated_deltanet", inputs, initial_state=s0, cu_seqlens=cu)
    assert rel_rms(o_ref, o) <= 1e-5 and rel_rms(s_ref, s) <= 1e-5


def test_packed_checkpoints_chunk_parallel_is_a_clear_error():
    """Under the GPU's chunk-parallel schedule a packed sequence's last,
    partial segment has a run-time length, which that schedule's ops do not
    take (the fused schedule, the default, runs it)."""
    from la import runner
    cu = np.array([0, 4, 11], np.int32)
    inputs = make_inputs("gla", 1, 11, 1, 4, 4, seed=36)
    with pytest.raises(runner.LaRunError, match="needs static shapes for the "
                                                "chunk-parallel GPU schedule"):
        runner.run_attention("gla", dict(inputs, cu_seqlens=cu), target="gpu-emulator",
                             chunk_size=4, checkpoint_every=4, chunk_parallel=True)


def test_attention_returns_the_checkpoints():
    """la.attention(..., checkpoint_every=n): the op's checkpoints directly,
    the same numbers prefill_with_checkpoints returns."""
    inputs = make_inputs("gated_deltanet", 2, 21, 2, 8, 8, seed=40, gate_scale=1 / 8)
    args = [inputs[n] for n in ("q", "k", "v", "g", "beta")]
    o, state, checkpoints = la.attention("gated_deltanet", *args, output_final_state=True,
                                         checkpoint_every=5, chunk_size=4)
    result = serving.prefill_with_checkpoints("gated_deltanet", *args, interval=5,
                                              chunk_size=4)
    assert checkpoints.shape == (2, 4, 2, 8, 8)
    np.testing.assert_array_equal(checkpoints, result.checkpoints)
    np.testing.assert_array_equal(o, result.o)
    np.testing.assert_array_equal(state, result.final_state)
    _, no_state, _ = la.attention("gated_deltanet", *args, checkpoint_every=5, chunk_size=4)
    assert no_state is None
