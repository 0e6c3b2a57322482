"""`cachalot.torch.use()`, `mempool_allocator()`, `enable_graph_pools()` and `cachalot record`
on the older torch releases CI installs (issue #25): torch 2.9.1 on CUDA 12.8 wheels and 2.13.0
on CUDA 13.0 (`scripts/python_env.sh --torch`; a release without its environment skips, saying
so). torch 2.15 is test_torch.py's, test_mempool.py's, test_graph_pools.py's and
test_record.py's.

Each program runs twice on the release's capture runtime, with torch's own allocator and with
cachalot's; the judge is that release's allocator: every `memory_stats()` key it has (2.9 has
122, no `num_oom_rejections`; per-pool `reserved_bytes_by_private_pools.*` came in 2.13) and
every value after every step, the segments, the OOMs (`torch.OutOfMemoryError`, torch's
message). `record`'s snapshot, replayed, gives the peaks the release measured in that run.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
from pathlib import Path

import pytest

import cachalot
from cachalot.capture import build
from conftest import PACKAGE_ROOT, package_env

# real PyTorch on the capture runtime (conftest marks by TORCH_PYTHON, which these do not use)
pytestmark = [pytest.mark.torch, pytest.mark.slow]
HERE = Path(__file__).resolve().parent
RELEASES = {
    "2.9": os.environ.get(
        "CACHALOT_TORCH29_PYTHON", str(Path.home() / ".cache/cachalot-torch29/bin/python")
    ),
    "2.13": os.environ.get(
        "CACHALOT_TORCH213_PYTHON", str(Path.home() / ".cache/cachalot-torch213/bin/python")
    ),
}
CAPACITY = {"CACHALOT_SIM_CAPACITY": "80G", "FAKE_CUDA_CAPACITY": "80G"}
# torch's OOM message ends in a link to its docs, which moved in 2.11; cachalot gives 2.15's.
DOCS_LINK = "  See documentation for Memory Management"


@pytest.fixture(scope="module", params=sorted(RELEASES))
def on_release(request, tmp_path_factory):
    """(release, a function running a script of tests/python with that release's python on its
    capture runtime and returning the JSON the script wrote to its last argument)."""
    release, python = request.param, RELEASES[request.param]
    if not Path(python).exists():
        pytest.skip(f"no torch {release} environment at {python} (scripts/python_env.sh --torch)")
    try:
        runtime = build.ensure_runtime(python, quiet=True)
    except build.BuildError as e:
        pytest.fail(f"the capture runtime does not build for torch {release}: {e}")
    preload = ":".join(str(runtime / lib) for lib in build.runtime_libraries(runtime))
    tmp = tmp_path_factory.mktemp(f"torch-{release}")

    def run(script, *args, env=None):
        out = tmp / f"{script}-{'-'.join(args)}.json"
        e = package_env({**CAPACITY, "LD_PRELOAD": preload, "CUDA_VISIBLE_DEVICES": "0"})
        e.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        e.update(env or {})
        p = subprocess.run(
            [python, str(HERE / script), *args, str(out)],
            env=e,
            cwd=PACKAGE_ROOT,
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )
        assert p.returncode == 0, f"{script} {args}: exit {p.returncode}\n{p.stderr[-3000:]}"
        return json.loads(out.read_text())

    return release, run


# After threads ran, what is live; what is cached (segments, splits) depends on how the
# threads' requests interleaved, which a loaded machine changes from run to run.
LIVE = ("allocated_bytes.", "allocation.", "active.", "active_bytes.", "requested_bytes.")


def same_steps(ours, torchs, threaded=()):
    """Every step's statistics: the same keys, the same values (after threads, what is live)."""
    assert [s["step"] for s in ours["steps"]] == [s["step"] for s in torchs["steps"]]
    for a, b in zip(ours["steps"], torchs["steps"]):
        assert set(a["stats"]) == set(b["stats"]), (a["step"], set(a["stats"]) ^ set(b["stats"]))
        keys = [
            k
            for k in b["stats"]
            if a["step"] not in threaded or (k.endswith(".current") and k.startswith(LIVE))
        ]
        diff = {k: (a["stats"][k], b["stats"][k]) for k in keys if a["stats"][k] != b["stats"][k]}
        assert not diff, (a["step"], diff)


def test_use_gives_the_releases_statistics_and_oom_errors(on_release):
    release, run = on_release
    ours = run("torch_workload.py", "--allocator", "cachalot", "--device", "cuda")
    torchs = run("torch_workload.py", "--allocator", "torch")
    n = len(torchs["steps"][0]["stats"])
    assert n == {"2.9": 122, "2.13": 123}[release]  # the release's own keys
    same_steps(ours, torchs, threaded=("threads", "end"))
    assert len(ours["ooms"]) == len(torchs["ooms"]) == 2
    for a, b in zip(ours["ooms"], torchs["ooms"]):
        assert a["type"] == b["type"] == "OutOfMemoryError", (a, b)
        assert a["message"].split(DOCS_LINK)[0] == b["message"].split(DOCS_LINK)[0]
        assert a["recovered"] and b["recovered"]


