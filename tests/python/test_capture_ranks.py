"""`cachalot capture` of multi-GPU jobs: real torch 2.15 DDP and FSDP2 (`fully_shard`) over the
simulated NCCL, started by torchrun, `python -m torch.distributed.run` and
`torch.multiprocessing.spawn` (and `accelerate launch`, and `deepspeed` with ZeRO-2 and ZeRO-3, where they
are installed), 2 and 4 ranks.

For every rank the predicted peaks are compared with what torch's own allocator measured on
that rank in the same run (`torch.cuda.memory_stats()` at the rank's end, written by
ranks_workload.py): allocated within 1 %, reserved within 2 %. FSDP2's per-rank peak must fall
from 2 to 4 ranks (sharding). A rank that crashes is reported as what it is, and a signal or a
timeout during a multi-rank capture leaves no process and no temporary folder behind.
These tests need the torch venv (they skip without it)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import TORCH_PYTHON, package_env

WORKLOAD = Path(__file__).with_name("ranks_workload.py")
TORCHRUN = TORCH_PYTHON.parent / "torchrun"


def _torch():
    if not TORCH_PYTHON.exists():
        pytest.skip(f"no torch venv at {TORCH_PYTHON}")
    p = subprocess.run(
        [str(TORCH_PYTHON), "-c", "import torch.distributed as d; assert d.is_available()"],
        capture_output=True,
        check=False,
    )
    if p.returncode != 0:
        pytest.skip(f"{TORCH_PYTHON} cannot import torch.distributed")


def _port() -> int:
    """A free TCP port for the job's rendezvous (torchrun's default 29500 may be taken)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(n: int, *script) -> list:
    return [TORCHRUN, "--nproc_per_node", n, "--master_port", _port(), WORKLOAD, *script]


