#!/usr/bin/env python3
"""Seeded random-configuration stress run of the CPU path against the fp64 reference.

Draws --count configurations from --seed (la.stress.generate_configs: every
variant, random shapes, chunk sizes or the sequential program, f32/f16/bf16,
gate strengths down to log-gates of -30, beta near 0 / near 1 / in (0, 2),
qk_l2norm, initial state, packed sequences, segmented runs, the normaliser),
runs each with build/bin/la-run and compares o and the final state with the
reference (rel_rms <= 1e-5 for f32, 5e-3 for f16/bf16; finite outputs).
Prints one line per configuration and a summary; exits 1 when any fails.
Needs a built la-run (set LA_RUN to use another executable).
"""

import argparse
import concurrent.futures
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

from la import runner  # noqa: E402
from la import stress  # noqa: E402


def _run_one(cfg):
    return stress.run_config(cfg)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=120, help="configurations (default 120)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the draw (default 0)")
    parser.add_argument("--jobs", type=int, default=1, help="parallel configurations (default 1)")
    parser.add_argument("--only", default=None,
                        help="run only the configurations whose id contains this string")
    parser.add_argument("--report", metavar="FILE", default=None,
                        help="write every result (config, errors, timing, commands) as JSON")
    parser.add_argument("--keep-failed", metavar="DIR", default=None,
                        help="rerun each failing configuration keeping its la-run files "
                             "(MLIR, .npy inputs) in DIR/<id>/, so its commands can be rerun")
    parser.add_argument("--list", action="store_true", help="only print the configuration ids")
    parser.add_argument("--seconds", type=float, default=None,
                        help="a time-boxed campaign: run configurations in order (up to "
                             "--count) until this many seconds have passed (with --jobs 1)")
    args = parser.parse_args()

    configs = stress.generate_configs(args.count, args.seed)
    if args.only:
        configs = [c for c in configs if args.only in c["id"]]
    if args.list:
        for cfg in configs:
            print(cfg["id"])
        return 0

    la_run = runner.find_la_run()
    if la_run is None or not os.path.isfile(la_run):
        sys.exit("stress.py: la-run is not built; run scripts/build.sh first "
                 "(or set LA_RUN to the executable)")

    print(f"stress: {len(configs)} configurations, seed {args.seed}, jobs {args.jobs}, "
          f"la-run {la_run}", flush=True)
    start = time.perf_counter()
    results = []
    if args.jobs <= 1:
        for cfg in configs:
            if args.seconds is not None and time.perf_counter() - start > args.seconds:
                break
            result = stress.run_config(cfg)
            print(stress.format_result(result), flush=True)
            results.append(result)
    else:
        with concurrent.futures.ProcessPoolExecutor(max_workers=args.jobs) as pool:
            for result in pool.map(_run_one, configs):
                print(stress.format_result(result), flush=True)
                results.append(result)
    total = time.perf_counter() - start

    failed = [r for r in results if not r["passed"]]
    if args.keep_failed:
        for r in failed:
            again = stress.run_config(r["config"], keep_dir=args.keep_failed)
            r["kept_commands"] = again["commands"]
            r["kept_errors"] = again["errors"]

    print()
    print(f"summary: {len(results) - len(failed)} passed, {len(failed)} failed of "
          f"{len(results)} in {total:.1f} s (seed {args.seed})")
    for group, dtypes in (("f32", ("f32",)), ("f16/bf16", ("f16", "bf16"))):
        errs = [(max(r["errors"].get(n, 0.0) for n in ("o", "state", "o_seg", "state_seg")),
                 r["id"]) for r in results if r["config"]["dtype"] in dtypes and r["errors"]]
        if errs:
            worst = max(errs, key=lambda e: (e[0] != e[0], e[0]))
            limit = stress.TOL[dtypes[0]]
            print(f"  worst {group}: {worst[0]:.3e} (limit {limit:.0e}) in {worst[1]}")
    if results:
        walls = sorted(results, key=lambda r: r["timing"]["wall_s"])
        compile_s = sum(r["timing"]["compile_ms"] for r in results) / 1000
        la_run_s = sum(r["timing"]["la_run_s"] for r in results)
        ref_s = sum(r["timing"]["reference_s"] for r in results)
        print(f"  time: {la_run_s:.1f} s in la-run ({compile_s:.1f} s compiling), "
              f"{ref_s:.1f} s in the reference; per configuration median "
              f"{walls[len(walls) // 2]['timing']['wall_s']:.2f} s, max "
              f"{walls[-1]['timing']['wall_s']:.2f} s ({walls[-1]['id']})")
        calls = [(r["timing"]["la_run_s"] / max(1, len(r["commands"])), r["id"]) for r in results]
        slowest = max(calls)
        print(f"  slowest la-run call: {slowest[0]:.2f} s ({slowest[1]})")
    for r in failed:
        print(f"FAILED {r['id']}")
        for msg in r["failures"]:
            print(f"    {msg}")
        for cmd in r.get("kept_commands", r["commands"]):
            print(f"    command: {cmd}")

    if args.report:
        with open(args.report, "w") as f:
            json.dump(dict(seed=args.seed, count=args.count, total_s=total,
                           passed=len(results) - len(failed), failed=len(failed),
                           results=results), f, indent=1, default=float)
        print(f"report: {args.report}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
