#!/usr/bin/env python3
"""The GPU kernels that the device check needs, compiled ahead of time.

The machine with the GPU has no LLVM or MLIR, so la's kernels travel there
as shared libraries (:mod:`la.gpu`), compiled here by
``scripts/gpu-device-prepare.sh``, which runs::

    python3 bench/gpu_cases.py --out .gpu/kernels

and read there by ``bench/gpu_check.py`` (correctness, :data:`CHECK_CASES`),
``bench/bench_gpu.py`` (speed, :data:`BENCH_CASES`) and
``bench/gpu_profile.py`` (where the time goes, :data:`PROFILE_CASES`). Both find a case's
library with :func:`library_path`. Compiling is idempotent: a library whose
manifest key (the MLIR, the pipeline options, the tools' identities) is
unchanged is not compiled again.
"""

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(_HERE)
if os.path.join(_REPO, "python") not in sys.path:
    sys.path.insert(0, os.path.join(_REPO, "python"))

#: where the prepare script puts the libraries (relative to the repository).
DEFAULT_DIR = os.path.join(_REPO, ".gpu", "kernels")


#: short names of pipeline options in case names
_SHORT = {"threads-per-block": "t", "value-tile": "vt", "chunk-size": "c",
          "state-in-shared-memory": "ss", "schedule": ""}

#: la-lower-to-nvvm's options of the chunk-parallel schedule
CHUNK_PARALLEL = {"schedule": "chunk-parallel"}


class Case:
    """One compiled attention layer: variant, sizes, dtype (of q, k, v, o),
    whether it takes an initial state, whether its contractions run on
    tensor cores (la-lower-to-nvvm's tensor-cores, with mma-precision tf32
    for f32 inputs and bf16 for bf16 inputs), and whether it is the layer's
    gradient function (``backward``, la.gpu's ``compile_attention(backward=
    True)``) instead of its forward. ``cu_seqlens`` (offsets, B = 1) packs
    sequences into T. Every case returns the final state."""

    def __init__(self, variant, B, T, H, K, V, HV=None, dtype="f32", initial_state=False,
                 tensor_cores=False, backward=False, options=None, HQ=None, cu_seqlens=None):
        self.variant = variant
        #: packed sequences' offsets (a tuple), or None
        self.cu_seqlens = None if cu_seqlens is None else tuple(cu_seqlens)
        self.B, self.T, self.H, self.K, self.V = B, T, H, K, V
        self.HV = H if HV is None else HV
        #: query heads: H, or a multiple of H (grouped query heads, HV = H)
        self.HQ = H if HQ is None else HQ
        self.dtype = dtype
        self.initial_state = initial_state
        self.tensor_cores = tensor_cores
        self.backward = backward
        #: further la-lower-to-nvvm options (the schedule sweep's), e.g.
        #: ``{"threads-per-block": 256}``
        self.options = dict(options or {})

    @property
    def pipeline_options(self):
        """la-lower-to-nvvm's options for this case (None: the defaults)."""
        options = {str(k): str(v) for k, v in self.options.items()}
        if self.tensor_cores:
            options.update({"tensor-cores": "true",
                            "mma-precision": "tf32" if self.dtype == "f32" else "bf16"})
        return options or None

    @property
    def shape(self):
        return (self.B, self.T, self.H, self.K, self.V, self.HV)

    @property
    def name(self):
        dims = "x".join(str(d) for d in (self.B, self.T, self.H, self.K, self.V))
        if self.HV != self.H:
            dims += f"-hv{self.HV}"
        if self.HQ != self.H:
            dims += f"-hq{self.HQ}"
        if self.cu_seqlens is not None:
            dims += f"-n{len(self.cu_seqlens) - 1}"
        return (f"{self.variant}-{dims}-{self.dtype}" + ("-s0" if self.initial_state else "")
                + ("-tc" if self.tensor_cores else "") + ("-grad" if self.backward else "")
                + "".join(f"-{_SHORT.get(k, k)}{v}" for k, v in sorted(self.options.items())))

    def __repr__(self):
        return f"Case({self.name})"


