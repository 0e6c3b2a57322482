"""One GPU table, in Rust: `cachalot.capture.gpus` is a view of `_native.gpus()` (the table
`cachalot tune --gpu` reads), keeping the profile data the capture runtime was given before."""

import re
from pathlib import Path

import pytest

import cachalot
from cachalot import _native
from cachalot.capture import gpus

PACKAGE = Path(cachalot.__file__).parent


def test_the_capture_profiles_are_the_native_table():
    rows = _native.gpus()
    assert [g.key for g in gpus.GPUS] == [r.key for r in rows]
    assert [g.memory for g in gpus.GPUS] == sorted(g.memory for g in gpus.GPUS)
    # The profile values the capture runtime had before the table moved to Rust.
    h100 = gpus.lookup("h100")
    assert h100.env() == {
        "FAKE_CUDA_DEVICE_NAME": "NVIDIA H100 80GB HBM3",
        "FAKE_CUDA_TOTAL": str(81559 << 20),
        "FAKE_CUDA_CC": "9.0",
        "FAKE_CUDA_SMS": "132",
        "FAKE_CUDA_L2": str(48 << 20),
        "FAKE_CUDA_SMEM_SM": str(228 << 10),
        "FAKE_CUDA_SMEM_OPTIN": str(227 << 10),
    }
    assert gpus.lookup("T4").memory == 15_843_721_216
    assert gpus.get("nvidia_a10g") == gpus.lookup("a10")
    assert gpus.ALIASES["a100"] == "a100-40gb"
    assert all(r.source for r in rows)


def test_unknown_gpus_and_smallest_fitting():
    with pytest.raises(gpus.UnknownGpu, match=r"'k80'.*known: t4"):
        gpus.lookup("k80")
    assert gpus.smallest_fitting(14 << 30).key == "t4"
    assert gpus.smallest_fitting(1 << 50) is None


def test_no_python_file_holds_a_gpu_table():
    # A table would carry memory sizes: no CUDA or NVML total appears in the package's code.
    totals = {str(g.memory) for g in gpus.GPUS}
    totals |= {f"{g.memory >> 20:_}" for g in gpus.GPUS} | {str(g.memory >> 20) for g in gpus.GPUS}
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        found = [t for t in totals if re.search(rf"\b{re.escape(t)}\b", text)]
        assert not found, (path, found)
