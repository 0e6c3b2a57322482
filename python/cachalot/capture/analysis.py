"""From a captured snapshot to the answer: peaks, fit, the config to use, the smallest GPU.

Every number comes from replaying the captured allocation stream through
cachalot's rebuild of torch 2.15's caching allocator (the ``cachalot`` engine:
``replay``, ``tune``), never from a formula.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import gpus

STEP = 64 << 20  # minimum-capacity resolution, the same as `cachalot tune --min-capacity`
GiB = float(1 << 30)


class AnalysisError(RuntimeError):
    pass


def engine() -> list[str]:
    """The command that runs cachalot's engine (the Rust CLI)."""
    explicit = os.environ.get("CACHALOT_CLI")
    if explicit:
        return [explicit]
    if importlib.util.find_spec("cachalot._native") is not None:  # the installed package's CLI
        return [sys.executable, "-m", "cachalot"]
    repo = Path(__file__).resolve().parents[3]  # a source checkout: the newest cargo build
    built = [
        p
        for p in (repo / "target" / b / "cachalot" for b in ("release", "debug"))
        if p.is_file() and os.access(p, os.X_OK)
    ]
    if built:
        return [str(max(built, key=lambda p: p.stat().st_mtime))]
    found = shutil.which("cachalot")
    if found:
        return [found]
    raise AnalysisError(
        "cannot find cachalot's engine: install the cachalot package, or set CACHALOT_CLI "
        "to a built `cachalot` binary"
    )


def _json(args: list[str], conf: str | None, ok: tuple[int, ...] = (0,)) -> dict:
    """Run the engine with `args` and read its JSON; an exit status outside `ok` is an error."""
    cmd = engine() + args
    if conf is not None:
        cmd += ["--conf", conf]
    p = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if p.returncode not in ok:
        raise AnalysisError(
            f"{' '.join(cmd)} failed (exit {p.returncode}): {p.stderr.strip()[-2000:]}"
        )
    try:
        return json.loads(p.stdout)
    except json.JSONDecodeError as e:
        raise AnalysisError(f"{' '.join(cmd)} printed no JSON: {p.stdout[:300]!r}") from e


def replay(trace: str, capacity: int, conf: str | None) -> dict:
    # `cachalot replay` exits 1 when the replay ran out of memory: an answer here, not a failure
    return _json(["replay", trace, "--capacity", str(capacity), "--json"], conf, ok=(0, 1))


def fits(trace: str, capacity: int, conf: str | None) -> bool:
    return replay(trace, capacity, conf)["num_ooms"] == 0


