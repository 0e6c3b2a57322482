"""The Python API: the same engine and the same numbers as the `cachalot` commands.

Every function takes a trace as a path (RMM CSV, torch snapshot pickle or JSON, plain or gzip),
or the dict `torch.cuda.memory._snapshot()` returns, or None for the bundled GPT-2 trace.
The work runs in the native module with the GIL released. Results are dataclasses with the
numbers the CLI prints (`data`: what `--json` prints), `to_dict()`, the CLI's text as `str()`,
and `_repr_html_` for Jupyter.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import pickle
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Union

from cachalot import _native
from cachalot._native import ArgumentError, CachalotError, ConfigError, TraceError

Trace = Union[str, "os.PathLike[str]", dict, None]
Size = Union[int, str]

__all__ = [
    "ArgumentError",
    "CachalotError",
    "CompareResult",
    "Config",
    "ConfigError",
    "ConfigOption",
    "ExplainResult",
    "MinCapacityResult",
    "ReplayResult",
    "TraceError",
    "TuneResult",
    "compare",
    "convert",
    "explain",
    "min_capacity",
    "parse_config",
    "replay",
    "tune",
]


@contextlib.contextmanager
def _path(trace: Trace) -> Iterator[str | None]:
    """A path for `trace`: itself, or a temporary pickle of a snapshot dict."""
    if trace is None:
        yield None
    elif isinstance(trace, dict):
        if "segments" not in trace or "device_traces" not in trace:
            raise TraceError(
                "a snapshot dict needs 'segments' and 'device_traces' (what "
                f"torch.cuda.memory._snapshot() returns); got keys {sorted(trace)[:8]}"
            )
        fd, tmp = tempfile.mkstemp(prefix="cachalot-snapshot-", suffix=".pickle")
        try:
            with os.fdopen(fd, "wb") as f:
                pickle.dump(trace, f)
            yield tmp
        finally:
            os.unlink(tmp)
    else:
        try:
            path = os.fspath(trace)
        except TypeError:
            raise ArgumentError(
                f"trace={trace!r}: a trace is a path, a snapshot dict or None"
            ) from None
        yield path


@contextlib.contextmanager
def _paths(traces: Trace | list[Trace]) -> Iterator[list[str]]:
    """Paths for one trace or a list of them (the ranks of one job); [] for the bundled one."""
    items = traces if isinstance(traces, (list, tuple)) else [traces]
    with contextlib.ExitStack() as stack:
        paths = [stack.enter_context(_path(t)) for t in items]
        yield [p for p in paths if p is not None]


def _size(value: Size | None, what: str) -> int | None:
    """A size argument: bytes as an int, or a string the CLI's `--capacity` reads ("24G")."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ArgumentError(
            f"{what}={value!r}: a size is a whole number of bytes or a string such as '24G'"
        )
    if isinstance(value, int):
        if not 0 <= value < 1 << 64:
            raise ArgumentError(f"{what}={value}: a size is between 0 and 2**64 - 1 bytes")
        return value
    try:
        return _native.parse_capacity(value)
    except ArgumentError as e:
        raise ArgumentError(f"{what}: {e}") from None


def _count(value: int | None, what: str, least: int = 0) -> int | None:
    """A count argument (threads, top, device): a whole number, at least `least`."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentError(f"{what}={value!r}: needs a whole number")
    if not least <= value < 1 << 32:
        raise ArgumentError(f"{what}={value}: needs a whole number from {least} to 2**32 - 1")
    return value


def _text(value: str | None, what: str) -> str | None:
    """A configuration or name argument: a string, or None where None is allowed."""
    if value is not None and not isinstance(value, str):
        raise ArgumentError(f"{what}={value!r}: expected a string (or None)")
    return value


def _warn_torch(data: dict[str, Any]) -> None:
    """Each decision of the release the replays did not make, as a Python warning."""
    for w in data.get("torch_warnings", []):
        warnings.warn(w, stacklevel=3)


def _costs(cost: dict[str, float] | None) -> list[str]:
    return [f"{k}={v}" for k, v in (cost or {}).items()]


@dataclass
class _Result:
    data: dict[str, Any]
    text: str = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The numbers, as `cachalot ... --json` prints them."""
        return json.loads(json.dumps(self.data))

    def __str__(self) -> str:
        return self.text

    def _repr_html_(self) -> str:
        return f"<pre>{html.escape(self.text)}</pre>"


