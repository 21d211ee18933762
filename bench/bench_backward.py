#!/usr/bin/env python3
"""CPU benchmark of la's derived backward (fp32), against its forward,
OpenBLAS sgemm and PyTorch autograd, all measured in one run.

A program, not a test. For each variant and shape it prints:

* la's forward and backward times: medians of ``--repeat`` calls of the
  compiled kernels through the Python package (``la.attention`` and
  ``la.attention_backward``, NumPy inputs, on each of ``--la-threads``
  thread counts, one row each), after one warm-up call that compiles them
  (the compile times are printed too);
* the backward's GFLOP/s over a stated FLOP count, ``2 x`` the chunked
  forward's (:func:`bench_cpu.chunked_flops`: a chunked backward performs
  about twice the forward's matrix products), and its ratio to OpenBLAS sgemm
  at 128^3 on the same number of threads (batch-parallel on two), measured
  in subprocesses of this run (``bench_cpu.measure_sgemm``);
* ratios: backward / forward (target <= 2.5), and PyTorch autograd through
  the same chunked forward written in torch (``numpy_chunked.py`` on the
  torch backend, forward + ``backward()``) over la's forward + backward
  (target >= 5); torch runs on ``--threads`` threads;
* with ``--value-gate``, each additive variant again with fla's value-side
  gate ``gv`` (``variant+gv``; its adjoint is three recurrences, the FLOP
  count stays the one above; no torch comparison);
* which program la's backward is: ``chunked`` (la-expand-recurrence-grad:
  the adjoint as two chunked recurrences for a diagonal decay (scalar,
  channel-wise or none; the adjoint G read from both sides), four with the
  delta rule, five (two of them over
  sub-steps) for the general low-rank form of Gated DeltaNet-2 and RWKV-7)
  for every variant since the general form's was chunked; ``tokens`` (the
  checkpointed token loops, ``sequential=True``) is not timed here.

Usage::

    python3 bench/bench_backward.py                   # the issue's shapes
    python3 bench/bench_backward.py --quick           # small shapes (seconds)
    python3 bench/bench_backward.py --variants mamba2 --shapes 1x4096x8x128x128
    python3 bench/bench_backward.py --la-threads 1 2  # la on one and on two threads
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

DEFAULT_VARIANTS = ("gla", "gated_deltanet", "kda", "mamba2", "retention")
FULL_SHAPES = ((1, 4096, 8, 128, 128), (2, 8192, 4, 128, 128))
QUICK_SHAPES = ((1, 512, 4, 64, 64),)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--variants", default=",".join(DEFAULT_VARIANTS))
    p.add_argument("--shapes", default=None, help="BxTxHxKxV, comma-separated")
    p.add_argument("--quick", action="store_true", help="small shapes")
    p.add_argument("--repeat", type=int, default=3, help="timed calls (median)")
    p.add_argument("--chunk-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="threads for torch (and the sgemm's largest count)")
    p.add_argument("--la-threads", type=int, nargs="+", default=[1],
                   help="la's thread counts, a row each (default: 1)")
    p.add_argument("--sgemm-seconds", type=float, default=1.0)
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--value-gate", action="store_true",
                   help="also run each additive variant with a value-side gate gv")
    args = p.parse_args(argv)
    args.variants = [v for v in args.variants.split(",") if v]
    if args.shapes:
        args.shapes = [bench_cpu._parse_shape(s) for s in args.shapes.split(",")]
    else:
        args.shapes = list(QUICK_SHAPES if args.quick else FULL_SHAPES)
    return args


def _inputs(variant, B, T, H, K, V, seed=0, value_gate=False):
    from la.testing import make_inputs
    inputs = make_inputs(variant, B, T, H, K, V, seed=seed, gate_scale=1 / 16)
    import numpy as np
    rng = np.random.default_rng(seed + 1)
    do = rng.standard_normal((B, T, H, V)).astype(np.float32)
    if value_gate:
        # log-sigmoid / 16, as the key-side gates
        gv = -np.logaddexp(0.0, -rng.standard_normal((B, T, H, V))) / 16
        inputs["gv"] = gv.astype(np.float32)
    return inputs, do


def _la_calls(variant, inputs, do, C, threads=1):
    import la
    kwargs = {k: inputs[k] for k in ("g", "gv", "beta", "erase", "write", "a", "b",
                                     "log_decay") if k in inputs}
    q, k, v = inputs["q"], inputs["k"], inputs["v"]

    def forward():
        return la.attention(variant, q, k, v, chunk_size=C, num_threads=threads, **kwargs)

    def backward():
        return la.attention_backward(variant, q, k, v, do=do, chunk_size=C,
                                     num_threads=threads, **kwargs)

    return forward, backward


def _torch_autograd(tb, variant, inputs, do, C):
    """A closure running the torch chunked forward and backward()."""
    import numpy_chunked as npc
    torch = tb.torch
    prepared = npc.prepare(inputs, tb)
    leaves = {}
    for name, x in prepared.items():
        if hasattr(x, "requires_grad") and x.dtype == torch.float32 and name != "log_decay":
            leaves[name] = x.detach().clone().requires_grad_()
        else:
            leaves[name] = x
    grad = torch.from_numpy(do)

    def run():
        for x in leaves.values():
            if hasattr(x, "grad"):
                x.grad = None
        o, _ = npc.chunked_forward(variant, leaves, chunk_size=C, xp=tb)
        o.backward(grad)
        return o

    return run


def main(argv=None):
    args = parse_args(argv)
    import tempfile
    # A cache of this run's own, so that the compile times are measured.
    os.environ["LA_CACHE_DIR"] = tempfile.mkdtemp(prefix="la-bench-cache-")
    import la
    import numpy_chunked as npc

    facts = bench_cpu._machine_facts()
    tb = None if args.no_torch else npc.torch_backend(functional=True)
    if tb is not None:
        tb.torch.set_num_threads(args.threads)
    print("# la CPU benchmark: the derived backward (fp32)")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    print(f"command: {' '.join([os.path.basename(sys.executable)] + sys.argv)}")
    print(f"machine: nproc={facts['nproc']}, cpu: {facts['cpu']}, avx512f: {facts['avx512f']}, "
          f"loadavg at start: {facts['loadavg']}")
    print(f"repository: {facts['git']}")
    print(f"torch: {'%s, %d threads' % (tb.torch.__version__, tb.torch.get_num_threads()) if tb else 'skipped'}")
    print(f"la: threads {', '.join(map(str, args.la_threads))}; chunk size {args.chunk_size}; "
          f"repeat {args.repeat} (median)")
    print(flush=True)

    sg = bench_cpu.measure_sgemm(args, {})
    if not sg:
        sys.exit("no sgemm measurement succeeded")
    for r in sg:
        print(f"sgemm 128^3 [{r['label']}]: "
              + ", ".join(f"{g['median']:.1f} GFLOP/s on {n} thread{'s' if n != '1' else ''}"
                          for n, g in sorted(r["gflops"].items()))
              + f" (kernel {r['info']['corename']})")
    sgemm = {}
    for n in args.la_threads:
        measured = [r["gflops"][str(n)]["median"] for r in sg if str(n) in r["gflops"]]
        if measured:
            sgemm[n] = max(measured)
    print("limits used for the ratios: "
          + ", ".join(f"{g:.1f} GFLOP/s on {n} thread{'s' if n > 1 else ''}"
                      for n, g in sgemm.items()))
    print(flush=True)

    header = ("| variant | B,T,H,K,V | la threads | fwd ms | bwd ms | bwd / fwd | bwd GFLOP/s "
              "| bwd x sgemm | torch fwd+bwd ms | la x torch | compile s (fwd, bwd) |")
    print(header)
    print("|" + "---|" * 11)
    from la.variants import VARIANTS
    runs = [(variant, False) for variant in args.variants]
    if args.value_gate:
        runs += [(variant, True) for variant in args.variants
                 if VARIANTS[variant][0] == "additive"]
    for variant, value_gate in runs:
        for (B, T, H, K, V) in args.shapes:
            inputs, do = _inputs(variant, B, T, H, K, V, value_gate=value_gate)
            flops = 2 * bench_cpu.chunked_flops(variant, B, T, H, K, V, C=args.chunk_size)
            torch_ms = None
            if tb is not None and not value_gate:
                torch_ms, _ = bench_cpu.time_call(
                    _torch_autograd(tb, variant, inputs, do, args.chunk_size),
                    args.repeat, warmup=1)
            label = variant + ("+gv" if value_gate else "")
            for threads in args.la_threads:
                forward, backward = _la_calls(variant, inputs, do, args.chunk_size, threads)
                before = la.cache_info()["compile_seconds"]
                forward()
                compile_fwd = la.cache_info()["compile_seconds"] - before
                before = la.cache_info()["compile_seconds"]
                backward()
                compile_bwd = la.cache_info()["compile_seconds"] - before
                fwd_ms, _ = bench_cpu.time_call(forward, args.repeat, warmup=0)
                bwd_ms, _ = bench_cpu.time_call(backward, args.repeat, warmup=0)
                gflops = flops / (bwd_ms * 1e6)
                limit = sgemm.get(threads)
                print(f"| {label} | {B},{T},{H},{K},{V} | {threads} | {fwd_ms:.1f} | {bwd_ms:.1f} "
                      f"| {bwd_ms / fwd_ms:.2f} | {gflops:.1f} "
                      f"| {(f'{gflops / limit:.3f}' if limit else '-')} | "
                      + (f"{torch_ms:.1f} | {torch_ms / (fwd_ms + bwd_ms):.2f}" if torch_ms
                         else "- | -")
                      + f" | {compile_fwd:.2f}, {compile_bwd:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
