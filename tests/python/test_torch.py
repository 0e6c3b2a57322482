"""cachalot inside real PyTorch 2.15 (on the fake GPU), against torch's own allocator on the
same workloads: statistics after every step, OOMs raising torch.OutOfMemoryError with the same
message, recovery, empty_cache, memory fraction, record_stream, streams and threads."""

import json
import pickle
import subprocess
import textwrap
from pathlib import Path

import pytest

from cachalot.capture import build
from conftest import TORCH_PYTHON, package_env
from torch_workload import (
    call_differences,
    call_rows,
    differences,
    first_difference,
    log_against_stats,
)

HERE = Path(__file__).parent
CAPACITY = {"CACHALOT_SIM_CAPACITY": "80G", "FAKE_CUDA_CAPACITY": "80G"}
CONFS = ["", "expandable_segments:True", "backend:cudaMallocAsync"]
# Device calls each configuration must make (so that a log comparison compares something).
OPS = {
    "": {"cudaMalloc", "cudaFree"},
    "expandable_segments:True": {"cuMemAddressReserve", "cuMemCreate", "cuMemMap", "cuMemUnmap"},
    "backend:cudaMallocAsync": {"cudaMallocAsync", "cudaFreeAsync"},
}


@pytest.fixture(scope="session")
def torch_on_runtime(tmp_path_factory):
    """Like torch_on_fakegpu, on the capture runtime (built here, into a temporary cache): its
    simulated driver has every entry point cachalot's CUDA device calls, so
    `cachalot.torch.use(device="cuda")` runs on it. Each run logs the runtime's device calls
    (FAKE_CUDA_LOG) to a file; the function returns (CompletedProcess, the log's lines)."""
    if not TORCH_PYTHON.exists():
        pytest.skip(f"no torch venv at {TORCH_PYTHON} (scripts/python_env.sh --torch makes it)")
    try:
        runtime = build.ensure_runtime(str(TORCH_PYTHON), quiet=True)
    except build.BuildError as e:
        pytest.skip(f"the capture runtime cannot be built here: {e}")
    preload = ":".join(str(runtime / lib) for lib in build.runtime_libraries(runtime))
    logs = tmp_path_factory.mktemp("runtime-logs")

    def run(args, env=None, timeout=600):
        log = logs / f"{len(list(logs.iterdir()))}.csv"
        full = package_env(
            {
                "LD_PRELOAD": preload,
                "CUDA_VISIBLE_DEVICES": "0",
                "FAKE_CUDA_LOG": str(log),
                **(env or {}),
            }
        )
        p = subprocess.run(
            [str(TORCH_PYTHON), *map(str, args)],
            env=full,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert p.returncode == 0, f"{args} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
        return p, log.read_text().splitlines() if log.exists() else []

    return run


@pytest.fixture(scope="module")
def on_runtime(torch_on_runtime, tmp_path_factory):
    """The workload on the capture runtime, each (allocator, device, conf) run once per module:
    (its result, the runtime's device-call log, cachalot's own device-call log). cachalot's
    runs write theirs (CACHALOT_DEVICE_LOG, the runtime's format) whatever the device; torch's
    have none (None)."""
    done = {}

    def get(allocator, device, conf):
        key = (allocator, device, conf)
        if key not in done:
            tmp = tmp_path_factory.mktemp(f"{allocator}-{device}-{CONFS.index(conf)}")
            env = {**CAPACITY, "PYTORCH_CUDA_ALLOC_CONF": conf}
            own = tmp / "device-calls.csv"
            if allocator == "cachalot":
                env["CACHALOT_DEVICE_LOG"] = str(own)
            args = [HERE / "torch_workload.py", "--allocator", allocator, "--device", device]
            _, log = torch_on_runtime([*args, tmp / "out.json"], env=env)
            ours = own.read_text().splitlines() if own.exists() else None
            done[key] = (json.loads((tmp / "out.json").read_text()), log, ours)
        return done[key]

    return get


def workload(run, tmp_path, allocator, device, conf):
    out = tmp_path / f"{allocator}-{device}-{CONFS.index(conf)}.json"
    env = {**CAPACITY, "PYTORCH_CUDA_ALLOC_CONF": conf}
    args = [HERE / "torch_workload.py", "--allocator", allocator, "--device", device, out]
    got = run(args, env=env)
    log = got[1] if isinstance(got, tuple) else None  # torch_on_runtime's log of device calls
    return json.loads(out.read_text()), log


def assert_same_workload(ours, torchs):
    diff = differences(ours, torchs)
    assert not diff, "\n".join(diff)


@pytest.mark.parametrize("conf", CONFS, ids=["default", "expandable", "async"])
def test_same_stats_ooms_and_recovery_as_torchs_allocator(torch_on_fakegpu, tmp_path, conf):
    ours, _ = workload(torch_on_fakegpu, tmp_path, "cachalot", "sim", conf)
    torchs, _ = workload(torch_on_fakegpu, tmp_path, "torch", "sim", conf)
    assert_same_workload(ours, torchs)


@pytest.mark.parametrize("conf", CONFS, ids=["default", "expandable", "async"])
def test_the_cuda_device_on_the_simulated_driver_is_torchs_allocator(on_runtime, conf):
    """cachalot.torch.use(device="cuda") in real PyTorch on the capture runtime's simulated
    driver: the same statistics after every step, OOMs and recovery as torch's own allocator
    on that driver, and the same device calls, in the same order, with the same sizes (the
    device-call log of the simulated driver)."""
    ours, our_log, _ = on_runtime("cachalot", "cuda", conf)
    torchs, torch_log, _ = on_runtime("torch", "sim", conf)
    assert_same_workload(ours, torchs)
    # The runtime logs cuMemAlloc as cudaMalloc and cuMemAllocFromPoolAsync as
    # cudaMallocAsync (one allocation core); compared: op, size, result, memory in use.
    n, m = ours["calls_before_threads"], torchs["calls_before_threads"]
    assert n > 10, n
    diff = call_differences(our_log, n, torch_log, m, fields=(0, 1, 4, 5))
    assert not diff, diff


@pytest.mark.parametrize("conf", CONFS, ids=["default", "expandable", "async"])
def test_the_cuda_devices_calls_are_its_simulated_devices(on_runtime, conf):
    """What must hold (issue 26): on the same workload in real PyTorch 2.15, cachalot's CUDA
    device on the simulated driver and cachalot's simulated device make the same device calls
    (cachalot's own log, CACHALOT_DEVICE_LOG: the same calls in the same order, with the same
    sizes, addresses, handles, results and memory in use after each; from the threaded step on,
    whose order depends on the interleaving, the same multiset of calls and sizes), with the
    same statistics after every step. And the CUDA device's log is the one the driver itself
    wrote (FAKE_CUDA_LOG), row for row: it logs what the driver was asked."""
    cuda, driver_log, cuda_log = on_runtime("cachalot", "cuda", conf)
    sim, _, sim_log = on_runtime("cachalot", "sim", conf)
    assert_same_workload(cuda, sim)
    n, m = cuda["device_calls_before_threads"], sim["device_calls_before_threads"]
    assert n > 10, n
    diff = call_differences(cuda_log, n, sim_log, m)
    assert not diff, diff
    ops = {row[0] for row in call_rows(cuda_log)}
    assert OPS[conf] <= ops, ops
    if conf == "":
        assert log_against_stats(cuda_log, cuda["steps"][-1]["stats"]) is None
    diff = first_difference(call_rows(cuda_log), call_rows(driver_log))
    assert not diff, f"cachalot's log against the driver's: {diff}"


SCRIPT = textwrap.dedent(
    """
    import json, sys, torch
    import cachalot.torch as ct
    ct.use(device="sim")
    ct.record_memory_history(max_entries=1000)
    x = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")
    y = torch.empty(1000, device="cuda")
    out = {
        "allocated": ct.memory_allocated(), "reserved": ct.memory_reserved(),
        "max_allocated": ct.max_memory_allocated(), "max_reserved": ct.max_memory_reserved(),
        "stats_keys": len(ct.memory_stats()), "stats_sorted": list(ct.memory_stats()) ==
        sorted(ct.memory_stats()), "by_device": ct.memory_stats("cuda:0") == ct.memory_stats(0),
    }
    del x
    ct.reset_peak_memory_stats()
    out["max_after_reset"] = ct.max_memory_allocated()
    out["summary"] = ct.memory_summary()
    snap = ct.snapshot()
    out["segments"] = len(snap["segments"]) == len(ct.memory_snapshot())
    out["history"] = [e["action"] for e in snap["device_traces"][0]]
    ct.dump_snapshot(sys.argv[1])
    try:
        ct.use("expandable_segments:True")
    except RuntimeError as e:
        out["second_use"] = str(e)
    print(json.dumps(out))
    """
)


def test_torchs_memory_tools_read_from_cachalot(torch_on_fakegpu, tmp_path):
    p = torch_on_fakegpu(["-c", SCRIPT, tmp_path / "d.pickle"], env=CAPACITY)
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["allocated"] == (3 << 20) + 4096
    assert out["reserved"] == (20 << 20) + (2 << 20)  # one large and one small segment
    assert out["max_allocated"] == out["allocated"] and out["max_reserved"] == out["reserved"]
    assert out["stats_keys"] == 123 and out["stats_sorted"] and out["by_device"]
    assert out["max_after_reset"] == 4096
    assert "Allocated memory" in out["summary"]
    assert out["segments"]
    assert out["history"][:4] == ["segment_alloc", "alloc", "segment_alloc", "alloc"]
    assert "free_requested" in out["history"] or "free_completed" in out["history"]
    assert pickle.loads((tmp_path / "d.pickle").read_bytes())["segments"]
    assert "already called" in out["second_use"]


def test_use_after_the_first_cuda_allocation_is_a_clear_error(torch_on_fakegpu):
    code = textwrap.dedent(
        """
        import torch, cachalot.torch as ct
        x = torch.empty(10, device="cuda")
        try:
            ct.use()
        except RuntimeError as e:
            print("ERR", e)
        """
    )
    p = torch_on_fakegpu(["-c", code])
    assert "ERR cachalot.torch.use() must be called before the first CUDA allocation" in p.stdout


def test_a_bad_configuration_raises_in_use_with_torchs_message(torch_on_fakegpu):
    code = textwrap.dedent(
        """
        import cachalot, cachalot.torch as ct
        try:
            ct.use("max_split_size_mb:lots", device="sim")
        except cachalot.ConfigError as e:
            print("ERR", e)
        """
    )
    p = torch_on_fakegpu(["-c", code])
    assert "ERR" in p.stdout and "max_split_size_mb" in p.stdout


def test_a_broken_driver_raises_one_clear_error_at_the_first_allocation(torch_on_fakegpu):
    # The fake GPU's libcuda lacks cuDeviceGetName, as in the issue: cachalot's CUDA device
    # says so when opened; every allocation raises (never a tensor at address 0); the reason
    # is printed once.
    from conftest import FAKEGPU_BUILD

    # Read the library's exports without loading it: on its own it cannot be loaded (it needs
    # the fake libcudart's symbols), and loading that here would put it into this process.
    exports = subprocess.run(
        ["nm", "-D", "--defined-only", str(FAKEGPU_BUILD / "libcuda.so.1")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if "cuDeviceGetName" in exports:
        pytest.skip("this fake libcuda exports cuDeviceGetName: no broken driver to test")
    code = textwrap.dedent(
        """
        import torch, cachalot.torch as ct
        ct.use(device="cuda")
        for _ in range(2):
            try:
                x = torch.empty(10, device="cuda")
                print("NO ERROR", x.data_ptr())
            except RuntimeError as e:
                print("ERR", type(e).__name__, str(e).splitlines()[0])
        """
    )
    p = torch_on_fakegpu(["-c", code])
    lines = [line for line in p.stdout.splitlines() if line.startswith(("ERR", "NO ERROR"))]
    assert len(lines) == 2, p.stdout + p.stderr
    for line in lines:
        assert line.startswith("ERR RuntimeError device 0: ") and "cuDeviceGetName" in line
    assert p.stderr.count("does not export") == 1 and "cuDeviceGetName" in p.stderr, p.stderr
    assert "panicked" not in p.stderr
