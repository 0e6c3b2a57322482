"""Recording torch's allocation history into a snapshot, for `cachalot record` and
`cachalot.recording()`.

This file imports no other module of cachalot: `cachalot record` loads it by path into the user's
script's interpreter (through `_boot/sitecustomize.py`), where `cachalot` may not be importable;
it loads the native module beside it by path, for the one writer every cachalot file goes
through (`_native.write_output`: a regular file replaced atomically once complete, a device or
FIFO written through, a symlink kept). It uses only torch's public memory-history API.

Recordings compose: the first to start turns torch's history on (with its settings), the
others join it, and it is turned off only when the last one stops. The state is kept on the
torch module, so a `cachalot.recording()` inside `cachalot record` shares it.

The snapshot is written:
- when recording stops (the end of the `with` block, or the script's exit, also when it raised);
- at the first out-of-memory (torch's OOM observer), to `<name>-oom.pickle` beside it, so that
  `cachalot explain` sees the state at the moment memory ran out.
Next to the snapshot, `<name>.device.json` says what the device was (capacity, name,
`PYTORCH_CUDA_ALLOC_CONF`), so the `cachalot tune` command can be printed for it.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import importlib.machinery
import importlib.util
import json
import os
import pickle
import shlex
import signal
import sys
from typing import Any

DEFAULT_MAX_ENTRIES = 100_000
MAX_ENTRIES_LIMIT = 1_000_000_000  # torch keeps each entry with its stack: more cannot fit
CONTEXTS = ("all", "alloc", "state", "none")
STACKS = ("python", "all")
_SHARED = "_cachalot_recordings"  # attribute of the torch module: the active recorders


def native() -> Any:
    """cachalot's native module: the one already imported, or the one beside this file."""
    mod = sys.modules.get("cachalot._native")
    if mod is not None:
        return mod
    here = os.path.dirname(os.path.abspath(__file__))
    found = sorted(glob.glob(os.path.join(here, "_native*.so")))
    if not found:
        try:
            from cachalot import _native  # an installed package keeps it elsewhere

            return _native
        except ImportError:
            raise RuntimeError(f"cachalot's native module is missing from {here}") from None
    loader = importlib.machinery.ExtensionFileLoader("cachalot._native", found[0])
    spec = importlib.util.spec_from_file_location("cachalot._native", found[0], loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    sys.modules["cachalot._native"] = mod  # one copy per process: `import cachalot` reuses it
    return mod


def write_output(path: str, data: bytes) -> None:
    """Writes through cachalot's one writer (see the module docs)."""
    native().write_output(path, data)


def oom_path(path: str) -> str:
    """Where the snapshot taken at the first out-of-memory goes."""
    stem, ext = os.path.splitext(path)
    return f"{stem}-oom{ext or '.pickle'}"


def info_path(path: str) -> str:
    """Where the description of the device goes."""
    stem, _ = os.path.splitext(path)
    return f"{stem}.device.json"


def _size_arg(n: int) -> str:
    """A byte count as `cachalot --capacity` reads it, exactly."""
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def tune_commands(path: str, info: dict[str, Any]) -> list[str]:
    """The `cachalot` command lines to run on the snapshot at `path` for the devices in
    `info` (as written to `<name>.device.json`)."""
    devices = info.get("devices", [])
    lines = []
    for d in devices:
        cmd = ["cachalot", "tune", path, "--capacity", _size_arg(d["total_memory"])]
        if len(devices) > 1:
            cmd += ["--device", str(d["index"])]
        lines.append(shlex.join(cmd))
        conf = info.get("alloc_conf")
        if conf:
            cmp = ["cachalot", "compare", path, "--capacity", _size_arg(d["total_memory"])]
            cmp += ["--conf", conf]
            lines.append(shlex.join(cmp))
    return lines


def other_allocator(torch: Any) -> str | None:
    """torch's allocator backend when it is not its own caching allocator (the one whose
    history a snapshot holds): a CUDAPluggableAllocator such as cachalot.torch.use()'s, or
    cudaMallocAsync."""
    try:
        backend = torch.cuda.memory.get_allocator_backend()
    except Exception:  # noqa: BLE001 - an older torch: its own
        return None
    return None if backend == "native" else backend


def history_on(
    torch: Any,
    owner: object,
    context: str | None = "all",
    stacks: str = "python",
    max_entries: int = DEFAULT_MAX_ENTRIES,
) -> None:
    """The one place cachalot turns torch's memory history on (`record`, `recording()`,
    `capture`): the first owner starts it with its settings, later ones join it."""
    active = getattr(torch, _SHARED, None)
    if active is None:
        active = []
        setattr(torch, _SHARED, active)
    if not active:
        torch.cuda.memory._record_memory_history(
            enabled="all", context=context, stacks=stacks, max_entries=max_entries
        )
    active.append(owner)


def history_off(torch: Any, owner: object) -> None:
    """`owner` stops recording; the last one out turns torch's history off."""
    active = getattr(torch, _SHARED, [])
    if owner not in active:
        return
    active.remove(owner)
    if not active:
        torch.cuda.memory._record_memory_history(enabled=None)


class Recorder:
    """Turns torch's memory history on and writes the snapshot (see the module docs)."""

    def __init__(
        self,
        path: str,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        context: str = "all",
        stacks: str = "python",
    ) -> None:
        if not isinstance(max_entries, int) or not 1 <= max_entries <= MAX_ENTRIES_LIMIT:
            raise ValueError(
                f"max_entries={max_entries!r}: expected a whole number from 1 to {MAX_ENTRIES_LIMIT}"
            )
        if context not in CONTEXTS:
            raise ValueError(f"context={context!r}: expected one of {', '.join(CONTEXTS)}")
        if stacks not in STACKS:
            raise ValueError(f"stacks={stacks!r}: expected one of {', '.join(STACKS)}")
        self.path = os.path.abspath(path)
        self.max_entries = max_entries
        self.context = None if context == "none" else context
        self.stacks = stacks
        self.oom_written: str | None = None
        self.written: str | None = None
        self._torch: Any = None
        self._active = False

    def start(self, torch: Any) -> None:
        """Starts recording in the process that imported `torch` (at CUDA's initialisation if
        it has not happened yet); joins a recording already running there (whose settings then
        stay)."""
        self._torch = torch
        self._active = True

        def begin() -> None:
            if not self._active or other_allocator(torch):
                return  # stop() says why there is no snapshot
            history_on(
                torch, self, context=self.context, stacks=self.stacks, max_entries=self.max_entries
            )
            torch._C._cuda_attach_out_of_memory_observer(self._on_oom)

        # At CUDA's initialisation, not before: turning the history on initialises torch's
        # allocator, after which the program could no longer choose another one.
        if torch.cuda.is_initialized():
            begin()
        else:
            torch.cuda._lazy_call(begin)

    def _on_oom(self, device: int, alloc: int, device_allocated: int, device_free: int) -> None:
        if self.oom_written is None and self._active:
            target = oom_path(self.path)
            try:
                self._write(target)
                self.oom_written = target
            except Exception as e:  # noqa: BLE001 - an observer must not raise into torch
                print(f"cachalot: could not write {target}: {e}", file=sys.stderr)

    def _write(self, path: str) -> None:
        snapshot = self._torch.cuda.memory._snapshot()
        write_output(path, pickle.dumps(snapshot))
        if os.path.isfile(path):  # not beside /dev/null or a FIFO
            info = json.dumps(self.device_info(snapshot), indent=1).encode()
            write_output(info_path(path), info)

    def device_info(self, snapshot: dict[str, Any]) -> dict[str, Any]:
        """The devices that appear in `snapshot`, with their capacity and name."""
        torch = self._torch
        used = sorted({s["device"] for s in snapshot.get("segments", [])})
        traces = snapshot.get("device_traces", [])
        used = used or [i for i, t in enumerate(traces) if t]
        devices = []
        for i in used:
            p = torch.cuda.get_device_properties(i)
            devices.append({"index": i, "name": p.name, "total_memory": int(p.total_memory)})
        return {
            "devices": devices,
            # the string torch read (an empty PYTORCH_CUDA_ALLOC_CONF is set), decided in Rust
            "alloc_conf": native().env_conf(),
            # `tune` reads the release to recommend only what it accepts
            "torch_version": str(torch.__version__),
            "cuda_version": torch.version.cuda,
        }

    def stop(self) -> str | None:
        """Writes the snapshot and stops recording. Returns its path, or None when CUDA was
        never used (nothing to write)."""
        if not self._active:
            return self.written
        torch = self._torch
        try:
            if torch.cuda.is_initialized():
                backend = other_allocator(torch)
                if backend:
                    raise RuntimeError(
                        f"the program switched torch to another allocator ({backend}, e.g. "
                        "cachalot.torch.use()), whose allocations torch's memory history does not "
                        "see: record the program without that call"
                    )
                self._write(self.path)
                self.written = self.path
        finally:
            self._active = False
            history_off(torch, self)
        return self.written


def exit_on_sigterm() -> None:
    """In the recorded program: the first SIGTERM raises `SystemExit(143)` in the main thread
    (so that `finally` blocks and `atexit` handlers, the snapshot writers, run: Python's default
    SIGTERM action skips them), unless the program handles SIGTERM itself. A second one, which
    a kill of the whole process group plus cachalot's forwarding sends, is ignored while the
    program finishes; SIGKILL still ends it. SIGINT is heeded too (`heed_sigint`)."""
    heed_sigint()
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return
    seen = []

    def on_sigterm(signum, frame):
        if not seen:
            seen.append(signum)
            raise SystemExit(128 + signum)

    with contextlib.suppress(ValueError):  # not the main thread: leave Python's default
        signal.signal(signal.SIGTERM, on_sigterm)


def heed_sigint() -> None:
    """A SIGINT ignored since the process started raises `KeyboardInterrupt` again, as at a
    terminal. A command started with `&` from a script (a CI job, `nohup`) inherits SIGINT
    ignored, and Python then installs no Ctrl-C handler; `cachalot record` and `capture`
    still take a SIGINT sent to them (they wait for it with the signal blocked) and forward
    it, and a program that ignored it ran on while they waited for it to end. In the wrapper
    this also gives the programs it starts SIGINT's default action (exec keeps an ignored
    signal ignored, not a handled one). A handler the program installed is left alone."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        return
    with contextlib.suppress(ValueError):  # not the main thread: leave it as it is
        signal.signal(signal.SIGINT, signal.default_int_handler)


def process_path(path: str) -> str:
    """Where a process other than the first recorded one writes (one snapshot per process, so
    that ranks started by `torch.multiprocessing.spawn` or torchrun do not overwrite each
    other): `NAME.rankR.pickle` with torchrun's RANK, else `NAME.pidP.pickle`."""
    stem, ext = os.path.splitext(path)
    rank = os.environ.get("RANK")
    tag = f"rank{rank}" if rank and rank.isdigit() else f"pid{os.getpid()}"
    return f"{stem}.{tag}{ext or '.pickle'}"


def at_exit(finish: Any, failed: str) -> None:
    """Runs `finish()` at the interpreter's exit (`cachalot record`'s snapshot, `cachalot
    capture`'s result), with Ctrl-C ignored meanwhile so that a second one does not cut the
    writing short, the previous SIGINT handler restored after; an error is reported after the
    words `failed` and never raised (the program is exiting)."""

    def run() -> None:
        try:
            previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        except ValueError:  # not the main thread
            previous = None
        try:
            finish()
        except Exception as e:  # noqa: BLE001 - exiting: report, do not raise
            print(f"{failed}: {e}", file=sys.stderr)
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)

    atexit.register(run)
