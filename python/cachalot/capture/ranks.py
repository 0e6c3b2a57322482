"""A captured job's processes, and the answer per rank and for the job.

Each process of the command that imported torch left a note in the capture's folder
(`_boot`: ``procPID.json``, and ``procPID.pickle`` when it used CUDA); the simulated NCCL left
one line per communicator in ``nccl.jsonl``. `gather` reads them; `predict` hands every rank's
trace, with what each rank does outside torch's allocator (its NCCL communicators, the other
processes on its device), to the application layer in one call (`analysis.predict`): per rank
and for the job (the worst rank decides, one PYTORCH_CUDA_ALLOC_CONF for all, as `cachalot tune
r0.pickle r1.pickle`). The `ranks` of the JSON then say which process each rank was. A job of
one process answers as a single capture always did.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import _recorder
from . import analysis, gpus
from .cover import Cover, describe

GiB = float(1 << 30)


@dataclass
class Job:
    procs: list[dict[str, Any]]  # every process that imported torch, the launcher's too
    nccl: list[dict[str, Any]]  # the simulated NCCL's communicator events

    @property
    def cuda(self) -> list[dict[str, Any]]:
        """The processes that used CUDA (the ranks), by rank, then pid."""
        used = [p for p in self.procs if p.get("used_cuda")]
        return sorted(used, key=lambda p: (p.get("rank") is None, p.get("rank") or 0, p["pid"]))

    @property
    def torch(self) -> str:
        return next((p["torch"] for p in self.procs if p.get("torch")), "?")

    @property
    def seconds(self) -> float:
        return max((p.get("seconds", 0.0) for p in self.procs), default=0.0)

    def errors(self) -> list[str]:
        """One line per process that ended with an uncaught exception: the ranks' first."""
        failed = [p for p in self.procs if p.get("error")]
        failed.sort(key=lambda p: not p.get("used_cuda"))
        return [f"{label(p)}: {last_line(p['error'])}" for p in failed]

    def failures(self) -> list[str]:
        """What to tell the user about the processes that failed: each crashed rank with the
        end of its traceback; the launcher's own error only when no rank's explains it."""
        ranks = [p for p in self.procs if p.get("error") and p.get("used_cuda")]
        others = [p for p in self.procs if p.get("error") and not p.get("used_cuda")]
        lines = []
        for p in ranks:
            tail = "\n".join("  " + ln for ln in p["error"].rstrip().splitlines()[-6:])
            lines.append(f"{label(p)} failed:\n{tail}")
        if not ranks:
            for p in others:
                what = "the launcher" if is_launcher(p, self) else "the program"
                lines.append(f"{what} (pid {p['pid']}) failed: {last_line(p['error'])}")
        return lines

    def communicators(self, pid: int) -> list[dict[str, Any]]:
        """The NCCL communicators process `pid` created (init or split), in order. A split's
        size is that of the group torch made it for: the groups the process joined in which
        its rank is the split's rank, when they all have one size; else the parent's (an
        upper bound)."""
        groups = next((p.get("groups") or [] for p in self.procs if p["pid"] == pid), [])
        made = [c for c in self.nccl if c.get("pid") == pid and c["event"] in ("init", "split")]
        out = []
        for c in made:
            sizes = {size for size, rank in groups if rank == c.get("rank")}
            if c["event"] == "split" and len(sizes) == 1:
                c = dict(c, nranks=sizes.pop())
            out.append(c)
        return out


def label(p: dict[str, Any]) -> str:
    return f"rank {p['rank']}" if p.get("rank") is not None else f"process {p['pid']}"


