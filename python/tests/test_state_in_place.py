"""la.serving.attention_in_place: the kernel overwrites the caller's state
with the final state (la-in-place-arguments). Checked against the fp64
reference and, bit for bit, against la.attention's separate final state;
the pool steps that use it; and the inputs it refuses."""

import numpy as np
import pytest

import la
from la import serving
from la import testing as lt

CHUNKED = ["linear", "retention", "mamba2", "gla", "deltanet", "gated_deltanet", "kda",
           "gated_deltanet2", "rwkv7", "dplr"]
TOKENS = ("g", "beta", "erase", "write", "a", "b")


def _run_both(variant, inputs, **kwargs):
    """(o, state) of la.attention with a separate final state, and of
    attention_in_place on a copy of the initial state (which it returns)."""
    tokens = {n: inputs[n] for n in TOKENS if n in inputs}
    if "log_decay" in inputs:
        kwargs["log_decay"] = inputs["log_decay"]
    o, s = la.attention(variant, inputs["q"], inputs["k"], inputs["v"], **tokens,
                        initial_state=inputs["initial_state"], output_final_state=True,
                        **kwargs)
    state = inputs["initial_state"].copy()
    o_in_place = serving.attention_in_place(variant, state, inputs["q"], inputs["k"],
                                            inputs["v"], **tokens, **kwargs)
    return (o, s), (o_in_place, state)


@pytest.mark.parametrize("variant", CHUNKED)
@pytest.mark.parametrize("T", [1, 37])
def test_in_place_matches_reference_and_separate_state(variant, T):
    """Decode (T = 1) and a T that is not a multiple of the chunk, B = 2,
    grouped value heads, K != V."""
    inputs = lt.make_inputs(variant, 2, T, 2, 8, 12, HV=4, seed=T, with_initial_state=True,
                            gate_scale=1 / 8)
    (o, s), (o_ip, s_ip) = _run_both(variant, inputs, chunk_size=16)
    o_ref, s_ref = lt.reference_for(variant, inputs)
    assert lt.rel_rms(o_ref, o_ip) <= 1e-5
    assert lt.rel_rms(s_ref, s_ip) <= 1e-5
    np.testing.assert_array_equal(o_ip, o)
    np.testing.assert_array_equal(s_ip, s)


@pytest.mark.parametrize("options", [{"num_threads": 2}, {"dtype": "bf16"}, {"reverse": True},
                                     {"qk_l2norm": True}, {"chunk_size": 64}],
                         ids=lambda o: ",".join(o))
def test_in_place_options(options):
    variant = "gated_deltanet" if "qk_l2norm" in options else "gla"
    inputs = lt.make_inputs(variant, 3, 21, 2, 8, 8, seed=5, with_initial_state=True,
                            gate_scale=1 / 8)
    (o, s), (o_ip, s_ip) = _run_both(variant, inputs, **options)
    np.testing.assert_array_equal(np.asarray(o_ip, np.float32), np.asarray(o, np.float32))
    np.testing.assert_array_equal(s_ip, s)


def test_in_place_grouped_query_heads():
    """q with HQ = 2 H query heads over H states (ONNX's grouping)."""
    rng = np.random.default_rng(8)
    inputs = lt.make_inputs("gated_deltanet", 2, 19, 2, 8, 8, seed=8, with_initial_state=True,
                            gate_scale=1 / 8)
    inputs["q"] = rng.standard_normal((2, 19, 4, 8)).astype(np.float32)
    (o, s), (o_ip, s_ip) = _run_both("gated_deltanet", inputs, chunk_size=16)
    assert o_ip.shape == (2, 19, 4, 8)
    np.testing.assert_array_equal(o_ip, o)
    np.testing.assert_array_equal(s_ip, s)


def test_decode_steps_in_place_equal_one_call():
    """Eight decode steps on one state buffer equal one call over the eight
    tokens (and the reference)."""
    inputs = lt.make_inputs("kda", 2, 8, 2, 8, 8, seed=9, with_initial_state=True,
                            gate_scale=1 / 8)
    state = inputs["initial_state"].copy()
    address = state.__array_interface__["data"][0]
    outputs = [serving.attention_in_place("kda", state, inputs["q"][:, t:t + 1],
                                          inputs["k"][:, t:t + 1], inputs["v"][:, t:t + 1],
                                          inputs["g"][:, t:t + 1], inputs["beta"][:, t:t + 1])
               for t in range(8)]
    assert state.__array_interface__["data"][0] == address
    o_ref, s_ref = lt.reference_for("kda", inputs)
    assert lt.rel_rms(o_ref, np.concatenate(outputs, 1)) <= 1e-5
    assert lt.rel_rms(s_ref, state) <= 1e-5


