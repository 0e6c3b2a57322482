"""The GPUs a capture can pretend to be, and which is the smallest that fits.

A profile carries what changes the allocation stream torch produces on that
GPU: the compute capability (scaled-dot-product attention's backend choice,
cuBLAS workspace sizes), the SM count, L2 size and shared memory per SM
(kernel and split choices), and the memory size the program is told. Memory
sizes are the totals `nvidia-smi` lists for the board, in MiB; the CUDA
context and library handles take a few hundred MiB of that outside the
caching allocator, which a capture cannot see (see `context_reserve`).
"""

from __future__ import annotations

from dataclasses import dataclass

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
            _g("t4", "Tesla T4", 15360, (7, 5), 40, 4, 64, 64),
            _g("v100-16gb", "Tesla V100-SXM2-16GB", 16384, (7, 0), 80, 6, 96, 96),
            _g("a10g", "NVIDIA A10G", 23028, (8, 6), 80, 6, 100, 99),
            _g("l4", "NVIDIA L4", 23034, (8, 9), 58, 48, 100, 99),
            _g("rtx4090", "NVIDIA GeForce RTX 4090", 24564, (8, 9), 128, 72, 100, 99),
            _g("rtx3090", "NVIDIA GeForce RTX 3090", 24576, (8, 6), 82, 6, 100, 99),
            _g("v100-32gb", "Tesla V100-SXM2-32GB", 32768, (7, 0), 80, 6, 96, 96),
            _g("a100-40gb", "NVIDIA A100-SXM4-40GB", 40960, (8, 0), 108, 40, 164, 163),
            _g("l40s", "NVIDIA L40S", 46068, (8, 9), 142, 96, 100, 99),
            # The H100 profile is the one shared/fakegpu's ground truth runs use
            # (cc 9.0, 132 SMs, 48 MiB L2 as that runtime reports it).
            _g("h100", "NVIDIA H100 80GB HBM3", 81559, (9, 0), 132, 48, 228, 227),
            _g("h100-pcie", "NVIDIA H100 PCIe", 81559, (9, 0), 114, 48, 228, 227),
            _g("a100-80gb", "NVIDIA A100-SXM4-80GB", 81920, (8, 0), 108, 40, 164, 163),
            _g("h200", "NVIDIA H200", 143771, (9, 0), 132, 48, 228, 227),
            _g("b200", "NVIDIA B200", 183359, (10, 0), 148, 126, 228, 227),
        ),
        key=lambda g: (g.memory, g.key),
    )
)

ALIASES = {
    "a100": "a100-80gb",
    "v100": "v100-32gb",
    "h100-sxm": "h100",
    "4090": "rtx4090",
    "3090": "rtx3090",
}


class UnknownGpu(ValueError):
    pass


def lookup(name: str) -> Gpu:
    """A profile by key (`h100`, `a100-40gb`, …) or alias, case-insensitive."""
    k = name.strip().lower()
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
