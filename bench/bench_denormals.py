#!/usr/bin/env python3
"""A decaying state in the denormal range: la's time against the same call
on ordinary values, in one run.

A program, not a test. For each variant it times ``la.attention`` (one
thread unless ``--threads``) on the inputs ``la.testing.make_inputs`` draws,
then on the same inputs with v zero from the middle of the sequence on (the
state decays with nothing written: into the denormal range at T = 4096 with
the default gates), then with v all zero (the state stays exactly zero),
and prints each median and its ratio to the first. With la-lower-to-cpu's
``flush-denormals`` (x86, the default) the ratios stay near 1; without it
the half-zero case took 8x (docs/performance.md).

Usage::

    python3 bench/bench_denormals.py [--variants gated_deltanet,mamba2] [--shape 1x4096x8x128x128]
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
    p.add_argument("--variants", default="gated_deltanet,mamba2,gla")
    p.add_argument("--shape", default="1x4096x8x128x128", help="BxTxHxKxV")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    import la
    from la import testing as lt
    B, T, H, K, V = (int(x) for x in args.shape.split("x"))
    print(f"bench_denormals: ({B},{T},{H},{K},{V}), {args.threads} thread(s), "
          f"medians of {args.repeat} calls after a warm-up")
    print("| variant | v as drawn ms | v zero from T/2 ms | x | v all zero ms | x |")
    print("|---|---|---|---|---|---|")
    for variant in [v for v in args.variants.split(",") if v]:
        x = lt.make_inputs(variant, B, T, H, K, V, seed=0)
        gates = {n: x[n] for n in ("g", "beta") if n in x}
        half = x["v"].copy()
        half[:, T // 2:] = 0
        cases = (x["v"], half, np.zeros_like(x["v"]))
        times = []
        for v in cases:
            def call():
                la.attention(variant, x["q"], x["k"], v, **gates, num_threads=args.threads)
            call()
            samples = []
            for _ in range(args.repeat):
                start = time.perf_counter()
                call()
                samples.append((time.perf_counter() - start) * 1e3)
            times.append(statistics.median(samples))
        print(f"| {variant} | {times[0]:.1f} | {times[1]:.1f} | {times[1] / times[0]:.2f} | "
              f"{times[2]:.1f} | {times[2] / times[0]:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