@dataclass
class ReplayResult(_Result):
    """`cachalot replay`: the statistics at the end, peaks, OOMs, device calls."""

    exit_status: int = 0

    @property
    def ooms(self) -> int:
        return int(self.data["num_ooms"])

    @property
    def memory_stats(self) -> dict[str, int]:
        """torch's `memory_stats()` keys at the end of the replay."""
        return self.data["memory_stats"]


@dataclass
class _Advice(_Result):
    html: str = field(default="", repr=False)

    def _repr_html_(self) -> str:
        return self.html or super()._repr_html_()


@dataclass
class TuneResult(_Advice):
    """`cachalot tune`: the ranking and the configuration to set."""

    @property
    def recommended(self) -> str | None:
        """The configuration to set ("" = the default); None when nothing tried fits."""
        return self.data["recommended"]

    @property
    def fits(self) -> bool:
        return bool(self.data["fits"])

    @property
    def best(self) -> str:
        """The best configuration tried, whether or not it fits."""
        return self.data["best"]

    @property
    def ranking(self) -> list[dict[str, Any]]:
        return self.data["ranking"]


@dataclass
class MinCapacityResult(_Advice):
    """`cachalot tune --min-capacity`: the smallest device the trace fits on."""

    @property
    def capacity(self) -> int:
        return int(self.data["min_capacity"])


@dataclass
class CompareResult(_Advice):
    """`cachalot compare`: one row per configuration."""

    @property
    def rows(self) -> list[dict[str, Any]]:
        return self.data["rows"]


@dataclass
class ExplainResult(_Result):
    """`cachalot explain`: why a snapshot ran out of memory, and what avoids it."""


@dataclass
class ConfigOption:
    option: str
    value: str
    default: str
    meaning: str


@dataclass
class Config:
    """`cachalot config`: a configuration as torch 2.15 reads it."""

    canonical: str
    options: list[ConfigOption]
    warnings: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "canonical": self.canonical,
            "options": [vars(o) for o in self.options],
            "warnings": list(self.warnings),
        }

    def __getitem__(self, option: str) -> str:
        for o in self.options:
            if o.option == option:
                return o.value
        raise KeyError(option)

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td>{html.escape(o.option)}</td><td>{html.escape(o.value)}</td>"
            f"<td>{html.escape(o.default)}</td><td>{html.escape(o.meaning)}</td></tr>"
            for o in self.options
        )
        return (
            "<table><tr><th>option</th><th>value</th><th>default</th><th>meaning</th></tr>"
            f"{rows}</table>"
        )


def replay(
    trace: Trace = None,
    *,
    conf: str | None = None,
    capacity: Size | None = None,
    device: int | None = None,
    ignore_streams: bool = False,
    explain: bool = True,
    torch: str | None = None,
) -> ReplayResult:
    """Replays `trace` through the allocator on a simulated GPU (`cachalot replay --json`).
    `torch`: the release whose decisions to make where releases differ ("2.9", "2.9.1+cu128";
    default: the release the trace's STEM.device.json recorded, else 2.15); a configuration
    that release rejects raises ConfigError, and what is not replayed as it decides is a
    warning (`to_dict()["torch_warnings"]`)."""
    with _path(trace) as p:
        data, text, status = _native.replay(
            p,
            _text(conf, "conf"),
            _size(capacity, "capacity"),
            _count(device, "device"),
            ignore_streams,
            explain,
            _text(torch, "torch"),
        )
    result = ReplayResult(json.loads(data), text, status)
    _warn_torch(result.data)
    return result


def tune(
    traces: Trace | list[Trace] = None,
    capacity: Size | None = None,
    *,
    gpu: str | None = None,
    headroom: Size | None = None,
    device: int | None = None,
    all_devices: bool = False,
    top: int = 8,
    threads: int | None = None,
    cost: dict[str, float] | None = None,
    html: bool = True,
    torch: str | None = None,
) -> TuneResult:
    """Which PYTORCH_CUDA_ALLOC_CONF for `traces` on a device of `capacity` (`cachalot tune`).
    `gpu`: a GPU name instead of a capacity; without either, a snapshot's recorded capacity.
    `html`: also build the HTML report (shown inline in Jupyter).
    `torch`: the release the job runs on ("2.9", "2.9.1+cu128"; default 2.15): only keys and
    values it accepts are recommended, and every replay makes its decisions."""
    with _paths(traces) as ps:
        data, text, page = _native.tune(
            ps,
            _size(capacity, "capacity"),
            False,
            _count(top, "top", 1),
            _count(threads, "threads", 1),
            _costs(cost),
            html,
            gpu,
            _size(headroom, "headroom"),
            _count(device, "device"),
            all_devices,
            _text(torch, "torch"),
        )
    result = TuneResult(json.loads(data), text, page)
    _warn_torch(result.data)
    return result


