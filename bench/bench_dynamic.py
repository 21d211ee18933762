#!/usr/bin/env python3
"""The Python package's kernels, compiled once for any batch and length,
against kernels compiled for one shape, in one process.

A program, not a test. For each variant and shape it prepares one call of
``la.ops`` (the kernel with a dynamic B and T that the package runs) and the
same call compiled from the static MLIR of that shape (``call.static_text()``,
what the package compiled before), checks that both give the same output,
then times them in turn (``--repeat`` calls each, alternating) and prints
the medians and their ratio (dynamic / static: 1.0 is no loss).

Usage::

    PYTHONPATH=python python3 bench/bench_dynamic.py
    PYTHONPATH=python python3 bench/bench_dynamic.py --variants gla --shapes 1x4000x8x128x128 \\
        --threads 2
"""

import argparse
import copy
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "python"))

import la  # noqa: E402
from la import ops  # noqa: E402
from la import testing as lt  # noqa: E402

SHAPES = ("1x4096x8x128x128", "2x8192x4x128x128", "4x2048x16x64x64", "2x4000x4x128x128")
VARIANTS = ("gla", "gated_deltanet", "kda", "retention", "deltanet")


def _calls(variant, shape, threads):
    B, T, H, K, V = shape
    inputs = lt.make_inputs(variant, B, T, H, K, V, seed=1, gate_scale=1 / 16)
    extra = {n: inputs[n] for n in ("g", "beta") if n in inputs}
    dynamic = ops._prepare(variant, inputs["q"], inputs["k"], inputs["v"], **extra,
                           num_threads=threads)
    static = copy.copy(dynamic)
    static.text = dynamic.static_text()
    return dynamic, static


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--shapes", default=",".join(SHAPES), help="BxTxHxKxV,...")
    parser.add_argument("--threads", default="1,2", help="thread counts, e.g. 1,2")
    parser.add_argument("--repeat", type=int, default=11)
    args = parser.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
          f"la {la.__file__}")
    print(f"{'variant':<16}{'shape':<20}{'threads':>8}{'dynamic ms':>12}{'static ms':>11}"
          f"{'ratio':>8}")
    for threads in (int(t) for t in args.threads.split(",")):
        for shape_text in args.shapes.split(","):
            shape = tuple(int(d) for d in shape_text.split("x"))
            for variant in args.variants.split(","):
                dynamic, static = _calls(variant, shape, threads)
                out_dynamic = ops._run(dynamic)[0]
                out_static = ops._run(static)[0]
                diff = lt.rel_rms(out_static, out_dynamic)
                if not diff <= 1e-6:
                    print(f"{variant} {shape_text}: outputs differ (rel_rms {diff:.2e})")
                    return 1
                times = {"dynamic": [], "static": []}
                for _ in range(args.repeat):
                    for name, call in (("dynamic", dynamic), ("static", static)):
                        start = time.perf_counter()
                        ops._run(call)
                        times[name].append(time.perf_counter() - start)
                d, s = (float(np.median(times[n])) * 1e3 for n in ("dynamic", "static"))
                print(f"{variant:<16}{shape_text:<20}{threads:>8}{d:>12.1f}{s:>11.1f}"
                      f"{d / s:>8.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
