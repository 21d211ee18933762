#!/usr/bin/env python3
"""CPU benchmark of la's compiled linear-attention kernels (fp32 forward).

A program, not a test. For each variant and shape it prints, all measured in
one run:

* la's time: the median of ``--repeat`` calls inside one ``la-run`` process
  (``la-run --repeat``, through ``la.runner.run_attention``), and its GFLOP/s
  over the chunked algorithm's FLOP count (see :func:`chunked_flops`);
* the ratio of that rate to OpenBLAS sgemm at 128 x 128 x 128, measured in
  subprocesses of this run with ``OPENBLAS_CORETYPE`` and ``OPENBLAS_L2_SIZE``
  removed from the environment (the library picks its kernel itself), and once
  with ``OPENBLAS_CORETYPE=SkylakeX``; on 1 thread and batch-parallel on
  ``--threads`` threads (one GEMM stream per thread, OpenBLAS itself on one
  thread); the kernel that ran is printed;
* the ratio to the same chunked algorithm in NumPy (``numpy_chunked.py``, its
  matrix products in OpenBLAS), run in this process on 1 thread and
  batch-parallel over heads on ``--threads`` threads, after a check against the
  fp64 reference (``la.reference``) on a small case; and to the same code on
  PyTorch's CPU backend when ``import torch`` works (skipped otherwise);
* la's compile time for the kernel (``la-run``'s ``compile:`` line: lowering,
  LLVM optimisation and JIT code generation).

la runs on one thread; ``--la-parallel`` adds a second la line per case run
with ``la-run --parallel`` (the parallel loops as OpenMP regions) on
``--threads`` threads.

This process also runs with ``OPENBLAS_CORETYPE`` / ``OPENBLAS_L2_SIZE``
removed (it re-executes itself without them before importing NumPy), unless
``--numpy-coretype`` names a core type to force or ``--keep-openblas-env`` is
given.

Usage::

    python3 bench/bench_cpu.py                 # the issue's shapes (minutes)
    python3 bench/bench_cpu.py --quick         # small shapes (seconds)
    python3 bench/bench_cpu.py --variants gla,gated_deltanet --shapes 1x4096x8x128x128

``la-run`` is found like ``la.runner.find_la_run`` (``$LA_RUN``,
``$LA_BUILD_DIR/bin/la-run``, ``build/bin/la-run``) or given with ``--la-run``.
"""

import argparse
import json
import os
import subprocess
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(_HERE)
_SCRUBBED = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
_REEXEC_MARK = "_LA_BENCH_REEXEC"
_INHERITED_MARK = "_LA_BENCH_INHERITED"

DEFAULT_VARIANTS = ("gla", "gated_deltanet", "kda", "retention")
#: (B, T, H, K, V) of the issue
FULL_SHAPES = ((1, 4096, 8, 128, 128), (2, 8192, 4, 128, 128), (4, 2048, 16, 64, 64))
#: small shapes for --quick (one T that is not a multiple of the chunk size)
QUICK_SHAPES = ((1, 256, 4, 64, 64), (2, 320, 2, 128, 128), (2, 200, 4, 32, 32))


# --------------------------------------------------------------------------
# arguments and the OpenBLAS environment (before NumPy is imported)
# --------------------------------------------------------------------------

