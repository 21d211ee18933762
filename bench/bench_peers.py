#!/usr/bin/env python3
"""la against the CPU implementations of linear attention that run here,
all measured in one run, with a plot.

A program, not a test. For each variant and shape, on 1 and on ``--threads``
threads, it prints the median time of ``--repeat`` calls (after a warm-up
call) of:

* la (the Python package's kernel, ``la.attention(..., num_threads=n)``);
* the same chunked algorithm in NumPy (``numpy_chunked.py``; OpenBLAS on n
  threads) and in PyTorch's CPU backend (``torch.set_num_threads(n)``);
* ONNX Runtime running ONNX's LinearAttention-27 op (``gated`` with a
  per-key-channel decay for GLA, ``gated_delta`` with a scalar or channel
  decay for Gated DeltaNet and KDA; ``intra_op_num_threads = n``);
* ggml's ``ggml_gated_delta_net`` (the op llama.cpp runs on CPUs, through
  ggml-python: Gated DeltaNet and KDA, K = V);
* OpenVINO reading the same ONNX model, where it can;

and OpenBLAS sgemm at 128^3 (the limit; ``bench_cpu.measure_sgemm``). Every
peer is first checked against la's fp64 reference (``la.reference``) on a
small case; a peer that disagrees (rel_rms > 1e-4) or cannot run is listed
with its reason and not timed. GFLOP/s are over ``bench_cpu.chunked_flops``
(the chunked algorithm's count, the same for every implementation, so the
ratios are ratios of times). The machine line gives the CPU family and its
FMA width (AMD family 25 is Zen 4: 512-bit FMA in two 256-bit halves;
family 26 is Zen 5: full 512-bit units).

Peers that are not installed are skipped with the reason printed. To have
them all::

    pip install onnxruntime "onnx>=1.22" openvino torch matplotlib
    CMAKE_ARGS="-DGGML_NATIVE=ON" pip install --no-binary ggml-python ggml-python

Usage::

    python3 bench/bench_peers.py --plot docs/peers.png      # the issue's shapes
    python3 bench/bench_peers.py --quick                    # a small shape
"""

import argparse
import json
import os
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(_HERE)
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(_REPO, "python"))

import bench_cpu  # noqa: E402  (sgemm, machine facts, FLOP count)

VARIANTS = ("gla", "gated_deltanet", "kda")
FULL_SHAPES = ("1x4096x8x128x128", "1x8192x16x128x128")
QUICK_SHAPES = ("1x512x2x64x64",)
PEERS = ("la", "numpy", "torch", "onnxruntime", "ggml", "openvino")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--shapes", nargs="+", default=None, metavar="BxTxHxKxV")
    p.add_argument("--quick", action="store_true", help="a small shape (seconds)")
    p.add_argument("--peers", default=",".join(PEERS))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3, help="timed calls (median)")
    p.add_argument("--chunk-size", type=int, default=64)
    p.add_argument("--gate-scale", type=float, default=1 / 16)
    p.add_argument("--sgemm-seconds", type=float, default=0.4)
    p.add_argument("--plot", metavar="PNG", help="write a bar chart (needs matplotlib)")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    p.add_argument("--plot-from", metavar="JSON",
                   help="only draw --plot from the results a run wrote with --json")
    return p.parse_args(argv)


def _shape(text):
    shape = tuple(int(x) for x in text.lower().split("x"))
    if len(shape) != 5 or min(shape) < 1:
        raise SystemExit(f"shape must be BxTxHxKxV, got {text!r}")
    return shape


def cpu_family():
    """(vendor, family, model name, FMA width in bits as executed)."""
    vendor, family, name, flags = "unknown", None, "unknown", ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "vendor_id" and vendor == "unknown":
                    vendor = value
                elif key == "cpu family" and family is None:
                    family = int(value)
                elif key == "model name" and name == "unknown":
                    name = value
                elif key == "flags" and not flags:
                    flags = f" {value} "
    except OSError:
        pass
    width = 512 if " avx512f " in flags else 256 if " avx2 " in flags else 128
    if vendor == "AuthenticAMD" and family == 25 and width == 512:
        width = "512 (two 256-bit halves: Zen 4)"
    elif vendor == "AuthenticAMD" and family == 26 and width == 512:
        width = "512 (full-width units: Zen 5)"
    return vendor, family, name, width


# --------------------------------------------------------------------------
# the peers: each a factory (variant, inputs, threads) -> call, or raises
# Unsupported with the reason
# --------------------------------------------------------------------------

class Unsupported(Exception):
    pass


