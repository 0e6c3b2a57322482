"""cachalot's graph-pool hooks in real PyTorch 2.15 (on the fake GPU), against torch's own
allocator on the same program: graph_pools_workload.py drives torch's private-pool calls
(stream and thread pools as torch.compile's cudagraph trees open them, nested pools,
CUDAGraph.capture_begin and torch.cuda.graph, which the fake GPU refuses at
cudaStreamBeginCapture, after torch has begun routing to the graph's pool)."""

import json
import os
import re
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from conftest import FAKEGPU, FAKEGPU_BUILD, REPO, TORCH_PYTHON, package_env

HERE = Path(__file__).parent
CAPACITY = {"CACHALOT_SIM_CAPACITY": "80G", "FAKE_CUDA_CAPACITY": "80G"}
PER_POOL = "reserved_bytes_by_private_pools."


def workload(torch_on_fakegpu, tmp_path, allocator):
    out = tmp_path / f"{allocator}.json"
    torch_on_fakegpu(
        [HERE / "graph_pools_workload.py", "--allocator", allocator, out], env=CAPACITY
    )
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def both(torch_on_fakegpu, tmp_path_factory):
    """The workload under cachalot's allocator with the hooks, then under torch's own."""
    tmp = tmp_path_factory.mktemp("graph_pools")
    return workload(torch_on_fakegpu, tmp, "cachalot"), workload(torch_on_fakegpu, tmp, "torch")


def without_pool_ids(segments):
    return sorted(s[1:] for s in segments)


def assert_same_stats(a, b):
    """Every memory_stats key and value of step `a` equal those of step `b`: torch's 123,
    and its reserved_bytes_by_private_pools.<id>.* group of each pool that held memory."""
    assert len([k for k in b["stats"] if not k.startswith(PER_POOL)]) == 123, b["step"]
    assert set(a["stats"]) == set(b["stats"]), (a["step"], set(a["stats"]) ^ set(b["stats"]))
    diff = {k: (a["stats"][k], v) for k, v in b["stats"].items() if a["stats"][k] != v}
    assert not diff, (a["step"], diff)


def test_pool_routing_gives_torchs_statistics_and_segments(both):
    ours, torchs = both
    assert [s["step"] for s in ours["steps"]] == [s["step"] for s in torchs["steps"]]
    for a, b in zip(ours["steps"], torchs["steps"]):
        assert_same_stats(a, b)
        assert without_pool_ids(a["segments"]) == without_pool_ids(b["segments"]), a["step"]
    # torch's per-pool keys: one group for each pool that held a segment, kept after it goes.
    last = {k.split(".")[1] for k in ours["steps"][-1]["stats"] if k.startswith(PER_POOL)}
    assert last == {"0_1", "0_2", "0_3", "0_4"}
    # Routing is what makes these equal: torch's own allocator put these segments in pools.
    pooled = {tuple(s[0]) for st in torchs["steps"] for s in st["segments"]} - {(0, 0)}
    assert pooled == {(0, 1), (0, 2), (0, 3), (0, 4)}
    by_step = {s["step"]: s for s in torchs["steps"]}
    kept = by_step["freed, empty_cache: the referenced pool keeps its segments"]["segments"]
    assert [s[0] for s in kept].count([0, 1]) == 2


def test_capture_fails_at_the_driver_after_the_pool_calls(both):
    ours, torchs = both
    refused = "AcceleratorError: CUDA error: operation not supported (fake_cudart)"
    expected = {"capture_begin": refused, "torch.cuda.graph": refused}
    assert ours["errors"] == expected
    assert torchs["errors"] == expected


def test_torchs_pool_calls_reach_cachalot_in_order(both):
    ours, _ = both
    counts = {s["step"]: s["use_counts"] for s in ours["steps"]}
    opened = {s["step"]: s["open_filters"] for s in ours["steps"]}
    # begin: +1 (the pool is made); end: routing stops, the count stays; release: -1;
    # empty_cache at 0 frees the segments and forgets the pool (-1: no such pool).
    assert [
        counts[s]["stream"]
        for s in (
            "stream pool: side stream in the pool, default stream not",
            "ended: the side stream back in the default pool",
            "freed, empty_cache: the referenced pool keeps its segments",
            "released: the segments stay until empty_cache",
            "empty_cache after release: the pool's segments go",
        )
    ] == [1, 1, 1, 0, -1]
    nested = "nested: side stream in the inner pool, default stream in the outer"
    assert (counts[nested]["all"], counts[nested]["inner"], opened[nested]) == (1, 1, 2)
    # capture_begin began routing to the graph's pool (1, 0) before the driver refused; the
    # graph's reset() ends and releases it when the graph is deleted.
    failed = "capture_begin failed at the driver: the graph pool is open"
    deleted = "graph deleted: its pool ended and released"
    assert (counts[failed]["graph"], opened[failed]) == (1, 1)
    assert (counts[deleted]["graph"], opened[deleted]) == (0, 0)
    assert counts["graph pool emptied"]["graph"] == -1
    shared = "torch.cuda.graph(pool=handle) failed at the driver"
    assert (counts[shared]["shared"], opened[shared]) == (1, 1)
    assert counts["shared-pool graph deleted and emptied"]["shared"] == -1
    assert all(s["open_filters"] == 0 for s in ours["steps"][-1:])


