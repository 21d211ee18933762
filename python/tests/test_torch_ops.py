"""la's layer functions as PyTorch custom operators: torch.library's own
checks of the operator (schema, fake kernel, autograd registration),
torch.compile(fullgraph=True) and torch.export of models that call la
(equal to eager, forward and backward), meta tensors, the thread count, and
la's LLVM next to triton's in one process (either import order).

The expected values are la's eager results, which test_attention_grad and
test_package check against the fp64 references; here what is checked is
that the traced and threaded paths give the same numbers."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import la
from la import ops

torch = pytest.importorskip("torch")

_PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHUNK = 4


def _leaves(B=1, T=11, H=1, HV=2, K=4, V=4, seed=0, grad=True):
    gen = torch.Generator().manual_seed(seed)

    def leaf(*shape, kind="normal"):
        if kind == "gate":
            x = -0.3 * torch.rand(*shape, generator=gen)
        elif kind == "unit":
            x = 0.1 + 0.8 * torch.rand(*shape, generator=gen)
        else:
            x = torch.randn(*shape, generator=gen) / (2 if kind == "key" else 1)
        return x.requires_grad_(grad)

    return dict(q=leaf(B, T, H, K), k=leaf(B, T, H, K, kind="key"), v=leaf(B, T, HV, V),
                g=leaf(B, T, H, K, kind="gate"), scalar_g=leaf(B, T, H, kind="gate"),
                beta=leaf(B, T, H, kind="unit"), s0=leaf(B, HV, K, V))


#: one call per variant family, on the leaves of _leaves().
CASES = {
    "gla": lambda t, **kw: la.gla(t["q"], t["k"], t["v"], t["g"], initial_state=t["s0"],
                                  output_final_state=True, chunk_size=CHUNK, **kw),
    "simple_gla": lambda t, **kw: la.simple_gla(t["q"], t["k"], t["v"], t["scalar_g"],
                                                output_final_state=True, chunk_size=CHUNK,
                                                **kw),
    "kda": lambda t, **kw: la.kda(t["q"], t["k"], t["v"], t["g"], t["beta"],
                                  initial_state=t["s0"], output_final_state=True,
                                  use_qk_l2norm_in_kernel=True, chunk_size=CHUNK, **kw),
    "gated_delta_rule": lambda t, **kw: la.gated_delta_rule(
        t["q"], t["k"], t["v"], t["scalar_g"], t["beta"], use_qk_l2norm_in_kernel=True,
        chunk_size=CHUNK, **kw),
}


def _loss(o, s):
    return (o.square().sum() + (0 if s is None else s.sin().sum()))


def _eager(case, t):
    o, s = CASES[case](t)
    grads = torch.autograd.grad(_loss(o, s), [x for x in t.values() if x.requires_grad],
                                allow_unused=True)
    return o.detach(), s, grads


# --------------------------------------------------------------------------
# the operator itself
# --------------------------------------------------------------------------

def _operator_args(variant, **given):
    """The operator's positional arguments (its schema's order:
    la._torch_ops._names()) with the options' defaults, `given` by name."""
    from la import _torch_ops
    defaults = dict(scale=None, output_final_state=True, normalize=False, eps=None,
                    qk_l2norm=False, allow_neg_eigval=False, chunk_size=CHUNK,
                    sequential=False, dtype=None, num_threads=1, erase_read_key=False,
                    reverse=False, gate_activation=None, gate_lower_bound=None,
                    beta_sigmoid=False)
    values = dict(defaults, variant=variant, **given)
    return tuple(values.get(name) for name in _torch_ops._names())


def test_opcheck():
    """torch.library.opcheck: the schema, the fake kernel against the real
    one, the autograd registration and AOT dispatch with dynamic shapes."""
    t = _leaves()
    qkv = dict(q=t["q"], k=t["k"], v=t["v"])
    arguments = [
        _operator_args("kda", **qkv, g=t["g"], beta=t["beta"], initial_state=t["s0"],
                       qk_l2norm=True),
        # reverse: backward in time
        _operator_args("mamba2", **qkv, g=t["scalar_g"], scale=0.5, output_final_state=False,
                       num_threads=0, reverse=True),
        _operator_args("linear", **qkv, cu_seqlens=torch.tensor([0, 4, 11]), normalize=True,
                       eps=1e-3, sequential=True),
        # the dplr rule's a and b (RWKV-7)
        _operator_args("rwkv7", **qkv, g=t["g"], a=(0.3 * t["k"].detach()).requires_grad_(),
                       b=(0.1 * t["k"].detach()).requires_grad_(), initial_state=t["s0"],
                       scale=1.0),
        # fla's value-side gate gv (GLA's gk and gv)
        _operator_args("gla", **qkv, g=t["g"], gv=(-0.2 * t["v"].detach().abs()).requires_grad_(),
                       initial_state=t["s0"]),
        # in-kernel activations: A_log, dt_bias (flat [H * K]) and a sigmoid beta
        _operator_args("kda", **qkv, g=t["g"].detach().clone().requires_grad_(),
                       beta=t["beta"], initial_state=t["s0"],
                       A_log=torch.zeros(t["g"].shape[2], requires_grad=True),
                       dt_bias=torch.full((t["g"].shape[2] * t["g"].shape[3],), -1.0,
                                          requires_grad=True),
                       gate_activation="softplus", beta_sigmoid=True),
    ]
    for args in arguments:
        result = torch.library.opcheck(torch.ops.la.attention.default, args)
        assert set(result.values()) == {"SUCCESS"}, (args[0], result)


