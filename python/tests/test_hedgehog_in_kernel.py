"""Hedgehog's learned feature map computed inside la.sliding_window_hybrid's
kernel (``la.ops.HedgehogMap`` as ``feature_q`` / ``feature_k``): the map's
contraction and its two softmaxes are linalg ops in front of the op, in the
same kernel (la-lower-to-recurrence decomposes the softmaxes).

Checked against the fp64 token-by-token reference of the hybrid
(``la.reference.sliding_window_hybrid``) on features computed in fp64 by
NumPy from the same weights, on the forward tests' shapes, packed
sequences, bf16, two threads and a sequence in pieces; torch autograd (the
features then computed by torch) against a dense fp64 torch formula of the
whole layer; and the arguments' errors."""

import os
import subprocess

import numpy as np
import pytest

from la import family, ops, reference, runner
from la.testing import rel_rms


def _softmax(y):
    e = np.exp(y - y.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _features64(x, weight, bias):
    """Hedgehog's map in fp64, written here (not la.family's)."""
    z = np.einsum("bthd,hdf->bthf", np.asarray(x, np.float64), np.asarray(weight, np.float64))
    if bias is not None:
        z = z + np.asarray(bias, np.float64)
    return np.concatenate([_softmax(z), _softmax(-z)], -1)


def _inputs(B, T, H, K, V, half, seed, bias=True):
    rng = np.random.default_rng(seed)
    q, k = (0.5 * rng.standard_normal((B, T, H, K)).astype(np.float32) for _ in range(2))
    v = rng.standard_normal((B, T, H, V)).astype(np.float32)
    wq, wk = ((0.3 * rng.standard_normal((H, K, half))).astype(np.float32) for _ in range(2))
    bq, bk = ((0.1 * rng.standard_normal((H, half))).astype(np.float32) if bias else None
              for _ in range(2))
    return q, k, v, ops.HedgehogMap(wq, bq), ops.HedgehogMap(wk, bk)


def _reference(q, k, v, map_q, map_k, window, scale=None):
    return reference.sliding_window_hybrid(
        q, k, v, _features64(q, *map_q), _features64(k, *map_k), window, scale=scale)


# (B, T, H, K, V, F/2, window): one block, a partial last block, B > 1,
# K != V, a window of one token, windows past one block and past T.
SHAPES = [
    (1, 5, 1, 8, 4, 2, 3),
    (2, 100, 2, 16, 8, 4, 20),
    (1, 77, 2, 16, 32, 8, 1),
    (1, 130, 1, 16, 8, 4, 65),
    (1, 50, 1, 8, 8, 4, 200),
    (1, 64, 3, 32, 16, 32, 17),
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_against_reference(shape):
    B, T, H, K, V, half, window = shape
    q, k, v, mq, mk = _inputs(B, T, H, K, V, half, seed=sum(shape), bias=shape[0] == 1)
    o = ops.sliding_window_hybrid(q, k, v, mq, mk, window)
    assert o.shape == (B, T, H, V) and o.dtype == np.float32
    assert rel_rms(_reference(q, k, v, mq, mk, window), o) <= 1e-5


def test_equals_the_call_on_features_computed_outside():
    q, k, v, mq, mk = _inputs(2, 90, 2, 16, 16, 8, seed=3)
    inside = ops.sliding_window_hybrid(q, k, v, mq, mk, 12, scale=0.2)
    fq, fk = (family.hedgehog_features(x, *m) for x, m in ((q, mq), (k, mk)))
    outside = ops.sliding_window_hybrid(q, k, v, fq, fk, 12, scale=0.2)
    assert rel_rms(outside, inside) <= 1e-6
    assert rel_rms(_reference(q, k, v, mq, mk, 12, scale=0.2), inside) <= 1e-5


@pytest.mark.parametrize("cu", [[0, 30, 31, 100], [0, 100]])
def test_packed_sequences(cu):
    q, k, v, mq, mk = _inputs(1, 100, 2, 16, 8, 4, seed=len(cu))
    cu = np.array(cu, np.int32)
    o = ops.sliding_window_hybrid(q, k, v, mq, mk, 7, cu_seqlens=cu)
    ref = np.concatenate([_reference(q[:, a:b], k[:, a:b], v[:, a:b], mq, mk, 7)
                          for a, b in zip(cu[:-1], cu[1:])], 1)
    assert rel_rms(ref, o) <= 1e-5


def test_two_threads_and_bf16():
    q, k, v, mq, mk = _inputs(2, 120, 2, 16, 16, 8, seed=11)
    ref = _reference(q, k, v, mq, mk, 24)
    assert rel_rms(ref, ops.sliding_window_hybrid(q, k, v, mq, mk, 24, num_threads=2)) <= 1e-5
    o = ops.sliding_window_hybrid(q, k, v, mq, mk, 24, dtype="bf16")
    assert rel_rms(ref, np.asarray(o, np.float32)) <= 1e-2


@pytest.mark.parametrize("cuts", [[40], [1, 2, 50]])
def test_pieces_equal_one_call(cuts):
    q, k, v, mq, mk = _inputs(2, 100, 2, 16, 8, 4, seed=5)
    whole = ops.sliding_window_hybrid(q, k, v, mq, mk, 20)
    state, pieces = None, []
    for a, b in zip([0] + cuts, cuts + [100]):
        o, state = ops.sliding_window_hybrid(q[:, a:b], k[:, a:b], v[:, a:b], mq, mk, 20,
                                             initial_state=state, output_final_state=True)
        pieces.append(o)
        # The state's key features are the map of its kept keys.
        assert rel_rms(_features64(state.k, *mk), state.feature_k) <= 1e-6
    assert rel_rms(whole, np.concatenate(pieces, 1)) <= 1e-5
    # A state from a call on features computed outside continues as well.
    fq, fk = (family.hedgehog_features(x, *m) for x, m in ((q, mq), (k, mk)))
    _, outside = ops.sliding_window_hybrid(q[:, :40], k[:, :40], v[:, :40], fq[:, :40],
                                           fk[:, :40], 20, output_final_state=True)
    rest = ops.sliding_window_hybrid(q[:, 40:], k[:, 40:], v[:, 40:], mq, mk, 20,
                                     initial_state=outside)
    assert rel_rms(whole[:, 40:], rest) <= 1e-5


def _torch_layer64(torch, q, k, v, wq, bq, wk, bk, window, scale):
    """The hybrid as one dense fp64 formula (a mask per part), for torch's
    reverse mode: an independent reference of its gradients."""
    def features(x, w, b):
        z = torch.einsum("bthd,hdf->bthf", x, w) + b
        return torch.cat([torch.softmax(z, -1), torch.softmax(-z, -1)], -1)
    T = q.shape[1]
    t = torch.arange(T)
    near = (t[:, None] >= t[None, :]) & (t[:, None] - t[None, :] < window)
    far = t[:, None] - t[None, :] >= window
    # Small scores here (|q|, |k| ~ 0.5): exp needs no shift.
    weights = torch.exp(torch.einsum("bthk,bshk->bhts", q, k) * scale) * near
    linear = torch.einsum("bthf,bshf->bhts", features(q, wq, bq), features(k, wk, bk)) * far
    a = weights + linear
    return torch.einsum("bhts,bshv->bthv", a / a.sum(-1, keepdims=True), v)


def test_torch_gradients_reach_the_maps():
    """torch autograd through the op with HedgehogMaps: the derived gradient
    kernel gives q, k, v and the maps' parameters their gradients."""
    torch = pytest.importorskip("torch")
    q, k, v, mq, mk = _inputs(1, 40, 2, 8, 8, 4, seed=7)
    leaves64 = [torch.tensor(np.asarray(x, np.float64), requires_grad=True)
                for x in (q, k, v, mq.weight, mq.bias, mk.weight, mk.bias)]
    scale = 8 ** -0.5
    do = np.random.default_rng(8).standard_normal(v.shape)
    o64 = _torch_layer64(torch, *leaves64, 6, scale)
    # The dense formula is the layer: the token-by-token fp64 reference.
    assert rel_rms(_reference(q, k, v, mq, mk, 6), o64.detach().numpy()) <= 1e-12
    (o64 * torch.tensor(do)).sum().backward()
    leaves = [torch.tensor(np.asarray(x), requires_grad=True)
              for x in (q, k, v, mq.weight, mq.bias, mk.weight, mk.bias)]
    o = ops.sliding_window_hybrid(leaves[0], leaves[1], leaves[2],
                                  ops.HedgehogMap(leaves[3], leaves[4]),
                                  ops.HedgehogMap(leaves[5], leaves[6]), 6)
    assert rel_rms(o64.detach().numpy(), o.detach().numpy()) <= 1e-5
    (o * torch.tensor(do, dtype=torch.float32)).sum().backward()
    for name, x, x64 in zip("q k v wq bq wk bk".split(), leaves, leaves64):
        assert rel_rms(x64.grad.numpy(), x.grad.numpy()) <= 1e-5, name


def test_bad_maps():
    q, k, v, mq, mk = _inputs(1, 10, 2, 8, 8, 4, seed=1)
    fk = family.hedgehog_features(k, *mk)
    with pytest.raises(TypeError, match="both be arrays or both be HedgehogMap"):
        ops.sliding_window_hybrid(q, k, v, mq, fk, 4)
    with pytest.raises(ValueError, match=r"feature_k.weight must have shape \[H, K, F/2\]"):
        ops.sliding_window_hybrid(q, k, v, mq, ops.HedgehogMap(mk.weight[:, :4]), 4)
    with pytest.raises(ValueError, match="one number of columns"):
        ops.sliding_window_hybrid(q, k, v, mq, ops.HedgehogMap(mk.weight[..., :2]), 4)
    with pytest.raises(ValueError, match=r"feature_q.bias must have shape \[H, F/2\]"):
        ops.sliding_window_hybrid(q, k, v, ops.HedgehogMap(mq.weight, mq.bias[:1]), mk, 4)
    with pytest.raises(TypeError, match="feature_q.weight must be a float array"):
        ops.sliding_window_hybrid(q, k, v, ops.HedgehogMap(np.array([["a"]])), mk, 4)


def _static_mlir(B, T, H, K, V, half, window):
    """The feature maps and the op with static shapes, for la-run."""
    def t(*shape):
        return "tensor<" + "x".join(map(str, shape)) + "xf32>"
    x, vt, zt, ft, wt = t(B, T, H, K), t(B, T, H, V), t(B, T, H, half), \
        t(B, T, H, 2 * half), t(H, K, half)

    def features(name):
        return f"""
  %{name}z0 = linalg.fill ins(%zero : f32) outs(%e : {zt}) -> {zt}
  %{name}z = linalg.generic {{indexing_maps = [#x, #w, #z], iterator_types =
      ["parallel", "parallel", "parallel", "parallel", "reduction"]}}
      ins(%{name}, %w{name} : {x}, {wt}) outs(%{name}z0 : {zt}) {{
  ^bb0(%a: f32, %b: f32, %c: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %c, %m : f32
    linalg.yield %s : f32
  }} -> {zt}
  %{name}n = linalg.generic {{indexing_maps = [#id, #id], iterator_types =
      ["parallel", "parallel", "parallel", "parallel"]}} ins(%{name}z : {zt}) outs(%e : {zt}) {{
  ^bb0(%a: f32, %c: f32):
    %n = arith.negf %a : f32
    linalg.yield %n : f32
  }} -> {zt}
  %{name}p = linalg.softmax dimension(3) ins(%{name}z : {zt}) outs(%e : {zt}) -> {zt}
  %{name}m = linalg.softmax dimension(3) ins(%{name}n : {zt}) outs(%e : {zt}) -> {zt}
  %{name}1 = tensor.insert_slice %{name}p into %e2[0, 0, 0, 0] [{B}, {T}, {H}, {half}] [1, 1, 1, 1]
      : {zt} into {ft}
  %f{name} = tensor.insert_slice %{name}m into %{name}1[0, 0, 0, {half}] [{B}, {T}, {H}, {half}]
      [1, 1, 1, 1] : {zt} into {ft}
"""
    return f"""
#x = affine_map<(b, t, h, f, d) -> (b, t, h, d)>
#w = affine_map<(b, t, h, f, d) -> (h, d, f)>
#z = affine_map<(b, t, h, f, d) -> (b, t, h, f)>
#id = affine_map<(b, t, h, f) -> (b, t, h, f)>
func.func @f(%q: {x}, %k: {x}, %v: {vt}, %wq: {wt}, %wk: {wt}) -> {vt} {{
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : {zt}
  %e2 = tensor.empty() : {ft}
{features("q")}{features("k")}
  %o = la.sliding_window_hybrid %q, %k, %v features(%fq : {ft}, %fk : {ft}) {{window = {window} : i64}}
      : {x}, {x}, {vt} -> {vt}
  return %o : {vt}
}}
"""


@pytest.mark.parametrize("flags", [
    [], ["--parallel"], ["--sequential"], ["--target=gpu-emulator"],
    ["--target=gpu-emulator", "--chunk-parallel"]],
    ids=lambda f: " ".join(f) or "cpu")
def test_la_run_targets(tmp_path, flags):
    """The maps in front of the op through every la-run target: the GPU
    pipeline lowers the decomposed softmaxes and the contraction too."""
    la_run = runner.find_la_run()
    if la_run is None:
        pytest.skip("la-run is not built")
    shape = (2, 50, 2, 16, 8, 4, 9)
    q, k, v, mq, mk = _inputs(*shape[:6], seed=21, bias=False)
    module = tmp_path / "f.mlir"
    module.write_text(_static_mlir(*shape))
    args = []
    for index, array in enumerate((q, k, v, mq.weight, mk.weight)):
        path = tmp_path / f"in{index}.npy"
        np.save(path, array)
        args.append(f"--input={path}")
    out = tmp_path / "o.npy"
    result = subprocess.run([la_run, *flags, "--chunk-size=16", *args, f"--output={out}",
                             str(module)], capture_output=True, text=True, timeout=600,
                            env=dict(os.environ, OMP_NUM_THREADS="2"))
    assert result.returncode == 0, result.stderr
    assert rel_rms(_reference(q, k, v, mq, mk, shape[-1]), np.load(out)) <= 1e-5


def _torch_gradients64(q, k, v, map_q, map_k, window, do, scale=None):
    """torch's reverse mode over the dense fp64 formula: the gradients of
    sum(o * do) for q, k, v, the weights and the biases (None without)."""
    torch = pytest.importorskip("torch")
    leaves = [None if x is None else torch.tensor(np.asarray(x, np.float64), requires_grad=True)
              for x in (q, k, v, map_q.weight, map_q.bias, map_k.weight, map_k.bias)]
    zero = torch.zeros(())
    bq, bk = (zero if b is None else b for b in (leaves[4], leaves[6]))
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    o = _torch_layer64(torch, leaves[0], leaves[1], leaves[2], leaves[3], bq, leaves[5], bk,
                       window, scale)
    (o * torch.tensor(np.asarray(do, np.float64))).sum().backward()
    return [None if x is None else x.grad.numpy() for x in leaves]


@pytest.mark.parametrize("bias", [True, False])
def test_backward_kernel_gives_the_maps_gradients(bias):
    """la-derive-backward through the maps: la.ops.sliding_window_hybrid_backward
    returns HedgehogMaps of the weights' and biases' gradients."""
    q, k, v, mq, mk = _inputs(2, 45, 2, 8, 6, 4, seed=9, bias=bias)
    do = np.random.default_rng(10).standard_normal(v.shape).astype(np.float32)
    grads = ops.sliding_window_hybrid_backward(q, k, v, mq, mk, 7, do)
    assert isinstance(grads[3], ops.HedgehogMap) and isinstance(grads[4], ops.HedgehogMap)
    got = [grads[0], grads[1], grads[2], grads[3].weight, grads[3].bias, grads[4].weight,
           grads[4].bias]
    expected = _torch_gradients64(q, k, v, mq, mk, 7, do)
    for name, g, e in zip("q k v wq bq wk bk".split(), got, expected):
        if e is None:
            assert g is None, name
            continue
        assert g.shape == e.shape and rel_rms(e, g) <= 1e-5, name


def test_backward_of_packed_sequences_and_a_piece_with_state():
    torch = pytest.importorskip("torch")
    q, k, v, mq, mk = _inputs(1, 60, 2, 8, 8, 4, seed=12)
    do = np.random.default_rng(13).standard_normal(v.shape).astype(np.float32)
    cu = np.array([0, 25, 60], np.int32)
    grads = ops.sliding_window_hybrid_backward(q, k, v, mq, mk, 9, do, cu_seqlens=cu)
    expected = [np.zeros_like(x) for x in (q, k, v)] + [np.zeros(np.shape(x)) for x in
                                                         (mq.weight, mq.bias, mk.weight, mk.bias)]
    for a, b in zip(cu[:-1], cu[1:]):
        part = _torch_gradients64(q[:, a:b], k[:, a:b], v[:, a:b], mq, mk, 9, do[:, a:b])
        for index, g in enumerate(part):
            if index < 3:
                expected[index][:, a:b] = g
            else:
                expected[index] = expected[index] + g
    got = [grads[0], grads[1], grads[2], *grads[3], *grads[4]]
    for name, g, e in zip("q k v wq bq wk bk".split(), got, expected):
        assert rel_rms(e, g) <= 1e-5, name
    # torch autograd over a sequence in two pieces (the state carried)
    # equals one call's gradients.
    leaves = [torch.tensor(np.asarray(x), requires_grad=True)
              for x in (q, k, v, mq.weight, mq.bias, mk.weight, mk.bias)]
    maps = (ops.HedgehogMap(leaves[3], leaves[4]), ops.HedgehogMap(leaves[5], leaves[6]))
    first, state = ops.sliding_window_hybrid(leaves[0][:, :30], leaves[1][:, :30],
                                             leaves[2][:, :30], *maps, 9,
                                             output_final_state=True)
    second = ops.sliding_window_hybrid(leaves[0][:, 30:], leaves[1][:, 30:],
                                       leaves[2][:, 30:], *maps, 9, initial_state=state)
    (torch.cat([first, second], 1) * torch.tensor(do)).sum().backward()
    whole = _torch_gradients64(q, k, v, mq, mk, 9, do)
    for name, x, e in zip("q k v wq bq wk bk".split(), leaves, whole):
        assert rel_rms(e, x.grad.numpy()) <= 1e-5, name
