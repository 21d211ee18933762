#!/usr/bin/env python3
"""A static model of la's GPU kernels: what each would cost on an H200.

A program, not a test, and it needs no GPU: for each benchmark case of
``bench/bench_gpu.py`` (GLA, Gated DeltaNet, KDA at the issue's shapes) it
compiles the forward with la-lower-to-nvvm (la's C API in this process, as
:mod:`la.gpu` does), reads each kernel's launch (grid, threads, dynamic
shared memory) from la-lower-to-gpu's IR and its registers, spills and
static shared memory from ``ptxas -v`` (sm_90a), and prints:

* the occupancy those allow on an SM of sm_90 (65536 registers, 228 KB of
  shared memory of which 227 KB per block plus 1 KB reserved per block,
  2048 threads, 32 blocks) and which resource limits it;
* the fraction of the H200's 132 SMs the grid covers (a task runs its chunks
  one after the other, so an SM without a block idles);
* the work (the chunked algorithm's FLOPs, ``chunked_flops`` of
  bench/bench_cpu.py at the kernel's chunk size) and the bytes every
  implementation must move (inputs read once, outputs written once), and
  the times these imply at the H200's peaks (67 TFLOP/s f32 on the CUDA
  cores, 495 TFLOP/s tf32 on the tensor cores, 4.8 TB/s of HBM3e): the
  model's time is the larger of the memory time and the FLOP time divided
  by the SM coverage. It is a lower bound (no latency, no issue limits:
  the ``warps/SM`` column says how few warps an SM has to hide them, and
  every op of a chunk ends in a barrier), meant to show each change's
  expected effect before a run on hardware; ``bench/bench_gpu.py``
  measures.

Usage::

    python3 bench/gpu_model.py [--variants gla,gated_deltanet,kda] [--json out.json]
"""

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(_HERE)
for _path in (os.path.join(_REPO, "python"), _HERE, os.path.join(_REPO, "scripts")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from bench_cpu import chunked_flops  # noqa: E402

#: the H200 (SXM): SMs, peaks, and an sm_90 SM's resources
H200 = dict(sms=132, f32_flops=67e12, tf32_flops=495e12, bytes_per_s=4.8e12,
            registers=65536, shared=233472, shared_per_block=232448,
            shared_reserved=1024, threads=2048, blocks=32)
#: (B, T, H, D) of the benchmark and of the issue's targets
SHAPES = ((1, 8192, 16, 128), (2, 16384, 16, 128), (1, 8192, 32, 128))
VARIANTS = ("gla", "gated_deltanet", "kda")
#: fla's forward on an H200 as the GPU issue quotes it (ms), for reference
PUBLISHED = {("gated_deltanet", (1, 8192, 16, 128)): ("fla 0.47, FlashQLA 0.28 (published)")}

_CONSTANT = re.compile(r"(%[\w]+) = arith\.constant (\d+) : (?:index|i32)")
_LAUNCH = re.compile(
    r"gpu\.launch blocks\([^)]*\) in \(%\w+ = (%\w+), %\w+ = (%\w+), %\w+ = (%\w+)\) "
    r"threads\([^)]*\) in \(%\w+ = (%\w+), %\w+ = (%\w+), %\w+ = (%\w+)\)"
    r"(?: dynamic_shared_memory_size (%\w+))?")


def launches(text):
    """(grid, threads, dynamic shared bytes) of each gpu.launch in `text`,
    in order (the order of the kernels that outlining names)."""
    constants = {name: int(value) for name, value in _CONSTANT.findall(text)}
    found = []
    for match in _LAUNCH.finditer(text):
        values = [constants.get(name) for name in match.groups()[:6]]
        if None in values:
            raise ValueError(f"a launch with run-time sizes: {match.group(0)}")
        shared = constants.get(match.group(7), 0) if match.group(7) else 0
        found.append((values[0] * values[1] * values[2], values[3] * values[4] * values[5],
                      shared))
    return found


def ptxas_info(ptxas, ptx_path):
    """Registers, spill bytes (stores + loads) and static shared bytes of the
    one entry in `ptx_path`, from ptxas -v for sm_90a."""
    proc = subprocess.run([ptxas, "-arch=sm_90a", "-v", ptx_path, "-o", os.devnull],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"ptxas failed on {ptx_path}:\n{proc.stderr[-2000:]}")
    out = proc.stderr + proc.stdout
    registers = int(re.search(r"Used (\d+) registers", out).group(1))
    spills = sum(int(x) for x in re.findall(r"(\d+) bytes spill (?:stores|loads)", out))
    smem = re.search(r"(\d+) bytes smem", out)
    return registers, spills, int(smem.group(1)) if smem else 0


def occupancy(threads, registers, shared):
    """Blocks per SM on sm_90 and the resource that limits them."""
    warps = math.ceil(threads / 32)
    registers_per_warp = math.ceil(registers * 32 / 256) * 256
    limits = {
        "blocks": H200["blocks"],
        "threads": H200["threads"] // threads,
        "registers": H200["registers"] // (registers_per_warp * warps),
        "shared": (H200["shared"] // (shared + H200["shared_reserved"]) if shared
                   else H200["blocks"]),
    }
    limiter = min(limits, key=limits.get)
    return limits[limiter], limiter


def moved_bytes(variant, B, T, H, D):
    """Inputs read once and outputs written once (f32): q, k, v, the gates,
    beta, o and the final state."""
    from la.variants import token_operand_shapes
    operands = sum(4 * math.prod(shape)
                   for _, shape in token_operand_shapes(variant, B, T, H, D, D, H))
    return operands + 4 * B * T * H * D + 4 * B * H * D * D


def model_case(variant, shape, tensor_cores, ptxas, directory):
    from la import ir, runner
    B, T, H, D = shape
    mlir = runner.attention_mlir(variant, B, T, H, D, D, H, output_final_state=True,
                                 name="attention")
    options = "tensor-cores=1" if tensor_cores else ""
    gpu_module = ir.Module.parse(mlir)
    ir.PassManager.parse(f"builtin.module(la-lower-to-gpu{{{options}}})").run(gpu_module)
    kernels = launches(gpu_module.to_text())
    nvvm_module = ir.Module.parse(mlir)
    ir.PassManager.parse(
        f"builtin.module(la-lower-to-nvvm{{format=isa {options}}})").run(nvvm_module)
    import importlib
    extract = importlib.import_module("extract-gpu-objects")
    objects = [payload for _, kind, payload in extract.objects(nvvm_module.to_text())
               if kind == "assembly"]
    if len(objects) != len(kernels):
        raise RuntimeError(f"{len(kernels)} launches but {len(objects)} kernels")
    rows = []
    chunk = 16  # la-lower-to-nvvm's default
    flops = chunked_flops(variant, B, T, H, D, D, C=chunk)
    moved = moved_bytes(variant, B, T, H, D)
    for index, ((grid, threads, shared), ptx) in enumerate(zip(kernels, objects)):
        path = os.path.join(directory, f"{variant}-{index}.ptx")
        with open(path, "wb") as f:
            f.write(ptx)
        registers, spills, static_shared = ptxas_info(ptxas, path)
        per_sm, limiter = occupancy(threads, registers, shared + static_shared)
        coverage = min(1.0, grid / H200["sms"])
        waves = math.ceil(grid / (H200["sms"] * per_sm))
        peak = H200["tf32_flops"] if tensor_cores else H200["f32_flops"]
        flop_ms = flops / peak * 1e3
        memory_ms = moved / H200["bytes_per_s"] * 1e3
        rows.append(dict(variant=variant, shape=list(shape), tensor_cores=tensor_cores,
                         kernel=index, grid=grid, threads=threads,
                         shared_kib=(shared + static_shared) / 1024, registers=registers,
                         spill_bytes=spills, blocks_per_sm=per_sm, limiter=limiter,
                         sm_coverage=coverage, waves=waves,
                         warps_per_sm=min(per_sm, math.ceil(grid / H200["sms"])) * threads // 32,
                         gflop=flops / 1e9,
                         mbytes=moved / 1e6, flop_ms=flop_ms, memory_ms=memory_ms,
                         model_ms=max(memory_ms, flop_ms / coverage)))
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description="a static model of la's GPU kernels on an H200")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    args = p.parse_args(argv)

    from la import gpu
    ptxas = gpu.find_ptxas()
    if ptxas is None:
        print("gpu_model: ptxas not found (the CUDA toolkit: /usr/local/cuda or $CUDA_HOME)",
              file=sys.stderr)
        return 2
    header = (f"{'variant':15s} {'B,T,H,D':16s} {'tc':>2s} {'grid':>5s} {'thr':>4s} "
              f"{'smem KiB':>8s} {'regs':>4s} {'spill':>5s} {'blk/SM':>6s} {'limit':>9s} "
              f"{'warps/SM':>8s} "
              f"{'SM use':>6s} {'GFLOP':>6s} {'MB':>6s} {'flop ms':>7s} {'mem ms':>6s} "
              f"{'model ms':>8s}")
    print("gpu_model: la-lower-to-nvvm's defaults (chunks of 16, value tiles of 16, 256 threads);"
          " H200: 132 SMs, 67 TFLOP/s f32, 495 TFLOP/s tf32, 4.8 TB/s")
    print(header)
    print("-" * len(header))
    rows = []
    with tempfile.TemporaryDirectory(prefix="la-gpu-model-") as directory:
        for variant in [v for v in args.variants.split(",") if v]:
            for shape in SHAPES:
                for tensor_cores in (False, True):
                    for r in model_case(variant, shape, tensor_cores, ptxas, directory):
                        rows.append(r)
                        print(f"{variant:15s} {','.join(map(str, shape)):16s} "
                              f"{'y' if tensor_cores else 'n':>2s} {r['grid']:5d} "
                              f"{r['threads']:4d} {r['shared_kib']:8.1f} {r['registers']:4d} "
                              f"{r['spill_bytes']:5d} {r['blocks_per_sm']:6d} "
                              f"{r['limiter']:>9s} {r['warps_per_sm']:8d} "
                              f"{r['sm_coverage']:6.2f} {r['gflop']:6.1f} "
                              f"{r['mbytes']:6.0f} {r['flop_ms']:7.3f} {r['memory_ms']:6.3f} "
                              f"{r['model_ms']:8.3f}")
                        sys.stdout.flush()
                if (variant, shape) in PUBLISHED:
                    print(f"{'':15s} {','.join(map(str, shape)):16s} reference: "
                          f"{PUBLISHED[(variant, shape)]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
