"""From a captured trace to the answer: the verdict, the advice, the numbers behind them.

A thin view of the Rust application layer (`crates/app/src/predict.rs`, through
`_native.predict`): the trace is loaded once, in this process, and every question (the peaks,
the memory outside torch's allocator, whether it fits CUDA's total, the minimum capacity, the
tuned configuration, the configuration that needs least, the smallest GPU, the advice) is
answered there from that one workload. Nothing here reads the environment, finds an engine,
starts a process or searches a capacity: `conf=None` is the environment as torch reads it,
decided in Rust.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from cachalot import _native

from . import gpus

# Capture's exit status for each verdict, decided in Rust (`Prediction::exit_status`).
EXIT_FITS, EXIT_DOES_NOT_FIT, EXIT_TIGHT = 0, 1, 4


class AnalysisError(_native.CachalotError):
    """Kept for capture's callers: the native errors (`CachalotError` and its subclasses)
    are what `predict` raises."""


class Prediction:
    """What `cachalot capture` answers about a captured job: `to_dict()` is what
    `capture --json` prints (less torch's version, the exit code and the seconds, which only
    the launcher knows), `report()` the text, `exit_status` capture's status for the verdict.
    Every key of the dict is also an attribute (`p.peak_reserved`, `p.verdict`, …)."""

    def __init__(self, data: dict[str, Any], text: str, exit_status: int) -> None:
        self._data = data
        self._text = text
        self.exit_status = exit_status

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_data"][name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def fits(self) -> bool:
        """The verdict is "fits" (not "tight", not "does not fit")."""
        return bool(self._data["fits"])

    @property
    def verdict(self) -> str:
        """The verdict: "fits", "tight" or "does not fit"."""
        return str(self._data["verdict"])

    def to_dict(self) -> dict[str, Any]:
        return copy.deepcopy(self._data)

    def report(self) -> str:
        return self._text

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"<Prediction {self.verdict} on {self._data['gpu']}>"


def _gpu_key(gpu: gpus.Gpu | str) -> str:
    return gpu if isinstance(gpu, str) else gpu.key


def predict(
    trace: str | list[str],
    gpu: gpus.Gpu | str,
    conf: str | None = None,
    reserve: int | None = None,
    warnings: list[str] | None = None,
    torch_stats: dict[str, int] | None = None,
    *,
    headroom: int | None = None,
    outside: list[dict[str, Any]] | None = None,
    threads: int | None = None,
) -> Prediction:
    """Answer the capture's questions for `trace` (a path, or a list with one per rank) on
    `gpu`.

    `conf` None means the environment, read as torch reads it. `reserve` replaces the model
    of the memory outside torch's allocator with an exact total per rank; `headroom` keeps
    more free on top of it. `outside`, one dict per rank, says what each does outside torch
    (`gpu`, `extra_contexts`, `module_loading`, `nccl`: a list of `{"ranks": N,
    "buffsize": BYTES, "channels": N}`).
    """
    traces = [trace] if isinstance(trace, str) else list(trace)
    data, text, status = _native.predict(
        traces,
        _gpu_key(gpu),
        conf=conf,
        reserve=reserve,
        headroom=headroom,
        outside=None if outside is None else json.dumps(outside),
        threads=threads,
        warnings=list(warnings or []),
        torch_stats=dict(torch_stats or {}),
    )
    return Prediction(json.loads(data), text, status)


def replay(trace: str, capacity: int, conf: str | None) -> dict[str, Any]:
    """`cachalot replay --json` of `trace` at `capacity` under `conf`, in this process."""
    return json.loads(_native.replay(trace, conf=conf, capacity=capacity, explain=False)[0])
