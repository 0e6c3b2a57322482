"""torch.compile under capture: Inductor and Triton compile for the GPU being pretended.

The capture runtime gives Triton what its driver needs (``runtime/cudart_modules.cpp``: module
loading, launches, occupancy, pointer attributes, a deterministic clock for the autotuning
benchmarks), so compiled graphs run on it as on a GPU: Inductor generates its kernels for the
GPU's compute capability, SM count and shared memory (the runtime reports the GPU table's
figures), Triton compiles them with its own ``ptxas``, the kernels launch and compute nothing,
and every buffer the compiled graph uses is allocated through torch's caching allocator, as
on a GPU. The prediction is then the compiled program's memory.

Where a graph cannot be compiled here, Dynamo is told to fall back to eager for that frame
(``suppress_errors``) instead of failing the program, and the report says which code ran
eagerly, why, and that its memory is eager memory. A ``torch.compile`` wrapper that never runs
(bitsandbytes' import-time ones) is not reported at all.

``env(runtime)`` is what the launcher adds to the captured process's environment;
``CompileWatch`` runs inside it (``_boot``).
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import threading
from collections import Counter
from pathlib import Path

from ._loaded import runtime_cudart

# Dynamo's logger for a frame it could not compile (the record names the frame and the error).
_CONVERT_FRAME = "torch._dynamo.convert_frame"


def env(runtime: Path) -> dict[str, str]:
    """Environment variables that let Triton find the runtime's libcuda.so.1 (Triton looks
    for the real library with ``ldconfig -p`` otherwise, and links its launcher with it)."""
    return {"TRITON_LIBCUDA_PATH": str(runtime)}


def summary_line(summary: dict) -> str:
    """One line for the text report: what Inductor compiled and the runtime ran."""

    def n(count: int, what: str, plural: str = "s") -> str:
        return f"{count} {what}{'' if count == 1 else plural}"

    eager = len(summary.get("failures") or {})
    return (
        f"torch.compile: {n(summary['graphs_compiled'], 'graph')} compiled by Inductor, "
        f"{n(summary['triton_modules_loaded'], 'Triton kernel')} loaded, "
        f"{n(summary['triton_launches'], 'launch', 'es')}"
        + (f"; {n(eager, 'frame')} ran eagerly (see the warnings)" if eager else "")
    )


def _caller_site() -> str:
    """file:line of the code that called torch.compile (the first frame outside this file)."""
    f = sys._getframe(2)
    while f is not None and f.f_code.co_filename == __file__:
        f = f.f_back
    if f is None:
        return "<unknown>"
    return f"{f.f_code.co_filename.split('site-packages/')[-1]}:{f.f_lineno}"


class _FailureLog(logging.Handler):
    """Collects the frames Dynamo could not compile and fell back to eager for."""

    def __init__(self, watch: CompileWatch):
        super().__init__(logging.WARNING)
        self.watch = watch

    def emit(self, record: logging.LogRecord) -> None:
        try:
            lines = record.getMessage().strip().splitlines()
            where = next((ln for ln in lines if ln.startswith("WON'T CONVERT")), lines[0])
            where = where.replace("WON'T CONVERT", "").strip()
            err = record.exc_info[1] if record.exc_info else None
            # Dynamo wraps a backend's error (BackendCompilerFailed): name the one inside
            err = getattr(err, "inner_exception", None) or getattr(err, "__cause__", None) or err
            text = str(err).strip() if err is not None else ""
            why = (
                f"{type(err).__name__}: {text.splitlines()[0][:300]}"
                if text
                else (lines[1] if len(lines) > 1 else "")
            )
            self.watch.failed(where, why)
        except Exception:  # noqa: BLE001 (a log handler must never raise into Dynamo)
            pass


class CompileWatch:
    """Counts what torch.compile did in the captured process: the call sites, the graphs
    Inductor compiled, the Triton kernels launched, and the frames it could not compile."""

    def __init__(self, torch):
        self.torch = torch
        self.calls: Counter = Counter()  # "site (mode)" -> times torch.compile was called there
        self.failures: Counter = Counter()  # "frame: error" -> times
        self._lock = threading.Lock()
        self._configured = False

    def install(self) -> None:
        torch = self.torch
        orig = torch.compile
        watch = self

        def compile(*args, **kwargs):
            watch._called(_caller_site(), kwargs.get("mode") or "default")
            return orig(*args, **kwargs)

        compile.__wrapped__ = orig
        compile.__doc__ = orig.__doc__
        torch.compile = compile

    def _called(self, site: str, mode: str) -> None:
        with self._lock:
            self.calls[f"{site} (mode={mode})"] += 1
            if self._configured:
                return
            self._configured = True
        import torch._dynamo  # torch.compile imports it anyway

        if "TORCHDYNAMO_SUPPRESS_ERRORS" not in os.environ:
            # a frame that cannot compile here runs eagerly (and is reported) instead of
            # failing the program
            torch._dynamo.config.suppress_errors = True
        logging.getLogger(_CONVERT_FRAME).addHandler(_FailureLog(self))

    def failed(self, where: str, why: str) -> None:
        with self._lock:
            self.failures[f"{where}: {why}" if why else where] += 1

    def summary(self) -> dict:
        """What the sidecar records under "compile"."""
        graphs = 0
        if "torch._dynamo" in sys.modules:
            from torch._dynamo.utils import counters

            graphs = int(counters["stats"]["unique_graphs"])
        modules = launches = 0
        # the capture runtime's counters (runtime/cudart_modules.cpp)
        counters_of = getattr(runtime_cudart(), "fakecuda_module_counters", None)
        if counters_of is not None:
            m, n = ctypes.c_uint64(), ctypes.c_uint64()
            counters_of(ctypes.byref(m), ctypes.byref(n))
            modules, launches = m.value, n.value
        return {
            "calls": dict(self.calls),
            "graphs_compiled": graphs,
            "triton_modules_loaded": modules,
            "triton_launches": launches,
            "failures": dict(self.failures),
        }

    def warnings(self) -> list[str]:
        return [
            f"torch.compile could not compile {what} here ({n}x): that frame ran eagerly, so its "
            "memory in this prediction is eager memory (Inductor's fused kernels usually save less "
            "for backward)"
            for what, n in self.failures.items()
        ]