def _la(variant, inputs, threads, C):
    import la
    args = [inputs["q"], inputs["k"], inputs["v"], inputs.get("g"), inputs.get("beta")]

    def call():
        o, _ = la.attention(variant, *args, chunk_size=C, num_threads=threads)
        return o
    return call


def _numpy(variant, inputs, threads, C):
    import numpy_chunked as npc
    if variant not in npc.VARIANTS:
        raise Unsupported(f"numpy_chunked has no {variant}")
    prepared = npc.prepare(inputs)

    def call():
        bench_cpu.set_blas_threads(threads)
        return npc.chunked_forward(variant, prepared, chunk_size=C)[0]
    return call


def _torch(variant, inputs, threads, C):
    import numpy_chunked as npc
    tb = npc.torch_backend()
    if tb is None:
        raise Unsupported("torch is not installed")
    if variant not in npc.VARIANTS:
        raise Unsupported(f"numpy_chunked has no {variant}")
    prepared = npc.prepare(inputs, tb)

    def call():
        tb.torch.set_num_threads(threads)
        with tb.torch.inference_mode():
            o, _ = npc.chunked_forward(variant, prepared, chunk_size=C, xp=tb)
        return tb.to_numpy(o)
    return call


#: la variant -> ONNX LinearAttention's update_rule and decay kind
_ONNX = {"gla": ("gated", "channel"), "gated_deltanet": ("gated_delta", "scalar"),
         "kda": ("gated_delta", "channel"), "mamba2": ("gated", "scalar"),
         "deltanet": ("delta", None), "linear": ("linear", None)}


def _onnx_model(variant, B, T, H, K, V):
    try:
        import onnx
        from onnx import TensorProto, helper
    except ImportError:
        raise Unsupported("onnx is not installed") from None
    if variant not in _ONNX:
        raise Unsupported(f"no ONNX LinearAttention form for {variant}")
    rule, decay = _ONNX[variant]
    names = ["q", "k", "v", "", "g" if decay else "", "b" if "delta" in rule else ""]
    while names[-1] == "":
        names.pop()
    node = helper.make_node("LinearAttention", names, ["o", "s"], q_num_heads=H,
                            kv_num_heads=H, update_rule=rule, scale=K ** -0.5)

    def info(name, shape):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)

    inputs = [info("q", [B, T, H * K]), info("k", [B, T, H * K]), info("v", [B, T, H * V])]
    if decay:
        inputs.append(info("g", [B, T, H * K] if decay == "channel" else [B, T, H]))
    if "delta" in rule:
        inputs.append(info("b", [B, T, H]))
    graph = helper.make_graph([node], "la_peer", inputs,
                              [info("o", [B, T, H * V]), info("s", [B, H, K, V])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 27)])
    onnx.checker.check_model(model)
    return model


def _onnx_feeds(inputs):
    B, T, H, K = inputs["q"].shape
    feeds = {"q": inputs["q"].reshape(B, T, -1), "k": inputs["k"].reshape(B, T, -1),
             "v": inputs["v"].reshape(B, T, -1)}
    if inputs.get("g") is not None:
        feeds["g"] = inputs["g"].reshape(B, T, -1)
    if inputs.get("beta") is not None:
        feeds["b"] = inputs["beta"]
    return feeds


def _output(o, inputs):
    B, T, HV, V = inputs["v"].shape
    return o.reshape(B, T, HV, V)


def _import_with_model(package, variant, inputs):
    """(the ONNX runtime package, the serialised LinearAttention model of
    variant at the inputs' shapes), or Unsupported."""
    import importlib
    try:
        module = importlib.import_module(package)
    except ImportError:
        raise Unsupported(f"{package} is not installed") from None
    B, T, H, K = inputs["q"].shape
    return module, _onnx_model(variant, B, T, H, K, inputs["v"].shape[3]).SerializeToString()


def _onnxruntime(variant, inputs, threads, C):
    onnxruntime, model = _import_with_model("onnxruntime", variant, inputs)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    try:
        session = onnxruntime.InferenceSession(model, options,
                                               providers=["CPUExecutionProvider"])
    except Exception as error:
        raise Unsupported(f"onnxruntime {onnxruntime.__version__}: "
                          f"{str(error).splitlines()[0][:120]}") from None
    feeds = _onnx_feeds(inputs)
    return lambda: _output(session.run(["o"], feeds)[0], inputs)


