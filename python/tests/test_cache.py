"""The disk kernel cache of la.gla & co. (python/la/ops.py) under damage.

Every entry ``la-<key>.so`` has a sidecar ``la-<key>.json`` (what the entry
is, the library's size and sha256) and a lock ``la-<key>.lock``. A truncated
library, another kernel's library (with or without its sidecar, or with a
sidecar forged to match it), a library without the kernel's symbol, a
directory, FIFO or symbolic link in an entry's place and a corrupt sidecar
must all be discarded and compiled again, giving the right answer; the
damaged cases also run in a child process, so that a SIGBUS or an abort shows
as a failed test instead of killing pytest. Two processes compiling the same
kernel into an empty cache compile it once.

Skipped when libLaCAPI.so is not built. Tiny shapes (B=1, T=16, H=1,
K=V=16); every test has its own ``LA_CACHE_DIR``.
"""

import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import la
from la import _capi, ops
from la import testing as lt

if _capi.library_path() is None:
    pytest.skip("libLaCAPI.so is not built (build the project or set LA_CAPI_LIB)",
                allow_module_level=True)

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The kernel under test and another kernel: kernels take any T, but sequences
# shorter than the chunk size (8) take a kernel with a smaller chunk (4).
T_MAIN, T_OTHER = 16, 3


def _inputs(T):
    return lt.make_inputs("gla", 1, T, 1, 16, 16, seed=0, gate_scale=1 / 16)


def _run(T=T_MAIN):
    """la.gla on the T-token inputs, checked against the fp64 reference."""
    d = _inputs(T)
    o, _ = la.gla(d["q"], d["k"], d["v"], d["g"], chunk_size=8)
    ref, _ = lt.reference_for("gla", d)
    err = lt.rel_rms(ref, o)
    assert err < 1e-5, f"rel_rms {err:.3e}"
    return o


def _paths(T=T_MAIN):
    """(library, sidecar) of the entry of the T-token kernel in cache_dir()."""
    d = _inputs(T)
    call = ops._prepare("gla", d["q"], d["k"], d["v"], d["g"], chunk_size=8)
    key = ops._disk_key(call.text, call.pipeline, ops._find_clang())
    base = os.path.join(ops.cache_dir(), f"la-{key}")
    return base + ".so", base + ".json"


def _delta(before):
    after = la.cache_info()
    return {k: after[k] - before[k] for k in ("hits", "disk_hits", "compiles", "discarded")}


_CHILD = textwrap.dedent("""
    import json, os, sys, time
    import la
    from la import testing as lt
    T, go = int(sys.argv[1]), sys.argv[2]
    if go:  # start together with the other children
        open(go + ".ready." + str(os.getpid()), "w").close()
        while not os.path.exists(go):
            time.sleep(0.005)
    d = lt.make_inputs("gla", 1, T, 1, 16, 16, seed=0, gate_scale=1 / 16)
    o, _ = la.gla(d["q"], d["k"], d["v"], d["g"], chunk_size=8)
    ref, _ = lt.reference_for("gla", d)
    info = la.cache_info()
    info["rel_rms"] = lt.rel_rms(ref, o)
    print(json.dumps(info))
""")


def _child_env(cache):
    return dict(os.environ, LA_CACHE_DIR=str(cache),
                PYTHONPATH=os.pathsep.join([PYTHON_DIR, os.environ.get("PYTHONPATH", "")]))


def _child_result(proc, stdout, stderr):
    assert proc.returncode == 0, (
        f"the child exited with {proc.returncode} (negative: killed by that signal, "
        f"-7 SIGBUS, -6 abort, -11 SIGSEGV)\n{stderr}")
    info = json.loads(stdout.strip().splitlines()[-1])
    assert info["rel_rms"] < 1e-5, info
    return info


def _child(cache, T=T_MAIN):
    """cache_info() of a fresh process that ran la.gla on the T-token inputs
    (checked against the reference there)."""
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(T), ""], env=_child_env(cache),
                          capture_output=True, text=True, timeout=300)
    return _child_result(proc, proc.stdout, proc.stderr)


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """A cache holding the entries of the T_MAIN and T_OTHER kernels (compiled
    once for the module; each test works on a copy)."""
    path = tmp_path_factory.mktemp("la-cache-template")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LA_CACHE_DIR", str(path))
        la.clear_cache()
        _run(T_MAIN)
        _run(T_OTHER)
        assert la.cache_info()["compiles"] == 2
    la.clear_cache()
    return path


