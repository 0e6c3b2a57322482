"""The console script runs the Rust CLI's own entry point: same commands, same output."""

import subprocess
import sys

import pytest

import cachalot
from cachalot import cli
from conftest import FIXTURES, cachalot_cli, package_env

TRACE = FIXTURES / "traces"


def run(args, **kw):
    return subprocess.run(
        [*cachalot_cli(), *args],
        env=package_env(),
        check=False,
        capture_output=True,
        text=True,
        **kw,
    )


def some_trace():
    traces = sorted(TRACE.glob("*.csv")) + sorted(TRACE.glob("*.csv.gz"))
    assert traces, f"no traces in {TRACE}"
    return traces[0]


@pytest.mark.parametrize(
    "args",
    [
        ["config", "max_split_size_mb:128,roundup_power2_divisions:[256:1,>:4]"],
        ["config", "max_split_size_mb:nonsense"],
        ["replay", "{trace}", "--capacity", "1G", "--json"],
        ["compare", "{trace}", "--capacity", "2G", "--conf", "expandable_segments:True", "-q"],
        ["--version"],
        ["tune", "--capacity", "not-a-size"],
        ["no-such-command"],
    ],
)
def test_same_output_and_status_as_the_rust_binary(rust_cli, args):
    args = [a.replace("{trace}", str(some_trace())) for a in args]
    ours = run(args)
    theirs = subprocess.run([str(rust_cli), *args], check=False, capture_output=True, text=True)
    assert ours.returncode == theirs.returncode, (ours.stderr, theirs.stderr)
    # `replay --json` reports its own speed; everything else is byte for byte.
    if "--json" in args:
        import json

        a, b = json.loads(ours.stdout), json.loads(theirs.stdout)
        a.pop("timing", None)
        b.pop("timing", None)
        assert a == b
    else:
        assert ours.stdout == theirs.stdout
        assert ours.stderr == theirs.stderr


def test_help_lists_the_python_commands_too():
    p = run(["--help"])
    assert p.returncode == 0
    assert "tune" in p.stdout and "record" in p.stdout


def test_python_commands_are_one_table_entry(monkeypatch, capsys):
    calls = []
    monkeypatch.setitem(cli.PY_COMMANDS, "hello", ("test_cli:_hello", "says hello"))
    monkeypatch.setattr(
        sys.modules[__name__], "_hello", lambda argv: calls.append(argv) or 7, raising=False
    )
    assert cli.main(["hello", "a", "-b"]) == 7
    assert calls == [["a", "-b"]]


def test_a_bad_argument_is_the_cli_error_not_a_traceback():
    p = run(["replay", "/no/such/trace.csv"])
    assert p.returncode == 2
    assert p.stderr.startswith("cachalot: ") and "Traceback" not in p.stderr
    assert "/no/such/trace.csv" in p.stderr


def test_importing_cachalot_does_not_import_torch():
    code = "import sys, cachalot; print('torch' in sys.modules)"
    p = subprocess.run(
        [sys.executable, "-c", code], env=package_env(), check=False, capture_output=True, text=True
    )
    assert p.stdout.strip() == "False", p.stderr


def test_the_native_module_exports_the_allocator_for_torch():
    import ctypes

    lib = ctypes.CDLL(cachalot._native.__file__)
    for name in ("cachalot_malloc", "cachalot_free", "cachalot_memory_stats_json"):
        assert hasattr(lib, name), name


def test_a_closed_stdout_ends_quietly():
    # `true` exits at once: the command writes into a pipe nobody reads (EPIPE under Python).
    cmd = " ".join([*cachalot_cli(), "config", "max_split_size_mb:128", "|", "true"])
    p = subprocess.run(
        ["bash", "-o", "pipefail", "-c", cmd],
        env=package_env(),
        check=False,
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    assert "panicked" not in p.stderr and "Traceback" not in p.stderr, p.stderr