def test_snapshot_segments_carry_torchs_pool_ids(both):
    ours, torchs = both
    for a, b in zip(ours["steps"], torchs["steps"]):
        assert sorted(a["segments"]) == sorted(b["segments"]), a["step"]


MISUSE = textwrap.dedent(
    """
    import torch, cachalot.torch as ct
    ct.use(device="sim")
    ct.enable_graph_pools()
    ct.enable_graph_pools()  # again: nothing changes
    x = torch.empty(10, device="cuda")
    for name, call in [
        ("end", lambda: torch._C._cuda_endAllocateToPool(0, (0, 77))),
        ("release", lambda: torch._C._cuda_releasePool(0, (0, 77))),
    ]:
        try:
            call()
            print(name, "no error")
        except RuntimeError as e:
            print(name, "ERR", str(e).splitlines()[0])
    """
)


def test_misuse_raises_torchs_message(torch_on_fakegpu):
    p = torch_on_fakegpu(["-c", MISUSE], env=CAPACITY)
    native = torch_on_fakegpu(["-c", MISUSE.replace("ct.", "# ct.")], env=CAPACITY)
    assert "end ERR endAllocatePool: not currently recording to mempool_id" in p.stdout
    assert "release ERR" in p.stdout
    # torch's own allocator: the same end message; its release of an unknown pool asserts.
    assert "end ERR endAllocatePool: not currently recording to mempool_id" in native.stdout
    assert "release ERR" in native.stdout


NO_COMPILER = textwrap.dedent(
    """
    import torch, cachalot.torch as ct
    from cachalot.graph_pools import GraphPoolsError
    try:
        ct.enable_graph_pools()
    except RuntimeError as e:
        print("BEFORE_USE", e)
    ct.use(device="sim")
    try:
        ct.enable_graph_pools()
    except GraphPoolsError as e:
        print("ERR", e)
    try:
        ct.enable_graph_pools(allocator=object())
    except GraphPoolsError as e:
        print("NOT_PLUGGABLE", e)
    """
)


def test_clear_errors_without_a_compiler_or_a_pluggable_allocator(torch_on_fakegpu, tmp_path):
    env = {**CAPACITY, "CXX": "no-such-compiler", "CACHALOT_CACHE": str(tmp_path)}
    p = torch_on_fakegpu(["-c", NO_COMPILER], env=env)
    assert "BEFORE_USE enable_graph_pools(): call cachalot.torch.use() first" in p.stdout
    assert "needs a C++20 compiler: 'no-such-compiler' was not found on PATH" in p.stdout
    assert "NOT_PLUGGABLE object has no set_begin_allocate_to_pool" in p.stdout
    assert not list(tmp_path.rglob("*.so"))