@pytest.fixture
def cache(template, tmp_path, monkeypatch):
    """This test's LA_CACHE_DIR: a copy of the template (nothing in memory)."""
    path = tmp_path / "cache"
    shutil.copytree(template, path)
    monkeypatch.setenv("LA_CACHE_DIR", str(path))
    la.clear_cache()
    yield path
    la.clear_cache()


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    path = tmp_path / "empty-cache"
    monkeypatch.setenv("LA_CACHE_DIR", str(path))
    la.clear_cache()
    yield path
    la.clear_cache()


def _leftovers(cache):
    return [n for n in os.listdir(cache) if n.startswith((".tmp-", ".load-"))]


def _check_repaired(cache, damage, *, child=True):
    """``damage()`` the T_MAIN entry, then: a child process and this one each
    discard it, compile once and get the right answer; afterwards the entry
    is valid again (a disk hit)."""
    if child:
        damage()
        info = _child(cache)
        assert (info["compiles"], info["discarded"], info["disk_hits"]) == (1, 1, 0), info
    damage()
    la.clear_cache()
    before = la.cache_info()
    _run()
    assert _delta(before) == {"hits": 0, "disk_hits": 0, "compiles": 1, "discarded": 1}
    la.clear_cache()
    before = la.cache_info()
    _run()
    assert _delta(before) == {"hits": 0, "disk_hits": 1, "compiles": 0, "discarded": 0}
    assert not _leftovers(cache)


def _patch_sidecar(meta_path, library):
    """Rewrites the sidecar's size and sha256 to those of ``library`` (a
    forged entry: only the library's own content can tell)."""
    with open(library, "rb") as f:
        data = f.read()
    with open(meta_path) as f:
        meta = json.load(f)
    meta["so_size"], meta["so_sha256"] = len(data), hashlib.sha256(data).hexdigest()
    with open(meta_path, "w") as f:
        json.dump(meta, f)


# --------------------------------------------------------------------------
# a valid entry
# --------------------------------------------------------------------------

def test_entry_files_and_sidecar(empty_cache):
    _run()
    so_path, meta_path = _paths()
    key = os.path.basename(so_path)[3:-3]
    assert sorted(os.listdir(empty_cache)) == sorted(
        [f"la-{key}.so", f"la-{key}.json", f"la-{key}.lock"])
    with open(meta_path) as f:
        meta = json.load(f)
    with open(so_path, "rb") as f:
        data = f.read()
    d = _inputs(T_MAIN)
    call = ops._prepare("gla", d["q"], d["k"], d["v"], d["g"], chunk_size=8)
    assert meta["key"] == key and meta["format"] == ops._FORMAT_VERSION
    assert meta["mlir_sha256"] == hashlib.sha256(call.text.encode()).hexdigest()
    assert meta["pipeline"] == call.pipeline
    assert meta["inputs"] == [[4, "<f4"]] * 4
    assert meta["outputs"] == [[4, "<f4"]]
    assert (meta["so_size"], meta["so_sha256"]) == (len(data), hashlib.sha256(data).hexdigest())
    assert la.cache_info()["compiles"] == 1


def test_disk_hit_and_damage_after_loading(cache):
    """A valid entry is a disk hit; damaging the file afterwards cannot hurt
    the process that loaded it (it runs a private copy, never the file)."""
    so_path, _ = _paths()
    before = la.cache_info()
    o1 = _run()
    assert _delta(before)["disk_hits"] == 1 and _delta(before)["compiles"] == 0
    with open(so_path, "r+b") as f:
        f.truncate(100)
    o2 = _run()  # from memory: the loaded copy is intact
    np.testing.assert_array_equal(o1, o2)


# --------------------------------------------------------------------------
# damaged entries
# --------------------------------------------------------------------------

