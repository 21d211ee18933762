"""Grouped query heads (ONNX's LinearAttention GQA: q with HQ = G * H heads
over k's and v's H heads, query head h reading the state of head h // G):
la.attention takes them and la-lower-to-recurrence repeats the key and value
side per query head. Forward and gradients against a float64 token loop
written here in torch (its gradients by torch autograd), chunked and token
by token, with an initial state and packed sequences."""

import numpy as np
import pytest

import la
from la.testing import rel_rms

torch = pytest.importorskip("torch")

B, T, H, G, K, V = 2, 21, 2, 2, 8, 6


def _inputs(seed, B=B, T=T):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, G * H, K, generator=gen)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=gen), dim=-1)
    v = torch.randn(B, T, H, V, generator=gen)
    g = -0.4 * torch.rand(B, T, H, generator=gen)
    gk = -0.4 * torch.rand(B, T, H, K, generator=gen)
    beta = 0.1 + 0.8 * torch.rand(B, T, H, generator=gen)
    s0 = torch.randn(B, H, K, V, generator=gen)
    return dict(q=q, k=k, v=v, g=g, gk=gk, beta=beta, s0=s0)


def _loop(q, k, v, gate, beta, s0, cu=None):
    """float64: per sequence and key/value head h, S = alpha (S - beta k (S^T
    k)^T) + beta k v^T (without beta: S = alpha S + k v^T), and query head j
    reads S of head j // G: o = S^T (K^-0.5 q)."""
    q, k, v, gate, s0 = (x.double() for x in (q, k, v, gate, s0))
    beta = None if beta is None else beta.double()
    Bn, Tn, HQ, Kd = q.shape
    group = HQ // k.shape[2]
    spans = [(n, n, 0, Tn) for n in range(Bn)] if cu is None else \
        [(n, 0, a, b) for n, (a, b) in enumerate(zip(cu[:-1], cu[1:]))]
    outputs = torch.zeros(Bn, Tn, HQ, v.shape[3], dtype=torch.float64)
    states = []
    for n, row, a, b in spans:
        S = s0[n]
        for t in range(a, b):
            alpha = torch.exp(gate[row, t])
            alpha = alpha[:, None, None] if alpha.dim() == 1 else alpha[..., None]
            kt, vt = k[row, t], v[row, t]
            if beta is None:
                S = alpha * S + kt[..., None] * vt[:, None, :]
            else:
                decayed = alpha * S
                read = torch.einsum("hk,hkv->hv", kt, decayed)
                S = decayed + beta[row, t][:, None, None] * kt[..., None] * \
                    (vt - read)[:, None, :]
            rows = [S[j // group] for j in range(HQ)]
            outputs[row, t] = torch.einsum("hk,hkv->hv", Kd ** -0.5 * q[row, t],
                                           torch.stack(rows))
        states.append(S)
    return outputs, torch.stack(states)


CASES = {
    "gated_deltanet": (lambda x, **kw: la.gated_delta_rule(
        x["q"], x["k"], x["v"], x["g"], x["beta"], **kw), "g", "beta"),
    "gla": (lambda x, **kw: la.gla(x["q"], x["k"], x["v"], x["gk"], **kw), "gk", None),
}


@pytest.mark.parametrize("sequential", [False, True], ids=["chunked", "tokens"])
@pytest.mark.parametrize("variant", sorted(CASES))
def test_forward_and_gradients(variant, sequential):
    call, gate, beta = CASES[variant]
    x = _inputs(seed=len(variant))
    leaves = {n: x[n].clone().requires_grad_() for n in ("q", "k", "v", gate, "s0")
              + ((beta,) if beta else ())}
    o, s = call(dict(x, **leaves), initial_state=leaves["s0"], output_final_state=True,
                chunk_size=8, sequential=sequential)
    assert o.shape == (B, T, G * H, V) and s.shape == (B, H, K, V)
    ref_leaves = {n: x[n].double().clone().requires_grad_() for n in leaves}
    ref_o, ref_s = _loop(ref_leaves["q"], ref_leaves["k"], ref_leaves["v"],
                         ref_leaves[gate], ref_leaves[beta] if beta else None,
                         ref_leaves["s0"])
    assert rel_rms(ref_o.detach().numpy(), o.detach().numpy()) <= 1e-5
    assert rel_rms(ref_s.detach().numpy(), s.detach().numpy()) <= 1e-5
    gen = torch.Generator().manual_seed(7)
    w_o, w_s = torch.randn(o.shape, generator=gen), torch.randn(s.shape, generator=gen)
    ((o * w_o).sum() + (s * w_s).sum()).backward()
    ((ref_o * w_o.double()).sum() + (ref_s * w_s.double()).sum()).backward()
    for name, leaf in leaves.items():
        bound = 1e-4 if name in (gate, beta) else 1e-5
        err = rel_rms(ref_leaves[name].grad.numpy(), leaf.grad.numpy())
        assert err <= bound, (name, err)


def test_packed_sequences_and_numpy():
    """cu_seqlens with grouped query heads, NumPy in and out."""
    x = _inputs(seed=3, B=1, T=23)
    cu = [0, 9, 10, 23]
    s0 = torch.randn(3, H, K, V, generator=torch.Generator().manual_seed(4))
    o, s = la.gated_delta_rule(*(x[n].numpy() for n in ("q", "k", "v", "g", "beta")),
                               initial_state=s0.numpy(), output_final_state=True,
                               cu_seqlens=np.array(cu, np.int32), chunk_size=8)
    ref_o, ref_s = _loop(x["q"], x["k"], x["v"], x["g"], x["beta"], s0, cu)
    assert rel_rms(ref_o.numpy(), o) <= 1e-5 and rel_rms(ref_s.numpy(), s) <= 1e-5


def test_errors():
    x = _inputs(seed=5)
    q3 = torch.randn(B, T, 3, K)
    with pytest.raises(ValueError, match=r"the shape of q"):
        la.gla(q3, x["k"], x["v"], x["gk"])
    v4 = torch.randn(B, T, 4, V)
    with pytest.raises(ValueError, match=r"grouped query heads.*HV = H = 2"):
        la.gla(x["q"], x["k"], v4, x["gk"])
