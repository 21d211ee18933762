#!/usr/bin/env python3
"""Serving's checkpoints in one kernel (la.attention's ``checkpoint_every``)
against what they cost before, and against the plain call, in one run.

A program, not a test. Through the Python package, medians of alternating
calls after a warm-up, one line per (variant, interval, threads):

* ``prefill``: ``la.serving.prefill_with_checkpoints`` over B x T tokens
  with a checkpoint every ``n`` tokens (``--intervals``): the kernel (one
  call; la-lower-to-recurrence's loop over segments) against one la call
  per interval, each from the state the last one ended with (the
  composition before the kernel), and against one plain call over the
  same tokens (the baseline: no checkpoints);
* ``packed prefill``: the same tokens as ``--sequences`` packed sequences
  of equal length (``cu_seqlens``): the kernel against the plain packed
  call (the calls per interval are not timed here: with packed sequences
  the package takes them only for autograd);
* ``snapshots``: ``la.serving.decode_with_snapshots`` over ``--draft``
  tokens (a snapshot after every token): the kernel against one packed
  call over every prefix (T(T+1)/2 tokens; the path before, still taken
  with gradients or ``normalize``) and against the plain call.

The checkpoints of every path are compared (rel_rms printed).

Usage::

    python3 bench/bench_serving.py                           # GDN and GLA, n = 64, 256, 1024
    python3 bench/bench_serving.py --variants kda --intervals 128 --threads 2
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "python"))


def _median_ms(calls, repeat):
    """Medians (ms) of ``repeat`` rounds of the calls, alternating."""
    samples = [[] for _ in calls]
    for _ in range(repeat):
        for index, call in enumerate(calls):
            start = time.perf_counter()
            call()
            samples[index].append((time.perf_counter() - start) * 1e3)
    return [statistics.median(s) for s in samples]


def _row(variant, what, threads, kernel, before, plain, repeat, digits=1):
    """Times the kernel, the path before it (None: not timed) and the plain
    call, alternating, and prints their table row (with the rel_rms of the
    before path's checkpoints against the kernel's)."""
    from la.testing import rel_rms
    error = rel_rms(before(), kernel()) if before is not None else None
    plain()
    calls = [kernel, plain] if before is None else [kernel, before, plain]
    times = _median_ms(calls, repeat)
    t_kernel, t_plain = times[0], times[-1]
    t_before = f"{times[1]:.{digits}f}" if before is not None else "-"
    ratio = f"{times[1] / t_kernel:.2f}" if before is not None else "-"
    print(f"| {variant} | {what} | {threads} | {t_kernel:.{digits}f} | {t_before} | "
          f"{t_plain:.{digits}f} | {t_kernel / t_plain:.2f} | {ratio} | "
          f"{'-' if error is None else f'{error:.1e}'} |", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--variants", default="gated_deltanet,gla")
    p.add_argument("--shape", default="1x4096x8x128x128", help="BxTxHxKxV of the prefill")
    p.add_argument("--intervals", default="64,256,1024")
    p.add_argument("--sequences", type=int, default=8,
                   help="packed sequences the prefill's tokens are split into")
    p.add_argument("--draft", type=int, default=8, help="tokens per sequence of the snapshots")
    p.add_argument("--decode-batch", type=int, default=16, help="sequences of the snapshots")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--repeat", type=int, default=7)
    args = p.parse_args(argv)
    import la
    from la import ops, serving
    from la import testing as lt
    B, T, H, K, V = (int(x) for x in args.shape.split("x"))
    threads = [int(t) for t in args.threads.split(",")]
    print(f"bench_serving: prefill B={B} T={T} H={H} K={K} V={V}; snapshots "
          f"B={args.decode_batch} T={args.draft}; medians of {args.repeat} alternating "
          f"calls after a warm-up (ms)")
    print("| variant | what | threads | kernel | before | plain | kernel / plain | "
          "before / kernel | rel_rms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for variant in [v for v in args.variants.split(",") if v]:
        x = lt.make_inputs(variant, B, T, H, K, V, seed=0, gate_scale=1 / 16)
        x["k"] = (x["k"] / np.linalg.norm(x["k"], axis=-1, keepdims=True)).astype(np.float32)
        tokens = {n: x[n] for n in ("g", "beta") if n in x}
        for n_threads in threads:
            def plain():
                return la.attention(variant, x["q"], x["k"], x["v"], **tokens,
                                    output_final_state=True, num_threads=n_threads)

            for interval in [int(i) for i in args.intervals.split(",")]:
                def kernel():
                    return serving.prefill_with_checkpoints(
                        variant, x["q"], x["k"], x["v"], **tokens, interval=interval,
                        num_threads=n_threads).checkpoints

                def per_interval():
                    state, saved = None, []
                    for start in range(0, T, interval):
                        part = slice(start, min(start + interval, T))
                        _, state = ops.attention(
                            variant, x["q"][:, part], x["k"][:, part], x["v"][:, part],
                            **{n: a[:, part] for n, a in tokens.items()},
                            initial_state=state, output_final_state=True,
                            num_threads=n_threads)
                        if part.stop - part.start == interval:
                            saved.append(state)
                    return np.stack(saved, 1)

                _row(variant, f"prefill, n = {interval}", n_threads, kernel, per_interval,
                     plain, args.repeat)

            if B == 1 and T % args.sequences == 0:
                cu = np.arange(0, T + 1, T // args.sequences).astype(np.int32)
                for interval in [int(i) for i in args.intervals.split(",")]:
                    def packed_kernel():
                        return serving.prefill_with_checkpoints(
                            variant, x["q"], x["k"], x["v"], **tokens, interval=interval,
                            cu_seqlens=cu, num_threads=n_threads).checkpoints

                    def packed_plain():
                        return la.attention(variant, x["q"], x["k"], x["v"], **tokens,
                                            cu_seqlens=cu, output_final_state=True,
                                            num_threads=n_threads)

                    packed_kernel()
                    _row(variant, f"packed prefill ({args.sequences} sequences), n = {interval}",
                         n_threads, packed_kernel, None, packed_plain, args.repeat)

            d = lt.make_inputs(variant, args.decode_batch, args.draft, H, K, V, seed=1,
                               gate_scale=1 / 16, with_initial_state=True)
            d["k"] = (d["k"] / np.linalg.norm(d["k"], axis=-1, keepdims=True)).astype(
                np.float32)
            d_tokens = {n: d[n] for n in ("g", "beta") if n in d}
            s0 = d["initial_state"]

            def snapshots():
                return serving.decode_with_snapshots(variant, d["q"], d["k"], d["v"],
                                                     **d_tokens, initial_state=s0,
                                                     num_threads=n_threads)[1]

            def prefixes():
                # the packed prefixes (decode_with_snapshots with normalize or
                # gradients): every row's T prefixes as sequences of one call
                Bd, Td = args.decode_batch, args.draft
                rows = np.repeat(np.arange(Bd), Td * (Td + 1) // 2)
                cols = np.concatenate([np.arange(j + 1) for j in range(Td)] * Bd)
                lengths = np.tile(np.arange(1, Td + 1), Bd)
                cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
                packed = {n: np.ascontiguousarray(a[rows, cols][None])
                          for n, a in dict(q=d["q"], k=d["k"], v=d["v"], **d_tokens).items()}
                q, k, v = packed.pop("q"), packed.pop("k"), packed.pop("v")
                _, states = ops.attention(variant, q, k, v, **packed,
                                          initial_state=s0[np.repeat(np.arange(Bd), Td)],
                                          cu_seqlens=cu, output_final_state=True,
                                          num_threads=n_threads)
                return states.reshape((Bd, Td) + states.shape[1:])

            def decode_plain():
                return la.attention(variant, d["q"], d["k"], d["v"], **d_tokens,
                                    initial_state=s0, output_final_state=True,
                                    num_threads=n_threads)

            _row(variant, f"snapshots, T = {args.draft}", n_threads, snapshots, prefixes,
                 decode_plain, args.repeat, digits=2)


if __name__ == "__main__":
    main()