def _parse_shape(text):
    parts = text.lower().replace(",", "x").split("x")
    if len(parts) != 5:
        raise argparse.ArgumentTypeError(f"shape must be BxTxHxKxV, got {text!r}")
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape must be BxTxHxKxV, got {text!r}")
    if min(shape) < 1:
        raise argparse.ArgumentTypeError(f"shape dimensions must be >= 1, got {text!r}")
    return shape


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="la CPU benchmark: la vs OpenBLAS sgemm, NumPy and PyTorch (fp32 forward)")
    p.add_argument("--quick", action="store_true", help="small shapes (seconds, not minutes)")
    p.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                   help="comma-separated la.attention variants (default: %(default)s)")
    p.add_argument("--shapes", nargs="+", type=_parse_shape, metavar="BxTxHxKxV",
                   help="shapes to run (default: the issue's three, or the quick ones)")
    p.add_argument("--repeat", type=int, default=3,
                   help="timed runs per measurement; the median is reported (default: 3)")
    p.add_argument("--chunk-size", type=int, default=64, help="chunk size C (default: 64)")
    p.add_argument("--gate-scale", type=float, default=1 / 16,
                   help="make_inputs gate_scale for the timed inputs (default: 1/16, GLA's "
                        "gate normaliser; the check against the reference uses 1.0 too)")
    p.add_argument("--threads", type=int, default=2,
                   help="threads for the batch-parallel sgemm and NumPy runs and for torch "
                        "(default: 2)")
    p.add_argument("--la-run", default=None, help="la-run executable (default: as la.runner)")
    p.add_argument("--no-la", action="store_true", help="skip la (baselines only)")
    p.add_argument("--la-parallel", action="store_true",
                   help="also run la with `la-run --parallel` (OpenMP, OMP_NUM_THREADS = "
                        "--threads), one more line per variant and shape")
    p.add_argument("--no-torch", action="store_true", help="skip PyTorch even if installed")
    p.add_argument("--no-verify", action="store_true", help="skip the check against la.reference")
    p.add_argument("--sgemm-seconds", type=float, default=0.4,
                   help="length of one sgemm timing trial (default: %(default)s s)")
    p.add_argument("--numpy-coretype", default=None,
                   help="OPENBLAS_CORETYPE for this process's NumPy (default: unset)")
    p.add_argument("--keep-openblas-env", action="store_true",
                   help="keep the inherited OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE in this process")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    p.add_argument("--sgemm-worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if args.shapes is None:
        args.shapes = list(QUICK_SHAPES if args.quick else FULL_SHAPES)
    if args.repeat < 1:
        p.error("--repeat must be >= 1")
    if args.threads < 1:
        p.error("--threads must be >= 1")
    return args


def _fix_openblas_env(args):
    """Re-execute without OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE (or with the
    requested core type) unless the environment is already as wanted."""
    if args.sgemm_worker or args.keep_openblas_env or os.environ.get(_REEXEC_MARK):
        return
    want = {} if args.numpy_coretype is None else {"OPENBLAS_CORETYPE": args.numpy_coretype}
    have = {k: os.environ[k] for k in _SCRUBBED if k in os.environ}
    if have == want:
        return
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED}
    env.update(want)
    env[_REEXEC_MARK] = "1"
    env[_INHERITED_MARK] = json.dumps(have)
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


# --------------------------------------------------------------------------
# OpenBLAS introspection (ctypes on the library NumPy loaded)
# --------------------------------------------------------------------------

def _openblas_lib():
    import ctypes
    import numpy  # noqa: F401  (loads the BLAS)
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 6 and "openblas" in os.path.basename(fields[-1]).lower():
                    return fields[-1], ctypes.CDLL(fields[-1])
    except OSError:
        pass
    return None, None


def _symbol(lib, stems):
    prefixes = ("scipy_openblas_", "openblas_")
    suffixes = ("64_", "_64_", "", "_")
    for stem in stems:
        for pre in prefixes:
            for suf in suffixes:
                try:
                    return getattr(lib, pre + stem + suf)
                except AttributeError:
                    continue
    return None


def openblas_info():
    """{'library', 'corename', 'config', 'threads'} of NumPy's OpenBLAS
    ('unknown' where it cannot be asked)."""
    import ctypes
    path, lib = _openblas_lib()
    info = {"library": path, "corename": "unknown", "config": "unknown", "threads": None}
    if lib is None:
        return info
    for key, stem in (("corename", "get_corename"), ("config", "get_config")):
        fn = _symbol(lib, [stem])
        if fn is not None:
            fn.restype = ctypes.c_char_p
            value = fn()
            info[key] = value.decode().strip() if value else "unknown"
    fn = _symbol(lib, ["get_num_threads"])
    if fn is not None:
        fn.restype = ctypes.c_int
        info["threads"] = int(fn())
    return info


def set_blas_threads(n):
    """Set OpenBLAS's thread count in this process; False if it cannot be set."""
    import ctypes
    _, lib = _openblas_lib()
    fn = None if lib is None else _symbol(lib, ["set_num_threads"])
    if fn is None:
        return False
    fn.argtypes = [ctypes.c_int]
    fn.restype = None
    fn(int(n))
    return True


