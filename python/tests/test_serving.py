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
