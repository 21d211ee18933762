#!/usr/bin/env python3
"""CPU benchmark of the family members that enter la as compositions of la
calls (``docs/family.md``), against their base variant and OpenBLAS sgemm,
all measured in one run.

A program, not a test. For each member and shape it prints the median time
of ``--repeat`` calls through the Python package (NumPy inputs, one thread,
after a warm-up call that compiles the kernels), the time of the base
variant's one la call on the same q, k, v (the composition's cost), and
GFLOP/s over the FLOPs of the la calls the composition makes, each counted
as :func:`bench_cpu.chunked_flops` counts a forward (so the ratio to the
same-run sgemm says how well those calls run; the composition's NumPy work
between them, the masks, the gathers and the level-0 terms, is not counted):

* log-linear attention over Mamba-2 and over Gated DeltaNet
  (``la.family.log_linear_attention``): the levels inside aligned blocks of
  64 tokens from one la call over those blocks with one-hot values (64
  columns: each block's attention matrix; the masked product with v that
  follows is NumPy, not counted), then one la call per Fenwick level
  ``l >= 7`` over blocks of ``2^l`` tokens, all T tokens each;
* Mixture-of-Memories (``la.family.mixture_of_memories``): ``--memories``
  Gated DeltaNet memories, top-2 routing: one la call over packed
  sequences, each memory's routed tokens (2T tokens in all; its FLOPs
  counted as Gated DeltaNet's forward over them);
* Gated DeltaProduct (``la.fla.chunk_gated_delta_product``): the delta rule
  over ``T * n`` tokens, ``n = 2``;
* VLA (``la.family.variational_linear_attention``): the Sherman-Morrison
  penalty pass in NumPy (blocked between refreshes), then one la call of
  the dplr rule
  (its base: that call alone, on the same write directions);
* HOLA (``la.family.hola_attention``): two Gated DeltaNet calls (the read,
  and the residuals from the recurrence shifted one token) and the blocked
  softmax over the cache of 64 and blocks of 256 in NumPy;
* Momentum DeltaNet (``la.family.momentum_delta_rule``): la's dplr rule on
  the stacked ``2K x V`` state, one call per segment (alpha in [0.9, 1], mu
  in [0.74, 1]: segments of a few tokens); its FLOPs counted as the dplr
  rule's chunked forward over the 2K rows (short segments do less);
* LoLCATs' sliding-window hybrid (``la.family.sliding_window_hybrid``, for
  NumPy inputs one la kernel: the op ``la.sliding_window_hybrid``), window
  64 over Hedgehog features (F = K): its FLOPs counted as linear
  attention's chunked forward over F features and V + 1 columns plus the
  window's block products (each block of 64 queries against its own and
  the previous block's keys, K deep, and values, V wide); its base: linear
  attention on the features alone;
* the same hybrid with Hedgehog's map inside its kernel
  (``hedgehog_hybrid``: ``la.ops.HedgehogMap`` weights instead of
  features, ``F / 2 = K / 2`` columns, with biases): its FLOPs those of the
  hybrid plus the two maps' contractions; its base: the hybrid on features
  computed beforehand (the map's own time not counted there).

Usage::

    python3 bench/bench_family.py                  # (1,4096,8,128,128)
    python3 bench/bench_family.py --quick          # a small shape (seconds)
"""

import argparse
import os
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(_HERE)
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(_REPO, "python"))

import bench_cpu  # noqa: E402  (sgemm, machine facts, FLOP count, timing)

MEMBERS = ("log_linear_mamba2", "log_linear_gated_deltanet", "mixture_of_memories",
           "gated_delta_product", "variational_linear_attention", "hola",
           "momentum_delta_rule", "sliding_window_hybrid", "hedgehog_hybrid")
FULL_SHAPE = (1, 4096, 8, 128, 128)
QUICK_SHAPE = (1, 512, 2, 64, 64)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--members", default=",".join(MEMBERS))
    p.add_argument("--shape", default=None, help="BxTxHxKxV")
    p.add_argument("--quick", action="store_true", help="a small shape")
    p.add_argument("--repeat", type=int, default=3, help="timed calls (median)")
    p.add_argument("--chunk-size", type=int, default=64)
    p.add_argument("--memories", type=int, default=4, help="Mixture-of-Memories' M")
    p.add_argument("--threads", type=int, default=1, help="sgemm's threads (la runs on one)")
    p.add_argument("--sgemm-seconds", type=float, default=1.0)
    return p.parse_args(argv)


def _levels(T):
    import numpy as np
    return int(np.ceil(np.log2(T))) + 1 if T > 1 else 1


