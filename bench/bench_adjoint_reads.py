#!/usr/bin/env python3
"""The delta rule's backward with S's two reads merged (one recurrence with
two query heads per state: la-lower-to-cpu's ``merge-adjoint-reads``, the
default) against two recurrences (``merge-adjoint-reads=0``), in one run.

A program, not a test. For each variant it times ``la.attention_backward``
(NumPy inputs, ``--threads`` threads) compiled both ways, alternating
calls, and prints the medians, their ratio and the rel_rms between the two
gradients (the same algebra: they should agree to rounding).

Usage::

    python3 bench/bench_adjoint_reads.py [--variants gated_deltanet,kda] \\
        [--shape 1x4096x8x128x128] [--threads 1] [--repeat 5]
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "python"))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--variants", default="gated_deltanet,kda,deltanet")
    p.add_argument("--shape", default="1x4096x8x128x128", help="BxTxHxKxV")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    import numpy as np

    import la
    from la import ops
    from la import testing as lt

    B, T, H, K, V = (int(x) for x in args.shape.split("x"))
    # The package has no switch for this pipeline option: the baseline's
    # pipeline string is la-lower-to-cpu's with merge-adjoint-reads=0 (a
    # distinct kernel in the cache).
    lower = ops._lower_to_cpu

    def unmerged(chunk_size, sequential, threads):
        return lower(chunk_size, sequential, threads).replace(
            "la-lower-to-cpu{", "la-lower-to-cpu{merge-adjoint-reads=0 ")

    print(f"bench_adjoint_reads: ({B},{T},{H},{K},{V}), {args.threads} thread(s), "
          f"medians of {args.repeat} alternating calls after a warm-up")
    print("| variant | merged ms | two recurrences ms | two / merged | rel_rms |")
    print("|---|---|---|---|---|")
    for variant in [v for v in args.variants.split(",") if v]:
        x = lt.make_inputs(variant, B, T, H, K, V, seed=0)
        gates = {n: x[n] for n in ("g", "beta") if n in x}
        do = np.random.default_rng(1).standard_normal((B, T, H, V)).astype(np.float32)

        def call():
            return la.attention_backward(variant, x["q"], x["k"], x["v"], **gates, do=do,
                                         num_threads=args.threads)

        def merged():
            ops._lower_to_cpu = lower
            return call()

        def two():
            ops._lower_to_cpu = unmerged
            try:
                return call()
            finally:
                ops._lower_to_cpu = lower

        a, b = merged(), two()
        error = max(lt.rel_rms(b[name], a[name]) for name in a)
        samples = {merged: [], two: []}
        for _ in range(args.repeat):
            for run in (merged, two):
                start = time.perf_counter()
                run()
                samples[run].append((time.perf_counter() - start) * 1e3)
        t_merged, t_two = statistics.median(samples[merged]), statistics.median(samples[two])
        print(f"| {variant} | {t_merged:.1f} | {t_two:.1f} | {t_two / t_merged:.2f} | "
              f"{error:.1e} |", flush=True)


if __name__ == "__main__":
    main()
