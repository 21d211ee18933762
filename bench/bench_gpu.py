#!/usr/bin/env python3
"""GPU benchmark: la's kernels against flash-linear-attention and a GEMM.

A program, not a test, for the machine with the GPU (see docs/performance.md,
"GPU"). For GLA, Gated DeltaNet and KDA at (B, T, H, D) = (1, 8192, 16, 128),
(2, 16384, 16, 128) and (1, 8192, 32, 128) (K = V = D, HV = H, no initial state, final state
returned) it prints, all measured in one run:

* **la**: the ahead-of-time libraries of :mod:`la.gpu` (la-lower-to-nvvm's
  defaults: chunks of 16, value tiles of 16, 256 threads per block), compiled beforehand
  by ``scripts/gpu-device-prepare.sh`` into ``.gpu/kernels`` (this machine
  needs no LLVM or MLIR), called on PyTorch CUDA tensors; f32 and bf16
  (q, k, v and o in bf16; gates, beta and the state in f32);
* **fla**: flash-linear-attention's chunk kernels ``fla.ops.gla.chunk_gla``,
  ``fla.ops.gated_delta_rule.chunk_gated_delta_rule`` and
  ``fla.ops.kda.chunk_kda`` on the same inputs in fla's layout
  ``[B, T, H, D]``: bf16, as fla is normally used, and f32 (gates and beta
  in f32 in both);
* **GEMM**: ``torch.matmul`` of two 8192 x 8192 matrices in bf16 and in f32
  (TF32 off), the machine's matrix-product rate in this run.

Times are CUDA-event times, the median of up to ``--repeat`` timed calls
after ``--warmup`` untimed ones (the first call's wall time, which includes
fla's Triton compilation and autotuning, is printed apart). la's function
launches on its own stream and waits for it, so its event time is the host
call: stream creation, launch, the kernel and the wait. TFLOP/s use the
chunked algorithm's FLOP count (``chunked_flops`` of bench/bench_cpu.py, chunk
64, the same count for every implementation, so ratios of rates are ratios of
times). ``la/fla`` is la's time over fla's at the same dtype (above 1: la is
slower); ``% GEMM`` is the rate over the bf16 (f32 for f32 rows) GEMM's.
``rel_rms`` compares la's ``o`` and final state with fla's at the same dtype
(la's f32 kernels match the fp64 reference within 1e-4 on small shapes, see
bench/gpu_check.py).

It degrades gracefully: without fla (``pip install fla-core``; the device
check installs the wheel that the prepare script downloaded) its columns are
skipped with a message; without a compiled la kernel, la's; without PyTorch
or a GPU it exits with status 2 and the reason. ``--budget`` bounds the whole
run: measurements that would start after it are skipped and listed.

Usage::

    python3 bench/bench_gpu.py [--kernels .gpu/kernels] [--json out.json]
    python3 bench/bench_gpu.py --variants gla --shapes 1x8192x16x128 --la-dtypes f32
"""

import argparse
import json
import os
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(_HERE)
for _path in (os.path.join(_REPO, "python"), _HERE):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import gpu_cases  # noqa: E402
from bench_cpu import chunked_flops  # noqa: E402

#: fla's function per la variant: (module, function name).
FLA_FUNCTIONS = {
    "gla": ("fla.ops.gla", "chunk_gla"),
    "gated_deltanet": ("fla.ops.gated_delta_rule", "chunk_gated_delta_rule"),
    "kda": ("fla.ops.kda", "chunk_kda"),
}


