"""The variant registry: declared once in C++, read through the C API."""

import ctypes
import itertools
import os
import subprocess
import sys

import pytest

import la
from la import _capi, ir, runner
from la.variants import VARIANTS, summary, token_operands

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.skipif(_capi.library_path() is None,
                                reason="libLaCAPI.so is not built")

# The model's pairs, written here independently of the registry.
UPDATES = ("additive", "delta", "erase_write", "dplr")
GATES = ("none", "fixed", "scalar", "channel")


def test_one_variant_per_pair():
    pairs = list(VARIANTS.values())
    assert sorted(pairs) == sorted(itertools.product(UPDATES, GATES))
    assert len(set(VARIANTS)) == len(VARIANTS) == 16
    assert VARIANTS["kda"] == ("delta", "channel")
    assert VARIANTS["gla"] == ("additive", "channel")
    assert VARIANTS["rwkv7"] == ("dplr", "channel")
    assert all(summary(keyword) for keyword in VARIANTS)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_keyword_parses_and_prints(variant):
    """Each registry keyword is la.attention's keyword (the parser and the
    printer read the same table)."""
    log_decay = [-0.5] if VARIANTS[variant][1] == "fixed" else None
    text = runner.attention_mlir(variant, 1, 8, 1, 4, 4, log_decay=log_decay)
    module = ir.Module.parse(text)
    assert f"la.attention {variant} " in str(module)


def test_operands_follow_from_the_pair():
    assert token_operands("linear") == ["q", "k", "v"]
    assert token_operands("mamba2") == ["q", "k", "v", "g"]
    assert token_operands("deltanet") == ["q", "k", "v", "beta"]
    assert token_operands("gated_deltanet2") == ["q", "k", "v", "g", "erase", "write"]
    assert token_operands("decayed_deltanet2") == ["q", "k", "v", "erase", "write"]
    assert token_operands("rwkv7") == ["q", "k", "v", "g", "a", "b"]
    assert token_operands("dplr") == ["q", "k", "v", "a", "b"]


def test_c_api_bounds():
    lib = _capi.lib()
    count = lib.laGetNumVariants()
    assert count == len(VARIANTS)
    info = _capi.LaVariantInfo()
    assert not lib.laGetVariant(count, ctypes.byref(info))
    assert not lib.laGetVariant(-1, ctypes.byref(info))
    assert info.keyword is None  # untouched on failure
    assert not lib.laGetVariant(0, None)
    assert lib.laGetVariant(0, ctypes.byref(info))
    assert info.keyword.decode() in VARIANTS


def test_op_reference_lists_the_registry():
    """The op's documentation table (docs/reference/LaOps.md, generated from
    LaOps.td) names exactly the registry's variants."""
    with open(os.path.join(REPO, "docs", "reference", "LaOps.md")) as f:
        text = f.read()
    lines = text[text.index("### `la.attention`"):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| keyword"))
    rows = itertools.takewhile(lambda line: line.startswith("|"), lines[start + 2:])
    keywords = {row.split("`")[1] for row in rows}
    assert keywords == set(VARIANTS)


def test_import_does_not_load_the_library():
    code = "import la, la.variants, la.testing; assert la._capi._lib is None"
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_production_modules_import_no_test_helpers():
    for module in ("ops", "runner", "gpu", "variants", "_checks", "ir", "cuda"):
        with open(os.path.join(REPO, "python", "la", f"{module}.py")) as f:
            source = f.read()
        assert "from .testing" not in source and "import testing" not in source, module
    assert la.variants.VARIANTS is la.testing.VARIANTS


_WITHOUT_CAPI = """
import json, sys
from la import _capi
_capi.library_path = lambda: None  # as on the GPU machine: no libMLIR
from la.variants import VARIANTS, summary
try:
    print(json.dumps({k: [list(v), summary(k)] for k, v in VARIANTS.items()}))
except _capi.LaError as error:
    print("LaError:", error)
"""


def _registry_without_capi(snapshot):
    env = dict(os.environ, LA_VARIANTS_FILE=str(snapshot),
               PYTHONPATH=os.path.join(REPO, "python"))
    return subprocess.run([sys.executable, "-c", _WITHOUT_CAPI], env=env, check=True,
                          capture_output=True, text=True).stdout


def test_registry_snapshot_serves_a_machine_without_the_c_api(tmp_path):
    """The GPU machine has no libMLIR: la.variants reads the snapshot that
    write_snapshot made here, and it is the registry, entry for entry."""
    import json
    from la.variants import write_snapshot
    snapshot = tmp_path / "variants.json"
    write_snapshot(snapshot)
    read = json.loads(_registry_without_capi(snapshot))
    assert read == {k: [list(v), summary(k)] for k, v in VARIANTS.items()}


def test_corrupt_registry_snapshot_is_a_clear_error(tmp_path):
    snapshot = tmp_path / "variants.json"
    snapshot.write_text('{"variants": [{"keyword": "gla"}]')
    out = _registry_without_capi(snapshot)
    assert out.startswith("LaError:") and "variants.json" in out, out
    assert "not a snapshot of la's variant registry" in out
