#!/usr/bin/env python3
"""CPU decode benchmark: one token per sequence against the machine's memory
bandwidth, measured in the same run.

A program, not a test. Decode (T = 1) reads each sequence's f32 state
``[H, K, V]`` and writes the next one: at serving batch sizes the states do
not fit in the caches, so the kernel is bound by memory, and the figure of
merit is the bandwidth it reaches over the bytes it must move (the state read
and written, plus q, k, v, the gates and o) against a STREAM-like triad
``a[i] = b[i] + s * c[i]`` (C, compiled here with clang -O3 -march=native
-fopenmp, arrays of 128 MiB, counted as STREAM does: three streams).

For each variant and number of sequences N it prints, per thread count and
per place of the final state (``--state``: a separate output, or written
over the initial state, ``la.in_place``), the median time of ``--repeat``
calls inside one ``la-run`` process (the kernel only: la-run allocates the
outputs once; ``--via package``: calls through the Python package instead,
``la.attention`` and ``la.serving.attention_in_place``, the allocation of
their outputs included), the bandwidth over those bytes, and its ratio to
the triad of the same thread count. The kernel is the one the
Python package uses for T = 1: chunks of one token (``--chunk-size=1``); two
threads run it with ``la-run --parallel`` (OpenMP over sequences and heads).

Usage::

    python3 bench/bench_decode.py                        # N = 1, 8, 64; 1 and 2 threads
    python3 bench/bench_decode.py --variants gla --sequences 64 --threads 1
    python3 bench/bench_decode.py --via package --state in-place
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(_HERE)
sys.path.insert(0, os.path.join(_REPO, "python"))

from la import runner  # noqa: E402
from la.variants import VARIANTS, token_operand_shapes  # noqa: E402

DEFAULT_VARIANTS = ("gla", "gated_deltanet", "kda", "retention", "mamba2", "deltanet")

_TRIAD_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}
int main(int argc, char **argv) {
  long n = atol(argv[1]);
  int repeat = atoi(argv[2]);
  float *a = aligned_alloc(64, n * sizeof(float));
  float *b = aligned_alloc(64, n * sizeof(float));
  float *c = aligned_alloc(64, n * sizeof(float));
  if (!a || !b || !c) return 1;
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n; ++i) { a[i] = 0.0f; b[i] = 1.0f; c[i] = 2.0f; }
  for (int r = 0; r < repeat; ++r) {
    double start = now();
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; ++i) a[i] = b[i] + 3.0f * c[i];
    printf("%.9f\n", now() - start);
  }
  fprintf(stderr, "%g\n", (double)a[n / 2]);  /* keeps the loop */
  return 0;
}
"""


def _clang():
    for name in (os.environ.get("LA_CLANG"), "clang-22", "/usr/lib/llvm-22/bin/clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def build_triad(directory):
    """Compiles the triad; returns its path, or None without clang/OpenMP."""
    clang = _clang()
    if clang is None:
        return None
    source = os.path.join(directory, "triad.c")
    binary = os.path.join(directory, "triad")
    with open(source, "w") as f:
        f.write(_TRIAD_C)
    proc = subprocess.run([clang, "-O3", "-march=native", "-fopenmp", source, "-o", binary],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"bench_decode: the triad did not compile:\n{proc.stderr}", file=sys.stderr)
        return None
    return binary


def triad_bandwidth(binary, threads, elements=32 * 1024 * 1024, repeat=9):
    """GB/s of the triad on ``threads`` threads (median of ``repeat`` runs,
    three streams of ``elements`` floats)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="close")
    proc = subprocess.run([binary, str(elements), str(repeat)], capture_output=True, text=True,
                          env=env, check=True)
    times = [float(line) for line in proc.stdout.split()]
    return 3 * elements * 4 / statistics.median(times) / 1e9


def decode_bytes(variant, N, H, K, V):
    """The bytes a decode step must move: the state read and written, the
    token's operands read and o written (f32)."""
    state = N * H * K * V * 4
    operands = sum(4 * _product(shape)
                   for _, shape in token_operand_shapes(variant, N, 1, H, K, V, H))
    return 2 * state + operands + N * H * V * 4


def _product(shape):
    result = 1
    for d in shape:
        result *= d
    return result


def time_decode(la_run, variant, N, H, K, V, threads, repeat, directory, in_place=False):
    """Median ms of la's decode kernel (la-run --repeat) on ``threads``
    threads, and its compile time. ``in_place``: the kernel writes the final
    state over the initial state (``la.in_place``) instead of into a
    separate output."""
    mlir = runner.attention_mlir(variant, N, 1, H, K, V, H, has_initial_state=True,
                                 output_final_state=True, state_in_place=in_place,
                                 name="attention")
    path = os.path.join(directory, f"{variant}-{N}{'-in-place' if in_place else ''}.mlir")
    with open(path, "w") as f:
        f.write(mlir)
    cmd = [la_run, path, "--random-seed=1", f"--repeat={repeat}", "--chunk-size=1"]
    env = dict(os.environ)
    if threads > 1:
        cmd.append("--parallel")
        env["OMP_NUM_THREADS"] = str(threads)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"la-run failed: {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    out = proc.stdout + proc.stderr
    median = float(re.search(r"run: median ([0-9.]+) ms", out).group(1))
    compile_ms = float(re.search(r"compile: ([0-9.]+) ms", out).group(1))
    return median, compile_ms


def time_decode_package(variant, N, H, K, V, threads, repeat, in_place=False, pool=False):
    """Median ms of a decode step through the Python package (NumPy inputs,
    ``la.attention`` with ``output_final_state=True``,
    ``la.serving.attention_in_place``, or with ``pool``
    ``la.serving.step_state_pool`` on N scattered, shuffled entries of a
    pool of 4N states): what a caller waits for, the allocation of the
    outputs included; and the first call's time (the compile, or a load
    from the kernel cache)."""
    import time
    import la
    from la import serving
    x = la.testing.make_inputs(variant, N, 1, H, K, V, seed=1, with_initial_state=True,
                               gate_scale=1 / 16)
    tokens = {n: x[n] for n in ("g", "beta", "erase", "write", "a", "b") if n in x}
    if "log_decay" in x:
        tokens["log_decay"] = x["log_decay"]
    state = x["initial_state"]
    if pool:
        import numpy as np
        rng = np.random.default_rng(2)
        entries = rng.permutation(4 * N)[:N]
        states = np.zeros((4 * N,) + state.shape[1:], np.float32)
        states[entries] = state

    def step():
        if pool:
            serving.step_state_pool(variant, states, entries, x["q"], x["k"], x["v"],
                                    **tokens, num_threads=threads)
        elif in_place:
            serving.attention_in_place(variant, state, x["q"], x["k"], x["v"], **tokens,
                                       num_threads=threads)
        else:
            la.attention(variant, x["q"], x["k"], x["v"], **tokens, initial_state=state,
                         output_final_state=True, num_threads=threads)
    start = time.perf_counter()
    step()
    first_ms = (time.perf_counter() - start) * 1e3
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), first_ms