def _member(name, B, T, H, K, V, C, memories, rng):
    """(composition, base variant call, FLOPs of the composition's la calls,
    base variant name) for one member."""
    import numpy as np
    import la
    from la import family, fla

    def normal(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    def unit(x):
        return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)

    def log_gate(*shape):
        return (-np.logaddexp(0.0, -rng.standard_normal(shape)) / 16).astype(np.float32)

    q, k, v = normal(B, T, H, K), unit(normal(B, T, H, K)), normal(B, T, H, V)
    flops = bench_cpu.chunked_flops
    if name.startswith("log_linear"):
        base = name[len("log_linear_"):]
        g = log_gate(B, T, H)
        beta = rng.uniform(0.1, 0.9, (B, T, H)).astype(np.float32) if base != "mamba2" else None
        lam = rng.uniform(0.2, 1.5, (B, T, H, _levels(T))).astype(np.float32)
        # levels inside an aligned block: one call with one-hot values of the
        # block's width (its attention matrix); the levels above: a call each
        block = family._LOG_LINEAR_BLOCK
        in_block = min(block.bit_length() - 1, _levels(T) - 1) if T > 1 else 0
        work = flops(base, B * (-(-T // block)), block, H, K, block, C=min(C, block)) \
            if in_block else 0
        work += sum(flops(base, B * (-(-T // (1 << l))), 1 << l, H, K, V, C=min(C, 1 << l))
                    for l in range(in_block + 1, _levels(T)))

        def run():
            return family.log_linear_attention(q, k, v, g, lam, variant=base, beta=beta,
                                               chunk_size=C)

        def run_base():
            return la.attention(base, q, k, v, g, beta, chunk_size=C)
        return run, run_base, work, base
    if name == "mixture_of_memories":
        M = memories
        mk, mv = unit(normal(B, T, M, H, K)), normal(B, T, M, H, V)
        mg = log_gate(B, T, M, H)
        mbeta = rng.uniform(0.1, 0.9, (B, T, M, H)).astype(np.float32)
        scores = rng.standard_normal((B, T, M))
        top = np.argsort(-scores, axis=-1)[..., :2]
        routing = np.zeros((B, T, M), np.float32)
        np.put_along_axis(routing, top, 0.5, -1)
        g, beta = log_gate(B, T, H), rng.uniform(0.1, 0.9, (B, T, H)).astype(np.float32)

        def run():
            return family.mixture_of_memories(q, mk, mv, routing, "gated_deltanet", g=mg,
                                              beta=mbeta, chunk_size=C)

        def run_base():
            return la.attention("gated_deltanet", q, k, v, g, beta, chunk_size=C)
        # One call over each memory's routed tokens: 2T tokens per row.
        return run, run_base, flops("gated_deltanet", B, 2 * T, H, K, V, C=C), \
            "gated_deltanet"
    if name == "gated_delta_product":
        n = 2
        pk, pv = unit(normal(B, T * n, H, K)), normal(B, T * n, H, V)
        pbeta = rng.uniform(0.1, 0.9, (B, T * n, H)).astype(np.float32)
        g, beta = log_gate(B, T, H), rng.uniform(0.1, 0.9, (B, T, H)).astype(np.float32)

        def run():
            return fla.chunk_gated_delta_product(q, pk, pv, g, pbeta, n)

        def run_base():
            return la.attention("gated_deltanet", q, k, v, g, beta, chunk_size=C)
        return run, run_base, flops("gated_deltanet", B, T * n, H, K, V, C=C), \
            "gated_deltanet"
    if name == "variational_linear_attention":
        positive_q, positive_k = np.exp(normal(B, T, H, K) / 4), np.exp(normal(B, T, H, K) / 4)
        u = unit(normal(B, T, H, K)) / np.float32(np.sqrt(K))
        kh = unit(positive_k)
        w = unit(normal(B, T, H, K))

        def run():
            return family.variational_linear_attention(positive_q, positive_k, v, u,
                                                       chunk_size=C)

        def run_base():
            return la.attention("dplr", positive_q, w, v, a=kh, b=w, scale=1.0, chunk_size=C)
        return run, run_base, flops("dplr", B, T, H, K, V, C=C), "dplr"
    if name == "hola":
        g, beta = log_gate(B, T, H), rng.uniform(0.1, 0.9, (B, T, H)).astype(np.float32)
        unit_q = unit(q)
        weight = np.full(H, 0.5, np.float32)

        def run():
            return family.hola_attention(unit_q, k, v, g, beta, weight, chunk_size=C)

        def run_base():
            return la.attention("gated_deltanet", unit_q, k, v, g, beta, chunk_size=C)
        return run, run_base, 2 * flops("gated_deltanet", B, T, H, K, V, C=C), \
            "gated_deltanet"
    if name == "momentum_delta_rule":
        p = unit(normal(B, T, H, K))
        log_alpha = (-rng.uniform(0.0, 0.1, (B, T, H))).astype(np.float32)
        log_mu = (-rng.uniform(0.0, 0.3, (B, T, H))).astype(np.float32)
        beta, eta = (rng.uniform(0.1, 0.9, (B, T, H)).astype(np.float32) for _ in range(2))
        g = log_gate(B, T, H)

        def run():
            return family.momentum_delta_rule(q, k, v, p, log_alpha, log_mu, beta, eta,
                                              chunk_size=C)

        def run_base():
            return la.attention("gated_deltanet", q, k, v, g, beta, chunk_size=C)
        return run, run_base, flops("rwkv7", B, T, H, 2 * K, V, C=C), "gated_deltanet"
    if name in ("sliding_window_hybrid", "hedgehog_hybrid"):
        window = 64
        weight = normal(H, K, K // 2) / np.float32(np.sqrt(K))
        fq, fk = family.hedgehog_features(q, weight), family.hedgehog_features(k, weight)
        # Blocks of 64 tokens (the power of two >= window - 1, in [16, 64]):
        # a block's queries against its own and the previous block's keys.
        block = 64
        pairs = 2 * B * H * -(-T // block)
        work = flops("linear", B, T, H, K, V + 1, C=C) + pairs * 2 * block * block * (K + V)
        if name == "hedgehog_hybrid":
            bias = 0.1 * normal(H, K // 2)
            fq = family.hedgehog_features(q, weight, bias)
            fk = family.hedgehog_features(k, weight, bias)
            maps = la.ops.HedgehogMap(weight, bias)

            def run_maps():
                return family.sliding_window_hybrid(q, k, v, maps, maps, window, chunk_size=C)

            def run_features():
                return family.sliding_window_hybrid(q, k, v, fq, fk, window, chunk_size=C)
            # plus x W for q and for k
            return (run_maps, run_features, work + 2 * 2 * B * T * H * K * (K // 2),
                    "sliding_window_hybrid")

        def run():
            return family.sliding_window_hybrid(q, k, v, fq, fk, window, chunk_size=C)

        def run_base():
            return la.attention("linear", fq, fk, v, scale=1.0, chunk_size=C)
        return run, run_base, work, "linear"
    raise SystemExit(f"unknown member {name!r}; expected one of {MEMBERS}")


def main(argv=None):
    args = parse_args(argv)
    import numpy as np
    shape = QUICK_SHAPE if args.quick else FULL_SHAPE
    if args.shape:
        shape = tuple(int(x) for x in args.shape.lower().split("x"))
    B, T, H, K, V = shape
    facts = bench_cpu._machine_facts()
    print("# la CPU benchmark: the family's compositions (fp32, forward)")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    print(f"command: {' '.join([os.path.basename(sys.executable)] + sys.argv)}")
    print(f"machine: nproc={facts['nproc']}, cpu: {facts['cpu']}, avx512f: {facts['avx512f']}, "
          f"loadavg at start: {facts['loadavg']}")
    print(f"repository: {facts['git']}")
    print(f"la: one thread; chunk size {args.chunk_size}; repeat {args.repeat} (median)")
    print(flush=True)
    sg = bench_cpu.measure_sgemm(args, {})
    if not sg:
        sys.exit("no sgemm measurement succeeded")
    sgemm_1t = max(r["gflops"]["1"]["median"] for r in sg)
    for r in sg:
        print(f"sgemm 128^3 [{r['label']}]: {r['gflops']['1']['median']:.1f} GFLOP/s on "
              f"1 thread (kernel {r['info']['corename']})")
    print(f"limit used for the ratios: {sgemm_1t:.1f} GFLOP/s on 1 thread")
    print(flush=True)
    print("| member | B,T,H,K,V | ms | base | base ms | x base | GFLOP/s (la calls) "
          "| x sgemm 1T |")
    print("|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for name in args.members.split(","):
        run, run_base, work, base = _member(name, B, T, H, K, V, args.chunk_size,
                                            args.memories, rng)
        ms, _ = bench_cpu.time_call(run, args.repeat)
        base_ms, _ = bench_cpu.time_call(run_base, args.repeat)
        gflops = work / (ms * 1e6)
        print(f"| {name} | {B},{T},{H},{K},{V} | {ms:.1f} | {base} | {base_ms:.1f} "
              f"| {ms / base_ms:.2f} | {gflops:.1f} | {gflops / sgemm_1t:.3f} |", flush=True)


if __name__ == "__main__":
    main()
