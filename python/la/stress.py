"""Seeded random-configuration stress suite for the CPU path (``la-run``).

:func:`generate_configs` draws ``count`` configurations from a seed; each one
is a plain dict (JSON-serialisable) with a stable ``id``: configuration
``index`` of seed ``seed`` is always the same, whatever ``count`` is (every
configuration has its own generator, seeded with ``[seed, index]``).

The draw covers

* every variant of :data:`la.testing.VARIANTS` (cycled, so any
  ``len(VARIANTS)`` consecutive indices hold each once), Gated DeltaNet-2's
  erase_write variants included;
* shapes: B in {1, 2, 3}; T in 1..300 (T = 1, T a multiple of the chunk size
  and T % C != 0 all occur); H in {1, 2, 4}; HV = H or 2H; K, V in
  {4, 8, 16, 32, 64} drawn independently (K != V); ``B*T*HV*K*V`` is capped
  at :data:`MAX_ELEMENTS` by shortening T, so that one la-run call stays
  well under a second;
* chunk sizes {8, 16, 32, 64} or the sequential (token-by-token) program;
* q, k, v (and o) in f32, f16 or bf16;
* gate strength ``gate_scale`` in {1/16, 1, 8, 40} with log-gates clamped at
  ``gate_min = -30`` (data-dependent gates); the fixed-gate variants use
  RetNet's schedule or per-head log decays drawn the same way;
* beta (delta rule): ``small`` (sigmoid * 1e-3), ``typical`` (sigmoid),
  ``near1`` (1 - 1e-4), ``neg_eigval`` (``allow_neg_eigval``: the op uses
  2*beta, so the reference gets 2*beta) and ``neg_eigval_near1`` (2*beta =
  2 - 2e-4, a near reflection);
* erase and write gates (erase_write rule): ``typical`` (sigmoid), ``small``
  (erase and write * 1e-3), ``near1`` (erase = 1 - 1e-4: a near projection
  away from k) and ``wide`` (``sigmoid(4 x)``: channels close to 0 and to 1
  side by side);
* ``qk_l2norm`` on/off (on: q and k get random per-token scales, so that the
  normalisation matters), initial state on/off;
* modes: ``plain``; ``varlen`` (B = 1, 2-4 packed sequences through
  ``cu_seqlens``, sometimes an empty one); ``segmented`` (T split at a random
  point, the final state of the first part carried into the second, compared
  with the reference and with one pass);
* the op's checkpoints (``checkpoint_every = n``, plain and packed modes,
  half of those without the normaliser or non-finite inputs): the state
  after every n tokens of each sequence against the reference run on each
  prefix;
* the normaliser, for additive variants, with ``positive_qk`` inputs (not in
  segmented mode: the normaliser's sum z is not part of the state);
* adversarial gates (data-dependent gates, about half of the
  configurations): ``gate_events``, 1 to 4 tokens (or single channels) whose
  log-gate is -inf (a hard reset), -1e30, -1e4, -500 or -104, drawn from a
  generator of their own so that every other field of a configuration is
  what it was before they existed;
* non-finite inputs (about a quarter of the configurations):
  ``value_events``, 1 or 2 tokens where one element, or the whole token, of
  q, k, v, a log-gate (NaN only: -inf is a gate event, +inf a positive gate),
  beta, erase or write is NaN, +inf or -inf; from a generator of their own
  too. The outputs before the first such token must match the fp64
  reference of the same inputs without them; from it on, the outputs and
  the final state must be non-finite exactly where the sequential
  (token-by-token) program's are, and agree with it elsewhere.

:func:`run_config` builds the inputs, runs la-run (:func:`la.runner.run_attention`)
and compares ``o`` and the final state with the fp64 reference
(:func:`la.testing.reference_for`) on the same rounded inputs: ``rel_rms`` at
most :data:`TOL` (1e-5 for f32, 5e-3 for f16/bf16 q, k, v) and every output
finite. In segmented mode both the one-pass and the segmented results must
meet the tolerance against the reference; their direct difference is
reported but is not a pass criterion.
"""