def _openvino(variant, inputs, threads, C):
    openvino, model = _import_with_model("openvino", variant, inputs)
    try:
        core = openvino.Core()
        compiled = core.compile_model(core.read_model(model), "CPU",
                                      {"INFERENCE_NUM_THREADS": threads,
                                       "INFERENCE_PRECISION_HINT": "f32"})
    except Exception as error:
        lines = [x.strip() for x in str(error).splitlines() if x.strip()]
        reason = next((x for x in lines if "No conversion rule" in x), lines[-1] if lines else "")
        raise Unsupported(f"openvino {openvino.__version__.split('-')[0]} cannot compile ONNX's "
                          f"LinearAttention: {reason[:120]}") from None
    feeds = _onnx_feeds(inputs)
    return lambda: _output(compiled(feeds)[compiled.output(0)], inputs)


def _ggml(variant, inputs, threads, C):
    import ctypes
    try:
        import ggml
        import ggml.utils as gutils
    except Exception as error:
        raise Unsupported(f"ggml-python is not installed ({type(error).__name__})") from None
    if not hasattr(ggml, "ggml_gated_delta_net"):
        raise Unsupported("this ggml has no ggml_gated_delta_net")
    if variant not in ("gated_deltanet", "kda"):
        raise Unsupported("ggml's op is Gated DeltaNet and KDA only")
    import numpy as np
    B, T, H, K = inputs["q"].shape
    V = inputs["v"].shape[3]
    if K != V or inputs["v"].shape[2] != H:
        raise Unsupported("ggml's op needs K = V and one value head per key head")
    # ggml's dimensions are numpy's reversed: q [B, T, H, K] is ne = [K, H, T, B].
    g = inputs["g"] if variant == "kda" else inputs["g"][..., None]
    arrays = [np.ascontiguousarray(x, np.float32) for x in
              (inputs["q"], inputs["k"], inputs["v"], g, inputs["beta"][..., None],
               np.zeros((B, H, K, K), np.float32))]
    size = sum(x.nbytes for x in arrays) + (B * T * H * V + B * H * K * K) * 4
    params = ggml.ggml_init_params(mem_size=size + 64 * 1024 * 1024, mem_buffer=None,
                                   no_alloc=False)
    ctx = ggml.ggml_init(params)
    tensors = [gutils.from_numpy(x, ctx) for x in arrays]
    out = ggml.ggml_gated_delta_net(ctx, *tensors, 1)
    graph = ggml.ggml_new_graph(ctx)
    ggml.ggml_build_forward_expand(graph, out)

    def call():
        ggml.ggml_graph_compute_with_ctx(ctx, graph, threads)
        rows = gutils.to_numpy(out).reshape(-1, H * V)[:B * T]
        return rows.reshape(B, T, H, V).copy()
    call.keep = (ctx, tensors, arrays, ctypes)  # the context outlives the call
    return call


FACTORIES = {"la": _la, "numpy": _numpy, "torch": _torch, "onnxruntime": _onnxruntime,
             "ggml": _ggml, "openvino": _openvino}


