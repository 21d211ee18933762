"""Make ``import la`` work when running ``python3 -m pytest python/tests``."""

import os
import sys

import pytest

_PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _PYTHON_DIR not in sys.path:
    sys.path.insert(0, _PYTHON_DIR)


def pytest_addoption(parser):
    parser.addoption(
        "--la-sample", type=int, default=int(os.environ.get("LA_TEST_SAMPLE", "1")),
        help="run every test function, but only every N-th of its parameter sets "
        "(the first always; default $LA_TEST_SAMPLE or 1: all). The sanitizer "
        "stage uses it: la's C++ paths depend on the variant and the options, "
        "which each function's first sets already vary, not on every shape.")


def pytest_collection_modifyitems(config, items):
    every = config.getoption("--la-sample")
    if every <= 1:
        return
    seen = {}
    kept, dropped = [], []
    for item in items:
        function = item.nodeid.split("[", 1)[0]
        index = seen.get(function, 0)
        seen[function] = index + 1
        (kept if index % every == 0 else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


#: test_cpu_exec's records, gathered from each test's report: with pytest-xdist
#: the tests run in worker processes and only their reports reach this one.
_RECORDS = []


def _plain(timing):
    """A timing dict with builtin values only (xdist serialises reports)."""
    if timing is None:
        return None
    return {str(k): (v if isinstance(v, str) else float(v)) for k, v in timing.items()
            if isinstance(v, (str, int, float))}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Attach the records a test added to test_cpu_exec.RECORDS to its report."""
    outcome = yield
    module = sys.modules.get("test_cpu_exec")
    records = getattr(module, "RECORDS", None)
    if records and call.when == "call":
        plain = [(str(label), str(name), float(err), float(tol), _plain(timing))
                 for label, name, err, tol, timing in records]
        outcome.get_result().user_properties.append(("la_records", plain))
        records.clear()


def pytest_runtest_logreport(report):
    for name, value in report.user_properties:
        if name == "la_records":
            _RECORDS.extend(value)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """List the CPU execution tests' errors (rel_rms) and la-run timings."""
    records = _RECORDS
    if not records:
        return
    verbose = config.option.verbose > 0 or "A" in (config.option.reportchars or "")
    worst = {}
    runs = {}
    for label, name, err, tol, timing in records:
        key = "f32" if tol <= 1e-5 else "f16/bf16"
        if key not in worst or not err <= worst[key][0]:
            worst[key] = (err, tol, f"{label} [{name}]")
        if timing is not None:
            runs[timing["command"]] = timing
    tr = terminalreporter
    tr.section("la-run vs fp64 reference (rel_rms)")
    if verbose:
        for label, name, err, tol, _ in records:
            tr.write_line(f"{err:10.3e} <= {tol:.0e}  {label} [{name}]")
    for key, (err, tol, where) in sorted(worst.items()):
        tr.write_line(f"worst {key}: {err:.3e} (limit {tol:.0e}) in {where}")
    if runs:
        compile_ms = sum(t.get("compile_ms", 0.0) for t in runs.values())
        wall = sum(t.get("wall_s", 0.0) for t in runs.values())
        tr.write_line(
            f"{len(runs)} distinct la-run runs checked: {compile_ms / 1000:.1f} s compiling, "
            f"{wall:.1f} s wall in la-run (incl. process start and I/O)"
        )
