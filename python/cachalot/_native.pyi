# Types of `cachalot._native`, the Rust module (crates/python). Its functions return what the
# CLI's `--json` prints as a JSON string, the text the CLI prints, and for tune/compare the HTML
# report as a string ("" when not asked for).
from os import PathLike
from typing import final

__version__: str
__all__ = [
    "ArgumentError",
    "CachalotError",
    "ConfigError",
    "GpuRow",
    "TraceError",
    "__version__",
    "check_output",
    "cli_main",
    "cli_subcommands",
    "compare",
    "convert",
    "env_conf",
    "explain",
    "gpu_alias_note",
    "gpu_key",
    "gpu_table",
    "gpus",
    "parse_capacity",
    "parse_config",
    "parse_size",
    "predict",
    "replay",
    "smallest_gpu",
    "torch_release",
    "torch_stats_absent",
    "tune",
    "write_output",
]

class CachalotError(Exception): ...
class ConfigError(CachalotError): ...
class TraceError(CachalotError): ...
class ArgumentError(CachalotError, ValueError): ...

@final
class GpuRow:
    key: str
    names: list[str]
    name: str
    device_name: str
    memory: int
    source: str
    cc_major: int
    cc_minor: int
    sms: int
    l2: int
    smem_per_sm: int
    smem_optin: int
    nominal: int
    estimate: bool
    evidence: str
    arch: str

def cli_main(argv: list[str]) -> int: ...
def cli_subcommands() -> list[str]: ...
def replay(
    trace: str | PathLike[str] | None = None,
    conf: str | None = None,
    capacity: int | None = None,
    device: int | None = None,
    ignore_streams: bool = False,
    explain: bool = True,
    torch: str | None = None,
) -> tuple[str, str, int]: ...
def tune(
    traces: list[str],
    capacity: int | None = None,
    min_capacity: bool = False,
    top: int = 8,
    threads: int | None = None,
    costs: list[str] = ...,
    html: bool = False,
    gpu: str | None = None,
    headroom: int | None = None,
    device: int | None = None,
    all_devices: bool = False,
    torch: str | None = None,
) -> tuple[str, str, str]: ...
def compare(
    traces: list[str],
    confs: list[str],
    capacity: int | None = None,
    min_capacity: bool = True,
    threads: int | None = None,
    costs: list[str] = ...,
    html: bool = False,
    gpu: str | None = None,
    headroom: int | None = None,
    device: int | None = None,
    all_devices: bool = False,
    torch: str | None = None,
) -> tuple[str, str, str]: ...
def explain(
    snapshot: str | PathLike[str],
    device: int | None = None,
    capacity: int | None = None,
    replay: bool = True,
) -> tuple[str, str]: ...
def convert(
    input: str | PathLike[str], output: str | PathLike[str], device: int | None = None
) -> int: ...
def parse_config(
    conf: str | None = None, cachalot: str | None = None
) -> tuple[str, list[tuple[str, str, str, str]], list[str]]: ...
def parse_size(s: str) -> int: ...
def env_conf() -> str: ...
def parse_capacity(s: str) -> int: ...
def torch_release(version: str) -> str: ...
def torch_stats_absent(version: str) -> list[str]: ...
def gpus() -> list[GpuRow]: ...
def gpu_key(name: str) -> str: ...
def smallest_gpu(need: int) -> str | None: ...
def gpu_table() -> str: ...
def gpu_alias_note(name: str) -> str | None: ...
def write_output(path: str | PathLike[str], data: bytes) -> None: ...
def check_output(path: str | PathLike[str]) -> str: ...
def predict(
    traces: list[str],
    gpu: str,
    conf: str | None = None,
    reserve: int | None = None,
    headroom: int | None = None,
    outside: str | None = None,
    threads: int | None = None,
    warnings: list[str] = ...,
    torch_stats: dict[str, int] = ...,
) -> tuple[str, str, int]: ...
