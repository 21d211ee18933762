"""la.onnx: ONNX's LinearAttention-27 models imported into la's MLIR and run
with la's kernels, against ONNX's reference evaluator (onnx.reference, which
implements LinearAttention) and onnxruntime on the same models: every update
rule, scalar and per-key-channel decay, beta per head and broadcast,
past/present state; the imported MLIR through la-run; the errors."""

import os
import subprocess
import sys

import numpy as np
import pytest

import la
from la.testing import rel_rms

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from la import onnx as laonnx  # noqa: E402

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
B, T, H, DK, DV = 2, 19, 2, 8, 4


def _model(rule, decay=None, beta=None, past=True, hq=H, hkv=H, scale=None):
    names = ["q", "k", "v", "s0" if past else "", "g" if decay else "", "b" if beta else ""]
    while names and names[-1] == "":
        names.pop()
    attrs = dict(q_num_heads=hq, kv_num_heads=hkv, update_rule=rule)
    if scale is not None:
        attrs["scale"] = scale
    node = helper.make_node("LinearAttention", names, ["o", "s"], name="la0", **attrs)

    def info(name, shape):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)

    inputs = [info("q", [B, T, hq * DK]), info("k", [B, T, hkv * DK]),
              info("v", [B, T, hkv * DV])]
    if past:
        inputs.append(info("s0", [B, hkv, DK, DV]))
    if decay:
        inputs.append(info("g", [B, T, hkv * DK] if decay == "channel" else [B, T, hkv]))
    if beta:
        inputs.append(info("b", [B, T, hkv if beta == "head" else 1]))
    graph = helper.make_graph([node], "linear_attention", inputs,
                              [info("o", [B, T, hq * DV]), info("s", [B, hkv, DK, DV])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 27)])
    onnx.checker.check_model(model)
    return model


def _feeds(decay, beta, seed, hkv=H, hq=H):
    rng = np.random.default_rng(seed)
    k = rng.standard_normal((B, T, hkv, DK))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)  # the delta rules want unit keys
    feeds = dict(q=rng.standard_normal((B, T, hq * DK)), k=k.reshape(B, T, hkv * DK),
                 v=rng.standard_normal((B, T, hkv * DV)),
                 s0=rng.standard_normal((B, hkv, DK, DV)))
    if decay:
        feeds["g"] = -0.3 * rng.random((B, T, hkv * DK) if decay == "channel" else (B, T, hkv))
    if beta:
        feeds["b"] = rng.random((B, T, hkv if beta == "head" else 1))
    return {name: x.astype(np.float32) for name, x in feeds.items()}


CASES = [("linear", None, None), ("gated", "scalar", None), ("gated", "channel", None),
         ("delta", None, "head"), ("delta", None, "one"), ("gated_delta", "scalar", "head"),
         ("gated_delta", "channel", "one")]


@pytest.mark.parametrize("rule, decay, beta", CASES)
def test_run_matches_onnx_reference_and_onnxruntime(rule, decay, beta):
    model = _model(rule, decay, beta)
    feeds = _feeds(decay, beta, seed=len(rule))
    expected = ReferenceEvaluator(model).run(None, feeds)
    got = laonnx.run(model, feeds)
    assert [x.shape for x in got] == [x.shape for x in expected]
    for want, out in zip(expected, got):
        assert rel_rms(want, out) <= 1e-5
    try:
        import onnxruntime
    except ImportError:
        return
    session = onnxruntime.InferenceSession(model.SerializeToString())
    for want, out in zip(session.run(None, feeds), got):
        assert rel_rms(want, out) <= 1e-5