def test_meta_tensors_give_shapes():
    meta = dict(device="meta")
    q = torch.empty(2, 13, 2, 8, **meta)
    v = torch.empty(2, 13, 4, 6, **meta)
    o, s = la.gla(q, q, v, torch.empty(2, 13, 2, 8, **meta), output_final_state=True)
    assert (o.device.type, o.shape, o.dtype) == ("meta", (2, 13, 4, 6), torch.float32)
    assert (s.shape, s.dtype) == ((2, 4, 8, 6), torch.float32)
    o, s = la.linear_attention(q.bfloat16(), q.bfloat16(), v.bfloat16())
    assert o.dtype == torch.bfloat16 and s is None
    # Packed sequences: one state per sequence of cu_seqlens.
    q1, v1 = q[:1], v[:1]
    _, s = la.simple_gla(q1, q1, v1, torch.empty(1, 13, 2, **meta), output_final_state=True,
                         cu_seqlens=torch.tensor([0, 3, 9, 13], **meta))
    assert s.shape == (3, 4, 8, 6)
    _, s = la.delta_rule(q1, q1, v1, torch.empty(1, 13, 2, **meta), dtype="f16",
                         output_final_state=True)
    assert s.shape == (1, 4, 8, 6)


def test_log_decay_with_grad_raises():
    t = _leaves(grad=False)
    decay = torch.tensor([-0.1], requires_grad=True)
    with pytest.raises(la.LaError, match="log_decay is compiled into the kernel"):
        la.retention(t["q"], t["k"], t["v"], log_decay=decay)
    o, _ = la.retention(t["q"], t["k"], t["v"], log_decay=decay.detach())
    expected, _ = la.retention(t["q"].numpy(), t["k"].numpy(), t["v"].numpy(),
                               log_decay=np.array([-0.1], np.float32))
    np.testing.assert_array_equal(o.numpy(), expected)


# --------------------------------------------------------------------------
# torch.compile and torch.export
# --------------------------------------------------------------------------

@pytest.mark.parametrize("case", sorted(CASES))
def test_compile_fullgraph_forward_and_backward(case):
    """A whole training step traced by dynamo without a graph break (AOT
    autograd with the operator's fake kernels): the same outputs and
    gradients as eager."""
    t = _leaves(seed=3)
    o_eager, s_eager, grads_eager = _eager(case, t)

    def step(**t):
        o, s = CASES[case](t)
        return o, _loss(o, s)

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    o, loss = compiled(**t)
    grads = torch.autograd.grad(loss, [x for x in t.values() if x.requires_grad],
                                allow_unused=True)
    np.testing.assert_array_equal(o.detach().numpy(), o_eager.numpy())
    for got, want in zip(grads, grads_eager):
        assert (got is None) == (want is None)
        if got is not None:
            np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_compile_inductor_dynamic_lengths():
    """The default backend (inductor) around the operator, with dynamic
    shapes: a second sequence length runs without a new trace."""
    torch._dynamo.reset()
    counts = {"traces": 0}

    def count_backend(gm, example_inputs):
        counts["traces"] += 1
        from torch._inductor.compile_fx import compile_fx
        return compile_fx(gm, example_inputs)

    def layer(x, wq, wk, wv, wg):
        B, T, _ = x.shape
        q = (x @ wq).view(B, T, 2, 4)
        k = torch.nn.functional.normalize((x @ wk).view(B, T, 2, 4), dim=-1)
        v = (x @ wv).view(B, T, 2, 4)
        g = torch.nn.functional.logsigmoid(x @ wg).view(B, T, 2, 4) / 16
        o, _ = la.gla(q, k, v, g, chunk_size=CHUNK)
        return x + o.reshape(B, T, 8)

    gen = torch.Generator().manual_seed(5)
    weights = [torch.randn(8, 8, generator=gen) / 3 for _ in range(4)]
    compiled = torch.compile(layer, fullgraph=True, dynamic=True, backend=count_backend)
    for T in (9, 14):
        x = torch.randn(1, T, 8, generator=gen)
        np.testing.assert_allclose(compiled(x, *weights).numpy(), layer(x, *weights).numpy(),
                                   rtol=1e-5, atol=1e-5)
    assert counts["traces"] == 1


