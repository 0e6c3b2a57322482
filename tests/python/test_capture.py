"""`cachalot capture`: its predictions against real PyTorch on the team's fake GPU.

The expensive full-size comparison (GPT-2, Llama, BERT, ViT, ResNet, fp32 and
bf16, generate) is scripts/capture/capture_accuracy.py; this checks the same rules on
a small GPT-2 (bf16 autocast, AdamW, two steps, then generate with a KV cache)
so that CI stays quick. Tests that need torch, the fake GPU or the oracle skip
with the reason when those are not set up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PY_SRC = REPO / "python"
sys.path.insert(0, str(PY_SRC))

from cachalot.capture import analysis, build, gpus  # noqa: E402 (after the path above)
from conftest import TORCH_PYTHON, torch_python  # noqa: E402

SHARED = Path(os.environ.get("CACHALOT_SHARED", REPO.parent / "shared"))
TORCH_PY = str(TORCH_PYTHON)
STEP = 64 << 20
EXPANDABLE = "expandable_segments:True"


def _engine() -> None:
    """The engine is in-process (`_native.predict`): it is there when the package imports."""


def _run_capture(args: list[str], env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(PY_SRC), **(env_extra or {}))
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    return subprocess.run(
        [TORCH_PY, "-m", "cachalot", "capture", *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture(scope="module")
def truth(tmp_path_factory):
    """torch's own peaks for the small workload on shared/fakegpu, default and expandable."""
    py = torch_python("transformers")
    fakegpu = SHARED / "fakegpu"
    if not (fakegpu / "run.sh").exists():
        pytest.skip(f"no fake GPU at {fakegpu}")
    build_dir = Path(
        os.environ.get("FAKEGPU_BUILD", os.path.expanduser("~/.cache/cachalot-fakegpu"))
    )
    env = dict(os.environ, PYTHON=py, FAKEGPU_DIR=str(fakegpu), FAKEGPU_BUILD=str(build_dir))
    if not (build_dir / "libcudnn.so.9").exists():
        subprocess.run([str(fakegpu / "build.sh")], env=env, check=True, capture_output=True)
    out = {}
    for name, conf in (("default", None), ("expandable", EXPANDABLE)):
        d = tmp_path_factory.mktemp(f"truth-{name}")
        e = dict(env, CAPTURE_TRUTH_OUT=str(d))
        e.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        if conf:
            e["PYTORCH_CUDA_ALLOC_CONF"] = conf
        p = subprocess.run(
            [str(fakegpu / "run.sh"), str(Path(__file__).with_name("capture_small.py"))],
            env=e,
            capture_output=True,
            text=True,
            check=False,
        )
        assert p.returncode == 0, p.stderr[-3000:]
        out[name] = json.loads((d / "truth.json").read_text())
        out[name]["snapshot"] = str(d / "truth.pickle")
    return out


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    torch_python("transformers")
    _engine()
    d = tmp_path_factory.mktemp("capture")
    p = _run_capture(
        [
            "-o",
            str(d / "small.pickle"),
            "--json",
            "--gpu",
            "h100",
            "--",
            TORCH_PY,
            str(Path(__file__).with_name("capture_small.py")),
        ]
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout)


def _pct(pred: int, meas: int) -> float:
    return 100.0 * abs(pred - meas) / meas


def test_peaks_match_torch_on_the_fake_gpu(truth, captured):
    assert _pct(captured["peak_allocated"], truth["default"]["allocated"]) <= 1.0
    assert _pct(captured["peak_reserved"], truth["default"]["reserved"]) <= 2.0
    exp = analysis.replay(captured["trace"], 1 << 40, EXPANDABLE)["peak"]["reserved_bytes"]
    assert _pct(exp, truth["expandable"]["reserved"]) <= 2.0


def test_min_capacity_matches_torchs_allocator(truth, captured):
    oracle = SHARED / "oracle"
    if not (oracle / "oracle").exists():
        pytest.skip(f"no oracle at {oracle}")
    if subprocess.run([str(oracle / "setup.sh"), "--check"], capture_output=True).returncode:
        pytest.skip(f"the oracle is not set up ({oracle / 'setup.sh'} once; .ci/run does it)")
    sys.path.insert(0, str(REPO / "scripts" / "capture"))
    import capture_accuracy  # bisection with torch's own allocator (shared/oracle)

    true = capture_accuracy.true_min_capacity(
        Path(truth["default"]["snapshot"]), truth["default"]["reserved"]
    )
    pred = captured["min_capacity"]
    assert _pct(pred, true) <= 2.0, (pred, true)
    assert pred >= true - STEP, (pred, true)