def test_in_place_torch():
    torch = pytest.importorskip("torch")
    inputs = lt.make_inputs("gla", 2, 3, 2, 8, 8, seed=10, with_initial_state=True)
    t = {n: torch.tensor(x) for n, x in inputs.items()}
    state = t["initial_state"].clone()
    pointer = state.data_ptr()
    o = serving.attention_in_place("gla", state, t["q"], t["k"], t["v"], t["g"])
    assert isinstance(o, torch.Tensor) and state.data_ptr() == pointer
    o_ref, s_ref = lt.reference_for("gla", inputs)
    assert lt.rel_rms(o_ref, o.numpy()) <= 1e-5
    assert lt.rel_rms(s_ref, state.numpy()) <= 1e-5
    q = t["q"].clone().requires_grad_()
    with pytest.raises(ValueError, match="no gradient"):
        serving.attention_in_place("gla", state, q, t["k"], t["v"], t["g"])
    with torch.no_grad():
        serving.attention_in_place("gla", state, q, t["k"], t["v"], t["g"])
    with pytest.raises(ValueError, match="contiguous float32 CPU tensor"):
        serving.attention_in_place("gla", state.double(), t["q"], t["k"], t["v"], t["g"])
    with pytest.raises(ValueError, match="not contiguous"):
        serving.attention_in_place("gla", state.transpose(2, 3), t["q"], t["k"], t["v"],
                                   t["g"])


def test_in_place_refusals():
    inputs = lt.make_inputs("gla", 2, 3, 2, 8, 8, seed=11, with_initial_state=True)
    args = (inputs["q"], inputs["k"], inputs["v"], inputs["g"])
    state = inputs["initial_state"].copy()
    keep = state.copy()
    for bad, match in [(state.astype(np.float64), "float32 NumPy array"),
                       (np.asfortranarray(state), "C-contiguous"),
                       (list(state), "list")]:
        with pytest.raises(ValueError, match=match):
            serving.attention_in_place("gla", bad, *args)
    frozen = state.copy()
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="writable: False"):
        serving.attention_in_place("gla", frozen, *args)
    with pytest.raises(ValueError, match="wrong|initial_state"):
        serving.attention_in_place("gla", state[:1], *args)
    for options, name in [({"sequential": True}, "sequential=True"),
                          ({"normalize": True}, "normalize=True")]:
        with pytest.raises(ValueError, match=f"not available with {name}"):
            serving.attention_in_place("gla", state, *args, **options)
    packed = lt.make_inputs("gla", 1, 6, 2, 8, 8, seed=12)
    with pytest.raises(ValueError, match="not available with cu_seqlens"):
        serving.attention_in_place("gla", state, packed["q"], packed["k"], packed["v"],
                                   packed["g"], cu_seqlens=np.array([0, 2, 6], np.int32))
    with pytest.raises(ValueError, match="takes no initial_state"):
        serving.attention_in_place("gla", state, *args, initial_state=state)
    # an input that overlaps the state (a view of the same memory)
    overlapping = state.reshape(-1)[:np.size(inputs["v"])].reshape(inputs["v"].shape)
    with pytest.raises(ValueError, match="v overlaps the state's memory"):
        serving.attention_in_place("gla", state, inputs["q"], inputs["k"], overlapping,
                                   inputs["g"])
    np.testing.assert_array_equal(state, keep)


def _pool_case(variant, indices, P, T, seed, **kwargs):
    """A pool of P states holding the inputs' initial states at ``indices``
    (the other rows random), and the fp64 reference of the sequences."""
    rng = np.random.default_rng(seed)
    inputs = lt.make_inputs(variant, len(indices), T, 2, 8, 12, HV=4, seed=seed,
                            with_initial_state=True, gate_scale=1 / 8, **kwargs)
    pool = (0.1 * rng.standard_normal((P, 4, 8, 12))).astype(np.float32)
    pool[indices] = inputs["initial_state"]
    return inputs, pool


