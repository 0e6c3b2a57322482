"""Capture's analysis as in-process calls of the application layer: `_native.predict` and
`cachalot.capture.analysis.predict` on synthetic traces (the held-out budgets, the verdicts and
their exit statuses, per-rank inputs, errors), with no process started, the trace read once,
and the configuration read from the environment as torch reads it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from cachalot import _native
from cachalot.capture import analysis, gpus
from conftest import FIXTURES
from conftest import cli_stdout as cli

GIB = 1 << 30
MIB = 1 << 20
# What capture's callers and scripts/capture read, and what the verdict added.
CAPTURE_KEYS = (
    *("trace", "gpu", "gpu_memory", "capacity", "conf", "events", "peak_allocated"),
    *("peak_reserved", "fits", "num_ooms", "num_alloc_retries", "min_capacity", "tuned_conf"),
    *("tune_reason", "tuned_fits", "best_min_capacity", "best_min_conf", "smallest_gpu"),
    *("verdict", "exit_status", "outside_torch_bytes", "advice", "ranks"),
)
PLAIN = min((FIXTURES / "traces").glob("*.csv.gz"), key=lambda p: p.stat().st_size)


def _csv(path: Path, sizes: list[int]) -> str:
    """A trace that allocates `sizes` in order, then frees them."""
    rows = ["Thread,Time,Action,Pointer,Size,Stream"]
    for i, s in enumerate(sizes):
        rows.append(f"1,{i},allocate,{(i + 1) << 40:#x},{s},0")
    for i, s in enumerate(sizes):
        rows.append(f"1,{len(sizes) + i},free,{(i + 1) << 40:#x},{s},0")
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def _holding(tmp_path: Path, gib: float) -> str:
    size = int(gib * GIB) // (2 * MIB) * (2 * MIB)
    return _csv(tmp_path / f"hold-{gib}.csv", [size])


@pytest.fixture(autouse=True)
def _no_alloc_conf(monkeypatch):
    for var in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF"):
        monkeypatch.delenv(var, raising=False)
    for var in ("CACHALOT_ALLOC_CONF", "CUDA_MODULE_LOADING", "NCCL_BUFFSIZE"):
        monkeypatch.delenv(var, raising=False)


def test_the_held_out_budget_on_an_h100(tmp_path):
    p = analysis.predict(_holding(tmp_path, 79.1), gpus.lookup("h100"))
    assert not p.fits and p.verdict != "fits"
    assert p.exit_status in (analysis.EXIT_TIGHT, analysis.EXIT_DOES_NOT_FIT)
    assert not p.report().startswith("fits")
    p = analysis.predict(_holding(tmp_path, 70), "h100")
    assert p.fits and p.verdict == "fits" and p.exit_status == analysis.EXIT_FITS
    assert p.report().startswith("fits on NVIDIA H100")
    assert p.to_dict()["advice"]["action"] == "keep"


def test_the_answer_has_capture_keys_and_the_outside_parts(tmp_path):
    p = analysis.predict(
        _holding(tmp_path, 2), "t4", warnings=["w1"], torch_stats={"reserved_bytes.all.peak": 7}
    )
    d = p.to_dict()
    missing = [k for k in CAPTURE_KEYS if k not in d]
    assert not missing, missing
    assert d["warnings"] == ["w1"] and d["torch_stats"] == {"reserved_bytes.all.peak": 7}
    out = d["outside_torch_bytes"]
    assert out["low"] < out["estimate"] < out["high"]
    assert sum(part["bytes"] for part in out["parts"]) == out["estimate"]
    assert all(part["source"] for part in out["parts"])
    assert d["capacity"] == d["gpu_memory"] - out["estimate"]
    assert p.peak_reserved == d["peak_reserved"] and len(p.ranks) == 1
    assert "warning: w1" in p.report()
    # the report leads with the verdict, then the advice; each outside part is a line
    lines = p.report().splitlines()
    assert lines[0].startswith("fits on NVIDIA Tesla T4") and lines[1].startswith("advice: ")
    for part in out["parts"]:
        assert any(line.strip().startswith(part["name"]) for line in lines), part["name"]


def test_an_explicit_reserve_replaces_the_model_and_tight_is_its_own_status(tmp_path):
    g = gpus.lookup("h100")
    trace = _holding(tmp_path, 10)
    p = analysis.predict(trace, g, reserve=g.memory - 9 * GIB)
    assert p.verdict == "does not fit" and p.exit_status == analysis.EXIT_DOES_NOT_FIT
    assert p.to_dict()["advice"]["action"] == "closest"
    assert p.to_dict()["advice"]["missing_bytes"] >= GIB - 64 * MIB
    p = analysis.predict(trace, g, reserve=512 * MIB, headroom=GIB)
    parts = [q["name"] for q in p.to_dict()["outside_torch_bytes"]["parts"]]
    assert parts == ["reserved (--reserve)", "headroom (--headroom)"]
    assert p.capacity == g.memory - 512 * MIB - GIB
    # between the ends of the model's range: tight, status 4
    model = analysis.predict(trace, g).to_dict()["outside_torch_bytes"]
    peak = g.memory - (model["low"] + model["high"]) // 2
    p = analysis.predict(_holding(tmp_path, peak / GIB), g)
    assert p.verdict == "tight" and p.exit_status == analysis.EXIT_TIGHT, p.report()
    assert p.report().startswith("tight on") and "uncertain by" in p.report()


def test_ranks_each_with_their_outside_inputs(tmp_path):
    r0, r1 = _holding(tmp_path, 1), _holding(tmp_path, 2)
    comm = {"ranks": 4, "buffsize": 8 * MIB, "channels": 8}
    p = analysis.predict([r0, r1], "h100", outside=[{}, {"nccl": [comm], "extra_contexts": 1}])
    d = p.to_dict()
    assert [r["trace"] for r in d["ranks"]] == [r0, r1]
    names = [q["name"] for q in d["ranks"][1]["outside_torch_bytes"]["parts"]]
    assert any("NCCL communicator of 4 ranks" in n for n in names)
    assert any("another process" in n for n in names)
    assert d["peak_reserved"] == d["ranks"][1]["peak_reserved"]  # the worst rank decides
    assert "(rank 1 decides)" in p.report()


def test_bad_inputs_are_native_errors_that_quote_them(tmp_path):
    trace = _holding(tmp_path, 1)
    with pytest.raises(_native.ArgumentError, match="'h1000'"):
        analysis.predict(trace, "h1000")
    with pytest.raises(_native.ArgumentError, match="contexts"):
        analysis.predict(trace, "h100", outside=[{"contexts": 2}])
    with pytest.raises(_native.CachalotError, match="2 outside-torch entries for 1 traces"):
        analysis.predict(trace, "h100", outside=[{}, {}])
    with pytest.raises(_native.TraceError, match="does not exist"):
        analysis.predict(str(tmp_path / "none.csv"), "h100")
    with pytest.raises(_native.ConfigError, match="bogus"):
        analysis.predict(trace, "h100", conf="bogus:1")
    with pytest.raises(_native.CachalotError, match="leaves nothing of h100"):
        analysis.predict(trace, "h100", reserve=1 << 50)


def test_the_configuration_is_the_environment_read_as_torch_reads_it(tmp_path, monkeypatch):
    trace = _holding(tmp_path, 1)
    # An empty PYTORCH_CUDA_ALLOC_CONF is set, so torch never reads PYTORCH_ALLOC_CONF.
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "")
    monkeypatch.setenv("PYTORCH_ALLOC_CONF", "expandable_segments:True")
    assert analysis.predict(trace, "h100").conf == ""
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF")
    assert analysis.predict(trace, "h100").conf == "expandable_segments:True"
    monkeypatch.setenv("CUDA_MODULE_LOADING", "EAGER")
    parts = analysis.predict(trace, "h100").to_dict()["outside_torch_bytes"]["parts"]
    assert "eager" in parts[0]["name"]


def test_no_process_is_started_and_the_trace_is_read_once(tmp_path, monkeypatch):
    # A trace of a few MB: were it decoded once per question (as the ~13 engine processes
    # did), this process would read many times its size.
    sizes = [(1 + i % 97) << 10 for i in range(60_000)]
    trace = _csv(tmp_path / "big.csv", sizes)
    size = os.path.getsize(trace)

    def refuse(*a, **k):
        raise AssertionError(f"a process was started: {a[:1]}")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    for name in ("fork", "posix_spawn", "posix_spawnp", "execv", "execve"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, refuse)

    def rchar() -> int:
        with open("/proc/self/io") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))

    before = rchar()
    p = analysis.predict(trace, "h100", threads=1)
    read = rchar() - before
    assert p.events == 2 * len(sizes)
    assert size <= read < 2 * size, (read, size)


def test_predict_agrees_with_the_commands_it_replaces():
    """The numbers capture used to get from ~13 engine processes, now from one call: the same
    as `cachalot replay` and `cachalot tune` at the same capacity, and `tune --min-capacity`."""
    p = analysis.predict(str(PLAIN), "t4")
    d = p.to_dict()
    assert d == json.loads(_native.predict([str(PLAIN)], "t4")[0])
    cap = str(d["capacity"])
    at = json.loads(cli("replay", str(PLAIN), "--capacity", cap, "--json"))
    assert (at["num_ooms"], at["num_alloc_retries"]) == (d["num_ooms"], d["num_alloc_retries"])
    free = json.loads(cli("replay", str(PLAIN), "--capacity", "1T", "--json"))
    assert free["peak"]["reserved_bytes"] == d["peak_reserved"]
    assert free["peak"]["allocated_bytes"] == d["peak_allocated"]
    tuned = json.loads(cli("tune", str(PLAIN), "--capacity", cap, "--json", "-q"))
    assert (tuned["best"], tuned["fits"]) == (d["tuned_conf"], d["tuned_fits"])
    best = json.loads(cli("tune", str(PLAIN), "--min-capacity", "--json", "-q"))
    assert d["best_min_capacity"] == min(best["min_capacity"], d["min_capacity"])


def test_the_environments_configuration_is_read_in_rust(monkeypatch):
    """`_native.env_conf()`: the string torch takes (its `allocator_settings`), read as torch
    reads the variables; no Python file reads them itself."""
    monkeypatch.setenv("PYTORCH_ALLOC_CONF", "expandable_segments:True")
    assert _native.env_conf() == "expandable_segments:True"
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "")  # set, so torch reads it, not the other
    assert _native.env_conf() == ""
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "bogus:1")
    with pytest.raises(_native.ConfigError, match="bogus"):
        _native.env_conf()
    package = Path(analysis.__file__).resolve().parents[1]
    readers = [
        f"{path.relative_to(package)}:{n}"
        for path in package.rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "_ALLOC_CONF" in line and ("environ.get(" in line or "getenv(" in line)
    ]
    assert readers == [], readers
