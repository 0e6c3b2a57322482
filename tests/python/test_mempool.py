"""cachalot as the allocator of a torch.cuda.MemPool, in real PyTorch 2.15 on the fake GPU:
the same MemPool program (use_mem_pool, tensors freed inside and outside it, record_stream,
empty_cache, del pool) with torch's own MemPool() and with cachalot's memory under it gives
the same statistics and segments, and cachalot holds exactly what torch holds from it."""

import json
import re
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).parent
MiB = 1 << 20


def run(torch_on_fakegpu, tmp_path, pool, *extra, env=None):
    out = tmp_path / f"{pool}{''.join(extra)}.json"
    torch_on_fakegpu(
        [HERE / "mempool_workload.py", "--pool", pool, *extra, out],
        env={"FAKE_CUDA_CAPACITY": "80G", "CACHALOT_SIM_CAPACITY": "80G", **(env or {})},
    )
    return json.loads(out.read_text())


def assert_same_as_torchs(ours, torchs):
    assert [s["step"] for s in ours["steps"]] == [s["step"] for s in torchs["steps"]]
    for a, b in zip(ours["steps"], torchs["steps"]):
        assert set(a["stats"]) == set(b["stats"]), a["step"]
        diff = {k: (a["stats"][k], v) for k, v in b["stats"].items() if a["stats"][k] != v}
        assert not diff, (a["step"], diff)
        for key in ("reserved", "allocated", "segments", "pool_held"):
            assert a[key] == b[key], (a["step"], key)


@pytest.mark.parametrize("conf", ["", "max_split_size_mb:20,roundup_power2_divisions:4"])
def test_a_mempool_program_gives_torchs_statistics_with_cachalot_under_the_pool(
    torch_on_fakegpu, tmp_path, conf
):
    env = {"PYTORCH_CUDA_ALLOC_CONF": conf}
    ours = run(torch_on_fakegpu, tmp_path, "cachalot", env=env)
    torchs = run(torch_on_fakegpu, tmp_path, "torch", env=env)
    assert len(torchs["steps"]) == 10
    assert len(torchs["steps"][0]["stats"]) > 100
    assert_same_as_torchs(ours, torchs)
    # cachalot holds exactly what torch holds from it, after every step: nothing cached twice.
    for s in ours["steps"]:
        c = s["cachalot"]
        assert (c["bytes"], c["segments"]) == (s["pool_held"]["bytes"], s["pool_held"]["segments"])
        assert c["allocated_bytes"] == c["bytes"], s["step"]
    end = ours["steps"][-1]["cachalot"]
    assert end["bytes"] == 0 and end["device_allocs"] == end["device_frees"]
    if conf:
        return
    # The workload does what it says: torch kept the pool's segments through the first
    # empty_cache calls, kept one for the tensor alive at `del pool`, then freed them all.
    held = {s["step"]: s["pool_held"] for s in torchs["steps"]}
    assert held["allocated in the pool"] == {"bytes": 52 * MiB, "segments": 3}
    assert held["record_stream"] == {"bytes": 64 * MiB, "segments": 4}
    assert held["empty_cache"] == {"bytes": 64 * MiB, "segments": 4}
    assert held["del pool, empty_cache"] == {"bytes": 2 * MiB, "segments": 1}
    assert held["empty_cache after del pool"] == {"bytes": 0, "segments": 0}
    assert end["device_allocs"] == 4


def test_with_expandable_segments_torch_gives_an_allocators_pool_ordinary_segments(
    torch_on_fakegpu, tmp_path
):
    # torch 2.15 uses expandable segments only where the pool has no allocator of its own:
    # its MemPool() grows expandable segments, a MemPool(allocator) gets ordinary ones, so
    # here the two cannot give the same statistics. cachalot still holds what torch holds.
    env = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    ours = run(torch_on_fakegpu, tmp_path, "cachalot", env=env)
    torchs = run(torch_on_fakegpu, tmp_path, "torch", env=env)

    def pool_segments(step):
        return [s["fields"] for s in step["segments"] if s["fields"]["segment_pool_id"] != [0, 0]]

    first_ours, first_torchs = pool_segments(ours["steps"][0]), pool_segments(torchs["steps"][0])
    assert first_torchs and all(s["is_expandable"] for s in first_torchs)
    assert first_ours and not any(s["is_expandable"] for s in first_ours)
    for s in ours["steps"]:
        assert s["cachalot"]["bytes"] == s["pool_held"]["bytes"], s["step"]
    assert ours["steps"][-1]["cachalot"]["bytes"] == 0


