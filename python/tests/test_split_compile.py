"""A kernel of several functions (a threaded kernel's OpenMP regions are
functions of their own, and so are a one-thread kernel's task loops where it
has several: la-outline-tasks) is compiled as parts in parallel: llvm-split
puts each function into a module of its own (on one thread with the internal
functions of its chunk loops, la-outline-chunk-parts), the modules are
grouped by size into ``LA_COMPILE_JOBS`` groups, llvm-link joins each group,
one clang compiles each, and clang links them (python/la/ops.py,
``_compile_split``).
The library must compute what the one-clang library computes, bit for bit;
without llvm-split, or with one job, the kernel is compiled whole; a part
that fails to compile is an error naming clang, with no files left behind.

Skipped when libLaCAPI.so is not built. Every test has its own
``LA_CACHE_DIR``.
"""

import os

import numpy as np
import pytest

import la
from la import _capi, ops
from la import testing as lt

if _capi.library_path() is None:
    pytest.skip("libLaCAPI.so is not built (build the project or set LA_CAPI_LIB)",
                allow_module_level=True)


class _Splits(list):
    """The values _compile_split returned (True: split); ``texts``: the
    LLVM IR it was given, in order."""

    def __init__(self):
        super().__init__()
        self.texts = []


@pytest.fixture
def splits(monkeypatch):
    """The values _compile_split returned in this test, and its inputs."""
    seen = _Splits()
    original = ops._compile_split

    def spy(clang, llvm_ir, *rest):
        seen.texts.append(llvm_ir)
        result = original(clang, llvm_ir, *rest)
        seen.append(result)
        return result

    monkeypatch.setattr(ops, "_compile_split", spy)
    return seen


def _use_cache(monkeypatch, path, jobs):
    monkeypatch.setenv("LA_CACHE_DIR", str(path))
    monkeypatch.setenv("LA_COMPILE_JOBS", str(jobs))
    la.clear_cache()


def _inputs():
    return lt.make_inputs("gated_deltanet", 2, 40, 2, 16, 16, seed=3, gate_scale=1 / 16)


def _forward(d, threads=2):
    o, _ = ops.attention("gated_deltanet", d["q"], d["k"], d["v"], d["g"], d["beta"],
                         chunk_size=8, num_threads=threads)
    return o


def _backward(d, threads=2):
    do = np.random.default_rng(4).standard_normal(d["v"].shape).astype(np.float32)
    grads = ops.attention_backward("gated_deltanet", d["q"], d["k"], d["v"], d["g"],
                                   d["beta"], do=do, chunk_size=8, num_threads=threads)
    return grads.values() if isinstance(grads, dict) else grads


def test_parts_compute_what_the_whole_computes(tmp_path, monkeypatch, splits):
    d = _inputs()
    _use_cache(monkeypatch, tmp_path / "split", 2)
    o_split = _forward(d)
    grads_split = [np.array(g) for g in _backward(d)]
    # The threaded forward is one OpenMP region, compiled whole; the
    # backward's regions are split.
    assert splits == [False, True], splits
    ref, _ = lt.reference_for("gated_deltanet", d)
    assert lt.rel_rms(ref, o_split) < 1e-5
    # Nothing but the cache's entries is left in the directory.
    leftovers = [n for n in os.listdir(tmp_path / "split") if n.startswith(".tmp")]
    assert not leftovers, leftovers

    splits.clear()
    _use_cache(monkeypatch, tmp_path / "whole", 1)
    o_whole = _forward(d)
    grads_whole = [np.array(g) for g in _backward(d)]
    assert splits == [False, False]
    assert np.array_equal(o_split, o_whole)
    for split, whole in zip(grads_split, grads_whole):
        assert np.array_equal(split, whole)