def min_capacity(trace: str, conf: str | None, peak_reserved: int) -> int:
    """Smallest multiple of 64 MiB on which the trace runs without OOM under `conf`."""
    hi = -(-peak_reserved // STEP) * STEP + STEP  # an unconstrained replay's peak fits
    while not fits(trace, hi, conf):
        hi *= 2
    lo = 0  # lo does not fit (or is 0), hi fits
    while hi - lo > STEP:
        mid = (lo + hi) // 2 // STEP * STEP
        if mid <= lo:
            break
        if fits(trace, mid, conf):
            hi = mid
        else:
            lo = mid
    return hi


@dataclass
class Prediction:
    """What `cachalot capture` answers about one captured run."""

    trace: str
    gpu: str
    gpu_memory: int
    capacity: int  # what the allocator may use: GPU memory minus the reserve
    conf: str  # the user's PYTORCH_CUDA_ALLOC_CONF ("" = torch's defaults)
    events: int
    peak_allocated: int
    peak_reserved: int
    fits: bool
    num_ooms: int
    num_alloc_retries: int
    min_capacity: int  # under `conf`
    tuned_conf: str  # `cachalot tune` at `capacity`
    tune_reason: str
    tuned_fits: bool
    best_min_capacity: int  # under the config that needs least (`tune --min-capacity`)
    best_min_conf: str
    smallest_gpu: str | None
    warnings: list[str] = field(default_factory=list)
    torch_stats: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    def report(self) -> str:
        def g(b):
            return f"{b / GiB:.2f} GiB"

        conf = f"PYTORCH_CUDA_ALLOC_CONF={self.conf}" if self.conf else "torch's default config"
        lines = [
            f"peak allocated      {g(self.peak_allocated)}",
            f"peak reserved       {g(self.peak_reserved)}   ({conf})",
        ]
        spare = self.capacity - self.peak_reserved
        if self.fits:
            lines.append(
                f"fits {self.gpu:<14} yes: {g(self.capacity)} usable, {g(max(spare, 0))} to spare"
                + (
                    f", {self.num_alloc_retries} allocator retries"
                    if self.num_alloc_retries
                    else ""
                )
            )
        else:
            lines.append(
                f"fits {self.gpu:<14} NO: out of memory ({self.num_ooms} failed allocations) "
                f"on {g(self.capacity)}"
            )
        tuned = self.tuned_conf or "(torch's default; unset PYTORCH_CUDA_ALLOC_CONF)"
        if self.tuned_fits:
            lines.append(f"config to use       {tuned}   [fits; {self.tune_reason}]")
        else:
            lines.append(f"no config fits      closest: {tuned}   [{self.tune_reason}]")
        if self.best_min_conf == self.conf:
            lines.append(
                f"needs at least      {g(self.min_capacity)} (as configured; no config tried needs less)"
            )
        else:
            lines.append(
                f"needs at least      {g(self.min_capacity)} as configured, "
                f"{g(self.best_min_capacity)} with {self.best_min_conf or 'the default config'}"
            )
        lines.append(
            f"smallest GPU        {self.smallest_gpu or 'none in the table'}"
            + (
                ""
                if not self.smallest_gpu
                else f" (captured as {self.gpu}; kernels differ by GPU: capture with --gpu to check it)"
            )
        )
        lines.append(
            f"trace               {self.trace} ({self.events} allocation events; "
            f"`cachalot tune {self.trace} --capacity 24G` for another GPU)"
        )
        for w in self.warnings:
            lines.append(f"warning: {w}")
        return "\n".join(lines)


def predict(
    trace: str,
    gpu: gpus.Gpu,
    conf: str | None = None,
    reserve: int = 0,
    warnings: list[str] | None = None,
    torch_stats: dict | None = None,
) -> Prediction:
    """Answer the capture's questions for `trace` on `gpu`.

    `conf` None means the environment, read as torch reads it
    (PYTORCH_CUDA_ALLOC_CONF, then PYTORCH_ALLOC_CONF).
    """
    if conf is None:
        conf = (
            os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF") or ""
        )
    capacity = gpu.memory - reserve
    if capacity <= 0:
        raise AnalysisError(f"--reserve {reserve} leaves nothing of {gpu.key}'s {gpu.memory} bytes")
    at_gpu = replay(trace, capacity, conf)
    free = replay(trace, 1 << 40, conf)  # the stream's own peaks, with no memory pressure
    peak_reserved = free["peak"]["reserved_bytes"]
    need = min_capacity(trace, conf, peak_reserved)
    # `cachalot tune` exits 1 when no config fits; its JSON then names the best and the shortfall
    tuned = _json(["tune", trace, "--capacity", str(capacity), "--json", "-q"], None, ok=(0, 1))
    tuned_fits = bool(tuned.get("fits", tuned.get("recommended") is not None))
    tuned_conf = (tuned.get("recommended") if tuned_fits else tuned.get("best")) or ""
    best = _json(["tune", trace, "--min-capacity", "--json", "-q"], None, ok=(0, 1))
    best_need, best_conf = int(best["min_capacity"]), best.get("fits_with") or ""
    if need <= best_need:  # the user's own config needs no more than the best one tried
        best_need, best_conf = need, conf
    smallest = gpus.smallest_fitting(best_need + reserve)
    return Prediction(
        trace=trace,
        gpu=gpu.key,
        gpu_memory=gpu.memory,
        capacity=capacity,
        conf=conf,
        events=int(free["events"]),
        peak_allocated=int(free["peak"]["allocated_bytes"]),
        peak_reserved=int(peak_reserved),
        fits=at_gpu["num_ooms"] == 0,
        num_ooms=int(at_gpu["num_ooms"]),
        num_alloc_retries=int(at_gpu["num_alloc_retries"]),
        min_capacity=need,
        tuned_conf=tuned_conf,
        tune_reason=str(tuned.get("reason", "")),
        tuned_fits=tuned_fits,
        best_min_capacity=best_need,
        best_min_conf=best_conf,
        smallest_gpu=smallest.key if smallest else None,
        warnings=list(warnings or []),
        torch_stats=dict(torch_stats or {}),
    )