def test_mempool_allocator_gives_the_releases_statistics_and_segments(on_release):
    _, run = on_release
    ours, torchs = (
        run("mempool_workload.py", "--pool", "cachalot"),
        run("mempool_workload.py", "--pool", "torch"),
    )
    same_steps(ours, torchs)
    for a, b in zip(ours["steps"], torchs["steps"]):
        for key in ("reserved", "allocated", "segments", "pool_held"):
            assert a[key] == b[key], (a["step"], key)
    assert torchs["steps"][0]["pool_held"]["segments"] > 0  # the pool held memory


def test_graph_pools_give_the_releases_statistics_and_segments(on_release):
    """A real CUDA-graph capture (the runtime captures) with enable_graph_pools()."""
    _, run = on_release
    ours = run("graph_capture_workload.py", "--allocator", "cachalot")
    torchs = run("graph_capture_workload.py", "--allocator", "torch")
    assert ours["pool"] == torchs["pool"] == [1, 0]
    same_steps(ours, torchs)
    for a, b in zip(ours["steps"], torchs["steps"]):
        assert sorted(s[1:] for s in a["segments"]) == sorted(s[1:] for s in b["segments"])
    counts = [s["graph_pool_use_count"] for s in ours["steps"]]
    assert max(counts) == 2 and counts[-1] == -1  # the two graphs' pool, then released


def train(release: str, stats: Path, capacity: str = "80G", conf=None, record=None) -> dict:
    """versions_train.py on `release`'s capture runtime with torch's own allocator, on a
    device of `capacity`, under `PYTORCH_CUDA_ALLOC_CONF=conf` and under `cachalot record -o
    record` where given; what the program wrote to `stats` (torch's `memory_stats()`)."""
    python = RELEASES[release]
    runtime = build.ensure_runtime(python, quiet=True)
    preload = ":".join(str(runtime / lib) for lib in build.runtime_libraries(runtime))
    env = package_env({"LD_PRELOAD": preload, "CUDA_VISIBLE_DEVICES": "0"})
    env.update(CACHALOT_SIM_CAPACITY=capacity, FAKE_CUDA_CAPACITY=capacity)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if conf is not None:
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    env["VERSIONS_TRAIN_STATS"] = str(stats)
    cmd = [python, "-m", "cachalot", "record", "-o", str(record), "--"] if record else []
    p = subprocess.run(
        [*cmd, python, str(HERE / "versions_train.py")],
        env=env,
        cwd=PACKAGE_ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert p.returncode == 0, f"{conf!r} at {capacity}: exit {p.returncode}\n{p.stderr[-3000:]}"
    return json.loads(stats.read_text())


def test_record_writes_a_snapshot_whose_replay_gives_the_releases_peaks(on_release, tmp_path):
    release, _ = on_release
    python = RELEASES[release]
    snap = tmp_path / "snap.pickle"
    measured = train(release, tmp_path / "stats.json", record=snap)
    assert measured["torch"].startswith(release + ".")
    info = json.loads((tmp_path / "snap.device.json").read_text())
    assert info["torch_version"] == measured["torch"]
    assert pickle.loads(snap.read_bytes())["segments"]
    r = subprocess.run(
        [python, "-m", "cachalot", "replay", str(snap), "--capacity", "80G", "--json"],
        env=package_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    peak = json.loads(r.stdout)["peak"]
    allocated = measured["stats"]["allocated_bytes.all.peak"]
    reserved = measured["stats"]["reserved_bytes.all.peak"]
    assert abs(peak["allocated_bytes"] - allocated) <= allocated / 100, (peak, allocated)
    assert abs(peak["reserved_bytes"] - reserved) <= reserved / 50, (peak, reserved)


def test_the_line_tune_recommends_for_the_release_runs_on_it_within_the_capacity(
    on_release, tmp_path
):
    """The issue's must-hold, end to end: `tune` on a snapshot the release recorded (so it
    tunes for that release) at a capacity below what torch's default needed recommends a line;
    torch of that release, with its own allocator on a device of exactly that capacity, accepts
    the line, runs the program without an out-of-memory, and peaks where tune said."""
    release, _ = on_release
    snap = tmp_path / "snap.pickle"
    default = train(release, tmp_path / "default.json", record=snap)["stats"]
    capacity = int(default["reserved_bytes.all.peak"] * 0.9) >> 20 << 20
    r = cachalot.tune(snap, capacity, html=False, threads=2)
    d = r.to_dict()
    assert d["torch"] == release, d["torch"]  # read from the snapshot's device.json
    assert r.fits and r.recommended, (capacity, d["ranking"][:3])
    line = r.recommended
    tuned = train(release, tmp_path / "tuned.json", str(capacity), line)["stats"]
    assert tuned["num_ooms"] == 0, (line, tuned)
    assert tuned["reserved_bytes.all.peak"] <= capacity, (line, capacity, tuned)
    predicted = d["ranking"][0]
    assert predicted["PYTORCH_CUDA_ALLOC_CONF"] == line
    peak = predicted["result"]["peak_reserved"]
    assert abs(peak - tuned["reserved_bytes.all.peak"]) <= tuned["reserved_bytes.all.peak"] / 50
