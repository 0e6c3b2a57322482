"""torch.compile under `cachalot capture`: Inductor really compiles, and the answer is the
compiled run's memory.

compile_workload.py (a tiny nanoGPT: bf16 autocast, fused AdamW) runs under capture with
`torch.compile` in default mode and in mode="reduce-overhead" (CUDA graphs, a private pool).
Each test checks that Inductor generated Triton kernels that the capture runtime loaded and
launched, and that the prediction equals what torch's own caching allocator measured in that
same compiled run (peak allocated within 1 %, reserved within 2 %). Inductor's and Triton's
caches live under ~/.cache/cachalot-compile-tests (never in the clone), so a second run skips
most compile time.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import TORCH_PYTHON, package_env

WORKLOAD = Path(__file__).with_name("compile_workload.py")
CACHE = Path(
    os.environ.get("CACHALOT_COMPILE_CACHE", Path.home() / ".cache/cachalot-compile-tests")
)


def _pct(pred: int, meas: int) -> float:
    return 100.0 * abs(pred - meas) / meas


def _capture_json(
    tmp_path: Path, program: list[str], gpu: str = "h100", extra: dict | None = None
) -> dict:
    """`cachalot capture --json --gpu GPU -- python PROGRAM…` with torch's interpreter; its
    answer, parsed. Skips where torch or the analysis engine is missing."""
    if not TORCH_PYTHON.exists():
        pytest.skip(f"no torch venv at {TORCH_PYTHON} (set CACHALOT_TORCH_PYTHON)")
    env = package_env(extra)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    capture = ["-m", "cachalot", "capture", "-o", str(tmp_path / "trace.pickle"), "--json"]
    p = subprocess.run(
        [str(TORCH_PYTHON), *capture, "--gpu", gpu, "--", str(TORCH_PYTHON), *program],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if p.returncode == 2 and "analysis engine" in p.stderr:
        pytest.skip(p.stderr.strip().splitlines()[-1])
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads(p.stdout)


def _capture(tmp_path: Path, mode: str, steps: int) -> tuple[dict, dict]:
    """compile_workload.py compiled in `mode` under capture: the answer, and what torch's own
    allocator measured in that same run."""
    if TORCH_PYTHON.exists():
        probe = subprocess.run(
            [str(TORCH_PYTHON), "-c", "import torch, triton"], capture_output=True, check=False
        )
        if probe.returncode != 0:
            pytest.skip(f"{TORCH_PYTHON} cannot import torch and triton")
    out = tmp_path / "measured.json"
    env = {
        "COMPILE_OUT": str(out),
        "COMPILE_MODE": mode,
        "COMPILE_STEPS": str(steps),
        "TORCHINDUCTOR_CACHE_DIR": str(CACHE / "inductor"),
        "TRITON_CACHE_DIR": str(CACHE / "triton"),
    }
    answer = _capture_json(tmp_path, [str(WORKLOAD)], extra=env)
    return answer, json.loads(out.read_text())


def _check_compiled(answer: dict, measured: dict) -> None:
    # Inductor compiled the model and the runtime loaded and launched its Triton kernels
    assert measured["graphs"] >= 1, measured
    assert measured["modules_loaded"] >= 5, measured
    assert measured["launches"] >= measured["modules_loaded"], measured
    assert answer["compile"]["graphs_compiled"] == measured["graphs"]
    assert answer["compile"]["triton_modules_loaded"] == measured["modules_loaded"]
    assert not answer["compile"]["failures"], answer["compile"]
    assert not [w for w in answer["warnings"] if "torch.compile" in w], answer["warnings"]
    # the prediction is the compiled run's memory, as torch's own allocator measured it
    assert _pct(answer["peak_allocated"], measured["allocated"]) <= 1.0, (answer, measured)
    assert _pct(answer["peak_reserved"], measured["reserved"]) <= 2.0, (answer, measured)


def test_default_mode_compiles_and_predicts_the_compiled_run(tmp_path):
    answer, measured = _capture(tmp_path, "default", steps=2)
    _check_compiled(answer, measured)


def test_reduce_overhead_captures_cuda_graphs(tmp_path):
    # three steps: cudagraph trees record on the second call and replay from the third
    answer, measured = _capture(tmp_path, "reduce-overhead", steps=3)
    _check_compiled(answer, measured)
    assert measured["graph_launches"] >= 1, measured  # the graphs were replayed
    assert measured["cudagraph_skips"] == 0, measured


UNUSED_WRAPPERS = """
import torch

