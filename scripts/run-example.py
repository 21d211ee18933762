#!/usr/bin/env python3
"""Main job: compile and run one attention layer per variant on the CPU.

For each variant, generates realistic inputs (la.testing.make_inputs), writes
the la.attention function (la.runner.attention_mlir), compiles and runs it
with build/bin/la-run (--repeat timed runs), compares the output and final
state with the fp64 NumPy reference (la.reference) and prints one table row:
variant, path that ran (chunked; --sequential for the token-by-token
program), rel_rms error, la-run's median run time and
compile time, and the reference's run time for comparison.

It then prints the MLIR of one example and the command that shows the IR
after every pass. Needs a built la-run (scripts/build.sh); set LA_RUN to use
another executable.
"""

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

from la import runner  # noqa: E402
from la import testing as lt  # noqa: E402

VARIANTS = ("linear", "retention", "mamba2", "gla", "deltanet", "gated_deltanet", "kda")


def run_gpu_kernels(variants, B, T, H, K, V):
    """The same layers through la-lower-to-nvvm's kernels (chunks of 32,
    value tiles of 32; SIMT and tf32 tensor cores): on the GPU when there is
    one, else on la-emulate-gpu, which runs those kernels on the CPU. Returns
    the variants whose error is over the tolerance."""
    from la import cuda

    on_gpu, reason = cuda.available()
    target = "gpu" if on_gpu else "gpu-emulator"
    print()
    if on_gpu:
        print(f"GPU kernels on {cuda.device_name()} (la-run --target=gpu):")
    else:
        print(f"GPU kernels on the CPU emulator (la-run --target=gpu-emulator; "
              f"no GPU here: {reason}):")
    header = f"{'variant':<16} {'kernels':<14} {'err(o)':>9} {'err(state)':>10} {'run ms':>9}"
    print(header)
    print("-" * len(header))
    bad = []
    for variant in [v for v in variants if v in ("gla", "gated_deltanet", "kda")]:
        inputs = lt.make_inputs(variant, B, T, H, K, V, seed=0, gate_scale=1 / 16,
                                with_initial_state=True)
        ref_o, ref_s = lt.reference_for(variant, inputs)
        for kernels, tensor_cores, tol in (("SIMT", False, 1e-4), ("tf32 mma", True, 3e-3)):
            try:
                o, s, timing = runner.run_attention(
                    variant, inputs, target=target, tensor_cores=tensor_cores)
            except runner.LaRunError as error:
                print(f"{variant:<16} {kernels:<14} FAILED: {error.stderr.strip()[:300]}")
                bad.append(f"{variant} ({target}, {kernels})")
                continue
            err_o, err_s = lt.rel_rms(ref_o, o), lt.rel_rms(ref_s, s)
            flag = "" if err_o <= tol and err_s <= tol else f"  > {tol:.0e}!"
            if flag:
                bad.append(f"{variant} ({target}, {kernels})")
            print(f"{variant:<16} {kernels:<14} {err_o:9.2e} {err_s:10.2e} "
                  f"{timing['run_median_ms']:9.3f}{flag}")
    if not on_gpu:
        print("(emulated: the times are the CPU's, not a GPU's, and tf32's rounding "
              "is not modelled)")
    return bad


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--B", type=int, default=1)
    parser.add_argument("--T", type=int, default=1024)
    parser.add_argument("--H", type=int, default=2)
    parser.add_argument("--K", type=int, default=64)
    parser.add_argument("--V", type=int, default=64)
    parser.add_argument("--chunk-size", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--sequential", action="store_true",
                        help="run the token-by-token program instead of the chunked one")
    parser.add_argument("--dtype", default="f32", choices=runner.DTYPES)
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help="comma-separated list (default: %(default)s)")
    parser.add_argument("--example", default="gla",
                        help="variant whose MLIR is printed at the end")
    parser.add_argument("--no-gpu", action="store_true",
                        help="skip the GPU kernels (run on the GPU, or on the CPU "
                             "emulator where there is none)")
    args = parser.parse_args()

    la_run = runner.find_la_run()
    if la_run is None or not os.path.isfile(la_run):
        sys.exit("run-example.py: la-run is not built; run scripts/build.sh first "
                 "(or set LA_RUN to the executable)")
    variants = [v for v in args.variants.split(",") if v]
    for v in variants:
        if v not in lt.VARIANTS:
            sys.exit(f"run-example.py: unknown variant {v!r}; expected one of "
                     f"{', '.join(lt.VARIANTS)}")

    B, T, H, K, V, C = args.B, args.T, args.H, args.K, args.V, args.chunk_size
    tol = 1e-5 if args.dtype == "f32" else 5e-3
    print(f"la-run: {la_run}")
    print(f"shape: B={B} T={T} H={H} K={K} V={V} {args.dtype}, initial state, "
          f"gate_scale=1/16; chunk size {C}; median of {args.repeat} runs; "
          f"error = rel_rms(fp64 reference, la-run) over o and the final state")
    header = (f"{'variant':<16} {'path':<14} {'err(o)':>9} {'err(state)':>10} "
              f"{'run ms':>9} {'compile ms':>10} {'ref ms':>9}")
    print(header)
    print("-" * len(header))

    total_start = time.perf_counter()
    examples = {}
    bad = []
    for variant in variants:
        sequential = args.sequential
        path = "sequential" if sequential else f"chunked C={C}"
        inputs = lt.make_inputs(variant, B, T, H, K, V, seed=0, gate_scale=1 / 16,
                                with_initial_state=True)
        prepared = runner.prepare_inputs(inputs, args.dtype)
        try:
            o, s, timing = runner.run_attention(
                variant, prepared, dtype=args.dtype, chunk_size=C, sequential=sequential,
                repeat=args.repeat,
            )
        except runner.LaRunError as error:
            print(f"{variant:<16} {path:<14} FAILED: {error.stderr.strip()[:300]}")
            bad.append(variant)
            continue
        examples[variant] = timing["mlir"]
        ref_start = time.perf_counter()
        ref_o, ref_s = lt.reference_for(variant, prepared)
        ref_ms = 1000 * (time.perf_counter() - ref_start)
        err_o = lt.rel_rms(ref_o, o)
        err_s = lt.rel_rms(ref_s, s)
        flag = "" if err_o <= tol and err_s <= tol else f"  > {tol:.0e}!"
        if flag:
            bad.append(variant)
        print(f"{variant:<16} {path:<14} {err_o:9.2e} {err_s:10.2e} "
              f"{timing['run_median_ms']:9.3f} {timing['compile_ms']:10.1f} "
              f"{ref_ms:9.1f}{flag}")
    print(f"(total {time.perf_counter() - total_start:.1f} s; 'ref ms' is the fp64 NumPy "
          "token-by-token loop, a correctness oracle, not a tuned baseline)")

    if not args.no_gpu and not args.sequential and args.dtype == "f32":
        bad += run_gpu_kernels(variants, B, T, H, K, V)

    if examples:
        name = args.example if args.example in examples else next(iter(examples))
        out_dir = os.path.join(os.environ.get("LA_BUILD_DIR", os.path.join(ROOT, "build")),
                               "run-example")
        os.makedirs(out_dir, exist_ok=True)
        mlir_path = os.path.join(out_dir, f"{name}.mlir")
        with open(mlir_path, "w") as f:
            f.write(examples[name])
        rel = os.path.relpath(mlir_path, os.getcwd())
        exe = os.path.relpath(la_run, os.getcwd())
        print()
        print(f"=== the {name} function that ran above ({rel}):")
        print(examples[name])
        print("To see the IR after every pass (random inputs, chunk size "
              f"{C}):")
        print(f"  {exe} {rel} --random-seed=0 --print-ir-after-all")
        print(f"  {exe} {rel} --random-seed=0 --sequential --print-ir-after-all"
              "   # the token-by-token program")
        print(f"The hand-written examples run the same way, e.g. "
              f"{exe} {os.path.relpath(os.path.join(ROOT, 'examples', 'gla.mlir'))} "
              "--random-seed=0 --print-outputs")
    if bad:
        print(f"\nFAILED: {', '.join(bad)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