def _parse_shape(text):
    parts = text.lower().replace(",", "x").split("x")
    if len(parts) != 4:
        raise argparse.ArgumentTypeError(f"shape must be BxTxHxD, got {text!r}")
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape must be BxTxHxD, got {text!r}") from None
    if min(shape) < 1:
        raise argparse.ArgumentTypeError(f"shape dimensions must be >= 1, got {text!r}")
    return shape


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="la GPU benchmark: la's AOT kernels vs flash-linear-attention and a GEMM")
    p.add_argument("--kernels", default=gpu_cases.DEFAULT_DIR,
                   help="folder of la's compiled kernels (default: %(default)s)")
    p.add_argument("--variants", default=",".join(gpu_cases.BENCH_VARIANTS),
                   help="comma-separated variants (default: %(default)s)")
    p.add_argument("--shapes", nargs="+", type=_parse_shape, metavar="BxTxHxD",
                   default=list(gpu_cases.BENCH_SHAPES), help="shapes (default: the three of "
                   "the issue)")
    p.add_argument("--la-dtypes", default="f32,bf16", help="la's dtypes (default: %(default)s)")
    p.add_argument("--impls", default=",".join(gpu_cases.BENCH_IMPLS),
                   help="la's implementations (default: %(default)s; those not compiled "
                        "for a dtype by bench/gpu_cases.py are left out)")
    p.add_argument("--fla-dtypes", default="bf16,f32",
                   help="fla's dtypes (default: %(default)s)")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls first (default: 3)")
    p.add_argument("--repeat", type=int, default=20,
                   help="at most this many timed calls; the median is reported (default: 20)")
    p.add_argument("--seconds", type=float, default=2.0,
                   help="fewer timed calls (at least 3) when one measurement would take "
                        "longer than this (default: %(default)s s)")
    p.add_argument("--budget", type=float, default=300.0,
                   help="seconds for the whole run; later measurements are skipped "
                        "(default: %(default)s)")
    p.add_argument("--gemm-size", type=int, default=8192, help="GEMM size (default: 8192)")
    p.add_argument("--gate-scale", type=float, default=1 / 16,
                   help="log-gates are gate_scale * logsigmoid(N(0,1)) (default: 1/16)")
    p.add_argument("--no-fla", action="store_true", help="skip flash-linear-attention")
    p.add_argument("--no-la", action="store_true", help="skip la")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = p.parse_args(argv)
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    for v in args.variants:
        if v not in FLA_FUNCTIONS:
            p.error(f"unknown variant {v!r}; choose from {', '.join(FLA_FUNCTIONS)}")
    args.la_dtypes = [d.strip() for d in args.la_dtypes.split(",") if d.strip()]
    args.impls = [i.strip() for i in args.impls.split(",") if i.strip()]
    for i in args.impls:
        if i not in gpu_cases.BENCH_IMPLS:
            p.error(f"unknown implementation {i!r}; choose from {', '.join(gpu_cases.BENCH_IMPLS)}")
    args.fla_dtypes = [d.strip() for d in args.fla_dtypes.split(",") if d.strip()]
    for d in args.la_dtypes + args.fla_dtypes:
        if d not in ("f32", "bf16"):
            p.error(f"dtypes are f32 or bf16, got {d!r}")
    if args.repeat < 1 or args.warmup < 1:
        p.error("--repeat and --warmup must be >= 1")
    return args


# --------------------------------------------------------------------------
# helpers (torch is imported in main)
# --------------------------------------------------------------------------

torch = None