#: packed sequences of the check: 0, 5, 0, 67 and 128 tokens (T = 200)
PACKED = (0, 0, 5, 5, 72, 200)

#: small shapes checked against the fp64 reference on the GPU (f32 within
#: 1e-4, bf16 within 5e-3): every chunked variant with and without an initial
#: state; K != V; grouped value heads; bf16; T not a multiple of the chunk
#: size (32: the padding and the output's copy are kernels of their own).
CHECK_CASES = (
    [Case(v, 2, 128, 2, 64, 64, initial_state=s)
     for v in ("gla", "gated_deltanet", "kda", "retention", "mamba2", "deltanet")
     for s in (False, True)]
    + [Case("gated_deltanet", 1, 64, 2, 32, 64, initial_state=True),
       Case("gated_deltanet", 2, 64, 2, 64, 64, HV=4, initial_state=True)]
    + [Case(v, 2, 128, 2, 64, 64, dtype="bf16", initial_state=True)
       for v in ("gla", "gated_deltanet", "kda")]
    + [Case("gla", 2, 77, 2, 64, 64, initial_state=True),
       Case("gated_deltanet", 1, 100, 2, 64, 64, HV=4, initial_state=True)]
    # The backward: every chunked variant's gradient function, T not a
    # multiple of the chunk, grouped value heads.
    + [Case(v, 1, 100, 2, 64, 64, HV=4, initial_state=True, backward=True)
       for v in ("gla", "gated_deltanet", "kda", "retention", "mamba2", "deltanet", "linear")]
    # Tensor cores (tf32 for f32, bf16 mma for bf16); their tolerances are
    # those of the operand type.
    + [Case(v, 2, 128, 2, 64, 64, dtype=dt, initial_state=True, tensor_cores=True)
       for v in ("gla", "gated_deltanet", "kda") for dt in ("f32", "bf16")]
    # The chunk-parallel schedule (la-distribute-chunks): every chunked
    # variant, a partial last chunk, grouped value heads, bf16, the backward.
    + [Case(v, 2, 128, 2, 64, 64, initial_state=True, options=CHUNK_PARALLEL)
       for v in ("gla", "gated_deltanet", "kda", "retention", "mamba2", "deltanet")]
    + [Case("gla", 2, 77, 2, 64, 64, initial_state=True, options=CHUNK_PARALLEL),
       Case("gated_deltanet", 1, 100, 2, 64, 64, HV=4, initial_state=True,
            options=CHUNK_PARALLEL),
       Case("gated_deltanet", 2, 128, 2, 64, 64, dtype="bf16", initial_state=True,
            options=CHUNK_PARALLEL)]
    + [Case(v, 1, 100, 2, 64, 64, HV=4, initial_state=True, backward=True,
            options=CHUNK_PARALLEL) for v in ("gla", "gated_deltanet")]
    # Grouped query heads (4 query heads per key/value head): the fused
    # schedule reads each state for its group; chunk-parallel repeats the
    # states per query head; T not a multiple of the chunk.
    + [Case(v, 2, 77, 2, 64, 64, initial_state=True, HQ=8)
       for v in ("gla", "gated_deltanet", "kda")]
    + [Case("gated_deltanet", 2, 77, 2, 64, 64, initial_state=True, HQ=8,
            options=CHUNK_PARALLEL)]
    # Packed sequences (a block per sequence and head; an empty sequence,
    # one shorter than a chunk, partial last chunks), forward under both
    # schedules and backward.
    + [Case(v, 1, 200, 2, 64, 64, HV=4, initial_state=True, cu_seqlens=PACKED)
       for v in ("gla", "gated_deltanet", "kda")]
    + [Case("gated_deltanet", 1, 200, 2, 64, 64, initial_state=True, cu_seqlens=PACKED,
            options=CHUNK_PARALLEL),
       Case("gated_deltanet", 1, 200, 2, 64, 64, dtype="bf16", initial_state=True,
            cu_seqlens=PACKED)]
    + [Case(v, 1, 200, 2, 64, 64, initial_state=True, backward=True, cu_seqlens=PACKED)
       for v in ("gla", "gated_deltanet")]
)