@pytest.mark.parametrize("size", [0, 100, "half", "minus-one"])
def test_truncated_library(cache, size):
    so_path, _ = _paths()

    def damage():
        full = os.path.getsize(so_path) if os.path.isfile(so_path) else 0
        keep = {"half": full // 2, "minus-one": full - 1}.get(size, size)
        with open(so_path, "r+b") as f:
            f.truncate(keep)

    _check_repaired(cache, damage)


@pytest.mark.parametrize("how", ["library", "library-and-sidecar", "forged-sidecar"])
def test_library_of_another_shape(cache, how):
    """Another kernel's valid library in the entry's place: the sidecar's
    sha256 tells (``library``), or the sidecar's key and shapes
    (``library-and-sidecar``), or, with a sidecar forged to match it, the key
    the library carries (``forged-sidecar``). Running it would abort."""
    so_path, meta_path = _paths(T_MAIN)
    other_so, other_meta = _paths(T_OTHER)

    def damage():
        shutil.copyfile(other_so, so_path)
        if how == "library-and-sidecar":
            shutil.copyfile(other_meta, meta_path)
        elif how == "forged-sidecar":
            _patch_sidecar(meta_path, so_path)

    _check_repaired(cache, damage)
    la.clear_cache()
    _run(T_OTHER)  # the other entry is untouched
    assert la.cache_info()["disk_hits"] == 1


@pytest.fixture(scope="module")
def foreign_library(tmp_path_factory):
    """A valid shared library without the kernel's symbols."""
    directory = tmp_path_factory.mktemp("foreign")
    source = directory / "empty.c"
    source.write_text("int la_unrelated = 1;\n")
    out = directory / "empty.so"
    proc = subprocess.run([ops._find_clang(), "-shared", "-fPIC", str(source), "-o", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return str(out)


@pytest.mark.parametrize("forged", [False, True], ids=["library", "forged-sidecar"])
def test_library_without_the_symbol(cache, foreign_library, forged):
    so_path, meta_path = _paths()

    def damage():
        shutil.copyfile(foreign_library, so_path)
        if forged:  # it passes the checks before dlopen: the missing symbol tells
            _patch_sidecar(meta_path, so_path)

    _check_repaired(cache, damage)


@pytest.mark.parametrize("content", [b"{not json", b"", b"\xff\xfe\x00", b"[]", b"null",
                                     "truncated", "wrong-key", "missing", "no-hash"])
def test_corrupt_sidecar(cache, content):
    so_path, meta_path = _paths()
    with open(meta_path, "rb") as f:
        good = f.read()

    def damage():
        if content == "missing":
            if os.path.exists(meta_path):
                os.remove(meta_path)
            return
        if content == "truncated":
            data = good[: len(good) // 2]
        elif content in ("wrong-key", "no-hash"):
            meta = json.loads(good)
            if content == "wrong-key":
                meta["key"] = "0" * 64
            else:
                del meta["so_sha256"]
            data = json.dumps(meta).encode()
        else:
            data = content
        with open(meta_path, "wb") as f:
            f.write(data)

    _check_repaired(cache, damage, child=False)


def test_sidecar_without_its_library(cache):
    """A sidecar whose library is gone: compiled again."""
    so_path, _ = _paths()
    _check_repaired(cache, lambda: os.path.exists(so_path) and os.remove(so_path),
                    child=False)


@pytest.mark.parametrize("kind", ["fifo", "symlink", "empty-directory"])
def test_special_file_in_place_of_the_library(cache, kind):
    """Never opened as a library, never blocks (a FIFO), removed, compiled
    again and stored."""
    so_path, meta_path = _paths()
    other_so, _ = _paths(T_OTHER)
    keep = str(cache / "valid-copy.so")
    shutil.copyfile(so_path, keep)

    def damage():
        if os.path.lexists(so_path):
            os.remove(so_path)
        if kind == "fifo":
            os.mkfifo(so_path)
        elif kind == "symlink":  # even to a file with the right bytes
            os.symlink(keep, so_path)
        else:
            os.mkdir(so_path)

    _check_repaired(cache, damage, child=False)
    assert os.path.isfile(so_path) and not os.path.islink(so_path)


@pytest.mark.parametrize("which", ["library", "sidecar"])
def test_nonempty_directory_in_place_of_the_entry(cache, which):
    """A directory with contents where the library (or sidecar) goes is left
    alone: the kernel compiles, works and is not stored (a RuntimeWarning
    says why), in every process until the directory is removed."""
    so_path, meta_path = _paths()
    path = so_path if which == "library" else meta_path
    os.remove(path)
    os.mkdir(path)
    (cache / os.path.basename(path) / "precious.txt").write_text("keep me")
    for _ in range(2):
        la.clear_cache()
        before = la.cache_info()
        with pytest.warns(RuntimeWarning, match="cannot store the kernel in the disk cache"):
            _run()
        assert _delta(before)["compiles"] == 1
    assert (cache / os.path.basename(path) / "precious.txt").read_text() == "keep me"
    assert not _leftovers(cache)
    shutil.rmtree(path)
    la.clear_cache()
    _run()
    la.clear_cache()
    before = la.cache_info()
    _run()
    assert _delta(before)["disk_hits"] == 1


# --------------------------------------------------------------------------
# errors, clear_cache, concurrency
# --------------------------------------------------------------------------

def test_unwritable_cache_raises_laerror(empty_cache, monkeypatch):
    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ops.tempfile, "mkstemp", no_space)
    with pytest.raises(la.LaError, match=r"cannot write into the kernel cache .*No space left"):
        _run()


def test_cache_dir_that_is_a_file_raises_laerror(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("LA_CACHE_DIR", str(blocker / "cache"))
    la.clear_cache()
    with pytest.raises(la.LaError, match=r"cannot create the kernel cache"):
        _run()
    la.clear_cache()


def test_clear_cache_disk_removes_entries(cache):
    names = os.listdir(cache)
    assert len([n for n in names if n.endswith(".json")]) == 2
    assert len([n for n in names if n.endswith(".lock")]) == 2
    # an entry that is a directory, leftovers of a dead process, files of others
    os.mkdir(cache / ("la-" + "a" * 64 + ".so"))
    (cache / ("la-" + "a" * 64 + ".so" + "/x")).write_text("")
    stale = cache / ".tmp-1-stale.ll"
    stale.write_text("")
    old = time.time() - 2 * ops._STALE_TEMP_SECONDS
    os.utime(stale, (old, old))
    fresh = cache / ".tmp-2-in-progress.ll"  # another process may be writing it
    fresh.write_text("")
    (cache / "notes.txt").write_text("")
    (cache / "la-notes.so").write_text("")
    la.clear_cache(disk=True)
    assert sorted(os.listdir(cache)) == sorted([fresh.name, "notes.txt", "la-notes.so"])
    info = la.cache_info()
    assert (info["entries"], info["compiles"], info["discarded"]) == (0, 0, 0)
    before = la.cache_info()
    _run()
    assert _delta(before)["compiles"] == 1


def test_two_processes_compile_once(empty_cache, tmp_path):
    """Two processes started together on an empty cache: one compiles, the
    other waits on the entry's lock and loads what the first stored."""
    go = str(tmp_path / "go")
    env = _child_env(empty_cache)
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD, str(T_MAIN), go], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    try:
        deadline = time.time() + 120
        while len([n for n in os.listdir(tmp_path) if n.startswith("go.ready.")]) < 2:
            assert time.time() < deadline, "the children did not start"
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
            time.sleep(0.01)
        open(go, "w").close()
        infos = []
        for p in procs:
            out, err = p.communicate(timeout=300)
            infos.append(_child_result(p, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert sum(i["compiles"] for i in infos) == 1, infos
    assert sum(i["disk_hits"] for i in infos) == 1, infos
    assert sum(i["discarded"] for i in infos) == 0, infos
    assert not _leftovers(empty_cache)
    assert len([n for n in os.listdir(empty_cache) if n.endswith(".so")]) == 1


def test_compiles_are_logged(tmp_path, monkeypatch, caplog):
    """Every compile is logged on the ``la`` logger, as a warning past
    COMPILE_LOG_SECONDS (here 0: every compile); a cached call logs nothing."""
    import logging
    monkeypatch.setenv("LA_CACHE_DIR", str(tmp_path))
    la.clear_cache()
    monkeypatch.setattr(la.ops, "COMPILE_LOG_SECONDS", 0.0)
    x = np.ones((1, 3, 1, 4), np.float32)
    with caplog.at_level(logging.INFO, logger="la"):
        la.linear_attention(x, x, x)
        la.linear_attention(x, x, x)
    records = [r for r in caplog.records if r.name == "la"]
    assert len(records) == 1 and records[0].levelno == logging.WARNING
    assert "compiled attention (first inputs 1x3x1x4, 1x3x1x4, 1x3x1x4;" in \
        records[0].getMessage()
    la.clear_cache()
