"""The Python code blocks of the docs run as pasted: each ```python block
of docs/*.md in a fresh interpreter (blocks that import torch skip without
it)."""

import os
import re
import subprocess
import sys

import pytest

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_PYTHON_DIR = os.path.join(_REPO, "python")
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _blocks():
    docs = os.path.join(_REPO, "docs")
    for name in sorted(os.listdir(docs)):
        if not name.endswith(".md"):
            continue
        with open(os.path.join(docs, name)) as f:
            text = f.read()
        for match in _BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            yield pytest.param(match.group(1), id=f"{name}:{line}")


BLOCKS = list(_blocks())


def test_there_are_blocks():
    assert len(BLOCKS) >= 16


@pytest.mark.parametrize("code", BLOCKS)
def test_block_runs(code, tmp_path):
    for module in ("torch", "onnx"):
        if re.search(rf"^import {module}\b", code, re.M):
            pytest.importorskip(module)
    env = dict(os.environ, PYTHONPATH=_PYTHON_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