#: (B, T, H, D) of the benchmark; K = V = D.
BENCH_SHAPES = ((1, 8192, 16, 128), (2, 16384, 16, 128), (1, 8192, 32, 128))
BENCH_VARIANTS = ("gla", "gated_deltanet", "kda")
BENCH_DTYPES = ("f32", "bf16")
#: la's implementations in the benchmark: the fused schedule without and
#: with tensor cores, and, in bf16 only (fla's dtype in the device check),
#: the fused schedule with its state in shared memory and 512 threads and
#: the chunk-parallel schedule with chunks of 16, 32 and 64 (64 for Gated
#: DeltaNet only).
BENCH_IMPLS = {"la": {}, "la-tc": {},
               # the fused schedule with the sweep's best GLA settings
               "la-ss512": {"state-in-shared-memory": "true", "threads-per-block": 512},
               "la-cp16": dict(CHUNK_PARALLEL, **{"chunk-size": 16}),
               "la-cp32": dict(CHUNK_PARALLEL, **{"chunk-size": 32}),
               "la-cp64": dict(CHUNK_PARALLEL, **{"chunk-size": 64})}


def bench_case(variant, B, T, H, D, dtype, impl):
    """The benchmark's case of ``impl`` (a key of :data:`BENCH_IMPLS`)."""
    return Case(variant, B, T, H, D, D, dtype=dtype, tensor_cores=impl == "la-tc",
                options=BENCH_IMPLS[impl])


BENCH_CASES = ([bench_case(v, B, T, H, D, dt, impl)
                for (B, T, H, D) in BENCH_SHAPES for v in BENCH_VARIANTS for dt in BENCH_DTYPES
                for impl in ("la", "la-tc")]
               + [bench_case(v, B, T, H, D, "bf16", impl)
                  for (B, T, H, D) in BENCH_SHAPES for v in BENCH_VARIANTS
                  for impl in ("la-ss512", "la-cp16", "la-cp32", "la-cp64")
                  # chunks of 64 with channel gates need 312 KB of shared
                  # memory per block (the output's tasks take all of V)
                  if impl != "la-cp64" or v == "gated_deltanet"])


#: small forward kernels for bench/gpu_profile.py: where a kernel's time goes
#: as the sequence grows (T: chunks in sequence per block) and as the heads
#: grow (H: blocks), without and with tensor cores.
PROFILE_CASES = ([Case(v, 1, T, H, 128, 128, tensor_cores=tc)
                  for v in ("gla", "gated_deltanet")
                  for (T, H) in ((1024, 16), (2048, 16), (1024, 64)) for tc in (False, True)]
                 # the chunk-parallel schedule's kernels (cumulative gates, WY
                 # factors, scan, intra, output), each timed, at the benchmark's
                 # first shape
                 + [Case(v, 1, 8192, 16, 128, 128, dtype="bf16",
                         options=dict(CHUNK_PARALLEL, **{"chunk-size": 16}))
                    for v in ("gla", "gated_deltanet", "kda")])


#: the schedule sweep of bench/gpu_profile.py --sweep: threads per block,
#: value tile and chunk size around la-lower-to-nvvm's earlier defaults
#: (128, 32, 32; now 256, 16, 16), without and with tensor cores, at
#: (1,1024,16,128,128); state-in-shared-memory at 256 / 16 / 16 and
#: 512 / 16 / 16; and the chunk-parallel schedule (threads, the scan's value
#: tile, chunk size).
SWEEP_CASES = [Case(v, 1, 1024, 16, 128, 128, tensor_cores=tc,
                    options={"threads-per-block": t, "value-tile": vt, "chunk-size": c})
               for v in ("gla", "gated_deltanet") for tc in (False, True)
               for t in (128, 256, 512) for vt in (32, 16) for c in (32, 16)] + \
              [Case(v, 1, 1024, 16, 128, 128, tensor_cores=tc,
                    options={"threads-per-block": t, "value-tile": 16, "chunk-size": 16,
                             "state-in-shared-memory": "true"})
               for v in ("gla", "gated_deltanet") for tc in (False, True) for t in (256, 512)] + \
              [Case(v, 1, 1024, 16, 128, 128, tensor_cores=tc,
                    options=dict(CHUNK_PARALLEL, **{"threads-per-block": t, "value-tile": vt,
                                                    "chunk-size": c}))
               for v in ("gla", "gated_deltanet") for tc in (False, True)
               for t in (256, 512) for vt in (8, 16, 32) for c in (16, 32)]


