"""Grouped query heads read each state once per query head, without
repeating the state's work: la.attention with q : [B,T,G*H,K] over k, v : [B,T,H,...]
lowers to one la.recurrence whose q has G*H heads and whose k, v, gates and
state keep H (checked in the IR), for every variant that la.recurrence runs
with groups. Each output is checked
against la's float64 reference run with k, v, the gates and the state
repeated per query head (query head j reads the state of head j // G), which
is the definition of grouped query heads."""

import re

import numpy as np
import pytest

import la
import la.reference as ref
from la.testing import rel_rms

H, G, K, V = 2, 3, 16, 8


def _repeat(x, axis=2):
    return None if x is None else np.repeat(x, G, axis=axis)


def _inputs(seed, B, T, *, Kd=K, Vd=V):
    rng = np.random.default_rng(seed)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)
    k = f(B, T, H, Kd)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    return dict(
        q=f(B, T, G * H, Kd), k=k, v=f(B, T, H, Vd),
        g=(-0.5 * rng.random((B, T, H))).astype(np.float32),
        gk=(-0.5 * rng.random((B, T, H, Kd))).astype(np.float32),
        gv=(-0.3 * rng.random((B, T, H, Vd))).astype(np.float32),
        beta=(0.1 + 0.8 * rng.random((B, T, H))).astype(np.float32),
        erase=(0.2 + 0.6 * rng.random((B, T, H, Kd))).astype(np.float32),
        write=(0.5 + 0.5 * rng.random((B, T, H, Vd))).astype(np.float32),
        a=(0.3 * f(B, T, H, Kd)), b=(0.3 * f(B, T, H, Kd)),
        s0=f(B, H, Kd, Vd))


def _gv_loop(q, k, v, gk, gv, s0):
    """float64 GLA with a value-side gate, query head j reading state j // G:
    S = exp(gk) S exp(gv) + k v^T, o = S^T (K^-0.5 q)."""
    q, k, v, gk, gv, S = (np.asarray(x, np.float64) for x in (q, k, v, gk, gv, s0))
    B, T, HQ, Kd = q.shape
    o = np.zeros((B, T, HQ, v.shape[-1]))
    S = S.copy()
    for t in range(T):
        S = np.exp(gk[:, t])[..., None] * S * np.exp(gv[:, t])[:, :, None, :] \
            + k[:, t, :, :, None] * v[:, t, :, None, :]
        o[:, t] = np.einsum("bjk,bjkv->bjv", Kd ** -0.5 * q[:, t],
                            np.repeat(S, G, axis=1))
    return o, S


# name -> (la.attention variant, its inputs, the reference on repeated inputs)
CASES = {
    "linear": ("linear", dict(), lambda x, s: ref.linear_attention(
        x["q"], _repeat(x["k"]), _repeat(x["v"]), initial_state=s)),
    "retention": ("retention", dict(), lambda x, s: ref.retention(
        x["q"], _repeat(x["k"]), _repeat(x["v"]),
        np.repeat(ref.retnet_log_decay(H), G), initial_state=s)),
    "mamba2": ("mamba2", dict(g="g"), lambda x, s: ref.simple_gla(
        x["q"], _repeat(x["k"]), _repeat(x["v"]), _repeat(x["g"]), initial_state=s)),
    "gla": ("gla", dict(g="gk"), lambda x, s: ref.gla(
        x["q"], _repeat(x["k"]), _repeat(x["v"]), _repeat(x["gk"]), initial_state=s)),
    "gla_gv": ("gla", dict(g="gk", gv="gv"), None),
    "deltanet": ("deltanet", dict(beta="beta"), lambda x, s: ref.delta_rule(
        x["q"], _repeat(x["k"]), _repeat(x["v"]), _repeat(x["beta"]), initial_state=s)),
    "gated_deltanet": ("gated_deltanet", dict(g="g", beta="beta"),
                       lambda x, s: ref.gated_delta_rule(
                           x["q"], _repeat(x["k"]), _repeat(x["v"]), _repeat(x["g"]),
                           _repeat(x["beta"]), initial_state=s)),
    "kda": ("kda", dict(g="gk", beta="beta"), lambda x, s: ref.kda(
        x["q"], _repeat(x["k"]), _repeat(x["v"]), _repeat(x["gk"]), _repeat(x["beta"]),
        initial_state=s)),
    "gated_deltanet2": ("gated_deltanet2", dict(g="gk", erase="erase", write="write"),
                        lambda x, s: ref.gated_delta_rule2(
                            x["q"], _repeat(x["k"]), _repeat(x["v"]), _repeat(x["gk"]),
                            _repeat(x["erase"]), _repeat(x["write"]), initial_state=s)),
    "rwkv7": ("rwkv7", dict(g="gk", a="a", b="b"), lambda x, s: ref.dplr(
        x["q"], _repeat(x["k"]), _repeat(x["v"]), _repeat(x["a"]), _repeat(x["b"]),
        _repeat(x["gk"]), initial_state=s)),
}


