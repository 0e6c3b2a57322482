"""Shared helpers: where the package, the Rust binary, torch and the fake GPU are.

The tests import the `cachalot` under test (installed, or `python/` on PYTHONPATH with the
native module built in place: `.ci/run` does that). Tests that need real PyTorch run it on the
fake GPU of `../shared/fakegpu` and skip, saying why, where it is not set up.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from functools import cache
from pathlib import Path

import pytest

import cachalot

REPO = Path(__file__).resolve().parents[2]
PACKAGE_ROOT = Path(cachalot.__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
# the torch venv scripts/python_env.sh makes (CACHALOT_VENV), or CACHALOT_TORCH_PYTHON's interpreter
TORCH_PYTHON = Path(
    os.environ.get(
        "CACHALOT_TORCH_PYTHON",
        Path(os.environ.get("CACHALOT_VENV", Path.home() / ".cache/cachalot-torch")) / "bin/python",
    )
)
FAKEGPU = Path(os.environ.get("CACHALOT_FAKEGPU", REPO.parent / "shared" / "fakegpu"))
FAKEGPU_BUILD = Path(os.environ.get("FAKEGPU_BUILD", Path.home() / ".cache" / "cachalot-fakegpu"))


def rust_binary() -> Path | None:
    """The Rust `cachalot` binary of this checkout, if built (CACHALOT_BIN overrides)."""
    if os.environ.get("CACHALOT_BIN"):
        return Path(os.environ["CACHALOT_BIN"])
    built = [REPO / "target" / p / "cachalot" for p in ("ci", "release", "debug")]
    built = [p for p in built if p.exists()]
    # The newer one is this checkout's (the other may be from an earlier commit).
    return max(built, key=lambda p: p.stat().st_mtime, default=None)


def cachalot_cli() -> list[str]:
    """The console script of the package under test: `python -m cachalot`."""
    return [sys.executable, "-m", "cachalot"]


def cli_stdout(*args: str) -> str:
    """What the package's console script prints on stdout for `args`; an exit status other than
    0 (success) or 1 (does not fit, ran out of memory) fails the test with its stderr."""
    p = subprocess.run(
        [*cachalot_cli(), *args],
        env=package_env(),
        check=False,
        capture_output=True,
        text=True,
    )
    assert p.returncode in (0, 1), p.stderr
    return p.stdout


def package_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a child interpreter that imports the package under test."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE_ROOT), env.get("PYTHONPATH")]))
    env.update(extra or {})
    return env


@cache
def _cannot_import(modules: tuple[str, ...]) -> str | None:
    """Why the torch venv's interpreter cannot import `modules`, or None (asked once per
    worker: importing torch takes seconds)."""
    if not TORCH_PYTHON.exists():
        return f"no torch venv at {TORCH_PYTHON} (.ci/run installs it; set CACHALOT_TORCH_PYTHON)"
    imports = ", ".join(modules)
    p = subprocess.run([str(TORCH_PYTHON), "-c", f"import {imports}"], capture_output=True)
    return f"{TORCH_PYTHON} cannot import {imports}" if p.returncode else None


def torch_python(*modules: str) -> str:
    """The torch venv's interpreter for a test that runs it; skips the test where it is
    missing or cannot import torch and `modules` (e.g. "transformers")."""
    why = _cannot_import(("torch", *modules))
    if why:
        pytest.skip(why)
    return str(TORCH_PYTHON)


def fakegpu_missing() -> str | None:
    """Why real PyTorch on the fake GPU cannot run here, or None."""
    if not TORCH_PYTHON.exists():
        return f"no torch venv at {TORCH_PYTHON} (.ci/run installs it; set CACHALOT_TORCH_PYTHON)"
    if not (FAKEGPU / "run.sh").exists():
        return f"no fake GPU stack at {FAKEGPU} (../shared/fakegpu beside the checkout)"
    if not (FAKEGPU_BUILD / "libcudart.so.13").exists():
        return f"fake GPU not built in {FAKEGPU_BUILD} (run {FAKEGPU}/build.sh)"
    return None


@pytest.fixture(scope="session")
def torch_on_fakegpu():
    """A function running `args` (a script and its arguments) with real PyTorch on the fake
    GPU; returns the CompletedProcess. Skips where that is not set up."""
    why = fakegpu_missing()
    if why:
        pytest.skip(why)

    def run(args, env=None, timeout=600, check=True):
        full = package_env(
            {"PYTHON": str(TORCH_PYTHON), "FAKEGPU_BUILD": str(FAKEGPU_BUILD), **(env or {})}
        )
        p = subprocess.run(
            ["bash", str(FAKEGPU / "run.sh"), *map(str, args)],
            env=full,
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and p.returncode != 0:
            raise AssertionError(
                f"exit {p.returncode}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}"
            )
        return p

    return run


@pytest.fixture
def rust_cli():
    b = rust_binary()
    if b is None:
        pytest.skip("the Rust binary is not built (cargo build -p cachalot-cli; CACHALOT_BIN)")
    return b


def have(tool: str) -> bool:
    return shutil.which(tool) is not None


# --- the scaffolding of the signal tests (record, capture): start a wrapper, wait until the
# program under it is ready, signal the wrapper, check its exit status and what it left.


def wait_until_ready(proc: subprocess.Popen, ready: Path, timeout: float = 300) -> None:
    """Waits until the program under `proc` has created the file `ready`; fails with the
    wrapper's output if it exits first, or after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not ready.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"the program never got ready ({ready})"
        time.sleep(0.2)