def main(argv=None):
    args = parse_args(argv)
    if args.plot_from:
        with open(args.plot_from) as f:
            data = json.load(f)
        sgemm = {int(k): v for k, v in data["sgemm"].items()}
        _plot(args.plot or "peers.png", data["results"], sgemm, max(sgemm),
              f"{data['cpu']} (family {data['family']})")
        return
    from la.testing import make_inputs, reference_for, rel_rms
    shapes = [_shape(s) for s in (args.shapes or (QUICK_SHAPES if args.quick
                                                   else FULL_SHAPES))]
    variants = args.variants.split(",")
    peers = args.peers.split(",")
    for name in peers:
        if name not in FACTORIES:
            raise SystemExit(f"unknown peer {name!r}; expected some of {PEERS}")
    n = args.threads
    C = args.chunk_size
    facts = bench_cpu._machine_facts()
    vendor, family, name, width = cpu_family()
    print("# la and its CPU peers (fp32 forward)")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    print(f"command: {' '.join([os.path.basename(sys.executable)] + sys.argv)}")
    print(f"machine: {name} ({vendor} family {family}), nproc {facts['nproc']}, "
          f"FMA width {width}, loadavg at start {facts['loadavg']}")
    print(f"repository: {facts['git']}; threads 1 and {n}; repeat {args.repeat} (median); "
          f"chunk size {C}")
    print(flush=True)
    sg = bench_cpu.measure_sgemm(argparse.Namespace(threads=n,
                                                    sgemm_seconds=args.sgemm_seconds), {})
    if not sg:
        raise SystemExit("no sgemm measurement succeeded")
    sgemm = {1: max(r["gflops"]["1"]["median"] for r in sg),
             n: max(r["gflops"][str(n)]["median"] for r in sg)}
    print(f"sgemm 128^3 (OpenBLAS): {sgemm[1]:.1f} GFLOP/s on 1 thread, {sgemm[n]:.1f} on {n}")
    print(flush=True)

    # ---- check every peer on a small case ----
    print("## check against la.reference (fp64), B=1 T=150 H=2 K=V=32")
    usable = {}
    for variant in variants:
        small = make_inputs(variant, 1, 150, 2, 32, 32, gate_scale=args.gate_scale, seed=1)
        ref, _ = reference_for(variant, small)
        for peer in peers:
            try:
                err = rel_rms(ref, FACTORIES[peer](variant, small, 1, C)())
            except Unsupported as why:
                print(f"  {variant} / {peer}: not run: {why}")
                continue
            ok = err <= 1e-4
            print(f"  {variant} / {peer}: rel_rms {err:.1e}" + ("" if ok else " DISAGREES: "
                                                               "not timed"))
            if ok:
                usable.setdefault(variant, []).append(peer)
    print(flush=True)

    # ---- timings ----
    results = []
    print("| variant | B,T,H,K,V | implementation | threads | ms | GFLOP/s | x sgemm "
          "| la faster by |")
    print("|---|---|---|---|---|---|---|---|")
    for shape in shapes:
        B, T, H, K, V = shape
        for variant in variants:
            inputs = make_inputs(variant, B, T, H, K, V, gate_scale=args.gate_scale, seed=0)
            flops = bench_cpu.chunked_flops(variant, B, T, H, K, V, C=C)
            la_ms = {}
            for peer in usable.get(variant, []):
                for threads in sorted({1, n}):
                    try:
                        call = FACTORIES[peer](variant, inputs, threads, C)
                        ms, _ = bench_cpu.time_call(call, args.repeat)
                    except Unsupported as why:
                        print(f"| {variant} | {','.join(map(str, shape))} | {peer} | {threads} "
                              f"| not run: {why} | | | |")
                        continue
                    if peer == "la":
                        la_ms[threads] = ms
                    gflops = flops / ms / 1e6
                    faster = la_ms.get(threads) and ms / la_ms[threads]
                    results.append(dict(variant=variant, shape=list(shape), peer=peer,
                                        threads=threads, ms=ms, gflops=gflops,
                                        sgemm_ratio=gflops / sgemm[threads]))
                    print(f"| {variant} | {','.join(map(str, shape))} | {peer} | {threads} "
                          f"| {ms:.1f} | {gflops:.1f} | {gflops / sgemm[threads]:.2f} | "
                          + (f"{faster:.1f}x" if faster and peer != "la" else "-") + " |",
                          flush=True)
    print()
    print("## thread scaling (time on 1 thread / time on n)")
    for r in results:
        if r["threads"] == n and n != 1:
            one = [x for x in results if x["threads"] == 1 and x["peer"] == r["peer"]
                   and x["variant"] == r["variant"] and x["shape"] == r["shape"]]
            if one:
                print(f"  {r['variant']} {','.join(map(str, r['shape']))} {r['peer']}: "
                      f"{one[0]['ms'] / r['ms']:.2f}x on {n} threads")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"sgemm": {str(k): v for k, v in sgemm.items()}, "cpu": name,
                       "family": family, "results": results}, f, indent=1)
    if args.plot:
        _plot(args.plot, results, sgemm, n, f"{name} (family {family})")


def _plot(path, results, sgemm, n, machine):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cases = sorted({(r["variant"], tuple(r["shape"])) for r in results},
                   key=lambda c: (c[1], c[0]))
    peers = [p for p in PEERS if any(r["peer"] == p for r in results)]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
    for axis, threads in zip(axes, (1, n)):
        width = 0.8 / max(len(peers), 1)
        for i, peer in enumerate(peers):
            values = []
            for variant, shape in cases:
                match = [r["gflops"] for r in results if r["peer"] == peer
                         and r["threads"] == threads and r["variant"] == variant
                         and tuple(r["shape"]) == shape]
                values.append(match[0] if match else 0.0)
            axis.bar([c + i * width for c in range(len(cases))], values, width, label=peer)
        axis.axhline(sgemm[threads], color="black", linestyle="--", linewidth=1,
                     label="sgemm 128^3")
        axis.set_xticks([c + 0.4 - width / 2 for c in range(len(cases))])
        axis.set_xticklabels([f"{v}\nT={s[1]} H={s[2]}" for v, s in cases], fontsize=7)
        axis.set_yscale("log")
        axis.set_title(f"{threads} thread{'s' if threads > 1 else ''}")
        axis.set_ylabel("GFLOP/s (chunked algorithm's count)")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"la and CPU peers, fp32 forward: {machine}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
