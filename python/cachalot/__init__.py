"""cachalot: PyTorch's CUDA caching allocator rebuilt in Rust, and the tool that tells you
which `PYTORCH_CUDA_ALLOC_CONF` makes your job fit.

    cachalot record -o snap.pickle -- python train.py     # a snapshot of your job
    cachalot tune snap.pickle --capacity 24G               # the config to set

Importing this package never imports torch; `cachalot.torch` and `cachalot.recording` do.
"""

from cachalot import capture
from cachalot._native import __version__
from cachalot.api import (
    ArgumentError,
    CachalotError,
    CompareResult,
    Config,
    ConfigError,
    ConfigOption,
    ExplainResult,
    MinCapacityResult,
    ReplayResult,
    TraceError,
    TuneResult,
    compare,
    convert,
    explain,
    min_capacity,
    parse_config,
    replay,
    tune,
)
from cachalot.record import recording

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
    "__version__",
    "capture",
    "compare",
    "convert",
    "explain",
    "min_capacity",
    "parse_config",
    "recording",
    "replay",
    "tune",
]