def library_path(case, directory=DEFAULT_DIR):
    """The library of ``case`` in ``directory`` (its manifest: ``.json``)."""
    return os.path.join(directory, case.name + ".so")


def compile_case(case, directory=DEFAULT_DIR, pipeline_options=None, force=False):
    """Compiles ``case`` (la.gpu.compile_attention) unless it is up to date;
    returns ``(case, seconds, compiled)``."""
    from la import gpu
    path = library_path(case, directory)
    start = time.perf_counter()
    before = os.stat(path).st_mtime_ns if os.path.exists(path) else None
    gpu.compile_attention(path, case.variant, case.B, case.T, case.H, case.K, case.V, case.HV,
                          dtype=case.dtype, has_initial_state=case.initial_state,
                          output_final_state=True, pipeline_options=pipeline_options,
                          force=force, backward=case.backward,
                          HQ=case.HQ if case.HQ != case.H else None,
                          cu_seqlens_len=None if case.cu_seqlens is None
                          else len(case.cu_seqlens))
    after = os.stat(path).st_mtime_ns
    return case, time.perf_counter() - start, before != after


def main(argv=None):
    p = argparse.ArgumentParser(description="compile la's GPU kernels for the device check")
    p.add_argument("--out", default=DEFAULT_DIR, help="output folder (default: %(default)s)")
    p.add_argument("--set", choices=("all", "check", "bench", "profile", "sweep"),
                   default="all",
                   help="which cases (default: %(default)s)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="parallel compiles (default: %(default)s)")
    p.add_argument("--force", action="store_true", help="recompile even when up to date")
    p.add_argument("--prune", action="store_true",
                   help="delete the libraries and manifests in --out that no case names")
    args = p.parse_args(argv)

    from la import gpu
    missing = gpu.missing_tools()
    if missing:
        print("gpu_cases: cannot compile GPU kernels here:\n  " + "\n  ".join(missing),
              file=sys.stderr)
        return 2
    cases = {"all": list(CHECK_CASES) + list(BENCH_CASES) + list(PROFILE_CASES)
             + list(SWEEP_CASES),
             "check": list(CHECK_CASES), "bench": list(BENCH_CASES),
             "profile": list(PROFILE_CASES), "sweep": list(SWEEP_CASES)}[args.set]
    os.makedirs(args.out, exist_ok=True)
    start = time.perf_counter()
    failures = 0
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(compile_case, c, args.out, c.pipeline_options, args.force)
                   for c in cases]
        for case, future in zip(cases, futures):
            try:
                _, seconds, compiled = future.result()
                state = f"compiled in {seconds:.1f} s" if compiled else "up to date"
                print(f"  {case.name:45s} {state}")
            except gpu.GpuCompileError as error:
                failures += 1
                print(f"  {case.name:45s} FAILED\n{error}", file=sys.stderr)
                # No stale library from an earlier compiler may stand in for it.
                for path in (library_path(case, args.out),
                             os.path.splitext(library_path(case, args.out))[0] + ".json"):
                    if os.path.exists(path):
                        os.remove(path)
    if args.prune:
        keep = {c.name for c in cases}
        for name in sorted(os.listdir(args.out)):
            stem, ext = os.path.splitext(name)
            if ext in (".so", ".json") and stem not in keep and \
                    name != "libla_cuda_runtime.so":
                os.remove(os.path.join(args.out, name))
                print(f"  removed {name} (no such case)")
    print(f"gpu_cases: {len(cases) - failures} of {len(cases)} kernels ready in {args.out} "
          f"({time.perf_counter() - start:.1f} s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