@pytest.fixture(scope="module")
def captured(torch_on_fakegpu, tmp_path_factory):
    """graph_capture_workload.py under both allocators, with stream capture emulated by
    capture_emulation.c preloaded ahead of the fake GPU's runtime."""
    cc = shutil.which(os.environ.get("CC", "gcc"))
    if cc is None:
        pytest.skip("no C compiler (gcc; set CC) to build capture_emulation.c")
    tmp = tmp_path_factory.mktemp("graph_capture")
    emulation = tmp / "libcapture_emulation.so"
    src = HERE / "capture_emulation.c"
    subprocess.run([cc, "-O2", "-fPIC", "-shared", "-o", emulation, src, "-lpthread"], check=True)
    # The fake GPU's libraries, in run.sh's order; the emulation comes first so that its
    # capture functions are the ones torch binds.
    run_sh = (FAKEGPU / "run.sh").read_text()
    libs = re.search(r"^LIBS=\((.*)\)$", run_sh, re.MULTILINE).group(1).split()
    preload = ":".join([str(emulation), *(str(FAKEGPU_BUILD / lib) for lib in libs)])
    out = {}
    for allocator in ("cachalot", "torch"):
        path = tmp / f"{allocator}.json"
        env = package_env({**CAPACITY, "LD_PRELOAD": preload, "CUDA_VISIBLE_DEVICES": "0"})
        script = HERE / "graph_capture_workload.py"
        p = subprocess.run(
            [str(TORCH_PYTHON), str(script), "--allocator", allocator, str(path)],
            env=env,
            check=False,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert p.returncode == 0, f"{allocator}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
        out[allocator] = json.loads(path.read_text())
    return out["cachalot"], out["torch"]


def test_real_capture_gives_torchs_statistics_and_segments(captured):
    ours, torchs = captured
    assert ours["pool"] == torchs["pool"] == [1, 0]
    assert [s["step"] for s in ours["steps"]] == [s["step"] for s in torchs["steps"]]
    for a, b in zip(ours["steps"], torchs["steps"]):
        assert_same_stats(a, b)
        assert without_pool_ids(a["segments"]) == without_pool_ids(b["segments"]), a["step"]
    # torch's allocator put the capture's allocations in a segment of the graph's pool, apart
    # from the static input's segment (which had room for them): cachalot did the same.
    by_step = {s["step"]: s for s in torchs["steps"]}
    assert [s[0] for s in by_step["captured"]["segments"]] == [[0, 0], [1, 0]]
    assert [s[0] for s in by_step["empty_cache: the pool's segments go"]["segments"]] == [[0, 0]]


def test_real_capture_pool_calls_reach_cachalot(captured):
    ours, _ = captured
    counts = [s["graph_pool_use_count"] for s in ours["steps"]]
    # Before capture: no pool. Capture: begin (+1), end at capture_end. The second graph
    # begins it again (+1). Each graph's deletion releases it (-1); at 0, empty_cache frees
    # its segments and forgets it.
    assert counts == [-1, 1, 1, 2, 2, 1, 0, -1]


C_LIBRARY = textwrap.dedent(
    """
    import ctypes, json, os, sys, torch
    import cachalot.torch as ct
    from cachalot import _native
    from cachalot.graph_pools import GraphPoolsError
    path = sys.argv[1]
    os.environ["CACHALOT_DEVICE"] = "sim"
    alloc = torch.cuda.memory.CUDAPluggableAllocator(path, "cachalot_malloc", "cachalot_free")
    torch.cuda.memory.change_current_allocator(alloc)
    ct.enable_graph_pools(alloc, library=path)
    c_lib, module = ctypes.CDLL(path), ctypes.CDLL(_native.__file__)
    for lib in (c_lib, module):
        lib.cachalot_pool_use_count.argtypes = [ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64]
    pool = torch.cuda.graph_pool_handle()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch._C._cuda_beginAllocateCurrentStreamToPool(0, pool)
        a = torch.empty(5 << 20, dtype=torch.uint8, device="cuda")
        torch._C._cuda_endAllocateToPool(0, pool)
        b = torch.empty(5 << 20, dtype=torch.uint8, device="cuda")
    c_lib.cachalot_memory_stats_json.restype = ctypes.c_char_p
    stats = json.loads(c_lib.cachalot_memory_stats_json(0))
    print("LIBRARY", c_lib.cachalot_pool_use_count(0, *pool), stats["segment.all.current"])
    print("MODULE", module.cachalot_pool_use_count(0, *pool))
    try:
        ct.enable_graph_pools(alloc)
    except GraphPoolsError as e:
        print("SECOND", e)
    """
)


def test_hooks_for_a_pluggable_allocator_on_the_c_library(torch_on_fakegpu):
    # scripts/test.sh builds with the ci profile; a plain `cargo build --release` also works.
    built = [REPO / "target" / p / "libcachalot_capi.so" for p in ("ci", "release")]
    path = max((p for p in built if p.exists()), key=lambda p: p.stat().st_mtime, default=built[0])
    if not path.exists():
        pytest.skip(f"{path} not built (cargo build --release -p cachalot-capi)")
    p = torch_on_fakegpu(["-c", C_LIBRARY, path], env=CAPACITY)
    # The pool is the C library's: referenced once, its segment apart from b's.
    assert "LIBRARY 1 2" in p.stdout
    assert "MODULE -1" in p.stdout  # the package's own allocator never saw it
    assert "SECOND the graph-pool hooks are already bound to another cachalot library" in p.stdout
