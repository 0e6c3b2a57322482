"""`cachalot record [-o SNAPSHOT] -- python train.py ARGS...`: runs the command unchanged with
torch's memory history on, writes the snapshot when it ends (and at its first out-of-memory),
and prints the `cachalot tune` command for the device it ran on.

In a notebook or a script, `cachalot.recording()` does the same around a block.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import sys
import textwrap
from collections.abc import Iterator, Sequence

from cachalot import _recorder, _run

_BOOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_boot")


_EPILOG = (
    "example: cachalot record -o snap.pickle -- python train.py --batch 32",
    (
        "-o is checked before the program runs, and an earlier snapshot there is kept until a new "
        "one is written; an existing file that is not a snapshot is never overwritten. Each further "
        "Python process the program starts (torch.multiprocessing.spawn, torchrun) writes its own "
        "NAME.rankR.pickle (torchrun's RANK) or NAME.pidP.pickle. Ctrl-C, SIGTERM and SIGHUP reach "
        "the program, which is given the time to write its snapshot."
    ),
    (
        "exit status: the program's own; 128+N when it was killed by signal N or cachalot was "
        "interrupted by it (130 Ctrl-C, 143 SIGTERM); 1 when no snapshot was written although the "
        "program succeeded; 2 for a bad option or -o; 126/127 when the command cannot start."
    ),
)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cachalot record",
        description="Run a PyTorch program unchanged with torch's memory history on; write the "
        "snapshot at its exit (also when it raises) and at its first out-of-memory; print the "
        "cachalot tune command for the device it ran on.",
        epilog="\n\n".join(textwrap.fill(p, 88) for p in _EPILOG),
        formatter_class=argparse.RawDescriptionHelpFormatter,
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


def _identity(path: str) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def _fresh(candidates: Sequence[str], before: dict[str, tuple | None]) -> list[str]:
    """The files among `candidates` this run wrote (new, or replaced since `before`)."""
    return [f for f in candidates if os.path.isfile(f) and _identity(f) != before.get(f)]


def _snapshots(path: str) -> list[str]:
    """Every name a recorded process may write for `-o path`: the path, its OOM snapshot, and
    the per-process ones (`NAME.rankR.pickle`, `NAME.pidP.pickle`) with their OOM snapshots."""
    stem, ext = os.path.splitext(path)
    ext = ext or ".pickle"
    found = glob.glob(f"{glob.escape(stem)}.rank*{ext}") + glob.glob(
        f"{glob.escape(stem)}.pid*{ext}"
    )
    names = []
    for f in [path, *sorted(f for f in found if not f.endswith(f"-oom{ext}"))]:
        names += [f, _recorder.oom_path(f)]
    return names


def _report(path: str, written: Sequence[str] | None = None, out=sys.stdout) -> bool:
    """Prints what was written and the commands to run next. False if nothing was written.
    `written`: the files this run wrote (default: whatever exists at `path` and its OOM name)."""
    if written is None:
        written = [f for f in (path, _recorder.oom_path(path)) if os.path.exists(f)]
    if not written:
        return False
    ooms = {f for f in written if f.endswith("-oom" + (os.path.splitext(f)[1] or ".pickle"))}
    for shown in written:
        if shown in ooms and shown.replace("-oom", "", 1) in written:
            continue  # reported with its exit snapshot
        info_file = _recorder.info_path(shown)
        info = {}
        if os.path.isfile(info_file):
            with open(info_file) as f:
                info = json.load(f)
        print(f"cachalot record: wrote {shown}", file=out)
        oom = _recorder.oom_path(shown)
        if oom in ooms:
            print(f"cachalot record: out of memory; the snapshot at that moment is {oom}", file=out)
            print(f"  cachalot explain {oom}", file=out)
        for d in info.get("devices", []):
            print(f"  device {d['index']}: {d['name']}, {d['total_memory']} bytes", file=out)
        if info.get("alloc_conf"):
            print(f"  PYTORCH_CUDA_ALLOC_CONF={info['alloc_conf']}", file=out)
        if info:
            print("Which PYTORCH_CUDA_ALLOC_CONF makes it fit:", file=out)
        for line in _recorder.tune_commands(shown, info):
            print(f"  {line}", file=out)
    return True


def _check_output(output: str) -> str | None:
    """Why `output` cannot take the snapshot, or None: checked before the program runs."""
    if output == "-":
        return "-o -: the snapshot is binary and the program writes to stdout; give a file name"
    native = _recorder.native()
    for f in (output, _recorder.oom_path(output)):
        try:
            native.check_output(f)
        except native.CachalotError as e:
            return str(e)
    if os.path.isfile(output):
        with open(output, "rb") as f:
            head = f.read(1)
        if head and head != b"\x80":  # every pickle torch writes starts with PROTO
            return (
                f"{output} exists and is not a snapshot: cachalot record does not overwrite it; "
                "give another -o name"
            )
    return None


def main(argv: Sequence[str]) -> int:
    parser = _parser()
    args = parser.parse_args(list(argv))
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to run: cachalot record [OPTIONS] -- python train.py ARGS")
    # Check the options here, where the error is readable, not in the child.
    try:
        _recorder.Recorder(args.output, args.max_entries, args.context, args.stacks)
    except ValueError as e:
        parser.error(str(e))
    why = _check_output(args.output)
    if why:
        print(f"cachalot record: {why}", file=sys.stderr)
        return 2
    path = os.path.abspath(args.output)
    before = {f: _identity(f) for f in _snapshots(path)}
    env = dict(os.environ)
    env.pop("CACHALOT_RECORD_FIRST_PID", None)  # an outer `cachalot record`'s
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_BOOT, env.get("PYTHONPATH")]))
    env["CACHALOT_RECORD_OUT"] = path
    env["CACHALOT_RECORD_MAX_ENTRIES"] = str(args.max_entries)
    env["CACHALOT_RECORD_CONTEXT"] = args.context
    env["CACHALOT_RECORD_STACKS"] = args.stacks
    # started with SIGINT ignored (`&` from a script): the program still gets SIGINT's default
    _recorder.heed_sigint()
    try:
        done = _run.run(command, env)
    except FileNotFoundError:
        print(f"cachalot record: {command[0]}: command not found", file=sys.stderr)
        return 127
    except PermissionError:
        print(f"cachalot record: {command[0]}: permission denied", file=sys.stderr)
        return 126
    sys.stdout.flush()
    written = _fresh(_snapshots(path), before)
    if done.interrupted:
        print(
            f"cachalot record: interrupted ({_run.signal_name(done.interrupted)}); "
            "the program was given the signal and time to write what it recorded",
            file=sys.stderr,
        )
    elif done.killed_by:
        print(
            f"cachalot record: the program was killed by {_run.signal_name(done.killed_by)}",
            file=sys.stderr,
        )
    if not _report(args.output, written=written):
        if os.path.exists(path) and not os.path.isfile(path):
            return done.status  # a device or FIFO took the snapshot; nothing to point at
        kept = " (the earlier snapshot there is kept)" if before.get(path) else ""
        if done.interrupted or done.killed_by:
            reason = "the program ended before it wrote one"
        else:
            reason = (
                "the program never imported torch or never used CUDA (or it is not a Python "
                "program), or its snapshot could not be written (the line above says why)"
            )
        print(f"cachalot record: no snapshot{kept}: {reason}", file=sys.stderr)
        return done.status or 1
    return done.status


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
    except BaseException:
        # The block's exception is the one the caller sees; a failed write is only reported.
        try:
            recorder.stop()
        except Exception as e:  # noqa: BLE001
            print(f"cachalot: could not write {recorder.path}: {e}", file=sys.stderr)
        raise
    recorder.stop()
    if not quiet and recorder.written:
        _report(recorder.path, out=sys.stderr)