def main(argv=None):
    p = argparse.ArgumentParser(description="la's decode kernels against a same-run triad")
    p.add_argument("--variants", default=",".join(DEFAULT_VARIANTS))
    p.add_argument("--sequences", type=int, nargs="+", default=[1, 8, 64],
                   help="numbers of sequences N (default: 1 8 64)")
    p.add_argument("--heads", type=int, default=16, help="heads H (default: 16)")
    p.add_argument("--dim", type=int, default=128, help="K = V (default: 128)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                   help="thread counts (default: 1 2)")
    p.add_argument("--repeat", type=int, default=20, help="timed calls (default: 20)")
    p.add_argument("--la-run", default=None, help="la-run executable (default: as la.runner)")
    p.add_argument("--state", default="separate,in-place",
                   help="where the final state goes: 'separate' (an output of its own), "
                        "'in-place' (over the initial state, la.in_place), 'pool' (rows of "
                        "a pool of 4N states, at N scattered indices: step_state_pool, "
                        "with --via package) (default: separate,in-place)")
    p.add_argument("--via", choices=("la-run", "package"), default="la-run",
                   help="time the kernel alone in la-run (default), or a call through the "
                        "Python package, output allocation included")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = p.parse_args(argv)
    states = [s for s in args.state.split(",") if s]
    if not states or any(s not in ("separate", "in-place", "pool") for s in states):
        p.error(f"--state takes separate, in-place and/or pool, got {args.state!r}")
    if "pool" in states and args.via != "package":
        p.error("--state pool needs --via package (la.serving.step_state_pool)")

    la_run = args.la_run or runner.find_la_run()
    if la_run is None:
        print("bench_decode: la-run is not built (scripts/build.sh)", file=sys.stderr)
        return 2
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        p.error(f"unknown variants {unknown}")
    H, D = args.heads, args.dim
    results = {"triad_gbps": {}, "rows": []}
    with tempfile.TemporaryDirectory(prefix="la-decode-") as directory:
        triad = build_triad(directory)
        for threads in args.threads:
            results["triad_gbps"][threads] = (triad_bandwidth(triad, threads)
                                              if triad else None)
        print(f"bench_decode: H = {H}, K = V = {D}, f32 state; triad (3 streams): "
              + ", ".join(f"{t} thread{'s' if t > 1 else ''} {g:.1f} GB/s"
                          if g else f"{t} threads: not measured"
                          for t, g in results["triad_gbps"].items()))
        print(f"timed: {'the kernel alone (la-run --repeat)' if args.via == 'la-run' else 'calls through the Python package (outputs allocated per call; the first call: compile or cache load)'}")
        header = (f"{'variant':16s} {'N':>4s} {'state MiB':>9s} {'thr':>3s} {'state':>8s} "
                  f"{'ms':>8s} {'GB/s':>7s} {'x triad':>8s} "
                  f"{'compile ms' if args.via == 'la-run' else 'first ms':>10s}")
        print(header)
        print("-" * len(header))
        for variant in variants:
            for N in args.sequences:
                moved = decode_bytes(variant, N, H, D, D)
                for threads in args.threads:
                    for state in states:
                        in_place = state == "in-place"
                        if args.via == "la-run":
                            ms, compile_ms = time_decode(la_run, variant, N, H, D, D, threads,
                                                         args.repeat, directory, in_place)
                        else:
                            ms, compile_ms = time_decode_package(
                                variant, N, H, D, D, threads, args.repeat, in_place,
                                pool=state == "pool")
                        gbps = moved / (ms * 1e-3) / 1e9
                        triad_gbps = results["triad_gbps"][threads]
                        ratio = gbps / triad_gbps if triad_gbps else None
                        results["rows"].append(dict(variant=variant, N=N, threads=threads,
                                                    state=state, via=args.via, ms=ms,
                                                    bytes=moved, gbps=gbps, ratio=ratio,
                                                    compile_ms=compile_ms))
                        print(f"{variant:16s} {N:4d} {N * H * D * D * 4 / 2**20:9.1f} "
                              f"{threads:3d} {state:>8s} {ms:8.3f} {gbps:7.1f} "
                              f"{(f'{ratio:.2f}' if ratio else '-'):>8s} {compile_ms:10.0f}")
                        sys.stdout.flush()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