@pytest.mark.parametrize("hq, hkv", [(4, 2), (4, 1)], ids=["gqa", "mqa"])
@pytest.mark.parametrize("rule, decay, beta", [CASES[0], CASES[2], CASES[5], CASES[6]])
def test_grouped_query_heads(rule, decay, beta, hq, hkv):
    """q_num_heads > kv_num_heads: each group of query heads reads its key and
    value head's state (ONNX's GQA; multi-query attention with one kv head),
    against onnx.reference and onnxruntime."""
    model = _model(rule, decay, beta, hq=hq, hkv=hkv)
    feeds = _feeds(decay, beta, seed=hq + hkv, hkv=hkv, hq=hq)
    expected = ReferenceEvaluator(model).run(None, feeds)
    got = laonnx.run(model, feeds)
    assert [x.shape for x in got] == [x.shape for x in expected]
    assert got[0].shape == (B, T, hq * DV) and got[1].shape == (B, hkv, DK, DV)
    for want, out in zip(expected, got):
        assert rel_rms(want, out) <= 1e-5
    try:
        import onnxruntime
    except ImportError:
        return
    try:
        session = onnxruntime.InferenceSession(model.SerializeToString())
    except Exception as error:  # an onnxruntime without this function's GQA
        pytest.skip(f"onnxruntime cannot run the model: {error}")
    for want, out in zip(session.run(None, feeds), got):
        assert rel_rms(want, out) <= 1e-5


def test_without_past_state_and_explicit_scale():
    model = _model("gated_delta", "scalar", "head", past=False, scale=0.5)
    feeds = _feeds("scalar", "head", seed=3)
    del feeds["s0"]
    expected = ReferenceEvaluator(model).run(None, feeds)
    for want, out in zip(expected, laonnx.run(model, feeds)):
        assert rel_rms(want, out) <= 1e-5


@pytest.mark.parametrize("rule, decay, beta, hq", [CASES[2] + (H,), CASES[4] + (H,),
                                                   CASES[5] + (2 * H,)])
def test_imported_mlir_runs_in_la_run(rule, decay, beta, hq, tmp_path):
    """The MLIR of the model (la.onnx.to_mlir, as `python -m la.onnx`
    writes it) compiled and run by la-run on the same inputs (the last case
    with grouped query heads)."""
    model = _model(rule, decay, beta, hq=hq)
    feeds = _feeds(decay, beta, seed=5, hq=hq)
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    mlir = tmp_path / "model.mlir"
    env = dict(os.environ, PYTHONPATH=os.path.join(_REPO, "python"))
    subprocess.run([sys.executable, "-m", "la.onnx", str(path), "-o", str(mlir)], env=env,
                   check=True)
    assert "la.attention" in mlir.read_text()
    la_run = la.runner.find_la_run()
    if la_run is None:
        pytest.skip("la-run is not built")
    order = [n for n in ("q", "k", "v", "s0", "g", "b") if n in feeds]
    for name in order:
        np.save(tmp_path / f"{name}.npy", feeds[name])
    subprocess.run([la_run, str(mlir)] + [f"--input={tmp_path / n}.npy" for n in order]
                   + [f"--output={tmp_path / 'o.npy'}", f"--output={tmp_path / 's.npy'}"],
                   check=True, capture_output=True)
    expected = ReferenceEvaluator(model).run(None, feeds)
    assert rel_rms(expected[0], np.load(tmp_path / "o.npy")) <= 1e-5
    assert rel_rms(expected[1], np.load(tmp_path / "s.npy")) <= 1e-5


def test_errors(tmp_path):
    with pytest.raises(la.LaError, match=r"q_num_heads \(3\) must be a positive multiple "
                                         r"of kv_num_heads \(2\)"):
        laonnx.to_mlir(_model("linear", hq=3, hkv=2))
    relu = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])])
    model = helper.make_model(relu, opset_imports=[helper.make_opsetid("", 27)])
    with pytest.raises(la.LaError, match="imports LinearAttention nodes only, not Relu"):
        laonnx.run(model, {"x": np.zeros((1, 2), np.float32)})
    # the tool: a clear message and exit status 1, and no output file
    path = tmp_path / "relu.onnx"
    onnx.save(model, str(path))
    env = dict(os.environ, PYTHONPATH=os.path.join(_REPO, "python"))
    out = tmp_path / "out.mlir"
    proc = subprocess.run([sys.executable, "-m", "la.onnx", str(path), "-o", str(out)],
                          env=env, capture_output=True, text=True)
    assert proc.returncode == 1 and "la.onnx: node 'r'" in proc.stderr
    assert not out.exists()
