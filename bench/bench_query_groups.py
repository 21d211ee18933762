#!/usr/bin/env python3
"""Grouped query heads (ONNX's q_num_heads > kv_num_heads): la's grouped
la.recurrence against the same call with every state repeated per query
head, in one run.

A program, not a test. For each variant it draws q with HQ = G * H heads
over H key/value heads and times ``la.attention`` twice, alternating:

* ``grouped``: as given, each state computed once and read by its G query
  heads (la-lower-to-recurrence keeps the groups);
* ``repeated``: k, v, the gates and beta repeated per query head, H' = HQ
  (what la-lower-to-recurrence's ``expand-query-groups`` builds, and what
  la did before grouped la.recurrence: G times the state work).

Both compute the same outputs (checked, rel_rms printed). Prints the
medians and repeated / grouped.

Usage::

    python3 bench/bench_query_groups.py [--variants gated_deltanet,gla] \\
        [--shape 1x4096x16x4x128x128] [--threads 1] [--repeat 5]
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "python"))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--variants", default="gated_deltanet,kda,gla,mamba2")
    p.add_argument("--shape", default="1x4096x16x4x128x128", help="BxTxHQxHxKxV")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    import la
    from la import testing as lt
    B, T, HQ, H, K, V = (int(x) for x in args.shape.split("x"))
    if HQ % H:
        p.error("HQ must be a multiple of H")
    G = HQ // H
    print(f"bench_query_groups: B={B} T={T} HQ={HQ} H={H} (G={G}) K={K} V={V}, "
          f"{args.threads} thread(s), medians of {args.repeat} alternating calls "
          f"after a warm-up")
    print("| variant | grouped ms | repeated ms | repeated / grouped | rel_rms |")
    print("|---|---|---|---|---|")
    for variant in [v for v in args.variants.split(",") if v]:
        x = lt.make_inputs(variant, B, T, H, K, V, seed=0)
        q = np.random.default_rng(1).standard_normal((B, T, HQ, K)).astype(np.float32)
        q /= np.linalg.norm(q, axis=-1, keepdims=True)
        gates = {n: x[n] for n in ("g", "beta") if n in x}

        def grouped():
            return la.attention(variant, q, x["k"], x["v"], **gates,
                                num_threads=args.threads)[0]

        rep = {n: np.repeat(a, G, axis=2) for n, a in gates.items()}
        k_rep, v_rep = np.repeat(x["k"], G, axis=2), np.repeat(x["v"], G, axis=2)

        def repeated():
            return la.attention(variant, q, k_rep, v_rep, **rep,
                                num_threads=args.threads)[0]

        error = lt.rel_rms(repeated(), grouped())
        samples = {grouped: [], repeated: []}
        for _ in range(args.repeat):
            for call in (grouped, repeated):
                start = time.perf_counter()
                call()
                samples[call].append((time.perf_counter() - start) * 1e3)
        t_grouped = statistics.median(samples[grouped])
        t_repeated = statistics.median(samples[repeated])
        print(f"| {variant} | {t_grouped:.1f} | {t_repeated:.1f} | "
              f"{t_repeated / t_grouped:.2f} | {error:.1e} |", flush=True)


if __name__ == "__main__":
    main()