def test_the_answer_is_complete_and_consistent(captured):
    assert captured["fits"] is True and captured["num_ooms"] == 0
    assert captured["gpu"] == "h100" and captured["torch"].startswith("2.15")
    assert (
        captured["peak_allocated"] <= captured["peak_reserved"] <= captured["min_capacity"] + STEP
    )
    assert captured["best_min_capacity"] <= captured["min_capacity"]
    # the smallest GPU that fits with the most the memory outside torch may take
    smallest = gpus.lookup(captured["smallest_gpu"])
    assert smallest.memory >= captured["best_min_capacity"] + captured["outside_torch_bytes"]["low"]
    assert smallest.memory >= gpus.smallest_fitting(captured["best_min_capacity"]).memory
    # torch's own allocator ran in the captured process under the same (default) config
    assert captured["torch_stats"]["reserved_bytes.all.peak"] == captured["peak_reserved"]
    assert not any("device data read" in w for w in captured["warnings"]), captured["warnings"]


def test_a_data_dependent_shape_is_named(tmp_path):
    torch_python("transformers")
    _engine()
    script = tmp_path / "nz.py"
    script.write_text(
        "import torch\nx = torch.randn(1000, device='cuda')\nidx = torch.nonzero(x > 0)\n"
    )
    p = _run_capture(["-o", str(tmp_path / "nz.pickle"), "--json", "--", TORCH_PY, str(script)])
    assert p.returncode == 0, p.stderr[-2000:]
    warnings = json.loads(p.stdout)["warnings"]
    assert any("nz.py:3" in w and "torch.nonzero(x > 0)" in w for w in warnings), warnings


def test_a_failing_script_still_answers_and_keeps_its_exit_status(tmp_path):
    torch_python("transformers")
    _engine()
    script = tmp_path / "fail.py"
    script.write_text(
        "import torch\nx = torch.empty(1 << 30, dtype=torch.uint8, device='cuda')\nraise SystemExit(3)\n"
    )
    p = _run_capture(["-o", str(tmp_path / "fail.pickle"), "--", TORCH_PY, str(script)])
    assert p.returncode == 3, p.stderr[-2000:]
    assert "peak allocated      1.00 GiB" in p.stdout


def test_other_gpus_change_what_torch_is_told(tmp_path):
    torch_python("transformers")
    _engine()
    script = tmp_path / "dev.py"
    script.write_text(
        "import torch\nx = torch.empty(1, device='cuda')\n"
        "p = torch.cuda.get_device_properties(0)\n"
        "print(p.name, p.major, p.minor, p.multi_processor_count, p.total_memory)\n"
    )
    p = _run_capture(
        ["-o", str(tmp_path / "dev.pickle"), "--gpu", "a100-40gb", "--", TORCH_PY, str(script)]
    )
    assert p.returncode == 0, p.stderr[-2000:]
    g = gpus.lookup("a100-40gb")
    assert f"{g.name} 8 0 108 {g.memory}" in p.stdout


def test_usage_errors_say_what_is_valid(tmp_path):
    p = _run_capture(["--gpu", "h1000", "--", "python", "x.py"])
    assert p.returncode == 2 and "unknown GPU 'h1000'" in p.stderr and "h100" in p.stderr
    p = _run_capture(["--devices", "0", "--", "python", "x.py"])
    assert p.returncode == 2 and "--devices 0: expected a number of GPUs" in p.stderr
    p = _run_capture([])
    assert p.returncode == 2 and "nothing to run" in p.stderr


def test_no_compiler_is_a_clear_error(tmp_path):
    py = torch_python("transformers")
    env = dict(os.environ, PYTHONPATH=str(PY_SRC), CACHALOT_CACHE=str(tmp_path), CXX="no-such-cxx")
    p = subprocess.run(
        [py, "-c", "from cachalot.capture import build; build.ensure_runtime()"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.returncode != 0
    assert "needs a C++17 compiler" in p.stderr and "'no-such-cxx' was not found" in p.stderr
    assert not any(tmp_path.glob("capture-runtime/*/libcudart.so.13")), (
        "a failed build left a runtime behind"
    )


def test_importing_capture_does_not_import_torch():
    code = "import sys, cachalot.capture as c; assert callable(c); print('torch' in sys.modules)"
    p = subprocess.run(
        [sys.executable, "-c", code],
        env=dict(os.environ, PYTHONPATH=str(PY_SRC)),
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "False"


def test_gpu_table():
    assert gpus.lookup("H100").cc == (9, 0)
    assert gpus.lookup("nvidia_a10g").key == "a10g"  # its own card, beside the A10
    assert gpus.smallest_fitting(14 << 30).key == "t4"
    assert gpus.smallest_fitting(15 << 30).key == "rtx5080"
    assert gpus.smallest_fitting(1 << 50) is None
    with pytest.raises(gpus.UnknownGpu, match="known: t4"):
        gpus.lookup("k80")
    assert build.LIBRARIES[0] == "libcudart.so.13"


def test_gpu_memory_sizes_are_the_advisors(captured):
    """One home for memory sizes: `cachalot tune --gpu` (sourced in crates/advisor) agrees."""
    for g in gpus.GPUS:
        for name in [g.key] + [a for a, k in gpus.ALIASES.items() if k == g.key]:
            p = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "cachalot",
                    "tune",
                    captured["trace"],
                    "--gpu",
                    name,
                    "--json",
                    "-q",
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            assert p.returncode in (0, 1), p.stderr
            assert json.loads(p.stdout)["capacity"] == g.memory, name
