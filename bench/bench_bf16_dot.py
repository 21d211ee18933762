#!/usr/bin/env python3
"""The rate of AVX512-BF16's ``vdpbf16ps`` against f32 ``vfmadd231ps`` on
this CPU, measured in one run: the ceiling of a bf16 kernel that would use
``vdpbf16ps`` (issue 22 asks for >= 1.6x the f32 kernel's speed with it).

A program, not a test. It compiles a C loop with clang-22 ``-O2
-march=native``: 12 independent zmm accumulators, each instruction depending
only on its own accumulator (throughput, not latency), first ``vfmadd231ps``
(16 multiply-adds per instruction), then ``vdpbf16ps`` (32: pairs of bf16
products summed into 16 f32 lanes). Prints, per repetition and as medians,
instructions and FLOP per second of each and the ratio of their FLOP rates.
A ratio of 2 would let bf16 kernels run up to twice as fast as f32; at 1 or
below, ``vdpbf16ps`` cannot make them faster (AMX's tile products would be
the bf16 path on such a CPU).

Usage::

    python3 bench/bench_bf16_dot.py [--repeat 5]
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

_SOURCE = r"""
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
  const long n = 240000000; /* instructions of each kind */
  __m512 acc[12];
  for (int i = 0; i < 12; i++) acc[i] = _mm512_set1_ps(0.0f);
  __m512 a = _mm512_set1_ps(1.0001f), b = _mm512_set1_ps(0.9999f);
  __m512bh ab = (__m512bh)_mm512_set1_epi16(0x3f80);
  __m512bh bb = (__m512bh)_mm512_set1_epi16(0x3f80);
  double t0 = now();
  for (long i = 0; i < n / 12; i++) {
#define FMA(j) acc[j] = _mm512_fmadd_ps(a, b, acc[j]); __asm__ volatile("" : "+v"(acc[j]));
    FMA(0) FMA(1) FMA(2) FMA(3) FMA(4) FMA(5) FMA(6) FMA(7) FMA(8) FMA(9) FMA(10) FMA(11)
  }
  double t1 = now();
  for (long i = 0; i < n / 12; i++) {
#define DOT(j) acc[j] = _mm512_dpbf16_ps(acc[j], ab, bb); __asm__ volatile("" : "+v"(acc[j]));
    DOT(0) DOT(1) DOT(2) DOT(3) DOT(4) DOT(5) DOT(6) DOT(7) DOT(8) DOT(9) DOT(10) DOT(11)
  }
  double t2 = now();
  float sum = 0.0f;
  for (int i = 0; i < 12; i++) sum += _mm512_reduce_add_ps(acc[i]);
  /* instructions/s and FLOP/s of each (an FMA lane is 2 FLOP). */
  printf("%.6e %.6e %.6e %.6e %g\n", n / (t1 - t0), 32.0 * n / (t1 - t0),
         n / (t2 - t1), 64.0 * n / (t2 - t1), sum);
  return 0;
}
"""


def _cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    flags = _cpu_flags()
    print(f"cpu: {_cpu_name()}; avx512_bf16: {'avx512_bf16' in flags}, "
          f"amx_bf16: {'amx_bf16' in flags}")
    if "avx512_bf16" not in flags:
        print("this CPU has no AVX512-BF16: nothing to measure")
        return 0
    clang = shutil.which("clang-22") or shutil.which("clang")
    if clang is None:
        sys.exit("clang-22 not found")
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "dot.c")
        binary = os.path.join(tmp, "dot")
        with open(source, "w") as f:
            f.write(_SOURCE)
        subprocess.run([clang, "-O2", "-march=native", source, "-o", binary], check=True)
        rows = []
        print("| run | vfmadd231ps G/s | f32 GFLOP/s | vdpbf16ps G/s | bf16 GFLOP/s "
              "| bf16 / f32 FLOP rate |")
        print("|---|---|---|---|---|---|")
        for run in range(args.repeat):
            out = subprocess.run([binary], check=True, capture_output=True, text=True).stdout
            fma, fma_flops, dot, dot_flops = (float(x) for x in out.split()[:4])
            rows.append((fma, fma_flops, dot, dot_flops))
            print(f"| {run + 1} | {fma / 1e9:.2f} | {fma_flops / 1e9:.1f} | {dot / 1e9:.2f} "
                  f"| {dot_flops / 1e9:.1f} | {dot_flops / fma_flops:.2f} |", flush=True)
        med = [statistics.median(r[i] for r in rows) for i in range(4)]
        print(f"| median | {med[0] / 1e9:.2f} | {med[1] / 1e9:.1f} | {med[2] / 1e9:.2f} "
              f"| {med[3] / 1e9:.1f} | {med[3] / med[1]:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