def test_a_pool_segment_that_does_not_fit_is_torchs_out_of_memory_error(torch_on_fakegpu, tmp_path):
    # The pool's memory is 64 MiB: the fake GPU's for torch's own pool, cachalot's simulated
    # GPU's for cachalot's (the fake GPU keeps its 64 MiB for the rest).
    small = {"FAKE_CUDA_CAPACITY": "64M", "CACHALOT_SIM_CAPACITY": "64M"}
    ours = run(torch_on_fakegpu, tmp_path, "cachalot", "--oom", env=small)
    torchs = run(torch_on_fakegpu, tmp_path, "torch", "--oom", env=small)
    assert torchs["oom"]["type"] == ours["oom"]["type"] == "OutOfMemoryError"
    assert ours["oom"]["recovered"] and torchs["oom"]["recovered"]
    assert ours["oom"]["message"].startswith("CUDA out of memory. Tried to allocate 40.00 MiB.")
    # torch's message reads the device's free memory from CUDA, and the fake GPU does not
    # see what cachalot's simulated GPU handed out (one real GPU would): that number is the
    # only difference in what both say. torch then adds a sentence of its own for a pool whose
    # allocator returned NULL (how torch 2.15 expects such an allocator to fail).
    free = re.compile(r"of which [\d.]+ [KMG]?i?B is free")
    ours_text, torchs_text = (free.sub("<free>", m["oom"]["message"]) for m in (ours, torchs))
    assert "<free>" in torchs_text
    assert ours_text.startswith(torchs_text + " "), (ours_text, torchs_text)
    assert ours_text[len(torchs_text) :].startswith(
        " The custom allocator backing this MemPool returned nullptr."
    )
    assert_same_as_torchs(ours, torchs)
    for s in ours["steps"]:
        assert s["cachalot"]["bytes"] == s["pool_held"]["bytes"], s["step"]
    assert ours["steps"][-1]["cachalot"]["bytes"] == 0


REFUSALS = textwrap.dedent(
    """
    import torch, cachalot.torch as ct
    ct.use(device="sim")
    segment_allocator = torch.cuda.memory.CUDAPluggableAllocator(
        ct._native.__file__, "cachalot_segment_malloc", "cachalot_segment_free"
    )
    for name, call in [
        ("MemPool()", lambda: torch.cuda.MemPool()),
        ("MemPool(allocator)", lambda: torch.cuda.MemPool(segment_allocator.allocator())),
        ("memory_stats", torch.cuda.memory_stats),
        ("memory_reserved", torch.cuda.memory_reserved),
        ("memory_snapshot", torch.cuda.memory_snapshot),
    ]:
        try:
            call()
            print(name, "| no error")
        except RuntimeError as e:
            print(name, "|", str(e).splitlines()[0])
    """
)


def test_torch_refuses_mempools_and_its_statistics_under_a_pluggable_process_allocator(
    torch_on_fakegpu,
):
    # What docs/pools.md says torch 2.15 refuses when cachalot is the process's allocator.
    p = torch_on_fakegpu(["-c", REFUSALS])
    said = dict(line.split(" | ", 1) for line in p.stdout.splitlines() if " | " in line)
    pools = "pluggable does not yet support createOrIncrefPool."
    stats = "CUDAPluggableAllocator does not yet support getDeviceStats."
    assert said["MemPool()"].startswith(pools) and said["MemPool(allocator)"].startswith(pools)
    assert said["memory_stats"].startswith(stats) and said["memory_reserved"].startswith(stats)
    assert said["memory_snapshot"].startswith(
        "CUDAPluggableAllocator does not yet support snapshot."
    )


def test_mempool_allocator_refuses_to_mix_with_use(torch_on_fakegpu):
    code = textwrap.dedent(
        """
        import torch, cachalot.torch as ct
        ct.use(device="sim")
        try:
            ct.mempool_allocator(device="sim")
        except RuntimeError as e:
            print("ERR", e)
        """
    )
    p = torch_on_fakegpu(["-c", code])
    assert "ERR cachalot.torch.use() made cachalot the process's allocator" in p.stdout
    assert "createOrIncrefPool" in p.stdout


@pytest.mark.parametrize("device", ["gpu", None])
def test_mempool_allocator_checks_its_device(torch_on_fakegpu, device):
    code = textwrap.dedent(
        f"""
        import cachalot.torch as ct
        try:
            ct.mempool_allocator(device={device!r})
        except ValueError as e:
            print("ERR", e)
        """
    )
    p = torch_on_fakegpu(["-c", code])
    assert f"ERR device={device!r}: expected one of cuda, sim" in p.stdout
