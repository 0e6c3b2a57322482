"""`cachalot record [-o SNAPSHOT] -- python train.py ARGS...`: runs the command unchanged with
torch's memory history on, writes the snapshot when it ends (and at its first out-of-memory),
and prints the `cachalot tune` command for the device it ran on.

In a notebook or a script, `cachalot.recording()` does the same around a block.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence

from cachalot import _recorder

_BOOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_boot")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cachalot record",
        description="Run a PyTorch program unchanged with torch's memory history on; write the "
        "snapshot at its exit (also when it raises) and at its first out-of-memory; print the "
        "cachalot tune command for the device it ran on.",
        epilog="example: cachalot record -o snap.pickle -- python train.py --batch 32",
    )
    p.add_argument(
        "-o",
        "--output",
        default="snapshot.pickle",
        help="snapshot file to write "
        "(default: snapshot.pickle); the OOM snapshot goes to NAME-oom.pickle",
    )
    p.add_argument(
        "--max-entries",
        type=int,
        default=_recorder.DEFAULT_MAX_ENTRIES,
        metavar="N",
        help=f"history entries kept, the most recent (default {_recorder.DEFAULT_MAX_ENTRIES})",
    )
    p.add_argument(
        "--context",
        choices=_recorder.CONTEXTS,
        default="all",
        help="which events keep a stack trace (torch's `context`; default all)",
    )
    p.add_argument(
        "--stacks",
        choices=_recorder.STACKS,
        default="python",
        help="python stacks only, or C++ too (slower; default python)",
    )
    p.add_argument(
        "command", nargs=argparse.REMAINDER, help="the program and its arguments, after --"
    )
    return p


def _report(path: str, out=sys.stdout) -> bool:
    """Prints what was written and the commands to run next. False if nothing was written."""
    oom = _recorder.oom_path(path)
    if not os.path.exists(path) and not os.path.exists(oom):
        return False
    shown = path if os.path.exists(path) else oom
    info_file = _recorder.info_path(shown)
    info = {}
    if os.path.exists(info_file):
        with open(info_file) as f:
            info = json.load(f)
    print(f"cachalot record: wrote {shown}", file=out)
    if os.path.exists(oom):
        print(f"cachalot record: out of memory; the snapshot at that moment is {oom}", file=out)
        print(f"  cachalot explain {oom}", file=out)
    for d in info.get("devices", []):
        print(f"  device {d['index']}: {d['name']}, {d['total_memory']} bytes", file=out)
    if info.get("alloc_conf"):
        print(f"  PYTORCH_CUDA_ALLOC_CONF={info['alloc_conf']}", file=out)
    print("Which PYTORCH_CUDA_ALLOC_CONF makes it fit:", file=out)
    for line in _recorder.tune_commands(shown, info):
        print(f"  {line}", file=out)
    return True


def main(argv: Sequence[str]) -> int:
    args = _parser().parse_args(list(argv))
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        _parser().error("no command to run: cachalot record [OPTIONS] -- python train.py ARGS")
    # Check the options here, where the error is readable, not in the child.
    try:
        _recorder.Recorder(args.output, args.max_entries, args.context, args.stacks)
    except ValueError as e:
        _parser().error(str(e))
    path = os.path.abspath(args.output)
    for stale in (path, _recorder.oom_path(path)):
        for f in (stale, _recorder.info_path(stale)):
            if os.path.exists(f):
                os.unlink(f)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_BOOT, env.get("PYTHONPATH")]))
    env["CACHALOT_RECORD_OUT"] = path
    env["CACHALOT_RECORD_MAX_ENTRIES"] = str(args.max_entries)
    env["CACHALOT_RECORD_CONTEXT"] = args.context
    env["CACHALOT_RECORD_STACKS"] = args.stacks
    try:
        code = subprocess.call(command, env=env)
    except FileNotFoundError:
        print(f"cachalot record: {command[0]}: command not found", file=sys.stderr)
        return 127
    except KeyboardInterrupt:
        code = 130
    if not _report(args.output):
        print(
            "cachalot record: no snapshot: the program never imported torch or never used "
            "CUDA (or it is not a Python program)",
            file=sys.stderr,
        )
        return code or 1
    return code


@contextlib.contextmanager
def recording(
    path: str = "snapshot.pickle",
    max_entries: int = _recorder.DEFAULT_MAX_ENTRIES,
    context: str = "all",
    stacks: str = "python",
    quiet: bool = False,
) -> Iterator[_recorder.Recorder]:
    """Records torch's allocation history inside the block and writes the snapshot to `path`
    when it ends, also when it raises; the first out-of-memory also writes
    `NAME-oom.pickle`. Prints the `cachalot tune` command unless `quiet`.

        with cachalot.recording("snap.pickle"):
            train_one_epoch()
    """
    import torch

    recorder = _recorder.Recorder(path, max_entries, context, stacks)
    recorder.start(torch)
    try:
        yield recorder
    finally:
        recorder.stop()
        if not quiet:
            _report(recorder.path, out=sys.stderr)
