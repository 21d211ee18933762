"""la.serving.decode_with_snapshots: the state after every draft token in
one kernel call, against la.attention run on each prefix and against the
fp64 reference's final states."""

import numpy as np
import pytest

import la
from la import serving
from la import testing as lt


@pytest.mark.parametrize("variant", ["gla", "gated_deltanet", "rwkv7"])
def test_snapshots_are_the_prefixes_final_states(variant):
    B, T, H, HV, K, V = 2, 5, 2, 4, 8, 6
    inputs = lt.make_inputs(variant, B, T, H, K, V, HV=HV, seed=3, with_initial_state=True,
                            gate_scale=1 / 4)
    tokens = {n: inputs[n] for n in ("g", "beta", "a", "b") if n in inputs}
    o, snapshots = serving.decode_with_snapshots(
        variant, inputs["q"], inputs["k"], inputs["v"], **tokens,
        initial_state=inputs["initial_state"], chunk_size=16)
    assert o.shape == (B, T, HV, V) and snapshots.shape == (B, T, HV, K, V)
    o_ref, _ = lt.reference_for(variant, inputs)
    assert lt.rel_rms(o_ref, o) <= 1e-5
    for t in range(T):
        prefix = {n: (x[:, :t + 1] if n in ("q", "k", "v", "g", "beta", "a", "b") else x)
                  for n, x in inputs.items()}
        _, s_ref = lt.reference_for(variant, prefix)
        assert lt.rel_rms(s_ref, snapshots[:, t]) <= 1e-5, t


def test_snapshots_with_torch_and_errors():
    torch = pytest.importorskip("torch")
    inputs = lt.make_inputs("kda", 1, 3, 1, 4, 4, seed=4, with_initial_state=True)
    t = {n: torch.tensor(x) for n, x in inputs.items()}
    o, snapshots = serving.decode_with_snapshots("kda", t["q"], t["k"], t["v"], t["g"],
                                                 t["beta"], initial_state=t["initial_state"])
    assert isinstance(snapshots, torch.Tensor) and snapshots.shape == (1, 3, 1, 4, 4)
    o_plain, s_plain = la.kda(t["q"], t["k"], t["v"], t["g"], t["beta"],
                              initial_state=t["initial_state"], output_final_state=True)
    assert lt.rel_rms(o_plain.numpy(), o.numpy()) <= 1e-6
    assert lt.rel_rms(s_plain.numpy(), snapshots[:, -1].numpy()) <= 1e-6
    with pytest.raises(ValueError, match="needs initial_state"):
        serving.decode_with_snapshots("kda", t["q"], t["k"], t["v"], t["g"], t["beta"],
                                      initial_state=None)
    with pytest.raises(ValueError, match="takes no cu_seqlens"):
        serving.decode_with_snapshots("kda", t["q"], t["k"], t["v"], t["g"], t["beta"],
                                      initial_state=t["initial_state"], cu_seqlens=[0, 3])


def test_snapshots_kernel_and_packed_prefixes_agree():
    """One kernel (a checkpoint after every token) without gradients; the
    packed prefixes with them (torch autograd) or with normalize: the same
    snapshots."""
    torch = pytest.importorskip("torch")
    B, T, H, K, V = 2, 4, 2, 8, 8
    inputs = lt.make_inputs("gated_deltanet", B, T, H, K, V, seed=6, with_initial_state=True,
                            gate_scale=1 / 4)
    names = ("q", "k", "v", "g", "beta")
    results = []
    for grad in (False, True):
        t = [torch.tensor(inputs[n], requires_grad=grad) for n in names]
        s0 = torch.tensor(inputs["initial_state"], requires_grad=grad)
        results.append(serving.decode_with_snapshots("gated_deltanet", *t, initial_state=s0,
                                                     chunk_size=16))
    (o_kernel, snap_kernel), (o_packed, snap_packed) = results
    assert snap_kernel.grad_fn is None and snap_packed.grad_fn is not None
    assert lt.rel_rms(o_packed.detach().numpy(), o_kernel.numpy()) <= 1e-5
    assert lt.rel_rms(snap_packed.detach().numpy(), snap_kernel.numpy()) <= 1e-5
    snap_packed.sum().backward()


def test_snapshots_with_normalize():
    """normalize: the packed prefixes (the normaliser's sum is not in the
    state, so the kernel's checkpoints cannot carry it)."""
    B, T, H, K, V = 1, 4, 1, 4, 4
    inputs = lt.make_inputs("linear", B, T, H, K, V, seed=7, with_initial_state=True)
    o, snapshots = serving.decode_with_snapshots(
        "linear", inputs["q"], inputs["k"], inputs["v"],
        initial_state=inputs["initial_state"], normalize=True)
    o_ref, _ = lt.reference_for("linear", inputs, normalizer=True)
    assert lt.rel_rms(o_ref, o) <= 1e-5
    _, s_ref = lt.reference_for("linear", inputs)
    assert lt.rel_rms(s_ref, snapshots[:, -1]) <= 1e-5


def test_state_pool_steps_continue_each_sequence():
    """Three sequences in a pool of five, decoded two tokens at a time in a
    shuffled order: each equals its sequence run whole; entries no row
    names are left untouched."""
    rng = np.random.default_rng(6)
    P, H, K, V, T = 5, 2, 8, 4, 4
    seqs = {p: lt.make_inputs("gated_deltanet", 1, T, H, K, V, seed=10 + p,
                              with_initial_state=True) for p in (0, 2, 3)}
    pool = (0.1 * rng.standard_normal((P, H, K, V))).astype(np.float32)
    for p, x in seqs.items():
        pool[p] = x["initial_state"][0]
    untouched = pool[[1, 4]].copy()
    for start in (0, 2):
        order = [3, 0, 2] if start == 0 else [2, 3, 0]
        batch = {n: np.concatenate([seqs[p][n][:, start:start + 2] for p in order])
                 for n in ("q", "k", "v", "g", "beta")}
        serving.step_state_pool("gated_deltanet", pool, np.array(order), batch["q"],
                                batch["k"], batch["v"], batch["g"], batch["beta"])
    for p, x in seqs.items():
        _, s_ref = lt.reference_for("gated_deltanet", x)
        assert lt.rel_rms(s_ref[0], pool[p]) <= 1e-5, p
    np.testing.assert_array_equal(pool[[1, 4]], untouched)


def test_state_pool_errors():
    x = lt.make_inputs("mamba2", 2, 1, 1, 4, 4, seed=7)
    pool = np.zeros((3, 1, 4, 4), np.float32)
    call = lambda idx: serving.step_state_pool("mamba2", pool, idx, x["q"], x["k"],  # noqa
                                               x["v"], x["g"])
    with pytest.raises(ValueError, match="distinct"):
        call(np.array([1, 1]))
    with pytest.raises(ValueError, match=r"in \[0, 3\)"):
        call(np.array([0, 3]))
    with pytest.raises(ValueError, match="one per row"):
        call(np.array([0]))
    with pytest.raises(ValueError, match="takes no initial_state"):
        serving.step_state_pool("mamba2", pool, np.array([0, 1]), x["q"], x["k"], x["v"],
                                x["g"], initial_state=pool[:2])