import os
import time

import numpy as np

from . import runner
from . import testing as lt

__all__ = [
    "BETA_MODES",
    "CHUNK_SIZES",
    "ERASE_WRITE_MODES",
    "DIMS",
    "GATE_SCALES",
    "MAX_ELEMENTS",
    "TOL",
    "VALUE_EVENT_VALUES",
    "build_inputs",
    "check_nonfinite_outputs",
    "check_outputs",
    "format_result",
    "generate_configs",
    "run_config",
]

#: rel_rms limits against the fp64 reference, by the dtype of q, k, v.
TOL = {"f32": 1e-5, "f16": 5e-3, "bf16": 5e-3}

VARIANT_NAMES = tuple(lt.VARIANTS)
DTYPES = ("f32", "f16", "bf16")
CHUNK_SIZES = (8, 16, 32, 64)
DIMS = (4, 8, 16, 32, 64)
GATE_SCALES = (1 / 16, 1.0, 8.0, 40.0)
GATE_MIN = -30.0
#: the log-gates of ``gate_events``: a hard reset and very negative decays.
GATE_EVENT_VALUES = (-np.inf, -1e30, -1e4, -500.0, -104.0)
#: the values of ``value_events`` (strings, so that configurations are JSON).
VALUE_EVENT_VALUES = ("nan", "inf", "-inf")
BETA_MODES = ("small", "typical", "near1", "neg_eigval", "neg_eigval_near1")
ERASE_WRITE_MODES = ("small", "typical", "near1", "wide")
MODES = ("plain", "varlen", "segmented")
MAX_T = 300
#: cap on B * T * HV * K * V (T is shortened to meet it).
MAX_ELEMENTS = 1 << 21


def _scale_name(scale):
    if scale is None:
        return "retnet"
    return "1/16" if scale == 1 / 16 else f"{scale:g}"


def _make_id(cfg):
    parts = [f"s{cfg['seed']}-{cfg['index']:03d}", cfg["variant"], cfg["dtype"],
             "seq" if cfg["sequential"] else f"C{cfg['chunk_size']}",
             "B{B}T{T}H{H}HV{HV}K{K}V{V}".format(**cfg)]
    if cfg["gate_scale"] is not None or lt.VARIANTS[cfg["variant"]][1] == "fixed":
        parts.append("g" + _scale_name(cfg["gate_scale"]).replace("/", "_"))
    if cfg["beta_mode"] is not None:
        parts.append("beta_" + cfg["beta_mode"])
    if cfg.get("erase_write_mode") is not None:
        parts.append("ew_" + cfg["erase_write_mode"])
    if cfg["qk_l2norm"]:
        parts.append("l2")
    if cfg["normalizer"]:
        parts.append("norm")
    if cfg["initial_state"]:
        parts.append("s0")
    if cfg.get("gate_events"):
        parts.append("ev" + "_".join(f"{t}" for t, _, _ in cfg["gate_events"]))
    if cfg.get("value_events"):
        parts.append("nf" + "_".join(f"{name}{t}" for name, t, _, _ in cfg["value_events"]))
    if cfg["mode"] == "varlen":
        parts.append("cu" + "_".join(str(c) for c in cfg["cu_seqlens"]))
    elif cfg["mode"] == "segmented":
        parts.append(f"split{cfg['split']}")
    if cfg.get("checkpoint_every"):
        parts.append(f"ck{cfg['checkpoint_every']}")
    return "-".join(parts)


