#!/usr/bin/env python3
"""la's ahead-of-time GPU kernels against the fp64 reference, on the GPU.

The device-side twin of python/tests/test_gpu_exec.py for a machine that has
a GPU but neither la-run nor LLVM/MLIR: it loads the libraries that
``bench/gpu_cases.py`` compiled (``scripts/gpu-device-prepare.sh`` puts them
in ``.gpu/kernels``), runs each case of :data:`gpu_cases.CHECK_CASES` on
NumPy inputs through :meth:`la.gpu.AttentionKernel.run` (device buffers from
la's own runtime: PyTorch is not needed) and compares ``o`` and the final
state with :mod:`la.reference` (``rel_rms``; f32 within 1e-4, bf16 inputs
within 5e-3), and each backward case's gradients with the hand-written fp64
reverse mode :func:`la.testing.reference_gradients` (1e-4; 1e-3 for gates
and beta). Each case runs twice, the second time on output buffers filled
with NaN: both runs must give the same bits (the kernels write every output
element and do not depend on what was there).

Exit status: 0 when every case passes, 1 when one fails, 2 when there is no
GPU (with the reason).

Usage::

    python3 bench/gpu_check.py [--kernels .gpu/kernels] [--json out.json]
"""

import argparse
import json
import math
import os
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(_HERE)
for _path in (os.path.join(_REPO, "python"), _HERE):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import numpy as np  # noqa: E402

import gpu_cases  # noqa: E402
from la import cuda, gpu, runner  # noqa: E402
from la import testing as lt  # noqa: E402

#: rel_rms limits against the fp64 reference, by dtype of q, k, v and o.
TOLERANCE = {"f32": 1e-4, "bf16": 5e-3}
#: with tensor cores: tf32 operands (10-bit mantissa) for f32, bf16 for bf16
TOLERANCE_TENSOR_CORES = {"f32": 3e-3, "bf16": 1e-2}


#: the backward's limits: gradients of q, k, v and the state; of gates and beta
GRADIENT_TOLERANCE, GATE_GRADIENT_TOLERANCE = 1e-4, 1e-3


def check_backward_case(case, kernel, seed=0):
    """Runs a backward case: the gradients against the fp64 reverse mode.
    Reports the largest rel_rms of the gradients of q, k, v and the state
    as ``rel_rms_o`` and of the gates and beta as ``rel_rms_state``."""
    result = {"case": case.name, "ok": False}
    inputs = lt.make_inputs(case.variant, case.B, case.T, case.H, case.K, case.V, case.HV,
                            seed=seed, with_initial_state=True, gate_scale=1 / 16,
                            cu_seqlens=case.cu_seqlens)
    rng = np.random.default_rng(seed + 1)
    do = rng.standard_normal((case.B, case.T, case.HV, case.V)).astype(np.float32)
    d_final = rng.standard_normal(np.shape(inputs["initial_state"])).astype(np.float32)
    arguments = dict(inputs, do=do, d_final_state=d_final)
    start = time.perf_counter()
    grads = kernel.run(arguments)
    result["ms"] = (time.perf_counter() - start) * 1e3  # with the copies
    again = kernel.run(arguments, fill=float("nan"))
    expected = lt.reference_gradients(case.variant, inputs, do, d_final)
    main = [lt.rel_rms(expected[n], grads[n]) for n in expected
            if n in ("q", "k", "v", "initial_state")]
    gates = [lt.rel_rms(expected[n], grads[n]) for n in expected
             if n not in ("q", "k", "v", "initial_state")]
    result["rel_rms_o"] = max(main)
    result["rel_rms_state"] = max(gates) if gates else 0.0
    result["limit"] = GRADIENT_TOLERANCE
    result["repeatable"] = all(np.array_equal(grads[n], again[n]) and not np.isnan(again[n]).any()
                               for n in grads)
    result["ok"] = bool(result["rel_rms_o"] <= GRADIENT_TOLERANCE
                        and result["rel_rms_state"] <= GATE_GRADIENT_TOLERANCE
                        and result["repeatable"])
    return result


