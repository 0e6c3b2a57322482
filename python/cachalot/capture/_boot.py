"""The capture session inside each process of a captured program.

`cachalot capture -- COMMAND` runs COMMAND unchanged with the capture runtime preloaded
(LD_PRELOAD) and `cachalot/_boot/sitecustomize.py` on PYTHONPATH, the injection mechanism
`cachalot record` uses too; both are inherited by every process the command starts. When a
process imports torch, `start(torch)` runs here:

- torch's memory history is turned on at CUDA's lazy init (so a ``PYTORCH_CUDA_ALLOC_CONF``
  the script sets before its first CUDA call still counts);
- host reads of device data are counted and the few known ones answered (`hostreads`), and
  `torch.compile` is watched (it runs for real: `compile.py`);
- at exit (also after an uncaught exception, or a SIGTERM, which ends the script through
  `SystemExit(143)`) the process writes into CACHALOT_CAPTURE_DIR its snapshot
  ``procPID.pickle`` (if it used CUDA) and ``procPID.json``: its rank, the devices it used,
  torch's own statistics, warnings, the error that ended it. A launcher (torchrun) imports
  torch but never uses CUDA: its note says so, and it is only run.

The user's script runs as `python SCRIPT` runs it, so its tracebacks are its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import traceback

from .._recorder import at_exit, exit_on_sigterm, history_on, other_allocator, write_output
from ._env import DEFAULT_MAX_ENTRIES, ENV_DIR, ENV_MAX_ENTRIES

_STATS = (
    "allocated_bytes.all.peak",
    "reserved_bytes.all.peak",
    "active_bytes.all.peak",
    "requested_bytes.all.peak",
    "num_alloc_retries",
    "num_ooms",
    "num_device_alloc",
)


class _Session:
    def __init__(self, torch):
        self.torch = torch
        self.max_entries = int(os.environ.get(ENV_MAX_ENTRIES) or DEFAULT_MAX_ENTRIES)
        self.error: str | None = None
        self.groups: list[list[int]] = []  # [size, rank in it] of each group joined
        self.rank: int | None = None
        self.world_size: int | None = None
        self.started = time.perf_counter()
        self.finished = False
        from .hostreads import HostReads

        self.reads = HostReads()
        self.reads.install(torch)
        from .compile import CompileWatch  # torch.compile runs for real (compile.py)

        self.compile = CompileWatch(torch)
        self.compile.install()
        self._watch_process_group()
        from . import cover  # a job larger than the machine (--world-size): cover.py

        self.cover = cover.from_env()
        self.cover_warnings: list[str] = []
        cover.install(torch, self._cover_warn)
        torch.cuda._lazy_call(self._start_history)

    def _cover_warn(self, text: str) -> None:
        if text not in self.cover_warnings:
            self.cover_warnings.append(text)

    def _start_history(self):
        if other_allocator(self.torch):
            return  # the program chose another allocator: the result says so, no history
        history_on(self.torch, self, max_entries=self.max_entries, stacks="python")

    def _watch_process_group(self):
        """Remember the rank once the program joins its default process group (a rank of
        `torch.multiprocessing.spawn` has no RANK variable; the group may be gone at exit)."""
        session = self
        try:
            import torch.distributed as dist
            import torch.distributed.distributed_c10d as c10d
        except ImportError:
            return
        if not dist.is_available():
            return
        orig = c10d.init_process_group

        def init_process_group(*args, **kwargs):
            out = orig(*args, **kwargs)
            with contextlib.suppress(Exception):
                session.rank, session.world_size = dist.get_rank(), dist.get_world_size()
            return out

        init_process_group.__wrapped__ = orig
        c10d.init_process_group = init_process_group
        dist.init_process_group = init_process_group

        # A new group's communicator is split from the world's (ncclCommSplit); the simulated
        # NCCL knows the split's rank in it, not its size (the ranks' colors are not
        # exchanged): the groups this process joined are kept here, (size, its rank there).
        helper = c10d._new_process_group_helper

        def new_process_group(group_size, group_rank, global_ranks_in_group, *args, **kwargs):
            out = helper(group_size, group_rank, global_ranks_in_group, *args, **kwargs)
            if global_ranks_in_group and group_rank is not None:
                session.groups.append([len(global_ranks_in_group), group_rank])
            return out

        c10d._new_process_group_helper = new_process_group

    def _rank(self) -> int | None:
        if self.rank is not None:
            return self.rank
        rank = os.environ.get("RANK")
        return int(rank) if rank and rank.isdigit() else None

    def finish(self) -> None:
        if self.finished:
            return
        self.finished = True
        torch = self.torch
        base = os.path.join(os.environ[ENV_DIR], f"proc{os.getpid()}")
        used_cuda = torch.cuda.is_initialized()
        foreign = other_allocator(torch) if used_cuda else None
        stats = torch.cuda.memory_stats() if used_cuda and not foreign else {}
        events, devices = 0, []
        if used_cuda and not foreign:
            from .values import clean_frames  # the stacks without the value tracking's frames

            snap = clean_frames(torch.cuda.memory._snapshot())
            traces = snap.get("device_traces", [])
            devices = [i for i, t in enumerate(traces) if any(e["action"] != "snapshot" for e in t)]
            if devices:
                # torch marks the start of the history on every device; a rank's trace is the
                # devices it used (the advisor then needs no --device)
                snap["device_traces"] = [t if i in devices else [] for i, t in enumerate(traces)]
            events = sum(len(t) for t in snap["device_traces"])
            import pickle

            write_output(base + ".pickle", pickle.dumps(snap))
        warnings = self.reads.warnings()
        warnings += self.compile.warnings()
        warnings += self.cover_warnings
        if self.cover and "torch.distributed.pipelining" in sys.modules:
            warnings.append(
                "the program imported torch.distributed.pipelining: pipeline stages differ per "
                "rank, so the ranks not executed are not alike the executed ones; run every rank"
            )
        if events >= self.max_entries:
            warnings.append(
                f"the history filled its {self.max_entries} entries and dropped the oldest: the peak may be "
                f"missed; raise {ENV_MAX_ENTRIES}"
            )
        if stats.get("num_ooms", 0):
            warnings.append(
                "torch ran out of memory during the capture (a memory fraction in the allocator config?)"
            )
        local = os.environ.get("LOCAL_RANK")
        meta = {
            "pid": os.getpid(),
            "rank": self._rank(),
            "local_rank": int(local) if local and local.isdigit() else None,
            "world_size": self.world_size or _int_env("WORLD_SIZE"),
            "groups": self.groups,
            # the node of a covered job (a real node's devices are its own)
            "node": None
            if self.cover is None or self._rank() is None
            else self._rank() // self.cover.per_node,
            "argv": list(sys.argv),
            "other_allocator": foreign,
            "torch": torch.__version__,
            "cuda": torch.version.cuda,  # the CUDA the wheels were built for
            "device": torch.cuda.get_device_name() if used_cuda else None,
            "devices": devices,
            "used_cuda": used_cuda,
            "events": events,
            "error": self.error,
            "seconds": round(time.perf_counter() - self.started, 3),
            "torch_stats": {k: stats.get(k, 0) for k in _STATS},
            "host_reads": {
                "unanswered": dict(self.reads.unanswered),
                "answered": dict(self.reads.answered),
                "bytes": self.reads.bytes_read,
            },
            "values": self.reads.values_summary(),  # known and assumed values (values.py)
            "warnings": warnings,
            "compile": self.compile.summary(),
        }
        write_output(base + ".json", json.dumps(meta, indent=1).encode())


def _int_env(name: str) -> int | None:
    v = os.environ.get(name)
    return int(v) if v and v.isdigit() else None


def start(torch) -> None:
    """Starts the capture session of this process (sitecustomize calls it when torch is
    imported); the result is written at exit."""
    session = _Session(torch)
    exit_on_sigterm()
    previous_hook = sys.excepthook

    def excepthook(kind, value, tb):
        # The traceback is the program's own (printed as usual); the result keeps its text.
        session.error = "".join(traceback.format_exception(kind, value, tb))[-4000:]
        previous_hook(kind, value, tb)

    sys.excepthook = excepthook

    at_exit(session.finish, "cachalot capture: could not write this process's capture")