def signal_and_wait(
    proc: subprocess.Popen, sig: signal.Signals, timeout: float = 300
) -> tuple[str, str]:
    """Sends `sig` to `proc` and waits for it; checks that it exits as a shell reports a
    program killed by `sig` (128 + the signal) and says `interrupted (SIGNAME)` on stderr.
    Returns its stdout and stderr."""
    proc.send_signal(sig)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()  # a process that did not end at `sig` does not outlive the test
        proc.communicate()
        raise
    assert proc.returncode == 128 + sig, stderr[-3000:]
    assert f"interrupted ({signal.Signals(sig).name})" in stderr, stderr[-3000:]
    return stdout, stderr


def assert_no_process_runs(path: Path, what: str) -> None:
    """Fails if a process whose command line names `path` (the test's own script under its
    `tmp_path`, so that other tests' processes never match) still runs."""
    left = subprocess.run(["pgrep", "-f", str(path)], capture_output=True, check=False)
    assert left.stdout == b"", f"the program outlived {what}"


def _needs_torch(item: pytest.Item) -> bool:
    """Whether a test runs real PyTorch: it uses the fake-GPU fixture, or its module runs the
    torch venv's interpreter itself (the capture and record tests)."""
    if "torch_on_fakegpu" in getattr(item, "fixturenames", ()):
        return True
    module = getattr(item, "module", None)
    source = getattr(module, "__file__", None)
    if source is None:
        return False
    text = Path(source).read_text(encoding="utf-8")
    return "TORCH_PYTHON" in text or "TORCH_PY " in text or "torch_on_fakegpu" in text


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "torch: runs real PyTorch (on the fake GPU or the capture runtime)"
    )
    config.addinivalue_line("markers", "slow: takes more than a few seconds")
    # pytest-xdist registers it where installed; registered here too for runs without it
    config.addinivalue_line("markers", "xdist_group(name): run these tests on one xdist worker")


def _shares_a_module_fixture(item: pytest.Item) -> bool:
    """Whether a test uses a fixture of its own module that outlives one test (a workload run
    once per module): under xdist such tests go to one worker (`--dist loadgroup`), else each
    worker would run that workload again."""
    module = getattr(item, "module", None)
    info = getattr(item, "_fixtureinfo", None)
    if module is None or info is None:
        return False
    for name in getattr(item, "fixturenames", ()):
        for d in info.name2fixturedefs.get(name, ()):
            if d.scope != "function" and getattr(d.func, "__module__", None) == module.__name__:
                return True
    return False


# First among the plugins' hooks: pytest-xdist's worker turns each xdist_group mark into its
# node id's group tag in this same hook, so the marks added here must be there before it runs.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _needs_torch(item):
            item.add_marker(pytest.mark.torch)
            item.add_marker(pytest.mark.slow)
        if _shares_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
    # The slow tests first (a stable sort: each file's order stays), so that under xdist the
    # long ones start at once and the quick ones fill the workers' gaps at the end.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