def _call(name, x, **kw):
    variant, named, _ = CASES[name]
    args = {role: x[key] for role, key in named.items()}
    return la.attention(variant, x["q"], x["k"], x["v"], **args,
                        initial_state=x["s0"], output_final_state=True, **kw)


def _expected(name, x):
    _, _, reference = CASES[name]
    if reference is None:
        return _gv_loop(x["q"], x["k"], x["v"], x["gk"], x["gv"], x["s0"])
    o, s = reference(x, np.repeat(x["s0"], G, axis=1))
    # Every state of a group is the same: the final state is the first.
    return o, s[:, ::G]


SHAPES = {
    "T<C": dict(B=1, T=5),
    "T%C!=0,B=2": dict(B=2, T=37),
    "K!=V": dict(B=1, T=32, Kd=8, Vd=24),
}


@pytest.mark.parametrize("sequential", [False, True], ids=["chunked", "tokens"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_repeated_reference(name, shape, sequential):
    x = _inputs(seed=len(name) + len(shape), **SHAPES[shape])
    o, s = _call(name, x, chunk_size=16, sequential=sequential)
    ref_o, ref_s = _expected(name, x)
    assert o.shape == ref_o.shape and s.shape == x["s0"].shape
    assert rel_rms(ref_o, o) <= 2e-5, rel_rms(ref_o, o)
    assert rel_rms(ref_s, s) <= 2e-5, rel_rms(ref_s, s)


@pytest.mark.parametrize("name", ["gated_deltanet", "gla"])
def test_bf16(name):
    x = _inputs(seed=11, B=1, T=40)
    o, s = _call(name, x, chunk_size=16, dtype="bf16")
    ref_o, ref_s = _expected(name, x)
    assert rel_rms(ref_o, np.asarray(o, np.float32)) <= 1e-2
    assert rel_rms(ref_s, s) <= 1e-2


def test_packed_sequences():
    x = _inputs(seed=4, B=1, T=30)
    cu = np.array([0, 7, 8, 30], np.int32)
    s0 = np.random.default_rng(5).standard_normal((3, H, K, V)).astype(np.float32)
    o, s = la.attention("gated_deltanet", x["q"], x["k"], x["v"], x["g"], x["beta"],
                        initial_state=s0, output_final_state=True, cu_seqlens=cu,
                        chunk_size=16)
    ref_o, ref_s = ref.gated_delta_rule(
        x["q"], _repeat(x["k"]), _repeat(x["v"]), _repeat(x["g"]), _repeat(x["beta"]),
        initial_state=np.repeat(s0, G, axis=1), cu_seqlens=cu)
    assert rel_rms(ref_o, o) <= 2e-5 and rel_rms(ref_s[:, ::G], s) <= 2e-5


@pytest.mark.parametrize("threads", [1, 2])
def test_the_state_work_is_not_repeated(threads):
    """One la.recurrence with HQ query heads and H-headed k, v, gates and
    state; the fused schedule's tasks are (batch, state head), not (batch,
    query head)."""
    x = _inputs(seed=1, B=1, T=64, Kd=16, Vd=16)
    args = (x["q"], x["k"], x["v"], x["g"], x["beta"])
    text = la.lower("gated_deltanet", *args, stage="recurrence", num_threads=threads)
    line = next(l for l in text.splitlines() if "la.recurrence" in l)
    # (The package's kernels take any B and T.)
    assert (f"tensor<?x?x{G * H}x16xf32>, tensor<?x?x{H}x16xf32>, "
            f"tensor<?x?x{H}x16xf32> -> tensor<?x?x{G * H}x16xf32>, "
            f"tensor<?x{H}x16x16xf32>") in line
    chunked = la.lower("gated_deltanet", *args, stage="chunked", num_threads=threads)
    # Tasks over (batch, state head); in each, one WY transform and one
    # state update per chunk, and the output of the G query heads.
    assert re.search(rf"scf\.forall \(%\w+, %\w+\) in \(%\w+, {H}\)", chunked)
    wy = next(l for l in chunked.splitlines() if "la.chunk_wy" in l)
    assert "-> tensor<1x1x64x1x16xf32>, tensor<1x1x64x1x16xf32>" in wy
    inter = next(l for l in chunked.splitlines() if "la.chunk_inter" in l)
    assert (f"tensor<1x1x64x{G}x16xf32>, tensor<1x1x1x16x16xf32>, "
            f"tensor<1x1x64x{G}x16xf32> -> tensor<1x1x64x{G}x16xf32>") in inter


@pytest.mark.parametrize("sequential", [False, True], ids=["chunked", "tokens"])
def test_normalizer(sequential):
    """The normaliser's z rides in each state once (a value column); each
    query head divides by its own z . q."""
    x = _inputs(seed=2, B=2, T=21)
    # Positive features, as the normaliser is meant for.
    x = dict(x, q=np.abs(x["q"]), k=np.abs(x["k"]), s0=np.abs(x["s0"]))
    o, s = la.attention("linear", x["q"], x["k"], x["v"], initial_state=x["s0"],
                        output_final_state=True, normalize=True, chunk_size=8,
                        sequential=sequential)
    ref_o, ref_s = ref.linear_attention(x["q"], _repeat(x["k"]), _repeat(x["v"]),
                                        initial_state=np.repeat(x["s0"], G, axis=1),
                                        normalizer=True)
    assert rel_rms(ref_o, o) <= 2e-5 and rel_rms(ref_s[:, ::G], s) <= 2e-5
    text = la.lower("linear", x["q"], x["k"], x["v"], normalize=True, stage="recurrence")
    line = next(l for l in text.splitlines() if "la.recurrence" in l)
    assert f"tensor<?x?x{G * H}x16xf32>, tensor<?x?x{H}x16xf32>" in line


_RECURRENCE = """
func.func @attention(%q: tensor<1x{T}x{HQ}x{K}xf32>, %k: tensor<1x{T}x{H}x{K}xf32>,
    %v: tensor<1x{T}x{H}x{V}xf32>, %g: tensor<1x{T}x{H}xf32>, %beta: tensor<1x{T}x{H}xf32>,
    %s0: tensor<1x{H}x{K}x{V}xf32>) -> (tensor<1x{T}x{HQ}x{V}xf32>, tensor<1x{H}x{K}x{V}xf32>) {{
  %oi = tensor.empty() : tensor<1x{T}x{HQ}x{V}xf32>
  %o, %s = la.recurrence decay(scalar) low_rank(delta) %q, %k, %v
      g(%g : tensor<1x{T}x{H}xf32>) beta(%beta : tensor<1x{T}x{H}xf32>)
      outs(%oi, %s0 : tensor<1x{T}x{HQ}x{V}xf32>, tensor<1x{H}x{K}x{V}xf32>) {{scale = 0.25 : f32}}
      : tensor<1x{T}x{HQ}x{K}xf32>, tensor<1x{T}x{H}x{K}xf32>, tensor<1x{T}x{H}x{V}xf32>
      -> tensor<1x{T}x{HQ}x{V}xf32>, tensor<1x{H}x{K}x{V}xf32>
  return %o, %s : tensor<1x{T}x{HQ}x{V}xf32>, tensor<1x{H}x{K}x{V}xf32>
}}
"""


@pytest.mark.skipif(__import__("la.runner").runner.find_la_run() is None,
                    reason="la-run is not built")
@pytest.mark.parametrize("target", ["cpu", "gpu-emulator", "gpu-emulator-chunk-parallel"])
def test_recurrence_on_the_gpu_emulator(tmp_path, target):
    """An la.recurrence with grouped query heads through la-run: the CPU
    pipeline and the GPU's fused schedule (la-lower-to-nvvm, its kernels run
    by the emulator) match the reference; the chunk-parallel schedule
    refuses it with a clear error."""
    from la import runner
    from la import testing as lt

    T = 40
    x = _inputs(seed=9, B=1, T=T)
    text = _RECURRENCE.format(T=T, HQ=G * H, H=H, K=K, V=V)
    path = tmp_path / "grouped.mlir"
    path.write_text(text)
    arrays = [x[n] for n in ("q", "k", "v", "g", "beta", "s0")]
    flags = ["--chunk-size=16", "--target=" + target.replace("-chunk-parallel", "")]
    if target.endswith("chunk-parallel"):
        import subprocess
        proc = subprocess.run([runner.find_la_run(), str(path), "--chunk-parallel",
                               "--random-seed=1", *flags], capture_output=True, text=True)
        assert proc.returncode != 0
        assert "the chunk-parallel GPU schedule does not distribute yet" in proc.stderr
        return
    o, s = lt.run_la_run_file(runner.find_la_run(), str(path), arrays, str(tmp_path),
                              flags=flags)
    ref_o, ref_s = ref.gated_delta_rule(
        x["q"], _repeat(x["k"]), _repeat(x["v"]), _repeat(x["g"]), _repeat(x["beta"]),
        scale=0.25, initial_state=np.repeat(x["s0"], G, axis=1))
    assert rel_rms(ref_o, o) <= 2e-5 and rel_rms(ref_s[:, ::G], s) <= 2e-5


def _attention_module(variant, named, T, dims, normalize=False):
    """la.attention of `variant` with grouped query heads, its operands
    q, k, v, the gate operands `named` ({role: (name, shape)}) and the
    initial state, returning o and the final state."""
    HQ, Hk, Kd, Vd = dims
    t = lambda *s: "tensor<" + "x".join(str(d) for d in s) + "xf32>"
    args = [("q", t(1, T, HQ, Kd)), ("k", t(1, T, Hk, Kd)), ("v", t(1, T, Hk, Vd))]
    args += [(role, t(1, T, *shape)) for role, shape in named.items()]
    args.append(("s0", t(1, Hk, Kd, Vd)))
    o_t, s_t = t(1, T, HQ, Vd), t(1, Hk, Kd, Vd)
    operands = "".join(f" {role}(%{role} : {ty})" for role, ty in args[3:-1])
    attrs = "{normalizer, output_final_state}" if normalize else "{output_final_state}"
    return (f"func.func @attention({', '.join(f'%{n}: {ty}' for n, ty in args)}) "
            f"-> ({o_t}, {s_t}) {{\n"
            f"  %o, %s = la.attention {variant} %q, %k, %v{operands} "
            f"initial_state(%s0 : {s_t}) {attrs} : {args[0][1]}, {args[1][1]}, "
            f"{args[2][1]} -> {o_t}, {s_t}\n"
            f"  return %o, %s : {o_t}, {s_t}\n}}\n")


@pytest.mark.skipif(__import__("la.runner").runner.find_la_run() is None,
                    reason="la-run is not built")
@pytest.mark.parametrize("name", ["gated_deltanet", "gla", "kda", "mamba2", "linear_normalized"])
def test_attention_on_the_gpu_emulator(tmp_path, name):
    """la.attention with grouped query heads through la-lower-to-nvvm's fused
    schedule (which keeps the groups; ptxas accepts the kernels for sm_90a
    when it is installed), run by the GPU emulator, against the reference
    on repeated inputs; T = 40 is not a multiple of the chunk."""
    from la import runner
    from la import testing as lt

    T = 40
    x = _inputs(seed=13, B=1, T=T)
    if name == "linear_normalized":
        # Positive features, as the normaliser is meant for (denominators
        # away from zero).
        x = dict(x, q=np.abs(x["q"]), k=np.abs(x["k"]), s0=np.abs(x["s0"]))
    roles = {"gated_deltanet": {"g": ("g", (H,)), "beta": ("beta", (H,))},
             "gla": {"g": ("gk", (H, K))}, "kda": {"g": ("gk", (H, K)), "beta": ("beta", (H,))},
             "mamba2": {"g": ("g", (H,))}, "linear_normalized": {}}[name]
    variant = "linear" if name == "linear_normalized" else name
    text = _attention_module(variant, {r: shape for r, (_, shape) in roles.items()}, T,
                             (G * H, H, K, V), normalize=name == "linear_normalized")
    path = tmp_path / "grouped.mlir"
    path.write_text(text)
    arrays = [x["q"], x["k"], x["v"]] + [x[key] for key, _ in roles.values()] + [x["s0"]]
    o, s = lt.run_la_run_file(runner.find_la_run(), str(path), arrays, str(tmp_path),
                              flags=["--target=gpu-emulator", "--chunk-size=16"])
    rep = {r: _repeat(x[key]) for r, (key, _) in roles.items()}
    s0 = np.repeat(x["s0"], G, axis=1)
    if name == "linear_normalized":
        ref_o, ref_s = ref.linear_attention(x["q"], _repeat(x["k"]), _repeat(x["v"]),
                                            initial_state=s0, normalizer=True)
    else:
        fn = {"gated_deltanet": lambda: ref.gated_delta_rule(
                  x["q"], _repeat(x["k"]), _repeat(x["v"]), rep["g"], rep["beta"], initial_state=s0),
              "gla": lambda: ref.gla(x["q"], _repeat(x["k"]), _repeat(x["v"]), rep["g"],
                                     initial_state=s0),
              "kda": lambda: ref.kda(x["q"], _repeat(x["k"]), _repeat(x["v"]), rep["g"],
                                     rep["beta"], initial_state=s0),
              "mamba2": lambda: ref.simple_gla(x["q"], _repeat(x["k"]), _repeat(x["v"]),
                                               rep["g"], initial_state=s0)}[name]
        ref_o, ref_s = fn()
    assert rel_rms(ref_o, o) <= 2e-5, rel_rms(ref_o, o)
    assert rel_rms(ref_s[:, ::G], s) <= 2e-5