def test_one_thread_backward_in_parts(tmp_path, monkeypatch, splits):
    """A one-thread backward's adjoint recurrences are task loops that
    la-outline-tasks made functions: compiled in parts, the gradients are
    those of the whole module, bit for bit."""
    d = _inputs()
    _use_cache(monkeypatch, tmp_path / "split", 2)
    grads_split = [np.array(g) for g in _backward(d, threads=1)]
    assert splits == [True]
    # The parts are the recurrences' tasks, not only the C wrapper, and
    # each task's chunk loop nests are internal functions kept with it.
    text = splits.texts[0]
    assert text.count("@attention_grad_task") >= 4, text[:2000]
    assert "define internal void @attention_grad_task0_part" in text
    splits.clear()
    _use_cache(monkeypatch, tmp_path / "whole", 1)
    grads_whole = [np.array(g) for g in _backward(d, threads=1)]
    assert splits == [False]
    for split, whole in zip(grads_split, grads_whole):
        assert np.array_equal(split, whole)


def test_one_thread_forward_is_compiled_whole(tmp_path, monkeypatch, splits):
    """A one-thread forward is one task: its chunk loop's loop nests are
    internal, noinline functions (la-outline-chunk-parts), which stay with
    it, so there is nothing to split; it computes what it computed as one
    function."""
    d = _inputs()
    _use_cache(monkeypatch, tmp_path / "parts", 2)
    o_parts = _forward(d, threads=1)
    assert splits == [False]
    text = splits.texts[0]
    assert text.count("define internal void @attention_part") >= 2, text[:2000]
    assert "noinline" in text
    ref, _ = lt.reference_for("gated_deltanet", d)
    assert lt.rel_rms(ref, o_parts) < 1e-5
    original = ops._lower_to_cpu
    monkeypatch.setattr(ops, "_lower_to_cpu",
                        lambda *a: original(*a)[:-1] + " outline-chunk-parts=0}")
    _use_cache(monkeypatch, tmp_path / "whole", 2)
    assert np.array_equal(o_parts, _forward(d, threads=1))


@pytest.mark.parametrize("sizes, bins, expected", [
    ([5, 1, 4, 2, 3], 2, [[0, 3, 1], [2, 4]]),   # 8 and 7, largest first
    ([10, 1, 1, 1], 2, [[0], [1, 2, 3]]),        # one part holds most
    ([3, 3], 4, [[0], [1]]),                     # no empty group
    ([1, 2, 3], 1, [[2, 1, 0]]),
])
def test_parts_are_grouped_by_size(sizes, bins, expected):
    assert ops._balance(sizes, bins) == expected


def test_without_llvm_split_the_kernel_is_compiled_whole(tmp_path, monkeypatch, splits):
    monkeypatch.setattr(ops, "_llvm_split", lambda clang: None)
    _use_cache(monkeypatch, tmp_path, 4)
    d = _inputs()
    ref, _ = lt.reference_for("gated_deltanet", d)
    assert lt.rel_rms(ref, _forward(d)) < 1e-5
    assert splits == [False]


@pytest.mark.parametrize("value", ["0", "-2", "two", ""])
def test_bad_compile_jobs(tmp_path, monkeypatch, value):
    _use_cache(monkeypatch, tmp_path, 1)
    monkeypatch.setenv("LA_COMPILE_JOBS", value)
    with pytest.raises(la.LaError, match="LA_COMPILE_JOBS must be a positive integer"):
        _forward(_inputs())


def test_a_failing_part_is_an_error(tmp_path, monkeypatch, splits):
    _use_cache(monkeypatch, tmp_path, 2)
    monkeypatch.setattr(ops, "_CLANG_FLAGS", ops._CLANG_FLAGS + ("-mllvm", "-no-such-option"))
    with pytest.raises(la.LaError, match="clang failed with exit status"):
        _backward(_inputs())  # a threaded backward: several OpenMP regions
    assert splits == []  # raised inside the split compile, not returned
    leftovers = [n for n in os.listdir(tmp_path) if n.startswith(".tmp")]
    assert not leftovers, leftovers
