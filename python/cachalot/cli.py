"""The `cachalot` command of the Python package.

Subcommands written in Python (`record`, and whatever `PY_COMMANDS` lists) run here; every
other command line goes to the Rust CLI's own entry point inside the native module, so
`cachalot tune ...` prints exactly what the Rust binary prints.

Adding a Python subcommand is one line in `PY_COMMANDS`: its name, the function that runs it
("module:function", imported only when the subcommand is used) and a one-line help. The
function takes the arguments after the subcommand's name and returns the exit status.
"""

from __future__ import annotations

import importlib
import signal
import sys
from collections.abc import Sequence
from typing import Callable

PY_COMMANDS: dict[str, tuple[str, str]] = {
    "record": (
        "cachalot.record:main",
        "Run a PyTorch script unchanged with torch's memory history on, and write a snapshot",
    ),
    "capture": (
        "cachalot.capture:main",
        "Predict a PyTorch script's GPU memory without a GPU (simulated CUDA, nothing computed)",
    ),
}


def _python_command(name: str) -> Callable[[Sequence[str]], int]:
    target, _ = PY_COMMANDS[name]
    module, func = target.split(":")
    return getattr(importlib.import_module(module), func)


def _rust(argv: Sequence[str]) -> int:
    from cachalot import _native

    # The Rust side writes to the process's file descriptors; what Python buffered goes first.
    sys.stdout.flush()
    sys.stderr.flush()
    # Python's Ctrl-C handler cannot run until the Rust call returns (a `tune` of minutes, a
    # FIFO with no writer): as for the Rust binary, Ctrl-C ends the command at once (its
    # writes replace files only once complete, so nothing is half-written).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    return _native.cli_main(["cachalot", *argv])


def _print_python_commands() -> None:
    print("Python commands (same usage: cachalot COMMAND --help):")
    for name, (_, summary) in PY_COMMANDS.items():
        print(f"  {name:<9}{summary}")


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line `argv` (without the program name; default: `sys.argv[1:]`)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in PY_COMMANDS:
        return _python_command(args[0])(args[1:])
    code = _rust(args)
    if not args or (len(args) == 1 and args[0] in ("-h", "--help", "help")):
        print()
        _print_python_commands()
    return code