# as bitsandbytes does at import: compiled helpers that this program never calls
@torch.compile
def _quantize(x):
    return x.round()

_dequantize = torch.compile(lambda x: x * 2, dynamic=True)
_norm = torch.compile(torch.nn.LayerNorm(8))
x = torch.ones(1024, 1024, device="cuda")
y = x @ x
torch.cuda.synchronize()
"""

FAILING_BACKEND = """
import torch

def broken(gm, example_inputs):
    raise RuntimeError("this backend cannot compile here")

def double(x):
    return x * 2

f = torch.compile(double, backend=broken)
y = f(torch.ones(256, 1024, device="cuda"))
torch.cuda.synchronize()
"""


def _capture_code(tmp_path: Path, code: str, gpu: str = "h100", extra: dict | None = None) -> dict:
    return _capture_json(tmp_path, ["-c", code], gpu, extra)


def test_compile_wrappers_that_never_run_are_not_reported(tmp_path):
    answer = _capture_code(tmp_path, UNUSED_WRAPPERS)
    assert not [w for w in answer["warnings"] if "compile" in w], answer["warnings"]
    summary = answer["compile"]
    assert summary["graphs_compiled"] == 0 and not summary["failures"], summary
    # the three call sites are known (for the JSON), with their modes
    assert sorted(summary["calls"]) == [
        "<string>:10 (mode=default)",
        "<string>:5 (mode=default)",
        "<string>:9 (mode=default)",
    ], summary["calls"]
    assert answer["peak_allocated"] >= 2 * (4 << 20)  # the eager program ran: x and y


def test_a_frame_that_cannot_compile_runs_eagerly_and_is_named(tmp_path):
    answer = _capture_code(tmp_path, FAILING_BACKEND)
    warned = [w for w in answer["warnings"] if "torch.compile could not compile" in w]
    assert len(warned) == 1, answer["warnings"]
    assert "double" in warned[0] and "<string>" in warned[0], warned[0]
    assert "RuntimeError: this backend cannot compile here" in warned[0], warned[0]
    assert "eager memory" in warned[0]
    assert len(answer["compile"]["failures"]) == 1
    # the program went on eagerly: the input and its double were allocated
    assert answer["peak_allocated"] >= 2 * 256 * 1024 * 4


SMALL_KERNEL = """
import torch

f = torch.compile(lambda x: (x.sin() + 1).softmax(dim=-1))
y = f(torch.randn(64, 1024, device="cuda"))
torch.cuda.synchronize()
"""


def test_triton_compiles_for_the_gpu_being_pretended(tmp_path):
    # fresh caches, so that every kernel is compiled in this run for this GPU
    caches = {
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
        "TRITON_CACHE_DIR": str(tmp_path / "triton"),
    }
    answer = _capture_code(tmp_path, SMALL_KERNEL, gpu="a100", extra=caches)
    assert answer["compile"]["graphs_compiled"] == 1, answer["compile"]
    assert answer["compile"]["triton_modules_loaded"] >= 1, answer["compile"]
    metas = [
        json.loads(p.read_text())
        for p in (tmp_path / "triton").rglob("*.json")
        if not p.name.startswith("__grp__")
    ]
    archs = {m["target"]["arch"] for m in metas if "target" in m}
    assert archs == {80}, archs  # an A100 is sm_80 (the GPU table's compute capability 8.0)


def test_the_report_line_counts_what_was_compiled_and_what_ran_eagerly():
    from cachalot.capture.compile import summary_line

    one = {"graphs_compiled": 1, "triton_modules_loaded": 1, "triton_launches": 1, "failures": {}}
    assert summary_line(one) == (
        "torch.compile: 1 graph compiled by Inductor, 1 Triton kernel loaded, 1 launch"
    )
    many = dict(one, graphs_compiled=2, triton_launches=6098, failures={"f <string>: E": 1})
    line = summary_line(many)
    assert "2 graphs" in line and "6098 launches" in line, line
    assert line.endswith("; 1 frame ran eagerly (see the warnings)"), line
