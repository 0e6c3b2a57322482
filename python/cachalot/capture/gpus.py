"""The GPUs a capture can pretend to be, and which is the smallest that fits.

A profile carries what changes the allocation stream torch produces on that
GPU: the compute capability (scaled-dot-product attention's backend choice,
cuBLAS workspace sizes), the SM count, L2 size and shared memory per SM (kernel
and split choices, from NVIDIA's spec sheets), and the memory size the program
is told. The memory sizes are those of `cachalot tune --gpu` (crates/advisor's
table, where each one's source is named: CUDA's total where published, else
NVML's); tests/python/test_capture.py checks that the two tables agree. The
CUDA context and library handles take some of that memory outside the caching
allocator, which a capture cannot see: `--reserve` takes it off.
"""

from __future__ import annotations

from dataclasses import dataclass

KiB = 1 << 10
MiB = 1 << 20


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


def _g(key, name, mib, cc, sms, l2_mib, smem_kib, optin_kib):
    return Gpu(key, name, mib * MiB, cc, sms, int(l2_mib * MiB), smem_kib * 1024, optin_kib * 1024)


# Ordered by memory, then name: `smallest_fitting` walks it in order.
GPUS: tuple[Gpu, ...] = tuple(
    sorted(
        (
            Gpu("t4", "Tesla T4", 15_843_721_216, (7, 5), 40, 4 * MiB, 64 * KiB, 64 * KiB),
            _g("a10", "NVIDIA A10", 23028, (8, 6), 72, 6, 100, 99),
            _g("l4", "NVIDIA L4", 23034, (8, 9), 58, 48, 100, 99),
            Gpu(
                "a100-40gb",
                "NVIDIA A100-SXM4-40GB",
                42_405_855_232,
                (8, 0),
                108,
                40 * MiB,
                164 * KiB,
                163 * KiB,
            ),
            _g("l40s", "NVIDIA L40S", 46068, (8, 9), 142, 96, 100, 99),
            # The H100 profile is the one shared/fakegpu's ground truth runs use
            # (cc 9.0, 132 SMs, 48 MiB L2 as that runtime reports it).
            _g("h100", "NVIDIA H100 80GB HBM3", 81559, (9, 0), 132, 48, 228, 227),
            _g("a100-80gb", "NVIDIA A100-SXM4-80GB", 81920, (8, 0), 108, 40, 164, 163),
            _g("h200", "NVIDIA H200", 143771, (9, 0), 132, 48, 228, 227),
        ),
        key=lambda g: (g.memory, g.key),
    )
)

ALIASES = {"a100": "a100-40gb", "a10g": "a10", "h100-80gb": "h100", "h200-141gb": "h200"}


class UnknownGpu(ValueError):
    pass


def lookup(name: str) -> Gpu:
    """A profile by key (`h100`, `a100-40gb`, …) or alias, case-insensitive."""
    k = name.strip().lower().replace("_", "-").replace(" ", "-").removeprefix("nvidia-")
    k = ALIASES.get(k, k)
    for g in GPUS:
        if g.key == k:
            return g
    raise UnknownGpu(
        f"unknown GPU {name!r}; known: {', '.join(g.key for g in GPUS)} (aliases: {', '.join(ALIASES)})"
    )


def smallest_fitting(need: int) -> Gpu | None:
    """The GPU with the least memory that still has `need` bytes, or None."""
    for g in GPUS:
        if g.memory >= need:
            return g
    return None
