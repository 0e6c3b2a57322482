"""`cachalot capture` of multi-GPU jobs: real torch 2.15 DDP and FSDP2 (`fully_shard`) over the
simulated NCCL, started by torchrun, `python -m torch.distributed.run` and
`torch.multiprocessing.spawn` (and `accelerate launch`, and `deepspeed` with ZeRO-2 and ZeRO-3, where they
are installed), 2 and 4 ranks.

For every rank the predicted peaks are compared with what torch's own allocator measured on
that rank in the same run (`torch.cuda.memory_stats()` at the rank's end, written by
ranks_workload.py): allocated within 1 %, reserved within 2 %. FSDP2's per-rank peak must fall
from 2 to 4 ranks (sharding). A rank that crashes is reported as what it is, and a signal or a
timeout during a multi-rank capture leaves no process and no temporary folder behind.

A job larger than the machine (`--world-size 4 --ranks 0,3`, cover.py) runs only the ranks
asked for; each of them must equal, to the byte, the same rank of the full 4-rank run as torch's
own allocator measured it there, and the ranks not executed are marked as covered. A Hugging Face
`Trainer` under torchrun (trainer_workload.py) is compared per rank as the others are.
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

from cachalot.capture import cover
from conftest import TORCH_PYTHON, package_env, torch_python

WORKLOAD = Path(__file__).with_name("ranks_workload.py")
TRAINER = Path(__file__).with_name("trainer_workload.py")
TORCHRUN = TORCH_PYTHON.parent / "torchrun"


def _torch():
    torch_python("torch.distributed")  # asked once per worker (conftest)


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


def _shares(job: str):
    """The mark of the tests that read one cached job (`_job`): under pytest-xdist they go to
    one worker, which runs the job once (each worker has its own `_JOBS`)."""
    return pytest.mark.xdist_group(f"capture-ranks-{job}")


@pytest.mark.parametrize(
    ("mode", "n", "launcher"),
    [
        pytest.param("ddp", 2, "torchrun", marks=_shares("ddp-torchrun")),
        pytest.param("fsdp", 2, "module", marks=_shares("fsdp-module")),
        pytest.param("fsdp", 4, "module", marks=_shares("fsdp-module")),
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


@_shares("fsdp-module")
def test_fsdp_per_rank_peak_falls_with_more_ranks(tmp_path_factory):
    two, _, _ = _job(tmp_path_factory, "fsdp", 2, "module")
    four, _, _ = _job(tmp_path_factory, "fsdp", 4, "module")
    assert four["peak_allocated"] < two["peak_allocated"], (two["ranks"], four["ranks"])


@_shares("ddp-torchrun")
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
    # long enough for both ranks to be asleep in the program on a loaded 2-core machine (about
    # 15 s there); the job ends at the limit whatever it is doing then
    p = _capture(tmp_path, ["--timeout", "30", "-o", f"{tmp_path}/t/"], command)
    assert p.returncode == 124, p.stderr[-3000:]
    assert "did not finish within --timeout 30 s" in p.stderr
    assert list(tmp_path.glob("cachalot-capture-*")) == []
    assert _left(str(hang)) == b""


def _module_run(n: int, *script) -> list:
    return [
        TORCH_PYTHON,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={n}",
        f"--master-port={_port()}",
        *script,
    ]


def _stats(folder: Path) -> dict[int, dict]:
    return {int(f.stem[4:]): json.loads(f.read_text()) for f in sorted(folder.glob("rank*.json"))}


@_shares("fsdp-module")
def test_a_job_larger_than_the_machine_runs_only_the_ranks_asked_for(tmp_path_factory):
    # the judge: torch's own allocator on every rank of the real 4-rank run
    _, full, _ = _job(tmp_path_factory, "fsdp", 4, "module")
    d = tmp_path_factory.mktemp("covered")
    stats = d / "stats"
    stats.mkdir()
    command = _module_run(4, WORKLOAD, "--mode", "fsdp", "--stats", stats)
    p = _capture(d, ["--json", "--world-size", "4", "--ranks", "0,3", "-o", f"{d}/t/"], command)
    assert p.returncode == 0, p.stderr[-4000:]
    answer, measured = json.loads(p.stdout), _stats(stats)
    # only ranks 0 and 3 ran, each in a world of 4 on its own device of a 4-GPU node, and
    # torch's allocator did there exactly what it did in the full run
    assert sorted(measured) == [0, 3], p.stderr[-3000:]
    for rank in (0, 3):
        assert measured[rank] == full[rank]
    assert (answer["world_size"], answer["executed_ranks"]) == (4, [0, 3])
    rows = answer["ranks"]
    assert [r["rank"] for r in rows] == [0, 1, 2, 3]
    assert [r["executed"] for r in rows] == [True, False, False, True]
    assert [r["covered_by"] for r in rows] == [None, 3, 3, None]
    for r in rows:
        m = full[r["rank"]]
        assert r["device"] == m["device"]
        assert _pct(r["peak_allocated"], m["peak_allocated"]) <= 1.0, (r, m)
        assert _pct(r["peak_reserved"], m["peak_reserved"]) <= 2.0, (r, m)
        assert r["nccl_communicators"][0] == 4
    assert sorted(f.name for f in (d / "t").glob("*.pickle")) == ["rank0.pickle", "rank3.pickle"]
    # each trace says which device of the node it was, and which torch ran (replay, compare
    # and tune make that release's decisions)
    info = json.loads((d / "t" / "rank3.device.json").read_text())
    assert [x["index"] for x in info["devices"]] == [3]
    assert info["torch_version"] == answer["torch"] != "?"
    assert info["cuda_version"].split(".")[0] in ("12", "13"), info


def test_spawn_of_a_larger_world_starts_only_the_executed_ranks(tmp_path):
    _torch()
    stats = tmp_path / "stats"
    stats.mkdir()
    script = [WORKLOAD, "--mode", "ddp", "--stats", stats, "--spawn", 4, "--port", _port()]
    args = ["--json", "--world-size", "4", "--ranks", "0,3", "--devices", "4"]
    p = _capture(tmp_path, [*args, "-o", f"{tmp_path}/t/"], [TORCH_PYTHON, *script])
    assert p.returncode == 0, p.stderr[-4000:]
    measured = _stats(stats)
    assert sorted(measured) == [0, 3]
    assert [(m["world"], m["device"]) for m in measured.values()] == [(4, 0), (4, 3)]
    answer = json.loads(p.stdout)
    for r in answer["ranks"]:
        if r["executed"]:
            m = measured[r["rank"]]
            assert _pct(r["peak_allocated"], m["peak_allocated"]) <= 1.0, (r, m)
            assert _pct(r["peak_reserved"], m["peak_reserved"]) <= 2.0, (r, m)


def test_subgroups_whose_first_rank_is_not_executed_are_split_not_waited_for(tmp_path):
    # torch splits the halves from the world's communicator (ncclCommSplit): rank 3's group
    # {2, 3} needs nothing from rank 2, which is not executed
    _torch()
    stats = tmp_path / "stats"
    stats.mkdir()
    command = _module_run(4, WORKLOAD, "--subgroups", "--stats", stats)
    args = ["--json", "--world-size", "4", "--ranks", "0,3", "--timeout", "300"]
    p = _capture(tmp_path, [*args, "-o", f"{tmp_path}/t/"], command)
    assert p.returncode == 0, p.stderr[-3000:]
    assert sorted(_stats(stats)) == [0, 3]
    rows = {r["rank"]: r for r in json.loads(p.stdout)["ranks"]}
    # the world's communicator and the one split from it for the group of 2
    assert rows[3]["nccl_communicators"] == [4, 2], rows[3]


def test_a_spawned_world_of_another_size_is_refused(tmp_path):
    _torch()
    script = [WORKLOAD, "--mode", "ddp", "--spawn", 2, "--port", _port()]
    p = _capture(tmp_path, ["--world-size", "4", "-o", f"{tmp_path}/t/"], [TORCH_PYTHON, *script])
    assert p.returncode == 3, p.stderr[-3000:]
    assert "the program spawns 2 ranks; make it spawn 4" in p.stderr
    assert list(tmp_path.glob("cachalot-capture-*")) == []


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--world-size", "4", "--ranks", "1,3"], "rank 0 must be one of them"),
        (["--world-size", "4", "--ranks", "0,4"], "rank 4 is outside a job of 4 ranks"),
        (["--world-size", "4", "--ranks", "0,x"], "expected ranks separated by commas"),
        (["--world-size", "6"], "not a whole number of nodes of 4 GPUs"),
        (["--world-size", "0"], "expected a number of ranks from 1"),
    ],
)
def test_world_sizes_and_ranks_that_cannot_run_are_refused(tmp_path, args, says):
    command = ["torchrun", "--nproc_per_node", "4", str(WORKLOAD)]
    p = _capture(tmp_path, args, command)
    assert p.returncode == 2, p.stderr
    assert says in p.stderr


def test_launchers_are_told_of_the_executed_ranks_only():
    # torchrun over 8 nodes of 8: one node of the 2 executed ranks, its own rendezvous
    two_nodes = ["torchrun", "--nproc_per_node", "8", "--nnodes=8", "--node_rank", "3"]
    two_nodes += ["--rdzv_endpoint", "host:29400", "train.py", "--nnodes", "5"]
    assert cover.launcher_world(two_nodes) == (64, 8)
    assert cover.rewrite(two_nodes, 2) == [
        "torchrun", "--nproc_per_node", "2", "--nnodes", "1", "--standalone",
        "train.py", "--nnodes", "5",
    ]  # fmt: skip
    module = ["python", "-u", "-m", "torch.distributed.run", "--nproc-per-node=4", "w.py"]
    assert cover.launcher_world(module) == (4, 4)
    assert cover.rewrite(module, 2)[4:8] == ["--nproc_per_node", "2", "--nnodes", "1"]
    accel = ["accelerate", "launch", "--num_processes", "16", "--num_machines", "2", "t.py"]
    assert cover.launcher_world(accel) == (16, 8)
    assert cover.rewrite(accel, 2) == [
        "accelerate", "launch", "--num_processes", "2", "--num_machines", "1", "t.py"
    ]  # fmt: skip
    ds = ["deepspeed", "--num_gpus", "8", "--num_nodes", "4", "t.py"]
    assert cover.launcher_world(ds) == (32, 8)
    job = cover.Cover(64, 8, (0, 7, 63))
    assert [job.covered_by(r) for r in (0, 1, 6, 8, 62, 63)] == [0, 7, 7, 7, 7, 63]
    assert "rank 7 also stands for 1-6,8-62" in cover.describe(job)


def test_hf_trainer_under_torchrun_matches_each_ranks_own_allocator(tmp_path):
    _torch()
    p = subprocess.run(
        [str(TORCH_PYTHON), "-c", "import transformers"], capture_output=True, check=False
    )
    if p.returncode != 0:
        pytest.skip(f"transformers is not installed beside {TORCH_PYTHON}")
    stats = tmp_path / "stats"
    stats.mkdir()
    command = [*_torchrun(2)[:-1], TRAINER, stats, tmp_path / "out"]
    p = _capture(tmp_path, ["--json", "-o", f"{tmp_path}/t/"], command)
    assert p.returncode == 0, p.stderr[-4000:]
    answer, measured = json.loads(p.stdout), _stats(stats)
    assert sorted(measured) == [0, 1], p.stderr[-3000:]
    assert [r["rank"] for r in answer["ranks"]] == [0, 1]
    for r in answer["ranks"]:
        m = measured[r["rank"]]
        assert (m["world"], m["device"], m["ddp"]) == (2, r["rank"], "DistributedDataParallel")
        assert _pct(r["peak_allocated"], m["peak_allocated"]) <= 1.0, (r, m)
        assert _pct(r["peak_reserved"], m["peak_reserved"]) <= 2.0, (r, m)