def last_line(text: str) -> str:
    """The exception line of a traceback's text (`RuntimeError: …`), else its last line."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    frames = [i for i, ln in enumerate(lines) if ln.startswith("  File ")]
    if frames:
        after = [ln for ln in lines[frames[-1] + 1 :] if not ln.startswith(" ")]
        if after:
            return after[0][:300]
    return (lines[-1] if lines else text)[:300]


def is_launcher(p: dict[str, Any], job: Job) -> bool:
    return not p.get("used_cuda") and len(job.procs) > 1


def gather(folder: Path, nccl_log: Path) -> Job:
    procs = []
    for f in sorted(folder.glob("proc*.json")):
        try:
            meta = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError):
            continue  # a process killed while writing: it has no result
        snap = f.with_suffix(".pickle")
        meta["snapshot"] = str(snap) if snap.is_file() else None
        if meta.get("used_cuda") and not meta["snapshot"] and not meta.get("other_allocator"):
            meta["used_cuda"] = False
        procs.append(meta)
    nccl = []
    if nccl_log.is_file():
        for line in nccl_log.read_text().splitlines():
            try:
                nccl.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return Job(procs, nccl)


def trace_path(output: str, rank: int | None, pid: int, many: bool) -> str:
    """Where a rank's trace goes for `-o output`: the name itself for a single process; with
    several, ``DIR/rankR.pickle`` when `output` is a folder (or ends in /), else
    ``NAME.rankR.pickle`` (``pidP`` for a process with no rank)."""
    if not many:
        return output
    tag = f"rank{rank}" if rank is not None else f"pid{pid}"
    if output.endswith(os.sep) or os.path.isdir(output):
        return os.path.join(output, f"{tag}.pickle")
    stem, ext = os.path.splitext(output)
    return f"{stem}.{tag}{ext or '.pickle'}"


@dataclass
class Answer:
    """The answer for the job: `analysis.Prediction` over every rank's trace (the worst rank
    decides, one configuration for all, NCCL's memory counted per rank), and which process
    each of its ranks is."""

    prediction: analysis.Prediction
    metas: list[dict[str, Any]]
    nccl: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    cover: Cover | None = None  # a job larger than the machine: the ranks executed (cover.py)

    @property
    def fits(self) -> bool:
        return self.prediction.fits

    @property
    def exit_status(self) -> int:
        return self.prediction.exit_status

    def to_json(self, **extra: Any) -> dict[str, Any]:
        d = self.prediction.to_dict()
        for row, meta in zip(d.get("ranks", []), self.metas):
            row.update(
                rank=meta.get("rank"),
                pid=meta["pid"],
                device=(meta.get("devices") or [None])[0],
                nccl_communicators=[c["nranks"] for c in self.nccl.get(meta["pid"], [])],
                torch_stats=meta.get("torch_stats", {}),
                error=last_line(meta["error"]) if meta.get("error") else None,
            )
        deciding = [r.get("rank") for r in d.get("ranks", []) if r.get("trace") == d.get("trace")]
        d["deciding_rank"] = deciding[0] if deciding else None
        if self.cover is not None:
            d["ranks"] = covered_rows(d.get("ranks", []), self.cover)
            d["world_size"], d["executed_ranks"] = self.cover.world, list(self.cover.ranks)
        d.update(extra, seconds=max((m.get("seconds", 0.0) for m in self.metas), default=0.0))
        return d

    def report(self) -> str:
        text = self.prediction.report()
        if len(self.metas) > 1:
            names = ", ".join(f"{label(m)} = {r}" for m, r in zip(self.metas, self.traces()))
            text += f"\nranks               {names}"
        if self.cover is not None:
            text += f"\ncovered             {describe(self.cover)}"
        return text

    def traces(self) -> list[str]:
        return [r["trace"] for r in self.prediction.to_dict().get("ranks", [])]


def covered_rows(rows: list[dict[str, Any]], job: Cover) -> list[dict[str, Any]]:
    """Every rank of a covered job, by rank: the executed ones as answered (`executed`
    true), each other one as the executed rank that stands for it (`covered_by`)."""
    by_rank = {r.get("rank"): r for r in rows}
    out = []
    for rank in range(job.world):
        if rank in by_rank:
            out.append(dict(by_rank[rank], executed=True, covered_by=None))
            continue
        source = by_rank.get(job.covered_by(rank))
        if source is None:
            continue  # that rank left no answer (it failed): nothing stands for this one
        row = {k: v for k, v in source.items() if k not in ("pid", "torch_stats", "error")}
        row.update(rank=rank, executed=False, covered_by=source.get("rank"))
        row["device"] = rank % job.per_node
        out.append(row)
    return out


def wrong_world(job: Job, cover: Cover) -> list[str]:
    """The executed ranks whose program saw another world size than the job's (a script
    that sets its own), or another rank than the one it was to be."""
    lines = []
    for p in job.cuda:
        if p.get("world_size") not in (None, cover.world):
            lines.append(
                f"{label(p)} ran in a world of {p['world_size']} ranks, not --world-size "
                f"{cover.world}: the script sets its own world size; let it take WORLD_SIZE "
                "from its launcher (or the size torch.multiprocessing.spawn gives it)"
            )
    return lines


def _write_trace(meta: dict[str, Any], output: str, work: Path, gpu: gpus.Gpu, device: int) -> str:
    from .launch import write_device_info, write_trace

    out = write_trace(Path(meta["snapshot"]), output, work)
    write_device_info(out, gpu, device, meta.get("torch"), meta.get("cuda"))
    return out


def _outside(meta: dict[str, Any], job: Job) -> dict[str, Any]:
    """What rank `meta` does outside torch's allocator, as the prediction reads it: its NCCL
    communicators (from the simulated NCCL's log) and the other processes that used its
    device."""
    device = (meta.get("devices") or [None])[0]
    others = [  # the other processes on this device of this node
        p
        for p in job.cuda
        if p is not meta
        and device in (p.get("devices") or [])
        and p.get("node") == meta.get("node")
    ]
    return {
        "nccl": [{"ranks": c["nranks"]} for c in job.communicators(meta["pid"])],
        "extra_contexts": len(others),
    }


def predict(
    job: Job,
    gpu: gpus.Gpu,
    output: str,
    reserve: int | None,
    work: Path,
    cover: Cover | None = None,
) -> Answer:
    """Answers each rank of `job` on `gpu` and the job as a whole (one in-process call of
    the application layer over every rank's trace); each rank's trace is written at
    `trace_path(output, …)`."""
    many = len(job.cuda) > 1
    if many and (output.endswith(os.sep) or os.path.isdir(output)):
        os.makedirs(output, exist_ok=True)
    traces = []
    for meta in job.cuda:
        out = trace_path(output, meta.get("rank"), meta["pid"], many)
        if many:
            _recorder.native().check_output(out)
        device = (meta.get("devices") or [0])[0]  # the rank's own device of the node
        written = _write_trace(meta, out, work, gpu, device)
        # A FIFO or device took the trace: the prediction reads the captured copy.
        traces.append(written if os.path.isfile(written) else meta["snapshot"])
    warnings = []
    for meta in job.cuda:
        warnings += [w for w in meta["warnings"] if w not in warnings]
    pred = analysis.predict(
        traces,
        gpu,
        reserve=reserve,
        warnings=warnings,
        torch_stats=job.cuda[0]["torch_stats"],
        outside=[_outside(m, job) for m in job.cuda],
    )
    nccl = {m["pid"]: job.communicators(m["pid"]) for m in job.cuda}
    return Answer(pred, job.cuda, nccl=nccl, cover=cover)