@pytest.mark.parametrize("variant", CHUNKED)
@pytest.mark.parametrize("T", [1, 37])
def test_state_indices_kernel(variant, T):
    """attention_in_place with state_indices: the kernel's tasks read and
    write the pool rows the indices name (shuffled, not consecutive); each
    equals the fp64 reference and, bit for bit, la.attention's separate
    final state; the other rows are untouched."""
    indices = [5, 0, 3]
    inputs, pool = _pool_case(variant, indices, 7, T, seed=20 + T)
    others = [p for p in range(7) if p not in indices]
    untouched = pool[others].copy()
    (o, s), _ = _run_both(variant, inputs, chunk_size=16)
    tokens = {n: inputs[n] for n in TOKENS if n in inputs}
    if "log_decay" in inputs:
        tokens["log_decay"] = inputs["log_decay"]
    o_pool = serving.attention_in_place(variant, pool, inputs["q"], inputs["k"], inputs["v"],
                                        state_indices=np.array(indices), chunk_size=16,
                                        **tokens)
    o_ref, s_ref = lt.reference_for(variant, inputs)
    assert lt.rel_rms(o_ref, o_pool) <= 1e-5
    assert lt.rel_rms(s_ref, pool[indices]) <= 1e-5
    np.testing.assert_array_equal(o_pool, o)
    np.testing.assert_array_equal(pool[indices], s)
    np.testing.assert_array_equal(pool[others], untouched)


@pytest.mark.parametrize("options", [{"num_threads": 2}, {"dtype": "bf16"}, {"reverse": True},
                                     {"sequential": True}],
                         ids=lambda o: ",".join(o))
def test_state_indices_options(options):
    """Two threads, bf16 inputs, reverse; sequential (the token loops take
    the gathered rows and scatter them back) is refused like any in-place
    call."""
    indices = [2, 0]
    inputs, pool = _pool_case("gated_deltanet", indices, 3, 5, seed=30)
    args = (inputs["q"], inputs["k"], inputs["v"], inputs["g"], inputs["beta"])
    if options.get("sequential"):
        with pytest.raises(ValueError, match="not available with sequential=True"):
            serving.attention_in_place("gated_deltanet", pool, *args,
                                       state_indices=np.array(indices), **options)
        return
    o, s = la.attention("gated_deltanet", *args, initial_state=inputs["initial_state"],
                        output_final_state=True, **options)
    o_pool = serving.attention_in_place("gated_deltanet", pool, *args,
                                        state_indices=np.array(indices), **options)
    np.testing.assert_array_equal(o_pool, o)
    np.testing.assert_array_equal(pool[indices], s)
    assert pool[1].any()


def test_state_indices_refusals():
    """Indices the kernel would trust are checked first; nothing is written."""
    inputs, pool = _pool_case("gla", [1, 0], 3, 2, seed=31)
    args = (inputs["q"], inputs["k"], inputs["v"], inputs["g"])
    keep = pool.copy()
    for bad, match in [(np.array([1, 3]), r"in \[0, 3\)"), (np.array([-1, 0]), r"in \[0, 3\)"),
                       (np.array([1, 1]), "distinct"), (np.array([0]), "2 integers"),
                       (np.array([0.0, 1.0]), "2 integers"),
                       (np.array([[0, 1]]), "2 integers")]:
        with pytest.raises(ValueError, match=match):
            serving.attention_in_place("gla", pool, *args, state_indices=bad)
    with pytest.raises(ValueError, match=r"\[P, HV, K, V\]"):
        serving.attention_in_place("gla", np.ascontiguousarray(pool[:, :2]), *args,
                                   state_indices=np.array([1, 0]))
    with pytest.raises(ValueError, match="needs inplace_final_state"):
        la.ops._prepare("gla", *args, initial_state=pool, state_indices=np.array([1, 0]))
    np.testing.assert_array_equal(pool, keep)


def test_state_indices_torch():
    torch = pytest.importorskip("torch")
    inputs, pool = _pool_case("kda", [2, 4], 5, 1, seed=32)
    t = {n: torch.tensor(x) for n, x in inputs.items()}
    pool_t = torch.tensor(pool)
    o = serving.attention_in_place("kda", pool_t, t["q"], t["k"], t["v"], t["g"], t["beta"],
                                   state_indices=torch.tensor([2, 4]))
    o_ref, s_ref = lt.reference_for("kda", inputs)
    assert isinstance(o, torch.Tensor)
    assert lt.rel_rms(o_ref, o.numpy()) <= 1e-5
    assert lt.rel_rms(s_ref, pool_t[[2, 4]].numpy()) <= 1e-5
    np.testing.assert_array_equal(pool_t[[0, 1, 3]].numpy(), pool[[0, 1, 3]])


@pytest.mark.parametrize("indices", [[1, 2, 3], [3, 1, 2], [3, 0, 2, 9], [0, 2, 4, 6, 8]],
                         ids=["run", "shuffled-run", "three-runs", "scattered"])