# --------------------------------------------------------------------------
# sgemm 128^3 (run in a subprocess with a controlled environment)
# --------------------------------------------------------------------------

def sgemm_worker(args):
    """Print JSON: OpenBLAS kernel and sgemm 128^3 GFLOP/s on 1 thread and
    batch-parallel on args.threads threads (OpenBLAS on one thread)."""
    import threading
    import numpy as np
    n, batch = 128, 4
    info = openblas_info()
    set_blas_threads(1)
    rng = np.random.default_rng(0)

    def operands():
        return (rng.standard_normal((batch, n, n), dtype=np.float32),
                rng.standard_normal((batch, n, n), dtype=np.float32),
                np.empty((batch, n, n), dtype=np.float32))

    flop_per_call = 2.0 * n * n * n * batch
    ops = [operands() for _ in range(max(1, args.threads))]
    a, b, c = ops[0]
    for _ in range(20):
        np.matmul(a, b, out=c)
    t0 = time.perf_counter()
    calls = 0
    while time.perf_counter() - t0 < 0.1:
        np.matmul(a, b, out=c)
        calls += 1
    per_call = (time.perf_counter() - t0) / calls
    iters = max(10, int(args.sgemm_seconds / per_call))

    def trial(nthreads):
        barrier = threading.Barrier(nthreads + 1)

        def work(i):
            a, b, c = ops[i]
            barrier.wait()
            for _ in range(iters):
                np.matmul(a, b, out=c)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(nthreads)]
        for t in threads:
            t.start()
        barrier.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        return flop_per_call * iters * nthreads / (time.perf_counter() - t0) / 1e9

    result = {"info": info, "gflops": {}}
    for nthreads in sorted({1, args.threads}):
        trial(nthreads)  # warm-up
        rates = sorted(trial(nthreads) for _ in range(5))
        result["gflops"][str(nthreads)] = {"median": rates[2], "max": rates[-1]}
    print(json.dumps(result))


def measure_sgemm(args, inherited):
    """sgemm in subprocesses: env without CORETYPE/L2_SIZE, with SkylakeX, and
    (if the environment had one) with the inherited settings."""
    base = {k: v for k, v in os.environ.items()
            if k not in _SCRUBBED and k not in (_REEXEC_MARK, _INHERITED_MARK)}
    base["OPENBLAS_NUM_THREADS"] = "1"
    configs = [("CORETYPE unset (library's choice)", {}),
               ("OPENBLAS_CORETYPE=SkylakeX", {"OPENBLAS_CORETYPE": "SkylakeX"})]
    if inherited:
        label = " ".join(f"{k}={v}" for k, v in sorted(inherited.items()))
        configs.append((f"as inherited: {label}", dict(inherited)))
    rows = []
    for label, extra in configs:
        env = dict(base, **extra)
        cmd = [sys.executable, os.path.abspath(__file__), "--sgemm-worker",
               f"--threads={args.threads}", f"--sgemm-seconds={args.sgemm_seconds}"]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            print(f"  sgemm worker failed for {label}:\n{proc.stderr}", file=sys.stderr)
            continue
        data = json.loads(proc.stdout.strip().splitlines()[-1])
        rows.append({"label": label, "env": extra, **data})
    return rows


# --------------------------------------------------------------------------
# FLOP count
# --------------------------------------------------------------------------

