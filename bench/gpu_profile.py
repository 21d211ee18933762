#!/usr/bin/env python3
"""Where la's GPU kernels spend their time (run on the machine with the GPU).

For each of :data:`gpu_cases.PROFILE_CASES` (GLA and Gated DeltaNet forward
at K = V = 128, T = 1024 and 2048 with 16 heads, T = 1024 with 64 heads,
without and with tensor cores) it prints:

- the median time of a call (CUDA events, as ``bench_gpu.py``) and the time
  per chunk that one block runs in sequence (T / chunk of them): if a call's
  time grows with T at a fixed grid, the chunks in sequence set it; if it
  stays when the grid grows fourfold (H = 64), the blocks run side by side;
- with PyTorch's profiler: each kernel the call launched and its device
  time, and the call's wall time, so that host work (stream creation,
  launches, waits) shows as the difference.

``--sweep`` times :data:`gpu_cases.SWEEP_CASES` instead (threads per block,
value tile and chunk size around la-lower-to-nvvm's defaults) and checks
each against the fp64 reference (``rel_rms`` of o and of the final state,
within the device check's tolerances), best first per variant.

``--ncu CASE`` instead runs that case once, for Nsight Compute
(``ncu ... python3 bench/gpu_profile.py --ncu CASE``).
"""

import argparse
import os
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
for _path in (_HERE, os.path.join(os.path.dirname(_HERE), "python")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import gpu_cases  # noqa: E402


def _chunk_size(kernel):
    from la import gpu
    options = kernel.manifest.get("pipeline_options") or {}
    return int(options.get("chunk-size", gpu.DEFAULT_CHUNK))


def _runner(case, directory):
    import bench_gpu
    from la import gpu
    kernel = gpu.load_attention(gpu_cases.library_path(case, directory))
    inputs = bench_gpu.make_inputs(case.variant, case.B, case.T, case.H, case.K, seed=0,
                                   gate_scale=1 / 16)
    return kernel, bench_gpu.LaRunner(kernel, inputs, case.dtype)


def profile(case, directory):
    import torch
    import bench_gpu
    kernel, run = _runner(case, directory)
    ms, _, n, _ = bench_gpu.time_cuda(run, warmup=2, repeat=10, seconds=2.0)
    chunks = -(-case.T // _chunk_size(kernel))
    print(f"{case.name:36s} {ms:9.3f} ms ({n} runs)  {chunks:4d} chunks in sequence: "
          f"{1e3 * ms / chunks:8.1f} us per chunk")
    from torch.profiler import ProfilerActivity
    with torch.profiler.profile(activities=[ProfilerActivity.CPU,
                                            ProfilerActivity.CUDA]) as prof:
        torch.cuda.synchronize()
        start = time.perf_counter()
        run()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - start) * 1e3
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    device = sum(e.device_time for e in kernels) / 1e3
    print(f"    profiled call: wall {wall:.3f} ms, {len(kernels)} device events, "
          f"{device:.3f} ms on the device")
    for e in kernels:
        print(f"      {e.device_time / 1e3:9.3f} ms  {e.name[:90]}")


def sweep(directory, budget_s):
    """Times and checks every sweep case; prints them per variant and
    tensor-core setting, fastest first."""
    import numpy as np
    import bench_gpu
    import gpu_check
    import torch
    from la import gpu
    from la import testing as lt
    started = time.perf_counter()
    rows, references = [], {}
    for case in gpu_cases.SWEEP_CASES:
        if time.perf_counter() - started > budget_s:
            rows.append((case, None, None, None, "skipped (budget)"))
            continue
        try:
            kernel = gpu.load_attention(gpu_cases.library_path(case, directory))
            if case.variant not in references:
                inputs = lt.make_inputs(case.variant, case.B, case.T, case.H, case.K, case.V,
                                        seed=0, gate_scale=1 / 16)
                references[case.variant] = (inputs, lt.reference_for(case.variant, inputs))
            inputs, (o_ref, s_ref) = references[case.variant]
            tensors = {n: torch.from_numpy(np.ascontiguousarray(a)).cuda()
                       for n, a in inputs.items() if a is not None}
            run = bench_gpu.LaRunner(kernel, tensors, case.dtype)
            ms, _, _, (o, state) = bench_gpu.time_cuda(run, warmup=2, repeat=7, seconds=1.0)
            err = max(lt.rel_rms(o_ref, o.cpu().numpy()), lt.rel_rms(s_ref, state.cpu().numpy()))
            limit = (gpu_check.TOLERANCE_TENSOR_CORES if case.tensor_cores
                     else gpu_check.TOLERANCE)[case.dtype]
            rows.append((case, ms, err, limit, "ok" if err <= limit else "WRONG"))
        except Exception as error:  # report and go on
            rows.append((case, None, None, None, f"FAILED: {type(error).__name__}: {error}"))
    failed = 0
    for variant in dict.fromkeys(c.variant for c in gpu_cases.SWEEP_CASES):
        for tc in (False, True):
            group = [r for r in rows if r[0].variant == variant and r[0].tensor_cores == tc]
            group.sort(key=lambda r: (r[1] is None, r[1] or 0))
            print(f"\n{variant}, tensor cores {'on' if tc else 'off'} (1,1024,16,128,128) f32:")
            print(f"  {'schedule':>8} {'threads':>7} {'v-tile':>6} {'chunk':>5} {'state':>6} "
                  f"{'ms':>9} {'rel_rms':>9}  result")
            for case, ms, err, limit, result in group:
                o = case.options
                cells = (f"{ms:9.3f} {err:9.2e}" if ms is not None else f"{'-':>9} {'-':>9}")
                state = "shared" if o.get("state-in-shared-memory") else "global"
                schedule = "cp" if o.get("schedule") == "chunk-parallel" else "fused"
                print(f"  {schedule:>8} {o['threads-per-block']:>7} {o['value-tile']:>6} "
                      f"{o['chunk-size']:>5} {state:>6} {cells}  {result}")
                failed += result not in ("ok", "skipped (budget)")
    return 1 if failed else 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kernels", default=gpu_cases.DEFAULT_DIR)
    p.add_argument("--ncu", metavar="CASE", help="run CASE once (for Nsight Compute)")
    p.add_argument("--sweep", action="store_true", help="time and check the schedule sweep")
    p.add_argument("--budget", type=float, default=200, help="seconds for --sweep")
    args = p.parse_args(argv)
    import bench_gpu
    bench_gpu._use_kernels_runtime(args.kernels)
    import torch
    bench_gpu.torch = torch  # bench_gpu imports torch in its main only
    if not torch.cuda.is_available():
        print("gpu_profile: no CUDA GPU", file=sys.stderr)
        return 2
    if args.sweep:
        return sweep(args.kernels, args.budget)
    cases = {c.name: c for c in gpu_cases.PROFILE_CASES}
    if args.ncu:
        _, run = _runner(cases[args.ncu], args.kernels)
        run()
        torch.cuda.synchronize()
        return 0
    failed = 0
    for case in cases.values():
        try:
            profile(case, args.kernels)
        except Exception as error:  # report and go on
            failed += 1
            print(f"{case.name:36s} FAILED: {type(error).__name__}: {error}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