def check_case(case, directory, seed=0):
    """Runs one case; returns a dict of what was measured (``ok``,
    ``rel_rms_o``, ``rel_rms_state``, ``repeatable``, ``ms``, ``error``)."""
    result = {"case": case.name, "ok": False}
    path = gpu_cases.library_path(case, directory)
    if not os.path.isfile(path):
        result["error"] = (f"{path} is missing: run scripts/gpu-device-prepare.sh before the "
                           "device run (and carry .gpu)")
        return result
    if case.backward:
        try:
            return check_backward_case(case, gpu.load_attention(path), seed)
        except Exception as error:  # report every failure and go on
            result["error"] = f"{type(error).__name__}: {error}"
            return result
    try:
        kernel = gpu.load_attention(path)
        inputs = lt.make_inputs(case.variant, case.B, case.T, case.H, case.K, case.V, case.HV,
                                seed=seed, with_initial_state=case.initial_state,
                                gate_scale=1 / 16, cu_seqlens=case.cu_seqlens)
        group = case.HQ // case.H
        if group > 1:
            # Grouped query heads: q with HQ heads; the reference repeats
            # every per-head input (and the state) per query head, and the
            # final state of each group is its first query head's.
            rng = np.random.default_rng(seed + 2)
            inputs["q"] = rng.standard_normal(
                (case.B, case.T, case.HQ, case.K)).astype(np.float32)
        prepared = runner.prepare_inputs(inputs, case.dtype)
        def per_query_head(name, x):
            if group == 1 or name == "q":
                return x
            if name == "log_decay":
                return np.repeat(x, group)
            if np.ndim(x) < 3:
                return x
            return np.repeat(x, group, axis=1 if name == "initial_state" else 2)

        reference_inputs = {name: per_query_head(name, x) for name, x in prepared.items()}
        o_ref, s_ref = lt.reference_for(case.variant, reference_inputs)
        s_ref = s_ref[:, ::group]
        start = time.perf_counter()
        o, s = kernel.run(prepared)
        result["ms"] = (time.perf_counter() - start) * 1e3  # with the copies
        o2, s2 = kernel.run(prepared, fill=float("nan"))
    except Exception as error:  # report every failure and go on
        result["error"] = f"{type(error).__name__}: {error}"
        return result
    result["rel_rms_o"] = lt.rel_rms(o_ref, o)
    result["rel_rms_state"] = lt.rel_rms(s_ref, s)
    result["repeatable"] = bool(np.array_equal(o, o2, equal_nan=True)
                                and np.array_equal(s, s2, equal_nan=True)
                                and not np.isnan(o2).any() and not np.isnan(s2).any())
    limit = (TOLERANCE_TENSOR_CORES if case.tensor_cores else TOLERANCE)[case.dtype]
    result["limit"] = limit
    result["ok"] = bool(result["rel_rms_o"] <= limit and result["rel_rms_state"] <= limit
                        and result["repeatable"])
    return result


def _fmt(x):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "nan" if x is not None else "-"
    return f"{x:.2e}"


def main(argv=None):
    p = argparse.ArgumentParser(description="la's AOT GPU kernels vs the fp64 reference")
    p.add_argument("--kernels", default=gpu_cases.DEFAULT_DIR,
                   help="folder of the compiled kernels (default: %(default)s)")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = p.parse_args(argv)

    sibling = os.path.join(args.kernels, "libla_cuda_runtime.so")
    if cuda.library_path() is None and os.path.isfile(sibling):
        os.environ["LA_CUDA_RUNTIME_LIB"] = os.path.abspath(sibling)  # no build tree here
    ok, reason = cuda.available()
    if not ok:
        print(f"gpu_check: no CUDA GPU: {reason}", file=sys.stderr)
        return 2
    print(f"gpu_check: {reason}; kernels from {args.kernels}")
    results = []
    header = f"{'case':45s} {'rel_rms o':>10s} {'state':>10s} {'limit':>8s} {'repeat':>6s} " \
             f"{'ms':>8s}  result"
    print(header)
    print("(-grad rows: the largest rel_rms of dq, dk, dv, dinitial_state, then of the gates'"
          " and beta's gradients)")
    print("-" * len(header))
    for case in gpu_cases.CHECK_CASES:
        r = check_case(case, args.kernels)
        results.append(r)
        if "error" in r:
            print(f"{case.name:45s} FAIL  {r['error']}")
            continue
        print(f"{case.name:45s} {_fmt(r['rel_rms_o']):>10s} {_fmt(r['rel_rms_state']):>10s} "
              f"{r['limit']:8.0e} {'yes' if r['repeatable'] else 'NO':>6s} "
              f"{r['ms']:8.2f}  {'ok' if r['ok'] else 'FAIL'}")
        sys.stdout.flush()
    failed = [r["case"] for r in results if not r["ok"]]
    print(f"gpu_check: {len(results) - len(failed)} passed, {len(failed)} failed")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": reason, "results": results}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