def test_export():
    class Block(torch.nn.Module):
        def forward(self, q, k, v, g, beta):
            o, _ = la.gated_delta_rule(q, k, v, g, beta, use_qk_l2norm_in_kernel=True,
                                       chunk_size=CHUNK)
            return o

    t = _leaves(seed=7, grad=False)
    args = (t["q"], t["k"], t["v"], t["scalar_g"], t["beta"])
    program = torch.export.export(Block(), args)
    targets = [node.target for node in program.graph.nodes if node.op == "call_function"]
    assert torch.ops.la.attention.default in targets
    np.testing.assert_array_equal(program.module()(*args).numpy(), Block()(*args).numpy())


def _run_python(code):
    env = dict(os.environ, PYTHONPATH=_PYTHON_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=600)


def test_compile_when_la_is_imported_before_torch():
    """isort's order (la, then torch): the operators are registered right
    after `import torch`, so the first la call can be inside a trace."""
    proc = _run_python("""
        import la
        import torch
        f = torch.compile(lambda q: la.linear_attention(q, q, q)[0] + 1, fullgraph=True,
                          backend="aot_eager")
        q = torch.ones(1, 5, 1, 4)
        assert torch.equal(f(q), la.linear_attention(q, q, q)[0] + 1)
        print("ok")
    """)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-3000:]


@pytest.mark.parametrize("first", ["la", "triton"])
def test_la_and_triton_in_one_process(first):
    """Two LLVMs in one process: la's (Debian's libLLVM, loaded RTLD_LOCAL)
    and triton's (linked into libtriton.so, which exports its LLVM symbols).
    la once loaded its library RTLD_GLOBAL, and `import triton` after an la
    compile died in libtriton's static initialisers (SIGSEGV)."""
    pytest.importorskip("triton")
    la_call = """
        import numpy as np, la
        x = np.ones((1, 5, 1, 4), np.float32)
        o, _ = la.linear_attention(x, x, x)
        assert np.isfinite(o).all()
    """
    triton_import = """
        import triton, torch._dynamo
    """
    parts = [la_call, triton_import] if first == "la" else [triton_import, la_call]
    proc = _run_python("\n".join(textwrap.dedent(p) for p in parts) + "\nprint('ok')\n")
    assert proc.returncode == 0 and "ok" in proc.stdout, (proc.returncode, proc.stderr[-3000:])


# --------------------------------------------------------------------------
# threads
# --------------------------------------------------------------------------

@pytest.mark.parametrize("case", sorted(CASES))
def test_threads_give_the_same_numbers(case):
    """Two threads (OpenMP regions over batch and heads) against one, forward
    and backward: each thread computes whole (batch, head) slices, so the
    numbers are the same bit for bit."""
    t = _leaves(B=2, H=2, HV=4, seed=11)
    results = []
    for threads in (1, 2):
        o, s = CASES[case](t, num_threads=threads)
        grads = torch.autograd.grad(_loss(o, s), [x for x in t.values() if x.requires_grad],
                                    allow_unused=True)
        results.append((o.detach(), grads))
    np.testing.assert_array_equal(results[0][0].numpy(), results[1][0].numpy())
    for one, two in zip(results[0][1], results[1][1]):
        if one is not None:
            np.testing.assert_array_equal(one.numpy(), two.numpy())


def test_thread_count_defaults_and_errors():
    x = np.ones((1, 6, 1, 4), np.float32)
    assert "parallel" not in ops._prepare("linear", x, x, x).pipeline
    assert "parallel=1 threads=3" in ops._prepare("linear", x, x, x, num_threads=3).pipeline
    threaded = la.lower(la.linear_attention, x, x, x, stage="llvm-ir", num_threads=2)
    assert "__kmpc_fork_call" in threaded
    assert "__kmpc_fork_call" not in la.lower(la.linear_attention, x, x, x, stage="llvm-ir")
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(3)
        t = torch.from_numpy(x)
        assert "parallel=1 threads=3" in ops._prepare("linear", t, t, t).pipeline
    finally:
        torch.set_num_threads(previous)
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="num_threads must be a positive integer"):
            la.linear_attention(x, x, x, num_threads=bad)


