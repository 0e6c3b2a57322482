"""Runs inside the captured process: the user's program under the capture runtime.

``cachalot capture -- python train.py ARGS`` starts
``python -m cachalot.capture._boot train.py ARGS`` (or ``-m MOD`` / ``-c CODE``)
with the runtime preloaded. This module turns torch's memory history on at
CUDA's lazy init (so a ``PYTORCH_CUDA_ALLOC_CONF`` the script sets before its
first CUDA call still counts), runs the program as ``__main__``, and at exit,
also when it raises, writes the snapshot and a JSON sidecar that the launcher
turns into the answer.

The user sees what `python SCRIPT` would show: a failing script's traceback starts at the
script (this module's and runpy's frames are left out), a SIGTERM ends the script through
`SystemExit(143)` so that the capture is still written.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import time
import traceback

from .._recorder import history_on, other_allocator, write_output
from ._env import DEFAULT_MAX_ENTRIES, ENV_MAX_ENTRIES, ENV_META, ENV_SNAPSHOT


class _Session:
    def __init__(self, torch):
        self.torch = torch
        self.max_entries = int(os.environ.get(ENV_MAX_ENTRIES) or DEFAULT_MAX_ENTRIES)
        self.started = time.perf_counter()
        from .hostreads import HostReads

        self.reads = HostReads()
        self.reads.install(torch)
        from .compile import CompileWatch  # torch.compile runs for real (compile.py)

        self.compile = CompileWatch(torch)
        self.compile.install()
        torch.cuda._lazy_call(self._start_history)

    def _start_history(self):
        history_on(self.torch, self, max_entries=self.max_entries, stacks="python")

    def finish(self, exit_code: int, error: str | None) -> None:
        torch = self.torch
        snap_path, meta_path = os.environ[ENV_SNAPSHOT], os.environ[ENV_META]
        used_cuda = torch.cuda.is_initialized()
        foreign = getattr(self, "other_allocator", None)
        stats = torch.cuda.memory_stats() if used_cuda and not foreign else {}
        events = 0
        if used_cuda and not foreign:
            snap = torch.cuda.memory._snapshot()
            events = sum(len(t) for t in snap.get("device_traces", []))
            import pickle

            write_output(snap_path, pickle.dumps(snap))
        warnings = self.reads.warnings()
        warnings += self.compile.warnings()
        if events >= self.max_entries:
            warnings.append(
                f"the history filled its {self.max_entries} entries and dropped the oldest: the peak may be "
                f"missed; raise {ENV_MAX_ENTRIES}"
            )
        if stats.get("num_ooms", 0):
            warnings.append(
                "torch ran out of memory during the capture (a memory fraction in the allocator config?)"
            )
        meta = {
            "other_allocator": getattr(self, "other_allocator", None),
            "torch": torch.__version__,
            "device": torch.cuda.get_device_name() if used_cuda else None,
            "used_cuda": used_cuda,
            "events": events,
            "exit_code": exit_code,
            "error": error,
            "seconds": round(time.perf_counter() - self.started, 3),
            "torch_stats": {
                k: stats.get(k, 0)
                for k in (
                    "allocated_bytes.all.peak",
                    "reserved_bytes.all.peak",
                    "active_bytes.all.peak",
                    "requested_bytes.all.peak",
                    "num_alloc_retries",
                    "num_ooms",
                    "num_device_alloc",
                )
            },
            "host_reads": {
                "unanswered": dict(self.reads.unanswered),
                "answered": dict(self.reads.answered),
                "bytes": self.reads.bytes_read,
            },
            "warnings": warnings,
            "compile": self.compile.summary(),
        }
        write_output(meta_path, json.dumps(meta, indent=1).encode())


def _user_traceback(e: BaseException):
    """`e`'s traceback without the frames of this module and of runpy above the user's code."""
    tb = e.__traceback__
    ours = {os.path.abspath(__file__), os.path.abspath(runpy.__file__), "<frozen runpy>"}

    def name(tb):
        return tb.tb_frame.f_code.co_filename

    while tb is not None and (name(tb) in ours or os.path.abspath(name(tb)) in ours):
        tb = tb.tb_next
    return tb


def _run_user(argv: list[str]) -> None:
    if not argv:
        raise SystemExit("cachalot capture: nothing to run after `python`")
    if argv[0] == "-m":
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    elif argv[0] == "-c":
        sys.argv = ["-c", *argv[2:]]
        code = compile(argv[1], "<string>", "exec")
        exec(code, {"__name__": "__main__", "__builtins__": __builtins__})  # noqa: S102 (python -c)
    else:
        sys.argv = argv
        # as `python SCRIPT` would have it: the script's folder first, not the cwd `-m` put there
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
        runpy.run_path(argv[0], run_name="__main__")


def main() -> int:
    argv = sys.argv[1:]
    if argv and argv[0] in ("-m", "-c") and len(argv) < 2:
        print(f"cachalot capture: {argv[0]} needs an argument", file=sys.stderr)
        return 2
    if argv and argv[0] not in ("-m", "-c") and not os.path.isfile(argv[0]):
        print(
            f"{sys.executable}: can't open file {os.path.abspath(argv[0])!r}: "
            "[Errno 2] No such file or directory",
            file=sys.stderr,
        )
        return 2
    import torch

    from .._recorder import exit_on_sigterm

    exit_on_sigterm()
    session = _Session(torch)
    code, error = 0, None
    try:
        _run_user(argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    except KeyboardInterrupt as e:
        traceback.print_exception(type(e), e, _user_traceback(e))
        code = 130
    except BaseException as e:  # noqa: BLE001 (the script failed: still write what was captured)
        traceback.print_exception(type(e), e, _user_traceback(e))
        code, error = 1, f"{type(e).__name__}: {e}"[:2000]
    try:
        session.other_allocator = other_allocator(torch)
        session.finish(code, error)
    except KeyboardInterrupt:
        code = 130
    return code


if __name__ == "__main__":
    sys.exit(main())
