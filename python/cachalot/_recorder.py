"""Recording torch's allocation history into a snapshot, for `cachalot record` and
`cachalot.recording()`.

This file imports nothing from cachalot: `cachalot record` loads it by path into the user's
script's interpreter (through `_boot/sitecustomize.py`), which may not have cachalot's native
module. It uses only torch's public memory-history API.

The snapshot is written atomically (a temporary file in the same folder, then a rename):
- when recording stops (the end of the `with` block, or the script's exit, also when it raised);
- at the first out-of-memory (torch's OOM observer), to `<name>-oom.pickle` beside it, so that
  `cachalot explain` sees the state at the moment memory ran out.
Next to the snapshot, `<name>.device.json` says what the device was (capacity, name,
`PYTORCH_CUDA_ALLOC_CONF`), so the `cachalot tune` command can be printed for it.
"""

from __future__ import annotations

import json
import os
import pickle
import shlex
import sys
import tempfile
from typing import Any

DEFAULT_MAX_ENTRIES = 100_000
CONTEXTS = ("all", "alloc", "state", "none")
STACKS = ("python", "all")


def _atomic_write(path: str, data: bytes) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".cachalot-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


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


class Recorder:
    """Turns torch's memory history on and writes the snapshot (see the module docs)."""

    def __init__(
        self,
        path: str,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        context: str = "all",
        stacks: str = "python",
    ) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries={max_entries}: need at least 1")
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
        """Starts recording in the process that imported `torch`."""
        self._torch = torch
        torch.cuda.memory._record_memory_history(
            enabled="all",
            context=self.context,
            stacks=self.stacks,
            max_entries=self.max_entries,
        )
        torch._C._cuda_attach_out_of_memory_observer(self._on_oom)
        self._active = True

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
        _atomic_write(path, pickle.dumps(snapshot))
        _atomic_write(info_path(path), json.dumps(self.device_info(snapshot), indent=1).encode())

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
        conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF")
        return {"devices": devices, "alloc_conf": conf or ""}

    def stop(self) -> str | None:
        """Writes the snapshot and stops recording. Returns its path, or None when CUDA was
        never used (nothing to write)."""
        if not self._active:
            return self.written
        torch = self._torch
        try:
            if torch.cuda.is_initialized():
                self._write(self.path)
                self.written = self.path
        finally:
            self._active = False
            torch.cuda.memory._record_memory_history(enabled=None)
        return self.written