def chunked_flops(variant, B, T, H, K, V, HV=None, C=64):
    """FLOPs of the chunked forward, the issue's count.

    Per chunk and value head: ``2*C*C*K (Q K^T) + 2*C*C*V (scores x V) +
    2*C*K*V (state read) + 2*C*K*V (state update)``, plus for the delta rule
    ``2*C*C*K (K K^T) + C^3/3 (the triangular inverse)``; times
    ``B * HV * ceil(T / C)``. The key-side products are counted per value head
    (with grouped heads, HV > H, each value head pays for its own; all shapes
    here have HV = H); the general low-rank form (erase_write, dplr) is counted
    as the delta rule. The delta rule's other products (W = T (beta K),
    U = T (beta V), W S) are not in the issue's count, so its GFLOP/s are a
    lower bound of the work done; every implementation is measured against the
    same count, so the ratios are ratios of times.
    """
    from la.testing import VARIANTS
    HV = H if HV is None else HV
    per = 2 * C * C * K + 2 * C * C * V + 4 * C * K * V
    if VARIANTS[variant][0] in ("delta", "erase_write", "dplr"):
        per += 2 * C * C * K + C ** 3 / 3
    return B * HV * (-(-T // C)) * per


def all_product_flops(variant, B, T, H, K, V, HV=None, C=64):
    """FLOPs of every matrix product the chunked forward performs: the
    issue's count (:func:`chunked_flops`) plus, for the delta rule, the
    products it leaves out, ``2*C*C*K (W = T (beta K)) + 2*C*C*V (U = T
    (beta V)) + 2*C*K*V (W S)`` per chunk and value head (issue 22's
    target counts them). Products are counted whole (la skips the zero
    triangles of the causal C x C products; so does this count not)."""
    from la.testing import VARIANTS
    HV = H if HV is None else HV
    flops = chunked_flops(variant, B, T, H, K, V, HV=HV, C=C)
    if VARIANTS[variant][0] in ("delta", "erase_write", "dplr"):
        flops += B * HV * (-(-T // C)) * (2 * C * C * K + 2 * C * C * V + 2 * C * K * V)
    return flops


# --------------------------------------------------------------------------
# timing helpers
# --------------------------------------------------------------------------

def _median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def time_call(fn, repeat, warmup=1):
    """Median wall time of fn() in ms (after `warmup` untimed calls) and its
    last result."""
    out = None
    for _ in range(warmup):
        out = fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return _median(times), out


def _split_heads(inputs, parts):
    """Split a make_inputs dict into `parts` dicts along the head axis."""
    import numpy as np
    H = inputs["q"].shape[2]
    HV = inputs["v"].shape[2]
    if H % parts:
        return None
    group = HV // H
    hs = H // parts
    out = []
    for p in range(parts):
        h0, h1 = p * hs, (p + 1) * hs
        d = {}
        for key, x in inputs.items():
            if x is None:
                continue
            if key in ("q", "k", "g", "beta"):
                d[key] = x[:, :, h0:h1]
            elif key == "v":
                d[key] = x[:, :, h0 * group:h1 * group]
            elif key == "log_decay":
                d[key] = np.asarray(x)[h0:h1]
            elif key == "initial_state":
                d[key] = x[:, h0 * group:h1 * group]
            else:
                raise ValueError(f"cannot split input {key!r}")
        out.append(d)
    return out


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------

def _host_vector_bits():
    """la-run's default vector-bits on this machine (its register tile's width)."""
    try:
        from la import ops
        return ops._host_vector_bits()
    except Exception as e:  # no build: say so, the sgemm still runs
        return f"unknown ({e})"


def _machine_facts():
    facts = {"nproc": os.cpu_count()}
    try:
        facts["nproc"] = int(subprocess.run(["nproc"], capture_output=True, text=True).stdout)
    except Exception:
        pass
    model, flags = "unknown", ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model == "unknown":
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = line.split(":", 1)[1]
    except OSError:
        pass
    facts["cpu"] = model
    facts["avx512f"] = " avx512f " in f" {flags} "
    try:
        facts["loadavg"] = os.getloadavg()
    except OSError:
        facts["loadavg"] = None
    try:
        head = subprocess.run(["git", "-C", _REPO, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", _REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        facts["git"] = head + (" + uncommitted changes" if dirty else "")
    except Exception:
        facts["git"] = "unknown"
    return facts


def _fmt(x, spec):
    return "-" if x is None else format(x, spec)


def _rounded(x):
    """x with its floats rounded to 4 significant digits (for printing)."""
    if isinstance(x, float):
        return float(f"{x:.4g}")
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_rounded(v) for v in x]
    return x


def _ms(x):
    """A time in ms with about 3 significant digits."""
    if x is None:
        return "-"
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 100 else f"{x:.0f}"


def main(argv=None):
    args = parse_args(argv)
    _fix_openblas_env(args)
    if args.sgemm_worker:
        sgemm_worker(args)
        return 0

    sys.path.insert(0, os.path.join(_REPO, "python"))
    sys.path.insert(0, _HERE)
    import concurrent.futures
    import numpy as np
    from la import runner
    from la.testing import VARIANTS, make_inputs, reference_for, rel_rms
    import numpy_chunked as npc

    for v in args.variants:
        if v not in VARIANTS:
            sys.exit(f"unknown variant {v!r}; la variants: {', '.join(VARIANTS)}")
        if v not in npc.VARIANTS:
            print(f"note: {v} has no NumPy/PyTorch chunked baseline (they implement "
                  f"{', '.join(npc.VARIANTS)}): la and sgemm only", flush=True)
    C = args.chunk_size
    inherited = json.loads(os.environ.get(_INHERITED_MARK, "{}"))

    # ---- header ----
    facts = _machine_facts()
    blas = openblas_info()
    la_run = None if args.no_la else (args.la_run or runner.find_la_run())
    if not args.no_la and (la_run is None or not os.path.isfile(la_run)):
        sys.exit("la-run not found (build it, or pass --la-run / set LA_RUN; --no-la skips la)")
    la_modes = []  # (label, la-run executable or wrapper)
    wrap_dir = None
    if la_run:
        la_run = os.path.abspath(la_run)
        la_modes.append(("1", la_run))
        if args.la_parallel:
            import tempfile
            wrap_dir = tempfile.mkdtemp(prefix="la-bench-")
            wrapper = os.path.join(wrap_dir, "la-run-parallel")
            with open(wrapper, "w") as f:
                f.write("#!/bin/sh\n"
                        f"OMP_NUM_THREADS={args.threads} exec '{la_run}' \"$@\" --parallel\n")
            os.chmod(wrapper, 0o755)
            la_modes.append((f"{args.threads} (--parallel)", wrapper))
    tb = None if args.no_torch else npc.torch_backend()
    torch_note = "skipped (--no-torch)" if args.no_torch else "not installed (skipped)"
    if tb is not None:
        tb.torch.set_num_threads(args.threads)
        torch_note = (f"torch {tb.torch.__version__}, {tb.torch.get_num_threads()} threads")

    print("# la CPU benchmark (fp32 forward)")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    print(f"command: {' '.join([os.path.basename(sys.executable)] + sys.argv)}")
    print(f"machine: nproc={facts['nproc']}, cpu: {facts['cpu']}, avx512f: {facts['avx512f']}, "
          f"la's vector-bits here: {_host_vector_bits()}, loadavg at start: {facts['loadavg']}")
    print(f"repository: {facts['git']}; la-run: {la_run or '-'}")
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}; OpenBLAS in this process: "
          f"core {blas['corename']}, {blas['threads']} threads, config '{blas['config']}'")
    print(f"environment inherited: {inherited or 'no OPENBLAS_CORETYPE/L2_SIZE'}; this process: "
          + (", ".join(f"{k}={os.environ[k]}" for k in _SCRUBBED if k in os.environ)
             or "both unset"))
    print(f"torch: {torch_note}")
    la_threads = ("1 thread" + (f", and {args.threads} threads with la-run --parallel (OpenMP)"
                                if args.la_parallel else ""))
    print(f"chunk size {C}; la on {la_threads}; "
          f"repeat {args.repeat} (median); gate_scale {args.gate_scale:g}")
    if facts["loadavg"] and facts["loadavg"][0] > 0.5:
        print(f"WARNING: load average {facts['loadavg'][0]:.2f} at start: other work shares "
              "the cores, timings are pessimistic and noisy")
    print(flush=True)

    # ---- sgemm ----
    print(f"## OpenBLAS sgemm 128x128x128 (batch of 4 per call; subprocess, "
          f"OPENBLAS_NUM_THREADS=1; {args.threads} threads = one GEMM stream per thread)")
    sg = measure_sgemm(args, inherited)
    print(f"| environment | kernel (core) | 1 thread GFLOP/s | {args.threads} threads GFLOP/s |")
    print("|---|---|---|---|")
    for r in sg:
        g1 = r["gflops"]["1"]["median"]
        gn = r["gflops"][str(args.threads)]["median"]
        print(f"| {r['label']} | {r['info']['corename']} | {g1:.1f} | {gn:.1f} |")
    if not sg:
        sys.exit("no sgemm measurement succeeded")
    best1 = max(sg, key=lambda r: r["gflops"]["1"]["median"])
    bestn = max(sg, key=lambda r: r["gflops"][str(args.threads)]["median"])
    sgemm1 = best1["gflops"]["1"]["median"]
    sgemmn = bestn["gflops"][str(args.threads)]["median"]
    print(f"limit used for the ratios: {sgemm1:.1f} GFLOP/s on 1 thread "
          f"({best1['info']['corename']}), {sgemmn:.1f} on {args.threads} threads "
          f"({bestn['info']['corename']})")
    print(flush=True)

    # ---- NumPy runners ----
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=args.threads)
    can_set_threads = set_blas_threads(1)

    def numpy_1t(inputs):
        return npc.chunked_forward(variant, npc.prepare(inputs), chunk_size=C)

    def numpy_nt(parts, shape):
        B, T, H, K, V = shape
        HVp = parts[0]["v"].shape[2]
        o = np.empty((B, T, HVp * len(parts), V), dtype=np.float32)

        def one(i):
            oi, _ = npc.chunked_forward(variant, npc.prepare(parts[i]), chunk_size=C)
            o[:, :, i * HVp:(i + 1) * HVp] = oi

        list(pool.map(one, range(len(parts))))
        return o

    # ---- check against the fp64 reference ----
    if not args.no_verify:
        print("## check against la.reference (fp64), small case B=2 T=150 H=2 HV=4 K=32 V=48")
        print("| variant | gate_scale | numpy rel_rms o / state | la rel_rms o / state "
              + ("(1 thread, --parallel) " if args.la_parallel else "") + "| "
              "torch rel_rms o |")
        print("|---|---|---|---|---|")
        for variant in args.variants:
            for gs in sorted({1.0, args.gate_scale}, reverse=True):
                inp = make_inputs(variant, 2, 150, 2, 32, 48, HV=4, gate_scale=gs, seed=1)
                ro, rs = reference_for(variant, inp)
                peer = variant in npc.VARIANTS
                if peer:
                    o, s = npc.chunked_forward(variant, npc.prepare(inp), chunk_size=C)
                    e_o, e_s = rel_rms(ro, o), rel_rms(rs, s)
                la_txt = []
                for _, exe in la_modes:
                    lo, ls, _ = runner.run_attention(variant, inp, chunk_size=C, la_run=exe)
                    la_txt.append(f"{rel_rms(ro, lo):.1e} / {rel_rms(rs, ls):.1e}")
                la_txt = ", ".join(la_txt) or "-"
                t_txt = "-"
                if tb is not None and peer:
                    with tb.torch.inference_mode():
                        to, _ = npc.chunked_forward(variant, npc.prepare(inp, tb),
                                                    chunk_size=C, xp=tb)
                    t_txt = f"{rel_rms(ro, tb.to_numpy(to)):.1e}"
                np_txt = f"{e_o:.1e} / {e_s:.1e}" if peer else "-"
                print(f"| {variant} | {gs:g} | {np_txt} | {la_txt} | {t_txt} |", flush=True)
                if peer and not (e_o < 1e-4 and e_s < 1e-4):
                    sys.exit(f"the NumPy chunked {variant} disagrees with the reference")
        print(flush=True)

    # ---- timing ----
    print("## timings (one line per measurement as it completes)", flush=True)
    results = []
    for shape in args.shapes:
        B, T, H, K, V = shape
        for variant in args.variants:
            inputs = make_inputs(variant, B, T, H, K, V, gate_scale=args.gate_scale, seed=0)
            flops = chunked_flops(variant, B, T, H, K, V, C=C)
            row = {"variant": variant, "shape": list(shape), "gflop": flops / 1e9,
                   "gflop_all": all_product_flops(variant, B, T, H, K, V, C=C) / 1e9}
            la_outs = []
            row["la"] = []
            for label, exe in la_modes:
                o_la, _, tm = runner.run_attention(variant, inputs, chunk_size=C,
                                                   repeat=args.repeat, la_run=exe,
                                                   timeout=3600)
                la_outs.append(o_la)
                row["la"].append({"threads": label, "ms": tm["run_median_ms"],
                                  "min_ms": tm["run_min_ms"], "compile_ms": tm["compile_ms"]})
            if variant not in npc.VARIANTS:  # la only
                results.append(row)
                print("  " + json.dumps(_rounded(row)), flush=True)
                continue
            set_blas_threads(1)
            row["np1_ms"], (o_np, _) = time_call(lambda: numpy_1t(inputs), args.repeat)
            if args.threads > 1:
                parts = _split_heads(inputs, args.threads)
                if parts is not None:
                    row["npn_ms"], o_npn = time_call(lambda: numpy_nt(parts, shape), args.repeat)
                    row["rel_np_n"] = rel_rms(o_np, o_npn)
            if tb is not None:
                tin = npc.prepare(inputs, tb)
                with tb.torch.inference_mode():
                    row["torch_ms"], (o_t, _) = time_call(
                        lambda: npc.chunked_forward(variant, tin, chunk_size=C, xp=tb),
                        args.repeat)
                row["rel_torch_np"] = rel_rms(o_np, tb.to_numpy(o_t))
            for entry, o_la in zip(row["la"], la_outs):
                entry["rel_rms_vs_numpy"] = rel_rms(o_np, o_la)
            results.append(row)
            print("  " + json.dumps(_rounded(row)), flush=True)
    pool.shutdown()

    # ---- table ----
    n = args.threads
    print()
    print(f"## results (GFLOP/s over the chunked algorithm's FLOPs, the issue's count; "
          f"'all products' adds the delta rule's W, U and W S products; "
          f"'x numpy' = NumPy time / "
          f"la time, >1 means la is faster; sgemm limit {sgemm1:.0f} GFLOP/s on 1 thread, "
          f"{sgemmn:.0f} on {n})")
    head = (f"| variant | B,T,H,K,V | GFLOP | la threads | la ms | la GFLOP/s | la / sgemm 1T "
            f"| la / sgemm {n}T | all products: GFLOP | la / sgemm 1T | la / sgemm {n}T "
            f"| la compile ms | numpy 1T ms | numpy {n}T ms "
            f"| numpy best GFLOP/s | la x numpy 1T | la x numpy best | torch ms | la x torch "
            f"| rel_rms la vs numpy |")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for r in results:
        g = r["gflop"]
        np_best = min((x for x in (r.get("np1_ms"), r.get("npn_ms")) if x is not None),
                      default=None)
        for entry in r["la"] or [{}]:
            la_ms = entry.get("ms")
            la_gf = g / (la_ms / 1e3) if la_ms else None
            cells = [
                r["variant"], ",".join(map(str, r["shape"])), f"{g:.2f}",
                entry.get("threads", "-"), _ms(la_ms), _fmt(la_gf, ".2f"),
                _fmt(la_gf and la_gf / sgemm1, ".2%"), _fmt(la_gf and la_gf / sgemmn, ".2%"),
                f"{r['gflop_all']:.2f}",
                _fmt(la_ms and r["gflop_all"] / (la_ms / 1e3) / sgemm1, ".2%"),
                _fmt(la_ms and r["gflop_all"] / (la_ms / 1e3) / sgemmn, ".2%"),
                _fmt(entry.get("compile_ms"), ".0f"),
                _ms(r.get("np1_ms")), _ms(r.get("npn_ms")),
                _fmt(np_best and g / (np_best / 1e3), ".1f"),
                _fmt(la_ms and r.get("np1_ms") and r["np1_ms"] / la_ms, ".3f"),
                _fmt(la_ms and np_best and np_best / la_ms, ".3f"),
                _ms(r.get("torch_ms")),
                _fmt(la_ms and r.get("torch_ms") and r["torch_ms"] / la_ms, ".3f"),
                _fmt(entry.get("rel_rms_vs_numpy"), ".1e"),
            ]
            print("| " + " | ".join(cells) + " |")
    if wrap_dir:
        import shutil
        shutil.rmtree(wrap_dir, ignore_errors=True)
    end_load = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(f"\nloadavg at end: {end_load}")
    if not can_set_threads:
        print("note: could not set OpenBLAS's thread count from Python; the 'numpy 1T' column "
              "ran with the library's default threading")

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"facts": facts, "openblas": blas, "inherited_env": inherited,
                       "sgemm": sg, "sgemm_limit": {"1": sgemm1, str(n): sgemmn},
                       "torch": torch_note, "args": {k: v for k, v in vars(args).items()},
                       "results": results}, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
