"""The named variants of ``la.attention``, from la's one registry.

The variants are declared once, in C++ (``lib/Dialect/La/IR/LaVariants.cpp``),
and read here through the C API (``laGetNumVariants``, ``laGetVariant``) the
first time they are needed, so that importing ``la`` does not need the
compiled library. :data:`VARIANTS` maps each keyword of ``la.attention`` to
its (update rule, gate kind); :func:`summary` gives a line about the model.

A machine without libMLIR (the GPU machine that runs la's ahead-of-time
kernels) reads a snapshot of the registry instead: :func:`write_snapshot`
writes it as JSON where the C API is built, and ``LA_VARIANTS_FILE`` names it
where it is not.
"""

import ctypes
import json
import os
from collections.abc import Mapping

from . import _capi

__all__ = ["VARIANTS", "DIFFERENTIABLE", "summary", "write_snapshot", "token_operands", "token_operand_shapes"]


class _Registry(Mapping):
    """keyword -> (update, gate), loaded from the C API on first use."""

    def __init__(self):
        self._table = None
        self._summaries = None

    def _load(self):
        if self._table is None and _capi.library_path() is None and os.environ.get(
                "LA_VARIANTS_FILE"):
            self._load_snapshot(os.environ["LA_VARIANTS_FILE"])
        if self._table is None:
            lib = _capi.lib()
            info = _capi.LaVariantInfo()
            table, summaries = {}, {}
            for index in range(lib.laGetNumVariants()):
                if not lib.laGetVariant(index, ctypes.byref(info)):
                    raise _capi.LaError(f"laGetVariant({index}) failed")
                keyword = info.keyword.decode()
                table[keyword] = (info.update.decode(), info.gate.decode())
                summaries[keyword] = info.summary.decode()
            self._table, self._summaries = table, summaries
        return self._table

    def _load_snapshot(self, path):
        try:
            with open(path) as file:
                entries = json.load(file)["variants"]
            table = {e["keyword"]: (e["update"], e["gate"]) for e in entries}
            summaries = {e["keyword"]: e["summary"] for e in entries}
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise _capi.LaError(f"LA_VARIANTS_FILE={path}: not a snapshot of la's "
                                f"variant registry ({error})") from None
        self._table, self._summaries = table, summaries

    def __getitem__(self, keyword):
        return self._load()[keyword]

    def __iter__(self):
        return iter(self._load())

    def __len__(self):
        return len(self._load())

    def __repr__(self):
        return f"VARIANTS({self._load()!r})"

    def summary(self, keyword):
        self._load()
        return self._summaries[keyword]


#: keyword -> (update rule, gate kind), e.g. ``VARIANTS["kda"] == ("delta",
#: "channel")``; the update rules are ``additive``, ``delta``,
#: ``erase_write`` and ``dplr``, the gate kinds ``none``, ``fixed``, ``scalar`` and
#: ``channel``.
VARIANTS = _Registry()

#: the inputs of la.attention that have gradients, in the order of
#: la.attention_grad's results (the package's backward, la.gpu's gradient
#: libraries and la.testing's reverse mode all follow it).
DIFFERENTIABLE = ("q", "k", "v", "g", "gv", "beta", "erase", "write", "a", "b",
                  "A_log", "dt_bias", "initial_state")


def write_snapshot(path):
    """Writes the registry (from the C API) as JSON to ``path``, for
    ``LA_VARIANTS_FILE`` on a machine without the compiled library."""
    entries = [{"keyword": k, "update": u, "gate": g, "summary": VARIANTS.summary(k)}
               for k, (u, g) in VARIANTS.items()]
    with open(path, "w") as file:
        json.dump({"variants": entries}, file, indent=1)


def summary(variant):
    """One line about ``variant``'s model, from the registry."""
    return VARIANTS.summary(variant)


def token_operands(variant):
    """The per-token operands of ``variant`` in ``la.attention``'s order:
    ``q, k, v``, then ``g`` (data-dependent gates), ``beta`` (the delta rule),
    ``erase, write`` (the erase_write rule) or ``a, b`` (the dplr rule's
    low-rank vectors), as the variant has them."""
    update, gate = VARIANTS[variant]
    names = ["q", "k", "v"]
    if gate in ("scalar", "channel"):
        names.append("g")
    if update == "delta":
        names.append("beta")
    if update == "erase_write":
        names += ["erase", "write"]
    if update == "dplr":
        names += ["a", "b"]
    return names


def token_operand_shapes(variant, B, T, H, K, V, HV=None, value_head_operands=()):
    """The per-token operands of ``variant`` (:func:`token_operands`) with
    their shapes, ``[(name, shape), ...]``, for ``H`` key heads and ``HV``
    value heads (default ``H``): q, k ``[B,T,H,K]``; v ``[B,T,HV,V]``; g
    ``[B,T,H]`` for a scalar gate, ``[B,T,H,K]`` for a channel gate; beta
    ``[B,T,H]``; erase ``[B,T,H,K]``; write ``[B,T,HV,V]``; a, b
    ``[B,T,H,K]``. The names in
    ``value_head_operands`` (of g, beta, erase) are given per value head
    (HV in place of H). The one place the Python package derives them from
    the registry's (update, gate)."""
    HV = H if HV is None else HV
    gate = VARIANTS[variant][1]

    def heads(name):
        return HV if name in value_head_operands else H

    shapes = {"q": (B, T, H, K), "k": (B, T, H, K), "v": (B, T, HV, V),
              "g": (B, T, heads("g")) if gate == "scalar" else (B, T, heads("g"), K),
              "beta": (B, T, heads("beta")), "erase": (B, T, heads("erase"), K),
              "write": (B, T, HV, V), "a": (B, T, H, K), "b": (B, T, H, K)}
    return [(name, shapes[name]) for name in token_operands(variant)]