def _one_config(seed, index):
    rng = np.random.default_rng([seed, index])
    variant = VARIANT_NAMES[index % len(VARIANT_NAMES)]
    update, gate = lt.VARIANTS[variant]

    mode = str(rng.choice(MODES, p=[0.6, 0.2, 0.2]))
    dtype = str(rng.choice(DTYPES, p=[0.5, 0.25, 0.25]))
    sequential = bool(rng.random() < 0.25)
    chunk = int(rng.choice(CHUNK_SIZES))  # drawn always, so the draws stay aligned
    H = int(rng.choice([1, 2, 4]))
    HV = H * int(rng.choice([1, 2]))
    K = int(rng.choice(DIMS))
    V = int(rng.choice(DIMS))
    B = int(rng.choice([1, 2, 3]))
    if mode == "varlen":
        B = 1

    r = rng.random()
    if r < 0.08:
        T = 1
    elif r < 0.18:
        T = chunk * int(rng.integers(1, MAX_T // chunk + 1))  # T % C == 0
    else:
        T = int(rng.integers(2, MAX_T + 1))
    T = max(1, min(T, MAX_ELEMENTS // (B * HV * K * V)))
    if mode == "segmented":
        T = max(T, 2)

    if gate in ("scalar", "channel"):
        gate_scale = float(rng.choice(GATE_SCALES))
    elif gate == "fixed":
        pick = int(rng.integers(0, len(GATE_SCALES) + 1))
        gate_scale = None if pick == len(GATE_SCALES) else float(GATE_SCALES[pick])
    else:
        gate_scale = None

    beta_mode = None
    if update == "delta":
        beta_mode = str(rng.choice(BETA_MODES, p=[0.2, 0.3, 0.2, 0.2, 0.1]))
    erase_write_mode = None
    if update == "erase_write":
        erase_write_mode = str(rng.choice(ERASE_WRITE_MODES, p=[0.2, 0.4, 0.2, 0.2]))

    qk_l2norm = bool(rng.random() < 0.3)
    initial_state = bool(rng.random() < 0.5)
    normalizer = bool(update == "additive" and mode != "segmented" and rng.random() < 0.3)

    cu_seqlens = None
    split = None
    if mode == "varlen":
        nseq = int(rng.integers(2, 5))
        cuts = sorted(int(c) for c in rng.integers(0, T + 1, size=nseq - 1))
        if rng.random() < 0.3:  # force an empty sequence somewhere
            j = int(rng.integers(0, nseq - 1))
            cuts[j] = int(rng.choice([0, T, cuts[j - 1] if j > 0 else 0]))
            cuts = sorted(cuts)
        cu_seqlens = [0] + cuts + [T]
    elif mode == "segmented":
        split = int(rng.integers(1, T))

    cfg = dict(
        index=index, seed=seed, input_seed=int(rng.integers(0, 2**31 - 1)),
        variant=variant, mode=mode, dtype=dtype, sequential=sequential,
        chunk_size=None if sequential else chunk,
        B=B, T=T, H=H, HV=HV, K=K, V=V,
        gate_scale=gate_scale, gate_min=GATE_MIN if gate != "none" else None,
        beta_mode=beta_mode, allow_neg_eigval=bool(beta_mode and beta_mode.startswith("neg")),
        erase_write_mode=erase_write_mode,
        qk_l2norm=qk_l2norm, initial_state=initial_state,
        normalizer=normalizer, positive_qk=normalizer,
        cu_seqlens=cu_seqlens, split=split,
    )
    # Drawn last, from a generator of their own: the fields above are the
    # same as before gate events existed.
    events = []
    ev_rng = np.random.default_rng([seed, index, 7])
    if gate in ("scalar", "channel") and ev_rng.random() < 0.5:
        for _ in range(int(ev_rng.integers(1, 5))):
            t = int(ev_rng.integers(0, T))
            value = float(ev_rng.choice(GATE_EVENT_VALUES))
            # A channel gate gets the event on one channel or on all.
            channel = int(ev_rng.integers(-1, K)) if gate == "channel" else -1
            events.append((t, channel, value))
    cfg["gate_events"] = events
    cfg["value_events"] = _value_events(seed, index, variant, T)
    cfg["checkpoint_every"] = _checkpoint_every(seed, index, cfg)
    cfg["id"] = _make_id(cfg)
    return cfg


def _checkpoint_every(seed, index, cfg):
    """The op's checkpoints (the state after every n tokens of each sequence)
    for half of the plain and packed configurations without the normaliser
    or non-finite inputs, from a generator of their own: n from 1 (T <= 12)
    up to past T (no checkpoint), at most about 12 of them."""
    rng = np.random.default_rng([seed, index, 13])
    if cfg["mode"] == "segmented" or cfg["normalizer"] or cfg["value_events"] or \
            rng.random() >= 0.5:
        return None
    T = cfg["T"]
    return int(rng.integers(max(1, T // 12), T + 3))


def _value_events(seed, index, variant, T):
    """Non-finite inputs: (operand, token, element or -1 for the whole token,
    value), from a generator of their own."""
    rng = np.random.default_rng([seed, index, 11])
    if rng.random() >= 0.25:
        return []
    operands = lt.token_operands(variant)
    events = []
    for _ in range(int(rng.integers(1, 3))):
        name = str(rng.choice(operands))
        t = int(rng.integers(0, T))
        # An element index into the token's slice of batch 0 (wrapped to its
        # size), or -1: the whole token in every batch.
        element = -1 if rng.random() < 0.5 else int(rng.integers(0, 1 << 20))
        value = "nan" if name == "g" else str(rng.choice(VALUE_EVENT_VALUES))
        events.append((name, t, element, value))
    return events


def generate_configs(count=120, seed=0):
    """``count`` random configurations (dicts) from ``seed``; see the module docstring."""
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    return [_one_config(int(seed), index) for index in range(int(count))]


# --------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------

def _log_sigmoid(x):
    return -np.logaddexp(0.0, -x)


def build_inputs(cfg, *, value_events=True):
    """The ``make_inputs``-style dict of one configuration (float32, not
    rounded); without its non-finite ``value_events`` when ``value_events``
    is false."""
    variant = cfg["variant"]
    update, gate = lt.VARIANTS[variant]
    inputs = lt.make_inputs(
        variant, cfg["B"], cfg["T"], cfg["H"], cfg["K"], cfg["V"], HV=cfg["HV"],
        dtype=np.float32, seed=cfg["input_seed"],
        gate_min=cfg["gate_min"] if gate in ("scalar", "channel") else None,
        with_initial_state=cfg["initial_state"], cu_seqlens=cfg["cu_seqlens"],
        gate_scale=cfg["gate_scale"] if gate in ("scalar", "channel") else 1.0,
        positive_qk=cfg["positive_qk"],
    )
    rng = np.random.default_rng([cfg["input_seed"], 1])
    if gate == "fixed" and cfg["gate_scale"] is not None:
        ld = np.maximum(cfg["gate_scale"] * _log_sigmoid(rng.standard_normal(cfg["H"])),
                        cfg["gate_min"])
        inputs["log_decay"] = np.minimum(ld, -1e-6).astype(np.float32)
    if update == "delta":
        beta = np.asarray(inputs["beta"], dtype=np.float64)
        mode = cfg["beta_mode"]
        if mode == "small":
            beta = beta * 1e-3
        elif mode in ("near1", "neg_eigval_near1"):
            beta = np.full_like(beta, 1.0 - 1e-4)
        inputs["beta"] = beta.astype(np.float32)
    if update == "erase_write":
        mode = cfg.get("erase_write_mode") or "typical"
        erase = np.asarray(inputs["erase"], dtype=np.float64)
        write = np.asarray(inputs["write"], dtype=np.float64)
        if mode == "small":
            erase, write = erase * 1e-3, write * 1e-3
        elif mode == "near1":
            erase = np.full_like(erase, 1.0 - 1e-4)
        elif mode == "wide":
            ew_rng = np.random.default_rng([cfg["input_seed"], 2])
            erase = 1.0 / (1.0 + np.exp(-4.0 * ew_rng.standard_normal(erase.shape)))
            write = 1.0 / (1.0 + np.exp(-4.0 * ew_rng.standard_normal(write.shape)))
        inputs["erase"] = erase.astype(np.float32)
        inputs["write"] = write.astype(np.float32)
    if cfg.get("gate_events"):
        g = np.array(inputs["g"], dtype=np.float32, copy=True)
        for t, channel, value in cfg["gate_events"]:
            if g.ndim == 4 and channel >= 0:
                g[:, t, :, channel] = value
            else:
                g[:, t] = value
        inputs["g"] = g
    if cfg["qk_l2norm"]:
        B, T, H = cfg["B"], cfg["T"], cfg["H"]
        for key in ("q", "k"):
            factor = np.exp(rng.uniform(-1.0, 1.5, size=(B, T, H, 1)))
            inputs[key] = (inputs[key] * factor).astype(np.float32)
    if value_events:
        for name, t, element, value in cfg.get("value_events", ()):
            x = np.array(inputs[name], dtype=np.float32, copy=True)
            if element < 0:
                x[:, t] = float(value)
            else:
                token = x[0, t].reshape(-1)
                token[element % token.size] = float(value)
                x[0, t] = token.reshape(x[0, t].shape)
            inputs[name] = x
    return inputs


def check_nonfinite_outputs(name, out, sequential, tol, result):
    """Non-finite outputs exactly where the sequential program's are, and
    ``rel_rms`` within ``tol`` where both are finite (recorded as
    ``result['errors'][name]``); a failure message otherwise."""
    out = np.asarray(out, dtype=np.float64)
    sequential = np.asarray(sequential, dtype=np.float64)
    if out.shape != sequential.shape:
        result["failures"].append(f"{name}: shape {out.shape}, expected {sequential.shape}")
        return
    mismatch = int(np.sum(np.isfinite(out) != np.isfinite(sequential)))
    if mismatch:
        result["failures"].append(
            f"{name}: {mismatch} values finite in one of the chunked and the sequential "
            f"program's outputs only ({int(np.sum(~np.isfinite(out)))} vs "
            f"{int(np.sum(~np.isfinite(sequential)))} non-finite)")
    both = np.isfinite(out) & np.isfinite(sequential)
    err = lt.rel_rms(sequential[both], out[both]) if np.any(both) else 0.0
    result["errors"][name] = err
    if not err <= tol:
        result["failures"].append(f"{name}: rel_rms {err:.3e} > {tol:.0e} where finite")


def _slice_time(inputs, start, stop, initial_state):
    part = {}
    for key, value in inputs.items():
        if key in ("q", "k", "v", "g", "beta", "erase", "write", "a", "b"):
            part[key] = value[:, start:stop]
        elif key != "initial_state":
            part[key] = value
    if initial_state is not None:
        part["initial_state"] = initial_state
    return part


# --------------------------------------------------------------------------
# checking
# --------------------------------------------------------------------------

def _error(ref, out):
    """rel_rms(ref, out), NaN on a shape mismatch."""
    if out is None or np.shape(ref) != np.shape(out):
        return float("nan")
    return lt.rel_rms(ref, out)


def check_outputs(name, ref, out, tol, result):
    """Record ``rel_rms(ref, out)`` as ``result['errors'][name]`` and whether
    ``out`` is finite; append a failure message unless both hold. Returns the
    error. ``tol=None`` only records (no pass criterion)."""
    err = _error(ref, out)
    result["errors"][name] = err
    if tol is None:
        return err
    finite = out is not None and bool(np.all(np.isfinite(np.asarray(out, dtype=np.float64))))
    result["finite"] = result["finite"] and finite
    if out is None or np.shape(ref) != np.shape(out):
        result["failures"].append(
            f"{name}: shape {None if out is None else np.shape(out)}, expected {np.shape(ref)}")
    elif not finite:
        bad = int(np.sum(~np.isfinite(np.asarray(out, dtype=np.float64))))
        result["failures"].append(f"{name}: {bad} non-finite values")
    elif not err <= tol:
        ref64 = np.asarray(ref, dtype=np.float64)
        diff = np.abs(ref64 - np.asarray(out, dtype=np.float64))
        idx = np.unravel_index(int(np.argmax(diff)), diff.shape)
        result["failures"].append(
            f"{name}: rel_rms {err:.3e} > {tol:.0e} (worst at {tuple(int(i) for i in idx)}: "
            f"ref {ref64[idx]:.6g}, got {float(np.asarray(out)[idx]):.6g})")
    return err


# --------------------------------------------------------------------------
# running
# --------------------------------------------------------------------------

def run_config(cfg, *, la_run=None, keep_dir=None):
    """Run one configuration; return a JSON-serialisable result dict.

    Keys: ``id``, ``config``, ``passed``, ``errors`` (rel_rms by name: ``o``,
    ``state``; segmented mode adds ``o_seg``, ``state_seg`` against the
    reference and ``o_seg_vs_one``, ``state_seg_vs_one`` against the one-pass
    run), ``tol``, ``finite``, ``failures`` (messages), ``timing``
    (``compile_ms``, ``run_ms``: sums over la-run calls; ``la_run_s``,
    ``reference_s``, ``wall_s``), ``commands`` (la-run command lines; the
    files are kept only with ``keep_dir``) and, when la-run failed,
    ``exception``.
    """
    start = time.perf_counter()
    variant, dtype = cfg["variant"], cfg["dtype"]
    tol = TOL[dtype]
    result = dict(id=cfg["id"], config=dict(cfg), passed=False, errors={}, tol=tol,
                  finite=True, failures=[], commands=[],
                  timing=dict(compile_ms=0.0, run_ms=0.0, la_run_s=0.0, reference_s=0.0,
                              wall_s=0.0))
    attrs = dict(qk_l2norm=cfg["qk_l2norm"], normalizer=cfg["normalizer"],
                 allow_neg_eigval=cfg["allow_neg_eigval"])
    timing = result["timing"]

    def call(inputs, tag, sequential=cfg["sequential"], checkpoint_every=None):
        directory = None if keep_dir is None else os.path.join(keep_dir, cfg["id"], tag)
        t0 = time.perf_counter()
        extra = {} if checkpoint_every is None else dict(checkpoint_every=checkpoint_every)
        *outputs, t = runner.run_attention(
            variant, inputs, dtype=dtype, chunk_size=cfg["chunk_size"] or 64,
            sequential=sequential, la_run=la_run, keep_dir=directory, **attrs, **extra)
        timing["la_run_s"] += time.perf_counter() - t0
        timing["compile_ms"] += t.get("compile_ms", 0.0)
        timing["run_ms"] += t.get("run_median_ms", 0.0)
        result["commands"].append(t["command"])
        return outputs

    events = cfg.get("value_events") or []
    try:
        prepared = runner.prepare_inputs(build_inputs(cfg), dtype)
        ref_inputs = prepared
        if events:
            # The reference of the inputs without the non-finite values:
            # the outputs before the first of them do not depend on them.
            ref_inputs = runner.prepare_inputs(build_inputs(cfg, value_events=False), dtype)
        if cfg["allow_neg_eigval"]:
            ref_inputs = dict(ref_inputs,
                              beta=2.0 * np.asarray(ref_inputs["beta"], np.float64))
        t0 = time.perf_counter()
        ref_o, ref_s = lt.reference_for(variant, ref_inputs, qk_l2norm=cfg["qk_l2norm"],
                                        normalizer=cfg["normalizer"])
        timing["reference_s"] = time.perf_counter() - t0

        every = cfg.get("checkpoint_every")
        o, s, *checkpoints = call(prepared, "full", checkpoint_every=every)
        if every:
            t0 = time.perf_counter()
            ref_checkpoints = _reference_checkpoints(cfg, ref_inputs, every)
            timing["reference_s"] += time.perf_counter() - t0
            if ref_checkpoints.size:
                check_outputs("checkpoints", ref_checkpoints, checkpoints[0], tol, result)
            elif np.shape(checkpoints[0]) != ref_checkpoints.shape:
                result["failures"].append(f"checkpoints: shape {np.shape(checkpoints[0])}, "
                                          f"expected {ref_checkpoints.shape}")
        if events:
            first = min(t for _, t, _, _ in events)
            if first > 0:
                check_outputs("o_before", ref_o[:, :first], o[:, :first], tol, result)
            o_seq, s_seq = (o, s) if cfg["sequential"] else call(prepared, "sequential", True)
            check_nonfinite_outputs("o_after", o, o_seq, tol, result)
            check_nonfinite_outputs("state_after", s, s_seq, tol, result)
            if not np.any(~np.isfinite(np.asarray(o[:, first:], np.float64))):
                result["failures"].append("o: no non-finite output from the first "
                                          f"non-finite input (token {first}) on")
        else:
            check_outputs("o", ref_o, o, tol, result)
            check_outputs("state", ref_s, s, tol, result)

        if cfg["mode"] == "segmented" and not events:
            split = cfg["split"]
            o1, s1 = call(_slice_time(prepared, 0, split, prepared.get("initial_state")),
                          "seg1")
            o2, s2 = call(_slice_time(prepared, split, cfg["T"], s1), "seg2")
            o_seg = np.concatenate([o1, o2], axis=1)
            check_outputs("o_seg", ref_o, o_seg, tol, result)
            check_outputs("state_seg", ref_s, s2, tol, result)
            check_outputs("o_seg_vs_one", o, o_seg, None, result)
            check_outputs("state_seg_vs_one", s, s2, None, result)
    except runner.LaRunError as exc:
        result["exception"] = str(exc)
        if exc.command:
            result["commands"].append(" ".join(exc.command))
        last = (exc.stderr or "").strip().splitlines()
        result["failures"].append(f"la-run failed (exit {exc.returncode})"
                                  + (f": {last[-1]}" if last else ""))
    result["passed"] = not result["failures"]
    timing["wall_s"] = time.perf_counter() - start
    return result


def _reference_checkpoints(cfg, inputs, every):
    """The fp64 reference's state after every ``every`` tokens of each
    sequence, laid out as the op's checkpoints: ``[B, T // every, HV, K, V]``,
    or ``[1, C, HV, K, V]`` with packed sequences."""
    B, HV, K, V = cfg["B"], cfg["HV"], cfg["K"], cfg["V"]
    attrs = dict(qk_l2norm=cfg["qk_l2norm"])
    initial = inputs.get("initial_state")
    cu = cfg["cu_seqlens"] or [0, cfg["T"]]
    rows = []
    for i in range(len(cu) - 1):
        first = None if initial is None else (initial[i:i + 1] if cfg["cu_seqlens"] else initial)
        for j in range((cu[i + 1] - cu[i]) // every):
            part = _slice_time(inputs, cu[i], cu[i] + (j + 1) * every, first)
            part.pop("cu_seqlens", None)
            _, state = lt.reference_for(cfg["variant"], part, **attrs)
            rows.append(state)
    if cfg["cu_seqlens"]:
        return np.concatenate(rows)[None] if rows else np.zeros((1, 0, HV, K, V))
    return np.stack(rows, 1) if rows else np.zeros((B, 0, HV, K, V))


def format_result(result):
    """One line: PASS/FAIL, id, errors, wall time."""
    errs = result["errors"]
    fields = []
    for name in ("o", "state", "checkpoints", "o_before", "o_after", "state_after", "o_seg",
                 "state_seg", "o_seg_vs_one", "state_seg_vs_one"):
        if name in errs:
            fields.append(f"{name}={errs[name]:.2e}")
    status = "PASS" if result["passed"] else "FAIL"
    line = (f"{status} {result['id']}  {' '.join(fields)}  (tol {result['tol']:.0e}) "
            f"{result['timing']['wall_s']:.2f}s")
    if not result["passed"]:
        line += "\n    " + "\n    ".join(result["failures"])
    return line