def min_capacity(
    traces: Trace | list[Trace] = None,
    *,
    device: int | None = None,
    all_devices: bool = False,
    top: int = 8,
    threads: int | None = None,
    cost: dict[str, float] | None = None,
    html: bool = False,
    torch: str | None = None,
) -> MinCapacityResult:
    """The smallest device `traces` fit on, and the configuration to use there
    (`cachalot tune --min-capacity`); `torch` as for `tune`."""
    with _paths(traces) as ps:
        data, text, page = _native.tune(
            ps,
            None,
            True,
            _count(top, "top", 1),
            _count(threads, "threads", 1),
            _costs(cost),
            html,
            None,
            None,
            _count(device, "device"),
            all_devices,
            _text(torch, "torch"),
        )
    result = MinCapacityResult(json.loads(data), text, page)
    _warn_torch(result.data)
    return result


def compare(
    traces: Trace | list[Trace] = None,
    confs: list[str] | tuple[str, ...] = (),
    capacity: Size | None = None,
    *,
    gpu: str | None = None,
    headroom: Size | None = None,
    device: int | None = None,
    all_devices: bool = False,
    min_capacity: bool = True,
    threads: int | None = None,
    cost: dict[str, float] | None = None,
    html: bool = True,
    torch: str | None = None,
) -> CompareResult:
    """Compares configurations on `traces` (`cachalot compare`); the default is always a row.
    `torch`: the release whose decisions every row makes, as for `replay`."""
    if isinstance(confs, str):
        confs = [confs]
    if not isinstance(confs, (list, tuple)):
        raise ArgumentError(f"confs={confs!r}: expected a list of PYTORCH_CUDA_ALLOC_CONF strings")
    for c in confs:
        if not isinstance(c, str):
            raise ArgumentError(f"confs: {c!r} is not a PYTORCH_CUDA_ALLOC_CONF string")
    with _paths(traces) as ps:
        data, text, page = _native.compare(
            ps,
            list(confs),
            _size(capacity, "capacity"),
            min_capacity,
            _count(threads, "threads", 1),
            _costs(cost),
            html,
            gpu,
            _size(headroom, "headroom"),
            _count(device, "device"),
            all_devices,
            _text(torch, "torch"),
        )
    result = CompareResult(json.loads(data), text, page)
    _warn_torch(result.data)
    return result


def explain(
    snapshot: Trace,
    *,
    device: int | None = None,
    capacity: Size | None = None,
    replay: bool = True,
) -> ExplainResult:
    """Why the out-of-memory recorded in a torch snapshot happened (`cachalot explain`)."""
    if snapshot is None:
        raise ArgumentError("explain needs a snapshot (a path or torch.cuda.memory._snapshot())")
    with _path(snapshot) as p:
        data, text = _native.explain(
            p, _count(device, "device"), _size(capacity, "capacity"), replay
        )
    return ExplainResult(json.loads(data), text)


def convert(trace: Trace, output: str | os.PathLike[str], *, device: int | None = None) -> int:
    """Writes any supported input as an RMM CSV trace (`cachalot convert`); returns the
    number of events written."""
    with _path(trace) as p:
        return _native.convert(p, os.fspath(output), _count(device, "device"))


def parse_config(conf: str | None = None, *, cachalot: str | None = None) -> Config:
    """Parses a PYTORCH_CUDA_ALLOC_CONF string as torch 2.15 does (`cachalot config`);
    None reads the environment. Raises ConfigError with torch's message for what torch rejects."""
    conf, cachalot = _text(conf, "conf"), _text(cachalot, "cachalot")
    canonical, rows, warnings = _native.parse_config(conf, cachalot)
    return Config(canonical, [ConfigOption(*r) for r in rows], warnings)