def _median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def time_cuda(fn, warmup, repeat, seconds):
    """``(median ms, first call's wall ms, timed calls, last result)`` of
    ``fn``: ``warmup`` untimed calls (the first one timed by the wall clock),
    then up to ``repeat`` calls timed with CUDA events on the current stream,
    each synchronised, fewer (at least 3) when they would take longer than
    ``seconds``."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    first_ms = (time.perf_counter() - t0) * 1e3
    for _ in range(warmup - 1):
        if first_ms > 250 * seconds:  # slow: the timed calls are enough
            break
        out = fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    times = []
    n = repeat
    while len(times) < n:
        start.record()
        out = fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
        if len(times) == 1:
            n = max(3, min(repeat, int(seconds * 1e3 / max(times[0], 1e-3))))
    return _median(times), first_ms, len(times), out


def rel_rms(ref, out):
    """``rms(ref - out) / rms(ref)`` of two tensors, in float64."""
    ref = ref.detach().to(torch.float64)
    out = out.detach().to(torch.float64)
    if ref.shape != out.shape:
        raise ValueError(f"shape mismatch: {tuple(ref.shape)} vs {tuple(out.shape)}")
    den = ref.pow(2).mean().sqrt().item()
    num = (ref - out).pow(2).mean().sqrt().item()
    return num / den if den else (0.0 if num == 0 else float("inf"))


def make_inputs(variant, B, T, H, D, seed, gate_scale):
    """f32 inputs on the GPU in fla's layout, as la.testing.make_inputs draws
    them: q, k, v ~ N(0, 1) (k L2-normalised for the delta rule), log-gates
    ``gate_scale * logsigmoid(N(0, 1))``, beta = sigmoid(N(0, 1))."""
    import torch.nn.functional as F
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device="cuda", dtype=torch.float32)

    inputs = {"q": randn(B, T, H, D), "k": randn(B, T, H, D), "v": randn(B, T, H, D)}
    if variant in ("gated_deltanet", "kda"):
        inputs["k"] = F.normalize(inputs["k"], p=2, dim=-1)
    gate_shape = (B, T, H) if variant == "gated_deltanet" else (B, T, H, D)
    inputs["g"] = gate_scale * F.logsigmoid(randn(*gate_shape))
    if variant in ("gated_deltanet", "kda"):
        inputs["beta"] = torch.sigmoid(randn(B, T, H))
    return inputs


def _qkv_cast(inputs, dtype):
    """q, k, v in ``dtype`` (a torch dtype); gates and beta stay f32."""
    return {name: (t.to(dtype) if name in ("q", "k", "v") else t)
            for name, t in inputs.items()}


_TORCH = {"f32": "float32", "bf16": "bfloat16"}


# --------------------------------------------------------------------------
# the three implementations
# --------------------------------------------------------------------------

class LaRunner:
    """la's compiled kernel for one case, on torch tensors."""

    def __init__(self, kernel, inputs, dtype):
        self.kernel = kernel
        cast = _qkv_cast(inputs, getattr(torch, _TORCH[dtype]))
        self.tensors = []
        for p in kernel.params:
            if p.output:
                t = torch.zeros(p.shape, device="cuda",
                                dtype=getattr(torch, _TORCH[p.dtype]))
            else:
                t = cast[p.name].contiguous()
            self.tensors.append(t)
        torch.cuda.synchronize()
        kernel(*self.tensors)  # checks shapes and dtypes, runs once
        self.pointers = [t.data_ptr() for t in self.tensors]

    def __call__(self):
        self.kernel(*self.pointers, check=False)
        return self.outputs()

    def outputs(self):
        outs = [t for t, p in zip(self.tensors, self.kernel.params) if p.output]
        return outs[0], (outs[1] if len(outs) > 1 else None)


def fla_function(variant):
    import importlib
    module, name = FLA_FUNCTIONS[variant]
    return getattr(importlib.import_module(module), name)


def fla_runner(variant, inputs, dtype):
    """A no-argument call of fla's chunk kernel on ``inputs`` (q, k, v in
    ``dtype``; g and beta f32, or in ``dtype`` if fla refuses f32 gates).
    Returns ``(call, note, first_ms)``: ``first_ms`` is the wall time of the
    first call (Triton's compilation and autotuning)."""
    function = fla_function(variant)
    torch_dtype = getattr(torch, _TORCH[dtype])
    note = ""

    def make(gates_dtype):
        x = _qkv_cast(inputs, torch_dtype)
        if gates_dtype is not None:
            x = {n: (t.to(gates_dtype) if n in ("g", "beta") else t) for n, t in x.items()}
        args = [x["q"], x["k"], x["v"], x["g"]] + ([x["beta"]] if "beta" in x else [])

        def call():
            with torch.no_grad():
                o, state = function(*args, output_final_state=True)[:2]
            return o, state
        return call

    def first(call):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        call()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3

    call = make(None)
    try:
        first_ms = first(call)
    except Exception as error:  # fla's checks differ between versions
        if dtype == "f32":
            raise
        note = f"f32 gates refused ({type(error).__name__}: {error}); gates in {dtype}"
        call = make(torch_dtype)
        first_ms = first(call)
    return call, note, first_ms


def measure_gemm(n, dtype, args):
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    ms, _, _, _ = time_cuda(lambda: torch.matmul(a, b), 3, 10, args.seconds)
    return 2 * n ** 3 / (ms * 1e-3) / 1e12, ms


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------

def _use_kernels_runtime(directory):
    """Without a runtime of its own (no build tree), la.cuda uses the copy that
    the prepare script put next to the kernels."""
    from la import cuda as la_cuda
    sibling = os.path.join(directory, "libla_cuda_runtime.so")
    if la_cuda.library_path() is None and os.path.isfile(sibling):
        os.environ["LA_CUDA_RUNTIME_LIB"] = os.path.abspath(sibling)


def _cell(x, spec):
    return "-" if x is None else format(x, spec)


