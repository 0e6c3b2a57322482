"""The GPUs a capture can pretend to be, and which is the smallest that fits.

The table itself is Rust's (crates/app/src/gpus.rs, the same one `cachalot tune --gpu`
reads, each memory figure CUDA's total with its source or its estimate rule; docs/gpus.md),
reached through `_native`; this module only gives it the `Gpu` dataclass form the capture
code uses. A profile carries what changes the allocation stream torch produces on that GPU:
the compute capability, the SM count, L2 size and shared memory per SM, and the memory size
the program is told (CUDA's total, as `torch.cuda.get_device_properties().total_memory`
shows it). The CUDA context and library handles take some of that memory outside the
caching allocator, which a capture cannot see: `--reserve` takes it off.
"""

from __future__ import annotations

from dataclasses import dataclass

from cachalot import _native


@dataclass(frozen=True)
class Gpu:
    key: str
    name: str
    memory: int  # bytes
    cc: tuple[int, int]
    sms: int
    l2: int  # bytes
    smem_per_sm: int
    smem_optin: int
    # Beside the profile: the names it is found by, the size it is sold with, and where the
    # memory figure comes from ("exact", "torch" or "estimate", with `source` saying which).
    names: tuple[str, ...] = ()
    nominal: int = 0
    evidence: str = ""
    source: str = ""

    def env(self) -> dict[str, str]:
        """What the capture runtime reads to look like this GPU."""
        return {
            "FAKE_CUDA_DEVICE_NAME": self.name,
            "FAKE_CUDA_TOTAL": str(self.memory),
            "FAKE_CUDA_CC": f"{self.cc[0]}.{self.cc[1]}",
            "FAKE_CUDA_SMS": str(self.sms),
            "FAKE_CUDA_L2": str(self.l2),
            "FAKE_CUDA_SMEM_SM": str(self.smem_per_sm),
            "FAKE_CUDA_SMEM_OPTIN": str(self.smem_optin),
        }


def _from_native(row: _native.GpuRow) -> Gpu:
    return Gpu(
        row.key,
        row.device_name,
        row.memory,
        (row.cc_major, row.cc_minor),
        row.sms,
        row.l2,
        row.smem_per_sm,
        row.smem_optin,
        tuple(row.names),
        row.nominal,
        row.evidence,
        row.source,
    )


_ROWS = _native.gpus()
# Ordered by memory, then key, as Rust keeps it.
GPUS: tuple[Gpu, ...] = tuple(_from_native(r) for r in _ROWS)
ALIASES: dict[str, str] = {a: r.key for r in _ROWS for a in r.names[1:]}


class UnknownGpu(ValueError):
    pass


def lookup(name: str) -> Gpu:
    """A profile by key (`h100`, `a100-40gb`, …) or alias, case-insensitive."""
    try:
        key = _native.gpu_key(name)
    except _native.ArgumentError as e:
        raise UnknownGpu(str(e)) from None
    return next(g for g in GPUS if g.key == key)


get = lookup


def device_info(gpu: Gpu, alloc_conf: str = "") -> dict:
    """The description of the device a capture ran as, in the form `cachalot record` writes
    beside a snapshot (`STEM.device.json`), so that `cachalot tune --gpu` on the trace knows
    which GPU recorded it."""
    return {
        "devices": [{"index": 0, "name": gpu.name, "total_memory": gpu.memory}],
        "alloc_conf": alloc_conf,
    }


def table_text() -> str:
    """The table for people, as `--gpu list` prints it."""
    return _native.gpu_table()


def alias_note(name: str) -> str | None:
    """What a short name that stands for several cards (`a100`) is taken as, or None."""
    return _native.gpu_alias_note(name)


def smallest_fitting(need: int) -> Gpu | None:
    """The GPU with the least memory that still has `need` bytes, or None."""
    key = _native.smallest_gpu(need)
    return None if key is None else next(g for g in GPUS if g.key == key)