def test_state_pool_in_place(indices):
    """A pool step updates the pool's entries in place (one call with the
    indices, in any order). Each equals the reference; the other entries
    are untouched."""
    rng = np.random.default_rng(13)
    inputs = lt.make_inputs("gated_deltanet", len(indices), 2, 2, 8, 8, seed=13,
                            with_initial_state=True, gate_scale=1 / 8)
    pool = (0.1 * rng.standard_normal((10, 2, 8, 8))).astype(np.float32)
    pool[indices] = inputs["initial_state"]
    others = [p for p in range(10) if p not in indices]
    untouched = pool[others].copy()
    o = serving.step_state_pool("gated_deltanet", pool, np.array(indices), inputs["q"],
                                inputs["k"], inputs["v"], inputs["g"], inputs["beta"])
    o_ref, s_ref = lt.reference_for("gated_deltanet", inputs)
    assert lt.rel_rms(o_ref, o) <= 1e-5
    assert lt.rel_rms(s_ref, pool[indices]) <= 1e-5
    np.testing.assert_array_equal(pool[others], untouched)


def test_state_pool_in_place_torch():
    torch = pytest.importorskip("torch")
    inputs = lt.make_inputs("mamba2", 2, 1, 2, 8, 8, seed=14, with_initial_state=True)
    t = {n: torch.tensor(x) for n, x in inputs.items()}
    pool = torch.zeros((4, 2, 8, 8))
    pool[[2, 1]] = t["initial_state"]
    o = serving.step_state_pool("mamba2", pool, torch.tensor([2, 1]), t["q"], t["k"], t["v"],
                                t["g"])
    o_ref, s_ref = lt.reference_for("mamba2", inputs)
    assert isinstance(o, torch.Tensor)
    assert lt.rel_rms(o_ref, o.numpy()) <= 1e-5
    assert lt.rel_rms(s_ref, pool[[2, 1]].numpy()) <= 1e-5
    assert not pool[0].any() and not pool[3].any()


def _pool_reference(variant, inputs, pool, indices):
    """The pool after the sequences ran (fp64), and their outputs."""
    o_ref, s_ref = lt.reference_for(variant, inputs)
    expected = pool.astype(np.float64)
    expected[indices] = s_ref
    return o_ref, expected


@pytest.mark.parametrize("schedule", [dict(), dict(fuse="materialized"), dict(sequential=True),
                                      dict(target="gpu-emulator"),
                                      dict(target="gpu-emulator", chunk_parallel=True)],
                         ids=["fused", "materialized", "token-loops", "gpu", "gpu-chunk-parallel"])
def test_state_indices_every_schedule(schedule):
    """la-run: the fused tasks slice the pool; la-chunk's program and the
    token loops gather and scatter its rows; the GPU kernels (on the
    emulator) take either. Every row of the returned pool is checked."""
    indices = [4, 1, 2]
    inputs, pool = _pool_case("gated_deltanet", indices, 6, 21, seed=33)
    run = dict(inputs, initial_state=pool, state_indices=np.array(indices))
    o, s, _ = la.runner.run_attention("gated_deltanet", run, chunk_size=16, **schedule)
    o_ref, expected = _pool_reference("gated_deltanet", inputs, pool, indices)
    assert lt.rel_rms(o_ref, o) <= 1e-5
    assert lt.rel_rms(expected, s) <= 1e-5
    np.testing.assert_array_equal(s[[0, 3, 5]], pool[[0, 3, 5]])


@pytest.mark.parametrize("schedule", [dict(), dict(target="gpu-emulator"),
                                      dict(target="gpu-emulator", chunk_parallel=True)],
                         ids=["fused", "gpu", "gpu-chunk-parallel"])
def test_state_indices_packed_sequences(schedule):
    """Packed sequences gather and scatter the pool rows around the split
    into one recurrence per sequence (the CPU); on the GPU (the emulator)
    each sequence's blocks read and write its pool row in place."""
    indices = [0, 3]
    inputs, pool = _pool_case("gla", indices, 4, 1, seed=34)
    packed = lt.make_inputs("gla", 1, 30, 2, 8, 12, HV=4, seed=34, gate_scale=1 / 8)
    cu = np.array([0, 13, 30], np.int32)
    run = dict(packed, initial_state=pool, state_indices=np.array(indices), cu_seqlens=cu)
    o, s, _ = la.runner.run_attention("gla", run, chunk_size=16, **schedule)
    o_ref, s_ref = lt.reference_for("gla", dict(packed, initial_state=pool[indices],
                                                cu_seqlens=cu))
    assert lt.rel_rms(o_ref, o) <= 1e-5
    assert lt.rel_rms(s_ref, s[indices]) <= 1e-5
    np.testing.assert_array_equal(s[[1, 2]], pool[[1, 2]])