def main(argv=None):
    global torch
    args = parse_args(argv)
    start_time = time.perf_counter()
    try:
        import torch as _torch
    except ImportError as error:
        print(f"bench_gpu: PyTorch is not installed ({error}): this benchmark needs PyTorch "
              "with CUDA and a GPU", file=sys.stderr)
        return 2
    torch = _torch
    if not torch.cuda.is_available():
        print("bench_gpu: no CUDA GPU visible to PyTorch: nothing to measure", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    from la import cuda as la_cuda
    from la import gpu as la_gpu

    facts = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    try:
        import triton
        facts["triton"] = triton.__version__
    except ImportError:
        facts["triton"] = None
    notes = []

    # fla
    fla_ok = not args.no_fla
    if fla_ok:
        try:
            import fla
            facts["fla"] = getattr(fla, "__version__", "?")
            for v in args.variants:
                fla_function(v)
        except Exception as error:
            fla_ok = False
            notes.append(f"fla skipped: cannot import flash-linear-attention's kernels "
                         f"({type(error).__name__}: {error}); install fla-core")
    else:
        notes.append("fla skipped (--no-fla)")
    # la
    la_ok = not args.no_la
    _use_kernels_runtime(args.kernels)
    if la_ok:
        ok, reason = la_cuda.available()
        facts["la_runtime"] = la_cuda.library_path()
        if not ok:
            la_ok = False
            notes.append(f"la skipped: its CUDA runtime finds no GPU: {reason}")
    else:
        notes.append("la skipped (--no-la)")

    print(f"bench_gpu: {facts['device']}; torch {facts['torch']}, triton {facts['triton']}, "
          f"fla {facts.get('fla', '-')}; la kernels from {args.kernels}")
    for note in notes:
        print("note: " + note)

    # GEMM rates of this run
    gemm = {}
    for name, dtype in (("bf16", torch.bfloat16), ("f32", torch.float32)):
        tflops, ms = measure_gemm(args.gemm_size, dtype, args)
        gemm[name] = tflops
        print(f"GEMM {name} {args.gemm_size}^3 (torch.matmul{', TF32 off' if name == 'f32' else ''})"
              f": {ms:.3f} ms, {tflops:.1f} TFLOP/s")
    sys.stdout.flush()

    rows = []
    skipped = []
    header_printed = False
    for (B, T, H, D) in args.shapes:
        for variant in args.variants:
            flops = chunked_flops(variant, B, T, H, D, D, C=64)
            inputs = make_inputs(variant, B, T, H, D, seed=0, gate_scale=args.gate_scale)
            outs = {}
            label = f"{variant} {B}x{T}x{H}x{D}"
            jobs = []
            if la_ok:
                compiled = {c.name for c in gpu_cases.BENCH_CASES}
                jobs += [(impl, dt) for impl in args.impls for dt in args.la_dtypes
                         if gpu_cases.bench_case(variant, B, T, H, D, dt, impl).name
                         in compiled]
            if fla_ok:
                jobs += [("fla", dt) for dt in args.fla_dtypes]
            for impl, dt in jobs:
                if time.perf_counter() - start_time > args.budget:
                    skipped.append(f"{label} {impl} {dt}")
                    continue
                row = {"variant": variant, "shape": [B, T, H, D], "impl": impl, "dtype": dt,
                       "gflop": flops / 1e9}
                try:
                    if impl.startswith("la"):
                        # la-tc: tensor cores (tf32 for f32, bf16 mma for bf16);
                        # la-cpC: the chunk-parallel schedule, chunks of C
                        case = gpu_cases.bench_case(variant, B, T, H, D, dt, impl)
                        path = gpu_cases.library_path(case, args.kernels)
                        if not os.path.isfile(path):
                            raise FileNotFoundError(
                                f"{path} is missing: compile it with scripts/"
                                "gpu-device-prepare.sh (or bench/gpu_cases.py) first")
                        kernel = la_gpu.load_attention(path)
                        call = LaRunner(kernel, inputs, dt)
                        ms, first, n, out = time_cuda(call, args.warmup, args.repeat,
                                                      args.seconds)
                        kernel.check()
                        row["pipeline"] = kernel.manifest.get("pipeline_options") or "defaults"
                    else:
                        call, note, first = fla_runner(variant, inputs, dt)
                        if note:
                            row["note"] = note
                        ms, _, n, out = time_cuda(call, args.warmup, args.repeat,
                                                  args.seconds)
                except Exception as error:
                    row["error"] = f"{type(error).__name__}: {error}"
                    print(f"{label} {impl} {dt}: {row['error']}")
                    rows.append(row)
                    continue
                row.update(ms=ms, first_ms=first, runs=n,
                           tflops=flops / (ms * 1e-3) / 1e12)
                outs[(impl, dt)] = out
                rows.append(row)
                torch.cuda.synchronize()
            # accuracy: la against fla at the same dtype (else fla's other)
            for row in rows:
                if row["variant"] != variant or row["shape"] != [B, T, H, D] or \
                        not row["impl"].startswith("la") or \
                        (row["impl"], row["dtype"]) not in outs:
                    continue
                ref_key = ("fla", row["dtype"]) if ("fla", row["dtype"]) in outs else \
                    next((k for k in outs if k[0] == "fla"), None)
                if ref_key is None and row["dtype"] != "f32" and ("la", "f32") in outs:
                    ref_key = ("la", "f32")  # without fla: bf16 against la's own f32
                if ref_key is None:
                    continue
                o, s = outs[(row["impl"], row["dtype"])]
                fo, fs = outs[ref_key]
                row["vs"] = f"{ref_key[0]} {ref_key[1]}"
                try:
                    row["rel_rms_o"] = rel_rms(fo, o)
                    row["rel_rms_state"] = rel_rms(fs, s) if fs is not None and s is not None \
                        else None
                except Exception as error:
                    row["rel_rms_error"] = f"{type(error).__name__}: {error}"
                fla_row = next((r for r in rows if r["variant"] == variant
                                and r["shape"] == [B, T, H, D] and r["impl"] == "fla"
                                and r["dtype"] == row["dtype"] and "ms" in r), None)
                if fla_row is not None:
                    row["la_over_fla"] = row["ms"] / fla_row["ms"]
            for key_row in rows:
                if "tflops" in key_row and "pct_gemm" not in key_row:
                    base = gemm["f32"] if key_row["dtype"] == "f32" else gemm["bf16"]
                    key_row["pct_gemm"] = key_row["tflops"] / base
            del inputs, outs
            torch.cuda.empty_cache()
            _print_rows([r for r in rows if r["variant"] == variant
                         and r["shape"] == [B, T, H, D]], header=not header_printed)
            header_printed = True
            sys.stdout.flush()

    if skipped:
        print(f"\nskipped after the {args.budget:.0f} s budget: " + ", ".join(skipped))
    print(f"\nbench_gpu: done in {time.perf_counter() - start_time:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"facts": facts, "notes": notes, "gemm_tflops": gemm, "rows": rows,
                       "skipped": skipped, "args": vars(args)}, f, indent=1, default=str)
    return 0