def _capture(tmp: Path, args: list[str], command: list[str], **kw):
    env = package_env({"TMPDIR": str(tmp)})
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    return subprocess.run(
        [sys.executable, "-m", "cachalot", "capture", *args, "--", *map(str, command)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
        **kw,
    )


_JOBS: dict[tuple[str, int, str], tuple[dict, dict[int, dict], Path]] = {}


def _job(tmp_path_factory, mode: str, n: int, launcher: str):
    """Captures `mode` with `n` ranks (cached per module); returns the --json answer, torch's
    own statistics per rank and the trace folder."""
    key = (mode, n, launcher)
    if key not in _JOBS:
        _torch()
        d = tmp_path_factory.mktemp(f"{mode}{n}{launcher}")
        stats, traces = d / "stats", d / "traces"
        stats.mkdir()
        args = ["--json", "-o", f"{traces}/"]
        script = [WORKLOAD, "--mode", mode, "--stats", stats]
        if launcher == "torchrun":
            command = _torchrun(n, *script[1:])
        elif launcher == "module":
            command = [
                TORCH_PYTHON,
                "-m",
                "torch.distributed.run",
                f"--nproc-per-node={n}",
                f"--master-port={_port()}",
                *script,
            ]
        elif launcher == "accelerate":
            accelerate = TORCH_PYTHON.parent / "accelerate"
            if not accelerate.exists():
                pytest.skip(f"accelerate is not installed beside {TORCH_PYTHON}")
            command = [accelerate, "launch", "--num_processes", n, "--multi_gpu"]
            command += ["--main_process_port", _port(), *script]
        elif launcher == "deepspeed":
            ds = TORCH_PYTHON.parent / "deepspeed"
            if not ds.exists():
                pytest.skip(f"deepspeed is not installed beside {TORCH_PYTHON}")
            command = [ds, "--num_gpus", n, "--master_port", _port(), *script]
        else:  # torch.multiprocessing.spawn: the script starts its ranks itself
            args += ["--devices", str(n)]
            command = [TORCH_PYTHON, *script, "--spawn", n, "--port", _port()]
        p = _capture(d, args, command)
        assert p.returncode == 0, p.stderr[-4000:]
        measured = {
            int(f.stem[4:]): json.loads(f.read_text()) for f in sorted(stats.glob("rank*.json"))
        }
        assert sorted(measured) == list(range(n)), p.stderr[-3000:]
        _JOBS[key] = (json.loads(p.stdout), measured, traces)
    return _JOBS[key]


def _pct(pred: int, meas: int) -> float:
    return 100.0 * abs(pred - meas) / meas


@pytest.mark.parametrize(
    ("mode", "n", "launcher"),
    [
        ("ddp", 2, "torchrun"),
        ("fsdp", 2, "module"),
        ("fsdp", 4, "module"),
        ("ddp", 2, "spawn"),
        ("fsdp", 2, "accelerate"),
        ("zero2", 2, "deepspeed"),
        ("zero3", 2, "deepspeed"),
    ],
)
def test_every_rank_matches_torchs_own_allocator(tmp_path_factory, mode, n, launcher):
    answer, measured, traces = _job(tmp_path_factory, mode, n, launcher)
    ranks = answer["ranks"]
    assert [r["rank"] for r in ranks] == list(range(n))
    for r in ranks:
        m = measured[r["rank"]]
        # what a real node shows each rank: every device, its own set by local rank
        assert (m["device_count"], m["device"], m["world"]) == (n, r["rank"], n)
        assert r["device"] == r["rank"]
        assert _pct(r["peak_allocated"], m["peak_allocated"]) <= 1.0, (r, m)
        assert _pct(r["peak_reserved"], m["peak_reserved"]) <= 2.0, (r, m)
        # the smallest size that runs holds the live peak
        assert r["fits"] and r["min_capacity"] >= r["peak_allocated"]
        assert r["nccl_communicators"] and r["nccl_communicators"][0] == n
        assert Path(r["trace"]) == traces / f"rank{r['rank']}.pickle" and Path(r["trace"]).is_file()
    assert answer["fits"] is True
    # the job's numbers are the deciding rank's
    decides = ranks[answer["deciding_rank"]]
    assert answer["peak_allocated"] == decides["peak_allocated"]
    assert answer["peak_reserved"] == decides["peak_reserved"]


def test_fsdp_per_rank_peak_falls_with_more_ranks(tmp_path_factory):
    two, _, _ = _job(tmp_path_factory, "fsdp", 2, "module")
    four, _, _ = _job(tmp_path_factory, "fsdp", 4, "module")
    assert four["peak_allocated"] < two["peak_allocated"], (two["ranks"], four["ranks"])


def test_the_ranks_traces_work_with_the_advisor(tmp_path_factory):
    answer, _, _ = _job(tmp_path_factory, "ddp", 2, "torchrun")
    traces = [r["trace"] for r in answer["ranks"]]
    p = subprocess.run(
        [sys.executable, "-m", "cachalot", "tune", *traces, "--capacity", "2G", "--json", "-q"],
        env=package_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout)["fits"] is True


def test_a_crashing_rank_is_reported_with_its_rank_and_traceback(tmp_path):
    _torch()
    command = _torchrun(2, "--crash-rank", 1)
    p = _capture(tmp_path, ["-o", f"{tmp_path}/t/"], command)
    assert p.returncode == 3, p.stderr[-4000:]
    assert "rank 1 failed:" in p.stderr and "RuntimeError: rank 1 crashed on purpose" in p.stderr
    assert "never used CUDA" not in p.stderr
    assert list(tmp_path.glob("cachalot-capture-*")) == []


def _left(tag: str) -> bytes:
    return subprocess.run(["pgrep", "-f", tag], capture_output=True, check=False).stdout


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_during_a_multi_rank_capture_leaves_nothing_behind(tmp_path, sig, status):
    _torch()
    hang = tmp_path / f"hang-{sig}"
    hang.mkdir()
    command = _torchrun(2, "--hang", hang)
    env = package_env({"TMPDIR": str(tmp_path)})
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cachalot",
            "capture",
            "-o",
            f"{tmp_path}/t/",
            "--",
            *map(str, command),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 600
    while not ((hang / "ready0").exists() and (hang / "ready1").exists()):
        assert p.poll() is None, p.communicate()
        assert time.time() < deadline
        time.sleep(0.2)
    p.send_signal(sig)
    _, stderr = p.communicate(timeout=300)
    assert p.returncode == status, stderr[-3000:]
    assert f"interrupted ({signal.Signals(sig).name})" in stderr
    assert list(tmp_path.glob("cachalot-capture-*")) == []
    assert _left(str(hang)) == b"", "a rank outlived cachalot capture"


def test_a_job_past_its_timeout_is_ended_with_a_clear_message(tmp_path):
    _torch()
    hang = tmp_path / "hang-timeout"
    hang.mkdir()
    command = _torchrun(2, "--hang", hang)
    p = _capture(tmp_path, ["--timeout", "60", "-o", f"{tmp_path}/t/"], command)
    assert p.returncode == 124, p.stderr[-3000:]
    assert "did not finish within --timeout 60 s" in p.stderr
    assert list(tmp_path.glob("cachalot-capture-*")) == []
    assert _left(str(hang)) == b""
