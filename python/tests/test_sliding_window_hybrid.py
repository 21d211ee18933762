"""la.sliding_window_hybrid (LoLCATs' hybrid as one la op) against the fp64
token-by-token reference (``la.reference.sliding_window_hybrid``, which
loops over tokens and never shifts or blocks anything): the Python
package's kernel on the forward tests' shapes (T shorter than a block, T
not a multiple of it, B > 1, K != V, windows of one token, shorter and
longer than a block and than T), bf16, two threads, torch, non-finite
inputs, bad arguments; and every la-run target (the CPU, token loops, the
GPU schedule on the CPU and the GPU kernels on the emulator)."""

import os
import subprocess
import sys

import numpy as np
import pytest

from la import family, ops, reference, runner
from la.testing import rel_rms


def _inputs(B, T, H, K, V, F, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    q, k = (scale * rng.standard_normal((B, T, H, K)).astype(np.float32) for _ in range(2))
    v = rng.standard_normal((B, T, H, V)).astype(np.float32)
    # Positive features (a learned map's softmax outputs).
    fq, fk = (rng.random((B, T, H, F)).astype(np.float32) for _ in range(2))
    return q, k, v, fq, fk


# (B, T, H, K, V, F, window): blocks are 16 to 64 tokens (the power of two
# >= window - 1), so these cover one block, a partial last block, a window
# reaching one and three blocks back, and a window past T.
SHAPES = [
    (1, 5, 1, 8, 4, 3, 3),       # T < block
    (2, 100, 2, 16, 8, 4, 20),   # B > 1, T % block != 0, one block back
    (1, 77, 2, 16, 32, 8, 1),    # a window of one token, K < V
    (1, 130, 1, 16, 8, 4, 64),   # window - 1 = 63: blocks of 64
    (1, 130, 1, 16, 8, 4, 65),   # window - 1 = 64: one full block back
    (2, 150, 2, 8, 8, 4, 100),   # window > block: two blocks back
    (1, 200, 1, 8, 8, 4, 130),   # three blocks back
    (1, 50, 1, 8, 8, 4, 200),    # window > T: softmax attention only
    (1, 64, 3, 32, 16, 64, 17),  # F > K
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_against_reference(shape):
    B, T, H, K, V, F, window = shape
    q, k, v, fq, fk = _inputs(B, T, H, K, V, F, seed=sum(shape))
    o = ops.sliding_window_hybrid(q, k, v, fq, fk, window)
    assert o.shape == (B, T, H, V) and o.dtype == np.float32
    assert rel_rms(reference.sliding_window_hybrid(q, k, v, fq, fk, window), o) <= 1e-5


def _per_sequence_reference(arrays, window, cu, scale=None):
    """The fp64 reference run on each sequence alone."""
    ref = np.zeros(arrays[2].shape, np.float64)
    for start, end in zip(cu[:-1], cu[1:]):
        if end > start:
            ref[:, start:end] = reference.sliding_window_hybrid(
                *(x[:, start:end] for x in arrays), window, scale=scale)
    return ref


@pytest.mark.parametrize("cu,window", [
    ((0, 5, 5, 72, 200), 20),    # an empty sequence, one shorter than the window
    ((0, 130, 131, 300), 64),    # a one-token sequence; blocks span sequences
    ((0, 1, 2, 3, 40), 3),       # one-token sequences
    ((0, 100, 230), 100),        # a window two blocks back
    ((0, 70), 1),                # one sequence, a window of one token
])
def test_packed_sequences(cu, window):
    """Neither the window nor the far part reaches across a sequence's first
    token: each sequence equals the reference run on it alone."""
    arrays = _inputs(1, cu[-1], 2, 16, 8, 4, seed=len(cu) + window)
    o = ops.sliding_window_hybrid(*arrays, window, cu_seqlens=np.array(cu))
    assert rel_rms(_per_sequence_reference(arrays, window, cu), o) <= 1e-5
    # la.family's function passes them on.
    np.testing.assert_array_equal(
        family.sliding_window_hybrid(*arrays, window, cu_seqlens=np.array(cu)), o)


def test_packed_sequences_keep_non_finite_values_in_their_sequence():
    q, k, v, fq, fk = _inputs(1, 120, 1, 8, 4, 4, seed=13)
    cu = np.array([0, 50, 120])
    clean = ops.sliding_window_hybrid(q, k, v, fq, fk, 10, cu_seqlens=cu)
    dirty = v.copy()
    dirty[0, 40, 0, 1] = np.nan
    o = ops.sliding_window_hybrid(q, k, dirty, fq, fk, 10, cu_seqlens=cu)
    assert np.isnan(o[0, 40:50, 0, 1]).all()
    np.testing.assert_allclose(o[0, :40], clean[0, :40], rtol=1e-6)
    np.testing.assert_allclose(o[0, 50:], clean[0, 50:], rtol=1e-6)  # the next sequence
    np.testing.assert_allclose(o[0, 40:50, 0, [0, 2, 3]], clean[0, 40:50, 0, [0, 2, 3]],
                               rtol=1e-6)


def test_scale_threads_and_the_family_function():
    q, k, v, fq, fk = _inputs(2, 90, 2, 16, 8, 6, seed=5)
    ref = reference.sliding_window_hybrid(q, k, v, fq, fk, 24, scale=0.7)
    one = ops.sliding_window_hybrid(q, k, v, fq, fk, 24, scale=0.7)
    two = ops.sliding_window_hybrid(q, k, v, fq, fk, 24, scale=0.7, num_threads=2)
    assert rel_rms(ref, one) <= 1e-5 and rel_rms(ref, two) <= 1e-5
    # la.family's function runs the op for NumPy arrays (float64 ones in f32).
    via_family = family.sliding_window_hybrid(*(x.astype(np.float64) for x in (q, k, v, fq, fk)),
                                              24, scale=0.7)
    assert via_family.dtype == np.float32
    np.testing.assert_array_equal(via_family, one)


def test_bf16_inputs():
    q, k, v, fq, fk = _inputs(1, 100, 2, 16, 16, 8, seed=6)
    o = ops.sliding_window_hybrid(q, k, v, fq, fk, 32, dtype="bf16")
    assert o.dtype == np.float32  # NumPy has no bf16: the output in float32
    rounded = [runner.round_to_bf16(x) for x in (q, k, v, fq, fk)]
    assert rel_rms(reference.sliding_window_hybrid(*rounded, 32), o) <= 1e-2


def test_large_scores_do_not_overflow():
    q, k, v, fq, fk = _inputs(1, 80, 1, 8, 4, 4, seed=7, scale=12.0)  # scores ~ +-300
    o = ops.sliding_window_hybrid(q, k, v, fq, fk, 5)
    assert np.all(np.isfinite(o))
    ref = reference.sliding_window_hybrid(q, k, v, fq, fk, 5)
    finite = np.isfinite(ref)
    assert rel_rms(ref[finite], o[finite]) <= 1e-4


def test_torch_without_gradients_runs_the_op():
    torch = pytest.importorskip("torch")
    q, k, v, fq, fk = _inputs(1, 40, 2, 8, 4, 4, seed=8)
    expected = ops.sliding_window_hybrid(q, k, v, fq, fk, 6)
    tensors = [torch.from_numpy(x) for x in (q, k, v, fq, fk)]
    out = family.sliding_window_hybrid(*tensors, 6)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    np.testing.assert_array_equal(out.numpy(), expected)
    with torch.no_grad():
        leaves = [t.clone().requires_grad_(True) for t in tensors]
        np.testing.assert_array_equal(family.sliding_window_hybrid(*leaves, 6).numpy(), expected)
    bf16 = ops.sliding_window_hybrid(*(t.bfloat16() for t in tensors), 6)
    assert bf16.dtype == torch.bfloat16
    assert rel_rms(expected, bf16.float().numpy()) <= 1e-2


def test_non_finite_values_poison_their_column_from_their_token_on():
    """A NaN or infinite value makes its column NaN from its token on (the
    window reads it, then the far part's state holds it); earlier tokens and
    other columns are the clean run's: nothing leaks backwards through the
    block products."""
    q, k, v, fq, fk = _inputs(2, 100, 2, 8, 6, 4, seed=9)
    clean = ops.sliding_window_hybrid(q, k, v, fq, fk, 20)
    for bad in (np.nan, np.inf, -np.inf):
        dirty = v.copy()
        dirty[1, 50, 0, 3] = bad
        o = ops.sliding_window_hybrid(q, k, v=dirty, feature_q=fq, feature_k=fk, window=20)
        assert np.all(np.isnan(o[1, 50:, 0, 3]))
        np.testing.assert_allclose(o[1, :50, 0, 3], clean[1, :50, 0, 3], rtol=1e-6)
        others = np.ones(o.shape, bool)
        others[1, 50:, 0, 3] = False
        np.testing.assert_allclose(o[others], clean[others], rtol=1e-5, atol=1e-6)


def test_non_finite_queries_and_keys():
    """A NaN query is its own row; a NaN key the rows whose window holds it,
    as in the reference."""
    q, k, v, fq, fk = _inputs(1, 100, 1, 8, 4, 4, seed=10)
    clean = ops.sliding_window_hybrid(q, k, v, fq, fk, 20)
    bad_q = q.copy()
    bad_q[0, 40, 0, 2] = np.nan
    o = ops.sliding_window_hybrid(bad_q, k, v, fq, fk, 20)
    rows = np.isnan(o[0, :, 0]).all(-1)
    assert rows[40] and rows.sum() == 1
    bad_k = k.copy()
    bad_k[0, 40, 0, 2] = np.nan
    o = ops.sliding_window_hybrid(q, bad_k, v, fq, fk, 20)
    ref = reference.sliding_window_hybrid(q, bad_k, v, fq, fk, 20)
    np.testing.assert_array_equal(np.isnan(o), np.isnan(ref))
    assert np.isnan(o[0, 40:60]).all() and not np.isnan(o[0, :40]).any()
    np.testing.assert_allclose(o[0, 60:], clean[0, 60:], rtol=1e-5, atol=1e-6)


def test_bad_arguments():
    q, k, v, fq, fk = _inputs(1, 10, 1, 8, 4, 4, seed=11)
    for window in (0, -3, True, 2.5, (1 << 20) + 1):
        with pytest.raises(ValueError, match="window must be an integer"):
            ops.sliding_window_hybrid(q, k, v, fq, fk, window)
    with pytest.raises(ValueError, match="window must be >= 1"):
        family.sliding_window_hybrid(q, k, v, fq, fk, 0)
    with pytest.raises(ValueError, match=r"k must have shape \[B, T, H, K\]"):
        ops.sliding_window_hybrid(q, k[:, :9], v, fq, fk, 3)
    with pytest.raises(ValueError, match=r"feature_k must have shape"):
        ops.sliding_window_hybrid(q, k, v, fq, fk[..., :3], 3)
    with pytest.raises(ValueError, match=r"v must have shape"):
        ops.sliding_window_hybrid(q, k, v[:, :, :, None], fq, fk, 3)
    with pytest.raises(ValueError, match="scale must be a finite"):
        ops.sliding_window_hybrid(q, k, v, fq, fk, 3, scale=float("inf"))
    with pytest.raises(TypeError, match="must have one dtype"):
        ops.sliding_window_hybrid(q, k, v, fq.astype(np.float16), fk, 3)
    with pytest.raises(TypeError, match="float32, float16 or bf16"):
        ops.sliding_window_hybrid(q.astype(np.float64), k, v, fq, fk, 3)
    with pytest.raises(ValueError, match="every dimension must be >= 1"):
        ops.sliding_window_hybrid(q[:, :, :, :0], k[:, :, :, :0], v, fq, fk, 3)
    for cu in ([0, 4, 3, 10], [0, 5, 11], [1, 10], [0, 10, 10.5]):
        with pytest.raises((ValueError, TypeError), match="cu_seqlens"):
            ops.sliding_window_hybrid(q, k, v, fq, fk, 3, cu_seqlens=np.array(cu))
    two = [np.concatenate([x, x]) for x in (q, k, v, fq, fk)]
    with pytest.raises(ValueError, match="cu_seqlens"):
        ops.sliding_window_hybrid(*two, 3, cu_seqlens=np.array([0, 10]))


def _in_pieces(arrays, window, cuts, **kwargs):
    """The hybrid over [0, T) in calls over the pieces between ``cuts``,
    each continuing from the one before: (o, final state)."""
    T = arrays[0].shape[1]
    outputs, state, start = [], None, 0
    for end in list(cuts) + [T]:
        piece = [x[:, start:end] for x in arrays]
        o, state = ops.sliding_window_hybrid(*piece, window, initial_state=state,
                                             output_final_state=True, **kwargs)
        outputs.append(o)
        start = end
    if not isinstance(outputs[0], np.ndarray):  # torch tensors
        import torch
        return torch.cat(outputs, 1), state
    return np.concatenate(outputs, 1), state


@pytest.mark.parametrize("window,cuts", [
    (20, [30]),              # the context longer than the window
    (20, [5, 6, 7, 40]),     # pieces shorter than the window
    (64, [64, 100]),         # cuts on the blocks' boundaries
    (100, [30, 90]),         # a window longer than the first pieces
    (1, [1, 2, 50]),         # a window of one token
], ids=lambda x: str(x))
def test_pieces_equal_one_call(window, cuts):
    """A sequence in pieces, each call continuing from the last one's
    HybridState (the far part's state and the last ``window`` tokens as
    context): the outputs of one call over the whole sequence (the fp64
    reference), and the final state is the far sum of every token but the
    last ``window``."""
    arrays = _inputs(2, 150, 2, 16, 8, 4, seed=21)
    o, state = _in_pieces(arrays, window, cuts)
    assert rel_rms(reference.sliding_window_hybrid(*arrays, window), o) <= 1e-5
    q, k, v, fq, fk = arrays
    assert rel_rms(_far_state(v, fk, 150 - window), state.state) <= 1e-5
    kept = min(window, 150)
    for got, want in zip(state[1:], (k, v, fk)):
        assert np.array_equal(got, want[:, 150 - kept:])


def test_token_by_token_decoding():
    """A prompt of 40 tokens, then 30 tokens decoded one at a time (T = 1
    per call), each from the state before it: one call's outputs."""
    arrays = _inputs(1, 70, 3, 16, 16, 8, seed=22)
    o, _ = _in_pieces(arrays, 24, list(range(40, 70)))
    assert rel_rms(reference.sliding_window_hybrid(*arrays, 24), o) <= 1e-5


def test_pieces_in_bf16_and_torch():
    """bf16 inputs in pieces within the bf16 threshold of the fp64
    reference on the rounded inputs; torch tensors give torch tensors (the
    state too), and a torch state continues the sequence."""
    torch = pytest.importorskip("torch")
    arrays = _inputs(1, 90, 2, 16, 8, 4, seed=23)
    rounded = [runner.round_to_bf16(x) for x in arrays]
    o, state = _in_pieces(arrays, 20, [25, 26], dtype="bf16")
    assert rel_rms(reference.sliding_window_hybrid(*rounded, 20), o) <= 1e-2
    tensors = [torch.from_numpy(x) for x in arrays]
    o, state = _in_pieces(tensors, 20, [25, 26])
    assert isinstance(o, torch.Tensor) and isinstance(state.state, torch.Tensor)
    assert isinstance(state.k, torch.Tensor)
    assert rel_rms(reference.sliding_window_hybrid(*arrays, 20), o.numpy()) <= 1e-5
    # Through la.family's function (no gradients: the op).
    first = family.sliding_window_hybrid(*(x[:, :25] for x in tensors), 20,
                                         output_final_state=True)
    second = family.sliding_window_hybrid(*(x[:, 25:] for x in tensors), 20,
                                          initial_state=first[1])
    whole = np.concatenate([first[0].numpy(), second.numpy()], 1)
    assert rel_rms(reference.sliding_window_hybrid(*arrays, 20), whole) <= 1e-5
    # With gradients: the state is returned too, and the backward is the
    # derived kernel's.
    grad = [x.clone().requires_grad_() for x in tensors]
    o, state = family.sliding_window_hybrid(*(x[:, :25] for x in grad), 20,
                                            output_final_state=True)
    assert rel_rms(reference.sliding_window_hybrid(*(x[:, :25] for x in arrays), 20),
                   o.detach().numpy()) <= 1e-5
    assert rel_rms(_far_state(arrays[2], arrays[4], 5), state.state.detach().numpy()) <= 1e-5
    do = np.random.default_rng(25).standard_normal(o.shape).astype(np.float32)
    (o * torch.from_numpy(do)).sum().backward()
    expected = reference.sliding_window_hybrid_backward(*(x[:, :25] for x in arrays), 20, do)
    for want, x in zip(expected, grad):
        assert rel_rms(want, x.grad[:, :25].numpy()) <= 1e-5


def test_state_errors():
    """A state with packed sequences, a state of the wrong shape, a context
    whose arrays disagree, and something that is not a state: clear errors."""
    q, k, v, fq, fk = _inputs(1, 20, 2, 8, 4, 3, seed=24)
    cu = np.array([0, 7, 20], np.int32)
    with pytest.raises(ValueError, match="packed sequences .cu_seqlens. take no initial_state"):
        ops.sliding_window_hybrid(q, k, v, fq, fk, 4, cu_seqlens=cu, output_final_state=True)
    _, state = ops.sliding_window_hybrid(q, k, v, fq, fk, 4, output_final_state=True)
    assert state.state.shape == (1, 2, 3, 5) and state.k.shape == (1, 4, 2, 8)
    with pytest.raises(ValueError, match=r"initial_state.state must have shape \[B, H, F, V \+ 1\]"):
        ops.sliding_window_hybrid(q, k, v, fq, fk, 4,
                                  initial_state=state._replace(state=state.state[..., :4]))
    with pytest.raises(ValueError, match="must hold one number of tokens"):
        ops.sliding_window_hybrid(q, k, v, fq, fk, 4,
                                  initial_state=state._replace(v=state.v[:, 1:]))
    with pytest.raises(ValueError, match=r"initial_state.feature_k must have shape"):
        ops.sliding_window_hybrid(q, k, v, fq, fk, 4,
                                  initial_state=state._replace(feature_k=state.k))
    with pytest.raises(TypeError, match="initial_state must be the HybridState"):
        ops.sliding_window_hybrid(q, k, v, fq, fk, 4, initial_state=state.state)


def _random_case(index):
    """Configuration ``index`` of a seeded draw: shapes, window, scale,
    packed sequences (empty ones too), bf16, and a non-finite value."""
    rng = np.random.default_rng([31, index])
    packed = rng.random() < 0.4
    B = 1 if packed else int(rng.integers(1, 4))
    T = int(rng.integers(1, 201))
    H = int(rng.choice([1, 2]))
    K, V, F = (int(rng.choice([4, 8, 16, 32])) for _ in range(3))
    window = int(rng.integers(1, T + 11))
    cu = None
    if packed:
        cuts = np.sort(rng.integers(0, T + 1, int(rng.integers(1, 4))))
        cu = np.concatenate([[0], cuts, [T]]).astype(np.int64)
    arrays = _inputs(B, T, H, K, V, F, seed=1000 + index,
                     scale=float(rng.choice([0.3, 1.0, 4.0])))
    bad = None
    if rng.random() < 0.3:
        bad = (int(rng.integers(B)), int(rng.integers(T)), int(rng.integers(H)),
               int(rng.integers(V)), float(rng.choice([np.nan, np.inf, -np.inf])))
    return dict(window=window, cu=cu, arrays=arrays, bad=bad,
                scale=None if rng.random() < 0.5 else float(rng.uniform(0.05, 1.0)),
                dtype="bf16" if rng.random() < 0.25 else None)


@pytest.mark.parametrize("index", range(16))
def test_random_configurations(index):
    """A seeded draw against the fp64 reference (per sequence when packed);
    with a non-finite value, its column is NaN from its token to the end of
    its sequence and everything else is the clean run's."""
    case = _random_case(index)
    arrays, window, cu = case["arrays"], case["window"], case["cu"]
    kwargs = dict(scale=case["scale"], dtype=case["dtype"],
                  cu_seqlens=None if cu is None else cu)
    o = ops.sliding_window_hybrid(*arrays, window, **kwargs)
    rounded = arrays if case["dtype"] is None else tuple(runner.round_to_bf16(x)
                                                         for x in arrays)
    offsets = cu if cu is not None else (0, arrays[0].shape[1])
    ref = np.concatenate([_per_sequence_reference(
        tuple(x[b:b + 1] for x in rounded), window, offsets, case["scale"])
        for b in range(arrays[0].shape[0])])
    assert rel_rms(ref, o) <= (1e-5 if case["dtype"] is None else 1e-2)
    if case["bad"] is None:
        return
    b, t, h, vv, value = case["bad"]
    dirty = arrays[2].copy()
    dirty[b, t, h, vv] = value
    out = ops.sliding_window_hybrid(arrays[0], arrays[1], dirty, arrays[3], arrays[4],
                                    window, **kwargs)
    end = next(e for e in offsets[1:] if e > t)
    poisoned = np.zeros(o.shape, bool)
    poisoned[b, t:end, h, vv] = True
    assert np.isnan(out[poisoned]).all()
    np.testing.assert_allclose(out[~poisoned], o[~poisoned], rtol=1e-5, atol=1e-6)


_MLIR = """func.func @hybrid(%q: tensor<2x70x2x16xf32>, %k: tensor<2x70x2x16xf32>,
    %v: tensor<2x70x2x8xf32>, %fq: tensor<2x70x2x4xf32>, %fk: tensor<2x70x2x4xf32>)
    -> tensor<2x70x2x8xf32> {
  %o = la.sliding_window_hybrid %q, %k, %v
      features(%fq : tensor<2x70x2x4xf32>, %fk : tensor<2x70x2x4xf32>) {window = 20 : i64}
      : tensor<2x70x2x16xf32>, tensor<2x70x2x16xf32>, tensor<2x70x2x8xf32> -> tensor<2x70x2x8xf32>
  return %o : tensor<2x70x2x8xf32>
}
"""


_PACKED_MLIR = """func.func @hybrid(%q: tensor<1x150x2x16xf32>, %k: tensor<1x150x2x16xf32>,
    %v: tensor<1x150x2x8xf32>, %fq: tensor<1x150x2x4xf32>, %fk: tensor<1x150x2x4xf32>,
    %cu: tensor<5xi32>) -> tensor<1x150x2x8xf32> {
  %o = la.sliding_window_hybrid %q, %k, %v
      features(%fq : tensor<1x150x2x4xf32>, %fk : tensor<1x150x2x4xf32>)
      cu_seqlens(%cu : tensor<5xi32>) {window = 20 : i64}
      : tensor<1x150x2x16xf32>, tensor<1x150x2x16xf32>, tensor<1x150x2x8xf32> -> tensor<1x150x2x8xf32>
  return %o : tensor<1x150x2x8xf32>
}
"""


# Keys with 40 context tokens before 30 queries, an initial state and the
# final state.
_STATE_MLIR = """
func.func @hybrid(%q: tensor<2x30x2x16xf32>, %k: tensor<2x70x2x16xf32>, %v: tensor<2x70x2x8xf32>,
                  %fq: tensor<2x30x2x4xf32>, %fk: tensor<2x70x2x4xf32>, %s0: tensor<2x2x4x9xf32>)
    -> (tensor<2x30x2x8xf32>, tensor<2x2x4x9xf32>) {
  %o, %s = la.sliding_window_hybrid %q, %k, %v
      features(%fq : tensor<2x30x2x4xf32>, %fk : tensor<2x70x2x4xf32>)
      initial_state(%s0 : tensor<2x2x4x9xf32>) {window = 20 : i64}
      : tensor<2x30x2x16xf32>, tensor<2x70x2x16xf32>, tensor<2x70x2x8xf32>
      -> tensor<2x30x2x8xf32>, tensor<2x2x4x9xf32>
  return %o, %s : tensor<2x30x2x8xf32>, tensor<2x2x4x9xf32>
}
"""


def _far_state(v, fk, end):
    """The far state of the tokens before ``end``, in float64: sum_s fk_s
    [v_s, 1]^T, [B, H, F, V + 1]."""
    values = np.concatenate([v[:, :end], np.ones(v[:, :end].shape[:3] + (1,))], -1)
    return np.einsum("bshf,bshc->bhfc", np.asarray(fk[:, :end], np.float64),
                     np.asarray(values, np.float64))


def _la_run(tmp_path, text, arrays, flags, results=1):
    module = tmp_path / "hybrid.mlir"
    module.write_text(text)
    args = []
    for i, x in enumerate(arrays):
        path = tmp_path / f"in{i}.npy"
        np.save(path, x)
        args.append(f"--input={path}")
    outs = [tmp_path / f"o{i}.npy" for i in range(results)]
    env = dict(os.environ, OMP_NUM_THREADS="2")
    result = subprocess.run([runner.find_la_run(), *flags, *args,
                             *(f"--output={out}" for out in outs), str(module)],
                            capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr
    loaded = [np.load(out) for out in outs]
    return loaded[0] if results == 1 else loaded


@pytest.mark.parametrize("flags", [
    [], ["--parallel"], ["--sequential"], ["--gpu-schedule"],
    ["--target=gpu-emulator"], ["--target=gpu-emulator", "--chunk-parallel"]],
    ids=lambda f: " ".join(f) or "cpu")
def test_la_run_targets(tmp_path, flags):
    """The static kernel through la-run: the far part's recurrence takes each
    target's schedule, the window's ops its maps (kernels of their own on
    the GPU)."""
    arrays = _inputs(2, 70, 2, 16, 8, 4, seed=12)
    o = _la_run(tmp_path, _MLIR, arrays, flags)
    assert rel_rms(reference.sliding_window_hybrid(*arrays, 20), o) <= 1e-5
    # Packed sequences: an empty one, one shorter than the window.
    cu = (0, 5, 5, 72, 150)
    packed = _inputs(1, 150, 2, 16, 8, 4, seed=14)
    o = _la_run(tmp_path, _PACKED_MLIR, packed + (np.array(cu, np.int32),), flags)
    assert rel_rms(_per_sequence_reference(packed, 20, cu), o) <= 1e-5
    # Context and state: tokens 0-29 in the state (summed here in fp64),
    # 30-69 the context, 70-99 the queries.
    q, k, v, fq, fk = _inputs(2, 100, 2, 16, 8, 4, seed=15)
    state = _far_state(v, fk, 30).astype(np.float32)
    o, final = _la_run(tmp_path, _STATE_MLIR,
                       (q[:, 70:], k[:, 30:], v[:, 30:], fq[:, 70:], fk[:, 30:], state),
                       flags, results=2)
    assert rel_rms(reference.sliding_window_hybrid(q, k, v, fq, fk, 20)[:, 70:], o) <= 1e-5
    assert rel_rms(_far_state(v, fk, 80), final) <= 1e-5


def test_reference_gradient_against_finite_differences():
    """The hand-written reverse-mode reference against central differences
    of the forward reference (fp64), every input."""
    arrays = [x.astype(np.float64) for x in _inputs(1, 24, 1, 4, 3, 3, seed=31)]
    do = np.random.default_rng(32).standard_normal((1, 24, 1, 3))
    grads = reference.sliding_window_hybrid_backward(*arrays, 5, do)
    for index, grad in enumerate(grads):
        expected = np.zeros_like(grad)
        for position in np.ndindex(grad.shape):
            values = []
            for step in (1e-6, -1e-6):
                moved = [x.copy() for x in arrays]
                moved[index][position] += step
                values.append((reference.sliding_window_hybrid(*moved, 5) * do).sum())
            expected[position] = (values[0] - values[1]) / 2e-6
        assert rel_rms(expected, grad) <= 1e-6, index


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gradients_against_the_reverse_mode_reference(shape):
    """The gradient kernel la-derive-backward derives from the op (the far
    part's la.recurrence_grad, the window's block products) against the
    fp64 reverse-mode reference on the forward tests' shapes."""
    B, T, H, K, V, F, window = shape
    arrays = _inputs(B, T, H, K, V, F, seed=33)
    do = np.random.default_rng(34).standard_normal((B, T, H, V)).astype(np.float32)
    grads = ops.sliding_window_hybrid_backward(*arrays, window, do)
    expected = reference.sliding_window_hybrid_backward(*arrays, window, do)
    for want, got in zip(expected, grads):
        assert got.dtype == np.float32 and got.shape == want.shape
        assert rel_rms(want, got) <= 1e-5


def test_gradients_of_packed_sequences_bf16_and_scale():
    """Packed sequences (each its own reference), bf16 inputs (the
    reference on the rounded inputs) and a scale, two threads."""
    cu = (0, 5, 5, 72, 150)
    arrays = _inputs(1, 150, 2, 16, 8, 4, seed=35)
    do = np.random.default_rng(36).standard_normal((1, 150, 2, 8)).astype(np.float32)
    grads = ops.sliding_window_hybrid_backward(*arrays, 20, do, scale=0.3,
                                               cu_seqlens=np.array(cu, np.int32),
                                               num_threads=2)
    for start, end in zip(cu[:-1], cu[1:]):
        if end == start:
            continue
        piece = [x[:, start:end] for x in arrays]
        expected = reference.sliding_window_hybrid_backward(*piece, 20, do[:, start:end],
                                                            scale=0.3)
        for want, got in zip(expected, grads):
            assert rel_rms(want, got[:, start:end]) <= 1e-5
    arrays = _inputs(1, 90, 2, 16, 8, 4, seed=37)
    do = do[:, :90]
    rounded = [runner.round_to_bf16(x) for x in arrays]
    grads = ops.sliding_window_hybrid_backward(*arrays, 20, do, dtype="bf16")
    expected = reference.sliding_window_hybrid_backward(*rounded, 20,
                                                        runner.round_to_bf16(do))
    for want, got in zip(expected, grads):
        assert rel_rms(want, got) <= 1e-2


def test_gradients_of_a_piece_with_context_and_state():
    """The second of two calls (context and far state from the first):
    its inputs' gradients are the whole sequence's with the first piece's
    cotangent zero; the context's are those of the tokens it holds, and
    the far state's is what the tokens before the context get through
    their write fk_s [v_s, 1]^T."""
    arrays = _inputs(2, 100, 2, 16, 8, 4, seed=38)
    window, cut = 20, 60
    _, state = ops.sliding_window_hybrid(*(x[:, :cut] for x in arrays), window,
                                         output_final_state=True)
    _check_continued_gradients(arrays, window, state, cut - window, cut, seed=39)


def _check_continued_gradients(arrays, window, state, first, cut, seed):
    """The gradients of a call over tokens [cut, T) continuing from ``state``
    (its context tokens [first, cut), its far state the tokens before
    ``first``) against the whole sequence's with the cotangent zero before
    ``cut``; the far state's gradient through each early token's write
    fk_s [v_s, 1]^T."""
    B, T, H = arrays[2].shape[:3]
    do = np.random.default_rng(seed).standard_normal(arrays[2].shape).astype(np.float32)
    do[:, :cut] = 0.0
    grads = ops.sliding_window_hybrid_backward(*(x[:, cut:] for x in arrays), window,
                                               do[:, cut:], initial_state=state)
    dq, dk, dv, dfq, dfk = reference.sliding_window_hybrid_backward(*arrays, window, do)
    for want, got in zip((dq, dk, dv, dfq, dfk), grads[:5]):
        assert rel_rms(want[:, cut:], got) <= 1e-5
    d_state = grads[5]
    for want, got in ((dk, d_state.k), (dv, d_state.v), (dfk, d_state.feature_k)):
        assert rel_rms(want[:, first:cut], got) <= 1e-5
    v = arrays[2]
    values = np.concatenate([v[:, :first], np.ones((B, first, H, 1))], -1)
    through_state = np.einsum("bhfc,bshc->bshf", np.asarray(d_state.state, np.float64), values)
    assert rel_rms(dfk[:, :first], through_state) <= 1e-5


@pytest.mark.parametrize("window,cuts", [(20, [25, 26]), (7, [3, 1, 40]), (30, [50])])
def test_torch_gradients_through_pieces(window, cuts):
    """A sequence in pieces through torch autograd, each call continuing
    from the last one's state (its far state and context are nodes of the
    graph): every token's gradients are those of the whole sequence in one
    call (the fp64 reverse-mode reference), and the state's cotangent
    reaches the tokens of the earlier pieces."""
    torch = pytest.importorskip("torch")
    arrays = _inputs(2, 90, 2, 16, 8, 4, seed=44)
    do = np.random.default_rng(45).standard_normal(arrays[2].shape).astype(np.float32)
    leaves = [torch.from_numpy(x).requires_grad_() for x in arrays]
    bounds = np.cumsum([0] + cuts + [90 - sum(cuts)])
    state, loss = None, 0
    for start, end in zip(bounds[:-1], bounds[1:]):
        o, state = family.sliding_window_hybrid(*(x[:, start:end] for x in leaves), window,
                                                initial_state=state,
                                                output_final_state=True)
        loss = loss + (o * torch.from_numpy(do[:, start:end])).sum()
    loss.backward()
    expected = reference.sliding_window_hybrid_backward(*arrays, window, do)
    for want, x in zip(expected, leaves):
        assert rel_rms(want, x.grad.numpy()) <= 1e-5


def test_torch_gradients_of_a_given_state():
    """An initial state given as tensors that need gradients: their
    gradients are sliding_window_hybrid_backward's (the far state's and the
    context's); NumPy context parts are constants."""
    torch = pytest.importorskip("torch")
    arrays = _inputs(1, 60, 2, 16, 8, 4, seed=46)
    window, first, cut = 20, 10, 40
    q, k, v, fq, fk = arrays
    state = ops.HybridState(_far_state(v, fk, first).astype(np.float32), k[:, first:cut],
                            v[:, first:cut], fk[:, first:cut])
    do = np.random.default_rng(47).standard_normal((1, 60 - cut, 2, 8)).astype(np.float32)
    want = ops.sliding_window_hybrid_backward(*(x[:, cut:] for x in arrays), window, do,
                                              initial_state=state)[5]
    given = ops.HybridState(*(torch.from_numpy(np.ascontiguousarray(x)).requires_grad_()
                              for x in state))
    tensors = [torch.from_numpy(np.ascontiguousarray(x[:, cut:])) for x in arrays]
    o = family.sliding_window_hybrid(*tensors, window, initial_state=given)
    (o * torch.from_numpy(do)).sum().backward()
    for part, x in zip(want, given):
        assert rel_rms(part, x.grad.numpy()) <= 1e-6
    # The far state alone as a tensor, the context as NumPy arrays.
    far = torch.from_numpy(state.state.copy()).requires_grad_()
    o = family.sliding_window_hybrid(*tensors, window,
                                     initial_state=ops.HybridState(far, *state[1:]))
    (o * torch.from_numpy(do)).sum().backward()
    assert rel_rms(want.state, far.grad.numpy()) <= 1e-6


def test_gradients_with_a_context_longer_than_the_window():
    """A context of 45 tokens (w = 20: the 25 oldest are far for every
    query, summed into the recurrence's start) and a far state of the 15
    tokens before them: every gradient against the whole sequence's."""
    arrays = _inputs(1, 90, 2, 16, 8, 4, seed=42)
    window, first, cut = 20, 15, 60
    q, k, v, fq, fk = arrays
    state = ops.HybridState(_far_state(v, fk, first).astype(np.float32), k[:, first:cut],
                            v[:, first:cut], fk[:, first:cut])
    _check_continued_gradients(arrays, window, state, first, cut, seed=43)


@pytest.mark.parametrize("flags", [
    [], ["--parallel"], ["--target=gpu-emulator"],
    ["--target=gpu-emulator", "--chunk-parallel"]],
    ids=lambda f: " ".join(f) or "cpu")
def test_gradient_kernels_through_la_run(tmp_path, flags):
    """la-derive-backward on the static kernel, then la-run on each target:
    every gradient against the reverse-mode reference."""
    la_opt = os.path.join(os.path.dirname(runner.find_la_run()), "la-opt")
    module = tmp_path / "hybrid.mlir"
    module.write_text(_MLIR)
    derived = tmp_path / "grad.mlir"
    subprocess.run([la_opt, str(module), "--la-derive-backward=keep-forward=0", "-o",
                    str(derived)], check=True, timeout=120)
    arrays = _inputs(2, 70, 2, 16, 8, 4, seed=40)
    do = np.random.default_rng(41).standard_normal((2, 70, 2, 8)).astype(np.float32)
    grads = _la_run(tmp_path, derived.read_text(), arrays + (do,), flags, results=5)
    expected = reference.sliding_window_hybrid_backward(*arrays, 20, do)
    for want, got in zip(expected, grads):
        assert rel_rms(want, got) <= 1e-5


@pytest.mark.parametrize("form", ["batched", "packed", "state", "gradient"])
def test_gpu_kernels_pass_ptxas(tmp_path, form):
    """la-lower-to-nvvm lowers the op's decomposition to PTX kernels that
    ptxas accepts for sm_90a (their results are checked on the emulator
    above; no GPU here)."""
    from la import gpu
    ptxas = gpu.find_ptxas()
    if ptxas is None:
        pytest.skip("needs the CUDA toolkit's ptxas")
    module = tmp_path / "hybrid.mlir"
    module.write_text({"batched": _MLIR, "packed": _PACKED_MLIR, "state": _STATE_MLIR,
                       "gradient": _MLIR}[form])
    la_opt = os.path.join(os.path.dirname(runner.find_la_run()), "la-opt")
    if form == "gradient":
        subprocess.run([la_opt, str(module), "--la-derive-backward=keep-forward=0", "-o",
                        str(module)], check=True, timeout=120)
    lowered = tmp_path / "kernels.mlir"
    subprocess.run([la_opt, str(module), "-la-lower-to-nvvm=format=isa", "-o", str(lowered)],
                   check=True, timeout=600)
    extract = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "scripts", "extract-gpu-objects.py")
    subprocess.run([sys.executable, extract, str(lowered), "-o", str(tmp_path)], check=True,
                   capture_output=True, timeout=120)
    kernels = sorted(tmp_path.glob("*.ptx"))
    assert kernels
    for kernel in kernels:
        result = subprocess.run([ptxas, "-arch=sm_90a", str(kernel), "-o",
                                 str(tmp_path / "k.cubin")], capture_output=True, text=True,
                                timeout=120)
        assert result.returncode == 0, f"{kernel.name}: {result.stderr}"