_HEADER = ("| variant | B,T,H,D | impl | dtype | GFLOP | ms | first call ms | runs | TFLOP/s "
           "| % GEMM | la/fla | rel_rms o | rel_rms state | vs |")


def _print_rows(rows, header):
    if header:
        print()
        print(_HEADER)
        print("|" + "---|" * (_HEADER.count("|") - 1))
    for r in rows:
        if "error" in r:
            cells = [r["variant"], ",".join(map(str, r["shape"])), r["impl"], r["dtype"],
                     f"{r['gflop']:.1f}", "error: " + r["error"][:120]] + [""] * 8
        else:
            cells = [r["variant"], ",".join(map(str, r["shape"])), r["impl"], r["dtype"],
                     f"{r['gflop']:.1f}", f"{r['ms']:.3f}", f"{r['first_ms']:.0f}",
                     str(r["runs"]), f"{r['tflops']:.2f}", _cell(r.get("pct_gemm"), ".1%"),
                     _cell(r.get("la_over_fla"), ".2f"), _cell(r.get("rel_rms_o"), ".1e"),
                     _cell(r.get("rel_rms_state"), ".1e"), r.get("vs", "-")]
        print("| " + " | ".join(cells) + " |")
        if r.get("note"):
            print(f"  note ({r['impl']} {r['dtype']}): {r['note']}")
        if r.get("rel_rms_error"):
            print(f"  rel_rms ({r['impl']} {r['dtype']}) failed: {r['rel_rms_error']}")


if __name__ == "__main__":
    sys.exit(main())
