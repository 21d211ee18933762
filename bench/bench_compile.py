#!/usr/bin/env python3
"""Where the compile time of la's CPU kernels goes, and what clang's -O level
costs in kernel speed, measured in one run.

A program, not a test. For each variant it builds the Python package's
dynamic-shape forward kernel (the one ``la.attention`` compiles for any B
and T) and prints:

* the time of la's lowering to LLVM IR text (``la.ops._llvm_ir``: the
  ``la-lower-to-cpu`` pipeline through the C API, the translation to LLVM IR
  and its printing), and the number of lines of that IR;
* the time clang takes to compile that IR into the shared library at each
  ``--levels`` (default -O3, -O2, -O1);
* with ``--run BxTxHxKxV``, the median time of ``--repeat`` forward calls of
  the kernel compiled at each level (one thread, NumPy inputs), the levels
  alternating over ``--rounds`` rounds, so that a drift of the machine
  affects them alike;
* with ``--first-call BxTxHxKxV``, the package's first call (lowering,
  clang, loading: ``la.cache_info()["compile_seconds"]``, a fresh cache each
  time) of the forward and the backward on ``--threads``, compiled whole
  (``LA_COMPILE_JOBS=1``) and in parallel parts (the default jobs: a
  threaded kernel's functions, ``docs/python.md``), alternating over
  ``--rounds`` rounds.

Usage::

    python3 bench/bench_compile.py
    python3 bench/bench_compile.py --variants gla --run 1x4096x8x128x128
    python3 bench/bench_compile.py --levels=-O3 --first-call 1x4096x8x128x128
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(_HERE), "python"))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--variants", default="gla,gated_deltanet,kda")
    p.add_argument("--levels", default="-O3,-O2,-O1",
                   help="comma-separated; each an -O level, optionally with more clang "
                        "flags after a space ('-O3 -fno-unroll-loops')")
    p.add_argument("--run", default=None, help="BxTxHxKxV: also time the kernels")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--first-call", default=None,
                   help="BxTxHxKxV: the first call's compile, forward and backward")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = p.parse_args(argv)
    args.variants = [v for v in args.variants.split(",") if v]
    args.levels = [lv for lv in args.levels.split(",") if lv]
    return args


def _inputs(variant, shape):
    import la
    B, T, H, K, V = shape
    x = la.testing.make_inputs(variant, B, T, H, K, V, gate_scale=1 / 16)
    return x, {k: x[k] for k in ("g", "beta", "erase", "write", "a", "b") if k in x}


def main(argv=None):
    args = parse_args(argv)
    import la
    from la import ops

    print("# la CPU compile time by stage and clang -O level")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    print(f"command: {' '.join([os.path.basename(sys.executable)] + sys.argv)}")
    print(f"loadavg at start: {os.getloadavg()}")
    clang = ops._find_clang()
    print(f"clang: {clang}; other flags: {' '.join(ops._CLANG_FLAGS[1:])}")
    print()
    print("| variant | lowering to LLVM IR s | IR lines | "
          + " | ".join(f"clang {lv} s" for lv in args.levels) + " |")
    print("|---|---|---|" + "---|" * len(args.levels))
    for variant in args.variants:
        x, kw = _inputs(variant, (1, 256, 4, 128, 128))
        call = ops._prepare(variant, x["q"], x["k"], x["v"], **kw)
        start = time.perf_counter()
        ir = ops._llvm_ir(call.text, call.pipeline)
        lowering = time.perf_counter() - start
        seconds = []
        with tempfile.TemporaryDirectory() as tmp:
            ll = os.path.join(tmp, "kernel.ll")
            with open(ll, "w") as f:
                f.write(ir)
            for level in args.levels:
                cmd = [clang, *level.split(), *ops._CLANG_FLAGS[1:], ll, "-o", ll + ".so",
                       *ops._link_flags(call.pipeline)]
                start = time.perf_counter()
                subprocess.run(cmd, check=True, capture_output=True)
                seconds.append(time.perf_counter() - start)
        print(f"| {variant} | {lowering:.2f} | {ir.count(chr(10))} | "
              + " | ".join(f"{s:.2f}" for s in seconds) + " |", flush=True)

    if args.first_call:
        _first_calls(args)
    if not args.run:
        return 0
    shape = tuple(int(d) for d in args.run.split("x"))
    print()
    print(f"forward at {args.run}, median of {args.repeat} calls, {args.rounds} rounds "
          "(levels alternating), one thread")
    print("| variant | level | round | compile s | run ms |")
    print("|---|---|---|---|---|")
    default_flags = ops._CLANG_FLAGS
    try:
        for variant in args.variants:
            x, kw = _inputs(variant, shape)
            for rnd in range(args.rounds):
                for level in args.levels:
                    # A fresh cache of each level's own: the compile is measured.
                    os.environ["LA_CACHE_DIR"] = tempfile.mkdtemp(prefix="la-bench-cache-")
                    la.clear_cache()
                    ops._CLANG_FLAGS = tuple(level.split()) + default_flags[1:]

                    def forward():
                        return la.attention(variant, x["q"], x["k"], x["v"], **kw)

                    before = la.cache_info()["compile_seconds"]
                    forward()
                    compile_s = la.cache_info()["compile_seconds"] - before
                    times = []
                    for _ in range(args.repeat):
                        start = time.perf_counter()
                        forward()
                        times.append((time.perf_counter() - start) * 1e3)
                    print(f"| {variant} | {level} | {rnd + 1} | {compile_s:.2f} | "
                          f"{statistics.median(times):.1f} |", flush=True)
    finally:
        ops._CLANG_FLAGS = default_flags
    return 0


def _first_calls(args):
    import numpy as np
    import la
    from la import ops
    shape = tuple(int(d) for d in args.first_call.split("x"))
    jobs = ops._compile_jobs()
    print()
    print(f"first call at {args.first_call} (compile and load, a fresh cache each), "
          f"whole (LA_COMPILE_JOBS=1) and in parts (jobs {jobs}), {args.rounds} rounds")
    print("| variant | pass | threads | round | whole s | parts s |")
    print("|---|---|---|---|---|---|")
    saved = os.environ.get("LA_COMPILE_JOBS")
    try:
        for variant in args.variants:
            x, kw = _inputs(variant, shape)
            do = np.ones_like(x["v"])
            for which in ("forward", "backward"):
                for threads in args.threads:
                    for rnd in range(args.rounds):
                        seconds = []
                        for mode in ("1", str(jobs)):
                            os.environ["LA_COMPILE_JOBS"] = mode
                            os.environ["LA_CACHE_DIR"] = tempfile.mkdtemp(prefix="la-bench-cache-")
                            la.clear_cache()
                            before = la.cache_info()["compile_seconds"]
                            if which == "forward":
                                la.attention(variant, x["q"], x["k"], x["v"], num_threads=threads,
                                             **kw)
                            else:
                                ops.attention_backward(variant, x["q"], x["k"], x["v"], do=do,
                                                       num_threads=threads, **kw)
                            seconds.append(la.cache_info()["compile_seconds"] - before)
                        print(f"| {variant} | {which} | {threads} | {rnd + 1} | "
                              f"{seconds[0]:.2f} | {seconds[1]:.2f} |", flush=True)
    finally:
        if saved is None:
            os.environ.pop("LA_COMPILE_JOBS", None)
        else:
            os.environ["LA_COMPILE_JOBS"] = saved


if __name__ == "__main__":
    sys.exit(main())
