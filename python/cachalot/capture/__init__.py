"""Predict a PyTorch program's GPU memory on a machine without a GPU.

Two ways in:

* ``cachalot capture [-o TRACE] [--gpu NAME] -- python train.py ARGS…`` runs
  the program unchanged on the capture runtime and prints the answer.
* ``with cachalot.capture(gpu="h100") as cap: …`` around a training step or a
  ``generate`` call, then ``print(cap.prediction.report())``.

The capture runtime is a CUDA stack that computes nothing (libcudart, libcuda,
NVML, cuBLAS, cuBLASLt, cuDNN written from NVIDIA's public headers, compiled
at first use). torch runs its real CUDA code on it, so its own dispatch,
autograd, autocast, kernel selection and caching allocator produce the same
allocation stream as on the GPU being predicted; that stream is then replayed
by cachalot's allocator. Importing this module imports neither torch nor the
runtime; only entering a capture does.
"""

from __future__ import annotations

import ctypes
import os
import sys
import tempfile

from . import _env, analysis, build, gpus
from ._loaded import runtime_cudart
from .analysis import Prediction

__all__ = ["CaptureError", "Prediction", "capture", "main"]


class CaptureError(RuntimeError):
    """A capture cannot start or finish; the message says why and what to do."""


def _runtime_loaded() -> bool:
    return runtime_cudart() is not None


def _load_runtime_in_process(gpu: gpus.Gpu) -> None:
    """Load the capture runtime before torch, so that torch binds to it.

    Each library carries the real one's soname, so when torch's libraries ask
    for libcudart.so.13 or .12 (and the rest) the loader reuses the copy already
    loaded here instead of the one on torch's RPATH.
    """
    from .launch import runtime_env

    runtime = build.ensure_runtime(sys.executable)
    env = runtime_env(runtime, gpu)
    env.pop("LD_PRELOAD")
    os.environ.update(env)
    for lib in build.runtime_libraries(runtime):
        ctypes.CDLL(str(runtime / lib), mode=ctypes.RTLD_GLOBAL)


class capture:
    """Record the allocation stream of the enclosed code as on `gpu`, and predict its memory.

    Under ``cachalot capture -- python …`` the runtime is already in place.
    Otherwise it is loaded on entry, which must come before ``import torch``
    (torch binds to its CUDA libraries when imported); from then on CUDA work in
    this process is not computed. On a machine with a real GPU and torch
    already imported, the stream is recorded on that GPU instead.

    The prediction covers the process from its first CUDA allocation to the
    end of the block (memory allocated before the block, such as the model's
    weights, is part of it). After the block: ``cap.prediction`` (peaks, fit,
    tuned config, smallest GPU), ``cap.trace`` (the snapshot file).
    """

    def __init__(
        self,
        gpu: str = "h100",
        output: str | None = None,
        conf: str | None = None,
        reserve: int | None = None,
        report: bool = True,
    ):
        self.gpu = gpus.lookup(gpu)
        self.output, self.conf, self.reserve, self.print_report = output, conf, reserve, report
        self.prediction: Prediction | None = None
        self.trace: str | None = None
        self._reads = None

    def __enter__(self) -> capture:  # noqa: PYI034 (a plain class, no subclasses)
        launched = os.environ.get(_env.ENV_ACTIVE)  # history has run since CUDA's init
        if launched:
            if launched != self.gpu.key:
                raise CaptureError(
                    f"this process runs as {os.environ[_env.ENV_ACTIVE]!r} (cachalot capture "
                    f"--gpu); capture(gpu={self.gpu.key!r}) cannot change that"
                )
            import torch
        elif "torch" not in sys.modules:
            try:
                _load_runtime_in_process(self.gpu)
            except build.BuildError as e:
                raise CaptureError(str(e)) from None
            import torch

            from .hostreads import HostReads

            self._reads = HostReads()
            self._reads.install(torch)
        else:
            import torch

            if not _runtime_loaded() and not torch.cuda.is_available():
                raise CaptureError(
                    "torch was imported before cachalot.capture() and this machine has no GPU, so torch is "
                    "bound to the real CUDA libraries: enter the capture before `import torch`, or run the "
                    "script under `cachalot capture -- python SCRIPT`"
                )
        self._torch = torch
        if not launched:
            # at CUDA's lazy init (now, if it happened already): history enabled earlier is lost
            from .._recorder import history_on

            torch.cuda._lazy_call(
                lambda: history_on(
                    torch, self, max_entries=_env.DEFAULT_MAX_ENTRIES, stacks="python"
                )
            )
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        torch = self._torch
        from .values import clean_frames  # the stacks without the value tracking's frames

        snap = clean_frames(torch.cuda.memory._snapshot())
        stats = torch.cuda.memory_stats()
        out = self.output or os.path.join(
            tempfile.mkdtemp(prefix="cachalot-capture-"), "capture.pickle"
        )
        import pickle

        from .._recorder import write_output

        write_output(out, pickle.dumps(snap))
        self.trace = out
        warnings = self._reads.warnings() if self._reads else []
        self.prediction = analysis.predict(
            out,
            self.gpu,
            conf=self.conf,
            reserve=self.reserve,
            warnings=warnings,
            torch_stats={
                k: stats.get(k, 0) for k in ("allocated_bytes.all.peak", "reserved_bytes.all.peak")
            },
        )
        if self.print_report and exc_type is None:
            print(self.prediction.report(), file=sys.stderr)
        return False


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``cachalot capture``."""
    from .launch import main as launch_main

    return launch_main(argv)


class _CallableModule(type(sys)):
    """Lets ``cachalot.capture(gpu=…)`` be called while ``cachalot.capture.gpus`` stays a module path."""

    def __call__(self, *args, **kwargs) -> capture:
        return capture(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