# --------------------------------------------------------------------------
# la.attention's checkpoints: torch.ops.la.attention_checkpoints
# --------------------------------------------------------------------------

def test_checkpoints_operator_opcheck():
    """The checkpoints operator's schema and fake kernel against the real one
    (no autograd: it is registered without one)."""
    t = _leaves(grad=False)
    qkv = dict(q=t["q"], k=t["k"], v=t["v"])
    for given, every in ((dict(g=t["g"], initial_state=t["s0"]), 3),
                         (dict(g=t["g"], output_final_state=False), 20)):
        args = _operator_args("gla", **qkv, **given) + (every,)
        result = torch.library.opcheck(torch.ops.la.attention_checkpoints.default, args,
                                       test_utils=("test_schema", "test_faketensor"))
        assert set(result.values()) == {"SUCCESS"}, result


def test_checkpoints_meta_and_compile():
    """la.attention(checkpoint_every=n) on meta tensors gives the shapes; under
    torch.compile(fullgraph=True) it gives eager's numbers."""
    meta = dict(device="meta")
    q = torch.empty(2, 13, 2, 8, **meta)
    v = torch.empty(2, 13, 4, 6, **meta)
    o, s, c = la.attention("gla", q, q, v, torch.empty(2, 13, 2, 8, **meta),
                           output_final_state=True, checkpoint_every=4)
    assert (o.shape, s.shape, c.shape) == ((2, 13, 4, 6), (2, 4, 8, 6), (2, 3, 4, 8, 6))
    t = _leaves(grad=False)

    def prefill(q, k, v, g, s0):
        o, s, c = la.attention("gla", q, k, v, g, initial_state=s0, output_final_state=True,
                               checkpoint_every=4, chunk_size=CHUNK)
        return o * 2, s, c

    eager = prefill(t["q"], t["k"], t["v"], t["g"], t["s0"])
    compiled = torch.compile(prefill, fullgraph=True, backend="aot_eager")
    traced = compiled(t["q"], t["k"], t["v"], t["g"], t["s0"])
    assert traced[2].shape == (1, 2, 2, 4, 4)
    for got, want in zip(traced, eager):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    # the state after 8 tokens, from one call over them
    _, after_8 = la.gla(t["q"][:, :8], t["k"][:, :8], t["v"][:, :8], t["g"][:, :8],
                        initial_state=t["s0"], output_final_state=True, chunk_size=CHUNK)
    np.testing.assert_allclose(eager[2][:, 1].numpy(), after_8.detach().numpy(), rtol=1e-5,
                               atol=1e-6)


def test_checkpoints_have_no_gradient():
    t = _leaves()
    with pytest.raises(la.LaError, match="checkpoint_every has no gradient"):
        la.attention("gla", t["q"], t["k"], t["v"], t["g"], checkpoint_every=4)
    with torch.no_grad():
        o, s, c = la.attention("gla", t["q"], t["k"], t["v"], t["g"], checkpoint_every=4)
    assert s is None and c.shape == (1, 2, 2, 4, 4)


def test_packed_checkpoints_compile_with_a_data_dependent_size():
    """With cu_seqlens the number of checkpoints depends on the offsets' values:
    the fake kernel makes it a dynamic size, which dynamo traces when it
    captures data-dependent output shapes (meta tensors cannot: torch says
    so)."""
    x = torch.randn(1, 13, 2, 8, generator=torch.Generator().manual_seed(9))
    g = -torch.rand(1, 13, 2, 8, generator=torch.Generator().manual_seed(10)) / 4
    cu = torch.tensor([0, 5, 13], dtype=torch.int32)

    def prefill(q, k, v, g, cu):
        return la.attention("gla", q, k, v, g, cu_seqlens=cu, output_final_state=True,
                            checkpoint_every=4, chunk_size=CHUNK)

    eager = prefill(x, x, x, g, cu)
    assert eager[2].shape == (1, 3, 2, 8, 8)  # 5 // 4 + 8 // 4
    torch._dynamo.reset()
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        traced = torch.compile(prefill, fullgraph=True, backend="aot_eager")(x, x, x, g, cu)
    for got, want in zip(traced, eager):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    meta = torch.empty(1, 13, 2, 8, device="meta")
    with pytest.raises(RuntimeError, match="data-dependent shape"):
        la.attention("gla", meta, meta, meta, meta, checkpoint_every=4,
                     cu_seqlens=torch.tensor([0, 5, 13], device="meta"))
